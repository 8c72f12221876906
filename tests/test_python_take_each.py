# SPDX-License-Identifier: Apache-2.0
"""Pool.take_each, the batch take (kvp_take_each): one block per owner in one
call, the same blocks and state as a loop of Pool.take, buffers in and out,
hints, refusals that change nothing, the takes that stand after a failure,
and evictions delivered after the call.  Run by scripts/run-tests with
PYTHONPATH=build/python (see docs/PYTHON.md)."""
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kvpool  # noqa: E402


def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")


def test_same_blocks_and_state_as_a_loop_of_take():
    owners = [1, 2, None, 1, 3, 2]
    a = kvpool.Pool(block_size=4, num_blocks=32)
    b = kvpool.Pool(block_size=4, num_blocks=32)
    for _ in range(3):  # several steps: hints and owner records carry over
        got = a.take_each(owners)
        want = [b.take(o) for o in owners]
        assert got == want
    assert a.fingerprint() == b.fingerprint()
    assert a.owner_blocks(1) == b.owner_blocks(1) and len(a.owner_blocks(1)) == 6
    assert a.block_info(got[2])["owner"] is None  # None is an anonymous reference
    a.check()


def test_buffers_in_and_out_and_hints():
    p = kvpool.Pool(block_size=4, num_blocks=16)
    own = np.array([7, 8, 9], dtype=np.uint64)
    out = np.zeros(4, dtype=np.uint32)
    hints = np.full(3, kvpool.HINT_NONE, dtype=np.uint32)
    assert p.take_each(own, out=out, hints=hints) == 3
    assert sorted(out[:3].tolist()) == sorted(set(out[:3].tolist()))
    assert all(p.owner_blocks(int(o)) == [int(b)] for o, b in zip(own, out[:3]))
    assert (hints != kvpool.HINT_NONE).all()  # the library stored a hint per owner
    stale = hints.copy()
    p.free_owner(8)
    assert p.take_each(own, out, hints) == 3  # a stale hint is safe
    assert len(p.owner_blocks(8)) == 1 and len(p.owner_blocks(7)) == 2
    hints[:] = 12345  # garbage hints are safe too
    assert p.take_each(np.array([7], dtype=np.int64), out, hints) == 1
    assert len(p.owner_blocks(7)) == 3
    assert stale.dtype == np.uint32
    p.check()


def test_empty_owners():
    p = kvpool.Pool(block_size=4, num_blocks=4)
    fp = p.fingerprint()
    assert p.take_each([]) == []
    assert p.take_each(np.zeros(0, dtype=np.uint64), out=np.zeros(0, dtype=np.uint32)) == 0
    assert p.fingerprint() == fp


@pytest.mark.parametrize("call, exc", [
    (lambda p: p.take_each([1, -1]), kvpool.InvalidArgumentError),
    (lambda p: p.take_each([1, 2 ** 64]), kvpool.InvalidArgumentError),
    (lambda p: p.take_each([1, "x"]), TypeError),
    (lambda p: p.take_each(5), TypeError),
    (lambda p: p.take_each(np.array([1, -2], dtype=np.int64)), kvpool.InvalidArgumentError),
    (lambda p: p.take_each(np.array([1, 2], dtype=np.uint32)), TypeError),
    (lambda p: p.take_each(np.arange(1, 5, dtype=np.uint64)[::2]), TypeError),
    (lambda p: p.take_each([1, 2], out=np.zeros(1, dtype=np.uint32)), kvpool.SpaceError),
    (lambda p: p.take_each([1, 2], out=np.zeros(2, dtype=np.uint64)), TypeError),
    (lambda p: p.take_each([1, 2], hints=np.zeros(1, dtype=np.uint32)),
     kvpool.InvalidArgumentError),
    (lambda p: p.take_each([1], stream=9), kvpool.InvalidArgumentError),
    (lambda p: p.take_each([1], bogus=1), TypeError),
    (lambda p: p.take_each(), TypeError),
])
def test_refused_calls_change_nothing(call, exc):
    p = kvpool.Pool(block_size=4, num_blocks=8)
    p.take_each([1, 2])
    fp = p.fingerprint()
    with pytest.raises(exc):
        call(p)
    assert p.fingerprint() == fp
    p.check()


def test_closed_pool_refuses():
    p = kvpool.Pool(block_size=4, num_blocks=8)
    p.close()
    with pytest.raises(kvpool.InvalidArgumentError, match="closed"):
        p.take_each([1])


def test_failure_keeps_the_takes_before_it_and_names_them():
    p = kvpool.Pool(block_size=4, num_blocks=5)
    p.take_each([1, 2])
    with pytest.raises(kvpool.ExhaustedError) as ei:
        p.take_each([3, 4, 5, 6])  # three free: the fourth take fails
    e = ei.value
    assert e.taken == 3 and len(e.blocks) == 3
    assert [p.owner_blocks(o) for o in (3, 4, 5)] == [[b] for b in e.blocks]
    assert p.free_count() == 0
    with pytest.raises(kvpool.NotFoundError):
        p.owner_blocks(6)  # the failed take made no owner record
    p.free_owner(3)
    p.check()
    # with `out`, the same: the blocks taken are also in out[:taken]
    out = np.zeros(3, dtype=np.uint32)
    with pytest.raises(kvpool.ExhaustedError) as ei:
        p.take_each([7, 8], out=out)
    assert ei.value.taken == 1 and ei.value.blocks == [int(out[0])]


def test_evictions_delivered_after_the_call():
    seen = []
    holder = []

    def cb(h, b):
        # runs after the library call returned: the pool answers queries
        seen.append((h, b, holder[0].block_info(b)["state"]))

    p = kvpool.Pool(block_size=4, num_blocks=3, on_evict=cb)
    holder.append(p)
    ids = p.alloc_blocks(3)
    for i, b in enumerate(ids):
        p.publish(b, H(i))
    p.free(ids)  # all cached, the first given is the first evicted
    got = p.take_each([1, 2])
    assert got == ids[:2]
    assert seen == [(H(0), ids[0], "in_use"), (H(1), ids[1], "in_use")]


def test_callback_closing_the_pool_inside_take_each():
    holder = []

    def cb(h, b):
        holder[0].close()

    p = kvpool.Pool(block_size=4, num_blocks=2, on_evict=cb)
    holder.append(p)
    ids = p.alloc_blocks(2)
    for i, b in enumerate(ids):
        p.publish(b, H(i))
    p.free(ids)
    assert p.take_each([1, 2]) == ids  # the call completes and returns its result
    assert p.closed
