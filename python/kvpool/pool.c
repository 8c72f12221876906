/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c — the Pool type: every call of include/kvpool.h on one kvp_pool.
 *
 * What it owns: creation from keyword arguments, close/clear/dealloc, the
 * busy and export guards (a GIL-free call in flight, a zero-copy table
 * exported), and the methods.  The methods whose body is "convert the
 * arguments, make one library call, raise on error, convert the result"
 * are rows of one table (SIMPLE_METHODS below) run by one function; the
 * others (batches, buffers, hashing, events, statistics) are written out.
 *
 * Invariants: a method checks the pool open before it touches it, and
 * again after any conversion that may have run Python code, when it then
 * calls the library; a refused batch changes nothing (batches the library
 * lacks are checked whole before the first per-block call); every method
 * that can evict returns through kvpy_ev_deliver.
 *
 * Why built this way: the table keeps argument names, error messages and
 * eviction delivery the same for every such method, with no per-method
 * copy of the checks to drift apart.
 */
#include "kvpy.h"

#include <stdlib.h>

/* Keyword `what` (o, absent: *out unchanged) as one of the library's names
 * for the enumeration name_of names (kvp_policy_name, ...), or as an
 * integer.  0, or -1 with the exception set, its message listing the names. */
static int parse_named(PyObject *o, const char *what, const char *(*name_of)(int),
                       uint32_t *out)
{
    if (!o)
        return 0;
    if (!PyUnicode_Check(o))
        return kvpy_get_u32(o, 0, out, what);
    int v = 0;
    for (; name_of(v); v++)
        if (!PyUnicode_CompareWithASCIIString(o, name_of(v))) {
            *out = (uint32_t)v;
            return 0;
        }
    char usage[160];
    size_t n = 0;
    for (int i = 0; i < v && n < sizeof usage; i++)
        n += (size_t)snprintf(usage + n, sizeof usage - n, "%s'%s'",
                              i == 0 ? "" : i + 1 == v ? " or " : ", ", name_of(i));
    PyErr_Format(kvpy_exc[KVP_EINVAL], "%s must be %s", what, usage);
    return -1;
}

/* Keyword `what` (o; absent: *out unchanged) as an integer in lo..hi: 0,
 * or -1 with TypeError (not an integer) or InvalidArgumentError naming the
 * range and the value. */
static int get_ranged(PyObject *o, uint32_t lo, uint32_t hi, const char *what, uint32_t *out)
{
    if (!o)
        return 0;
    PyObject *idx = kvpy_index(o, what);
    if (!idx)
        return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    int ok = !overflow && v >= (long long)lo && v <= (long long)hi;
    if (ok)
        *out = (uint32_t)v;
    else if (!PyErr_Occurred())
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s must be %u..%u, not %S", what, (unsigned)lo,
                     (unsigned)hi, idx);
    Py_DECREF(idx);
    return ok ? 0 : -1;
}

/* The configurations kvp_pool_create refuses for a combination of fields,
 * each with a message naming them: 0, or -1 with InvalidArgumentError. */
static int config_combination(const kvp_config *c)
{
    if (c->policy != KVP_POLICY_LRU && c->reuse == KVP_REUSE_FIFO) {
        PyErr_Format(kvpy_exc[KVP_EINVAL],
                     "policy '%s' cannot be combined with reuse 'fifo' (use 'lifo' or 'lowest')",
                     kvp_policy_name(c->policy));
        return -1;
    }
    if (c->null_block && c->num_blocks == 0) {
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "null_block needs num_blocks >= 1");
        return -1;
    }
    if (c->num_blocks > KVP_MAX_BLOCKS || c->max_blocks > KVP_MAX_BLOCKS) {
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s (%u) is above KVP_MAX_BLOCKS (%u)",
                     c->num_blocks > KVP_MAX_BLOCKS ? "num_blocks" : "max_blocks",
                     (unsigned)(c->num_blocks > KVP_MAX_BLOCKS ? c->num_blocks : c->max_blocks),
                     (unsigned)KVP_MAX_BLOCKS);
        return -1;
    }
    if (c->max_blocks && c->num_blocks > c->max_blocks) {
        PyErr_Format(kvpy_exc[KVP_EINVAL], "num_blocks (%u) is above max_blocks (%u)",
                     (unsigned)c->num_blocks, (unsigned)c->max_blocks);
        return -1;
    }
    return 0;
}

/* reuse=, policy= and hash_alg= into cfg (hash_alg also takes "xxh3_128"
 * and refuses KVP_HASH_CUSTOM: there is no function to give it).  0, or -1
 * with the exception set. */
static int parse_names(PyObject *reuse, PyObject *policy, PyObject *alg, kvp_config *cfg)
{
    uint32_t r = (uint32_t)cfg->reuse, pol = (uint32_t)cfg->policy, a = (uint32_t)cfg->hash_alg;
    if (alg && PyUnicode_Check(alg) && !PyUnicode_CompareWithASCIIString(alg, "xxh3_128"))
        alg = NULL, a = KVP_HASH_XXH3_128;
    if (parse_named(reuse, "reuse", kvp_reuse_name, &r) ||
        parse_named(policy, "policy", kvp_policy_name, &pol) ||
        parse_named(alg, "hash_alg", kvp_hash_alg_name, &a))
        return -1;
    if (a == KVP_HASH_CUSTOM) {
        PyErr_SetString(kvpy_exc[KVP_EINVAL],
                        "hash_alg: custom hash functions are not available from Python");
        return -1;
    }
    cfg->reuse = (kvp_reuse)r;
    cfg->policy = (kvp_policy)pol;
    cfg->hash_alg = (kvp_hash_alg)a;
    return 0;
}

static const char *const pool_kw[] = {
    "block_size", "num_blocks", "max_blocks", "separate_kv", "grow_on_exhaustion",
    "thread_safe", "null_block", "prefix_caching", "reuse", "history_len",
    "history_every_call", "on_evict", "hash_alg", "root_seed", "random_root",
    "verify_hits", "block_bytes", "host_arena", "events", "event_capacity", "medium", "prefault",
    "policy", "protected_percent", NULL};

/* Pool(**config): every keyword is a kvp_config field (see the type's doc).
 * Builds the library pool (without the GIL when it is large); NULL with the
 * exception set on a bad argument or a refused configuration. */
PyObject *kvpy_pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *o[24] = {0};
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "Pool() takes keyword arguments only");
        return NULL;
    }
    if (kwds) {
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwds, &pos, &key, &val)) {
            int found = -1;
            for (int i = 0; pool_kw[i]; i++)
                if (PyUnicode_Check(key) && !PyUnicode_CompareWithASCIIString(key, pool_kw[i]))
                    found = i;
            if (found < 0) {
                PyErr_Format(PyExc_TypeError, "Pool() got an unexpected keyword argument %R",
                             key);
                return NULL;
            }
            o[found] = val;
        }
    }
    kvp_config cfg;
    kvp_config_default(&cfg);
    if (get_ranged(o[0], 1, 65535, "block_size", &cfg.block_size) ||
        kvpy_get_u32(o[1], cfg.num_blocks, &cfg.num_blocks, "num_blocks"))
        return NULL;
    if (o[2] && o[2] != Py_None) {
        if (kvpy_get_u32(o[2], 0, &cfg.max_blocks, "max_blocks"))
            return NULL;
    }
    if (kvpy_get_bool(o[3], 0, &cfg.separate_kv) || kvpy_get_bool(o[4], 0, &cfg.grow_on_exhaustion) ||
        kvpy_get_bool(o[5], 0, &cfg.thread_safe) || kvpy_get_bool(o[6], 0, &cfg.null_block) ||
        kvpy_get_bool(o[7], 1, &cfg.prefix_caching) || parse_names(o[8], o[22], o[12], &cfg) ||
        kvpy_get_u32(o[9], cfg.history_len, &cfg.history_len, "history_len") ||
        kvpy_get_bool(o[10], 0, &cfg.history_every_call) ||
        kvpy_get_bool(o[14], 0, &cfg.random_root) || kvpy_get_bool(o[15], 0, &cfg.verify_hits) ||
        kvpy_get_bool(o[17], 0, &cfg.host_arena) || kvpy_get_bool(o[18], 0, &cfg.events) ||
        kvpy_get_u32(o[19], cfg.event_capacity, &cfg.event_capacity, "event_capacity") ||
        kvpy_get_bool(o[21], 0, &cfg.prefault) ||
        get_ranged(o[23], 0, 100, "protected_percent", &cfg.protected_percent) ||
        config_combination(&cfg))
        return NULL;
    if (o[11] && o[11] != Py_None && !PyCallable_Check(o[11])) {
        PyErr_SetString(PyExc_TypeError, "on_evict must be callable or None");
        return NULL;
    }
    if (o[13] && o[13] != Py_None && kvpy_get_hash(o[13], &cfg.root_seed, "root_seed"))
        return NULL;
    if (o[16] && o[16] != Py_None) {
        /* a tuple of the items: an item's __index__ may change a list */
        PyObject *seq = kvpy_tuple_of(o[16], "block_bytes must be (bytes_k_or_shared, bytes_v)");
        if (!seq)
            return NULL;
        Py_ssize_t n = PyTuple_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < n && i < 2; i++) {
            uint64_t v;
            if (kvpy_get_u64(PyTuple_GET_ITEM(seq, i), 0, &v, "block_bytes")) {
                Py_DECREF(seq);
                return NULL;
            }
            cfg.block_bytes[i] = (size_t)v;
        }
        Py_DECREF(seq);
    }
    if (o[20] && o[20] != Py_None) {
        cfg.medium = PyUnicode_AsUTF8(o[20]); /* copied at creation */
        if (!cfg.medium)
            return NULL;
    }

    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->take_hint = KVP_HINT_NONE;
    self->init_pending = 1;
    self->seqs = PyDict_New();
    if (!self->seqs) {
        Py_DECREF(self);
        return NULL;
    }
    if (o[11] && o[11] != Py_None) {
        Py_INCREF(o[11]);
        self->on_evict = o[11];
        cfg.on_evict = kvpy_evict_trampoline;
        cfg.evict_user = self;
    }
    kvp_status st;
    kvp_pool *p = NULL;
    if (cfg.num_blocks >= KVPY_GIL_CREATE_BLOCKS) {
        Py_BEGIN_ALLOW_THREADS
        st = kvp_pool_create(&cfg, &p);
        Py_END_ALLOW_THREADS
    } else {
        st = kvp_pool_create(&cfg, &p);
    }
    if (st) {
        Py_DECREF(self);
        return kvpy_raise(st);
    }
    self->pool = p;
    self->block_size = cfg.block_size;
    self->thread_safe = cfg.thread_safe;
    self->events = cfg.events;
    self->null_block = cfg.null_block;
    self->separate_kv = cfg.separate_kv;
    return (PyObject *)self;
}


