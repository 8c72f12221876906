/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vllm.c — the hot path of the vLLM drop-in (kvpool.compat.vllm.BlockPool
 * subclasses _VllmBlockPool in Python): get_new_blocks, free_blocks, touch,
 * get_cached_block, caching and eviction by id, and the canonical block
 * objects KVCacheBlock.
 *
 * What it owns: the drop-in's pool object (VNative, a Pool that also holds
 * what only this drop-in keeps per block); one KVCacheBlock per block id,
 * made once, living in one array owned by that pool object (varena), each
 * holding a reference to the pool, the BlockPool holding one reference to
 * each (BlockPool.blocks is a read-only view of the array); the key each
 * block was cached under (the pool object's vkeys).
 *
 * Invariants: a block's attributes are read from the library on every
 * access (the library is the one source of truth); a refused call changes
 * nothing (checks first, then the library calls); get_new_blocks is all or
 * nothing, as vLLM's.
 *
 * Why built this way: vLLM calls these once per block or per decode step,
 * so each is a single C call with no Python frame, and block objects are
 * never allocated on the hot path.
 */
#include "kvpy.h"

#include <stdlib.h>

/*
 * vLLM keys cached blocks by (block hash, KV-cache group id).  kvpool
 * indexes 32-byte hashes, so a key is folded into one: the vLLM hash
 * right-aligned in 32 bytes (at most 32 bytes long), the group id XORed
 * big-endian into bytes 0..3.  The last 8 bytes — what events carry — are
 * the vLLM hash's own.
 */
typedef struct VBlock {
    PyObject_HEAD
    PoolObject *pool;   /* strong; the pool never points back */
    uint32_t id;        /* 0 is the null block */
} VBlock;
/* A long run of frees and takes walks many of them, so each byte counts: at 32 bytes two share a
 * cache line and none straddles two (at 40, most did).  The rarely read key
 * lives in the pool object, vnative(pool)->vkeys[id]: the
 * BlockHashWithGroupId bytes (the block hash, then the group id as 4
 * big-endian bytes) the block was last cached under, or NULL.
 *
 * A BlockPool's blocks are one array owned by its pool (varena, aligned to a
 * cache line), not separate allocations: block id's object is at a known
 * address, so get_new_blocks prefetches the next one's without first loading
 * a pointer to it, a dependent miss of its own (with a pointer array, most
 * of that call's samples were on that load).  Each block holds a reference
 * to the pool, so the array outlives every block. */
_Static_assert(sizeof(VBlock) == 32, "KVCacheBlock objects stay 32 bytes");

/*
 * The pool object of a BlockPool: a Pool (a subtype of kvpy_pool_type) that
 * also holds what only this drop-in keeps per block, the array of its
 * KVCacheBlock objects (varena) and each block's key (vkeys).  Every
 * block holds a reference to it, so both outlive every block.  Every
 * PoolObject a VBlock or VPool points to is one.
 */
typedef struct VNative {
    PoolObject base;
    PyObject **vkeys;   /* nvkeys entries: the key a block was cached under, or NULL */
    uint32_t nvkeys;
    void *varena;       /* the pool's KVCacheBlock objects, block id's at index id */
} VNative;

/* The drop-in's fields of p, the pool object of a VBlock or a VPool. */
static inline VNative *vnative(PoolObject *p)
{
    return (VNative *)p;
}

/* The drop-in's fields go first (every block held this pool, so none is
 * left in the array), then the Pool's own dealloc. */
static void VNative_dealloc(VNative *self)
{
    PyObject_GC_UnTrack(self);
    for (uint32_t i = 0; self->vkeys && i < self->nvkeys; i++)
        Py_XDECREF(self->vkeys[i]);
    PyMem_Free(self->vkeys);
    free(self->varena);
    kvpy_pool_type.tp_dealloc((PyObject *)self);
}

PyTypeObject kvpy_vnative_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool._kvpool._VllmPool",
    .tp_basicsize = sizeof(VNative),
    .tp_dealloc = (destructor)VNative_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, /* GC: inherited */
    .tp_doc = "The kvpool.Pool of a vLLM BlockPool, holding its KVCacheBlock objects and keys.",
    .tp_base = &kvpy_pool_type,
};


/* The kvpool hash of (block hash h of len bytes, group id gid). */
static void vkey_raw(const void *h, size_t len, uint32_t gid, kvp_hash *out)
{
    memset(out->b, 0, 32);
    memcpy(out->b + 32 - len, h, len);
    out->b[0] ^= (uint8_t)(gid >> 24);
    out->b[1] ^= (uint8_t)(gid >> 16);
    out->b[2] ^= (uint8_t)(gid >> 8);
    out->b[3] ^= (uint8_t)gid;
}

