/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errors.c — the exception classes of kvpool._kvpool, the one place a
 * kvp_status becomes a Python exception, and the module function strerror.
 *
 * Invariants: every kvp_status but KVP_OK has one class, kvpool.XxxError,
 * a subclass of kvpool.Error carrying `.status`; the classes that also mean
 * a Python built-in error derive from it too (InvalidArgumentError is a
 * ValueError, NoMemoryError a MemoryError, RangeError an IndexError), so
 * callers may catch either.  kvpy_raise is the one place a status becomes an
 * exception: its message is the library's, except for KVP_EBUSY (below).
 *
 * Why here: every other file of the binding raises through these, so this
 * file is the bottom of the binding: it calls none of the others, only
 * CPython and the library's kvp_strerror.
 */
#include "kvpy.h"

#include <stdio.h>

PyObject *kvpy_error;
PyObject *kvpy_exc[KVP_STATUS_COUNT]; /* indexed by kvp_status; [KVP_OK] unused */

/* The message for `st`: the library's, except that KVP_EBUSY drops its
 * "or called from a callback": the binding never calls the library from
 * inside a callback (see evict.c), so from Python it always means that
 * the block, owner or sequence named is in use. */
static const char *status_message(kvp_status st)
{
    return st == KVP_EBUSY ? "busy: in use" : kvp_strerror((int)st);
}

/* Raise the exception for `st` with its message. */
PyObject *kvpy_raise(kvp_status st)
{
    PyObject *cls = ((int)st > 0 && (int)st < KVP_STATUS_COUNT) ? kvpy_exc[st] : kvpy_error;
    PyErr_SetString(cls, status_message(st));
    return NULL;
}

/* Raise the exception for `st` with a message of our own (the status's
 * message is appended). */
PyObject *kvpy_raise_msg(kvp_status st, const char *msg)
{
    PyObject *cls = ((int)st > 0 && (int)st < KVP_STATUS_COUNT) ? kvpy_exc[st] : kvpy_error;
    PyErr_Format(cls, "%s (%s)", msg, status_message(st));
    return NULL;
}

/* strerror(status): the library's message for a status code. */
PyObject *kvpy_mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(kvp_strerror((int)v));
}

/* Create kvpool.<name> for `status` (a subclass of kvpool.Error, and of
 * extra_base when given), record it in kvpy_exc and add it to the module. */
static int add_exc(PyObject *m, int status, const char *name, PyObject *extra_base,
                   const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "kvpool.%s", name);
    PyObject *bases = extra_base ? PyTuple_Pack(2, kvpy_error, extra_base) : NULL;
    PyObject *cls = PyErr_NewExceptionWithDoc(full, doc, bases ? bases : kvpy_error, NULL);
    Py_XDECREF(bases);
    if (!cls)
        return -1;
    PyObject *st = PyLong_FromLong(status);
    if (!st || PyObject_SetAttrString(cls, "status", st) < 0) {
        Py_XDECREF(st);
        return -1;
    }
    Py_DECREF(st);
    kvpy_exc[status] = cls;
    Py_INCREF(cls);
    return PyModule_AddObject(m, name, cls);
}

/* The built-in exception a status's class also derives from, or NULL. */
static PyObject *exc_base(int status)
{
    switch (status) {
    case KVP_EINVAL:
        return PyExc_ValueError;
    case KVP_ENOMEM:
        return PyExc_MemoryError;
    case KVP_ERANGE:
        return PyExc_IndexError;
    default:
        return NULL;
    }
}

/* The classes made and added to the module m: kvpool.Error, then one
 * class per status.  0, or -1 with the exception set. */
int kvpy_errors_init(PyObject *m)
{
    kvpy_error = PyErr_NewExceptionWithDoc(
        "kvpool.Error", "Base class of every error kvpool raises; .status is the kvp_status.",
        NULL, NULL);
    if (!kvpy_error)
        return -1;
    Py_INCREF(kvpy_error);
    if (PyModule_AddObject(m, "Error", kvpy_error) < 0)
        return -1;
    /* one class per code but KVP_OK, named Word + "Error" from the
     * library's KVP_STATUS_MAP, documented by the code's name */
#define ADD_EXC(name, value, word, msg)                                                    \
    if (value != KVP_OK && add_exc(m, value, #word "Error", exc_base(value), "KVP_" #name)) \
        return -1;
    KVP_STATUS_MAP(ADD_EXC)
#undef ADD_EXC
    return 0;
}
