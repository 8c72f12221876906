/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hashing.c — chained block hashing (kvpool.h "Block hashing").
 *
 * Covers: known-answer vectors computed outside C (tests/vectors/
 * make_hash_vectors.py, Python hashlib + xxhash, from the byte layout in the
 * header) for SHA-256 and XXH3-128 through both kvp_hash_block and
 * kvp_hash_tokens: no extra keys, LoRA, multimodal spans (partial, full,
 * none, across two blocks, empty, order as given), salt (first block only),
 * block sizes 1, 4, 16, 120 and 1024, chains of several blocks, root seeds;
 * kvp_hash_tokens with n_known (entries below it are used, not recomputed),
 * KVP_ESPACE with the needed count, argument errors; random_root and fixed
 * root seeds across pools; the custom hash function (arguments, status
 * propagation, also through sequences); tenant isolation by cache salt.
 */
#include "kvptest.h"

#include <stdio.h>
#include <string.h>

#include "vectors/hash_vectors.h"

static void assert_hash_eq_at(const kvp_hash *got, const uint8_t *want, const char *what,
                              size_t i, const char *file, int line)
{
    if (memcmp(got->b, want, 32) == 0)
        return;
    char g[65], w[65];
    for (int k = 0; k < 32; k++) {
        snprintf(g + 2 * k, 3, "%02x", got->b[k]);
        snprintf(w + 2 * k, 3, "%02x", want[k]);
    }
    print_error("%s:%d: %s block %zu\n    got      %s\n    expected %s\n", file, line, what, i,
                g, w);
    _fail(file, line);
}
#define ASSERT_HASH_EQ(got, want, what, i) \
    assert_hash_eq_at((got), (want), (what), (i), __FILE__, __LINE__)

static kvp_pool *hash_pool(kvp_hash_alg alg, uint32_t bs, const uint8_t *root)
{
    kvp_config cfg = kvptest_config(8);
    cfg.block_size = bs;
    cfg.hash_alg = alg;
    if (root)
        memcpy(cfg.root_seed.b, root, 32);
    return kvptest_create(&cfg);
}

/* Build kvp_extra_keys for a vector case; NULL when it has none. */
static const kvp_extra_keys *case_extra(const hv_case *c, kvp_extra_keys *x, kvp_mm_span *mm,
                                        size_t mm_cap)
{
    memset(x, 0, sizeof *x);
    assert_true(c->n_mm <= mm_cap);
    for (size_t i = 0; i < c->n_mm; i++) {
        memcpy(mm[i].hash.b, c->mm[i].hash, 32);
        mm[i].start = c->mm[i].start;
        mm[i].end = c->mm[i].end;
    }
    x->has_lora = c->has_lora;
    x->lora_id = c->lora_id;
    x->lora_name = c->has_lora ? "adapter name is not hashed" : NULL;
    x->mm = c->n_mm ? mm : NULL;
    x->n_mm = c->n_mm;
    x->salt = c->salt;
    x->salt_len = c->salt_len;
    if (!c->has_lora && !c->n_mm && !c->salt_len)
        return NULL;
    return x;
}

/* ---- known-answer vectors ---------------------------------------------- */

