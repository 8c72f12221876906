# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat.vllm — drop-in for vLLM v1's ``BlockPool`` (vllm/v1/core/block_pool.py).

Owns the vLLM-shaped face of kvpool: ``BlockPool`` as vLLM's KVCacheManager
uses it, its canonical ``KVCacheBlock`` objects, the KV-cache event classes
(vLLM's own when vLLM is importable) and ``install()`` / ``uninstall()``.
The hot path (``get_new_blocks``, ``free_blocks``, ``touch``, the lookup
behind ``get_cached_block``, ``get_num_free_blocks``, ``get_usage`` and the
block objects) is implemented in C in ``kvpool._kvpool._VllmBlockPool``; the
rest is Python over it.  The pool underneath is a kvpool pool with a null
block (id 0), prefix caching as configured and reuse order ``fifo`` — one
free queue, never-used blocks first in id order, freed blocks appended in
the order given, cached content evicted when its block is handed out again.

Semantics follow current vLLM: ``touch`` takes a flat sequence of blocks (a
sequence of groups is accepted too); ``get_cached_block(block_hash,
kv_cache_group_ids)`` takes its arguments by position or keyword;
``cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks,
block_size, kv_cache_group_id)`` reads ``request.block_hashes``, hashes
longer than 32 bytes included (folded, see ``_fold``); ``take_events``
returns ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` with every
field the class has, carrying 64-bit integer hashes; ``free_block_queue``
and ``cached_block_hash_to_block`` are read-only views of what vLLM's own
code reads of them.  ``hash_block_tokens`` is vLLM's engine-side block hash
(same values), computed in C under vLLM's default ``sha256`` without extra
keys (``_kvpool.vllm_block_hash``, vhash.c); ``install()`` puts it in
``vllm.v1.core.kv_cache_utils``, where vLLM's request block hasher looks it
up.

Deviations (also in docs/PYTHON.md):

- Blocks are canonical objects created once; ``block_id``, ``ref_cnt``,
  ``block_hash`` and ``is_null`` are read-only views of the C state (vLLM's
  are writable dataclass fields; vLLM code only writes them from the pool).
  The free-list links are not exposed and ``free_block_queue`` offers
  ``num_free_blocks`` only: the queue lives in C.  ``blocks`` is a
  read-only sequence over the C array of blocks (slices give lists), not a
  list: a list would cost 8 bytes per block.
- The free queue follows vLLM since its PR #42656: a freed block without a
  hash goes to the head, cached blocks to the tail (kvpool's ``lifo``
  order).  The null block is taken at construction (vLLM takes it on first
  use of ``null_block``).
- Freeing a block more times than it is referenced raises
  ``kvpool.DoubleFreeError`` and changes nothing (vLLM lets ``ref_cnt`` go
  negative).  The null block is skipped by ``free_blocks`` and ``touch``.
- A block cached under a folded long hash reports the fold as its
  ``block_hash``.
- Blocks of another class (vLLM's own ``KVCacheBlock(i)``) given to
  ``free_blocks``, ``touch`` or ``cache_full_blocks`` stand for this pool's
  block of their ``block_id``.
- Events: a hash is announced when its first copy enters the cache and
  removed when its last copy leaves (vLLM reports every copy); each removed
  hash is one ``BlockRemoved`` with the group it was cached in, as vLLM
  sends one per evicted block; the event
  queue is bounded (2 x num_gpu_blocks hashes, at least 4096) between two
  ``take_events`` calls — on overflow an ``AllBlocksCleared`` tells the
  subscriber to start over, instead of growing without bound.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Optional, Sequence

from .. import _kvpool
from . import _adopt
from .._kvpool import KVCacheBlock

__all__ = [
    "install", "uninstall", "BlockPool", "KVCacheBlock", "KVCacheEvent", "BlockStored", "BlockRemoved",
    "AllBlocksCleared", "MEDIUM_GPU", "hash_block_tokens", "init_none_hash",
]

logger = logging.getLogger(__name__)

try:  # vLLM's own event classes when vLLM is importable (isinstance holds for them)
    from vllm.distributed.kv_events import (  # type: ignore[import-not-found]
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        KVCacheEvent,
    )
    try:
        from vllm.distributed.kv_events import MEDIUM_GPU  # type: ignore[import-not-found]
    except ImportError:
        MEDIUM_GPU = "GPU"
except ImportError:
    MEDIUM_GPU = "GPU"

    class KVCacheEvent:  # type: ignore[no-redef]
        """Base class of the KV-cache events (vllm.distributed.kv_events)."""

    @dataclass
    class BlockStored(KVCacheEvent):  # type: ignore[no-redef]
        """Blocks entered the prefix cache (hashes as 64-bit integers); vLLM's fields."""
        block_hashes: list
        parent_block_hash: Optional[int]
        token_ids: list
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str] = MEDIUM_GPU
        lora_name: Optional[str] = None
        extra_keys: Optional[list] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None

    @dataclass
    class BlockRemoved(KVCacheEvent):  # type: ignore[no-redef]
        """Blocks left the prefix cache."""
        block_hashes: list
        medium: Optional[str] = MEDIUM_GPU
        group_idx: Optional[int] = None

    @dataclass
    class AllBlocksCleared(KVCacheEvent):  # type: ignore[no-redef]
        """The whole prefix cache was dropped (or events were lost)."""


_FIELDS: dict = {}


def _event(cls, **fields):
    """cls(**fields) keeping only the fields this version of the class has."""
    names = _FIELDS.get(cls)
    if names is None:
        names = getattr(cls, "__struct_fields__", None)  # vLLM's msgspec structs
        if names is None:
            names = tuple(f.name for f in dataclasses.fields(cls))
        _FIELDS[cls] = names = frozenset(names)
    return cls(**{k: v for k, v in fields.items() if k in names})


def _ext(h: bytes) -> int:
    """vLLM's integer form of a block hash: the last 8 bytes, big-endian."""
    return int.from_bytes(bytes(h)[-8:], "big") or 1


def _fold(h: bytes) -> bytes:
    """The 32-byte key of a hash longer than 32 bytes (vLLM concatenates hashes
    when a group's block size is a multiple of the hash block size): 24 bytes
    of SHA-256 over all of it, then its own last 8 bytes, so the integer in
    events (the last 8 bytes) is the one vLLM reports for it."""
    h = bytes(h)
    return hashlib.sha256(h).digest()[:24] + h[-8:]


_native_get_cached_block = _kvpool._VllmBlockPool.get_cached_block


class _FreeQueueView:
    """What vLLM's code reads of ``BlockPool.free_block_queue``."""

    __slots__ = ("_bp",)

    def __init__(self, bp: "BlockPool"):
        self._bp = bp

    @property
    def num_free_blocks(self) -> int:
        return self._bp.get_num_free_blocks()


class _CachedBlocksView:
    """What vLLM's code reads of ``BlockPool.cached_block_hash_to_block``
    (``BlockHashToBlockMap``): the block cached under a BlockHashWithGroupId
    (the block hash, then the group id as 4 big-endian bytes), and the count."""

    __slots__ = ("_bp",)

    def __init__(self, bp: "BlockPool"):
        self._bp = bp

    def get_one_block(self, key: bytes):
        key = bytes(key)
        if len(key) < 5:
            return None
        got = self._bp.get_cached_block(key[:-4], [int.from_bytes(key[-4:], "big")])
        return None if got is None else got[0]

    def __contains__(self, key: bytes) -> bool:
        return self.get_one_block(key) is not None

    def __len__(self) -> int:
        return self._bp.pool.stats()["indexed"]

    @property
    def _cache(self) -> "MappingProxyType":
        """The index as vLLM's map holds it, read-only and made on each read
        (O(blocks)): BlockHashWithGroupId -> the block cached under it, or
        {block id: block} when more than one is."""
        out: dict = {}
        for b in self._bp.blocks[1:]:
            key = b.block_hash
            if key is None:
                continue
            prev = out.get(key)
            if prev is None:
                out[key] = b
            elif isinstance(prev, dict):
                prev[b.block_id] = b
            else:
                out[key] = {prev.block_id: prev, b.block_id: b}
        return MappingProxyType(out)


class BlockPool(_kvpool._VllmBlockPool):
    """vLLM v1 BlockPool over kvpool.

    Args:
        num_gpu_blocks: number of blocks (block 0 is the null block).
        enable_caching: whether to enable prefix caching.
        hash_block_size: tokens per hashed block.
        enable_kv_cache_events: whether to record KV-cache events.
        metrics_collector: accepted for signature compatibility; not called.
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int = 16,
                 enable_kv_cache_events: bool = False, metrics_collector: Any = None):
        if not isinstance(num_gpu_blocks, int) or num_gpu_blocks <= 0:
            raise ValueError("num_gpu_blocks must be a positive int")
        self.metrics_collector = metrics_collector
        self.kv_event_queue: list = []
        self._groups: dict = {}  # event hash -> groups it is cached in (events enabled only)
        super().__init__(num_gpu_blocks, enable_caching, hash_block_size,
                         enable_kv_cache_events)

    # ---- lookups and views ----------------------------------------------
    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Sequence[int]):
        """The cached block of each group for block_hash (a list), or None when
        any group misses.  Arguments by position or keyword, as vLLM's; a hash
        longer than 32 bytes is looked up under its fold (see ``_fold``)."""
        if len(block_hash) > 32:
            block_hash = _fold(block_hash)
        return _native_get_cached_block(self, block_hash, kv_cache_group_ids)

    @property
    def free_block_queue(self) -> "_FreeQueueView":
        """Read-only view of the free queue: ``num_free_blocks`` (vLLM's code reads
        only that; the queue itself lives in C)."""
        return _FreeQueueView(self)

    @property
    def cached_block_hash_to_block(self) -> "_CachedBlocksView":
        """Read-only view of the prefix index: ``get_one_block(key)`` and ``len()``."""
        return _CachedBlocksView(self)

    # ---- events ---------------------------------------------------------
    def _drain(self, stored_tokens=None, group_idx=None) -> None:
        """Move native events into kv_event_queue as vLLM event objects."""
        if not self.enable_kv_cache_events:
            return
        events, _dropped = self.pool.events_take()
        if stored_tokens is not None:
            # One cache_full_blocks call = one BlockStored, as in vLLM.
            merged, rest = [], []
            for e in events:
                (merged if e[0] == _kvpool.EVENT_STORED else rest).append(e)
            if merged:
                hs = tuple(h for e in merged for h in e[1])
                events = rest + [(_kvpool.EVENT_STORED, hs, None, (), merged[0][4], None, (),
                                  merged[0][7])]
        for kind, hashes, parent, tokens, block_size, lora_name, _mm, medium in events:
            if kind == _kvpool.EVENT_STORED:
                toks = list(tokens)
                lora_id = None
                parent_hash = parent
                if stored_tokens is not None:
                    toks, lora_id, lora_name, parent_hash = stored_tokens(list(hashes))
                self.kv_event_queue.append(_event(
                    BlockStored, block_hashes=list(hashes), parent_block_hash=parent_hash,
                    token_ids=toks, block_size=block_size, lora_id=lora_id, medium=medium,
                    lora_name=lora_name, extra_keys=None, group_idx=group_idx))
            elif kind == _kvpool.EVENT_REMOVED:
                self._removed(hashes, medium)
            else:
                self._groups.clear()
                self.kv_event_queue.append(_event(AllBlocksCleared))

    def _removed(self, hashes, medium) -> None:
        """One BlockRemoved per hash that left the cache, as vLLM sends one per
        evicted block, with the group it was cached in."""
        groups, queue = self._groups, self.kv_event_queue
        for h in hashes:
            gids = groups.get(h)
            gid = gids.pop(0) if gids else None
            if gids == []:
                del groups[h]
            queue.append(_event(BlockRemoved, block_hashes=[h], medium=medium, group_idx=gid))

    def take_events(self) -> list:
        """Atomically take all events and clear the queue."""
        if not self.enable_kv_cache_events:
            return []
        self._drain()
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    # ---- caching --------------------------------------------------------
    def cache_full_blocks(self, request: Any, blocks: list, num_cached_blocks: int,
                          num_full_blocks: int, block_size: int, kv_cache_group_id: int) -> None:
        """Cache blocks[num_cached_blocks:num_full_blocks] under request.block_hashes.

        A partial block is never passed here by vLLM's manager, so it stays
        unhashed until it is full.  Null blocks are skipped.
        """
        if not self.enable_caching or num_cached_blocks >= num_full_blocks:
            return
        hashes = request.block_hashes
        if len(hashes) < num_full_blocks:
            raise ValueError("request.block_hashes is shorter than num_full_blocks")
        if block_size != self.hash_block_size:
            raise ValueError("block_size must equal hash_block_size in this drop-in")
        new_blocks = blocks[num_cached_blocks:num_full_blocks]
        new_hashes = hashes[num_cached_blocks:num_full_blocks]
        keys = [_fold(h) if len(h) > 32 else h for h in new_hashes]
        if not self.enable_kv_cache_events:
            self._cache_blocks(new_blocks, keys, kv_cache_group_id)
            return
        self._drain()
        self._cache_blocks(new_blocks, keys, kv_cache_group_id)
        all_tokens = getattr(request, "all_token_ids", None)
        lora = getattr(request, "lora_request", None)
        index = {}
        for i, h in enumerate(new_hashes):
            index.setdefault(_ext(h), num_cached_blocks + i)

        groups = self._groups

        def stored(announced):
            for x in announced:
                groups.setdefault(x, []).append(kv_cache_group_id)
            toks = []
            if all_tokens is not None:
                for x in announced:
                    i = index.get(x)
                    if i is not None:
                        toks.extend(all_tokens[i * block_size:(i + 1) * block_size])
            first = index.get(announced[0], num_cached_blocks) if announced else num_cached_blocks
            parent = _ext(hashes[first - 1]) if first > 0 else None
            return (toks, getattr(lora, "adapter_id", getattr(lora, "id", None)) if lora else None,
                    getattr(lora, "name", None) if lora else None, parent)

        self._drain(stored, kv_cache_group_id)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Evict the given blocks from the prefix cache (blocks in use stay allocated)."""
        self._drain()
        self._evict_block_ids(block_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block; False (and nothing changes) while blocks are in use."""
        self._drain()
        try:
            self.pool.reset_prefix_cache()
        except _kvpool.BusyError:
            used = self.num_gpu_blocks - self.get_num_free_blocks()
            logger.warning("Failed to reset prefix cache because some blocks (%d) are not "
                           "freed yet", used - 1)
            return False
        if self.enable_kv_cache_events:
            events, _ = self.pool.events_take()
            if not any(e[0] == _kvpool.EVENT_ALL_CLEARED for e in events):
                events.append((_kvpool.EVENT_ALL_CLEARED, (), None, (), 0, None, (), MEDIUM_GPU))
            for e in events:
                if e[0] == _kvpool.EVENT_ALL_CLEARED:
                    self._groups.clear()
                    self.kv_event_queue.append(_event(AllBlocksCleared))
                elif e[0] == _kvpool.EVENT_REMOVED:
                    self._removed(e[1], e[7])
        return True


# ---- block hashing -------------------------------------------------------
#: The hash of the first block's "parent" when vLLM's own (its
#: kv_cache_utils.NONE_HASH) is not there: set by init_none_hash, as vLLM's.
NONE_HASH: Optional[bytes] = None
_native_block_hash = _kvpool.vllm_block_hash
# A probe of the hash function: pickling it takes every path the C code writes.
_PROBE = (bytes(range(32)), (0, 1, 255, 256, 65535, 65536, 2 ** 31 - 1, -1, -2 ** 31, 7, 11, 13),
          None)
_PROBE_HASH = _native_block_hash(_PROBE[0], _PROBE[1])
_verdicts: dict = {}  # id(hash function) -> (the function, whether it is pickle + SHA-256)
_last_pickle_sha256: Any = None  # the last function judged so: one compare per block


def init_none_hash(hash_fn) -> None:
    """Set NONE_HASH as vLLM's init_none_hash does: hash_fn(PYTHONHASHSEED) when
    that is set, else 32 random bytes."""
    global NONE_HASH
    seed = os.getenv("PYTHONHASHSEED")
    NONE_HASH = os.urandom(32) if seed is None else hash_fn(seed)


def _none_hash(hash_fn) -> bytes:
    """vLLM's NONE_HASH when its kv_cache_utils has one, else this module's."""
    utils = sys.modules.get("vllm.v1.core.kv_cache_utils")
    h = getattr(utils, "NONE_HASH", None) if utils is not None else None
    if h is not None:
        return h
    if NONE_HASH is None:
        init_none_hash(hash_fn)
    return NONE_HASH


def _pickle_sha256(hash_fn) -> bool:
    """Whether hash_fn is vLLM's default ``sha256`` (SHA-256 of the pickle at the
    highest protocol), judged once per function from its value on a probe."""
    v = _verdicts.get(id(hash_fn))
    if v is None or v[0] is not hash_fn:
        if len(_verdicts) >= 64:  # an engine uses one function; never grow without bound
            _verdicts.clear()
        try:
            ok = hash_fn(_PROBE) == _PROBE_HASH
        except Exception:  # noqa: BLE001  (a function that cannot hash the probe is not it)
            ok = False
        v = _verdicts[id(hash_fn)] = (hash_fn, ok)
    if v[1]:
        global _last_pickle_sha256
        _last_pickle_sha256 = hash_fn
    return v[1]


def hash_block_tokens(hash_function, parent_block_hash, curr_block_token_ids,
                      extra_keys=None) -> bytes:
    """vLLM's ``kv_cache_utils.hash_block_tokens``, same value: the hash of
    (parent hash, the block's tokens as a tuple, extra keys) under
    hash_function, the parent of the first block being NONE_HASH.  Under
    vLLM's default ``sha256`` without extra keys it is computed in C from the
    tokens in place (``_kvpool.vllm_block_hash``); otherwise as vLLM does."""
    if not parent_block_hash:
        parent_block_hash = _none_hash(hash_function)
    if extra_keys is None and (hash_function is _last_pickle_sha256
                               or _pickle_sha256(hash_function)):
        h = _native_block_hash(parent_block_hash, curr_block_token_ids)
        if h is not None:
            return h
    return hash_function((parent_block_hash, tuple(curr_block_token_ids), extra_keys))


# ---- adoption -------------------------------------------------------------
_adoption = _adopt.Adoption(
    "vllm",
    patch={"vllm.v1.core.block_pool": {"BlockPool": BlockPool}},
    optional={"vllm.v1.core.kv_cache_utils": {"hash_block_tokens": hash_block_tokens}},
    register={"vllm.v1.core.block_pool": {"BlockPool": BlockPool},
              "vllm.v1.core.kv_cache_utils": {"KVCacheBlock": KVCacheBlock},
              "vllm.distributed.kv_events": {
                  "KVCacheEvent": KVCacheEvent, "BlockStored": BlockStored,
                  "BlockRemoved": BlockRemoved, "AllBlocksCleared": AllBlocksCleared,
                  "MEDIUM_GPU": MEDIUM_GPU}})


def install() -> bool:
    """Make vLLM use this BlockPool: ``vllm.v1.core.block_pool.BlockPool`` and every
    loaded vLLM module that imported it by name, and this ``hash_block_tokens`` (same
    values) as ``vllm.v1.core.kv_cache_utils.hash_block_tokens``; without vLLM,
    register this module's classes under vLLM's module paths.  True when vLLM itself
    was patched."""
    return _adoption.install()


def uninstall() -> None:
    """Undo install()."""
    _adoption.uninstall()
