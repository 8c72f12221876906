/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mlx.c — the hashing hot path of the vllm-mlx drop-in
 * (kvpool.compat.vllm_mlx): one block's chained content hash and its legacy
 * string hash, byte-identical to vllm-mlx's own Python functions; the
 * two per-block loops of its manager that hash (get_computed_blocks' walk,
 * cache_full_blocks' publishing), each one call per request; and the
 * per-block calls of allocate_block and add_block_to_table (mlx_take,
 * mlx_add), one call per block.
 *
 * vllm-mlx hashes a block as SHA-256(parent or b"vllm-mlx-root" ||
 * str(tuple(tokens)).encode()), and its legacy hash as the first 16 hex
 * digits of SHA-256(bytes(t & 0xFF for t in tokens)).  Both are computed
 * here from the token list in place (no slice, no tuple, no str object).
 *
 * Invariant: the result equals the Python expressions above, or the call
 * returns None and the caller computes them in Python.  It returns None for
 * any input whose text it does not format itself: a token that is not an
 * exact int or does not fit in 64 bits, or token_ids not a list.
 *
 * Why here: the manager hashes every block of every prompt (the original
 * does it in Python too); in Python this is most of a request's time.
 * SHA-256 is OpenSSL's, the library the kvpool core already links.
 */
#include "kvpy.h"

#include <openssl/evp.h>
#include <time.h>

static const char mlx_root[] = "vllm-mlx-root";

#define MLX_DIGEST 32


/* The two-digit decimal texts "00".."99", for put_ll. */
static const char two_digits[201] = "0001020304050607080910111213141516171819"
                                    "2021222324252627282930313233343536373839"
                                    "4041424344454647484950515253545556575859"
                                    "6061626364656667686970717273747576777879"
                                    "8081828384858687888990919293949596979899";

/* Append the decimal text of v to p; returns the end.  Two digits per
 * division: a prompt's tokens are mostly 4 to 6 digits, formatted once per
 * block hashed. */
static char *put_ll(char *p, long long v)
{
    char tmp[24];
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    int n = (int)sizeof tmp;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        n -= 2;
        memcpy(tmp + n, two_digits + 2 * r, 2);
    }
    if (u >= 10) {
        n -= 2;
        memcpy(tmp + n, two_digits + 2 * u, 2);
    } else {
        tmp[--n] = (char)('0' + u);
    }
    if (v < 0)
        *p++ = '-';
    memcpy(p, tmp + n, sizeof tmp - (size_t)n);
    return p + (sizeof tmp - (size_t)n);
}

/*
 * The block token_ids[lo:lo+n] (a list; the range within it) under the
 * parent hash pbuf[0..plen): its chained hash into md and, with legacy, its
 * legacy hash's 16 hex digits into hex.  1 done; 0 when a token is not an
 * exact int of 64 bits (no exception: the caller hashes in Python); -1 with
 * the exception set.
 */
static int mlx_hash(const char *pbuf, size_t plen, PyObject *toks, Py_ssize_t lo, Py_ssize_t n,
                    int legacy, unsigned char *md, char *hex)
{
    /* parent, then "(" + ", ".join(ints) + ")" (a trailing "," for one):
     * at most 20 digits and a sign per int, 2 separators; then the low bytes. */
    size_t cap = plen + (size_t)n * 23 + 4, lcap = (size_t)n;
    char small[2048];
    char *buf = cap + lcap <= sizeof small ? small : PyMem_Malloc(cap + lcap);
    int rc = -1;
    if (!buf) {
        PyErr_NoMemory();
        return -1;
    }
    unsigned char *low = (unsigned char *)buf + cap;
    memcpy(buf, pbuf, plen);
    char *p = buf + plen;
    *p++ = '(';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(toks, lo + i);
        int overflow = 0;
        long long v = PyLong_CheckExact(t) ? PyLong_AsLongLongAndOverflow(t, &overflow) : 0;
        if (!PyLong_CheckExact(t) || overflow) {
            rc = 0;
            goto out;
        }
        if (i)
            *p++ = ',', *p++ = ' ';
        p = put_ll(p, v);
        low[i] = (unsigned char)((unsigned long long)v & 0xFF);
    }
    if (n == 1)
        *p++ = ',';
    *p++ = ')';
    unsigned char lmd[MLX_DIGEST];
    if (kvpy_sha256(buf, (size_t)(p - buf), md) || (legacy && kvpy_sha256(low, (size_t)n, lmd)))
        goto out;
    if (legacy) {
        static const char digits[] = "0123456789abcdef";
        for (int i = 0; i < 8; i++) {
            hex[2 * i] = digits[lmd[i] >> 4];
            hex[2 * i + 1] = digits[lmd[i] & 15];
        }
    }
    rc = 1;
