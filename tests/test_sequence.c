/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sequence.c — sequences (per-request block tables) and verified hits,
 * from kvpool.h "Sequences" and "Verified hits".
 *
 * Covers: prefix hits on blocks still held (ref count 2) and on free cached
 * blocks (off the free list); eviction order after requests finish (tail
 * first, older content first); publication of a partial block only when it
 * fills; a reused block losing its old hash; all-or-nothing admission (also
 * when part of the prefix would hit free cached blocks); the "leave one
 * token to compute" cap; kvp_seq_probe agreeing with the admission it
 * predicts and changing nothing; truncation (a cut in the partial block, in
 * a published or shared block, which continues in a copy, at a boundary, to
 * nothing) and its refusals; no eviction of blocks matched by the same
 * admission; reset of the prefix cache while sequences hold blocks (also
 * with the null block); fork and copy-on-write; destroy order in every reuse
 * order; the null block never handed out; kvp_seq_blocks pointer stability,
 * kvp_seq_find, id reuse, separate K/V refusal; relocation by kvp_retire_top
 * rewriting tables; prefix/cow/tokens_in_use statistics; verified hits with
 * a degenerate custom hash, and kvp_publish_verified/kvp_lookup_verified
 * (parent mismatch, parent evicted, parent relocated).
 */
#include "kvptest.h"

#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

/* nblocks blocks of bs tokens each, in the given reuse order. */
static kvp_config seq_config(uint32_t nblocks, uint32_t bs, kvp_reuse reuse)
{
    kvp_config cfg = kvptest_config(nblocks);
    cfg.block_size = bs;
    cfg.reuse = reuse;
    return cfg;
}

/* seq_config() made into a pool (checked). */
static kvp_pool *seq_pool_at(uint32_t nblocks, uint32_t bs, kvp_reuse reuse, const char *file,
                             int line)
{
    kvp_config cfg = seq_config(nblocks, bs, reuse);
    return kvptest_create_at(&cfg, file, line);
}
#define seq_pool(n, bs, reuse) seq_pool_at((n), (bs), (reuse), __FILE__, __LINE__)

static kvp_seq *mkseq_at(kvp_pool *pool, uint64_t id, const char *file, int line)
{
    kvp_seq *s = NULL;
    kvptest_assert_status(kvp_seq_create(pool, id, NULL, &s), KVP_OK, "kvp_seq_create", file,
                          line);
    if (!s)
        _fail(file, line);
    return s;
}
#define mkseq(pool, id) mkseq_at((pool), (id), __FILE__, __LINE__)

static size_t admit_at(kvp_seq *s, const uint32_t *t, size_t n, const char *file, int line)
{
    size_t cached = 999999;
    kvptest_assert_status(kvp_seq_admit(s, t, n, &cached), KVP_OK, "kvp_seq_admit", file, line);
    return cached;
}
#define admit(s, t, n) admit_at((s), (t), (n), __FILE__, __LINE__)

#define APPEND(s, t, n) KVP_ASSERT_OK(kvp_seq_append((s), (t), (n)))

/* Copy of the block table; returns the number of blocks. */
static size_t table_at(kvp_seq *s, kvp_block *out, size_t cap, size_t *ntok, const char *file,
                       int line)
{
    const kvp_block *ids = NULL;
    size_t nb = 0, nt = 0;
    kvptest_assert_status(kvp_seq_blocks(s, &ids, &nb, &nt), KVP_OK, "kvp_seq_blocks", file,
                          line);
    if (nb > cap)
        _fail(file, line);
    if (nb)
        memcpy(out, ids, nb * sizeof *ids);
    if (ntok)
        *ntok = nt;
    return nb;
}
#define table(s, out, ntok) table_at((s), (out), ARRAY_LEN(out), (ntok), __FILE__, __LINE__)

static uint32_t refs(kvp_pool *pool, kvp_block b)
{
    return kvptest_info(pool, b).ref_count;
}

static kvp_block lookup_hash(kvp_pool *pool, const kvp_hash *h)
{
    kvp_block b = KVP_NO_BLOCK;
    kvp_status st = kvp_lookup(pool, KVP_STREAM_SHARED, h, &b);
    if (st == KVP_ENOTFOUND)
        return KVP_NO_BLOCK;
    KVP_ASSERT_OK(st);
    return b;
}

/* ---- hits ----------------------------------------------------------------- */

static void test_hit_while_held(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(16, 4, KVP_REUSE_LIFO);
    uint32_t t[9];
    kvptest_tokens(t, 9, 100);
    kvp_seq *a = mkseq(pool, 1), *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(a, t, 9), 0);
    kvp_block ia[8], ib[8];
    size_t nt;
    KVP_ASSERT_EQ(table(a, ia, &nt), 3);
    KVP_ASSERT_EQ(nt, 9);
    for (int i = 0; i < 3; i++) {
        kvp_block_info bi = kvptest_info(pool, ia[i]);
        KVP_ASSERT_EQ(bi.ref_count, 1);
        KVP_ASSERT_EQ(bi.seq_refs, 1);
        KVP_ASSERT_EQ(bi.anon_refs, 0);
        KVP_ASSERT_EQ(bi.owner, KVP_ANON);
        KVP_ASSERT_EQ(bi.state, KVP_BLOCK_IN_USE);
        KVP_ASSERT_EQ(bi.published, i < 2);
        KVP_ASSERT_EQ(bi.fill, i < 2 ? 4 : 1);
    }
    KVP_ASSERT_EQ(admit(b, t, 9), 8);
    KVP_ASSERT_EQ(table(b, ib, &nt), 3);
    KVP_ASSERT_EQ(nt, 9);
    KVP_ASSERT_EQ(ib[0], ia[0]);
    KVP_ASSERT_EQ(ib[1], ia[1]);
    assert_int_not_equal(ib[2], ia[2]);
    KVP_ASSERT_EQ(refs(pool, ia[0]), 2);
    KVP_ASSERT_EQ(refs(pool, ia[1]), 2);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[0]).seq_refs, 2);
    KVP_ASSERT_EQ(refs(pool, ia[2]), 1);
    KVP_ASSERT_EQ(refs(pool, ib[2]), 1);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.in_use, 4);
    KVP_ASSERT_EQ(st.shared, 2);
    KVP_ASSERT_EQ(st.indexed, 2);
    KVP_ASSERT_EQ(st.prefix_queries, 4);
    KVP_ASSERT_EQ(st.prefix_hits, 2);
    KVP_ASSERT_EQ(st.prefix_tokens_queried, 16);
    KVP_ASSERT_EQ(st.prefix_tokens_hit, 8);
    KVP_ASSERT_EQ(st.tokens_in_use, 4 + 4 + 1 + 1);
    /* Owner calls never touch sequences. */
    KVP_ASSERT_REFUSED(pool, kvp_free_owner(pool, 1, NULL), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, &ia[0], 1, 1), KVP_ENOTOWNER);
    KVP_ASSERT_EQ(st.owners, 0);
    kvptest_check(pool);
    /* Destroying a drops one reference each. */
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_EQ(refs(pool, ia[0]), 1);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[2]).state, KVP_BLOCK_VACANT);
    kvptest_done(pool);
}

static void test_hit_on_free_cached(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(16, 4, KVP_REUSE_LIFO);
    uint32_t t[9];
    kvptest_tokens(t, 9, 100);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 9);
    kvp_block ia[8], ib[8];
    table(a, ia, NULL);
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 16);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[0]).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[2]).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(kvptest_stats(pool).cached, 2);
    kvp_seq *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(b, t, 9), 8);
    table(b, ib, NULL);
    KVP_ASSERT_EQ(ib[0], ia[0]);
    KVP_ASSERT_EQ(ib[1], ia[1]);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 13);
    for (int i = 0; i < 2; i++) {
        kvp_block_info bi = kvptest_info(pool, ib[i]);
        KVP_ASSERT_EQ(bi.state, KVP_BLOCK_IN_USE);
        KVP_ASSERT_EQ(bi.ref_count, 1);
        KVP_ASSERT_EQ(bi.published, 1);
        KVP_ASSERT_EQ(bi.fill, 4);
    }
    KVPTEST_EXPECT_STATS(pool, ST(cached, 0), ST(in_use, 3), ST(evictions, 0));
    kvptest_done(pool);
}

/* ---- eviction order -------------------------------------------------------- */

static void test_eviction_order(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        for (int reuse = 0; reuse < 3; reuse++) {
            kvptest_evrec rec;
            kvp_config cfg = seq_config(8, 4, (kvp_reuse)reuse);
            kvptest_evrec_attach(&rec, &cfg);
            kvp_pool *pool = kvptest_create(&cfg);
            uint32_t ta[13], tb[13];
            kvptest_tokens(ta, 13, 1000);
            kvptest_tokens(tb, 13, 2000);
            kvp_seq *a = mkseq(pool, 1), *b = mkseq(pool, 2);
            admit(a, ta, 13);
            admit(b, tb, 13);
            kvp_block ia[8], ib[8];
            table(a, ia, NULL);
            table(b, ib, NULL);
            KVP_ASSERT_OK(kvp_seq_destroy(a));
            KVP_ASSERT_OK(kvp_seq_destroy(b));
            KVP_ASSERT_EQ(kvptest_stats(pool).cached, 6);
            kvp_block want[6] = {ia[2], ia[1], ia[0], ib[2], ib[1], ib[0]};
            if (mode == 0) {
                uint32_t n = 0;
                KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 100, &n));
                KVP_ASSERT_EQ(n, 6);
            } else {
                /* Allocation pressure: a new request needs all 8 blocks. */
                uint32_t tc[32];
                kvptest_tokens(tc, 32, 3000);
                kvp_seq *c = mkseq(pool, 3);
                KVP_ASSERT_EQ(admit(c, tc, 32), 0);
            }
            KVP_ASSERT_EQ(rec.n, 6);
            for (int i = 0; i < 6; i++) {
                KVP_ASSERT_EQ(rec.block[i], want[i]);
                KVP_ASSERT_EQ(rec.cleared[i], 0);
            }
            /* The hashes are the prompts' chain hashes. */
            kvp_hash ha[3];
            KVP_ASSERT_OK(kvp_hash_tokens(pool, ta, 13, NULL, ha, 3, 0, NULL));
            KVP_ASSERT_EQ(rec.hash[0], kvptest_hash_u64(&ha[2]));
            KVP_ASSERT_EQ(rec.hash[2], kvptest_hash_u64(&ha[0]));
            KVP_ASSERT_EQ(kvptest_stats(pool).evictions, 6);
            kvptest_done(pool);
        }
    }
}

