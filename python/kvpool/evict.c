/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c — the eviction queue of a Pool object and its delivery to the
 * Python callable on_evict.
 *
 * What it owns: kvpy_evict_trampoline (the library's on_evict, which only
 * queues) and kvpy_ev_deliver, the tail every evicting method ends with
 * (which calls on_evict for each queued eviction once no library call is
 * in progress).
 *
 * Why: the library calls its eviction callback inside the call that
 * evicted, with the pool's lock held (thread-safe pools) and with calls back
 * into the pool refused.  Python run there could not query the pool, could
 * let `close()` free the pool under the library, and could deadlock (a
 * thread waiting for the GIL while holding the pool lock, against a thread
 * holding the GIL and waiting for the lock).  So the trampoline runs no
 * Python: it appends (hash, block) to the pool object's
 * queue, and every method that can evict delivers the queue (kvpy_ev_deliver)
 * after its library calls have returned, before it returns to Python.
 *
 * Invariant: the trampoline only runs on a thread holding the GIL, because
 * the binding keeps the GIL around every library call that can evict on a
 * pool with on_evict (Seq_admit keeps it there; hashing and creation evict
 * nothing).  So the queue needs no lock, and no thread ever waits for the
 * GIL while it holds the pool's lock.  The queue only grows (doubling) and
 * is freed with the object: no allocation per call in steady state.
 */
#include "kvpy.h"

typedef struct kvpy_evrec {
    kvp_hash hash;
    kvp_block block;
    int has_hash; /* 0: the whole index was cleared */
} kvpy_evrec;

/* Queue one eviction (h NULL: the whole index cleared) on the pool object
 * `user`; runs no Python and never blocks.  When the queue cannot grow the
 * eviction is counted as lost and reported at delivery. */
void kvpy_evict_trampoline(void *user, const kvp_hash *h, kvp_block b)
{
    PoolObject *self = user;
    if (self->ev_n == self->ev_cap) {
        uint32_t cap = self->ev_cap ? 2 * self->ev_cap : 16;
        kvpy_evrec *q = cap > self->ev_cap ? PyMem_RawRealloc(self->evq, (size_t)cap * sizeof *q)
                                      : NULL;
        if (!q) {
            self->ev_lost++; /* reported as MemoryError at delivery */
            return;
        }
        self->evq = q;
        self->ev_cap = cap;
    }
    kvpy_evrec *e = &self->evq[self->ev_n++];
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
        kvpy_evrec e = self->evq[self->ev_head++];
        if (!self->on_evict)
            continue;
        PyObject *cb = self->on_evict;
        Py_INCREF(cb);
        PyObject *hb = e.has_hash ? kvpy_hash_bytes(&e.hash) : (Py_INCREF(Py_None), Py_None);
        PyObject *bb = hb ? kvpy_block_or_none(e.block) : NULL;
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

/* The tail of every method that can evict: a compare when nothing is
 * queued, else ev_deliver_queued; returns r unchanged. */
PyObject *kvpy_ev_deliver(PoolObject *self, PyObject *r)
{
    if (self->ev_head == self->ev_n && !self->ev_lost)
        return r;
    return ev_deliver_queued(self, r);
}
