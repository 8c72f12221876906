/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool.c — pool lifecycle and plain allocation (kvpool.h "Lifecycle",
 * "Owner-tracked allocation", growth on exhaustion).
 *
 * Covers: config defaults, strerror, create errors and the allocator hook
 * (including ENOMEM at every allocation of create), zero-block pools, clear
 * back to the just-created state, alloc/take/take_id/free, all-or-nothing
 * allocation, growth on exhaustion (just enough, never past max_blocks,
 * retired ids first), exhausted and reused counters, the null block,
 * separate K/V streams, set_fill and exact fragmentation, kvp_block_get,
 * prefault (same behaviour, tables resident at creation).  The order in
 * which free blocks are reused is test_freelist.c's.
 */
#include "kvptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config, strerror -------------------------------------------------- */

static void test_config_defaults(void **state)
{
    (void)state;
    kvp_config cfg;
    memset(&cfg, 0xa5, sizeof cfg);
    KVP_ASSERT_OK(kvp_config_default(&cfg));
    KVP_ASSERT_EQ(cfg.block_size, 16);
    KVP_ASSERT_EQ(cfg.num_blocks, 1024);
    KVP_ASSERT_EQ(cfg.max_blocks, 0);
    KVP_ASSERT_EQ(cfg.separate_kv, 0);
    KVP_ASSERT_EQ(cfg.grow_on_exhaustion, 0);
    KVP_ASSERT_EQ(cfg.thread_safe, 0);
    KVP_ASSERT_EQ(cfg.null_block, 0);
    KVP_ASSERT_EQ(cfg.prefix_caching, 1);
    KVP_ASSERT_EQ(cfg.reuse, KVP_REUSE_LIFO);
    KVP_ASSERT_EQ(cfg.history_len, 64);
    KVP_ASSERT_EQ(cfg.history_every_call, 0);
    assert_null(cfg.on_evict);
    assert_null(cfg.evict_user);
    assert_null(cfg.allocator);
    KVP_ASSERT_EQ(cfg.hash_alg, KVP_HASH_SHA256);
    assert_null((void *)(uintptr_t)cfg.hash_fn);
    assert_null(cfg.hash_user);
    for (int i = 0; i < 32; i++)
        KVP_ASSERT_EQ(cfg.root_seed.b[i], 0);
    KVP_ASSERT_EQ(cfg.random_root, 0);
    KVP_ASSERT_EQ(cfg.verify_hits, 0);
    KVP_ASSERT_EQ(cfg.prefault, 0);
    KVP_ASSERT_EQ(cfg.block_bytes[0], 0);
    KVP_ASSERT_EQ(cfg.block_bytes[1], 0);
    KVP_ASSERT_EQ(cfg.host_arena, 0);
    assert_null((void *)(uintptr_t)cfg.copy);
    assert_null(cfg.copy_user);
    KVP_ASSERT_STATUS(kvp_config_default(NULL), KVP_EINVAL);

    /* The default pool works and has 1024 free blocks of stream SHARED. */
    kvp_pool *pool = NULL;
    KVP_ASSERT_OK(kvp_pool_create(&cfg, &pool));
    assert_non_null(pool);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 1024);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 1024);
    KVP_ASSERT_EQ(st.free, 1024);
    KVP_ASSERT_EQ(st.vacant, 1024);
    KVP_ASSERT_EQ(st.in_use, 0);
    kvptest_done(pool);
}

static void test_strerror(void **state)
{
    (void)state;
    /* the codes keep their numbers; KVP_STATUS_COUNT is one past the last */
    KVP_ASSERT_EQ(KVP_EINVAL, 1);
    KVP_ASSERT_EQ(KVP_ENOMEM, 8);
    KVP_ASSERT_EQ(KVP_ECORRUPT, 11);
    KVP_ASSERT_EQ(KVP_STATUS_COUNT, 12);
    const char *seen[KVP_STATUS_COUNT];
    for (int i = 0; i < KVP_STATUS_COUNT; i++) {
        const char *m = kvp_strerror(i);
        assert_non_null(m);
        if (m[0] == '\0' || strcmp(m, kvp_strerror(-1)) == 0)
            fail_msg("kvp_strerror(%d) is \"%s\"", i, m);
        for (int j = 0; j < i; j++)
            if (strcmp(seen[j], m) == 0)
                fail_msg("kvp_strerror(%d) == kvp_strerror(%d) == \"%s\"", i, j, m);
        seen[i] = m;
    }
    const int unknown[] = {-1, KVP_STATUS_COUNT, 99, 1 << 30, -2147483647 - 1};
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++) {
        assert_string_equal(kvp_strerror(unknown[i]), "unknown status");
        assert_null(kvp_status_name(unknown[i]));
    }
}

