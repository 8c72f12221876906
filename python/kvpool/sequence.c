/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sequence.c — the Sequence type: one request's block table (kvp_seq_*),
 * with a zero-copy view of the table, and the Pool methods that find or
 * make one.
 *
 * What it owns: the wrappers (one live Python object per request id, kept
 * in the pool object's `seqs` dict of weak references), admit / append /
 * fork / destroy, the buffer protocol over the library's table.
 *
 * Invariants: a wrapper whose `seq` is NULL is dead (destroyed, or its pool
 * cleared or closed) and refuses every call.  The library's table pointer
 * is valid only until the sequence changes, so while any export is alive
 * (the sequence's `exports`, the pool's `table_exports`) the calls that
 * could move or free it are refused with BusyError, the rule bytearray
 * applies to resizing.  A long admit on a thread-safe pool without on_evict
 * runs without the GIL, the sequence and the pool counted busy meanwhile.
 *
 * Why built this way: the table is read on every decode step; a copy per
 * read would cost more than the step's own library calls.
 */
#include "kvpy.h"

typedef struct SeqObject SeqObject;

struct SeqObject {
    PyObject_HEAD
    PoolObject *pool; /* strong */
    kvp_seq *seq;     /* NULL once destroyed / invalidated */
    uint64_t request_id;
    Py_ssize_t exports;
    Py_ssize_t busy;
    PyObject *weakrefs;
    int init_pending; /* as PoolObject's: one __init__, right after Sequence() */
};

/* Register a wrapper in pool->seqs (request_id -> weakref). */
static SeqObject *seq_wrap(PoolObject *pool, kvp_seq *s, uint64_t rid)
{
    SeqObject *self = PyObject_New(SeqObject, &kvpy_seq_type);
    if (!self)
        return NULL;
    Py_INCREF(pool);
    self->pool = pool;
    self->seq = s;
    self->request_id = rid;
    self->exports = 0;
    self->busy = 0;
    self->weakrefs = NULL;
    self->init_pending = 0;
    PyObject *key = PyLong_FromUnsignedLongLong(rid);
    PyObject *ref = key ? PyWeakref_NewRef((PyObject *)self, NULL) : NULL;
    if (!ref || PyDict_SetItem(pool->seqs, key, ref) < 0) {
        Py_XDECREF(key);
        Py_XDECREF(ref);
        self->seq = NULL; /* the C sequence stays in the pool */
        Py_DECREF(self);
        return NULL;
    }
    Py_DECREF(key);
    Py_DECREF(ref);
    return self;
}

/* The live wrapper for a request id, or NULL (no exception). */
static SeqObject *seq_lookup_wrapper(PoolObject *pool, uint64_t rid)
{
    PyObject *key = PyLong_FromUnsignedLongLong(rid);
    if (!key) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *ref = PyDict_GetItemWithError(pool->seqs, key);
    Py_DECREF(key);
    if (!ref) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *obj = PyWeakref_GetObject(ref);
    if (obj == Py_None)
        return NULL;
    SeqObject *s = (SeqObject *)obj;
    return s->seq ? s : NULL;
}

/* Drop the request id's entry from the pool's wrapper dict. */
static void seq_forget(PoolObject *pool, uint64_t rid)
{
    PyObject *key = PyLong_FromUnsignedLongLong(rid);
    if (!key) {
        PyErr_Clear();
        return;
    }
    if (PyDict_DelItem(pool->seqs, key) < 0)
        PyErr_Clear();
    Py_DECREF(key);
}

/* Mark every live wrapper of the pool dead and forget them all (the
 * library sequences are gone with clear() or close()). */
void kvpy_seqs_invalidate(PoolObject *self)
{
    PyObject *key, *ref;
    Py_ssize_t pos = 0;
    while (PyDict_Next(self->seqs, &pos, &key, &ref)) {
        PyObject *obj = PyWeakref_GetObject(ref);
        if (obj != Py_None)
            ((SeqObject *)obj)->seq = NULL;
    }
    PyDict_Clear(self->seqs);
}

/* 1 if the sequence may be used: its pool open, it alive, no GIL-free call
 * on it in flight; else 0 with the exception set. */
static int seq_ok(SeqObject *self)
{
    if (!self->pool->pool) {
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "the pool is closed");
        return 0;
    }
    if (!self->seq) {
        PyErr_SetString(kvpy_exc[KVP_EINVAL],
                        "the sequence was destroyed (destroy() or Pool.clear())");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(kvpy_exc[KVP_EBUSY], "another thread is inside a call on this sequence");
        return 0;
    }
    return 1;
}

