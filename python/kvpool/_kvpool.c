/*
 * _kvpool.c — the CPython extension module behind the `kvpool` package.
 *
 * What it owns:
 * - the exception classes (one per kvp_status, under kvpool.Error);
 * - the native classes Pool (every call of include/kvpool.h) and Sequence
 *   (per-request block tables, with a zero-copy view of the table);
 * - the hot path of the vLLM drop-in: _VllmBlockPool (get_new_blocks,
 *   free_blocks, touch, get_cached_block, ...) and its canonical block
 *   objects KVCacheBlock; kvpool/compat/vllm.py subclasses it in Python.
 *
 * Why built this way:
 * - Hand-written, METH_FASTCALL, no generator: one C call per batch must
 *   cost tens of nanoseconds, so arguments are read straight from the
 *   vectorcall array and ids straight out of any buffer (numpy, array,
 *   memoryview) without copying (plain numpy arrays without even a buffer
 *   export: see "Views of integer buffers"); list[int] is accepted through
 *   a slower conversion path.
 * - Only the public header is used, like any engine embedding the library.
 * - Thread model: the GIL serialises every call on a pool made without
 *   `thread_safe`.  The GIL is released only around calls that can run
 *   long (creating a large pool, hashing, and admitting a long prompt on a
 *   thread-safe pool without on_evict); each such call counts its pool and
 *   sequence `busy` and holds a reference to them, so that close, clear,
 *   retire_top and destroy refuse with BusyError until it is back.
 * - Eviction callbacks never run inside a library call: the library's
 *   callback only queues the eviction, and the method delivers the queue to
 *   the Python callable after the library call returned (see "Evictions").
 *   So no thread ever waits for the GIL while it holds a pool's lock, and a
 *   callback may call anything, close() included.
 * - Zero-copy block tables: a Sequence exports its table through the buffer
 *   protocol.  The library's pointer is valid only until the sequence
 *   changes, so while any export is alive the calls that could move or free
 *   it (admit, append, destroy; Pool.retire_top, clear, close) are refused
 *   with BusyError — the same rule bytearray applies to resizing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <kvpool.h>

#ifdef KVPY_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h> /* the array object's fields only: no numpy C-API calls */
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Calls above these sizes release the GIL (see the top comment). */
#define KVPY_GIL_CREATE_BLOCKS 65536u
#define KVPY_GIL_TOKENS 4096u

/* ------------------------------------------------------------------------ */
/* Exceptions                                                                */
/* ------------------------------------------------------------------------ */

static PyObject *KvpError;
static PyObject *kvp_exc[12]; /* indexed by kvp_status; [0] unused */

/* The message for `st`: the library's, except that KVP_EBUSY drops its
 * "or called from a callback": the binding never calls the library from
 * inside a callback (see "Evictions"), so from Python it always means that
 * the block, owner or sequence named is in use. */
static const char *status_message(kvp_status st)
{
    return st == KVP_EBUSY ? "busy: in use" : kvp_strerror((int)st);
}

/* Raise the exception for `st` with its message. */
static PyObject *raise_status(kvp_status st)
{
    PyObject *cls = ((int)st > 0 && (int)st < 12) ? kvp_exc[st] : KvpError;
    PyErr_SetString(cls, status_message(st));
    return NULL;
}

/* Raise the exception for `st` with a message of our own (the status's
 * message is appended). */
static PyObject *raise_status_msg(kvp_status st, const char *msg)
{
    PyObject *cls = ((int)st > 0 && (int)st < 12) ? kvp_exc[st] : KvpError;
    PyErr_Format(cls, "%s (%s)", msg, status_message(st));
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Argument parsing (FASTCALL with keywords)                                 */
/* ------------------------------------------------------------------------ */

/* The arity check of the positional-only calls: TypeError with the call's
 * usage when nargs is not n. */
static int nargs_is(Py_ssize_t nargs, Py_ssize_t n, const char *usage)
{
    if (nargs == n)
        return 1;
    PyErr_SetString(PyExc_TypeError, usage);
    return 0;
}

/*
 * Map positional args and keyword names onto out[0..] following `names`
 * (NULL-terminated).  The first `nreq` are required.  Slots not given stay
 * NULL.  Returns 0, or -1 with TypeError set.
 */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, const char *const *names, int nreq, PyObject **out)
{
    int nnames = 0;
    while (names[nnames])
        nnames++;
    for (int i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname,
                     nnames, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            int found = -1;
            for (int i = 0; i < nnames; i++)
                if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                    found = i;
                    break;
                }
            if (found < 0) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                             fname, key);
                return -1;
            }
            if (out[found]) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
                             fname, names[found]);
                return -1;
            }
            out[found] = args[nargs + k];
        }
    }
    for (int i = 0; i < nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    return 0;
}

/* Integer conversions: NULL (not given) yields the default. */
static int get_u64(PyObject *o, uint64_t dflt, uint64_t *v, const char *what)
{
    if (!o) {
        *v = dflt;
        return 0;
    }
    if (!PyLong_Check(o) && !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer", what);
        return -1;
    }
    PyObject *idx = PyNumber_Index(o);
    if (!idx)
        return -1;
    unsigned long long x = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(kvp_exc[KVP_EINVAL], "%s out of range", what);
        return -1;
    }
    *v = (uint64_t)x;
    return 0;
}

static int get_u32(PyObject *o, uint32_t dflt, uint32_t *v, const char *what)
{
    uint64_t x;
    if (get_u64(o, dflt, &x, what))
        return -1;
    if (x > UINT32_MAX) {
        PyErr_Format(kvp_exc[KVP_EINVAL], "%s out of range", what);
        return -1;
    }
    *v = (uint32_t)x;
    return 0;
}

/* An owner: None (or absent) is KVP_ANON. */
static int get_owner(PyObject *o, kvp_owner *v)
{
    if (!o || o == Py_None) {
        *v = KVP_ANON;
        return 0;
    }
    return get_u64(o, 0, v, "owner");
}

static int get_bool(PyObject *o, int dflt, int *v)
{
    if (!o) {
        *v = dflt;
        return 0;
    }
    int r = PyObject_IsTrue(o);
    if (r < 0)
        return -1;
    *v = r;
    return 0;
}

static PyObject *block_or_none(kvp_block b)
{
    if (b == KVP_NO_BLOCK)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(b);
}

/* ------------------------------------------------------------------------ */
/* Buffers of uint32 (ids, tokens, fills)                                    */
/* ------------------------------------------------------------------------ */

/*
 * Views of integer buffers.  numpy arrays, the usual argument, are read from
 * the array's own fields when they are exact numpy.ndarray objects, 1-D,
 * C-contiguous and aligned, of numpy's own uint32 or int32 dtype: numpy's
 * buffer export builds and frees a description of the array on every call
 * (about 640 instructions here, and a malloc kept on the array at its first
 * export), which is most of a batch call's cost from Python.  Anything else
 * goes through the buffer protocol.  The view holds a reference to the
 * array, as an export does: that is all numpy checks before it lets an
 * array be resized (PyArray_Resize counts references), so the fast view is
 * exactly as safe.  The numpy types are looked up the first time an
 * ndarray is seen, so `import kvpool` never imports numpy.
 */
#ifdef KVPY_HAVE_NUMPY
static PyTypeObject *np_ndarray; /* numpy.ndarray, once seen */
static PyObject *np_u32, *np_i32; /* numpy.dtype('uint32'), ('int32') */
static int np_state;              /* 0: not looked up, 1: ready, -1: unavailable */
static char np_fmt_u32[] = "I", np_fmt_i32[] = "i";

static int np_lookup(void)
{
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *nd = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
    PyObject *dt = np ? PyObject_GetAttrString(np, "dtype") : NULL;
    np_u32 = dt ? PyObject_CallFunction(dt, "s", "uint32") : NULL;
    np_i32 = dt ? PyObject_CallFunction(dt, "s", "int32") : NULL;
    Py_XDECREF(dt);
    Py_XDECREF(np);
    if (!nd || !PyType_Check(nd) || !np_u32 || !np_i32) {
        PyErr_Clear();
        Py_XDECREF(nd);
        Py_CLEAR(np_u32);
        Py_CLEAR(np_i32);
        return np_state = -1;
    }
    np_ndarray = (PyTypeObject *)nd;
    return np_state = 1;
}

/* Fill v from numpy array o's fields if o qualifies (see above); 0 if not. */
static int np_view(PyObject *o, Py_buffer *v, int writable)
{
    if (np_state <= 0 &&
        (np_state < 0 || strcmp(Py_TYPE(o)->tp_name, "numpy.ndarray") || np_lookup() < 0))
        return 0;
    if (Py_TYPE(o) != np_ndarray)
        return 0;
    PyArrayObject_fields *a = (PyArrayObject_fields *)o;
    int need = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | (writable ? NPY_ARRAY_WRITEABLE : 0);
    PyObject *d = (PyObject *)a->descr;
    if (a->nd != 1 || (a->flags & need) != need || (d != np_u32 && d != np_i32))
        return 0;
    memset(v, 0, sizeof *v);
    Py_INCREF(o);
    v->obj = o;
    v->buf = a->data;
    v->len = a->dimensions[0] * 4;
    v->itemsize = 4;
    v->readonly = !(a->flags & NPY_ARRAY_WRITEABLE);
    v->ndim = 1;
    v->format = d == np_u32 ? np_fmt_u32 : np_fmt_i32;
    v->internal = &np_state; /* marks a view made here: int_view_release */
    return 1;
}
#endif

/* PyObject_GetBuffer(o, v, flags) for a C-contiguous buffer of integers,
 * with the numpy fast view when it applies. */
static int int_view_get(PyObject *o, Py_buffer *v, int flags)
{
#ifdef KVPY_HAVE_NUMPY
    if (np_view(o, v, (flags & PyBUF_WRITABLE) != 0))
        return 0;
#endif
    return PyObject_GetBuffer(o, v, flags);
}

static void int_view_release(Py_buffer *v)
{
#ifdef KVPY_HAVE_NUMPY
    if (v->internal == &np_state) {
        Py_CLEAR(v->obj);
        return;
    }
#endif
    PyBuffer_Release(v);
}

/*
 * An input array of uint32: zero-copy for a C-contiguous buffer of 4-byte
 * integers ('I', 'i', 'L'/'l' when 4 bytes), converted (range-checked) for
 * other integer buffers and for sequences of ints.
 */
typedef struct u32in {
    const uint32_t *p;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
    uint32_t *heap;
    uint32_t small[32];
} u32in;

static void u32in_release(u32in *in)
{
    if (in->has_view)
        int_view_release(&in->view);
    in->has_view = 0;
    PyMem_Free(in->heap);
    in->heap = NULL;
}

static uint32_t *u32in_room(u32in *in, Py_ssize_t n)
{
    if (n <= (Py_ssize_t)(sizeof in->small / sizeof in->small[0]))
        return in->small;
    in->heap = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    if (!in->heap)
        PyErr_NoMemory();
    return in->heap;
}

/* Parse a struct-module format of one integer item.  Returns the type char
 * or 0 when it is not a native/little-endian integer format. */
static char int_format(const char *fmt)
{
    if (!fmt)
        return 'B';
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    if (!fmt[0] || fmt[1])
        return 0;
    return strchr("bBhHiIlLqQnN", fmt[0]) ? fmt[0] : 0;
}

static int is_signed_fmt(char c)
{
    return c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q' || c == 'n';
}

