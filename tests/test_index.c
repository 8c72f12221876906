/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index.c — shared blocks and the content index (kvpool.h "Shared blocks
 * and the content index", and the conventions' callback rule).
 *
 * Covers: publish/lookup/unpublish and their refusals, lazy eviction (the
 * callback fires once, with the right hash and block, when a cached block is
 * handed out again), claim of a cached block (off the free list, content
 * kept, LRU position renewed) and of a block in use, duplicate hashes (lookup
 * returns the first published still indexed, also over thousands of copies
 * unpublished, freed, evicted and published again at random; evicting one
 * never removes another's entry), the bucket function (spread of structured
 * and of crafted hashes, the bucket count), kvp_evict in LRU order, kvp_ensure_free, kvp_clear_index,
 * kvp_reset_prefix_cache (refused while busy, working when idle), pools
 * without prefix caching, and re-entrant calls from the eviction callback
 * (every pool call refused with KVP_EBUSY, thread_safe 0 and 1; another pool
 * may be used), and the batch faces kvp_claim_prefix and kvp_publish_each
 * against the loops of single calls they stand for (same ids, references,
 * owners, index, stats and events; a run of publishes or claims stopping
 * where the loop stops).
 */
#define _POSIX_C_SOURCE 200809L
#include "kvptest.h"
#include "index_walk.h"
#include "resize.h" /* bucket spread and count: internal properties */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Expect exactly one new per-block callback since `before`. */
static void expect_evicted_at(const kvptest_evrec *r, size_t before, uint64_t hv,
                              kvp_block b, const char *file, int line)
{
    if (r->n != before + 1) {
        print_error("%s:%d: %zu eviction callbacks, expected %zu\n", file, line,
                    r->n - before, (size_t)1);
        _fail(file, line);
    }
    if (r->cleared[before] || r->hash[before] != hv || r->block[before] != b) {
        print_error("%s:%d: callback (hash %llu, block %u, cleared %d), expected "
                    "(hash %llu, block %u)\n",
                    file, line, (unsigned long long)r->hash[before],
                    (unsigned)r->block[before], r->cleared[before],
                    (unsigned long long)hv, (unsigned)b);
        _fail(file, line);
    }
}
#define EXPECT_EVICTED(r, before, hv, b) \
    expect_evicted_at((r), (before), (hv), (b), __FILE__, __LINE__)

/* ---- publish / lookup / unpublish ------------------------------------- */

static void test_publish_lookup_unpublish(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 8); /* 0 1 2 */
    kvptest_publish(pool, 1, 500);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 500), 1);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 501), KVP_NO_BLOCK);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.indexed, 1);
    kvp_block_info info = kvptest_info(pool, 1);
    KVP_ASSERT_EQ(info.published, 1);
    KVP_ASSERT_EQ(kvptest_hash_u64(&info.hash), 500);
    kvptest_check(pool);

    /* A lookup counts nothing and changes nothing. */
    uint64_t fp = kvptest_fp(pool);
    kvp_stats before = kvptest_stats(pool);
    for (int i = 0; i < 5; i++) {
        KVP_ASSERT_EQ(kvptest_lookup(pool, 500), 1);
        KVP_ASSERT_EQ(kvptest_lookup(pool, 777), KVP_NO_BLOCK);
    }
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    kvp_stats after = kvptest_stats(pool);
    assert_memory_equal(&before, &after, sizeof before);

    /* Publishing again under the same hash is a no-op. */
    kvp_hash h500 = kvptest_hash(500), h600 = kvptest_hash(600);
    KVP_ASSERT_OK(kvp_publish(pool, 1, &h500));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 1);
    /* Another hash: refused. */
    KVP_ASSERT_REFUSED(pool, kvp_publish(pool, 1, &h600), KVP_EBUSY);
    /* Free blocks cannot be published. */
    KVP_ASSERT_REFUSED(pool, kvp_publish(pool, 5, &h600), KVP_EDOUBLEFREE);
    KVP_ASSERT_REFUSED(pool, kvp_publish(pool, 8, &h600), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_publish(pool, 1, NULL), KVP_EINVAL);

    /* Unpublish an in-use block: an eviction; the block stays in use. */
    KVP_ASSERT_OK(kvp_unpublish(pool, 1));
    EXPECT_EVICTED(&rec, 0, 500, 1);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 1), ST(indexed, 0));
    info = kvptest_info(pool, 1);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.published, 0);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 500), KVP_NO_BLOCK);
    KVP_ASSERT_REFUSED(pool, kvp_unpublish(pool, 1), KVP_ENOTFOUND);
    /* It may now be published under another hash; freed, it is cached. */
    KVP_ASSERT_OK(kvp_publish(pool, 1, &h600));
    kvptest_free1(pool, 1, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, 1).state, KVP_BLOCK_CACHED);
    /* Unpublish a cached block: it becomes vacant. */
    KVP_ASSERT_OK(kvp_unpublish(pool, 1));
    EXPECT_EVICTED(&rec, 1, 600, 1);
    KVPTEST_EXPECT_STATS(pool, ST(cached, 0), ST(vacant, 6), ST(evictions, 2));
    KVP_ASSERT_EQ(kvptest_info(pool, 1).state, KVP_BLOCK_VACANT);
    /* An unpublished block that is freed is vacant. */
    kvptest_publish(pool, 2, 700);
    KVP_ASSERT_OK(kvp_unpublish(pool, 2));
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, 2).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(rec.n, 3);
    KVP_ASSERT_EQ(rec.n_cleared, 0);
    KVP_ASSERT_EQ(rec.bad, 0);
    kvptest_done(pool);
}

/* ---- lazy eviction ------------------------------------------------------ */

static void test_lazy_eviction(void **state)
{
    (void)state;
    const kvp_reuse orders[3] = {KVP_REUSE_LIFO, KVP_REUSE_LOWEST, KVP_REUSE_FIFO};
    for (int o = 0; o < 3; o++) {
        kvptest_evrec rec;
        kvp_pool *pool = kvptest_rec_pool(&rec, 4, orders[o]);
        kvp_block ids[4];
        kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 4);
        kvptest_publish(pool, ids[1], 42);
        kvptest_free1(pool, ids[1], 1);
        /* Freed, still findable, no callback yet. */
        KVP_ASSERT_EQ(kvptest_lookup(pool, 42), ids[1]);
        kvp_block_info info = kvptest_info(pool, ids[1]);
        KVP_ASSERT_EQ(info.state, KVP_BLOCK_CACHED);
        KVP_ASSERT_EQ(info.published, 1);
        KVPTEST_EXPECT_STATS(pool, ST(cached, 1), ST(indexed, 1), ST(evictions, 0));
        KVP_ASSERT_EQ(rec.n, 0);
        kvptest_check(pool);
        /* Handing it out again is the eviction. */
        kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 2);
        KVP_ASSERT_EQ(b, ids[1]);
        EXPECT_EVICTED(&rec, 0, 42, ids[1]);
        KVP_ASSERT_EQ(kvptest_stats(pool).evictions, 1);
        KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 0);
        KVP_ASSERT_EQ(kvptest_lookup(pool, 42), KVP_NO_BLOCK);
        info = kvptest_info(pool, b);
        KVP_ASSERT_EQ(info.published, 0);
        KVP_ASSERT_EQ(info.owner, 2);
        /* It fires once only: freeing and retaking does nothing more. */
        kvptest_free1(pool, b, 2);
        KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 2), b);
        KVP_ASSERT_EQ(rec.n, 1);
        kvptest_done(pool);
    }

    /* Through kvp_alloc, several at once, in LRU order. */
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 4, KVP_REUSE_LIFO);
    kvp_block ids[4];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 4);
    for (int i = 0; i < 4; i++)
        kvptest_publish(pool, ids[i], 10 + (uint64_t)i);
    kvp_block order[4] = {ids[2], ids[0], ids[3], ids[1]};
    KVP_ASSERT_OK(kvp_free(pool, order, 4, 1));
    kvp_block got[4];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 3, got, 4), 3);
    KVP_ASSERT_EQ(rec.n, 3);
    for (int i = 0; i < 3; i++) {
        KVP_ASSERT_EQ(got[i], order[i]);
        KVPTEST_EXPECT_EVREC(&rec, i, 10 + order[i] - ids[0], order[i]);
    }
    KVP_ASSERT_EQ(kvptest_stats(pool).evictions, 3);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 10 + ids[1] - ids[0]), ids[1]);
    kvptest_done(pool);
}

