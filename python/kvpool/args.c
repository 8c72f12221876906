/* SPDX-License-Identifier: Apache-2.0 */
/*
 * args.c — argument parsing and conversion for every method of the module.
 *
 * What it owns: the METH_FASTCALL keyword parser, integer / owner / bool /
 * hash conversions with the binding's error rules (a wrong type is a
 * TypeError, an out-of-range value an InvalidArgumentError), zero-copy
 * views of integer buffers (the numpy fast view included), list and bytes
 * results, and the `extra` dict of hash keys; the module functions
 * hash_external and _fast_view, which are conversions too.
 *
 * Invariants: a conversion that fails has set an exception and holds
 * nothing (every view or allocation it made is released); one that
 * succeeds is released by its *_release on every path.  None of these
 * functions touches a pool; any of them may run Python code (__index__,
 * buffer exports), which is why callers check a pool's state after them.
 *
 * Why built this way: one C call per batch must cost tens of nanoseconds,
 * so arguments are read straight from the vectorcall array and ids straight
 * out of any buffer (numpy, array, memoryview) without copying; list[int]
 * is accepted through a slower conversion path.
 */
#include "kvpy.h"

#ifdef KVPY_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h> /* the array object's fields only: no numpy C-API calls */
#endif

#include <stdlib.h>

/*
 * Map positional args and keyword names onto out[0..] following `names`
 * (NULL-terminated).  The first `nreq` are required.  Slots not given stay
 * NULL.  Returns 0, or -1 with TypeError set.
 */
int kvpy_parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
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

/* The items of iterable o as a new tuple (TypeError `msg` when o is not
 * iterable): what a caller reads while items' __index__ may change o. */
PyObject *kvpy_tuple_of(PyObject *o, const char *msg)
{
    PyObject *seq = PySequence_Fast(o, msg);
    if (!seq)
        return NULL;
    PyObject *t = PySequence_Tuple(seq);
    Py_DECREF(seq);
    return t;
}

/* Argument `what` as a Python int (a new reference; __index__ may run),
 * or NULL with TypeError for anything that is not an integer. */
PyObject *kvpy_index(PyObject *o, const char *what)
{
    if (!PyLong_Check(o) && !PyIndex_Check(o))
        return PyErr_Format(PyExc_TypeError, "%s must be an integer", what);
    return PyNumber_Index(o);
}

/* Integer conversions: NULL (not given) yields the default. */
int kvpy_get_u64(PyObject *o, uint64_t dflt, uint64_t *v, const char *what)
{
    if (!o) {
        *v = dflt;
        return 0;
    }
    PyObject *idx = kvpy_index(o, what);
    if (!idx)
        return -1;
    unsigned long long x = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s out of range", what);
        return -1;
    }
    *v = (uint64_t)x;
    return 0;
}

/* As kvpy_get_u64, and InvalidArgumentError above UINT32_MAX. */
int kvpy_get_u32(PyObject *o, uint32_t dflt, uint32_t *v, const char *what)
{
    uint64_t x;
    if (kvpy_get_u64(o, dflt, &x, what))
        return -1;
    if (x > UINT32_MAX) {
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s out of range", what);
        return -1;
    }
    *v = (uint32_t)x;
    return 0;
}

/* An owner: None (or absent) is KVP_ANON. */
int kvpy_get_owner(PyObject *o, kvp_owner *v)
{
    if (!o || o == Py_None) {
        *v = KVP_ANON;
        return 0;
    }
    return kvpy_get_u64(o, 0, v, "owner");
}

/* Truth of o (NULL: dflt) into *v; 0, or -1 when o's __bool__ raised. */
int kvpy_get_bool(PyObject *o, int dflt, int *v)
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

/* A block id as an int, KVP_NO_BLOCK as None. */
PyObject *kvpy_block_or_none(kvp_block b)
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

/* Look numpy's ndarray type and uint32/int32 dtypes up, once; 1 when
 * found, -1 (for good) when numpy is not importable. */
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
    v->internal = &np_state; /* marks a view made here: kvpy_view_release */
    return 1;
}
#endif

