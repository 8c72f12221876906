/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c — the Pool object: its creation from keyword arguments (each a
 * kvp_config field, parsed and checked here), its end (dealloc and the
 * collector's hooks), the one __init__ allowed, the bracket of the calls
 * that release the GIL, and the type object with its attributes.  The
 * methods are other files' (pool_block.c, pool_batch.c, pool_stats.c,
 * sequence.c, pool_methods.c); pool_methods.c joins their rows into the
 * type's method table at module init.
 *
 * Invariants: a Pool is built whole or not at all: every argument is
 * converted and the configuration checked before the library pool is
 * created.  `pool` is NULL once closed, and the library pool is destroyed
 * once, by close() or by dealloc, never while a call is inside it.
 *
 * Why here: the object and its type sit below every file that implements
 * a method, so sequence.c and the drop-ins build and check pools without
 * reaching the methods.
 */
#include "kvpy.h"

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

/* closed: True after close(). */
static PyObject *Pool_get_closed(PoolObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->pool == NULL);
}

static PyGetSetDef Pool_getset[] = {
    {"block_size", kvpy_get_u32_field, NULL, "tokens per block",
     (void *)offsetof(PoolObject, block_size)},
    {"thread_safe", kvpy_get_bool_field, NULL, "created with thread_safe",
     (void *)offsetof(PoolObject, thread_safe)},
    {"closed", (getter)Pool_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* kvpool.Pool; its methods (tp_methods) are set by kvpy_pool_methods_init
 * before the type is readied. */
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
    .tp_getset = Pool_getset,
    .tp_new = kvpy_pool_new,
};
