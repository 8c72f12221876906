# SPDX-License-Identifier: Apache-2.0
"""Native kvpool.Pool / kvpool.Sequence: every call, every exception, buffer
and list inputs, zero-copy block-table validity, threads.  Run by
scripts/run-tests with PYTHONPATH=build/python (see docs/PYTHON.md)."""
import array
import os
import sys
import threading

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kvpool  # noqa: E402


def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")


def test_exception_hierarchy_and_messages():
    names = {1: "InvalidArgumentError", 2: "ExhaustedError", 3: "NotFoundError",
             4: "NotOwnerError", 5: "DoubleFreeError", 6: "OwnerActiveError", 7: "BusyError",
             8: "NoMemoryError", 9: "RangeError", 10: "SpaceError", 11: "CorruptError"}
    for st, name in names.items():
        cls = getattr(kvpool, name)
        assert issubclass(cls, kvpool.Error) and cls.status == st
        assert kvpool.EXCEPTIONS[st] is cls
        assert kvpool.strerror(st)
    assert issubclass(kvpool.InvalidArgumentError, ValueError)
    assert issubclass(kvpool.NoMemoryError, MemoryError)


def test_every_exception_raised_and_nothing_changes():
    p = kvpool.Pool(block_size=4, num_blocks=4, events=True)
    a = p.alloc(8, owner=1)
    fp = p.fingerprint()
    cases = [
        (kvpool.InvalidArgumentError, lambda: p.alloc(0)),
        (kvpool.ExhaustedError, lambda: p.alloc(100, owner=2)),
        (kvpool.NotFoundError, lambda: p.lookup(H(9))),
        (kvpool.NotOwnerError, lambda: p.free(a, owner=3)),
        (kvpool.DoubleFreeError, lambda: p.free([3])),
        (kvpool.OwnerActiveError, lambda: p.owner_register(1)),
        (kvpool.BusyError, lambda: p.reset_prefix_cache()),
        (kvpool.RangeError, lambda: p.take_id(99)),
        (kvpool.SpaceError, lambda: p.alloc(8, owner=2, out=np.empty(1, np.uint32))),
    ]
    for exc, fn in cases:
        with pytest.raises(exc) as ei:
            fn()
        assert str(ei.value)
        assert p.fingerprint() == fp, exc
    # an arena of 2^32 x MAX_BLOCKS bytes fits size_t but cannot be mapped;
    # one of 2^40 x MAX_BLOCKS would not fit size_t: a bad configuration
    with pytest.raises(kvpool.NoMemoryError):
        kvpool.Pool(num_blocks=kvpool.MAX_BLOCKS, max_blocks=kvpool.MAX_BLOCKS,
                    block_bytes=(1 << 32, 0), host_arena=True)
    with pytest.raises(kvpool.InvalidArgumentError):
        kvpool.Pool(num_blocks=kvpool.MAX_BLOCKS, max_blocks=kvpool.MAX_BLOCKS,
                    block_bytes=(1 << 40, 0), host_arena=True)
    p.check()


def test_alloc_free_buffers_and_lists():
    p = kvpool.Pool(block_size=16, num_blocks=64)
    for ids in (np.arange(0, dtype=np.uint32),):
        p.free(ids)
    out = np.zeros(4, dtype=np.uint32)
    assert p.alloc(64, owner=1, out=out) == 4
    p.free(out[:2], owner=1)            # numpy slice
    p.free(array.array("I", out[2:3]), owner=1)  # array
    p.free(memoryview(out[3:4]), owner=1)       # memoryview
    ids = p.alloc_blocks(3)             # list path
    p.free(list(ids))
    ids = p.alloc_blocks(2)
    p.free(np.array(ids, dtype=np.int64))        # converted path
    p.free(p.alloc_blocks(1)[0])        # a single int
    with pytest.raises(kvpool.InvalidArgumentError):
        p.free(np.array([-1], dtype=np.int32))
    with pytest.raises(TypeError):
        p.free(np.zeros(2, dtype=np.float32))
    with pytest.raises(TypeError):
        p.alloc(16, out=np.zeros(2, dtype=np.uint64))
    assert p.stats()["free"] == 64


