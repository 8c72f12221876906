/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_owner.c — owner-tracked allocation (kvpool.h "Owner-tracked
 * allocation", and the references claims add).
 *
 * Covers: register/release and the collision it catches, repeated allocation
 * as growth, owner_blocks in allocation order (and its buffer rules), freeing
 * a subset, free_owner (newest first, record retired, n_freed), not-owner
 * refusals, several owners sharing a block through kvp_claim, anonymous
 * references, automatic retirement of an unregistered owner when its last
 * reference goes, the owner table growing to many owners, and
 * kvp_take_hinted with good, wrong, stale and garbage hints.
 *
 * Pending references (defer.c): the fast take leaves the
 * block's record unwritten until another call settles it; the tests look
 * inside the pool (owner.h) to see what is pending, and compare
 * every outcome with a hooked twin pool, whose takes write records at once.
 */
#include "kvptest.h"
#include "owner.h" /* what is pending: internal state */

#include <stdlib.h>
#include <string.h>

static void expect_blocks_at(kvp_pool *pool, kvp_owner owner, const kvp_block *exp,
                             size_t n, const char *file, int line)
{
    kvp_block got[64];
    size_t cnt = kvptest_owner_blocks_at(pool, owner, got, ARRAY_LEN(got), file, line);
    int ok = cnt == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = got[i] == exp[i];
    if (!ok) {
        print_error("%s:%d: owner %llu blocks:\n    got     ", file, line,
                    (unsigned long long)owner);
        for (size_t i = 0; i < cnt && i < 64; i++)
            print_error(" %u", (unsigned)got[i]);
        print_error("\n    expected");
        for (size_t i = 0; i < n; i++)
            print_error(" %u", (unsigned)exp[i]);
        print_error("\n");
        _fail(file, line);
    }
}
#define EXPECT_BLOCKS(pool, owner, ...)                                        \
    do {                                                                       \
        const kvp_block exp_[] = {__VA_ARGS__};                                \
        expect_blocks_at((pool), (owner), exp_, ARRAY_LEN(exp_), __FILE__,     \
                         __LINE__);                                            \
    } while (0)
#define EXPECT_NO_BLOCKS(pool, owner) \
    expect_blocks_at((pool), (owner), NULL, 0, __FILE__, __LINE__)

static void test_register_release(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    KVP_ASSERT_OK(kvp_owner_register(pool, 1));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    kvptest_check(pool);
    KVP_ASSERT_REFUSED(pool, kvp_owner_register(pool, 1), KVP_EOWNERACTIVE);
    EXPECT_NO_BLOCKS(pool, 1);
    KVP_ASSERT_OK(kvp_owner_release(pool, 1));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);
    kvptest_check(pool);
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, 1), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_owner_register(pool, KVP_ANON), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, KVP_ANON), KVP_EINVAL);

    /* Extreme but valid ids. */
    KVP_ASSERT_OK(kvp_owner_register(pool, 0));
    KVP_ASSERT_OK(kvp_owner_register(pool, KVP_ANON - 1));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 2);
    KVP_ASSERT_OK(kvp_owner_release(pool, 0));
    KVP_ASSERT_OK(kvp_owner_release(pool, KVP_ANON - 1));

    /* Registered, then allocating: growth, never a collision. */
    KVP_ASSERT_OK(kvp_owner_register(pool, 1));
    kvp_block ids[8];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 1, ids, 8), 1);
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 1, ids, 8), 1);
    KVP_ASSERT_REFUSED(pool, kvp_owner_register(pool, 1), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, 1), KVP_EBUSY);
    size_t nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, &nf));
    KVP_ASSERT_EQ(nf, 2);
    /* free_owner retires a registered record too. */
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, 1), KVP_ENOTFOUND);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);
    KVP_ASSERT_OK(kvp_owner_register(pool, 1));
    /* An owner that is active because it holds blocks (never registered)
     * is caught by registration too. */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 1, 2, ids, 8), 1);
    KVP_ASSERT_REFUSED(pool, kvp_owner_register(pool, 2), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, 2), KVP_EBUSY);
    /* A registered owner that never allocated can go with free_owner. */
    nf = 99;
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, &nf));
    KVP_ASSERT_EQ(nf, 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    kvptest_done(pool);
}

static void test_repeated_alloc_order(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(16, KVP_REUSE_LOWEST);
    kvp_block ids[16];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 2, ids, 16);  /* 0 1 2 -> owner 2 */
    kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 16);  /* 3 4 */
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 2, ids, 16);  /* 5 */
    kvp_block f[2] = {1, 0};
    KVP_ASSERT_OK(kvp_free(pool, f, 2, 2));
    kvptest_alloc(pool, KVP_STREAM_SHARED, 40, 1, ids, 16);  /* 0 1 6 */
    KVP_ASSERT_OK(kvp_take_id(pool, 9, 1));
    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 1), 7);
    KVP_ASSERT_OK(kvp_claim(pool, 5, 1));  /* a share of owner 2's block */
    EXPECT_BLOCKS(pool, 1, 3, 4, 0, 1, 6, 9, 7, 5);
    EXPECT_BLOCKS(pool, 2, 2, 5);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.owners, 2);
    KVP_ASSERT_EQ(st.shared, 1);
    KVP_ASSERT_EQ(st.in_use, 9);
    kvptest_check(pool);

    /* Buffer rules. */
    size_t n = 0;
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 1, ids, 7, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 8);
    n = 0;
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 1, NULL, 0, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 8);
    KVP_ASSERT_OK(kvp_owner_blocks(pool, 1, ids, 8, &n));
    KVP_ASSERT_EQ(n, 8);
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 1, NULL, 4, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 1, ids, 8, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, KVP_ANON, ids, 8, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 3, ids, 8, &n), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_owner_register(pool, 3));
    n = 77;
    KVP_ASSERT_OK(kvp_owner_blocks(pool, 3, NULL, 0, &n));
    KVP_ASSERT_EQ(n, 0);
    kvptest_done(pool);
}

static void test_free_subset(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 80, 1, ids, 8), 5); /* 0..4 */
    kvp_block f1[2] = {3, 1};
    KVP_ASSERT_OK(kvp_free(pool, f1, 2, 1));
    EXPECT_BLOCKS(pool, 1, 0, 2, 4);
    kvptest_check(pool);
    kvp_block f2[2] = {4, 0};
    KVP_ASSERT_OK(kvp_free(pool, f2, 2, 1));
    EXPECT_BLOCKS(pool, 1, 2);
    /* Growth after a partial free appends. */
    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 1), 0);
    EXPECT_BLOCKS(pool, 1, 2, 0);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.free_calls, 2);
    KVP_ASSERT_EQ(st.blocks_freed, 4);
    KVP_ASSERT_EQ(st.owners, 1);
    kvptest_done(pool);
}