/* Each code's name is its enumerator's, from the same list as its message. */
static void test_status_names(void **state)
{
    (void)state;
    assert_string_equal(kvp_status_name(KVP_OK), "KVP_OK");
    assert_string_equal(kvp_status_name(KVP_EINVAL), "KVP_EINVAL");
    assert_string_equal(kvp_status_name(KVP_ESPACE), "KVP_ESPACE");
    assert_string_equal(kvp_status_name(KVP_ECORRUPT), "KVP_ECORRUPT");
#define EXPECT(name, value, word, msg)                                                     \
    assert_string_equal(kvp_status_name(value), "KVP_" #name);                              \
    assert_string_equal(kvp_strerror(value), msg);                                          \
    KVP_ASSERT_EQ(KVP_##name, value);
    KVP_STATUS_MAP(EXPECT)
#undef EXPECT
}

/* Reuse orders by name: every value round-trips, anything else is refused
 * and leaves the output alone. */
static void test_reuse_names(void **state)
{
    (void)state;
    assert_string_equal(kvp_reuse_name(KVP_REUSE_LIFO), "lifo");
    assert_string_equal(kvp_reuse_name(KVP_REUSE_LOWEST), "lowest");
    assert_string_equal(kvp_reuse_name(KVP_REUSE_FIFO), "fifo");
    assert_null(kvp_reuse_name(3));
    assert_null(kvp_reuse_name(-1));
    for (int v = 0; kvp_reuse_name(v); v++) {
        kvp_reuse r = (kvp_reuse)-1;
        KVP_ASSERT_OK(kvp_reuse_parse(kvp_reuse_name(v), &r));
        KVP_ASSERT_EQ(r, v);
    }
    kvp_reuse r = KVP_REUSE_FIFO;
    KVP_ASSERT_STATUS(kvp_reuse_parse("LIFO", &r), KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_reuse_parse("lif", &r), KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_reuse_parse("", &r), KVP_ENOTFOUND);
    KVP_ASSERT_STATUS(kvp_reuse_parse(NULL, &r), KVP_EINVAL);
    KVP_ASSERT_EQ(r, KVP_REUSE_FIFO);
    KVP_ASSERT_STATUS(kvp_reuse_parse("lifo", NULL), KVP_EINVAL);
    /* a value with no name is refused at creation */
    kvp_config cfg = kvptest_config(4);
    kvp_pool *pool = (kvp_pool *)&cfg;
    cfg.reuse = (kvp_reuse)3;
    KVP_ASSERT_STATUS(kvp_pool_create(&cfg, &pool), KVP_EINVAL);
    assert_ptr_equal(pool, (kvp_pool *)&cfg);
}

/* ---- counting / failing allocator -------------------------------------- */

typedef struct test_alloc {
    size_t live_bytes;
    size_t live_blocks;
    size_t n_alloc;
    long fail_after;  /* allocations that still succeed; < 0: never fail */
    size_t bad_release;
} test_alloc;

static void *ta_alloc(void *user, size_t size)
{
    test_alloc *t = user;
    if (t->fail_after == 0)
        return NULL;
    if (t->fail_after > 0)
        t->fail_after--;
    void *p = kvptest_sized_alloc(size);
    if (p == NULL)
        return NULL;
    t->live_bytes += size;
    t->live_blocks++;
    t->n_alloc++;
    return p;
}

static void ta_release(void *user, void *ptr, size_t size)
{
    test_alloc *t = user;
    if (ptr == NULL)
        return;
    size_t had = kvptest_sized_release(ptr);
    if (had != size)
        t->bad_release++;
    t->live_bytes -= had;
    t->live_blocks--;
}

/* A config of n blocks whose allocator hook *al counts into *ta, which
 * starts empty and lets fail_after allocations through before refusing
 * every later one (fail_after < 0: never refuses). */
static kvp_config ta_config(uint32_t n, long fail_after, kvp_allocator *al, test_alloc *ta)
{
    *ta = (test_alloc){0, 0, 0, fail_after, 0};
    *al = (kvp_allocator){ta_alloc, ta_release, ta};
    kvp_config cfg = kvptest_config(n);
    cfg.allocator = al;
    return cfg;
}

static void test_allocator_hook(void **state)
{
    (void)state;
    test_alloc ta;
    kvp_allocator al;
    kvp_config cfg = ta_config(64, -1, &al, &ta);
    cfg.grow_on_exhaustion = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    if (ta.n_alloc == 0)
        fail_msg("kvp_pool_create made no allocation through the hook");
    /* Exercise growth and the owner table. */
    kvp_block ids[256];
    for (kvp_owner o = 0; o < 40; o++)
        kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 5, o, ids, ARRAY_LEN(ids));
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 200);
    for (kvp_owner o = 0; o < 40; o++) {
        kvp_hash h = kvptest_hash(1000 + o);
        size_t n = kvptest_owner_blocks(pool, o, ids, ARRAY_LEN(ids));
        KVP_ASSERT_EQ(n, 5);
        KVP_ASSERT_OK(kvp_publish(pool, ids[0], &h));
    }
    kvptest_done(pool);
    KVP_ASSERT_EQ(ta.live_bytes, 0);
    KVP_ASSERT_EQ(ta.live_blocks, 0);
    KVP_ASSERT_EQ(ta.bad_release, 0);
}

/* ENOMEM at every allocation create makes: clean failure, no leak. */
static void test_create_enomem(void **state)
{
    (void)state;
    int created = 0;
    for (long k = 0; k < 200 && !created; k++) {
        test_alloc ta;
        kvp_allocator al;
        kvp_config cfg = ta_config(100, k, &al, &ta);
        cfg.thread_safe = (int)(k & 1);
        kvp_pool *pool = (kvp_pool *)&ta; /* sentinel */
        kvp_status st = kvp_pool_create(&cfg, &pool);
        if (st == KVP_OK) {
            created = 1;
            kvptest_done(pool);
        } else {
            KVP_ASSERT_STATUS(st, KVP_ENOMEM);
            if (pool != (kvp_pool *)&ta)
                fail_msg("failed create (fail after %ld allocations) wrote *out", k);
        }
        KVP_ASSERT_EQ(ta.live_bytes, 0);
        KVP_ASSERT_EQ(ta.bad_release, 0);
    }
    if (!created)
        fail_msg("kvp_pool_create never succeeded within 200 allocations");
}

/* expr either succeeds or fails with KVP_ENOMEM leaving the pool's
 * fingerprint as it was; the pool passes its checker either way. */
