"""kvpool.compat.atom — drop-in for AMD ATOM's ``BlockPool`` (atom.model_engine).

Owns ``BlockPool``, ``BlockRetirement`` and a ``Block`` record with the
original's fields, as Python over a native ``kvpool.Pool`` configured like
ATOM: reuse order ``lowest`` (vacant blocks lowest id first, then cached
blocks least recently freed first), lazy eviction with ``on_evict(hash)``
fired when a cached block is handed out again, ``extend`` up to
``max_blocks`` and ``retire_top`` with relocation.

ATOM hashes are integers; a hash ``h`` (0 <= h < 2**64) is stored as the
last 8 bytes (big-endian) of the 32-byte kvpool hash and comes back as the
same integer.

Deviations (also in docs/PYTHON.md):

- ``lookup`` returns the block published *first* that is still indexed
  (kvpool's rule); the original's dict kept the *last* one published, which
  left the earlier block unreachable by hash while still being "cached".
- ``pop()`` takes the block (and evicts its content, firing ``on_evict``)
  immediately; the original only removed it from the free set and evicted
  at the following ``allocate(block_id)``.  ``allocate`` of a popped id
  completes the hand-out as before.
- ``clear_index`` fires no ``on_evict`` (as the original) — the native
  "all cleared" notice is swallowed.
- ``on_evict`` runs once the pool call that evicted has completed (kvpool
  delivers evictions after the library call returns), so it may query or
  change the pool (``num_free``, ``lookup``, ...) and sees the block already
  handed out.  An exception it raises is reported through
  ``sys.unraisablehook`` and the call's result stands; the original's would
  propagate out of the call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .. import _kvpool

__all__ = ["BlockPool", "BlockRetirement", "Block"]

_MASK = (1 << 64) - 1


def _to_hash(h: int) -> bytes:
    return bytes(24) + (h & _MASK).to_bytes(8, "big")


def _from_hash(b: bytes) -> int:
    return int.from_bytes(b[24:], "big")


@dataclass(frozen=True)
class BlockRetirement:
    """What taking the highest block out of the pool cost: ``moved_to`` is -1
    when the block was free and simply dropped, otherwise the id its contents
    now live in (every holder's table must follow)."""
    retired: int
    moved_to: int


class Block:
    """ATOM's block record; ``ref_count`` and ``hash`` read the pool's state."""

    __slots__ = ("block_id", "_pool", "_tokens")

    def __init__(self, block_id: int, pool: "BlockPool | None" = None):
        self.block_id = block_id
        self._pool = pool
        self._tokens: list = []

    @property
    def ref_count(self) -> int:
        if self._pool is None:
            return 0
        return self._pool._info(self.block_id)["ref_count"]

    @property
    def hash(self) -> int:
        if self._pool is None:
            return -1
        info = self._pool._info(self.block_id)
        return _from_hash(info["hash"]) if info["published"] else -1

    @property
    def token_ids(self) -> list:
        return self._tokens if self.hash != -1 else []

    def __repr__(self) -> str:
        return f"Block(block_id={self.block_id}, ref_count={self.ref_count}, hash={self.hash})"


class BlockPool:
    """Paged blocks with ref counts and a content-addressed index, over kvpool."""

    def __init__(self, num_blocks: int, on_evict: Optional[Callable[[int], None]] = None,
                 max_blocks: Optional[int] = None):
        self.max_blocks: int = num_blocks if max_blocks is None else max_blocks
        if not 0 <= num_blocks <= self.max_blocks:
            raise ValueError(f"{num_blocks} blocks outside 0..{self.max_blocks}")
        self._on_evict = on_evict
        self._pool = _kvpool.Pool(block_size=1, num_blocks=num_blocks,
                                  max_blocks=self.max_blocks, reuse="lowest",
                                  on_evict=self._evicted if on_evict else None)
        self.num_blocks: int = num_blocks
        self.blocks: list = [Block(i, self) for i in range(self.max_blocks)]
        self._popped: set = set()

    def _evicted(self, h: Optional[bytes], block: Optional[int]) -> None:
        if h is not None and self._on_evict is not None:
            self._on_evict(_from_hash(h))

    def _info(self, block_id: int) -> dict:
        try:
            return self._pool.block_info(block_id)
        except _kvpool.RangeError:
            return {"ref_count": 0, "published": False, "state": "vacant", "hash": None}

    # ---- counts ---------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self._pool.free_count()

    @property
    def num_used(self) -> int:
        return self._pool.stats()["in_use"] - len(self._popped)

    @property
    def num_indexed(self) -> int:
        """Blocks reachable by content hash, live or merely not yet overwritten."""
        return self._pool.stats()["indexed"]

    def has_free(self, n: int) -> bool:
        return self.num_free >= n

    def is_used(self, block_id: int) -> bool:
        return block_id not in self._popped and self._info(block_id)["state"] == "in_use"

    def block(self, block_id: int) -> Block:
        return self.blocks[block_id]

    # ---- index ----------------------------------------------------------
    def lookup(self, h: int) -> int:
        """Block id indexed under content hash h, or -1."""
        try:
            return self._pool.lookup(_to_hash(h))
        except _kvpool.NotFoundError:
            return -1

    def publish(self, block_id: int, h: int, token_ids: list) -> None:
        """Index block_id (in use) under the content hash of the tokens it now holds."""
        info = self._pool.block_info(block_id)
        if info["published"] and _from_hash(info["hash"]) != (h & _MASK):
            self._pool.unpublish(block_id)  # the original overwrote the block's hash
        self._pool.publish(block_id, _to_hash(h))
        self.blocks[block_id]._tokens = list(token_ids)

    def clear_index(self) -> None:
        """Drop every content-hash entry, keeping blocks live sequences hold."""
        self._pool.clear_index()

    # ---- allocation -----------------------------------------------------
    def pop(self) -> int:
        """Next free block id (vacant lowest first, then least recently freed cached)."""
        try:
            block_id = self._pool.take()
        except _kvpool.ExhaustedError:
            raise AssertionError("No free blocks available") from None
        self._popped.add(block_id)
        return block_id

    def allocate(self, block_id: int) -> Block:
        """Take block_id for fresh content (ref count 1), evicting whatever it held."""
        if block_id in self._popped:
            self._popped.discard(block_id)
        else:
            try:
                self._pool.take_id(block_id)
            except _kvpool.BusyError:
                raise AssertionError(f"block {block_id} is in use") from None
        self.blocks[block_id]._tokens = []
        return self.blocks[block_id]

    def claim(self, block_id: int) -> Block:
        """Take a share of block_id for the content it already holds."""
        self._pool.claim(block_id)
        return self.blocks[block_id]

    def free(self, block_id: int) -> None:
        self._popped.discard(block_id)
        self._pool.free(block_id)

    # ---- resizing -------------------------------------------------------
    def extend(self, count: int) -> int:
        """Grow by up to count blocks (capped at max_blocks); returns how many."""
        taken = self._pool.extend(min(count, self.max_blocks - self.num_blocks))
        self.num_blocks += taken
        return taken

    def retire_top(self) -> Optional[BlockRetirement]:
        """Take the highest block id out of the pool, or None if it cannot."""
        if self.num_blocks == 0:
            return None
        try:
            retired, moved_to = self._pool.retire_top()
        except _kvpool.ExhaustedError:
            return None
        self.num_blocks -= 1
        if moved_to is None:
            self.blocks[retired]._tokens = []
            return BlockRetirement(retired, -1)
        self.blocks[moved_to]._tokens = self.blocks[retired]._tokens
        self.blocks[retired]._tokens = []
        return BlockRetirement(retired, moved_to)