static void test_free_owner_newest_first(void **state)
{
    (void)state;
    /* Vacant, LIFO: free_owner is one call that gives the blocks newest
     * first, and in one call the first given is the first reused. */
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LIFO);
    kvp_block ids[8];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 1, ids, 8), 1);  /* 0 */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 2, ids, 8), 1);  /* 1 */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 8), 2);  /* 2 3 */
    EXPECT_BLOCKS(pool, 1, 0, 2, 3);
    size_t nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, &nf));
    KVP_ASSERT_EQ(nf, 3);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.free_calls, 1);
    KVP_ASSERT_EQ(st.blocks_freed, 3);
    kvptest_check(pool);
    for (int i = 0; i < 3; i++) {
        static const kvp_block exp[3] = {3, 2, 0};
        KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 5), exp[i]);
    }
    kvp_pool_destroy(pool);

    /* Cached: newest is evicted first (least recently freed). */
    kvptest_evrec rec;
    kvp_config cfg = kvptest_config(8);
    kvptest_evrec_attach(&rec, &cfg);
    pool = kvptest_create(&cfg);
    size_t n = kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 8);
    KVP_ASSERT_EQ(n, 4);
    for (size_t i = 0; i < n; i++) {
        kvp_hash h = kvptest_hash(100 + i);
        KVP_ASSERT_OK(kvp_publish(pool, ids[i], &h));
    }
    KVP_ASSERT_OK(kvp_free_owner(pool, 1, NULL));
    KVP_ASSERT_EQ(rec.n, 0);
    uint32_t ne = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 4, &ne));
    KVP_ASSERT_EQ(ne, 4);
    KVP_ASSERT_EQ(rec.n, 4);
    for (size_t i = 0; i < 4; i++)
        KVPTEST_EXPECT_EVREC(&rec, i, 103 - i, ids[3 - i]);
    kvptest_check(pool);

    /* References counted per reference, and only the owner's. */
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 7);
    KVP_ASSERT_OK(kvp_claim(pool, b, 7));
    KVP_ASSERT_OK(kvp_claim(pool, b, 8));
    KVP_ASSERT_OK(kvp_claim(pool, b, KVP_ANON));
    KVP_ASSERT_EQ(kvptest_info(pool, b).ref_count, 4);
    nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 7, &nf));
    KVP_ASSERT_EQ(nf, 2);
    kvp_block_info info = kvptest_info(pool, b);
    KVP_ASSERT_EQ(info.ref_count, 2);
    KVP_ASSERT_EQ(info.anon_refs, 1);
    KVP_ASSERT_EQ(info.owner, 8);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_REFUSED(pool, kvp_free_owner(pool, 7, &nf), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_free_owner(pool, KVP_ANON, &nf), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_free_owner(NULL, 8, &nf), KVP_EINVAL);
    kvptest_done(pool);
}

static void test_not_owner(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp_block a = kvptest_take(pool, KVP_STREAM_SHARED, 1);  /* 0 */
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 2);  /* 1 */
    KVP_ASSERT_OK(kvp_owner_register(pool, 3));
    kvp_block x[1] = {a};
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, x, 1, 2), KVP_ENOTOWNER);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, x, 1, 3), KVP_ENOTOWNER);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, x, 1, 99), KVP_ENOTOWNER);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, x, 1, KVP_ANON), KVP_ENOTOWNER);
    /* All or nothing: owner 1's own block is not freed either. */
    kvp_block ab[2] = {a, b};
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, ab, 2, 1), KVP_ENOTOWNER);
    KVP_ASSERT_EQ(kvptest_info(pool, a).state, KVP_BLOCK_IN_USE);
    /* Shared block with 2 references, owner 1 holds one: naming it twice. */
    KVP_ASSERT_OK(kvp_claim(pool, a, 2));
    kvp_block aa[2] = {a, a};
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, aa, 2, 1), KVP_ENOTOWNER);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, aa, 2, 2), KVP_ENOTOWNER);
    KVP_ASSERT_EQ(kvptest_info(pool, a).ref_count, 2);
    /* Owner 1 holds two references after another claim: twice is fine. */
    KVP_ASSERT_OK(kvp_claim(pool, a, 1));
    KVP_ASSERT_OK(kvp_free(pool, aa, 2, 1));
    kvp_block_info info = kvptest_info(pool, a);
    KVP_ASSERT_EQ(info.ref_count, 1);
    KVP_ASSERT_EQ(info.owner, 2);
    kvptest_done(pool);
}

static void test_shared_claim(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LOWEST);
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_OK(kvp_claim(pool, x, 2));
    KVP_ASSERT_OK(kvp_claim(pool, x, 3));
    kvp_block_info info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.ref_count, 3);
    KVP_ASSERT_EQ(info.anon_refs, 0);
    KVP_ASSERT_EQ(info.owner, 1);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.shared, 1);
    KVP_ASSERT_EQ(st.in_use, 1);
    KVP_ASSERT_EQ(st.owners, 3);
    EXPECT_BLOCKS(pool, 2, x);
    EXPECT_BLOCKS(pool, 3, x);
    kvptest_check(pool);

    kvptest_free1(pool, x, 1);
    info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.ref_count, 2);
    KVP_ASSERT_EQ(info.owner, 2);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 2); /* 1 retired */
    kvp_block xs[1] = {x};
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, xs, 1, 1), KVP_ENOTOWNER);
    KVP_ASSERT_OK(kvp_free_owner(pool, 3, NULL));
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.shared, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, x).ref_count, 1);
    kvptest_free1(pool, x, 2);
    info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(info.ref_count, 0);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.owners, 0);
    KVP_ASSERT_EQ(st.in_use, 0);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, xs, 1, 2), KVP_EDOUBLEFREE);

    /* Many owners on one block (the shared-owner references grow). */
    x = kvptest_take(pool, KVP_STREAM_SHARED, 1000);
    for (kvp_owner o = 1001; o < 1100; o++)
        KVP_ASSERT_OK(kvp_claim(pool, x, o));
    KVP_ASSERT_EQ(kvptest_info(pool, x).ref_count, 100);
    kvptest_check(pool);
    for (kvp_owner o = 1099; o >= 1050; o--)
        kvptest_free1(pool, x, o);
    for (kvp_owner o = 1000; o < 1050; o++) {
        kvp_block_info bi = kvptest_info(pool, x);
        KVP_ASSERT_EQ(bi.owner, o);
        kvptest_free1(pool, x, o);
    }
    KVP_ASSERT_EQ(kvptest_info(pool, x).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);
    kvptest_done(pool);
}