static void test_vectors(void **state)
{
    (void)state;
    size_t n_sha = 0, n_xxh = 0;
    for (size_t ci = 0; ci < HV_N_CASES; ci++) {
        const hv_case *c = &hv_cases[ci];
        char what[96];
        snprintf(what, sizeof what, "%s (%s)", c->name,
                 c->alg == KVP_HASH_SHA256 ? "sha256" : "xxh3");
        n_sha += c->alg == KVP_HASH_SHA256;
        n_xxh += c->alg == KVP_HASH_XXH3_128;
        kvp_pool *pool = hash_pool((kvp_hash_alg)c->alg, c->block_size, c->root);
        kvp_extra_keys xs;
        kvp_mm_span mm[8];
        const kvp_extra_keys *x = case_extra(c, &xs, mm, ARRAY_LEN(mm));
        uint64_t fp = kvptest_fp(pool);

        /* kvp_hash_tokens: the whole chain in one call. */
        kvp_hash hashes[16];
        size_t n_out = 999;
        assert_true(c->n_blocks <= ARRAY_LEN(hashes));
        KVP_ASSERT_OK(kvp_hash_tokens(pool, c->tokens, c->n_tokens, x, hashes,
                                      ARRAY_LEN(hashes), 0, &n_out));
        KVP_ASSERT_EQ(n_out, c->n_blocks);
        for (size_t i = 0; i < c->n_blocks; i++)
            ASSERT_HASH_EQ(&hashes[i], c->expected[i], what, i);

        /* kvp_hash_block: block by block, parent from the vectors. */
        for (size_t i = 0; i < c->n_blocks; i++) {
            kvp_hash parent, out;
            memset(&out, 0xa5, sizeof out);
            const kvp_hash *pp = NULL;
            if (i > 0) {
                memcpy(parent.b, c->expected[i - 1], 32);
                pp = &parent;
            }
            KVP_ASSERT_OK(kvp_hash_block(pool, pp, c->tokens + i * c->block_size,
                                         c->block_size, (uint64_t)i * c->block_size, x, &out));
            ASSERT_HASH_EQ(&out, c->expected[i], what, i);
            if (i == 0) {
                /* The root seed given explicitly is the same as NULL. */
                memcpy(parent.b, c->root, 32);
                KVP_ASSERT_OK(kvp_hash_block(pool, &parent, c->tokens, c->block_size, 0, x,
                                             &out));
                ASSERT_HASH_EQ(&out, c->expected[0], what, i);
            }
            if (c->alg == KVP_HASH_XXH3_128) {
                static const uint8_t zero16[16];
                assert_memory_equal(out.b, zero16, 16);
            }
        }

        /* An extra-keys struct with nothing set hashes like NULL. */
        if (x == NULL) {
            kvp_extra_keys empty;
            memset(&empty, 0, sizeof empty);
            empty.lora_name = "ignored";
            kvp_hash h2[16];
            KVP_ASSERT_OK(kvp_hash_tokens(pool, c->tokens, c->n_tokens, &empty, h2,
                                          ARRAY_LEN(h2), 0, NULL));
            for (size_t i = 0; i < c->n_blocks; i++)
                ASSERT_HASH_EQ(&h2[i], c->expected[i], what, i);
        }
        /* Hashing is pure. */
        KVP_ASSERT_EQ(kvptest_fp(pool), fp);
        kvptest_done(pool);
    }
    assert_true(n_sha >= 10);
    assert_true(n_xxh >= 10);
}

/* Salt reaches the second block only through the chain. */
static void test_salt_first_block_only(void **state)
{
    (void)state;
    for (int alg = 0; alg < 2; alg++) {
        kvp_pool *pool = hash_pool((kvp_hash_alg)alg, 4, NULL);
        uint32_t t[12];
        kvptest_tokens(t, 12, 100);
        static const uint8_t salt[] = "tenant";
        kvp_extra_keys xs;
        memset(&xs, 0, sizeof xs);
        xs.salt = salt;
        xs.salt_len = sizeof salt - 1;
        kvp_hash a[3], b[3];
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, &xs, a, 3, 0, NULL));
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, NULL, b, 3, 0, NULL));
        for (int i = 0; i < 3; i++)
            assert_memory_not_equal(a[i].b, b[i].b, 32);
        /* Same parent, salt or not: block 1 hashes the same. */
        kvp_hash s1, n1;
        KVP_ASSERT_OK(kvp_hash_block(pool, &a[0], t + 4, 4, 4, &xs, &s1));
        KVP_ASSERT_OK(kvp_hash_block(pool, &a[0], t + 4, 4, 4, NULL, &n1));
        assert_memory_equal(s1.b, n1.b, 32);
        assert_memory_equal(s1.b, a[1].b, 32);
        /* salt_len 0 with a pointer: no salt. */
        xs.salt_len = 0;
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, &xs, a, 3, 0, NULL));
        assert_memory_equal(a, b, sizeof a);
        /* LoRA id 0 is not "no LoRA". */
        xs.has_lora = 1;
        xs.lora_id = 0;
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, &xs, a, 3, 0, NULL));
        assert_memory_not_equal(a[0].b, b[0].b, 32);
        kvp_pool_destroy(pool);
    }
}