/*
 * Dealloc destroys the library pool.  It cannot run while a call is inside
 * the library: every method is called through a reference its caller holds,
 * the GIL-free calls hold one more (kvpy_pool_busy_enter), and evictions are
 * delivered after the library call, holding a reference too.
 */
static void Pool_dealloc(PoolObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->pool) {
        kvp_pool *p = self->pool;
        self->pool = NULL;
        kvp_pool_destroy(p);
    }
    Py_XDECREF(self->on_evict);
    PyMem_RawFree(self->evq);
    Py_XDECREF(self->seqs);
    for (uint32_t i = 0; self->vkeys && i < self->nvkeys; i++)
        Py_XDECREF(self->vkeys[i]);
    PyMem_Free(self->vkeys);
    free(self->varena); /* every block held this pool, so none is left */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The callback can refer back to the pool (a bound method of an object
 * holding it): the collector must see that edge to free such a cycle. */
static int Pool_traverse(PoolObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->on_evict);
    return 0;
}

/* Breaking a cycle drops the callback; evictions still queued are then
 * delivered to no one (the pool is unreachable: no call is in progress). */
static int Pool_tp_clear(PoolObject *self)
{
    Py_CLEAR(self->on_evict);
    return 0;
}

/* The pool is built by tp_new; __init__ is accepted once, right after it
 * (the arguments were checked there), and refused on a built pool, which
 * it would otherwise leave silently unchanged. */
static int Pool_init(PoolObject *self, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    if (!self->init_pending) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Pool.__init__: this pool is already initialised (make a new Pool)");
        return -1;
    }
    self->init_pending = 0;
    return 0;
}

/*
 * The bracket of every call that releases the GIL on a pool: the pool is
 * checked open (argument conversion, which runs before, may run Python code
 * that closed it), counted busy so that close(), clear() and retire_top()
 * refuse with BusyError until the call is back, and held by one more
 * reference.  Returns the library pool, or NULL with the exception set.
 */
kvp_pool *kvpy_pool_busy_enter(PoolObject *self)
{
    if (!kvpy_pool_ok(self))
        return NULL;
    self->busy++;
    Py_INCREF(self);
    return self->pool;
}

/* The end of kvpy_pool_busy_enter's bracket. */
void kvpy_pool_busy_leave(PoolObject *self)
{
    self->busy--;
    Py_DECREF(self);
}

/* Refuse calls that would invalidate exported block tables. */
static int pool_no_exports(PoolObject *self, const char *what)
{
    if (self->table_exports > 0) {
        PyErr_Format(kvpy_exc[KVP_EBUSY],
                     "%s: a zero-copy block table of one of this pool's sequences is still "
                     "exported (release the memoryview/array first)",
                     what);
        return 0;
    }
    if (self->busy > 0) {
        PyErr_Format(kvpy_exc[KVP_EBUSY], "%s: another thread is inside a call on this pool",
                     what);
        return 0;
    }
    return 1;
}

/* close(): invalidate every Sequence and destroy the library pool now;
 * idempotent.  BusyError (nothing changes) while a table is exported or a
 * GIL-free call is in flight. */
static PyObject *Pool_close(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->pool)
        Py_RETURN_NONE;
    if (!pool_no_exports(self, "close"))
        return NULL;
    kvpy_seqs_invalidate(self);
    kvp_pool *p = self->pool;
    self->pool = NULL;
    kvp_pool_destroy(p);
    Py_RETURN_NONE;
}

/* __exit__: close(). */
static PyObject *Pool_exit(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return Pool_close(self, NULL);
}

/* clear(): the library pool back to its just-created state; every
 * Sequence becomes invalid.  BusyError as close(). */
static PyObject *Pool_clear(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    if (!pool_no_exports(self, "clear"))
        return NULL;
    kvp_status st = kvp_pool_clear(self->pool);
    if (st)
        return kvpy_raise(st);
    kvpy_seqs_invalidate(self);
    Py_RETURN_NONE;
}

/* kvpy_u32in_get, then the check that the pool is still open (converting
 * a sequence may run Python code that closed it): 0, or -1 with the
 * exception set and nothing held. */
static int pool_u32in(PoolObject *self, PyObject *o, kvpy_u32in *in, const char *what)
{
    if (kvpy_u32in_get(o, in, what))
        return -1;
    if (kvpy_pool_ok(self))
        return 0;
    kvpy_u32in_release(in);
    return -1;
}

/* alloc(tokens, owner=None, stream=0, format=0, out=None) */
static PyObject *do_alloc(PoolObject *self, uint64_t tokens, PyObject *const *o)
{
    kvp_owner owner;
    uint32_t stream, fmt;
    if (kvpy_get_owner(o[1], &owner) || kvpy_get_u32(o[2], 0, &stream, "stream") ||
        kvpy_get_u32(o[3], 0, &fmt, "format"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversions may have run Python code that closed it */
    size_t n = 0;
    kvp_status st;
    if (o[4] && o[4] != Py_None) {
        kvpy_u32out out;
        if (kvpy_u32out_get(o[4], &out))
            return NULL;
        st = kvp_alloc(self->pool, (kvp_stream)stream, tokens, owner, fmt, out.p,
                       (size_t)out.cap, &n);
        kvpy_view_release(&out.view);
        if (st)
            return kvpy_raise(st);
        return PyLong_FromSize_t(n);
    }
    uint64_t need = self->block_size ? (tokens + self->block_size - 1) / self->block_size : 0;
    uint32_t small[64];
    uint32_t *ids = small;
    if (need > 64) {
        if (need > KVP_MAX_BLOCKS)
            return kvpy_raise(KVP_EEXHAUSTED);
        ids = PyMem_Malloc((size_t)need * sizeof(uint32_t));
        if (!ids)
            return PyErr_NoMemory();
    }
    st = kvp_alloc(self->pool, (kvp_stream)stream, tokens, owner, fmt, ids, (size_t)need, &n);
    PyObject *r = st ? kvpy_raise(st) : kvpy_u32_list(ids, n);
    if (ids != small)
        PyMem_Free(ids);
    return r;
}

/* alloc(tokens, owner=None, stream=0, format=0, out=None): see do_alloc. */
static PyObject *Pool_alloc(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const kw[] = {"tokens", "owner", "stream", "format", "out", NULL};
    PyObject *o[5];
    uint64_t tokens;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("alloc", args, nargs, kwnames, kw, 1, o) || kvpy_get_u64(o[0], 0, &tokens, "tokens"))
        return NULL;
    return do_alloc(self, tokens, o);
}

/* alloc_blocks(n, ...): alloc of n whole blocks. */
static PyObject *Pool_alloc_blocks(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const kw[] = {"n", "owner", "stream", "format", "out", NULL};
    PyObject *o[5];
    uint64_t n;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("alloc_blocks", args, nargs, kwnames, kw, 1, o) || kvpy_get_u64(o[0], 0, &n, "n"))
        return NULL;
    if (n > KVP_MAX_BLOCKS)
        return kvpy_raise(KVP_EINVAL);
    return do_alloc(self, n * self->block_size, o);
}