/* 1 unless the table is exported (then 0 with BusyError naming `what`). */
static int seq_no_exports(SeqObject *self, const char *what)
{
    if (self->exports > 0) {
        PyErr_Format(kvpy_exc[KVP_EBUSY],
                     "%s: the block table is exported (a memoryview/array over it is alive); "
                     "release it first",
                     what);
        return 0;
    }
    return 1;
}

/* The live sequence's table: its ids, block count and token count (either
 * count pointer may be NULL).  0, or -1 with the exception set (a dead
 * sequence, a closed pool, a call in flight). */
static int seq_table(SeqObject *self, const kvp_block **ids, size_t *n, size_t *tokens)
{
    if (!seq_ok(self))
        return -1;
    size_t nb;
    kvp_status st = kvp_seq_blocks(self->seq, ids, n ? n : &nb, tokens);
    if (st) {
        kvpy_raise(st);
        return -1;
    }
    return 0;
}

/* Raise the exception of a failed kvp_seq_create or kvp_seq_fork of
 * request id rid (an existing one named); returns NULL. */
static PyObject *seq_create_error(kvp_status st, uint64_t rid)
{
    if (st == KVP_EOWNERACTIVE)
        return PyErr_Format(kvpy_exc[st], "sequence %llu exists", (unsigned long long)rid);
    return kvpy_raise(st);
}

/* Sequence(pool, request_id, extra=None) */
static PyObject *Seq_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)type;
    static char *kw[] = {"pool", "request_id", "extra", NULL};
    PyObject *pool_o, *rid_o, *extra_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O|O:Sequence", kw, &kvpy_pool_type, &pool_o,
                                     &rid_o, &extra_o))
        return NULL;
    PoolObject *pool = (PoolObject *)pool_o;
    uint64_t rid;
    if (kvpy_get_u64(rid_o, 0, &rid, "request_id"))
        return NULL;
    kvpy_extra ex;
    if (kvpy_extra_get(extra_o, &ex))
        return NULL;
    if (!kvpy_pool_ok(pool)) { /* the conversions may have run Python code that closed it */
        kvpy_extra_release(&ex);
        return NULL;
    }
    kvp_seq *s = NULL;
    kvp_status st = kvp_seq_create(pool->pool, rid, ex.present ? &ex.k : NULL, &s);
    kvpy_extra_release(&ex);
    if (st)
        return seq_create_error(st, rid);
    SeqObject *self = seq_wrap(pool, s, rid);
    if (!self) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        kvp_seq_destroy(s);
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    self->init_pending = 1;
    return (PyObject *)self;
}

/* Sequence.__init__: accepted once, right after Sequence(...) built it;
 * refused later (it would leave the sequence silently unchanged). */
static int Seq_init(SeqObject *self, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    if (!self->init_pending) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Sequence.__init__: this sequence is already initialised "
                        "(make a new Sequence)");
        return -1;
    }
    self->init_pending = 0;
    return 0;
}

/* The wrapper only: the library sequence stays in the pool until destroyed. */
static void Seq_dealloc(SeqObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    Py_XDECREF(self->pool);
    PyObject_Free(self);
}

/* Pool.find_sequence(request_id) -> the Sequence (the same object while one
 * is alive). */