/* Both algorithms differ and the root seed matters. */
static void test_algorithms_and_root_differ(void **state)
{
    (void)state;
    uint8_t root[32];
    memset(root, 0x11, sizeof root);
    kvp_pool *sha = hash_pool(KVP_HASH_SHA256, 16, NULL);
    kvp_pool *xxh = hash_pool(KVP_HASH_XXH3_128, 16, NULL);
    kvp_pool *sha_r = hash_pool(KVP_HASH_SHA256, 16, root);
    kvp_pool *sha_r2 = hash_pool(KVP_HASH_SHA256, 16, root);
    uint32_t t[16] = {1, 2, 3};
    kvp_hash a, b, c, d;
    KVP_ASSERT_OK(kvp_hash_block(sha, NULL, t, 16, 0, NULL, &a));
    KVP_ASSERT_OK(kvp_hash_block(xxh, NULL, t, 16, 0, NULL, &b));
    KVP_ASSERT_OK(kvp_hash_block(sha_r, NULL, t, 16, 0, NULL, &c));
    KVP_ASSERT_OK(kvp_hash_block(sha_r2, NULL, t, 16, 0, NULL, &d));
    assert_memory_not_equal(a.b, b.b, 32);
    assert_memory_not_equal(a.b, c.b, 32);
    assert_memory_equal(c.b, d.b, 32);
    kvp_pool_destroy(sha);
    kvp_pool_destroy(xxh);
    kvp_pool_destroy(sha_r);
    kvp_pool_destroy(sha_r2);
}

/* ---- custom hash recorder ---------------------------------------------- */

#define REC_MAX 32
typedef struct hrec {
    size_t calls;
    int fail_at;          /* call index (0-based) that fails; -1 never */
    kvp_status fail_status;
    int degenerate;       /* every block hashes the same */
    kvp_hash parent[REC_MAX];
    uint32_t tok0[REC_MAX];
    size_t n[REC_MAX];
    uint64_t start[REC_MAX];
    const kvp_extra_keys *extra[REC_MAX];
    uint64_t lora[REC_MAX];
    void *user[REC_MAX];
} hrec;

/* A simple mixing hash: parent, tokens and start into the last 8 bytes. */
static kvp_status rec_hash(void *user, const kvp_hash *parent, const uint32_t *tokens, size_t n,
                           uint64_t start, const kvp_extra_keys *extra, kvp_hash *out)
{
    hrec *r = user;
    size_t i = r->calls++;
    if (i < REC_MAX) {
        r->parent[i] = *parent;
        r->tok0[i] = n ? tokens[0] : 0;
        r->n[i] = n;
        r->start[i] = start;
        r->extra[i] = extra;
        r->lora[i] = extra && extra->has_lora ? extra->lora_id : UINT64_MAX;
        r->user[i] = user;
    }
    if (r->fail_at >= 0 && (size_t)r->fail_at == i)
        return r->fail_status;
    uint64_t v = 0x9e3779b97f4a7c15ull;
    if (!r->degenerate) {
        v ^= kvptest_hash_u64(parent) * 31;
        for (size_t k = 0; k < n; k++)
            v = (v ^ tokens[k]) * 0x100000001b3ull;
        v ^= start;
    }
    *out = kvptest_hash(v);
    return KVP_OK;
}

static kvp_pool *custom_pool(hrec *r, uint32_t bs, uint32_t nblocks)
{
    memset(r, 0, sizeof *r);
    r->fail_at = -1;
    kvp_config cfg = kvptest_config(nblocks);
    cfg.block_size = bs;
    cfg.hash_alg = KVP_HASH_CUSTOM;
    cfg.hash_fn = rec_hash;
    cfg.hash_user = r;
    cfg.root_seed = kvptest_hash(0xabcdef);
    return kvptest_create(&cfg);
}

