"""kvpool.compat.vllm_mlx — drop-in for vllm-mlx's ``PagedCacheManager`` (vllm_mlx.paged_cache).

Owns ``PagedCacheManager``, ``CacheBlock`` (alias ``KVCacheBlock``),
``BlockTable``, ``CacheStats`` and ``compute_block_hash`` with the original's
names and signatures, as Python over a native ``kvpool.Pool``: block 0 is the
null block, one free queue in the order blocks were freed (reuse ``fifo``,
LRU eviction), ref counts, and the chained-hash prefix index.
``compute_block_hash`` produces the same bytes as the original (SHA-256 over
the parent hash, or ``b"vllm-mlx-root"``, then ``str(tuple(token_ids))`` and
``str(extra_keys)``), so hashes stay comparable across the two.

Deviations, each following the original's documented intent (also in
docs/PYTHON.md):

- ``CacheBlock`` objects are canonical per id; ``ref_count``, ``block_hash``
  and ``is_null`` read the pool's state.  ``prev_free_block`` /
  ``next_free_block`` are always None (the free queue lives in C).
- ``get_blocks_for_generation``: the original copies every shared block and
  drops the source reference without freeing it when it reaches zero (a
  leak); here a copy takes a fresh block, drops one reference on the source
  through the pool (freed when it was the last) and counts ``cow_copies``.
- ``increment_ref`` / ``fork_block_table`` work on any block in use; the
  original's ``shared_blocks`` bookkeeping is replaced by the pool's exact
  count (``get_stats`` recomputed it anyway).
- ``evict_lru_blocks`` evicts the content of the least recently freed cached
  blocks and leaves them free (the documented intent); the original popped
  and re-appended vacant blocks too, counting them as evicted.
- ``reset_prefix_cache`` keeps ``evictions`` as a running count (the
  original zeroed it together with hits and misses).
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NewType, Optional, Tuple

from .. import _kvpool

__all__ = ["PagedCacheManager", "CacheBlock", "KVCacheBlock", "BlockTable", "CacheStats",
           "BlockHash", "compute_block_hash"]

logger = logging.getLogger(__name__)

BlockHash = NewType("BlockHash", bytes)


def compute_block_hash(parent_hash: Optional[BlockHash], token_ids: List[int],
                       extra_keys: Optional[Tuple[Any, ...]] = None) -> BlockHash:
    """Chained content hash of one block (parent hash, tokens, optional extra keys)."""
    hasher = hashlib.sha256()
    hasher.update(parent_hash if parent_hash else b"vllm-mlx-root")
    hasher.update(bytes(str(tuple(token_ids)), "utf-8"))
    if extra_keys:
        hasher.update(bytes(str(extra_keys), "utf-8"))
    return BlockHash(hasher.digest())


class CacheBlock:
    """KV cache block metadata; pool-backed fields read the kvpool state."""

    __slots__ = ("block_id", "_mgr", "_hash", "cache_data", "token_count", "hash_value",
                 "last_access", "__weakref__")

    def __init__(self, block_id: int, mgr: "PagedCacheManager | None" = None):
        self.block_id = block_id
        self._mgr = mgr
        self._hash: Optional[bytes] = None
        self.cache_data = None
        self.token_count = 0
        self.hash_value: Optional[str] = None
        self.last_access = time.time()

    def _info(self) -> dict:
        return self._mgr._pool.block_info(self.block_id)

    @property
    def ref_count(self) -> int:
        return self._info()["ref_count"] if self._mgr else 0

    @property
    def block_hash(self) -> Optional[BlockHash]:
        if self._hash is None or self._mgr is None:
            return None
        info = self._info()
        if info["published"] and info["hash"] == self._hash:
            return BlockHash(self._hash)
        self._hash = None
        return None

    @property
    def is_null(self) -> bool:
        return self.block_id == 0

    prev_free_block = None
    next_free_block = None

    def is_full(self, block_size: int) -> bool:
        """Check if block is at capacity."""
        return self.token_count >= block_size

    def is_shared(self) -> bool:
        """Check if block is shared (ref_count > 1)."""
        return self.ref_count > 1

    def reset_hash(self) -> None:
        """Drop the block's hash from the cache (an eviction)."""
        if self.block_hash is not None:
            self._mgr._pool.unpublish(self.block_id)
        self._hash = None
        self.hash_value = None

    def touch(self) -> None:
        """Update last access time."""
        self.last_access = time.time()

    def __repr__(self) -> str:
        return (f"CacheBlock(id={self.block_id}, ref={self.ref_count}, "
                f"tokens={self.token_count}, prev=None, next=None)")


