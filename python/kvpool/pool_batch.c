/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_batch.c — the Pool's calls over many blocks or tokens: take_each,
 * free, owner_blocks, the *_many calls, hashing (hash_block, hash_tokens)
 * and the verified publish and lookup; integer buffers in and out.
 *
 * Invariants: a refused batch changes nothing: the batches the library
 * lacks are checked whole (check_blocks and the like) before the first
 * per-block call; take_each alone keeps the takes before a failed one, and
 * names them on the exception.  The pool is checked open after the
 * conversions, which may run Python code; every call that can evict
 * returns through kvpy_ev_deliver.
 *
 * Why built this way: one C call per batch, reading ids straight out of
 * the caller's buffers, is what makes a batch cheaper than its blocks'
 * calls one by one.
 */
#include "kvpy.h"

/* kvpy_u32in_get, then the check that the pool is still open (converting
 * a sequence may run Python code that closed it): 0, or -1 with the
 * exception set and nothing held. */
static int pool_u32in(PoolObject *self, PyObject *o, kvpy_u32in *in, const char *what)
{
    if (kvpy_u32in_get(o, in, what))
        return -1;
    if (kvpy_pool_ok(self))
        return 0;
    kvpy_u32in_release(in);
    return -1;
}

/* Raise the exception of `st` for a batch whose first `taken` takes stand:
 * it carries `taken` (their count) and `blocks` (their ids), so the caller
 * can free them.  Should attaching them fail, the exception of `st` is
 * raised without them. */
static void raise_taken(kvp_status st, const uint32_t *ids, size_t taken)
{
    PyObject *et, *ev, *tb;
    kvpy_raise(st);
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *n = PyLong_FromSize_t(taken);
    PyObject *l = n ? kvpy_u32_list(ids, taken) : NULL;
    if (!l || PyObject_SetAttrString(ev, "taken", n) < 0 ||
        PyObject_SetAttrString(ev, "blocks", l) < 0)
        PyErr_Clear();
    Py_XDECREF(n);
    Py_XDECREF(l);
    PyErr_Restore(et, ev, tb);
}

/*
 * take_each(owners, out=None, hints=None, stream=0): one block for each
 * owner, in order, in one library call (kvp_take_each): a decode step's
 * takes.  Returns the list of ids, or with `out` (a uint32 buffer of at
 * least len(owners)) the count written.  `hints`, when given, is the
 * caller's uint32 buffer of one hint per owner, kept from step to step
 * (start it at HINT_NONE; any value is safe).  The takes run in order; on
 * an error the ones before the failed take stand (see raise_taken).
 */
static PyObject *Pool_take_each(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const kw[] = {"owners", "out", "hints", "stream", NULL};
    PyObject *o[4];
    uint32_t stream;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("take_each", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u32(o[3], 0, &stream, "stream"))
        return NULL;
    kvpy_owners own;
    if (kvpy_owners_get(o[0], &own, "owners"))
        return NULL;
    kvpy_u32out out, hints;
    int got_out = 0, got_hints = 0;
    uint32_t small[64], *ids = small, *heap = NULL;
    PyObject *res = NULL;
    size_t n = (size_t)own.n, taken = 0;
    if (o[1] && o[1] != Py_None) {
        if (kvpy_u32out_get(o[1], &out))
            goto done;
        got_out = 1;
        if ((size_t)out.cap < n) {
            kvpy_raise(KVP_ESPACE);
            goto done;
        }
        ids = out.p;
    } else if (n > sizeof small / sizeof small[0]) {
        ids = heap = PyMem_Malloc(n * sizeof(uint32_t));
        if (!ids) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (o[2] && o[2] != Py_None) {
        if (kvpy_u32out_get(o[2], &hints))
            goto done;
        got_hints = 1;
        if ((size_t)hints.cap < n) {
            PyErr_SetString(kvpy_exc[KVP_EINVAL], "hints must hold one entry per owner");
            goto done;
        }
    }
    if (!kvpy_pool_ok(self)) /* a conversion may have run Python code that closed it */
        goto done;
    kvp_status st = kvp_take_each(self->pool, (kvp_stream)stream, own.p,
                                  got_hints ? hints.p : NULL, NULL, n, ids, &taken);
    if (st)
        raise_taken(st, ids, taken);
    else
        res = got_out ? PyLong_FromSize_t(taken) : kvpy_u32_list(ids, taken);
done:
    if (got_hints)
        kvpy_view_release(&hints.view);
    if (got_out)
        kvpy_view_release(&out.view);
    PyMem_Free(heap);
    kvpy_owners_release(&own);
    return res;
}

/* The arguments (ids, owner=None) of the calls that name blocks for an owner. */
static int ids_owner_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **ids, kvp_owner *owner)
{
    static const char *const kw[] = {"ids", "owner", NULL};
    PyObject *o[2];
    if (kvpy_parse_args(name, args, nargs, kwnames, kw, 1, o) || kvpy_get_owner(o[1], owner))
        return -1;
    *ids = o[0];
    return 0;
}