#define OK_OR_CLEAN_ENOMEM(pool, expr)                                                   \
    do {                                                                                 \
        uint64_t fp_ = kvptest_fp(pool);                                                 \
        kvp_status st_ = (expr);                                                         \
        if (st_ != KVP_OK) {                                                             \
            kvptest_assert_status(st_, KVP_ENOMEM, #expr, __FILE__, __LINE__);           \
            kvptest_assert_fp_at((pool), fp_, #expr, __FILE__, __LINE__);                \
        }                                                                                \
        kvptest_check(pool);                                                             \
    } while (0)

/* ENOMEM on growth paths after creation: nothing changes. */
static void test_growth_enomem(void **state)
{
    (void)state;
    test_alloc ta;
    kvp_allocator al;
    kvp_config cfg = ta_config(4, -1, &al, &ta);
    cfg.grow_on_exhaustion = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 8);
    ta.fail_after = 0;
    /* Each of these may succeed (capacity reserved) or fail with ENOMEM;
     * a failure must change nothing. */
    for (int round = 0; round < 3; round++) {
        kvp_block b = KVP_NO_BLOCK;
        OK_OR_CLEAN_ENOMEM(pool, kvp_take(pool, KVP_STREAM_SHARED, 2, &b));
        uint32_t added = 12345;
        OK_OR_CLEAN_ENOMEM(pool, kvp_extend(pool, KVP_STREAM_SHARED, 100000, &added));
        OK_OR_CLEAN_ENOMEM(pool, kvp_owner_register(pool, 1000 + (kvp_owner)round));
    }
    ta.fail_after = -1;
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(ta.live_bytes, 0);
}

/* ---- create errors ------------------------------------------------------ */

static void expect_create_fails(const kvp_config *cfg, kvp_status want, int line)
{
    kvp_pool *sentinel = (kvp_pool *)(uintptr_t)0x1234;
    kvp_pool *pool = sentinel;
    kvp_status st = kvp_pool_create(cfg, &pool);
    kvptest_assert_status(st, want, "kvp_pool_create", __FILE__, line);
    if (pool != sentinel)
        fail_msg("line %d: failed kvp_pool_create wrote *out", line);
}

static void *ta_alloc_dummy(void *u, size_t s)
{
    (void)u;
    return malloc(s);
}
static void ta_release_dummy(void *u, void *p, size_t s)
{
    (void)u;
    (void)s;
    free(p);
}

static void test_create_errors(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    kvp_pool *pool = NULL;
    KVP_ASSERT_STATUS(kvp_pool_create(NULL, &pool), KVP_EINVAL);
    assert_null(pool);
    KVP_ASSERT_STATUS(kvp_pool_create(&cfg, NULL), KVP_EINVAL);

    cfg = kvptest_config(8);
    cfg.block_size = 0;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg.block_size = 65536;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg.block_size = UINT32_MAX;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    cfg = kvptest_config(8);
    cfg.max_blocks = 7;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg = kvptest_config(KVP_MAX_BLOCKS + 1u);
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg = kvptest_config(UINT32_MAX);
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    cfg = kvptest_config(0);
    cfg.null_block = 1;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    cfg = kvptest_config(8);
    cfg.reuse = (kvp_reuse)3;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg.reuse = (kvp_reuse)-1;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    kvp_allocator no_alloc = {NULL, ta_release_dummy, NULL};
    kvp_allocator no_release = {ta_alloc_dummy, NULL, NULL};
    cfg = kvptest_config(8);
    cfg.allocator = &no_alloc;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg.allocator = &no_release;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    cfg = kvptest_config(8);
    cfg.history_len = (1u << 20) + 1;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg = kvptest_config(8);
    cfg.hash_alg = (kvp_hash_alg)3;
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg.hash_alg = KVP_HASH_CUSTOM; /* without hash_fn */
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg = kvptest_config(8);
    cfg.host_arena = 1; /* without block_bytes */
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);
    cfg = kvptest_config(8);
    cfg.block_bytes[1] = 64; /* a V arena without separate K/V lists */
    expect_create_fails(&cfg, KVP_EINVAL, __LINE__);

    /* Boundary values that are valid. */
    cfg = kvptest_config(8);
    cfg.block_size = 65535;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_pool_destroy(p);
    cfg = kvptest_config(8);
    cfg.block_size = 1;
    cfg.max_blocks = 8;
    p = kvptest_create(&cfg);
    kvp_pool_destroy(p);
    cfg = kvptest_config(1);
    cfg.null_block = 1;
    p = kvptest_create(&cfg);
    kvp_pool_destroy(p);

    /* The allocator is copied at create: the struct may go away. */
    {
        kvp_allocator tmp = {ta_alloc_dummy, ta_release_dummy, NULL};
        cfg = kvptest_config(8);
        cfg.allocator = &tmp;
        p = kvptest_create(&cfg);
        memset(&tmp, 0, sizeof tmp);
        kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
        (void)b;
        kvp_pool_destroy(p);
    }

    kvp_pool_destroy(NULL); /* accepted and ignored */
}

static void test_zero_blocks(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(0);
    kvp_pool *pool = kvptest_create(&cfg);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 0);
    kvp_block b = KVP_NO_BLOCK;
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 1, &b), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).exhausted, 1);
    kvp_block r = 1, m = 1;
    KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EEXHAUSTED);
    kvp_block_info info;
    KVP_ASSERT_STATUS(kvp_block_get(pool, 0, &info), KVP_ERANGE);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 0);
    assert_true(st.usage == 0.0);
    assert_true(st.fragmentation == 0.0);
    kvp_pool_destroy(pool);

    /* Zero blocks with growth: each take adds exactly one block. */
    cfg.grow_on_exhaustion = 1;
    pool = kvptest_create(&cfg);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 3);
    KVP_ASSERT_EQ(st.grown, 3);
    KVP_ASSERT_EQ(st.free, 0);
    kvptest_done(pool);
}

/* ---- clear -------------------------------------------------------------- */

static void test_pool_clear(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_config cfg = kvptest_config(8);
    cfg.max_blocks = 32;
    cfg.history_len = 4;
    kvptest_evrec_attach(&rec, &cfg);
    kvp_pool *fresh = kvptest_create(&cfg);
    kvp_pool *pool = kvptest_create(&cfg);
    uint64_t fresh_fp = kvptest_fp(fresh);
    KVP_ASSERT_EQ(kvptest_fp(pool), fresh_fp);

    /* Mess it up. */
    kvp_block ids[8];
    KVP_ASSERT_OK(kvp_owner_register(pool, 7));
    kvptest_alloc(pool, KVP_STREAM_SHARED, 50, 1, ids, 8);   /* 4 blocks */
    kvp_hash h1 = kvptest_hash(11), h2 = kvptest_hash(12);
    KVP_ASSERT_OK(kvp_publish(pool, ids[0], &h1));
    KVP_ASSERT_OK(kvp_publish(pool, ids[1], &h2));
    KVP_ASSERT_OK(kvp_set_fill(pool, ids[2], 3));
    KVP_ASSERT_OK(kvp_free(pool, ids, 1, 1));
    KVP_ASSERT_OK(kvp_claim(pool, ids[1], 2));
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 3, &added));
    KVP_ASSERT_EQ(added, 3);
    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 2, &nret));
    KVP_ASSERT_OK(kvp_stats_snapshot(pool));
    kvptest_check(pool);
    assert_true(kvptest_fp(pool) != fresh_fp);

    kvptest_evrec_reset(&rec);
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    kvptest_check(pool);
    KVP_ASSERT_EQ(rec.n, 1);
    KVP_ASSERT_EQ(rec.n_cleared, 1);
    KVP_ASSERT_EQ(rec.bad, 0);
    KVP_ASSERT_EQ(kvptest_fp(pool), fresh_fp);

    kvp_stats a = kvptest_stats(pool), b = kvptest_stats(fresh);
    KVP_ASSERT_EQ(a.blocks, 8);
    KVP_ASSERT_EQ(a.blocks, b.blocks);
    KVP_ASSERT_EQ(a.in_use, 0);
    KVP_ASSERT_EQ(a.free, 8);
    KVP_ASSERT_EQ(a.vacant, 8);
    KVP_ASSERT_EQ(a.cached, 0);
    KVP_ASSERT_EQ(a.indexed, 0);
    KVP_ASSERT_EQ(a.owners, 0);
    KVP_ASSERT_EQ(a.shared, 0);
    KVP_ASSERT_EQ(a.fragmented, 0);
    KVP_ASSERT_EQ(a.peak_in_use, 0);
    KVP_ASSERT_EQ(a.alloc_calls, 0);
    KVP_ASSERT_EQ(a.blocks_allocated, 0);
    KVP_ASSERT_EQ(a.free_calls, 0);
    KVP_ASSERT_EQ(a.blocks_freed, 0);
    KVP_ASSERT_EQ(a.extended, 0);
    KVP_ASSERT_EQ(a.retired, 0);
    KVP_ASSERT_EQ(a.evictions, 0);
    size_t nh = 99;
    KVP_ASSERT_OK(kvp_stats_history(pool, NULL, 0, &nh));
    KVP_ASSERT_EQ(nh, 0);

    /* Owners are gone: 7 may register again, 1 and 2 are unknown. */
    size_t n = 0;
    KVP_ASSERT_STATUS(kvp_owner_blocks(pool, 1, ids, 8, &n), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_owner_register(pool, 7));
    KVP_ASSERT_OK(kvp_owner_release(pool, 7));

    /* Every block is never-used again: LIFO hands out 0,1,2... and none of
     * it counts as reuse. */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 3, 0, 1, 2, 3);
    KVP_ASSERT_EQ(kvptest_stats(pool).reused, 0);
    KVP_ASSERT_EQ(kvptest_info(pool, 4).ever_allocated, 0);

    /* Clear with an empty index: no notice. */
    kvptest_evrec_reset(&rec);
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    KVP_ASSERT_EQ(rec.n, 0);
    KVP_ASSERT_EQ(kvptest_fp(pool), fresh_fp);
    KVP_ASSERT_STATUS(kvp_pool_clear(NULL), KVP_EINVAL);
    kvptest_check(pool);
    kvptest_check(fresh);
    kvp_pool_destroy(pool);
    kvp_pool_destroy(fresh);
}

