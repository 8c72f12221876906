/* SPDX-License-Identifier: Apache-2.0 */
/*
 * atom.c — the hot path of the ATOM drop-in (kvpool.compat.atom.BlockPool
 * subclasses _AtomBlockPool in Python): lookup, pop, allocate, claim, free,
 * publish and the eviction bookkeeping (_spend), each one C call with no
 * Python frame, as ATOM's engine calls them once per block; and ATOM's
 * block hash (compute_hash, the engine's BlockManager.compute_hash) from the
 * tokens in place, with libxxhash's XXH64.
 *
 * What it owns: references to the drop-in's state, which the Python class
 * sets once in __init__ and reads everywhere else: the native Pool
 * (`_pool`), the per-block lists `_hash` (int hash or -1) and `_tokens`,
 * the canonical `blocks`, the sets `_popped` (taken by pop, not yet
 * allocated) and `_stale` (hashed blocks clear_index left live), the dict
 * `_raw_unit_owner`, and `_no_tokens` (what `_tokens` holds for a block
 * without content).  Each is type-checked when set.  It also owns the
 * counters `blocks_evicted` / `blocks_retired` and `_on_evict`.
 *
 * Invariants: every method does exactly what the Python it replaces did, in
 * the same order (so a failing native call leaves the same state): the C
 * path runs for exact-int arguments in range of the lists; any other
 * argument goes to the Python method `_slow_<name>`, the reference
 * implementation.  The lists are indexed only below their length, read
 * again after any Python code ran: a set or dict lookup (a member's
 * __eq__), a comparison of a stored hash, a callback, an object freed by
 * a list store (its __del__) may resize or replace the lists, the sets or
 * the pool; a call that finds its block beyond the lists then raises
 * RuntimeError.  Each set and dict is held by one more reference while a
 * lookup in it runs.
 */
#include "kvpy.h"

#include <structmember.h>
#include <xxhash.h>

typedef struct APool {
    PyObject_HEAD
    PoolObject *pool;  /* kvpool.Pool */
    PyObject *hashes;  /* list */
    PyObject *tokens;  /* list */
    PyObject *blocks;  /* list */
    PyObject *popped;  /* set */
    PyObject *stale;   /* set */
    PyObject *raw;     /* dict */
    PyObject *no_tokens;
    PyObject *on_evict; /* callable or None */
    Py_ssize_t evicted, retired;
} APool;

static PyObject *minus_one; /* the int -1 */

/* 1 when every state object was set; else 0 with RuntimeError. */
static int apool_ready(APool *s)
{
    if (s->pool && s->hashes && s->tokens && s->blocks && s->popped && s->stale && s->raw &&
        s->no_tokens)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "BlockPool.__init__ was not called");
    return 0;
}

/* An exact int argument below both lists' length into *id: 1; 0 when the
 * argument takes the slow path (no exception set). */
static int fast_id(APool *s, PyObject *o, uint32_t *id)
{
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || v < 0 || v >= PyList_GET_SIZE(s->hashes) || v >= PyList_GET_SIZE(s->tokens) ||
        v >= PyList_GET_SIZE(s->blocks) || v > (long long)UINT32_MAX)
        return 0;
    *id = (uint32_t)v;
    return 1;
}

/* 1 when block id is below the three lists' lengths; else 0 with
 * RuntimeError (Python code run by the call shrank or replaced them). */
static int slots_hold(APool *s, uint32_t id)
{
    if (id < PyList_GET_SIZE(s->hashes) && id < PyList_GET_SIZE(s->tokens) &&
        id < PyList_GET_SIZE(s->blocks))
        return 1;
    PyErr_Format(PyExc_RuntimeError,
                 "BlockPool: block %u is beyond _hash, _tokens or blocks, which were resized "
                 "during the call", (unsigned)id);
    return 0;
}