static void test_anonymous_refs(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LOWEST);
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_OK(kvp_claim(pool, x, KVP_ANON));
    KVP_ASSERT_OK(kvp_claim(pool, x, 5));
    kvp_block_info info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.ref_count, 3);
    KVP_ASSERT_EQ(info.anon_refs, 2);
    KVP_ASSERT_EQ(info.owner, 5);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    kvp_block xx[3] = {x, x, x};
    /* Three anonymous drops, only two anonymous references. */
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, xx, 3, KVP_ANON), KVP_ENOTOWNER);
    KVP_ASSERT_OK(kvp_free(pool, xx, 2, KVP_ANON));
    info = kvptest_info(pool, x);
    KVP_ASSERT_EQ(info.anon_refs, 0);
    KVP_ASSERT_EQ(info.ref_count, 1);
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, xx, 1, KVP_ANON), KVP_ENOTOWNER);
    kvptest_free1(pool, x, 5);
    KVP_ASSERT_EQ(kvptest_info(pool, x).state, KVP_BLOCK_VACANT);

    /* Anonymous allocation counts no owner. */
    kvp_block ids[4];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 48, KVP_ANON, ids, 4), 3);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.owners, 0);
    KVP_ASSERT_EQ(st.in_use, 3);
    for (int i = 0; i < 3; i++) {
        info = kvptest_info(pool, ids[i]);
        KVP_ASSERT_EQ(info.anon_refs, 1);
        KVP_ASSERT_EQ(info.owner, KVP_ANON);
    }
    /* Owner-named free of an anonymous block is refused. */
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, ids, 1, 5), KVP_ENOTOWNER);
    KVP_ASSERT_OK(kvp_free(pool, ids, 3, KVP_ANON));
    KVP_ASSERT_EQ(kvptest_stats(pool).in_use, 0);
    kvptest_done(pool);
}

static void test_owner_auto_retire(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp_block ids[8];
    size_t n = kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 8);
    KVP_ASSERT_OK(kvp_free(pool, ids, 2, 1));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    KVP_ASSERT_OK(kvp_free(pool, ids + 2, n - 2, 1));
    /* The unregistered owner's record went with its last reference. */
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);
    size_t cnt;
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 1, ids, 8, &cnt), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_free_owner(pool, 1, NULL), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(pool, kvp_owner_release(pool, 1), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_owner_register(pool, 1));
    KVP_ASSERT_OK(kvp_owner_release(pool, 1));
    kvptest_check(pool);

    /* A registered owner stays active with no references. */
    KVP_ASSERT_OK(kvp_owner_register(pool, 2));
    n = kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 2, ids, 8);
    KVP_ASSERT_OK(kvp_free(pool, ids, n, 2));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    EXPECT_NO_BLOCKS(pool, 2);
    KVP_ASSERT_REFUSED(pool, kvp_owner_register(pool, 2), KVP_EOWNERACTIVE);
    KVP_ASSERT_OK(kvp_owner_release(pool, 2));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);

    /* An owner that only claimed a share. */
    kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_OK(kvp_claim(pool, x, 3));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    EXPECT_BLOCKS(pool, 3, x);
    kvptest_free1(pool, x, 3);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 0);
    KVP_ASSERT_REFUSED(pool, kvp_owner_blocks(pool, 3, ids, 8, &cnt), KVP_ENOTFOUND);
    KVP_ASSERT_EQ(kvptest_info(pool, x).ref_count, 1);
    kvptest_done(pool);
}

/* Many owners: the owner table grows; everything stays consistent. */
static void test_many_owners(void **state)
{
    (void)state;
    size_t n_owners = kvptest_steps(3000);
    kvp_config cfg = kvptest_config(16);
    cfg.grow_on_exhaustion = 1;
    cfg.reuse = KVP_REUSE_LOWEST;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block ids[4];
    for (size_t i = 0; i < n_owners; i++) {
        kvp_owner o = (kvp_owner)i * 0x9e3779b97f4a7c15ull; /* scattered ids */
        if (o == KVP_ANON)
            o = 1;
        KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 1 + (i % 3) * 16, o, ids, 4),
                      1 + i % 3);
        if (i % 1000 == 999)
            kvptest_check(pool);
    }
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.owners, n_owners);
    uint64_t total = st.in_use;
    kvptest_check(pool);
    /* Odd ones first, so owners leave from the middle of index chains too,
     * not only from their heads (the newest). */
    for (size_t k = 0; k < 2 * n_owners; k++) {
        size_t i = k < n_owners ? k : k - n_owners;
        if (i % 2 != (k < n_owners))
            continue;
        kvp_owner o = (kvp_owner)i * 0x9e3779b97f4a7c15ull;
        if (o == KVP_ANON)
            o = 1;
        size_t nf = 0;
        KVP_ASSERT_OK(kvp_free_owner(pool, o, &nf));
        KVP_ASSERT_EQ(nf, 1 + i % 3);
        total -= nf;
        if (i % 1000 == 1)
            kvptest_check(pool);
    }
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(total, 0);
    KVP_ASSERT_EQ(st.owners, 0);
    KVP_ASSERT_EQ(st.in_use, 0);
    kvptest_done(pool);
}

/* kvp_take_hinted gives the same result as kvp_take whatever the hint: the
 * owner's own, another owner's, garbage, or stale after its owner left and
 * the place was reused; it stores the owner's hint on success only. */
static void test_take_hinted(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block b[8];
    uint32_t h7 = KVP_HINT_NONE, h9 = KVP_HINT_NONE;
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h7, &b[0]));
    KVP_ASSERT_EQ(h7 != KVP_HINT_NONE, 1);
    uint32_t first = h7;
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h7, &b[1]));
    KVP_ASSERT_EQ(h7, first);
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 9, &h9, &b[2]));
    KVP_ASSERT_EQ(h9 != h7, 1);
    kvptest_check(pool);

    /* Another owner's hint, and garbage: the block still goes to owner 7. */
    uint32_t wrong[] = {h9, 0, UINT32_MAX - 1, 12345};
    for (size_t i = 0; i < 3; i++) {
        uint32_t h = wrong[i];
        KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h, &b[3 + i]));
        KVP_ASSERT_EQ(h, h7);
        kvptest_check(pool);
    }
    EXPECT_BLOCKS(pool, 7, b[0], b[1], b[3], b[4], b[5]);
    EXPECT_BLOCKS(pool, 9, b[2]);

    /* Anonymous: the hint is not touched. */
    uint32_t ha = 77;
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, KVP_ANON, &ha, &b[6]));
    KVP_ASSERT_EQ(ha, 77);
    KVP_ASSERT_EQ(kvptest_info(pool, b[6]).ref_count, 1);

    /* Refused (exhausted: 7 of 8 taken, then the last): hint and pool kept. */
    uint32_t h = wrong[3];
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 9, &h9, &b[7]));
    KVP_ASSERT_REFUSED(pool, kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h, &b[0]),
                       KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(h, wrong[3]);
    KVP_ASSERT_REFUSED(pool, kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h7, &b[0]),
                       KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(h7, first);

    /* Stale: owner 7 leaves, owner 11 gets its place (the freed place is
     * reused first), and 7's old hint now names 11's.  Owner 7 comes back
     * with it and gets a place of its own; 11 keeps its block. */
    size_t nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 7, &nf));
    KVP_ASSERT_EQ(nf, 5);
    uint32_t h11 = KVP_HINT_NONE;
    kvp_block c11, c7;
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 11, &h11, &c11));
    KVP_ASSERT_EQ(h11, first);
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h7, &c7));
    KVP_ASSERT_EQ(h7 != h11, 1);
    EXPECT_BLOCKS(pool, 11, c11);
    EXPECT_BLOCKS(pool, 7, c7);
    EXPECT_BLOCKS(pool, 9, b[2], b[7]);
    kvptest_check(pool);

    /* After kvp_pool_clear every hint is stale; all still work. */
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 9, &h7, &b[0]));
    KVP_ASSERT_OK(kvp_take_hinted(pool, KVP_STREAM_SHARED, 7, &h9, &b[1]));
    EXPECT_BLOCKS(pool, 9, b[0]);
    EXPECT_BLOCKS(pool, 7, b[1]);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 2);
    kvptest_done(pool);
}