static PyObject *Pool_find_sequence(PoolObject *self, PyObject *const *args,
                                   Py_ssize_t nargs)
{
    uint64_t rid;
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 1, "find_sequence(request_id)"))
        return NULL;
    if (kvpy_get_u64(args[0], 0, &rid, "request_id"))
        return NULL;
    kvp_seq *s = NULL;
    kvp_status st = kvp_seq_find(self->pool, rid, &s);
    if (st)
        return kvpy_raise(st);
    SeqObject *w = seq_lookup_wrapper(self, rid);
    if (w && w->seq == s) {
        Py_INCREF(w);
        return (PyObject *)w;
    }
    return (PyObject *)seq_wrap(self, s, rid);
}

/* Pool.sequence(request_id, extra=None): Sequence(pool, ...), made here. */
static PyObject *Pool_sequence(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const kw[] = {"request_id", "extra", NULL};
    PyObject *o[2];
    if (kvpy_parse_args("sequence", args, nargs, kwnames, kw, 1, o))
        return NULL;
    PyObject *a = Py_BuildValue("(OO)", (PyObject *)self, o[0]);
    if (!a)
        return NULL;
    PyObject *k = NULL;
    if (o[1]) {
        k = Py_BuildValue("{s:O}", "extra", o[1]);
        if (!k) {
            Py_DECREF(a);
            return NULL;
        }
    }
    PyObject *r = Seq_new(&kvpy_seq_type, a, k);
    Py_DECREF(a);
    Py_XDECREF(k);
    if (r)
        ((SeqObject *)r)->init_pending = 0; /* made here, not by Sequence(...) */
    return r;
}

/* sequence.c's rows of the Pool's method table. */
PyMethodDef kvpy_pool_seq_methods[] = {
    {"find_sequence", KVPY_FC(Pool_find_sequence), METH_FASTCALL,
     "find_sequence(request_id) -> Sequence"},
    {"sequence", KVPY_FC(Pool_sequence), KVPY_FCK, "sequence(request_id, extra=None) -> new Sequence"},
    {NULL, NULL, 0, NULL}};

/*
 * admit(tokens).  The state checks follow the conversion of `tokens`, which
 * may run Python code (__index__ of list items).  On a thread-safe pool
 * without on_evict, a long prompt is admitted without the GIL, the sequence
 * and the pool busy meanwhile; with on_evict the GIL stays (see
 * evict.c).  The library reports a sequence that already has tokens as
 * KVP_EBUSY; the message says so.
 */
static PyObject *Seq_admit(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!kvpy_nargs_is(nargs, 1, "admit(tokens)"))
        return NULL;
    kvpy_u32in in;
    if (kvpy_u32in_get(args[0], &in, "tokens"))
        return NULL;
    if (!seq_ok(self) || !seq_no_exports(self, "admit")) {
        kvpy_u32in_release(&in);
        return NULL;
    }
    size_t cached = 0;
    kvp_status st;
    PoolObject *pool = self->pool;
    if (pool->thread_safe && !pool->on_evict && (size_t)in.n >= KVPY_GIL_TOKENS) {
        kvp_seq *seq = self->seq;
        self->busy++;
        Py_INCREF(self);
        kvpy_pool_busy_enter(pool); /* open: seq_ok checked it */
        Py_BEGIN_ALLOW_THREADS
        st = kvp_seq_admit(seq, in.p, (size_t)in.n, &cached);
        Py_END_ALLOW_THREADS
        kvpy_pool_busy_leave(pool);
        self->busy--;
        Py_DECREF(self);
    } else {
        st = kvp_seq_admit(self->seq, in.p, (size_t)in.n, &cached);
    }
    kvpy_u32in_release(&in);
    if (st == KVP_EBUSY) {
        const kvp_block *ids;
        size_t nb, nt = 0;
        if (kvp_seq_blocks(self->seq, &ids, &nb, &nt) == KVP_OK && nt > 0)
            return PyErr_Format(kvpy_exc[KVP_EBUSY],
                                "admit: the sequence already holds %zu tokens (admit takes a "
                                "prompt into an empty sequence; append adds to one)",
                                nt);
    }
    if (st)
        return kvpy_raise(st);
    return PyLong_FromSize_t(cached);
}

/* The checks and the library call of append, once `tokens` is converted
 * (the conversion may run Python code, so the checks come after it). */
