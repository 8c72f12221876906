/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module.c — the module kvpool._kvpool assembled: its function table (each
 * function is its own file's: strerror errors.c's, hash_external and
 * _fast_view args.c's, mlx_block_hash, mlx_prefix, mlx_cache, mlx_add and
 * mlx_take mlx.c's,
 * vllm_block_hash vhash.c's, atom_compute_hash atom.c's), its types
 * readied and added, each file's init called, and the constants.
 *
 * Invariants: nothing here is called by another file; the module is built
 * whole or not at all (NULL with the exception set).
 *
 * Why here: every other file defines what it owns and knows nothing of the
 * module, so the files' calls run one way, down to errors.c.
 */
#include "kvpy.h"

static PyMethodDef mod_methods[] = {
    {"strerror", kvpy_mod_strerror, METH_O, "strerror(status) -> the library's message"},
    {"_fast_view", KVPY_FC(kvpy_mod_fast_view), METH_FASTCALL,
     "_fast_view(obj, writable) -> whether obj is read through the numpy fast view"},
    {"hash_external", kvpy_mod_hash_external, METH_O,
     "hash_external(hash32) -> the 64-bit external form events carry"},
    {"mlx_block_hash", KVPY_FC(kvpy_mlx_block_hash), METH_FASTCALL,
     "mlx_block_hash(parent, token_ids, lo, hi, legacy) -> bytes | (bytes, str) | None\n\n"
     "vllm-mlx's chained hash of the block token_ids[lo:hi] under parent (and, with legacy, "
     "its legacy string hash), or None when the tokens are not a list of 64-bit ints."},
    {"mlx_prefix", KVPY_FC(kvpy_mlx_prefix), METH_FASTCALL,
     "mlx_prefix(pool, blocks, token_ids, block_size) -> (matched, i, parent, missed)\n\n"
     "vllm-mlx's get_computed_blocks walk in one call: each full block's chained hash looked "
     "up until the first miss; stops early (missed False) at a block it cannot hash natively."},
    {"mlx_cache", KVPY_FC(kvpy_mlx_cache), METH_FASTCALL,
     "mlx_cache(pool, blocks, token_ids, block_size, lo, hi, parent, counts, legacy_values, "
     "legacy_index) -> (i, parent)\n\nvllm-mlx's cache_full_blocks loop over blocks[lo:hi] "
     "in one call; stops early at a block it cannot hash natively."},
    {"mlx_add", KVPY_FC(kvpy_mlx_add), METH_FASTCALL,
     "mlx_add(state, table, block, tokens) -> None | NotImplemented\n\nvllm-mlx's "
     "add_block_to_table for a manager's own block in one call: the block's fill level "
     "(clamped), its token count, table.block_ids and table.num_tokens."},
    {"mlx_take", KVPY_FC(kvpy_mlx_take), METH_FASTCALL,
     "mlx_take(state) -> block | None\n\nvllm-mlx's allocate_block in one call: a block "
     "taken, its last access time set; None when none is free."},
    {"vllm_block_hash", KVPY_FC(kvpy_vllm_block_hash), METH_FASTCALL,
     "vllm_block_hash(parent, token_ids) -> bytes | None\n\nvLLM's block hash under its "
     "sha256: SHA-256 of pickle.dumps((parent, tuple(token_ids), None), protocol=5), or None "
     "for input it does not pickle itself (the caller hashes in Python)."},
    {"atom_compute_hash", KVPY_FC(kvpy_atom_compute_hash), KVPY_FCK,
     "atom_compute_hash(token_ids, prefix=-1) -> int\n\nATOM's chained block hash "
     "(BlockManager.compute_hash): XXH64 of prefix's 8 little-endian bytes (none for -1) and "
     "the tokens as int64."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kvpool_module = {
    PyModuleDef_HEAD_INIT, "kvpool._kvpool",
    "Native core of the kvpool package (see kvpool/__init__.py).", -1, mod_methods,
    NULL, NULL, NULL, NULL};

/* Add kvpool.<attr>: the tuple of the library's names of an enumeration
 * (name_of: kvp_policy_name, ...), in value order.  0, or -1 with the
 * exception set. */
static int add_names(PyObject *m, const char *attr, const char *(*name_of)(int))
{
    Py_ssize_t n = 0;
    while (name_of((int)n))
        n++;
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(name_of((int)i));
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    if (!t || PyModule_AddObject(m, attr, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__kvpool(void);

/* The module's init: types readied, exception classes and constants added.
 * NULL with the exception set when any step fails. */
PyMODINIT_FUNC PyInit__kvpool(void)
{
    if (kvpy_pool_methods_init() < 0 || PyType_Ready(&kvpy_pool_type) < 0 ||
        PyType_Ready(&kvpy_seq_type) < 0 || PyType_Ready(&kvpy_vblock_type) < 0 ||
        PyType_Ready(&kvpy_vnative_type) < 0 || PyType_Ready(&kvpy_vpool_type) < 0 ||
        PyType_Ready(&kvpy_vblocks_type) < 0 || PyType_Ready(&kvpy_apool_type) < 0 ||
        kvpy_atom_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&kvpool_module);
    if (!m)
        return NULL;
    if (kvpy_errors_init(m) < 0 || add_names(m, "POLICY_NAMES", kvp_policy_name) ||
        add_names(m, "REUSE_NAMES", kvp_reuse_name) ||
        add_names(m, "HASH_ALG_NAMES", kvp_hash_alg_name))
        goto fail;
    Py_INCREF(&kvpy_pool_type);
    Py_INCREF(&kvpy_seq_type);
    Py_INCREF(&kvpy_vblock_type);
    Py_INCREF(&kvpy_vpool_type);
    Py_INCREF(&kvpy_apool_type);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&kvpy_pool_type) < 0 ||
        PyModule_AddObject(m, "Sequence", (PyObject *)&kvpy_seq_type) < 0 ||
        PyModule_AddObject(m, "KVCacheBlock", (PyObject *)&kvpy_vblock_type) < 0 ||
        PyModule_AddObject(m, "_VllmBlockPool", (PyObject *)&kvpy_vpool_type) < 0 ||
        PyModule_AddObject(m, "_AtomBlockPool", (PyObject *)&kvpy_apool_type) < 0)
        goto fail;
#define IC(name, v)                                                                             \
    if (PyModule_AddObject(m, name, PyLong_FromUnsignedLongLong((unsigned long long)(v))) < 0)  \
        goto fail;
    IC("NO_BLOCK", KVP_NO_BLOCK)
    IC("ANON", KVP_ANON)
    IC("HINT_NONE", KVP_HINT_NONE)
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
    IC("POLICY_LRU", KVP_POLICY_LRU)
    IC("POLICY_SLRU", KVP_POLICY_SLRU)
    IC("POLICY_LFU", KVP_POLICY_LFU)
    IC("PRIORITY_LOW", KVP_PRIORITY_LOW)
    IC("PRIORITY_NORMAL", KVP_PRIORITY_NORMAL)
    IC("PRIORITY_HIGH", KVP_PRIORITY_HIGH)
    IC("PRIORITY_MAX", KVP_PRIORITY_MAX)
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