static void test_custom_hash_arguments(void **state)
{
    (void)state;
    hrec r;
    kvp_pool *pool = custom_pool(&r, 4, 8);
    uint32_t t[14];
    kvptest_tokens(t, 14, 1000);
    kvp_extra_keys xs;
    memset(&xs, 0, sizeof xs);
    xs.has_lora = 1;
    xs.lora_id = 77;
    kvp_hash h[3];
    size_t n_out = 0;
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 14, &xs, h, 3, 0, &n_out));
    KVP_ASSERT_EQ(n_out, 3);
    KVP_ASSERT_EQ(r.calls, 3);
    for (size_t i = 0; i < 3; i++) {
        const kvp_hash *want_parent = NULL;
        kvp_hash root = kvptest_hash(0xabcdef);
        want_parent = i ? &h[i - 1] : &root;
        assert_memory_equal(r.parent[i].b, want_parent->b, 32);
        KVP_ASSERT_EQ(r.tok0[i], 1000 + 4 * i);
        KVP_ASSERT_EQ(r.n[i], 4);
        KVP_ASSERT_EQ(r.start[i], 4 * i);
        assert_non_null(r.extra[i]);
        KVP_ASSERT_EQ(r.lora[i], 77);
        assert_ptr_equal(r.user[i], &r);
    }
    /* kvp_hash_block hands its arguments through, the result is the fn's. */
    kvp_hash out, parent = kvptest_hash(5);
    KVP_ASSERT_OK(kvp_hash_block(pool, &parent, t + 8, 4, 8, NULL, &out));
    KVP_ASSERT_EQ(r.calls, 4);
    KVP_ASSERT_EQ(kvptest_hash_u64(&r.parent[3]), 5);
    KVP_ASSERT_EQ(r.start[3], 8);
    KVP_ASSERT_EQ(r.tok0[3], 1008);
    assert_null(r.extra[3]);
    /* Result = what the function wrote. */
    uint64_t v = 0x9e3779b97f4a7c15ull ^ (5ull * 31);
    for (int k = 0; k < 4; k++)
        v = (v ^ t[8 + k]) * 0x100000001b3ull;
    v ^= 8;
    KVP_ASSERT_EQ(kvptest_hash_u64(&out), v);
    kvp_pool_destroy(pool);
}

static void test_custom_hash_error_propagates(void **state)
{
    (void)state;
    hrec r;
    kvp_pool *pool = custom_pool(&r, 4, 8);
    uint32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kvp_hash h[3], out;
    r.fail_at = 1;
    r.fail_status = KVP_ERANGE;
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 12, NULL, h, 3, 0, NULL), KVP_ERANGE);
    r.calls = 0;
    r.fail_at = 0;
    r.fail_status = KVP_ENOMEM;
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 4, 0, NULL, &out), KVP_ENOMEM);

    /* Through a sequence: admission and append are refused, nothing
     * changes. */
    kvp_seq *s = NULL;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &s));
    r.calls = 0;
    r.fail_at = 1;
    r.fail_status = KVP_ENOTOWNER;
    size_t cached = 12345;
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(s, t, 12, &cached), KVP_ENOTOWNER);
    const kvp_block *ids;
    size_t nb = 9, nt = 9;
    KVP_ASSERT_OK(kvp_seq_blocks(s, &ids, &nb, &nt));
    KVP_ASSERT_EQ(nb, 0);
    KVP_ASSERT_EQ(nt, 0);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.in_use, 0);
    KVP_ASSERT_EQ(st.prefix_queries, 0);
    /* Admit 6 tokens (one full block), then an append that fills the
     * second block fails in the hash: refused. */
    r.fail_at = -1;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 6, &cached));
    KVP_ASSERT_EQ(cached, 0);
    r.calls = 0;
    r.fail_at = 0;
    r.fail_status = KVP_ERANGE;
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(s, t + 6, 4), KVP_ERANGE);
    KVP_ASSERT_OK(kvp_seq_blocks(s, &ids, &nb, &nt));
    KVP_ASSERT_EQ(nb, 2);
    KVP_ASSERT_EQ(nt, 6);
    /* It works afterwards and continues the right chain. */
    r.fail_at = -1;
    KVP_ASSERT_OK(kvp_seq_append(s, t + 6, 4));
    KVP_ASSERT_OK(kvp_seq_blocks(s, &ids, &nb, &nt));
    KVP_ASSERT_EQ(nt, 10);
    kvp_hash want[2];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 8, NULL, want, 2, 0, NULL));
    kvp_block_info bi = kvptest_info(pool, ids[1]);
    KVP_ASSERT_EQ(bi.published, 1);
    assert_memory_equal(bi.hash.b, want[1].b, 32);
    KVP_ASSERT_OK(kvp_seq_destroy(s));
    kvptest_done(pool);
}

