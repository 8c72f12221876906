/*
 * mlx.c — the hashing hot path of the vllm-mlx drop-in
 * (kvpool.compat.vllm_mlx): one block's chained content hash and its legacy
 * string hash, byte-identical to vllm-mlx's own Python functions.
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

static const char mlx_root[] = "vllm-mlx-root";

#define MLX_DIGEST 32

/* SHA-256 of p[0..n) into md; 0, or -1 with MemoryError / kvpool.Error set.
 * One digest context and one fetched SHA-256, made on first use and kept
 * for the module's life: OpenSSL's one-shot SHA256() fetches the algorithm
 * on every call, which costs more than hashing a block.  The GIL serialises
 * every use (the call never releases it). */
static int sha256(const void *p, size_t n, unsigned char *md)
{
    static EVP_MD_CTX *ctx;
    static EVP_MD *alg;
    if (!alg) {
        alg = EVP_MD_fetch(NULL, "SHA256", NULL);
        if (!alg) {
            PyErr_SetString(kvpy_error, "OpenSSL has no SHA-256");
            return -1;
        }
    }
    if (!ctx && !(ctx = EVP_MD_CTX_new())) {
        PyErr_NoMemory();
        return -1;
    }
    unsigned int len = 0;
    if (!EVP_DigestInit_ex(ctx, alg, NULL) || !EVP_DigestUpdate(ctx, p, n) ||
        !EVP_DigestFinal_ex(ctx, md, &len) || len != MLX_DIGEST) {
        PyErr_SetString(kvpy_error, "SHA-256 failed");
        return -1;
    }
    return 0;
}

/* Append the decimal text of v to *p. */
static char *put_ll(char *p, long long v)
{
    char tmp[24];
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    int n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return p;
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
    Py_ssize_t n = hi - lo;
    /* parent, then "(" + ", ".join(ints) + ")" (a trailing "," for one):
     * at most 20 digits and a sign per int, 2 separators; then the low bytes. */
    size_t cap = plen + (size_t)n * 23 + 4, lcap = (size_t)n;
    char small[2048];
    char *buf = cap + lcap <= sizeof small ? small : PyMem_Malloc(cap + lcap);
    PyObject *res = NULL;
    if (!buf) {
        PyErr_NoMemory();
        goto out;
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
            res = Py_None;
            Py_INCREF(res);
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
    unsigned char md[MLX_DIGEST], lmd[MLX_DIGEST];
    if (sha256(buf, (size_t)(p - buf), md) || (legacy && sha256(low, (size_t)n, lmd)))
        goto out;
    PyObject *h = PyBytes_FromStringAndSize((const char *)md, sizeof md);
    if (!h || !legacy) {
        res = h;
        goto out;
    }
    char hex[16];
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        hex[2 * i] = digits[lmd[i] >> 4];
        hex[2 * i + 1] = digits[lmd[i] & 15];
    }
    PyObject *s = PyUnicode_FromStringAndSize(hex, sizeof hex);
    if (!s) {
        Py_DECREF(h);
        goto out;
    }
    res = PyTuple_Pack(2, h, s);
    Py_DECREF(h);
    Py_DECREF(s);
out:
    if (buf && buf != small)
        PyMem_Free(buf);
    if (has_par)
        PyBuffer_Release(&par);
    return res;
}