/* free(ids, owner=None): one reference dropped per id (an int, buffer or
 * list), all or nothing. */
static PyObject *Pool_free(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (ids_owner_args("free", args, nargs, kwnames, &ids, &owner))
        return NULL;
    kvp_status st;
    if (PyLong_Check(ids)) {
        uint32_t id;
        if (kvpy_get_u32(ids, 0, &id, "id"))
            return NULL;
        KVPY_POOL_CHECK(self); /* the owner's conversion may have closed it */
        st = kvp_free(self->pool, &id, 1, owner);
    } else {
        kvpy_u32in in;
        if (pool_u32in(self, ids, &in, "ids"))
            return NULL;
        st = kvp_free(self->pool, in.p, (size_t)in.n, owner);
        kvpy_u32in_release(&in);
    }
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* owner_blocks(owner, out=None): the owner's blocks as a list, or the
 * count written into out (SpaceError when out is too small). */
static PyObject *Pool_owner_blocks(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const kw[] = {"owner", "out", NULL};
    PyObject *o[2];
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("owner_blocks", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[0], 0, &owner, "owner"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversion may have run Python code that closed it */
    size_t n = 0;
    kvp_status st;
    if (o[1] && o[1] != Py_None) {
        kvpy_u32out out;
        if (kvpy_u32out_get(o[1], &out))
            return NULL;
        st = kvp_owner_blocks(self->pool, owner, out.p, (size_t)out.cap, &n);
        kvpy_view_release(&out.view);
        if (st)
            return kvpy_raise(st);
        return PyLong_FromSize_t(n);
    }
    st = kvp_owner_blocks(self->pool, owner, NULL, 0, &n);
    if (st && st != KVP_ESPACE)
        return kvpy_raise(st);
    if (n == 0)
        return PyList_New(0);
    uint32_t *ids = PyMem_Malloc(n * sizeof(uint32_t));
    if (!ids)
        return PyErr_NoMemory();
    st = kvp_owner_blocks(self->pool, owner, ids, n, &n);
    PyObject *r = st ? kvpy_raise(st) : kvpy_u32_list(ids, n);
    PyMem_Free(ids);
    return r;
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

/* set_fill_many(ids, fills): all checked first, then set; a refused batch
 * changes nothing. */
static PyObject *Pool_set_fill_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 2, "set_fill_many(ids, fills)"))
        return NULL;
    kvpy_u32in ids, fills;
    if (kvpy_u32in_get(args[0], &ids, "ids"))
        return NULL;
    if (pool_u32in(self, args[1], &fills, "fills")) {
        kvpy_u32in_release(&ids);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (ids.n != fills.n) {
        kvpy_u32in_release(&ids);
        kvpy_u32in_release(&fills);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "ids and fills differ in length");
        return NULL;
    }
    st = check_blocks(self, ids.p, ids.n, 1, 0);
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        if (fills.p[i] > self->block_size)
            st = KVP_EINVAL;
    for (Py_ssize_t i = 0; !st && i < ids.n; i++)
        st = kvp_set_fill(self->pool, ids.p[i], fills.p[i]);
    kvpy_u32in_release(&ids);
    kvpy_u32in_release(&fills);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* claim_many(ids, owner=None): all checked first, then claimed. */
static PyObject *Pool_claim_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    PyObject *ids;
    kvp_owner owner;
    KVPY_POOL_CHECK(self);
    if (ids_owner_args("claim_many", args, nargs, kwnames, &ids, &owner))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, ids, &in, "ids"))
        return NULL;
    kvp_status st = check_blocks(self, in.p, in.n, 0, 1);
    for (Py_ssize_t i = 0; !st && i < in.n; i++)
        st = kvp_claim(self->pool, in.p[i], owner);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* publish_many(ids, hashes): hashes is a bytes-like object of 32 x len(ids). */