static int u32in_get(PyObject *o, u32in *in, const char *what)
{
    memset(in, 0, offsetof(u32in, small));
    if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyByteArray_Check(o)) {
        if (int_view_get(o, &in->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: need a C-contiguous buffer of integers", what);
            return -1;
        }
        in->has_view = 1;
        char c = int_format(in->view.format);
        Py_ssize_t isz = in->view.itemsize;
        if (!c || isz <= 0) {
            PyErr_Format(PyExc_TypeError, "%s: buffer format '%s' is not an integer type", what,
                         in->view.format ? in->view.format : "B");
            u32in_release(in);
            return -1;
        }
        in->n = in->view.len / isz;
        if (isz == 4 && ((uintptr_t)in->view.buf & 3u) == 0) {
            in->p = in->view.buf;
            if (is_signed_fmt(c))
                for (Py_ssize_t i = 0; i < in->n; i++)
                    if ((int32_t)in->p[i] < 0) {
                        PyErr_Format(kvp_exc[KVP_EINVAL], "%s: negative value", what);
                        u32in_release(in);
                        return -1;
                    }
            return 0;
        }
        uint32_t *dst = u32in_room(in, in->n);
        if (!dst) {
            u32in_release(in);
            return -1;
        }
        const unsigned char *src = in->view.buf;
        for (Py_ssize_t i = 0; i < in->n; i++) {
            int64_t sv = 0;
            uint64_t uv = 0;
            const unsigned char *s = src + i * isz;
            int sgn = is_signed_fmt(c);
            switch (isz) {
            case 1: if (sgn) sv = *(const int8_t *)s; else uv = *s; break;
            case 2: { int16_t a; uint16_t b; memcpy(&a, s, 2); memcpy(&b, s, 2); sv = a; uv = b; break; }
            case 4: { int32_t a; uint32_t b; memcpy(&a, s, 4); memcpy(&b, s, 4); sv = a; uv = b; break; }
            case 8: { int64_t a; uint64_t b; memcpy(&a, s, 8); memcpy(&b, s, 8); sv = a; uv = b; break; }
            default:
                PyErr_Format(PyExc_TypeError, "%s: unsupported item size", what);
                u32in_release(in);
                return -1;
            }
            if (sgn) {
                if (sv < 0 || sv > (int64_t)UINT32_MAX)
                    goto range;
                dst[i] = (uint32_t)sv;
            } else {
                if (uv > UINT32_MAX)
                    goto range;
                dst[i] = (uint32_t)uv;
            }
        }
        in->p = dst;
        return 0;
    range:
        PyErr_Format(kvp_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
        u32in_release(in);
        return -1;
    }
    PyObject *seq = PySequence_Fast(o, "expected a buffer of integers or a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint32_t *dst = u32in_room(in, n);
    if (!dst) {
        Py_DECREF(seq);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long v = PyLong_AsUnsignedLong(items[i]);
        if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(kvp_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
            } else if (!PyErr_Occurred()) {
                PyErr_Format(kvp_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
            }
            Py_DECREF(seq);
            u32in_release(in);
            return -1;
        }
        dst[i] = (uint32_t)v;
    }
    Py_DECREF(seq);
    in->p = dst;
    in->n = n;
    return 0;
}

/* A writable output buffer of 4-byte integers (C-contiguous, aligned). */
typedef struct u32out {
    uint32_t *p;
    Py_ssize_t cap;
    Py_buffer view;
} u32out;

static int u32out_get(PyObject *o, u32out *out)
{
    if (int_view_get(o, &out->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    char c = int_format(out->view.format);
    if (!c || out->view.itemsize != 4 || ((uintptr_t)out->view.buf & 3u)) {
        int_view_release(&out->view);
        PyErr_SetString(PyExc_TypeError,
                        "out: need a writable, aligned, C-contiguous buffer of 4-byte integers "
                        "(array('I'), numpy uint32)");
        return -1;
    }
    out->p = out->view.buf;
    out->cap = out->view.len / 4;
    return 0;
}

static PyObject *u32_list(const uint32_t *p, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLong(p[i]);
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

/* A 32-byte hash argument (any bytes-like object of exactly 32 bytes). */
static int get_hash(PyObject *o, kvp_hash *h, const char *what)
{
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_SIMPLE) < 0)
        return -1;
    if (v.len != 32) {
        PyBuffer_Release(&v);
        PyErr_Format(kvp_exc[KVP_EINVAL], "%s must be 32 bytes", what);
        return -1;
    }
    memcpy(h->b, v.buf, 32);
    PyBuffer_Release(&v);
    return 0;
}

static PyObject *hash_bytes(const kvp_hash *h)
{
    return PyBytes_FromStringAndSize((const char *)h->b, 32);
}

/* ------------------------------------------------------------------------ */
/* Extra keys (dict in, kvp_extra_keys out)                                  */
/* ------------------------------------------------------------------------ */

typedef struct extra_in {
    kvp_extra_keys k;
    int present;
    kvp_mm_span *mm;
    Py_buffer salt;
    int has_salt;
} extra_in;

static void extra_release(extra_in *e)
{
    PyMem_Free(e->mm);
    e->mm = NULL;
    if (e->has_salt)
        PyBuffer_Release(&e->salt);
    e->has_salt = 0;
}

/* extra: None or a dict with optional keys lora_id (int), lora_name (str),
 * mm (iterable of (hash32, start, end)), salt (bytes-like).  lora_name
 * points into the str object, which the caller keeps alive. */
static int extra_get(PyObject *o, extra_in *e)
{
    memset(e, 0, sizeof *e);
    if (!o || o == Py_None)
        return 0;
    if (!PyDict_Check(o)) {
        PyErr_SetString(PyExc_TypeError,
                        "extra must be None or a dict (lora_id, lora_name, mm, salt)");
        return -1;
    }
    e->present = 1;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &val)) {
        if (!PyUnicode_Check(key))
            goto badkey;
        if (!PyUnicode_CompareWithASCIIString(key, "lora_id")) {
            if (val == Py_None)
                continue;
            e->k.has_lora = 1;
            if (get_u64(val, 0, &e->k.lora_id, "lora_id"))
                goto fail;
        } else if (!PyUnicode_CompareWithASCIIString(key, "lora_name")) {
            if (val == Py_None)
                continue;
            e->k.lora_name = PyUnicode_AsUTF8(val);
            if (!e->k.lora_name)
                goto fail;
        } else if (!PyUnicode_CompareWithASCIIString(key, "salt")) {
            if (val == Py_None)
                continue;
            if (PyObject_GetBuffer(val, &e->salt, PyBUF_SIMPLE) < 0)
                goto fail;
            e->has_salt = 1;
            e->k.salt = e->salt.buf;
            e->k.salt_len = (size_t)e->salt.len;
        } else if (!PyUnicode_CompareWithASCIIString(key, "mm")) {
            if (val == Py_None)
                continue;
            PyObject *seq = PySequence_Fast(val, "mm must be a sequence of (hash, start, end)");
            if (!seq)
                goto fail;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            e->mm = PyMem_Calloc(n ? (size_t)n : 1, sizeof(kvp_mm_span));
            if (!e->mm) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                goto fail;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
                if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
                    Py_DECREF(seq);
                    PyErr_SetString(PyExc_TypeError, "mm items must be (hash, start, end)");
                    goto fail;
                }
                if (get_hash(PyTuple_GET_ITEM(t, 0), &e->mm[i].hash, "mm hash") ||
                    get_u64(PyTuple_GET_ITEM(t, 1), 0, &e->mm[i].start, "mm start") ||
                    get_u64(PyTuple_GET_ITEM(t, 2), 0, &e->mm[i].end, "mm end")) {
                    Py_DECREF(seq);
                    goto fail;
                }
            }
            e->k.mm = e->mm;
            e->k.n_mm = (size_t)n;
            Py_DECREF(seq);
        } else {
            goto badkey;
        }
    }
    return 0;
badkey:
    PyErr_Format(PyExc_TypeError, "extra: unknown key %R (lora_id, lora_name, mm, salt)", key);
fail:
    extra_release(e);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Pool                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct SeqObject SeqObject;

typedef struct PoolObject {
    PyObject_HEAD
    kvp_pool *pool;
    uint32_t block_size;
    int thread_safe;
    int events;
    int null_block;
    int separate_kv;
    PyObject *on_evict;      /* callable or NULL */
    PyObject *seqs;          /* dict request_id -> weakref(Sequence) */
    Py_ssize_t table_exports; /* live zero-copy exports of block tables */
    Py_ssize_t busy;          /* calls in flight with the GIL released */
    struct evrec *evq;        /* evictions not yet delivered: evq[ev_head..ev_n) */
    uint32_t ev_head, ev_n, ev_cap;
    uint32_t ev_lost;         /* evictions the queue had no room for */
    int init_pending;         /* set by tp_new, cleared by the one __init__ allowed */
    PyObject *weakrefs;
    uint32_t take_hint;       /* take()'s kvp_take_hinted hint, for its last owner */
    PyObject **vkeys;         /* vLLM drop-in only: each block's key (see VBlock) */
    uint32_t nvkeys;
    void *varena;             /* vLLM drop-in only: its KVCacheBlock objects (see VBlock) */
} PoolObject;

static PyTypeObject Pool_Type;
static PyTypeObject Seq_Type;

static int pool_ok(PoolObject *self)
{
    if (!self->pool) {
        PyErr_SetString(kvp_exc[KVP_EINVAL], "the pool is closed");
        return 0;
    }
    return 1;
}

#define POOL_CHECK(self)                                                                        \
    do {                                                                                        \
        if (!pool_ok(self))                                                                     \
            return NULL;                                                                        \
    } while (0)

/*
 * Evictions.  The library calls its eviction callback inside the call that
 * evicted, with the pool's lock held (thread-safe pools) and with calls back
 * into the pool refused.  Running Python there is what made a callback
 * unable to query the pool, let `close()` free the pool under the library,
 * and (a thread waiting for the GIL while holding the pool lock, against a
 * thread holding the GIL and waiting for the lock) deadlock.  So the
 * trampoline runs no Python: it appends (hash, block) to the pool object's
 * queue, and every method that can evict delivers the queue (ev_deliver)
 * after its library calls have returned, before it returns to Python.
 *
 * Invariant: the trampoline only runs on a thread holding the GIL, because
 * the binding keeps the GIL around every library call that can evict on a
 * pool with on_evict (Seq_admit keeps it there; hashing and creation evict
 * nothing).  So the queue needs no lock, and no thread ever waits for the
 * GIL while it holds the pool's lock.  The queue only grows (doubling) and
 * is freed with the object: no allocation per call in steady state.
 */
typedef struct evrec {
    kvp_hash hash;
    kvp_block block;
    int has_hash; /* 0: the whole index was cleared */
} evrec;

static void evict_trampoline(void *user, const kvp_hash *h, kvp_block b)
{
    PoolObject *self = user;
    if (self->ev_n == self->ev_cap) {
        uint32_t cap = self->ev_cap ? 2 * self->ev_cap : 16;
        evrec *q = cap > self->ev_cap ? PyMem_RawRealloc(self->evq, (size_t)cap * sizeof *q)
                                      : NULL;
        if (!q) {
            self->ev_lost++; /* reported as MemoryError at delivery */
            return;
        }
        self->evq = q;
        self->ev_cap = cap;
    }
    evrec *e = &self->evq[self->ev_n++];
    e->has_hash = h != NULL;
    if (h)
        e->hash = *h;
    e->block = b;
}

/*
 * Deliver the queued evictions: on_evict(hash bytes or None, block id or
 * None) for each, in the order the library reported them, with no library
 * call in progress, so a callback may call any method of any pool
 * (including this one, and close()).  A callback's exception goes to
 * sys.unraisablehook (the call that evicted has completed and its result
 * stands) and the remaining callbacks still run.  `r` is the method's
 * result, returned unchanged; an exception already set for it is kept.
 * Each entry is taken off the queue (under the GIL) before its callback
 * runs, so it is delivered exactly once even when a callback's own calls,
 * or another thread's call while a callback let the GIL go, deliver from
 * the same queue; on return the queue is empty, every callback started.
 */
static PyObject *ev_deliver_queued(PoolObject *self, PyObject *r)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Py_INCREF(self); /* a callback may drop the last other reference */
    while (self->ev_head < self->ev_n || self->ev_lost) {
        if (self->ev_head == self->ev_n) {
            self->ev_lost = 0;
            PyErr_SetString(PyExc_MemoryError,
                            "on_evict: evictions were lost (no memory to queue them)");
            PyErr_WriteUnraisable(self->on_evict ? self->on_evict : (PyObject *)self);
            continue;
        }
        evrec e = self->evq[self->ev_head++];
        if (!self->on_evict)
            continue;
        PyObject *cb = self->on_evict;
        Py_INCREF(cb);
        PyObject *hb = e.has_hash ? hash_bytes(&e.hash) : (Py_INCREF(Py_None), Py_None);
        PyObject *bb = hb ? block_or_none(e.block) : NULL;
        PyObject *res = NULL;
        if (hb && bb) {
            PyObject *args[2] = {hb, bb};
            res = PyObject_Vectorcall(cb, args, 2, NULL);
        }
        Py_XDECREF(hb);
        Py_XDECREF(bb);
        if (!res)
            PyErr_WriteUnraisable(cb);
        Py_XDECREF(res);
        Py_DECREF(cb);
    }
    self->ev_head = self->ev_n = 0;
    Py_DECREF(self);
    PyErr_Restore(et, ev, tb);
    return r;
}