/* The same on the take's common path, where the block comes off the LIFO
 * stack's array (blocks freed before): two pools given the same calls, one
 * through kvp_take and one through kvp_take_hinted with the owner's hint,
 * a live owner's, a departed owner's, garbage and none, hand out the same
 * blocks to the same owners, and each hinted take leaves the owner's own
 * hint behind. */
static void test_take_hinted_stack(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(16);
    kvp_pool *plain = kvptest_create(&cfg), *hinted = kvptest_create(&cfg);
    kvp_pool *both[2] = {plain, hinted};
    kvp_block x, y;
    uint32_t h3 = KVP_HINT_NONE, h5 = KVP_HINT_NONE, h9 = KVP_HINT_NONE;
    KVP_ASSERT_OK(kvp_take(plain, KVP_STREAM_SHARED, 9, &x)); /* 9 stays */
    KVP_ASSERT_OK(kvp_take_hinted(hinted, KVP_STREAM_SHARED, 9, &h9, &y));
    KVP_ASSERT_EQ(x, y);
    for (int i = 0; i < 8; i++) { /* the array holds them once 3 leaves */
        KVP_ASSERT_OK(kvp_take(plain, KVP_STREAM_SHARED, 3, &x));
        KVP_ASSERT_OK(kvp_take_hinted(hinted, KVP_STREAM_SHARED, 3, &h3, &y));
        KVP_ASSERT_EQ(x, y);
    }
    for (int k = 0; k < 2; k++)
        KVP_ASSERT_OK(kvp_free_owner(both[k], 3, NULL));
    KVP_ASSERT_OK(kvp_take(plain, KVP_STREAM_SHARED, 5, &x)); /* 5 is new */
    KVP_ASSERT_OK(kvp_take_hinted(hinted, KVP_STREAM_SHARED, 5, &h5, &y));
    KVP_ASSERT_EQ(x, y);
    KVP_ASSERT_EQ(h5 != KVP_HINT_NONE && h5 != h9, 1);
    /* the owner's own, a live owner's, the departed owner's, garbage, none */
    const uint32_t own = h5, tries[] = {own, h9, h3, 12345, UINT32_MAX - 1, KVP_HINT_NONE};
    for (size_t i = 0; i < ARRAY_LEN(tries); i++) {
        uint32_t h = tries[i];
        KVP_ASSERT_OK(kvp_take(plain, KVP_STREAM_SHARED, 5, &x));
        KVP_ASSERT_OK(kvp_take_hinted(hinted, KVP_STREAM_SHARED, 5, &h, &y));
        KVP_ASSERT_EQ(x, y);
        KVP_ASSERT_EQ(h, own);
        kvptest_check(hinted);
    }
    /* Anonymous on the same path: the hint is not touched. */
    uint32_t ha = 77;
    KVP_ASSERT_OK(kvp_take(plain, KVP_STREAM_SHARED, KVP_ANON, &x));
    KVP_ASSERT_OK(kvp_take_hinted(hinted, KVP_STREAM_SHARED, KVP_ANON, &ha, &y));
    KVP_ASSERT_EQ(x, y);
    KVP_ASSERT_EQ(ha, 77);
    kvp_block ep[8], eh[8];
    size_t np = 0, nh = 0;
    KVP_ASSERT_OK(kvp_owner_blocks(plain, 5, ep, 8, &np));
    KVP_ASSERT_OK(kvp_owner_blocks(hinted, 5, eh, 8, &nh));
    KVP_ASSERT_EQ(np, 7);
    KVP_ASSERT_EQ(nh, np);
    assert_memory_equal(ep, eh, np * sizeof *ep);
    kvp_stats sp = kvptest_stats(plain), sh = kvptest_stats(hinted);
    KVP_ASSERT_EQ(sh.in_use, sp.in_use);
    KVP_ASSERT_EQ(sh.reused, sp.reused);
    KVP_ASSERT_EQ(sh.reused, 8); /* every take after the free came off the array */
    for (int k = 0; k < 2; k++) {
        kvptest_check(both[k]);
        kvp_pool_destroy(both[k]);
    }
}

/* ---- pending references ------------------------------------------------ */

static void no_evict(void *user, const kvp_hash *h, kvp_block b)
{
    (void)user;
    (void)h;
    (void)b;
}

/* A pool and its twin, which differs only in an eviction callback: that
 * hooks it, so its takes never leave a reference pending. */
static void twins(kvp_config cfg, kvp_pool **lazy, kvp_pool **eager)
{
    *lazy = kvptest_create(&cfg);
    cfg.on_evict = no_evict;
    *eager = kvptest_create(&cfg);
}

/* The end of a twin test: the same logical state (kvp_pool_fingerprint
 * settles first), then both destroyed. */
static void twins_done(kvp_pool *lazy, kvp_pool *eager)
{
    KVP_ASSERT_EQ(kvptest_fp(lazy), kvptest_fp(eager));
    kvp_pool_destroy(lazy);
    kvp_pool_destroy(eager);
}

/* Pending references owner `o` holds (kvp_pool_check vouches for the rest). */
static uint32_t pending_of(const kvp_pool *p, kvp_owner o)
{
    uint32_t slot = kvp__owner_find(p, o);
    if (slot == KVP__NONE || p->own.slots[slot].pend == KVP__NONE)
        return 0;
    return p->own.slots[slot].len - p->own.slots[slot].pend;
}

/* Take on both twins (hinted on the lazy one, plain on the other) and
 * require the same block; check the lazy one without settling it. */