out:
    if (buf != small)
        PyMem_Free(buf);
    return rc;
}

/*
 * mlx_block_hash(parent, token_ids, lo, hi, legacy) -> bytes | (bytes, str) | None.
 * The block of token_ids[lo:hi] (clipped to the list as a slice is; lo,
 * hi >= 0): its chained hash under parent (None or b"": the root), with
 * legacy true also its legacy hash.  None when the tokens are not all exact
 * ints of 64 bits or token_ids is not a list (the caller hashes in Python).
 * TypeError / ValueError for bad arguments.  O(hi - lo).
 */
PyObject *kvpy_mlx_block_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!kvpy_nargs_is(nargs, 5, "mlx_block_hash(parent, token_ids, lo, hi, legacy)"))
        return NULL;
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]), hi = lo < 0 ? -1 : PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (lo < 0 || hi < 0) {
        PyErr_SetString(PyExc_ValueError, "lo and hi must be >= 0");
        return NULL;
    }
    int legacy = PyObject_IsTrue(args[4]);
    if (legacy < 0)
        return NULL;
    PyObject *toks = args[1];
    if (!PyList_CheckExact(toks))
        Py_RETURN_NONE;
    Py_buffer par = {0};
    int has_par = args[0] != Py_None;
    if (has_par && PyObject_GetBuffer(args[0], &par, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *pbuf = mlx_root;
    size_t plen = sizeof mlx_root - 1;
    if (has_par && par.len) {
        pbuf = par.buf;
        plen = (size_t)par.len;
    }
    Py_ssize_t len = PyList_GET_SIZE(toks);
    if (hi > len)
        hi = len;
    if (lo > hi)
        lo = hi;
    unsigned char md[MLX_DIGEST];
    char hex[16];
    PyObject *res = NULL;
    int r = mlx_hash(pbuf, plen, toks, lo, hi - lo, legacy, md, hex);
    if (r == 0) {
        res = Py_None;
        Py_INCREF(res);
    } else if (r > 0) {
        PyObject *h = PyBytes_FromStringAndSize((const char *)md, sizeof md);
        PyObject *s = h && legacy ? PyUnicode_FromStringAndSize(hex, sizeof hex) : NULL;
        if (!legacy)
            res = h;
        else if (s)
            res = PyTuple_Pack(2, h, s);
        if (legacy) {
            Py_XDECREF(h);
            Py_XDECREF(s);
        }
    }
    if (has_par)
        PyBuffer_Release(&par);
    return res;
}

/* The pool argument of the batch calls: an open kvpool.Pool, or NULL with
 * TypeError / InvalidArgumentError. */
static PoolObject *mlx_pool_arg(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &kvpy_pool_type)) {
        PyErr_Format(PyExc_TypeError, "pool must be a kvpool.Pool, not %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return kvpy_pool_ok((PoolObject *)o) ? (PoolObject *)o : NULL;
}

/* A block size argument: an int >= 1 into *bs; 0, or -1 with the exception set. */
static int mlx_bs_arg(PyObject *o, Py_ssize_t *bs)
{
    *bs = PyLong_AsSsize_t(o);
    if (*bs == -1 && PyErr_Occurred())
        return -1;
    if (*bs < 1) {
        PyErr_SetString(PyExc_ValueError, "block_size must be >= 1");
        return -1;
    }
    return 0;
}

/*
 * mlx_prefix(pool, blocks, token_ids, block_size) -> (matched, i, parent, missed):
 * the manager's get_computed_blocks walk, in one call.  For each full block
 * of token_ids in turn: its chained hash, looked up in pool (stream 0); a
 * hit appends blocks[id] to `matched`.  It stops at the first miss (missed
 * True), at the end (i = the number of full blocks, missed False), or at a
 * block it cannot hash natively (missed False, i < full blocks: the caller
 * goes on in Python from block i under `parent`, the hash of block i - 1 or
 * None).  token_ids not a list: nothing is done (i = 0).  TypeError /
 * ValueError for bad arguments, IndexError for an id beyond `blocks`.
 */
PyObject *kvpy_mlx_prefix(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!kvpy_nargs_is(nargs, 4, "mlx_prefix(pool, blocks, token_ids, block_size)"))
        return NULL;
    PoolObject *pool = mlx_pool_arg(args[0]);
    Py_ssize_t bs;
    if (!pool || mlx_bs_arg(args[3], &bs))
        return NULL;
    PyObject *blocks = args[1], *toks = args[2];
    if (!PyList_Check(blocks))
        return PyErr_Format(PyExc_TypeError, "blocks must be a list, not %.100s",
                            Py_TYPE(blocks)->tp_name);
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    Py_ssize_t i = 0, nfull = PyList_CheckExact(toks) ? PyList_GET_SIZE(toks) / bs : 0;
    unsigned char par[MLX_DIGEST];
    int has_par = 0, missed = 0;
    for (; i < nfull; i++) {
        unsigned char md[MLX_DIGEST];
        int r = has_par ? mlx_hash((const char *)par, sizeof par, toks, i * bs, bs, 0, md, NULL)
                        : mlx_hash(mlx_root, sizeof mlx_root - 1, toks, i * bs, bs, 0, md, NULL);
        if (r < 0)
            goto fail;
        if (r == 0)
            break;
        kvp_hash h;
        memcpy(h.b, md, sizeof h.b);
        kvp_block b;
        kvp_status st = kvp_lookup(pool->pool, 0, &h, &b);
        if (st == KVP_ENOTFOUND) {
            missed = 1;
            break;
        }
        if (st) {
            kvpy_raise(st);
            goto fail;
        }
        if ((Py_ssize_t)b >= PyList_GET_SIZE(blocks)) {
            PyErr_Format(PyExc_IndexError, "block %u beyond the manager's blocks", (unsigned)b);
            goto fail;
        }
        if (PyList_Append(out, PyList_GET_ITEM(blocks, b)) < 0)
            goto fail;
        memcpy(par, md, sizeof par);
        has_par = 1;
    }
    PyObject *p = has_par ? PyBytes_FromStringAndSize((const char *)par, sizeof par)
                          : (Py_INCREF(Py_None), Py_None);
    if (!p)
        goto fail;
    return Py_BuildValue("(NnNO)", out, i, p, missed ? Py_True : Py_False);
fail:
    Py_DECREF(out);
    return NULL;
}

