/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvpy.h — what the files of the extension module kvpool._kvpool share.
 *
 * The module is one CPython extension built from fourteen files, each
 * owning one concern (see its own top comment).  Each calls only files on
 * lower rows (a use of an inline helper or macro below counts as a use of
 * what it names), so the files' calls form no circle
 * (docs/ARCHITECTURE.md, "The Python binding"):
 *   6  module.c        the module assembled: its functions, types,
 *                      constants, each file's init;
 *   5  pool_methods.c  the Pool's method table joined from each file's
 *                      rows; close, clear, retire_top;
 *   4  pool_batch.c    the Pool's calls over many blocks or tokens;
 *      sequence.c      the Sequence type, its zero-copy block table, the
 *                      Pool's find_sequence and sequence;
 *      vllm.c          the vLLM drop-in's hot path (_VllmBlockPool,
 *                      KVCacheBlock) and its pool object, a Pool with the
 *                      drop-in's block objects and keys;
 *      atom.c          the ATOM drop-in's hot path (_AtomBlockPool);
 *      mlx.c           the vllm-mlx drop-in's block hashing (mlx_block_hash)
 *                      and its prefix walk and caching loop (mlx_prefix,
 *                      mlx_cache);
 *   3  pool.c          the Pool object: creation and configuration,
 *                      dealloc, the GIL-free bracket, the type object;
 *      pool_block.c    the Pool's one-call methods (one table), alloc,
 *                      take, lookup;
 *   2  evict.c         the eviction queue and its delivery to on_evict;
 *      pool_stats.c    the Pool's statistics, text renderings, events, check;
 *   1  args.c          argument parsing and conversions (ints, owners,
 *                      hashes, zero-copy views of integer buffers, extra
 *                      keys);
 *      vhash.c         the vLLM drop-in's block hashing (vllm_block_hash);
 *   0  errors.c        the exception classes, status -> exception.
 * Only the public header <kvpool.h> of the library is used, as any engine
 * embedding it would (mlx.c also calls OpenSSL's SHA-256, which the
 * library links).  Names shared between files start with kvpy_ (the
 * target is built with hidden visibility: only PyInit__kvpool is exported);
 * everything else is static to its file.
 *
 * The rules every file keeps (docs/PYTHON.md states them for users):
 * - The GIL serialises every call on a pool made without `thread_safe`.
 *   The GIL is released only around calls that can run long (creating a
 *   large pool, hashing, admitting a long prompt on a thread-safe pool
 *   without on_evict), between kvpy_pool_busy_enter and _leave (and the
 *   sequence's `busy`), so that close, clear, retire_top and destroy refuse
 *   with BusyError until the call is back.
 * - No Python code runs inside a library call: the library's eviction
 *   callback only queues (evict.c), and every method that can evict ends
 *   with kvpy_ev_deliver, after its library calls returned.  So no thread
 *   ever waits for the GIL while holding a pool's lock, and a callback may
 *   call anything, close() included.
 * - Argument conversion may run Python code (__index__, iteration, buffer
 *   exports) that closes the pool or destroys a sequence: the state checks
 *   that matter (open, not busy, no exports) are made after it.  A list
 *   whose items are converted one by one is first copied into a tuple
 *   (kvpy_tuple_of), as the conversion of one item may change the list.
 * - While a zero-copy export of a sequence's block table is alive, the
 *   calls that could move or free the table (admit, append, destroy;
 *   Pool.retire_top, clear, close) refuse with BusyError.
 */
#ifndef KVPY_H
#define KVPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <kvpool.h>

#include <stdint.h>
#include <string.h>

/* Calls above these sizes release the GIL (see the rules above). */
#define KVPY_GIL_CREATE_BLOCKS 65536u
#define KVPY_GIL_TOKENS 4096u

/* A PyMethodDef entry's function of any calling convention, and the flags
 * of the keyword-taking fast calls. */
#define KVPY_FC(f) (PyCFunction)(void (*)(void))(f)
#define KVPY_FCK (METH_FASTCALL | METH_KEYWORDS)

/* ---- errors.c: exceptions ------------------------------------------------ */

extern PyObject *kvpy_error;      /* kvpool.Error, the base of every class */
extern PyObject *kvpy_exc[KVP_STATUS_COUNT]; /* kvpool.XxxError, indexed by kvp_status */

/* Raise the exception of `st` with its message; returns NULL. */
PyObject *kvpy_raise(kvp_status st);
/* Raise the exception of `st` with `msg`, the status's message appended. */
PyObject *kvpy_raise_msg(kvp_status st, const char *msg);
/* The module function strerror (see errors.c). */
PyObject *kvpy_mod_strerror(PyObject *m, PyObject *arg);
/* The module's setup of errors.c: kvpool.Error and one class per status
 * made and added to m.  0, or -1 with the exception set. */
int kvpy_errors_init(PyObject *m);

/* ---- args.c: arguments and buffers -------------------------------------- */

/* The arity check of the positional-only calls: 1 when nargs is n, else 0
 * with TypeError carrying the call's usage.  Inline: every hot call makes
 * it. */
static inline int kvpy_nargs_is(Py_ssize_t nargs, Py_ssize_t n, const char *usage)
{
    if (nargs == n)
        return 1;
    PyErr_SetString(PyExc_TypeError, usage);
    return 0;
}

int kvpy_parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames, const char *const *names, int nreq, PyObject **out);
PyObject *kvpy_tuple_of(PyObject *o, const char *msg);
PyObject *kvpy_index(PyObject *o, const char *what);
int kvpy_get_u64(PyObject *o, uint64_t dflt, uint64_t *v, const char *what);
int kvpy_get_u32(PyObject *o, uint32_t dflt, uint32_t *v, const char *what);
int kvpy_get_owner(PyObject *o, kvp_owner *v);
int kvpy_get_bool(PyObject *o, int dflt, int *v);
int kvpy_get_hash(PyObject *o, kvp_hash *h, const char *what);
/* 32 bytes, or an int key: its low 64 bits big-endian after 24 zero bytes
 * (lookup's and publish's hash argument). */