def test_numpy_fast_view_and_fallbacks():
    """Exact 1-D, contiguous, aligned uint32/int32 ndarrays are read from the
    array's fields; every other buffer goes through the buffer protocol.  Both
    must give the same results, errors and reference counts."""
    from kvpool import _kvpool
    fast = _kvpool._fast_view
    u = np.arange(6, dtype=np.uint32)
    assert fast(u, True) and fast(np.zeros(3, np.int32), True)
    assert fast(u[1:4], True)                       # a contiguous slice is a plain ndarray
    ro = np.arange(3, dtype=np.uint32)
    ro.flags.writeable = False
    assert fast(ro, False) and not fast(ro, True)   # read-only: reading only

    class Sub(np.ndarray):
        pass
    for other in (u[::2], u.reshape(2, 3), u.astype(">u4"), u.astype(np.int64),
                  u.view(Sub), np.frombuffer(bytes(13), np.uint32, 3, offset=1),
                  memoryview(u), array.array("I", [1])):
        assert not fast(other, False), other
    # Same results through both paths: alloc into fast and slow outputs,
    # free through fast and slow inputs, and the references left as found.
    p = kvpool.Pool(block_size=16, num_blocks=32, reuse="lowest")
    q = kvpool.Pool(block_size=16, num_blocks=32, reuse="lowest")
    a = np.zeros(4, np.uint32)
    b = np.zeros(4, np.int32).view(Sub)
    refs = (sys.getrefcount(a), sys.getrefcount(b))
    assert p.alloc(64, owner=1, out=a) == q.alloc(64, owner=1, out=b) == 4
    assert list(a) == list(b) == [0, 1, 2, 3]
    p.free(a[:2].astype(np.int32), owner=1)
    q.free(memoryview(b.astype(np.uint32))[:2], owner=1)
    assert p.stats() == q.stats()
    with pytest.raises(kvpool.InvalidArgumentError):   # int32 sign check, fast path
        p.free(np.array([2, -3], np.int32), owner=1)
    with pytest.raises(kvpool.DoubleFreeError):        # refused whole: nothing freed
        p.free(np.array([2, 0], np.uint32), owner=1)
    with pytest.raises((TypeError, ValueError, BufferError)):
        p.alloc(16, owner=1, out=ro)                    # read-only output refused
    assert p.stats() == q.stats()
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs


def test_owner_calls():
    p = kvpool.Pool(block_size=4, num_blocks=16)
    p.owner_register(5)
    with pytest.raises(kvpool.OwnerActiveError):
        p.owner_register(5)
    a = p.alloc(10, owner=5, format=kvpool.FMT_INT4)
    assert p.owner_blocks(5) == a
    buf = array.array("I", [0] * 8)
    assert p.owner_blocks(5, out=buf) == 3 and list(buf[:3]) == a
    assert p.block_info(a[0])["format"] == kvpool.FMT_INT4
    p.set_fill(a[0], 2)
    p.set_fill_many(a[1:], [4, 1])
    assert p.stats()["fragmented"] == 2
    with pytest.raises(kvpool.InvalidArgumentError):
        p.set_fill_many(a, [1])
    with pytest.raises(kvpool.BusyError):
        p.owner_release(5)
    assert p.free_owner(5) == 3
    with pytest.raises(kvpool.NotFoundError):
        p.free_owner(5)
    t = p.take(owner=9)
    p.free(t, owner=9)
    p.owner_register(11)
    p.owner_release(11)
    assert p.free_count() == 16


def test_prefault_changes_nothing_visible():
    pools = [kvpool.Pool(block_size=4, num_blocks=16, grow_on_exhaustion=True, prefault=pf)
             for pf in (False, True)]
    for p in pools:
        ids = p.alloc(4 * 24, owner=3)               # grows past 16
        p.publish(ids[0], H(1))
        p.free_owner(3)
        p.check()
    assert pools[0].fingerprint() == pools[1].fingerprint()
    assert pools[0].stats() == pools[1].stats()


def test_take_interleaved_owners():
    """take() keeps one owner hint per pool: runs for one owner, switches
    between owners, an owner freed and its place reused by another, and
    anonymous takes all land with the right owner."""
    p = kvpool.Pool(block_size=4, num_blocks=32)
    want = {1: [], 2: [], 3: []}
    for o in (1, 1, 2, 1, 3, 3, 2, 1):
        want[o].append(p.take(owner=o))
        p.check()
    anon = p.take()
    for o, ids in want.items():
        assert p.owner_blocks(o) == ids
    assert p.free_owner(1) == 4
    want[4] = [p.take(owner=4)]      # may reuse owner 1's place
    want[1] = [p.take(owner=1), p.take(owner=1)]
    for o, ids in want.items():
        assert p.owner_blocks(o) == ids
    assert p.block_info(anon)["anon_refs"] == 1
    p.clear()                        # every owner gone: the hint is stale
    with pytest.raises(kvpool.NotFoundError):
        p.owner_blocks(2)
    b = p.take(owner=2)
    assert p.owner_blocks(2) == [b]
    p.check()