/* The tail of every method that can evict: a compare when nothing is queued. */
static inline PyObject *ev_deliver(PoolObject *self, PyObject *r)
{
    if (self->ev_head == self->ev_n && !self->ev_lost)
        return r;
    return ev_deliver_queued(self, r);
}

static int parse_reuse(PyObject *o, kvp_reuse *r)
{
    if (!o)
        return 0;
    if (PyUnicode_Check(o)) {
        if (!PyUnicode_CompareWithASCIIString(o, "lifo"))
            *r = KVP_REUSE_LIFO;
        else if (!PyUnicode_CompareWithASCIIString(o, "lowest"))
            *r = KVP_REUSE_LOWEST;
        else if (!PyUnicode_CompareWithASCIIString(o, "fifo"))
            *r = KVP_REUSE_FIFO;
        else {
            PyErr_SetString(kvp_exc[KVP_EINVAL], "reuse must be 'lifo', 'lowest' or 'fifo'");
            return -1;
        }
        return 0;
    }
    uint32_t v;
    if (get_u32(o, 0, &v, "reuse"))
        return -1;
    *r = (kvp_reuse)v;
    return 0;
}

static int parse_alg(PyObject *o, kvp_hash_alg *a)
{
    if (!o)
        return 0;
    if (PyUnicode_Check(o)) {
        if (!PyUnicode_CompareWithASCIIString(o, "sha256"))
            *a = KVP_HASH_SHA256;
        else if (!PyUnicode_CompareWithASCIIString(o, "xxh3") ||
                 !PyUnicode_CompareWithASCIIString(o, "xxh3_128"))
            *a = KVP_HASH_XXH3_128;
        else {
            PyErr_SetString(kvp_exc[KVP_EINVAL], "hash_alg must be 'sha256' or 'xxh3'");
            return -1;
        }
        return 0;
    }
    uint32_t v;
    if (get_u32(o, 0, &v, "hash_alg"))
        return -1;
    if (v == KVP_HASH_CUSTOM) {
        PyErr_SetString(kvp_exc[KVP_EINVAL],
                        "hash_alg: custom hash functions are not available from Python");
        return -1;
    }
    *a = (kvp_hash_alg)v;
    return 0;
}

static const char *const pool_kw[] = {
    "block_size", "num_blocks", "max_blocks", "separate_kv", "grow_on_exhaustion",
    "thread_safe", "null_block", "prefix_caching", "reuse", "history_len",
    "history_every_call", "on_evict", "hash_alg", "root_seed", "random_root",
    "verify_hits", "block_bytes", "host_arena", "events", "event_capacity", "medium", "prefault",
    NULL};

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *o[22] = {0};
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
    if (get_u32(o[0], cfg.block_size, &cfg.block_size, "block_size") ||
        get_u32(o[1], cfg.num_blocks, &cfg.num_blocks, "num_blocks"))
        return NULL;
    if (o[2] && o[2] != Py_None) {
        if (get_u32(o[2], 0, &cfg.max_blocks, "max_blocks"))
            return NULL;
    }
    if (get_bool(o[3], 0, &cfg.separate_kv) || get_bool(o[4], 0, &cfg.grow_on_exhaustion) ||
        get_bool(o[5], 0, &cfg.thread_safe) || get_bool(o[6], 0, &cfg.null_block) ||
        get_bool(o[7], 1, &cfg.prefix_caching) || parse_reuse(o[8], &cfg.reuse) ||
        get_u32(o[9], cfg.history_len, &cfg.history_len, "history_len") ||
        get_bool(o[10], 0, &cfg.history_every_call) || parse_alg(o[12], &cfg.hash_alg) ||
        get_bool(o[14], 0, &cfg.random_root) || get_bool(o[15], 0, &cfg.verify_hits) ||
        get_bool(o[17], 0, &cfg.host_arena) || get_bool(o[18], 0, &cfg.events) ||
        get_u32(o[19], cfg.event_capacity, &cfg.event_capacity, "event_capacity") ||
        get_bool(o[21], 0, &cfg.prefault))
        return NULL;
    if (o[11] && o[11] != Py_None && !PyCallable_Check(o[11])) {
        PyErr_SetString(PyExc_TypeError, "on_evict must be callable or None");
        return NULL;
    }
    if (o[13] && o[13] != Py_None && get_hash(o[13], &cfg.root_seed, "root_seed"))
        return NULL;
    if (o[16] && o[16] != Py_None) {
        PyObject *seq = PySequence_Fast(o[16], "block_bytes must be (bytes_k_or_shared, bytes_v)");
        if (!seq)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < n && i < 2; i++) {
            uint64_t v;
            if (get_u64(PySequence_Fast_GET_ITEM(seq, i), 0, &v, "block_bytes")) {
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
        cfg.on_evict = evict_trampoline;
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
        return raise_status(st);
    }
    self->pool = p;
    self->block_size = cfg.block_size;
    self->thread_safe = cfg.thread_safe;
    self->events = cfg.events;
    self->null_block = cfg.null_block;
    self->separate_kv = cfg.separate_kv;
    return (PyObject *)self;
}

static void seqs_invalidate(PoolObject *self);

/*
 * Dealloc destroys the library pool.  It cannot run while a call is inside
 * the library: every method is called through a reference its caller holds,
 * the GIL-free calls hold one more (pool_busy_enter), and evictions are
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
static kvp_pool *pool_busy_enter(PoolObject *self)
{
    if (!pool_ok(self))
        return NULL;
    self->busy++;
    Py_INCREF(self);
    return self->pool;
}

static void pool_busy_leave(PoolObject *self)
{
    self->busy--;
    Py_DECREF(self);
}

/* Refuse calls that would invalidate exported block tables. */
static int pool_no_exports(PoolObject *self, const char *what)
{
    if (self->table_exports > 0) {
        PyErr_Format(kvp_exc[KVP_EBUSY],
                     "%s: a zero-copy block table of one of this pool's sequences is still "
                     "exported (release the memoryview/array first)",
                     what);
        return 0;
    }
    if (self->busy > 0) {
        PyErr_Format(kvp_exc[KVP_EBUSY], "%s: another thread is inside a call on this pool",
                     what);
        return 0;
    }
    return 1;
}

static PyObject *Pool_close(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->pool)
        Py_RETURN_NONE;
    if (!pool_no_exports(self, "close"))
        return NULL;
    seqs_invalidate(self);
    kvp_pool *p = self->pool;
    self->pool = NULL;
    kvp_pool_destroy(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return self;
}

static PyObject *Pool_exit(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return Pool_close(self, NULL);
}

static PyObject *Pool_clear(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    if (!pool_no_exports(self, "clear"))
        return NULL;
    kvp_status st = kvp_pool_clear(self->pool);
    if (st)
        return raise_status(st);
    seqs_invalidate(self);
    Py_RETURN_NONE;
}

/* alloc(tokens, owner=None, stream=0, format=0, out=None) */
static PyObject *do_alloc(PoolObject *self, uint64_t tokens, PyObject *const *o)
{
    kvp_owner owner;
    uint32_t stream, fmt;
    if (get_owner(o[1], &owner) || get_u32(o[2], 0, &stream, "stream") ||
        get_u32(o[3], 0, &fmt, "format"))
        return NULL;
    size_t n = 0;
    kvp_status st;
    if (o[4] && o[4] != Py_None) {
        u32out out;
        if (u32out_get(o[4], &out))
            return NULL;
        st = kvp_alloc(self->pool, (kvp_stream)stream, tokens, owner, fmt, out.p,
                       (size_t)out.cap, &n);
        int_view_release(&out.view);
        if (st)
            return raise_status(st);
        return PyLong_FromSize_t(n);
    }
    uint64_t need = self->block_size ? (tokens + self->block_size - 1) / self->block_size : 0;
    uint32_t small[64];
    uint32_t *ids = small;
    if (need > 64) {
        if (need > KVP_MAX_BLOCKS)
            return raise_status(KVP_EEXHAUSTED);
        ids = PyMem_Malloc((size_t)need * sizeof(uint32_t));
        if (!ids)
            return PyErr_NoMemory();
    }
    st = kvp_alloc(self->pool, (kvp_stream)stream, tokens, owner, fmt, ids, (size_t)need, &n);
    PyObject *r = st ? raise_status(st) : u32_list(ids, n);
    if (ids != small)
        PyMem_Free(ids);
    return r;
}

static PyObject *Pool_alloc(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const kw[] = {"tokens", "owner", "stream", "format", "out", NULL};
    PyObject *o[5];
    uint64_t tokens;
    POOL_CHECK(self);
    if (parse_args("alloc", args, nargs, kwnames, kw, 1, o) || get_u64(o[0], 0, &tokens, "tokens"))
        return NULL;
    return do_alloc(self, tokens, o);
}

static PyObject *Pool_alloc_blocks(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const kw[] = {"n", "owner", "stream", "format", "out", NULL};
    PyObject *o[5];
    uint64_t n;
    POOL_CHECK(self);
    if (parse_args("alloc_blocks", args, nargs, kwnames, kw, 1, o) || get_u64(o[0], 0, &n, "n"))
        return NULL;
    if (n > KVP_MAX_BLOCKS)
        return raise_status(KVP_EINVAL);
    return do_alloc(self, n * self->block_size, o);
}

static PyObject *Pool_take(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const kw[] = {"owner", "stream", NULL};
    PyObject *o[2];
    kvp_owner owner;
    uint32_t stream;
    POOL_CHECK(self);
    if (parse_args("take", args, nargs, kwnames, kw, 0, o) || get_owner(o[0], &owner) ||
        get_u32(o[1], 0, &stream, "stream"))
        return NULL;
    /* One hint per pool, not per owner: a run of takes for the same owner
     * (a request decoding) skips the lookup; any other take costs one
     * compare and moves the hint.  The GIL serialises the calls. */
    kvp_block id;
    kvp_status st = kvp_take_hinted(self->pool, (kvp_stream)stream, owner, &self->take_hint, &id);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(id);
}

/* The calls of the form f(pool, id, owner) -> status: take_id, claim. */
static PyObject *id_owner_call(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, const char *name,
                               kvp_status (*fn)(kvp_pool *, kvp_block, kvp_owner))
{
    static const char *const kw[] = {"id", "owner", NULL};
    PyObject *o[2];
    uint32_t id;
    kvp_owner owner;
    POOL_CHECK(self);
    if (parse_args(name, args, nargs, kwnames, kw, 1, o) || get_u32(o[0], 0, &id, "id") ||
        get_owner(o[1], &owner))
        return NULL;
    kvp_status st = fn(self->pool, id, owner);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_take_id(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return id_owner_call(self, args, nargs, kwnames, "take_id", kvp_take_id);
}

/* The arguments (ids, owner=None) of the calls that name blocks for an owner. */
static int ids_owner_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **ids, kvp_owner *owner)
{
    static const char *const kw[] = {"ids", "owner", NULL};
    PyObject *o[2];
    if (parse_args(name, args, nargs, kwnames, kw, 1, o) || get_owner(o[1], owner))
        return -1;
    *ids = o[0];
    return 0;
}

static PyObject *Pool_free(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    POOL_CHECK(self);
    if (ids_owner_args("free", args, nargs, kwnames, &ids, &owner))
        return NULL;
    kvp_status st;
    if (PyLong_Check(ids)) {
        uint32_t id;
        if (get_u32(ids, 0, &id, "id"))
            return NULL;
        st = kvp_free(self->pool, &id, 1, owner);
    } else {
        u32in in;
        if (u32in_get(ids, &in, "ids"))
            return NULL;
        st = kvp_free(self->pool, in.p, (size_t)in.n, owner);
        u32in_release(&in);
    }
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_free_owner(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    kvp_owner owner;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "free_owner(owner)"))
        return NULL;
    if (get_u64(args[0], 0, &owner, "owner"))
        return NULL;
    size_t n = 0;
    kvp_status st = kvp_free_owner(self->pool, owner, &n);
    if (st)
        return raise_status(st);
    return PyLong_FromSize_t(n);
}