/*
 * mlx_cache(pool, blocks, token_ids, block_size, lo, hi, parent, counts,
 * legacy_values, legacy_index) -> (i, parent): the manager's
 * cache_full_blocks loop over blocks[lo:hi] in one call.  Each block: if
 * the pool already has it published, its hash becomes the parent; else its
 * chained hash under parent and its legacy hash, the block published under
 * the first (the pool's evictions delivered), counts[id] set to the tokens
 * it holds, legacy_values[id] = legacy and legacy_index[legacy] = id.  It
 * stops at the end (i = hi) or at a block whose tokens it cannot hash
 * natively (the caller goes on in Python from block i under `parent`).
 * token_ids not a list: nothing is done (i = lo).  Errors as the Python
 * loop's: the pool's for a bad block, IndexError beyond `counts`.
 */
PyObject *kvpy_mlx_cache(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!kvpy_nargs_is(nargs, 10, "mlx_cache(pool, blocks, token_ids, block_size, lo, hi, "
                                  "parent, counts, legacy_values, legacy_index)"))
        return NULL;
    PoolObject *pool = mlx_pool_arg(args[0]);
    Py_ssize_t bs, lo, hi;
    if (!pool || mlx_bs_arg(args[3], &bs))
        return NULL;
    lo = PyLong_AsSsize_t(args[4]);
    hi = lo == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *blocks = args[1], *toks = args[2], *lv = args[8], *li = args[9];
    if (!PyList_Check(blocks) || !PyDict_Check(lv) || !PyDict_Check(li))
        return PyErr_Format(PyExc_TypeError, "blocks must be a list, legacy_values and "
                            "legacy_index dicts");
    if (lo < 0 || hi > PyList_GET_SIZE(blocks) || lo > hi)
        return PyErr_Format(PyExc_IndexError, "blocks[%zd:%zd] outside the list", lo, hi);
    unsigned char par[MLX_DIGEST];
    int has_par = 0;
    if (args[6] != Py_None) {
        if (!PyBytes_Check(args[6]) || PyBytes_GET_SIZE(args[6]) != MLX_DIGEST)
            return PyErr_Format(PyExc_TypeError, "parent must be None or 32 bytes");
        memcpy(par, PyBytes_AS_STRING(args[6]), sizeof par);
        has_par = 1;
    }
    Py_buffer cv;
    if (PyObject_GetBuffer(args[7], &cv, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (cv.itemsize != 8 || !cv.format || !strchr("qQlL", cv.format[strspn(cv.format, "@=<")])) {
        PyBuffer_Release(&cv);
        return PyErr_Format(PyExc_TypeError, "counts must be a buffer of 64-bit integers");
    }
    int64_t *counts = cv.buf;
    Py_ssize_t ncounts = cv.len / 8, i = lo, ntok = 0;
    if (PyList_CheckExact(toks))
        ntok = PyList_GET_SIZE(toks);
    else
        i = hi; /* not a list: nothing here (reported as lo below) */
    PyObject *res = NULL;
    for (; i < hi; i++) {
        /* on_evict may have changed either list: read their sizes again. */
        if (i >= PyList_GET_SIZE(blocks)) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            goto out;
        }
        PyObject *bo = PyList_GET_ITEM(blocks, i);
        uint32_t id;
        if (kvpy_get_u32(bo, 0, &id, "id")) /* may run __index__: sizes read after */
            goto out;
        ntok = PyList_GET_SIZE(toks);
        kvp_block_info bi;
        kvp_status st = kvp_block_get(pool->pool, id, &bi);
        if (st) {
            kvpy_raise(st);
            goto out;
        }
        if (bi.published) {
            memcpy(par, bi.hash.b, sizeof par);
            has_par = 1;
            continue;
        }
        /* The Python loop slices token_ids[i*bs:(i+1)*bs]: clipped to the list. */
        Py_ssize_t a = i * bs < ntok ? i * bs : ntok, z = (i + 1) * bs < ntok ? (i + 1) * bs : ntok;
        unsigned char md[MLX_DIGEST];
        char hex[16];
        int r = has_par ? mlx_hash((const char *)par, sizeof par, toks, a, z - a, 1, md, hex)
                        : mlx_hash(mlx_root, sizeof mlx_root - 1, toks, a, z - a, 1, md, hex);
        if (r < 0)
            goto out;
        if (r == 0)
            break;
        kvp_hash h;
        memcpy(h.b, md, sizeof h.b);
        st = kvp_publish(pool->pool, id, &h);
        if (st) {
            kvpy_ev_deliver(pool, kvpy_raise(st));
            goto out;
        }
        if (!kvpy_ev_deliver(pool, Py_None))
            goto out;
        if ((Py_ssize_t)id >= ncounts) {
            PyErr_SetString(PyExc_IndexError, "array assignment index out of range");
            goto out;
        }
        Py_ssize_t left = ntok - i * bs;
        counts[id] = left < 0 ? 0 : (left > bs ? bs : left);
        PyObject *key = PyLong_FromUnsignedLong(id);
        PyObject *leg = key ? PyUnicode_FromStringAndSize(hex, sizeof hex) : NULL;
        int bad = !leg || PyDict_SetItem(lv, key, leg) < 0 || PyDict_SetItem(li, leg, key) < 0;
        Py_XDECREF(key);
        Py_XDECREF(leg);
        if (bad)
            goto out;
        memcpy(par, md, sizeof par);
        has_par = 1;
    }
    if (!PyList_CheckExact(toks))
        i = lo;
    PyObject *p = has_par ? PyBytes_FromStringAndSize((const char *)par, sizeof par)
                          : (Py_INCREF(Py_None), Py_None);
    if (p)
        res = Py_BuildValue("(nN)", i, p);
out:
    PyBuffer_Release(&cv);
    return res;
}

