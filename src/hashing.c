/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hashing.c — chained block hashes, and the kernel's random bytes (the
 * keys of the pool's hash tables, a random root seed).
 *
 * Pure: bytes in, digest out.  It reads only the pool's configuration
 * (algorithm, root seed, block size), never its state, so it runs without the
 * lock and from any thread.
 *
 * The message layout is documented in kvpool.h ("Block hashing") and is the
 * contract with other languages: tests check it against vectors computed by
 * Python's hashlib and xxhash.  The message is built in a stack buffer when
 * it fits (a 16-token block is 101 bytes) and hashed in one call.
 *
 * SHA-256 entry point: SHA256_Init/Update/Final, the fastest of OpenSSL's
 * ways for a 100-byte message (EVP with a reused context costs more, the
 * one-shot SHA256() several times more).  The low-level calls are
 * deprecated in OpenSSL 3 but still supported; they need no allocation and
 * no shared context, so they are also the thread-safe choice here.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "hashing.h"
#include "mem.h"
#include "status.h"

#include <openssl/sha.h>
#include <sys/random.h>
#include <xxhash.h>

/* The layout is little-endian.  On a little-endian host a value's bytes are
 * already in that order and are copied whole: a compiler need not turn the
 * byte-by-byte form into word stores, and serialising a 16-token block byte
 * by byte would cost about as much as hashing it with XXH3. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KVP__HOST_LE 1
#else
#define KVP__HOST_LE 0
#endif

/* The low `n` bytes of v, little-endian. */
static uint8_t *put_le(uint8_t *w, uint64_t v, size_t n)
{
    if (KVP__HOST_LE) {
        memcpy(w, &v, n); /* on a little-endian host the low bytes come first */
        return w + n;
    }
    for (size_t i = 0; i < n; i++)
        *w++ = (uint8_t)(v >> (8 * i));
    return w;
}

static uint8_t *put_u32(uint8_t *w, uint32_t v)
{
    return put_le(w, v, 4);
}

static uint8_t *put_u64(uint8_t *w, uint64_t v)
{
    return put_le(w, v, 8);
}

static uint8_t *put_u32s(uint8_t *w, const uint32_t *v, size_t n)
{
    if (KVP__HOST_LE) {
        memcpy(w, v, n * sizeof *v);
        return w + n * sizeof *v;
    }
    for (size_t i = 0; i < n; i++)
        w = put_u32(w, v[i]);
    return w;
}

static bool overlaps(const kvp_mm_span *m, uint64_t start, size_t n)
{
    return m->start < start + n && m->end > start && m->end > m->start;
}

/* Bytes of the message for one block (see the layout in kvpool.h). */
static size_t message_size(size_t n, uint64_t start, const kvp_extra_keys *x)
{
    size_t size = 32 + 4 + 4 * n + 1;
    if (!x)
        return size;
    if (x->has_lora)
        size += 8;
    size_t k = 0;
    for (size_t i = 0; i < x->n_mm; i++)
        k += overlaps(&x->mm[i], start, n);
    if (k)
        size += 4 + k * 40;
    if (start == 0 && x->salt_len)
        size += 4 + x->salt_len;
    return size;
}

static void write_message(uint8_t *w, const kvp_hash *parent, const uint32_t *tokens, size_t n,
                          uint64_t start, const kvp_extra_keys *x)
{
    memcpy(w, parent->b, 32);
    w = put_u32(w + 32, (uint32_t)n);
    w = put_u32s(w, tokens, n);
    uint8_t *flags = w++;
    *flags = 0;
    if (!x)
        return;
    if (x->has_lora) {
        *flags |= 1;
        w = put_u64(w, x->lora_id);
    }
    uint32_t k = 0;
    for (size_t i = 0; i < x->n_mm; i++)
        k += overlaps(&x->mm[i], start, n);
    if (k) {
        *flags |= 2;
        w = put_u32(w, k);
        for (size_t i = 0; i < x->n_mm; i++) {
            const kvp_mm_span *m = &x->mm[i];
            if (!overlaps(m, start, n))
                continue;
            uint64_t s = m->start > start ? m->start - start : 0;
            uint64_t e = m->end - start < n ? m->end - start : n;
            memcpy(w, m->hash.b, 32);
            w = put_u32(w + 32, (uint32_t)s);
            w = put_u32(w, (uint32_t)e);
        }
    }
    if (start == 0 && x->salt_len) {
        *flags |= 4;
        w = put_u32(w, (uint32_t)x->salt_len);
        memcpy(w, x->salt, x->salt_len);
    }
}

/* SHA-256 of the message, all 32 bytes. */
static void digest_sha256(const uint8_t *msg, size_t len, kvp_hash *out)
{
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, msg, len);
    SHA256_Final(out->b, &c);
}

/* XXH3-128 of the message, canonical (big-endian) in the last 16 bytes. */
static void digest_xxh3(const uint8_t *msg, size_t len, kvp_hash *out)
{
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(msg, len));
    memset(out->b, 0, 16);
    memcpy(out->b + 16, canon.digest, 16);
}

/* The algorithms, indexed by kvp_hash_alg: each one's name and digest of a
 * built message (KVP_HASH_CUSTOM has none: kvp_config.hash_fn hashes the
 * block itself).  A value outside the table is refused at creation. */
