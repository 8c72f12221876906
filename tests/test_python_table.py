# SPDX-License-Identifier: Apache-2.0
"""The Pool methods run from one table (one library call each): every one
refuses a closed pool by name, including when converting its own arguments
ran Python code that closed it, and keeps CPython's arity messages.  Run by
scripts/run-tests with PYTHONPATH=build/python (see docs/PYTHON.md)."""
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402

H = bytes(31) + b"\x01"

# name -> arguments, the first of which is converted through __index__
# (the hash-first methods take a hash; their second argument is the int).
CALLS = {
    "owner_register": "I", "owner_release": "I", "free_owner": "I",
    "free_count": "I", "peek_next": "I", "set_fill": "II", "set_priority": "II", "block_info": "I",
    "block_ptr": "I", "take_id": "I", "claim": "I", "publish": "IH", "unpublish": "I",
    "lookup": "HI", "evict": "I", "ensure_free": "I", "extend": "I", "shrink": "I",
}


class Closer:
    """An int whose conversion closes the pool it is passed to."""

    def __init__(self, pool):
        self.pool = pool

    def __index__(self):
        self.pool.close()
        return 0


@pytest.mark.parametrize("name", sorted(CALLS))
def test_pool_closed_by_an_argument_conversion(name):
    p = kvpool.Pool(block_size=4, num_blocks=4)
    args = [Closer(p) if k == "I" else H for k in CALLS[name]]
    with pytest.raises(kvpool.InvalidArgumentError, match="the pool is closed"):
        getattr(p, name)(*args)
    assert p.closed


@pytest.mark.parametrize("name", ["clear_index", "reset_prefix_cache", "stats", "stats_reset",
                                  "stats_snapshot", "fingerprint"] + sorted(CALLS))
def test_closed_pool_refused_by_name(name):
    p = kvpool.Pool(block_size=4, num_blocks=4)
    p.close()
    args = [1 if k == "I" else H for k in CALLS.get(name, "")]
    with pytest.raises(kvpool.InvalidArgumentError, match="the pool is closed"):
        getattr(p, name)(*args)


def test_arity_messages():
    p = kvpool.Pool(block_size=4, num_blocks=4)
    fp = p.fingerprint()
    cases = [
        (lambda: p.stats(1), "Pool.stats() takes no arguments (1 given)"),
        (lambda: p.stats(x=1), "Pool.stats() takes no keyword arguments"),
        (lambda: p.owner_register(owner=1), "Pool.owner_register() takes no keyword arguments"),
        (lambda: p.set_fill(1), "set_fill(id, fill)"),
        (lambda: p.unpublish(), "unpublish(id)"),
        (lambda: p.free_count(1, 2), "free_count() takes at most 1 arguments (2 given)"),
        (lambda: p.take_id(), "take_id() missing required argument 'id'"),
        (lambda: p.evict(1, n=2), "evict() got multiple values for argument 'n'"),
        (lambda: p.lookup(H, bogus=0), "lookup() got an unexpected keyword argument 'bogus'"),
    ]
    for call, msg in cases:
        with pytest.raises(TypeError) as ei:
            call()
        assert str(ei.value) == msg
    assert p.fingerprint() == fp


def test_keywords_and_defaults():
    p = kvpool.Pool(block_size=4, num_blocks=8, separate_kv=True)
    # stream defaults to K on a separate-K/V pool, for the counting calls
    assert p.free_count() == p.free_count(stream=kvpool.STREAM_K) == 4
    a = p.alloc_blocks(1, stream=kvpool.STREAM_K)[0]
    p.publish(a, H)
    assert p.lookup(H, stream=kvpool.STREAM_K) == a
    assert p.lookup(hash=H, stream=kvpool.STREAM_K) == a
    p.free(a)
    assert p.evict(n=1) == 1
    with pytest.raises(kvpool.NotFoundError):
        p.lookup(H, stream=kvpool.STREAM_K)
    p.take_id(id=a, owner=None)
    assert p.block_info(a)["state"] == "in_use" and p.block_info(a)["owner"] is None
