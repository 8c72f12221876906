/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_resize.c — growth, shrink and relocation (kvpool.h "Growth, shrink,
 * relocation"; what a retired block does to the content index).
 *
 * Covers: kvp_extend (cap on managed blocks, refilling ids retired by shrink
 * lowest first, then above the top; where new blocks land in the reuse
 * order), kvp_shrink (vacant before cached, highest ids first, cached ones
 * evicted, blocks in use never touched, per stream; the same in every reuse
 * order, whose free sets LIFO and FIFO build at their first shrink), kvp_retire_top of a free
 * block (vacant or cached) and of a block in use (its whole identity moves:
 * references, owners and their order, hash and index entry, fill, format;
 * the destination is taken in reuse order and evicted if cached), clean
 * failure with no free block, and relocation with duplicate hashes.
 */
#include "kvptest.h"

#include <string.h>

/* A pool of n blocks in the given reuse order, capped at max managed blocks
 * (0: no cap), its evictions recorded in rec when rec is not NULL. */
static kvp_pool *make(uint32_t n, kvp_reuse reuse, uint32_t max, kvptest_evrec *rec)
{
    kvp_config cfg = kvptest_config(n);
    cfg.reuse = reuse;
    cfg.max_blocks = max;
    if (rec)
        kvptest_evrec_attach(rec, &cfg);
    return kvptest_create(&cfg);
}

/* make(), then every one of the n blocks taken by owner 1 in one kvp_alloc
 * (ids 0..n-1, written to ids). */
static kvp_pool *make_full(uint32_t n, kvp_reuse reuse, uint32_t max, kvptest_evrec *rec,
                           kvp_block *ids)
{
    kvp_pool *pool = make(n, reuse, max, rec);
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * (uint64_t)n, 1, ids, n);
    return pool;
}

/* An 8-block pool with separate K and V lists (K: 0..3, V: 4..7), reuse
 * order LOWEST. */
static kvp_pool *make_separate(void)
{
    kvp_config cfg = kvptest_config(8);
    cfg.separate_kv = 1;
    cfg.reuse = KVP_REUSE_LOWEST;
    return kvptest_create(&cfg);
}

/* Each block listed is in state `want`; a failure names the caller's line
 * and the block. */
static void expect_states_at(kvp_pool *pool, int want, const kvp_block *ids, size_t n,
                             const char *file, int line)
{
    for (size_t i = 0; i < n; i++) {
        int got = kvptest_info_at(pool, ids[i], file, line).state;
        if (got != want) {
            print_error("%s:%d: block %u is in state %d, expected %d\n", file, line,
                        (unsigned)ids[i], got, want);
            _fail(file, line);
        }
    }
}
#define EXPECT_STATES(pool, want, ...)                                                   \
    do {                                                                                 \
        const kvp_block ids_[] = {__VA_ARGS__};                                          \
        expect_states_at((pool), (want), ids_, ARRAY_LEN(ids_), __FILE__, __LINE__);     \
    } while (0)

/* kvp_retire_top succeeds, retiring `retired` and moving its content to
 * `moved` (KVP_NO_BLOCK: nothing moved). */
static void expect_retire_at(kvp_pool *pool, kvp_block retired, kvp_block moved,
                             const char *file, int line)
{
    kvp_block r = KVP_NO_BLOCK, m = KVP_NO_BLOCK;
    kvptest_assert_status(kvp_retire_top(pool, &r, &m), KVP_OK, "kvp_retire_top", file, line);
    kvptest_assert_eq(r, retired, "retired", "expected", file, line);
    kvptest_assert_eq(m, moved, "moved_to", "expected", file, line);
}
#define expect_retire(pool, r, m) expect_retire_at((pool), (r), (m), __FILE__, __LINE__)

/* ---- extend ------------------------------------------------------------- */