/* ---- claim -------------------------------------------------------------- */

static void test_claim_cached(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 4, KVP_REUSE_LOWEST);
    kvp_block ids[4];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 4); /* 0..3 */
    KVP_ASSERT_OK(kvp_set_fill(pool, 2, 16));
    KVP_ASSERT_OK(kvp_set_fill(pool, 3, 16));
    kvptest_publish(pool, 2, 22);
    kvptest_publish(pool, 3, 33);
    kvp_block f[3] = {2, 3, 0};
    KVP_ASSERT_OK(kvp_free(pool, f, 3, 1));
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);

    /* Claim the cached block 2: off the free list, content kept. */
    KVP_ASSERT_OK(kvp_claim(pool, 2, 5));
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 2);
    kvp_block_info info = kvptest_info(pool, 2);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.ref_count, 1);
    KVP_ASSERT_EQ(info.owner, 5);
    KVP_ASSERT_EQ(info.published, 1);
    KVP_ASSERT_EQ(kvptest_hash_u64(&info.hash), 22);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 22), 2);
    KVPTEST_EXPECT_STATS(pool, ST(cached, 1), ST(indexed, 2), ST(evictions, 0));
    kvp_block ob[4];
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 5, ob, 4), 1);
    KVP_ASSERT_EQ(ob[0], 2);
    kvptest_check(pool);
    /* Allocation never hands it out: vacant 0, then cached 3, then none. */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 6, 0, 3);
    EXPECT_EVICTED(&rec, 0, 33, 3);
    kvp_block b;
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 6, &b), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 22), 2);
    kvptest_done(pool);

    /* A claimed-and-freed block goes to the most recent end of the LRU. */
    pool = kvptest_rec_pool(&rec, 4, KVP_REUSE_LOWEST);
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 4);
    kvptest_publish(pool, 0, 100);
    kvptest_publish(pool, 1, 101);
    kvptest_publish(pool, 2, 102);
    kvp_block g[3] = {0, 1, 2};
    KVP_ASSERT_OK(kvp_free(pool, g, 3, 1));  /* LRU: 0 1 2 */
    KVP_ASSERT_OK(kvp_claim(pool, 0, 7));
    kvptest_free1(pool, 0, 7);                       /* LRU: 1 2 0 */
    uint32_t ne = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &ne));
    KVP_ASSERT_EQ(ne, 1);
    EXPECT_EVICTED(&rec, 0, 101, 1);
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &ne));
    EXPECT_EVICTED(&rec, 1, 102, 2);
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &ne));
    EXPECT_EVICTED(&rec, 2, 100, 0);
    kvptest_done(pool);
}

static void test_claim_used_and_vacant(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LOWEST);
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, 1);
    /* A block in use gets one more reference (published or not). */
    KVP_ASSERT_OK(kvp_claim(pool, x, 2));
    KVP_ASSERT_EQ(kvptest_info(pool, x).ref_count, 2);
    kvptest_publish(pool, x, 9);
    KVP_ASSERT_OK(kvp_claim(pool, x, KVP_ANON));
    kvp_block_info info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.ref_count, 3);
    KVP_ASSERT_EQ(info.anon_refs, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).shared, 1);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);
    kvptest_check(pool);
    /* Vacant blocks hold nothing to share. */
    KVP_ASSERT_REFUSED(pool, kvp_claim(pool, 3, 1), KVP_ENOTFOUND);
    kvptest_free1(pool, x, 1);
    kvptest_free1(pool, x, 2);
    kvptest_free1(pool, x, KVP_ANON);
    KVP_ASSERT_EQ(kvptest_info(pool, x).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_OK(kvp_unpublish(pool, x));
    KVP_ASSERT_REFUSED(pool, kvp_claim(pool, x, 1), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_claim(pool, 4, 1), KVP_ERANGE);
    kvptest_done(pool);
}

/* ---- duplicates --------------------------------------------------------- */

static void test_duplicates(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 8); /* 0..3 */
    /* Published in order 1, 0, 2, 3. */
    kvptest_publish(pool, 1, 5);
    kvptest_publish(pool, 0, 5);
    kvptest_publish(pool, 2, 5);
    kvptest_publish(pool, 3, 5);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 4);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 1);
    kvptest_check(pool);
    /* Unpublish the first: the next published takes over. */
    KVP_ASSERT_OK(kvp_unpublish(pool, 1));
    EXPECT_EVICTED(&rec, 0, 5, 1);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 0);
    /* Removing a later one leaves the first. */
    KVP_ASSERT_OK(kvp_unpublish(pool, 2));
    EXPECT_EVICTED(&rec, 1, 5, 2);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 2);
    kvptest_check(pool);
    /* Cached block 0 reused for other content: 3 stays findable. */
    kvptest_free1(pool, 0, 1);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 0); /* cached copies are findable */
    KVP_ASSERT_OK(kvp_take_id(pool, 0, 1));
    EXPECT_EVICTED(&rec, 2, 5, 0);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 3);
    /* Re-publishing 1 makes it the second copy, after 3. */
    kvptest_publish(pool, 1, 5);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 3);
    kvptest_free1(pool, 3, 1);
    uint32_t ne = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 8, &ne));
    KVP_ASSERT_EQ(ne, 1);
    EXPECT_EVICTED(&rec, 3, 5, 3);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 5), 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).evictions, 4);
    kvptest_check(pool);

    /* Different hashes sharing the last 8 bytes are different hashes. */
    kvp_hash ha = kvptest_hash(77), hb = kvptest_hash(77);
    hb.b[0] = 1;
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, 2);
    kvp_block y = kvptest_take(pool, KVP_STREAM_SHARED, 2);
    KVP_ASSERT_OK(kvp_publish(pool, x, &ha));
    KVP_ASSERT_OK(kvp_publish(pool, y, &hb));
    kvp_block out;
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &ha, &out));
    KVP_ASSERT_EQ(out, x);
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &hb, &out));
    KVP_ASSERT_EQ(out, y);
    /* The callback gets the whole hash. */
    size_t before = rec.n;
    KVP_ASSERT_OK(kvp_unpublish(pool, y));
    EXPECT_EVICTED(&rec, before, 77, y);
    assert_memory_equal(rec.full[before].b, hb.b, 32);
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &ha, &out));
    KVP_ASSERT_EQ(out, x);
    kvptest_done(pool);
}