/* self._slow_<name>(*args): the Python reference path. */
static PyObject *slow(APool *s, const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *m = PyObject_GetAttrString((PyObject *)s, name);
    if (!m)
        return NULL;
    PyObject *r = PyObject_Vectorcall(m, args, (size_t)nargs, NULL);
    Py_DECREF(m);
    return r;
}

/* Whether a hash slot holds -1 (no content): the only negative value. */
static int no_hash(PyObject *h)
{
    int overflow;
    return PyLong_CheckExact(h) && PyLong_AsLongLongAndOverflow(h, &overflow) == -1 && !overflow;
}

/* Set _hash[id] to h and _tokens[id] to t (new references taken): 0, or
 * -1 with RuntimeError and nothing stored when id is beyond the lists.
 * Both are stored before the old values are released, as releasing one
 * may run Python code. */
static int slots_put(APool *s, uint32_t id, PyObject *h, PyObject *t)
{
    if (!slots_hold(s, id))
        return -1;
    PyObject *old_h = PyList_GET_ITEM(s->hashes, id), *old_t = PyList_GET_ITEM(s->tokens, id);
    Py_INCREF(h);
    Py_INCREF(t);
    PyList_SET_ITEM(s->hashes, id, h);
    PyList_SET_ITEM(s->tokens, id, t);
    Py_DECREF(old_h);
    Py_DECREF(old_t);
    return 0;
}

/* PySet_Contains or PySet_Discard (`op`) of key: 1 when the set held it,
 * 0 when not, -1 with the exception set.  The set is held while its
 * members' __eq__ may run (one may replace it). */
static int set_op(int (*op)(PyObject *, PyObject *), PyObject *set, PyObject *key)
{
    if (PySet_GET_SIZE(set) == 0)
        return 0;
    Py_INCREF(set);
    int r = op(set, key);
    Py_DECREF(set);
    return r;
}

/* set_op of the int id. */
static int set_op_id(int (*op)(PyObject *, PyObject *), PyObject *set, uint32_t id)
{
    if (PySet_GET_SIZE(set) == 0)
        return 0;
    PyObject *k = PyLong_FromUnsignedLong(id);
    if (!k)
        return -1;
    int r = set_op(op, set, k);
    Py_DECREF(k);
    return r;
}

/* Block id was just taken for other content: clear what it held, count the
 * eviction (or retirement) and call on_evict(hash), unless clear_index had
 * already unindexed it.  0, or -1 with on_evict's exception. */