/* Clear in other configurations: separate lists with a null block and FIFO,
 * a locked pool with growth.  Always back to a fresh pool's fingerprint. */
static void test_pool_clear_variants(void **state)
{
    (void)state;
    for (int v = 0; v < 2; v++) {
        kvp_config cfg = kvptest_config(9);
        if (v == 0) {
            cfg.separate_kv = 1;
            cfg.null_block = 1;
            cfg.reuse = KVP_REUSE_FIFO;
        } else {
            cfg.thread_safe = 1;
            cfg.grow_on_exhaustion = 1;
            cfg.reuse = KVP_REUSE_LOWEST;
        }
        kvp_pool *fresh = kvptest_create(&cfg);
        kvp_pool *pool = kvptest_create(&cfg);
        const uint64_t fresh_fp = kvptest_fp(fresh);
        kvp_stream s1 = v == 0 ? KVP_STREAM_K : KVP_STREAM_SHARED;
        kvp_stream s2 = v == 0 ? KVP_STREAM_V : KVP_STREAM_SHARED;
        kvp_block ids[16];
        size_t n = kvptest_alloc(pool, s1, 16 * 3, 1, ids, 16);
        kvp_hash h = kvptest_hash(5);
        KVP_ASSERT_OK(kvp_publish(pool, ids[n - 1], &h));
        KVP_ASSERT_OK(kvp_free(pool, ids + n - 1, 1, 1));
        kvptest_alloc(pool, s2, 16 * 4, KVP_ANON, ids, 16);
        if (v == 1)
            kvptest_alloc(pool, s2, 16 * 6, 2, ids, 16); /* grows */
        kvp_block r, m;
        kvp_status st = kvp_retire_top(pool, &r, &m);
        if (st != KVP_OK)
            KVP_ASSERT_STATUS(st, KVP_EEXHAUSTED);
        kvptest_check(pool);
        assert_true(kvptest_fp(pool) != fresh_fp);
        KVP_ASSERT_OK(kvp_pool_clear(pool));
        kvptest_check(pool);
        KVP_ASSERT_EQ(kvptest_fp(pool), fresh_fp);
        kvp_stats a = kvptest_stats(pool), b = kvptest_stats(fresh);
        KVP_ASSERT_EQ(a.blocks, b.blocks);
        KVP_ASSERT_EQ(a.in_use, b.in_use);
        KVP_ASSERT_EQ(a.free, b.free);
        KVP_ASSERT_EQ(a.grown, 0);
        KVP_ASSERT_EQ(a.alloc_calls, 0);
        /* And it behaves like a fresh pool: same ids in the same order. */
        for (int i = 0; i < 3; i++) {
            kvp_block x = kvptest_take(pool, s2, 3);
            kvp_block y = kvptest_take(fresh, s2, 3);
            KVP_ASSERT_EQ(x, y);
        }
        KVP_ASSERT_EQ(kvptest_fp(pool), kvptest_fp(fresh));
        kvptest_done(pool);
        kvp_pool_destroy(fresh);
    }
}

/* ---- alloc / take / take_id / free -------------------------------------- */

static void test_alloc_basic(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(32, KVP_REUSE_LIFO);
    kvp_block ids[8];
    size_t n = 0;
    static const struct { uint64_t tokens; size_t blocks; } cases[] = {
        {1, 1}, {15, 1}, {16, 1}, {17, 2}, {32, 2}, {48, 3}, {49, 4},
    };
    kvp_block next = 0;
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        kvp_owner owner = 100 + c;
        unsigned fmt = (unsigned)(c % 3 == 0 ? KVP_FMT_INT4 : c % 3 == 1 ? 255 : KVP_FMT_BF16);
        memset(ids, 0xff, sizeof ids);
        KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_SHARED, cases[c].tokens, owner, fmt,
                                ids, ARRAY_LEN(ids), &n));
        KVP_ASSERT_EQ(n, cases[c].blocks);
        for (size_t i = 0; i < n; i++) {
            KVP_ASSERT_EQ(ids[i], next);   /* fresh LIFO pool: id order */
            next++;
            kvp_block_info info = kvptest_info(pool, ids[i]);
            KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
            KVP_ASSERT_EQ(info.format, fmt);
            KVP_ASSERT_EQ(info.ref_count, 1);
            KVP_ASSERT_EQ(info.anon_refs, 0);
            KVP_ASSERT_EQ(info.fill, 0);
            KVP_ASSERT_EQ(info.owner, owner);
            KVP_ASSERT_EQ(info.ever_allocated, 1);
            KVP_ASSERT_EQ(info.published, 0);
            KVP_ASSERT_EQ(info.stream, KVP_STREAM_SHARED);
        }
        kvptest_check(pool);
    }
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.in_use, next);
    KVP_ASSERT_EQ(st.free, 32 - next);
    KVP_ASSERT_EQ(st.alloc_calls, ARRAY_LEN(cases));
    KVP_ASSERT_EQ(st.blocks_allocated, next);
    KVP_ASSERT_EQ(st.owners, ARRAY_LEN(cases));

    /* Exact capacity is enough; one short is ESPACE with the count. */
    KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_SHARED, 33, 1, 0, ids, 3, &n));
    KVP_ASSERT_EQ(n, 3);
    n = 0;
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 33, 1, 0, ids, 2, &n),
                       KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    kvptest_done(pool);
}

