# SPDX-License-Identifier: Apache-2.0
"""The pool object under a vLLM BlockPool (``BlockPool.pool``): a
``kvpool.Pool`` of the drop-in's own type, which also holds the drop-in's
KVCacheBlock objects and each block's cached key.

Checked: it is a Pool (every Pool method works on it) whose type cannot be
instantiated from Python; a block's key is read back through it while the
block is indexed; and it lives exactly as long as the last of its blocks:
a kept block still reads its key after its BlockPool is gone, and the pool
object is freed once that block goes.
"""
import gc
import os
import sys
import weakref

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool.compat import vllm  # noqa: E402


class _Request:
    """The two fields of a vLLM Request that cache_full_blocks reads."""
    __slots__ = ("block_hashes", "all_token_ids")


def test_the_pool_object_is_a_pool_of_its_own_type():
    bp = vllm.BlockPool(8, True, 4)
    native = bp.pool
    assert isinstance(native, kvpool.Pool) and type(native) is not kvpool.Pool
    assert native.stats()["blocks"] == 8 and native.block_size == 4
    assert native.free_count() == bp.get_num_free_blocks() == 7  # the null block is held
    with pytest.raises(TypeError):
        type(native)(num_blocks=4)
    assert kvpool.Pool(num_blocks=4).stats()["blocks"] == 4  # the base type still is


def test_a_kept_block_keeps_the_pool_object_and_its_key():
    bp = vllm.BlockPool(8, True, 4)
    blocks = bp.get_new_blocks(2)
    req = _Request()
    req.block_hashes, req.all_token_ids = [b"\x01" * 32, b"\x02" * 32], list(range(8))
    bp.cache_full_blocks(req, blocks, 0, 2, 4, 0)
    kept = blocks[1]
    key = kept.block_hash
    assert key is not None and bytes(key)[:32] == b"\x02" * 32
    gone = weakref.ref(bp.pool)
    del bp, blocks
    gc.collect()
    assert gone() is not None  # the kept block holds its pool object
    assert kept.block_hash == key and kept.ref_cnt == 1
    del kept
    gc.collect()
    assert gone() is None  # freed with its last block, keys and block array with it