/* take(owner=None, stream=0) -> id: one block, kvp_take_hinted with the
 * pool's one hint (a single take costs less there than kvp_take_each with
 * n = 1). */
static PyObject *Pool_take(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const kw[] = {"owner", "stream", NULL};
    PyObject *o[2];
    kvp_owner owner;
    uint32_t stream;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("take", args, nargs, kwnames, kw, 0, o) || kvpy_get_owner(o[0], &owner) ||
        kvpy_get_u32(o[1], 0, &stream, "stream"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversions may have run Python code that closed it */
    /* One hint per pool, not per owner: a run of takes for the same owner
     * (a request decoding) skips the lookup; any other take costs one
     * compare and moves the hint.  The GIL serialises the calls. */
    kvp_block id;
    kvp_status st = kvp_take_hinted(self->pool, (kvp_stream)stream, owner, &self->take_hint, &id);
    if (st)
        return kvpy_raise(st);
    return PyLong_FromUnsignedLong(id);
}

/* Raise the exception of `st` for a batch whose first `taken` takes stand:
 * it carries `taken` (their count) and `blocks` (their ids), so the caller
 * can free them.  Should attaching them fail, the exception of `st` is
 * raised without them. */
static void raise_taken(kvp_status st, const uint32_t *ids, size_t taken)
{
    PyObject *et, *ev, *tb;
    kvpy_raise(st);
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *n = PyLong_FromSize_t(taken);
    PyObject *l = n ? kvpy_u32_list(ids, taken) : NULL;
    if (!l || PyObject_SetAttrString(ev, "taken", n) < 0 ||
        PyObject_SetAttrString(ev, "blocks", l) < 0)
        PyErr_Clear();
    Py_XDECREF(n);
    Py_XDECREF(l);
    PyErr_Restore(et, ev, tb);
}

/*
 * take_each(owners, out=None, hints=None, stream=0): one block for each
 * owner, in order, in one library call (kvp_take_each): a decode step's
 * takes.  Returns the list of ids, or with `out` (a uint32 buffer of at
 * least len(owners)) the count written.  `hints`, when given, is the
 * caller's uint32 buffer of one hint per owner, kept from step to step
 * (start it at HINT_NONE; any value is safe).  The takes run in order; on
 * an error the ones before the failed take stand (see raise_taken).
 */
static PyObject *Pool_take_each(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const kw[] = {"owners", "out", "hints", "stream", NULL};
    PyObject *o[4];
    uint32_t stream;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("take_each", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u32(o[3], 0, &stream, "stream"))
        return NULL;
    kvpy_owners own;
    if (kvpy_owners_get(o[0], &own, "owners"))
        return NULL;
    kvpy_u32out out, hints;
    int got_out = 0, got_hints = 0;
    uint32_t small[64], *ids = small, *heap = NULL;
    PyObject *res = NULL;
    size_t n = (size_t)own.n, taken = 0;
    if (o[1] && o[1] != Py_None) {
        if (kvpy_u32out_get(o[1], &out))
            goto done;
        got_out = 1;
        if ((size_t)out.cap < n) {
            kvpy_raise(KVP_ESPACE);
            goto done;
        }
        ids = out.p;
    } else if (n > sizeof small / sizeof small[0]) {
        ids = heap = PyMem_Malloc(n * sizeof(uint32_t));
        if (!ids) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (o[2] && o[2] != Py_None) {
        if (kvpy_u32out_get(o[2], &hints))
            goto done;
        got_hints = 1;
        if ((size_t)hints.cap < n) {
            PyErr_SetString(kvpy_exc[KVP_EINVAL], "hints must hold one entry per owner");
            goto done;
        }
    }
    if (!kvpy_pool_ok(self)) /* a conversion may have run Python code that closed it */
        goto done;
    kvp_status st = kvp_take_each(self->pool, (kvp_stream)stream, own.p,
                                  got_hints ? hints.p : NULL, NULL, n, ids, &taken);
    if (st)
        raise_taken(st, ids, taken);
    else
        res = got_out ? PyLong_FromSize_t(taken) : kvpy_u32_list(ids, taken);
done:
    if (got_hints)
        kvpy_view_release(&hints.view);
    if (got_out)
        kvpy_view_release(&out.view);
    PyMem_Free(heap);
    kvpy_owners_release(&own);
    return res;
}

/* The arguments (ids, owner=None) of the calls that name blocks for an owner. */
static int ids_owner_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **ids, kvp_owner *owner)
{
    static const char *const kw[] = {"ids", "owner", NULL};
    PyObject *o[2];
    if (kvpy_parse_args(name, args, nargs, kwnames, kw, 1, o) || kvpy_get_owner(o[1], owner))
        return -1;
    *ids = o[0];
    return 0;
}

/* free(ids, owner=None): one reference dropped per id (an int, buffer or
 * list), all or nothing. */
static PyObject *Pool_free(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (ids_owner_args("free", args, nargs, kwnames, &ids, &owner))
        return NULL;
    kvp_status st;
    if (PyLong_Check(ids)) {
        uint32_t id;
        if (kvpy_get_u32(ids, 0, &id, "id"))
            return NULL;
        KVPY_POOL_CHECK(self); /* the owner's conversion may have closed it */
        st = kvp_free(self->pool, &id, 1, owner);
    } else {
        kvpy_u32in in;
        if (pool_u32in(self, ids, &in, "ids"))
            return NULL;
        st = kvp_free(self->pool, in.p, (size_t)in.n, owner);
        kvpy_u32in_release(&in);
    }
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* owner_blocks(owner, out=None): the owner's blocks as a list, or the
 * count written into out (SpaceError when out is too small). */
static PyObject *Pool_owner_blocks(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const kw[] = {"owner", "out", NULL};
    PyObject *o[2];
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("owner_blocks", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[0], 0, &owner, "owner"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversion may have run Python code that closed it */
    size_t n = 0;
    kvp_status st;
    if (o[1] && o[1] != Py_None) {
        kvpy_u32out out;
        if (kvpy_u32out_get(o[1], &out))
            return NULL;
        st = kvp_owner_blocks(self->pool, owner, out.p, (size_t)out.cap, &n);
        kvpy_view_release(&out.view);
        if (st)
            return kvpy_raise(st);
        return PyLong_FromSize_t(n);
    }
    st = kvp_owner_blocks(self->pool, owner, NULL, 0, &n);
    if (st && st != KVP_ESPACE)
        return kvpy_raise(st);
    if (n == 0)
        return PyList_New(0);
    uint32_t *ids = PyMem_Malloc(n * sizeof(uint32_t));
    if (!ids)
        return PyErr_NoMemory();
    st = kvp_owner_blocks(self->pool, owner, ids, n, &n);
    PyObject *r = st ? kvpy_raise(st) : kvpy_u32_list(ids, n);
    PyMem_Free(ids);
    return r;
}

/*
 * Batch forms built from per-block calls check every block first (state,
 * range) so that a refused batch changes nothing; only KVP_ENOMEM part way
 * could leave a prefix applied (the library has no batch entry point for
 * these yet).
 */
static kvp_status check_blocks(PoolObject *self, const uint32_t *ids, Py_ssize_t n,
                               int need_in_use, int need_content)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        kvp_block_info bi;
        kvp_status st = kvp_block_get(self->pool, ids[i], &bi);
        if (st)
            return st;
        if (bi.state == KVP_BLOCK_RETIRED)
            return KVP_ERANGE;
        if (bi.is_null)
            return KVP_EINVAL;
        if (need_in_use && bi.state != KVP_BLOCK_IN_USE)
            return KVP_EDOUBLEFREE;
        if (need_content && bi.state == KVP_BLOCK_VACANT)
            return KVP_ENOTFOUND;
    }
    return KVP_OK;
}

/* set_fill_many(ids, fills): all checked first, then set; a refused batch
 * changes nothing. */
static PyObject *Pool_set_fill_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 2, "set_fill_many(ids, fills)"))
        return NULL;
    kvpy_u32in ids, fills;
    if (kvpy_u32in_get(args[0], &ids, "ids"))
        return NULL;
    if (pool_u32in(self, args[1], &fills, "fills")) {
        kvpy_u32in_release(&ids);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (ids.n != fills.n) {
        kvpy_u32in_release(&ids);
        kvpy_u32in_release(&fills);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "ids and fills differ in length");
        return NULL;
    }
    st = check_blocks(self, ids.p, ids.n, 1, 0);
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        if (fills.p[i] > self->block_size)
            st = KVP_EINVAL;
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        st = kvp_set_fill(self->pool, ids.p[i], fills.p[i]);
    kvpy_u32in_release(&ids);
    kvpy_u32in_release(&fills);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* The name block_info reports for a block state. */
static const char *state_name(int s)
{
    switch (s) {
    case KVP_BLOCK_VACANT: return "vacant";
    case KVP_BLOCK_CACHED: return "cached";
    case KVP_BLOCK_IN_USE: return "in_use";
    case KVP_BLOCK_RETIRED: return "retired";
    default: return "unknown";
    }
}