static PyObject *Pool_owner_register(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    kvp_owner owner;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "owner_register(owner)"))
        return NULL;
    if (get_u64(args[0], 0, &owner, "owner"))
        return NULL;
    kvp_status st = kvp_owner_register(self->pool, owner);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_owner_release(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    kvp_owner owner;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "owner_release(owner)"))
        return NULL;
    if (get_u64(args[0], 0, &owner, "owner"))
        return NULL;
    kvp_status st = kvp_owner_release(self->pool, owner);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_owner_blocks(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const kw[] = {"owner", "out", NULL};
    PyObject *o[2];
    kvp_owner owner;
    POOL_CHECK(self);
    if (parse_args("owner_blocks", args, nargs, kwnames, kw, 1, o) ||
        get_u64(o[0], 0, &owner, "owner"))
        return NULL;
    size_t n = 0;
    kvp_status st;
    if (o[1] && o[1] != Py_None) {
        u32out out;
        if (u32out_get(o[1], &out))
            return NULL;
        st = kvp_owner_blocks(self->pool, owner, out.p, (size_t)out.cap, &n);
        int_view_release(&out.view);
        if (st)
            return raise_status(st);
        return PyLong_FromSize_t(n);
    }
    st = kvp_owner_blocks(self->pool, owner, NULL, 0, &n);
    if (st && st != KVP_ESPACE)
        return raise_status(st);
    if (n == 0)
        return PyList_New(0);
    uint32_t *ids = PyMem_Malloc(n * sizeof(uint32_t));
    if (!ids)
        return PyErr_NoMemory();
    st = kvp_owner_blocks(self->pool, owner, ids, n, &n);
    PyObject *r = st ? raise_status(st) : u32_list(ids, n);
    PyMem_Free(ids);
    return r;
}

static PyObject *Pool_free_count(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const kw[] = {"stream", NULL};
    PyObject *o[1];
    uint32_t stream, n = 0;
    POOL_CHECK(self);
    if (parse_args("free_count", args, nargs, kwnames, kw, 0, o) ||
        get_u32(o[0], self->separate_kv ? KVP_STREAM_K : 0, &stream, "stream"))
        return NULL;
    kvp_status st = kvp_free_count(self->pool, (kvp_stream)stream, &n);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(n);
}

static PyObject *Pool_peek_next(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const kw[] = {"stream", NULL};
    PyObject *o[1];
    uint32_t stream;
    kvp_block next;
    POOL_CHECK(self);
    if (parse_args("peek_next", args, nargs, kwnames, kw, 0, o) ||
        get_u32(o[0], self->separate_kv ? KVP_STREAM_K : 0, &stream, "stream"))
        return NULL;
    kvp_status st = kvp_peek_next(self->pool, (kvp_stream)stream, &next);
    if (st)
        return raise_status(st);
    if (next == KVP_NO_BLOCK)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(next);
}

static PyObject *Pool_set_fill(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id, fill;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 2, "set_fill(id, fill)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id") || get_u32(args[1], 0, &fill, "fill"))
        return NULL;
    kvp_status st = kvp_set_fill(self->pool, id, fill);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
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

static PyObject *Pool_set_fill_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    POOL_CHECK(self);
    if (!nargs_is(nargs, 2, "set_fill_many(ids, fills)"))
        return NULL;
    u32in ids, fills;
    if (u32in_get(args[0], &ids, "ids"))
        return NULL;
    if (u32in_get(args[1], &fills, "fills")) {
        u32in_release(&ids);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (ids.n != fills.n) {
        u32in_release(&ids);
        u32in_release(&fills);
        PyErr_SetString(kvp_exc[KVP_EINVAL], "ids and fills differ in length");
        return NULL;
    }
    st = check_blocks(self, ids.p, ids.n, 1, 0);
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        if (fills.p[i] > self->block_size)
            st = KVP_EINVAL;
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        st = kvp_set_fill(self->pool, ids.p[i], fills.p[i]);
    u32in_release(&ids);
    u32in_release(&fills);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

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

static PyObject *Pool_block_info(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "block_info(id)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id"))
        return NULL;
    kvp_block_info bi;
    kvp_status st = kvp_block_get(self->pool, id, &bi);
    if (st)
        return raise_status(st);
    PyObject *h = bi.published ? hash_bytes(&bi.hash) : (Py_INCREF(Py_None), Py_None);
    if (!h)
        return NULL;
    PyObject *owner = bi.owner == KVP_ANON ? (Py_INCREF(Py_None), Py_None)
                                           : PyLong_FromUnsignedLongLong(bi.owner);
    if (!owner) {
        Py_DECREF(h);
        return NULL;
    }
    return Py_BuildValue("{s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:O,s:O,s:O,s:N,s:N}", "state",
                         state_name(bi.state), "stream", (int)bi.stream, "format",
                         (unsigned)bi.format, "ref_count", (unsigned)bi.ref_count, "anon_refs",
                         (unsigned)bi.anon_refs, "seq_refs", (unsigned)bi.seq_refs, "fill",
                         (unsigned)bi.fill, "published",
                         bi.published ? Py_True : Py_False, "ever_allocated",
                         bi.ever_allocated ? Py_True : Py_False, "is_null",
                         bi.is_null ? Py_True : Py_False, "owner", owner, "hash", h);
}

static PyObject *Pool_claim(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return id_owner_call(self, args, nargs, kwnames, "claim", kvp_claim);
}

static PyObject *Pool_claim_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    POOL_CHECK(self);
    if (ids_owner_args("claim_many", args, nargs, kwnames, &ids, &owner))
        return NULL;
    u32in in;
    if (u32in_get(ids, &in, "ids"))
        return NULL;
    kvp_status st = check_blocks(self, in.p, in.n, 0, 1);
    for (Py_ssize_t i = 0; !st && i < in.n; i++)
        st = kvp_claim(self->pool, in.p[i], owner);
    u32in_release(&in);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_publish(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    kvp_hash h;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 2, "publish(id, hash)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id") || get_hash(args[1], &h, "hash"))
        return NULL;
    kvp_status st = kvp_publish(self->pool, id, &h);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

