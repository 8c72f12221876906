# SPDX-License-Identifier: Apache-2.0
"""Hostile callers of the Python binding: callbacks that close, query or drop
the pool, threads that close/clear/retire/destroy what a GIL-free call is
using, the GIL-versus-pool-lock deadlock, exceptions raised by on_evict,
numpy over dead sequences, __init__ called twice.  Whatever could crash or
hang the interpreter runs in a child process with a timeout, so a regression
fails the test instead of killing or hanging the run.  Run by
scripts/run-tests with PYTHONPATH=build/python (see docs/PYTHON.md)."""
import gc
import os
import subprocess
import sys
import textwrap
import weakref

PYDIR = os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python")
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kvpool  # noqa: E402
from kvpool.compat import atom, vllm_mlx  # noqa: E402


def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")


PRELUDE = """
import array, gc, sys, threading, weakref
import numpy as np
import kvpool
def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")
"""


def run_child(body, timeout=60):
    """Run PRELUDE + body in a fresh interpreter; returns its stdout.  A crash,
    a non-zero exit or a hang past `timeout` fails the calling test."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PYDIR))
    try:
        r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"child did not finish within {timeout} s (deadlock?)")
    assert r.returncode == 0, f"child exited with {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


# ---- 1. the pool closed or dropped from inside on_evict ------------------

def test_close_inside_on_evict_for_every_evicting_call():
    # Each evicting call, with a callback that closes the pool: the call
    # completes and returns its result, the callback saw its eviction, the
    # pool is closed afterwards, nothing crashes.
    out = run_child("""
        def fresh():
            seen = []
            holder = []
            def cb(h, b):
                seen.append((h, b))
                holder[0].close()
            p = kvpool.Pool(block_size=4, num_blocks=4, on_evict=cb)
            holder.append(p)
            ids = p.alloc_blocks(4)
            for i, b in enumerate(ids):
                p.publish(b, H(i))
            p.free(ids)                       # all four cached: any take evicts
            return p, ids[0], seen

        def seq_admit(p, a):
            s = p.sequence(1)
            return s.admit(list(range(4 * 4)))

        calls = {
            "take": lambda p, a: p.take(),
            "alloc": lambda p, a: p.alloc(16),
            "alloc_blocks": lambda p, a: p.alloc_blocks(4),
            "take_id": lambda p, a: p.take_id(a),
            "evict": lambda p, a: p.evict(1),
            "ensure_free": lambda p, a: p.ensure_free(4),
            "clear_index": lambda p, a: p.clear_index(),
            "reset_prefix_cache": lambda p, a: p.reset_prefix_cache(),
            "clear": lambda p, a: p.clear(),
            "shrink": lambda p, a: p.shrink(0),
            "seq.admit": seq_admit,
        }
        for name, fn in calls.items():
            p, a, seen = fresh()
            r = fn(p, a)
            assert p.closed, name
            assert seen, name
            print(name, "ok", r is not None)

        # unpublish of an in-use block, and retire_top relocating a cached block
        p, a, seen = fresh()
        p.claim(a)
        p.unpublish(a)
        assert p.closed and seen == [(H(0), a)]
        print("unpublish ok")
    """)
    assert out.count(" ok") == 12


def test_last_reference_dropped_inside_on_evict():
    # The callback drops the only other reference to the pool and collects:
    # the pool is freed after the call that evicted, not under it.
    out = run_child("""
        holder = []
        seen = []
        def cb(h, b):
            seen.append(b)
            holder.clear()
            gc.collect()
        holder.append(kvpool.Pool(block_size=4, num_blocks=1, on_evict=cb))
        p = holder[0]
        a = p.take(); p.publish(a, H(1)); p.free(a)
        w = weakref.ref(p)
        del p
        got = holder[0].take()
        assert got == a and seen == [a]
        assert not holder and w() is None
        print("freed after the call")
    """)
    assert "freed after the call" in out


def test_pool_with_callback_cycle_is_collected():
    # on_evict is a bound method of an object holding the pool (as in the
    # vllm-mlx drop-in): the collector frees the cycle.
    mgr = vllm_mlx.PagedCacheManager(block_size=4, max_blocks=4)
    w = weakref.ref(mgr._pool)
    del mgr
    gc.collect()
    assert w() is None


# ---- 2. GIL-free calls against concurrent close/clear/retire/destroy -----

GIL_FREE = """
    sys.setswitchinterval(1000)   # the GIL changes hands only where a call releases it

    def race(call, ops):
        # ops run on a second thread while `call` runs without the GIL: with
        # the switch interval this long, the only place the second thread
        # can take the GIL is inside `call`, which is repeated until the ops
        # are done.  Returns call()'s last result and each op's outcome.
        go = threading.Event()
        res = {}
        def other():
            go.wait()
            for name, op in ops:
                try:
                    op()
                    res[name] = "done"
                except kvpool.BusyError:
                    res[name] = "busy"
                except Exception as e:
                    res[name] = type(e).__name__
            res[None] = True
        t = threading.Thread(target=other)
        t.start()
        go.set()
        while None not in res:
            r = call()
        t.join()
        del res[None]
        return r, res
