# SPDX-License-Identifier: Apache-2.0
"""vllm-mlx's PagedCacheManager scenarios, run against the kvpool drop-in
imported the way vllm-mlx's code imports the original.

``kvpool.compat.vllm_mlx.install()`` registers the drop-in as
``vllm_mlx.paged_cache`` when vllm-mlx is absent.  Each scenario restates in
our words what one of vllm-mlx's unit tests (tests/test_paged_cache.py,
classes TestCacheBlock to TestThreadSafety) checks; docs/PYTHON.md maps
them and lists the ones not run.
"""
import os
import sys
import threading

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

from kvpool.compat import vllm_mlx  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def adopted():
    vllm_mlx.install()
    yield
    vllm_mlx.uninstall()


def pc():
    from vllm_mlx import paged_cache
    return paged_cache


def Mgr(**kw):  # noqa: N802  (stands for the original's class)
    kw.setdefault("block_size", 64)
    return pc().PagedCacheManager(**kw)


def test_adoption_imports_the_drop_in():
    assert pc().PagedCacheManager is vllm_mlx.PagedCacheManager
    assert pc().KVCacheBlock is pc().CacheBlock is vllm_mlx.CacheBlock


def test_a_block_record_constructs_like_the_dataclass():
    CacheBlock = pc().CacheBlock
    b = CacheBlock(block_id=0)
    assert (b.block_id, b.token_count, b.ref_count, b.hash_value, b.cache_data) == (0, 0, 0, None, None)
    assert b.block_hash is None and b.is_null is False and b.prev_free_block is None
    full = CacheBlock(block_id=1, token_count=64)
    assert full.is_full(64) and not full.is_full(128)
    full.token_count = 32
    assert not full.is_full(64)
    shared = CacheBlock(block_id=2, ref_count=1)
    assert not shared.is_shared()
    shared.ref_count = 2
    assert shared.is_shared()
    positional = CacheBlock(3, 4, b"h", None, None, True, None, 5, "x", 1.5)
    assert (positional.ref_count, positional.block_hash, positional.is_null,
            positional.token_count, positional.hash_value, positional.last_access) == \
        (4, b"h", True, 5, "x", 1.5)


def test_touch_moves_last_access_forward():
    b = pc().CacheBlock(block_id=0, last_access=0.0)
    b.touch()
    assert b.last_access > 0.0
    m = Mgr(max_blocks=4)
    blk = m.allocate_block()
    blk.last_access = 1.0
    blk.touch()
    assert blk.last_access > 1.0


def test_block_table_record_and_copy():
    BlockTable = pc().BlockTable
    t = BlockTable(request_id="req-1")
    assert (t.request_id, t.block_ids, t.num_tokens, len(t)) == ("req-1", [], 0, 0)
    t = BlockTable(request_id="req-1", block_ids=[0, 1, 2], num_tokens=192)
    c = t.copy("req-2")
    c.block_ids.append(3)
    assert (c.request_id, c.num_tokens, t.block_ids) == ("req-2", 192, [0, 1, 2])


def test_a_new_manager_holds_only_the_null_block():
    m = Mgr(max_blocks=100)
    assert (m.block_size, m.max_blocks, m.free_blocks, len(m.allocated_blocks)) == (64, 100, 99, 1)
    s = m.get_stats()
    assert (s.total_blocks, s.free_blocks, s.allocated_blocks) == (100, 99, 1)


def test_allocating_and_running_out():
    m = Mgr(max_blocks=10)
    b = m.allocate_block()
    assert b.block_id in m.allocated_blocks and m.free_blocks == 8
    assert (m.get_stats().allocated_blocks, m.get_stats().free_blocks) == (2, 8)
    small = Mgr(max_blocks=5)
    assert all(small.allocate_block() is not None for _ in range(4))
    assert small.allocate_block() is None and small.free_blocks == 0


def test_freeing_gives_the_block_back():
    m = Mgr(max_blocks=10)
    before = m.free_blocks
    b = m.allocate_block()
    assert m.free_block(b.block_id) is True
    assert b.block_id not in m.allocated_blocks and m.free_blocks == before
    assert m.free_block(b.block_id) is False          # unknown now: refused, nothing changes
    assert m.free_block(0) is False and m.free_blocks == before


def test_free_block_batch_is_a_method_and_frees_them_all():
    m = Mgr(max_blocks=10)
    blocks = [m.allocate_block(), m.allocate_block()]
    assert m.free_blocks == 7
    m.free_block_batch(blocks)
    assert m.free_blocks == 9


