# SPDX-License-Identifier: Apache-2.0
"""Eviction policies and retention priorities from Python: Pool(policy=...),
Pool.set_priority, block_info()['priority'], Sequence.raise_priority; each
refusal with its exception and the pool unchanged.  Run by scripts/run-tests
(see docs/PYTHON.md)."""
import os
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402


def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")


def serve(p, keys, prio=None):
    """Claim the cached prefix, allocate and publish the rest, free it all
    last block first; returns the blocks hit."""
    ids = []
    for k in keys:
        b = p.lookup(H(k), 0, None)
        if b is None:
            break
        p.claim(b)
        ids.append(b)
    hit = len(ids)
    if hit < len(keys):
        new = p.alloc((len(keys) - hit) * p.block_size)
        for b, k in zip(new, keys[hit:]):
            p.publish(b, H(k))
        ids += new
    if prio is not None:
        p.set_priority(ids[0], prio)
    p.free(ids[::-1])
    return hit


def test_policy_names_and_refusals():
    assert (kvpool.POLICY_LRU, kvpool.POLICY_SLRU) == (0, 1)
    assert (kvpool.PRIORITY_LOW, kvpool.PRIORITY_NORMAL, kvpool.PRIORITY_HIGH,
            kvpool.PRIORITY_MAX) == (0, 1, 2, 3)
    p = kvpool.Pool(num_blocks=4, policy=kvpool.POLICY_SLRU)
    assert p.block_info(p.take())["priority"] == kvpool.PRIORITY_NORMAL
    assert kvpool.Pool(num_blocks=4, policy="lru")
    assert kvpool.Pool(num_blocks=4, policy=1)
    with pytest.raises(kvpool.InvalidArgumentError, match="'lru', 'slru' or 'lfu'"):
        kvpool.Pool(num_blocks=4, policy="arc")
    with pytest.raises(kvpool.InvalidArgumentError):
        kvpool.Pool(num_blocks=4, policy="slru", reuse="fifo")
    with pytest.raises(kvpool.InvalidArgumentError):
        kvpool.Pool(num_blocks=4, policy=7)
    assert kvpool.Pool(num_blocks=4, policy="slru", protected_percent=100)
    with pytest.raises(kvpool.InvalidArgumentError):
        kvpool.Pool(num_blocks=4, policy="slru", protected_percent=101)


@pytest.mark.parametrize("policy", ["lru", "slru"])
def test_priority_order(policy):
    p = kvpool.Pool(block_size=1, num_blocks=3, policy=policy)
    serve(p, [1], prio=2)  # high: evicted last
    serve(p, [2])
    serve(p, [3], prio=0)  # low: first
    assert p.block_info(p.lookup(H(1)))["priority"] == 2
    assert p.evict(1) == 1
    assert p.lookup(H(3), 0, None) is None
    assert p.evict(1) == 1
    assert p.lookup(H(2), 0, None) is None and p.lookup(H(1), 0, None) is not None
    p.check()


def test_slru_keeps_what_is_used_twice():
    kept = {}
    for policy in ("lru", "slru"):
        p = kvpool.Pool(block_size=1, num_blocks=8, policy=policy)
        for k in range(100, 105):
            serve(p, [k])
        serve(p, [7])
        assert serve(p, [7]) == 1
        for k in range(20):
            serve(p, [k])
        kept[policy] = p.lookup(H(7), 0, None) is not None
        p.check()
    assert kept == {"lru": False, "slru": True}


def test_set_priority_refusals_change_nothing():
    p = kvpool.Pool(block_size=1, num_blocks=4, null_block=True)
    serve(p, [5])
    b = p.lookup(H(5))
    fp = p.fingerprint()
    cases = [
        (kvpool.InvalidArgumentError, lambda: p.set_priority(b, 4)),
        (kvpool.InvalidArgumentError, lambda: p.set_priority(0, 2)),  # the null block
        (kvpool.NotFoundError, lambda: p.set_priority(3, 2)),  # vacant
        (kvpool.RangeError, lambda: p.set_priority(9, 2)),
        (kvpool.InvalidArgumentError, lambda: p.set_priority(b, -1)),
        (TypeError, lambda: p.set_priority(b)),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()
        assert p.fingerprint() == fp, exc
    fifo = kvpool.Pool(block_size=1, num_blocks=2, reuse="fifo")
    t = fifo.take()
    with pytest.raises(kvpool.InvalidArgumentError):
        fifo.set_priority(t, 2)


def test_sequence_raise_priority():
    p = kvpool.Pool(block_size=2, num_blocks=8, hash_alg="xxh3")
    s = p.sequence(1)
    s.admit(list(range(7)))
    ids = s.blocks()
    s.raise_priority(2, 3)
    s.raise_priority(10, 2)
    assert [p.block_info(b)["priority"] for b in ids] == [3, 3, 2, 2]
    fp = p.fingerprint()
    with pytest.raises(kvpool.InvalidArgumentError):
        s.raise_priority(1, 4)
    with pytest.raises(kvpool.InvalidArgumentError, match="n_blocks out of range"):
        s.raise_priority(-1, 2)
    assert p.fingerprint() == fp
    s.destroy()
    with pytest.raises(kvpool.InvalidArgumentError):
        s.raise_priority(1, 2)
    p.close()
    with pytest.raises(kvpool.InvalidArgumentError, match="the pool is closed"):
        p.set_priority(0, 2)


def test_names_from_the_library():
    """The names Pool accepts are the library's tables, in value order, and
    every status code but success has its exception class."""
    assert kvpool.POLICY_NAMES == ("lru", "slru", "lfu")
    assert kvpool.REUSE_NAMES == ("lifo", "lowest", "fifo")
    assert kvpool.HASH_ALG_NAMES[:2] == ("sha256", "xxh3")
    for value, name in enumerate(kvpool.POLICY_NAMES):
        assert getattr(kvpool, "POLICY_" + name.upper()) == value
        assert kvpool.Pool(num_blocks=4, policy=name, reuse="lowest")
    classes = {c.status: c for c in vars(kvpool).values()
               if isinstance(c, type) and issubclass(c, kvpool.Error) and c is not kvpool.Error}
    assert sorted(classes) == list(range(1, 12))
    for status, cls in classes.items():
        assert cls.__doc__.startswith("KVP_E")
        assert kvpool.strerror(status) != kvpool.strerror(99)
    with pytest.raises(kvpool.InvalidArgumentError, match="'lifo', 'lowest' or 'fifo'"):
        kvpool.Pool(num_blocks=4, reuse="LIFO")