/* Many copies of a hash, evicted in random order: the index follows. */
static void test_duplicates_many(void **state)
{
    (void)state;
    const uint32_t N = 64;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, N, KVP_REUSE_LOWEST);
    kvp_block ids[64];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * (uint64_t)N, 1, ids, N);
    for (uint32_t i = 0; i < N; i++)
        kvptest_publish(pool, ids[i], 1 + i % 4); /* 4 hashes, 16 copies each */
    int alive[64];
    for (uint32_t i = 0; i < N; i++)
        alive[i] = 1;
    uint64_t rng = 12345;
    for (uint32_t step = 0; step < N; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t k = (uint32_t)(rng >> 33) % N;
        while (!alive[k])
            k = (k + 1) % N;
        alive[k] = 0;
        size_t before = rec.n;
        KVP_ASSERT_OK(kvp_unpublish(pool, ids[k]));
        EXPECT_EVICTED(&rec, before, 1 + k % 4, ids[k]);
        for (uint64_t hv = 1; hv <= 4; hv++) {
            kvp_block want = KVP_NO_BLOCK;
            for (uint32_t i = 0; i < N; i++)
                if (alive[i] && 1 + i % 4 == hv) {
                    want = ids[i];
                    break;
                }
            KVP_ASSERT_EQ(kvptest_lookup(pool, hv), want);
        }
        if (step % 8 == 0)
            kvptest_check(pool);
    }
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 0);
    kvptest_done(pool);
}

/* ---- evict, ensure_free ------------------------------------------------- */

static void test_evict_lru(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 128, 1, ids, 8);
    for (kvp_block b = 0; b < 8; b++)
        kvptest_publish(pool, b, 100 + b);
    kvp_block f[2] = {5, 2};
    KVP_ASSERT_OK(kvp_free(pool, f, 2, 1));
    kvptest_free1(pool, 7, 1);
    kvptest_free1(pool, 0, 1);
    uint32_t ne = 99;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 0, &ne));
    KVP_ASSERT_EQ(ne, 0);
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 2, &ne));
    KVP_ASSERT_EQ(ne, 2);
    KVP_ASSERT_EQ(rec.n, 2);
    KVPTEST_EXPECT_EVREC(&rec, 0, 105, 5);
    KVPTEST_EXPECT_EVREC(&rec, 1, 102, 2);
    KVP_ASSERT_EQ(kvptest_info(pool, 5).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(kvptest_info(pool, 7).state, KVP_BLOCK_CACHED);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 2), ST(cached, 2), ST(vacant, 2), ST(indexed, 6));
    kvptest_check(pool);
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 10, NULL));
    KVP_ASSERT_EQ(rec.n, 4);
    KVP_ASSERT_EQ(rec.block[2], 7);
    KVP_ASSERT_EQ(rec.block[3], 0);
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 3, &ne));
    KVP_ASSERT_EQ(ne, 0);
    /* In-use published blocks are never evicted. */
    KVP_ASSERT_EQ(kvptest_lookup(pool, 103), 3);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 4), ST(cached, 0), ST(vacant, 4));
    /* Evicted blocks are plain vacant blocks (LOWEST: lowest first). */
    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 1), 0);
    KVP_ASSERT_EQ(rec.n, 4);
    kvptest_done(pool);
}

static void test_ensure_free(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 128, 1, ids, 8);
    for (kvp_block b = 0; b < 4; b++)
        kvptest_publish(pool, b, 200 + b);
    kvp_block f[6] = {0, 1, 2, 3, 4, 5};
    KVP_ASSERT_OK(kvp_free(pool, f, 6, 1)); /* cached 0 1 2 3, vacant 4 5 */
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 0));
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 2));
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 3));
    EXPECT_EVICTED(&rec, 0, 200, 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).vacant, 3);
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 5));
    KVP_ASSERT_EQ(rec.n, 3);
    KVP_ASSERT_EQ(rec.block[1], 1);
    KVP_ASSERT_EQ(rec.block[2], 2);
    kvptest_check(pool);
    /* Not enough even with every cached block: nothing is evicted. */
    KVP_ASSERT_REFUSED(pool, kvp_ensure_free(pool, KVP_STREAM_SHARED, 7), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(rec.n, 3);
    KVP_ASSERT_EQ(kvptest_stats(pool).cached, 1);
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 6));
    EXPECT_EVICTED(&rec, 3, 203, 3);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.vacant, 6);
    KVP_ASSERT_EQ(st.cached, 0);
    KVP_ASSERT_EQ(st.evictions, 4);
    KVP_ASSERT_EQ(st.blocks, 8); /* never grows */
    kvptest_done(pool);

    /* Even with growth allowed, ensure_free does not grow. */
    kvp_config cfg = kvptest_config(2);
    cfg.grow_on_exhaustion = 1;
    pool = kvptest_create(&cfg);
    KVP_ASSERT_REFUSED(pool, kvp_ensure_free(pool, KVP_STREAM_SHARED, 3), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 2);
    kvp_pool_destroy(pool);
}

/* ---- clear_index, reset_prefix_cache ----------------------------------- */

static void test_clear_index(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 96, 1, ids, 8); /* 0..5 */
    for (kvp_block b = 0; b < 5; b++)
        kvptest_publish(pool, b, 300 + b);
    kvptest_publish(pool, 5, 300); /* a duplicate */
    kvp_block f[2] = {0, 1};
    KVP_ASSERT_OK(kvp_free(pool, f, 2, 1));
    KVP_ASSERT_OK(kvp_clear_index(pool));
    KVP_ASSERT_EQ(rec.n, 1);
    KVP_ASSERT_EQ(rec.n_cleared, 1);
    KVP_ASSERT_EQ(rec.cleared[0], 1);
    KVP_ASSERT_EQ(rec.block[0], KVP_NO_BLOCK);
    KVP_ASSERT_EQ(rec.bad, 0);
    KVPTEST_EXPECT_STATS(pool, ST(indexed, 0), ST(cached, 0), ST(vacant, 4), ST(in_use, 4),
                         ST(evictions, 0));
    for (uint64_t hv = 300; hv < 305; hv++)
        KVP_ASSERT_EQ(kvptest_lookup(pool, hv), KVP_NO_BLOCK);
    KVP_ASSERT_EQ(kvptest_info(pool, 0).state, KVP_BLOCK_VACANT);
    kvp_block_info info = kvptest_info(pool, 2);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.published, 0);
    KVP_ASSERT_EQ(info.owner, 1);
    kvptest_check(pool);
    /* Blocks in use stay valid and may be published again. */
    KVP_ASSERT_REFUSED(pool, kvp_unpublish(pool, 3), KVP_ENOTFOUND);
    kvptest_publish(pool, 2, 999);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 999), 2);
    kvptest_free1(pool, 2, 1);
    kvptest_free1(pool, 3, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, 2).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(kvptest_info(pool, 3).state, KVP_BLOCK_VACANT);
    /* Allocation after the clear fires no per-block callbacks for the old
     * content. */
    kvp_block got[8];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 5, 2, got, 8), 5);
    KVP_ASSERT_EQ(rec.n, 1);
    kvptest_done(pool);
}

