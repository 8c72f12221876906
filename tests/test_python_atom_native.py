"""The ATOM drop-in's native hot path (kvpool._kvpool._AtomBlockPool).

``kvpool.compat.atom.BlockPool`` takes ``lookup``, ``pop``, ``allocate``,
``claim``, ``free``, ``publish`` and ``_spend`` from the C base class; the
Python methods ``_slow_<name>`` are the reference they replace (and what an
argument that is not a plain int in range goes to).  These tests check that
the two agree on random operation sequences, errors included, and that a
refused call names its error and changes nothing.
"""
import os
import random
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import inspect  # noqa: E402

import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool import _kvpool  # noqa: E402
from kvpool.compat import atom  # noqa: E402

HOT = ("lookup", "pop", "allocate", "claim", "free", "publish", "_spend")


def state(bp):
    """Everything a call may change, as plain values."""
    return (bp._pool.fingerprint(), list(bp._hash), [list(t) for t in bp._tokens],
            sorted(bp._popped), sorted(bp._stale), dict(bp._raw_unit_owner),
            bp.blocks_evicted, bp.blocks_retired, bp.num_free, bp.num_used,
            [bp.block(i).ref_count for i in range(bp.max_blocks)])


def outcome(fn, *args):
    """(result, None) or (None, (exception type, message))."""
    try:
        r = fn(*args)
    except Exception as e:  # noqa: BLE001  (compared, not swallowed)
        return None, (type(e), str(e))
    return (int(r) if isinstance(r, int) else r), None


def test_hot_methods_are_the_c_base_class():
    assert issubclass(atom.BlockPool, _kvpool._AtomBlockPool)
    for name in HOT:
        assert type(inspect.getattr_static(atom.BlockPool, name)).__name__ == "method_descriptor", name


@pytest.mark.parametrize("seed", range(6))
def test_native_and_reference_paths_agree(seed):
    rng = random.Random(seed)
    ev_fast, ev_ref = [], []
    fast = atom.BlockPool(12, on_evict=ev_fast.append, max_blocks=14)
    ref = atom.BlockPool(12, on_evict=ev_ref.append, max_blocks=14)
    names = ["lookup", "allocate", "claim", "free", "publish"]
    units = {}
    for step in range(1500):
        op = rng.choice(names + ["publish", "free", "pop", "pop", "units", "clear_index", "extend",
                                 "retire"])
        live = [i for i in range(fast.num_blocks) if fast.block(i).ref_count] + sorted(fast._popped)
        bid = rng.choice(live) if live and rng.random() < 0.6 else rng.randrange(-1, 16)
        h = rng.choice([rng.randrange(8)] * 4 + [-rng.randrange(1, 4), (1 << 64) + rng.randrange(4)])
        toks = [rng.randrange(100) for _ in range(rng.randrange(3))]
        if op == "pop":
            a, b = outcome(fast.pop), outcome(ref.pop)
        elif op == "units":
            owner = rng.randrange(3)
            if owner in units:
                a = outcome(fast.release_units, units[owner], owner)
                b = outcome(ref.release_units, units.pop(owner), owner)
            else:
                count = rng.randrange(3)
                a, b = outcome(fast.reserve_units, count, owner), outcome(ref.reserve_units, count, owner)
                if a[0]:
                    units[owner] = a[0]
        elif op == "clear_index":
            a, b = outcome(fast.clear_index), outcome(ref.clear_index)
        elif op == "extend":
            a, b = outcome(fast.extend, 1), outcome(ref.extend, 1)
        elif op == "retire":
            a, b = outcome(fast.retire_top), outcome(ref.retire_top)
        else:
            args = {"lookup": (h,), "publish": (bid, h, toks)}.get(op, (bid,))
            a = outcome(getattr(fast, op), *args)
            b = outcome(getattr(ref, "_slow_" + op), *args)
        assert a == b, (seed, step, op)
        assert state(fast) == state(ref), (seed, step, op)
        assert ev_fast == ev_ref, (seed, step, op)
    assert len(ev_fast) >= 5 and fast.blocks_evicted >= 5  # the sequence reaches eviction


def refused(bp, exc, fn, *args, match=None):
    before = state(bp)
    with pytest.raises(exc, match=match):
        fn(*args)
    assert state(bp) == before


def test_refused_calls_name_their_error_and_change_nothing():
    bp = atom.BlockPool(3)
    b = bp.pop()
    bp.allocate(b)
    bp.publish(b, 7, [1, 2])
    refused(bp, AssertionError, bp.allocate, b, match=f"block {b} is in use")
    refused(bp, kvpool.RangeError, bp.allocate, 3)
    refused(bp, kvpool.RangeError, bp.claim, 5)
    refused(bp, kvpool.RangeError, bp.free, 9)
    refused(bp, kvpool.Error, bp.free, 2)            # free already: not referenced
    refused(bp, kvpool.Error, bp.publish, 2, 9, [])  # not in use
    refused(bp, kvpool.InvalidArgumentError, bp.allocate, -1, match="id out of range")
    refused(bp, TypeError, bp.allocate, "1")
    refused(bp, TypeError, bp.free, None)
    refused(bp, TypeError, bp.lookup, None)
    refused(bp, TypeError, bp.pop, 1)
    refused(bp, TypeError, bp.publish, b, 7)
    units = bp.reserve_units(2, "owner")
    refused(bp, AssertionError, bp.free, units[0], match="reserved raw unit")
    refused(bp, AssertionError, bp.pop, match="No free blocks available")
    assert bp.lookup(7) == b and bp.block(b).token_ids == [1, 2]


def test_the_base_class_refuses_missing_or_mistyped_state():
    bare = _kvpool._AtomBlockPool()
    for call in (bare.pop, lambda: bare.lookup(1), lambda: bare.free(0)):
        with pytest.raises(RuntimeError, match="__init__ was not called"):
            call()
    bp = atom.BlockPool(2)
    for name, bad in (("_hash", ()), ("_tokens", {}), ("blocks", ()), ("_popped", []),
                      ("_stale", frozenset()), ("_raw_unit_owner", []), ("_pool", object())):
        before = getattr(bp, name)
        with pytest.raises(TypeError, match=name):
            setattr(bp, name, bad)
        with pytest.raises(AttributeError):
            delattr(bp, name)
        assert getattr(bp, name) is before
    with pytest.raises(kvpool.RangeError):
        bp._spend(2, False)
