# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat.atom — drop-in for AMD ATOM's ``BlockPool`` (atom.model_engine.block_pool).

Owns ``BlockPool``, ``BlockRetirement``, a ``Block`` record with the
original's fields and ``compute_hash`` (ATOM's engine-side block hash, same
values, in C), over a native ``kvpool.Pool`` configured like ATOM: reuse order ``lowest`` (vacant blocks lowest id first, then cached
blocks least recently freed first), lazy eviction with ``on_evict(hash)``
fired when a cached block is handed out again, ``extend`` up to
``max_blocks``, ``retire_top`` with relocation, raw-unit reservations
(``reserve_units`` / ``release_units``) and the eviction counters
(``blocks_evicted``, ``blocks_retired``, ``eviction_stats``).

ATOM hashes are integers; a hash ``h`` (0 <= h < 2**64) is stored as the
last 8 bytes (big-endian) of the 32-byte kvpool hash and comes back as the
same integer.  Each block's hash and tokens are kept beside the pool in two
Python lists, so ``block(id).hash`` and ``.token_ids`` (read per block by
ATOM's prefix matching) are list reads; ``ref_count`` is one native
``Pool.ref_count``.  The calls ATOM's engine makes once per block
(``lookup``, ``pop``, ``allocate``, ``claim``, ``free``, ``publish``) are
each one C call of the base class ``_kvpool._AtomBlockPool``, over these
same lists and sets.  A pool's ``Block`` objects hold nothing but their id (see
``Block``), so a block costs the pool's bytes, two list slots and an int.
The pool evicts a cached block's content when it hands the block out, and
every call that hands blocks out is made by this module, which clears the
lists there (``_spend``): no callback from the pool per eviction.

Deviations (also in docs/PYTHON.md):

- ``lookup`` returns the block published *first* that is still indexed
  (kvpool's rule); the original's dict kept the *last* one published, which
  left the earlier block unreachable by hash while still being "cached".
- ``pop()`` takes the block (and evicts its content, firing ``on_evict``)
  immediately; the original only removed it from the free set and evicted
  at the following ``allocate(block_id)``.  ``allocate`` of a popped id
  completes the hand-out as before.
- ``clear_index`` fires no ``on_evict`` (as the original); blocks in use
  keep their ``hash`` and ``token_ids`` (as the original) but are no longer
  reachable by hash.
- ``on_evict`` runs once the pool call that evicted has completed, from
  the drop-in's method (``pop``, ``allocate``, ``reserve_units``,
  ``retire_top``), so it may query or change the pool (``num_free``,
  ``lookup``, ...) and sees the block already handed out; an exception it
  raises propagates out of that method, as the original's, with the hand-out
  done.  With duplicate hashes it fires for each block whose content goes
  (the original fired only for the block its dict pointed at).