static void test_reset_prefix_cache(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LIFO);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 8);
    for (int i = 0; i < 4; i++)
        kvptest_publish(pool, ids[i], 400 + (uint64_t)i);
    KVP_ASSERT_OK(kvp_free(pool, ids, 3, 1));
    /* One block in use (published): refused, nothing changes. */
    KVP_ASSERT_REFUSED(pool, kvp_reset_prefix_cache(pool), KVP_EBUSY);
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 400), ids[0]);
    /* An anonymous, unpublished block in use also blocks it. */
    kvptest_free1(pool, ids[3], 1);
    kvp_block a = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_REFUSED(pool, kvp_reset_prefix_cache(pool), KVP_EBUSY);
    kvptest_free1(pool, a, KVP_ANON);
    /* Idle: works. */
    KVP_ASSERT_OK(kvp_reset_prefix_cache(pool));
    KVP_ASSERT_EQ(rec.n, 1);
    KVP_ASSERT_EQ(rec.n_cleared, 1);
    KVPTEST_EXPECT_STATS(pool, ST(indexed, 0), ST(cached, 0), ST(vacant, 8), ST(evictions, 0));
    for (uint64_t hv = 400; hv < 404; hv++)
        KVP_ASSERT_EQ(kvptest_lookup(pool, hv), KVP_NO_BLOCK);
    for (kvp_block b = 0; b < 8; b++) {
        kvp_block_info info = kvptest_info(pool, b);
        KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
        KVP_ASSERT_EQ(info.published, 0);
    }
    kvptest_check(pool);
    KVP_ASSERT_STATUS(kvp_reset_prefix_cache(NULL), KVP_EINVAL);
    kvp_pool_destroy(pool);
}

static void test_prefix_caching_off(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_config cfg = kvptest_config(4);
    cfg.prefix_caching = 0;
    kvptest_evrec_attach(&rec, &cfg);
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, 1);
    kvp_hash h = kvptest_hash(1);
    KVP_ASSERT_REFUSED(pool, kvp_publish(pool, x, &h), KVP_EINVAL);
    KVP_ASSERT_EQ(kvptest_info(pool, x).published, 0);
    kvptest_free1(pool, x, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, x).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_REFUSED(pool, kvp_claim(pool, x, 1), KVP_ENOTFOUND);
    kvp_block out;
    KVP_ASSERT_STATUS(kvp_lookup(pool, KVP_STREAM_SHARED, &h, &out), KVP_ENOTFOUND);
    uint32_t ne = 9;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 4, &ne));
    KVP_ASSERT_EQ(ne, 0);
    KVPTEST_EXPECT_STATS(pool, ST(cached, 0), ST(vacant, 4));
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_OK(kvp_reset_prefix_cache(pool));
    kvptest_done(pool);
}

/* ---- callback re-entry -------------------------------------------------- */

typedef struct reentry {
    kvp_pool *pool;   /* the pool whose callback this is */
    kvp_pool *other;  /* another pool, usable from the callback */
    size_t calls;
    size_t n_checked;
    size_t n_wrong;
    char first_wrong[128];
    kvp_status other_take, other_free;
} reentry;

static void note(reentry *r, const char *what, kvp_status st)
{
    r->n_checked++;
    if (st != KVP_EBUSY) {
        if (r->n_wrong == 0)
            snprintf(r->first_wrong, sizeof r->first_wrong, "%s returned %d (%s)",
                     what, (int)st, kvp_strerror(st));
        r->n_wrong++;
    }
}

/* Valid arguments everywhere, so the only possible refusal is KVP_EBUSY.
 * Block 0 is in use by owner 1 and published; block 1 is free. */
static void reentry_cb(void *user, const kvp_hash *hash, kvp_block block)
{
    (void)hash;
    (void)block;
    reentry *r = user;
    kvp_pool *p = r->pool;
    r->calls++;
    kvp_block ids[16];
    size_t n = 0;
    uint32_t u = 0;
    kvp_block b0 = 0;
    kvp_hash h = kvptest_hash(1);
    kvp_block_info info;
    kvp_stats st;
    char buf[8192];
    uint64_t fp;
    note(r, "kvp_alloc", kvp_alloc(p, KVP_STREAM_SHARED, 16, 1, 0, ids, 16, &n));
    note(r, "kvp_take", kvp_take(p, KVP_STREAM_SHARED, 1, &b0));
    uint32_t hint = KVP_HINT_NONE;
    note(r, "kvp_take_hinted", kvp_take_hinted(p, KVP_STREAM_SHARED, 1, &hint, &b0));
    note(r, "kvp_take_id", kvp_take_id(p, 1, 1));
    b0 = 0;
    note(r, "kvp_free", kvp_free(p, &b0, 1, 1));
    note(r, "kvp_free_owner", kvp_free_owner(p, 1, NULL));
    note(r, "kvp_owner_register", kvp_owner_register(p, 12345));
    note(r, "kvp_owner_release", kvp_owner_release(p, 2));
    note(r, "kvp_owner_blocks", kvp_owner_blocks(p, 1, ids, 16, &n));
    note(r, "kvp_free_count", kvp_free_count(p, KVP_STREAM_SHARED, &u));
    note(r, "kvp_peek_next", kvp_peek_next(p, KVP_STREAM_SHARED, &b0));
    note(r, "kvp_set_fill", kvp_set_fill(p, 0, 1));
    note(r, "kvp_block_get", kvp_block_get(p, 0, &info));
    note(r, "kvp_claim", kvp_claim(p, 0, 1));
    note(r, "kvp_publish", kvp_publish(p, 0, &h));
    note(r, "kvp_lookup", kvp_lookup(p, KVP_STREAM_SHARED, &h, &b0));
    note(r, "kvp_claim_prefix", kvp_claim_prefix(p, KVP_STREAM_SHARED, &h, 1, 1, &b0, &n));
    b0 = 0;
    note(r, "kvp_publish_each", kvp_publish_each(p, &b0, &h, 1, &n));
    note(r, "kvp_unpublish", kvp_unpublish(p, 0));
    note(r, "kvp_clear_index", kvp_clear_index(p));
    note(r, "kvp_evict", kvp_evict(p, KVP_STREAM_SHARED, 1, &u));
    note(r, "kvp_ensure_free", kvp_ensure_free(p, KVP_STREAM_SHARED, 1));
    note(r, "kvp_reset_prefix_cache", kvp_reset_prefix_cache(p));
    note(r, "kvp_extend", kvp_extend(p, KVP_STREAM_SHARED, 1, &u));
    note(r, "kvp_shrink", kvp_shrink(p, KVP_STREAM_SHARED, 0, &u));
    kvp_block rt, mv;
    note(r, "kvp_retire_top", kvp_retire_top(p, &rt, &mv));
    note(r, "kvp_stats_get", kvp_stats_get(p, &st));
    note(r, "kvp_stats_reset", kvp_stats_reset(p));
    note(r, "kvp_stats_snapshot", kvp_stats_snapshot(p));
    note(r, "kvp_stats_history", kvp_stats_history(p, &st, 1, &n));
    note(r, "kvp_stats_prometheus", kvp_stats_prometheus(p, NULL, buf, sizeof buf, &n));
    note(r, "kvp_stats_json", kvp_stats_json(p, buf, sizeof buf, &n));
    note(r, "kvp_pool_check", kvp_pool_check(p, buf, sizeof buf));
    note(r, "kvp_pool_fingerprint", kvp_pool_fingerprint(p, &fp));
    note(r, "kvp_pool_clear", kvp_pool_clear(p));
    if (r->other) {
        kvp_block ob = KVP_NO_BLOCK;
        r->other_take = kvp_take(r->other, KVP_STREAM_SHARED, 1, &ob);
        if (r->other_take == KVP_OK)
            r->other_free = kvp_free(r->other, &ob, 1, 1);
    }
}