/* claim_many(ids, owner=None): all checked first, then claimed. */
static PyObject *Pool_claim_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (ids_owner_args("claim_many", args, nargs, kwnames, &ids, &owner))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, ids, &in, "ids"))
        return NULL;
    kvp_status st = check_blocks(self, in.p, in.n, 0, 1);
    for (Py_ssize_t i = 0; !st && i < in.n; i++)
        st = kvp_claim(self->pool, in.p[i], owner);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* publish_many(ids, hashes): hashes is a bytes-like object of 32 x len(ids). */
static PyObject *Pool_publish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 2, "publish_many(ids, hashes)"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[0], &in, "ids"))
        return NULL;
    Py_buffer hv;
    if (PyObject_GetBuffer(args[1], &hv, PyBUF_SIMPLE) < 0) {
        kvpy_u32in_release(&in);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (hv.len != in.n * 32) {
        PyBuffer_Release(&hv);
        kvpy_u32in_release(&in);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "hashes must hold 32 bytes per id");
        return NULL;
    }
    {
        /* Pre-check: in use, and not published under another hash. */
        for (Py_ssize_t i = 0; !st && i < in.n; i++) {
            kvp_block_info bi;
            st = kvp_block_get(self->pool, in.p[i], &bi);
            if (!st && bi.is_null)
                st = KVP_EINVAL;
            else if (!st && bi.state != KVP_BLOCK_IN_USE)
                st = bi.state == KVP_BLOCK_RETIRED ? KVP_ERANGE : KVP_EDOUBLEFREE;
            else if (!st && bi.published &&
                     memcmp(bi.hash.b, (const uint8_t *)hv.buf + 32 * i, 32) != 0)
                st = KVP_EBUSY;
        }
    }
    for (Py_ssize_t i = 0; !st && i < in.n; i++) {
        kvp_hash h;
        memcpy(h.b, (const uint8_t *)hv.buf + 32 * i, 32);
        st = kvp_publish(self->pool, in.p[i], &h);
    }
    PyBuffer_Release(&hv);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* A hash argument of lookup and publish: 32 bytes (kvpy_get_hash), or an
 * int key k, the hash of 24 zero bytes and then k's low 64 bits big-endian
 * (how engines with 64-bit integer hashes, ATOM's, store theirs).  0, or
 * -1 with the exception set. */
int kvpy_hash_or_key(PyObject *o, kvp_hash *h, const char *what)
{
    if (!PyLong_Check(o))
        return kvpy_get_hash(o, h, what);
    unsigned long long k = PyLong_AsUnsignedLongLongMask(o);
    if (k == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    memset(h->b, 0, 24);
    for (int i = 0; i < 8; i++)
        h->b[24 + i] = (uint8_t)(k >> (56 - 8 * i));
    return 0;
}

/* lookup(hash32, stream=0, default=<none>): the block indexed under the
 * hash (32 bytes or an int key, see hash_or_key); on a miss `default` when
 * given (a prefix match misses once per request: no exception to build),
 * else NotFoundError.  O(1). */
static PyObject *Pool_lookup(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const kw[] = {"hash", "stream", "default", NULL};
    PyObject *o[3];
    uint32_t stream;
    kvp_hash h;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("lookup", args, nargs, kwnames, kw, 1, o))
        return NULL;
    if (kvpy_hash_or_key(o[0], &h, "hash") || kvpy_get_u32(o[1], 0, &stream, "stream"))
        return NULL;
    KVPY_POOL_CHECK(self);
    kvp_block b;
    kvp_status st = kvp_lookup(self->pool, (kvp_stream)stream, &h, &b);
    if (st == KVP_ENOTFOUND && o[2]) {
        Py_INCREF(o[2]);
        return o[2];
    }
    return st ? kvpy_raise(st) : PyLong_FromUnsignedLong(b);
}

/* lookup_many(hashes, out=None, stream=0): out[i] = block or NO_BLOCK;
 * returns the number of leading hits (the cached prefix length) when out is
 * given, else (list of ids or None, prefix). */
static PyObject *Pool_lookup_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const kw[] = {"hashes", "out", "stream", NULL};
    PyObject *o[3];
    uint32_t stream;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("lookup_many", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u32(o[2], 0, &stream, "stream"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversion may have run Python code that closed it */
    Py_buffer hv;
    if (PyObject_GetBuffer(o[0], &hv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (hv.len % 32) {
        PyBuffer_Release(&hv);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "hashes must be a multiple of 32 bytes");
        return NULL;
    }
    Py_ssize_t n = hv.len / 32;
    kvpy_u32out out = {0};
    int have_out = o[1] && o[1] != Py_None;
    if (have_out) {
        if (kvpy_u32out_get(o[1], &out)) {
            PyBuffer_Release(&hv);
            return NULL;
        }
        if (out.cap < n) {
            kvpy_view_release(&out.view);
            PyBuffer_Release(&hv);
            return kvpy_raise(KVP_ESPACE);
        }
    }
    PyObject *list = have_out ? NULL : PyList_New(n);
    if (!have_out && !list) {
        PyBuffer_Release(&hv);
        return NULL;
    }
    Py_ssize_t prefix = 0;
    int in_prefix = 1;
    kvp_status err = KVP_OK;
    for (Py_ssize_t i = 0; i < n; i++) {
        kvp_hash h;
        kvp_block id = KVP_NO_BLOCK;
        memcpy(h.b, (const uint8_t *)hv.buf + 32 * i, 32);
        kvp_status st = kvp_lookup(self->pool, (kvp_stream)stream, &h, &id);
        if (st && st != KVP_ENOTFOUND) {
            err = st;
            break;
        }
        if (st)
            id = KVP_NO_BLOCK;
        if (id == KVP_NO_BLOCK)
            in_prefix = 0;
        else if (in_prefix)
            prefix++;
        if (have_out)
            out.p[i] = id;
        else {
            PyObject *v = kvpy_block_or_none(id);
            if (!v) {
                err = KVP_ENOMEM;
                break;
            }
            PyList_SET_ITEM(list, i, v);
        }
    }
    PyBuffer_Release(&hv);
    if (have_out)
        kvpy_view_release(&out.view);
    if (err) {
        Py_XDECREF(list);
        return PyErr_Occurred() ? NULL : kvpy_raise(err);
    }
    if (have_out)
        return PyLong_FromSsize_t(prefix);
    return Py_BuildValue("(Nn)", list, prefix);
}

/* unpublish_many(ids): all checked first (published, no repeats), then
 * unpublished. */
static PyObject *Pool_unpublish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 1, "unpublish_many(ids)"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[0], &in, "ids"))
        return NULL;
    kvp_status st = KVP_OK;
    for (Py_ssize_t i = 0; !st && i < in.n; i++) {
        kvp_block_info bi;
        st = kvp_block_get(self->pool, in.p[i], &bi);
        if (!st && bi.is_null)
            st = KVP_EINVAL;
        else if (!st && !bi.published)
            st = KVP_ENOTFOUND;
        for (Py_ssize_t j = 0; !st && j < i; j++)
            if (in.p[j] == in.p[i])
                st = KVP_ENOTFOUND; /* the second would find it unpublished */
    }
    for (Py_ssize_t i = 0; !st && i < in.n; i++)
        st = kvp_unpublish(self->pool, in.p[i]);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* retire_top() -> (retired, moved_to or None).  BusyError as close(). */
static PyObject *Pool_retire_top(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    if (!pool_no_exports(self, "retire_top"))
        return NULL;
    kvp_block retired, moved;
    kvp_status st = kvp_retire_top(self->pool, &retired, &moved);
    if (st)
        return kvpy_raise(st);
    return Py_BuildValue("(kN)", (unsigned long)retired, kvpy_block_or_none(moved));
}

/* Hashing: tokens in, bytes out.  Pure, so the GIL goes for long inputs. */
static PyObject *Pool_hash_block(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const kw[] = {"tokens", "parent", "start", "extra", NULL};
    PyObject *o[4];
    uint64_t start;
    kvp_hash parent, out;
    kvp_status st = KVP_OK;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("hash_block", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[2], 0, &start, "start"))
        return NULL;
    int has_parent = o[1] && o[1] != Py_None;
    if (has_parent && kvpy_get_hash(o[1], &parent, "parent"))
        return NULL;
    kvpy_extra ex;
    if (kvpy_extra_get(o[3], &ex))
        return NULL;
    kvpy_u32in in;
    if (kvpy_u32in_get(o[0], &in, "tokens")) {
        kvpy_extra_release(&ex);
        return NULL;
    }
    kvp_pool *p = kvpy_pool_busy_enter(self);
    if (p) {
        Py_BEGIN_ALLOW_THREADS
        st = kvp_hash_block(p, has_parent ? &parent : NULL, in.p, (size_t)in.n, start,
                            ex.present ? &ex.k : NULL, &out);
        Py_END_ALLOW_THREADS
        kvpy_pool_busy_leave(self);
    }
    kvpy_u32in_release(&in);
    kvpy_extra_release(&ex);
    if (!p)
        return NULL;
    if (st)
        return kvpy_raise(st);
    return kvpy_hash_bytes(&out);
}