@pytest.mark.parametrize("reuse", ["lifo", "lowest", "fifo"])
def test_peek_next_names_the_next_take(reuse):
    p = kvpool.Pool(block_size=4, num_blocks=6, reuse=reuse)
    taken = [p.take(owner=1) for _ in range(4)]
    p.publish(taken[0], H(3))
    p.free([taken[2], taken[0]], owner=1)        # one vacant, one cached
    p.free(taken[3], owner=1)
    while True:
        before = p.fingerprint()
        nxt = p.peek_next()
        assert p.fingerprint() == before
        if nxt is None:
            with pytest.raises(kvpool.ExhaustedError):
                p.take(owner=2)
            break
        assert p.take(owner=2) == nxt
    with pytest.raises(kvpool.InvalidArgumentError):
        p.peek_next(stream=3)
    q = kvpool.Pool(block_size=4, num_blocks=4, separate_kv=True)
    assert q.peek_next(stream=kvpool.STREAM_V) == q.take(stream=kvpool.STREAM_V)
    with pytest.raises(kvpool.InvalidArgumentError):
        q.peek_next(stream=0)


def test_index_calls_and_batches():
    p = kvpool.Pool(block_size=4, num_blocks=8, reuse="fifo", events=True)
    ids = p.alloc_blocks(3)
    p.publish(ids[0], H(0))
    p.publish_many(ids[1:], H(1) + H(2))
    assert p.lookup(H(1)) == ids[1]
    out = np.zeros(4, np.uint32)
    assert p.lookup_many(H(0) + H(1) + H(7) + H(2), out) == 2
    assert out[2] == kvpool.NO_BLOCK
    got, prefix = p.lookup_many(H(0) + H(1))
    assert got == ids[:2] and prefix == 2
    with pytest.raises(kvpool.BusyError):     # another hash: refused, nothing changes
        p.publish_many(ids[:1], H(5))
    p.claim_many(ids, owner=4)
    assert p.block_info(ids[0])["ref_count"] == 2
    p.free(ids, owner=4)
    p.free(ids)
    assert p.block_info(ids[0])["state"] == "cached"
    p.claim(ids[0])
    p.free(ids[0])
    with pytest.raises(kvpool.NotFoundError):
        p.claim_many([ids[0], 7])         # 7 vacant: refused before any claim
    assert p.block_info(ids[0])["ref_count"] == 0
    p.unpublish(ids[0])
    p.unpublish_many(ids[1:2])
    with pytest.raises(kvpool.NotFoundError):
        p.unpublish_many([ids[2], ids[2]])
    assert p.evict(5) == 1
    p.take_id(ids[2])
    p.free(ids[2])
    p.clear_index()
    p.ensure_free(8)
    p.reset_prefix_cache()
    evs, dropped = p.events_take()
    kinds = [e[0] for e in evs]
    assert kvpool.EVENT_STORED in kinds and kvpool.EVENT_REMOVED in kinds and dropped == 0
    assert all(len(e) == 8 for e in evs)


def test_resize_and_stats():
    p = kvpool.Pool(block_size=4, num_blocks=4, max_blocks=8, history_len=4)
    assert p.extend(10) == 4
    assert p.shrink(6) == 2
    a = p.alloc_blocks(2)
    p.free(a)
    assert p.retire_top()[1] is None
    s = p.stats()
    assert s["retired"] == 3 and s["extended"] == 4 and isinstance(s["usage"], float)
    p.stats_snapshot()
    assert len(p.stats_history()) == 1
    p.stats_reset()
    assert p.stats()["retired"] == 0
    assert "kvpool_" in p.prometheus() and "x_" in p.prometheus(prefix="x")
    assert p.json().startswith("{")
    with pytest.raises(kvpool.InvalidArgumentError):
        p.prometheus(prefix="9bad")
    p.check()
    p.clear()
    assert p.stats()["blocks"] == 4