/* publish_many(ids, hashes): hashes is a bytes-like object of 32 x len(ids). */
static PyObject *Pool_publish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    POOL_CHECK(self);
    if (!nargs_is(nargs, 2, "publish_many(ids, hashes)"))
        return NULL;
    u32in in;
    if (u32in_get(args[0], &in, "ids"))
        return NULL;
    Py_buffer hv;
    if (PyObject_GetBuffer(args[1], &hv, PyBUF_SIMPLE) < 0) {
        u32in_release(&in);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (hv.len != in.n * 32) {
        PyBuffer_Release(&hv);
        u32in_release(&in);
        PyErr_SetString(kvp_exc[KVP_EINVAL], "hashes must hold 32 bytes per id");
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
    u32in_release(&in);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_lookup(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const kw[] = {"hash", "stream", NULL};
    PyObject *o[2];
    kvp_hash h;
    uint32_t stream;
    POOL_CHECK(self);
    if (parse_args("lookup", args, nargs, kwnames, kw, 1, o) || get_hash(o[0], &h, "hash") ||
        get_u32(o[1], 0, &stream, "stream"))
        return NULL;
    kvp_block id;
    kvp_status st = kvp_lookup(self->pool, (kvp_stream)stream, &h, &id);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(id);
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
    POOL_CHECK(self);
    if (parse_args("lookup_many", args, nargs, kwnames, kw, 1, o) ||
        get_u32(o[2], 0, &stream, "stream"))
        return NULL;
    Py_buffer hv;
    if (PyObject_GetBuffer(o[0], &hv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (hv.len % 32) {
        PyBuffer_Release(&hv);
        PyErr_SetString(kvp_exc[KVP_EINVAL], "hashes must be a multiple of 32 bytes");
        return NULL;
    }
    Py_ssize_t n = hv.len / 32;
    u32out out = {0};
    int have_out = o[1] && o[1] != Py_None;
    if (have_out) {
        if (u32out_get(o[1], &out)) {
            PyBuffer_Release(&hv);
            return NULL;
        }
        if (out.cap < n) {
            int_view_release(&out.view);
            PyBuffer_Release(&hv);
            return raise_status(KVP_ESPACE);
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
            PyObject *v = block_or_none(id);
            if (!v) {
                err = KVP_ENOMEM;
                break;
            }
            PyList_SET_ITEM(list, i, v);
        }
    }
    PyBuffer_Release(&hv);
    if (have_out)
        int_view_release(&out.view);
    if (err) {
        Py_XDECREF(list);
        return PyErr_Occurred() ? NULL : raise_status(err);
    }
    if (have_out)
        return PyLong_FromSsize_t(prefix);
    return Py_BuildValue("(Nn)", list, prefix);
}

static PyObject *Pool_unpublish(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "unpublish(id)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id"))
        return NULL;
    kvp_status st = kvp_unpublish(self->pool, id);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_unpublish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "unpublish_many(ids)"))
        return NULL;
    u32in in;
    if (u32in_get(args[0], &in, "ids"))
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
    u32in_release(&in);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_clear_index(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    kvp_status st = kvp_clear_index(self->pool);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_reset_prefix_cache(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    kvp_status st = kvp_reset_prefix_cache(self->pool);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

/* f(n, stream=0) -> uint32 count, for evict / extend / shrink. */
typedef kvp_status (*count_fn)(kvp_pool *, kvp_stream, uint32_t, uint32_t *);

static PyObject *count_call(PoolObject *self, const char *name, count_fn fn,
                            PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const kw[] = {"n", "stream", NULL};
    PyObject *o[2];
    uint32_t n, stream, got = 0;
    POOL_CHECK(self);
    if (parse_args(name, args, nargs, kwnames, kw, 1, o) || get_u32(o[0], 0, &n, "n") ||
        get_u32(o[1], self->separate_kv ? KVP_STREAM_K : 0, &stream, "stream"))
        return NULL;
    kvp_status st = fn(self->pool, (kvp_stream)stream, n, &got);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(got);
}

static PyObject *Pool_evict(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return count_call(self, "evict", kvp_evict, a, n, k);
}

static PyObject *Pool_extend(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return count_call(self, "extend", kvp_extend, a, n, k);
}

static PyObject *Pool_shrink(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return count_call(self, "shrink", kvp_shrink, a, n, k);
}

static PyObject *Pool_ensure_free(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const kw[] = {"n", "stream", NULL};
    PyObject *o[2];
    uint32_t n, stream;
    POOL_CHECK(self);
    if (parse_args("ensure_free", args, nargs, kwnames, kw, 1, o) || get_u32(o[0], 0, &n, "n") ||
        get_u32(o[1], self->separate_kv ? KVP_STREAM_K : 0, &stream, "stream"))
        return NULL;
    kvp_status st = kvp_ensure_free(self->pool, (kvp_stream)stream, n);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_retire_top(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    if (!pool_no_exports(self, "retire_top"))
        return NULL;
    kvp_block retired, moved;
    kvp_status st = kvp_retire_top(self->pool, &retired, &moved);
    if (st)
        return raise_status(st);
    return Py_BuildValue("(kN)", (unsigned long)retired, block_or_none(moved));
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
    POOL_CHECK(self);
    if (parse_args("hash_block", args, nargs, kwnames, kw, 1, o) ||
        get_u64(o[2], 0, &start, "start"))
        return NULL;
    int has_parent = o[1] && o[1] != Py_None;
    if (has_parent && get_hash(o[1], &parent, "parent"))
        return NULL;
    extra_in ex;
    if (extra_get(o[3], &ex))
        return NULL;
    u32in in;
    if (u32in_get(o[0], &in, "tokens")) {
        extra_release(&ex);
        return NULL;
    }
    kvp_pool *p = pool_busy_enter(self);
    if (p) {
        Py_BEGIN_ALLOW_THREADS
        st = kvp_hash_block(p, has_parent ? &parent : NULL, in.p, (size_t)in.n, start,
                            ex.present ? &ex.k : NULL, &out);
        Py_END_ALLOW_THREADS
        pool_busy_leave(self);
    }
    u32in_release(&in);
    extra_release(&ex);
    if (!p)
        return NULL;
    if (st)
        return raise_status(st);
    return hash_bytes(&out);
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
    POOL_CHECK(self);
    if (parse_args("hash_tokens", args, nargs, kwnames, kw, 1, o) ||
        get_u64(o[3], 0, &known, "known"))
        return NULL;
    extra_in ex;
    if (extra_get(o[1], &ex))
        return NULL;
    u32in in;
    if (u32in_get(o[0], &in, "tokens")) {
        extra_release(&ex);
        return NULL;
    }
    size_t nb = self->block_size ? (size_t)in.n / self->block_size : 0;
    PyObject *res = NULL;
    if (!pool_ok(self)) /* the conversion may have run Python code that closed it */
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
            PyErr_SetString(kvp_exc[KVP_EINVAL], "known needs an out buffer holding them");
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
        kvp_pool *p = pool_busy_enter(self);
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
        pool_busy_leave(self);
    } else {
        st = kvp_hash_tokens(self->pool, in.p, (size_t)in.n, ex.present ? &ex.k : NULL, dst, cap,
                             (size_t)known, &n_out);
    }
    if (have_out)
        PyBuffer_Release(&ov);
    if (st) {
        Py_CLEAR(res);
        raise_status(st);
    } else if (have_out) {
        res = PyLong_FromSize_t(n_out);
    }
done:
    u32in_release(&in);
    extra_release(&ex);
    return res;
}

static PyObject *Pool_publish_verified(PoolObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    uint32_t id, parent = KVP_NO_BLOCK;
    kvp_hash h;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 4, "publish_verified(id, hash, parent, tokens)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id") || get_hash(args[1], &h, "hash") ||
        (args[2] != Py_None && get_u32(args[2], 0, &parent, "parent")))
        return NULL;
    u32in in;
    if (u32in_get(args[3], &in, "tokens"))
        return NULL;
    kvp_status st = kvp_publish_verified(self->pool, id, &h, parent, in.p, (size_t)in.n);
    u32in_release(&in);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_lookup_verified(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    static const char *const kw[] = {"hash", "parent", "tokens", "stream", NULL};
    PyObject *o[4];
    uint32_t parent = KVP_NO_BLOCK, stream;
    kvp_hash h;
    POOL_CHECK(self);
    if (parse_args("lookup_verified", args, nargs, kwnames, kw, 3, o) ||
        get_hash(o[0], &h, "hash") || (o[1] != Py_None && get_u32(o[1], 0, &parent, "parent")) ||
        get_u32(o[3], 0, &stream, "stream"))
        return NULL;
    u32in in;
    if (u32in_get(o[2], &in, "tokens"))
        return NULL;
    kvp_block id;
    kvp_status st =
        kvp_lookup_verified(self->pool, (kvp_stream)stream, &h, parent, in.p, (size_t)in.n, &id);
    u32in_release(&in);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(id);
}

static PyObject *Pool_block_ptr(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t id;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "block_ptr(id)"))
        return NULL;
    if (get_u32(args[0], 0, &id, "id"))
        return NULL;
    void *p = NULL;
    kvp_status st = kvp_block_ptr(self->pool, id, &p);
    if (st)
        return raise_status(st);
    return PyLong_FromVoidPtr(p);
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
        PyObject *v = hash_bytes(&e->mm[i]);
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

static PyObject *Pool_events_take(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    const kvp_event *ev = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    kvp_status st = kvp_events_take(self->pool, &ev, &n, &dropped);
    if (st)
        return raise_status(st);
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
    X(cow_copies) X(tokens_in_use) X(events_dropped)

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

static PyObject *Pool_stats(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    kvp_stats s;
    kvp_status st = kvp_stats_get(self->pool, &s);
    if (st)
        return raise_status(st);
    return stats_dict(&s);
}

static PyObject *Pool_stats_reset(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    kvp_status st = kvp_stats_reset(self->pool);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_stats_snapshot(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    kvp_status st = kvp_stats_snapshot(self->pool);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_stats_history(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    size_t n = 0;
    kvp_status st = kvp_stats_history(self->pool, NULL, 0, &n);
    if (st && st != KVP_ESPACE)
        return raise_status(st);
    kvp_stats *h = PyMem_Calloc(n ? n : 1, sizeof(kvp_stats));
    if (!h)
        return PyErr_NoMemory();
    st = kvp_stats_history(self->pool, h, n, &n);
    if (st) {
        PyMem_Free(h);
        return raise_status(st);
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

static kvp_status json_adapter(kvp_pool *p, const char *prefix, char *buf, size_t cap,
                               size_t *needed)
{
    (void)prefix;
    return kvp_stats_json(p, buf, cap, needed);
}

static PyObject *render(PoolObject *self, render_fn fn, const char *prefix)
{
    char small[4096];
    size_t need = 0;
    kvp_status st = fn(self->pool, prefix, small, sizeof small, &need);
    if (!st)
        return PyUnicode_FromStringAndSize(small, (Py_ssize_t)need);
    if (st != KVP_ESPACE)
        return raise_status(st);
    char *buf = PyMem_Malloc(need + 1);
    if (!buf)
        return PyErr_NoMemory();
    st = fn(self->pool, prefix, buf, need + 1, &need);
    PyObject *r = st ? raise_status(st) : PyUnicode_FromStringAndSize(buf, (Py_ssize_t)need);
    PyMem_Free(buf);
    return r;
}

static PyObject *Pool_prometheus(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const kw[] = {"prefix", NULL};
    PyObject *o[1];
    POOL_CHECK(self);
    if (parse_args("prometheus", args, nargs, kwnames, kw, 0, o))
        return NULL;
    const char *prefix = NULL;
    if (o[0] && o[0] != Py_None) {
        prefix = PyUnicode_AsUTF8(o[0]);
        if (!prefix)
            return NULL;
    }
    return render(self, kvp_stats_prometheus, prefix);
}

static PyObject *Pool_json(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    return render(self, json_adapter, NULL);
}

static PyObject *Pool_check(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    char msg[512] = {0};
    kvp_status st = kvp_pool_check(self->pool, msg, sizeof msg);
    if (st == KVP_ECORRUPT)
        return raise_status_msg(st, msg);
    if (st)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Pool_fingerprint(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    POOL_CHECK(self);
    uint64_t fp;
    kvp_status st = kvp_pool_fingerprint(self->pool, &fp);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLongLong(fp);
}

static PyObject *Pool_get_block_size(PoolObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->block_size);
}

static PyObject *Pool_get_thread_safe(PoolObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->thread_safe);
}

static PyObject *Pool_get_closed(PoolObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->pool == NULL);
}

/* ------------------------------------------------------------------------ */
/* Sequence                                                                  */
/* ------------------------------------------------------------------------ */

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
    SeqObject *self = PyObject_New(SeqObject, &Seq_Type);
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

static void seqs_invalidate(PoolObject *self)
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

static int seq_ok(SeqObject *self)
{
    if (!self->pool->pool) {
        PyErr_SetString(kvp_exc[KVP_EINVAL], "the pool is closed");
        return 0;
    }
    if (!self->seq) {
        PyErr_SetString(kvp_exc[KVP_EINVAL],
                        "the sequence was destroyed (destroy() or Pool.clear())");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(kvp_exc[KVP_EBUSY], "another thread is inside a call on this sequence");
        return 0;
    }
    return 1;
}

static int seq_no_exports(SeqObject *self, const char *what)
{
    if (self->exports > 0) {
        PyErr_Format(kvp_exc[KVP_EBUSY],
                     "%s: the block table is exported (a memoryview/array over it is alive); "
                     "release it first",
                     what);
        return 0;
    }
    return 1;
}

/* Sequence(pool, request_id, extra=None) */
static PyObject *Seq_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)type;
    static char *kw[] = {"pool", "request_id", "extra", NULL};
    PyObject *pool_o, *rid_o, *extra_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O|O:Sequence", kw, &Pool_Type, &pool_o,
                                     &rid_o, &extra_o))
        return NULL;
    PoolObject *pool = (PoolObject *)pool_o;
    POOL_CHECK(pool);
    uint64_t rid;
    if (get_u64(rid_o, 0, &rid, "request_id"))
        return NULL;
    extra_in ex;
    if (extra_get(extra_o, &ex))
        return NULL;
    kvp_seq *s = NULL;
    kvp_status st = kvp_seq_create(pool->pool, rid, ex.present ? &ex.k : NULL, &s);
    extra_release(&ex);
    if (st)
        return raise_status(st);
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

static void Seq_dealloc(SeqObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    Py_XDECREF(self->pool);
    PyObject_Free(self);
}

/* Pool.find_sequence(request_id) -> the Sequence (the same object while one
 * is alive). */
static PyObject *Pool_find_sequence(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t rid;
    POOL_CHECK(self);
    if (!nargs_is(nargs, 1, "find_sequence(request_id)"))
        return NULL;
    if (get_u64(args[0], 0, &rid, "request_id"))
        return NULL;
    kvp_seq *s = NULL;
    kvp_status st = kvp_seq_find(self->pool, rid, &s);
    if (st)
        return raise_status(st);
    SeqObject *w = seq_lookup_wrapper(self, rid);
    if (w && w->seq == s) {
        Py_INCREF(w);
        return (PyObject *)w;
    }
    return (PyObject *)seq_wrap(self, s, rid);
}

static PyObject *Pool_sequence(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const kw[] = {"request_id", "extra", NULL};
    PyObject *o[2];
    if (parse_args("sequence", args, nargs, kwnames, kw, 1, o))
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
    PyObject *r = Seq_new(&Seq_Type, a, k);
    Py_DECREF(a);
    Py_XDECREF(k);
    if (r)
        ((SeqObject *)r)->init_pending = 0; /* made here, not by Sequence(...) */
    return r;
}

/*
 * admit(tokens).  The state checks follow the conversion of `tokens`, which
 * may run Python code (__index__ of list items).  On a thread-safe pool
 * without on_evict, a long prompt is admitted without the GIL, the sequence
 * and the pool busy meanwhile; with on_evict the GIL stays (see
 * "Evictions").  The library reports a sequence that already has tokens as
 * KVP_EBUSY; the message says so.
 */
static PyObject *Seq_admit(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_is(nargs, 1, "admit(tokens)"))
        return NULL;
    u32in in;
    if (u32in_get(args[0], &in, "tokens"))
        return NULL;
    if (!seq_ok(self) || !seq_no_exports(self, "admit")) {
        u32in_release(&in);
        return NULL;
    }
    size_t cached = 0;
    kvp_status st;
    PoolObject *pool = self->pool;
    if (pool->thread_safe && !pool->on_evict && (size_t)in.n >= KVPY_GIL_TOKENS) {
        kvp_seq *seq = self->seq;
        self->busy++;
        Py_INCREF(self);
        pool_busy_enter(pool); /* open: seq_ok checked it */
        Py_BEGIN_ALLOW_THREADS
        st = kvp_seq_admit(seq, in.p, (size_t)in.n, &cached);
        Py_END_ALLOW_THREADS
        pool_busy_leave(pool);
        self->busy--;
        Py_DECREF(self);
    } else {
        st = kvp_seq_admit(self->seq, in.p, (size_t)in.n, &cached);
    }
    u32in_release(&in);
    if (st == KVP_EBUSY) {
        const kvp_block *ids;
        size_t nb, nt = 0;
        if (kvp_seq_blocks(self->seq, &ids, &nb, &nt) == KVP_OK && nt > 0)
            return PyErr_Format(kvp_exc[KVP_EBUSY],
                                "admit: the sequence already holds %zu tokens (admit takes a "
                                "prompt into an empty sequence; append adds to one)",
                                nt);
    }
    if (st)
        return raise_status(st);
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
        return raise_status(st);
    Py_RETURN_NONE;
}

/* append(tokens): an int, or a buffer/list of them. */
static PyObject *Seq_append(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_is(nargs, 1, "append(tokens)"))
        return NULL;
    if (PyLong_Check(args[0])) {
        uint32_t t;
        if (get_u32(args[0], 0, &t, "token"))
            return NULL;
        return seq_append_run(self, &t, 1);
    }
    u32in in;
    if (u32in_get(args[0], &in, "tokens"))
        return NULL;
    PyObject *r = seq_append_run(self, in.p, (size_t)in.n);
    u32in_release(&in);
    return r;
}

static PyObject *Seq_fork(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t cid;
    if (!nargs_is(nargs, 1, "fork(child_id)"))
        return NULL;
    if (get_u64(args[0], 0, &cid, "child_id") || !seq_ok(self))
        return NULL;
    kvp_seq *child = NULL;
    kvp_status st = kvp_seq_fork(self->seq, cid, &child);
    if (st)
        return raise_status(st);
    SeqObject *w = seq_wrap(self->pool, child, cid);
    if (!w) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        kvp_seq_destroy(child);
        PyErr_Restore(et, ev, tb);
    }
    return (PyObject *)w;
}