static PyObject *seq_append_run(SeqObject *self, const uint32_t *tokens, size_t n)
{
    if (!seq_ok(self) || !seq_no_exports(self, "append"))
        return NULL;
    kvp_status st = kvp_seq_append(self->seq, tokens, n);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* append(tokens): an int, or a buffer/list of them. */
static PyObject *Seq_append(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!kvpy_nargs_is(nargs, 1, "append(tokens)"))
        return NULL;
    if (PyLong_Check(args[0])) {
        uint32_t t;
        if (kvpy_get_u32(args[0], 0, &t, "token"))
            return NULL;
        return seq_append_run(self, &t, 1);
    }
    kvpy_u32in in;
    if (kvpy_u32in_get(args[0], &in, "tokens"))
        return NULL;
    PyObject *r = seq_append_run(self, in.p, (size_t)in.n);
    kvpy_u32in_release(&in);
    return r;
}

/* fork(child_id) -> a new Sequence sharing every block. */
static PyObject *Seq_fork(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t cid;
    if (!kvpy_nargs_is(nargs, 1, "fork(child_id)"))
        return NULL;
    if (kvpy_get_u64(args[0], 0, &cid, "child_id") || !seq_ok(self))
        return NULL;
    kvp_seq *child = NULL;
    kvp_status st = kvp_seq_fork(self->seq, cid, &child);
    if (st)
        return seq_create_error(st, cid);
    SeqObject *w = seq_wrap(self->pool, child, cid);
    if (!w) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        kvp_seq_destroy(child);
        PyErr_Restore(et, ev, tb);
    }
    return (PyObject *)w;
}

/* raise_priority(n_blocks, priority): kvp_seq_raise_priority. */
static PyObject *Seq_raise_priority(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t n;
    uint32_t prio;
    if (!kvpy_nargs_is(nargs, 2, "raise_priority(n_blocks, priority)"))
        return NULL;
    if (kvpy_get_u64(args[0], 0, &n, "n_blocks") || kvpy_get_u32(args[1], 0, &prio, "priority") ||
        !seq_ok(self))
        return NULL;
    kvp_status st = kvp_seq_raise_priority(self->seq, (size_t)n, prio);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* destroy(): free the blocks and the sequence; the wrapper becomes dead.
 * BusyError while the table is exported. */
static PyObject *Seq_destroy(SeqObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!seq_ok(self) || !seq_no_exports(self, "destroy"))
        return NULL;
    kvp_status st = kvp_seq_destroy(self->seq);
    if (st)
        return kvpy_raise(st);
    self->seq = NULL;
    seq_forget(self->pool, self->request_id);
    Py_RETURN_NONE;
}

/* blocks(out=None): a copy of the table (list, or count written to out). */
static PyObject *Seq_blocks(SeqObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const kw[] = {"out", NULL};
    PyObject *o[1];
    const kvp_block *ids;
    size_t n;
    if (!seq_ok(self) || kvpy_parse_args("blocks", args, nargs, kwnames, kw, 0, o) ||
        seq_table(self, &ids, &n, NULL))
        return NULL;
    if (o[0] && o[0] != Py_None) {
        kvpy_u32out out;
        if (kvpy_u32out_get(o[0], &out))
            return NULL;
        if ((size_t)out.cap < n) {
            kvpy_view_release(&out.view);
            return kvpy_raise(KVP_ESPACE);
        }
        if (n)
            memcpy(out.p, ids, n * sizeof(uint32_t));
        kvpy_view_release(&out.view);
        return PyLong_FromSize_t(n);
    }
    return kvpy_u32_list(ids, n);
}

/* __exit__: destroy(), unless already dead. */
static PyObject *Seq_exit(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    if (!self->seq || !self->pool->pool)
        Py_RETURN_NONE;
    return Seq_destroy(self, NULL);
}

/* block_table: a memoryview over the table (an export). */
static PyObject *Seq_get_table(SeqObject *self, void *c)
{
    (void)c;
    if (!seq_ok(self))
        return NULL;
    return PyMemoryView_FromObject((PyObject *)self);
}