static void test_extend_cap(void **state)
{
    (void)state;
    kvp_pool *pool = make(4, KVP_REUSE_LOWEST, 6, NULL);
    uint32_t added = 99;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 5, &added));
    KVP_ASSERT_EQ(added, 2);
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 6), ST(extended, 2), ST(vacant, 6), ST(grown, 0));
    for (kvp_block b = 4; b < 6; b++) {
        kvp_block_info info = kvptest_info(pool, b);
        KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
        KVP_ASSERT_EQ(info.ever_allocated, 0);
        KVP_ASSERT_EQ(info.stream, KVP_STREAM_SHARED);
    }
    kvp_block_info info;
    KVP_ASSERT_REFUSED(pool, kvp_block_get(pool, 6, &info), KVP_ERANGE);
    kvptest_check(pool);
    /* At the cap: adds nothing, succeeds. */
    uint64_t fp = kvptest_fp(pool);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1, &added));
    KVP_ASSERT_EQ(added, 0);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 0, NULL));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    KVP_ASSERT_EQ(kvptest_stats(pool).extended, 2);
    kvptest_done(pool);

    /* max_blocks 0: no practical cap. */
    pool = make(4, KVP_REUSE_LOWEST, 0, NULL);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1000, &added));
    KVP_ASSERT_EQ(added, 1000);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 1004);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 1004);
    kvptest_done(pool);
}

/* Where extended blocks land in the reuse order. */
static void test_extend_reuse_position(void **state)
{
    (void)state;
    /* LOWEST: by id. */
    kvp_block ids[4];
    kvp_pool *pool = make_full(4, KVP_REUSE_LOWEST, 0, NULL, ids);
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 2, NULL));
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 2, 4, 5);
    kvptest_done(pool);

    /* FIFO: as if freed now, in id order, so after earlier frees. */
    pool = make_full(4, KVP_REUSE_FIFO, 0, NULL, ids);
    kvptest_free1(pool, 1, 1);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 2, NULL));
    kvptest_free1(pool, 3, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 1, 4, 5, 3);
    kvptest_done(pool);

    /* LIFO and LOWEST: extended vacant blocks still go before cached ones. */
    kvptest_evrec rec;
    pool = make_full(2, KVP_REUSE_LIFO, 0, &rec, ids);
    kvptest_publish(pool, 0, 1);
    kvptest_publish(pool, 1, 2);
    KVP_ASSERT_OK(kvp_free(pool, ids, 2, 1));
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1, NULL));
    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 1), 2);
    KVP_ASSERT_EQ(rec.n, 0);
    kvptest_done(pool);
}

static void test_extend_refills_retired(void **state)
{
    (void)state;
    kvp_block ids[8];
    kvp_pool *pool = make_full(8, KVP_REUSE_LOWEST, 0, NULL, ids);
    kvp_block f[3] = {6, 2, 5};
    KVP_ASSERT_OK(kvp_free(pool, f, 3, 1));
    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret));
    KVP_ASSERT_EQ(nret, 3);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 2, 5, 6);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 5);
    kvptest_check(pool);
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 2, &added));
    KVP_ASSERT_EQ(added, 2);
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 2, 5);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 6);
    kvp_block_info info;
    KVP_ASSERT_STATUS(kvp_block_get(pool, 8, &info), KVP_ERANGE);
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 3, &added));
    KVP_ASSERT_EQ(added, 3);
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 6, 8, 9);
    KVP_ASSERT_STATUS(kvp_block_get(pool, 10, &info), KVP_ERANGE);
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 10), ST(extended, 5), ST(retired, 3));
    kvptest_done(pool);

    /* The cap counts managed blocks, not the highest id. */
    pool = make_full(8, KVP_REUSE_LOWEST, 9, NULL, ids);
    KVP_ASSERT_OK(kvp_free(pool, f, 3, 1));
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret));
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 10, &added));
    KVP_ASSERT_EQ(added, 4);
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 2, 5, 6, 8);
    KVP_ASSERT_STATUS(kvp_block_get(pool, 9, &info), KVP_ERANGE);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 9);
    kvptest_done(pool);
}

/* ---- shrink ------------------------------------------------------------- */

/* The same retirements in every reuse order.  LOWEST keeps its free sets
 * from the start; LIFO and FIFO build them at this first shrink. */
