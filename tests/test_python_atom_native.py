# SPDX-License-Identifier: Apache-2.0
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

PYDIR = os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python")
sys.path.insert(0, PYDIR)

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


# ---- compute_hash: ATOM's engine-side block hash --------------------------------

def reference_hash(token_ids, prefix=-1):
    """ATOM's BlockManager.compute_hash, restated: XXH64 of prefix's 8
    little-endian bytes (none for -1), then the tokens as numpy int64."""
    xxhash = pytest.importorskip("xxhash")
    np = pytest.importorskip("numpy")
    h = xxhash.xxh64()
    if prefix != -1:
        h.update(prefix.to_bytes(8, "little"))
    h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return h.intdigest()


def test_compute_hash_gives_atoms_values():
    import array
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    inputs = [[], [0], [1, 2, 3], [-5, 2 ** 63 - 1, -2 ** 63], tuple(range(300)),
              array.array("i", [1, -2, 3] * 7), array.array("b", [1, -1]), array.array("H", [65535]),
              array.array("Q", [2 ** 64 - 1]), np.arange(16, dtype=np.int64),
              np.arange(16, dtype=np.uint32), [rng.randrange(-2 ** 40, 2 ** 40) for _ in range(64)]]
    for toks in inputs:
        for prefix in (-1, 0, 1, 2 ** 63, 2 ** 64 - 1, rng.randrange(2 ** 64)):
            assert atom.compute_hash(toks, prefix) == reference_hash(toks, prefix), (toks, prefix)
            assert atom.compute_hash(toks, prefix=prefix) == reference_hash(toks, prefix)
        assert atom.compute_hash(toks) == reference_hash(toks)
    chain, h = list(range(64)), -1
    for i in range(4):  # the engine's chain: each block's hash is the next one's prefix
        h2 = atom.compute_hash(chain[i * 16:(i + 1) * 16], h)
        assert h2 == reference_hash(chain[i * 16:(i + 1) * 16], h)
        h = h2


def test_compute_hash_refuses_what_it_cannot_hash():
    import array
    for bad, exc in (((1 << 63,), OverflowError), ([1, 2.5], TypeError), ([None], TypeError),
                     ("abc", TypeError), (b"\x01\x02", TypeError), (bytearray(2), TypeError),
                     (array.array("d", [1.0]), TypeError), (5, TypeError), ({1: 2}, TypeError)):
        with pytest.raises(exc):
            atom.compute_hash(bad)
    for prefix, exc in ((-2, OverflowError), (1 << 64, OverflowError), ("1", TypeError),
                        (1.0, TypeError)):
        with pytest.raises(exc):
            atom.compute_hash([1, 2], prefix)
    with pytest.raises(TypeError):
        atom.compute_hash()
    with pytest.raises(TypeError):
        atom.compute_hash([1], -1, 3)
    with pytest.raises(TypeError):
        atom.compute_hash([1], prefx=3)


def test_install_gives_a_present_atom_engine_this_compute_hash(tmp_path):
    import subprocess
    import textwrap
    (tmp_path / "atom" / "model_engine").mkdir(parents=True)
    (tmp_path / "atom" / "__init__.py").write_text("")
    (tmp_path / "atom" / "model_engine" / "__init__.py").write_text("")
    (tmp_path / "atom" / "model_engine" / "block_pool.py").write_text("class BlockPool:\n    pass\n")
    (tmp_path / "atom" / "model_engine" / "block_manager.py").write_text(textwrap.dedent("""\
        from atom.model_engine.block_pool import BlockPool
        class BlockManager:
            @classmethod
            def compute_hash(cls, token_ids, prefix=-1):
                return ("own", list(token_ids), prefix)
            def hash_of(self, toks, prefix):
                return self.compute_hash(toks, prefix)
        """))
    script = textwrap.dedent("""\
        from kvpool.compat import atom
        from atom.model_engine.block_manager import BlockManager
        assert atom.install() is True
        assert BlockManager.compute_hash([1, 2], 3) == atom.compute_hash([1, 2], 3)
        assert BlockManager().hash_of([1, 2], -1) == atom.compute_hash([1, 2])
        assert BlockManager().hash_of([1, 2], -1) == atom.compute_hash([1, 2])
        import atom.model_engine.block_manager as bm
        assert bm.BlockPool is atom.BlockPool
        atom.uninstall()
        assert BlockManager.compute_hash([1, 2], 3) == ("own", [1, 2], 3)
        print("ok")
        """)
    pydir = PYDIR
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), pydir]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