int kvpy_hash_or_key(PyObject *o, kvp_hash *h, const char *what);
PyObject *kvpy_block_or_none(kvp_block b);
PyObject *kvpy_hash_bytes(const kvp_hash *h);
PyObject *kvpy_u32_list(const uint32_t *p, size_t n);

/* __enter__ returning self, and getters of a uint32_t / int-flag field at
 * the byte offset given as the getset closure. */
PyObject *kvpy_return_self(PyObject *self, PyObject *unused);
PyObject *kvpy_get_u32_field(PyObject *self, void *offset);
PyObject *kvpy_get_bool_field(PyObject *self, void *offset);

/* Views of integer buffers (numpy arrays read from their own fields). */
int kvpy_view_get(PyObject *o, Py_buffer *v, int flags);
void kvpy_view_release(Py_buffer *v);

/* An input array of uint32: zero-copy for a C-contiguous buffer of 4-byte
 * integers, converted (range-checked) from other integer buffers and from
 * sequences of ints.  Release it on every path once kvpy_u32in_get
 * succeeded. */
typedef struct kvpy_u32in {
    const uint32_t *p;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
    uint32_t *heap;
    uint32_t small[32];
} kvpy_u32in;

int kvpy_u32in_get(PyObject *o, kvpy_u32in *in, const char *what);
/* Release what kvpy_u32in_get holds (nothing after a failed get). */
void kvpy_u32in_release(kvpy_u32in *in);

/* An input array of owners: in place from a buffer of 8-byte integers,
 * converted from a sequence of ints and None (KVP_ANON).  Released like
 * kvpy_u32in. */
typedef struct kvpy_owners {
    const kvp_owner *p;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
    kvp_owner *heap;
    kvp_owner small[16];
} kvpy_owners;

int kvpy_owners_get(PyObject *o, kvpy_owners *in, const char *what);
void kvpy_owners_release(kvpy_owners *in);

/* A writable output buffer of 4-byte integers (C-contiguous, aligned);
 * released with kvpy_view_release(&out.view). */
typedef struct kvpy_u32out {
    uint32_t *p;
    Py_ssize_t cap;
    Py_buffer view;
} kvpy_u32out;

int kvpy_u32out_get(PyObject *o, kvpy_u32out *out);

/* Extra hash keys: None or a dict in, kvp_extra_keys out (k valid until
 * kvpy_extra_release: it points into a copy of the dict held here, which
 * Python code run by the conversion cannot change; present = 0 for None). */
typedef struct kvpy_extra {
    kvp_extra_keys k;
    int present;
    PyObject *copy;
    kvp_mm_span *mm;
    Py_buffer salt;
    int has_salt;
} kvpy_extra;

int kvpy_extra_get(PyObject *o, kvpy_extra *e);
void kvpy_extra_release(kvpy_extra *e);

/* The module functions hash_external and _fast_view (see args.c). */
PyObject *kvpy_mod_hash_external(PyObject *m, PyObject *arg);
PyObject *kvpy_mod_fast_view(PyObject *m, PyObject *const *args, Py_ssize_t nargs);

/* ---- pool.c: the Pool object --------------------------------------------- */

typedef struct PoolObject {
    PyObject_HEAD
    kvp_pool *pool;           /* NULL once closed */
    uint32_t block_size;
    int thread_safe;
    int events;
    int null_block;
    int separate_kv;
    PyObject *on_evict;       /* callable or NULL */
    PyObject *seqs;           /* dict request_id -> weakref(Sequence) */
    Py_ssize_t table_exports; /* live zero-copy exports of block tables */
    Py_ssize_t busy;          /* calls in flight with the GIL released */
    struct kvpy_evrec *evq;   /* evictions not yet delivered: evq[ev_head..ev_n) */
    uint32_t ev_head, ev_n, ev_cap;
    uint32_t ev_lost;         /* evictions the queue had no room for */
    int init_pending;         /* set by tp_new, cleared by the one __init__ allowed */
    PyObject *weakrefs;
    uint32_t take_hint;       /* take()'s hint, for its last owner */
} PoolObject;

/* kvpool.Pool; its methods are set by kvpy_pool_methods_init. */
extern PyTypeObject kvpy_pool_type;