def test_references_count_up_and_down():
    m = Mgr(max_blocks=10)
    b = m.allocate_block()
    assert b.ref_count == 1
    assert m.increment_ref(b.block_id) is True and b.ref_count == 2
    assert m.free_block(b.block_id) is False and b.ref_count == 1
    assert b.block_id in m.allocated_blocks
    assert m.free_block(b.block_id) is True and b.block_id not in m.allocated_blocks
    assert m.increment_ref(b.block_id) is False        # a free block gains no reference
    assert b.ref_count == 0


def test_blocks_for_a_token_count_and_an_all_or_nothing_failure():
    m = Mgr(max_blocks=100)
    assert [len(m.allocate_blocks_for_tokens(n)) for n in (100, 64, 65)] == [2, 1, 2]
    small = Mgr(max_blocks=3)
    with pytest.raises(ValueError):
        small.allocate_blocks_for_tokens(300)
    assert small.free_blocks == 2


def test_legacy_hash_and_lookup():
    M = pc().PagedCacheManager
    h1, h2, h3 = (M.compute_block_hash(t) for t in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 2, 3, 4, 6]))
    assert h1 == h2 != h3 and len(h1) == 16
    m = Mgr(max_blocks=10)
    toks = list(range(64))
    assert m.find_cached_block(toks) is None
    b = m.allocate_block()
    m.register_block_hash(b, toks)
    assert m.find_cached_block(toks).block_id == b.block_id


def test_block_tables_create_get_delete():
    m = Mgr(max_blocks=10)
    t = m.create_block_table("req-1")
    assert t.request_id == "req-1" and "req-1" in m.request_tables
    assert m.get_block_table("req-1") is t and m.get_block_table("req-999") is None
    m.add_block_to_table(t, m.allocate_block(), 64)
    m.add_block_to_table(t, m.allocate_block(), 64)
    assert len(m.allocated_blocks) == 3
    m.delete_block_table("req-1")
    assert "req-1" not in m.request_tables and len(m.allocated_blocks) == 1 and m.free_blocks == 9


def test_shared_prefix_by_legacy_hash():
    m = Mgr(max_blocks=10)
    toks = list(range(200))
    assert m.find_shared_prefix(toks) == ([], toks)
    b = m.allocate_block()
    b.token_count = 64
    m.register_block_hash(b, list(range(64)))
    shared, rest = m.find_shared_prefix(list(range(128)))
    assert shared == [b.block_id] and rest == list(range(64, 128))


def test_fork_shares_every_block():
    m = Mgr(max_blocks=10)
    src = m.create_block_table("req-1")
    b1, b2 = m.allocate_block(), m.allocate_block()
    m.add_block_to_table(src, b1, 64)
    m.add_block_to_table(src, b2, 64)
    f = m.fork_block_table(src, "req-2")
    assert (f.request_id, f.block_ids, f.num_tokens) == ("req-2", src.block_ids, src.num_tokens)
    assert b1.ref_count == b2.ref_count == 2


def test_copy_on_write_only_when_shared():
    m = Mgr(max_blocks=10)
    t = m.create_block_table("req-1")
    b = m.allocate_block()
    m.add_block_to_table(t, b, 64)
    blocks, copied = m.get_blocks_for_generation(t)
    assert (len(blocks), copied, blocks[0].block_id) == (1, False, b.block_id)
    f = m.fork_block_table(t, "req-2")
    blocks, copied = m.get_blocks_for_generation(f)
    assert copied and blocks[0].block_id != b.block_id and b.ref_count == 1
    assert m.get_stats().cow_copies == 1


def test_evicting_goes_over_free_blocks_in_lru_order():
    m = Mgr(max_blocks=5)
    blocks = [m.allocate_block() for _ in range(4)]
    assert m.free_blocks == 0
    m.free_block(blocks[0].block_id)
    m.free_block(blocks[1].block_id)
    assert m.evict_lru_blocks(2) == 2 and m.free_blocks == 2 and len(m.allocated_blocks) == 3


def test_memory_pressure_already_satisfied():
    m = Mgr(max_blocks=5)
    held = [m.allocate_block() for _ in range(3)]
    m.free_block(held[0].block_id)
    m.free_block(held[1].block_id)
    assert m.handle_memory_pressure(3) is True and m.free_blocks >= 3
    assert m.handle_memory_pressure(5) is False


def test_memory_usage_report():
    m = Mgr(max_blocks=100)
    for _ in range(25):
        m.allocate_block().token_count = 64
    u = m.get_memory_usage()
    assert (u["block_size"], u["max_blocks"], u["allocated_blocks"], u["free_blocks"]) == (64, 100, 26, 74)
    assert u["utilization"] == 0.26 and u["total_tokens_cached"] == 0


