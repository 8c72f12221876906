# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat.veloxquant — drop-in for VeloxQuant-MLX's ``BlockPoolAllocator``.

Owns ``PoolConfig``, ``Block``, ``AllocationStats``, ``BlockPoolAllocator``
and, when VeloxQuant-MLX itself is not importable, the two exceptions, with
the names of ``veloxquant_mlx.memory.block_pool`` and
``veloxquant_mlx.core.exceptions``, as Python over one native, thread-safe
``kvpool.Pool`` (reuse order LIFO, as the original; owners are the request
ids; format tags per block; a stats snapshot after every changing call in
a history of ``DEFAULT_HISTORY_SIZE``).  When ``veloxquant_mlx`` is
importable its own ``BlockPoolExhaustedError`` and
``OwnerAlreadyActiveError`` are the ones raised, so ``except`` clauses
written for it keep working: each raise takes the class then found under
``veloxquant_mlx.core.exceptions`` in ``sys.modules`` (a caller that loads
that module again, from its file, makes new class objects and catches
those), the classes bound at import otherwise.

As the original: ``allocate(n_tokens)`` fills each block (``block_size``
tokens, the last one the remainder), so fragmentation counts the partial
one; ``n_allocations`` / ``n_frees`` / ``n_reused`` count blocks;
``blocks_in_use()`` is their difference; freeing a free block is a no-op;
with ``grow_on_exhaustion`` a short stream grows up to ``max_blocks`` and
the call still raises when that is not enough; ``separate_kv`` gives each
stream ``n_blocks // 2`` blocks; ``to_prometheus`` writes the original's
metric names.

Deviations (also in docs/PYTHON.md):

- ``Block`` objects handed out read the pool's C state and are not kept:
  two handles on one block compare equal but are not one object (``is``),
  and their fields other than ``n_used`` are read-only; assigning ``block.n_used`` goes through ``mark_used`` (a kvpool
  addition) so the fragmentation count stays exact — writing the field in
  the original left the count stale until the next allocate or free.  A
  block whose ``n_used`` is set to 0 while in use is not counted as
  fragmented (the original counts it).
- The exceptions defined here (VeloxQuant-MLX absent) also derive from the
  kvpool ones (``kvpool.ExhaustedError``, ``kvpool.OwnerActiveError``).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any, Optional

from .. import _kvpool
from . import _adopt
from ._block import IdBlock

__all__ = ["install", "uninstall", "PoolConfig", "Block", "AllocationStats",
           "BlockPoolAllocator", "BlockPoolExhaustedError", "OwnerAlreadyActiveError", "DEFAULT_BLOCK_SIZE",
           "DEFAULT_HISTORY_SIZE"]


try:  # the original's own classes when VeloxQuant-MLX is importable
    from veloxquant_mlx.core.exceptions import (  # type: ignore[import-not-found]
        BlockPoolExhaustedError,
        OwnerAlreadyActiveError,
    )
except ImportError:
    class BlockPoolExhaustedError(_kvpool.ExhaustedError):  # type: ignore[no-redef]
        """Not enough free blocks and the pool may not grow enough."""

    class OwnerAlreadyActiveError(_kvpool.OwnerActiveError):  # type: ignore[no-redef]
        """register_owner() for an owner that is still active."""

_BOUND_ERRORS = {"BlockPoolExhaustedError": BlockPoolExhaustedError,
                 "OwnerAlreadyActiveError": OwnerAlreadyActiveError}


def _error(name: str) -> type:
    """The exception class to raise for name: the one in the module that
    ``veloxquant_mlx.core.exceptions`` names in sys.modules now, when it has
    an exception class by that name, else the one bound at import."""
    module = sys.modules.get("veloxquant_mlx.core.exceptions")
    cls = getattr(module, name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return cls
    return _BOUND_ERRORS[name]


DEFAULT_BLOCK_SIZE: int = 16
DEFAULT_HISTORY_SIZE: int = 256

_FORMATS = {"fp16": 0, "bf16": 1, "fp8": 2, "int8": 3, "int4": 4, "int2": 5}
_STREAM_NAMES = {0: "kv", 1: "k", 2: "v"}


@dataclass
class PoolConfig:
    """Configuration for a BlockPoolAllocator; refuses sizes the original refuses."""
    block_size: int = DEFAULT_BLOCK_SIZE
    n_blocks: int = 1024
    separate_kv: bool = True
    grow_on_exhaustion: bool = False
    max_blocks: Optional[int] = None

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"PoolConfig: block_size must be >= 1, got {self.block_size}")
        if self.n_blocks < 1:
            raise ValueError(f"PoolConfig: n_blocks must be >= 1, got {self.n_blocks}")
        if self.max_blocks is not None and self.max_blocks < self.n_blocks:
            raise ValueError(f"PoolConfig: max_blocks ({self.max_blocks}) must be >= "
                             f"n_blocks ({self.n_blocks})")