/* ---- kvp_hash_tokens: n_known, ESPACE, errors ------------------------- */

static void test_hash_tokens_known(void **state)
{
    (void)state;
    for (int alg = 0; alg < 3; alg++) {
        hrec r;
        kvp_pool *pool;
        if (alg == KVP_HASH_CUSTOM)
            pool = custom_pool(&r, 4, 8);
        else
            pool = hash_pool((kvp_hash_alg)alg, 4, NULL);
        uint32_t t[17];
        for (int i = 0; i < 17; i++)
            t[i] = (uint32_t)(i * 7 + 3);
        kvp_hash full[4], h[4];
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 17, NULL, full, 4, 0, NULL));

        /* Growing by one block: the known prefix gives the same chain. */
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, NULL, h, 4, 0, NULL));
        size_t before = r.calls;
        size_t n_out = 0;
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 17, NULL, h, 4, 3, &n_out));
        KVP_ASSERT_EQ(n_out, 4);
        assert_memory_equal(h, full, sizeof full);
        if (alg == KVP_HASH_CUSTOM)
            KVP_ASSERT_EQ(r.calls - before, 1); /* one block hash */

        /* Entries below n_known are taken as they are: corrupt them and
         * they stay corrupt, and the chain continues from them. */
        memcpy(h, full, sizeof h);
        kvp_hash junk = kvptest_hash(0xdeadbeef);
        h[0] = junk;
        h[1] = junk;
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 17, NULL, h, 4, 2, NULL));
        assert_memory_equal(h[0].b, junk.b, 32);
        assert_memory_equal(h[1].b, junk.b, 32);
        kvp_hash want2;
        KVP_ASSERT_OK(kvp_hash_block(pool, &junk, t + 8, 4, 8, NULL, &want2));
        assert_memory_equal(h[2].b, want2.b, 32);
        assert_memory_not_equal(h[2].b, full[2].b, 32);

        /* n_known == blocks: nothing is computed, nothing written. */
        memset(h, 0x5a, sizeof h);
        kvp_hash pattern[4];
        memcpy(pattern, h, sizeof h);
        before = r.calls;
        KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 17, NULL, h, 4, 4, &n_out));
        KVP_ASSERT_EQ(n_out, 4);
        assert_memory_equal(h, pattern, sizeof h);
        if (alg == KVP_HASH_CUSTOM)
            KVP_ASSERT_EQ(r.calls, before);

        /* n_known above the number of full blocks: EINVAL. */
        KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 17, NULL, h, 4, 5, &n_out), KVP_EINVAL);
        KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 3, NULL, h, 4, 1, &n_out), KVP_EINVAL);
        kvp_pool_destroy(pool);
    }
}

static void test_hash_tokens_espace(void **state)
{
    (void)state;
    kvp_pool *pool = hash_pool(KVP_HASH_SHA256, 4, NULL);
    uint32_t t[17] = {0};
    kvp_hash h[4];
    memset(h, 0x77, sizeof h);
    kvp_hash pattern[4];
    memcpy(pattern, h, sizeof h);
    size_t n_out = 0;
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 17, NULL, h, 3, 0, &n_out), KVP_ESPACE);
    KVP_ASSERT_EQ(n_out, 4);
    assert_memory_equal(h, pattern, sizeof h);
    n_out = 0;
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 17, NULL, NULL, 0, 0, &n_out), KVP_ESPACE);
    KVP_ASSERT_EQ(n_out, 4);
    /* ESPACE without n_out. */
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 16, NULL, h, 1, 0, NULL), KVP_ESPACE);
    assert_memory_equal(h, pattern, sizeof h);
    /* Exactly enough. */
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 17, NULL, h, 4, 0, &n_out));
    KVP_ASSERT_EQ(n_out, 4);
    /* No full block: zero blocks, no room needed. */
    n_out = 99;
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 3, NULL, NULL, 0, 0, &n_out));
    KVP_ASSERT_EQ(n_out, 0);
    n_out = 99;
    KVP_ASSERT_OK(kvp_hash_tokens(pool, NULL, 0, NULL, NULL, 0, 0, &n_out));
    KVP_ASSERT_EQ(n_out, 0);
    kvp_pool_destroy(pool);
}