"""


def test_hashing_holds_the_pool_against_close_clear_retire():
    out = run_child(GIL_FREE + """
    toks = np.arange(1 << 22, dtype=np.uint32) % 50000
    ref = kvpool.Pool(block_size=16, num_blocks=0).hash_tokens(toks)
    p = kvpool.Pool(block_size=16, num_blocks=8)
    ops = [("close", p.close), ("clear", p.clear), ("retire_top", p.retire_top)]
    r, res = race(lambda: p.hash_tokens(toks), ops)
    assert r == ref and res == {"close": "busy", "clear": "busy", "retire_top": "busy"}, res
    assert not p.closed
    print("hash_tokens", res)

    # into a caller's buffer: the input array and the output stay exported
    a = array.array("I", toks.tobytes())
    out = bytearray(len(ref))
    ops = [("close", p.close), ("grow input", lambda: a.append(1)),
           ("grow out", lambda: out.extend(b"x"))]
    r, res = race(lambda: p.hash_tokens(a, out=out), ops)
    assert r == len(ref) // 32 and bytes(out) == ref, res
    assert res == {"close": "busy", "grow input": "BufferError", "grow out": "BufferError"}, res
    print("hash_tokens out", res)

    bs = 65535
    q = kvpool.Pool(block_size=bs, num_blocks=4)
    blk = np.arange(bs, dtype=np.uint32)
    ref1 = kvpool.Pool(block_size=bs, num_blocks=0).hash_block(blk)
    ops = [("close", q.close), ("clear", q.clear), ("retire_top", q.retire_top)]
    r, res = race(lambda: q.hash_block(blk), ops)
    assert r == ref1 and res == {"close": "busy", "clear": "busy", "retire_top": "busy"}, res
    assert not q.closed
    print("hash_block", res)
    """)
    assert out.count("busy") >= 7


def test_gil_free_admit_holds_sequence_and_pool():
    out = run_child(GIL_FREE + """
    n = 1 << 16
    p = kvpool.Pool(block_size=16, num_blocks=2 * (n // 16) + 64, thread_safe=True)
    prompts = np.arange(64 * n, dtype=np.uint32)   # made here: numpy drops the GIL too
    cur = []
    def admit():
        # a fresh sequence and prompt each time, the last one kept
        if cur:
            cur.pop().destroy()
        cur.append(p.sequence(1))
        admit.k = (admit.k + 1) % 64
        return cur[0].admit(prompts[admit.k * n:(admit.k + 1) * n])
    admit.k = 0
    ops = [("destroy", lambda: cur[0].destroy()), ("close", p.close), ("clear", p.clear),
           ("retire_top", p.retire_top), ("append", lambda: cur[0].append(1)),
           ("table", lambda: memoryview(cur[0]))]
    r, res = race(admit, ops)
    assert all(v == "busy" for v in res.values()), res
    s = cur[0]
    assert s.num_tokens == n and s.alive and not p.closed
    s.destroy(); p.check()
    print("admit", res)
    """)
    assert "admit" in out


def test_state_checks_follow_argument_conversion():
    # A generator runs Python code while its items are converted: what it
    # does before the call (export the table, destroy the sequence, close
    # the pool) is seen by the call's checks, which come after.
    p = kvpool.Pool(block_size=4, num_blocks=16)
    s = p.sequence(1)
    s.admit([1, 2, 3, 4, 5])
    e = p.sequence(4)                        # empty: admit would be allowed
    fp = p.fingerprint()
    views = []

    def exporting(seq):
        views.append(memoryview(seq))
        yield 7

    for seq, call in ((s, s.append), (e, e.admit)):
        with pytest.raises(kvpool.BusyError, match="exported"):
            call(exporting(seq))
        assert p.fingerprint() == fp
        views.pop().release()

    t = p.sequence(2)

    def destroying():
        t.destroy()
        yield 1

    with pytest.raises(kvpool.InvalidArgumentError, match="destroyed"):
        t.admit(destroying())
    q = kvpool.Pool(block_size=4, num_blocks=4)

    def closing():
        q.close()
        yield 1

    with pytest.raises(kvpool.InvalidArgumentError, match="closed"):
        q.hash_tokens(closing())


# ---- 3. no thread waits for the GIL while holding the pool lock ----------

def test_no_deadlock_between_callbacks_and_the_pool_lock():
    # One thread admits long prompts (>= 4096 tokens) into a thread-safe pool
    # with on_evict while others take and free: before, the callback waited
    # for the GIL with the pool lock held while a taker held the GIL waiting
    # for the lock.  Bounded run; a hang fails on the child's timeout.
    out = run_child("""
        import time
        seen = []
        p = kvpool.Pool(block_size=16, num_blocks=700, thread_safe=True,
                        on_evict=lambda h, b: seen.append(p.free_count()))
        stop = time.monotonic() + 2.0
        errors = []
        def admitter(k):
            rng = np.random.default_rng(k)
            i = 0
            try:
                while time.monotonic() < stop:
                    s = p.sequence(k * 1000000 + i)
                    s.admit(rng.integers(0, 1 << 30, 4096 + 16, dtype=np.uint32))
                    s.destroy()
                    i += 1
            except Exception as e:
                errors.append(e)
        def taker(k):
            try:
                while time.monotonic() < stop:
                    try:
                        ids = [p.take(owner=k) for _ in range(8)]
                    except kvpool.ExhaustedError:
                        continue
                    p.free(ids, owner=k)
            except Exception as e:
                errors.append(e)
        ts = [threading.Thread(target=admitter, args=(1,)), threading.Thread(target=admitter, args=(2,)),
              threading.Thread(target=taker, args=(7,)), threading.Thread(target=taker, args=(8,))]
        for t in ts: t.start()
        for t in ts: t.join()
        assert not errors, errors
        p.check()
        ev = p.stats()["evictions"]
        assert ev > 0 and len(seen) == ev, (ev, len(seen))
        print("evictions", ev)
    """, timeout=30)
    assert "evictions" in out


# ---- 4. what a callback may do; its exceptions ---------------------------

def test_atom_on_evict_may_query_the_pool():
    seen = []
    bp = atom.BlockPool(2, on_evict=lambda h: seen.append((h, bp.num_free, bp.lookup(h))))
    b = bp.allocate(0).block_id
    bp.publish(b, 42, [1, 2])
    bp.free(b)
    bp.allocate(1)
    got = bp.pop()                    # the cached block 0 is handed out: evicted
    assert got == 0
    assert seen == [(42, 0, -1)]      # after the take: none free, 42 no longer indexed


def test_callback_exception_goes_to_unraisablehook_and_the_rest_still_run():
    calls = []

    def cb(h, b):
        calls.append(b)
        if len(calls) == 1:
            raise ValueError("from on_evict")

    p = kvpool.Pool(block_size=4, num_blocks=4, on_evict=cb)
    ids = p.alloc_blocks(4)
    for i, b in enumerate(ids):
        p.publish(b, H(i))
    p.free(ids)
    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = caught.append
    try:
        assert p.evict(3) == 3               # the result stands
    finally:
        sys.unraisablehook = old
    assert len(calls) == 3                    # every callback ran
    assert len(caught) == 1 and isinstance(caught[0].exc_value, ValueError)
    assert caught[0].object is cb
    assert p.stats()["evictions"] == 3
    p.check()


def test_callback_may_call_back_into_the_pool():
    # Evicting calls made from inside a callback deliver their own evictions,
    # in order, without recursion into the library.
    order = []
    p = None

    def cb(h, b):
        order.append(h)
        if h == H(0):
            p.evict(1)                        # evicts H(1) from inside the callback

    p = kvpool.Pool(block_size=4, num_blocks=3, reuse="fifo", on_evict=cb)
    ids = p.alloc_blocks(3)
    for i, b in enumerate(ids):
        p.publish(b, H(i))
    p.free(ids)
    p.evict(1)
    assert order == [H(0), H(1)]
    assert p.stats()["evictions"] == 2


# ---- 5. numpy over dead sequences, __init__ twice, re-admission -----------

def test_numpy_over_a_dead_sequence_raises():
    p = kvpool.Pool(block_size=4, num_blocks=8)
    s = p.sequence(1)
    s.admit([1, 2, 3])
    assert np.asarray(s).tolist() == s.blocks()
    assert s.__array__().tolist() == s.blocks()
    s.destroy()
    with pytest.raises(kvpool.InvalidArgumentError, match="destroyed"):
        np.asarray(s)
    t = p.sequence(2)
    t.admit([1])
    p.close()
    with pytest.raises(kvpool.InvalidArgumentError, match="closed"):
        np.asarray(t)
    with pytest.raises(kvpool.InvalidArgumentError, match="closed"):
        np.array(t)


def test_init_twice_is_refused():
    p = kvpool.Pool(block_size=4, num_blocks=8)
    fp = p.fingerprint()
    with pytest.raises(RuntimeError, match="already initialised"):
        p.__init__(block_size=8, num_blocks=2)
    assert p.block_size == 4 and p.fingerprint() == fp
    s = kvpool.Sequence(p, 1)
    for seq in (s, p.sequence(2), s.fork(3)):
        with pytest.raises(RuntimeError, match="already initialised"):
            seq.__init__(p, 9)
    assert [x.request_id for x in (s, p.find_sequence(2), p.find_sequence(3))] == [1, 2, 3]

    class Sub(kvpool.Pool):                # a subclass's __init__ reaches Pool's once
        def __init__(self, **kw):
            super().__init__(**kw)
            self.tag = 1

    q = Sub(block_size=4, num_blocks=2)
    assert q.tag == 1 and q.free_count() == 2
    with pytest.raises(RuntimeError, match="already initialised"):
        q.__init__(block_size=4, num_blocks=2)


def test_readmission_names_the_cause():
    p = kvpool.Pool(block_size=4, num_blocks=8)
    s = p.sequence(1)
    s.admit([1, 2, 3, 4, 5])
    fp = p.fingerprint()
    with pytest.raises(kvpool.BusyError, match="already holds 5 tokens") as e:
        s.admit([1, 2])
    assert "callback" not in str(e.value)
    assert p.fingerprint() == fp and s.num_tokens == 5
    # No busy status names a callback: from Python none runs inside a call.
    b = p.take()
    with pytest.raises(kvpool.BusyError) as e:
        p.take_id(b)
    assert str(e.value) == "busy: in use"


def test_collector_sees_each_reference_once():
    """Every subclassable type's traverse visits what it holds once: a
    subclass instance's heap type is visited by the subclass's own traverse,
    so a second visit from the C base would count one reference twice."""
    import gc
    from kvpool.compat import atom, vllm

    class MyPool(kvpool.Pool):
        pass

    objs = [MyPool(block_size=4, num_blocks=4), atom.BlockPool(4), vllm.BlockPool(4, True, 16)]
    for o in objs:
        refs = gc.get_referents(o)
        assert refs.count(type(o)) == 1, (type(o), refs.count(type(o)))