class Block(IdBlock):
    """A block of KV-cache storage.

    Constructed directly it is a plain record with the original dataclass's
    fields and defaults, all writable.  The blocks an allocator hands out
    are of a subclass made per allocator and hold nothing but their id (an
    ``IdBlock``, an ``int`` equal to ``block_id``): every field reads the
    pool's current state, and two handles on one block compare equal (as
    the original's dataclass, whose fields they share) without being one
    object.
    """

    __slots__ = ()

    def __new__(cls, block_id: int, *args: Any, **kwargs: Any) -> "Block":
        return int.__new__(_RecordBlock if cls is Block else cls, block_id)

    def __repr__(self) -> str:
        return (f"Block(block_id={int(self)}, stream={self.stream!r}, format={self.format!r}, "
                f"n_used={self.n_used}, owner={self.owner}, ever_allocated={self.ever_allocated})")

    __str__ = __repr__


class _RecordBlock(Block):
    """A Block constructed directly: the dataclass's fields as plain attributes."""

    def __init__(self, block_id: int, stream: str = "kv", format: str = "fp16",  # noqa: A002
                 n_used: int = 0, owner: Optional[int] = None, ever_allocated: bool = False):
        self.stream, self.format, self.n_used = stream, format, n_used
        self.owner, self.ever_allocated = owner, ever_allocated


def _pools(name: str) -> Any:
    """A setter refusing a field of a handed-out block."""
    def put(self, value):
        raise AttributeError(f"{name} of a handed-out block is the pool's")
    return put


class _BoundBlock(Block):
    """A handed-out block; the per-allocator subclass sets ``_alloc``."""

    __slots__ = ()
    _alloc: "BlockPoolAllocator"

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is type(self) and int(other) == int(self))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = int.__hash__

    def _info(self) -> dict:
        return self._alloc._pool.block_info(self)

    stream = property(lambda self: _STREAM_NAMES[self._info()["stream"]], _pools("stream"))
    format = property(lambda self: self._alloc._format_name(self._info()["format"]),
                      _pools("format"))
    ever_allocated = property(lambda self: self._info()["ever_allocated"],
                              _pools("ever_allocated"))

    @property
    def n_used(self) -> int:
        return self._info()["fill"]

    @n_used.setter
    def n_used(self, value: int) -> None:
        self._alloc.mark_used(self, value)

    @property
    def owner(self) -> Optional[int]:
        info = self._info()
        return info["owner"] if info["state"] == "in_use" else None

    @owner.setter
    def owner(self, value: Optional[int]) -> None:
        _pools("owner")(self, value)


@dataclass
class AllocationStats:
    """Running counters for a BlockPoolAllocator (cumulative since construction, in blocks)."""
    n_blocks: int
    n_allocations: int = 0
    n_frees: int = 0
    n_reused: int = 0
    n_exhausted: int = 0
    n_grown: int = 0
    n_retired: int = 0
    peak_blocks_in_use: int = 0
    _fragmented_count: int = field(default=0, repr=False)

    def blocks_in_use(self) -> int:
        """Current number of allocated (non-free) blocks."""
        return self.n_allocations - self.n_frees

    def fragmentation(self) -> float:
        """Fraction of managed blocks allocated and not full (0.0 with no blocks)."""
        return self._fragmented_count / self.n_blocks if self.n_blocks else 0.0

    def snapshot(self) -> "AllocationStats":
        """An independent copy for history/export."""
        return replace(self)

    def to_prometheus(self, prefix: str = "veloxquant_block_pool") -> str:
        """Prometheus text exposition (the original's names and types), newline-terminated."""
        rows = (("blocks_in_use", "gauge", self.blocks_in_use()),
                ("blocks_total", "gauge", self.n_blocks),
                ("fragmentation", "gauge", f"{self.fragmentation():.6f}"),
                ("peak_blocks_in_use", "gauge", self.peak_blocks_in_use),
                ("allocations_total", "counter", self.n_allocations),
                ("frees_total", "counter", self.n_frees),
                ("reused_total", "counter", self.n_reused),
                ("exhausted_total", "counter", self.n_exhausted),
                ("grown_total", "counter", self.n_grown),
                ("retired_total", "counter", self.n_retired))
        out = []
        for name, kind, value in rows:
            out.append(f"# TYPE {prefix}_{name} {kind}")
            out.append(f"{prefix}_{name} {value}")
        return "\n".join(out) + "\n"

    def __repr__(self) -> str:
        return (f"AllocationStats(in_use={self.blocks_in_use()}/{self.n_blocks}, "
                f"allocations={self.n_allocations}, frees={self.n_frees}, "
                f"reused={self.n_reused}, exhausted={self.n_exhausted}, "
                f"grown={self.n_grown}, retired={self.n_retired}, "
                f"peak={self.peak_blocks_in_use}, fragmentation={self.fragmentation():.3f})")


