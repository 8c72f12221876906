/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_block.c — the Pool's calls on one block or one allocation: the
 * one-call methods (rows of one table, SIMPLE_METHODS below, run by one
 * function), and alloc, alloc_blocks, take and lookup, written out.
 *
 * Invariants: a method checks the pool open before it touches it, and
 * again after any conversion that may have run Python code, when it then
 * calls the library; every method that can evict returns through
 * kvpy_ev_deliver.
 *
 * Why built this way: the table keeps argument names, error messages and
 * eviction delivery the same for every method whose body is "convert the
 * arguments, make one library call, raise on error, convert the result",
 * with no per-method copy of the checks to drift apart.
 */
#include "kvpy.h"

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
    case RET_STATS: return kvpy_stats_dict(&r->stats);
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

KVPY_EV_FCK(Pool_alloc)
KVPY_EV_FCK(Pool_alloc_blocks)
KVPY_EV_FCK(Pool_take)

/* pool_block.c's rows of the Pool's method table. */
PyMethodDef kvpy_pool_block_methods[] = {
#define X(name, sig, ret, evicts, call, doc) {#name, KVPY_FC(simple_##name), KVPY_FCK, doc},
    SIMPLE_METHODS(X)
#undef X
    {"alloc", KVPY_FC(Pool_alloc_ev), KVPY_FCK,
     "alloc(tokens, owner=None, stream=0, format=0, out=None)\n\nAllocate ceil(tokens / "
     "block_size) blocks.  Returns a list of ids, or with `out` (a uint32 buffer) the count "
     "written.  owner None = anonymous."},
    {"alloc_blocks", KVPY_FC(Pool_alloc_blocks_ev), KVPY_FCK,
     "alloc_blocks(n, owner=None, stream=0, format=0, out=None): alloc of n whole blocks."},
    {"take", KVPY_FC(Pool_take_ev), KVPY_FCK, "take(owner=None, stream=0) -> id"},
    {"lookup", KVPY_FC(Pool_lookup), KVPY_FCK,
     "lookup(hash32, stream=0, default=<none>) -> id\n\nThe block indexed under hash32; on a "
     "miss `default` when given, else NotFoundError.  hash32 may be an int key k: the hash of "
     "24 zero bytes and k's low 64 bits big-endian.  O(1)."},
    {NULL, NULL, 0, NULL}};
