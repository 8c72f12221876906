/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vhash.c — the vLLM drop-in's block hashing (kvpool.compat.vllm
 * .hash_block_tokens): vLLM's block hash under its default hash function
 * `sha256`, SHA-256 of pickle.dumps((parent, tuple(tokens), None),
 * protocol=5), byte-identical, computed from the token list in place.
 *
 * What it writes is the pickle CPython's C pickler makes of that tuple:
 * PROTO 5, one FRAME, the parent as SHORT_BINBYTES and MEMOIZE, the tokens'
 * tuple (EMPTY_TUPLE; or the items and TUPLE1..3, or MARK, the items and
 * TUPLE, then MEMOIZE), NONE, TUPLE3, MEMOIZE, STOP; each token as BININT1
 * (0..255), BININT2 (..65535) or BININT (the rest of int32).
 *
 * Invariant: the result equals the Python expression, or the call returns
 * None and the caller computes it in Python: for a parent that is not bytes
 * of 1..255 bytes, tokens that are not a list or tuple, or a token that is
 * not an exact int of 32 bits (pickle writes those otherwise).
 *
 * Why here: vLLM hashes every block of every request in Python (a tuple,
 * a pickle and a digest each), most of its prefix-caching time.
 */
#include "kvpy.h"

#include <openssl/evp.h>

/* See kvpy.h.  One context and one fetched algorithm for the module's life
 * (the GIL serialises every use). */
int kvpy_sha256(const void *p, size_t n, unsigned char md[32])
{
    static EVP_MD_CTX *ctx;
    static EVP_MD *alg;
    if (!alg && !(alg = EVP_MD_fetch(NULL, "SHA256", NULL))) {
        PyErr_SetString(kvpy_error, "OpenSSL has no SHA-256");
        return -1;
    }
    if (!ctx && !(ctx = EVP_MD_CTX_new())) {
        PyErr_NoMemory();
        return -1;
    }
    unsigned int len = 0;
    if (!EVP_DigestInit_ex(ctx, alg, NULL) || !EVP_DigestUpdate(ctx, p, n) ||
        !EVP_DigestFinal_ex(ctx, md, &len) || len != 32) {
        PyErr_SetString(kvpy_error, "SHA-256 failed");
        return -1;
    }
    return 0;
}

/*
 * vllm_block_hash(parent, token_ids) -> bytes | None: see the top comment.
 * TypeError for a wrong argument count.  O(len(token_ids)).
 */
PyObject *kvpy_vllm_block_hash(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (!kvpy_nargs_is(nargs, 2, "vllm_block_hash(parent, token_ids)"))
        return NULL;
    PyObject *par = args[0], *toks = args[1];
    if (!PyBytes_CheckExact(par) || PyBytes_GET_SIZE(par) < 1 || PyBytes_GET_SIZE(par) > 255 ||
        !(PyList_CheckExact(toks) || PyTuple_CheckExact(toks)))
        Py_RETURN_NONE;
    Py_ssize_t plen = PyBytes_GET_SIZE(par), n = PySequence_Fast_GET_SIZE(toks);
    /* header 11, parent 2 + plen + 1, tokens at most 5 each + 3, tail 4 */
    size_t cap = 11 + (size_t)plen + 3 + (size_t)n * 5 + 3 + 4;
    unsigned char small[1024];
    unsigned char *buf = cap <= sizeof small ? small : PyMem_Malloc(cap);
    if (!buf)
        return PyErr_NoMemory();
    PyObject *res = NULL;
    unsigned char *p = buf + 11;
    *p++ = 'C';
    *p++ = (unsigned char)plen;
    memcpy(p, PyBytes_AS_STRING(par), (size_t)plen);
    p += plen;
    *p++ = 0x94;
    if (n == 0)
        *p++ = ')';
    else if (n > 3)
        *p++ = '(';
    PyObject **items = PySequence_Fast_ITEMS(toks);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = items[i];
        int overflow = 0;
        long long v = PyLong_CheckExact(t) ? PyLong_AsLongLongAndOverflow(t, &overflow) : 0;
        if (!PyLong_CheckExact(t) || overflow || v < INT32_MIN || v > INT32_MAX) {
            res = Py_None;
            Py_INCREF(res);
            goto out;
        }
        if (v >= 0 && v <= 0xff) {
            *p++ = 'K';
            *p++ = (unsigned char)v;
        } else if (v >= 0 && v <= 0xffff) {
            *p++ = 'M';
            *p++ = (unsigned char)v;
            *p++ = (unsigned char)(v >> 8);
        } else {
            uint32_t u = (uint32_t)(int32_t)v;
            *p++ = 'J';
            for (int k = 0; k < 4; k++)
                *p++ = (unsigned char)(u >> (8 * k));
        }
    }
    if (n > 3)
        *p++ = 't';
    else if (n > 0)
        *p++ = (unsigned char)(0x84 + n); /* TUPLE1..3: 0x85..0x87 */
    if (n > 0)
        *p++ = 0x94;
    *p++ = 'N';
    *p++ = 0x87;
    *p++ = 0x94;
    *p++ = '.';
    uint64_t frame = (uint64_t)(p - buf - 11);
    buf[0] = 0x80;
    buf[1] = 5;
    buf[2] = 0x95;
    for (int k = 0; k < 8; k++)
        buf[3 + k] = (unsigned char)(frame >> (8 * k));
    unsigned char md[32];
    if (kvpy_sha256(buf, (size_t)(p - buf), md) == 0)
        res = PyBytes_FromStringAndSize((const char *)md, sizeof md);
out:
    if (buf != small)
        PyMem_Free(buf);
    return res;
}