/* PyObject_GetBuffer(o, v, flags) for a C-contiguous buffer of integers,
 * with the numpy fast view when it applies. */
int kvpy_view_get(PyObject *o, Py_buffer *v, int flags)
{
#ifdef KVPY_HAVE_NUMPY
    if (np_view(o, v, (flags & PyBUF_WRITABLE) != 0))
        return 0;
#endif
    return PyObject_GetBuffer(o, v, flags);
}

/* Release a view made by kvpy_view_get (fast view or buffer export). */
void kvpy_view_release(Py_buffer *v)
{
#ifdef KVPY_HAVE_NUMPY
    if (v->internal == &np_state) {
        Py_CLEAR(v->obj);
        return;
    }
#endif
    PyBuffer_Release(v);
}

/* Whether o qualifies for the numpy fast view (always 0 without numpy's
 * headers): what _fast_view reports to the tests. */
static int fast_view(PyObject *o, int writable)
{
#ifdef KVPY_HAVE_NUMPY
    Py_buffer v;
    if (np_view(o, &v, writable)) {
        kvpy_view_release(&v);
        return 1;
    }
#else
    (void)o;
    (void)writable;
#endif
    return 0;
}

/* _fast_view(obj, writable): whether the binding reads obj through its
 * numpy fast view (for tests: the rest of the binding cannot tell). */
PyObject *kvpy_mod_fast_view(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!kvpy_nargs_is(nargs, 2, "_fast_view(obj, writable)"))
        return NULL;
    int writable = PyObject_IsTrue(args[1]);
    if (writable < 0)
        return NULL;
    return PyBool_FromLong(fast_view(args[0], writable));
}

/* Room for n converted values: the inline array, else a heap block
 * (NULL with MemoryError). */
static uint32_t *u32in_room(kvpy_u32in *in, Py_ssize_t n)
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

/* Whether a struct-module integer type char is signed. */
static int is_signed_fmt(char c)
{
    return c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q' || c == 'n';
}

/* Read o as uint32 values into *in (see kvpy_u32in): 0, or -1 with the
 * exception set and nothing held.  Negative or too large values are
 * InvalidArgumentError, non-integers TypeError. */
int kvpy_u32in_get(PyObject *o, kvpy_u32in *in, const char *what)
{
    memset(in, 0, offsetof(kvpy_u32in, small));
    if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyByteArray_Check(o)) {
        if (kvpy_view_get(o, &in->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
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
            kvpy_u32in_release(in);
            return -1;
        }
        in->n = in->view.len / isz;
        if (isz == 4 && ((uintptr_t)in->view.buf & 3u) == 0) {
            in->p = in->view.buf;
            if (is_signed_fmt(c))
                for (Py_ssize_t i = 0; i < in->n; i++)
                    if ((int32_t)in->p[i] < 0) {
                        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s: negative value", what);
                        kvpy_u32in_release(in);
                        return -1;
                    }
            return 0;
        }
        uint32_t *dst = u32in_room(in, in->n);
        if (!dst) {
            kvpy_u32in_release(in);
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
                kvpy_u32in_release(in);
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
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
        kvpy_u32in_release(in);
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
                PyErr_Format(kvpy_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
            } else if (!PyErr_Occurred()) {
                PyErr_Format(kvpy_exc[KVP_EINVAL], "%s: value out of uint32 range", what);
            }
            Py_DECREF(seq);
            kvpy_u32in_release(in);
            return -1;
        }
        dst[i] = (uint32_t)v;
    }
    Py_DECREF(seq);
    in->p = dst;
    in->n = n;
    return 0;
}

/* Release what kvpy_u32in_get holds (nothing after a failed get). */
void kvpy_u32in_release(kvpy_u32in *in)
{
    if (in->has_view)
        kvpy_view_release(&in->view);
    in->has_view = 0;
    PyMem_Free(in->heap);
    in->heap = NULL;
}

