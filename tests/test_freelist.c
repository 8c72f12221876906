/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_freelist.c — the free blocks' reuse order (kvp_reuse in kvpool.h;
 * src/freelist.c).
 *
 * Covers: the three reuse orders exactly (never-used blocks after or before
 * the freed ones, "first given is first reused" within one call), the LIFO
 * list's head kept without a back link, vacant before cached with cached
 * blocks least recently freed first, FIFO's one queue for both, and the LIFO
 * stack's array through every step that moves blocks in or out of it.  The
 * checker walks every free structure after each step; test_model compares
 * the order with a reference model over random calls.
 */
#include "kvptest.h"

/* ---- reuse orders ------------------------------------------------------- */

static void test_reuse_lifo(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3);
    /* Separate calls: most recently freed first, then never-used by id. */
    kvptest_free1(pool, 1, 1);
    kvptest_free1(pool, 3, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 3, 1, 4);
    /* One call: the first given is the first reused. */
    kvp_block two[2] = {0, 2};
    KVP_ASSERT_OK(kvp_free(pool, two, 2, 1));
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 2, 5, 6, 7);
    /* Mixed: freed earlier in one call, then a later single free on top. */
    kvp_block three[3] = {6, 4, 1};
    KVP_ASSERT_OK(kvp_free(pool, three, 3, 1));
    kvptest_free1(pool, 7, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 7, 6, 4, 1);
    kvp_block b = 0;
    KVP_ASSERT_OK(kvp_peek_next(pool, KVP_STREAM_SHARED, &b));
    KVP_ASSERT_EQ(b, KVP_NO_BLOCK);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 1, &b), KVP_EEXHAUSTED);
    kvp_pool_destroy(pool);

    /* Never-used blocks come after every freed vacant block, even ones freed
     * long ago. */
    pool = kvptest_pool(6, KVP_REUSE_LIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1);
    kvptest_free1(pool, 0, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 2, 3);
    kvptest_free1(pool, 2, 1);
    kvptest_free1(pool, 1, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 1, 2, 4, 5);
    kvp_pool_destroy(pool);
}

/* The head of the LIFO list keeps no back link: unlinking the block right
 * behind it, the head itself, and a cached block demoted to vacant while the
 * never-used mark is the head must all keep the list whole and the order. */
static void test_reuse_lifo_head_links(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3, 4);
    kvp_block f[4] = {3, 1, 4, 0};
    KVP_ASSERT_OK(kvp_free(pool, f, 4, 1)); /* list: 3 1 4 0 */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 3);
    KVP_ASSERT_OK(kvp_take_id(pool, 4, 1)); /* behind the head (1) */
    kvptest_check(pool);
    KVP_ASSERT_OK(kvp_take_id(pool, 1, 1)); /* the head */
    kvptest_check(pool);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 5, 6, 7);
    kvp_pool_destroy(pool);

    /* Taking a never-used block from the middle gives the rest records, with
     * the never-used mark at the head; a demoted cached block then goes
     * ahead of them. */
    pool = kvptest_pool(6, KVP_REUSE_LIFO);
    KVP_ASSERT_OK(kvp_take_id(pool, 3, 1));
    kvp_hash h = kvptest_hash(7);
    KVP_ASSERT_OK(kvp_publish(pool, 3, &h));
    kvptest_free1(pool, 3, 1);
    KVP_ASSERT_OK(kvp_unpublish(pool, 3));
    kvptest_check(pool);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 3, 0, 1, 2, 4, 5);
    kvp_pool_destroy(pool);
}

static void test_reuse_lowest(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    size_t n = kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 6, 1, ids, 8);
    KVP_ASSERT_EQ(n, 6);
    for (size_t i = 0; i < n; i++)
        KVP_ASSERT_EQ(ids[i], i);
    kvp_block f[3] = {4, 1, 3};
    KVP_ASSERT_OK(kvp_free(pool, f, 3, 1));
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 1, 3, 4, 6);
    kvp_block g[2] = {6, 0};
    KVP_ASSERT_OK(kvp_free(pool, g, 2, 1));
    kvptest_free1(pool, 2, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 2, 6, 7);
    kvp_pool_destroy(pool);
}