static void run_reentry(int thread_safe)
{
    reentry r;
    memset(&r, 0, sizeof r);
    kvp_config ocfg = kvptest_config(4);
    ocfg.thread_safe = thread_safe;
    r.other = kvptest_create(&ocfg);
    kvp_config cfg = kvptest_config(8);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.thread_safe = thread_safe;
    cfg.history_len = 4;
    cfg.on_evict = reentry_cb;
    cfg.evict_user = &r;
    kvp_pool *pool = kvptest_create(&cfg);
    r.pool = pool;
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 8, 1, ids, 8); /* 0..7 */
    KVP_ASSERT_OK(kvp_owner_register(pool, 2));
    for (kvp_block b = 0; b < 8; b++)
        kvptest_publish(pool, b, 50 + b);
    kvp_block f[6] = {2, 3, 4, 5, 6, 7};
    KVP_ASSERT_OK(kvp_free(pool, f, 6, 1)); /* cached 2..7 */
    kvp_block one = 1;
    KVP_ASSERT_OK(kvp_unpublish(pool, one)); /* callback #1 */
    KVP_ASSERT_EQ(r.calls, 1);
    kvptest_free1(pool, 1, 1);                       /* vacant */
    uint64_t fp_before = kvptest_fp(pool);
    (void)fp_before;

    /* Triggers: reuse, evict, ensure_free, take_id, clear_index. */
    kvp_block b;
    KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_SHARED, 1, &b)); /* vacant 1 */
    KVP_ASSERT_EQ(r.calls, 1);
    KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_SHARED, 1, &b)); /* cached 2 */
    KVP_ASSERT_EQ(b, 2);
    KVP_ASSERT_EQ(r.calls, 2);
    uint32_t ne = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &ne));
    KVP_ASSERT_EQ(ne, 1);
    KVP_ASSERT_EQ(r.calls, 3);
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 2));
    KVP_ASSERT_EQ(r.calls, 4);
    KVP_ASSERT_OK(kvp_take_id(pool, 6, 1));
    KVP_ASSERT_EQ(r.calls, 5);
    KVP_ASSERT_OK(kvp_clear_index(pool));
    KVP_ASSERT_EQ(r.calls, 6);
    kvptest_check(pool);

    if (r.n_wrong != 0)
        fail_msg("thread_safe=%d: %zu of %zu re-entrant calls were not refused with "
                 "KVP_EBUSY; first: %s",
                 thread_safe, r.n_wrong, r.n_checked, r.first_wrong);
    KVP_ASSERT_EQ(r.n_checked, 6 * 35);
    /* Another pool is usable from the callback. */
    KVP_ASSERT_STATUS(r.other_take, KVP_OK);
    KVP_ASSERT_STATUS(r.other_free, KVP_OK);
    kvptest_check(r.other);

    /* The refused calls did nothing: the state is what the outer calls made. */
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.owners, 2);
    KVP_ASSERT_EQ(st.in_use, 4);           /* 0, 1, 2, 6 */
    KVP_ASSERT_EQ(st.blocks, 8);
    KVP_ASSERT_EQ(st.evictions, 5);
    KVP_ASSERT_EQ(kvptest_info(pool, 0).fill, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, 0).ref_count, 1);
    kvp_block ob[8];
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 1, ob, 8), 4);
    size_t nh = 99;
    KVP_ASSERT_OK(kvp_stats_history(pool, NULL, 0, &nh));
    KVP_ASSERT_EQ(nh, 0);
    /* And the pool works normally afterwards. */
    KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_SHARED, 3, &b));
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, NULL));
    kvptest_done(pool);
    kvp_pool_destroy(r.other);
}

static void test_callback_reentry_unlocked(void **state)
{
    (void)state;
    alarm(60); /* a deadlock must not hang the suite */
    run_reentry(0);
    alarm(0);
}

static void test_callback_reentry_locked(void **state)
{
    (void)state;
    alarm(60);
    run_reentry(1);
    alarm(0);
}

/* Hashes that differ only in a few bits (trace ids stored big-endian in the
 * last 8 bytes, as the CLI does; or a counter in the first bytes) must spread
 * over the buckets: with at least as many buckets as blocks, the longest
 * chain stays short.  A mix that ignored some input bits put 16K ids into 4
 * buckets and made replay 600x slower. */
static void test_bucket_spread(void **state)
{
    (void)state;
    enum { N = 16384 };
    kvp_pool *pool = kvptest_pool(N, KVP_REUSE_LIFO);
    for (int layout = 0; layout < 3; layout++) {
        uint32_t count[N] = {0};
        for (uint64_t id = 0; id < N; id++) {
            kvp_hash h = {{0}};
            if (layout == 0)
                h = kvptest_hash(id + 1); /* big-endian, last 8 bytes */
            else if (layout == 1)
                memcpy(h.b + 24, &id, sizeof id); /* little-endian */
            else
                h.b[24] = (uint8_t)id, h.b[25] = (uint8_t)(id >> 8); /* two bytes */
            count[kvp__bucket_of(pool, 0, &h) % N]++;
        }
        uint32_t longest = 0;
        for (int i = 0; i < N; i++)
            longest = count[i] > longest ? count[i] : longest;
        if (longest > 16)
            fail_msg("layout %d: %u of %d hashes share one bucket", layout, longest, N);
    }
    kvp_pool_destroy(pool);
}

/* Many copies of one hash (and a few of two others, in the same pool):
 * after every random unpublish, free, eviction and re-publish, lookup
 * returns the copy published first among those still indexed, as a plain
 * list of the copies in publish order says; the pool checks clean. */
static void test_many_duplicates(void **state)
{
    (void)state;
    enum { N = 3000, OPS = 6000 };
    kvp_pool *pool = kvptest_pool(N, KVP_REUSE_LIFO);
    static kvp_block order[3][4 * N];     /* per hash: copies in publish order */
    static size_t norder[3];
    static uint8_t alive[N], freed[N];    /* indexed; cached (free) */
    static int key[N];                    /* which hash a block was published under */
    static kvp_block lru[N];              /* cached blocks, oldest free first */
    size_t nlru = 0, lru_at = 0;
    uint64_t rng = 42;
    for (kvp_block i = 0; i < N; i++) {
        kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        key[b] = kvptest_rand_below(&rng, 10) ? 0 : 1 + (int)kvptest_rand_below(&rng, 2);
        kvptest_publish(pool, b, 900 + (uint64_t)key[b]);
        order[key[b]][norder[key[b]]++] = b;
        alive[b] = 1;
    }
    for (int op = 0; op < OPS; op++) {
        kvp_block b = (kvp_block)kvptest_rand_below(&rng, N);
        switch (kvptest_rand_below(&rng, 4)) {
        case 0: /* unpublish a copy, in use or cached */
            if (alive[b]) {
                KVP_ASSERT_OK(kvp_unpublish(pool, b));
                alive[b] = 0;
            } else {
                uint64_t fp = kvptest_fp(pool);
                KVP_ASSERT_STATUS(kvp_unpublish(pool, b), KVP_ENOTFOUND);
                KVP_ASSERT_EQ(kvptest_fp(pool), fp);
            }
            break;
        case 1: /* publish again a block in use that lost its hash */
            if (!alive[b] && !freed[b]) {
                kvptest_publish(pool, b, 900 + (uint64_t)key[b]);
                order[key[b]][norder[key[b]]++] = b;
                alive[b] = 1;
            }
            break;
        case 2: /* free an indexed copy: cached, still found */
            if (alive[b] && !freed[b]) {
                KVP_ASSERT_OK(kvp_free(pool, &b, 1, 1));
                freed[b] = 1;
                lru[nlru++] = b;
            }
            break;
        default: { /* evict the oldest cached copy still indexed */
            while (lru_at < nlru && !alive[lru[lru_at]])
                lru_at++;
            uint32_t n = 0;
            KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &n));
            KVP_ASSERT_EQ(n, lru_at < nlru);
            if (n)
                alive[lru[lru_at++]] = 0;
            break;
        }
        }
        for (int k = 0; k < 3; k++) {
            kvp_block want = KVP_NO_BLOCK;
            for (size_t i = 0; i < norder[k] && want == KVP_NO_BLOCK; i++)
                if (alive[order[k][i]] && key[order[k][i]] == k) {
                    /* the last publish of a block is its place */
                    size_t last = i;
                    for (size_t j = i + 1; j < norder[k]; j++)
                        if (order[k][j] == order[k][i])
                            last = j;
                    if (last == i)
                        want = order[k][i];
                }
            if (kvptest_lookup(pool, 900 + (uint64_t)k) != want)
                fail_msg("op %d: hash %d: lookup gives block %u, the first indexed copy is %u",
                         op, k, (unsigned)kvptest_lookup(pool, 900 + (uint64_t)k), (unsigned)want);
        }
        if (op % 500 == 0)
            kvptest_check(pool);
    }
    kvptest_done(pool);
}

