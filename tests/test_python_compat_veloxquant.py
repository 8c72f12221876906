# SPDX-License-Identifier: Apache-2.0
"""VeloxQuant-MLX's BlockPoolAllocator scenarios, run against the kvpool drop-in
imported the way VeloxQuant users import the original.

``kvpool.compat.veloxquant.install()`` registers the drop-in as
``veloxquant_mlx.memory.block_pool`` (and its exceptions as
``veloxquant_mlx.core.exceptions``) when VeloxQuant-MLX is absent; every
scenario below then imports from those paths.  Each scenario restates in
our words what one of the original's unit tests
(tests/non_metal/test_block_pool.py) checks; docs/PYTHON.md maps them.
"""
import importlib.util
import os
import sys
import threading

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

from kvpool.compat import veloxquant  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def adopted():
    veloxquant.install()
    yield
    veloxquant.uninstall()


def vq():
    from veloxquant_mlx.core import exceptions
    from veloxquant_mlx.memory import block_pool
    return block_pool, exceptions


def shared(bs=4, n=16, **kw):
    bp, _ = vq()
    return bp.BlockPoolAllocator(bp.PoolConfig(block_size=bs, n_blocks=n, separate_kv=False, **kw))


def test_adoption_imports_the_drop_in_and_its_exceptions():
    bp, ex = vq()
    assert bp.BlockPoolAllocator is veloxquant.BlockPoolAllocator
    assert ex.BlockPoolExhaustedError is veloxquant.BlockPoolExhaustedError
    assert bp.DEFAULT_HISTORY_SIZE == 256


@pytest.mark.parametrize("kw", [{"block_size": 0}, {"n_blocks": 0}, {"n_blocks": 8, "max_blocks": 4}])
def test_config_refuses_impossible_sizes(kw):
    bp, _ = vq()
    with pytest.raises(ValueError):
        bp.PoolConfig(**kw)


def test_allocation_covers_the_tokens_and_fills_blocks_in_order():
    pool = shared()
    blocks = pool.allocate(stream="kv", n_tokens=10, owner=1)
    assert [b.n_used for b in blocks] == [4, 4, 2]
    assert [b.n_used for b in pool.allocate(stream="kv", n_tokens=8, owner=2)] == [4, 4]


def test_freed_blocks_come_back_empty_and_ownerless():
    pool = shared(n=4)
    blocks = pool.allocate("kv", 16, owner=1)
    assert pool.n_free("kv") == 0
    pool.free(blocks)
    assert pool.n_free("kv") == 4
    assert all(b.owner is None and b.n_used == 0 for b in blocks)


def test_free_all_touches_only_that_owner():
    pool = shared(n=8)
    pool.allocate("kv", 4, owner=1)
    pool.allocate("kv", 4, owner=2)
    pool.free_all(owner=1)
    assert pool.n_free("kv") == 7 and pool.blocks_for(1) == [] and len(pool.blocks_for(2)) == 1


def test_freeing_twice_changes_nothing_the_second_time():
    pool = shared(n=4)
    blocks = pool.allocate("kv", 4, owner=1)
    pool.free(blocks)
    before = pool.stats
    pool.free(blocks)
    assert pool.n_free("kv") == 4 and pool.stats.n_frees == before.n_frees == 1


def test_exhaustion_raises_counts_and_hands_out_nothing():
    _, ex = vq()
    pool = shared(n=2)
    with pytest.raises(ex.BlockPoolExhaustedError):
        pool.allocate("kv", 100, owner=1)
    assert pool.stats.n_exhausted == 1 and pool.n_free("kv") == 2 and pool.blocks_for(1) == []


def test_zero_tokens_is_refused():
    pool = shared(n=4)
    with pytest.raises(ValueError):
        pool.allocate("kv", 0, owner=1)
    assert pool.n_free("kv") == 4


def test_separate_streams_split_the_blocks_and_keep_apart():
    bp, _ = vq()
    pool = bp.BlockPoolAllocator(bp.PoolConfig(block_size=4, n_blocks=8, separate_kv=True))
    assert (pool.n_free("k"), pool.n_free("v")) == (4, 4)
    pool.allocate("k", 16, owner=1)
    assert (pool.n_free("k"), pool.n_free("v")) == (0, 4)
    with pytest.raises(ValueError):
        pool.allocate("kv", 1, owner=2)
    odd = bp.BlockPoolAllocator(bp.PoolConfig(block_size=4, n_blocks=5, separate_kv=True))
    assert (odd.n_free("k"), odd.n_free("v"), odd.stats.n_blocks) == (2, 2, 4)


def test_a_shared_pool_ignores_the_stream_name():
    pool = shared(n=8)
    assert pool.allocate("k", 4, owner=1)[0].stream == "kv"
    assert pool.allocate("v", 4, owner=1)[0].stream == "kv"
    assert pool.n_free("anything") == 6