static void shrink_order(kvp_reuse reuse)
{
    kvptest_evrec rec;
    kvp_block ids[10];
    kvp_pool *pool = make_full(10, reuse, 0, &rec, ids); /* 0..9 */
    kvptest_publish(pool, 1, 101);
    kvptest_publish(pool, 3, 103);
    kvptest_publish(pool, 6, 106);
    kvptest_publish(pool, 8, 108);
    kvptest_publish(pool, 9, 109);
    /* LRU of cached: 6 1 8 3.  In use: 4, 9. */
    kvp_block f[8] = {6, 0, 1, 2, 8, 5, 3, 7};
    KVP_ASSERT_OK(kvp_free(pool, f, 8, 1));
    KVPTEST_EXPECT_STATS(pool, ST(vacant, 4), ST(cached, 4));

    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 6, &nret));
    KVP_ASSERT_EQ(nret, 2);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 7, 5);
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 2);
    KVP_ASSERT_EQ(rec.n, 0);
    kvptest_check(pool);

    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 2, &nret));
    KVP_ASSERT_EQ(nret, 4);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 2, 0, 8, 6);
    EXPECT_STATES(pool, KVP_BLOCK_CACHED, 3, 1);
    KVP_ASSERT_EQ(rec.n, 2);
    KVPTEST_EXPECT_EVREC(&rec, 0, 108, 8);
    KVPTEST_EXPECT_EVREC(&rec, 1, 106, 6);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 108), KVP_NO_BLOCK);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 103), 3);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 2), ST(retired, 6), ST(blocks, 4));
    kvptest_check(pool);

    /* Target at or above the free count: nothing. */
    uint64_t fp = kvptest_fp(pool);
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 2, &nret));
    KVP_ASSERT_EQ(nret, 0);
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 100, NULL));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);

    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret));
    KVP_ASSERT_EQ(nret, 2);
    KVP_ASSERT_EQ(rec.n, 4);
    KVP_ASSERT_EQ(rec.block[2], 3);
    KVP_ASSERT_EQ(rec.block[3], 1);
    /* Blocks in use untouched, including the top one. */
    kvp_block_info info = kvptest_info(pool, 9);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.owner, 1);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 109), 9);
    EXPECT_STATES(pool, KVP_BLOCK_IN_USE, 4);
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 2), ST(free, 0), ST(in_use, 2), ST(retired, 8));
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 1, ids, 10), 2);
    /* Retired blocks are out of range for everything. */
    kvp_block r = 7;
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, &r, 1, 1), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_take_id(pool, 7, 1), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_claim(pool, 3, 1), KVP_ERANGE);
    kvptest_done(pool);
}

/* shrink_order in each reuse order, the order handed to the test as its
 * state; each entry named in the test list. */
static kvp_reuse g_orders[] = {KVP_REUSE_LOWEST, KVP_REUSE_LIFO, KVP_REUSE_FIFO};

static void test_shrink_order_in(void **state)
{
    shrink_order(*(const kvp_reuse *)*state);
}
#define SHRINK_TEST(name, order) {(name), test_shrink_order_in, NULL, NULL, &(order)}

static void test_shrink_separate(void **state)
{
    (void)state;
    kvp_pool *pool = make_separate();
    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_V, 1, &nret));
    KVP_ASSERT_EQ(nret, 3);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 1);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 4);
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 4, 3);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 5);
    KVP_ASSERT_REFUSED(pool, kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret), KVP_EINVAL);
    /* Refilled ids keep going to the stream that extends. */
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_K, 1, &added));
    KVP_ASSERT_EQ(added, 1);
    kvp_block_info info = kvptest_info(pool, 5);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(info.stream, KVP_STREAM_K);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 5);
    kvptest_done(pool);
}

/* ---- retire_top --------------------------------------------------------- */