static void test_take_basic(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LIFO);
    kvp_block ids[4];
    /* A block allocated with another format and fill comes back from take
     * with FP16 and fill 0. */
    kvp_block b0 = KVP_NO_BLOCK;
    size_t n = 0;
    KVP_ASSERT_OK(kvp_alloc(pool, KVP_STREAM_SHARED, 1, 5, KVP_FMT_INT2, &b0, 1, &n));
    KVP_ASSERT_OK(kvp_set_fill(pool, b0, 9));
    kvptest_free1(pool, b0, 5);
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 6);
    KVP_ASSERT_EQ(b, b0);
    kvp_block_info info = kvptest_info(pool, b);
    KVP_ASSERT_EQ(info.format, KVP_FMT_FP16);
    KVP_ASSERT_EQ(info.fill, 0);
    KVP_ASSERT_EQ(info.owner, 6);
    KVP_ASSERT_EQ(info.ref_count, 1);
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 6, ids, 4), 1);
    KVP_ASSERT_EQ(ids[0], b);
    /* Anonymous take. */
    kvp_block a = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    info = kvptest_info(pool, a);
    KVP_ASSERT_EQ(info.owner, KVP_ANON);
    KVP_ASSERT_EQ(info.anon_refs, 1);
    KVP_ASSERT_EQ(info.ref_count, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 1);
    kvptest_done(pool);
}

static void test_take_id(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_pool *pool = kvptest_rec_pool(&rec, 8, KVP_REUSE_LOWEST);

    /* A never-used block out of order. */
    KVP_ASSERT_OK(kvp_take_id(pool, 5, 1));
    kvp_block_info info = kvptest_info(pool, 5);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.owner, 1);
    KVP_ASSERT_EQ(info.format, KVP_FMT_FP16);
    KVP_ASSERT_EQ(info.fill, 0);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 7);
    kvptest_check(pool);
    /* In use now. */
    KVP_ASSERT_REFUSED(pool, kvp_take_id(pool, 5, 2), KVP_EBUSY);
    /* The reuse order skips it. */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3, 4, 6);

    /* A cached block: its content is evicted (callback, counted). */
    kvp_hash h = kvptest_hash(77);
    KVP_ASSERT_OK(kvp_publish(pool, 2, &h));
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_EQ(kvptest_info(pool, 2).state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(rec.n, 0);
    uint64_t ev0 = kvptest_stats(pool).evictions;
    KVP_ASSERT_OK(kvp_take_id(pool, 2, KVP_ANON));
    KVP_ASSERT_EQ(rec.n, 1);
    KVPTEST_EXPECT_EVREC(&rec, 0, 77, 2);
    KVP_ASSERT_EQ(kvptest_stats(pool).evictions, ev0 + 1);
    info = kvptest_info(pool, 2);
    KVP_ASSERT_EQ(info.published, 0);
    KVP_ASSERT_EQ(info.anon_refs, 1);
    kvp_block out;
    KVP_ASSERT_STATUS(kvp_lookup(pool, KVP_STREAM_SHARED, &h, &out), KVP_ENOTFOUND);
    /* take_id counts as an allocation call. */
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.alloc_calls, 1 + 6 + 1);
    /* Only block 7 is left. */
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 7);
    KVP_ASSERT_REFUSED(pool, kvp_take_id(pool, 8, 1), KVP_ERANGE);
    kvptest_done(pool);
}

static void test_free_basic(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LIFO);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 4, 1, ids, 8);
    KVP_ASSERT_OK(kvp_set_fill(pool, ids[1], 16));
    KVP_ASSERT_OK(kvp_free(pool, ids, 2, 1));
    for (int i = 0; i < 2; i++) {
        kvp_block_info info = kvptest_info(pool, ids[i]);
        KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
        KVP_ASSERT_EQ(info.ref_count, 0);
        KVP_ASSERT_EQ(info.anon_refs, 0);
        KVP_ASSERT_EQ(info.owner, KVP_ANON);
        KVP_ASSERT_EQ(info.ever_allocated, 1);
    }
    kvptest_check(pool);
    /* Freeing again is a double free; nothing changes. */
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, ids, 1, 1), KVP_EDOUBLEFREE);
    /* All or nothing: a list whose last id is bad frees nothing. */
    kvp_block mixed[2] = {ids[2], ids[0]};
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, mixed, 2, 1), KVP_EDOUBLEFREE);
    KVP_ASSERT_EQ(kvptest_info(pool, ids[2]).state, KVP_BLOCK_IN_USE);
    /* n == 0 frees nothing and is fine (NULL ids allowed then). */
    uint64_t fp = kvptest_fp(pool);
    KVP_ASSERT_OK(kvp_free(pool, NULL, 0, 1));
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks_freed, 2);
    KVP_ASSERT_EQ(st.in_use, 2);
    KVP_ASSERT_EQ(st.free, 6);
    kvptest_done(pool);
}

/* ---- exhaustion and growth --------------------------------------------- */

static void test_all_or_nothing(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LIFO);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2);
    kvp_block ids[4];
    size_t n = 0;
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 17, 2, 0, ids, 4, &n),
                       KVP_EEXHAUSTED);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.exhausted, 1);
    KVP_ASSERT_EQ(st.in_use, 3);
    KVP_ASSERT_EQ(st.owners, 1); /* owner 2 did not become active */
    KVP_ASSERT_STATUS(kvp_owner_blocks(pool, 2, ids, 4, &n), KVP_ENOTFOUND);
    /* A registered owner stays as it was too. */
    KVP_ASSERT_OK(kvp_owner_register(pool, 3));
    kvp_block big[8];
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 100, 3, 0, big, 8, &n),
                       KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_owner_blocks(pool, 3, ids, 4), 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).exhausted, 2);
    /* Exactly what is left succeeds. */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16, 3, ids, 4), 1);
    KVP_ASSERT_EQ(ids[0], 3);
    kvptest_done(pool);
}