/*
 * The per-block calls of a manager take its state as one tuple, made once
 * per pool: (pool, counts, stamps, blocks, block class, table class) — the
 * native pool, the int64 array('q') of token counts and the double
 * array('d') of last access times (both by id), the list of the manager's
 * block objects by id, the class of those blocks and BlockTable.
 */
typedef struct mlx_state {
    PoolObject *pool;
    PyObject *counts, *stamps, *blocks, *block_cls, *table_cls;
} mlx_state;

/* Unpack a manager's state tuple; 0, or -1 with TypeError /
 * InvalidArgumentError set. */
static int mlx_state_arg(PyObject *o, mlx_state *st)
{
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 6) {
        PyErr_SetString(PyExc_TypeError, "state must be a 6-tuple");
        return -1;
    }
    st->pool = mlx_pool_arg(PyTuple_GET_ITEM(o, 0));
    st->counts = PyTuple_GET_ITEM(o, 1);
    st->stamps = PyTuple_GET_ITEM(o, 2);
    st->blocks = PyTuple_GET_ITEM(o, 3);
    st->block_cls = PyTuple_GET_ITEM(o, 4);
    st->table_cls = PyTuple_GET_ITEM(o, 5);
    if (st->pool && !PyList_Check(st->blocks)) {
        PyErr_SetString(PyExc_TypeError, "state: blocks must be a list");
        return -1;
    }
    return st->pool ? 0 : -1;
}