KVCacheBlock = CacheBlock


@dataclass
class BlockTable:
    """Per-request block table mapping logical to physical blocks."""
    request_id: str
    block_ids: List[int] = field(default_factory=list)
    num_tokens: int = 0

    def add_block(self, block_id: int, num_tokens: int) -> None:
        self.block_ids.append(block_id)
        self.num_tokens += num_tokens

    def __len__(self) -> int:
        return len(self.block_ids)

    def copy(self, new_request_id: str) -> "BlockTable":
        return BlockTable(request_id=new_request_id, block_ids=self.block_ids.copy(),
                          num_tokens=self.num_tokens)


@dataclass
class CacheStats:
    """Statistics for cache monitoring."""
    total_blocks: int = 0
    allocated_blocks: int = 0
    free_blocks: int = 0
    shared_blocks: int = 0
    total_tokens_cached: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cow_copies: int = 0
    evictions: int = 0


class PagedCacheManager:
    """Paged KV cache manager (vllm-mlx API) over kvpool."""

    def __init__(self, block_size: int = 64, max_blocks: int = 1000, enable_caching: bool = True):
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.enable_caching = enable_caching
        self._lock = threading.RLock()
        self._make_pool()

    def _make_pool(self) -> None:
        self._pool = _kvpool.Pool(block_size=self.block_size, num_blocks=self.max_blocks,
                                  null_block=True, reuse="fifo",
                                  prefix_caching=self.enable_caching)
        self.blocks: List[CacheBlock] = [CacheBlock(i, self) for i in range(self.max_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.token_count = 0
        self.hash_to_block: Dict[str, int] = {}
        self.request_tables: Dict[str, BlockTable] = {}
        self._hits = self._misses = self._cow = 0
        self._evict_base = 0

    # ---- properties -----------------------------------------------------
    @property
    def allocated_blocks(self) -> Dict[int, CacheBlock]:
        """Blocks in use (the null block included), by id."""
        return {b.block_id: b for b in self.blocks if b._info()["state"] == "in_use"}

    @property
    def stats(self) -> CacheStats:
        return self.get_stats()

    @property
    def free_blocks(self) -> int:
        """Number of free blocks available."""
        return self._pool.free_count()

    @property
    def usage(self) -> float:
        """Cache usage ratio (0.0 to 1.0)."""
        total = self.max_blocks
        return 0.0 if total == 0 else 1.0 - self.free_blocks / total

    # ---- allocation -----------------------------------------------------
    def allocate_block(self) -> Optional[CacheBlock]:
        """Allocate one block, or None when out of blocks."""
        with self._lock:
            try:
                block_id = self._pool.take()
            except _kvpool.ExhaustedError:
                logger.warning("Out of cache blocks")
                return None
            b = self.blocks[block_id]
            self._reset_block(b)
            return b

    def _reset_block(self, b: CacheBlock) -> None:
        if b.hash_value and self.hash_to_block.get(b.hash_value) == b.block_id:
            del self.hash_to_block[b.hash_value]
        b._hash = None
        b.hash_value = None
        b.cache_data = None
        b.token_count = 0
        b.touch()

    def get_new_blocks(self, num_blocks: int) -> List[CacheBlock]:
        """Allocate num_blocks blocks (vLLM style); ValueError if not enough are free."""
        with self._lock:
            if num_blocks == 0:
                return []
            free = self._pool.free_count()
            if num_blocks > free:
                raise ValueError(f"Cannot allocate {num_blocks} blocks, only {free} available")
            ids = self._pool.alloc_blocks(num_blocks)
            out = [self.blocks[i] for i in ids]
            for b in out:
                self._reset_block(b)
            return out

    def allocate_blocks_for_tokens(self, num_tokens: int) -> List[CacheBlock]:
        """Allocate enough blocks to hold num_tokens."""
        return self.get_new_blocks((num_tokens + self.block_size - 1) // self.block_size)

    def free_block(self, block_id: int) -> bool:
        """Drop one reference; True if the block became free."""
        with self._lock:
            if block_id == 0 or not 0 <= block_id < self.max_blocks:
                return False
            b = self.blocks[block_id]
            if b._info()["state"] != "in_use":
                logger.warning(f"Attempted to free unknown block: {block_id}")
                return False
            self._pool.free(block_id)
            return b._info()["state"] != "in_use"

    decrement_ref = free_block

    def increment_ref(self, block_id: int) -> bool:
        """One more reference on a block in use."""
        with self._lock:
            if not 0 < block_id < self.max_blocks:
                return False
            b = self.blocks[block_id]
            if b._info()["state"] != "in_use":
                return False
            self._pool.claim(block_id)
            b.touch()
            return True

    def touch(self, blocks: Iterable[CacheBlock]) -> None:
        """Cache hit: one more reference each; a free block leaves the free queue."""
        with self._lock:
            for b in blocks:
                if b.is_null:
                    continue
                try:
                    self._pool.claim(b.block_id)
                except _kvpool.NotFoundError:
                    self._pool.take_id(b.block_id)
                b.touch()

    # ---- prefix cache ---------------------------------------------------
    def get_cached_block(self, block_hash: BlockHash) -> Optional[CacheBlock]:
        """The cached block with this hash, or None (counts a hit or a miss)."""
        if not self.enable_caching:
            return None
        with self._lock:
            try:
                b = self.blocks[self._pool.lookup(bytes(block_hash))]
            except _kvpool.NotFoundError:
                self._misses += 1
                return None
            self._hits += 1
            return b

    def cache_full_blocks(self, blocks: List[CacheBlock], token_ids: List[int],
                          num_cached_blocks: int, num_full_blocks: int) -> None:
        """Hash blocks[num_cached_blocks:num_full_blocks] as a chain and index them."""
        if not self.enable_caching or num_cached_blocks >= num_full_blocks:
            return
        with self._lock:
            parent = blocks[num_cached_blocks - 1].block_hash if num_cached_blocks > 0 else None
            for i in range(num_cached_blocks, num_full_blocks):
                b = blocks[i]
                if b.block_hash is not None:
                    parent = b.block_hash
                    continue
                toks = token_ids[i * self.block_size:(i + 1) * self.block_size]
                h = compute_block_hash(parent, toks)
                self._pool.publish(b.block_id, h)
                b._hash = bytes(h)
                b.token_count = len(toks)
                legacy = self.compute_block_hash(toks)
                b.hash_value = legacy
                self.hash_to_block[legacy] = b.block_id
                parent = h

    def get_computed_blocks(self, token_ids: List[int]) -> Tuple[List[CacheBlock], int]:
        """Longest cached prefix of full blocks: (blocks, number of cached tokens)."""
        if not self.enable_caching:
            return [], 0
        with self._lock:
            out: List[CacheBlock] = []
            parent = None
            for i in range(len(token_ids) // self.block_size):
                h = compute_block_hash(parent, token_ids[i * self.block_size:(i + 1) * self.block_size])
                try:
                    out.append(self.blocks[self._pool.lookup(h)])
                except _kvpool.NotFoundError:
                    self._misses += 1
                    break
                self._hits += 1
                parent = h
            return out, len(out) * self.block_size

    @staticmethod
    def compute_block_hash(tokens: List[int]) -> str:
        """Legacy string hash of a token list (16 hex digits of SHA-256)."""
        return hashlib.sha256(b"".join(t.to_bytes(4, "big") for t in tokens)).hexdigest()[:16]

    def find_cached_block(self, tokens: List[int]) -> Optional[CacheBlock]:
        """Legacy lookup by token content among blocks in use."""
        with self._lock:
            bid = self.hash_to_block.get(self.compute_block_hash(tokens))
            if bid is not None and self.blocks[bid]._info()["state"] == "in_use":
                self.blocks[bid].touch()
                self._hits += 1
                return self.blocks[bid]
            self._misses += 1
            return None

    def register_block_hash(self, block: CacheBlock, tokens: List[int]) -> None:
        """Legacy: register a block's token hash for deduplication."""
        with self._lock:
            block.hash_value = self.compute_block_hash(tokens)
            self.hash_to_block[block.hash_value] = block.block_id

    # ---- block tables ---------------------------------------------------
    def create_block_table(self, request_id: str) -> BlockTable:
        with self._lock:
            t = BlockTable(request_id=request_id)
            self.request_tables[request_id] = t
            return t

    def get_block_table(self, request_id: str) -> Optional[BlockTable]:
        with self._lock:
            return self.request_tables.get(request_id)

    def get_or_create_block_table(self, request_id: str) -> BlockTable:
        with self._lock:
            if request_id not in self.request_tables:
                self.request_tables[request_id] = BlockTable(request_id=request_id)
            return self.request_tables[request_id]

    def delete_block_table(self, request_id: str) -> None:
        """Delete the table and drop its block references."""
        with self._lock:
            t = self.request_tables.pop(request_id, None)
            if t:
                for bid in t.block_ids:
                    self.free_block(bid)

    def add_block_to_table(self, table: BlockTable, block: CacheBlock, tokens_in_block: int) -> None:
        with self._lock:
            table.block_ids.append(block.block_id)
            block.token_count = tokens_in_block
            table.num_tokens += tokens_in_block
            if not block.is_null:
                self._pool.set_fill(block.block_id, min(tokens_in_block, self.block_size))

    def find_shared_prefix(self, tokens: List[int]) -> Tuple[List[int], List[int]]:
        """Legacy: leading full blocks found by find_cached_block, and the rest."""
        with self._lock:
            shared: List[int] = []
            rest = list(tokens)
            while len(rest) >= self.block_size:
                b = self.find_cached_block(rest[:self.block_size])
                if not b:
                    break
                shared.append(b.block_id)
                rest = rest[self.block_size:]
            return shared, rest

    def fork_block_table(self, source_table: BlockTable, new_request_id: str) -> BlockTable:
        """Copy a table for a new request; every block gains a reference."""
        with self._lock:
            t = source_table.copy(new_request_id)
            for bid in t.block_ids:
                self.increment_ref(bid)
            self.request_tables[new_request_id] = t
            return t

    def get_blocks_for_generation(self, table: BlockTable) -> Tuple[List[CacheBlock], bool]:
        """The table's blocks, copying shared ones first (copy-on-write)."""
        with self._lock:
            out: List[CacheBlock] = []
            copied = False
            for i, bid in enumerate(table.block_ids):
                b = self.blocks[bid]
                if bid == 0 or b._info()["state"] != "in_use":
                    continue
                if b.is_shared():
                    nb = self._cow_copy_block(b)
                    if nb:
                        table.block_ids[i] = nb.block_id
                        out.append(nb)
                        copied = True
                        self._cow += 1
                        continue
                out.append(b)
                b.touch()
            return out, copied

    def _cow_copy_block(self, source_block: CacheBlock) -> Optional[CacheBlock]:
        nb = self.allocate_block()
        if not nb:
            return None
        nb.token_count = source_block.token_count
        nb.cache_data = source_block.cache_data
        self._pool.free(source_block.block_id)
        return nb

    # ---- eviction, stats, reset ----------------------------------------
    def evict_lru_blocks(self, num_blocks: int) -> int:
        """Evict the content of up to num_blocks least recently freed cached blocks."""
        with self._lock:
            n = self._pool.evict(num_blocks)
            if n:
                logger.info(f"Evicted {n} LRU blocks from cache")
            return n

    def handle_memory_pressure(self, requested_blocks: int) -> bool:
        """True when requested_blocks are free (evicting cached content as needed)."""
        with self._lock:
            try:
                self._pool.ensure_free(min(requested_blocks, self.max_blocks))
            except _kvpool.ExhaustedError:
                pass
            return self.free_blocks >= requested_blocks

    def get_stats(self) -> CacheStats:
        with self._lock:
            s = self._pool.stats()
            return CacheStats(total_blocks=self.max_blocks, allocated_blocks=s["in_use"],
                              free_blocks=s["free"], shared_blocks=s["shared"],
                              total_tokens_cached=s["tokens_in_use"], cache_hits=self._hits,
                              cache_misses=self._misses, cow_copies=self._cow,
                              evictions=s["evictions"] - self._evict_base)

    def get_memory_usage(self) -> Dict[str, Any]:
        with self._lock:
            st = self.get_stats()
            q = st.cache_hits + st.cache_misses
            return {"block_size": self.block_size, "max_blocks": self.max_blocks,
                    "allocated_blocks": st.allocated_blocks, "free_blocks": st.free_blocks,
                    "shared_blocks": st.shared_blocks, "total_tokens_cached": st.total_tokens_cached,
                    "utilization": st.allocated_blocks / self.max_blocks,
                    "cache_hit_rate": st.cache_hits / q if q else 0}

    def reset_stats(self) -> None:
        with self._lock:
            self._hits = self._misses = self._cow = 0
            self._evict_base = self._pool.stats()["evictions"]

    def reset_prefix_cache(self) -> bool:
        """Forget all cached content; False while any block but the null block is in use."""
        with self._lock:
            try:
                self._pool.reset_prefix_cache()
            except _kvpool.BusyError:
                logger.warning("Cannot reset cache: blocks in use")
                return False
            self.hash_to_block.clear()
            for b in self.blocks:
                b._hash = None
                b.hash_value = None
                b.cache_data = None
            self._hits = self._misses = 0
            return True

    def clear(self) -> None:
        """Back to the just-created state."""
        with self._lock:
            self._pool.close()
            self._make_pool()
            logger.info("PagedCacheManager cleared")