def test_reuse_hands_back_the_same_blocks_and_counts_them():
    pool = shared(n=4)
    first = {b.block_id for b in pool.allocate("kv", 16, owner=1)}
    assert pool.stats.n_reused == 0
    pool.free_all(1)
    second = pool.allocate("kv", 16, owner=2)
    assert {b.block_id for b in second} == first and pool.stats.n_reused == 4


def test_counters_are_in_blocks_and_peak_is_a_high_water_mark():
    pool = shared(n=8)
    pool.allocate("kv", 16, owner=1)
    assert pool.stats.n_allocations == 4
    pool.free_all(1)
    assert pool.stats.n_frees == 4 and pool.stats.blocks_in_use() == 0
    pool.allocate("kv", 4, owner=2)
    assert pool.stats.peak_blocks_in_use == 4 and pool.stats.blocks_in_use() == 1


def test_fragmentation_counts_the_partial_block_only():
    pool = shared(n=4)
    pool.allocate("kv", 8, owner=1)
    assert pool.stats.fragmentation() == 0.0
    pool.allocate("kv", 1, owner=2)
    assert pool.stats.fragmentation() == pytest.approx(1 / 4)


def test_format_tags_and_reprs():
    bp, _ = vq()
    pool = shared(n=8)
    assert pool.allocate("kv", 4, owner=1, format="fp16")[0].format == "fp16"
    assert pool.allocate("kv", 4, owner=2, format="int2")[0].format == "int2"
    assert "BlockPoolAllocator" in repr(pool) and "AllocationStats" in repr(bp.AllocationStats(n_blocks=4))
    b = bp.Block(block_id=0)
    assert (b.owner, b.n_used, b.format, b.stream) == (None, 0, "fp16", "kv")


def test_growth_covers_a_shortfall_without_counting_exhaustion():
    pool = shared(n=2, grow_on_exhaustion=True)
    assert len(pool.allocate("kv", 16, owner=1)) == 4
    s = pool.stats
    assert (s.n_grown, s.n_blocks, s.n_exhausted) == (2, 4, 0)


def test_growth_goes_to_the_cap_then_raises_handing_out_nothing():
    _, ex = vq()
    pool = shared(n=2, grow_on_exhaustion=True, max_blocks=3)
    with pytest.raises(ex.BlockPoolExhaustedError):
        pool.allocate("kv", 16, owner=1)
    s = pool.stats
    assert (s.n_grown, s.n_exhausted, s.n_blocks) == (1, 1, 3) and pool.blocks_for(1) == []


def test_growth_grows_only_the_short_stream():
    bp, _ = vq()
    pool = bp.BlockPoolAllocator(bp.PoolConfig(block_size=4, n_blocks=8, separate_kv=True,
                                               grow_on_exhaustion=True))
    pool.allocate("k", 100, owner=1)
    assert pool.n_free("v") == 4


def run_threads(target, n):
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_allocating_get_distinct_blocks():
    pool = shared(bs=1, n=500)
    errors = []

    def one(owner):
        try:
            pool.allocate("kv", 1, owner=owner)
        except Exception as e:  # noqa: BLE001  (collected and asserted empty)
            errors.append(e)

    run_threads(one, 500)
    ids = [b.block_id for o in range(500) for b in pool.blocks_for(o)]
    assert not errors and pool.stats.n_allocations == 500 and len(set(ids)) == 500


def test_threads_allocating_and_freeing_leave_every_block_free():
    pool = shared(bs=1, n=64)

    def loop(owner):
        for _ in range(20):
            pool.allocate("kv", 1, owner=owner)
            pool.free_all(owner)

    run_threads(loop, 16)
    assert pool.n_free("kv") == 64 and pool.stats.n_allocations == pool.stats.n_frees == 320


def test_shrink_retires_free_blocks_only():
    pool = shared(n=8)
    pool.allocate("kv", 4, owner=1)
    assert pool.shrink("kv", target_free=2) == 5
    s = pool.stats
    assert pool.n_free("kv") == 2 and (s.n_blocks, s.n_retired) == (3, 5)
    full = shared(n=4)
    blocks = full.allocate("kv", 16, owner=1)
    assert full.shrink("kv", 0) == 0 and full.stats.blocks_in_use() == 4
    full.free(blocks)
    assert full.shrink("kv", 10) == 0 and full.n_free("kv") == 4
    with pytest.raises(ValueError):
        full.shrink("kv", -1)


def test_owner_registration_rules():
    _, ex = vq()
    pool = shared(n=8)
    pool.allocate("kv", 4, owner=1)
    assert len(pool.allocate("kv", 4, owner=1)) == 1       # the same request growing
    pool.register_owner(2)
    pool.allocate("kv", 4, owner=2)
    with pytest.raises(ex.OwnerAlreadyActiveError):
        pool.register_owner(2)
    pool.free_all(1)
    assert len(pool.allocate("kv", 4, owner=1)) == 1       # reusable after free_all
    pool.register_owner(3)
    pool.release_owner(3)
    pool.register_owner(3)
    pool.free_all(3)                                       # registered, never allocated
    pool.register_owner(3)