/* ---- publication of partial blocks --------------------------------------- */

static void test_partial_block_published_when_full(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(16, 4, KVP_REUSE_LIFO);
    uint32_t t[20];
    kvptest_tokens(t, 20, 7);
    kvp_hash h[5];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 20, NULL, h, 5, 0, NULL));
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 6);
    kvp_block ia[8];
    size_t nt;
    KVP_ASSERT_EQ(table(a, ia, &nt), 2);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[0]).published, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).published, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).fill, 2);
    KVP_ASSERT_EQ(lookup_hash(pool, &h[1]), KVP_NO_BLOCK);
    APPEND(a, t + 6, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).published, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).fill, 3);
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 1);
    APPEND(a, t + 7, 1);
    kvp_block_info bi = kvptest_info(pool, ia[1]);
    KVP_ASSERT_EQ(bi.published, 1);
    KVP_ASSERT_EQ(bi.fill, 4);
    assert_memory_equal(bi.hash.b, h[1].b, 32);
    KVP_ASSERT_EQ(lookup_hash(pool, &h[1]), ia[1]);
    KVP_ASSERT_EQ(table(a, ia, &nt), 2); /* full: no block yet for more */
    KVP_ASSERT_EQ(nt, 8);
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    /* Cross two boundaries in one append: 8 -> 17 tokens. */
    APPEND(a, t + 8, 9);
    KVP_ASSERT_EQ(table(a, ia, &nt), 5);
    KVP_ASSERT_EQ(nt, 17);
    for (int i = 0; i < 4; i++) {
        bi = kvptest_info(pool, ia[i]);
        KVP_ASSERT_EQ(bi.published, 1);
        assert_memory_equal(bi.hash.b, h[i].b, 32);
    }
    KVP_ASSERT_EQ(kvptest_info(pool, ia[4]).published, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[4]).fill, 1);
    /* Complete the last one with a 3-token append. */
    APPEND(a, t + 17, 3);
    bi = kvptest_info(pool, ia[4]);
    KVP_ASSERT_EQ(bi.published, 1);
    assert_memory_equal(bi.hash.b, h[4].b, 32);
    KVPTEST_EXPECT_STATS(pool, ST(indexed, 5), ST(tokens_in_use, 20));
    /* Append onto an empty sequence (no admit): allowed, publishes too. */
    kvp_seq *b = mkseq(pool, 2);
    APPEND(b, t, 5);
    kvp_block ib[8];
    KVP_ASSERT_EQ(table(b, ib, &nt), 2);
    KVP_ASSERT_EQ(nt, 5);
    bi = kvptest_info(pool, ib[0]);
    KVP_ASSERT_EQ(bi.published, 1);
    assert_memory_equal(bi.hash.b, h[0].b, 32);
    /* Appending zero tokens changes nothing. */
    uint64_t fp = kvptest_fp(pool);
    KVP_ASSERT_OK(kvp_seq_append(b, t, 0));
    KVP_ASSERT_OK(kvp_seq_append(b, NULL, 0));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    kvptest_done(pool);
}

static void test_reused_block_loses_hash(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_config cfg = seq_config(4, 4, KVP_REUSE_LIFO);
    kvptest_evrec_attach(&rec, &cfg);
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t ta[8], tb[16];
    kvptest_tokens(ta, 8, 10);
    kvptest_tokens(tb, 16, 500);
    kvp_hash ha[2];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, ta, 8, NULL, ha, 2, 0, NULL));
    kvp_seq *a = mkseq(pool, 1);
    admit(a, ta, 8);
    kvp_block ia[4], ib[4];
    table(a, ia, NULL);
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_EQ(lookup_hash(pool, &ha[0]), ia[0]);
    KVP_ASSERT_EQ(lookup_hash(pool, &ha[1]), ia[1]);
    kvp_seq *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(b, tb, 16), 0);
    table(b, ib, NULL);
    KVP_ASSERT_EQ(lookup_hash(pool, &ha[0]), KVP_NO_BLOCK);
    KVP_ASSERT_EQ(lookup_hash(pool, &ha[1]), KVP_NO_BLOCK);
    kvp_hash hb[4];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, tb, 16, NULL, hb, 4, 0, NULL));
    for (int i = 0; i < 2; i++) {
        kvp_block_info bi = kvptest_info(pool, ia[i]);
        KVP_ASSERT_EQ(bi.state, KVP_BLOCK_IN_USE);
        assert_memory_not_equal(bi.hash.b, ha[i].b, 32);
    }
    /* The 4 blocks of b: each published under b's hash (3 of them: the last
     * holds the 16th token... all 4 full). */
    for (int i = 0; i < 4; i++) {
        kvp_block_info bi = kvptest_info(pool, ib[i]);
        KVP_ASSERT_EQ(bi.published, 1);
        assert_memory_equal(bi.hash.b, hb[i].b, 32);
    }
    KVP_ASSERT_EQ(rec.n, 2);
    kvptest_check(pool);
    /* A third request for a's prompt: nothing cached any more. */
    KVP_ASSERT_OK(kvp_seq_destroy(b));
    kvp_seq *c = mkseq(pool, 3);
    KVP_ASSERT_EQ(admit(c, ta, 8), 0);
    kvp_pool_destroy(pool);
}

/* ---- all-or-nothing admission ------------------------------------------- */

/* A pool of 6 blocks of 4 where sequence 9 holds 3 blocks and the first 9
 * tokens of tp[0..20) (tokens 100..119) were admitted and freed: their 2
 * full blocks cached, written to ia[0..1], the partial one vacant.  Returns
 * the pool. */
static kvp_pool *two_cached_pool(uint32_t *tp, kvp_block *ia, size_t ia_cap)
{
    kvp_pool *pool = seq_pool(6, 4, KVP_REUSE_LIFO);
    uint32_t tx[12];
    kvptest_tokens(tx, 12, 900);
    kvptest_tokens(tp, 20, 100);
    kvp_seq *x = mkseq(pool, 9);
    admit(x, tx, 12); /* holds 3 blocks */
    kvp_seq *a = mkseq(pool, 1);
    admit(a, tp, 9); /* 2 full + 1 partial */
    table_at(a, ia, ia_cap, NULL, __FILE__, __LINE__);
    KVP_ASSERT_OK(kvp_seq_destroy(a)); /* ia[0..1] cached, ia[2] vacant */
    return pool;
}

static void test_admit_exhausted(void **state)
{
    (void)state;
    uint32_t tp[20];
    kvp_block ia[8];
    kvp_pool *pool = two_cached_pool(tp, ia, ARRAY_LEN(ia));
    kvp_hash hp[5];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, tp, 20, NULL, hp, 5, 0, NULL));
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);

    /* 20 tokens: 5 blocks, 2 would hit the free cached ones, 3 more needed
     * but only 1 vacant: refused, the cached hits are not claimed. */
    kvp_seq *b = mkseq(pool, 2);
    kvp_stats before = kvptest_stats(pool);
    size_t cached = 4242;
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 20, &cached), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(cached, 4242);
    kvp_block ib[8];
    size_t nt = 99;
    KVP_ASSERT_EQ(table(b, ib, &nt), 0);
    KVP_ASSERT_EQ(nt, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[0]).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(refs(pool, ia[0]), 0);
    KVP_ASSERT_EQ(lookup_hash(pool, &hp[0]), ia[0]);
    KVP_ASSERT_EQ(lookup_hash(pool, &hp[1]), ia[1]);
    KVPTEST_EXPECT_STATS(pool, ST(exhausted, before.exhausted + 1),
                         ST(prefix_queries, before.prefix_queries),
                         ST(prefix_hits, before.prefix_hits), ST(evictions, before.evictions),
                         ST(in_use, before.in_use), ST(cached, 2));
    /* Without any hit. */
    uint32_t big[40];
    kvptest_tokens(big, 40, 5000);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, big, 40, NULL), KVP_EEXHAUSTED);
    /* 13 tokens: 4 blocks, 3 free but 2 of them are matched -> 2 hits + 2
     * new needed, only 1 other free: refused. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 13, NULL), KVP_EEXHAUSTED);
    /* 12 tokens: 2 hits (cap (12-1)/4 = 2) + 1 vacant: fits. */
    KVP_ASSERT_EQ(admit(b, tp, 12), 8);
    KVP_ASSERT_EQ(table(b, ib, &nt), 3);
    KVP_ASSERT_EQ(ib[0], ia[0]);
    KVP_ASSERT_EQ(ib[1], ia[1]);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 0);
    /* Append needing a block: refused, nothing changes. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(b, tp + 12, 1), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(table(b, ib, &nt), 3);
    KVP_ASSERT_EQ(nt, 12);
    /* Admission into a sequence that already has tokens: busy. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 4, NULL), KVP_EBUSY);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, NULL, 4, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(NULL, tp, 4, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(b, NULL, 3), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(NULL, tp, 3), KVP_EINVAL);
    kvptest_done(pool);
}

/* ---- probe: what an admission would do, changing nothing ---------------- */

/* kvp_seq_probe must succeed, answer `cached` and `needed`, and change
 * neither the pool nor any counter. */
