"""kvpool.compat.veloxquant — drop-in for VeloxQuant-MLX's ``BlockPoolAllocator``.

Owns ``PoolConfig``, ``Block``, ``AllocationStats``, ``BlockPoolAllocator`` and
the two exceptions with the names of ``veloxquant_mlx.memory.block_pool``,
as Python over one native, thread-safe ``kvpool.Pool`` (reuse order LIFO,
as the original; owners are the request ids; format tags per block; a
stats snapshot after every changing call, as the original keeps history).

Deviations (also in docs/PYTHON.md):

- With ``separate_kv=True`` the ``n_blocks`` initial blocks are split between
  the K and V lists (K gets the first ceil(n/2) ids); the original's docs do
  not say whether n_blocks is per stream or in total.
- ``Block`` objects handed out are canonical per id and read the pool's C
  state; assigning ``block.n_used`` goes through ``mark_used`` so the
  fragmentation count stays exact (the documented intent of ``mark_used``;
  writing the field directly in the original silently corrupts it).  The
  fill of a free block is not kept (``mark_used`` on a free block is a no-op).
- ``n_reused`` counts blocks (kvpool's ``reused``), not allocate() calls.
- ``free(blocks)`` is all-or-nothing: a block that is already free raises
  ``kvpool.DoubleFreeError`` and frees nothing.
- Exceptions derive from the kvpool ones (``BlockPoolExhaustedError`` is a
  ``kvpool.ExhaustedError``, ``OwnerAlreadyActiveError`` a
  ``kvpool.OwnerActiveError``).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields, replace
from typing import Optional

from .. import _kvpool

__all__ = ["PoolConfig", "Block", "AllocationStats", "BlockPoolAllocator",
           "BlockPoolExhaustedError", "OwnerAlreadyActiveError"]


class BlockPoolExhaustedError(_kvpool.ExhaustedError):
    """Not enough free blocks and the pool may not grow enough."""


class OwnerAlreadyActiveError(_kvpool.OwnerActiveError):
    """register_owner() for an owner that is still active."""


_FORMATS = {"fp16": 0, "bf16": 1, "fp8": 2, "int8": 3, "int4": 4, "int2": 5}
_STREAM_NAMES = {0: "kv", 1: "k", 2: "v"}


@dataclass
class PoolConfig:
    """Configuration for a BlockPoolAllocator (see the original's docs)."""
    block_size: int = 16
    n_blocks: int = 1024
    separate_kv: bool = True
    grow_on_exhaustion: bool = False
    max_blocks: Optional[int] = None


class Block:
    """A block of KV-cache storage.

    Constructed directly it is a plain record; the blocks an allocator hands
    out are bound to it and every field reads the pool's current state.
    """

    __slots__ = ("block_id", "_alloc", "_stream", "_format", "_n_used", "_owner", "_ever")

    def __init__(self, block_id: int, stream: str = "kv", format: str = "fp16", n_used: int = 0,
                 owner: Optional[int] = None, ever_allocated: bool = False):
        self.block_id = block_id
        self._alloc = None
        self._stream, self._format, self._n_used = stream, format, n_used
        self._owner, self._ever = owner, ever_allocated

    def _info(self):
        return self._alloc._pool.block_info(self.block_id)

    @property
    def stream(self) -> str:
        if self._alloc is None:
            return self._stream
        return _STREAM_NAMES[self._info()["stream"]]

    @property
    def format(self) -> str:
        if self._alloc is None:
            return self._format
        return self._alloc._format_name(self._info()["format"])

    @property
    def n_used(self) -> int:
        if self._alloc is None:
            return self._n_used
        return self._info()["fill"]

    @n_used.setter
    def n_used(self, value: int) -> None:
        if self._alloc is None:
            self._n_used = value
        else:
            self._alloc.mark_used(self, value)

    @property
    def owner(self) -> Optional[int]:
        if self._alloc is None:
            return self._owner
        info = self._info()
        if info["state"] != "in_use":
            return None
        return info["owner"]

    @property
    def ever_allocated(self) -> bool:
        if self._alloc is None:
            return self._ever
        return self._info()["ever_allocated"]

    def __repr__(self) -> str:
        return (f"Block(block_id={self.block_id}, stream={self.stream!r}, format={self.format!r}, "
                f"n_used={self.n_used}, owner={self.owner}, ever_allocated={self.ever_allocated})")


@dataclass
class AllocationStats:
    """Running counters for a BlockPoolAllocator (cumulative since construction)."""
    n_blocks: int
    n_allocations: int = 0
    n_frees: int = 0
    n_reused: int = 0
    n_exhausted: int = 0
    n_grown: int = 0
    n_retired: int = 0
    peak_blocks_in_use: int = 0
    _fragmented_count: int = 0
    _in_use: int = field(default=0, repr=False)

    @classmethod
    def _from_native(cls, s: dict) -> "AllocationStats":
        return cls(n_blocks=s["blocks"], n_allocations=s["alloc_calls"], n_frees=s["free_calls"],
                   n_reused=s["reused"], n_exhausted=s["exhausted"], n_grown=s["grown"],
                   n_retired=s["retired"], peak_blocks_in_use=s["peak_in_use"],
                   _fragmented_count=s["fragmented"], _in_use=s["in_use"])

    def blocks_in_use(self) -> int:
        """Current number of allocated (non-free) blocks."""
        return self._in_use

    def fragmentation(self) -> float:
        """Fraction of managed blocks allocated and partly filled (0.0 with no blocks)."""
        return self._fragmented_count / self.n_blocks if self.n_blocks else 0.0

    def snapshot(self) -> "AllocationStats":
        """An independent copy for history/export."""
        return replace(self)

    def to_prometheus(self, prefix: str = "veloxquant_block_pool") -> str:
        """Prometheus text exposition of these counters (newline-terminated)."""
        rows = [
            ("n_blocks", "gauge", "Total blocks managed by the pool.", self.n_blocks),
            ("blocks_in_use", "gauge", "Blocks currently allocated.", self.blocks_in_use()),
            ("peak_blocks_in_use", "gauge", "High-water mark of blocks in use.",
             self.peak_blocks_in_use),
            ("fragmentation", "gauge", "Fraction of blocks allocated and partly filled.",
             self.fragmentation()),
            ("allocations_total", "counter", "Successful allocate() calls.", self.n_allocations),
            ("frees_total", "counter", "free() calls.", self.n_frees),
            ("reused_total", "counter", "Allocations served by previously freed blocks.",
             self.n_reused),
            ("exhausted_total", "counter", "Allocation attempts refused for lack of blocks.",
             self.n_exhausted),
            ("grown_total", "counter", "Blocks added by growth on exhaustion.", self.n_grown),
            ("retired_total", "counter", "Blocks retired by shrink().", self.n_retired),
        ]
        out = []
        for name, kind, help_, value in rows:
            out.append(f"# HELP {prefix}_{name} {help_}")
            out.append(f"# TYPE {prefix}_{name} {kind}")
            out.append(f"{prefix}_{name} {value}")
        return "\n".join(out) + "\n"


class BlockPoolAllocator:
    """Fixed-size block allocator for KV-cache storage, over kvpool.

    Thread-safe (the native pool locks every call).  See the module docstring
    for the deviations from the original.
    """

    def __init__(self, config: Optional[PoolConfig] = None):
        self.config = config or PoolConfig()
        c = self.config
        if c.max_blocks is not None and c.max_blocks < c.n_blocks:
            raise ValueError("max_blocks below n_blocks")
        self._pool = _kvpool.Pool(
            block_size=c.block_size, num_blocks=c.n_blocks,
            max_blocks=(c.max_blocks or 0) if c.grow_on_exhaustion else c.n_blocks,
            separate_kv=c.separate_kv, grow_on_exhaustion=c.grow_on_exhaustion,
            thread_safe=True, reuse="lifo", history_every_call=True, history_len=1024,
            prefix_caching=False)
        self._blocks: dict = {}
        self._fmt_names = {v: k for k, v in _FORMATS.items()}
        self._fmt_tags = dict(_FORMATS)

    # ---- helpers --------------------------------------------------------
    def _stream(self, stream: str) -> int:
        if self.config.separate_kv:
            if stream == "k":
                return _kvpool.STREAM_K
            if stream == "v":
                return _kvpool.STREAM_V
            raise ValueError(f"invalid stream {stream!r} (expected 'k' or 'v')")
        if stream in ("k", "v", "kv"):
            return _kvpool.STREAM_SHARED
        raise ValueError(f"invalid stream {stream!r}")

    def _format_tag(self, fmt: str) -> int:
        tag = self._fmt_tags.get(fmt)
        if tag is None:
            tag = _kvpool.FMT_USER + len(self._fmt_tags) - len(_FORMATS)
            if tag > 255:
                raise ValueError("too many distinct formats")
            self._fmt_tags[fmt] = tag
            self._fmt_names[tag] = fmt
        return tag

    def _format_name(self, tag: int) -> str:
        return self._fmt_names.get(tag, f"user{tag}")

    def _block(self, block_id: int) -> Block:
        b = self._blocks.get(block_id)
        if b is None:
            b = Block(block_id)
            b._alloc = self
            self._blocks[block_id] = b
        return b

    # ---- public API -----------------------------------------------------
    @property
    def stats(self) -> AllocationStats:
        """Current counters."""
        return AllocationStats._from_native(self._pool.stats())

    @property
    def history(self) -> deque:
        """Snapshots taken after every changing call, oldest first."""
        return deque((AllocationStats._from_native(s) for s in self._pool.stats_history()),
                     maxlen=1024)

    def register_owner(self, owner: int) -> None:
        """Mark owner active; a second registration of an active owner raises."""
        try:
            self._pool.owner_register(owner)
        except _kvpool.OwnerActiveError as e:
            raise OwnerAlreadyActiveError(str(e)) from None

    def release_owner(self, owner: int) -> None:
        """Clear an owner from the active set without freeing blocks (no-op if not active)."""
        try:
            self._pool.owner_release(owner)
        except _kvpool.NotFoundError:
            pass

    def allocate(self, stream: str, n_tokens: int, owner: int, format: str = "fp16") -> list:
        """Allocate ceil(n_tokens / block_size) blocks to owner; all or nothing."""
        if n_tokens <= 0:
            raise ValueError("n_tokens must be > 0")
        s = self._stream(stream)
        try:
            ids = self._pool.alloc(n_tokens, owner, s, self._format_tag(format))
        except _kvpool.ExhaustedError as e:
            raise BlockPoolExhaustedError(str(e)) from None
        return [self._block(i) for i in ids]

    def free(self, blocks: list) -> None:
        """Return blocks to their free lists (all or nothing)."""
        by_owner: dict = {}
        for b in blocks:
            info = self._pool.block_info(b.block_id)
            if info["state"] != "in_use":
                raise _kvpool.DoubleFreeError(f"block {b.block_id} is already free")
            by_owner.setdefault(info["owner"], []).append(b.block_id)
        for owner, ids in by_owner.items():
            self._pool.free(ids, owner)

    def free_all(self, owner: int) -> None:
        """Free every block checked out to owner: O(its blocks)."""
        try:
            self._pool.free_owner(owner)
        except _kvpool.NotFoundError:
            pass

    def blocks_for(self, owner: int) -> list:
        """The blocks owner holds, in allocation order."""
        try:
            return [self._block(i) for i in self._pool.owner_blocks(owner)]
        except _kvpool.NotFoundError:
            return []

    def n_free(self, stream: str = "k") -> int:
        """Free blocks remaining for stream."""
        return self._pool.free_count(self._stream(stream))

    def shrink(self, stream: str, target_free: int) -> int:
        """Retire free blocks of stream down to target_free; returns how many."""
        if target_free < 0:
            raise ValueError("target_free must be >= 0")
        return self._pool.shrink(target_free, self._stream(stream))

    def mark_used(self, block: Block, n_used: int) -> None:
        """Set a checked-out block's fill level, keeping fragmentation exact."""
        try:
            self._pool.set_fill(block.block_id, n_used)
        except _kvpool.DoubleFreeError:
            pass  # a free block is never fragmented; its fill is not kept