static void test_reuse_fifo(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(6, KVP_REUSE_FIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2);
    kvptest_free1(pool, 1, 1);
    /* Never-used blocks first, in id order, then the freed one. */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 3, 4, 5, 1);
    /* Queue in the order freed; one call: first given first. */
    kvp_block f[2] = {4, 2};
    KVP_ASSERT_OK(kvp_free(pool, f, 2, 1));
    kvptest_free1(pool, 0, 1);
    kvp_block g[2] = {5, 1};
    KVP_ASSERT_OK(kvp_free(pool, g, 2, 1));
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 4, 2, 0, 5, 1);
    kvp_pool_destroy(pool);

    /* One queue for vacant and cached blocks alike. */
    kvptest_evrec rec;
    pool = kvptest_rec_pool(&rec, 4, KVP_REUSE_FIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3);
    kvp_hash h = kvptest_hash(100);
    KVP_ASSERT_OK(kvp_publish(pool, 0, &h));
    kvptest_free1(pool, 0, 1); /* cached, freed first */
    kvptest_free1(pool, 2, 1); /* vacant, freed second */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0);
    KVP_ASSERT_EQ(rec.n, 1);
    KVPTEST_EXPECT_EVREC(&rec, 0, 100, 0);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 2);
    KVP_ASSERT_EQ(rec.n, 1);
    kvp_pool_destroy(pool);
}

/* LIFO and LOWEST: vacant blocks before cached ones; cached LRU. */
static void test_vacant_before_cached(void **state)
{
    (void)state;
    const kvp_reuse orders[2] = {KVP_REUSE_LIFO, KVP_REUSE_LOWEST};
    for (int o = 0; o < 2; o++) {
        kvptest_evrec rec;
        kvp_pool *pool = kvptest_rec_pool(&rec, 4, orders[o]);
        KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3);
        kvp_hash h10 = kvptest_hash(10), h11 = kvptest_hash(11);
        KVP_ASSERT_OK(kvp_publish(pool, 0, &h10));
        KVP_ASSERT_OK(kvp_publish(pool, 1, &h11));
        kvp_block f[4] = {1, 3, 0, 2};
        KVP_ASSERT_OK(kvp_free(pool, f, 4, 1));
        kvp_stats st = kvptest_stats(pool);
        KVP_ASSERT_EQ(st.cached, 2);
        KVP_ASSERT_EQ(st.vacant, 2);
        if (orders[o] == KVP_REUSE_LIFO)
            KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 2, 3, 2);
        else
            KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 2, 2, 3);
        KVP_ASSERT_EQ(rec.n, 0);
        /* Then cached, least recently freed first: 1 was given first. */
        KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 2, 1);
        KVP_ASSERT_EQ(rec.n, 1);
        KVPTEST_EXPECT_EVREC(&rec, 0, 11, 1);
        KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 2, 0);
        KVP_ASSERT_EQ(rec.n, 2);
        KVPTEST_EXPECT_EVREC(&rec, 1, 10, 0);
        KVP_ASSERT_EQ(kvptest_stats(pool).evictions, 2);
        kvptest_done(pool);
    }
}

/* ---- the LIFO stack array ----------------------------------------------- */

/* A LIFO vacant stack keeps its top in an array and the rest in a list
 * (freelist.c, "The LIFO stack's array"); the checker walks both after every step.
 * This drives each thing that moves blocks between them and checks the
 * reuse order across the two: a call that reserves more room than is left
 * (room for each stream's 1,024 blocks; a call reserves room for all of
 * its blocks on each stream: 900 in the array + 200 > 1,024), which spills
 * the array into the list; two streams in one call; a block taken by id
 * from below the top; a cached block turned vacant, which goes below the
 * freed ones; growth past the room. */