/* A writable C-contiguous view of an array whose items are 8 bytes of
 * format fmt; 0, or -1 with TypeError set. */
static int mlx_array8(PyObject *o, Py_buffer *v, const char *fmt)
{
    if (PyObject_GetBuffer(o, v, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (v->itemsize != 8 || !v->format || strcmp(v->format, fmt) != 0) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_TypeError, "expected an array('%s')", fmt);
        return -1;
    }
    return 0;
}

/*
 * mlx_take(state) -> block or None: the manager's allocate_block.  One
 * block taken from the pool (stream 0, anonymous), its last access time set
 * to now (time.time()'s clock), its object returned; None when none is free
 * (the caller logs it).  Evictions the take made reach the pool's callback
 * before it returns.  IndexError for an id beyond the arrays or the list.
 */
PyObject *kvpy_mlx_take(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    mlx_state st;
    if (!kvpy_nargs_is(nargs, 1, "mlx_take(state)") || mlx_state_arg(args[0], &st))
        return NULL;
    Py_buffer sv;
    if (mlx_array8(st.stamps, &sv, "d"))
        return NULL;
    kvp_block id;
    kvp_status rc = kvp_take_hinted(st.pool->pool, 0, KVP_ANON, &st.pool->take_hint, &id);
    PyObject *res = NULL;
    if (rc == KVP_EEXHAUSTED) {
        res = Py_NewRef(Py_None);
    } else if (rc) {
        kvpy_raise(rc);
    } else if ((Py_ssize_t)id >= sv.len / 8 || (Py_ssize_t)id >= PyList_GET_SIZE(st.blocks)) {
        PyErr_SetString(PyExc_IndexError, "block id beyond the manager's arrays");
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ((double *)sv.buf)[id] = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        res = Py_NewRef(PyList_GET_ITEM(st.blocks, id));
    }
    PyBuffer_Release(&sv);
    return res ? kvpy_ev_deliver(st.pool, res) : NULL;
}