def test_hashing_helpers_and_verified():
    toks = list(range(32))
    p = kvpool.Pool(block_size=16, num_blocks=8, verify_hits=True)
    h = p.hash_tokens(toks)
    assert len(h) == 64
    assert p.hash_block(toks[:16]) == h[:32]
    assert p.hash_block(toks[16:], parent=h[:32], start=16) == h[32:]
    assert kvpool.hash_tokens(toks, 16) == h
    assert kvpool.hash_block(toks[:16]) == h[:32]
    assert kvpool.hash_tokens(toks, 16, alg="xxh3")[:16] == bytes(16)
    assert p.hash_tokens(toks, {"salt": b"t"}) != h
    assert p.hash_tokens(toks, {"lora_id": 3, "mm": [(H(1), 0, 4)]}) != h
    out = bytearray(64)
    assert p.hash_tokens(np.array(toks, np.uint32), out=out) == 2 and bytes(out) == h
    big = np.arange(20000, dtype=np.uint32)  # releases the GIL
    assert len(p.hash_tokens(big)) == 32 * (20000 // 16)
    a = p.alloc_blocks(1)[0]
    p.publish_verified(a, h[:32], None, toks[:16])
    assert p.lookup_verified(h[:32], None, toks[:16]) == a
    with pytest.raises(kvpool.NotFoundError):
        p.lookup_verified(h[:32], None, toks[1:17])
    assert kvpool.hash_external(h[:32]) == int.from_bytes(h[24:32], "big") or 1
    with pytest.raises(kvpool.InvalidArgumentError):
        p.hash_block(toks[:3])


def test_block_ptr():
    p = kvpool.Pool(block_size=4, num_blocks=4, block_bytes=(256, 0), host_arena=True)
    assert p.block_ptr(1) - p.block_ptr(0) == 256
    q = kvpool.Pool(num_blocks=4)
    with pytest.raises(kvpool.InvalidArgumentError):
        q.block_ptr(0)


def test_on_evict_callback():
    seen = []
    p = kvpool.Pool(block_size=4, num_blocks=1, on_evict=lambda h, b: seen.append((h, b)))
    a = p.take()
    p.publish(a, H(3))
    p.free(a)
    p.take()
    assert seen == [(H(3), a)]


def test_sequence_calls():
    p = kvpool.Pool(block_size=4, num_blocks=16)
    s = kvpool.Sequence(p, 1)
    assert s.admit(np.arange(10, dtype=np.uint32)) == 0
    assert s.num_tokens == 10 and s.num_blocks == 3
    s.append(7)
    s.append([1, 2, 3])
    assert s.num_tokens == 14
    t = p.sequence(2)
    assert t.admit(list(range(10))) == 8            # 2 full blocks cached
    c = s.fork(3)
    assert c.blocks() == s.blocks()
    assert p.find_sequence(3) is c
    with pytest.raises(kvpool.OwnerActiveError):
        s.fork(2)
    with pytest.raises(kvpool.BusyError):
        s.admit([1])
    c.destroy()
    assert not c.alive
    with pytest.raises(kvpool.InvalidArgumentError):
        c.append(1)
    with pytest.raises(kvpool.NotFoundError):
        p.find_sequence(3)
    out = np.zeros(8, np.uint32)
    assert s.blocks(out=out) == 4
    with s:
        pass
    assert not s.alive
    p.clear()
    assert not t.alive


def test_sequence_references_are_not_anonymous():
    # A sequence's references are its own: free(owner=None) cannot drop them
    # (once it could, and destroying the sequence then corrupted the pool).
    p = kvpool.Pool(block_size=2, num_blocks=12)
    s = kvpool.Sequence(p, 1)
    s.admit([0])
    info = p.block_info(0)
    assert (info["seq_refs"], info["anon_refs"], info["ref_count"]) == (1, 0, 1)
    fp = p.fingerprint()
    with pytest.raises(kvpool.NotOwnerError):
        p.free([0])
    assert p.fingerprint() == fp
    s.destroy()
    p.check()
    assert p.block_info(0)["state"] == "vacant"


def test_zero_copy_table_validity():
    p = kvpool.Pool(block_size=4, num_blocks=32)
    s = kvpool.Sequence(p, 1)
    s.admit(list(range(9)))
    mv = s.block_table
    assert mv.format == "I" and mv.readonly and list(mv) == s.blocks()
    arr = np.asarray(s)                      # numpy view, no copy
    assert arr.dtype == np.uint32 and list(arr) == s.blocks()
    assert s.exports == 2
    fp = p.fingerprint()
    for fn in (lambda: s.append([1]), s.destroy, p.retire_top, p.clear, p.close):
        with pytest.raises(kvpool.BusyError):
            fn()
    assert p.fingerprint() == fp
    s2 = s.fork(2)                          # does not change s's table: allowed
    s2.append([5, 6, 7, 8])
    mv.release()
    with pytest.raises(kvpool.BusyError):
        s.append([1])                       # numpy array still alive
    del arr
    s.append([1])                           # now allowed
    with s.block_table as t:
        assert len(t) == s.num_blocks
    s.destroy()
    p.close()
    assert p.closed


def test_threads_on_thread_safe_pool():
    p = kvpool.Pool(block_size=16, num_blocks=4096, thread_safe=True)
    errors = []

    def work(base):
        try:
            for i in range(200):
                s = kvpool.Sequence(p, base + i)
                s.admit(np.arange(5000, dtype=np.uint32))   # GIL released
                s.destroy()
                ids = p.alloc_blocks(4, owner=base + i)
                p.free(ids, owner=base + i)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    p.check()
    assert p.stats()["in_use"] == 0


def test_large_pool_creation_releases_gil():
    p = kvpool.Pool(num_blocks=1 << 20)
    assert p.free_count() == 1 << 20


def test_ref_count_block_hash_free_one_lookup_default():
    p = kvpool.Pool(block_size=4, num_blocks=4)
    b = p.take(owner=7)
    p.claim(b)
    assert p.ref_count(b) == 2 and p.ref_count(3) == 0
    assert p.block_hash(b) is None
    p.publish(b, H(1))
    assert p.block_hash(b) == H(1) and p.block_hash(3) is None
    assert p.lookup(H(1)) == b and p.lookup(H(1), 0, None) == b
    # An int key is the hash of 24 zero bytes and its low 64 bits, big-endian.
    assert p.lookup(2) == b and p.lookup(2 + (5 << 64), default=-1) == b
    assert p.lookup(3, default=-1) == -1 and p.lookup(-1, default=-1) == -1
    p.take_id(3)
    p.publish(3, -1)  # publish takes the int key too
    assert p.block_hash(3) == bytes(24) + b"\xff" * 8
    assert p.lookup(-1) == 3 and p.lookup((1 << 64) - 1) == 3
    p.unpublish(3)
    p.free(3)
    sentinel = object()
    assert p.lookup(H(2), default=sentinel) is sentinel and p.lookup(H(2), 0, -1) == -1
    with pytest.raises(kvpool.NotFoundError):
        p.lookup(H(2))
    fp = p.fingerprint()
    refused = [
        (kvpool.RangeError, lambda: p.ref_count(4)),
        (kvpool.RangeError, lambda: p.block_hash(99)),
        (kvpool.InvalidArgumentError, lambda: p.ref_count(-1)),
        (TypeError, lambda: p.ref_count()),
        (TypeError, lambda: p.ref_count(b, 1)),
        (kvpool.RangeError, lambda: p.free_one(4)),
        (kvpool.DoubleFreeError, lambda: p.free_one(3)),
        (kvpool.NotOwnerError, lambda: p.free_one(b, owner=8)),
        (TypeError, lambda: p.free_one(b, nobody=1)),
        (kvpool.InvalidArgumentError, lambda: p.lookup(b"short", default=-1)),
        (TypeError, lambda: p.lookup(H(1), 0, -1, 5)),
        (TypeError, lambda: p.lookup(H(1), bogus=1)),
    ]
    for exc, call in refused:
        with pytest.raises(exc):
            call()
        assert p.fingerprint() == fp and p.ref_count(b) == 2
    assert p.free_one(b, owner=7) == 1
    assert p.free_one(b) == 0
    assert p.ref_count(b) == 0 and p.block_hash(b) == H(1)  # cached: still indexed
    assert p.lookup(H(1), default=-1) == b
    p.close()
    for call in (lambda: p.ref_count(b), lambda: p.free_one(b), lambda: p.block_hash(b),
                 lambda: p.lookup(H(1), default=-1)):
        with pytest.raises(kvpool.InvalidArgumentError):
            call()
