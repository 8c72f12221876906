# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat.vllm_mlx — drop-in for vllm-mlx's ``PagedCacheManager`` (vllm_mlx.paged_cache).

Owns ``PagedCacheManager``, ``CacheBlock`` (alias ``KVCacheBlock``),
``BlockTable``, ``CacheStats``, ``compute_block_hash`` and ``install()`` /
``uninstall()``, with the original's names and signatures, as Python over a
native ``kvpool.Pool``: block 0 is the null block, one free queue in the
order blocks were freed (reuse ``fifo``, LRU eviction), ref counts, and the
chained-hash prefix index.  ``compute_block_hash`` and the legacy
``PagedCacheManager.compute_block_hash`` produce the same bytes as the
original's, so hashes stay comparable across the two.

No per-block dict or object on the hot paths: a manager's blocks hold
nothing but their id (see ``CacheBlock``); their prefix hash is the pool's
(``Pool.block_hash``), their ``token_count`` and ``last_access`` are in two
arrays, their cache data and legacy hash in two dicts (only blocks that have
one; the pool's eviction callback clears them).  Both hashes of a block are
computed in C (``_kvpool.mlx_block_hash``, byte-identical to the
original's Python; a token list it does not format falls back to Python).
``free_block`` is one native ``free_one`` (which returns the references
left), ``ref_count`` one native ``ref_count`` and a prefix lookup one
native ``lookup`` returning -1 on a miss, none of them building a dict or
an exception.

Deviations, each following the original's documented intent (also in
docs/PYTHON.md):

- ``CacheBlock`` objects of a manager are canonical per id; ``ref_count``,
  ``block_hash``, ``is_null`` and the free-list links (always None) are
  read-only on them, ``token_count`` holds a 64-bit int, and they take no
  attributes beyond the original's fields.  Constructed directly, a ``CacheBlock`` is a plain record taking
  the original dataclass's fields; it compares by identity (the original's
  dataclass compared field by field).
- ``get_blocks_for_generation``: the original copies every shared block and
  drops the source reference without freeing it when it reaches zero (a
  leak); here a copy takes a fresh block, drops one reference on the source
  through the pool (freed when it was the last) and counts ``cow_copies``.
- ``increment_ref`` / ``fork_block_table`` work on any block in use; the
  original's ``shared_blocks`` bookkeeping is replaced by the pool's exact
  count (``get_stats`` recomputed it anyway).
- ``evict_lru_blocks(n)`` returns how many free blocks it went over, as the
  original, and evicts the content of the least recently freed cached
  blocks; the original rotated the front of its one queue, vacant blocks
  included.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NewType, Optional, Tuple

from .. import _kvpool
from . import _adopt
from ._block import IdBlock

__all__ = ["install", "uninstall", "PagedCacheManager", "CacheBlock", "KVCacheBlock",
           "BlockTable", "CacheStats",
           "BlockHash", "compute_block_hash"]

logger = logging.getLogger(__name__)

BlockHash = NewType("BlockHash", bytes)


def compute_block_hash(parent_hash: Optional[BlockHash], token_ids: List[int],
                       extra_keys: Optional[Tuple[Any, ...]] = None) -> BlockHash:
    """Chained content hash of one block (parent hash, tokens, optional extra keys)."""
    if not extra_keys and type(token_ids) is list:
        h = _native_hash(parent_hash, token_ids, 0, len(token_ids), False)
        if h is not None:
            return BlockHash(h)
    hasher = _sha256(parent_hash if parent_hash else b"vllm-mlx-root")
    hasher.update(str(tuple(token_ids)).encode())
    if extra_keys:
        hasher.update(str(extra_keys).encode())
    return BlockHash(hasher.digest())


_sha256 = hashlib.sha256
_native_hash = _kvpool.mlx_block_hash  # both hashes in C for a list of ints, else None
_native_prefix = _kvpool.mlx_prefix  # get_computed_blocks' walk in C
_native_cache = _kvpool.mlx_cache  # cache_full_blocks' loop in C
_native_add = _kvpool.mlx_add  # add_block_to_table for a manager's block in C
_native_take = _kvpool.mlx_take  # allocate_block in C
_low8 = (0xFF).__and__  # t & 0xFF, as the original's legacy hash takes each token