/* num_tokens (closure NULL) and num_blocks (closure non-NULL). */
static PyObject *Seq_get_count(SeqObject *self, void *blocks)
{
    const kvp_block *ids;
    size_t n, t;
    if (seq_table(self, &ids, &n, &t))
        return NULL;
    return PyLong_FromSize_t(blocks ? n : t);
}

/* request_id. */
static PyObject *Seq_get_rid(SeqObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->request_id);
}

/* alive: False once destroyed or invalidated. */
static PyObject *Seq_get_alive(SeqObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->seq != NULL && self->pool->pool != NULL);
}

/* exports: live exports of the table. */
static PyObject *Seq_get_exports(SeqObject *self, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(self->exports);
}

/* pool: the Pool. */
static PyObject *Seq_get_pool(SeqObject *self, void *c)
{
    (void)c;
    Py_INCREF(self->pool);
    return (PyObject *)self->pool;
}

/* The repr names the request id and a dead sequence. */
static PyObject *Seq_repr(SeqObject *self)
{
    return PyUnicode_FromFormat("<kvpool.Sequence request_id=%llu%s>",
                                (unsigned long long)self->request_id,
                                self->seq ? "" : " (destroyed)");
}

/* Buffer protocol: the block table, read-only, format 'I', zero-copy. */
static uint32_t empty_table[1];

/* Export the table (read-only, format 'I', zero-copy), counted on the
 * sequence and the pool until released. */
static int Seq_getbuffer(SeqObject *self, Py_buffer *view, int flags)
{
    if (!seq_ok(self))
        return -1;
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "the block table is read-only");
        return -1;
    }
    const kvp_block *ids;
    size_t n;
    if (seq_table(self, &ids, &n, NULL))
        return -1;
    Py_ssize_t *shape = PyMem_Malloc(2 * sizeof(Py_ssize_t));
    if (!shape) {
        PyErr_NoMemory();
        return -1;
    }
    shape[0] = (Py_ssize_t)n;
    shape[1] = 4;
    view->buf = n ? (void *)ids : (void *)empty_table;
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->len = (Py_ssize_t)n * 4;
    view->readonly = 1;
    view->itemsize = 4;
    view->format = (flags & PyBUF_FORMAT) ? "I" : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) ? &shape[0] : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? &shape[1] : NULL;
    view->suboffsets = NULL;
    view->internal = shape;
    self->exports++;
    self->pool->table_exports++;
    return 0;
}

/* The end of an export. */
static void Seq_releasebuffer(SeqObject *self, Py_buffer *view)
{
    PyMem_Free(view->internal);
    self->exports--;
    self->pool->table_exports--;
}

static PyBufferProcs Seq_as_buffer = {
    (getbufferproc)Seq_getbuffer,
    (releasebufferproc)Seq_releasebuffer,
};

/*
 * __array__(dtype=None, copy=None): numpy asks for it when the buffer export
 * fails, and would otherwise turn a destroyed sequence (or one of a closed
 * pool) into a 0-d object array.  Raises what the export raised; on a live
 * sequence returns numpy's view of the table (a copy with copy=True).
 */
static PyObject *Seq_array(SeqObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:__array__", kw, &dtype, &copy))
        return NULL;
    int want_copy = copy != Py_None ? PyObject_IsTrue(copy) : 0;
    if (want_copy < 0 || !seq_ok(self))
        return NULL;
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *mv = np ? PyMemoryView_FromObject((PyObject *)self) : NULL;
    PyObject *r = mv ? PyObject_CallMethod(np, want_copy ? "array" : "asarray", "OO", mv, dtype)
                     : NULL;
    Py_XDECREF(mv);
    Py_XDECREF(np);
    return r;
}

/* Sequence methods that change the pool deliver its queued evictions
 * before returning (see evict.c): fn##_ev wraps fn. */
#define SEQ_EV_FC(fn)                                                                           \
    static PyObject *fn##_ev(SeqObject *self, PyObject *const *a, Py_ssize_t n)                 \
    {                                                                                           \
        PoolObject *pool = self->pool;                                                          \
        return kvpy_ev_deliver(pool, fn(self, a, n));                                                \
    }