static void test_lifo_stack_array(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(2048);
    cfg.separate_kv = 1;
    cfg.grow_on_exhaustion = 1;
    cfg.max_blocks = 2100;
    kvp_pool *pool = kvptest_create(&cfg);
    static kvp_block k[1024], v[1024], mixed[200];
    size_t n;
    KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_K, 1024 * 16, KVP_ANON, 0, k, 1024, &n));
    KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_V, 1024 * 16, KVP_ANON, 0, v, 1024, &n));
    kvptest_check(pool);

    /* 900 blocks in one call: room for them. */
    KVP_ASSERT_OK(kvp_free(pool, &k[124], 900, KVP_ANON));
    kvptest_check(pool);
    /* Two streams in one call, 100 each, interleaved: too little room left
     * on K (900 + 200 > 1,024), so K's array is spilled into its list
     * first. */
    for (int i = 0; i < 100; i++) {
        mixed[2 * i] = k[i];
        mixed[2 * i + 1] = v[i];
    }
    KVP_ASSERT_OK(kvp_free(pool, mixed, 200, KVP_ANON));
    kvptest_check(pool);
    /* Blocks freed together come back in the order given. */
    for (int i = 0; i < 100; i++) {
        kvp_block b;
        KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_K, KVP_ANON, &b));
        KVP_ASSERT_EQ(b, k[i]);
        KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_V, KVP_ANON, &b));
        KVP_ASSERT_EQ(b, v[i]);
        kvptest_check(pool);
    }
    /* Then the spilled blocks, from the list, in the order they were freed. */
    kvp_block spilled[2];
    for (int i = 0; i < 2; i++) {
        KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_K, KVP_ANON, &spilled[i]));
        KVP_ASSERT_EQ(spilled[i], k[124 + i]);
    }
    KVP_ASSERT_OK(kvp_free(pool, spilled, 2, KVP_ANON));
    kvptest_check(pool);
    /* Owners' frees, one block at a time and by owner. */
    kvp_block o[40];
    for (int i = 0; i < 40; i++) {
        KVP_ASSERT_OK(kvp_free(pool, &k[i], 1, KVP_ANON));
        KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_K, 7, &o[i]));
        KVP_ASSERT_EQ(o[i], k[i]);
    }
    KVP_ASSERT_OK(kvp_free(pool, &k[40], 60, KVP_ANON));
    KVP_ASSERT_OK(kvp_free_owner(pool, 7, &n));
    KVP_ASSERT_EQ(n, 40);
    kvptest_check(pool);
    /* A block taken by id from below the head. */
    KVP_ASSERT_OK(kvp_take_id(pool, k[50], KVP_ANON));
    kvptest_check(pool);
    /* Refill, then a cached block turned vacant goes below the freed ones. */
    KVP_ASSERT_OK(kvp_free(pool, &k[100], 10, KVP_ANON));
    kvp_hash h = kvptest_hash(1);
    KVP_ASSERT_OK(kvp_publish(pool, k[110], &h));
    KVP_ASSERT_OK(kvp_free(pool, &k[110], 1, KVP_ANON));
    KVP_ASSERT_OK(kvp_unpublish(pool, k[110]));
    kvptest_check(pool);
    kvp_block b;
    KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_K, KVP_ANON, &b));
    KVP_ASSERT_EQ(b, k[100]);
    kvptest_check(pool);
    /* Growth puts new blocks on the stack as a free does. */
    uint32_t free_k;
    KVP_ASSERT_OK(kvp_free_count(pool, KVP_STREAM_K, &free_k));
    static kvp_block big[1100];
    KVP_ASSERT_OK(
        kvp_alloc(pool, KVP_STREAM_K, (uint64_t)(free_k + 20) * 16, KVP_ANON, 0, big, 1100, &n));
    kvptest_check(pool);
    KVP_ASSERT_OK(kvp_free(pool, big, n, KVP_ANON));
    kvptest_check(pool);
    uint32_t added;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_V, 30, &added));
    KVP_ASSERT_EQ(added, 30);
    kvptest_check(pool);
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    kvptest_done(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_lifo),
        cmocka_unit_test(test_reuse_lifo_head_links),
        cmocka_unit_test(test_reuse_lowest),
        cmocka_unit_test(test_reuse_fifo),
        cmocka_unit_test(test_vacant_before_cached),
        cmocka_unit_test(test_lifo_stack_array),
    };
    return cmocka_run_group_tests_name("freelist", tests, NULL, NULL);
}