static kvp_block take_both(kvp_pool *lazy, kvp_pool *eager, kvp_stream s, kvp_owner o,
                           uint32_t *hint)
{
    kvp_block a = KVP_NO_BLOCK, b = KVP_NO_BLOCK;
    KVP_ASSERT_OK(kvp_take_hinted(lazy, s, o, hint, &a));
    KVP_ASSERT_OK(kvp_take(eager, s, o, &b));
    KVP_ASSERT_EQ(a, b);
    kvptest_check(lazy);
    return a;
}

static void free_both(kvp_pool *lazy, kvp_pool *eager, kvp_owner o)
{
    size_t na = 0, nb = 0;
    KVP_ASSERT_OK(kvp_free_owner(lazy, o, &na));
    KVP_ASSERT_OK(kvp_free_owner(eager, o, &nb));
    KVP_ASSERT_EQ(na, nb);
    kvptest_check(lazy);
}

/* Make the takes that follow defer (defer.c): a run long
 * enough, a scratch owner taking one block of stream s and freeing it
 * KVP__DEFER_AFTER times, on both twins (eager may be NULL). */
static void start_run(kvp_pool *lazy, kvp_pool *eager, kvp_stream s)
{
    kvp_pool *both[2] = {lazy, eager};
    for (uint32_t i = 0; i < KVP__DEFER_AFTER; i++)
        for (int k = 0; k < 2 && both[k]; k++) {
            kvptest_take(both[k], s, 999);
            KVP_ASSERT_OK(kvp_free_owner(both[k], 999, NULL));
        }
    KVP_ASSERT_EQ(lazy->def.run >= KVP__DEFER_AFTER, 1);
}

/* Fast takes leave the records alone; kvp_free_owner puts the blocks back
 * on the stack's array in the order it would have with records written,
 * and other owners' pending references stay pending through it. */
static void test_pending_take_free(void **state)
{
    (void)state;
    kvp_pool *lazy, *eager;
    twins(kvptest_config(32), &lazy, &eager);
    start_run(lazy, eager, KVP_STREAM_SHARED);
    uint32_t h[4] = {KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE};
    for (int i = 0; i < 12; i++) /* the array holds one block: the rest recorded */
        take_both(lazy, eager, KVP_STREAM_SHARED, 9, &h[0]);
    KVP_ASSERT_EQ(pending_of(lazy, 9), 0); /* the list's take settled the first */
    free_both(lazy, eager, 9);              /* which fills the stack's array */
    kvp_block first = take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h[1]);
    KVP_ASSERT_EQ(pending_of(lazy, 1), 1); /* a new owner's (the general path) too */
    KVP_ASSERT_EQ(lazy->blocks[first].state, KVP_BLOCK_VACANT);
    kvp_block b1[3], b2[3];
    for (int i = 0; i < 3; i++) {
        b1[i] = take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h[1]);
        b2[i] = take_both(lazy, eager, KVP_STREAM_SHARED, 2, &h[2]);
    }
    KVP_ASSERT_EQ(pending_of(lazy, 1), 4);
    KVP_ASSERT_EQ(pending_of(lazy, 2), 3);
    for (int i = 0; i < 3; i++)
        KVP_ASSERT_EQ(lazy->blocks[b1[i]].state, KVP_BLOCK_VACANT); /* not written */
    free_both(lazy, eager, 1);
    KVP_ASSERT_EQ(pending_of(lazy, 2), 3);
    KVP_ASSERT_EQ(lazy->blocks[b2[1]].state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(lazy->def.dirty != 0, 1); /* 1's slot stays on the chain, unused */
    /* LIFO as with records written: 1's blocks come back newest first */
    for (int i = 0; i < 4; i++)
        take_both(lazy, eager, KVP_STREAM_SHARED, 3, &h[3]);
    uint64_t before = lazy->ctr.free_calls;
    kvp_stats sl = kvptest_stats(lazy), se = kvptest_stats(eager); /* settles */
    KVP_ASSERT_EQ(lazy->def.dirty, 0);
    KVP_ASSERT_EQ(pending_of(lazy, 2) + pending_of(lazy, 3), 0);
    KVP_ASSERT_EQ(lazy->ctr.free_calls, before);
    KVP_ASSERT_EQ(sl.in_use, se.in_use);
    KVP_ASSERT_EQ(sl.blocks_freed, se.blocks_freed);
    KVP_ASSERT_EQ(sl.reused, se.reused);
    twins_done(lazy, eager);
}

/* Any other call sees the pending blocks as in use by their owner, in
 * allocation order: block info, owner_blocks, a single free; and it ends
 * the run of takes (defer.c). */
