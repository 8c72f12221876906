/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vllm_hash.c — block hashes identical to vLLM's `sha256_cbor` prefix-cache
 * hashes, as a kvp_hash_fn for KVP_HASH_CUSTOM.
 *
 * What it owns: kvpi_vllm_hash_fn, kvpi_vllm_none_hash,
 * kvpi_vllm_hash_configure.
 *
 * vLLM hashes a block as sha256(cbor2.dumps((parent, tokens, extra_keys),
 * canonical=True)) and roots every chain at NONE_HASH = sha256_cbor(seed)
 * for a fixed PYTHONHASHSEED string.  Here the same CBOR bytes are produced
 * with libcbor's streaming encoders (which always choose the shortest
 * integer form, as canonical CBOR requires; the structure holds no map or
 * float, so there is nothing else canonical form changes) and fed to
 * OpenSSL's SHA-256 in chunks, so hashing a block allocates nothing beyond
 * the digest context.  The root digest lives in kvp_config.root_seed, which
 * kvpool passes as the parent of every first block, so the function itself
 * is stateless.  Known-answer vectors come from Python's cbor2 and hashlib
 * (tests/vectors/make_vllm_hash_vectors.py).
 */
#include "kvpool_interop.h"

#include "../src/kvp_checked.h" /* a leaf: standard headers only */

#include <cbor.h>
#include <openssl/evp.h>
#include <string.h>

/* A SHA-256 fed through a small staging buffer. */
typedef struct hasher {
    EVP_MD_CTX *md;
    unsigned char buf[512];
    size_t len;
    int failed;
} hasher;

static void flush(hasher *h)
{
    if (h->len && !h->failed && EVP_DigestUpdate(h->md, h->buf, h->len) != 1)
        h->failed = 1;
    h->len = 0;
}

static void put(hasher *h, const void *data, size_t n)
{
    if (n > sizeof h->buf - h->len) {
        flush(h);
        if (n > sizeof h->buf) {
            if (!h->failed && EVP_DigestUpdate(h->md, data, n) != 1)
                h->failed = 1;
            return;
        }
    }
    memcpy(h->buf + h->len, data, n);
    h->len += n;
}

/* Append one CBOR head produced by a libcbor encoder (at most 9 bytes). */
#define HEAD(h, call)                                                                  \
    do {                                                                               \
        unsigned char head_[9];                                                        \
        size_t n_ = (call);                                                            \
        if (n_ == 0)                                                                   \
            (h)->failed = 1;                                                           \
        else                                                                           \
            put((h), head_, n_);                                                       \
    } while (0)

static void put_uint(hasher *h, uint64_t v)
{
    HEAD(h, cbor_encode_uint(v, head_, sizeof head_));
}

static void put_int(hasher *h, int64_t v)
{
    if (v >= 0)
        HEAD(h, cbor_encode_uint((uint64_t)v, head_, sizeof head_));
    else
        HEAD(h, cbor_encode_negint((uint64_t)(-(v + 1)), head_, sizeof head_));
}

static void put_text(hasher *h, const void *s, size_t n)
{
    HEAD(h, cbor_encode_string_start(n, head_, sizeof head_));
    put(h, s, n);
}

static void put_array(hasher *h, size_t n)
{
    HEAD(h, cbor_encode_array_start(n, head_, sizeof head_));
}

static int begin(hasher *h)
{
    memset(h, 0, sizeof *h);
    h->md = EVP_MD_CTX_new();
    return h->md && EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

static kvp_status finish(hasher *h, kvp_hash *out)
{
    flush(h);
    unsigned int len = 0;
    int ok = !h->failed && EVP_DigestFinal_ex(h->md, out->b, &len) == 1 && len == 32;
    EVP_MD_CTX_free(h->md);
    return ok ? KVP_OK : KVP_ENOMEM;
}

/* Does multimodal span m overlap the block [start, start + n)? */
static int overlaps(const kvp_mm_span *m, uint64_t start, size_t n)
{
    return m->end > m->start && m->start < start + n && m->end > start;
}

/* The extra keys of one block, in vLLM's order (LoRA, multimodal inputs,
 * cache salt): null when there are none. */
static void put_extra(hasher *h, uint64_t start, size_t n, const kvp_extra_keys *x)
{
    size_t k = 0;
    if (x) {
        k += x->has_lora != 0;
        for (size_t i = 0; i < x->n_mm; i++)
            k += overlaps(&x->mm[i], start, n) != 0;
        k += start == 0 && x->salt_len > 0;
    }
    if (k == 0) {
        HEAD(h, cbor_encode_null(head_, sizeof head_));
        return;
    }
    put_array(h, k);
    if (x->has_lora) {
        if (x->lora_name)
            put_text(h, x->lora_name, strlen(x->lora_name));
        else
            put_uint(h, x->lora_id);
    }
    for (size_t i = 0; i < x->n_mm; i++) {
        const kvp_mm_span *m = &x->mm[i];
        if (!overlaps(m, start, n))
            continue;
        static const char digits[] = "0123456789abcdef";
        char hex[64];
        for (int j = 0; j < 32; j++) {
            hex[2 * j] = digits[m->hash.b[j] >> 4];
            hex[2 * j + 1] = digits[m->hash.b[j] & 15];
        }
        put_array(h, 2);
        put_text(h, hex, sizeof hex);
        put_int(h, (int64_t)(m->start - start)); /* two's complement: may be < 0 */
    }
    if (start == 0 && x->salt_len > 0)
        put_text(h, x->salt, x->salt_len);
}

kvp_status kvpi_vllm_hash_fn(void *user, const kvp_hash *parent, const uint32_t *tokens,
                             size_t n, uint64_t start, const kvp_extra_keys *extra,
                             kvp_hash *out)
{
    (void)user;
    uint64_t end; /* the block's end, start + n, is computed (overlaps): it must fit */
    if (!parent || (n && !tokens) || !out || !kvp__add_u64(start, n, &end))
        return KVP_EINVAL;
    hasher h;
    if (begin(&h)) {
        EVP_MD_CTX_free(h.md);
        return KVP_ENOMEM;
    }
    put_array(&h, 3);
    HEAD(&h, cbor_encode_bytestring_start(sizeof parent->b, head_, sizeof head_));
    put(&h, parent->b, sizeof parent->b);
    put_array(&h, n);
    for (size_t i = 0; i < n; i++)
        put_uint(&h, tokens[i]);
    put_extra(&h, start, n, extra);
    return finish(&h, out);
}

kvp_status kvpi_vllm_none_hash(const char *seed, kvp_hash *out)
{
    if (!seed || !out)
        return KVP_EINVAL;
    hasher h;
    if (begin(&h)) {
        EVP_MD_CTX_free(h.md);
        return KVP_ENOMEM;
    }
    put_text(&h, seed, strlen(seed));
    return finish(&h, out);
}

kvp_status kvpi_vllm_hash_configure(kvp_config *cfg, const char *seed)
{
    if (!cfg || !seed)
        return KVP_EINVAL;
    kvp_hash root;
    kvp_status rc = kvpi_vllm_none_hash(seed, &root);
    if (rc)
        return rc;
    cfg->hash_alg = KVP_HASH_CUSTOM;
    cfg->hash_fn = kvpi_vllm_hash_fn;
    cfg->hash_user = NULL;
    cfg->root_seed = root;
    cfg->random_root = 0;
    return KVP_OK;
}