/* The kvpool hash of (block_hash bytes-like of 1..32 bytes, group id);
 * 0, or -1 with the exception set. */
static int vkey(PyObject *block_hash, uint32_t gid, kvp_hash *out)
{
    Py_buffer v;
    if (PyObject_GetBuffer(block_hash, &v, PyBUF_SIMPLE) < 0)
        return -1;
    if (v.len > 32 || v.len == 0) {
        PyBuffer_Release(&v);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "block_hash must be 1..32 bytes");
        return -1;
    }
    vkey_raw(v.buf, (size_t)v.len, gid, out);
    PyBuffer_Release(&v);
    return 0;
}

/* The kvpool hash a block's key was published under, from the key itself. */
static void vkey_of_key(PyObject *key, kvp_hash *out)
{
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
    size_t len = (size_t)PyBytes_GET_SIZE(key) - 4;
    uint32_t gid = (uint32_t)k[len] << 24 | (uint32_t)k[len + 1] << 16 |
                   (uint32_t)k[len + 2] << 8 | k[len + 3];
    vkey_raw(k, len, gid, out);
}

/* The memory is the pool object's (varena), freed with it: dropping the block's
 * reference to the pool is the last thing this does, since that may free
 * the array the block lies in. */
static void VBlock_dealloc(VBlock *self)
{
    Py_XDECREF(self->pool);
}

/* block_id. */
static PyObject *VBlock_get_id(VBlock *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->id);
}

/* The pool's record of the block: 0, or -1 with an exception set (a
 * closed pool, or the status of kvp_block_get). */
static int vblock_info(VBlock *self, kvp_block_info *bi)
{
    if (!kvpy_pool_ok(self->pool))
        return -1;
    kvp_status st = kvp_block_get(self->pool->pool, self->id, bi);
    if (st) {
        kvpy_raise(st);
        return -1;
    }
    return 0;
}

/* ref_cnt, read from the pool. */
static PyObject *VBlock_get_ref(VBlock *self, void *c)
{
    (void)c;
    kvp_block_info bi;
    if (vblock_info(self, &bi))
        return NULL;
    return PyLong_FromUnsignedLong(bi.ref_count);
}

/* block_hash: the key the block is cached under while the index still
 * holds it under that key, else None (a stale key is forgotten). */
static PyObject *VBlock_get_hash(VBlock *self, void *c)
{
    (void)c;
    PyObject **key = &vnative(self->pool)->vkeys[self->id];
    if (!*key)
        Py_RETURN_NONE;
    kvp_block_info bi;
    if (vblock_info(self, &bi))
        return NULL;
    kvp_hash kh;
    vkey_of_key(*key, &kh);
    if (bi.published && memcmp(bi.hash.b, kh.b, 32) == 0) {
        Py_INCREF(*key);
        return *key;
    }
    Py_CLEAR(*key); /* evicted since: forget the key */
    Py_RETURN_NONE;
}

/* is_null: block 0. */
static PyObject *VBlock_get_null(VBlock *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->id == 0);
}

/* The repr vLLM prints for a block. */
static PyObject *VBlock_repr(VBlock *self)
{
    PyObject *ref = VBlock_get_ref(self, NULL);
    if (!ref)
        return NULL;
    PyObject *h = VBlock_get_hash(self, NULL);
    if (!h) {
        Py_DECREF(ref);
        return NULL;
    }
    PyObject *r = PyUnicode_FromFormat("KVCacheBlock(block_id=%u, ref_cnt=%S, block_hash=%R%s)",
                                       (unsigned)self->id, ref, h,
                                       self->id == 0 ? ", is_null=True" : "");
    Py_DECREF(ref);
    Py_DECREF(h);
    return r;
}