static void test_retire_top_free(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = make(4, KVP_REUSE_LOWEST, 0, &rec);
    expect_retire(pool, 3, KVP_NO_BLOCK);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 3);
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 3), ST(retired, 1), ST(relocated, 0));
    KVP_ASSERT_EQ(rec.n, 0);
    kvptest_check(pool);
    /* A cached top: evicted. */
    kvp_block ids[4];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 4); /* 0 1 2 */
    kvptest_publish(pool, 2, 22);
    kvptest_free1(pool, 2, 1);
    expect_retire(pool, 2, KVP_NO_BLOCK);
    KVP_ASSERT_EQ(rec.n, 1);
    KVPTEST_EXPECT_EVREC(&rec, 0, 22, 2);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 22), KVP_NO_BLOCK);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 1), ST(retired, 2), ST(blocks, 2), ST(indexed, 0));
    kvptest_check(pool);
    /* Retired ids come back with extend, lowest first. */
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 1, &added));
    EXPECT_STATES(pool, KVP_BLOCK_VACANT, 2);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 3);
    kvptest_done(pool);
}

static void test_retire_top_used(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = make(8, KVP_REUSE_LOWEST, 0, &rec);
    kvp_block ids[8];
    size_t n = 0;
    /* Anonymous 0..6, then owner 1 gets 7 with format INT4. */
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 7, KVP_ANON, ids, 8);
    KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_SHARED, 16, 1, KVP_FMT_INT4, ids, 8, &n));
    KVP_ASSERT_EQ(ids[0], 7);
    kvp_block f[7] = {3, 5, 0, 1, 2, 4, 6};
    KVP_ASSERT_OK(kvp_free(pool, f, 7, KVP_ANON));
    kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 8); /* 0 1 2 */
    KVP_ASSERT_OK(kvp_set_fill(pool, 7, 5));
    kvptest_publish(pool, 7, 77);
    KVP_ASSERT_OK(kvp_claim(pool, 7, 2));
    KVP_ASSERT_OK(kvp_claim(pool, 7, KVP_ANON));
    KVP_ASSERT_OK(kvp_claim(pool, 1, 2));
    kvp_block ob[8];
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 1, ob, 8), 4);
    KVP_ASSERT_EQ(ob[0], 7);
    kvp_stats before = kvptest_stats(pool);
    KVP_ASSERT_EQ(before.fragmented, 1);
    kvptest_check(pool);

    expect_retire(pool, 7, 3); /* moved to the lowest vacant */
    KVP_ASSERT_EQ(rec.n, 0);
    kvp_block_info info = kvptest_info(pool, 3);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.ref_count, 3);
    KVP_ASSERT_EQ(info.anon_refs, 1);
    KVP_ASSERT_EQ(info.owner, 1);
    KVP_ASSERT_EQ(info.fill, 5);
    KVP_ASSERT_EQ(info.format, KVP_FMT_INT4);
    KVP_ASSERT_EQ(info.published, 1);
    KVP_ASSERT_EQ(kvptest_hash_u64(&info.hash), 77);
    KVP_ASSERT_EQ(info.ever_allocated, 1);
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 7);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 77), 3);
    /* The owners' lists name the new id, in the same position. */
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 1, ob, 8), 4);
    KVP_ASSERT_EQ(ob[0], 3);
    KVP_ASSERT_EQ(ob[1], 0);
    KVP_ASSERT_EQ(ob[2], 1);
    KVP_ASSERT_EQ(ob[3], 2);
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 2, ob, 8), 2);
    KVP_ASSERT_EQ(ob[0], 3);
    KVP_ASSERT_EQ(ob[1], 1);
    KVPTEST_EXPECT_STATS(pool, ST(relocated, 1), ST(retired, 1), ST(blocks, 7),
                         ST(in_use, before.in_use), ST(free, before.free - 1),
                         ST(shared, before.shared), ST(indexed, before.indexed), ST(fragmented, 1),
                         ST(owners, 2), ST(evictions, 0));
    kvptest_check(pool);

    /* The old id is gone; the new one behaves like the old one did. */
    kvp_block seven = 7;
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, &seven, 1, 1), KVP_ERANGE);
    KVP_ASSERT_OK(kvp_set_fill(pool, 3, 16));
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    kvptest_free1(pool, 3, 2);
    kvptest_free1(pool, 3, KVP_ANON);
    size_t nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, &nf));
    KVP_ASSERT_EQ(nf, 4);
    EXPECT_STATES(pool, KVP_BLOCK_CACHED, 3);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 77), 3);
    kvptest_done(pool);
}