static void test_grow_on_exhaustion(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(4);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.grow_on_exhaustion = 1;
    cfg.max_blocks = 7;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block ids[8];
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 8), 2);
    /* Needs 4, 2 free: grows by exactly 2. */
    size_t n = kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 2, ids, 8);
    KVP_ASSERT_EQ(n, 4);
    int seen[8] = {0};
    for (size_t i = 0; i < n; i++) {
        assert_true(ids[i] >= 2 && ids[i] <= 5);
        seen[ids[i]]++;
    }
    for (int i = 2; i <= 5; i++)
        KVP_ASSERT_EQ(seen[i], 1);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 6);
    KVP_ASSERT_EQ(st.grown, 2);
    KVP_ASSERT_EQ(st.free, 0);
    KVP_ASSERT_EQ(st.reused, 0);
    kvptest_check(pool);

    /* Needs 2, only 1 more fits under the cap: refused, nothing grows. */
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 17, 3, 0, ids, 8, &n),
                       KVP_EEXHAUSTED);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 6);
    KVP_ASSERT_EQ(st.grown, 2);
    KVP_ASSERT_EQ(st.exhausted, 1);
    /* One fits. */
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 3);
    KVP_ASSERT_EQ(b, 6);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 3, &b), KVP_EEXHAUSTED);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 7);
    KVP_ASSERT_EQ(st.grown, 3);
    KVP_ASSERT_EQ(st.exhausted, 2);
    /* With one free block and a need of two, it still would pass the cap. */
    kvptest_free1(pool, 0, 1);
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 32, 3, 0, ids, 8, &n),
                       KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 7);
    kvptest_done(pool);

    /* Without growth the cap does not matter and nothing grows. */
    cfg = kvptest_config(2);
    cfg.max_blocks = 100;
    pool = kvptest_create(&cfg);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 1, &b), KVP_EEXHAUSTED);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 2);
    kvp_pool_destroy(pool);

    /* max_blocks 0 means KVP_MAX_BLOCKS: growth is just enough each time. */
    cfg = kvptest_config(2);
    cfg.grow_on_exhaustion = 1;
    pool = kvptest_create(&cfg);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2);
    KVP_ASSERT_EQ(kvptest_stats(pool).blocks, 3);
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 5, 1, ids, 8), 5);
    st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.blocks, 8);
    KVP_ASSERT_EQ(st.grown, 6);
    KVP_ASSERT_EQ(st.free, 0);
    kvptest_done(pool);
}

/* Growth first refills ids retired by shrink, lowest first. */
static void test_grow_refills_retired(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(6);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.grow_on_exhaustion = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3, 4, 5);
    kvp_block f[3] = {1, 4, 3};
    KVP_ASSERT_OK(kvp_free(pool, f, 3, 1));
    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret));
    KVP_ASSERT_EQ(nret, 3);
    KVP_ASSERT_EQ(kvptest_info(pool, 3).state, KVP_BLOCK_RETIRED);
    kvptest_check(pool);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 1, 3, 4, 6);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.grown, 4);
    KVP_ASSERT_EQ(st.blocks, 7);
    kvptest_done(pool);
}

static void test_reused_counting(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LOWEST);
    kvp_block ids[4];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 4); /* 0, 1 */
    KVP_ASSERT_EQ(kvptest_stats(pool).reused, 0);
    kvptest_free1(pool, 0, 1);
    /* Block 0 (reused) and 2 (new). */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 4), 2);
    KVP_ASSERT_EQ(ids[0], 0);
    KVP_ASSERT_EQ(ids[1], 2);
    KVP_ASSERT_EQ(kvptest_stats(pool).reused, 1);
    kvp_block all[3] = {0, 1, 2};
    KVP_ASSERT_OK(kvp_free(pool, all, 3, 1));
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 0, 1, 2, 3);
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.reused, 4);
    KVP_ASSERT_EQ(st.blocks_allocated, 8);
    KVP_ASSERT_EQ(kvptest_info(pool, 3).ever_allocated, 1);
    kvptest_done(pool);
}

/* ---- null block --------------------------------------------------------- */

static void test_null_block(void **state)
{
    (void)state;
    const kvp_reuse orders[3] = {KVP_REUSE_LIFO, KVP_REUSE_LOWEST, KVP_REUSE_FIFO};
    for (int o = 0; o < 3; o++) {
        kvp_config cfg = kvptest_config(4);
        cfg.null_block = 1;
        cfg.reuse = orders[o];
        kvp_pool *pool = kvptest_create(&cfg);
        kvp_block_info info = kvptest_info(pool, 0);
        KVP_ASSERT_EQ(info.is_null, 1);
        KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
        KVP_ASSERT_EQ(kvptest_info(pool, 1).is_null, 0);
        KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);
        kvp_stats st = kvptest_stats(pool);
        KVP_ASSERT_EQ(st.blocks, 4);
        KVP_ASSERT_EQ(st.in_use, 1);
        KVP_ASSERT_EQ(st.free, 3);

        kvp_block ids[4];
        size_t n = kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 4);
        KVP_ASSERT_EQ(n, 3);
        for (size_t i = 0; i < n; i++)
            assert_true(ids[i] != 0);
        kvp_block b;
        KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 1, &b), KVP_EEXHAUSTED);
        kvp_block z = 0;
        kvp_hash h = kvptest_hash(5);
        KVP_ASSERT_REFUSED(pool, kvp_free(pool, &z, 1, KVP_ANON), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_free(pool, &z, 1, 1), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_publish(pool, 0, &h), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_take_id(pool, 0, 1), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_claim(pool, 0, 1), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 0, 1), KVP_EINVAL);
        KVP_ASSERT_REFUSED(pool, kvp_unpublish(pool, 0), KVP_EINVAL);

        /* Free everything, several rounds: still never handed out. */
        size_t n_freed = 0;
        KVP_ASSERT_OK(kvp_free_owner(pool, 1, &n_freed));
        KVP_ASSERT_EQ(n_freed, 3);
        for (int round = 0; round < 3; round++) {
            n = kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 2, ids, 4);
            for (size_t i = 0; i < n; i++)
                assert_true(ids[i] != 0);
            KVP_ASSERT_OK(kvp_free_owner(pool, 2, NULL));
        }
        /* The null block alone in use does not block a reset. */
        KVP_ASSERT_OK(kvp_reset_prefix_cache(pool));
        /* Shrink never retires it; retire_top reaching it is refused. */
        uint32_t nret = 0;
        KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 0, &nret));
        KVP_ASSERT_EQ(nret, 3);
        KVP_ASSERT_EQ(kvptest_info(pool, 0).is_null, 1);
        kvp_block r = 7, m = 7;
        KVP_ASSERT_REFUSED(pool, kvp_retire_top(pool, &r, &m), KVP_EINVAL);
        st = kvptest_stats(pool);
        KVP_ASSERT_EQ(st.blocks, 1);
        KVP_ASSERT_EQ(st.in_use, 1);
        kvptest_done(pool);
    }
}

/* ---- separate K and V streams ------------------------------------------ */