static PyObject *Pool_publish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 2, "publish_many(ids, hashes)"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[0], &in, "ids"))
        return NULL;
    Py_buffer hv;
    if (PyObject_GetBuffer(args[1], &hv, PyBUF_SIMPLE) < 0) {
        kvpy_u32in_release(&in);
        return NULL;
    }
    kvp_status st = KVP_OK;
    if (hv.len != in.n * 32) {
        PyBuffer_Release(&hv);
        kvpy_u32in_release(&in);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "hashes must hold 32 bytes per id");
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
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
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
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("lookup_many", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u32(o[2], 0, &stream, "stream"))
        return NULL;
    KVPY_POOL_CHECK(self); /* the conversion may have run Python code that closed it */
    Py_buffer hv;
    if (PyObject_GetBuffer(o[0], &hv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (hv.len % 32) {
        PyBuffer_Release(&hv);
        PyErr_SetString(kvpy_exc[KVP_EINVAL], "hashes must be a multiple of 32 bytes");
        return NULL;
    }
    Py_ssize_t n = hv.len / 32;
    kvpy_u32out out = {0};
    int have_out = o[1] && o[1] != Py_None;
    if (have_out) {
        if (kvpy_u32out_get(o[1], &out)) {
            PyBuffer_Release(&hv);
            return NULL;
        }
        if (out.cap < n) {
            kvpy_view_release(&out.view);
            PyBuffer_Release(&hv);
            return kvpy_raise(KVP_ESPACE);
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
            PyObject *v = kvpy_block_or_none(id);
            if (!v) {
                err = KVP_ENOMEM;
                break;
            }
            PyList_SET_ITEM(list, i, v);
        }
    }
    PyBuffer_Release(&hv);
    if (have_out)
        kvpy_view_release(&out.view);
    if (err) {
        Py_XDECREF(list);
        return PyErr_Occurred() ? NULL : kvpy_raise(err);
    }
    if (have_out)
        return PyLong_FromSsize_t(prefix);
    return Py_BuildValue("(Nn)", list, prefix);
}

/* unpublish_many(ids): all checked first (published, no repeats), then
 * unpublished. */
static PyObject *Pool_unpublish_many(PoolObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 1, "unpublish_many(ids)"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[0], &in, "ids"))
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
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
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
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("hash_block", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[2], 0, &start, "start"))
        return NULL;
    int has_parent = o[1] && o[1] != Py_None;
    if (has_parent && kvpy_get_hash(o[1], &parent, "parent"))
        return NULL;
    kvpy_extra ex;
    if (kvpy_extra_get(o[3], &ex))
        return NULL;
    kvpy_u32in in;
    if (kvpy_u32in_get(o[0], &in, "tokens")) {
        kvpy_extra_release(&ex);
        return NULL;
    }
    kvp_pool *p = kvpy_pool_busy_enter(self);
    if (p) {
        Py_BEGIN_ALLOW_THREADS
        st = kvp_hash_block(p, has_parent ? &parent : NULL, in.p, (size_t)in.n, start,
                            ex.present ? &ex.k : NULL, &out);
        Py_END_ALLOW_THREADS
        kvpy_pool_busy_leave(self);
    }
    kvpy_u32in_release(&in);
    kvpy_extra_release(&ex);
    if (!p)
        return NULL;
    if (st)
        return kvpy_raise(st);
    return kvpy_hash_bytes(&out);
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
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("hash_tokens", args, nargs, kwnames, kw, 1, o) ||
        kvpy_get_u64(o[3], 0, &known, "known"))
        return NULL;
    kvpy_extra ex;
    if (kvpy_extra_get(o[1], &ex))
        return NULL;
    kvpy_u32in in;
    if (kvpy_u32in_get(o[0], &in, "tokens")) {
        kvpy_extra_release(&ex);
        return NULL;
    }
    size_t nb = self->block_size ? (size_t)in.n / self->block_size : 0;
    PyObject *res = NULL;
    if (!kvpy_pool_ok(self)) /* the conversion may have run Python code that closed it */
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
            PyErr_SetString(kvpy_exc[KVP_EINVAL], "known needs an out buffer holding them");
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
        kvp_pool *p = kvpy_pool_busy_enter(self);
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
        kvpy_pool_busy_leave(self);
    } else {
        st = kvp_hash_tokens(self->pool, in.p, (size_t)in.n, ex.present ? &ex.k : NULL, dst, cap,
                             (size_t)known, &n_out);
    }
    if (have_out)
        PyBuffer_Release(&ov);
    if (st) {
        Py_CLEAR(res);
        kvpy_raise(st);
    } else if (have_out) {
        res = PyLong_FromSize_t(n_out);
    }
done:
    kvpy_u32in_release(&in);
    kvpy_extra_release(&ex);
    return res;
}