/* hash_tokens(tokens, extra=None, out=None, known=0): all full blocks as a
 * chain; returns bytes (32 per block) or, with out (writable bytes-like),
 * the number of blocks written. */
static PyObject *Pool_hash_tokens(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const kw[] = {"tokens", "extra", "out", "known", NULL};
    PyObject *o[4];
    uint64_t known;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("hash_tokens", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[3], 0, &known, "known"))
        return NULL;
    kvpy_extra ex;
    if (kvpy_extra_get(o[1], &ex))
        return NULL;
    kvpy_u32in in;
    if (kvpy_u32in_get(o[0], &in, "tokens")) {
        kvpy_extra_release(&ex);
        return NULL;
    }
    size_t nb = self->block_size ? (size_t)in.n / self->block_size : 0;
    PyObject *res = NULL;
    if (!kvpy_pool_ok(self)) /* the conversion may have run Python code that closed it */
        goto done;
    Py_buffer ov;
    int have_out = o[2] && o[2] != Py_None;
    kvp_hash *dst;
    size_t cap;
    if (have_out) {
        if (PyObject_GetBuffer(o[2], &ov, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0)
            goto done;
        dst = ov.buf;
        cap = (size_t)ov.len / 32;
    } else {
        if (known) {
            PyErr_SetString(kvpy_exc[KVP_EINVAL], "known needs an out buffer holding them");
            goto done;
        }
        res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nb * 32));
        if (!res)
            goto done;
        dst = (kvp_hash *)PyBytes_AS_STRING(res);
        cap = nb;
    }
    size_t n_out = 0;
    kvp_status st;
    if ((size_t)in.n >= KVPY_GIL_TOKENS) {
        kvp_pool *p = kvpy_pool_busy_enter(self);
        if (!p) {
            if (have_out)
                PyBuffer_Release(&ov);
            Py_CLEAR(res);
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        st = kvp_hash_tokens(p, in.p, (size_t)in.n, ex.present ? &ex.k : NULL, dst, cap,
                             (size_t)known, &n_out);
        Py_END_ALLOW_THREADS
        kvpy_pool_busy_leave(self);
    } else {
        st = kvp_hash_tokens(self->pool, in.p, (size_t)in.n, ex.present ? &ex.k : NULL, dst, cap,
                             (size_t)known, &n_out);
    }
    if (have_out)
        PyBuffer_Release(&ov);
    if (st) {
        Py_CLEAR(res);
        kvpy_raise(st);
    } else if (have_out) {
        res = PyLong_FromSize_t(n_out);
    }
done:
    kvpy_u32in_release(&in);
    kvpy_extra_release(&ex);
    return res;
}

/* publish_verified(id, hash, parent or None, tokens). */
static PyObject *Pool_publish_verified(PoolObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    uint32_t id, parent = KVP_NO_BLOCK;
    kvp_hash h;
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 4, "publish_verified(id, hash, parent, tokens)"))
        return NULL;
    if (kvpy_get_u32(args[0], 0, &id, "id") || kvpy_get_hash(args[1], &h, "hash") ||
        (args[2] != Py_None && kvpy_get_u32(args[2], 0, &parent, "parent")))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[3], &in, "tokens"))
        return NULL;
    kvp_status st = kvp_publish_verified(self->pool, id, &h, parent, in.p, (size_t)in.n);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* lookup_verified(hash, parent or None, tokens, stream=0) -> id. */
static PyObject *Pool_lookup_verified(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    static const char *const kw[] = {"hash", "parent", "tokens", "stream", NULL};
    PyObject *o[4];
    uint32_t parent = KVP_NO_BLOCK, stream;
    kvp_hash h;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("lookup_verified", args, nargs, kwnames, kw, 3, o) ||
        kvpy_get_hash(o[0], &h, "hash") || (o[1] != Py_None && kvpy_get_u32(o[1], 0, &parent, "parent")) ||
        kvpy_get_u32(o[3], 0, &stream, "stream"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, o[2], &in, "tokens"))
        return NULL;
    kvp_block id;
    kvp_status st =
        kvp_lookup_verified(self->pool, (kvp_stream)stream, &h, parent, in.p, (size_t)in.n, &id);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    return PyLong_FromUnsignedLong(id);
}

/* Events: a list of tuples (kind, hashes, parent, tokens, block_size,
 * lora_name, mm, medium) and the dropped count. */
static PyObject *event_tuple(const kvp_event *e)
{
    PyObject *hashes = PyTuple_New((Py_ssize_t)e->n_hashes);
    PyObject *tokens = PyTuple_New((Py_ssize_t)(e->tokens ? e->n_tokens : 0));
    PyObject *mm = PyTuple_New((Py_ssize_t)(e->mm ? e->n_mm : 0));
    if (!hashes || !tokens || !mm)
        goto fail;
    for (size_t i = 0; i < e->n_hashes; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(e->hashes[i]);
        if (!v)
            goto fail;
        PyTuple_SET_ITEM(hashes, (Py_ssize_t)i, v);
    }
    for (size_t i = 0; e->tokens && i < e->n_tokens; i++) {
        PyObject *v = PyLong_FromUnsignedLong(e->tokens[i]);
        if (!v)
            goto fail;
        PyTuple_SET_ITEM(tokens, (Py_ssize_t)i, v);
    }
    for (size_t i = 0; e->mm && i < e->n_mm; i++) {
        PyObject *v = kvpy_hash_bytes(&e->mm[i]);
        if (!v)
            goto fail;
        PyTuple_SET_ITEM(mm, (Py_ssize_t)i, v);
    }
    PyObject *parent = e->has_parent ? PyLong_FromUnsignedLongLong(e->parent)
                                     : (Py_INCREF(Py_None), Py_None);
    if (!parent)
        goto fail;
    return Py_BuildValue("(iNNNIzNz)", (int)e->kind, hashes, parent, tokens,
                         (unsigned)e->block_size, e->lora_name, mm, e->medium);
fail:
    Py_XDECREF(hashes);
    Py_XDECREF(tokens);
    Py_XDECREF(mm);
    return NULL;
}

/* events_take() -> (list of event tuples, dropped count). */
static PyObject *Pool_events_take(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    const kvp_event *ev = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    kvp_status st = kvp_events_take(self->pool, &ev, &n, &dropped);
    if (st)
        return kvpy_raise(st);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = event_tuple(&ev[i]);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return Py_BuildValue("(NK)", list, (unsigned long long)dropped);
}

/* Statistics as a dict, one key per kvp_stats field. */
#define KVPY_STATS_U64(X)                                                                       \
    X(blocks) X(in_use) X(free) X(vacant) X(cached) X(shared) X(indexed) X(fragmented)         \
    X(owners) X(peak_in_use) X(alloc_calls) X(blocks_allocated) X(free_calls) X(blocks_freed)  \
    X(reused) X(exhausted) X(grown) X(extended) X(retired) X(relocated) X(evictions)           \
    X(prefix_queries) X(prefix_hits) X(prefix_tokens_queried) X(prefix_tokens_hit)            \
    X(admitted_tokens)                                                                          \
    X(cow_copies) X(tokens_in_use) X(events_dropped)

/* A kvp_stats as a dict, one key per field. */
static PyObject *stats_dict(const kvp_stats *s)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    PyObject *v;
#define X(f)                                                                                    \
    v = PyLong_FromUnsignedLongLong(s->f);                                                      \
    if (!v || PyDict_SetItemString(d, #f, v) < 0) {                                             \
        Py_XDECREF(v);                                                                          \
        Py_DECREF(d);                                                                           \
        return NULL;                                                                            \
    }                                                                                           \
    Py_DECREF(v);
    KVPY_STATS_U64(X)
#undef X
    v = PyFloat_FromDouble(s->fragmentation);
    if (!v || PyDict_SetItemString(d, "fragmentation", v) < 0)
        goto fail;
    Py_DECREF(v);
    v = PyFloat_FromDouble(s->usage);
    if (!v || PyDict_SetItemString(d, "usage", v) < 0)
        goto fail;
    Py_DECREF(v);
    return d;
fail:
    Py_XDECREF(v);
    Py_DECREF(d);
    return NULL;
}

/* stats_history() -> list of stats dicts, oldest first. */
static PyObject *Pool_stats_history(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    size_t n = 0;
    kvp_status st = kvp_stats_history(self->pool, NULL, 0, &n);
    if (st && st != KVP_ESPACE)
        return kvpy_raise(st);
    kvp_stats *h = PyMem_Calloc(n ? n : 1, sizeof(kvp_stats));
    if (!h)
        return PyErr_NoMemory();
    st = kvp_stats_history(self->pool, h, n, &n);
    if (st) {
        PyMem_Free(h);
        return kvpy_raise(st);
    }
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *d = stats_dict(&h[i]);
        if (!d) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, d);
    }
    PyMem_Free(h);
    return l;
}

