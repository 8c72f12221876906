# SPDX-License-Identifier: Apache-2.0
"""ATOM's BlockPool scenarios, run against the kvpool drop-in imported the way
ATOM's code imports the original.

``kvpool.compat.atom.install()`` registers the drop-in as
``atom.model_engine.block_pool`` (and ``Block`` as
``atom.model_engine.kv_block``) when ATOM is absent.  Each scenario restates
in our words what one of ATOM's unit tests (tests/test_block_pool.py) checks,
plus the eviction counters and raw-unit reservations of the current
original; docs/PYTHON.md maps them.
"""
import os
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

from kvpool.compat import atom  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def adopted():
    atom.install()
    yield
    atom.uninstall()


def Pool(*a, **kw):  # noqa: N802  (stands for the original's class)
    from atom.model_engine.block_pool import BlockPool
    return BlockPool(*a, **kw)


def cached(pool, block_id, h):
    """Take block_id, publish it under h, give it back: free but still findable."""
    pool.allocate(block_id)
    pool.publish(block_id, h, [h])
    pool.free(block_id)


def test_adoption_imports_the_drop_in():
    from atom.model_engine.block_pool import BlockPool, BlockRetirement
    from atom.model_engine.kv_block import Block
    assert BlockPool is atom.BlockPool and BlockRetirement is atom.BlockRetirement
    assert Block is atom.Block
    rec = Block(3)
    assert (rec.block_id, rec.ref_count, rec.hash, rec.token_ids) == (3, 0, -1, [])
    rec.update(9, [1])
    rec.reset()
    assert (rec.ref_count, rec.hash, rec.token_ids) == (1, -1, [])


def test_empty_blocks_are_spent_before_cached_ones():
    pool = Pool(num_blocks=4)
    cached(pool, pool.pop(), 100)
    cached(pool, pool.pop(), 200)
    assert [pool.pop(), pool.pop()] == [2, 3]
    assert (pool.lookup(100), pool.lookup(200)) == (0, 1)


def test_cached_blocks_leave_in_the_order_they_were_freed():
    pool = Pool(num_blocks=3)
    for h in (100, 200, 300):
        cached(pool, pool.pop(), h)
    assert [pool.pop() for _ in range(3)] == [0, 1, 2]


def test_a_claim_and_release_moves_a_block_to_the_back():
    pool = Pool(num_blocks=3)
    for h in (100, 200, 300):
        cached(pool, pool.pop(), h)
    pool.claim(pool.lookup(100))
    pool.free(0)
    assert [pool.pop() for _ in range(3)] == [1, 2, 0]


def test_empty_blocks_go_lowest_id_first_whatever_the_release_order():
    pool = Pool(num_blocks=4)
    for b in (3, 1, 2, 0):
        pool.allocate(b)
    for b in (3, 1, 2, 0):
        pool.free(b)
    assert [pool.pop() for _ in range(4)] == [0, 1, 2, 3]


def test_retiring_an_empty_top_block():
    pool = Pool(num_blocks=3)
    r = pool.retire_top()
    assert (r.retired, r.moved_to, pool.num_blocks, pool.num_free) == (2, -1, 2, 2)
    assert 2 not in {pool.pop(), pool.pop()}


def test_retiring_a_cached_top_block_evicts_and_counts_it():
    evicted = []
    pool = Pool(num_blocks=3, on_evict=evicted.append)
    cached(pool, 2, 100)
    r = pool.retire_top()
    assert (r.retired, r.moved_to, evicted, pool.lookup(100)) == (2, -1, [100], -1)
    assert (pool.blocks_retired, pool.blocks_evicted) == (1, 0)


def test_retiring_a_held_top_block_moves_everything_about_it():
    pool = Pool(num_blocks=3)
    pool.allocate(2)
    pool.publish(2, 100, [7, 8])
    pool.claim(2)
    r = pool.retire_top()
    assert r.retired == 2 and 0 <= r.moved_to < 2 and pool.num_blocks == 2
    moved = pool.block(r.moved_to)
    assert (moved.hash, moved.token_ids, moved.ref_count) == (100, [7, 8], 2)
    assert pool.lookup(100) == r.moved_to
    assert pool.is_used(r.moved_to) and not pool.is_used(2)