def test_reset_stats_zeroes_the_counters():
    m = Mgr(max_blocks=10)
    m.find_cached_block([1, 2, 3])
    assert m.stats.cache_misses == 1
    m.reset_stats()
    s = m.stats
    assert (s.cache_hits, s.cache_misses, s.cow_copies) == (0, 0, 0)


def test_clear_returns_to_the_new_state():
    m = Mgr(max_blocks=10)
    t = m.create_block_table("req-1")
    m.add_block_to_table(t, m.allocate_block(), 64)
    m.register_block_hash(m.allocate_block(), [1])
    m.clear()
    assert (m.free_blocks, len(m.allocated_blocks), len(m.request_tables), len(m.hash_to_block)) == \
        (9, 1, 0, 0)


def test_threads_allocate_distinct_blocks():
    m = Mgr(max_blocks=101)
    got, errors = [], []

    def run():
        try:
            for _ in range(10):
                b = m.allocate_block()
                if b:
                    got.append(b.block_id)
        except Exception as e:  # noqa: BLE001  (collected and asserted empty)
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 50 and len(set(got)) == 50


def test_prefix_chain_cache_and_eviction_clear_the_block_hash():
    m = Mgr(block_size=4, max_blocks=4)
    toks = list(range(8))
    blocks = m.get_new_blocks(2)
    m.cache_full_blocks(blocks, toks, 0, 2)
    assert blocks[1].block_hash == pc().compute_block_hash(blocks[0].block_hash, toks[4:])
    got, n = m.get_computed_blocks(toks)
    assert got == blocks and n == 8
    m.free_block_batch(blocks)
    m.get_new_blocks(3)                          # the last free blocks: cached content reused
    assert blocks[0].block_hash is None and m.get_computed_blocks(toks) == ([], 0)


def test_uninstall_removes_the_registered_module():
    vllm_mlx.uninstall()
    try:
        assert "vllm_mlx.paged_cache" not in sys.modules
    finally:
        vllm_mlx.install()


def test_a_refused_increment_leaves_the_free_queue_order_alone():
    m = Mgr(block_size=4, max_blocks=4)
    toks = list(range(8))
    a, b = m.get_new_blocks(2)
    m.cache_full_blocks([a, b], toks, 0, 2)
    m.free_block(a.block_id)
    m.free_block(b.block_id)
    assert m.increment_ref(a.block_id) is False and a.ref_count == 0
    # a was freed first, so it is still the first cached block handed out again
    got = m.get_new_blocks(2)
    assert got[1] is a


def test_deleting_tables_frees_a_shared_block_with_its_last_table():
    m = Mgr(max_blocks=6)
    src = m.create_block_table("a")
    for b in m.get_new_blocks(2):
        m.add_block_to_table(src, b, 64)
    m.fork_block_table(src, "b")
    m.create_block_table("c").block_ids.extend([0, 5])    # the null block and a free block
    m.delete_block_table("a")
    assert m.free_blocks == 3 and all(m.blocks[i].ref_count == 1 for i in src.block_ids)
    m.delete_block_table("b")
    m.delete_block_table("c")                             # block 5 is refused, nothing else moves
    assert m.free_blocks == 5 and len(m.allocated_blocks) == 1


def test_native_block_hash_matches_the_python_expressions():
    import hashlib
    import random
    from kvpool import _kvpool
    f = _kvpool.mlx_block_hash

    def ref(parent, toks, legacy):
        h = hashlib.sha256((parent if parent else b"vllm-mlx-root")
                           + str(tuple(toks)).encode()).digest()
        return (h, hashlib.sha256(bytes(t & 0xFF for t in toks)).hexdigest()[:16]) if legacy else h

    rnd = random.Random(1)
    for _ in range(500):
        n = rnd.randrange(0, 40)
        toks = [rnd.choice([rnd.randrange(-10**18, 10**18), rnd.randrange(300), -1, 0,
                            2**63 - 1, -2**63]) for _ in range(n)]
        lo, hi = rnd.randrange(n + 2), rnd.randrange(n + 3)
        parent = rnd.choice([None, b"", b"abc" * 11, bytearray(b"p")])
        for legacy in (False, True):
            assert f(parent, toks, lo, hi, legacy) == ref(parent, toks[lo:hi], legacy)
    # Not formatted natively: the caller hashes in Python.
    assert f(None, [2**64], 0, 1, True) is None and f(None, [True], 0, 1, False) is None
    assert f(None, (1, 2), 0, 2, False) is None
    for bad in ((None, [1], -1, 1, False), (None, [1], 0, -1, False)):
        with pytest.raises(ValueError):
            f(*bad)
    for bad in ((None, [1], "0", 1, False), (5, [1], 0, 1, False), (None, [1], 0, 1)):
        with pytest.raises(TypeError):
            f(*bad)
    # The drop-in's functions give the original's bytes on every path.
    assert vllm_mlx.compute_block_hash(b"p", [1, 2]) == ref(b"p", [1, 2], False)
    assert vllm_mlx.compute_block_hash(b"p", (1, 2)) == ref(b"p", (1, 2), False)
    assert vllm_mlx.PagedCacheManager.compute_block_hash([300, -1]) == ref(None, [300, -1], True)[1]