static PyGetSetDef VBlock_getset[] = {
    {"block_id", (getter)VBlock_get_id, NULL, "block id (index into KV storage)", NULL},
    {"ref_cnt", (getter)VBlock_get_ref, NULL, "reference count (read from the pool)", NULL},
    {"block_hash", (getter)VBlock_get_hash, NULL,
     "BlockHashWithGroupId bytes while the block is indexed, else None", NULL},
    {"is_null", (getter)VBlock_get_null, NULL, "True for the null block (id 0)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kvpy_vblock_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool.compat.vllm.KVCacheBlock",
    .tp_basicsize = sizeof(VBlock),
    .tp_dealloc = (destructor)VBlock_dealloc,
    .tp_repr = (reprfunc)VBlock_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A vLLM KVCacheBlock: one canonical object per block id, created once by the "
              "pool; every attribute is a read-only view of the kvpool state.",
    .tp_getset = VBlock_getset,
};

typedef struct VPool {
    PyObject_HEAD
    PoolObject *pool;
    VBlock *arr;        /* the pool's varena: block id's object is arr[id] */
    uint32_t owned;     /* arr[0..owned) hold one reference each that is ours */
    uint32_t n;
    uint32_t hash_block_size;
    int enable_caching;
    int events;
    uint32_t *scratch;  /* n ids */
    PyObject *one;      /* the last one-block result list, for reuse */
    PyObject *dict;
} VPool;

/* BlockPool.__init__(num_gpu_blocks, enable_caching, hash_block_size=16,
 * enable_kv_cache_events=False, metrics_collector=None): the native pool
 * (LIFO reuse, as vLLM's free queue since its PR #42656: a freed block
 * without a hash at the head, cached blocks at the tail; null block 0) and one KVCacheBlock per block.  Once only. */
static int VPool_init(VPool *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"num_gpu_blocks", "enable_caching", "hash_block_size",
                         "enable_kv_cache_events", "metrics_collector", NULL};
    PyObject *nb_o, *cache_o, *hbs_o = NULL, *ev_o = NULL, *mc_o = NULL;
    if (self->pool) {
        PyErr_SetString(PyExc_RuntimeError, "BlockPool is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOO:BlockPool", kw, &nb_o, &cache_o, &hbs_o,
                                     &ev_o, &mc_o))
        return -1;
    uint32_t nb, hbs;
    int caching, events;
    if (kvpy_get_u32(nb_o, 0, &nb, "num_gpu_blocks") || kvpy_get_bool(cache_o, 1, &caching) ||
        kvpy_get_u32(hbs_o, 16, &hbs, "hash_block_size") || kvpy_get_bool(ev_o, 0, &events))
        return -1;
    if (nb == 0) {
        PyErr_SetString(PyExc_ValueError, "num_gpu_blocks must be > 0");
        return -1;
    }
    if (mc_o && mc_o != Py_None && PyObject_SetAttrString((PyObject *)self, "metrics_collector", mc_o) < 0)
        return -1;
    uint32_t cap = nb < 2048 ? 4096 : (nb > (UINT32_MAX / 4) ? UINT32_MAX : 2 * nb);
    PyObject *kwargs = Py_BuildValue("{s:I,s:I,s:O,s:O,s:s,s:O,s:I}", "block_size", hbs,
                                     "num_blocks", nb, "null_block", Py_True, "prefix_caching",
                                     caching ? Py_True : Py_False, "reuse", "lifo", "events",
                                     events ? Py_True : Py_False, "event_capacity", cap);
    if (!kwargs)
        return -1;
    PyObject *empty = PyTuple_New(0);
    PyObject *pool = empty ? kvpy_pool_new(&kvpy_vnative_type, empty, kwargs) : NULL;
    Py_XDECREF(empty);
    Py_DECREF(kwargs);
    if (!pool)
        return -1;
    self->pool = (PoolObject *)pool;
    self->n = nb;
    self->hash_block_size = hbs;
    self->enable_caching = caching;
    self->events = events;
    self->scratch = PyMem_Malloc((size_t)nb * sizeof(uint32_t));
    size_t bytes = ((size_t)nb * sizeof(VBlock) + 63) & ~(size_t)63;
    self->arr = vnative(self->pool)->varena = aligned_alloc(64, bytes);
    vnative(self->pool)->vkeys = PyMem_Calloc(nb, sizeof(PyObject *));
    vnative(self->pool)->nvkeys = nb;
    if (!self->scratch || !self->arr || !vnative(self->pool)->vkeys) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < nb; i++) {
        VBlock *b = &self->arr[i];
        PyObject_Init((PyObject *)b, &kvpy_vblock_type); /* one reference: ours */
        Py_INCREF(pool);
        b->pool = (PoolObject *)pool;
        b->id = i;
        self->owned = i + 1;
    }
    return 0;
}

/* Drops the references, its own on each block included; the blocks keep
 * the pool, which frees their array once the last of them goes. */