static PyObject *Seq_destroy(SeqObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!seq_ok(self) || !seq_no_exports(self, "destroy"))
        return NULL;
    kvp_status st = kvp_seq_destroy(self->seq);
    if (st)
        return raise_status(st);
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
    if (!seq_ok(self) || parse_args("blocks", args, nargs, kwnames, kw, 0, o))
        return NULL;
    const kvp_block *ids;
    size_t n;
    kvp_status st = kvp_seq_blocks(self->seq, &ids, &n, NULL);
    if (st)
        return raise_status(st);
    if (o[0] && o[0] != Py_None) {
        u32out out;
        if (u32out_get(o[0], &out))
            return NULL;
        if ((size_t)out.cap < n) {
            int_view_release(&out.view);
            return raise_status(KVP_ESPACE);
        }
        if (n)
            memcpy(out.p, ids, n * sizeof(uint32_t));
        int_view_release(&out.view);
        return PyLong_FromSize_t(n);
    }
    return u32_list(ids, n);
}

static PyObject *Seq_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return self;
}

static PyObject *Seq_exit(SeqObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    if (!self->seq || !self->pool->pool)
        Py_RETURN_NONE;
    return Seq_destroy(self, NULL);
}

static PyObject *Seq_get_table(SeqObject *self, void *c)
{
    (void)c;
    if (!seq_ok(self))
        return NULL;
    return PyMemoryView_FromObject((PyObject *)self);
}

static PyObject *Seq_get_num_tokens(SeqObject *self, void *c)
{
    (void)c;
    if (!seq_ok(self))
        return NULL;
    const kvp_block *ids;
    size_t n, t;
    kvp_status st = kvp_seq_blocks(self->seq, &ids, &n, &t);
    if (st)
        return raise_status(st);
    return PyLong_FromSize_t(t);
}

static PyObject *Seq_get_num_blocks(SeqObject *self, void *c)
{
    (void)c;
    if (!seq_ok(self))
        return NULL;
    const kvp_block *ids;
    size_t n;
    kvp_status st = kvp_seq_blocks(self->seq, &ids, &n, NULL);
    if (st)
        return raise_status(st);
    return PyLong_FromSize_t(n);
}

static PyObject *Seq_get_rid(SeqObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->request_id);
}

static PyObject *Seq_get_alive(SeqObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->seq != NULL && self->pool->pool != NULL);
}

static PyObject *Seq_get_exports(SeqObject *self, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(self->exports);
}

static PyObject *Seq_get_pool(SeqObject *self, void *c)
{
    (void)c;
    Py_INCREF(self->pool);
    return (PyObject *)self->pool;
}

static PyObject *Seq_repr(SeqObject *self)
{
    return PyUnicode_FromFormat("<kvpool.Sequence request_id=%llu%s>",
                                (unsigned long long)self->request_id,
                                self->seq ? "" : " (destroyed)");
}

/* Buffer protocol: the block table, read-only, format 'I', zero-copy. */
static uint32_t empty_table[1];

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
    kvp_status st = kvp_seq_blocks(self->seq, &ids, &n, NULL);
    if (st) {
        raise_status(st);
        return -1;
    }
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
 * before returning (see "Evictions"): fn##_ev wraps fn. */
#define SEQ_EV_FC(fn)                                                                           \
    static PyObject *fn##_ev(SeqObject *self, PyObject *const *a, Py_ssize_t n)                 \
    {                                                                                           \
        PoolObject *pool = self->pool;                                                          \
        return ev_deliver(pool, fn(self, a, n));                                                \
    }
SEQ_EV_FC(Seq_admit)
SEQ_EV_FC(Seq_append)
SEQ_EV_FC(Seq_fork)
SEQ_EV_FC(Seq_exit)
#undef SEQ_EV_FC