def test_managed_blocks_are_canonical_identity_compared_and_collectable():
    import gc
    import weakref
    m = Mgr(block_size=2, max_blocks=4)
    b = m.allocate_block()
    assert b is m.blocks[b.block_id] and isinstance(b, pc().CacheBlock)
    assert m.null_block.is_null and bool(m.null_block) and not b.is_null
    assert b != b.block_id and not (b.block_id == b) and len({b, m.blocks[b.block_id]}) == 1
    b.token_count, b.cache_data = 2, ("k", "v")
    assert (b.token_count, b.cache_data, b.ref_count, b.block_hash) == (2, ("k", "v"), 1, None)
    m.cache_full_blocks([b], [5, 6], 0, 1)
    h = pc().compute_block_hash(None, [5, 6])
    assert b.block_hash == h and m.get_cached_block(h) is b and b.hash_value
    for name in ("ref_count", "block_hash", "is_null", "prev_free_block", "next_free_block"):
        with pytest.raises(AttributeError):
            setattr(b, name, None)
    with pytest.raises(AttributeError):
        b.other = 1
    assert (b.ref_count, b.block_hash) == (1, h)
    assert repr(b) == f"CacheBlock(id={b.block_id}, ref=1, tokens=2, prev=None, next=None)"
    b.reset_hash()  # leaves the prefix cache: its data and legacy hash go with it
    assert (b.block_hash, b.hash_value, b.cache_data, m.get_cached_block(h)) == (None,) * 4
    rec = pc().CacheBlock(block_id=b.block_id)
    assert rec is not b and rec != b and rec.ref_count == 0
    assert b.token_count == 2
    gone = weakref.ref(m)
    del m, b
    gc.collect()
    assert gone() is None  # the cycle through the blocks' class and the pool is collectable


def test_adding_blocks_to_a_table_counts_tokens_and_fill_levels():
    m = Mgr(block_size=16, max_blocks=8)
    t = m.create_block_table("r")
    a, b = m.allocate_block(), m.allocate_block()
    m.add_block_to_table(t, a, 16)
    m.add_block_to_table(t, b, 20)  # more than a block: its count as given, its fill clamped
    assert t.block_ids == [a.block_id, b.block_id] and t.num_tokens == 36
    assert (a.token_count, b.token_count) == (16, 20)
    assert m.get_stats().total_tokens_cached == 32
    m.add_block_to_table(t, m.null_block, 5)  # the null block keeps no fill
    assert t.block_ids[-1] == 0 and t.num_tokens == 41 and m.get_stats().total_tokens_cached == 32
    m.free_block(b.block_id)
    m.add_block_to_table(t, b, 3)  # a free block: appended, as the original, its fill not kept
    assert t.block_ids[-1] == b.block_id and b.token_count == 3 and t.num_tokens == 44
    rec = pc().CacheBlock(block_id=5)  # not the manager's: its own field
    m.add_block_to_table(t, rec, 7)
    assert rec.token_count == 7 and t.block_ids[-1] == 5 and t.num_tokens == 51
    with pytest.raises(OverflowError):  # refused before any change
        m.add_block_to_table(t, a, 2 ** 70)
    assert t.num_tokens == 51 and len(t.block_ids) == 5 and a.token_count == 16
    m.delete_block_table("r")
    assert m.free_blocks == 7


def test_allocate_block_stamps_the_block_evicts_cached_content_and_returns_none_when_out():
    import time
    m = Mgr(block_size=4, max_blocks=3)
    t0 = time.time()
    a = m.allocate_block()
    assert a is m.blocks[a.block_id] and a.ref_count == 1 and t0 <= a.last_access <= time.time()
    toks = [1, 2, 3, 4]
    m.cache_full_blocks([a], toks, 0, 1)
    assert m.get_computed_blocks(toks + [5])[0] == [a]
    b = m.allocate_block()
    assert m.allocate_block() is None  # two blocks besides the null block
    m.free_block(a.block_id)
    assert m.allocate_block() is a and a.block_hash is None  # cached content evicted
    assert m.get_computed_blocks(toks + [5])[0] == []
    assert m.free_blocks == 0 and b.ref_count == 1