static void test_pending_settled_on_read(void **state)
{
    (void)state;
    kvp_pool *lazy, *eager;
    twins(kvptest_config(16), &lazy, &eager);
    start_run(lazy, eager, KVP_STREAM_SHARED);
    uint32_t h = KVP_HINT_NONE, h2 = KVP_HINT_NONE;
    for (int i = 0; i < 8; i++)
        take_both(lazy, eager, KVP_STREAM_SHARED, 5, &h);
    free_both(lazy, eager, 5);
    kvp_block ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = take_both(lazy, eager, KVP_STREAM_SHARED, 6, &h2);
    KVP_ASSERT_EQ(pending_of(lazy, 6), 5);
    kvp_block_info bi = kvptest_info(lazy, ids[3]);
    KVP_ASSERT_EQ(bi.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(bi.ref_count, 1);
    KVP_ASSERT_EQ(pending_of(lazy, 6), 0);
    EXPECT_BLOCKS(lazy, 6, ids[0], ids[1], ids[2], ids[3], ids[4]);
    /* A call that settles ends the run of takes: the next take writes its
     * record, and takes defer again only in a new run. */
    KVP_ASSERT_EQ(lazy->def.run, 0);
    kvp_block more = take_both(lazy, eager, KVP_STREAM_SHARED, 6, &h2);
    KVP_ASSERT_EQ(pending_of(lazy, 6), 0);
    KVP_ASSERT_EQ(lazy->blocks[more].state, KVP_BLOCK_IN_USE);
    start_run(lazy, eager, KVP_STREAM_SHARED);
    kvp_block last = take_both(lazy, eager, KVP_STREAM_SHARED, 6, &h2);
    KVP_ASSERT_EQ(pending_of(lazy, 6), 1);
    KVP_ASSERT_OK(kvp_free(lazy, &ids[2], 1, 6)); /* then one freed by kvp_free */
    KVP_ASSERT_OK(kvp_free(eager, &ids[2], 1, 6));
    EXPECT_BLOCKS(lazy, 6, ids[0], ids[1], ids[3], ids[4], more, last);
    twins_done(lazy, eager);
}

/* A take by the general path that appends a recorded reference (here the
 * owner's array is full and the stack's array empty, so the take grows the
 * array and hands out a never-used block) settles that owner's pending
 * ones first, so that they stay a suffix; another owner's stay pending. */
static void test_pending_general_append(void **state)
{
    (void)state;
    kvp_pool *lazy, *eager;
    twins(kvptest_config(40), &lazy, &eager);
    start_run(lazy, eager, KVP_STREAM_SHARED);
    uint32_t h[4] = {KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE};
    for (int i = 0; i < 12; i++) /* an array of 16 */
        take_both(lazy, eager, KVP_STREAM_SHARED, 4, &h[0]);
    for (int i = 0; i < 18; i++) /* an array of 32 */
        take_both(lazy, eager, KVP_STREAM_SHARED, 5, &h[1]);
    free_both(lazy, eager, 5);
    free_both(lazy, eager, 4); /* 4's slot is reused first; the stack's array holds 30 */
    kvp_block ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = take_both(lazy, eager, KVP_STREAM_SHARED, 7, &h[2]);
    KVP_ASSERT_EQ(pending_of(lazy, 7), 16);
    for (int i = 0; i < 3; i++)
        take_both(lazy, eager, KVP_STREAM_SHARED, 8, &h[3]);
    while (lazy->st[0].nstk) /* empty the stack's array */
        take_both(lazy, eager, KVP_STREAM_SHARED, 10, &h[0]);
    kvp_block grown = take_both(lazy, eager, KVP_STREAM_SHARED, 7, &h[2]); /* 17th */
    KVP_ASSERT_EQ(pending_of(lazy, 7), 0);
    KVP_ASSERT_EQ(pending_of(lazy, 8), 3);
    KVP_ASSERT_EQ(lazy->blocks[ids[4]].state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(lazy->blocks[grown].state, KVP_BLOCK_IN_USE);
    free_both(lazy, eager, 10); /* the array again */
    take_both(lazy, eager, KVP_STREAM_SHARED, 7, &h[2]); /* pending after recorded ones */
    KVP_ASSERT_EQ(pending_of(lazy, 7), 1);
    free_both(lazy, eager, 7);
    KVP_ASSERT_EQ(pending_of(lazy, 8), 3);
    for (int i = 0; i < 20; i++)
        take_both(lazy, eager, KVP_STREAM_SHARED, 9, &h[0]);
    twins_done(lazy, eager);
}

/* Separate K and V streams: kvp_free_owner returns each pending block to
 * its own stream's array. */
static void test_pending_kv(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(32);
    cfg.separate_kv = true;
    kvp_pool *lazy, *eager;
    twins(cfg, &lazy, &eager);
    start_run(lazy, eager, KVP_STREAM_K);
    uint32_t h = KVP_HINT_NONE;
    for (int i = 0; i < 6; i++) { /* at most 16 per free: the arrays' room */
        take_both(lazy, eager, KVP_STREAM_K, 2, &h);
        take_both(lazy, eager, KVP_STREAM_V, 2, &h);
    }
    free_both(lazy, eager, 2);
    for (int round = 0; round < 3; round++) {
        if (round) /* the free counts below settled */
            start_run(lazy, eager, round == 1 ? KVP_STREAM_V : KVP_STREAM_K);
        take_both(lazy, eager, KVP_STREAM_V, 3, &h);
        for (int i = 0; i < 6; i++)
            take_both(lazy, eager, i % 3 ? KVP_STREAM_K : KVP_STREAM_V, 3, &h);
        KVP_ASSERT_EQ(pending_of(lazy, 3), 7);
        free_both(lazy, eager, 3);
        KVP_ASSERT_EQ(kvptest_free_count(lazy, KVP_STREAM_K),
                      kvptest_free_count(eager, KVP_STREAM_K));
        KVP_ASSERT_EQ(kvptest_free_count(lazy, KVP_STREAM_V), 16);
    }
    twins_done(lazy, eager);
}

/* The run: after a call that settles, takes write their records until
 * KVP__DEFER_AFTER owner frees and general-path takes have come (fast takes
 * count nothing), and the next take by an owner defers. */
static void test_pending_run_length(void **state)
{
    (void)state;
    kvp_pool *lazy, *eager;
    twins(kvptest_config(200), &lazy, &eager);
    uint32_t h = KVP_HINT_NONE, hs = KVP_HINT_NONE;
    for (int i = 0; i < 150; i++)
        take_both(lazy, eager, KVP_STREAM_SHARED, 9, &h);
    free_both(lazy, eager, 9); /* the stack's array holds 150 */
    kvptest_stats(lazy);        /* settles: a new run */
    KVP_ASSERT_EQ(lazy->def.run, 0);
    h = KVP_HINT_NONE;
    take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h); /* a new owner: general */
    KVP_ASSERT_EQ(lazy->def.run, 1);
    for (int i = 0; i < 40; i++) /* fast, and not counted */
        take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h);
    KVP_ASSERT_EQ(lazy->def.run, 1);
    while (lazy->def.run + 2 < KVP__DEFER_AFTER) { /* a general take and a free: +2 */
        take_both(lazy, eager, KVP_STREAM_SHARED, 2, &hs);
        free_both(lazy, eager, 2);
    }
    KVP_ASSERT_EQ(lazy->def.run, KVP__DEFER_AFTER - 1);
    take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h);
    KVP_ASSERT_EQ(pending_of(lazy, 1), 0);
    take_both(lazy, eager, KVP_STREAM_SHARED, 2, &hs); /* the run is long enough */
    KVP_ASSERT_EQ(lazy->def.run, KVP__DEFER_AFTER);
    take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h);
    KVP_ASSERT_EQ(pending_of(lazy, 1), 1);
    for (int i = 0; i < 40; i++) /* more than the settle prefetches ahead */
        take_both(lazy, eager, KVP_STREAM_SHARED, 1, &h);
    KVP_ASSERT_EQ(pending_of(lazy, 1), 41);
    kvp_block la[128], ea[128];
    size_t nl = kvptest_owner_blocks(lazy, 1, la, 128);
    size_t ne = kvptest_owner_blocks(eager, 1, ea, 128);
    KVP_ASSERT_EQ(nl, ne);
    assert_memory_equal(la, ea, nl * sizeof *la);
    KVP_ASSERT_EQ(pending_of(lazy, 1), 0);
    twins_done(lazy, eager);
}

/* kvp_pool_check reads the pending references as they are and refuses
 * each way they can be wrong; it leaves them pending. */