static PyObject *Seq_destroy_ev(SeqObject *self, PyObject *unused)
{
    PoolObject *pool = self->pool;
    return ev_deliver(pool, Seq_destroy(self, unused));
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
    {"destroy", (PyCFunction)Seq_destroy_ev, METH_NOARGS,
     "destroy()\n\nFree the blocks (last first) and the sequence."},
    {"blocks", (PyCFunction)(void (*)(void))Seq_blocks, METH_FASTCALL | METH_KEYWORDS,
     "blocks(out=None) -> list, or the count written into `out` (a copy of the table)."},
    {"__enter__", (PyCFunction)Seq_enter, METH_NOARGS, NULL},
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
    {"num_tokens", (getter)Seq_get_num_tokens, NULL, "tokens in the sequence", NULL},
    {"num_blocks", (getter)Seq_get_num_blocks, NULL, "blocks in the table", NULL},
    {"request_id", (getter)Seq_get_rid, NULL, "the request id", NULL},
    {"alive", (getter)Seq_get_alive, NULL, "False once destroyed or invalidated", NULL},
    {"exports", (getter)Seq_get_exports, NULL, "live zero-copy exports of the table", NULL},
    {"pool", (getter)Seq_get_pool, NULL, "the Pool", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject Seq_Type = {
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

/* ------------------------------------------------------------------------ */
/* Pool type                                                                 */
/* ------------------------------------------------------------------------ */

#define FC(f) (PyCFunction)(void (*)(void))(f)
#define FCK METH_FASTCALL | METH_KEYWORDS

/* Pool methods that change the pool deliver its queued evictions before
 * returning (see "Evictions"): fn##_ev wraps fn, one per calling convention. */
#define POOL_EV_FCK(fn)                                                                         \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n, PyObject *k)   \
    {                                                                                           \
        return ev_deliver(self, fn(self, a, n, k));                                             \
    }
#define POOL_EV_FC(fn)                                                                          \
    static PyObject *fn##_ev(PoolObject *self, PyObject *const *a, Py_ssize_t n)                \
    {                                                                                           \
        return ev_deliver(self, fn(self, a, n));                                                \
    }
#define POOL_EV_NOARGS(fn)                                                                      \
    static PyObject *fn##_ev(PoolObject *self, PyObject *unused)                                \
    {                                                                                           \
        return ev_deliver(self, fn(self, unused));                                              \
    }
POOL_EV_FCK(Pool_alloc)
POOL_EV_FCK(Pool_alloc_blocks)
POOL_EV_FCK(Pool_take)
POOL_EV_FCK(Pool_take_id)
POOL_EV_FCK(Pool_free)
POOL_EV_FCK(Pool_claim)
POOL_EV_FCK(Pool_claim_many)
POOL_EV_FCK(Pool_evict)
POOL_EV_FCK(Pool_ensure_free)
POOL_EV_FCK(Pool_extend)
POOL_EV_FCK(Pool_shrink)
POOL_EV_FCK(Pool_lookup_verified)
POOL_EV_FC(Pool_free_owner)
POOL_EV_FC(Pool_publish)
POOL_EV_FC(Pool_publish_many)
POOL_EV_FC(Pool_unpublish)
POOL_EV_FC(Pool_unpublish_many)
POOL_EV_FC(Pool_publish_verified)
POOL_EV_NOARGS(Pool_clear)
POOL_EV_NOARGS(Pool_clear_index)
POOL_EV_NOARGS(Pool_reset_prefix_cache)
POOL_EV_NOARGS(Pool_retire_top)
#undef POOL_EV_FCK
#undef POOL_EV_FC
#undef POOL_EV_NOARGS

static PyMethodDef Pool_methods[] = {
    {"close", (PyCFunction)Pool_close, METH_NOARGS, "Destroy the pool now (idempotent)."},
    {"__enter__", (PyCFunction)Pool_enter, METH_NOARGS, NULL},
    {"__exit__", FC(Pool_exit), METH_FASTCALL, NULL},
    {"clear", (PyCFunction)Pool_clear_ev, METH_NOARGS,
     "Return to the just-created state (kvp_pool_clear); every Sequence becomes invalid."},
    {"alloc", FC(Pool_alloc_ev), FCK,
     "alloc(tokens, owner=None, stream=0, format=0, out=None)\n\nAllocate ceil(tokens / "
     "block_size) blocks.  Returns a list of ids, or with `out` (a uint32 buffer) the count "
     "written.  owner None = anonymous."},
    {"alloc_blocks", FC(Pool_alloc_blocks_ev), FCK,
     "alloc_blocks(n, owner=None, stream=0, format=0, out=None): alloc of n whole blocks."},
    {"take", FC(Pool_take_ev), FCK, "take(owner=None, stream=0) -> id"},
    {"take_id", FC(Pool_take_id_ev), FCK, "take_id(id, owner=None)"},
    {"free", FC(Pool_free_ev), FCK,
     "free(ids, owner=None)\n\nDrop one reference per id (an int, buffer or list), in order: "
     "the first given is the first reused.  All or nothing."},
    {"free_owner", FC(Pool_free_owner_ev), METH_FASTCALL, "free_owner(owner) -> references dropped"},
    {"owner_register", FC(Pool_owner_register), METH_FASTCALL, "owner_register(owner)"},
    {"owner_release", FC(Pool_owner_release), METH_FASTCALL, "owner_release(owner)"},
    {"owner_blocks", FC(Pool_owner_blocks), FCK, "owner_blocks(owner, out=None)"},
    {"free_count", FC(Pool_free_count), FCK, "free_count(stream=0) -> int"},
    {"peek_next", FC(Pool_peek_next), FCK,
     "peek_next(stream=0) -> int | None: the block the next allocation would take, not taken."},
    {"set_fill", FC(Pool_set_fill), METH_FASTCALL, "set_fill(id, fill)"},
    {"set_fill_many", FC(Pool_set_fill_many), METH_FASTCALL, "set_fill_many(ids, fills)"},
    {"block_info", FC(Pool_block_info), METH_FASTCALL, "block_info(id) -> dict"},
    {"claim", FC(Pool_claim_ev), FCK, "claim(id, owner=None)"},
    {"claim_many", FC(Pool_claim_many_ev), FCK, "claim_many(ids, owner=None)"},
    {"publish", FC(Pool_publish_ev), METH_FASTCALL, "publish(id, hash32)"},
    {"publish_many", FC(Pool_publish_many_ev), METH_FASTCALL,
     "publish_many(ids, hashes): hashes holds 32 bytes per id"},
    {"lookup", FC(Pool_lookup), FCK, "lookup(hash32, stream=0) -> id (NotFoundError)"},
    {"lookup_many", FC(Pool_lookup_many), FCK,
     "lookup_many(hashes, out=None, stream=0)\n\nWith out: fills out[i] (NO_BLOCK on a miss) "
     "and returns the number of leading hits.  Without: (list of id or None, leading hits)."},
    {"unpublish", FC(Pool_unpublish_ev), METH_FASTCALL, "unpublish(id)"},
    {"unpublish_many", FC(Pool_unpublish_many_ev), METH_FASTCALL, "unpublish_many(ids)"},
    {"clear_index", (PyCFunction)Pool_clear_index_ev, METH_NOARGS, "clear_index()"},
    {"evict", FC(Pool_evict_ev), FCK, "evict(n, stream=0) -> evicted"},
    {"ensure_free", FC(Pool_ensure_free_ev), FCK, "ensure_free(n, stream=0)"},
    {"reset_prefix_cache", (PyCFunction)Pool_reset_prefix_cache_ev, METH_NOARGS,
     "reset_prefix_cache() (BusyError while blocks are in use)"},
    {"extend", FC(Pool_extend_ev), FCK, "extend(n, stream=0) -> added"},
    {"shrink", FC(Pool_shrink_ev), FCK, "shrink(n, stream=0) -> retired; n = target free blocks"},
    {"retire_top", (PyCFunction)Pool_retire_top_ev, METH_NOARGS,
     "retire_top() -> (retired, moved_to or None)"},
    {"hash_block", FC(Pool_hash_block), FCK,
     "hash_block(tokens, parent=None, start=0, extra=None) -> 32 bytes"},
    {"hash_tokens", FC(Pool_hash_tokens), FCK,
     "hash_tokens(tokens, extra=None, out=None, known=0) -> bytes (32 per full block), or "
     "the block count written into `out`"},
    {"publish_verified", FC(Pool_publish_verified_ev), METH_FASTCALL,
     "publish_verified(id, hash, parent or None, tokens)"},
    {"lookup_verified", FC(Pool_lookup_verified_ev), FCK,
     "lookup_verified(hash, parent or None, tokens, stream=0) -> id"},
    {"block_ptr", FC(Pool_block_ptr), METH_FASTCALL, "block_ptr(id) -> address (int)"},
    {"events_take", (PyCFunction)Pool_events_take, METH_NOARGS,
     "events_take() -> ([(kind, hashes, parent, tokens, block_size, lora_name, mm, medium)], "
     "dropped)"},
    {"stats", (PyCFunction)Pool_stats, METH_NOARGS, "stats() -> dict"},
    {"stats_reset", (PyCFunction)Pool_stats_reset, METH_NOARGS, "stats_reset()"},
    {"stats_snapshot", (PyCFunction)Pool_stats_snapshot, METH_NOARGS, "stats_snapshot()"},
    {"stats_history", (PyCFunction)Pool_stats_history, METH_NOARGS,
     "stats_history() -> list of dicts, oldest first"},
    {"prometheus", FC(Pool_prometheus), FCK, "prometheus(prefix=None) -> str"},
    {"json", (PyCFunction)Pool_json, METH_NOARGS, "json() -> str"},
    {"check", (PyCFunction)Pool_check, METH_NOARGS, "check() (CorruptError on a broken invariant)"},
    {"fingerprint", (PyCFunction)Pool_fingerprint, METH_NOARGS, "fingerprint() -> int"},
    {"find_sequence", FC(Pool_find_sequence), METH_FASTCALL,
     "find_sequence(request_id) -> Sequence"},
    {"sequence", FC(Pool_sequence), FCK, "sequence(request_id, extra=None) -> new Sequence"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Pool_getset[] = {
    {"block_size", (getter)Pool_get_block_size, NULL, "tokens per block", NULL},
    {"thread_safe", (getter)Pool_get_thread_safe, NULL, "created with thread_safe", NULL},
    {"closed", (getter)Pool_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject Pool_Type = {
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
              "event_capacity=4096, medium=None, prefault=False)\n\nA kvpool block pool (kvp_pool).",
    .tp_weaklistoffset = offsetof(PoolObject, weakrefs),
    .tp_methods = Pool_methods,
    .tp_getset = Pool_getset,
    .tp_new = Pool_new,
};

/* ------------------------------------------------------------------------ */
/* vLLM drop-in: canonical blocks and the hot-path pool                      */
/* ------------------------------------------------------------------------ */

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
/* FIFO reuse walks all of them, so each byte counts: at 32 bytes two share a
 * cache line and none straddles two (at 40, most did).  The rarely read key
 * lives in the pool, pool->vkeys[id]: the BlockHashWithGroupId bytes (the
 * block hash, then the group id as 4 big-endian bytes) the block was last
 * cached under, or NULL.
 *
 * A BlockPool's blocks are one array owned by its pool (varena, aligned to a
 * cache line), not separate allocations: block id's object is at a known
 * address, so get_new_blocks prefetches the next one's without first loading
 * a pointer to it, a dependent miss of its own (with a pointer array, most
 * of that call's samples were on that load).  Each block holds a reference
 * to the pool, so the array outlives every block. */
_Static_assert(sizeof(VBlock) == 32, "KVCacheBlock objects stay 32 bytes");

static PyTypeObject VBlock_Type;

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

static int vkey(PyObject *block_hash, uint32_t gid, kvp_hash *out)
{
    Py_buffer v;
    if (PyObject_GetBuffer(block_hash, &v, PyBUF_SIMPLE) < 0)
        return -1;
    if (v.len > 32 || v.len == 0) {
        PyBuffer_Release(&v);
        PyErr_SetString(kvp_exc[KVP_EINVAL], "block_hash must be 1..32 bytes");
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

/* The memory is the pool's (varena), freed with it: dropping the block's
 * reference to the pool is the last thing this does, since that may free
 * the array the block lies in. */
static void VBlock_dealloc(VBlock *self)
{
    Py_XDECREF(self->pool);
}

static PyObject *VBlock_get_id(VBlock *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->id);
}

static PyObject *VBlock_get_ref(VBlock *self, void *c)
{
    (void)c;
    if (!pool_ok(self->pool))
        return NULL;
    kvp_block_info bi;
    kvp_status st = kvp_block_get(self->pool->pool, self->id, &bi);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(bi.ref_count);
}

static PyObject *VBlock_get_hash(VBlock *self, void *c)
{
    (void)c;
    PyObject **key = &self->pool->vkeys[self->id];
    if (!*key)
        Py_RETURN_NONE;
    if (!pool_ok(self->pool))
        return NULL;
    kvp_block_info bi;
    kvp_status st = kvp_block_get(self->pool->pool, self->id, &bi);
    if (st)
        return raise_status(st);
    kvp_hash kh;
    vkey_of_key(*key, &kh);
    if (bi.published && memcmp(bi.hash.b, kh.b, 32) == 0) {
        Py_INCREF(*key);
        return *key;
    }
    Py_CLEAR(*key); /* evicted since: forget the key */
    Py_RETURN_NONE;
}

static PyObject *VBlock_get_null(VBlock *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->id == 0);
}

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

static PyTypeObject VBlock_Type = {
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
    PyObject *blocks;   /* list of VBlock, index = id */
    VBlock *arr;        /* the pool's varena: block id's object is arr[id] */
    uint32_t n;
    uint32_t hash_block_size;
    int enable_caching;
    int events;
    uint32_t *scratch;  /* n ids */
    PyObject *one;      /* the last one-block result list, for reuse */
    PyObject *dict;
} VPool;

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
    if (get_u32(nb_o, 0, &nb, "num_gpu_blocks") || get_bool(cache_o, 1, &caching) ||
        get_u32(hbs_o, 16, &hbs, "hash_block_size") || get_bool(ev_o, 0, &events))
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
                                     caching ? Py_True : Py_False, "reuse", "fifo", "events",
                                     events ? Py_True : Py_False, "event_capacity", cap);
    if (!kwargs)
        return -1;
    PyObject *empty = PyTuple_New(0);
    PyObject *pool = empty ? Pool_new(&Pool_Type, empty, kwargs) : NULL;
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
    self->arr = self->pool->varena = aligned_alloc(64, bytes);
    self->blocks = PyList_New(nb);
    self->pool->vkeys = PyMem_Calloc(nb, sizeof(PyObject *));
    self->pool->nvkeys = nb;
    if (!self->scratch || !self->arr || !self->blocks || !self->pool->vkeys) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < nb; i++) {
        VBlock *b = &self->arr[i];
        PyObject_Init((PyObject *)b, &VBlock_Type); /* one reference: the list's */
        Py_INCREF(pool);
        b->pool = (PoolObject *)pool;
        b->id = i;
        PyList_SET_ITEM(self->blocks, i, (PyObject *)b);
    }
    return 0;
}

static void VPool_dealloc(VPool *self)
{
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->one);
    Py_XDECREF(self->blocks);
    Py_XDECREF(self->pool);
    Py_XDECREF(self->dict);
    PyMem_Free(self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int VPool_traverse(VPool *self, visitproc visit, void *arg)
{
    Py_VISIT(self->one);
    Py_VISIT(self->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int VPool_clear_gc(VPool *self)
{
    Py_CLEAR(self->one);
    Py_CLEAR(self->dict);
    return 0;
}

static int vpool_ok(VPool *self)
{
    if (!self->pool) {
        PyErr_SetString(PyExc_RuntimeError, "BlockPool.__init__ was not called");
        return 0;
    }
    return pool_ok(self->pool);
}

/* The canonical block of this pool, or NULL with TypeError/ValueError. */
static inline VBlock *vblock_of(VPool *self, PyObject *o)
{
    if (Py_TYPE(o) != &VBlock_Type) {
        PyErr_Format(PyExc_TypeError, "expected a KVCacheBlock, got %.100s", Py_TYPE(o)->tp_name);
        return NULL;
    }
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
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 1, "get_new_blocks(num_blocks)"))
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
        st = kvp_alloc(self->pool->pool, KVP_STREAM_SHARED,
                       (uint64_t)want * self->hash_block_size, KVP_ANON, 0, self->scratch,
                       self->n, &n);
    }
    if (st == KVP_EEXHAUSTED) {
        PyErr_Format(PyExc_ValueError, "Cannot get %zd free blocks from the pool", want);
        return NULL;
    }
    if (st)
        return raise_status(st);
    /* FIFO reuse hands out the block freed longest ago, whose object is the
     * coldest: ask for the next one's now, while the caller's loop runs
     * (about a third of a one-block call's time here when it missed). */
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
            raise_status(st);
            return -1;
        }
        return -2; /* already freed */
    }
    return k;
}

/* free_blocks(ordered_blocks): the first given is the first evicted. */
static PyObject *VPool_free_blocks(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 1, "free_blocks(ordered_blocks)"))
        return NULL;
    Py_ssize_t k = collect_ids(self, args[0]);
    if (k == -1)
        return NULL;
    if (k > 0) {
        kvp_status st = kvp_free(self->pool->pool, self->scratch, (size_t)k, KVP_ANON);
        if (st)
            return raise_status(st);
    }
    Py_RETURN_NONE;
}

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
        raise_status(st);
        return -1;
    }
    return 0;
}

/* touch(blocks): one more reference each; a free block leaves the queue.
 * Accepts a flat sequence of blocks or a sequence of sequences (groups). */
static PyObject *VPool_touch(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 1, "touch(blocks)"))
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "touch() expects a sequence of KVCacheBlock");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    /* Check everything first so that a refused call changes nothing. */
    int nested = n > 0 && Py_TYPE(items[0]) != &VBlock_Type;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (nested) {
            PyObject *g = PySequence_Fast(items[i], "touch(): groups must be sequences");
            if (!g)
                goto fail;
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(g); j++)
                if (!vblock_of(self, PySequence_Fast_GET_ITEM(g, j))) {
                    Py_DECREF(g);
                    goto fail;
                }
            Py_DECREF(g);
        } else if (!vblock_of(self, items[i])) {
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (nested) {
            PyObject *g = PySequence_Fast(items[i], "touch(): groups must be sequences");
            if (!g)
                goto fail;
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(g); j++)
                if (touch_one(self, PySequence_Fast_GET_ITEM(g, j))) {
                    Py_DECREF(g);
                    goto fail;
                }
            Py_DECREF(g);
        } else if (touch_one(self, items[i])) {
            goto fail;
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    return NULL;
}