typedef kvp_status (*render_fn)(kvp_pool *, const char *, char *, size_t, size_t *);

/* kvp_stats_json in render_fn's shape (no prefix). */
static kvp_status json_adapter(kvp_pool *p, const char *prefix, char *buf, size_t cap,
                               size_t *needed)
{
    (void)prefix;
    return kvp_stats_json(p, buf, cap, needed);
}

/* The text a render_fn writes, as str: a stack buffer first, a heap one
 * of the size the library asked for when that is short. */
static PyObject *render(PoolObject *self, render_fn fn, const char *prefix)
{
    char small[4096];
    size_t need = 0;
    kvp_status st = fn(self->pool, prefix, small, sizeof small, &need);
    if (!st)
        return PyUnicode_FromStringAndSize(small, (Py_ssize_t)need);
    if (st != KVP_ESPACE)
        return kvpy_raise(st);
    char *buf = PyMem_Malloc(need + 1);
    if (!buf)
        return PyErr_NoMemory();
    st = fn(self->pool, prefix, buf, need + 1, &need);
    PyObject *r = st ? kvpy_raise(st) : PyUnicode_FromStringAndSize(buf, (Py_ssize_t)need);
    PyMem_Free(buf);
    return r;
}

/* prometheus(prefix=None) -> str. */
static PyObject *Pool_prometheus(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const kw[] = {"prefix", NULL};
    PyObject *o[1];
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("prometheus", args, nargs, kwnames, kw, 0, o))
        return NULL;
    const char *prefix = NULL;
    if (o[0] && o[0] != Py_None) {
        prefix = PyUnicode_AsUTF8(o[0]);
        if (!prefix)
            return NULL;
    }
    return render(self, kvp_stats_prometheus, prefix);
}

/* json() -> str. */
static PyObject *Pool_json(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    return render(self, json_adapter, NULL);
}

/* check(): CorruptError naming the broken invariant, else None. */
static PyObject *Pool_check(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    KVPY_POOL_CHECK(self);
    char msg[512] = {0};
    kvp_status st = kvp_pool_check(self->pool, msg, sizeof msg);
    if (st == KVP_ECORRUPT)
        return kvpy_raise_msg(st, msg);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* closed: True after close(). */
static PyObject *Pool_get_closed(PoolObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->pool == NULL);
}

/* ------------------------------------------------------------------------ */
/* The one-call methods, table-driven                                        */
/* ------------------------------------------------------------------------ */

/* block_info's dict: one key per kvp_block_info field. */
static PyObject *info_dict(const kvp_block_info *bi)
{
    PyObject *h = bi->published ? kvpy_hash_bytes(&bi->hash) : (Py_INCREF(Py_None), Py_None);
    if (!h)
        return NULL;
    PyObject *owner = bi->owner == KVP_ANON ? (Py_INCREF(Py_None), Py_None)
                                            : PyLong_FromUnsignedLongLong(bi->owner);
    if (!owner) {
        Py_DECREF(h);
        return NULL;
    }
    return Py_BuildValue("{s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:O,s:O,s:O,s:N,s:N,s:I}", "state",
                         state_name(bi->state), "stream", (int)bi->stream, "format",
                         (unsigned)bi->format, "ref_count", (unsigned)bi->ref_count, "anon_refs",
                         (unsigned)bi->anon_refs, "seq_refs", (unsigned)bi->seq_refs, "fill",
                         (unsigned)bi->fill, "published", bi->published ? Py_True : Py_False,
                         "ever_allocated", bi->ever_allocated ? Py_True : Py_False, "is_null",
                         bi->is_null ? Py_True : Py_False, "owner", owner, "hash", h, "priority",
                         (unsigned)bi->priority);
}

/*
 * A one-call method is a row: its name, its signature (which arguments, by
 * kind), the kind of its result, whether it can evict, and the library call
 * as an expression over `p` (the library pool), `a` (the converted
 * arguments) and `r` (where the call writes its result).  simple_method
 * runs every row the same way: the pool checked open, the arguments
 * converted with the binding's usual names and errors, the pool checked
 * open again (a conversion may run Python code that closed it), one
 * library call, its status raised, its result converted, and the queued
 * evictions delivered when the row can evict.
 */
typedef enum sig_id {
    SIG_NONE,        /* f() */
    SIG_OWNER,       /* f(owner), positional, an int */
    SIG_ID,          /* f(id), positional */
    SIG_ID_FILL,     /* f(id, fill), positional */
    SIG_ID_PRIO,     /* f(id, priority), positional */
    SIG_ID_HASH,     /* f(id, hash), positional */
    SIG_ID_OWNER,    /* f(id, owner=None) */
    SIG_N_STREAM,    /* f(n, stream=default stream) */
    SIG_STREAM,      /* f(stream=default stream) */
} sig_id;

/* How one argument is converted, and where it lands in simple_args. */
typedef enum arg_kind {
    ARG_ID,        /* uint32 -> a.id */
    ARG_U32,       /* uint32 -> a.u32 */
    ARG_OWNER,     /* uint64 -> a.owner */
    ARG_OWNER_OPT, /* None or absent: KVP_ANON; else uint64 -> a.owner */
    ARG_HASH,      /* 32 bytes or an int key (hash_or_key) -> a.hash */
    ARG_STREAM_K,  /* absent: K with separate_kv, else 0; else uint32 -> a.stream */
} arg_kind;

/* A signature: the argument names (keyword names too), NULL-terminated,
 * their kinds, how many are required, and whether keywords are accepted
 * (positional-only methods report a wrong count with their usage). */
typedef struct sig_def {
    const char *names[3];
    arg_kind kinds[2];
    int nreq;
    int keywords;
} sig_def;

static const sig_def sigs[] = {
    [SIG_NONE] = {{NULL}, {0}, 0, 0},
    [SIG_OWNER] = {{"owner", NULL}, {ARG_OWNER}, 1, 0},
    [SIG_ID] = {{"id", NULL}, {ARG_ID}, 1, 0},
    [SIG_ID_FILL] = {{"id", "fill", NULL}, {ARG_ID, ARG_U32}, 2, 0},
    [SIG_ID_PRIO] = {{"id", "priority", NULL}, {ARG_ID, ARG_U32}, 2, 0},
    [SIG_ID_HASH] = {{"id", "hash", NULL}, {ARG_ID, ARG_HASH}, 2, 0},
    [SIG_ID_OWNER] = {{"id", "owner", NULL}, {ARG_ID, ARG_OWNER_OPT}, 1, 1},
    [SIG_N_STREAM] = {{"n", "stream", NULL}, {ARG_U32, ARG_STREAM_K}, 1, 1},
    [SIG_STREAM] = {{"stream", NULL}, {ARG_STREAM_K}, 0, 1},
};

typedef struct simple_args {
    uint32_t id, u32;
    kvp_owner owner;
    kvp_stream stream;
    kvp_hash hash;
} simple_args;

/* What a call writes; ret_kind says which member, and how it is returned. */
typedef union simple_res {
    uint32_t u32;
    uint64_t u64;
    size_t size;
    kvp_block block;
    void *ptr;
    kvp_block_info info;
    kvp_stats stats;
} simple_res;

typedef enum ret_kind {
    RET_NONE,          /* None */
    RET_U32,           /* int(r.u32) */
    RET_U64,           /* int(r.u64) */
    RET_SIZE,          /* int(r.size) */
    RET_BLOCK,         /* int(r.block) */
    RET_BLOCK_OR_NONE, /* int(r.block), None for KVP_NO_BLOCK */
    RET_PTR,           /* int(r.ptr) */
    RET_INFO,          /* block_info's dict */
    RET_HASH_OR_NONE,  /* r.info's hash as 32 bytes, None when not published */
    RET_STATS,         /* stats' dict */
} ret_kind;

typedef kvp_status (*simple_fn)(kvp_pool *p, const simple_args *a, simple_res *r);

typedef struct simple_def {
    const char *name;
    sig_id sig;
    ret_kind ret;
    int evicts;
    simple_fn call;
} simple_def;

/* Block id's reference count into *out (block_get's errors).  O(1). */
static kvp_status ref_count_of(kvp_pool *p, kvp_block id, uint32_t *out)
{
    kvp_block_info bi;
    kvp_status st = kvp_block_get(p, id, &bi);
    if (st == KVP_OK)
        *out = bi.ref_count;
    return st;
}

/* Drop one reference of `owner` on block id (kvp_free's errors; a refused
 * call changes nothing) and give the references left in *left.  O(1) plus
 * kvp_free's cost for a block shared by several owners. */
static kvp_status free_one(kvp_pool *p, kvp_block id, kvp_owner owner, uint32_t *left)
{
    kvp_status st = kvp_free(p, &id, 1, owner);
    return st ? st : ref_count_of(p, id, left);
}

/*
 * The rows: name, signature, result, evicts, call, docstring.  Every method
 * of the Pool whose body is one library call is here.
 */
