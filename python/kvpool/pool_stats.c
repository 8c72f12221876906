/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_stats.c — what a Pool reports: statistics as dicts (kvpy_stats_dict
 * also serves pool_block.c's stats()), their history, the Prometheus and
 * JSON text, the KV events taken, and the invariant check.
 *
 * Invariants: no call here changes a block; events_take empties the
 * library's event queue and nothing else.  A text or list is returned
 * whole, or NULL with the exception set and nothing held.
 *
 * Why built this way: these are read at scrape or debug time, not per
 * block, so each converts the library's record field by field.
 */
#include "kvpy.h"

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
PyObject *kvpy_stats_dict(const kvp_stats *s)
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
        PyObject *d = kvpy_stats_dict(&h[i]);
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

/* pool_stats.c's rows of the Pool's method table. */
PyMethodDef kvpy_pool_stats_methods[] = {
    {"events_take", (PyCFunction)Pool_events_take, METH_NOARGS,
     "events_take() -> ([(kind, hashes, parent, tokens, block_size, lora_name, mm, medium)], "
     "dropped)"},
    {"stats_history", (PyCFunction)Pool_stats_history, METH_NOARGS,
     "stats_history() -> list of dicts, oldest first"},
    {"prometheus", KVPY_FC(Pool_prometheus), KVPY_FCK, "prometheus(prefix=None) -> str"},
    {"json", (PyCFunction)Pool_json, METH_NOARGS, "json() -> str"},
    {"check", (PyCFunction)Pool_check, METH_NOARGS, "check() (CorruptError on a broken invariant)"},
    {NULL, NULL, 0, NULL}};