static void expect_probe_at(kvp_pool *pool, kvp_seq *s, const uint32_t *t, size_t n, size_t cached,
                            size_t needed, const char *file, int line)
{
    uint64_t fp = kvptest_fp_at(pool, file, line);
    kvp_stats before = kvptest_stats_at(pool, file, line);
    size_t c = 9999, nd = 9999;
    kvptest_assert_status(kvp_seq_probe(s, t, n, &c, &nd), KVP_OK, "kvp_seq_probe", file, line);
    kvptest_assert_fp_at(pool, fp, "kvp_seq_probe", file, line);
    kvp_stats after = kvptest_stats_at(pool, file, line);
    if (memcmp(&before, &after, sizeof before))
        _fail(file, line);
    kvptest_assert_eq(c, cached, "cached_tokens", "expected", file, line);
    kvptest_assert_eq(nd, needed, "blocks_needed", "expected", file, line);
}
#define EXPECT_PROBE(pool, s, t, n, c, nd)                                                         \
    expect_probe_at((pool), (s), (t), (n), (c), (nd), __FILE__, __LINE__)

static void test_probe(void **state)
{
    (void)state;
    uint32_t tp[20];
    kvp_block ia[8];
    kvp_pool *pool = two_cached_pool(tp, ia, ARRAY_LEN(ia));
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);

    kvp_seq *b = mkseq(pool, 2);
    size_t c = 4242, nd = 4242; /* refused probes leave them alone */
    /* 20 tokens, 5 blocks: 2 hits on free cached blocks + 3 new = 5 > 3. */
    EXPECT_PROBE(pool, b, tp, 20, 8, 5);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 20, NULL), KVP_EEXHAUSTED);
    /* 13 tokens: 2 hits + 2 new = 4 > 3. */
    EXPECT_PROBE(pool, b, tp, 13, 8, 4);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 13, NULL), KVP_EEXHAUSTED);
    /* 8 tokens: the leave-one-token cap allows 1 hit: 1 + 1 new. */
    EXPECT_PROBE(pool, b, tp, 8, 4, 2);
    /* 12 tokens: 2 hits + 1 new = 3: fits exactly, and admit agrees. */
    EXPECT_PROBE(pool, b, tp, 12, 8, 3);
    KVP_ASSERT_EQ(admit(b, tp, 12), 8);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 0);

    /* Hits on blocks in use take nothing from the free list. */
    kvp_seq *d = mkseq(pool, 3);
    EXPECT_PROBE(pool, d, tp, 12, 8, 1);
    EXPECT_PROBE(pool, d, tp, 8, 4, 1);

    /* Refusals change nothing. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(b, tp, 4, &c, &nd), KVP_EBUSY);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(d, tp, 0, &c, &nd), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(d, tp, SIZE_MAX, &c, &nd), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(d, NULL, 4, &c, &nd), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(NULL, tp, 4, &c, &nd), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(d, tp, 4, NULL, &nd), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_probe(d, tp, 4, &c, NULL), KVP_EINVAL);
    KVP_ASSERT_EQ(c, 4242);
    KVP_ASSERT_EQ(nd, 4242);
    kvptest_done(pool);

    /* Without prefix caching nothing is cached: every block is new. */
    kvp_config cfg = seq_config(6, 4, KVP_REUSE_LIFO);
    cfg.prefix_caching = 0;
    pool = kvptest_create(&cfg);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, tp, 9);
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    b = mkseq(pool, 2);
    EXPECT_PROBE(pool, b, tp, 12, 0, 3);
    kvptest_done(pool);
}

static void test_admit_grows(void **state)
{
    (void)state;
    kvp_config cfg = seq_config(4, 4, KVP_REUSE_LIFO);
    cfg.grow_on_exhaustion = 1;
    cfg.max_blocks = 7;
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t t[40];
    kvptest_tokens(t, 40, 1);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 21); /* 6 blocks: grows by 2 */
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 6), ST(grown, 2));
    kvp_seq *b = mkseq(pool, 2);
    uint32_t u[12];
    kvptest_tokens(u, 12, 700);
    /* 3 blocks, 1 may still be added: over the cap, refused. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, u, 12, NULL), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 6);
    admit(b, u, 4);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 7);
    kvptest_done(pool);
}

/* ---- leave one token --------------------------------------------------- */

static void test_leave_one_token(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(32, 4, KVP_REUSE_LIFO);
    uint32_t t[16];
    kvptest_tokens(t, 16, 40);
    kvp_seq *a = mkseq(pool, 1);
    KVP_ASSERT_EQ(admit(a, t, 8), 0);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.prefix_queries, 1); /* (8-1)/4 */
    KVP_ASSERT_EQ(st.prefix_hits, 0);
    KVP_ASSERT_EQ(st.indexed, 2);       /* both full blocks published */
    kvp_block ia[8], ib[8];
    table(a, ia, NULL);
    kvp_seq *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(b, t, 8), 4); /* n - block_size, not n */
    table(b, ib, NULL);
    KVP_ASSERT_EQ(ib[0], ia[0]);
    assert_int_not_equal(ib[1], ia[1]);
    KVP_ASSERT_EQ(refs(pool, ia[1]), 1);
    /* b's second block is full: published too, a duplicate; lookup returns
     * the first published. */
    KVP_ASSERT_EQ(kvptest_info(pool, ib[1]).published, 1);
    kvp_hash h[2];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 8, NULL, h, 2, 0, NULL));
    KVP_ASSERT_EQ(lookup_hash(pool, &h[1]), ia[1]);
    KVPTEST_EXPECT_STATS(pool, ST(prefix_queries, 2), ST(prefix_hits, 1),
                         ST(prefix_tokens_queried, 8), ST(prefix_tokens_hit, 4), ST(indexed, 3));
    /* 9 tokens: both full blocks hit. */
    kvp_seq *c = mkseq(pool, 3);
    t[8] = 99;
    KVP_ASSERT_EQ(admit(c, t, 9), 8);
    /* A one-token prompt queries nothing. */
    kvp_seq *d = mkseq(pool, 4);
    KVP_ASSERT_EQ(admit(d, t, 1), 0);
    /* A 4-token prompt (one full block, cached): no hit, no query. */
    kvp_seq *e = mkseq(pool, 5);
    KVP_ASSERT_EQ(admit(e, t, 4), 0);
    /* 5 tokens: one query, one hit. */
    kvp_seq *f = mkseq(pool, 6);
    KVP_ASSERT_EQ(admit(f, t, 5), 4);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.prefix_queries, 2 + 2 + 0 + 0 + 1);
    KVP_ASSERT_EQ(st.prefix_hits, 1 + 2 + 0 + 0 + 1);
    KVP_ASSERT_EQ(st.prefix_tokens_queried, 4 * st.prefix_queries);
    KVP_ASSERT_EQ(st.prefix_tokens_hit, 4 * st.prefix_hits);
    kvptest_done(pool);
}

/* ---- an admission never evicts its own matches ------------------------- */

static void test_no_self_eviction(void **state)
{
    (void)state;
    for (int reuse = 0; reuse < 3; reuse++) {
        kvptest_evrec rec;
        kvp_config cfg = seq_config(3, 4, (kvp_reuse)reuse);
        kvptest_evrec_attach(&rec, &cfg);
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t tp[16], tq[4];
        kvptest_tokens(tp, 16, 100);
        kvptest_tokens(tq, 4, 800);
        kvp_seq *a = mkseq(pool, 1), *c = mkseq(pool, 3);
        admit(a, tp, 8);
        admit(c, tq, 4);
        kvp_block ia[4], ic[4], ib[4];
        table(a, ia, NULL);
        table(c, ic, NULL);
        KVP_ASSERT_OK(kvp_seq_destroy(a)); /* LRU: ia[1], ia[0] */
        KVP_ASSERT_OK(kvp_seq_destroy(c)); /* then ic[0] */
        KVP_ASSERT_EQ(kvptest_stats(pool).cached, 3);
        /* 16 tokens: 4 blocks (3 hits possible but only 2 cached) -> 2 hits
         * + 2 new, only ic[0] may be taken: refused. */
        kvp_seq *b = mkseq(pool, 2);
        KVP_ASSERT_REFUSED(pool, kvp_seq_admit(b, tp, 16, NULL), KVP_EEXHAUSTED);
        KVP_ASSERT_EQ(rec.n, 0);
        /* 12 tokens: 2 hits + 1 new: the new one must be ic[0] even though
         * ia[1] is the least recently freed. */
        KVP_ASSERT_EQ(admit(b, tp, 12), 8);
        KVP_ASSERT_EQ(table(b, ib, NULL), 3);
        KVP_ASSERT_EQ(ib[0], ia[0]);
        KVP_ASSERT_EQ(ib[1], ia[1]);
        KVP_ASSERT_EQ(ib[2], ic[0]);
        KVP_ASSERT_EQ(rec.n, 1);
        KVP_ASSERT_EQ(rec.block[0], ic[0]);
        kvptest_done(pool);
    }
}

/* ---- reset of the prefix cache ------------------------------------------ */

static void test_reset_prefix_cache(void **state)
{
    (void)state;
    for (int null_block = 0; null_block < 2; null_block++) {
        kvptest_evrec rec;
        kvp_config cfg = seq_config(8, 4, KVP_REUSE_LIFO);
        cfg.null_block = null_block;
        kvptest_evrec_attach(&rec, &cfg);
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t t[9];
        kvptest_tokens(t, 9, 3);
        kvp_seq *a = mkseq(pool, 1), *b = mkseq(pool, 2);
        admit(a, t, 9);
        admit(b, t, 5);
        KVP_ASSERT_REFUSED(pool, kvp_reset_prefix_cache(pool), KVP_EBUSY);
        KVP_ASSERT_OK(kvp_seq_destroy(a));
        KVP_ASSERT_REFUSED(pool, kvp_reset_prefix_cache(pool), KVP_EBUSY);
        /* An empty sequence holds nothing. */
        kvp_seq *e = mkseq(pool, 3);
        (void)e;
        KVP_ASSERT_OK(kvp_seq_destroy(b));
        KVP_ASSERT_EQ(kvptest_stats(pool).cached, 2);
        KVP_ASSERT_OK(kvp_reset_prefix_cache(pool));
        KVP_ASSERT_EQ(rec.n_cleared, 1);
        KVPTEST_EXPECT_STATS(pool, ST(cached, 0), ST(indexed, 0), ST(in_use, (uint64_t)null_block));
        kvp_seq *c = mkseq(pool, 4);
        KVP_ASSERT_EQ(admit(c, t, 9), 0);
        kvptest_done(pool);
    }
}