/* The destination is taken in reuse order and evicted if it was cached. */
static void test_retire_top_destination(void **state)
{
    (void)state;
    kvp_block ids[8], r, m;
    /* LIFO: most recently freed vacant block. */
    kvp_pool *pool = make_full(8, KVP_REUSE_LIFO, 0, NULL, ids);
    kvptest_free1(pool, 2, 1);
    kvptest_free1(pool, 4, 1);
    expect_retire(pool, 7, 4);
    kvptest_done(pool);

    /* FIFO: the head of the queue. */
    pool = make_full(8, KVP_REUSE_FIFO, 0, NULL, ids);
    kvptest_free1(pool, 4, 1);
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_OK(kvp_retire_top(pool, &r, &m));
    KVP_ASSERT_EQ(m, 4);
    kvptest_done(pool);

    /* LOWEST with cached and vacant: vacant first. */
    kvptest_evrec rec;
    pool = make_full(8, KVP_REUSE_LOWEST, 0, &rec, ids);
    kvptest_publish(pool, 1, 11);
    kvptest_free1(pool, 1, 1);
    kvptest_free1(pool, 5, 1);
    KVP_ASSERT_OK(kvp_retire_top(pool, &r, &m));
    KVP_ASSERT_EQ(m, 5);
    KVP_ASSERT_EQ(rec.n, 0);
    kvptest_check(pool);
    /* Now only the cached block is free: it is evicted, exactly once. */
    kvptest_publish(pool, 6, 66);
    expect_retire(pool, 6, 1);
    KVP_ASSERT_EQ(rec.n, 1);
    KVPTEST_EXPECT_EVREC(&rec, 0, 11, 1);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 11), KVP_NO_BLOCK);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 66), 1);
    KVPTEST_EXPECT_STATS(pool, ST(evictions, 1), ST(relocated, 2), ST(indexed, 1), ST(free, 0));
    kvptest_done(pool);
}

static void test_retire_top_no_free(void **state)
{
    (void)state;
    kvp_block ids[4], r = 100, m = 100;
    kvp_pool *pool = make_full(4, KVP_REUSE_LOWEST, 0, NULL, ids);
    kvptest_publish(pool, 3, 3);
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EEXHAUSTED);
    KVPTEST_EXPECT_STATS(pool, ST(retired, 0), ST(relocated, 0), ST(blocks, 4));
    /* After a shrink retired the top ids, the highest managed is the top. */
    kvptest_free1(pool, 0, 1);
    kvptest_free1(pool, 3, 1);
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 1, NULL)); /* retires 0 */
    EXPECT_STATES(pool, KVP_BLOCK_RETIRED, 0);
    KVP_ASSERT_OK(kvp_take_id(pool, 3, 1));
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EEXHAUSTED);
    kvptest_done(pool);

    /* Separate streams: only a free block of the same stream will do. */
    pool = make_separate();
    kvptest_alloc(pool, KVP_STREAM_V, 64, 1, ids, 4); /* 4..7 */
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 4);
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EEXHAUSTED);
    kvptest_free1(pool, 5, 1);
    expect_retire(pool, 7, 5);
    KVP_ASSERT_EQ(kvptest_info(pool, 5).stream, KVP_STREAM_V);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 4);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 0);
    kvptest_done(pool);
}

/* An 8-block LOWEST pool, every block in use by owner 1, with hash 9
 * published on each of copies[0..n-1] in that order; then block 2 is freed
 * and kvp_retire_top must move the top's content to it. */
static kvp_pool *retire_with_copies(kvptest_evrec *rec, const kvp_block *copies, size_t n)
{
    kvp_block ids[8], r, m;
    kvp_pool *pool = make_full(8, KVP_REUSE_LOWEST, 0, rec, ids);
    for (size_t i = 0; i < n; i++)
        kvptest_publish(pool, copies[i], 9);
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_OK(kvp_retire_top(pool, &r, &m));
    KVP_ASSERT_EQ(m, 2);
    return pool;
}