static const struct {
    const char *name;
    void (*digest)(const uint8_t *msg, size_t len, kvp_hash *out);
} algs[] = {
    [KVP_HASH_SHA256] = {"sha256", digest_sha256},
    [KVP_HASH_XXH3_128] = {"xxh3", digest_xxh3},
    [KVP_HASH_CUSTOM] = {"custom", NULL},
};
#define NALGS (sizeof algs / sizeof algs[0])

/* See kvpool.h. */
const char *kvp_hash_alg_name(int alg)
{
    return alg >= 0 && (size_t)alg < NALGS ? algs[alg].name : NULL;
}

/* See kvpool.h. */
KVP__DEFINE_PARSE(kvp_hash_alg_parse, kvp_hash_alg, kvp_hash_alg_name)

/* The configuration's algorithm is one of the table's, with a function
 * when it is KVP_HASH_CUSTOM.  KVP_OK or KVP_EINVAL (pool.c's validation). */
kvp_status kvp__hash_config_valid(const kvp_config *c)
{
    if ((unsigned)c->hash_alg >= NALGS || (c->hash_alg == KVP_HASH_CUSTOM && !c->hash_fn))
        return KVP_EINVAL;
    return KVP_OK;
}

/* Extra keys are usable: arrays present where counts say so, spans not
 * reversed, a salt length that fits the u32 of the layout.  Shared with the
 * sequences, which copy extra keys and must refuse what hashing would. */
kvp_status kvp__extra_valid(const kvp_extra_keys *x)
{
    if (!x)
        return KVP_OK;
    if ((x->n_mm && !x->mm) || (x->salt_len && !x->salt) || x->salt_len > UINT32_MAX)
        return KVP_EINVAL;
    for (size_t i = 0; i < x->n_mm; i++)
        if (x->mm[i].end < x->mm[i].start)
            return KVP_EINVAL;
    return KVP_OK;
}

/* Hash one block whose arguments are known to be valid. */
static kvp_status hash_one(const kvp_pool *p, const kvp_hash *parent, const uint32_t *tokens,
                           uint64_t start, const kvp_extra_keys *x, kvp_hash *out)
{
    const kvp_config *cfg = &p->cfg;
    size_t n = cfg->block_size;
    if (!parent)
        parent = &cfg->root_seed;
    if (cfg->hash_alg == KVP_HASH_CUSTOM)
        return cfg->hash_fn(cfg->hash_user, parent, tokens, n, start, x, out);
    size_t len = message_size(n, start, x);
    uint8_t stack[512];
    uint8_t *msg = len <= sizeof stack ? stack : kvp__alloc((kvp_pool *)p, len);
    if (!msg)
        return KVP_ENOMEM;
    write_message(msg, parent, tokens, n, start, x);
    algs[cfg->hash_alg].digest(msg, len, out);
    if (msg != stack)
        kvp__release((kvp_pool *)p, msg, len);
    return KVP_OK;
}

kvp_status kvp_hash_block(const kvp_pool *pool, const kvp_hash *parent, const uint32_t *tokens,
                          size_t n, uint64_t start, const kvp_extra_keys *extra, kvp_hash *out)
{
    uint64_t end; /* the block's end, start + n, is computed (overlaps): it must fit */
    if (!pool || !tokens || !out || n != pool->cfg.block_size || start % n != 0 ||
        !kvp__add_u64(start, n, &end) || (!parent && start != 0))
        return KVP_EINVAL;
    kvp_status rc = kvp__extra_valid(extra);
    return rc ? rc : hash_one(pool, parent, tokens, start, extra, out);
}

kvp_status kvp__hash_chain(const kvp_pool *p, const uint32_t *tokens, size_t nblocks,
                           const kvp_extra_keys *x, kvp_hash *hashes, size_t known)
{
    size_t bs = p->cfg.block_size;
    for (size_t i = known; i < nblocks; i++) {
        kvp_status rc = hash_one(p, i ? &hashes[i - 1] : NULL, tokens + i * bs, i * bs, x,
                                 &hashes[i]);
        if (rc)
            return rc;
    }
    return KVP_OK;
}

kvp_status kvp_hash_tokens(const kvp_pool *pool, const uint32_t *tokens, size_t n_tokens,
                           const kvp_extra_keys *extra, kvp_hash *hashes, size_t cap,
                           size_t n_known, size_t *n_out)
{
    if (!pool || (!tokens && n_tokens) || (!hashes && cap))
        return KVP_EINVAL;
    size_t nblocks = n_tokens / pool->cfg.block_size;
    if (n_known > nblocks)
        return KVP_EINVAL;
    kvp_status rc = kvp__extra_valid(extra);
    if (rc)
        return rc;
    if (n_out)
        *n_out = nblocks;
    if (cap < nblocks)
        return KVP_ESPACE;
    return kvp__hash_chain(pool, tokens, nblocks, extra, hashes, n_known);
}

/* Fill buf with n random bytes from the kernel (the keys of the pool's
 * hash tables, a random root): KVP_ENOMEM if it gives fewer. */
kvp_status kvp__random(void *buf, size_t n)
{
    return getrandom(buf, n, 0) == (ssize_t)n ? KVP_OK : KVP_ENOMEM;
}