class CacheBlock(IdBlock):
    """KV cache block metadata.

    Constructed directly it takes the original dataclass's fields, by
    position or keyword, with the same defaults, and every field is a plain
    value.  The blocks a manager owns are its canonical objects, one per id,
    of a subclass made per manager: ``ref_count``, ``block_hash`` and
    ``is_null`` read the pool (read-only), ``token_count``, ``cache_data``,
    ``hash_value`` and ``last_access`` live in the manager's arrays, which
    that class points to (an ``IdBlock``: an ``int`` equal to its
    ``block_id`` that compares by identity, as the original's objects).
    """

    __slots__ = ()

    def __new__(cls, block_id: int, *args: Any, **kwargs: Any) -> "CacheBlock":
        return int.__new__(_RecordBlock if cls is CacheBlock else cls, block_id)

    def is_full(self, block_size: int) -> bool:
        """Check if block is at capacity."""
        return self.token_count >= block_size

    def is_shared(self) -> bool:
        """Check if block is shared (ref_count > 1)."""
        return self.ref_count > 1

    def touch(self) -> None:
        """Update last access time."""
        self.last_access = time.time()

    def __repr__(self) -> str:
        p, n = self.prev_free_block, self.next_free_block
        return (f"CacheBlock(id={int(self)}, ref={self.ref_count}, "
                f"tokens={self.token_count}, prev={p.block_id if p else None}, "
                f"next={n.block_id if n else None})")

    __str__ = __repr__


class _RecordBlock(CacheBlock):
    """A CacheBlock constructed directly: the original dataclass's fields as
    plain attributes."""

    def __init__(self, block_id: int, ref_count: int = 0, block_hash: Optional[BlockHash] = None,
                 prev_free_block: "Optional[CacheBlock]" = None,
                 next_free_block: "Optional[CacheBlock]" = None, is_null: bool = False,
                 cache_data: Optional[List[Tuple[Any, Any]]] = None, token_count: int = 0,
                 hash_value: Optional[str] = None, last_access: Optional[float] = None):
        self.ref_count = ref_count
        self.block_hash = block_hash
        self.prev_free_block = prev_free_block
        self.next_free_block = next_free_block
        self.is_null = is_null
        self.cache_data = cache_data
        self.token_count = token_count
        self.hash_value = hash_value
        self.last_access = time.time() if last_access is None else last_access

    def reset_hash(self) -> None:
        """Drop the block's hashes."""
        self.block_hash = None
        self.hash_value = None


def _fixed(name: str, why: str) -> Any:
    """A setter refusing to change a managed block's field the pool owns."""
    def put(self, value):
        raise AttributeError(f"{name} of a managed block {why}")
    return put


def _sparse(table: str) -> property:
    """A field kept in the manager's dict `table` (class attribute), only for
    blocks where it is not None."""
    def get(self):
        return getattr(self, table).get(int(self))

    def put(self, value):
        if value is None:
            getattr(self, table).pop(int(self), None)
        else:
            getattr(self, table)[int(self)] = value
    return property(get, put)


def _dense(table: str) -> property:
    """A field kept in the manager's array `table` (class attribute), indexed by id."""
    def get(self):
        return getattr(self, table)[self]

    def put(self, value):
        getattr(self, table)[self] = value
    return property(get, put)


class _ManagedBlock(CacheBlock):
    """A manager's block.  The per-manager subclass sets ``_pool`` (the
    native pool), ``_counts`` / ``_stamps`` (token counts, last access
    times: arrays by id) and ``_data`` / ``_legacy`` (cache data, legacy
    hashes: dicts by id, only for blocks that have one).  The blocks reach
    the manager only through the pool's eviction callback; the cycle this
    makes is the garbage collector's to break, as any object cycle."""

    __slots__ = ()
    ref_count = property(lambda self: self._pool.ref_count(self),
                         _fixed("ref_count", "is the pool's; use increment_ref / free_block"))
    block_hash = property(lambda self: self._pool.block_hash(self),
                          _fixed("block_hash", "is set by cache_full_blocks"))
    is_null = property(lambda self: int(self) == 0, _fixed("is_null", "is fixed (block 0)"))
    prev_free_block = property(lambda self: None,
                               _fixed("prev_free_block", "is None: the free queue lives in C"))
    next_free_block = property(lambda self: None,
                               _fixed("next_free_block", "is None: the free queue lives in C"))
    token_count = _dense("_counts")
    last_access = _dense("_stamps")
    cache_data = _sparse("_data")
    hash_value = _sparse("_legacy")

    def reset_hash(self) -> None:
        """Drop the block's hashes; a cached block leaves the prefix cache (an
        eviction: the manager's callback clears its legacy hash and data)."""
        if self._pool.block_hash(self) is not None:
            self._pool.unpublish(self)
        self.hash_value = None


KVCacheBlock = CacheBlock