/* Relocation with duplicates keeps every other entry, and the order. */
static void test_relocation_duplicates(void **state)
{
    (void)state;
    kvptest_evrec rec;

    /* (a) the top is the later copy. */
    const kvp_block later[] = {5, 7};
    kvp_pool *pool = retire_with_copies(&rec, later, ARRAY_LEN(later));
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 5);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 2);
    KVP_ASSERT_OK(kvp_unpublish(pool, 5));
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 2);
    kvptest_done(pool);

    /* (b) the top is the first copy: the moved entry keeps its place. */
    const kvp_block first[] = {7, 5};
    pool = retire_with_copies(&rec, first, ARRAY_LEN(first));
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 2);
    KVP_ASSERT_OK(kvp_unpublish(pool, 2));
    KVP_ASSERT_EQ(rec.n, 1);
    KVP_ASSERT_EQ(rec.block[0], 2);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 5);
    kvptest_done(pool);

    /* (c) the destination is a cached copy of the same hash: its own entry
     * is evicted, the moved one takes its place. */
    const kvp_block cached[] = {7, 2, 4};
    pool = retire_with_copies(&rec, cached, ARRAY_LEN(cached));
    KVP_ASSERT_EQ(rec.n, 1);
    KVPTEST_EXPECT_EVREC(&rec, 0, 9, 2);
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 2);
    kvp_block_info info = kvptest_info(pool, 2);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.published, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 2);
    KVP_ASSERT_OK(kvp_unpublish(pool, 2));
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), 4);
    KVP_ASSERT_OK(kvp_unpublish(pool, 4));
    KVP_ASSERT_EQ(kvptest_lookup(pool, 9), KVP_NO_BLOCK);
    KVP_ASSERT_EQ(kvptest_stats(pool).indexed, 0);
    kvptest_done(pool);
}

/* Retire everything from the top down, moving blocks as needed. */
static void test_retire_all(void **state)
{
    (void)state;
    kvp_block ids[16];
    kvp_pool *pool = make_full(16, KVP_REUSE_LOWEST, 0, NULL, ids);
    for (kvp_block b = 0; b < 16; b++)
        kvptest_publish(pool, b, 1000 + b);
    /* Free the even blocks: 8 in use (odd) and 8 free. */
    for (kvp_block b = 0; b < 16; b += 2)
        kvptest_free1(pool, b, 1);
    uint64_t moves = 0;
    for (int i = 0; i < 8; i++) {
        kvp_block r, m;
        KVP_ASSERT_OK(kvp_retire_top(pool, &r, &m));
        KVP_ASSERT_EQ(r, 15 - (kvp_block)i);
        if (m != KVP_NO_BLOCK)
            moves++;
        kvptest_check(pool);
    }
    KVPTEST_EXPECT_STATS(pool, ST(blocks, 8), ST(in_use, 8), ST(free, 0), ST(relocated, moves));
    /* Every odd block's content is still findable, at an id below 8. */
    for (kvp_block b = 1; b < 16; b += 2) {
        kvp_block at = kvptest_lookup(pool, 1000 + b);
        assert_true(at < 8);
        KVP_ASSERT_EQ(kvptest_info(pool, at).state, KVP_BLOCK_IN_USE);
    }
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 1, ids, 16), 8);
    for (int i = 0; i < 8; i++)
        assert_true(ids[i] < 8);
    kvp_block r, m;
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EEXHAUSTED);
    kvptest_done(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extend_cap),
        cmocka_unit_test(test_extend_reuse_position),
        cmocka_unit_test(test_extend_refills_retired),
        SHRINK_TEST("test_shrink_order", g_orders[0]),
        SHRINK_TEST("test_shrink_order_lifo", g_orders[1]),
        SHRINK_TEST("test_shrink_order_fifo", g_orders[2]),
        cmocka_unit_test(test_shrink_separate),
        cmocka_unit_test(test_retire_top_free),
        cmocka_unit_test(test_retire_top_used),
        cmocka_unit_test(test_retire_top_destination),
        cmocka_unit_test(test_retire_top_no_free),
        cmocka_unit_test(test_relocation_duplicates),
        cmocka_unit_test(test_retire_all),
    };
    return cmocka_run_group_tests_name("resize", tests, NULL, NULL);
}