- ``superblocks`` (hybrid models' contiguous state slots) is not supported:
  passing a map raises ``NotImplementedError``.
"""
from __future__ import annotations

from functools import partial
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Optional

from .. import _kvpool
from . import _adopt
from ._block import IdBlock

__all__ = ["install", "uninstall", "BlockPool", "BlockRetirement", "Block", "compute_hash"]

_MASK = (1 << 64) - 1

#: ``compute_hash(token_ids, prefix=-1) -> int``: ATOM's chained block hash,
#: the value of its ``BlockManager.compute_hash`` (XXH64 of ``prefix``'s 8
#: little-endian bytes, none for -1, then the tokens as int64), computed in C
#: from a list, tuple or integer buffer (``array('i')``, numpy) in place.
compute_hash = _kvpool.atom_compute_hash


@dataclass(frozen=True)
class BlockRetirement:
    """What taking the highest block out of the pool cost: ``moved_to`` is -1
    when the block was free and simply dropped, otherwise the id its contents
    now live in (every holder's table must follow)."""
    retired: int
    moved_to: int


class Block(IdBlock):
    """ATOM's block record.

    ``Block(block_id)`` constructs a plain record with the original's fields
    and defaults (``ref_count`` 0, ``hash`` -1, ``token_ids`` []), all
    writable.  A pool's blocks are its own canonical objects, one per id, of
    a subclass made per pool: ``hash`` and ``token_ids`` are what the pool
    last set, ``ref_count`` reads the pool, and all three are read-only
    (publish, claim and free change them).  They hold nothing themselves
    (an ``IdBlock``: an ``int`` equal to its ``block_id``, compared by
    identity as the original's objects): the fields live in the pool's
    arrays, which their class points to."""

    __slots__ = ()

    def __new__(cls, block_id: int):
        return int.__new__(_RecordBlock if cls is Block else cls, block_id)

    def __repr__(self) -> str:
        return f"Block(block_id={int(self)}, ref_count={self.ref_count}, hash={self.hash})"

    __str__ = __repr__


class _RecordBlock(Block):
    """A Block constructed directly: its fields are plain attributes."""

    def __init__(self, block_id: int):
        self.ref_count = 0
        self.hash = -1
        self.token_ids: list = []

    def update(self, hash: int, token_ids: list) -> None:  # noqa: A002  (the original's name)
        """Set hash and tokens."""
        self.hash = hash
        self.token_ids = token_ids

    def reset(self) -> None:
        """Back to a live block with no content."""
        self.ref_count = 1
        self.hash = -1
        self.token_ids = []


def _read_only(name: str):
    def put(self, value):
        raise AttributeError(f"{name} of a pool's block is the pool's "
                             "(publish / claim / free change it)")
    return put


class _PoolBlock(Block):
    """A pool's block: its fields read the pool's arrays, which the per-pool
    subclass holds as class attributes (``_hashes``, ``_tokens``, and
    ``_refs``, the pool's ref-count reader)."""

    __slots__ = ()
    _hashes: list
    _tokens: list

    hash = property(lambda self: self._hashes[self], _read_only("hash"))
    token_ids = property(lambda self: self._tokens[self], _read_only("token_ids"))
    ref_count = property(lambda self: self._refs(int(self)), _read_only("ref_count"))

    def update(self, hash: int, token_ids: list) -> None:  # noqa: A002
        """Refused: a pool's block is published through the pool."""
        _read_only("hash")(self, hash)

    def reset(self) -> None:
        """Refused: a pool's block is reset by the pool."""
        _read_only("ref_count")(self, 1)


_NO_TOKENS: list = []


def _ref_reader(pool) -> Callable[[int], int]:
    """block id -> its ref count in the native pool (0 beyond the blocks it has)."""
    ref_count, out_of_range = pool.ref_count, _kvpool.RangeError

    def refs(block_id: int) -> int:
        try:
            return ref_count(block_id)
        except out_of_range:
            return 0
    return refs


class BlockPool(_kvpool._AtomBlockPool):
    """Paged blocks with ref counts and a content-addressed index, over kvpool.

    ``lookup``, ``pop``, ``allocate``, ``claim``, ``free`` and ``publish``
    (what ATOM's engine calls once per block) and ``_spend`` are the C base
    class's, over the state ``__init__`` sets here; a call whose block id or
    hash is not a plain int in range goes to the ``_slow_`` method of the
    same name, the Python reference."""

    def __init__(self, num_blocks: int, on_evict: Optional[Callable[[int], None]] = None,
                 max_blocks: Optional[int] = None, superblocks: Any = None,
                 cache_policy: str = "lru", protected_ratio: float = 0.5):
        if superblocks is not None:
            raise NotImplementedError("superblocks are not supported by the kvpool drop-in")
        self.max_blocks: int = num_blocks if max_blocks is None else max_blocks
        if not 0 <= num_blocks <= self.max_blocks:
            raise ValueError(f"{num_blocks} blocks outside 0..{self.max_blocks}")
        policy = str(cache_policy).lower()
        if policy not in _kvpool.POLICY_NAMES:
            raise ValueError(f"cache_policy must be one of {', '.join(_kvpool.POLICY_NAMES)}, "
                             f"not {cache_policy!r}")
        if not 0.0 <= protected_ratio <= 1.0:
            raise ValueError(f"protected_ratio {protected_ratio} outside 0..1")
        self.cache_policy: str = policy
        self.protected_ratio: float = float(protected_ratio)
        self._on_evict = on_evict
        self._pool = _kvpool.Pool(block_size=1, num_blocks=num_blocks,
                                  max_blocks=self.max_blocks, reuse="lowest", policy=policy,
                                  protected_percent=round(protected_ratio * 100))
        # The pool's calls the slow paths make, bound once.
        pool = self._pool
        self._publish = pool.publish
        self._claim, self._free_one = pool.claim, pool.free_one
        self._refs = _ref_reader(pool)
        self._lookup = pool.lookup
        self._no_tokens = _NO_TOKENS
        self.num_blocks: int = num_blocks
        self.superblocks = None
        self._hash: list = [-1] * self.max_blocks     # block id -> int hash, -1 = none
        self._tokens: list = [_NO_TOKENS] * self.max_blocks
        # The blocks' class points to the arrays and the native pool, never to
        # this object: no reference cycle through a million blocks.
        # hash and token_ids are read per block by a prefix match: as C-level
        # getters (list.__getitem__ bound to the pool's list), with no Python
        # frame; so is block(id).
        hs, ts = self._hash, self._tokens
        cls = type("Block", (_PoolBlock,), {
            "__slots__": (), "__module__": __name__, "_hashes": hs, "_tokens": ts,
            "hash": property(partial(list.__getitem__, hs), _read_only("hash")),
            "token_ids": property(partial(list.__getitem__, ts), _read_only("token_ids")),
            "_refs": staticmethod(_ref_reader(self._pool))})
        self.blocks: list = [int.__new__(cls, i) for i in range(self.max_blocks)]
        self.block = self.blocks.__getitem__
        self._popped: set = set()
        self._raw_unit_owner: dict = {}
        self._stale: set = set()  # hashed blocks clear_index left live: no longer indexed
        self.blocks_evicted: int = 0
        self.blocks_retired: int = 0

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

    @property
    def num_reusable_free(self) -> int:
        """Free blocks still holding content a prefix hit could claim."""
        return self._pool.stats()["cached"]

    def eviction_stats(self) -> dict:
        """Content this pool destroyed, and the headroom it has left (counters)."""
        s = self._pool.stats()
        return {"blocks_evicted": self.blocks_evicted, "blocks_retired": self.blocks_retired,
                "blocks_total": self.num_blocks, "blocks_used": s["in_use"] - len(self._popped),
                "blocks_free": s["free"], "blocks_free_reusable": s["cached"],
                "blocks_indexed": s["indexed"]}

    def has_free(self, n: int) -> bool:
        return self._pool.free_count() >= n

    def is_used(self, block_id: int) -> bool:
        return block_id not in self._popped and self._refs(block_id) > 0

    def block(self, block_id: int) -> Block:
        """The pool's Block of block_id (each pool binds this to its list's lookup)."""
        return self.blocks[block_id]

    # ---- index ----------------------------------------------------------
    def _slow_lookup(self, h: int) -> int:
        """Block id indexed under content hash h, or -1: the native lookup of
        the int key h (24 zero bytes, then h's 64 bits big-endian)."""
        return self._lookup(h, 0, -1)

    def _slow_publish(self, block_id: int, h: int, token_ids: list) -> None:
        """Index block_id (in use) under the content hash of the tokens it now holds."""
        h &= _MASK
        old = self._hash[block_id]
        if old != -1 and old != h:  # the original overwrote the block's hash
            try:
                self._pool.unpublish(block_id)
            except _kvpool.NotFoundError:
                pass  # kept after clear_index: not indexed any more
        if self._stale:
            self._stale.discard(block_id)
        self._publish(block_id, h)  # the int key, as lookup's
        self._hash[block_id] = h
        self._tokens[block_id] = token_ids

    def clear_index(self) -> None:
        """Drop every content-hash entry, keeping blocks live sequences hold."""
        self._pool.clear_index()
        hs, ts = self._hash, self._tokens
        for i in range(self.max_blocks):
            if hs[i] != -1:
                if self._refs(i) == 0:
                    hs[i] = -1
                    ts[i] = _NO_TOKENS
                else:
                    self._stale.add(i)

    # ---- allocation -----------------------------------------------------
    def _slow_allocate(self, block_id: int) -> Block:
        """Take block_id for fresh content (ref count 1), evicting whatever it held."""
        popped = self._popped
        if block_id in popped:
            popped.discard(block_id)
        else:
            try:
                self._pool.take_id(block_id)
            except _kvpool.BusyError:
                raise AssertionError(f"block {block_id} is in use") from None
            if self._hash[block_id] != -1:
                self._spend(block_id, False)
        return self.blocks[block_id]

    def _slow_claim(self, block_id: int) -> Block:
        """Take a share of block_id for the content it already holds."""
        if self._popped and block_id in self._popped:
            self._popped.discard(block_id)  # popped: its one reference is already taken
        else:
            self._claim(block_id)
        return self.blocks[block_id]

    def _slow_free(self, block_id: int) -> None:
        """Drop one reference on block_id (a raw unit goes back through release_units)."""
        if self._raw_unit_owner and block_id in self._raw_unit_owner:
            raise AssertionError(f"block {block_id} is a reserved raw unit; use release_units")
        if self._popped:
            self._popped.discard(block_id)
        self._free_one(block_id)

    # ---- raw units ------------------------------------------------------
    def reserve_units(self, count: int, owner: Hashable) -> Optional[list]:
        """Reserve count blocks as raw storage units of owner, or None when short."""
        if count < 0:
            raise ValueError(f"unit count must be non-negative, got {count}")
        if owner is None:
            raise ValueError("a raw-unit reservation needs an owner")
        if count == 0:
            return []
        try:
            ids = list(self._pool.alloc_blocks(count))
        except _kvpool.ExhaustedError:
            return None
        for piece, block_id in enumerate(ids):
            self._raw_unit_owner[block_id] = (owner, piece)
            self._spend(block_id, False)
        return ids

    def is_reserved_unit(self, block_id: int) -> bool:
        """Whether block_id is held by a raw-unit reservation."""
        return block_id in self._raw_unit_owner

    def reserved_unit_owner(self, block_id: int) -> Optional[tuple]:
        """(owner, piece index) of a reserved raw unit, or None."""
        return self._raw_unit_owner.get(block_id)

    def release_units(self, unit_ids: Iterable[int], owner: Hashable) -> None:
        """Release a whole raw-unit reservation (ids in reservation order); all or nothing."""
        ids = list(unit_ids)
        if len(ids) != len(set(ids)):
            raise ValueError("a raw-unit release contains duplicate ids")
        for piece, block_id in enumerate(ids):
            actual = self._raw_unit_owner.get(block_id)
            if actual != (owner, piece):
                raise AssertionError(f"raw unit {block_id} belongs to {actual!r}, "
                                     f"not {(owner, piece)!r}")
        for block_id in ids:
            del self._raw_unit_owner[block_id]
        if ids:
            self._pool.free(ids)

    # ---- resizing -------------------------------------------------------
    def extend(self, count: int) -> int:
        """Grow by up to count blocks (capped at max_blocks); returns how many."""
        taken = self._pool.extend(max(0, min(count, self.max_blocks - self.num_blocks)))
        self.num_blocks += taken
        return taken

    def retire_top(self) -> Optional[BlockRetirement]:
        """Take the highest block id out of the pool, or None if it cannot."""
        if self.num_blocks == 0 or self.num_blocks - 1 in self._raw_unit_owner:
            return None
        top = self.num_blocks - 1
        try:
            retired, moved_to = self._pool.retire_top()
        except _kvpool.ExhaustedError:
            return None
        self.num_blocks -= 1
        if moved_to is None:  # it was free: its content, if any, is gone
            self._spend(retired, True)
            return BlockRetirement(retired, -1)
        self._spend(moved_to, True)  # the destination's own content is the price
        hs, ts = self._hash, self._tokens
        hs[moved_to], ts[moved_to] = hs[top], ts[top]
        hs[top], ts[top] = -1, _NO_TOKENS
        if top in self._stale:
            self._stale.discard(top)
            self._stale.add(moved_to)
        return BlockRetirement(retired, moved_to)


# ---- adoption -------------------------------------------------------------
_adoption = _adopt.Adoption(
    "atom",
    patch={"atom.model_engine.block_pool": {"BlockPool": BlockPool}},
    register={"atom.model_engine.block_pool": {"BlockPool": BlockPool,
                                               "BlockRetirement": BlockRetirement},
              "atom.model_engine.kv_block": {"Block": Block}})


_hasher_swap: list = []  # (BlockManager, its own compute_hash) while installed


def install() -> bool:
    """Make ATOM use this BlockPool (``atom.model_engine.block_pool`` and the ATOM
    modules that imported it by name) and this ``compute_hash`` as its
    ``BlockManager.compute_hash`` (same values); without ATOM, register this
    module under ATOM's module paths.  True when ATOM itself was patched."""
    present = _adoption.install()
    if present and not _hasher_swap:
        try:
            from atom.model_engine.block_manager import BlockManager  # type: ignore
        except ImportError:
            return present  # ATOM without its engine: the pool alone is adopted
        own = BlockManager.__dict__.get("compute_hash")
        if own is not None:
            _hasher_swap.append((BlockManager, own))
            BlockManager.compute_hash = staticmethod(compute_hash)
    return present


def uninstall() -> None:
    """Undo install()."""
    while _hasher_swap:
        cls, own = _hasher_swap.pop()
        cls.compute_hash = own
    _adoption.uninstall()