/* ---- fork and copy-on-write --------------------------------------------- */

static void test_fork_cow(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(16, 4, KVP_REUSE_LIFO);
    uint32_t t[24];
    kvptest_tokens(t, 24, 300);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 10);
    kvp_block ia[8], ib[8], ia2[8], ib2[8];
    size_t nta, ntb;
    KVP_ASSERT_EQ(table(a, ia, &nta), 3);
    kvp_seq *b = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
    assert_non_null(b);
    KVP_ASSERT_EQ(table(b, ib, &ntb), 3);
    KVP_ASSERT_EQ(ntb, 10);
    for (int i = 0; i < 3; i++) {
        KVP_ASSERT_EQ(ib[i], ia[i]);
        KVP_ASSERT_EQ(refs(pool, ia[i]), 2);
    }
    KVPTEST_EXPECT_STATS(pool, ST(shared, 3), ST(in_use, 3), ST(cow_copies, 0),
                         ST(tokens_in_use, 10));
    kvp_seq *found = NULL;
    KVP_ASSERT_OK(kvp_seq_find(pool, 2, &found));
    assert_ptr_equal(found, b);
    /* Fork onto an existing id: refused. */
    kvp_seq *dummy = NULL;
    KVP_ASSERT_REFUSED(pool, kvp_seq_fork(a, 1, &dummy), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(pool, kvp_seq_fork(a, 2, &dummy), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(pool, kvp_seq_fork(NULL, 5, &dummy), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_fork(a, 5, NULL), KVP_EINVAL);

    /* a writes into the shared partial block: copied. */
    APPEND(a, t + 10, 1);
    KVP_ASSERT_EQ(table(a, ia2, &nta), 3);
    KVP_ASSERT_EQ(nta, 11);
    KVP_ASSERT_EQ(ia2[0], ia[0]);
    KVP_ASSERT_EQ(ia2[1], ia[1]);
    assert_int_not_equal(ia2[2], ia[2]);
    KVP_ASSERT_EQ(refs(pool, ia[0]), 2); /* full shared blocks: never copied */
    KVP_ASSERT_EQ(refs(pool, ia[2]), 1); /* b keeps the old one */
    KVP_ASSERT_EQ(refs(pool, ia2[2]), 1);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[2]).fill, 2);
    KVP_ASSERT_EQ(kvptest_info(pool, ia2[2]).fill, 3);
    KVP_ASSERT_EQ(table(b, ib2, &ntb), 3);
    assert_memory_equal(ib2, ib, sizeof(kvp_block) * 3);
    KVP_ASSERT_EQ(ntb, 10);
    KVPTEST_EXPECT_STATS(pool, ST(cow_copies, 1), ST(tokens_in_use, 4 + 4 + 2 + 3), ST(shared, 2));
    kvptest_check(pool);

    /* b now holds the old block alone: writes in place. */
    uint32_t other = 77777;
    APPEND(b, &other, 1);
    KVP_ASSERT_EQ(table(b, ib2, &ntb), 3);
    assert_memory_equal(ib2, ib, sizeof(kvp_block) * 3);
    KVP_ASSERT_EQ(ntb, 11);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, ib[2]).fill, 3);

    /* Both fill their third block with different last tokens: two
     * different hashes, each the chain hash of its own tokens. */
    APPEND(a, t + 11, 1);
    uint32_t other2 = 88888;
    APPEND(b, &other2, 1);
    uint32_t tb[12];
    memcpy(tb, t, 10 * sizeof *t);
    tb[10] = other;
    tb[11] = other2;
    kvp_hash ha[3], hb[3];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, NULL, ha, 3, 0, NULL));
    KVP_ASSERT_OK(kvp_hash_tokens(pool, tb, 12, NULL, hb, 3, 0, NULL));
    kvp_block_info bia = kvptest_info(pool, ia2[2]), bib = kvptest_info(pool, ib[2]);
    KVP_ASSERT_EQ(bia.published, 1);
    KVP_ASSERT_EQ(bib.published, 1);
    assert_memory_equal(bia.hash.b, ha[2].b, 32);
    assert_memory_equal(bib.hash.b, hb[2].b, 32);

    /* Fork at a block boundary: appending needs a fresh block, no copy. */
    kvp_seq *c = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(a, 3, &c));
    KVP_ASSERT_EQ(refs(pool, ia2[2]), 2);
    APPEND(c, t + 12, 2);
    kvp_block ic[8];
    KVP_ASSERT_EQ(table(c, ic, NULL), 4);
    KVP_ASSERT_EQ(ic[2], ia2[2]);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 1);
    /* Fork of the fork shares the partial block; the original (c) and its
     * child both append: the first copies, the second writes in place. */
    kvp_seq *d = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(c, 4, &d));
    APPEND(d, t + 14, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 2);
    APPEND(c, t + 14, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 2);
    kvp_block ic2[8];
    KVP_ASSERT_EQ(table(c, ic2, NULL), 4);
    KVP_ASSERT_EQ(ic2[3], ic[3]);
    /* Empty sequence fork. */
    kvp_seq *e = mkseq(pool, 5), *f = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(e, 6, &f));
    size_t nb = 9, nt = 9;
    const kvp_block *ids;
    KVP_ASSERT_OK(kvp_seq_blocks(f, &ids, &nb, &nt));
    KVP_ASSERT_EQ(nb, 0);
    KVP_ASSERT_EQ(nt, 0);
    kvptest_done(pool);
}

/* ---- truncate: rollback of rejected tokens ------------------------------- */

/* Hash of full block i of t (the chain over t's blocks up to it). */
static kvp_hash chain_hash(kvp_pool *pool, const uint32_t *t, size_t i)
{
    kvp_hash h[16];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, (i + 1) * 4, NULL, h, 16, 0, NULL));
    return h[i];
}

/* Cuts in the partial block, into a published one (continued in a copy,
 * the cached block still found, with verified hits too), at a boundary,
 * of nothing, to nothing. */
static void truncate_case(int verify)
{
    kvp_config cfg = seq_config(12, 4, KVP_REUSE_LIFO);
    cfg.verify_hits = verify;
    cfg.host_arena = 1;
    cfg.block_bytes[0] = 16;
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t t[24];
    kvptest_tokens(t, 24, 500);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 14); /* blocks 0..2 full and published, block 3 holds 2 */
    kvp_block ia[8], ia2[8];
    size_t nt;
    KVP_ASSERT_EQ(table(a, ia, &nt), 4);

    /* Within the partial block: only its fill changes. */
    KVP_ASSERT_OK(kvp_seq_truncate(a, t, 13));
    KVP_ASSERT_EQ(table(a, ia2, &nt), 4);
    KVP_ASSERT_EQ(nt, 13);
    assert_memory_equal(ia2, ia, 4 * sizeof *ia);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[3]).fill, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).tokens_in_use, 13);
    kvptest_check(pool);

    /* Into a full published block: it stays cached under its hash with its
     * bytes; the sequence goes on in a copy holding 2 tokens, made in the
     * block the cut frees (LIFO: the most recently freed vacant block). */
    void *src;
    KVP_ASSERT_OK(kvp_block_ptr(pool, ia[2], &src));
    memset(src, 0x5a, 16);
    kvp_stats before = kvptest_stats(pool);
    KVP_ASSERT_OK(kvp_seq_truncate(a, t, 10));
    KVP_ASSERT_EQ(table(a, ia2, &nt), 3);
    KVP_ASSERT_EQ(nt, 10);
    KVP_ASSERT_EQ(ia2[0], ia[0]);
    KVP_ASSERT_EQ(ia2[1], ia[1]);
    assert_int_not_equal(ia2[2], ia[2]);
    kvp_block_info old = kvptest_info(pool, ia[2]), fresh = kvptest_info(pool, ia2[2]);
    KVP_ASSERT_EQ(old.state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(old.fill, 4); /* a cached block keeps its fill */
    KVP_ASSERT_EQ(fresh.fill, 2);
    KVP_ASSERT_EQ(fresh.published, 0);
    KVP_ASSERT_EQ(ia2[2], ia[3]); /* the dropped tail block, freed first, holds the copy */
    kvp_hash h2 = chain_hash(pool, t, 2);
    KVP_ASSERT_EQ(lookup_hash(pool, &h2), ia[2]);
    void *dst;
    KVP_ASSERT_OK(kvp_block_ptr(pool, ia2[2], &dst));
    assert_memory_equal(dst, src, 16);
    KVPTEST_EXPECT_STATS(pool, ST(cow_copies, before.cow_copies + 1),
                         ST(free_calls, before.free_calls + 1),
                         ST(blocks_freed, before.blocks_freed + 2), ST(tokens_in_use, 10));
    kvptest_check(pool);

    /* Appending other tokens fills the copy under a hash of its own; the
     * cached block keeps the old one, and a prompt with the old tokens
     * still hits it. */
    uint32_t u[24];
    memcpy(u, t, 10 * sizeof *t);
    kvptest_tokens(u + 10, 14, 9000);
    APPEND(a, u + 10, 2);
    kvp_hash hu2 = chain_hash(pool, u, 2);
    KVP_ASSERT_EQ(lookup_hash(pool, &hu2), ia2[2]);
    kvp_seq *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(b, t, 13), 12);
    KVP_ASSERT_OK(kvp_seq_destroy(b));

    /* At a block boundary: whole blocks go, last first; no copy. */
    before = kvptest_stats(pool);
    KVP_ASSERT_OK(kvp_seq_truncate(a, NULL, 8));
    KVP_ASSERT_EQ(table(a, ia2, &nt), 2);
    KVP_ASSERT_EQ(nt, 8);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, before.cow_copies);
    /* The same count: nothing changes. */
    uint64_t fp = kvptest_fp(pool);
    KVP_ASSERT_OK(kvp_seq_truncate(a, NULL, 8));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    /* To nothing: the sequence is empty and may admit again. */
    KVP_ASSERT_OK(kvp_seq_truncate(a, NULL, 0));
    KVP_ASSERT_EQ(table(a, ia2, &nt), 0);
    KVP_ASSERT_EQ(nt, 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).in_use, 0);
    KVP_ASSERT_EQ(admit(a, t, 14), 12);
    kvptest_done(pool);
}

