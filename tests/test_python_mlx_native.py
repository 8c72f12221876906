# SPDX-License-Identifier: Apache-2.0
"""The vllm-mlx drop-in's per-request loops in C (kvpool._kvpool.mlx_prefix, mlx_cache).

``PagedCacheManager.get_computed_blocks`` and ``cache_full_blocks`` run
their per-block loop in one native call for a list of plain ints, and go on
in Python from the first block whose tokens the C code does not format
itself.  An int subclass whose text is an int's hashes the same in both, so
a manager fed such tokens must end in exactly the state of one fed plain
ints.  The native calls refuse bad arguments with a named error and leave
the pool as it was.
"""
import os
import random
import sys
from array import array

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool import _kvpool  # noqa: E402
from kvpool.compat import vllm_mlx  # noqa: E402

BS = 4


class Tok(int):
    """A token the C loops leave to Python (not an exact int), with an int's text."""


def state(mgr):
    return (mgr._pool.fingerprint(), dict(mgr.hash_to_block), dict(mgr._hash_values),
            list(mgr._token_counts), mgr._hits, mgr._misses,
            [mgr._pool.block_hash(i) for i in range(mgr.max_blocks)],
            [mgr._pool.ref_count(i) for i in range(mgr.max_blocks)])


def admit(mgr, toks, cache_toks):
    n = len(toks)
    hit, ntok = mgr.get_computed_blocks(toks[:((n - 1) // BS) * BS])
    mgr.touch(hit)
    blocks = hit + mgr.get_new_blocks((n + BS - 1) // BS - len(hit))
    mgr.cache_full_blocks(blocks, cache_toks, len(hit), n // BS)
    return [b.block_id for b in blocks], ntok


@pytest.mark.parametrize("seed", range(4))
def test_native_loops_and_python_loops_leave_the_same_state(seed):
    rng = random.Random(seed)
    plain = vllm_mlx.PagedCacheManager(block_size=BS, max_blocks=40)
    mixed = vllm_mlx.PagedCacheManager(block_size=BS, max_blocks=40)
    prompts = [[rng.randrange(-3, 1 << 40) for _ in range(24)] for _ in range(3)]
    live = []
    for step in range(150):
        toks = rng.choice(prompts)[:rng.randrange(4, 24)] + [rng.randrange(50)
                                                              for _ in range(rng.randrange(6))]
        odd = [Tok(t) if rng.random() < 0.05 else t for t in toks]
        as_tuple = rng.random() < 0.2
        a = admit(plain, toks, toks)
        b = admit(mixed, odd, tuple(odd) if as_tuple else odd)
        assert a == b, (seed, step)
        assert state(plain) == state(mixed), (seed, step)
        live.append(a[0])
        while live and (len(live) > 4 or rng.random() < 0.3):
            ids = live.pop(rng.randrange(len(live)))
            for i in reversed(ids):
                assert plain.free_block(i) == mixed.free_block(i)
    assert plain._hits > 20 and plain._misses > 20 and plain.get_stats().evictions > 0


def fresh():
    mgr = vllm_mlx.PagedCacheManager(block_size=BS, max_blocks=8)
    blocks = mgr.get_new_blocks(2)
    return mgr, blocks, list(range(2 * BS))


def cache_args(m, b, t, **over):
    args = dict(pool=m._pool, blocks=b, toks=t, bs=BS, lo=0, hi=len(b), parent=None,
                counts=m._token_counts, lv=m._hash_values, li=m.hash_to_block)
    args.update(over)
    return list(args.values())


@pytest.mark.parametrize("over, exc", [
    ({"pool": object()}, TypeError), ({"bs": 0}, ValueError), ({"bs": "4"}, TypeError),
    ({"blocks": (1, 2)}, TypeError), ({"lv": []}, TypeError), ({"li": None}, TypeError),
    ({"lo": 1, "hi": 0}, IndexError), ({"hi": 3}, IndexError), ({"lo": -1}, IndexError),
    ({"parent": b"short"}, TypeError), ({"parent": "x" * 32}, TypeError),
    ({"counts": array("i", [0] * 8)}, TypeError), ({"counts": b"\0" * 64}, BufferError),
    ({"blocks": [7, 100]}, kvpool.Error), ({"blocks": ["a", "b"]}, TypeError)])
def test_mlx_cache_refuses_bad_arguments_and_changes_nothing(over, exc):
    mgr, blocks, toks = fresh()
    before = state(mgr)
    with pytest.raises(exc):
        _kvpool.mlx_cache(*cache_args(mgr, blocks, toks, **over))
    assert state(mgr) == before


def test_mlx_cache_publishes_as_the_manager_and_a_free_block_is_refused():
    mgr, blocks, toks = fresh()
    i, parent = _kvpool.mlx_cache(*cache_args(mgr, blocks, toks))
    assert i == 2 and parent == mgr._pool.block_hash(blocks[1])
    assert parent == vllm_mlx.compute_block_hash(vllm_mlx.compute_block_hash(None, toks[:BS]),
                                                 toks[BS:])
    assert list(mgr._token_counts[blocks[0]:blocks[1] + 1]) == [BS, BS]
    assert mgr.hash_to_block[mgr.compute_block_hash(toks[:BS])] == blocks[0].block_id
    mgr2, blocks2, _ = fresh()
    before = state(mgr2)
    with pytest.raises(kvpool.Error):  # block 3 is free: it cannot be published
        _kvpool.mlx_cache(*cache_args(mgr2, [3], toks))
    assert state(mgr2) == before


def test_mlx_prefix_refuses_bad_arguments():
    mgr, blocks, toks = fresh()
    for args, exc in (((object(), mgr.blocks, toks, BS), TypeError),
                      ((mgr._pool, tuple(mgr.blocks), toks, BS), TypeError),
                      ((mgr._pool, mgr.blocks, toks, 0), ValueError),
                      ((mgr._pool, mgr.blocks, toks), TypeError)):
        before = state(mgr)
        with pytest.raises(exc):
            _kvpool.mlx_prefix(*args)
        assert state(mgr) == before
    mgr.cache_full_blocks(blocks, toks, 0, 2)
    assert _kvpool.mlx_prefix(mgr._pool, mgr.blocks, toks, BS)[1:] == (2, mgr._pool.block_hash(blocks[1]), False)
    with pytest.raises(IndexError):  # an id the blocks list does not reach
        _kvpool.mlx_prefix(mgr._pool, mgr.blocks[:1], toks, BS)
    assert _kvpool.mlx_prefix(mgr._pool, mgr.blocks, tuple(toks), BS) == ([], 0, None, False)
    hit, i, parent, missed = _kvpool.mlx_prefix(mgr._pool, mgr.blocks, toks[:BS] + [9] * BS, BS)
    assert hit == [mgr.blocks[blocks[0]]] and i == 1 and missed is True
    mgr._pool.close()
    with pytest.raises(kvpool.InvalidArgumentError):
        _kvpool.mlx_prefix(mgr._pool, mgr.blocks, toks, BS)