/* publish_verified(id, hash, parent or None, tokens). */
static PyObject *Pool_publish_verified(PoolObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    uint32_t id, parent = KVP_NO_BLOCK;
    kvp_hash h;
    KVPY_POOL_CHECK(self);
    if (!kvpy_nargs_is(nargs, 4, "publish_verified(id, hash, parent, tokens)"))
        return NULL;
    if (kvpy_get_u32(args[0], 0, &id, "id") || kvpy_get_hash(args[1], &h, "hash") ||
        (args[2] != Py_None && kvpy_get_u32(args[2], 0, &parent, "parent")))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, args[3], &in, "tokens"))
        return NULL;
    kvp_status st = kvp_publish_verified(self->pool, id, &h, parent, in.p, (size_t)in.n);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    Py_RETURN_NONE;
}

/* lookup_verified(hash, parent or None, tokens, stream=0) -> id. */
static PyObject *Pool_lookup_verified(PoolObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    static const char *const kw[] = {"hash", "parent", "tokens", "stream", NULL};
    PyObject *o[4];
    uint32_t parent = KVP_NO_BLOCK, stream;
    kvp_hash h;
    KVPY_POOL_CHECK(self);
    if (kvpy_parse_args("lookup_verified", args, nargs, kwnames, kw, 3, o) ||
        kvpy_get_hash(o[0], &h, "hash") || (o[1] != Py_None && kvpy_get_u32(o[1], 0, &parent, "parent")) ||
        kvpy_get_u32(o[3], 0, &stream, "stream"))
        return NULL;
    kvpy_u32in in;
    if (pool_u32in(self, o[2], &in, "tokens"))
        return NULL;
    kvp_block id;
    kvp_status st =
        kvp_lookup_verified(self->pool, (kvp_stream)stream, &h, parent, in.p, (size_t)in.n, &id);
    kvpy_u32in_release(&in);
    if (st)
        return kvpy_raise(st);
    return PyLong_FromUnsignedLong(id);
}

KVPY_EV_FCK(Pool_take_each)
KVPY_EV_FCK(Pool_free)
KVPY_EV_FCK(Pool_claim_many)
KVPY_EV_FCK(Pool_lookup_verified)
KVPY_EV_FC(Pool_publish_many)
KVPY_EV_FC(Pool_unpublish_many)
KVPY_EV_FC(Pool_publish_verified)

/* pool_batch.c's rows of the Pool's method table. */
PyMethodDef kvpy_pool_batch_methods[] = {
    {"take_each", KVPY_FC(Pool_take_each_ev), KVPY_FCK,
     "take_each(owners, out=None, hints=None, stream=0)\n\nOne block for each owner (ints, "
     "None = anonymous, or a uint64 buffer), in order, in one call.  Returns a list of ids, or "
     "with `out` the count written.  `hints`: the caller's uint32 buffer of one hint per owner, "
     "kept across calls (start at HINT_NONE).  On an error the takes before the failed one "
     "stand: the exception's `taken` and `blocks` name them."},
    {"free", KVPY_FC(Pool_free_ev), KVPY_FCK,
     "free(ids, owner=None)\n\nDrop one reference per id (an int, buffer or list), in order: "
     "the first given is the first reused.  All or nothing."},
    {"owner_blocks", KVPY_FC(Pool_owner_blocks), KVPY_FCK, "owner_blocks(owner, out=None)"},
    {"set_fill_many", KVPY_FC(Pool_set_fill_many), METH_FASTCALL, "set_fill_many(ids, fills)"},
    {"claim_many", KVPY_FC(Pool_claim_many_ev), KVPY_FCK, "claim_many(ids, owner=None)"},
    {"publish_many", KVPY_FC(Pool_publish_many_ev), METH_FASTCALL,
     "publish_many(ids, hashes): hashes holds 32 bytes per id"},
    {"lookup_many", KVPY_FC(Pool_lookup_many), KVPY_FCK,
     "lookup_many(hashes, out=None, stream=0)\n\nWith out: fills out[i] (NO_BLOCK on a miss) "
     "and returns the number of leading hits.  Without: (list of id or None, leading hits)."},
    {"unpublish_many", KVPY_FC(Pool_unpublish_many_ev), METH_FASTCALL, "unpublish_many(ids)"},
    {"hash_block", KVPY_FC(Pool_hash_block), KVPY_FCK,
     "hash_block(tokens, parent=None, start=0, extra=None) -> 32 bytes"},
    {"hash_tokens", KVPY_FC(Pool_hash_tokens), KVPY_FCK,
     "hash_tokens(tokens, extra=None, out=None, known=0) -> bytes (32 per full block), or "
     "the block count written into `out`"},
    {"publish_verified", KVPY_FC(Pool_publish_verified_ev), METH_FASTCALL,
     "publish_verified(id, hash, parent or None, tokens)"},
    {"lookup_verified", KVPY_FC(Pool_lookup_verified_ev), KVPY_FCK,
     "lookup_verified(hash, parent or None, tokens, stream=0) -> id"},
    {NULL, NULL, 0, NULL}};