/* Export o as a writable output of 4-byte integers; 0, or -1 with
 * TypeError (wrong format, width or alignment) and nothing held. */
int kvpy_u32out_get(PyObject *o, kvpy_u32out *out)
{
    if (kvpy_view_get(o, &out->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    char c = int_format(out->view.format);
    if (!c || out->view.itemsize != 4 || ((uintptr_t)out->view.buf & 3u)) {
        kvpy_view_release(&out->view);
        PyErr_SetString(PyExc_TypeError,
                        "out: need a writable, aligned, C-contiguous buffer of 4-byte integers "
                        "(array('I'), numpy uint32)");
        return -1;
    }
    out->p = out->view.buf;
    out->cap = out->view.len / 4;
    return 0;
}

/* A new list of the n values at p (NULL with the exception set). */
PyObject *kvpy_u32_list(const uint32_t *p, size_t n)
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

/* Release what kvpy_owners_get holds (nothing after a failed get). */
void kvpy_owners_release(kvpy_owners *in)
{
    if (in->has_view)
        PyBuffer_Release(&in->view);
    in->has_view = 0;
    PyMem_Free(in->heap);
    in->heap = NULL;
}

/* Owners in: a C-contiguous, aligned buffer of 8-byte integers is read in
 * place (a negative value is refused); any other iterable is converted
 * item by item, None standing for KVP_ANON.  On failure nothing is held. */
int kvpy_owners_get(PyObject *o, kvpy_owners *in, const char *what)
{
    memset(in, 0, offsetof(kvpy_owners, small));
    if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyByteArray_Check(o)) {
        if (PyObject_GetBuffer(o, &in->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: need a C-contiguous buffer of integers", what);
            return -1;
        }
        in->has_view = 1;
        char c = int_format(in->view.format);
        if (!c || in->view.itemsize != 8 || ((uintptr_t)in->view.buf & 7u)) {
            PyErr_Format(PyExc_TypeError,
                         "%s: need an aligned buffer of 8-byte integers (numpy uint64/int64) "
                         "or a sequence of ints and None",
                         what);
            kvpy_owners_release(in);
            return -1;
        }
        in->p = in->view.buf;
        in->n = in->view.len / 8;
        for (Py_ssize_t i = 0; is_signed_fmt(c) && i < in->n; i++)
            if ((int64_t)in->p[i] < 0) {
                PyErr_Format(kvpy_exc[KVP_EINVAL], "%s: negative value", what);
                kvpy_owners_release(in);
                return -1;
            }
        return 0;
    }
    /* A tuple of the items: an item's __index__ may change a list. */
    PyObject *seq = PySequence_Tuple(o);
    if (!seq)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    kvp_owner *dst = in->small;
    if (n > (Py_ssize_t)(sizeof in->small / sizeof in->small[0])) {
        dst = in->heap = PyMem_Malloc((size_t)n * sizeof(kvp_owner));
        if (!dst) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (kvpy_get_owner(PyTuple_GET_ITEM(seq, i), &dst[i])) {
            Py_DECREF(seq);
            kvpy_owners_release(in);
            return -1;
        }
    Py_DECREF(seq);
    in->p = dst;
    in->n = n;
    return 0;
}

/* A 32-byte hash argument (any bytes-like object of exactly 32 bytes). */
int kvpy_get_hash(PyObject *o, kvp_hash *h, const char *what)
{
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_SIMPLE) < 0)
        return -1;
    if (v.len != 32) {
        PyBuffer_Release(&v);
        PyErr_Format(kvpy_exc[KVP_EINVAL], "%s must be 32 bytes", what);
        return -1;
    }
    memcpy(h->b, v.buf, 32);
    PyBuffer_Release(&v);
    return 0;
}

/* A 32-byte hash as bytes. */
PyObject *kvpy_hash_bytes(const kvp_hash *h)
{
    return PyBytes_FromStringAndSize((const char *)h->b, 32);
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

/* hash_external(hash32): the 64-bit form of a hash that events carry. */
PyObject *kvpy_mod_hash_external(PyObject *m, PyObject *arg)
{
    (void)m;
    kvp_hash h;
    if (kvpy_get_hash(arg, &h, "hash"))
        return NULL;
    return PyLong_FromUnsignedLongLong(kvp_hash_external(&h));
}

/* ------------------------------------------------------------------------ */
/* Extra keys (dict in, kvp_extra_keys out)                                  */
/* ------------------------------------------------------------------------ */

/* Release what kvpy_extra_get holds; safe to call twice. */
void kvpy_extra_release(kvpy_extra *e)
{
    PyMem_Free(e->mm);
    e->mm = NULL;
    Py_CLEAR(e->copy);
    if (e->has_salt)
        PyBuffer_Release(&e->salt);
    e->has_salt = 0;
}

/* extra: None or a dict with optional keys lora_id (int), lora_name (str),
 * mm (iterable of (hash32, start, end)), salt (bytes-like).  The keys are
 * read from a copy of the dict, and mm from a tuple of its items, held
 * until kvpy_extra_release: an item's __index__ may change the caller's
 * dict or list, not what is read, and lora_name points into a str the
 * copy keeps alive. */
int kvpy_extra_get(PyObject *o, kvpy_extra *e)
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
    e->copy = PyDict_Copy(o);
    if (!e->copy)
        return -1;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(e->copy, &pos, &key, &val)) {
        if (!PyUnicode_Check(key))
            goto badkey;
        if (!PyUnicode_CompareWithASCIIString(key, "lora_id")) {
            if (val == Py_None)
                continue;
            e->k.has_lora = 1;
            if (kvpy_get_u64(val, 0, &e->k.lora_id, "lora_id"))
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
            PyObject *seq = kvpy_tuple_of(val, "mm must be a sequence of (hash, start, end)");
            if (!seq)
                goto fail;
            Py_ssize_t n = PyTuple_GET_SIZE(seq);
            e->mm = PyMem_Calloc(n ? (size_t)n : 1, sizeof(kvp_mm_span));
            if (!e->mm) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                goto fail;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *t = PyTuple_GET_ITEM(seq, i);
                if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
                    Py_DECREF(seq);
                    PyErr_SetString(PyExc_TypeError, "mm items must be (hash, start, end)");
                    goto fail;
                }
                if (kvpy_get_hash(PyTuple_GET_ITEM(t, 0), &e->mm[i].hash, "mm hash") ||
                    kvpy_get_u64(PyTuple_GET_ITEM(t, 1), 0, &e->mm[i].start, "mm start") ||
                    kvpy_get_u64(PyTuple_GET_ITEM(t, 2), 0, &e->mm[i].end, "mm end")) {
                    Py_DECREF(seq);
                    goto fail;
                }
            }
            e->k.mm = e->mm;
            e->k.n_mm = (size_t)n;
            Py_DECREF(seq); /* its items' values are copied into e->mm */
        } else {
            goto badkey;
        }
    }
    return 0;
badkey:
    PyErr_Format(PyExc_TypeError, "extra: unknown key %R (lora_id, lora_name, mm, salt)", key);
fail:
    kvpy_extra_release(e);
    return -1;
}

/* ---- Small results shared by the types --------------------------------- */

/* __enter__ of the context managers: the object itself. */
PyObject *kvpy_return_self(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

/* A getter of the uint32_t field at byte offset `offset` of the object. */
PyObject *kvpy_get_u32_field(PyObject *self, void *offset)
{
    uint32_t v;
    memcpy(&v, (const char *)self + (size_t)offset, sizeof v);
    return PyLong_FromUnsignedLong(v);
}

/* A getter of the int flag at byte offset `offset` of the object, as a bool. */
PyObject *kvpy_get_bool_field(PyObject *self, void *offset)
{
    int v;
    memcpy(&v, (const char *)self + (size_t)offset, sizeof v);
    return PyBool_FromLong(v);
}