def test_moving_into_a_cached_block_costs_its_content():
    evicted = []
    pool = Pool(num_blocks=3, on_evict=evicted.append)
    cached(pool, 0, 100)
    cached(pool, 1, 200)
    pool.allocate(2)
    pool.publish(2, 300, [3])
    r = pool.retire_top()
    assert r.moved_to in (0, 1)
    assert evicted == [100 if r.moved_to == 0 else 200] and pool.lookup(300) == r.moved_to
    assert pool.blocks_retired == 1


def test_retire_refuses_when_nothing_is_free_or_nothing_exists():
    pool = Pool(num_blocks=2)
    pool.allocate(0)
    pool.allocate(1)
    assert pool.retire_top() is None and pool.num_blocks == 2
    assert Pool(num_blocks=0).retire_top() is None


def test_extend_stops_at_max_blocks():
    pool = Pool(num_blocks=2, max_blocks=4)
    assert [pool.extend(1), pool.num_blocks, pool.extend(5), pool.num_blocks, pool.extend(1)] == \
        [1, 3, 1, 4, 0]
    assert Pool(num_blocks=2).extend(1) == 0
    with pytest.raises(ValueError, match="outside"):
        Pool(num_blocks=5, max_blocks=4)


def test_a_block_retired_and_grown_back_is_empty():
    pool = Pool(num_blocks=3, max_blocks=3)
    for b, h in ((0, 200), (1, 300), (2, 100)):
        cached(pool, b, h)
    pool.retire_top()
    pool.extend(1)
    assert pool.num_blocks == 3 and pool.block(2).hash == -1 and pool.block(2).ref_count == 0
    assert pool.pop() == 2


def test_raw_units_take_any_free_ids_in_order_with_pieces():
    pool = Pool(num_blocks=8)
    for _ in range(8):
        pool.allocate(pool.pop())
    for b in (0, 2, 5, 7):
        pool.free(b)
    units = pool.reserve_units(4, owner=("checkpoint", 1))
    assert units == [0, 2, 5, 7]
    assert all(pool.is_reserved_unit(u) and pool.is_used(u) for u in units)
    assert [pool.reserved_unit_owner(u)[1] for u in units] == [0, 1, 2, 3]
    with pytest.raises(AssertionError):
        pool.free(0)                                   # units go back through release_units


def test_a_short_reservation_takes_nothing():
    pool = Pool(num_blocks=2)
    pool.allocate(pool.pop())
    assert pool.reserve_units(2, owner=("checkpoint", 1)) is None and pool.num_free == 1
    with pytest.raises(ValueError):
        pool.reserve_units(-1, owner="x")
    with pytest.raises(ValueError):
        pool.reserve_units(1, owner=None)
    assert pool.num_free == 1


def test_only_the_owner_releases_its_whole_reservation():
    pool = Pool(num_blocks=3)
    units = pool.reserve_units(2, owner=("checkpoint", 1))
    with pytest.raises(AssertionError, match="belongs"):
        pool.release_units(units, owner=("checkpoint", 2))
    with pytest.raises(ValueError):
        pool.release_units(units + units[:1], owner=("checkpoint", 1))
    assert pool.num_free == 1
    pool.release_units(units, owner=("checkpoint", 1))
    assert pool.num_free == 3 and not pool.is_reserved_unit(units[0])


def test_a_reserved_top_block_is_not_retired():
    pool = Pool(num_blocks=3)
    pool.allocate(0)
    pool.allocate(1)
    assert pool.reserve_units(1, owner=("checkpoint", 1)) == [2]
    assert pool.retire_top() is None and pool.num_blocks == 3


def test_eviction_counters_and_stats():
    evicted = []
    pool = Pool(num_blocks=2, on_evict=evicted.append)
    cached(pool, 0, 100)
    s = pool.eviction_stats()
    assert (s["blocks_free_reusable"], s["blocks_indexed"], pool.num_reusable_free) == (1, 1, 1)
    pool.allocate(pool.pop())       # vacant block 1 first
    assert pool.blocks_evicted == 0
    pool.allocate(pool.pop())       # then the cached one: its content is spent
    assert (pool.blocks_evicted, evicted) == (1, [100])
    s = pool.eviction_stats()
    assert (s["blocks_used"], s["blocks_free"], s["blocks_total"]) == (2, 0, 2)


def test_republishing_a_block_replaces_its_hash_without_an_eviction():
    evicted = []
    pool = Pool(num_blocks=2, on_evict=evicted.append)
    pool.allocate(0)
    pool.publish(0, 5, [1])
    pool.publish(0, 6, [2])
    assert (pool.lookup(5), pool.lookup(6), pool.block(0).token_ids) == (-1, 0, [2])
    assert evicted == [] and pool.blocks_evicted == 0