static void VPool_dealloc(VPool *self)
{
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->one);
    for (uint32_t i = self->owned; i > 0; i--)
        Py_DECREF((PyObject *)&self->arr[i - 1]);
    Py_XDECREF(self->pool);
    Py_XDECREF(self->dict);
    PyMem_Free(self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The references the collector must see.  Not the type: this one is
 * static, and a subclass instance's heap type is visited by the subclass's
 * own traverse (a second visit would count one reference twice). */
static int VPool_traverse(VPool *self, visitproc visit, void *arg)
{
    Py_VISIT(self->one);
    Py_VISIT(self->dict);
    return 0;
}

/* Break cycles through the cached result list and the instance dict. */
static int VPool_clear_gc(VPool *self)
{
    Py_CLEAR(self->one);
    Py_CLEAR(self->dict);
    return 0;
}

/* 1 once __init__ ran and the pool is open; else 0 with the exception set. */
static inline int vpool_ok(VPool *self)
{
    if (!self->pool) {
        PyErr_SetString(PyExc_RuntimeError, "BlockPool.__init__ was not called");
        return 0;
    }
    return kvpy_pool_ok(self->pool);
}

/* The checks every method makes first: initialised, open, `n` arguments
 * (else TypeError with the call's usage).  Always inlined: get_new_blocks
 * runs once per block, and the call would be a tenth of its own cost. */
static inline __attribute__((always_inline)) int vpool_call_ok(VPool *self, Py_ssize_t nargs,
                                                               Py_ssize_t n, const char *usage)
{
    return vpool_ok(self) && kvpy_nargs_is(nargs, n, usage);
}

/* The number of free blocks into *n: 0, or -1 with the exception set. */
static int vpool_free_count(VPool *self, uint32_t *n)
{
    if (!vpool_ok(self))
        return -1;
    kvp_status st = kvp_free_count(self->pool->pool, KVP_STREAM_SHARED, n);
    if (st) {
        kvpy_raise(st);
        return -1;
    }
    return 0;
}

/* The canonical block standing for an object of another class: the one of
 * its int `block_id` (vLLM's own KVCacheBlock(i), which its tests hand to
 * the pool), or NULL with TypeError/ValueError. */
static VBlock *vblock_by_id(VPool *self, PyObject *o)
{
    PyObject *v = PyObject_GetAttrString(o, "block_id");
    if (!v || !PyLong_Check(v)) {
        if (v || PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "expected a KVCacheBlock or an object with an int "
                         "block_id, got %.100s", Py_TYPE(o)->tp_name);
        }
        Py_XDECREF(v);
        return NULL;
    }
    long long id = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (id < 0 || id >= (long long)self->n) {
        PyErr_Format(PyExc_ValueError, "block_id %lld is not a block of this BlockPool", id);
        return NULL;
    }
    return &self->arr[id];
}

/* The canonical block of this pool, or NULL with TypeError/ValueError. */
static inline VBlock *vblock_of(VPool *self, PyObject *o)
{
    if (Py_TYPE(o) != &kvpy_vblock_type)
        return vblock_by_id(self, o);
    VBlock *b = (VBlock *)o;
    if (b->pool != self->pool) {
        PyErr_SetString(PyExc_ValueError, "the block belongs to another BlockPool");
        return NULL;
    }
    return b;
}

/* get_new_blocks(num_blocks) -> list[KVCacheBlock]; ValueError when short. */
static PyObject *VPool_get_new_blocks(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 1, "get_new_blocks(num_blocks)"))
        return NULL;
    Py_ssize_t want = PyLong_AsSsize_t(args[0]);
    if (want == -1 && PyErr_Occurred())
        return NULL;
    if (want < 0) {
        PyErr_SetString(PyExc_ValueError, "num_blocks must be >= 0");
        return NULL;
    }
    if (want == 0)
        return PyList_New(0);
    size_t n = 0;
    kvp_status st = KVP_EEXHAUSTED;
    if (want == 1) { /* the decode-step case: kvp_take skips the token arithmetic */
        st = kvp_take(self->pool->pool, KVP_STREAM_SHARED, KVP_ANON, self->scratch);
        n = 1;
    } else if ((uint64_t)want <= self->n) {
        /* n blocks for one holder, all or nothing: kvp_alloc's contract
         * (kvp_take_each is one take per owner, and keeps the takes before
         * a failure). */
        st = kvp_alloc(self->pool->pool, KVP_STREAM_SHARED,
                       (uint64_t)want * self->hash_block_size, KVP_ANON, 0, self->scratch,
                       self->n, &n);
    }
    if (st == KVP_EEXHAUSTED) {
        PyErr_Format(PyExc_ValueError, "Cannot get %zd free blocks from the pool", want);
        return NULL;
    }
    if (st)
        return kvpy_raise(st);
    /* Ask for the next block's object now, while the caller's loop runs:
     * after a run of cached blocks or a long idle stretch it is cold (about
     * a third of a one-block call's time here when it missed). */
    kvp_block next;
    if (kvp_peek_next(self->pool->pool, KVP_STREAM_SHARED, &next) == KVP_OK && next < self->n)
        __builtin_prefetch(&self->arr[next], 1);
    /* A one-block result (the decode step's) reuses the previous one-block
     * list when the caller has dropped it (ours is then its only reference,
     * so no one can see it change), as CPython's dict iterators reuse their
     * result tuples: a new list was about 130 instructions of the call. */
    PyObject *l = self->one;
    if (n == 1 && l && Py_REFCNT(l) == 1 && PyList_GET_SIZE(l) == 1) {
        PyObject *b = (PyObject *)&self->arr[self->scratch[0]];
        Py_INCREF(b);
        Py_SETREF(PyList_GET_ITEM(l, 0), b);
        Py_INCREF(l);
        return l;
    }
    l = PyList_New((Py_ssize_t)n);
    if (!l) {
        kvp_free(self->pool->pool, self->scratch, n, KVP_ANON);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *b = (PyObject *)&self->arr[self->scratch[i]];
        Py_INCREF(b);
        PyList_SET_ITEM(l, (Py_ssize_t)i, b);
    }
    if (n == 1) {
        Py_INCREF(l);
        Py_XSETREF(self->one, l);
    }
    return l;
}

