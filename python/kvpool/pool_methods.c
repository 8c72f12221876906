/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_methods.c — the Pool type's method table, joined at module init
 * from each file's rows, and the calls on the whole pool that reach every
 * part of it: close and clear (which end the pool's Sequences), retire_top,
 * __enter__ and __exit__.
 *
 * Invariants: close, clear and retire_top refuse with BusyError, changing
 * nothing, while a zero-copy block table of one of the pool's sequences is
 * exported or a GIL-free call is in flight; close is idempotent.  The table
 * is joined once, before the type is readied.
 *
 * Why here: the table names functions of every pool file and of
 * sequence.c, so this file sits above them all, and none of them, pool.c
 * or the drop-ins reaches it.
 */
#include "kvpy.h"

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

KVPY_EV_NOARGS(Pool_clear)
KVPY_EV_NOARGS(Pool_retire_top)

/* This file's rows of the Pool's method table. */
static PyMethodDef own_methods[] = {
    {"close", (PyCFunction)Pool_close, METH_NOARGS, "Destroy the pool now (idempotent)."},
    {"__enter__", (PyCFunction)kvpy_return_self, METH_NOARGS, NULL},
    {"__exit__", KVPY_FC(Pool_exit), METH_FASTCALL, NULL},
    {"clear", (PyCFunction)Pool_clear_ev, METH_NOARGS,
     "Return to the just-created state (kvp_pool_clear); every Sequence becomes invalid."},
    {"retire_top", (PyCFunction)Pool_retire_top_ev, METH_NOARGS,
     "retire_top() -> (retired, moved_to or None)"},
    {NULL, NULL, 0, NULL}};

/* The Pool's method table: each file's rows, in one array (a type reads
 * one NULL-terminated table).  Set once on kvpy_pool_type, before
 * PyType_Ready; the array lives as long as the type.  0, or -1 with
 * MemoryError. */
int kvpy_pool_methods_init(void)
{
    PyMethodDef *const parts[] = {kvpy_pool_block_methods, own_methods, kvpy_pool_batch_methods,
                                  kvpy_pool_stats_methods, kvpy_pool_seq_methods};
    size_t n = 0, k = 0;
    if (kvpy_pool_type.tp_methods)
        return 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const PyMethodDef *d = parts[i]; d->ml_name; d++)
            n++;
    PyMethodDef *all = PyMem_RawCalloc(n + 1, sizeof *all); /* zeroed: the end row */
    if (!all) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const PyMethodDef *d = parts[i]; d->ml_name; d++)
            all[k++] = *d;
    kvpy_pool_type.tp_methods = all;
    return 0;
}