def test_clear_index_keeps_live_blocks_content_but_not_their_reachability():
    pool = Pool(num_blocks=3)
    cached(pool, 0, 10)
    pool.allocate(1)
    pool.publish(1, 11, [11])
    pool.clear_index()
    assert pool.num_indexed == 0 and pool.lookup(11) == -1
    assert pool.block(0).hash == -1 and pool.block(1).hash == 11


@pytest.mark.parametrize("policy", ["lru", "slru"])
def test_cache_policy_slru_keeps_a_reused_block_through_a_scan(policy):
    pool = Pool(8, cache_policy=policy, protected_ratio=0.5)
    assert pool.cache_policy == policy and pool.protected_ratio == 0.5
    hot = pool.pop()
    pool.allocate(hot)
    pool.publish(hot, 1000, [1000])
    pool.free(hot)
    assert pool.lookup(1000) == hot
    pool.claim(hot)           # reused: protected under slru when freed
    pool.free(hot)
    for h in range(20):       # each used once
        b = pool.pop()
        pool.allocate(b)
        pool.publish(b, h, [h])
        pool.free(b)
    assert (pool.lookup(1000) == hot) == (policy == "slru")


@pytest.mark.parametrize("kw", [{"cache_policy": "arc"}, {"protected_ratio": 1.5},
                                {"protected_ratio": -0.1}])
def test_bad_cache_policy_is_refused(kw):
    with pytest.raises(ValueError):
        Pool(4, **kw)


def test_superblocks_are_refused():
    with pytest.raises(NotImplementedError):
        Pool(num_blocks=4, superblocks=object())


def test_uninstall_removes_the_registered_modules():
    atom.uninstall()
    try:
        assert "atom.model_engine.block_pool" not in sys.modules
    finally:
        atom.install()


def test_an_on_evict_exception_propagates_with_the_hand_out_done():
    def boom(h):
        raise ValueError(h)

    pool = Pool(num_blocks=1, on_evict=boom)
    cached(pool, 0, 7)
    with pytest.raises(ValueError):
        pool.pop()
    assert pool.num_free == 0 and pool.lookup(7) == -1 and pool.block(0).hash == -1
    pool.allocate(0)                    # the popped block completes its hand-out
    assert pool.block(0).ref_count == 1 and pool.blocks_evicted == 1


def test_claiming_a_popped_block_holds_one_reference():
    pool = Pool(num_blocks=2)
    b = pool.pop()
    assert pool.claim(b).ref_count == 1 and pool.is_used(b)
    pool.free(b)
    assert pool.num_free == 2


def test_pool_blocks_are_canonical_read_only_and_hold_no_cycle():
    import gc
    import weakref
    pool = Pool(num_blocks=3)
    b0 = pool.allocate(pool.pop())
    assert b0 is pool.block(0) is pool.blocks[0] and isinstance(b0, atom.Block)
    assert b0.block_id == 0 and b0 != 0 and not (0 == b0) and bool(b0)  # identity, as the original's
    pool.publish(0, 42, [7, 8])
    assert (b0.ref_count, b0.hash, b0.token_ids) == (1, 42, [7, 8])
    assert repr(b0) == "Block(block_id=0, ref_count=1, hash=42)"
    for name, value in (("hash", 1), ("token_ids", []), ("ref_count", 3)):
        with pytest.raises(AttributeError):
            setattr(b0, name, value)
    with pytest.raises(AttributeError):
        b0.update(1, [1])
    with pytest.raises(AttributeError):
        b0.reset()
    with pytest.raises(AttributeError):
        b0.other = 1
    assert (b0.ref_count, b0.hash, b0.token_ids, pool.lookup(42)) == (1, 42, [7, 8], 0)
    assert pool.block(2).ref_count == 0 and pool.block(2).hash == -1
    rec = atom.Block(5)
    assert rec.block_id == 5 and type(rec) is not type(b0) and len({rec, atom.Block(5)}) == 2
    rec.hash = 3
    assert rec.hash == 3 and pool.block(2).hash == -1
    gone = weakref.ref(pool)
    gc.disable()
    try:
        del pool
        assert gone() is None  # freed by its reference count: no cycle through the blocks
    finally:
        gc.enable()
    assert b0.hash == 42  # a block kept by a caller still reads what its pool left