/* Collect non-null block ids of a (flat) iterable into scratch. */
static Py_ssize_t collect_ids(VPool *self, PyObject *blocks)
{
    PyObject *seq = PySequence_Fast(blocks, "expected an iterable of KVCacheBlock");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), k = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint32_t *ids = self->scratch;
    uint32_t *heap = NULL;
    if ((uint64_t)n > self->n) {
        heap = PyMem_Malloc((size_t)n * sizeof(uint32_t));
        if (!heap) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        ids = heap;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        VBlock *b = vblock_of(self, items[i]);
        if (!b) {
            Py_DECREF(seq);
            PyMem_Free(heap);
            return -1;
        }
        if (b->id != 0)
            ids[k++] = b->id;
    }
    Py_DECREF(seq);
    if (heap) { /* more ids than blocks: only possible with repeats */
        kvp_status st = kvp_free(self->pool->pool, heap, (size_t)k, KVP_ANON);
        PyMem_Free(heap);
        if (st) {
            kvpy_raise(st);
            return -1;
        }
        return -2; /* already freed */
    }
    return k;
}

/* free_blocks(ordered_blocks): the first given is the first evicted. */
static PyObject *VPool_free_blocks(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 1, "free_blocks(ordered_blocks)"))
        return NULL;
    Py_ssize_t k = collect_ids(self, args[0]);
    if (k == -1)
        return NULL;
    if (k > 0) {
        kvp_status st = kvp_free(self->pool->pool, self->scratch, (size_t)k, KVP_ANON);
        if (st)
            return kvpy_raise(st);
    }
    Py_RETURN_NONE;
}

/* One more reference on block o (a free block leaves the queue); the null
 * block is skipped.  0, or -1 with the exception set. */
static int touch_one(VPool *self, PyObject *o)
{
    VBlock *b = vblock_of(self, o);
    if (!b)
        return -1;
    if (b->id == 0)
        return 0;
    kvp_status st = kvp_claim(self->pool->pool, b->id, KVP_ANON);
    if (st == KVP_ENOTFOUND) /* a vacant free block: take it off the queue */
        st = kvp_take_id(self->pool->pool, b->id, KVP_ANON);
    if (st) {
        kvpy_raise(st);
        return -1;
    }
    return 0;
}

/* 0 when o is one of self's blocks, else -1 with TypeError or ValueError set. */
static int check_one(VPool *self, PyObject *o)
{
    return vblock_of(self, o) ? 0 : -1;
}

/* Apply fn to each block of the tuple items, or, when nested, to each
 * block of each tuple in it.  Stops at the first failure (-1, exception
 * set). */
static int touch_each(VPool *self, PyObject *items, int nested, int (*fn)(VPool *, PyObject *))
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *g = PyTuple_GET_ITEM(items, i);
        if (!nested) {
            if (fn(self, g))
                return -1;
            continue;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(g); j++)
            if (fn(self, PyTuple_GET_ITEM(g, j)))
                return -1;
    }
    return 0;
}

/* touch(blocks): one more reference each; a free block leaves the queue.
 * Accepts a flat sequence of blocks or a sequence of sequences (groups).
 * Every sequence is first copied into a tuple (iterating one may run
 * Python code), so the checks and the claims see the same blocks. */
static PyObject *VPool_touch(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 1, "touch(blocks)"))
        return NULL;
    PyObject *seq = kvpy_tuple_of(args[0], "touch() expects a sequence of KVCacheBlock");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    /* Groups are iterables; a block of another class is not one. */
    PyObject *first = n > 0 ? PyTuple_GET_ITEM(seq, 0) : NULL;
    int nested = first && Py_TYPE(first) != &kvpy_vblock_type && Py_TYPE(first)->tp_iter != NULL;
    if (nested) { /* a new tuple of the groups as tuples (seq may be the caller's) */
        PyObject *groups = PyTuple_New(n);
        for (Py_ssize_t i = 0; groups && i < n; i++) {
            PyObject *g = kvpy_tuple_of(PyTuple_GET_ITEM(seq, i), "touch(): groups must be sequences");
            if (!g)
                Py_CLEAR(groups);
            else
                PyTuple_SET_ITEM(groups, i, g);
        }
        Py_SETREF(seq, groups);
        if (!seq)
            return NULL;
    }
    /* Check everything first so that a refused call changes nothing. */
    int rc = vpool_ok(self) ? touch_each(self, seq, nested, check_one) : -1;
    if (!rc)
        rc = touch_each(self, seq, nested, touch_one);
    Py_DECREF(seq);
    if (rc)
        return NULL;
    Py_RETURN_NONE;
}