static void test_pending_check(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(16);
    kvp_pool *p = kvptest_create(&cfg);
    start_run(p, NULL, KVP_STREAM_SHARED);
    kvp_block b[6];
    for (int i = 0; i < 6; i++)
        b[i] = kvptest_take(p, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_OK(kvp_free_owner(p, 1, NULL));
    for (int i = 0; i < 3; i++)
        b[i] = kvptest_take(p, KVP_STREAM_SHARED, i ? 2 : 3);
    b[3] = kvptest_take(p, KVP_STREAM_SHARED, 2);
    uint32_t slot = kvp__owner_find(p, 2);
    kvp__owner *o = &p->own.slots[slot];
    const uint32_t pend = o->pend;
    KVP_ASSERT_EQ(o->len - pend, 3);
    char msg[256];
    KVP_ASSERT_OK(kvp_pool_check(p, msg, sizeof msg));
    KVP_ASSERT_EQ(o->pend, pend);
    kvp__block *k = &p->blocks[b[3]], saved = *k;
    k->state = KVP_BLOCK_IN_USE; /* written behind the pending mark */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    KVP_ASSERT_EQ(strstr(msg, "pending block") != NULL, 1);
    *k = saved;
    o->refs[o->len - 2] = b[3]; /* named twice */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    o->refs[o->len - 2] = b[2];
    KVP_ASSERT_OK(kvp_pool_check(p, msg, sizeof msg));
    kvp__stream *st = &p->st[0];
    st->stk[st->nstk++] = b[3]; /* also in the stack's array */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    st->nstk--;
    uint32_t head = p->def.dirty;
    p->def.dirty = o->dnext; /* flagged, off the chain */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    p->def.dirty = head;
    o->pend = o->len + 1; /* past the end */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    o->pend = pend;
    uint64_t run = p->def.run;
    p->def.run = 0; /* pending, yet no run to defer in */
    KVP_ASSERT_STATUS(kvp_pool_check(p, msg, sizeof msg), KVP_ECORRUPT);
    p->def.run = run;
    for (uint32_t i = 0; i < p->top; i++) /* no mark left behind by a refusal */
        KVP_ASSERT_EQ(p->blocks[i].flags & (KVP__F_PENDING | KVP__F_MARK), 0);
    KVP_ASSERT_OK(kvp_pool_check(p, msg, sizeof msg));
    KVP_ASSERT_EQ(o->pend, pend);
    kvp_pool_destroy(p);
}

/* Random decode-like traffic on twins (takes to a few owners, whole-owner
 * frees, now and then a call that settles): the same blocks, and the same
 * state whenever it is compared. */
static void test_pending_twin_churn(void **state)
{
    (void)state;
    kvp_pool *lazy, *eager;
    twins(kvptest_config(128), &lazy, &eager); /* 6 owners of up to 17 blocks */
    uint32_t hint[6], len[6] = {0};
    for (int i = 0; i < 6; i++)
        hint[i] = KVP_HINT_NONE;
    uint64_t rng = 0x9e3779b97f4a7c15u, next_owner = 100;
    kvp_owner own[6];
    for (int i = 0; i < 6; i++)
        own[i] = (kvp_owner)i + 1;
    size_t steps = kvptest_steps(4000);
    for (size_t step = 0; step < steps; step++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        unsigned r = (unsigned)(rng >> 33), i = r % 6;
        if (len[i] >= 10 + (r >> 8) % 8 || (r >> 4) % 29 == 0) {
            if (len[i])
                free_both(lazy, eager, own[i]);
            own[i] = next_owner++;
            hint[i] = KVP_HINT_NONE;
            len[i] = 0;
        } else if ((r >> 12) % 397 == 0) {
            KVP_ASSERT_EQ(kvptest_fp(lazy), kvptest_fp(eager)); /* settles */
        } else {
            take_both(lazy, eager, KVP_STREAM_SHARED, own[i], &hint[i]);
            len[i]++;
        }
    }
    kvp_stats sl = kvptest_stats(lazy), se = kvptest_stats(eager);
    KVP_ASSERT_EQ(sl.in_use, se.in_use);
    KVP_ASSERT_EQ(sl.peak_in_use, se.peak_in_use);
    KVP_ASSERT_EQ(sl.blocks_freed, se.blocks_freed);
    twins_done(lazy, eager);
}

/* ---- kvp_take_each ------------------------------------------------------ */

/* Random decode steps on three pools: kvp_take_each on an unhooked pool
 * (its fast path, deferring in runs) and on a hooked twin (its general
 * path, one take at a time), and one kvp_take_hinted per take on a third.
 * Batches take by rows into a table of six owners and an anonymous row,
 * repeats included, now and then without rows or without hints; whole
 * owners are freed between them as sequences end, and the anonymous blocks
 * right after their batch.  The three must agree on every status, count,
 * block and hint, and on the whole state whenever it is compared. */
static void test_take_each_matches_calls(void **state)
{
    (void)state;
    enum { NO = 6, MAXN = 12 };
    kvp_config cfg = kvptest_config(200);
    kvp_pool *each = kvptest_create(&cfg), *one = kvptest_create(&cfg), *hooked;
    cfg.on_evict = no_evict;
    hooked = kvptest_create(&cfg);
    kvp_owner tab[NO + 1];
    uint32_t h_each[NO + 1], h_hook[NO + 1], h_one[NO + 1], len[NO] = {0};
    for (int i = 0; i <= NO; i++) {
        tab[i] = i < NO ? (kvp_owner)i + 1 : KVP_ANON;
        h_each[i] = h_hook[i] = h_one[i] = KVP_HINT_NONE;
    }
    uint64_t rng = 0x2545f4914f6cdd1du, next_owner = 100;
    size_t steps = kvptest_steps(3000), deferred = 0, batches = 0;
    for (size_t step = 0; step < steps; step++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        unsigned r = (unsigned)(rng >> 33), i = r % NO;
        if (len[i] >= 12 + (r >> 8) % 8) { /* the sequence ends */
            kvp_pool *all[3] = {each, hooked, one};
            for (int k = 0; k < 3; k++)
                KVP_ASSERT_OK(kvp_free_owner(all[k], tab[i], NULL));
            tab[i] = next_owner++;
            h_each[i] = h_hook[i] = h_one[i] = KVP_HINT_NONE;
            len[i] = 0;
            continue;
        }
        size_t n = 1 + (r >> 4) % MAXN, ne = 0, nh = 0, anon = 0;
        unsigned how = (r >> 12) % 8; /* 0: no rows, 1: no hints, else both */
        uint32_t rows[MAXN];
        kvp_owner own[MAXN];
        uint32_t hs_each[MAXN], hs_hook[MAXN];
        kvp_block be[MAXN], bh[MAXN], bo[MAXN], freed[MAXN];
        for (size_t k = 0; k < n; k++) {
            rng = rng * 6364136223846793005u + 1442695040888963407u;
            unsigned q = (unsigned)(rng >> 33);
            rows[k] = q % 16 == 0 ? NO : q % NO;
            if (rows[k] < NO && len[rows[k]] + 1 >= 20)
                rows[k] = NO;
            if (rows[k] < NO)
                len[rows[k]]++;
            own[k] = tab[rows[k]];
            hs_each[k] = h_each[rows[k]];
            hs_hook[k] = h_hook[rows[k]];
        }
        kvp_status re, rh;
        if (how == 0) {
            re = kvp_take_each(each, KVP_STREAM_SHARED, own, hs_each, NULL, n, be, &ne);
            rh = kvp_take_each(hooked, KVP_STREAM_SHARED, own, hs_hook, NULL, n, bh, &nh);
        } else {
            uint32_t *he = how == 1 ? NULL : h_each, *hh = how == 1 ? NULL : h_hook;
            re = kvp_take_each(each, KVP_STREAM_SHARED, tab, he, rows, n, be, &ne);
            rh = kvp_take_each(hooked, KVP_STREAM_SHARED, tab, hh, rows, n, bh, &nh);
        }
        KVP_ASSERT_OK(re);
        KVP_ASSERT_OK(rh);
        KVP_ASSERT_EQ(ne, n);
        KVP_ASSERT_EQ(nh, n);
        for (size_t k = 0; k < n; k++) {
            uint32_t *h = how == 1 ? &(uint32_t){KVP_HINT_NONE} : &h_one[rows[k]];
            KVP_ASSERT_OK(kvp_take_hinted(one, KVP_STREAM_SHARED, own[k], h, &bo[k]));
            KVP_ASSERT_EQ(be[k], bo[k]);
            KVP_ASSERT_EQ(bh[k], bo[k]);
            if (rows[k] == NO)
                freed[anon++] = bo[k];
        }
        for (int k = 0; k < NO && how >= 2; k++) /* the same hints as one by one */
            KVP_ASSERT_EQ(h_each[k], h_one[k]);
        for (size_t k = 0; k < n && how == 0; k++) { /* per take; kept as the rows' */
            KVP_ASSERT_EQ(hs_each[k], h_one[rows[k]]);
            h_each[rows[k]] = hs_each[k];
            h_hook[rows[k]] = hs_hook[k];
        }
        for (size_t k = 0; k < n; k++)
            deferred += rows[k] < NO && each->blocks[be[k]].state == KVP_BLOCK_VACANT;
        batches++;
        kvptest_check(each); /* leaves the pending references pending */
        if (anon) {
            kvp_pool *all[3] = {each, hooked, one};
            for (int k = 0; k < 3; k++)
                KVP_ASSERT_OK(kvp_free(all[k], freed, anon, KVP_ANON));
        }
        if (step % 97 == 0) {
            uint64_t f = kvptest_fp(one);
            KVP_ASSERT_EQ(kvptest_fp(each), f);
            KVP_ASSERT_EQ(kvptest_fp(hooked), f);
        }
    }
    KVP_ASSERT_EQ(deferred > 0, 1); /* the fast path ran, in runs */
    kvp_stats se = kvptest_stats(each), so = kvptest_stats(one);
    KVP_ASSERT_EQ(se.alloc_calls, so.alloc_calls);
    KVP_ASSERT_EQ(se.reused, so.reused);
    KVP_ASSERT_EQ(se.peak_in_use, so.peak_in_use);
    KVP_ASSERT_EQ(kvptest_fp(each), kvptest_fp(one));
    twins_done(hooked, one);
    kvp_pool_destroy(each);
}

/* A take that fails ends kvp_take_each: the takes before it stand, its
 * own changed nothing (its out entry and the later ones untouched), and
 * the pool is as after the same calls one by one, the failure counted. */
static void test_take_each_partial(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(24);
    kvp_pool *each = kvptest_create(&cfg), *one = kvptest_create(&cfg);
    start_run(each, one, KVP_STREAM_SHARED); /* the first takes defer */
    for (int i = 0; i < 14; i++) { /* 14 of the 24 held elsewhere */
        kvptest_take(each, KVP_STREAM_SHARED, 50);
        kvptest_take(one, KVP_STREAM_SHARED, 50);
    }
    kvp_owner tab[3] = {1, 2, KVP_ANON};
    uint32_t rows[14] = {0, 1, 0, 0, 2, 1, 0, 1, 1, 0, 2, 0, 1, 0};
    uint32_t he[3] = {KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE};
    uint32_t ho[3] = {KVP_HINT_NONE, KVP_HINT_NONE, KVP_HINT_NONE};
    kvp_block out[14];
    for (int k = 0; k < 14; k++)
        out[k] = 0xdeadbeefu;
    size_t nt = 99;
    KVP_ASSERT_STATUS(kvp_take_each(each, KVP_STREAM_SHARED, tab, he, rows, 14, out, &nt),
                      KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(nt, 10);
    for (int k = 10; k < 14; k++)
        KVP_ASSERT_EQ(out[k], 0xdeadbeefu);
    kvptest_check(each);
    for (int k = 0; k < 14; k++) {
        kvp_block b = KVP_NO_BLOCK;
        kvp_status rc = kvp_take_hinted(one, KVP_STREAM_SHARED, tab[rows[k]], &ho[rows[k]], &b);
        if (k < 10) {
            KVP_ASSERT_OK(rc);
            KVP_ASSERT_EQ(out[k], b);
        } else {
            KVP_ASSERT_STATUS(rc, KVP_EEXHAUSTED);
            break;
        }
    }
    for (int k = 0; k < 3; k++)
        KVP_ASSERT_EQ(he[k], ho[k]);
    KVP_ASSERT_EQ(kvptest_stats(each).exhausted, kvptest_stats(one).exhausted);
    KVP_ASSERT_EQ(kvptest_fp(each), kvptest_fp(one));
    kvp_pool_destroy(each);
    kvp_pool_destroy(one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_release),
        cmocka_unit_test(test_repeated_alloc_order),
        cmocka_unit_test(test_free_subset),
        cmocka_unit_test(test_free_owner_newest_first),
        cmocka_unit_test(test_not_owner),
        cmocka_unit_test(test_shared_claim),
        cmocka_unit_test(test_anonymous_refs),
        cmocka_unit_test(test_owner_auto_retire),
        cmocka_unit_test(test_many_owners),
        cmocka_unit_test(test_take_hinted),
        cmocka_unit_test(test_take_hinted_stack),
        cmocka_unit_test(test_pending_take_free),
        cmocka_unit_test(test_pending_settled_on_read),
        cmocka_unit_test(test_pending_general_append),
        cmocka_unit_test(test_pending_kv),
        cmocka_unit_test(test_pending_run_length),
        cmocka_unit_test(test_pending_check),
        cmocka_unit_test(test_pending_twin_churn),
        cmocka_unit_test(test_take_each_matches_calls),
        cmocka_unit_test(test_take_each_partial),
    };
    return cmocka_run_group_tests_name("owner", tests, NULL, NULL);
}