class _AllocatedBlocks(Mapping):
    """Read-only mapping id -> CacheBlock of the blocks in use (the null block included)."""

    __slots__ = ("_mgr",)

    def __init__(self, mgr: "PagedCacheManager"):
        self._mgr = mgr

    def __contains__(self, block_id) -> bool:
        m = self._mgr
        return (type(block_id) is int and 0 <= block_id < m.max_blocks
                and m._ref_count(block_id) > 0)

    def __getitem__(self, block_id) -> CacheBlock:
        if block_id not in self:
            raise KeyError(block_id)
        return self._mgr.blocks[block_id]

    def get(self, block_id, default=None):
        return self[block_id] if block_id in self else default

    def __len__(self) -> int:
        return self._mgr._pool.stats()["in_use"]

    def __iter__(self):
        m = self._mgr
        return (i for i in range(m.max_blocks) if m._ref_count(i) > 0)


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
                                  prefix_caching=self.enable_caching, on_evict=self._evicted)
        self._last_access = array("d", [time.time()]) * self.max_blocks
        self._token_counts = array("q", bytes(8 * self.max_blocks))
        self._cache_data: Dict[int, Any] = {}  # block id -> cache data, for blocks with some
        self._hash_values: Dict[int, str] = {}  # block id -> legacy hash, for blocks with one
        cls = type("CacheBlock", (_ManagedBlock,), {
            "__slots__": (), "__module__": __name__, "_pool": self._pool,
            "_counts": self._token_counts, "_stamps": self._last_access,
            "_data": self._cache_data, "_legacy": self._hash_values})
        self.blocks: List[CacheBlock] = [int.__new__(cls, i) for i in range(self.max_blocks)]
        # What the per-block native calls need, in one tuple (mlx.c).
        self._native = (self._pool, self._token_counts, self._last_access, self.blocks, cls,
                        BlockTable)
        self.null_block = self.blocks[0]
        self.allocated_blocks = _AllocatedBlocks(self)
        self.hash_to_block: Dict[str, int] = {}
        self.request_tables: Dict[str, BlockTable] = {}
        self._hits = self._misses = self._cow = 0
        self._evict_base = 0


    def _evicted(self, h: Optional[bytes], block_id: Optional[int]) -> None:
        """The pool's eviction callback: the block's content left the prefix cache."""
        if block_id is None:
            return
        legacy = self._hash_values.pop(block_id, None)
        if legacy and self.hash_to_block.get(legacy) == block_id:
            del self.hash_to_block[legacy]
        if self._cache_data:
            self._cache_data.pop(block_id, None)

    def _ref_count(self, block_id: int) -> int:
        return self._pool.ref_count(block_id)

    # ---- properties -----------------------------------------------------
    @property
    def stats(self) -> CacheStats:
        return self.get_stats()

    @property
    def free_blocks(self) -> int:
        """Number of free blocks available."""
        return self._pool.free_count()

    @property
    def usage(self) -> float:
        """Cache usage ratio (0.0 to 1.0), the null block excluded."""
        total = self.max_blocks - 1
        return 0.0 if total <= 0 else 1.0 - self._pool.free_count() / total

    # ---- allocation -----------------------------------------------------
    # allocate_block and get_new_blocks are one native call each: under the
    # GIL that call is atomic, so they take no lock of their own.
    def allocate_block(self) -> Optional[CacheBlock]:
        """Allocate one block, or None when out of blocks."""
        block = _native_take(self._native)
        if block is None:
            logger.warning("Out of cache blocks")
        return block

    def get_new_blocks(self, num_blocks: int) -> List[CacheBlock]:
        """Allocate num_blocks blocks (vLLM style); ValueError if not enough are free."""
        if num_blocks <= 0:
            if num_blocks < 0:
                raise ValueError(f"Cannot allocate {num_blocks} blocks")
            return []
        try:
            ids = self._pool.alloc_blocks(num_blocks)
        except _kvpool.ExhaustedError:
            raise ValueError(f"Cannot allocate {num_blocks} blocks, only "
                             f"{self._pool.free_count()} available") from None
        blocks, stamp, now = self.blocks, self._last_access, time.time()
        for i in ids:
            stamp[i] = now
        return [blocks[i] for i in ids]

    def allocate_blocks_for_tokens(self, num_tokens: int) -> List[CacheBlock]:
        """Allocate enough blocks to hold num_tokens."""
        return self.get_new_blocks((num_tokens + self.block_size - 1) // self.block_size)

    def free_block(self, block_id: int) -> bool:
        """Drop one reference; True if the block became free."""
        with self._lock:
            if block_id == 0:
                return False  # the null block is never freed
            try:
                return self._pool.free_one(block_id) == 0
            except (_kvpool.Error, TypeError, OverflowError):
                logger.warning(f"Attempted to free unknown block: {block_id}")
                return False

    decrement_ref = free_block

    def free_block_batch(self, blocks: Iterable[CacheBlock]) -> None:
        """Drop one reference on each block, in order (the first given is reused first)."""
        with self._lock:
            self._release([b.block_id for b in blocks if b.block_id != 0])

    def _release(self, ids: List[int]) -> None:
        """Drop one reference per id in one native call; when one of them is not
        in use (the call is refused whole), each is dropped on its own instead."""
        if not ids:
            return
        try:
            self._pool.free(ids)
        except (_kvpool.Error, TypeError, OverflowError):
            for i in ids:
                self.free_block(i)

    def increment_ref(self, block_id: int) -> bool:
        """One more reference on a block in use; False (and nothing changes) otherwise."""
        with self._lock:
            if type(block_id) is not int or not 0 < block_id < self.max_blocks:
                return False
            if self._ref_count(block_id) == 0:
                return False
            self._pool.claim(block_id)
            self._last_access[block_id] = time.time()
            return True

    def touch(self, blocks: Iterable[CacheBlock]) -> None:
        """Cache hit: one more reference each; a free block leaves the free queue."""
        with self._lock:
            blocks = [b for b in blocks if b.block_id != 0]
            ids = [b.block_id for b in blocks]
            pool = self._pool
            try:
                pool.claim_many(ids)
            except _kvpool.Error:  # a free block without a hash: taken by id
                for i in ids:
                    try:
                        pool.claim(i)
                    except _kvpool.NotFoundError:
                        pool.take_id(i)
            stamp, now = self._last_access, time.time()
            for i in ids:
                stamp[i] = now

    # ---- prefix cache ---------------------------------------------------
    def _lookup(self, block_hash: bytes) -> int:
        """Block id cached under block_hash, or -1."""
        try:
            return self._pool.lookup(block_hash, 0, -1)
        except _kvpool.InvalidArgumentError:  # not 32 bytes: never published
            return -1

    def get_cached_block(self, block_hash: BlockHash) -> Optional[CacheBlock]:
        """The cached block with this hash, or None (counts a hit or a miss)."""
        if not self.enable_caching:
            return None
        with self._lock:
            bid = self._lookup(bytes(block_hash))
            if bid < 0:
                self._misses += 1
                return None
            self._hits += 1
            return self.blocks[bid]

    def cache_full_blocks(self, blocks: List[CacheBlock], token_ids: List[int],
                          num_cached_blocks: int, num_full_blocks: int) -> None:
        """Hash blocks[num_cached_blocks:num_full_blocks] as a chain and index them."""
        if not self.enable_caching or num_cached_blocks >= num_full_blocks:
            return
        with self._lock:
            bs, publish, legacy_index = self.block_size, self._pool.publish, self.hash_to_block
            legacy_values, counts = self._hash_values, self._token_counts
            block_hash = self._pool.block_hash
            parent = block_hash(blocks[num_cached_blocks - 1]) if num_cached_blocks > 0 else None
            start = num_cached_blocks
            if type(token_ids) is list and type(blocks) is list:  # the loop below, in C
                start, parent = _native_cache(self._pool, blocks, token_ids, bs, start,
                                              num_full_blocks, parent, counts, legacy_values,
                                              legacy_index)
            for i in range(start, num_full_blocks):
                b = blocks[i]
                known = block_hash(b)
                if known is not None:
                    parent = known
                    continue
                both = _native_hash(parent, token_ids, i * bs, (i + 1) * bs, True)
                if both is None:
                    toks = token_ids[i * bs:(i + 1) * bs]
                    both = (compute_block_hash(parent, toks),
                            _sha256(bytes(map(_low8, toks))).hexdigest()[:16])
                h, legacy = both
                publish(b, h)
                counts[b] = max(0, min(bs, len(token_ids) - i * bs))
                legacy_values[int(b)] = legacy
                legacy_index[legacy] = int(b)
                parent = h

    def get_computed_blocks(self, token_ids: List[int]) -> Tuple[List[CacheBlock], int]:
        """Longest cached prefix of full blocks: (blocks, number of cached tokens)."""
        if not self.enable_caching:
            return [], 0
        with self._lock:
            bs, blocks, lookup = self.block_size, self.blocks, self._lookup
            if type(token_ids) is not list:
                token_ids = list(token_ids)
            # The loop below, in C up to the first miss (or a token it cannot hash).
            out, start, parent, missed = _native_prefix(self._pool, blocks, token_ids, bs)
            if missed:
                self._misses += 1
                self._hits += len(out)
                return out, len(out) * bs
            for i in range(start, len(token_ids) // bs):
                h = _native_hash(parent, token_ids, i * bs, (i + 1) * bs, False)
                if h is None:
                    h = compute_block_hash(parent, token_ids[i * bs:(i + 1) * bs])
                bid = lookup(h)
                if bid < 0:
                    self._misses += 1
                    break
                out.append(blocks[bid])
                parent = h
            self._hits += len(out)
            return out, len(out) * bs

    @staticmethod
    def compute_block_hash(tokens: List[int]) -> str:
        """Legacy string hash of a token list: 16 hex digits of SHA-256 over each token & 0xFF."""
        if type(tokens) is list:
            both = _native_hash(None, tokens, 0, len(tokens), True)
            if both is not None:
                return both[1]
        return _sha256(bytes(map(_low8, tokens))).hexdigest()[:16]

    def find_cached_block(self, tokens: List[int]) -> Optional[CacheBlock]:
        """Legacy lookup by token content among blocks in use."""
        with self._lock:
            bid = self.hash_to_block.get(self.compute_block_hash(tokens))
            if bid is not None and bid in self.allocated_blocks:
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
                self._release([bid for bid in t.block_ids if bid != 0])

    def add_block_to_table(self, table: BlockTable, block: CacheBlock, tokens_in_block: int) -> None:
        """Append block to table with tokens_in_block tokens (the block's
        token_count; a manager block's fill level in the pool, clamped to
        0..block_size, for the token statistics)."""
        if _native_add(self._native, table, block, tokens_in_block) is None:
            # One of this manager's blocks: one native call, which runs no Python
            # code, so under the GIL it is atomic and takes no lock, as allocate_block.
            return
        with self._lock:
            i = block.block_id
            block.token_count = tokens_in_block
            table.block_ids.append(i)
            table.num_tokens += tokens_in_block

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
                if bid not in self.allocated_blocks:
                    continue
                b = self.blocks[bid]
                if bid != 0 and b.is_shared():
                    nb = self._cow_copy_block(b)
                    if nb:
                        table.block_ids[i] = nb.block_id
                        out.append(nb)
                        copied = True
                        self._cow += 1
                    else:
                        out.append(b)
                else:
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
        """Go over the num_blocks least recently freed free blocks, evicting
        the cached content among them; returns how many were gone over."""
        with self._lock:
            n = min(num_blocks, self._pool.free_count())
            if n <= 0:
                return 0
            self._pool.evict(n)
            logger.info(f"Evicted {n} LRU blocks from cache")
            return n

    def handle_memory_pressure(self, requested_blocks: int) -> bool:
        """True when requested_blocks are free (evicting cached content first when short)."""
        with self._lock:
            free = self._pool.free_count()
            if free >= requested_blocks:
                return True
            self.evict_lru_blocks(requested_blocks - free)
            return self._pool.free_count() >= requested_blocks

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
                used = self._pool.stats()["in_use"]
                logger.warning(f"Cannot reset cache: {used - 1} blocks in use")
                return False
            self.hash_to_block.clear()
            self._hash_values.clear()
            self._cache_data.clear()
            self._hits = self._misses = 0
            self._evict_base = self._pool.stats()["evictions"]
            return True

    def clear(self) -> None:
        """Back to the just-created state."""
        with self._lock:
            self._pool.close()
            self._make_pool()
            logger.info("PagedCacheManager cleared")


# ---- adoption -------------------------------------------------------------
_NAMES = {"PagedCacheManager": PagedCacheManager, "CacheBlock": CacheBlock,
          "KVCacheBlock": KVCacheBlock, "BlockTable": BlockTable, "CacheStats": CacheStats,
          "compute_block_hash": compute_block_hash}
_adoption = _adopt.Adoption("vllm_mlx", patch={"vllm_mlx.paged_cache": _NAMES},
                            register={"vllm_mlx.paged_cache": dict(_NAMES, BlockHash=BlockHash)})


def install() -> bool:
    """Make vllm-mlx use this PagedCacheManager and its block classes
    (``vllm_mlx.paged_cache`` and the modules that imported them by name); without
    vllm-mlx, register this module as ``vllm_mlx.paged_cache``.  True when
    vllm-mlx itself was patched."""
    return _adoption.install()


def uninstall() -> None:
    """Undo install()."""
    _adoption.uninstall()