/* The inverse of MurmurHash3's fmix64 finalizer (each step undone). */
static uint64_t unfmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0x9cb4b2f8129337dbull; /* inverse of 0xc4ceb9fe1a85ec53 */
    x ^= x >> 33;
    x *= 0x4f74430c22a54005ull; /* inverse of 0xff51afd7ed558ccd */
    x ^= x >> 33;
    return x;
}

/* Hashes crafted to share one bucket under an unkeyed finalizer of the
 * last 8 bytes (fmix64 values whose low 32 bits are zero) spread under the
 * keyed bucket function: no chain holds more than KVP__CHAIN_MAX distinct
 * hashes, and every one of them is found. */
static void test_crafted_hashes_spread(void **state)
{
    (void)state;
    enum { N = 20000 };
    kvp_pool *pool = kvptest_pool(N, KVP_REUSE_LIFO);
    for (uint64_t i = 0; i < N; i++) {
        kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        kvp_hash h = {{0}};
        uint64_t x = unfmix((i + 1) << 32);
        memcpy(h.b + 24, &x, sizeof x);
        KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    }
    uint32_t longest = 0;
    for (uint32_t i = 0; i < pool->idx.nbuckets; i++) {
        uint32_t n = 0;
        for (uint32_t f = kvp__chain_first(pool, i); f != KVP__NONE; f = kvp__chain_skip(pool, f))
            n++;
        longest = n > longest ? n : longest;
    }
    if (longest > KVP__CHAIN_MAX)
        fail_msg("a chain holds %u distinct hashes", longest);
    for (uint64_t i = 0; i < N; i++) {
        kvp_hash h = {{0}};
        uint64_t x = unfmix((i + 1) << 32);
        memcpy(h.b + 24, &x, sizeof x);
        kvp_block out;
        KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &h, &out));
    }
    kvptest_done(pool);
}

/* Hashes picked to share one bucket under the pool's own secret (as a
 * caller that learnt it could): the publish that finds KVP__CHAIN_MAX
 * distinct hashes in its chain draws a fresh secret and re-chains in place.
 * Every hash, and the order of a hash's copies, survives; the pool checks
 * clean and no chain is left over the bound. */
static void test_rekey_on_long_chain(void **state)
{
    (void)state;
    enum { N = 1024, K = KVP__CHAIN_MAX + 1 };
    kvp_pool *pool = kvptest_pool(N, KVP_REUSE_LIFO);
    kvp_hash hs[K];
    uint64_t rng = 7;
    for (int k = 0; k < K;) {
        kvp_hash h = {{0}};
        for (int w = 0; w < 4; w++) {
            uint64_t v = kvptest_rand(&rng);
            memcpy(h.b + 8 * w, &v, sizeof v);
        }
        if (kvp__bucket_of(pool, 0, &h) == 0)
            hs[k++] = h;
    }
    uint8_t secret[sizeof pool->idx.secret];
    memcpy(secret, pool->idx.secret, sizeof secret);
    kvp_block first[K], second[K];
    for (int k = 0; k < K; k++) {
        first[k] = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        second[k] = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        KVP_ASSERT_OK(kvp_publish(pool, first[k], &hs[k]));
        if (k + 1 < K) /* a second copy of each but the last, before it */
            KVP_ASSERT_OK(kvp_publish(pool, second[k], &hs[k]));
    }
    KVP_ASSERT_OK(kvp_publish(pool, second[K - 1], &hs[K - 1]));
    assert_true(memcmp(secret, pool->idx.secret, sizeof secret) != 0);
    for (uint32_t i = 0; i < pool->idx.nbuckets; i++) {
        uint32_t n = 0;
        for (uint32_t f = kvp__chain_first(pool, i); f != KVP__NONE; f = kvp__chain_skip(pool, f))
            n++;
        if (n > KVP__CHAIN_MAX)
            fail_msg("bucket %u holds %u distinct hashes after re-keying", i, n);
    }
    kvptest_check(pool);
    for (int k = 0; k < K; k++) {
        kvp_block out;
        KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &hs[k], &out));
        KVP_ASSERT_EQ(out, first[k]);
        KVP_ASSERT_OK(kvp_unpublish(pool, first[k]));
        KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &hs[k], &out));
        KVP_ASSERT_EQ(out, second[k]);
    }
    kvptest_done(pool);
}

/* SLRU's ghost list keys evicted hashes the same way: hashes picked to
 * share one of its buckets under its secret fill that chain up to
 * KVP__CHAIN_MAX; the next eviction into it draws a fresh secret and starts
 * the list again with that one key; the pool checks clean. */
static void test_ghost_rekey(void **state)
{
    (void)state;
    enum { N = 64, K = KVP__CHAIN_MAX + 1 };
    kvp_config cfg = kvptest_config(N);
    cfg.policy = KVP_POLICY_SLRU;
    kvp_pool *pool = kvptest_create(&cfg);
    uint8_t secret[sizeof pool->ghost.secret];
    memcpy(secret, pool->ghost.secret, sizeof secret);
    uint64_t rng = 11;
    for (uint32_t k = 0; k < K;) {
        kvp_hash h;
        for (int w = 0; w < 4; w++) {
            uint64_t v = kvptest_rand(&rng);
            memcpy(h.b + 8 * w, &v, sizeof v);
        }
        uint64_t key =
            XXH3_64bits_withSecret(h.b, sizeof h.b, pool->ghost.secret, sizeof pool->ghost.secret);
        if (key & pool->ghost.bmask)
            continue;
        kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        KVP_ASSERT_OK(kvp_publish(pool, b, &h));
        KVP_ASSERT_OK(kvp_free(pool, &b, 1, 1));
        uint32_t n = 0;
        KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &n));
        KVP_ASSERT_EQ(n, 1);
        k++;
        KVP_ASSERT_EQ(pool->ghost.used, k < K ? k : 1);
    }
    assert_true(memcmp(secret, pool->ghost.secret, sizeof secret) != 0);
    kvptest_done(pool);
}

/* The bucket count keeps the load factor at most 2/3 and the buckets'
 * memory at 6 bytes per block, for every pool size; a pool's index really
 * has that many buckets, also after growth. */