/* get_cached_block(block_hash, kv_cache_group_ids) -> list or None */
static PyObject *VPool_get_cached_block(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 2, "get_cached_block(block_hash, kv_cache_group_ids)"))
        return NULL;
    if (!self->enable_caching)
        Py_RETURN_NONE;
    PyObject *gids = kvpy_tuple_of(args[1], "kv_cache_group_ids must be a sequence of int");
    if (!gids)
        return NULL;
    Py_ssize_t ng = PyTuple_GET_SIZE(gids);
    PyObject *out = PyList_New(ng);
    if (!out) {
        Py_DECREF(gids);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        uint32_t gid;
        kvp_hash h;
        kvp_block id;
        if (kvpy_get_u32(PyTuple_GET_ITEM(gids, i), 0, &gid, "group id") ||
            vkey(args[0], gid, &h) || !vpool_ok(self)) /* __index__ may close the pool */
            goto fail;
        kvp_status st = kvp_lookup(self->pool->pool, KVP_STREAM_SHARED, &h, &id);
        if (st == KVP_ENOTFOUND) {
            Py_DECREF(gids);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (st) {
            kvpy_raise(st);
            goto fail;
        }
        PyObject *b = (PyObject *)&self->arr[id];
        Py_INCREF(b);
        PyList_SET_ITEM(out, i, b);
    }
    Py_DECREF(gids);
    return out;
fail:
    Py_DECREF(gids);
    Py_DECREF(out);
    return NULL;
}

/* _cache_blocks(blocks, block_hashes, kv_cache_group_id): publish each
 * (non-null) block under its hash; sets block_hash.  Checks all first. */
static PyObject *VPool_cache_blocks(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 3, "_cache_blocks(blocks, block_hashes, group_id)"))
        return NULL;
    uint32_t gid;
    if (kvpy_get_u32(args[2], 0, &gid, "kv_cache_group_id"))
        return NULL;
    /* Tuples: the second pass must see the blocks and hashes the first checked. */
    PyObject *bs = kvpy_tuple_of(args[0], "blocks must be a sequence");
    if (!bs)
        return NULL;
    PyObject *hs = kvpy_tuple_of(args[1], "block_hashes must be a sequence");
    if (!hs) {
        Py_DECREF(bs);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(bs);
    PyObject *res = NULL;
    kvp_hash *kh = NULL;
    uint32_t *bid = NULL; /* the block ids, read once: a block may be of another class */
    if (!vpool_ok(self)) /* the conversions may have run Python code that closed it */
        goto done;
    if (PyTuple_GET_SIZE(hs) < n) {
        PyErr_SetString(PyExc_ValueError, "fewer block hashes than blocks");
        goto done;
    }
    kh = PyMem_Calloc(n ? (size_t)n : 1, sizeof(kvp_hash));
    bid = PyMem_Calloc(n ? (size_t)n : 1, sizeof(uint32_t));
    if (!kh || !bid) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        VBlock *b = vblock_of(self, PyTuple_GET_ITEM(bs, i));
        if (!b || vkey(PyTuple_GET_ITEM(hs, i), gid, &kh[i]))
            goto done;
        bid[i] = b->id;
        if (b->id == 0)
            continue;
        kvp_block_info bi;
        kvp_status st = kvp_block_get(self->pool->pool, b->id, &bi);
        if (!st && bi.state != KVP_BLOCK_IN_USE)
            st = KVP_EDOUBLEFREE;
        if (!st && bi.published && memcmp(bi.hash.b, kh[i].b, 32))
            st = KVP_EBUSY;
        if (st) {
            kvpy_raise_msg(st, "cache_full_blocks: block not in use or already cached");
            goto done;
        }
    }
    if (!vpool_ok(self)) /* a block_id or a hash's conversion may have closed it */
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        VBlock *b = &self->arr[bid[i]];
        if (b->id == 0)
            continue;
        kvp_status st = kvp_publish(self->pool->pool, b->id, &kh[i]);
        if (st) {
            kvpy_raise(st);
            goto done;
        }
        PyObject *h = PyTuple_GET_ITEM(hs, i);
        PyObject *gb = PyBytes_FromStringAndSize(NULL, 4);
        if (!gb)
            goto done;
        unsigned char *g = (unsigned char *)PyBytes_AS_STRING(gb);
        g[0] = (unsigned char)(gid >> 24);
        g[1] = (unsigned char)(gid >> 16);
        g[2] = (unsigned char)(gid >> 8);
        g[3] = (unsigned char)gid;
        PyObject *hb = PyBytes_FromObject(h);
        if (!hb) {
            Py_DECREF(gb);
            goto done;
        }
        PyBytes_ConcatAndDel(&hb, gb);
        if (!hb)
            goto done;
        Py_XSETREF(vnative(self->pool)->vkeys[b->id], hb);
    }
    res = Py_None;
    Py_INCREF(res);
