# SPDX-License-Identifier: Apache-2.0
"""Drop-in classes (kvpool.compat): the behaviours each original documents.
vLLM: ref count 2 on a shared hit, exact free-queue order after frees, a
partial block unhashed until full, a failed allocation leaving ref counts
untouched, reset refused while in use, duplicate hashes, events on
store/evict/reset; VeloxQuant, ATOM and vllm-mlx: their documented APIs."""
import hashlib
import os
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool.compat import atom, veloxquant, vllm, vllm_mlx  # noqa: E402

BS = 4


class Req:
    def __init__(self, toks, rid="r"):
        self.all_token_ids = list(toks)
        self.request_id = rid
        self.lora_request = None
        self.block_hashes = []
        p = b""
        for i in range(len(toks) // BS):
            p = hashlib.sha256(p + repr(toks[i * BS:(i + 1) * BS]).encode()).digest()
            self.block_hashes.append(p)


def alloc_and_cache(bp, req):
    n = (len(req.all_token_ids) + BS - 1) // BS
    blocks = bp.get_new_blocks(n)
    bp.cache_full_blocks(req, blocks, 0, len(req.all_token_ids) // BS, BS, 0)
    return blocks


# ---- vLLM ---------------------------------------------------------------------

def test_vllm_canonical_blocks_and_null():
    bp = vllm.BlockPool(8, True, BS)
    assert bp.num_gpu_blocks == 8 and len(bp.blocks) == 8
    assert bp.null_block is bp.blocks[0] and bp.null_block.is_null
    assert bp.get_num_free_blocks() == 7 and bp.get_usage() == 0.0
    b = bp.get_new_blocks(2)
    assert b[0] is bp.blocks[1] and b[1] is bp.blocks[2]
    with pytest.raises(AttributeError):
        b[0].ref_cnt = 5
    bp.free_blocks([bp.null_block] + b)     # null block skipped
    assert bp.get_num_free_blocks() == 7


def test_vllm_blocks_outlive_their_pool():
    """The blocks are one array that their pool frees once the last block
    has gone: blocks kept after the BlockPool and its list are dropped still
    read their state, and dropping them last frees it all."""
    import gc
    bp = vllm.BlockPool(16, True, BS)
    taken = bp.get_new_blocks(3)
    kept, null = taken[1], bp.null_block
    del bp, taken
    gc.collect()
    assert kept.block_id == 2 and kept.ref_cnt == 1 and not kept.is_null
    assert kept.block_hash is None
    assert null.is_null and null.block_id == 0
    del null
    gc.collect()
    assert kept.block_id == 2 and kept.ref_cnt == 1
    del kept
    gc.collect()


def test_vllm_shared_hit_ref2_and_partial_block_unhashed():
    bp = vllm.BlockPool(10, True, BS)
    r = Req(list(range(10)))             # 2 full blocks + a partial one
    blocks = alloc_and_cache(bp, r)
    assert blocks[0].block_hash == r.block_hashes[0] + bytes(4)
    assert blocks[2].block_hash is None  # partial: unhashed until full
    hit = [bp.get_cached_block(h, [0])[0] for h in r.block_hashes]
    assert hit == blocks[:2]
    bp.touch(hit)
    assert [b.ref_cnt for b in blocks] == [2, 2, 1]
    assert bp.get_cached_block(b"\x01" * 32, [0]) is None
    assert bp.get_cached_block(r.block_hashes[0], [1]) is None  # other group
    # the partial block becomes full: cached on the next call
    r2 = Req(list(range(12)))
    bp.cache_full_blocks(r2, blocks, 2, 3, BS, 0)
    assert blocks[2].block_hash == r2.block_hashes[2] + bytes(4)


def test_vllm_group_ids_and_keys_after_eviction():
    """A block's key is its hash then the group id (4 bytes, big-endian),
    and reads None once the block has been evicted and reused."""
    bp = vllm.BlockPool(4, True, BS)
    r = Req(list(range(8)))
    blocks = bp.get_new_blocks(2)
    bp.cache_full_blocks(r, blocks, 0, 2, BS, 0x01020304)
    assert blocks[1].block_hash == r.block_hashes[1] + bytes([1, 2, 3, 4])
    assert bp.get_cached_block(r.block_hashes[1], [0x01020304]) == [blocks[1]]
    assert bp.get_cached_block(r.block_hashes[1], [0x04030201]) is None
    bp.free_blocks(blocks)
    assert blocks[0].block_hash == r.block_hashes[0] + bytes([1, 2, 3, 4])
    bp.get_new_blocks(3)                       # the free one, then both cached
    assert blocks[0].block_hash is None and blocks[1].block_hash is None
    assert bp.get_cached_block(r.block_hashes[1], [0x01020304]) is None


def test_vllm_free_queue_order():
    """As vLLM since its PR #42656: a freed block without a hash goes to the
    head of the free queue (the latest call's blocks first, each call's in
    the order given), a cached block to the tail."""
    bp = vllm.BlockPool(7, True, BS)
    a = bp.get_new_blocks(6)             # ids 1..6
    bp.free_blocks([a[3], a[0], a[5]])   # order given = eviction order
    bp.free_blocks([a[2], a[1], a[4]])
    again = bp.get_new_blocks(6)
    assert [b.block_id for b in again] == [3, 2, 5, 4, 1, 6]

    bp = vllm.BlockPool(6, True, BS)
    cached = alloc_and_cache(bp, Req(list(range(8))))
    plain = bp.get_new_blocks(1)
    bp.free_blocks(cached[::-1])         # cached first: to the tail
    bp.free_blocks(plain)                # freed last, no hash: to the head
    assert bp.get_new_blocks(1)[0].block_id == plain[0].block_id
    assert all(b.block_hash is not None for b in cached)


def test_vllm_touch_cached_free_block_leaves_queue():
    bp = vllm.BlockPool(6, True, BS)
    r = Req(list(range(8)))
    blocks = alloc_and_cache(bp, r)
    bp.free_blocks(blocks[::-1])
    assert bp.get_num_free_blocks() == 5
    hit = bp.get_cached_block(r.block_hashes[0], [0])
    bp.touch(hit)
    assert hit[0].ref_cnt == 1 and bp.get_num_free_blocks() == 4
    rest = bp.get_new_blocks(4)
    assert hit[0] not in rest
    bp.touch([[hit[0]]])                 # grouped form accepted
    assert hit[0].ref_cnt == 2


def test_vllm_failed_allocation_changes_nothing():
    bp = vllm.BlockPool(5, True, BS)
    b = bp.get_new_blocks(3)
    fp = bp.pool.fingerprint()
    with pytest.raises(ValueError):
        bp.get_new_blocks(2)
    assert [x.ref_cnt for x in b] == [1, 1, 1] and bp.pool.fingerprint() == fp
    assert bp.get_num_free_blocks() == 1
    with pytest.raises(kvpool.DoubleFreeError):
        bp.free_blocks([bp.blocks[4], bp.blocks[4]])
    assert bp.pool.fingerprint() == fp
    last = bp.get_new_blocks(1)           # the one-block path (kvp_take)
    fp = bp.pool.fingerprint()
    with pytest.raises(ValueError):
        bp.get_new_blocks(1)
    assert bp.pool.fingerprint() == fp and last[0].ref_cnt == 1


def test_vllm_one_block_calls_follow_the_free_queue():
    one, many = vllm.BlockPool(9, False, BS), vllm.BlockPool(9, False, BS)
    for bp in (one, many):
        got = bp.get_new_blocks(6)
        bp.free_blocks([got[3], got[0], got[5]])
    ids_one = [one.get_new_blocks(1)[0].block_id for _ in range(5)]
    ids_many = [b.block_id for b in many.get_new_blocks(5)]
    assert ids_one == ids_many == [4, 1, 6, 7, 8]  # freed blocks at the head


def test_vllm_one_block_results_never_change_under_the_caller():
    """A one-block result list is reused only once the caller has dropped
    it: a list still held, grown or emptied is never touched again."""
    bp = vllm.BlockPool(9, False, BS)
    kept = bp.get_new_blocks(1)
    nxt = bp.get_new_blocks(1)
    assert nxt is not kept and [kept[0].block_id, nxt[0].block_id] == [1, 2]
    grown = bp.get_new_blocks(1)
    grown.append(kept[0])
    later = bp.get_new_blocks(1)
    assert later is not grown and [b.block_id for b in grown] == [3, 1]
    del grown, later                   # dropped: one of them may be refilled
    emptied = bp.get_new_blocks(1)
    assert [b.block_id for b in emptied] == [5]
    emptied.clear()
    del emptied
    seen = [bp.get_new_blocks(1)[0].block_id for _ in range(3)]
    assert seen == [6, 7, 8]
    assert [b.block_id for b in kept + nxt] == [1, 2] and len(kept) == len(nxt) == 1
    assert [b.ref_cnt for b in bp.blocks[1:]] == [1] * 8
    bp.free_blocks(bp.blocks[1:])
    assert bp.get_num_free_blocks() == 8


def test_vllm_reset_refused_while_in_use_then_events():
    bp = vllm.BlockPool(8, True, BS, enable_kv_cache_events=True)
    r = Req(list(range(8)))
    blocks = alloc_and_cache(bp, r)
    assert bp.reset_prefix_cache() is False
    ev = bp.take_events()
    assert len(ev) == 1 and isinstance(ev[0], vllm.BlockStored)
    assert ev[0].block_hashes == [int.from_bytes(h[-8:], "big") for h in r.block_hashes]
    assert ev[0].token_ids == list(range(8)) and ev[0].parent_block_hash is None
    bp.free_blocks(blocks[::-1])
    bp.evict_blocks({blocks[1].block_id})
    assert blocks[1].block_hash is None
    ev = bp.take_events()
    assert isinstance(ev[0], vllm.BlockRemoved)
    assert bp.reset_prefix_cache() is True
    assert blocks[0].block_hash is None
    ev = bp.take_events()
    assert isinstance(ev[-1], vllm.AllBlocksCleared)
    # store again, then reuse (eviction on allocation) -> BlockRemoved
    blocks = alloc_and_cache(bp, r)
    bp.free_blocks(blocks)
    bp.take_events()
    bp.get_new_blocks(7)
    ev = bp.take_events()
    assert sum(len(e.block_hashes) for e in ev if isinstance(e, vllm.BlockRemoved)) == 2


def test_vllm_duplicate_hashes():
    bp = vllm.BlockPool(8, True, BS, enable_kv_cache_events=True)
    r = Req(list(range(4)))
    first = alloc_and_cache(bp, r)
    second = alloc_and_cache(bp, r)      # same content in another block
    assert first[0].block_hash == second[0].block_hash
    assert bp.get_cached_block(r.block_hashes[0], [0]) == [first[0]]
    bp.free_blocks(first)
    bp.evict_blocks([first[0].block_id])
    assert bp.get_cached_block(r.block_hashes[0], [0]) == [second[0]]
    ev = bp.take_events()
    stored = [e for e in ev if isinstance(e, vllm.BlockStored)]
    assert len(stored) == 1               # announced once (first copy)
    assert not any(isinstance(e, vllm.BlockRemoved) for e in ev)


def test_vllm_caching_disabled():
    bp = vllm.BlockPool(4, False, BS)
    b = bp.get_new_blocks(1)
    bp.cache_full_blocks(Req(list(range(4))), b, 0, 1, BS, 0)
    assert b[0].block_hash is None
    assert bp.get_cached_block(b"\x00" * 32, [0]) is None


# ---- VeloxQuant -------------------------------------------------------------------

def test_veloxquant_allocator():
    cfg = veloxquant.PoolConfig(block_size=16, n_blocks=8, separate_kv=False)
    pool = veloxquant.BlockPoolAllocator(cfg)
    blocks = pool.allocate(stream="k", n_tokens=40, owner=7, format="int2")
    assert len(blocks) == 3 and all(b.owner == 7 and b.format == "int2" for b in blocks)
    assert blocks[0].stream == "kv" and blocks[0].ever_allocated
    assert pool.blocks_for(7) == blocks
    assert [b.n_used for b in blocks] == [16, 16, 8]   # the last one holds the remainder
    pool.mark_used(blocks[0], 5)
    blocks[1].n_used = 16
    assert pool.stats.fragmentation() == pytest.approx(2 / 8)
    with pytest.raises(veloxquant.BlockPoolExhaustedError):
        pool.allocate("v", 16 * 6, owner=8)
    assert pool.stats.n_exhausted == 1 and pool.n_free() == 5
    with pytest.raises(ValueError):
        pool.allocate("k", 0, owner=8)
    pool.register_owner(9)
    with pytest.raises(veloxquant.OwnerAlreadyActiveError):
        pool.register_owner(9)
    pool.release_owner(9)
    pool.register_owner(7 + 100)
    pool.free(blocks[:1])
    assert blocks[0].owner is None
    pool.free_all(7)
    assert pool.n_free() == 8 and pool.blocks_for(7) == []
    assert pool.shrink("k", 6) == 2 and pool.stats.n_retired == 2
    with pytest.raises(ValueError):
        pool.shrink("k", -1)
    text = pool.stats.to_prometheus()
    assert "# TYPE veloxquant_block_pool_blocks_total gauge" in text and text.endswith("\n")
    assert len(pool.history) >= 3 and pool.stats.snapshot() == pool.stats
    # LIFO reuse: the block freed last is handed out first
    a = pool.allocate("k", 16, owner=1)
    pool.free(a)
    assert pool.allocate("k", 16, owner=2)[0] == a[0]  # one block: equal handles


def test_veloxquant_separate_kv_and_growth():
    pool = veloxquant.BlockPoolAllocator(veloxquant.PoolConfig(
        block_size=4, n_blocks=4, separate_kv=True, grow_on_exhaustion=True, max_blocks=6))
    assert pool.n_free("k") == 2 and pool.n_free("v") == 2
    with pytest.raises(ValueError):
        pool.allocate("kv", 4, owner=1)
    ks = pool.allocate("k", 16, owner=1)          # grows K by 2
    assert len(ks) == 4 and all(b.stream == "k" for b in ks) and pool.stats.n_grown == 2
    with pytest.raises(veloxquant.BlockPoolExhaustedError):
        pool.allocate("v", 16, owner=2)          # would pass max_blocks


# ---- ATOM ---------------------------------------------------------------------

def test_atom_block_pool():
    evicted = []
    bp = atom.BlockPool(4, on_evict=evicted.append, max_blocks=6)
    assert bp.num_free == 4 and bp.lookup(123) == -1
    a = bp.pop()
    assert a == 0                              # vacant, lowest id first
    blk = bp.allocate(a)
    assert blk.ref_count == 1
    bp.publish(a, 123, [1, 2])
    assert bp.lookup(123) == a and bp.num_indexed == 1 and blk.token_ids == [1, 2]
    bp.free(a)
    assert bp.lookup(123) == a                 # lazy: still findable
    assert bp.claim(a).ref_count == 1
    bp.free(a)
    others = [bp.allocate(bp.pop()) for _ in range(3)]
    assert [b.block_id for b in others] == [1, 2, 3] and evicted == []
    bp.allocate(bp.pop())                      # now the cached block is reused
    assert evicted == [123] and bp.lookup(123) == -1
    with pytest.raises(AssertionError):
        bp.pop()
    assert bp.extend(5) == 2 and bp.num_blocks == 6
    r = bp.retire_top()
    assert r == atom.BlockRetirement(5, -1)
    for b in (0, 1):
        bp.free(b)
    bp.publish(3, 77, [9])
    r = bp.retire_top()                          # id 4 free -> dropped
    assert r.moved_to == -1
    r = bp.retire_top()                          # id 3 in use -> moves
    assert r.retired == 3 and r.moved_to in (0, 1)
    assert bp.lookup(77) == r.moved_to and bp.blocks[r.moved_to].token_ids == [9]
    bp.clear_index()
    assert bp.num_indexed == 0 and evicted == [123]


# ---- vllm-mlx -----------------------------------------------------------------

def test_vllm_mlx_manager():
    m = vllm_mlx.PagedCacheManager(block_size=4, max_blocks=8)
    assert m.null_block.is_null and m.free_blocks == 7
    toks = list(range(10))
    blocks = m.allocate_blocks_for_tokens(len(toks))
    assert len(blocks) == 3 and all(b.ref_count == 1 for b in blocks)
    m.cache_full_blocks(blocks, toks, 0, 2)
    assert blocks[0].block_hash == vllm_mlx.compute_block_hash(None, toks[:4])
    assert blocks[2].block_hash is None
    got, n = m.get_computed_blocks(toks)
    assert got == blocks[:2] and n == 8
    assert m.get_cached_block(blocks[1].block_hash) is blocks[1]
    m.touch(got)
    assert blocks[0].ref_count == 2 and blocks[0].is_shared()
    t = m.create_block_table("a")
    for b, k in zip(blocks, (4, 4, 2)):
        m.add_block_to_table(t, b, k)
    f = m.fork_block_table(t, "b")
    assert f.block_ids == t.block_ids and blocks[2].ref_count == 2
    out, copied = m.get_blocks_for_generation(f)
    assert copied and m.get_stats().cow_copies == 3
    assert m.reset_prefix_cache() is False
    for b in got:
        m.free_block(b.block_id)
    m.delete_block_table("a")
    m.delete_block_table("b")
    assert m.free_blocks == 7 and m.get_stats().allocated_blocks == 1
    with pytest.raises(ValueError):
        m.get_new_blocks(8)
    assert m.evict_lru_blocks(5) == 5          # the original counts every block gone over
    assert m.get_stats().evictions == 2        # the two cached ones lost their content
    assert m.handle_memory_pressure(7) and not m.handle_memory_pressure(8)
    assert m.reset_prefix_cache() is True
    assert m.compute_block_hash([1, 2, 258]) == hashlib.sha256(bytes([1, 2, 2])).hexdigest()[:16]
    usage = m.get_memory_usage()
    assert usage["max_blocks"] == 8
    m.clear()
    assert m.free_blocks == 7 and m.get_block_table("a") is None


def test_registered_modules_have_specs():
    # Without the originals, install() registers modules that importlib can
    # find: find_spec returns each one's spec (a package's with its search
    # locations) instead of raising ValueError, and None again after
    # uninstall().  A fresh interpreter: nothing else registered them.
    from test_python_hostile import run_child
    out = run_child("""
        import importlib, importlib.util
        from kvpool.compat import atom, veloxquant, vllm, vllm_mlx
        for mod in (vllm, atom, vllm_mlx, veloxquant):
            pkg = mod._adoption.package
            if importlib.util.find_spec(pkg) is not None:
                print(pkg, "present")
                continue
            assert mod.install() is False
            for path in mod._adoption.register:
                parts = path.split(".")
                for i in range(1, len(parts) + 1):
                    name = ".".join(parts[:i])
                    spec = importlib.util.find_spec(name)
                    assert spec is not None and spec.name == name, name
                    assert sys.modules[name].__spec__ is spec, name
                    if i < len(parts):
                        assert spec.submodule_search_locations == [], name
                        assert sys.modules[name].__path__ == [], name
                    assert sys.modules[name].__package__ == (
                        name if spec.submodule_search_locations is not None
                        else name.rpartition(".")[0]), name
                assert importlib.import_module(path) is sys.modules[path]
            mod.uninstall()
            assert importlib.util.find_spec(pkg) is None, pkg
            print(pkg, "ok")
    """)
    assert out.split() == ["vllm", "ok", "atom", "ok", "vllm_mlx", "ok", "veloxquant_mlx", "ok"] \
        or "present" in out, out