static void test_bucket_count(void **state)
{
    (void)state;
    static const uint32_t caps[] = {1, 2, 3, 10, 1000, 10000, 16384, 16385, 21845, 21846,
                                    65536, 1048576, 1u << 30};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        uint64_t cap = caps[i], b = kvp__bucket_count(caps[i]);
        if (b != cap + cap / 2 && !(cap == 1 && b == 1))
            fail_msg("cap %llu: %llu buckets, not cap + cap / 2",
                     (unsigned long long)cap, (unsigned long long)b);
    }
    KVP_ASSERT_EQ(kvp__bucket_count(KVP_MAX_BLOCKS), 1u << 31);
    kvp_config cfg = kvptest_config(10000);
    cfg.grow_on_exhaustion = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    KVP_ASSERT_EQ(pool->idx.nbuckets, 15000);
    kvp_block ids[16];
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 10000, NULL));
    KVP_ASSERT_EQ(pool->idx.nbuckets, kvp__bucket_count(pool->cap));
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 16, 1, ids, 16), 16);
    kvptest_done(pool);
}

/* ---- batch faces: kvp_claim_prefix and kvp_publish_each ---------------- */

/* One side of the batch equivalence test: a pool, and the ids of the
 * blocks each of its requests holds. */
typedef struct batch_side {
    kvp_pool *pool;
    kvp_block held[8][16];
    size_t nheld[8];
    kvp_owner owner[8];
} batch_side;

static kvp_pool *batch_pool(void)
{
    kvp_config cfg = kvptest_config(96);
    cfg.reuse = KVP_REUSE_FIFO;
    cfg.events = 1;
    return kvptest_create(&cfg);
}

/* Admit a request of `nb` blocks whose full ones hash to h[0..nfull) for
 * `owner`: the cached prefix claimed (by the loop of kvp_lookup + kvp_claim,
 * or kvp_claim_prefix), the rest allocated, the new full blocks published
 * (by the loop of kvp_publish, or kvp_publish_each).  Returns the hits. */
static size_t batch_admit(batch_side *sd, int batch, size_t slot, const kvp_hash *h,
                          size_t nfull, size_t nb, kvp_owner owner)
{
    kvp_pool *pool = sd->pool;
    kvp_block *ids = sd->held[slot];
    size_t hit = 0, got = 0;
    if (batch) {
        KVP_ASSERT_OK(kvp_claim_prefix(pool, KVP_STREAM_SHARED, h, nfull, owner, ids, &hit));
    } else {
        while (hit < nfull && kvp_lookup(pool, KVP_STREAM_SHARED, &h[hit], &ids[hit]) == KVP_OK)
            KVP_ASSERT_OK(kvp_claim(pool, ids[hit++], owner));
    }
    if (nb > hit)
        KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_SHARED, (nb - hit) * 16, owner, KVP_FMT_FP16,
                                ids + hit, 16 - hit, &got));
    if (batch) {
        size_t np = 99;
        KVP_ASSERT_OK(kvp_publish_each(pool, ids + hit, h + hit, nfull - hit, &np));
        KVP_ASSERT_EQ(np, nfull - hit);
    } else {
        for (size_t i = hit; i < nfull; i++)
            KVP_ASSERT_OK(kvp_publish(pool, ids[i], &h[i]));
    }
    sd->nheld[slot] = hit + got;
    sd->owner[slot] = owner;
    return hit;
}

/* Everything a caller can observe of a pool, compared between the sides:
 * the fingerprint, the stats (as JSON), each block's description and the
 * events queued since the last comparison. */
static void batch_compare(batch_side *a, batch_side *b)
{
    KVP_ASSERT_EQ(kvptest_fp(a->pool), kvptest_fp(b->pool));
    char ja[8192], jb[8192];
    size_t na, nb;
    KVP_ASSERT_OK(kvp_stats_json(a->pool, ja, sizeof ja, &na));
    KVP_ASSERT_OK(kvp_stats_json(b->pool, jb, sizeof jb, &nb));
    assert_string_equal(ja, jb);
    kvp_block_info ia, ib;
    kvp_block id = 0;
    for (; kvp_block_get(a->pool, id, &ia) == KVP_OK; id++) {
        KVP_ASSERT_OK(kvp_block_get(b->pool, id, &ib));
        KVP_ASSERT_EQ(ia.state, ib.state);
        KVP_ASSERT_EQ(ia.ref_count, ib.ref_count);
        KVP_ASSERT_EQ(ia.anon_refs, ib.anon_refs);
        KVP_ASSERT_EQ(ia.owner, ib.owner);
        KVP_ASSERT_EQ(ia.published, ib.published);
        if (ia.published)
            assert_memory_equal(&ia.hash, &ib.hash, sizeof ia.hash);
    }
    KVP_ASSERT_STATUS(kvp_block_get(b->pool, id, &ib), KVP_ERANGE);
    const kvp_event *ea, *eb;
    KVP_ASSERT_OK(kvp_events_take(a->pool, &ea, &na, NULL));
    KVP_ASSERT_OK(kvp_events_take(b->pool, &eb, &nb, NULL));
    KVP_ASSERT_EQ(na, nb);
    for (size_t i = 0; i < na; i++) {
        KVP_ASSERT_EQ(ea[i].kind, eb[i].kind);
        KVP_ASSERT_EQ(ea[i].n_hashes, eb[i].n_hashes);
        for (size_t k = 0; k < ea[i].n_hashes; k++)
            KVP_ASSERT_EQ(ea[i].hashes[k], eb[i].hashes[k]);
    }
}

/* kvp_claim_prefix and kvp_publish_each leave exactly what the loops of
 * kvp_lookup + kvp_claim and kvp_publish leave: the same ids, hits,
 * references and owners (anonymous, one owner, a second owner on a block in
 * use), index, stats, events, over requests that share prefixes, miss, and
 * evict cached blocks, with up to 8 requests in flight. */
static void test_batch_faces_match_loops(void **state)
{
    (void)state;
    batch_side side[2] = {{.pool = batch_pool()}, {.pool = batch_pool()}};
    uint64_t rng = 20;
    size_t total_hits = 0;
    for (int step = 0; step < 400; step++) {
        size_t slot = (size_t)kvptest_rand_below(&rng, 8);
        kvp_owner owner = kvptest_rand_below(&rng, 3) == 0 ? KVP_ANON
                                                            : (kvp_owner)(1 + slot % 3);
        for (int sd = 0; sd < 2; sd++) { /* the request in this slot ends */
            batch_side *b = &side[sd];
            kvp_block rev[16];
            for (size_t i = 0; i < b->nheld[slot]; i++)
                rev[i] = b->held[slot][b->nheld[slot] - 1 - i];
            if (b->nheld[slot])
                KVP_ASSERT_OK(kvp_free(b->pool, rev, b->nheld[slot], b->owner[slot]));
            b->nheld[slot] = 0;
        }
        /* a prompt: one of 4 prefixes of up to 6 blocks, then a suffix of
         * up to 4 blocks unique to the step, maybe a partial block */
        kvp_hash h[12];
        uint64_t prompt = kvptest_rand_below(&rng, 4);
        size_t npre = (size_t)kvptest_rand_below(&rng, 7);
        size_t nfull = npre + (size_t)kvptest_rand_below(&rng, 5);
        size_t nb = nfull + (size_t)kvptest_rand_below(&rng, 2);
        for (size_t i = 0; i < nfull; i++)
            h[i] = kvptest_hash(i < npre ? 1000 * (prompt + 1) + i
                                         : 1000000 + 100 * (uint64_t)step + i);
        if (nb == 0)
            continue;
        size_t hits[2];
        for (int sd = 0; sd < 2; sd++)
            hits[sd] = batch_admit(&side[sd], sd, slot, h, nfull, nb, owner);
        KVP_ASSERT_EQ(hits[0], hits[1]);
        total_hits += hits[0];
        for (size_t i = 0; i < side[0].nheld[slot]; i++)
            KVP_ASSERT_EQ(side[0].held[slot][i], side[1].held[slot][i]);
        batch_compare(&side[0], &side[1]);
    }
    /* the run covered hits and evictions, not only misses */
    assert_true(total_hits > 100);
    assert_true(kvptest_stats(side[1].pool).evictions > 10);
    kvptest_done(side[0].pool);
    kvptest_done(side[1].pool);
}