static int spend(APool *s, uint32_t id, int retiring)
{
    if (!slots_hold(s, id))
        return -1;
    PyObject *h = PyList_GET_ITEM(s->hashes, id);
    if (no_hash(h))
        return 0;
    Py_INCREF(h);
    int st = slots_put(s, id, minus_one, s->no_tokens) < 0 ? -1
                                                           : set_op_id(PySet_Contains, s->stale, id);
    if (st) {
        Py_DECREF(h);
        return st < 0 || set_op_id(PySet_Discard, s->stale, id) < 0 ? -1 : 0;
    }
    if (retiring)
        s->retired++;
    else
        s->evicted++;
    int rc = 0;
    if (s->on_evict && s->on_evict != Py_None) {
        PyObject *cb = s->on_evict;
        Py_INCREF(cb);
        PyObject *r = PyObject_CallOneArg(cb, h);
        Py_DECREF(cb);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_DECREF(h);
    return rc;
}

/* The canonical block object of id (a new reference), or NULL with
 * RuntimeError when id is beyond the lists. */
static PyObject *block_of(APool *s, uint32_t id)
{
    if (!slots_hold(s, id))
        return NULL;
    PyObject *b = PyList_GET_ITEM(s->blocks, id);
    Py_INCREF(b);
    return b;
}

/* lookup(h) -> block id indexed under int hash h, or -1. */
static PyObject *APool_lookup(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (!kvpy_nargs_is(nargs, 1, "lookup(h)") || !apool_ready(s))
        return NULL;
    if (!PyLong_CheckExact(args[0]))
        return slow(s, "_slow_lookup", args, nargs);
    kvp_hash h;
    if (kvpy_hash_or_key(args[0], &h, "hash"))
        return NULL;
    KVPY_POOL_CHECK(s->pool);
    kvp_block b;
    kvp_status st = kvp_lookup(s->pool->pool, 0, &h, &b);
    if (st == KVP_ENOTFOUND) {
        Py_INCREF(minus_one);
        return minus_one;
    }
    return st ? kvpy_raise(st) : PyLong_FromUnsignedLong(b);
}

/* pop() -> the next free block id, taken (AssertionError when none). */
static PyObject *APool_pop(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    if (!kvpy_nargs_is(nargs, 0, "pop()") || !apool_ready(s))
        return NULL;
    KVPY_POOL_CHECK(s->pool);
    kvp_block id;
    kvp_status st = kvp_take_hinted(s->pool->pool, 0, KVP_ANON, &s->pool->take_hint, &id);
    if (st == KVP_EEXHAUSTED) {
        PyErr_SetString(PyExc_AssertionError, "No free blocks available");
        return NULL;
    }
    if (st)
        return kvpy_ev_deliver(s->pool, kvpy_raise(st));
    PyObject *r = PyLong_FromUnsignedLong(id);
    if (r) {
        PyObject *popped = s->popped; /* held: a member's __eq__ may replace it */
        Py_INCREF(popped);
        if (PySet_Add(popped, r) < 0)
            Py_CLEAR(r);
        Py_DECREF(popped);
    }
    if (r && id < PyList_GET_SIZE(s->hashes) && id < PyList_GET_SIZE(s->tokens) &&
        spend(s, id, 0) < 0)
        Py_CLEAR(r);
    return kvpy_ev_deliver(s->pool, r);
}

/* What allocate and claim do first: check the arguments, send an id that
 * is not a plain int in range to the Python method `slow_name`, and
 * complete a pop (the block was taken already).  Returns 1 when that
 * finished the call, its result (or NULL on error) in *out; 0 to go on
 * with *id. */
static int pop_or_slow(APool *s, PyObject *const *args, Py_ssize_t nargs, const char *usage,
                       const char *slow_name, uint32_t *id, PyObject **out)
{
    *out = NULL;
    if (!kvpy_nargs_is(nargs, 1, usage) || !apool_ready(s))
        return 1;
    if (!fast_id(s, args[0], id)) {
        *out = slow(s, slow_name, args, nargs);
        return 1;
    }
    int in = set_op(PySet_Contains, s->popped, args[0]);
    if (in < 0)
        return 1;
    if (in) {
        if (set_op(PySet_Discard, s->popped, args[0]) >= 0)
            *out = block_of(s, *id);
        return 1;
    }
    return 0;
}

/* allocate(id) -> Block: complete a pop, or take id for fresh content. */
static PyObject *APool_allocate(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    PyObject *done;
    if (pop_or_slow(s, args, nargs, "allocate(block_id)", "_slow_allocate", &id, &done))
        return done;
    KVPY_POOL_CHECK(s->pool);
    kvp_status st = kvp_take_id(s->pool->pool, id, KVP_ANON);
    if (st == KVP_EBUSY) {
        PyErr_Format(PyExc_AssertionError, "block %u is in use", (unsigned)id);
        return kvpy_ev_deliver(s->pool, NULL);
    }
    if (st)
        return kvpy_ev_deliver(s->pool, kvpy_raise(st));
    PyObject *r = spend(s, id, 0) < 0 ? NULL : block_of(s, id);
    return kvpy_ev_deliver(s->pool, r);
}

/* claim(id) -> Block: one more share of id's content. */
static PyObject *APool_claim(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    PyObject *done;
    if (pop_or_slow(s, args, nargs, "claim(block_id)", "_slow_claim", &id, &done))
        return done;
    KVPY_POOL_CHECK(s->pool);
    kvp_status st = kvp_claim(s->pool->pool, id, KVP_ANON);
    return kvpy_ev_deliver(s->pool, st ? kvpy_raise(st) : block_of(s, id));
}

/* free(id): drop one reference (AssertionError for a reserved raw unit). */
static PyObject *APool_free(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    if (!kvpy_nargs_is(nargs, 1, "free(block_id)") || !apool_ready(s))
        return NULL;
    if (!fast_id(s, args[0], &id))
        return slow(s, "_slow_free", args, nargs);
    int raw = 0;
    if (PyDict_GET_SIZE(s->raw)) {
        PyObject *d = s->raw; /* held: a key's __eq__ may replace it */
        Py_INCREF(d);
        raw = PyDict_Contains(d, args[0]);
        Py_DECREF(d);
    }
    if (raw < 0)
        return NULL;
    if (raw)
        return PyErr_Format(PyExc_AssertionError,
                            "block %u is a reserved raw unit; use release_units", (unsigned)id);
    if (set_op(PySet_Discard, s->popped, args[0]) < 0)
        return NULL;
    KVPY_POOL_CHECK(s->pool);
    kvp_status st = kvp_free(s->pool->pool, &id, 1, KVP_ANON);
    if (st)
        return kvpy_ev_deliver(s->pool, kvpy_raise(st));
    Py_INCREF(Py_None);
    return kvpy_ev_deliver(s->pool, Py_None);
}

/* publish(id, h, token_ids): index id (in use) under int hash h. */
static PyObject *APool_publish(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    if (!kvpy_nargs_is(nargs, 3, "publish(block_id, h, token_ids)") || !apool_ready(s))
        return NULL;
    PyObject *h = args[1];
    if (!fast_id(s, args[0], &id) || !PyLong_CheckExact(h))
        return slow(s, "_slow_publish", args, nargs);
    unsigned long long hv = PyLong_AsUnsignedLongLong(h);
    if (hv == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or wider than 64 bits: masked by the slow path */
        return slow(s, "_slow_publish", args, nargs);
    }
    KVPY_POOL_CHECK(s->pool);
    PyObject *old = PyList_GET_ITEM(s->hashes, id);
    if (!no_hash(old)) {
        Py_INCREF(old); /* its __ne__ may drop it from the list */
        int ne = PyObject_RichCompareBool(old, h, Py_NE);
        Py_DECREF(old);
        if (ne < 0)
            return NULL;
        KVPY_POOL_CHECK(s->pool); /* __ne__ may have closed or replaced it, */
        if (!slots_hold(s, id))   /* or shrunk the lists: refused, the pool unchanged */
            return NULL;
        if (ne) { /* the original overwrote the block's hash */
            kvp_status st = kvp_unpublish(s->pool->pool, id);
            if (st && st != KVP_ENOTFOUND) /* not found: kept after clear_index */
                return kvpy_ev_deliver(s->pool, kvpy_raise(st));
            if (!kvpy_ev_deliver(s->pool, Py_None))
                return NULL;
        }
    }
    if (set_op_id(PySet_Discard, s->stale, id) < 0)
        return NULL;
    KVPY_POOL_CHECK(s->pool);
    if (!slots_hold(s, id)) /* refused before the pool changes */
        return NULL;
    kvp_hash kh;
    memset(kh.b, 0, 24);
    for (int i = 0; i < 8; i++)
        kh.b[24 + i] = (uint8_t)(hv >> (56 - 8 * i));
    kvp_status st = kvp_publish(s->pool->pool, id, &kh);
    if (st)
        return kvpy_ev_deliver(s->pool, kvpy_raise(st));
    PyObject *r = slots_put(s, id, h, args[2]) < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    return kvpy_ev_deliver(s->pool, r);
}

/* _spend(id, retiring): see spend(). */
static PyObject *APool_spend(APool *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    if (!kvpy_nargs_is(nargs, 2, "_spend(block_id, retiring)") || !apool_ready(s))
        return NULL;
    int retiring = PyObject_IsTrue(args[1]);
    if (retiring < 0)
        return NULL;
    if (!fast_id(s, args[0], &id))
        return PyErr_Format(kvpy_exc[KVP_ERANGE], "block id %R outside the pool's lists",
                            args[0]);
    if (spend(s, id, retiring) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef APool_methods[] = {
    {"lookup", KVPY_FC(APool_lookup), METH_FASTCALL,
     "lookup(h) -> block id indexed under content hash h, or -1."},
    {"pop", KVPY_FC(APool_pop), METH_FASTCALL,
     "pop() -> next free block id (vacant lowest first, then least recently freed cached)."},
    {"allocate", KVPY_FC(APool_allocate), METH_FASTCALL,
     "allocate(block_id) -> Block: take block_id for fresh content (ref count 1), evicting "
     "whatever it held."},
    {"claim", KVPY_FC(APool_claim), METH_FASTCALL,
     "claim(block_id) -> Block: take a share of block_id for the content it already holds."},
    {"free", KVPY_FC(APool_free), METH_FASTCALL,
     "free(block_id): drop one reference on block_id (a raw unit goes back through "
     "release_units)."},
    {"publish", KVPY_FC(APool_publish), METH_FASTCALL,
     "publish(block_id, h, token_ids): index block_id (in use) under the content hash of the "
     "tokens it now holds."},
    {"_spend", KVPY_FC(APool_spend), METH_FASTCALL,
     "_spend(block_id, retiring): block_id was just taken for other content; count the "
     "eviction and call on_evict(hash)."},
    {NULL, NULL, 0, NULL}};

/* The state's setters: each checks its type (so the C paths may rely on it). */
#define STATE_FIELDS(X)                                                                         \
    X(pool, "_pool", &kvpy_pool_type, "kvpool.Pool")                                            \
    X(hashes, "_hash", &PyList_Type, "list")                                                    \
    X(tokens, "_tokens", &PyList_Type, "list")                                                  \
    X(blocks, "blocks", &PyList_Type, "list")                                                   \
    X(popped, "_popped", &PySet_Type, "set")                                                    \
    X(stale, "_stale", &PySet_Type, "set")                                                      \
    X(raw, "_raw_unit_owner", &PyDict_Type, "dict")                                             \
    X(no_tokens, "_no_tokens", NULL, "object")

#define X(field, name, type, tname)                                                             \
    static PyObject *get_##field(APool *s, void *c)                                             \
    {                                                                                           \
        (void)c;                                                                                \
        if (!s->field)                                                                          \
            return PyErr_Format(PyExc_AttributeError, "%s is not set", name);                   \
        Py_INCREF(s->field);                                                                    \
        return (PyObject *)s->field;                                                            \
    }                                                                                           \
    static int set_##field(APool *s, PyObject *v, void *c)                                      \
    {                                                                                           \
        (void)c;                                                                                \
        PyTypeObject *t = type;                                                                 \
        if (!v) {                                                                               \
            PyErr_Format(PyExc_AttributeError, "%s cannot be deleted", name);                   \
            return -1;                                                                          \
        }                                                                                       \
        if (t && Py_TYPE(v) != t) {                                                             \
            PyErr_Format(PyExc_TypeError, "%s must be a %s, not %.100s", name, tname,           \
                         Py_TYPE(v)->tp_name);                                                  \
            return -1;                                                                          \
        }                                                                                       \
        PyObject *old = (PyObject *)s->field;                                                   \
        Py_INCREF(v);                                                                           \
        s->field = (void *)v;                                                                   \
        Py_XDECREF(old);                                                                        \
        return 0;                                                                               \
    }
STATE_FIELDS(X)
#undef X

static PyGetSetDef APool_getset[] = {
#define X(field, name, type, tname)                                                             \
    {name, (getter)get_##field, (setter)set_##field, "the drop-in's " name " (" tname ")", NULL},
    STATE_FIELDS(X)
#undef X
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef APool_members[] = {
    {"_on_evict", T_OBJECT, offsetof(APool, on_evict), 0, "on_evict(hash) or None"},
    {"blocks_evicted", T_PYSSIZET, offsetof(APool, evicted), 0,
     "cached contents destroyed by handing their block out again"},
    {"blocks_retired", T_PYSSIZET, offsetof(APool, retired), 0,
     "cached contents destroyed by retire_top"},
    {NULL, 0, 0, 0, NULL}};

static int APool_traverse(APool *s, visitproc visit, void *arg)
{
    Py_VISIT(s->pool);
    Py_VISIT(s->hashes);
    Py_VISIT(s->tokens);
    Py_VISIT(s->blocks);
    Py_VISIT(s->popped);
    Py_VISIT(s->stale);
    Py_VISIT(s->raw);
    Py_VISIT(s->no_tokens);
    Py_VISIT(s->on_evict);
    return 0; /* a subclass instance's type is visited by the subclass's own traverse */
}

static int APool_clear(APool *s)
{
    Py_CLEAR(s->pool);
    Py_CLEAR(s->hashes);
    Py_CLEAR(s->tokens);
    Py_CLEAR(s->blocks);
    Py_CLEAR(s->popped);
    Py_CLEAR(s->stale);
    Py_CLEAR(s->raw);
    Py_CLEAR(s->no_tokens);
    Py_CLEAR(s->on_evict);
    return 0;
}

static void APool_dealloc(APool *s)
{
    PyTypeObject *t = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    APool_clear(s);
    t->tp_free((PyObject *)s);
}

PyTypeObject kvpy_apool_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool._kvpool._AtomBlockPool",
    .tp_basicsize = sizeof(APool),
    .tp_dealloc = (destructor)APool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The ATOM drop-in's hot path (kvpool.compat.atom.BlockPool subclasses it).",
    .tp_traverse = (traverseproc)APool_traverse,
    .tp_clear = (inquiry)APool_clear,
    .tp_methods = APool_methods,
    .tp_members = APool_members,
    .tp_getset = APool_getset,
    .tp_new = PyType_GenericNew,
};

/* The int -1 the hash slots hold for "no content"; once, at module init. */
int kvpy_atom_init(void)
{
    minus_one = PyLong_FromLong(-1);
    return minus_one ? 0 : -1;
}

/*
 * compute_hash(token_ids, prefix=-1) -> int: ATOM's chained block hash, the
 * value of its BlockManager.compute_hash — XXH64 (seed 0) of prefix's 8
 * little-endian bytes (left out when prefix is -1) followed by the tokens as
 * native int64 (numpy's asarray(token_ids, dtype=int64)).  token_ids: a list
 * or tuple of ints, or a C-contiguous buffer of integers other than bytes
 * and bytearray (array('i'), numpy; unsigned items are reinterpreted as
 * int64, as numpy's cast).  TypeError for
 * anything else, OverflowError for a token outside int64 or a prefix outside
 * 0..2**64-1 other than -1.  No Python object is made but the result.
 */
PyObject *kvpy_atom_compute_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const kw[] = {"token_ids", "prefix", NULL};
    PyObject *o[2];
    (void)m;
    if (kvpy_parse_args("compute_hash", args, nargs, kwnames, kw, 1, o))
        return NULL;
    if (!o[0])
        return PyErr_Format(PyExc_TypeError, "compute_hash() missing argument 'token_ids'");
    int has_prefix = 0;
    unsigned long long pv = 0;
    if (o[1]) {
        if (!PyLong_Check(o[1]))
            return PyErr_Format(PyExc_TypeError, "prefix must be an int, not %.100s",
                                Py_TYPE(o[1])->tp_name);
        int overflow;
        if (PyLong_AsLongLongAndOverflow(o[1], &overflow) != -1 || overflow) {
            pv = PyLong_AsUnsignedLongLong(o[1]);
            if (pv == (unsigned long long)-1 && PyErr_Occurred())
                return NULL;
            has_prefix = 1;
        }
    }
    int64_t small[64 + 1];
    int64_t *buf = small;
    Py_ssize_t n;
    Py_buffer v;
    int has_view = 0;
    char fmt = 0;
    if (PyList_Check(o[0]) || PyTuple_Check(o[0])) {
        n = PySequence_Fast_GET_SIZE(o[0]);
    } else if (PyObject_CheckBuffer(o[0]) && !PyBytes_Check(o[0]) && !PyByteArray_Check(o[0])) {
        /* numpy reads bytes as one string, not as integers */
        if (PyObject_GetBuffer(o[0], &v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        has_view = 1;
        const char *f = v.format ? v.format : "B";
        if (*f == '@' || *f == '=' || *f == '<')
            f++;
        if (!strchr("bBhHiIlLqQ", *f) || f[1] || v.itemsize < 1 || v.itemsize > 8) {
            PyBuffer_Release(&v);
            return PyErr_Format(PyExc_TypeError, "token_ids: a buffer of integers is needed, "
                                "not format '%s'", v.format ? v.format : "B");
        }
        fmt = *f;
        n = v.len / v.itemsize;
    } else {
        return PyErr_Format(PyExc_TypeError,
                            "token_ids must be a list, tuple or integer buffer, not %.100s",
                            Py_TYPE(o[0])->tp_name);
    }
    if (n + 1 > (Py_ssize_t)(sizeof small / sizeof small[0])) {
        buf = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
        if (!buf) {
            if (has_view)
                PyBuffer_Release(&v);
            return PyErr_NoMemory();
        }
    }
    unsigned char *bytes = (unsigned char *)buf;
    int64_t *t = buf + 1;
    PyObject *r = NULL;
    if (has_view) {
        const unsigned char *p = v.buf;
        for (Py_ssize_t i = 0; i < n; i++, p += v.itemsize) {
            int64_t x;
            switch (fmt) {
            case 'b': x = *(const int8_t *)p; break;
            case 'B': x = *p; break;
            case 'h': { int16_t y; memcpy(&y, p, 2); x = y; break; }
            case 'H': { uint16_t y; memcpy(&y, p, 2); x = y; break; }
            case 'i': case 'l': case 'q':
                if (v.itemsize == 4) { int32_t y; memcpy(&y, p, 4); x = y; }
                else { memcpy(&x, p, 8); }
                break;
            default: /* I, L, Q */
                if (v.itemsize == 4) { uint32_t y; memcpy(&y, p, 4); x = y; }
                else { uint64_t y; memcpy(&y, p, 8); x = (int64_t)y; }
                break;
            }
            t[i] = x;
        }
    } else {
        PyObject **items = PySequence_Fast_ITEMS(o[0]);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!PyLong_Check(items[i])) {
                PyErr_Format(PyExc_TypeError, "token_ids[%zd] must be an int, not %.100s", i,
                             Py_TYPE(items[i])->tp_name);
                goto out;
            }
            long long x = PyLong_AsLongLong(items[i]);
            if (x == -1 && PyErr_Occurred())
                goto out;
            t[i] = x;
        }
    }
    /* The prefix's 8 bytes sit just before the tokens: one contiguous input. */
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)(pv >> (8 * i));
    r = PyLong_FromUnsignedLongLong(has_prefix ? XXH64(bytes, 8 + (size_t)n * 8, 0)
                                               : XXH64(t, (size_t)n * 8, 0));
out:
    if (has_view)
        PyBuffer_Release(&v);
    if (buf != small)
        PyMem_Free(buf);
    return r;
}