static void test_hash_args(void **state)
{
    (void)state;
    kvp_pool *pool = hash_pool(KVP_HASH_SHA256, 4, NULL);
    uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    kvp_hash out, parent = kvptest_hash(1);
    KVP_ASSERT_STATUS(kvp_hash_block(NULL, NULL, t, 4, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, NULL, 4, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 4, 0, NULL, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 3, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 5, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 0, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, &parent, t, 4, 2, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 4, 4, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_OK(kvp_hash_block(pool, &parent, t, 4, 4, NULL, &out));
    kvp_mm_span bad = {.start = 5, .end = 4};
    kvp_extra_keys xs = {.mm = &bad, .n_mm = 1};
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 4, 0, &xs, &out), KVP_EINVAL);
    /* Even a span far from this block is checked. */
    bad.start = 100;
    bad.end = 50;
    KVP_ASSERT_STATUS(kvp_hash_block(pool, NULL, t, 4, 0, &xs, &out), KVP_EINVAL);

    kvp_hash h[2];
    KVP_ASSERT_STATUS(kvp_hash_tokens(NULL, t, 8, NULL, h, 2, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, NULL, 8, NULL, h, 2, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 8, NULL, NULL, 2, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 8, NULL, h, 2, 3, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_hash_tokens(pool, t, 8, &xs, h, 2, 0, NULL), KVP_EINVAL);
    kvp_pool_destroy(pool);
}

/* ---- root seeds --------------------------------------------------------- */

static void test_random_root(void **state)
{
    (void)state;
    hrec r1, r2;
    kvp_pool *p[2];
    hrec *rs[2] = {&r1, &r2};
    for (int i = 0; i < 2; i++) {
        memset(rs[i], 0, sizeof *rs[i]);
        rs[i]->fail_at = -1;
        kvp_config cfg = kvptest_config(4);
        cfg.block_size = 4;
        cfg.hash_alg = KVP_HASH_CUSTOM;
        cfg.hash_fn = rec_hash;
        cfg.hash_user = rs[i];
        cfg.random_root = 1;
        p[i] = kvptest_create(&cfg);
    }
    uint32_t t[4] = {1, 2, 3, 4};
    kvp_hash out;
    KVP_ASSERT_OK(kvp_hash_block(p[0], NULL, t, 4, 0, NULL, &out));
    KVP_ASSERT_OK(kvp_hash_block(p[1], NULL, t, 4, 0, NULL, &out));
    static const uint8_t zero[32];
    /* The custom hash sees the roots: random, so different and not zero. */
    assert_memory_not_equal(r1.parent[0].b, r2.parent[0].b, 32);
    assert_memory_not_equal(r1.parent[0].b, zero, 32);
    /* The root stays fixed for the pool's life. */
    KVP_ASSERT_OK(kvp_hash_block(p[0], NULL, t, 4, 0, NULL, &out));
    assert_memory_equal(r1.parent[0].b, r1.parent[1].b, 32);
    kvp_pool_destroy(p[0]);
    kvp_pool_destroy(p[1]);

    /* With SHA-256 and XXH3: random roots give different hashes, a fixed
     * root_seed identical ones across pools. */
    for (int alg = 0; alg < 2; alg++) {
        kvp_hash h[4];
        for (int i = 0; i < 4; i++) {
            kvp_config cfg = kvptest_config(4);
            cfg.block_size = 4;
            cfg.hash_alg = (kvp_hash_alg)alg;
            if (i < 2)
                cfg.random_root = 1;
            else
                cfg.root_seed = kvptest_hash(0x1234567890ull);
            kvp_pool *pool = kvptest_create(&cfg);
            KVP_ASSERT_OK(kvp_hash_block(pool, NULL, t, 4, 0, NULL, &h[i]));
            kvp_pool_destroy(pool);
        }
        assert_memory_not_equal(h[0].b, h[1].b, 32);
        assert_memory_equal(h[2].b, h[3].b, 32);
        assert_memory_not_equal(h[0].b, h[2].b, 32);
    }
}

/* ---- tenant isolation --------------------------------------------------- */

static kvp_seq *seq_new(kvp_pool *pool, uint64_t id, const kvp_extra_keys *x)
{
    kvp_seq *s = NULL;
    KVP_ASSERT_OK(kvp_seq_create(pool, id, x, &s));
    assert_non_null(s);
    return s;
}

static size_t admit(kvp_seq *s, const uint32_t *t, size_t n)
{
    size_t cached = 999;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, n, &cached));
    return cached;
}