/* kvp_publish_each stops at the first refused block as the loop of
 * kvp_publish does: the publishes before it stand, the refused one and those
 * after it change nothing, *n_published counts the ones done; a block
 * already published under the same hash is a no-op, not a refusal. */
static void test_publish_each_stops_like_loop(void **state)
{
    (void)state;
    batch_side side[2] = {{.pool = batch_pool()}, {.pool = batch_pool()}};
    kvp_hash h[5] = {kvptest_hash(1), kvptest_hash(2), kvptest_hash(3), kvptest_hash(4),
                     kvptest_hash(5)};
    for (int sd = 0; sd < 2; sd++) {
        kvp_pool *pool = side[sd].pool;
        kvp_block ids[4];
        KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 4 * 16, 7, ids, 4), 4);
        KVP_ASSERT_OK(kvp_publish(pool, ids[0], &h[0]));
        KVP_ASSERT_OK(kvp_free(pool, &ids[3], 1, 7)); /* ids[3] free: refused */
        /* ids[0] again under its hash, ids[1], then the free block, then ids[2] */
        kvp_block order[4] = {ids[0], ids[1], ids[3], ids[2]};
        kvp_hash hs[4] = {h[0], h[1], h[3], h[2]};
        if (sd) {
            size_t np = 99;
            KVP_ASSERT_STATUS(kvp_publish_each(pool, order, hs, 4, &np), KVP_EDOUBLEFREE);
            KVP_ASSERT_EQ(np, 2);
        } else {
            kvp_status rc = KVP_OK;
            for (size_t i = 0; i < 4 && rc == KVP_OK; i++)
                rc = kvp_publish(pool, order[i], &hs[i]);
            KVP_ASSERT_STATUS(rc, KVP_EDOUBLEFREE);
        }
        KVP_ASSERT_EQ(kvptest_lookup(pool, 2), ids[1]);
        KVP_ASSERT_EQ(kvptest_lookup(pool, 3), KVP_NO_BLOCK);
        KVP_ASSERT_EQ(kvptest_info(pool, ids[2]).published, 0);
        /* a hash other than the one it has: KVP_EBUSY, n_published 0 */
        size_t np = 99;
        KVP_ASSERT_REFUSED(pool, kvp_publish_each(pool, &ids[0], &h[4], 1, &np), KVP_EBUSY);
        KVP_ASSERT_EQ(np, 0);
    }
    batch_compare(&side[0], &side[1]);
    kvptest_done(side[0].pool);
    kvptest_done(side[1].pool);
}

/* An allocator that refuses everything while *user is set. */
static void *deny_alloc(void *user, size_t size)
{
    return *(int *)user ? NULL : kvptest_sized_alloc(size);
}

static void deny_release(void *user, void *ptr, size_t size)
{
    (void)user;
    if (ptr)
        assert_int_equal(kvptest_sized_release(ptr), size);
}

/* kvp_claim_prefix stops at a claim that fails as the loop does: the claims
 * before it stand, *n_hit counts them, the status is the failed claim's.
 * Owner 2 claims block a (anonymous: no memory needed), then block b, held
 * by owner 1, whose second owner needs an xref node: no memory, ENOMEM. */
static void test_claim_prefix_stops_like_loop(void **state)
{
    (void)state;
    static int deny;
    static const kvp_allocator denying = {deny_alloc, deny_release, &deny};
    batch_side side[2];
    kvp_hash h[3] = {kvptest_hash(1), kvptest_hash(2), kvptest_hash(3)};
    kvp_block a = 0, b = 0;
    for (int sd = 0; sd < 2; sd++) {
        deny = 0;
        kvp_config cfg = kvptest_config(16);
        cfg.events = 1;
        cfg.allocator = &denying;
        kvp_pool *pool = side[sd].pool = kvptest_create(&cfg);
        a = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
        b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        kvp_block c = kvptest_take(pool, KVP_STREAM_SHARED, 1);
        kvptest_take(pool, KVP_STREAM_SHARED, 2); /* owner 2 exists, with room */
        kvp_block pub[3] = {a, b, c};
        KVP_ASSERT_OK(kvp_publish_each(pool, pub, h, 3, NULL));
        kvp_block got[3] = {KVP_NO_BLOCK, KVP_NO_BLOCK, KVP_NO_BLOCK};
        size_t hit = 0;
        deny = 1;
        if (sd) {
            KVP_ASSERT_STATUS(kvp_claim_prefix(pool, KVP_STREAM_SHARED, h, 3, 2, got, &hit),
                              KVP_ENOMEM);
        } else {
            kvp_status rc = KVP_OK;
            while (hit < 3 && rc == KVP_OK &&
                   kvp_lookup(pool, KVP_STREAM_SHARED, &h[hit], &got[hit]) == KVP_OK &&
                   (rc = kvp_claim(pool, got[hit], 2)) == KVP_OK)
                hit++;
            KVP_ASSERT_STATUS(rc, KVP_ENOMEM);
        }
        deny = 0;
        KVP_ASSERT_EQ(hit, 1);
        KVP_ASSERT_EQ(got[0], a);
        KVP_ASSERT_EQ(kvptest_info(pool, a).ref_count, 2);
        KVP_ASSERT_EQ(kvptest_info(pool, b).ref_count, 1);
        kvptest_check(pool);
    }
    batch_compare(&side[0], &side[1]);
    kvptest_done(side[0].pool);
    kvptest_done(side[1].pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_lookup_unpublish),
        cmocka_unit_test(test_bucket_spread),
        cmocka_unit_test(test_bucket_count),
        cmocka_unit_test(test_many_duplicates),
        cmocka_unit_test(test_crafted_hashes_spread),
        cmocka_unit_test(test_rekey_on_long_chain),
        cmocka_unit_test(test_ghost_rekey),
        cmocka_unit_test(test_lazy_eviction),
        cmocka_unit_test(test_claim_cached),
        cmocka_unit_test(test_claim_used_and_vacant),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_duplicates_many),
        cmocka_unit_test(test_evict_lru),
        cmocka_unit_test(test_ensure_free),
        cmocka_unit_test(test_clear_index),
        cmocka_unit_test(test_reset_prefix_cache),
        cmocka_unit_test(test_prefix_caching_off),
        cmocka_unit_test(test_callback_reentry_unlocked),
        cmocka_unit_test(test_callback_reentry_locked),
        cmocka_unit_test(test_batch_faces_match_loops),
        cmocka_unit_test(test_publish_each_stops_like_loop),
        cmocka_unit_test(test_claim_prefix_stops_like_loop),
    };
    return cmocka_run_group_tests_name("index", tests, NULL, NULL);
}