static void test_truncate(void **state)
{
    (void)state;
    for (int verify = 0; verify < 2; verify++)
        truncate_case(verify);
}

/* A shared partial block (after a fork) is copied, not cut under the
 * other sequence; refusals change nothing. */
static void test_truncate_shared_and_refused(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(4, 4, KVP_REUSE_LIFO);
    uint32_t t[16];
    kvptest_tokens(t, 16, 40);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 7); /* 2 blocks, the second holds 3 */
    kvp_seq *b = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
    kvp_block ia[4], ib[4], ia2[4];
    size_t nt;
    table(a, ia, &nt);
    KVP_ASSERT_OK(kvp_seq_truncate(a, t, 5));
    KVP_ASSERT_EQ(table(a, ia2, &nt), 2);
    assert_int_not_equal(ia2[1], ia[1]);
    KVP_ASSERT_EQ(kvptest_info(pool, ia2[1]).fill, 1);
    KVP_ASSERT_EQ(table(b, ib, &nt), 2);
    KVP_ASSERT_EQ(nt, 7);
    KVP_ASSERT_EQ(ib[1], ia[1]);
    KVP_ASSERT_EQ(kvptest_info(pool, ia[1]).fill, 3);
    KVP_ASSERT_EQ(refs(pool, ia[1]), 1);
    kvptest_check(pool);

    /* b's partial block is now its own: cut in place. */
    KVP_ASSERT_OK(kvp_seq_truncate(b, t, 6));
    KVP_ASSERT_EQ(kvptest_info(pool, ib[1]).fill, 2);

    /* Refused, changing nothing. */
    uint32_t wrong[16];
    memcpy(wrong, t, sizeof wrong);
    wrong[4] = 999; /* b's partial block holds t[4..6) */
    KVP_ASSERT_REFUSED(pool, kvp_seq_truncate(b, wrong, 5), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_truncate(b, t, 7), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_truncate(b, NULL, 5), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_truncate(NULL, t, 5), KVP_EINVAL);
    /* A copy with no block free, none freed by the cut (every block of b is
     * shared with its fork c): exhausted, counted. */
    kvp_seq *c = NULL, *d = mkseq(pool, 4);
    KVP_ASSERT_OK(kvp_seq_fork(b, 3, &c));
    admit(d, t + 8, 4);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 0);
    uint64_t exhausted = kvptest_stats(pool).exhausted;
    KVP_ASSERT_REFUSED(pool, kvp_seq_truncate(b, t, 2), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).exhausted, exhausted + 1);
    KVP_ASSERT_EQ(table(b, ib, &nt), 2);
    KVP_ASSERT_EQ(nt, 6);
    /* Once d goes, a block is free and the cut succeeds. */
    KVP_ASSERT_OK(kvp_seq_destroy(d));
    KVP_ASSERT_OK(kvp_seq_truncate(b, t, 2));
    KVP_ASSERT_EQ(table(b, ib, &nt), 1);
    KVP_ASSERT_EQ(nt, 2);
    kvptest_done(pool);
}

static void test_cow_exhausted(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(3, 4, KVP_REUSE_LIFO);
    uint32_t t[12];
    kvptest_tokens(t, 12, 1);
    kvp_seq *a = mkseq(pool, 1), *b = NULL, *x = mkseq(pool, 9);
    admit(a, t, 6);
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
    uint32_t u[4] = {5, 6, 7, 8};
    admit(x, u, 4); /* last free block */
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 0);
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(a, t + 6, 1), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 0);
    KVP_ASSERT_OK(kvp_seq_destroy(x));
    /* Now one block: COW into it works. */
    APPEND(a, t + 6, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 1);
    /* COW plus a new block when only 0 free: refused. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(b, t + 6, 3), KVP_EEXHAUSTED);
    kvptest_done(pool);
}

/* ---- destroy order and the null block ----------------------------------- */

static void test_destroy_order(void **state)
{
    (void)state;
    /* Without prefix caching every freed block is vacant. */
    static const kvp_block want[3][4] = {
        {3, 2, 1, 0}, /* LIFO: the last block of a is freed first, reused first */
        {0, 1, 2, 3}, /* LOWEST: by id */
        {4, 5, 3, 2}, /* FIFO: never-used first, then in freed order */
    };
    for (int reuse = 0; reuse < 3; reuse++) {
        kvp_config cfg = seq_config(6, 4, (kvp_reuse)reuse);
        cfg.prefix_caching = 0;
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t t[16];
        kvptest_tokens(t, 16, 1);
        kvp_seq *a = mkseq(pool, 1);
        KVP_ASSERT_EQ(admit(a, t, 16), 0);
        kvp_block ia[8];
        table(a, ia, NULL);
        for (int i = 0; i < 4; i++) {
            KVP_ASSERT_EQ(ia[i], (kvp_block)i);
            KVP_ASSERT_EQ(kvptest_info(pool, ia[i]).published, 0);
        }
        KVP_ASSERT_OK(kvp_seq_destroy(a));
        kvptest_check(pool);
        kvp_seq *b = mkseq(pool, 2);
        KVP_ASSERT_EQ(admit(b, t, 16), 0); /* no caching: no hit */
        kvp_block ib[8];
        table(b, ib, NULL);
        for (int i = 0; i < 4; i++)
            KVP_ASSERT_EQ(ib[i], want[reuse][i]);
        KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 0);
        kvptest_done(pool);
    }
}

static void test_null_block_never_handed_out(void **state)
{
    (void)state;
    for (int reuse = 0; reuse < 3; reuse++) {
        kvp_config cfg = seq_config(5, 2, (kvp_reuse)reuse);
        cfg.null_block = 1;
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t t[10];
        kvptest_tokens(t, 10, 1);
        for (int round = 0; round < 4; round++) {
            kvp_seq *a = mkseq(pool, (uint64_t)round);
            admit(a, t, 5);
            kvp_seq *b = NULL;
            KVP_ASSERT_OK(kvp_seq_fork(a, 100 + (uint64_t)round, &b));
            APPEND(b, t + 5, 1); /* copy-on-write: the 4th block */
            kvp_block ia[8], ib[8];
            size_t na = table(a, ia, NULL), nb = table(b, ib, NULL);
            for (size_t i = 0; i < na; i++)
                assert_int_not_equal(ia[i], 0);
            for (size_t i = 0; i < nb; i++)
                assert_int_not_equal(ib[i], 0);
            KVP_ASSERT_EQ(kvptest_info(pool, 0).is_null, 1);
            KVP_ASSERT_EQ(kvptest_stats(pool).in_use, 5);
            /* All 4 ordinary blocks are in use: one more is refused. */
            KVP_ASSERT_REFUSED(pool, kvp_seq_append(a, t + 5, 2), KVP_EEXHAUSTED);
            KVP_ASSERT_OK(kvp_seq_destroy(b));
            KVP_ASSERT_OK(kvp_seq_destroy(a));
            kvptest_check(pool);
        }
        kvp_pool_destroy(pool);
    }
}

/* ---- table pointer, find, ids, separate K/V ------------------------------ */