done:
    PyMem_Free(kh);
    PyMem_Free(bid);
    Py_DECREF(bs);
    Py_DECREF(hs);
    return res;
}

/* _evict_block_ids(block_ids): unpublish each cached block; unknown or
 * uncached ids are skipped (vLLM's evict_blocks).  Returns the count. */
static PyObject *VPool_evict_ids(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_call_ok(self, nargs, 1, "_evict_block_ids(block_ids)"))
        return NULL;
    PyObject *it = PyObject_GetIter(args[0]);
    if (!it)
        return NULL;
    PyObject *o;
    size_t count = 0;
    while ((o = PyIter_Next(it))) {
        uint32_t id;
        int bad = kvpy_get_u32(o, 0, &id, "block id");
        Py_DECREF(o);
        if (bad || !vpool_ok(self)) /* the iteration or __index__ may close the pool */
            goto fail;
        if (id >= self->n) {
            PyErr_Format(PyExc_ValueError, "Invalid block_id %u >= %u", id, self->n);
            goto fail;
        }
        if (id == 0)
            continue;
        kvp_status st = kvp_unpublish(self->pool->pool, id);
        if (st == KVP_ENOTFOUND)
            continue;
        if (st) {
            kvpy_raise(st);
            goto fail;
        }
        count++;
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(count);
fail:
    Py_DECREF(it);
    return NULL;
}

/* get_num_free_blocks() -> int. */
static PyObject *VPool_get_num_free_blocks(VPool *self, PyObject *Py_UNUSED(ignored))
{
    uint32_t n = 0;
    if (vpool_free_count(self, &n))
        return NULL;
    return PyLong_FromUnsignedLong(n);
}

/* get_usage() -> the fraction of blocks in use, the null block excluded. */
static PyObject *VPool_get_usage(VPool *self, PyObject *Py_UNUSED(ignored))
{
    uint32_t n = 0;
    if (vpool_free_count(self, &n))
        return NULL;
    uint32_t total = self->n - 1; /* the null block */
    if (!total)
        return PyFloat_FromDouble(0.0);
    return PyFloat_FromDouble(1.0 - (double)n / (double)total);
}

/* pool: the native Pool. */
static PyObject *VPool_get_pool(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    Py_INCREF(self->pool);
    return (PyObject *)self->pool;
}

/*
 * BlockPool.blocks: a read-only sequence of every KVCacheBlock, index = id,
 * over the pool's array (vLLM's is a list; a list here would cost 8 bytes
 * per block for what an index into the array gives).  Indexing, negative
 * indices, slices (a new list), len() and iteration; it holds the
 * BlockPool.
 */
typedef struct VBlocks {
    PyObject_HEAD
    VPool *bp;
} VBlocks;

static void VBlocks_dealloc(VBlocks *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->bp);
    PyObject_GC_Del(self);
}

/* The view's one reference (a BlockPool's dict may hold the view). */
static int VBlocks_traverse(VBlocks *self, visitproc visit, void *arg)
{
    Py_VISIT(self->bp);
    return 0;
}

static Py_ssize_t VBlocks_len(VBlocks *self)
{
    return (Py_ssize_t)self->bp->n;
}

/* blocks[i] for 0 <= i < n (negative i already adjusted by CPython). */
static PyObject *VBlocks_item(VBlocks *self, Py_ssize_t i)
{
    if (i < 0 || i >= (Py_ssize_t)self->bp->n) {
        PyErr_SetString(PyExc_IndexError, "block id out of range");
        return NULL;
    }
    PyObject *b = (PyObject *)&self->bp->arr[i];
    Py_INCREF(b);
    return b;
}

/* blocks[i] or blocks[slice] (a new list). */
static PyObject *VBlocks_subscript(VBlocks *self, PyObject *key)
{
    Py_ssize_t n = (Py_ssize_t)self->bp->n;
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0)
            return NULL;
        Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
        PyObject *l = PyList_New(len);
        if (!l)
            return NULL;
        for (Py_ssize_t k = 0, i = start; k < len; k++, i += step) {
            PyObject *b = (PyObject *)&self->bp->arr[i];
            Py_INCREF(b);
            PyList_SET_ITEM(l, k, b);
        }
        return l;
    }
    Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    return VBlocks_item(self, i < 0 ? i + n : i);
}