static void test_separate_kv(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(7);
    cfg.separate_kv = 1;
    cfg.reuse = KVP_REUSE_LOWEST;
    kvp_pool *pool = kvptest_create(&cfg);
    /* K gets [0, ceil(7/2)) = [0,4), V [4,7). */
    for (kvp_block b = 0; b < 7; b++)
        KVP_ASSERT_EQ(kvptest_info(pool, b).stream, b < 4 ? KVP_STREAM_K : KVP_STREAM_V);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 4);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 3);
    uint32_t cnt;
    KVP_ASSERT_REFUSED(pool, kvp_free_count(pool, KVP_STREAM_SHARED, &cnt), KVP_EINVAL);
    kvp_block b;
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 1, &b), KVP_EINVAL);
    kvp_block ids[8];
    size_t n;
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 16, 1, 0, ids, 8, &n),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, (kvp_stream)3, 1, &b), KVP_EINVAL);

    /* Streams are independent. */
    n = kvptest_alloc(pool, KVP_STREAM_K, 64, 1, ids, 8);
    KVP_ASSERT_EQ(n, 4);
    for (size_t i = 0; i < n; i++)
        KVP_ASSERT_EQ(ids[i], i);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 0);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 3);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_K, 1, &b), KVP_EEXHAUSTED);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_V, 1, 4, 5);
    kvptest_free1(pool, 2, 1);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 1);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_V, 1, 6);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_V, 1, &b), KVP_EEXHAUSTED);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_K, 1, 2);

    /* Each stream has its own index. */
    kvp_hash h = kvptest_hash(42);
    KVP_ASSERT_OK(kvp_publish(pool, 1, &h));
    kvp_block out = KVP_NO_BLOCK;
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_K, &h, &out));
    KVP_ASSERT_EQ(out, 1);
    KVP_ASSERT_STATUS(kvp_lookup(pool, KVP_STREAM_V, &h, &out), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_publish(pool, 5, &h));
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_V, &h, &out));
    KVP_ASSERT_EQ(out, 5);
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_K, &h, &out));
    KVP_ASSERT_EQ(out, 1);
    KVP_ASSERT_REFUSED(pool, kvp_lookup(pool, KVP_STREAM_SHARED, &h, &out), KVP_EINVAL);

    /* Extend adds to the named stream only. */
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_V, 2, &added));
    KVP_ASSERT_EQ(added, 2);
    KVP_ASSERT_EQ(kvptest_info(pool, 7).stream, KVP_STREAM_V);
    KVP_ASSERT_EQ(kvptest_info(pool, 8).stream, KVP_STREAM_V);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 2);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 0);
    KVP_ASSERT_REFUSED(pool, kvp_extend(pool, KVP_STREAM_SHARED, 1, &added), KVP_EINVAL);
    kvptest_done(pool);

    /* Growth on exhaustion grows the exhausted stream. */
    cfg = kvptest_config(4);
    cfg.separate_kv = 1;
    cfg.grow_on_exhaustion = 1;
    cfg.reuse = KVP_REUSE_LOWEST;
    pool = kvptest_create(&cfg);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_V, 1, 2, 3, 4);
    KVP_ASSERT_EQ(kvptest_info(pool, 4).stream, KVP_STREAM_V);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 2);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 0);
    KVP_ASSERT_EQ(kvptest_stats(pool).grown, 1);
    kvptest_done(pool);
}

/* With one shared list K, V and SHARED all name it. */
static void test_shared_stream_aliases(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(6, KVP_REUSE_LOWEST);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_K, 1, 0);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_V, 1, 1);
    KVPTEST_EXPECT_TAKES(pool, KVP_STREAM_SHARED, 1, 2);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_K), 3);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_V), 3);
    KVP_ASSERT_EQ(kvptest_free_count(pool, KVP_STREAM_SHARED), 3);
    for (kvp_block b = 0; b < 6; b++)
        KVP_ASSERT_EQ(kvptest_info(pool, b).stream, KVP_STREAM_SHARED);
    kvp_hash h = kvptest_hash(9);
    KVP_ASSERT_OK(kvp_publish(pool, 1, &h));
    const kvp_stream ss[3] = {KVP_STREAM_SHARED, KVP_STREAM_K, KVP_STREAM_V};
    for (int i = 0; i < 3; i++) {
        kvp_block out = KVP_NO_BLOCK;
        KVP_ASSERT_OK(kvp_lookup(pool, ss[i], &h, &out));
        KVP_ASSERT_EQ(out, 1);
    }
    uint32_t cnt;
    kvp_block b;
    KVP_ASSERT_REFUSED(pool, kvp_free_count(pool, (kvp_stream)3, &cnt), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_take(pool, (kvp_stream)-1, 1, &b), KVP_EINVAL);
    kvptest_done(pool);
}

/* ---- fill and fragmentation -------------------------------------------- */

static void test_set_fill_fragmentation(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp_block ids[4];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 64, 1, ids, 4); /* 0..3 */
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    /* fill, expected fragmented count after it */
    static const struct { kvp_block id; uint32_t fill; uint64_t frag; } steps[] = {
        {0, 5, 1},  {0, 6, 1},  {1, 16, 1}, {1, 15, 2}, {2, 1, 3},  {0, 16, 2},
        {0, 0, 2},  {1, 0, 1},  {2, 16, 0}, {3, 16, 0}, {3, 8, 1},  {3, 8, 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
        KVP_ASSERT_OK(kvp_set_fill(pool, steps[i].id, steps[i].fill));
        KVP_ASSERT_EQ(kvptest_info(pool, steps[i].id).fill, steps[i].fill);
        kvp_stats st = kvptest_stats(pool);
        if (st.fragmented != steps[i].frag)
            fail_msg("step %zu: set_fill(%u, %u): fragmented %llu, expected %llu", i,
                     (unsigned)steps[i].id, (unsigned)steps[i].fill,
                     (unsigned long long)st.fragmented,
                     (unsigned long long)steps[i].frag);
        double want = (double)steps[i].frag / 8.0;
        if (st.fragmentation != want)
            fail_msg("step %zu: fragmentation %g, expected %g", i, st.fragmentation, want);
        kvptest_check(pool);
    }
    /* Block 3 is fragmented (8/16); freeing it removes it from the count. */
    KVP_ASSERT_OK(kvp_set_fill(pool, 0, 3));
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 2);
    kvptest_free1(pool, 3, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 1);
    /* A shared block counts once; freeing one reference keeps it. */
    KVP_ASSERT_OK(kvp_claim(pool, 0, 2));
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 1);
    kvptest_free1(pool, 0, 1);
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 1);
    KVP_ASSERT_OK(kvp_free_owner(pool, 2, NULL));
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    /* Errors. */
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 1, 17), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 1, UINT32_MAX), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 3, 1), KVP_EDOUBLEFREE);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 7, 1), KVP_EDOUBLEFREE);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, 8, 1), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(NULL, 1, 1), KVP_EINVAL);
    KVP_ASSERT_OK(kvp_set_fill(pool, 1, 16)); /* block_size itself is allowed */
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    kvptest_done(pool);

    /* block_size 1: no fill value is fragmented. */
    kvp_config cfg = kvptest_config(2);
    cfg.block_size = 1;
    pool = kvptest_create(&cfg);
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_OK(kvp_set_fill(pool, b, 1));
    KVP_ASSERT_EQ(kvptest_stats(pool).fragmented, 0);
    KVP_ASSERT_REFUSED(pool, kvp_set_fill(pool, b, 2), KVP_EINVAL);
    kvptest_done(pool);
}