static void test_table_pointer_and_registry(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(32, 4, KVP_REUSE_LIFO);
    uint32_t t[20];
    kvptest_tokens(t, 20, 1);
    kvp_seq *a = mkseq(pool, 10);
    admit(a, t, 10);
    const kvp_block *p1, *p2;
    size_t n1, n2, nt1, nt2;
    KVP_ASSERT_OK(kvp_seq_blocks(a, &p1, &n1, &nt1));
    kvp_block copy[8];
    memcpy(copy, p1, n1 * sizeof *p1);
    /* Calls that do not change a: the pointer and contents stay. */
    kvp_seq *b = mkseq(pool, 11), *c = NULL;
    admit(b, t, 17);
    KVP_ASSERT_OK(kvp_seq_fork(b, 12, &c));
    KVP_ASSERT_OK(kvp_seq_fork(a, 13, &c));
    APPEND(b, t, 3);
    (void)kvptest_stats(pool);
    (void)kvptest_info(pool, p1[0]);
    KVP_ASSERT_OK(kvp_seq_blocks(a, &p2, &n2, NULL));
    KVP_ASSERT_OK(kvp_seq_blocks(a, &p2, &n2, &nt2));
    assert_ptr_equal(p1, p2);
    KVP_ASSERT_EQ(n1, n2);
    KVP_ASSERT_EQ(nt1, nt2);
    assert_memory_equal(p1, copy, n1 * sizeof *p1);
    KVP_ASSERT_STATUS(kvp_seq_blocks(NULL, &p2, &n2, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_blocks(a, NULL, &n2, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_blocks(a, &p2, NULL, NULL), KVP_EINVAL);

    /* find */
    kvp_seq *f = NULL;
    KVP_ASSERT_OK(kvp_seq_find(pool, 10, &f));
    assert_ptr_equal(f, a);
    KVP_ASSERT_OK(kvp_seq_find(pool, 13, &f));
    assert_ptr_equal(f, c);
    KVP_ASSERT_STATUS(kvp_seq_find(pool, 99, &f), KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_seq_find(NULL, 10, &f), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_find(pool, 10, NULL), KVP_EINVAL);
    /* create with an existing id */
    kvp_seq *dup = NULL;
    KVP_ASSERT_REFUSED(pool, kvp_seq_create(pool, 10, NULL, &dup), KVP_EOWNERACTIVE);
    assert_null(dup);
    KVP_ASSERT_REFUSED(pool, kvp_seq_create(pool, 13, NULL, &dup), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(pool, kvp_seq_create(NULL, 14, NULL, &dup), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_seq_create(pool, 14, NULL, NULL), KVP_EINVAL);
    /* A bad span in the extra keys. */
    kvp_mm_span bad = {.start = 3, .end = 1};
    kvp_extra_keys xs = {.mm = &bad, .n_mm = 1};
    kvp_status st = kvp_seq_create(pool, 14, &xs, &dup);
    if (st == KVP_OK) {
        print_error("kvp_seq_create accepted a span with end < start (header: spans "
                    "must have end >= start for hashing)\n");
        KVP_ASSERT_OK(kvp_seq_destroy(dup));
    }
    /* destroy: find fails, the id may be used again */
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_STATUS(kvp_seq_find(pool, 10, &f), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_seq_find(pool, 13, &f)); /* registry still fine */
    assert_ptr_equal(f, c);
    KVP_ASSERT_OK(kvp_seq_find(pool, 11, &f));
    assert_ptr_equal(f, b);
    kvp_seq *a2 = mkseq(pool, 10);
    KVP_ASSERT_EQ(admit(a2, t, 10), 8);
    KVP_ASSERT_STATUS(kvp_seq_destroy(NULL), KVP_EINVAL);
    /* Many sequences: the registry grows. */
    for (uint64_t id = 1000; id < 1100; id++)
        mkseq(pool, id);
    for (uint64_t id = 1000; id < 1100; id += 2) {
        KVP_ASSERT_OK(kvp_seq_find(pool, id, &f));
        KVP_ASSERT_OK(kvp_seq_destroy(f));
    }
    for (uint64_t id = 1001; id < 1100; id += 2) {
        KVP_ASSERT_OK(kvp_seq_find(pool, id, &f));
        KVP_ASSERT_STATUS(kvp_seq_find(pool, id - 1, &f), KVP_ENOTFOUND);
    }
    kvptest_check(pool);
    /* pool_clear drops sequences: ids are free again. */
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    KVP_ASSERT_STATUS(kvp_seq_find(pool, 11, &f), KVP_ENOTFOUND);
    kvp_seq *again = mkseq(pool, 11);
    KVP_ASSERT_EQ(admit(again, t, 10), 0);
    kvptest_done(pool);

    /* Separate K/V lists: sequences refused. */
    kvp_config kv = seq_config(8, 4, KVP_REUSE_LIFO);
    kv.separate_kv = 1;
    kvp_pool *kp = kvptest_create(&kv);
    kvp_seq *s = NULL;
    KVP_ASSERT_REFUSED(kp, kvp_seq_create(kp, 1, NULL, &s), KVP_EINVAL);
    assert_null(s);
    kvp_pool_destroy(kp);
}

/* ---- relocation ---------------------------------------------------------- */

static void test_relocation(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(6, 4, KVP_REUSE_LOWEST);
    kvp_block tmp[4];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 8, 77, tmp, 4), 2); /* 0, 1 */
    uint32_t t[20];
    kvptest_tokens(t, 20, 60);
    kvp_seq *a = mkseq(pool, 1), *b = NULL, *other = mkseq(pool, 3);
    admit(a, t, 15); /* 2 3 4 5 */
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
    kvp_block ia[8];
    table(a, ia, NULL);
    KVP_ASSERT_EQ(ia[0], 2);
    KVP_ASSERT_EQ(ia[3], 5);
    /* No free block to move into: refused. */
    kvp_block retired = 0, moved = 0;
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &retired, &moved), KVP_EEXHAUSTED);
    KVP_ASSERT_OK(kvp_free_owner(pool, 77, NULL)); /* 0 and 1 vacant */
    const kvp_block *pa;
    size_t na;
    KVP_ASSERT_OK(kvp_seq_blocks(a, &pa, &na, NULL));
    /* Top block 5 (a and b's shared partial block) moves to 0. */
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 5);
    KVP_ASSERT_EQ(moved, 0);
    kvp_block ja[8], jb[8];
    size_t nta, ntb;
    KVP_ASSERT_EQ(table(a, ja, &nta), 4);
    KVP_ASSERT_EQ(table(b, jb, &ntb), 4);
    KVP_ASSERT_EQ(nta, 15);
    KVP_ASSERT_EQ(ntb, 15);
    KVP_ASSERT_EQ(ja[3], 0);
    KVP_ASSERT_EQ(jb[3], 0);
    KVP_ASSERT_EQ(ja[0], 2);
    kvp_block_info bi = kvptest_info(pool, 0);
    KVP_ASSERT_EQ(bi.ref_count, 2);
    KVP_ASSERT_EQ(bi.fill, 3);
    KVP_ASSERT_EQ(kvptest_info(pool, 5).state, KVP_BLOCK_RETIRED);
    kvptest_check(pool);
    /* Top block 4 (full, published) moves to 1 with its hash. */
    kvp_hash h[3];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 15, NULL, h, 3, 0, NULL));
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 4);
    KVP_ASSERT_EQ(moved, 1);
    KVP_ASSERT_EQ(table(a, ja, NULL), 4);
    KVP_ASSERT_EQ(table(b, jb, NULL), 4);
    KVP_ASSERT_EQ(ja[2], 1);
    KVP_ASSERT_EQ(jb[2], 1);
    KVP_ASSERT_EQ(lookup_hash(pool, &h[2]), 1);
    bi = kvptest_info(pool, 1);
    KVP_ASSERT_EQ(bi.published, 1);
    assert_memory_equal(bi.hash.b, h[2].b, 32);
    /* The sequences keep working on the moved blocks.  Every managed block
     * is in use: grow by one (the lowest retired id, 4) for the copy. */
    KVP_ASSERT_REFUSED(pool, kvp_seq_append(a, t + 15, 1), KVP_EEXHAUSTED);
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1, &added));
    KVP_ASSERT_EQ(added, 1);
    APPEND(a, t + 15, 1); /* shared partial block 0: copy-on-write */
    KVP_ASSERT_EQ(kvptest_stats(pool).cow_copies, 1);
    KVP_ASSERT_EQ(table(a, ja, NULL), 4);
    KVP_ASSERT_EQ(ja[3], 4);
    KVP_ASSERT_EQ(refs(pool, 0), 1);
    /* A third request reuses the moved hashes. */
    KVP_ASSERT_OK(kvp_seq_destroy(b));
    KVP_ASSERT_EQ(admit(other, t, 13), 12);
    kvp_block io[8];
    table(other, io, NULL);
    KVP_ASSERT_EQ(io[2], 1);
    kvptest_done(pool);
}

/* ---- statistics ----------------------------------------------------------- */

static void test_stats(void **state)
{
    (void)state;
    kvp_pool *pool = seq_pool(32, 4, KVP_REUSE_LIFO);
    uint32_t t[40];
    kvptest_tokens(t, 40, 1);
    kvp_seq *a = mkseq(pool, 1);
    admit(a, t, 10);
    KVPTEST_EXPECT_STATS(pool, ST(tokens_in_use, 10), ST(prefix_queries, 2), ST(prefix_hits, 0),
                         ST(fragmented, 1), ST(in_use, 3));
    kvp_seq *b = NULL;
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
    /* tokens_in_use counts per block, not per sequence; fork counts no query. */
    KVPTEST_EXPECT_STATS(pool, ST(tokens_in_use, 10), ST(prefix_queries, 2));
    APPEND(b, t + 10, 1);
    KVPTEST_EXPECT_STATS(pool, ST(tokens_in_use, 13), ST(cow_copies, 1));
    APPEND(a, t + 10, 1);
    /* append counts no query */
    KVPTEST_EXPECT_STATS(pool, ST(tokens_in_use, 14), ST(cow_copies, 1), ST(prefix_queries, 2));
    /* 25 tokens: cap (25-1)/4 = 6 queries, 2 hits. */
    kvp_seq *c = mkseq(pool, 3);
    KVP_ASSERT_EQ(admit(c, t, 25), 8);
    KVPTEST_EXPECT_STATS(pool, ST(prefix_queries, 8), ST(prefix_hits, 2),
                         ST(prefix_tokens_queried, 32), ST(prefix_tokens_hit, 8),
                         ST(tokens_in_use, 14 + 25 - 8));
    /* A refused admission counts no queries. */
    uint32_t big[200];
    kvptest_tokens(big, 200, 1);
    kvp_seq *d = mkseq(pool, 4);
    KVP_ASSERT_REFUSED(pool, kvp_seq_admit(d, big, 200, NULL), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).prefix_queries, 8);
    KVP_ASSERT_OK(kvp_stats_reset(pool));
    /* The rates restart; tokens_in_use, a gauge, does not. */
    KVPTEST_EXPECT_STATS(pool, ST(prefix_queries, 0), ST(prefix_hits, 0),
                         ST(prefix_tokens_queried, 0), ST(prefix_tokens_hit, 0),
                         ST(cow_copies, 0), ST(tokens_in_use, 14 + 25 - 8));
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_OK(kvp_seq_destroy(b));
    KVP_ASSERT_OK(kvp_seq_destroy(c));
    KVPTEST_EXPECT_STATS(pool, ST(tokens_in_use, 0), ST(in_use, 0));
    /* With prefix caching off: no queries at all, no hits. */
    kvp_config nc = seq_config(8, 4, KVP_REUSE_LIFO);
    nc.prefix_caching = 0;
    kvp_pool *np = kvptest_create(&nc);
    kvp_seq *x = mkseq(np, 1), *y = mkseq(np, 2);
    KVP_ASSERT_EQ(admit(x, t, 9), 0);
    KVP_ASSERT_EQ(admit(y, t, 9), 0);
    KVPTEST_EXPECT_STATS(np, ST(prefix_hits, 0), ST(indexed, 0));
    kvptest_done(np);
    kvptest_done(pool);
}

