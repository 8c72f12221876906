# SPDX-License-Identifier: Apache-2.0
"""kvpool — Python binding of libkvpool, the KV-cache block manager.

Owns the public Python face of the package: it re-exports the native classes
and exceptions of the C extension ``kvpool._kvpool`` and adds small pure
Python helpers (module-level hashing).  Everything that runs per block lives
in C; see docs/PYTHON.md for the API, the error mapping and the zero-copy
validity rules.

    >>> import kvpool
    >>> pool = kvpool.Pool(block_size=16, num_blocks=1024)
    >>> ids = pool.alloc(40, owner=7)          # 3 blocks
    >>> pool.free_owner(7)
    3
"""
from __future__ import annotations

import threading as _threading

from . import _kvpool
from ._kvpool import (  # noqa: F401  (re-exported)
    ANON,
    EVENT_ALL_CLEARED,
    EVENT_REMOVED,
    EVENT_STORED,
    FMT_BF16,
    FMT_FP8,
    FMT_FP16,
    FMT_INT2,
    FMT_INT4,
    FMT_INT8,
    FMT_USER,
    HASH_ALG_NAMES,
    HASH_SHA256,
    HASH_XXH3_128,
    HINT_NONE,
    MAX_BLOCKS,
    NO_BLOCK,
    POLICY_LFU,
    POLICY_LRU,
    POLICY_NAMES,
    POLICY_SLRU,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_MAX,
    PRIORITY_NORMAL,
    REUSE_FIFO,
    REUSE_LIFO,
    REUSE_LOWEST,
    REUSE_NAMES,
    STREAM_K,
    STREAM_SHARED,
    STREAM_V,
    BusyError,
    CorruptError,
    DoubleFreeError,
    Error,
    ExhaustedError,
    InvalidArgumentError,
    NoMemoryError,
    NotFoundError,
    NotOwnerError,
    OwnerActiveError,
    Pool,
    RangeError,
    Sequence,
    SpaceError,
    hash_external,
    strerror,
)

__version__ = "%d.%d.%d" % (_kvpool.VERSION_MAJOR, _kvpool.VERSION_MINOR, _kvpool.VERSION_PATCH)

#: status code -> exception class (KVP_OK has none)
EXCEPTIONS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError, ExhaustedError, NotFoundError, NotOwnerError, DoubleFreeError,
        OwnerActiveError, BusyError, NoMemoryError, RangeError, SpaceError, CorruptError,
    )
}

_hashers: dict = {}
_hashers_lock = _threading.Lock()


def _hasher(block_size: int, alg: str, root_seed: bytes | None) -> Pool:
    key = (block_size, alg, root_seed)
    with _hashers_lock:
        p = _hashers.get(key)
        if p is None:
            p = Pool(block_size=block_size, num_blocks=0, hash_alg=alg, root_seed=root_seed)
            _hashers[key] = p
        return p


def hash_block(tokens, parent: bytes | None = None, start: int = 0, *, block_size: int | None = None,
               alg: str = "sha256", extra: dict | None = None, root_seed: bytes | None = None) -> bytes:
    """Hash one full block (``len(tokens)`` tokens unless ``block_size`` is given).

    Bytes in, bytes out: ``parent`` is the previous block's 32-byte hash (None
    for the first block, which is then chained to ``root_seed``, default all
    zero).  The exact bytes hashed are documented in kvpool.h.
    """
    bs = len(tokens) if block_size is None else block_size
    return _hasher(bs, alg, root_seed).hash_block(tokens, parent, start, extra)


def hash_tokens(tokens, block_size: int = 16, *, alg: str = "sha256", extra: dict | None = None,
                root_seed: bytes | None = None) -> bytes:
    """Hash every full block of ``tokens`` as a chain; 32 bytes per block."""
    return _hasher(block_size, alg, root_seed).hash_tokens(tokens, extra)


__all__ = [n for n in dir() if not n.startswith("_")]