/* ---- block_get ---------------------------------------------------------- */

static void test_block_get(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(4, KVP_REUSE_LOWEST);
    kvp_block_info info = kvptest_info(pool, 3);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(info.ref_count, 0);
    KVP_ASSERT_EQ(info.anon_refs, 0);
    KVP_ASSERT_EQ(info.ever_allocated, 0);
    KVP_ASSERT_EQ(info.published, 0);
    KVP_ASSERT_EQ(info.is_null, 0);
    KVP_ASSERT_EQ(info.owner, KVP_ANON);
    KVP_ASSERT_EQ(info.stream, KVP_STREAM_SHARED);

    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 9);
    KVP_ASSERT_OK(kvp_set_fill(pool, b, 4));
    kvp_hash h = kvptest_hash(0x0102030405060708ull);
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    info = kvptest_info(pool, b);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_IN_USE);
    KVP_ASSERT_EQ(info.published, 1);
    assert_memory_equal(info.hash.b, h.b, 32);
    KVP_ASSERT_EQ(info.fill, 4);
    KVP_ASSERT_EQ(info.owner, 9);
    kvptest_free1(pool, b, 9);
    info = kvptest_info(pool, b);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_CACHED);
    KVP_ASSERT_EQ(info.published, 1);
    assert_memory_equal(info.hash.b, h.b, 32);
    KVP_ASSERT_EQ(info.ref_count, 0);
    KVP_ASSERT_EQ(info.ever_allocated, 1);
    KVP_ASSERT_EQ(info.fill, 4); /* a cached block keeps its content */

    /* A vacant block holds nothing: its fill reads 0 once freed. */
    kvp_block c = kvptest_take(pool, KVP_STREAM_SHARED, 9);
    KVP_ASSERT_OK(kvp_set_fill(pool, c, 5));
    kvptest_free1(pool, c, 9);
    info = kvptest_info(pool, c);
    KVP_ASSERT_EQ(info.state, KVP_BLOCK_VACANT);
    KVP_ASSERT_EQ(info.fill, 0);
    KVP_ASSERT_EQ(info.ever_allocated, 1);

    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 2, &nret));
    KVP_ASSERT_EQ(nret, 2); /* vacant 3 and 2 */
    KVP_ASSERT_EQ(kvptest_info(pool, 3).state, KVP_BLOCK_RETIRED);
    KVP_ASSERT_EQ(kvptest_info(pool, 2).state, KVP_BLOCK_RETIRED);
    KVP_ASSERT_EQ(kvptest_info(pool, 1).state, KVP_BLOCK_VACANT);
    KVP_ASSERT_REFUSED(pool, kvp_block_get(pool, 4, &info), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_block_get(pool, KVP_NO_BLOCK, &info), KVP_ERANGE);
    KVP_ASSERT_REFUSED(pool, kvp_block_get(pool, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_block_get(NULL, 0, &info), KVP_EINVAL);
    kvptest_done(pool);
}

/* ---- prefault ------------------------------------------------------------ */

/* Resident set of this process, in KiB (VmRSS). */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    long kb = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* prefault changes when pages are touched, nothing else: two pools, one
 * with it, give the same fingerprint after every step of the same calls
 * (growth included), and the prefaulted one's tables are resident from
 * creation on: at least the record and digest arrays, 80 bytes per block. */
static void test_prefault(void **state)
{
    (void)state;
    kvp_pool *pool[2];
    for (int i = 0; i < 2; i++) {
        kvp_config cfg = kvptest_config(i ? 65536 : 64);
        cfg.prefault = i;
        cfg.grow_on_exhaustion = 1;
        long before = rss_kib();
        pool[i] = kvptest_create(&cfg);
        long grew = rss_kib() - before;
        if (i && before > 0 && grew < 65536 * 80 / 1024) {
            print_error("prefaulted 64K-block pool: RSS grew %ld KiB, expected %d or more\n",
                        grew, 65536 * 80 / 1024);
            fail();
        }
        kvp_pool_destroy(pool[i]);
        cfg.num_blocks = 64;
        pool[i] = kvptest_create(&cfg);
    }
    kvp_block ids[2][96];
    for (int step = 0; step < 6; step++)
        for (int i = 0; i < 2; i++) {
            uint64_t fp[2];
            switch (step) {
            case 0: /* past the 64 blocks: growth */
                KVP_ASSERT_EQ(kvptest_alloc(pool[i], KVP_STREAM_SHARED, 96 * 16, 7, ids[i], 96),
                              96);
                break;
            case 1:
                for (int b = 0; b < 40; b++)
                    kvptest_publish(pool[i], ids[i][b], 1000 + (uint64_t)b);
                break;
            case 2:
                KVP_ASSERT_OK(kvp_free_owner(pool[i], 7, NULL));
                break;
            case 3:
                KVP_ASSERT_EQ(kvptest_alloc(pool[i], KVP_STREAM_SHARED, 80 * 16, 8, ids[i], 96),
                              80);
                break;
            case 4:
                KVP_ASSERT_OK(kvp_shrink(pool[i], KVP_STREAM_SHARED, 4, NULL));
                break;
            default:
                KVP_ASSERT_OK(kvp_pool_clear(pool[i]));
                break;
            }
            kvptest_check(pool[i]);
            if (i == 1) {
                KVP_ASSERT_OK(kvp_pool_fingerprint(pool[0], &fp[0]));
                KVP_ASSERT_OK(kvp_pool_fingerprint(pool[1], &fp[1]));
                KVP_ASSERT_EQ(fp[0], fp[1]);
            }
        }
    kvp_pool_destroy(pool[0]);
    kvp_pool_destroy(pool[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_reuse_names),
        cmocka_unit_test(test_allocator_hook),
        cmocka_unit_test(test_create_enomem),
        cmocka_unit_test(test_growth_enomem),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_zero_blocks),
        cmocka_unit_test(test_pool_clear),
        cmocka_unit_test(test_pool_clear_variants),
        cmocka_unit_test(test_alloc_basic),
        cmocka_unit_test(test_take_basic),
        cmocka_unit_test(test_take_id),
        cmocka_unit_test(test_free_basic),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_grow_on_exhaustion),
        cmocka_unit_test(test_grow_refills_retired),
        cmocka_unit_test(test_reused_counting),
        cmocka_unit_test(test_null_block),
        cmocka_unit_test(test_separate_kv),
        cmocka_unit_test(test_shared_stream_aliases),
        cmocka_unit_test(test_set_fill_fragmentation),
        cmocka_unit_test(test_block_get),
        cmocka_unit_test(test_prefault),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