/* Pool(**kwargs) without __init__ (the vLLM drop-in builds its pool so),
 * of `type` (kvpy_pool_type or a subtype). */
PyObject *kvpy_pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds);
/* 1 if the pool is open; else 0 with InvalidArgumentError set.  Inline:
 * every call makes it. */
static inline int kvpy_pool_ok(PoolObject *self)
{
    if (self->pool)
        return 1;
    PyErr_SetString(kvpy_exc[KVP_EINVAL], "the pool is closed");
    return 0;
}
#define KVPY_POOL_CHECK(self)                                                                   \
    do {                                                                                        \
        if (!kvpy_pool_ok(self))                                                                \
            return NULL;                                                                        \
    } while (0)
/* The bracket of a GIL-free call: the library pool (NULL with the error
 * set when closed), counted busy and held by one more reference. */
kvp_pool *kvpy_pool_busy_enter(PoolObject *self);
void kvpy_pool_busy_leave(PoolObject *self);

/* ---- evict.c: eviction queue --------------------------------------------- */

/* The library's on_evict: queues (hash, block) on the PoolObject `user`. */
void kvpy_evict_trampoline(void *user, const kvp_hash *h, kvp_block b);
/* The tail of every method that can evict: the queued evictions delivered
 * to on_evict (a compare when nothing is queued); returns r unchanged. */
PyObject *kvpy_ev_deliver(PoolObject *self, PyObject *r);

/* Pool methods that change the pool deliver its queued evictions before
 * returning: KVPY_EV_*(fn) defines fn##_ev, fn followed by kvpy_ev_deliver,
 * one macro per calling convention. */
#define KVPY_EV_FCK(fn)                                                                         \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)   \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, a, n, k));                                        \
    }
#define KVPY_EV_FC(fn)                                                                          \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n)                \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, a, n));                                           \
    }
#define KVPY_EV_NOARGS(fn)                                                                      \
    static PyObject *fn##_ev(PoolObject *self, PyObject *unused)                                \
    {                                                                                           \
        return kvpy_ev_deliver(self, fn(self, unused));                                         \
    }

/* ---- pool_block.c, pool_batch.c, pool_stats.c: the Pool's methods -------- */

/* Each file's rows of the Pool's method table (NULL-terminated). */
extern PyMethodDef kvpy_pool_block_methods[];
extern PyMethodDef kvpy_pool_batch_methods[];
extern PyMethodDef kvpy_pool_stats_methods[];

/* A kvp_stats as a dict, one key per field (pool_stats.c; stats() and
 * stats_history()). */
PyObject *kvpy_stats_dict(const kvp_stats *s);

/* ---- sequence.c ------------------------------------------------------------ */

extern PyTypeObject kvpy_seq_type;

/* Mark every wrapper of the pool's sequences dead (clear, close). */
void kvpy_seqs_invalidate(PoolObject *self);
/* Pool.find_sequence and Pool.sequence: sequence.c's rows of the Pool's
 * method table. */
extern PyMethodDef kvpy_pool_seq_methods[];

/* ---- pool_methods.c -------------------------------------------------------- */

/* The module's setup of the Pool's method table, before PyType_Ready of
 * kvpy_pool_type: 0, or -1 with MemoryError. */
int kvpy_pool_methods_init(void);

/* ---- vllm.c ---------------------------------------------------------------- */

extern PyTypeObject kvpy_vblock_type;
extern PyTypeObject kvpy_vpool_type;
extern PyTypeObject kvpy_vblocks_type;
/* The vLLM drop-in's pool object: a subtype of kvpy_pool_type (readied
 * after it, not in the module's namespace). */
extern PyTypeObject kvpy_vnative_type;

/* ---- vhash.c --------------------------------------------------------------- */

/* SHA-256 of p[0..n) into md (OpenSSL): 0, or -1 with kvpool.Error or
 * MemoryError set.  With the GIL held. */
int kvpy_sha256(const void *p, size_t n, unsigned char md[32]);

/* The module function vllm_block_hash (see vhash.c). */
PyObject *kvpy_vllm_block_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs);

/* ---- atom.c ---------------------------------------------------------------- */

extern PyTypeObject kvpy_apool_type;
/* The module's setup of atom.c: 0, or -1 with the exception set. */
int kvpy_atom_init(void);
/* The module function atom_compute_hash (see atom.c). */
PyObject *kvpy_atom_compute_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames);

/* ---- mlx.c ----------------------------------------------------------------- */

/* The module functions mlx_block_hash, mlx_prefix, mlx_cache, mlx_add and mlx_take (see mlx.c). */
PyObject *kvpy_mlx_block_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs);
PyObject *kvpy_mlx_prefix(PyObject *m, PyObject *const *args, Py_ssize_t nargs);
PyObject *kvpy_mlx_cache(PyObject *m, PyObject *const *args, Py_ssize_t nargs);
PyObject *kvpy_mlx_add(PyObject *m, PyObject *const *args, Py_ssize_t nargs);
PyObject *kvpy_mlx_take(PyObject *m, PyObject *const *args, Py_ssize_t nargs);

#endif