_new_handle = int.__new__  # (a handle class, an id) -> the handle


class _History(Sequence):
    """An allocator's ``history``: the pool's stats ring read as AllocationStats."""

    __slots__ = ("_alloc",)

    def __init__(self, alloc: "BlockPoolAllocator"):
        self._alloc = alloc

    def _all(self) -> list:
        return self._alloc._pool.stats_history()

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i):
        got = self._all()[i]
        to_stats = self._alloc._stats
        return [to_stats(s) for s in got] if isinstance(i, slice) else to_stats(got)


class BlockPoolAllocator:
    """Fixed-size block allocator for KV-cache storage, over kvpool.

    Thread-safe (the native pool locks every call).  See the module docstring
    for what follows the original and the deviations.
    """

    def __init__(self, config: Optional[PoolConfig] = None):
        self.config = config or PoolConfig()
        c = self.config
        per_stream = c.n_blocks // 2 if c.separate_kv else c.n_blocks
        n = per_stream * (2 if c.separate_kv else 1)
        cap = c.max_blocks if c.grow_on_exhaustion else c.n_blocks
        self._pool = _kvpool.Pool(
            block_size=c.block_size, num_blocks=n, max_blocks=cap or 0,
            separate_kv=c.separate_kv, grow_on_exhaustion=c.grow_on_exhaustion,
            thread_safe=True, reuse="lifo", prefix_caching=False,
            history_len=DEFAULT_HISTORY_SIZE)
        # Handed-out blocks point to this allocator through their class; it
        # keeps none of them.
        self._cls = type("Block", (_BoundBlock,), {"__slots__": (), "__module__": __name__,
                                                    "_alloc": self})
        self._shared, self._bs = not c.separate_kv, c.block_size
        self._fmt_names = {v: k for k, v in _FORMATS.items()}
        self._fmt_tags = dict(_FORMATS)

    # ---- helpers --------------------------------------------------------
    def _stream(self, stream: str) -> int:
        if not self.config.separate_kv:
            return _kvpool.STREAM_SHARED
        if stream == "k":
            return _kvpool.STREAM_K
        if stream == "v":
            return _kvpool.STREAM_V
        raise ValueError(f"BlockPoolAllocator: stream must be 'k' or 'v', got {stream!r}")

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

    def _stats(self, s: dict) -> AllocationStats:
        return AllocationStats(n_blocks=s["blocks"], n_allocations=s["blocks_allocated"],
                               n_frees=s["blocks_freed"], n_reused=s["reused"],
                               n_exhausted=s["exhausted"],
                               n_grown=s["grown"] + s["extended"], n_retired=s["retired"],
                               peak_blocks_in_use=s["peak_in_use"],
                               _fragmented_count=s["fragmented"])

    # ---- public API -----------------------------------------------------
    @property
    def stats(self) -> AllocationStats:
        """Current counters."""
        return self._stats(self._pool.stats())

    @property
    def history(self) -> "_History":
        """The last DEFAULT_HISTORY_SIZE stats snapshots, oldest first (a read-only
        sequence of AllocationStats, each made when it is read)."""
        return _History(self)

    def _record(self) -> None:
        """A stats snapshot into the pool's history ring after a changing call,
        as the original appends one to its history."""
        self._pool.stats_snapshot()

    def register_owner(self, owner: int) -> None:
        """Mark owner active; a second registration of an active owner raises."""
        try:
            self._pool.owner_register(owner)
        except _kvpool.OwnerActiveError as e:
            raise _error("OwnerAlreadyActiveError")(str(e)) from None

    def release_owner(self, owner: int) -> None:
        """Clear an owner from the active set without freeing blocks (no-op if not active)."""
        try:
            self._pool.owner_release(owner)
        except _kvpool.NotFoundError:
            pass

    def allocate(self, stream: str, n_tokens: int, owner: int, format: str = "fp16") -> list:
        """Allocate ceil(n_tokens / block_size) blocks to owner, filled in order; all or nothing."""
        if n_tokens <= 0:
            raise ValueError(f"BlockPoolAllocator: n_tokens must be > 0, got {n_tokens}")
        s = _kvpool.STREAM_SHARED if self._shared else self._stream(stream)
        pool, bs = self._pool, self._bs
        tag = self._fmt_tags.get(format)
        try:
            ids = pool.alloc(n_tokens, owner, s, self._format_tag(format) if tag is None else tag)
        except _kvpool.ExhaustedError as e:
            self._grow_to_cap(s)
            self._record()
            raise _error("BlockPoolExhaustedError")(str(e)) from None
        n = len(ids)
        fills = [bs] * n
        fills[-1] = n_tokens - bs * (n - 1)
        pool.set_fill_many(ids, fills)
        pool.stats_snapshot()  # as _record
        return list(map(_new_handle, repeat(self._cls, n), ids))

    def _grow_to_cap(self, stream: int) -> None:
        """The original grows a short stream as far as max_blocks allows even when
        that is not enough for the request that then fails."""
        c = self.config
        if not c.grow_on_exhaustion:
            return
        if c.max_blocks is None:
            return  # unbounded growth: the native pool already grew what it could
        room = c.max_blocks - self._pool.stats()["blocks"]
        if room > 0:
            self._pool.extend(room, stream)

    def free(self, blocks: list) -> None:
        """Return blocks to their free lists; blocks already free are skipped."""
        by_owner: dict = {}
        for b in blocks:  # grouped by the owner each block is checked out to
            owner = b.owner
            if owner is not None:  # already free: skipped, as the original
                by_owner.setdefault(owner, []).append(int(b))
        for owner, ids in by_owner.items():
            self._pool.free(ids, owner)  # one native call per owner
        self._record()

    def free_all(self, owner: int) -> None:
        """Free every block checked out to owner: O(its blocks)."""
        try:
            self._pool.free_owner(owner)
        except _kvpool.NotFoundError:
            pass
        self.release_owner(owner)  # a registered owner that never allocated: inactive too
        self._record()

    def blocks_for(self, owner: int) -> list:
        """The blocks owner holds, in allocation order."""
        try:
            cls = self._cls
            return [int.__new__(cls, i) for i in self._pool.owner_blocks(owner)]
        except _kvpool.NotFoundError:
            return []

    def n_free(self, stream: str = "k") -> int:
        """Free blocks remaining for stream."""
        return self._pool.free_count(self._stream(stream))

    def shrink(self, stream: str, target_free: int) -> int:
        """Retire free blocks of stream down to target_free; returns how many."""
        if target_free < 0:
            raise ValueError(f"BlockPoolAllocator: target_free must be >= 0, got {target_free}")
        retired = self._pool.shrink(target_free, self._stream(stream))
        if retired:
            self._record()
        return retired

    def mark_used(self, block: Block, n_used: int) -> None:
        """Set a checked-out block's fill level, keeping fragmentation exact."""
        try:
            self._pool.set_fill(block.block_id, n_used)
        except _kvpool.DoubleFreeError:
            pass  # a free block is never fragmented; its fill is not kept

    def __repr__(self) -> str:
        return f"BlockPoolAllocator({self.stats!r})"


# ---- adoption -------------------------------------------------------------
_NAMES = {"BlockPoolAllocator": BlockPoolAllocator, "PoolConfig": PoolConfig, "Block": Block,
          "AllocationStats": AllocationStats}
_adoption = _adopt.Adoption(
    "veloxquant_mlx",
    patch={"veloxquant_mlx.memory.block_pool": _NAMES},
    register={"veloxquant_mlx.memory.block_pool": dict(
                  _NAMES, **_BOUND_ERRORS, DEFAULT_BLOCK_SIZE=DEFAULT_BLOCK_SIZE,
                  DEFAULT_HISTORY_SIZE=DEFAULT_HISTORY_SIZE),
              "veloxquant_mlx.core.exceptions": _BOUND_ERRORS})


def install() -> bool:
    """Make VeloxQuant-MLX use this BlockPoolAllocator (``veloxquant_mlx.memory.block_pool``
    and the modules that imported it by name); without VeloxQuant-MLX, register this
    module and its exceptions under the original's module paths.  True when
    VeloxQuant-MLX itself was patched."""
    return _adoption.install()


def uninstall() -> None:
    """Undo install()."""
    _adoption.uninstall()