/*
 * mlx_add(state, table, block, tokens) -> None or NotImplemented: the
 * manager's add_block_to_table, done when block is one of its blocks,
 * table a BlockTable and tokens an int (else NotImplemented, nothing done:
 * the caller goes the general way).  Sets the block's fill level in the
 * pool to tokens clamped to 0..block_size (block 0, the null block, and a
 * block that is free keep theirs: the library keeps no fill for them),
 * counts[id] = tokens, then appends the id to table.block_ids and adds
 * tokens to table.num_tokens, as the original.  OverflowError for tokens
 * beyond 64 bits (as the array's own assignment), IndexError for an id
 * beyond counts.  Every check comes before the first change.
 */
PyObject *kvpy_mlx_add(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    mlx_state st;
    if (!kvpy_nargs_is(nargs, 4, "mlx_add(state, table, block, tokens)") ||
        mlx_state_arg(args[0], &st))
        return NULL;
    PyObject *table = args[1], *block = args[2];
    if ((PyObject *)Py_TYPE(block) != st.block_cls || !PyLong_CheckExact(args[3]) ||
        (PyObject *)Py_TYPE(table) != st.table_cls)
        Py_RETURN_NOTIMPLEMENTED;
    static PyObject *s_ids, *s_num; /* the attribute names, interned once */
    if (!s_ids && !(s_ids = PyUnicode_InternFromString("block_ids")))
        return NULL;
    if (!s_num && !(s_num = PyUnicode_InternFromString("num_tokens")))
        return NULL;
    unsigned long id = PyLong_AsUnsignedLong(block);
    if (id == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    long long tokens = PyLong_AsLongLong(args[3]);
    if (tokens == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer cv;
    if (mlx_array8(st.counts, &cv, "q"))
        return NULL;
    PyObject *res = NULL, *ids = NULL;
    if ((Py_ssize_t)id >= cv.len / 8) {
        PyErr_SetString(PyExc_IndexError, "array assignment index out of range");
        goto out;
    }
    ids = PyObject_GetAttr(table, s_ids);
    if (!ids)
        goto out;
    if (!PyList_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "table.block_ids must be a list");
        goto out;
    }
    if (id != 0) {
        long long bs = (long long)st.pool->block_size;
        uint32_t fill = (uint32_t)(tokens < 0 ? 0 : (tokens > bs ? bs : tokens));
        kvp_status rc = kvp_set_fill(st.pool->pool, (kvp_block)id, fill);
        if (rc && rc != KVP_EDOUBLEFREE) {
            kvpy_raise(rc);
            goto out;
        }
    }
    ((long long *)cv.buf)[id] = tokens;
    PyObject *n = PyObject_GetAttr(table, s_num);
    PyObject *sum = n ? PyNumber_Add(n, args[3]) : NULL;
    Py_XDECREF(n);
    PyObject *key = sum ? PyLong_FromUnsignedLong(id) : NULL;
    int bad = !key || PyList_Append(ids, key) < 0 || PyObject_SetAttr(table, s_num, sum) < 0;
    Py_XDECREF(key);
    Py_XDECREF(sum);
    if (!bad)
        res = Py_NewRef(Py_None);
out:
    Py_XDECREF(ids);
    PyBuffer_Release(&cv);
    return res;
}