static void test_tenant_isolation(void **state)
{
    (void)state;
    for (int alg = 0; alg < 2; alg++) {
        kvp_config cfg = kvptest_config(64);
        cfg.block_size = 4;
        cfg.hash_alg = (kvp_hash_alg)alg;
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t t[13];
        kvptest_tokens(t, 13, 50);
        /* Salts are copied at create: use stack buffers that change. */
        uint8_t salt_a[3] = {'A', 'A', 'A'}, salt_b[3] = {'B', 'B', 'B'};
        kvp_extra_keys xa, xb;
        memset(&xa, 0, sizeof xa);
        memset(&xb, 0, sizeof xb);
        xa.salt = salt_a;
        xa.salt_len = 3;
        xb.salt = salt_b;
        xb.salt_len = 3;
        kvp_seq *a = seq_new(pool, 1, &xa);
        kvp_seq *b = seq_new(pool, 2, &xb);
        KVP_ASSERT_EQ(admit(a, t, 13), 0);
        KVP_ASSERT_EQ(admit(b, t, 13), 0);
        const kvp_block *ia, *ib;
        size_t na, nb;
        KVP_ASSERT_OK(kvp_seq_blocks(a, &ia, &na, NULL));
        KVP_ASSERT_OK(kvp_seq_blocks(b, &ib, &nb, NULL));
        KVP_ASSERT_EQ(na, 4);
        KVP_ASSERT_EQ(nb, 4);
        for (size_t i = 0; i < na; i++)
            for (size_t j = 0; j < nb; j++)
                assert_int_not_equal(ia[i], ib[j]);
        /* Same salt (another buffer, same bytes): shares. */
        uint8_t salt_a2[3] = {'A', 'A', 'A'};
        salt_a[0] = 'Z'; /* the sequence kept its own copy */
        kvp_extra_keys xa2 = xa;
        xa2.salt = salt_a2;
        kvp_seq *c = seq_new(pool, 3, &xa2);
        KVP_ASSERT_EQ(admit(c, t, 13), 12);
        const kvp_block *ic;
        size_t nc;
        KVP_ASSERT_OK(kvp_seq_blocks(c, &ic, &nc, NULL));
        for (size_t i = 0; i < 3; i++) {
            KVP_ASSERT_EQ(ic[i], ia[i]);
            KVP_ASSERT_EQ(kvptest_info(pool, ia[i]).ref_count, 2);
        }
        assert_int_not_equal(ic[3], ia[3]);
        /* No salt: no hit either. */
        kvp_seq *d = seq_new(pool, 4, NULL);
        KVP_ASSERT_EQ(admit(d, t, 13), 0);
        /* After a and c finish (their blocks cached), b's tenant still never
         * hits them, and a new "A" still does. */
        KVP_ASSERT_OK(kvp_seq_destroy(a));
        KVP_ASSERT_OK(kvp_seq_destroy(c));
        KVP_ASSERT_OK(kvp_seq_destroy(d));
        kvp_seq *e = seq_new(pool, 5, &xb);
        KVP_ASSERT_EQ(admit(e, t, 13), 12); /* b's own blocks */
        const kvp_block *ie;
        size_t ne;
        KVP_ASSERT_OK(kvp_seq_blocks(e, &ie, &ne, NULL));
        for (size_t i = 0; i < 3; i++)
            KVP_ASSERT_EQ(ie[i], ib[i]);
        kvp_extra_keys xc;
        memset(&xc, 0, sizeof xc);
        uint8_t salt_c[3] = {'C', 'C', 'C'};
        xc.salt = salt_c;
        xc.salt_len = 3;
        kvp_seq *f = seq_new(pool, 6, &xc);
        KVP_ASSERT_EQ(admit(f, t, 13), 0);
        kvp_seq *g = seq_new(pool, 7, &xa2);
        KVP_ASSERT_EQ(admit(g, t, 13), 12);
        kvptest_done(pool);
    }
}