/* ---- verified hits -------------------------------------------------------- */

/* Every block hashes to the same value. */
static kvp_status same_hash(void *user, const kvp_hash *parent, const uint32_t *tokens, size_t n,
                            uint64_t start, const kvp_extra_keys *extra, kvp_hash *out)
{
    (void)user;
    (void)parent;
    (void)tokens;
    (void)n;
    (void)start;
    (void)extra;
    *out = kvptest_hash(42);
    return KVP_OK;
}

static void test_verified_degenerate_hash(void **state)
{
    (void)state;
    for (int verify = 0; verify < 2; verify++) {
        kvp_config cfg = seq_config(32, 4, KVP_REUSE_LIFO);
        cfg.hash_alg = KVP_HASH_CUSTOM;
        cfg.hash_fn = same_hash;
        cfg.verify_hits = verify;
        kvp_pool *pool = kvptest_create(&cfg);
        uint32_t t[13], u[13], w[13];
        kvptest_tokens(t, 13, 100);
        kvptest_tokens(u, 13, 900);
        memcpy(w, t, sizeof w);
        w[5] = 12345; /* same first block, different second */
        kvp_seq *a = mkseq(pool, 1), *b = mkseq(pool, 2), *c = mkseq(pool, 3),
                *d = mkseq(pool, 4);
        KVP_ASSERT_EQ(admit(a, t, 13), 0);
        size_t got_b = admit(b, u, 13);
        size_t got_d = admit(d, w, 13);
        if (verify) {
            KVP_ASSERT_EQ(got_b, 0);
            KVP_ASSERT_EQ(got_d, 4); /* only the first block is really equal */
        } else {
            assert_true(got_b > 0); /* the false hit verification prevents */
            assert_true(got_d > 4);
        }
        KVP_ASSERT_EQ(admit(c, t, 13), 12);
        kvp_block ia[8], ic[8];
        table(a, ia, NULL);
        table(c, ic, NULL);
        for (int i = 0; i < 3; i++) /* unverified: a0 three times */
            KVP_ASSERT_EQ(ic[i], verify ? ia[i] : ia[0]);
        /* Also after a finishes (its blocks cached). */
        KVP_ASSERT_OK(kvp_seq_destroy(a));
        KVP_ASSERT_OK(kvp_seq_destroy(c));
        kvp_seq *e = mkseq(pool, 5);
        uint32_t v[13];
        kvptest_tokens(v, 13, 5000);
        size_t got_e = admit(e, v, 13);
        if (verify)
            KVP_ASSERT_EQ(got_e, 0);
        kvp_seq *g = mkseq(pool, 6);
        KVP_ASSERT_EQ(admit(g, t, 13), 12);
        kvptest_done(pool);
    }
}

static void test_verified_direct(void **state)
{
    (void)state;
    kvp_config cfg = seq_config(8, 4, KVP_REUSE_LOWEST);
    cfg.verify_hits = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t t0[4] = {1, 2, 3, 4}, t1[4] = {5, 6, 7, 8}, t2[4] = {9, 9, 9, 9};
    kvp_hash h1 = kvptest_hash(1), h2 = kvptest_hash(2), h3 = kvptest_hash(3);
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* 0 */
    kvp_block y = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* 1 */
    kvp_block z = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* 2 */
    kvp_block out = KVP_NO_BLOCK;

    /* Refusals. */
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, y, &h2, x, t1, 4), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, x, &h1, KVP_NO_BLOCK, NULL, 4),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, x, &h1, KVP_NO_BLOCK, t0, 3),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, x, NULL, KVP_NO_BLOCK, t0, 4),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(NULL, x, &h1, KVP_NO_BLOCK, t0, 4),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, 5, &h1, KVP_NO_BLOCK, t0, 4),
                       KVP_EDOUBLEFREE);
    KVP_ASSERT_REFUSED(pool, kvp_publish_verified(pool, 99, &h1, KVP_NO_BLOCK, t0, 4),
                       KVP_ERANGE);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, t0, 3,
                                          &out),
                      KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, (kvp_stream)7, &h1, KVP_NO_BLOCK, t0, 4, &out),
                      KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, NULL, KVP_NO_BLOCK, t0, 4,
                                          &out),
                      KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, NULL, 4,
                                          &out),
                      KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, t0, 4,
                                          NULL),
                      KVP_EINVAL);

    KVP_ASSERT_OK(kvp_publish_verified(pool, x, &h1, KVP_NO_BLOCK, t0, 4));
    KVP_ASSERT_OK(kvp_publish_verified(pool, y, &h2, x, t1, 4));
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, t0, 4, &out));
    KVP_ASSERT_EQ(out, x);
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out));
    KVP_ASSERT_EQ(out, y);
    /* Plain lookup still finds them. */
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &h2, &out));
    KVP_ASSERT_EQ(out, y);
    /* A verified lookup counts nothing and changes nothing. */
    uint64_t fp = kvptest_fp(pool);
    kvp_stats s0 = kvptest_stats(pool);
    /* Wrong tokens, wrong parent, parent given for a first block, first
     * block asked as a child. */
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t2, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, z, t1, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, KVP_NO_BLOCK, t1, 4,
                                          &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, y, t0, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h3, KVP_NO_BLOCK, t0, 4,
                                          &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, 999, t1, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    kvp_stats s1 = kvptest_stats(pool);
    assert_memory_equal(&s0, &s1, sizeof s0);

    /* Duplicates under one hash: z holds h2 with other tokens under x. */
    KVP_ASSERT_OK(kvp_publish_verified(pool, z, &h2, x, t2, 4));
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t2, 4, &out));
    KVP_ASSERT_EQ(out, z);
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out));
    KVP_ASSERT_EQ(out, y);
    /* A non-verified publish is never a verified hit. */
    kvp_block w = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* 3 */
    KVP_ASSERT_OK(kvp_publish(pool, w, &h3));
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h3, KVP_NO_BLOCK, t0, 4,
                                          &out),
                      KVP_ENOTFOUND);
    /* ...and cannot be a parent? It is published, so it may be. */
    kvptest_check(pool);

    /* Parent evicted: unpublish x; y no longer confirms under x, even after
     * x is published again with the same hash and tokens. */
    KVP_ASSERT_OK(kvp_unpublish(pool, x));
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_publish_verified(pool, x, &h1, KVP_NO_BLOCK, t0, 4));
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out),
                      KVP_ENOTFOUND);
    /* Publishing a child under the new x works. */
    kvp_block v = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* 4 */
    KVP_ASSERT_OK(kvp_publish_verified(pool, v, &h2, x, t1, 4));
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out));
    KVP_ASSERT_EQ(out, v);
    kvptest_check(pool);

    /* Parent evicted by reuse: free x (cached), then take it back for
     * fresh content (an eviction). */
    KVP_ASSERT_OK(kvp_free(pool, &x, 1, KVP_ANON));
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out));
    KVP_ASSERT_EQ(out, v); /* cached parent: still content, still matches */
    KVP_ASSERT_OK(kvp_take_id(pool, x, KVP_ANON));
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, x, t1, 4, &out),
                      KVP_ENOTFOUND);
    kvptest_done(pool);

    /* Verification off: both calls refused. */
    kvp_config off = seq_config(4, 4, KVP_REUSE_LOWEST);
    kvp_pool *op = kvptest_create(&off);
    kvp_block b0 = kvptest_take(op, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_REFUSED(op, kvp_publish_verified(op, b0, &h1, KVP_NO_BLOCK, t0, 4), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_lookup_verified(op, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, t0, 4, &out),
                      KVP_EINVAL);
    kvp_pool_destroy(op);
}

static void test_verified_relocated_parent(void **state)
{
    (void)state;
    kvp_config cfg = seq_config(4, 4, KVP_REUSE_LOWEST);
    cfg.verify_hits = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t t0[4] = {1, 2, 3, 4}, t1[4] = {5, 6, 7, 8};
    kvp_hash h1 = kvptest_hash(1), h2 = kvptest_hash(2);
    kvp_block ids[4];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 5, ids, 4), 4);
    /* Parent at the top (3), child at 1. */
    KVP_ASSERT_OK(kvp_publish_verified(pool, 3, &h1, KVP_NO_BLOCK, t0, 4));
    KVP_ASSERT_OK(kvp_publish_verified(pool, 1, &h2, 3, t1, 4));
    kvp_block out;
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, 3, t1, 4, &out));
    KVP_ASSERT_EQ(out, 1);
    kvp_block f = 0;
    KVP_ASSERT_OK(kvp_free(pool, &f, 1, 5));
    kvp_block retired, moved;
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 3);
    KVP_ASSERT_EQ(moved, 0);
    /* The parent itself moved with its identity and is found at 0. */
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &h1, &out));
    KVP_ASSERT_EQ(out, 0);
    KVP_ASSERT_OK(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h1, KVP_NO_BLOCK, t0, 4, &out));
    KVP_ASSERT_EQ(out, 0);
    /* The child, recorded against (3, gen), matches neither: a safe miss. */
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, 0, t1, 4, &out),
                      KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, 3, t1, 4, &out),
                      KVP_ENOTFOUND);
    /* Plain lookup of the child still works (no verification). */
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &h2, &out));
    KVP_ASSERT_EQ(out, 1);
    kvptest_check(pool);
    /* Growing back over the retired id: it must not confirm the child. */
    uint32_t n_added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1, &n_added));
    KVP_ASSERT_EQ(n_added, 1);
    KVP_ASSERT_OK(kvp_take_id(pool, 3, 6));
    KVP_ASSERT_STATUS(kvp_publish_verified(pool, 3, &h1, KVP_NO_BLOCK, t0, 4), KVP_OK);
    KVP_ASSERT_STATUS(kvp_lookup_verified(pool, KVP_STREAM_SHARED, &h2, 3, t1, 4, &out),
                      KVP_ENOTFOUND);
    kvptest_done(pool);
}

