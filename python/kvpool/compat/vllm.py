"""kvpool.compat.vllm — drop-in for vLLM v1's ``BlockPool`` (vllm/v1/core/block_pool.py).

Owns the vLLM-shaped face of kvpool: ``BlockPool`` as vLLM's KVCacheManager
uses it, its canonical ``KVCacheBlock`` objects and the KV-cache event
classes.  The hot path (``get_new_blocks``, ``free_blocks``, ``touch``,
``get_cached_block``, ``get_num_free_blocks``, ``get_usage`` and the block
objects) is implemented in C in ``kvpool._kvpool._VllmBlockPool``; the rest
is Python over it.  The pool underneath is a kvpool pool with a null block
(id 0), prefix caching as configured and reuse order ``fifo`` — vLLM's single
free queue, never-used blocks first in id order, freed blocks appended in the
order given, cached content evicted when its block is handed out again.

Semantics follow current vLLM (signatures of v0.11+): ``touch`` takes a flat
sequence of blocks (a sequence of groups is accepted too),
``cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks,
block_size, kv_cache_group_id)`` reads ``request.block_hashes``, and
``take_events`` returns ``BlockStored`` / ``BlockRemoved`` /
``AllBlocksCleared`` objects carrying 64-bit integer hashes.

Deviations (also in docs/PYTHON.md):

- Blocks are canonical objects created once; ``block_id``, ``ref_cnt``,
  ``block_hash`` and ``is_null`` are read-only views of the C state (vLLM's
  are writable dataclass fields; vLLM code only writes them from the pool).
  The free-list links (``prev_free_block``/``next_free_block``) and
  ``free_block_queue`` are not exposed: the queue lives in C.
- Freeing a block more times than it is referenced raises
  ``kvpool.DoubleFreeError`` and changes nothing (vLLM lets ``ref_cnt`` go
  negative).  The null block is skipped by ``free_blocks`` and ``touch``.
- Block hashes may be 1..32 bytes (vLLM's SHA-256 based hashes are 32).
- Events: a hash is announced when its first copy enters the cache and
  removed when its last copy leaves (vLLM reports every copy); the event
  queue is bounded (2 x num_gpu_blocks hashes, at least 4096) between two
  ``take_events`` calls — on overflow an ``AllBlocksCleared`` tells the
  subscriber to start over, instead of growing without bound.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .. import _kvpool
from .._kvpool import KVCacheBlock

__all__ = [
    "BlockPool", "KVCacheBlock", "KVCacheEvent", "BlockStored", "BlockRemoved",
    "AllBlocksCleared", "MEDIUM_GPU",
]

logger = logging.getLogger(__name__)

MEDIUM_GPU = "GPU"


class KVCacheEvent:
    """Base class of the KV-cache events (vllm.distributed.kv_events)."""


@dataclass
class BlockStored(KVCacheEvent):
    """Blocks entered the prefix cache (hashes as 64-bit integers)."""
    block_hashes: list
    parent_block_hash: Optional[int]
    token_ids: list
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = MEDIUM_GPU
    lora_name: Optional[str] = None


@dataclass
class BlockRemoved(KVCacheEvent):
    """Blocks left the prefix cache."""
    block_hashes: list
    medium: Optional[str] = MEDIUM_GPU


@dataclass
class AllBlocksCleared(KVCacheEvent):
    """The whole prefix cache was dropped (or events were lost)."""


def _ext(h: bytes) -> int:
    """vLLM's integer form of a block hash: the last 8 bytes, big-endian."""
    return int.from_bytes(bytes(h)[-8:], "big") or 1


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
        super().__init__(num_gpu_blocks, enable_caching, hash_block_size,
                         enable_kv_cache_events)

    # ---- events ---------------------------------------------------------
    def _drain(self, stored_tokens=None) -> None:
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
                self.kv_event_queue.append(BlockStored(
                    block_hashes=list(hashes), parent_block_hash=parent_hash, token_ids=toks,
                    block_size=block_size, lora_id=lora_id, medium=medium, lora_name=lora_name))
            elif kind == _kvpool.EVENT_REMOVED:
                self.kv_event_queue.append(BlockRemoved(block_hashes=list(hashes), medium=medium))
            else:
                self.kv_event_queue.append(AllBlocksCleared())

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
        if not self.enable_kv_cache_events:
            self._cache_blocks(new_blocks, new_hashes, kv_cache_group_id)
            return
        self._drain()
        self._cache_blocks(new_blocks, new_hashes, kv_cache_group_id)
        all_tokens = getattr(request, "all_token_ids", None)
        lora = getattr(request, "lora_request", None)
        index = {}
        for i, h in enumerate(new_hashes):
            index.setdefault(_ext(h), num_cached_blocks + i)

        def stored(announced):
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

        self._drain(stored)

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
                    self.kv_event_queue.append(AllBlocksCleared())
                elif e[0] == _kvpool.EVENT_REMOVED:
                    self.kv_event_queue.append(BlockRemoved(block_hashes=list(e[1]), medium=e[7]))
        return True