static PySequenceMethods VBlocks_seq = {
    .sq_length = (lenfunc)VBlocks_len,
    .sq_item = (ssizeargfunc)VBlocks_item,
};

static PyMappingMethods VBlocks_map = {
    .mp_length = (lenfunc)VBlocks_len,
    .mp_subscript = (binaryfunc)VBlocks_subscript,
};

PyTypeObject kvpy_vblocks_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool._kvpool._VllmBlocks",
    .tp_basicsize = sizeof(VBlocks),
    .tp_dealloc = (destructor)VBlocks_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
#ifdef Py_TPFLAGS_SEQUENCE
                | Py_TPFLAGS_SEQUENCE
#endif
    ,
    .tp_doc = "BlockPool.blocks: every KVCacheBlock, index = id (read-only).",
    .tp_traverse = (traverseproc)VBlocks_traverse,
    .tp_as_sequence = &VBlocks_seq,
    .tp_as_mapping = &VBlocks_map,
};

/* blocks: every KVCacheBlock, index = id (a view, see VBlocks). */
static PyObject *VPool_get_blocks(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    VBlocks *v = PyObject_GC_New(VBlocks, &kvpy_vblocks_type);
    if (!v)
        return NULL;
    Py_INCREF(self);
    v->bp = self;
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

/* null_block: block 0. */
static PyObject *VPool_get_null(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    Py_INCREF(&self->arr[0]);
    return (PyObject *)&self->arr[0];
}

static PyMethodDef VPool_methods[] = {
    {"get_new_blocks", KVPY_FC(VPool_get_new_blocks), METH_FASTCALL,
     "get_new_blocks(num_blocks) -> list[KVCacheBlock]\n\nTake blocks from the front of the "
     "free queue (evicting cached content); ValueError when fewer are free."},
    {"free_blocks", KVPY_FC(VPool_free_blocks), METH_FASTCALL,
     "free_blocks(ordered_blocks)\n\nDrop one reference each; blocks reaching zero join the "
     "free queue in the given order (the first is evicted first).  The null block is skipped."},
    {"touch", KVPY_FC(VPool_touch), METH_FASTCALL,
     "touch(blocks)\n\nOne more reference per block (a flat sequence; groups are accepted too); "
     "a free block leaves the free queue."},
    {"get_cached_block", KVPY_FC(VPool_get_cached_block), METH_FASTCALL,
     "get_cached_block(block_hash, kv_cache_group_ids) -> list[KVCacheBlock] | None"},
    {"_cache_blocks", KVPY_FC(VPool_cache_blocks), METH_FASTCALL, NULL},
    {"_evict_block_ids", KVPY_FC(VPool_evict_ids), METH_FASTCALL, NULL},
    {"get_num_free_blocks", (PyCFunction)VPool_get_num_free_blocks, METH_NOARGS,
     "get_num_free_blocks() -> int"},
    {"get_usage", (PyCFunction)VPool_get_usage, METH_NOARGS,
     "get_usage() -> float (the null block excluded)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef VPool_getset[] = {
    {"pool", (getter)VPool_get_pool, NULL, "the native kvpool.Pool underneath", NULL},
    {"blocks", (getter)VPool_get_blocks, NULL,
     "every KVCacheBlock, index = id: a read-only sequence (slices give lists)", NULL},
    {"null_block", (getter)VPool_get_null, NULL, "the null block (id 0)", NULL},
    {"num_gpu_blocks", kvpy_get_u32_field, NULL, "blocks in the pool",
     (void *)offsetof(VPool, n)},
    {"enable_caching", kvpy_get_bool_field, NULL, "prefix caching on",
     (void *)offsetof(VPool, enable_caching)},
    {"enable_kv_cache_events", kvpy_get_bool_field, NULL, "events on",
     (void *)offsetof(VPool, events)},
    {"hash_block_size", kvpy_get_u32_field, NULL, "tokens per hashed block",
     (void *)offsetof(VPool, hash_block_size)},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject kvpy_vpool_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvpool._kvpool._VllmBlockPool",
    .tp_basicsize = sizeof(VPool),
    .tp_dealloc = (destructor)VPool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C half of kvpool.compat.vllm.BlockPool (hot-path methods).",
    .tp_traverse = (traverseproc)VPool_traverse,
    .tp_clear = (inquiry)VPool_clear_gc,
    .tp_methods = VPool_methods,
    .tp_getset = VPool_getset,
    .tp_dictoffset = offsetof(VPool, dict),
    .tp_init = (initproc)VPool_init,
    .tp_new = PyType_GenericNew,
};