/* get_cached_block(block_hash, kv_cache_group_ids) -> list or None */
static PyObject *VPool_get_cached_block(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 2, "get_cached_block(block_hash, kv_cache_group_ids)"))
        return NULL;
    if (!self->enable_caching)
        Py_RETURN_NONE;
    PyObject *gids = PySequence_Fast(args[1], "kv_cache_group_ids must be a sequence of int");
    if (!gids)
        return NULL;
    Py_ssize_t ng = PySequence_Fast_GET_SIZE(gids);
    PyObject *out = PyList_New(ng);
    if (!out) {
        Py_DECREF(gids);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        uint32_t gid;
        kvp_hash h;
        kvp_block id;
        if (get_u32(PySequence_Fast_GET_ITEM(gids, i), 0, &gid, "group id") ||
            vkey(args[0], gid, &h))
            goto fail;
        kvp_status st = kvp_lookup(self->pool->pool, KVP_STREAM_SHARED, &h, &id);
        if (st == KVP_ENOTFOUND) {
            Py_DECREF(gids);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (st) {
            raise_status(st);
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
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 3, "_cache_blocks(blocks, block_hashes, group_id)"))
        return NULL;
    uint32_t gid;
    if (get_u32(args[2], 0, &gid, "kv_cache_group_id"))
        return NULL;
    PyObject *bs = PySequence_Fast(args[0], "blocks must be a sequence");
    if (!bs)
        return NULL;
    PyObject *hs = PySequence_Fast(args[1], "block_hashes must be a sequence");
    if (!hs) {
        Py_DECREF(bs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bs);
    PyObject *res = NULL;
    kvp_hash *kh = NULL;
    if (PySequence_Fast_GET_SIZE(hs) < n) {
        PyErr_SetString(PyExc_ValueError, "fewer block hashes than blocks");
        goto done;
    }
    kh = PyMem_Calloc(n ? (size_t)n : 1, sizeof(kvp_hash));
    if (!kh) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        VBlock *b = vblock_of(self, PySequence_Fast_GET_ITEM(bs, i));
        if (!b || vkey(PySequence_Fast_GET_ITEM(hs, i), gid, &kh[i]))
            goto done;
        if (b->id == 0)
            continue;
        kvp_block_info bi;
        kvp_status st = kvp_block_get(self->pool->pool, b->id, &bi);
        if (!st && bi.state != KVP_BLOCK_IN_USE)
            st = KVP_EDOUBLEFREE;
        if (!st && bi.published && memcmp(bi.hash.b, kh[i].b, 32))
            st = KVP_EBUSY;
        if (st) {
            raise_status_msg(st, "cache_full_blocks: block not in use or already cached");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        VBlock *b = (VBlock *)PySequence_Fast_GET_ITEM(bs, i);
        if (b->id == 0)
            continue;
        kvp_status st = kvp_publish(self->pool->pool, b->id, &kh[i]);
        if (st) {
            raise_status(st);
            goto done;
        }
        PyObject *h = PySequence_Fast_GET_ITEM(hs, i);
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
        Py_XSETREF(self->pool->vkeys[b->id], hb);
    }
    res = Py_None;
    Py_INCREF(res);
done:
    PyMem_Free(kh);
    Py_DECREF(bs);
    Py_DECREF(hs);
    return res;
}

/* _evict_block_ids(block_ids): unpublish each cached block; unknown or
 * uncached ids are skipped (vLLM's evict_blocks).  Returns the count. */
static PyObject *VPool_evict_ids(VPool *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!vpool_ok(self))
        return NULL;
    if (!nargs_is(nargs, 1, "_evict_block_ids(block_ids)"))
        return NULL;
    PyObject *it = PyObject_GetIter(args[0]);
    if (!it)
        return NULL;
    PyObject *o;
    size_t count = 0;
    while ((o = PyIter_Next(it))) {
        uint32_t id;
        int bad = get_u32(o, 0, &id, "block id");
        Py_DECREF(o);
        if (bad)
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
            raise_status(st);
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

static PyObject *VPool_get_num_free_blocks(VPool *self, PyObject *Py_UNUSED(ignored))
{
    if (!vpool_ok(self))
        return NULL;
    uint32_t n = 0;
    kvp_status st = kvp_free_count(self->pool->pool, KVP_STREAM_SHARED, &n);
    if (st)
        return raise_status(st);
    return PyLong_FromUnsignedLong(n);
}

static PyObject *VPool_get_usage(VPool *self, PyObject *Py_UNUSED(ignored))
{
    if (!vpool_ok(self))
        return NULL;
    uint32_t n = 0;
    kvp_status st = kvp_free_count(self->pool->pool, KVP_STREAM_SHARED, &n);
    if (st)
        return raise_status(st);
    uint32_t total = self->n - 1; /* the null block */
    if (!total)
        return PyFloat_FromDouble(0.0);
    return PyFloat_FromDouble(1.0 - (double)n / (double)total);
}

static PyObject *VPool_get_pool(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    Py_INCREF(self->pool);
    return (PyObject *)self->pool;
}

static PyObject *VPool_get_blocks(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    Py_INCREF(self->blocks);
    return self->blocks;
}

static PyObject *VPool_get_null(VPool *self, void *c)
{
    (void)c;
    if (!vpool_ok(self))
        return NULL;
    Py_INCREF(&self->arr[0]);
    return (PyObject *)&self->arr[0];
}

static PyObject *VPool_get_n(VPool *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->n);
}

static PyObject *VPool_get_caching(VPool *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->enable_caching);
}

static PyObject *VPool_get_events(VPool *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->events);
}

static PyObject *VPool_get_hbs(VPool *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->hash_block_size);
}

static PyMethodDef VPool_methods[] = {
    {"get_new_blocks", FC(VPool_get_new_blocks), METH_FASTCALL,
     "get_new_blocks(num_blocks) -> list[KVCacheBlock]\n\nTake blocks from the front of the "
     "free queue (evicting cached content); ValueError when fewer are free."},
    {"free_blocks", FC(VPool_free_blocks), METH_FASTCALL,
     "free_blocks(ordered_blocks)\n\nDrop one reference each; blocks reaching zero join the "
     "free queue in the given order (the first is evicted first).  The null block is skipped."},
    {"touch", FC(VPool_touch), METH_FASTCALL,
     "touch(blocks)\n\nOne more reference per block (a flat sequence; groups are accepted too); "
     "a free block leaves the free queue."},
    {"get_cached_block", FC(VPool_get_cached_block), METH_FASTCALL,
     "get_cached_block(block_hash, kv_cache_group_ids) -> list[KVCacheBlock] | None"},
    {"_cache_blocks", FC(VPool_cache_blocks), METH_FASTCALL, NULL},
    {"_evict_block_ids", FC(VPool_evict_ids), METH_FASTCALL, NULL},
    {"get_num_free_blocks", (PyCFunction)VPool_get_num_free_blocks, METH_NOARGS,
     "get_num_free_blocks() -> int"},
    {"get_usage", (PyCFunction)VPool_get_usage, METH_NOARGS,
     "get_usage() -> float (the null block excluded)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef VPool_getset[] = {
    {"pool", (getter)VPool_get_pool, NULL, "the native kvpool.Pool underneath", NULL},
    {"blocks", (getter)VPool_get_blocks, NULL, "list of all KVCacheBlock, index = id", NULL},
    {"null_block", (getter)VPool_get_null, NULL, "the null block (id 0)", NULL},
    {"num_gpu_blocks", (getter)VPool_get_n, NULL, "blocks in the pool", NULL},
    {"enable_caching", (getter)VPool_get_caching, NULL, "prefix caching on", NULL},
    {"enable_kv_cache_events", (getter)VPool_get_events, NULL, "events on", NULL},
    {"hash_block_size", (getter)VPool_get_hbs, NULL, "tokens per hashed block", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject VPool_Type = {
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

/* ------------------------------------------------------------------------ */
/* Module                                                                    */
/* ------------------------------------------------------------------------ */

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(kvp_strerror((int)v));
}

static PyObject *mod_hash_external(PyObject *m, PyObject *arg)
{
    (void)m;
    kvp_hash h;
    if (get_hash(arg, &h, "hash"))
        return NULL;
    return PyLong_FromUnsignedLongLong(kvp_hash_external(&h));
}

/* _fast_view(obj, writable): whether the binding reads obj through its
 * numpy fast view (for tests: the rest of the binding cannot tell). */
static PyObject *mod_fast_view(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!nargs_is(nargs, 2, "_fast_view(obj, writable)"))
        return NULL;
    int writable = PyObject_IsTrue(args[1]);
    if (writable < 0)
        return NULL;
#ifdef KVPY_HAVE_NUMPY
    Py_buffer v;
    if (np_view(args[0], &v, writable)) {
        int_view_release(&v);
        Py_RETURN_TRUE;
    }
#endif
    Py_RETURN_FALSE;
}

static PyMethodDef mod_methods[] = {
    {"strerror", mod_strerror, METH_O, "strerror(status) -> the library's message"},
    {"_fast_view", FC(mod_fast_view), METH_FASTCALL,
     "_fast_view(obj, writable) -> whether obj is read through the numpy fast view"},
    {"hash_external", mod_hash_external, METH_O,
     "hash_external(hash32) -> the 64-bit external form events carry"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kvpool_module = {
    PyModuleDef_HEAD_INIT, "kvpool._kvpool",
    "Native core of the kvpool package (see kvpool/__init__.py).", -1, mod_methods,
    NULL, NULL, NULL, NULL};

static int add_exc(PyObject *m, int status, const char *name, PyObject *extra_base,
                   const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "kvpool.%s", name);
    PyObject *bases = extra_base ? PyTuple_Pack(2, KvpError, extra_base) : NULL;
    PyObject *cls = PyErr_NewExceptionWithDoc(full, doc, bases ? bases : KvpError, NULL);
    Py_XDECREF(bases);
    if (!cls)
        return -1;
    PyObject *st = PyLong_FromLong(status);
    if (!st || PyObject_SetAttrString(cls, "status", st) < 0) {
        Py_XDECREF(st);
        return -1;
    }
    Py_DECREF(st);
    kvp_exc[status] = cls;
    Py_INCREF(cls);
    return PyModule_AddObject(m, name, cls);
}

PyMODINIT_FUNC PyInit__kvpool(void);

PyMODINIT_FUNC PyInit__kvpool(void)
{
    if (PyType_Ready(&Pool_Type) < 0 || PyType_Ready(&Seq_Type) < 0 ||
        PyType_Ready(&VBlock_Type) < 0 || PyType_Ready(&VPool_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&kvpool_module);
    if (!m)
        return NULL;
    KvpError = PyErr_NewExceptionWithDoc(
        "kvpool.Error", "Base class of every error kvpool raises; .status is the kvp_status.",
        NULL, NULL);
    if (!KvpError)
        goto fail;
    Py_INCREF(KvpError);
    if (PyModule_AddObject(m, "Error", KvpError) < 0)
        goto fail;
    if (add_exc(m, KVP_EINVAL, "InvalidArgumentError", PyExc_ValueError, "KVP_EINVAL") ||
        add_exc(m, KVP_EEXHAUSTED, "ExhaustedError", NULL, "KVP_EEXHAUSTED") ||
        add_exc(m, KVP_ENOTFOUND, "NotFoundError", NULL, "KVP_ENOTFOUND") ||
        add_exc(m, KVP_ENOTOWNER, "NotOwnerError", NULL, "KVP_ENOTOWNER") ||
        add_exc(m, KVP_EDOUBLEFREE, "DoubleFreeError", NULL, "KVP_EDOUBLEFREE") ||
        add_exc(m, KVP_EOWNERACTIVE, "OwnerActiveError", NULL, "KVP_EOWNERACTIVE") ||
        add_exc(m, KVP_EBUSY, "BusyError", NULL, "KVP_EBUSY") ||
        add_exc(m, KVP_ENOMEM, "NoMemoryError", PyExc_MemoryError, "KVP_ENOMEM") ||
        add_exc(m, KVP_ERANGE, "RangeError", PyExc_IndexError, "KVP_ERANGE") ||
        add_exc(m, KVP_ESPACE, "SpaceError", NULL, "KVP_ESPACE") ||
        add_exc(m, KVP_ECORRUPT, "CorruptError", NULL, "KVP_ECORRUPT"))
        goto fail;
    Py_INCREF(&Pool_Type);
    Py_INCREF(&Seq_Type);
    Py_INCREF(&VBlock_Type);
    Py_INCREF(&VPool_Type);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&Pool_Type) < 0 ||
        PyModule_AddObject(m, "Sequence", (PyObject *)&Seq_Type) < 0 ||
        PyModule_AddObject(m, "KVCacheBlock", (PyObject *)&VBlock_Type) < 0 ||
        PyModule_AddObject(m, "_VllmBlockPool", (PyObject *)&VPool_Type) < 0)
        goto fail;
#define IC(name, v)                                                                             \
    if (PyModule_AddObject(m, name, PyLong_FromUnsignedLongLong((unsigned long long)(v))) < 0)  \
        goto fail;
    IC("NO_BLOCK", KVP_NO_BLOCK)
    IC("ANON", KVP_ANON)
    IC("MAX_BLOCKS", KVP_MAX_BLOCKS)
    IC("STREAM_SHARED", KVP_STREAM_SHARED)
    IC("STREAM_K", KVP_STREAM_K)
    IC("STREAM_V", KVP_STREAM_V)
    IC("FMT_FP16", KVP_FMT_FP16)
    IC("FMT_BF16", KVP_FMT_BF16)
    IC("FMT_FP8", KVP_FMT_FP8)
    IC("FMT_INT8", KVP_FMT_INT8)
    IC("FMT_INT4", KVP_FMT_INT4)
    IC("FMT_INT2", KVP_FMT_INT2)
    IC("FMT_USER", KVP_FMT_USER)
    IC("REUSE_LIFO", KVP_REUSE_LIFO)
    IC("REUSE_LOWEST", KVP_REUSE_LOWEST)
    IC("REUSE_FIFO", KVP_REUSE_FIFO)
    IC("HASH_SHA256", KVP_HASH_SHA256)
    IC("HASH_XXH3_128", KVP_HASH_XXH3_128)
    IC("EVENT_STORED", KVP_EVENT_STORED)
    IC("EVENT_REMOVED", KVP_EVENT_REMOVED)
    IC("EVENT_ALL_CLEARED", KVP_EVENT_ALL_CLEARED)
    IC("VERSION_MAJOR", KVPOOL_VERSION_MAJOR)
    IC("VERSION_MINOR", KVPOOL_VERSION_MINOR)
    IC("VERSION_PATCH", KVPOOL_VERSION_PATCH)
#undef IC
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