SEQ_EV_FC(Seq_admit)
SEQ_EV_FC(Seq_append)
SEQ_EV_FC(Seq_fork)
SEQ_EV_FC(Seq_exit)
#undef SEQ_EV_FC

/* destroy() with the queued evictions delivered. */
static PyObject *Seq_destroy_ev(SeqObject *self, PyObject *unused)
{
    PoolObject *pool = self->pool;
    return kvpy_ev_deliver(pool, Seq_destroy(self, unused));
}

static PyMethodDef Seq_methods[] = {
    {"admit", (PyCFunction)(void (*)(void))Seq_admit_ev, METH_FASTCALL,
     "admit(tokens) -> cached_tokens\n\nAdmit a whole prompt into this empty sequence: reuse "
     "the longest cached prefix, allocate and publish the rest.  All or nothing."},
    {"append", (PyCFunction)(void (*)(void))Seq_append_ev, METH_FASTCALL,
     "append(tokens)\n\nAppend tokens (an int or a buffer/list of them); blocks are allocated "
     "as the last fills and published when full; copy-on-write for a shared partial block."},
    {"fork", (PyCFunction)(void (*)(void))Seq_fork_ev, METH_FASTCALL,
     "fork(child_id) -> Sequence sharing every block."},
    {"raise_priority", (PyCFunction)(void (*)(void))Seq_raise_priority, METH_FASTCALL,
     "raise_priority(n_blocks, priority): raise the retention priority of the first n_blocks "
     "blocks to priority (0 low .. 3; a block already higher keeps its own), so that a "
     "prefix such as a system prompt is evicted after what follows it.  O(n_blocks)."},
    {"destroy", (PyCFunction)Seq_destroy_ev, METH_NOARGS,
     "destroy()\n\nFree the blocks (last first) and the sequence."},
    {"blocks", (PyCFunction)(void (*)(void))Seq_blocks, METH_FASTCALL | METH_KEYWORDS,
     "blocks(out=None) -> list, or the count written into `out` (a copy of the table)."},
    {"__enter__", (PyCFunction)kvpy_return_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Seq_exit_ev, METH_FASTCALL, NULL},
    {"__array__", (PyCFunction)(void (*)(void))Seq_array, METH_VARARGS | METH_KEYWORDS,
     "__array__(dtype=None, copy=None): numpy's view of the table (raises on a dead sequence)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Seq_getset[] = {
    {"block_table", (getter)Seq_get_table, NULL,
     "Zero-copy read-only memoryview (format 'I') of the block table.  While it (or any "
     "export, e.g. numpy.asarray(seq)) is alive, admit/append/destroy and Pool.retire_top/"
     "clear/close raise BusyError; call .release() or use `with`.",
     NULL},
    {"num_tokens", (getter)Seq_get_count, NULL, "tokens in the sequence", NULL},
    {"num_blocks", (getter)Seq_get_count, NULL, "blocks in the table", (void *)"blocks"},
    {"request_id", (getter)Seq_get_rid, NULL, "the request id", NULL},
    {"alive", (getter)Seq_get_alive, NULL, "False once destroyed or invalidated", NULL},
    {"exports", (getter)Seq_get_exports, NULL, "live zero-copy exports of the table", NULL},
    {"pool", (getter)Seq_get_pool, NULL, "the Pool", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kvpy_seq_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool.Sequence",
    .tp_basicsize = sizeof(SeqObject),
    .tp_dealloc = (destructor)Seq_dealloc,
    .tp_repr = (reprfunc)Seq_repr,
    .tp_as_buffer = &Seq_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sequence(pool, request_id, extra=None)\n\nOne request's block table, managed by "
              "the pool (kvp_seq_*).  The object supports the buffer protocol: "
              "memoryview(seq) / numpy.asarray(seq) view the table without copying.",
    .tp_weaklistoffset = offsetof(SeqObject, weakrefs),
    .tp_methods = Seq_methods,
    .tp_getset = Seq_getset,
    .tp_new = Seq_new,
    .tp_init = (initproc)Seq_init,
};