def test_a_failed_allocation_leaves_the_owner_releasable():
    _, ex = vq()
    pool = shared(n=1)
    with pytest.raises(ex.BlockPoolExhaustedError):
        pool.allocate("kv", 100, owner=1)
    pool.release_owner(1)
    pool.register_owner(1)


def test_history_one_snapshot_per_change_frozen_and_bounded():
    bp, _ = vq()
    pool = shared(n=8)
    assert len(pool.history) == 0
    pool.allocate("kv", 4, owner=1)
    assert len(pool.history) == 1
    snap = pool.history[-1]
    pool.allocate("kv", 4, owner=2)
    pool.free_all(1)
    assert len(pool.history) == 3 and snap.n_allocations == 1 and pool.stats.n_allocations == 2
    small = shared(bs=1, n=4)
    for i in range(bp.DEFAULT_HISTORY_SIZE + 50):
        small.allocate("kv", 1, owner=i)
        small.free_all(i)
    assert len(small.history) == bp.DEFAULT_HISTORY_SIZE


def test_prometheus_names_values_and_prefix():
    bp, _ = vq()
    pool = shared(n=8)
    pool.allocate("kv", 4, owner=1)
    text = pool.stats.to_prometheus()
    for line in ("veloxquant_block_pool_blocks_in_use 1", "veloxquant_block_pool_blocks_total 8",
                 "veloxquant_block_pool_allocations_total 1",
                 "# TYPE veloxquant_block_pool_frees_total counter"):
        assert line + "\n" in text
    custom = bp.AllocationStats(n_blocks=1).to_prometheus(prefix="my_pool")
    assert "my_pool_blocks_in_use 0" in custom and "veloxquant_block_pool" not in custom


def test_snapshot_is_detached():
    bp, _ = vq()
    stats = bp.AllocationStats(n_blocks=4, n_allocations=2)
    snap = stats.snapshot()
    stats.n_allocations = 99
    assert snap.n_allocations == 2


def test_uninstall_removes_the_registered_modules():
    veloxquant.uninstall()
    try:
        assert "veloxquant_mlx.memory.block_pool" not in sys.modules
        with pytest.raises(ImportError):
            __import__("veloxquant_mlx.memory.block_pool")
    finally:
        veloxquant.install()


def test_handed_out_blocks_are_equal_handles_on_the_pool_state():
    pool = shared(n=4)
    a = pool.allocate("kv", 6, owner=1)
    again = pool.blocks_for(1)
    assert again == a and [hash(b) for b in again] == [hash(b) for b in a]
    assert a[0] != a[1] and a[0] != int(a[0]) and bool(pool.blocks_for(1)[0])
    assert [b.n_used for b in again] == [4, 2]
    a[1].n_used = 4  # through mark_used: every handle sees it
    assert again[1].n_used == 4
    for name, value in (("stream", "k"), ("format", "int8"), ("owner", 2),
                        ("ever_allocated", False)):
        with pytest.raises(AttributeError):
            setattr(a[0], name, value)
    with pytest.raises(AttributeError):
        a[0].other = 1
    assert (a[0].owner, a[0].stream, a[0].format) == (1, "kv", "fp16")
    rec = vq()[0].Block(a[0].block_id, owner=1)
    assert rec != a[0] and rec.owner == 1
    pool.free(a)
    assert all(b.owner is None and b.n_used == 0 for b in again) and pool.n_free("kv") == 4


def test_raises_the_exception_classes_of_a_module_loaded_later_by_path(tmp_path):
    """A caller that loads veloxquant_mlx/core/exceptions.py from a file after the
    drop-in was imported (as VeloxQuant-MLX's own tests do) gets new class
    objects under that module path; the drop-in raises those, and a refused
    call still changes nothing."""
    src = tmp_path / "exceptions.py"
    src.write_text("class BlockPoolExhaustedError(RuntimeError):\n    pass\n\n\n"
                   "class OwnerAlreadyActiveError(ValueError):\n    pass\n")
    spec = importlib.util.spec_from_file_location("veloxquant_mlx.core.exceptions", src)
    fresh = importlib.util.module_from_spec(spec)
    name = "veloxquant_mlx.core.exceptions"
    before = sys.modules.get(name)
    sys.modules[name] = fresh
    try:
        spec.loader.exec_module(fresh)
        assert fresh.BlockPoolExhaustedError is not veloxquant.BlockPoolExhaustedError
        pool = shared(n=2)
        pool.register_owner(1)
        mark = (pool.n_free("kv"), pool.stats.n_allocations, pool.blocks_for(1))
        with pytest.raises(fresh.BlockPoolExhaustedError):
            pool.allocate("kv", 100, owner=1)
        assert (pool.n_free("kv"), pool.stats.n_allocations, pool.blocks_for(1)) == mark
        with pytest.raises(fresh.OwnerAlreadyActiveError):
            pool.register_owner(1)
        assert pool.stats.n_exhausted == 1 and pool.n_free("kv") == 2
    finally:
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
    with pytest.raises(veloxquant.BlockPoolExhaustedError):  # the module back: its classes
        shared(n=1).allocate("kv", 100, owner=1)