/* Sequences with verify_hits: relocation of a parent block makes its
 * children's hits stop (a safe miss); the moved block itself still hits. */
static void test_verified_sequence_relocation(void **state)
{
    (void)state;
    kvp_config cfg = seq_config(7, 4, KVP_REUSE_LOWEST);
    cfg.verify_hits = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block tmp[4];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 12, 77, tmp, 4), 3); /* 0 1 2 */
    uint32_t t[13];
    kvptest_tokens(t, 13, 10);
    kvp_seq *a = mkseq(pool, 1);
    KVP_ASSERT_EQ(admit(a, t, 13), 0); /* 3 4 5 published, 6 partial */
    kvp_block ia[8];
    table(a, ia, NULL);
    KVP_ASSERT_EQ(ia[0], 3);
    KVP_ASSERT_EQ(ia[3], 6);
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_OK(kvp_free_owner(pool, 77, NULL));
    kvp_seq *b = mkseq(pool, 2);
    KVP_ASSERT_EQ(admit(b, t, 13), 12); /* 3 4 5 + vacant 0 */
    kvp_block ib[8];
    table(b, ib, NULL);
    KVP_ASSERT_EQ(ib[2], 5);
    KVP_ASSERT_EQ(ib[3], 0);
    kvp_block retired, moved;
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved)); /* 6: free, dropped */
    KVP_ASSERT_EQ(retired, 6);
    KVP_ASSERT_EQ(moved, KVP_NO_BLOCK);
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved)); /* 5 -> 1 */
    KVP_ASSERT_EQ(retired, 5);
    KVP_ASSERT_EQ(moved, 1);
    table(b, ib, NULL);
    KVP_ASSERT_EQ(ib[2], 1);
    /* 5's parent (4) did not move: a new request still hits all three. */
    kvp_seq *c = mkseq(pool, 3);
    KVP_ASSERT_EQ(admit(c, t, 13), 12);
    kvp_block ic[8];
    table(c, ic, NULL);
    KVP_ASSERT_EQ(ic[2], 1);
    KVP_ASSERT_OK(kvp_seq_destroy(c));
    /* Now the parent 4 moves (-> 2): block 1 (ex-5) was recorded against
     * (4, generation) and no longer confirms: the hit stops at 2 blocks. */
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 4);
    KVP_ASSERT_EQ(moved, 2);
    table(b, ib, NULL);
    KVP_ASSERT_EQ(ib[0], 3);
    KVP_ASSERT_EQ(ib[1], 2);
    KVP_ASSERT_EQ(ib[2], 1);
    KVP_ASSERT_EQ(ib[3], 0);
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 2, &added));
    KVP_ASSERT_EQ(added, 2);
    kvp_seq *d = mkseq(pool, 4);
    KVP_ASSERT_EQ(admit(d, t, 13), 8);
    kvp_block id_[8];
    table(d, id_, NULL);
    KVP_ASSERT_EQ(id_[0], 3);
    KVP_ASSERT_EQ(id_[1], 2);
    kvptest_done(pool);
}

/* ---- re-entry from the eviction callback ---------------------------------- */

typedef struct reenter {
    kvp_pool *pool;
    kvp_seq *target;   /* the sequence being admitted */
    kvp_seq *other;    /* an unrelated sequence */
    size_t append_n;   /* tokens the callback tries to append to target */
    int done;
    int st_append, st_append0, st_other, st_admit_other, st_find, st_blocks, st_create,
        st_fork, st_destroy;
} reenter;

static void reenter_cb(void *user, const kvp_hash *hash, kvp_block block)
{
    (void)hash;
    (void)block;
    reenter *r = user;
    if (r->done++)
        return;
    static uint32_t junk[400];
    kvptest_tokens(junk, 400, 0xdead0000u);
    r->st_append = (int)kvp_seq_append(r->target, junk, r->append_n);
    r->st_append0 = (int)kvp_seq_append(r->target, junk, 0);
    r->st_other = (int)kvp_seq_append(r->other, junk, 3);
    r->st_admit_other = (int)kvp_seq_admit(r->other, junk, 5, NULL);
    kvp_seq *s = NULL;
    r->st_find = (int)kvp_seq_find(r->pool, 1, &s);
    const kvp_block *ids;
    size_t n;
    r->st_blocks = (int)kvp_seq_blocks(r->target, &ids, &n, NULL);
    r->st_create = (int)kvp_seq_create(r->pool, 999, NULL, &s);
    r->st_fork = (int)kvp_seq_fork(r->target, 998, &s);
    r->st_destroy = (int)kvp_seq_destroy(r->other);
}

static void test_callback_reentry(void **state)
{
    (void)state;
    static const size_t append_ns[] = {8, 300};
    for (int ts = 0; ts < 2; ts++) {
        for (size_t v = 0; v < ARRAY_LEN(append_ns); v++) {
            static reenter r;
            memset(&r, 0, sizeof r);
            r.append_n = append_ns[v];
            kvp_config cfg = seq_config(6, 4, KVP_REUSE_LIFO);
            cfg.thread_safe = ts;
            cfg.on_evict = reenter_cb;
            cfg.evict_user = &r;
            kvp_pool *pool = kvptest_create(&cfg);
            r.pool = pool;
            uint32_t tx[16], ta[12];
            kvptest_tokens(tx, 16, 10);
            memcpy(ta, tx, 4 * sizeof *ta); /* shares block 0 with x */
            kvptest_tokens(ta + 4, 8, 500);
            kvp_seq *x = mkseq(pool, 5);
            admit(x, tx, 16);
            kvp_block ix[8];
            table(x, ix, NULL);
            KVP_ASSERT_OK(kvp_seq_destroy(x)); /* 4 cached, 2 never used */
            kvp_seq *o = mkseq(pool, 2);
            uint32_t to[4] = {7, 7, 7, 7};
            admit(o, to, 3); /* takes a vacant block */
            kvp_seq *a = mkseq(pool, 1);
            r.target = a;
            r.other = o;
            /* 12 tokens: block 0 hits, 2 fresh: 1 vacant, then a cached one
             * (an eviction: the callback runs). */
            KVP_ASSERT_EQ(admit(a, ta, 12), 4);
            assert_true(r.done >= 1);
            KVP_ASSERT_EQ(r.st_append, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_other, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_admit_other, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_find, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_blocks, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_create, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_fork, KVP_EBUSY);
            KVP_ASSERT_EQ(r.st_destroy, KVP_EBUSY);
            /* The outer admission finished as if nothing had been tried. */
            kvp_block ia[8];
            size_t nt = 0;
            KVP_ASSERT_EQ(table(a, ia, &nt), 3);
            KVP_ASSERT_EQ(nt, 12);
            kvp_hash h[3];
            KVP_ASSERT_OK(kvp_hash_tokens(pool, ta, 12, NULL, h, 3, 0, NULL));
            int bad = ia[0] != ix[0];
            if (bad)
                print_error("thread_safe %d, callback append of %zu tokens: table[0] = %u, "
                            "expected the hit %u\n",
                            ts, r.append_n, (unsigned)ia[0], (unsigned)ix[0]);
            for (int i = 0; i < 3 && !bad; i++) {
                kvp_block_info bi = kvptest_info(pool, ia[i]);
                KVP_ASSERT_EQ(bi.state, KVP_BLOCK_IN_USE);
                KVP_ASSERT_EQ(bi.ref_count, 1);
                KVP_ASSERT_EQ(bi.published, 1);
                if (memcmp(bi.hash.b, h[i].b, 32) != 0) {
                    print_error("thread_safe %d, callback append of %zu tokens (refused "
                                "with %d): block %d (id %u) published under a wrong hash\n",
                                ts, r.append_n, r.st_append, i, (unsigned)ia[i]);
                    bad = 1;
                }
            }
            if (bad)
                fail_msg("a refused re-entrant kvp_seq_append changed the sequence being "
                         "admitted");
            kvp_block io[4];
            KVP_ASSERT_EQ(table(o, io, &nt), 1);
            KVP_ASSERT_EQ(nt, 3);
            kvp_seq *f = NULL;
            KVP_ASSERT_STATUS(kvp_seq_find(pool, 999, &f), KVP_ENOTFOUND);
            KVP_ASSERT_STATUS(kvp_seq_find(pool, 998, &f), KVP_ENOTFOUND);
            kvptest_check(pool);
            /* And the sequence continues correctly. */
            APPEND(a, ta, 4);
            KVP_ASSERT_OK(kvp_seq_destroy(a));
            KVP_ASSERT_OK(kvp_seq_destroy(o));
            kvptest_done(pool);
            /* Header: a call back into the pool "returns KVP_EBUSY and does
             * nothing" -- also a zero-token append. */
            KVP_ASSERT_EQ(r.st_append0, KVP_EBUSY);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_while_held),
        cmocka_unit_test(test_hit_on_free_cached),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_partial_block_published_when_full),
        cmocka_unit_test(test_reused_block_loses_hash),
        cmocka_unit_test(test_admit_exhausted),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_admit_grows),
        cmocka_unit_test(test_leave_one_token),
        cmocka_unit_test(test_no_self_eviction),
        cmocka_unit_test(test_reset_prefix_cache),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_truncate_shared_and_refused),
        cmocka_unit_test(test_cow_exhausted),
        cmocka_unit_test(test_destroy_order),
        cmocka_unit_test(test_null_block_never_handed_out),
        cmocka_unit_test(test_table_pointer_and_registry),
        cmocka_unit_test(test_relocation),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_verified_degenerate_hash),
        cmocka_unit_test(test_verified_direct),
        cmocka_unit_test(test_verified_relocated_parent),
        cmocka_unit_test(test_verified_sequence_relocation),
        cmocka_unit_test(test_callback_reentry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