#define SIMPLE_METHODS(X)                                                                       \
    X(owner_register, SIG_OWNER, RET_NONE, 0, kvp_owner_register(p, a->owner),                  \
      "owner_register(owner)")                                                                  \
    X(owner_release, SIG_OWNER, RET_NONE, 0, kvp_owner_release(p, a->owner),                    \
      "owner_release(owner)")                                                                   \
    X(free_owner, SIG_OWNER, RET_SIZE, 1, kvp_free_owner(p, a->owner, &r->size),                \
      "free_owner(owner) -> references dropped")                                                \
    X(free_count, SIG_STREAM, RET_U32, 0, kvp_free_count(p, a->stream, &r->u32),                \
      "free_count(stream=0) -> int")                                                            \
    X(peek_next, SIG_STREAM, RET_BLOCK_OR_NONE, 0, kvp_peek_next(p, a->stream, &r->block),      \
      "peek_next(stream=0) -> int | None: the block the next allocation would take, not "      \
      "taken.")                                                                                 \
    X(set_fill, SIG_ID_FILL, RET_NONE, 0, kvp_set_fill(p, a->id, a->u32), "set_fill(id, fill)") \
    X(set_priority, SIG_ID_PRIO, RET_NONE, 0, kvp_set_priority(p, a->id, a->u32),               \
      "set_priority(id, priority): the retention priority (0 low .. 3, 1 normal) of a block "  \
      "with content: cached blocks of lower priorities are evicted first.  O(1).")             \
    X(block_info, SIG_ID, RET_INFO, 0, kvp_block_get(p, a->id, &r->info),                       \
      "block_info(id) -> dict")                                                                 \
    X(block_ptr, SIG_ID, RET_PTR, 0, kvp_block_ptr(p, a->id, &r->ptr),                          \
      "block_ptr(id) -> address (int)")                                                         \
    X(ref_count, SIG_ID, RET_U32, 0, ref_count_of(p, a->id, &r->u32),                           \
      "ref_count(id) -> int: the block's references (0 when free).  RangeError for an id "    \
      "beyond the pool.  O(1), allocates nothing.")                                             \
    X(block_hash, SIG_ID, RET_HASH_OR_NONE, 0, kvp_block_get(p, a->id, &r->info),               \
      "block_hash(id) -> bytes | None: the 32-byte content hash the block is published "      \
      "under, None when it has none.  RangeError for an id beyond the pool.  O(1).")          \
    X(take_id, SIG_ID_OWNER, RET_NONE, 1, kvp_take_id(p, a->id, a->owner),                      \
      "take_id(id, owner=None)")                                                                \
    X(free_one, SIG_ID_OWNER, RET_U32, 1, free_one(p, a->id, a->owner, &r->u32),                \
      "free_one(id, owner=None) -> int: drop one reference on block id, as free(id, owner), "  \
      "and return the references left (0: the block is free).  Errors as free's; a refused "  \
      "call changes nothing.  O(1).")                                                           \
    X(claim, SIG_ID_OWNER, RET_NONE, 1, kvp_claim(p, a->id, a->owner), "claim(id, owner=None)") \
    X(publish, SIG_ID_HASH, RET_NONE, 1, kvp_publish(p, a->id, &a->hash),                      \
      "publish(id, hash32): hash32 may be an int key, as lookup's")                            \
    X(unpublish, SIG_ID, RET_NONE, 1, kvp_unpublish(p, a->id), "unpublish(id)")                 \
    X(clear_index, SIG_NONE, RET_NONE, 1, kvp_clear_index(p), "clear_index()")                  \
    X(reset_prefix_cache, SIG_NONE, RET_NONE, 1, kvp_reset_prefix_cache(p),                     \
      "reset_prefix_cache() (BusyError while blocks are in use)")                               \
    X(evict, SIG_N_STREAM, RET_U32, 1, kvp_evict(p, a->stream, a->u32, &r->u32),                \
      "evict(n, stream=0) -> evicted")                                                          \
    X(ensure_free, SIG_N_STREAM, RET_NONE, 1, kvp_ensure_free(p, a->stream, a->u32),            \
      "ensure_free(n, stream=0)")                                                               \
    X(extend, SIG_N_STREAM, RET_U32, 1, kvp_extend(p, a->stream, a->u32, &r->u32),              \
      "extend(n, stream=0) -> added")                                                           \
    X(shrink, SIG_N_STREAM, RET_U32, 1, kvp_shrink(p, a->stream, a->u32, &r->u32),              \
      "shrink(n, stream=0) -> retired; n = target free blocks")                                 \
    X(stats, SIG_NONE, RET_STATS, 0, kvp_stats_get(p, &r->stats), "stats() -> dict")            \
    X(stats_reset, SIG_NONE, RET_NONE, 0, kvp_stats_reset(p), "stats_reset()")                  \
    X(stats_snapshot, SIG_NONE, RET_NONE, 0, kvp_stats_snapshot(p), "stats_snapshot()")         \
    X(fingerprint, SIG_NONE, RET_U64, 0, kvp_pool_fingerprint(p, &r->u64),                      \
      "fingerprint() -> int")

/* Each row's call, as a function. */
#define X(name, sig, ret, evicts, call, doc)                                                    \
    static kvp_status call_##name(kvp_pool *p, const simple_args *a, simple_res *r)             \
    {                                                                                           \
        (void)a;                                                                                \
        (void)r;                                                                                \
        return call;                                                                            \
    }
SIMPLE_METHODS(X)
#undef X

/* The rows, indexed by SM_name. */
enum {
#define X(name, sig, ret, evicts, call, doc) SM_##name,
    SIMPLE_METHODS(X)
#undef X
};
static const simple_def simple_defs[] = {
#define X(name, sig, ret, evicts, call, doc) {#name, sig, ret, evicts, call_##name},
    SIMPLE_METHODS(X)
#undef X
};

/* Convert argument `o` (NULL: not given) of kind k into *a. */
static int simple_arg(PoolObject *self, arg_kind k, PyObject *o, const char *name,
                      simple_args *a)
{
    uint32_t v;
    switch (k) {
    case ARG_ID:
        return kvpy_get_u32(o, 0, &a->id, name);
    case ARG_U32:
        return kvpy_get_u32(o, 0, &a->u32, name);
    case ARG_OWNER:
        return kvpy_get_u64(o, 0, &a->owner, name);
    case ARG_OWNER_OPT:
        return kvpy_get_owner(o, &a->owner);
    case ARG_HASH:
        return kvpy_hash_or_key(o, &a->hash, name);
    case ARG_STREAM_K:
        if (kvpy_get_u32(o, self->separate_kv ? KVP_STREAM_K : 0, &v, name))
            return -1;
        a->stream = (kvp_stream)v;
        return 0;
    }
    return 0;
}

/* The Python value of a row's result. */
static PyObject *simple_result(ret_kind k, const simple_res *r)
{
    switch (k) {
    case RET_NONE: Py_RETURN_NONE;
    case RET_U32: return PyLong_FromUnsignedLong(r->u32);
    case RET_U64: return PyLong_FromUnsignedLongLong(r->u64);
    case RET_SIZE: return PyLong_FromSize_t(r->size);
    case RET_BLOCK: return PyLong_FromUnsignedLong(r->block);
    case RET_BLOCK_OR_NONE: return kvpy_block_or_none(r->block);
    case RET_PTR: return PyLong_FromVoidPtr(r->ptr);
    case RET_INFO: return info_dict(&r->info);
    case RET_HASH_OR_NONE:
        if (!r->info.published)
            Py_RETURN_NONE;
        return kvpy_hash_bytes(&r->info.hash);
    case RET_STATS: return stats_dict(&r->stats);
    }
    Py_RETURN_NONE;
}

/* Run row `d` on the call's arguments (see the comment above sig_id). */
static PyObject *simple_run(PoolObject *self, const simple_def *d, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames)
{
    const sig_def *s = &sigs[d->sig];
    PyObject *o[2] = {NULL, NULL};
    /* CPython's own checks of METH_FASTCALL and METH_NOARGS come first. */
    if (!s->keywords && kwnames && PyTuple_GET_SIZE(kwnames))
        return PyErr_Format(PyExc_TypeError, "Pool.%s() takes no keyword arguments", d->name);
    if (!s->names[0] && nargs)
        return PyErr_Format(PyExc_TypeError, "Pool.%s() takes no arguments (%zd given)", d->name,
                            nargs);
    KVPY_POOL_CHECK(self);
    if (s->keywords) {
        if (kvpy_parse_args(d->name, args, nargs, kwnames, s->names, s->nreq, o))
            return NULL;
    } else if (nargs != s->nreq) {
        return s->nreq == 1 ? PyErr_Format(PyExc_TypeError, "%s(%s)", d->name, s->names[0])
                            : PyErr_Format(PyExc_TypeError, "%s(%s, %s)", d->name, s->names[0],
                                           s->names[1]);
    } else {
        for (int i = 0; i < s->nreq; i++)
            o[i] = args[i];
    }
    simple_args a;
    for (int i = 0; i < 2 && s->names[i]; i++)
        if (simple_arg(self, s->kinds[i], o[i], s->names[i], &a))
            return NULL;
    KVPY_POOL_CHECK(self);
    simple_res r;
    kvp_status st = d->call(self->pool, &a, &r);
    PyObject *res = st ? kvpy_raise(st) : simple_result(d->ret, &r);
    return d->evicts ? kvpy_ev_deliver(self, res) : res;
}

