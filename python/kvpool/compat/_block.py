# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat._block — the base of the drop-ins' per-block objects.

A drop-in that keeps one canonical object per block id (ATOM's ``Block``,
vllm-mlx's ``CacheBlock``) makes it an ``IdBlock``: an ``int`` subclass
whose value is the block id and which holds nothing else, so a million
blocks cost no more than a million ints; the fields live in the pool's
arrays, which a class made per pool points to.  Like the originals' plain
objects, an IdBlock compares and hashes by identity and is always true
(block 0 included); ``block_id`` is its value.
"""
from __future__ import annotations

__all__ = ["IdBlock"]


class IdBlock(int):
    """An int-valued block object compared by identity (see the module)."""

    __slots__ = ()
    __hash__ = object.__hash__
    block_id = property(int, doc="The block's id.")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __bool__(self) -> bool:
        return True