/* The algorithms by name, and a value the table does not hold refused at
 * creation with KVP_EINVAL, the output untouched. */
static void test_alg_table(void **state)
{
    (void)state;
    assert_string_equal(kvp_hash_alg_name(KVP_HASH_SHA256), "sha256");
    assert_string_equal(kvp_hash_alg_name(KVP_HASH_XXH3_128), "xxh3");
    assert_string_equal(kvp_hash_alg_name(KVP_HASH_CUSTOM), "custom");
    int n = 0;
    for (; kvp_hash_alg_name(n); n++) {
        kvp_hash_alg a = (kvp_hash_alg)-1;
        KVP_ASSERT_OK(kvp_hash_alg_parse(kvp_hash_alg_name(n), &a));
        KVP_ASSERT_EQ(a, n);
    }
    KVP_ASSERT_EQ(n, 3);
    assert_null(kvp_hash_alg_name(-1));
    kvp_hash_alg a = KVP_HASH_XXH3_128;
    const char *bad[] = {"SHA256", "xxh3_64", "sha", "", "sha256 "};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        KVP_ASSERT_STATUS(kvp_hash_alg_parse(bad[i], &a), KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_hash_alg_parse(NULL, &a), KVP_EINVAL);
    KVP_ASSERT_EQ(a, KVP_HASH_XXH3_128); /* untouched by every refusal */
    KVP_ASSERT_STATUS(kvp_hash_alg_parse("sha256", NULL), KVP_EINVAL);

    const int unknown[] = {n, n + 1, 255, -1, 1 << 30};
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++) {
        kvp_config cfg = kvptest_config(8);
        cfg.hash_alg = (kvp_hash_alg)unknown[i];
        kvp_config before = cfg;
        kvp_pool *pool = (kvp_pool *)&before;
        KVP_ASSERT_STATUS(kvp_pool_create(&cfg, &pool), KVP_EINVAL);
        assert_ptr_equal(pool, (kvp_pool *)&before);
        assert_memory_equal(&cfg, &before, sizeof cfg);
    }
    /* every algorithm with a digest hashes; the two differ */
    uint32_t toks[4] = {1, 2, 3, 4};
    kvp_hash h[2];
    for (int i = 0; i < 2; i++) {
        kvp_pool *pool = hash_pool((kvp_hash_alg)i, 4, NULL);
        KVP_ASSERT_OK(kvp_hash_block(pool, NULL, toks, 4, 0, NULL, &h[i]));
        kvptest_done(pool);
    }
    assert_memory_not_equal(h[0].b, h[1].b, 32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_salt_first_block_only),
        cmocka_unit_test(test_algorithms_and_root_differ),
        cmocka_unit_test(test_custom_hash_arguments),
        cmocka_unit_test(test_custom_hash_error_propagates),
        cmocka_unit_test(test_hash_tokens_known),
        cmocka_unit_test(test_hash_tokens_espace),
        cmocka_unit_test(test_hash_args),
        cmocka_unit_test(test_random_root),
        cmocka_unit_test(test_tenant_isolation),
        cmocka_unit_test(test_alg_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