/* Each row's method: simple_run on its row. */
#define X(name, sig, ret, evicts, call, doc)                                                    \
    static PyObject *simple_##name(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,   \
                                   PyObject *kwnames)                                           \
    {                                                                                           \
        return simple_run(self, &simple_defs[SM_##name], args, nargs, kwnames);                 \
    }
SIMPLE_METHODS(X)
#undef X

/* ------------------------------------------------------------------------ */
/* Pool type                                                                 */
/* ------------------------------------------------------------------------ */


/* Pool methods that change the pool deliver its queued evictions before
 * returning (see evict.c): fn##_ev wraps fn, one per calling convention. */
#define POOL_EV_FCK(fn)                                                                         \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)   \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, a, n, k));                                             \
    }
#define POOL_EV_FC(fn)                                                                          \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n)                \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, a, n));                                                \
    }
#define POOL_EV_NOARGS(fn)                                                                      \
    static PyObject *fn##_ev(PoolObject *self, PyObject *unused)                                \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, unused));                                              \
    }
POOL_EV_FCK(Pool_alloc)
POOL_EV_FCK(Pool_alloc_blocks)
POOL_EV_FCK(Pool_take)
POOL_EV_FCK(Pool_take_each)
POOL_EV_FCK(Pool_free)
POOL_EV_FCK(Pool_claim_many)
POOL_EV_FCK(Pool_lookup_verified)
POOL_EV_FC(Pool_publish_many)
POOL_EV_FC(Pool_unpublish_many)
POOL_EV_FC(Pool_publish_verified)
POOL_EV_NOARGS(Pool_clear)
POOL_EV_NOARGS(Pool_retire_top)
#undef POOL_EV_FCK
#undef POOL_EV_FC
#undef POOL_EV_NOARGS

static PyMethodDef Pool_methods[] = {
#define X(name, sig, ret, evicts, call, doc) {#name, KVPY_FC(simple_##name), KVPY_FCK, doc},
    SIMPLE_METHODS(X)
#undef X
    {"close", (PyCFunction)Pool_close, METH_NOARGS, "Destroy the pool now (idempotent)."},
    {"__enter__", (PyCFunction)kvpy_return_self, METH_NOARGS, NULL},
    {"__exit__", KVPY_FC(Pool_exit), METH_FASTCALL, NULL},
    {"clear", (PyCFunction)Pool_clear_ev, METH_NOARGS,
     "Return to the just-created state (kvp_pool_clear); every Sequence becomes invalid."},
    {"alloc", KVPY_FC(Pool_alloc_ev), KVPY_FCK,
     "alloc(tokens, owner=None, stream=0, format=0, out=None)\n\nAllocate ceil(tokens / "
     "block_size) blocks.  Returns a list of ids, or with `out` (a uint32 buffer) the count "
     "written.  owner None = anonymous."},
    {"alloc_blocks", KVPY_FC(Pool_alloc_blocks_ev), KVPY_FCK,
     "alloc_blocks(n, owner=None, stream=0, format=0, out=None): alloc of n whole blocks."},
    {"take", KVPY_FC(Pool_take_ev), KVPY_FCK, "take(owner=None, stream=0) -> id"},
    {"take_each", KVPY_FC(Pool_take_each_ev), KVPY_FCK,
     "take_each(owners, out=None, hints=None, stream=0)\n\nOne block for each owner (ints, "
     "None = anonymous, or a uint64 buffer), in order, in one call.  Returns a list of ids, or "
     "with `out` the count written.  `hints`: the caller's uint32 buffer of one hint per owner, "
     "kept across calls (start at HINT_NONE).  On an error the takes before the failed one "
     "stand: the exception's `taken` and `blocks` name them."},
    {"free", KVPY_FC(Pool_free_ev), KVPY_FCK,
     "free(ids, owner=None)\n\nDrop one reference per id (an int, buffer or list), in order: "
     "the first given is the first reused.  All or nothing."},
    {"owner_blocks", KVPY_FC(Pool_owner_blocks), KVPY_FCK, "owner_blocks(owner, out=None)"},
    {"set_fill_many", KVPY_FC(Pool_set_fill_many), METH_FASTCALL, "set_fill_many(ids, fills)"},
    {"claim_many", KVPY_FC(Pool_claim_many_ev), KVPY_FCK, "claim_many(ids, owner=None)"},
    {"publish_many", KVPY_FC(Pool_publish_many_ev), METH_FASTCALL,
     "publish_many(ids, hashes): hashes holds 32 bytes per id"},
    {"lookup", KVPY_FC(Pool_lookup), KVPY_FCK,
     "lookup(hash32, stream=0, default=<none>) -> id\n\nThe block indexed under hash32; on a "
     "miss `default` when given, else NotFoundError.  hash32 may be an int key k: the hash of "
     "24 zero bytes and k's low 64 bits big-endian.  O(1)."},
    {"lookup_many", KVPY_FC(Pool_lookup_many), KVPY_FCK,
     "lookup_many(hashes, out=None, stream=0)\n\nWith out: fills out[i] (NO_BLOCK on a miss) "
     "and returns the number of leading hits.  Without: (list of id or None, leading hits)."},
    {"unpublish_many", KVPY_FC(Pool_unpublish_many_ev), METH_FASTCALL, "unpublish_many(ids)"},
    {"retire_top", (PyCFunction)Pool_retire_top_ev, METH_NOARGS,
     "retire_top() -> (retired, moved_to or None)"},
    {"hash_block", KVPY_FC(Pool_hash_block), KVPY_FCK,
     "hash_block(tokens, parent=None, start=0, extra=None) -> 32 bytes"},
    {"hash_tokens", KVPY_FC(Pool_hash_tokens), KVPY_FCK,
     "hash_tokens(tokens, extra=None, out=None, known=0) -> bytes (32 per full block), or "
     "the block count written into `out`"},
    {"publish_verified", KVPY_FC(Pool_publish_verified_ev), METH_FASTCALL,
     "publish_verified(id, hash, parent or None, tokens)"},
    {"lookup_verified", KVPY_FC(Pool_lookup_verified_ev), KVPY_FCK,
     "lookup_verified(hash, parent or None, tokens, stream=0) -> id"},
    {"events_take", (PyCFunction)Pool_events_take, METH_NOARGS,
     "events_take() -> ([(kind, hashes, parent, tokens, block_size, lora_name, mm, medium)], "
     "dropped)"},
    {"stats_history", (PyCFunction)Pool_stats_history, METH_NOARGS,
     "stats_history() -> list of dicts, oldest first"},
    {"prometheus", KVPY_FC(Pool_prometheus), KVPY_FCK, "prometheus(prefix=None) -> str"},
    {"json", (PyCFunction)Pool_json, METH_NOARGS, "json() -> str"},
    {"check", (PyCFunction)Pool_check, METH_NOARGS, "check() (CorruptError on a broken invariant)"},
    {"find_sequence", KVPY_FC(kvpy_pool_find_sequence), METH_FASTCALL,
     "find_sequence(request_id) -> Sequence"},
    {"sequence", KVPY_FC(kvpy_pool_sequence), KVPY_FCK, "sequence(request_id, extra=None) -> new Sequence"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Pool_getset[] = {
    {"block_size", kvpy_get_u32_field, NULL, "tokens per block",
     (void *)offsetof(PoolObject, block_size)},
    {"thread_safe", kvpy_get_bool_field, NULL, "created with thread_safe",
     (void *)offsetof(PoolObject, thread_safe)},
    {"closed", (getter)Pool_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kvpy_pool_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool.Pool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Pool_traverse,
    .tp_clear = (inquiry)Pool_tp_clear,
    .tp_init = (initproc)Pool_init,
    .tp_doc = "Pool(*, block_size=16, num_blocks=1024, max_blocks=None, separate_kv=False, "
              "grow_on_exhaustion=False, thread_safe=False, null_block=False, "
              "prefix_caching=True, reuse='lifo', history_len=64, history_every_call=False, "
              "on_evict=None, hash_alg='sha256', root_seed=None, random_root=False, "
              "verify_hits=False, block_bytes=None, host_arena=False, events=False, "
              "event_capacity=4096, medium=None, prefault=False, policy='lru', protected_percent=50)\n\nA kvpool block "
              "pool (kvp_pool).",
    .tp_weaklistoffset = offsetof(PoolObject, weakrefs),
    .tp_methods = Pool_methods,
    .tp_getset = Pool_getset,
    .tp_new = kvpy_pool_new,
};
