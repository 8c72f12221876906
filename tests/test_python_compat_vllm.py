# SPDX-License-Identifier: Apache-2.0
"""vLLM BlockPool scenarios for the kvpool drop-in, imported the way vLLM's
code imports the original, and the adoption mechanics of every drop-in.

``kvpool.compat.vllm.install()`` registers the drop-in as
``vllm.v1.core.block_pool`` (and its events as
``vllm.distributed.kv_events``) when vLLM is absent.  The scenarios cover
what the issue lists for current vLLM: keyword arguments to
``get_cached_block``, hashes longer than 32 bytes, events carrying every
field of vLLM's classes, and the read-only views vLLM's own code reads.
The adoption tests build a stand-in "original" package in a temporary
directory to check that ``install()`` replaces the class where the package
and its importers look it up, and that ``uninstall()`` restores them.
"""
import hashlib
import os
import sys
import textwrap

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool.compat import atom, veloxquant, vllm, vllm_mlx  # noqa: E402

BS = 4


class Req:
    def __init__(self, toks, hashes):
        self.all_token_ids = list(toks)
        self.block_hashes = list(hashes)
        self.request_id = "r"
        self.lora_request = None


def chain(toks, size=32):
    out, p = [], b""
    for i in range(len(toks) // BS):
        p = hashlib.sha256(p + repr(toks[i * BS:(i + 1) * BS]).encode()).digest()
        out.append(p * (size // 32) if size > 32 else p)
    return out


@pytest.fixture(scope="module", autouse=True)
def adopted():
    vllm.install()
    yield
    vllm.uninstall()


def test_adoption_registers_vllm_paths():
    from vllm.distributed.kv_events import BlockStored
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_utils import KVCacheBlock
    assert BlockPool is vllm.BlockPool and KVCacheBlock is vllm.KVCacheBlock
    assert BlockStored is vllm.BlockStored


def test_get_cached_block_by_keyword():
    from vllm.v1.core.block_pool import BlockPool
    bp = BlockPool(num_gpu_blocks=8, enable_caching=True, hash_block_size=BS)
    toks = list(range(8))
    req = Req(toks, chain(toks))
    blocks = bp.get_new_blocks(2)
    bp.cache_full_blocks(req, blocks, 0, 2, BS, 0)
    got = bp.get_cached_block(block_hash=req.block_hashes[1], kv_cache_group_ids=[0])
    assert got == [blocks[1]]
    assert bp.get_cached_block(req.block_hashes[1], kv_cache_group_ids=[1]) is None


def test_hashes_longer_than_32_bytes_are_cached_and_found():
    bp = vllm.BlockPool(8, True, BS, enable_kv_cache_events=True)
    toks = list(range(8))
    req = Req(toks, chain(toks, size=64))
    blocks = bp.get_new_blocks(2)
    bp.cache_full_blocks(req, blocks, 0, 2, BS, 0)
    assert bp.get_cached_block(req.block_hashes[0], [0]) == [blocks[0]]
    assert bp.get_cached_block(req.block_hashes[1][:32] * 3, [0]) is None
    stored = [e for e in bp.take_events() if isinstance(e, vllm.BlockStored)]
    # the integer vLLM reports for a hash is its last 8 bytes
    assert stored[0].block_hashes == [int.from_bytes(h[-8:], "big") for h in req.block_hashes]


def test_events_carry_every_field_of_vllms_classes():
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
    bp = vllm.BlockPool(4, True, BS, enable_kv_cache_events=True)
    toks = list(range(8))
    req = Req(toks, chain(toks))
    blocks = bp.get_new_blocks(2)
    bp.cache_full_blocks(req, blocks, 0, 2, BS, 3)
    (ev,) = bp.take_events()
    assert isinstance(ev, BlockStored)
    assert (ev.token_ids, ev.block_size, ev.parent_block_hash, ev.extra_keys, ev.group_idx) == \
        (toks, BS, None, None, 3)
    bp.free_blocks(blocks)
    bp.get_new_blocks(3)                      # reuses both cached blocks
    kinds = [type(e) for e in bp.take_events()]
    assert BlockRemoved in kinds
    bp.free_blocks(bp.blocks[1:])
    assert bp.reset_prefix_cache()
    assert any(isinstance(e, AllBlocksCleared) for e in bp.take_events())


def test_read_only_views_vllm_code_reads():
    bp = vllm.BlockPool(8, True, BS)
    toks = list(range(8))
    req = Req(toks, chain(toks))
    blocks = bp.get_new_blocks(2)
    bp.cache_full_blocks(req, blocks, 0, 2, BS, 5)
    assert bp.free_block_queue.num_free_blocks == bp.get_num_free_blocks() == 5
    view = bp.cached_block_hash_to_block
    key = req.block_hashes[0] + (5).to_bytes(4, "big")
    assert view.get_one_block(key) is blocks[0] and key in view and len(view) == 2
    assert view.get_one_block(req.block_hashes[0] + (4).to_bytes(4, "big")) is None
    with pytest.raises(AttributeError):
        bp.free_block_queue = None


# ---- adoption when the original is present ------------------------------------

STAND_INS = {
    "vllm": ("vllm/v1/core/block_pool.py", "BlockPool", "vllm.v1.core.block_pool"),
    "atom": ("atom/model_engine/block_pool.py", "BlockPool", "atom.model_engine.block_pool"),
    "vllm_mlx": ("vllm_mlx/paged_cache.py", "PagedCacheManager", "vllm_mlx.paged_cache"),
    "veloxquant_mlx": ("veloxquant_mlx/memory/block_pool.py", "BlockPoolAllocator",
                       "veloxquant_mlx.memory.block_pool"),
}
DROP_INS = {"vllm": vllm, "atom": atom, "vllm_mlx": vllm_mlx, "veloxquant_mlx": veloxquant}


@pytest.mark.parametrize("package", sorted(STAND_INS))
def test_install_patches_a_present_original_and_uninstall_restores(package, tmp_path, monkeypatch):
    path, name, module = STAND_INS[package]
    mod = DROP_INS[package]
    mod.uninstall()                         # the module fixture's registration, if any
    saved = {k: v for k, v in sys.modules.items() if k == package or k.startswith(package + ".")}
    for k in saved:
        del sys.modules[k]
    try:
        f = tmp_path / path
        f.parent.mkdir(parents=True)
        parts = path.split("/")
        for i in range(1, len(parts)):
            (tmp_path.joinpath(*parts[:i]) / "__init__.py").write_text("")
        f.write_text(f"class {name}:\n    pass\n")
        (tmp_path / package / "user.py").write_text(textwrap.dedent(f"""\
            from {module} import {name}
            def make():
                return {name}
            """))
        monkeypatch.syspath_prepend(str(tmp_path))
        import importlib
        user = importlib.import_module(f"{package}.user")
        original = getattr(importlib.import_module(module), name)
        assert mod.install() is True
        assert getattr(sys.modules[module], name) is getattr(mod, name)
        assert user.make() is getattr(mod, name)
        assert mod.install() is True        # idempotent
        mod.uninstall()
        assert getattr(sys.modules[module], name) is original and user.make() is original
    finally:
        for k in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
        if package == "vllm":
            vllm.install()


def test_a_broken_original_is_not_masked(tmp_path, monkeypatch):
    (tmp_path / "atom").mkdir()
    (tmp_path / "atom" / "__init__.py").write_text("import a_module_that_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    atom.uninstall()
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "atom" or k.startswith("atom.")}
    try:
        with pytest.raises(ModuleNotFoundError):
            atom.install()
        assert "atom.model_engine.block_pool" not in sys.modules
    finally:
        for k in [k for k in sys.modules if k == "atom" or k.startswith("atom.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_exceptions_are_the_kvpool_ones_without_the_original():
    assert issubclass(veloxquant.BlockPoolExhaustedError, kvpool.ExhaustedError)


def test_calls_over_more_blocks_than_the_scratch_array_holds():
    n = 6000  # more than the 4,096 ids a call handles in the pool's own array
    bp = vllm.BlockPool(n + 1, True, 16)
    with pytest.raises(ValueError):
        bp.get_new_blocks(n + 1)
    assert bp.get_num_free_blocks() == n
    blocks = bp.get_new_blocks(5000)
    assert len({b.block_id for b in blocks}) == 5000 and bp.get_num_free_blocks() == n - 5000
    with pytest.raises(ValueError):
        bp.get_new_blocks(n - 5000 + 1)  # refused whole: nothing taken
    assert bp.get_num_free_blocks() == n - 5000
    foreign = vllm.BlockPool(2, True, 16).get_new_blocks(1)[0]
    with pytest.raises(ValueError):
        bp.free_blocks(blocks[:4500] + [foreign])  # a bad item past the first 4,096
    assert bp.get_num_free_blocks() == n - 5000 and all(b.ref_cnt == 1 for b in blocks)
    bp.touch(blocks[:100])  # the first 100 now hold two references
    with pytest.raises(kvpool.DoubleFreeError):
        bp.free_blocks(blocks + blocks[:101])  # block 101 dropped twice: refused whole
    assert bp.get_num_free_blocks() == n - 5000 and blocks[0].ref_cnt == 2
    bp.free_blocks(blocks + blocks[:100])  # the first 100 named twice: both references go
    assert bp.get_num_free_blocks() == n and all(b.ref_cnt == 0 for b in blocks)


def test_blocks_is_a_read_only_view_of_every_block():
    import gc
    import weakref
    bp = vllm.BlockPool(5, True, 16)
    got = bp.get_new_blocks(2)
    blocks = bp.blocks
    assert len(blocks) == 5 and blocks[0] is bp.null_block and blocks[-1] is blocks[4]
    assert [b.block_id for b in blocks] == [0, 1, 2, 3, 4] and list(blocks)[1:3] == got
    assert blocks[1:3] == got and blocks[::-2] == [blocks[4], blocks[2], blocks[0]]
    assert blocks[got[0].block_id] is got[0] and got[1] in blocks
    for bad in (5, -6, 2**70):
        with pytest.raises(IndexError):
            blocks[bad]
    with pytest.raises(TypeError):
        blocks["1"]
    with pytest.raises(TypeError):
        blocks[1] = got[0]
    bp.free_blocks(bp.blocks[1:3])
    assert bp.get_num_free_blocks() == 4
    kept, view = bp.blocks[3], bp.blocks
    del bp, blocks, got
    gc.collect()
    assert view[3] is kept and len(view) == 5  # the view holds its BlockPool
    del view
    gc.collect()
    assert kept.block_id == 3 and kept.ref_cnt == 0  # a block kept outlives its BlockPool
    cyclic = vllm.BlockPool(3, True, 16)
    cyclic.view = cyclic.blocks  # a cycle through the pool's dict: the collector breaks it
    gone = weakref.ref(cyclic)
    del cyclic
    gc.collect()
    assert gone() is None


class ForeignBlock:
    """A block object of another class, as vLLM's own tests make them
    (``KVCacheBlock(i)``): only its block_id is read."""

    def __init__(self, block_id):
        self.block_id = block_id
        self.ref_cnt = 0


def test_blocks_of_another_class_stand_for_the_pools_block_of_that_id():
    bp = vllm.BlockPool(8, True, BS)
    toks = list(range(8))
    got = bp.get_new_blocks(2)
    ids = [b.block_id for b in got]
    bp.cache_full_blocks(Req(toks, chain(toks)), [ForeignBlock(i) for i in ids], 0, 2, BS, 0)
    assert [b.block_hash for b in got] == [h + bytes(4) for h in chain(toks)]  # group 0
    bp.touch([ForeignBlock(ids[0])])
    assert got[0].ref_cnt == 2
    before = (bp.get_num_free_blocks(), [b.ref_cnt for b in bp.blocks])
    for bad, err in (([object()], TypeError), ([ForeignBlock(99)], ValueError),
                     ([ForeignBlock("1")], TypeError)):
        with pytest.raises(err):
            bp.free_blocks([ForeignBlock(ids[1])] + bad)
        assert (bp.get_num_free_blocks(), [b.ref_cnt for b in bp.blocks]) == before
    bp.free_blocks([ForeignBlock(i) for i in ids + ids[:1]])
    assert bp.get_num_free_blocks() == 7 and [b.ref_cnt for b in got] == [0, 0]


def test_one_block_removed_event_per_evicted_block_with_its_group():
    BlockRemoved = vllm.BlockRemoved  # noqa: N806
    bp = vllm.BlockPool(4, True, BS, enable_kv_cache_events=True)
    toks = list(range(12))
    hashes = chain(toks)
    blocks = bp.get_new_blocks(3)
    bp.cache_full_blocks(Req(toks, hashes), blocks, 0, 3, BS, 2)
    bp.free_blocks(blocks)
    bp.take_events()
    bp.get_new_blocks(3)  # evicts all three cached blocks
    removed = [e for e in bp.take_events() if isinstance(e, BlockRemoved)]
    assert [(e.block_hashes, e.group_idx) for e in removed] == \
        [([int.from_bytes(h[-8:], "big")], 2) for h in hashes]


def test_the_cached_block_map_reads_as_vllms_cache_dict():
    bp = vllm.BlockPool(8, True, BS)
    toks = list(range(8))
    hashes = chain(toks)
    a = bp.get_new_blocks(2)
    b = bp.get_new_blocks(1)
    bp.cache_full_blocks(Req(toks, hashes), a, 0, 2, BS, 0)
    bp.cache_full_blocks(Req(toks[:4], hashes[:1]), b, 0, 1, BS, 0)  # a second copy of block 0
    cache = bp.cached_block_hash_to_block._cache
    k0, k1 = (h + bytes(4) for h in hashes)
    assert dict(cache) == {k0: {a[0].block_id: a[0], b[0].block_id: b[0]}, k1: a[1]}
    with pytest.raises(TypeError):
        cache[k0] = None
    bp.free_blocks(a + b)
    bp.evict_blocks([a[1].block_id])
    assert set(bp.cached_block_hash_to_block._cache) == {k0}
