/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_badinput.c — table-driven bad input: every public pool call x each
 * class of bad argument (kvpool.h conventions: "a call that fails changes
 * nothing").
 *
 * Classes: NULL pointers, unknown ids, ids out of range or retired, the null
 * block, double free, freeing another owner's block, wrong or unknown stream
 * (SHARED with separate K/V lists), zero or overflowing counts, format > 255,
 * output buffers too small, bad configurations, busy states.
 *
 * Each row builds a fresh pool in a non-trivial state (blocks in use by
 * several owners, a shared block, an anonymous block, cached and vacant
 * blocks, a retired id, a partly filled block, a history entry), takes the
 * fingerprint, the stats and the history length, makes the call, and asserts
 * the status the header documents, an unchanged fingerprint, unchanged
 * statistics (except `exhausted`) and history, and a passing checker.  Rows
 * expecting KVP_OK are calls that must succeed without changing anything.
 * Every row runs on an unlocked and a thread_safe pool.  All rows run; the
 * failures are listed together at the end.
 *
 * Sequences (kvp_seq_*) and kvp_block_ptr are not covered here.
 */
#include "kvptest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fixtures ------------------------------------------------------- */

/* Fixture S (shared list, null block, LOWEST, 16 blocks):
 *   0        null block
 *   1 2 3    owner A (registered), block 2 has fill 5
 *   4 5      owner B; A also holds a share of 5  (A's list: 1 2 3 5)
 *   6        anonymous
 *   7 8      cached (hashes 107, 108), freed by C
 *   9        owner C, published under 109
 *   10..14   vacant, never used
 *   15       retired
 * Fixture K (separate K/V, LOWEST, 16 blocks: K 0..7, V 8..15):
 *   0 1      K, owner A; 0 published (hash 202) and in use; 1 cached (201)
 *   8 9      V, owner A; 9 published (201) and in use
 *   10       V, anonymous
 */
enum { FX_S = 1, FX_K = 2, FX_ANY = 3 };
#define A 1u
#define B 2u
#define C 3u
#define NOBODY 99u
#define BEYOND 16u
#define RETIRED 15u
#define VACANT 10u
#define CACHED 7u

static kvp_pool *fixture(int which, int thread_safe)
{
    kvp_block ids[16];
    kvp_config cfg = kvptest_config(16);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.thread_safe = thread_safe;
    cfg.history_len = 4;
    if (which == FX_S) {
        cfg.null_block = 1;
        kvp_pool *p = kvptest_create(&cfg);
        KVP_ASSERT_OK(kvp_owner_register(p, A));
        KVP_ASSERT_EQ(kvptest_alloc(p, KVP_STREAM_SHARED, 48, A, ids, 16), 3);
        KVP_ASSERT_EQ(ids[0], 1);
        KVP_ASSERT_EQ(kvptest_alloc(p, KVP_STREAM_SHARED, 32, B, ids, 16), 2);
        KVP_ASSERT_EQ(ids[0], 4);
        KVP_ASSERT_OK(kvp_claim(p, 5, A));
        KVP_ASSERT_EQ(kvptest_take(p, KVP_STREAM_SHARED, KVP_ANON), 6);
        KVP_ASSERT_EQ(kvptest_alloc(p, KVP_STREAM_SHARED, 48, C, ids, 16), 3);
        KVP_ASSERT_EQ(ids[0], 7);
        for (kvp_block b = 7; b <= 9; b++) {
            kvp_hash h = kvptest_hash(100 + b);
            KVP_ASSERT_OK(kvp_publish(p, b, &h));
        }
        KVP_ASSERT_OK(kvp_free(p, ids, 2, C));
        uint32_t nret = 0;
        KVP_ASSERT_OK(kvp_shrink(p, KVP_STREAM_SHARED, 7, &nret));
        KVP_ASSERT_EQ(nret, 1);
        KVP_ASSERT_EQ(kvptest_info(p, RETIRED).state, KVP_BLOCK_RETIRED);
        KVP_ASSERT_OK(kvp_set_fill(p, 2, 5));
        KVP_ASSERT_OK(kvp_stats_snapshot(p));
        kvptest_check(p);
        return p;
    }
    cfg.separate_kv = 1;
    kvp_pool *p = kvptest_create(&cfg);
    KVP_ASSERT_EQ(kvptest_alloc(p, KVP_STREAM_K, 32, A, ids, 16), 2);
    KVP_ASSERT_EQ(kvptest_alloc(p, KVP_STREAM_V, 32, A, ids, 16), 2);
    KVP_ASSERT_EQ(ids[0], 8);
    kvp_hash h201 = kvptest_hash(201), h202 = kvptest_hash(202);
    KVP_ASSERT_OK(kvp_publish(p, 1, &h201));
    KVP_ASSERT_OK(kvp_publish(p, 0, &h202));
    KVP_ASSERT_OK(kvp_publish(p, 9, &h201));
    kvp_block one = 1;
    KVP_ASSERT_OK(kvp_free(p, &one, 1, A));
    KVP_ASSERT_EQ(kvptest_take(p, KVP_STREAM_V, KVP_ANON), 10);
    KVP_ASSERT_OK(kvp_stats_snapshot(p));
    kvptest_check(p);
    return p;
}

/* ---- rows --------------------------------------------------------------- */

static char row_err[512]; /* a row's own extra check failed */

#define ROW_CHECK(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond) && row_err[0] == '\0')                                    \
            snprintf(row_err, sizeof row_err, __VA_ARGS__);                   \
    } while (0)

typedef struct row {
    const char *name;
    int fixtures;
    kvp_status expected;
    kvp_status (*fn)(kvp_pool *p);
} row;

#define ROW(id, fx, exp, ...)                                                 \
    static kvp_status row_fn_##id(kvp_pool *p)                                \
    {                                                                         \
        (void)p;                                                              \
        __VA_ARGS__                                                           \
    }                                                                         \
    static const row row_##id = {#id, fx, exp, row_fn_##id};

static const kvp_pool *const NOPOOL = NULL;
static uint32_t g_tokens[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* Create with a bad config: *out must stay untouched. */
static kvp_status create_with(const kvp_config *cfg)
{
    kvp_pool *sentinel = (kvp_pool *)(uintptr_t)0x5a5a;
    kvp_pool *out = sentinel;
    kvp_status st = kvp_pool_create(cfg, &out);
    if (st == KVP_OK)
        kvp_pool_destroy(out);
    else
        ROW_CHECK(out == sentinel, "failed create wrote *out");
    return st;
}
static void *dummy_alloc(void *u, size_t s) { (void)u; return malloc(s); }
static void dummy_release(void *u, void *p, size_t s) { (void)u; (void)s; free(p); }

/* config / create / clear */
ROW(config_default_null, FX_ANY, KVP_EINVAL, return kvp_config_default(NULL);)
ROW(create_null_cfg, FX_ANY, KVP_EINVAL, return create_with(NULL);)
ROW(create_null_out, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(4); return kvp_pool_create(&c, NULL);)
ROW(create_block_size_0, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(4); c.block_size = 0; return create_with(&c);)
ROW(create_block_size_65536, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(4); c.block_size = 65536; return create_with(&c);)
ROW(create_num_over_max, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(5); c.max_blocks = 4; return create_with(&c);)
ROW(create_num_over_limit, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(KVP_MAX_BLOCKS + 1u); return create_with(&c);)
ROW(create_null_block_no_blocks, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(0); c.null_block = 1; return create_with(&c);)
ROW(create_bad_reuse, FX_ANY, KVP_EINVAL,
    kvp_config c = kvptest_config(4); c.reuse = (kvp_reuse)3; return create_with(&c);)
ROW(create_alloc_missing, FX_ANY, KVP_EINVAL,
    kvp_allocator al = {NULL, dummy_release, NULL};
    kvp_config c = kvptest_config(4); c.allocator = &al; return create_with(&c);)
ROW(create_release_missing, FX_ANY, KVP_EINVAL,
    kvp_allocator al = {dummy_alloc, NULL, NULL};
    kvp_config c = kvptest_config(4); c.allocator = &al; return create_with(&c);)
ROW(pool_clear_null, FX_ANY, KVP_EINVAL, return kvp_pool_clear(NULL);)

/* kvp_alloc */
static kvp_block g_ids[64];
static size_t g_n;
ROW(alloc_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_alloc(NULL, KVP_STREAM_SHARED, 16, A, 0, g_ids, 64, &g_n);)
ROW(alloc_null_ids, FX_S, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_SHARED, 16, A, 0, NULL, 64, &g_n);)
ROW(alloc_null_nout, FX_S, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_SHARED, 16, A, 0, g_ids, 64, NULL);)
ROW(alloc_tokens_zero, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_K, 0, A, 0, g_ids, 64, &g_n);)
ROW(alloc_tokens_overflow, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_K, UINT64_MAX, A, 0, g_ids, 64, &g_n);)
ROW(alloc_bad_stream, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, (kvp_stream)3, 16, A, 0, g_ids, 64, &g_n);)
ROW(alloc_negative_stream, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, (kvp_stream)-1, 16, A, 0, g_ids, 64, &g_n);)
ROW(alloc_format_256, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_K, 16, A, 256, g_ids, 64, &g_n);)
ROW(alloc_format_uint_max, FX_ANY, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_K, 16, A, (unsigned)-1, g_ids, 64, &g_n);)
ROW(alloc_cap_small, FX_ANY, KVP_ESPACE,
    g_n = 0;
    kvp_status st = kvp_alloc(p, KVP_STREAM_K, 33, A, 0, g_ids, 2, &g_n);
    ROW_CHECK(g_n == 3, "*n_out = %zu, expected 3", g_n); return st;)
ROW(alloc_cap_zero, FX_ANY, KVP_ESPACE,
    g_n = 0;
    kvp_status st = kvp_alloc(p, KVP_STREAM_K, 1, NOBODY, 0, g_ids, 0, &g_n);
    ROW_CHECK(g_n == 1, "*n_out = %zu, expected 1", g_n); return st;)
ROW(alloc_exhausted, FX_S, KVP_EEXHAUSTED,
    return kvp_alloc(p, KVP_STREAM_SHARED, 16 * 8, NOBODY, 0, g_ids, 64, &g_n);)
ROW(alloc_exhausted_registered, FX_S, KVP_EEXHAUSTED,
    return kvp_alloc(p, KVP_STREAM_SHARED, 16 * 8, A, 0, g_ids, 64, &g_n);)
ROW(alloc_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_alloc(p, KVP_STREAM_SHARED, 16, A, 0, g_ids, 64, &g_n);)
ROW(alloc_exhausted_v_only, FX_K, KVP_EEXHAUSTED,
    return kvp_alloc(p, KVP_STREAM_V, 16 * 6, A, 0, g_ids, 64, &g_n);)

/* kvp_take */
static kvp_block g_b;
ROW(take_null_pool, FX_ANY, KVP_EINVAL, return kvp_take(NULL, KVP_STREAM_K, A, &g_b);)
ROW(take_null_out, FX_ANY, KVP_EINVAL, return kvp_take(p, KVP_STREAM_K, A, NULL);)
ROW(take_bad_stream, FX_ANY, KVP_EINVAL, return kvp_take(p, (kvp_stream)7, A, &g_b);)
ROW(take_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_take(p, KVP_STREAM_SHARED, A, &g_b);)

/* kvp_take_hinted: kvp_take's refusals, and the hint is left as it was. */
static uint32_t g_hint;
#define HINTED(stream, out)                                                                  \
    g_hint = 5;                                                                              \
    kvp_status st = kvp_take_hinted(p, stream, A, &g_hint, out);                             \
    ROW_CHECK(g_hint == 5, "hint %" PRIu32 " after a refused call, expected 5", g_hint);     \
    return st;
ROW(take_hinted_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_take_hinted(NULL, KVP_STREAM_K, A, &g_hint, &g_b);)
ROW(take_hinted_null_hint, FX_ANY, KVP_EINVAL,
    return kvp_take_hinted(p, KVP_STREAM_K, A, NULL, &g_b);)
ROW(take_hinted_null_out, FX_ANY, KVP_EINVAL, HINTED(KVP_STREAM_K, NULL))
ROW(take_hinted_bad_stream, FX_ANY, KVP_EINVAL, HINTED((kvp_stream)7, &g_b))
ROW(take_hinted_shared_on_separate, FX_K, KVP_EINVAL, HINTED(KVP_STREAM_SHARED, &g_b))

/* kvp_take_each: refused before any take (n_taken 0, the hints as they
 * were); no takes at all change nothing either.  (A take that fails part
 * way is test_owner's.) */
static kvp_owner g_owners[2] = {A, NOBODY};
static uint32_t g_rows[2] = {1, 0}, g_hints[2];
static size_t g_nt;
#define EACH(pool, stream, owners, n, out)                                                   \
    g_hints[0] = g_hints[1] = 5;                                                             \
    g_nt = 77;                                                                               \
    kvp_status st = kvp_take_each(pool, stream, owners, g_hints, g_rows, n, out, &g_nt);     \
    ROW_CHECK(g_nt == 0, "n_taken %zu after a refused call, expected 0", g_nt);              \
    ROW_CHECK(g_hints[0] == 5 && g_hints[1] == 5, "hints %" PRIu32 ", %" PRIu32              \
              " after a refused call, expected 5", g_hints[0], g_hints[1]);                  \
    return st;
ROW(take_each_null_pool, FX_ANY, KVP_EINVAL, EACH(NULL, KVP_STREAM_K, g_owners, 1, &g_b))
ROW(take_each_null_n_taken, FX_ANY, KVP_EINVAL,
    return kvp_take_each(p, KVP_STREAM_K, g_owners, NULL, NULL, 1, &g_b, NULL);)
ROW(take_each_null_owners, FX_ANY, KVP_EINVAL, EACH(p, KVP_STREAM_K, NULL, 1, &g_b))
ROW(take_each_null_out, FX_ANY, KVP_EINVAL, EACH(p, KVP_STREAM_K, g_owners, 1, NULL))
ROW(take_each_bad_stream, FX_ANY, KVP_EINVAL, EACH(p, (kvp_stream)7, g_owners, 1, &g_b))
ROW(take_each_bad_stream_none, FX_ANY, KVP_EINVAL, EACH(p, (kvp_stream)7, NULL, 0, NULL))
ROW(take_each_shared_on_separate, FX_K, KVP_EINVAL,
    EACH(p, KVP_STREAM_SHARED, g_owners, 1, &g_b))
ROW(take_each_none, FX_K, KVP_OK, EACH(p, KVP_STREAM_K, NULL, 0, NULL))

/* kvp_take_id */
ROW(take_id_null_pool, FX_ANY, KVP_EINVAL, return kvp_take_id(NULL, 3, A);)
ROW(take_id_null_block, FX_S, KVP_EINVAL, return kvp_take_id(p, 0, A);)
ROW(take_id_beyond, FX_ANY, KVP_ERANGE, return kvp_take_id(p, BEYOND, A);)
ROW(take_id_no_block, FX_ANY, KVP_ERANGE, return kvp_take_id(p, KVP_NO_BLOCK, A);)
ROW(take_id_retired, FX_S, KVP_ERANGE, return kvp_take_id(p, RETIRED, A);)
ROW(take_id_in_use, FX_ANY, KVP_EBUSY, return kvp_take_id(p, 9, A);)
ROW(take_id_shared_block, FX_S, KVP_EBUSY, return kvp_take_id(p, 5, NOBODY);)

/* kvp_free */
static kvp_status free_list(kvp_pool *p, kvp_owner o, const kvp_block *ids, size_t n)
{
    return kvp_free(p, ids, n, o);
}
#define FREE(o, ...)                                                          \
    {                                                                         \
        const kvp_block l_[] = {__VA_ARGS__};                                 \
        return free_list(p, (o), l_, ARRAY_LEN(l_));                          \
    }
ROW(free_null_pool, FX_ANY, KVP_EINVAL, const kvp_block l[1] = {2};
    return kvp_free(NULL, l, 1, A);)
ROW(free_null_ids, FX_ANY, KVP_EINVAL, return kvp_free(p, NULL, 1, A);)
ROW(free_null_ids_zero_n, FX_ANY, KVP_OK, return kvp_free(p, NULL, 0, A);)
ROW(free_null_block, FX_S, KVP_EINVAL, FREE(KVP_ANON, 0);)
ROW(free_null_block_owner, FX_S, KVP_EINVAL, FREE(A, 0);)
ROW(free_beyond, FX_ANY, KVP_ERANGE, FREE(A, BEYOND);)
ROW(free_no_block, FX_ANY, KVP_ERANGE, FREE(A, KVP_NO_BLOCK);)
ROW(free_retired, FX_S, KVP_ERANGE, FREE(C, RETIRED);)
ROW(free_vacant_never_used, FX_ANY, KVP_EDOUBLEFREE, FREE(A, 12);)
ROW(free_cached, FX_S, KVP_EDOUBLEFREE, FREE(C, CACHED);)
ROW(free_cached_k, FX_K, KVP_EDOUBLEFREE, FREE(A, 1);)
ROW(free_others_block, FX_S, KVP_ENOTOWNER, FREE(A, 4);)
ROW(free_anon_on_owned, FX_S, KVP_ENOTOWNER, FREE(KVP_ANON, 1);)
ROW(free_owner_on_anon, FX_S, KVP_ENOTOWNER, FREE(A, 6);)
ROW(free_unknown_owner, FX_ANY, KVP_ENOTOWNER, FREE(NOBODY, 9);)
ROW(free_mixed_not_owner, FX_S, KVP_ENOTOWNER, FREE(A, 1, 2, 4);)
ROW(free_mixed_double, FX_S, KVP_EDOUBLEFREE, FREE(A, 1, 2, 10);)
ROW(free_shared_twice, FX_S, KVP_ENOTOWNER, FREE(A, 5, 5);)
ROW(free_last_bad, FX_S, KVP_ERANGE, FREE(A, 1, 2, 3, 5, BEYOND);)

/* kvp_free_owner */
ROW(free_owner_null_pool, FX_ANY, KVP_EINVAL, return kvp_free_owner(NULL, A, NULL);)
ROW(free_owner_anon, FX_ANY, KVP_EINVAL, return kvp_free_owner(p, KVP_ANON, NULL);)
ROW(free_owner_unknown, FX_ANY, KVP_ENOTFOUND,
    size_t n = 0; return kvp_free_owner(p, NOBODY, &n);)

/* owner register / release / blocks */
ROW(register_null_pool, FX_ANY, KVP_EINVAL, return kvp_owner_register(NULL, 50);)
ROW(register_anon, FX_ANY, KVP_EINVAL, return kvp_owner_register(p, KVP_ANON);)
ROW(register_registered, FX_S, KVP_EOWNERACTIVE, return kvp_owner_register(p, A);)
ROW(register_holding, FX_S, KVP_EOWNERACTIVE, return kvp_owner_register(p, B);)
ROW(register_holding_k, FX_K, KVP_EOWNERACTIVE, return kvp_owner_register(p, A);)
ROW(release_null_pool, FX_ANY, KVP_EINVAL, return kvp_owner_release(NULL, A);)
ROW(release_anon, FX_ANY, KVP_EINVAL, return kvp_owner_release(p, KVP_ANON);)
ROW(release_unknown, FX_ANY, KVP_ENOTFOUND, return kvp_owner_release(p, NOBODY);)
ROW(release_holding, FX_ANY, KVP_EBUSY, return kvp_owner_release(p, A);)
ROW(release_holding_unregistered, FX_S, KVP_EBUSY, return kvp_owner_release(p, B);)
ROW(owner_blocks_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_owner_blocks(NULL, A, g_ids, 64, &g_n);)
ROW(owner_blocks_null_nout, FX_ANY, KVP_EINVAL,
    return kvp_owner_blocks(p, A, g_ids, 64, NULL);)
ROW(owner_blocks_null_ids, FX_ANY, KVP_EINVAL,
    return kvp_owner_blocks(p, A, NULL, 4, &g_n);)
ROW(owner_blocks_anon, FX_ANY, KVP_EINVAL,
    return kvp_owner_blocks(p, KVP_ANON, g_ids, 64, &g_n);)
ROW(owner_blocks_unknown, FX_ANY, KVP_ENOTFOUND,
    return kvp_owner_blocks(p, NOBODY, g_ids, 64, &g_n);)
ROW(owner_blocks_cap_small, FX_S, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_owner_blocks(p, A, g_ids, 3, &g_n);
    ROW_CHECK(g_n == 4, "*n_out = %zu, expected 4", g_n); return st;)
ROW(owner_blocks_cap_zero, FX_S, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_owner_blocks(p, A, NULL, 0, &g_n);
    ROW_CHECK(g_n == 4, "*n_out = %zu, expected 4", g_n); return st;)
ROW(owner_blocks_cap_zero_k, FX_K, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_owner_blocks(p, A, NULL, 0, &g_n);
    ROW_CHECK(g_n == 3, "*n_out = %zu, expected 3", g_n); return st;)

/* kvp_free_count */
static uint32_t g_u;
ROW(free_count_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_free_count(NULL, KVP_STREAM_K, &g_u);)
ROW(free_count_null_out, FX_ANY, KVP_EINVAL, return kvp_free_count(p, KVP_STREAM_K, NULL);)
ROW(free_count_bad_stream, FX_ANY, KVP_EINVAL,
    return kvp_free_count(p, (kvp_stream)3, &g_u);)
ROW(free_count_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_free_count(p, KVP_STREAM_SHARED, &g_u);)

/* kvp_peek_next */
static kvp_block g_next;
ROW(peek_next_null_pool, FX_ANY, KVP_EINVAL, return kvp_peek_next(NULL, KVP_STREAM_K, &g_next);)
ROW(peek_next_null_out, FX_ANY, KVP_EINVAL, return kvp_peek_next(p, KVP_STREAM_K, NULL);)
ROW(peek_next_bad_stream, FX_ANY, KVP_EINVAL,
    return kvp_peek_next(p, (kvp_stream)3, &g_next);)
ROW(peek_next_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_peek_next(p, KVP_STREAM_SHARED, &g_next);)

/* kvp_set_fill */
ROW(set_fill_null_pool, FX_ANY, KVP_EINVAL, return kvp_set_fill(NULL, 2, 1);)
ROW(set_fill_null_block, FX_S, KVP_EINVAL, return kvp_set_fill(p, 0, 1);)
ROW(set_fill_over_block_size, FX_ANY, KVP_EINVAL, return kvp_set_fill(p, 9, 17);)
ROW(set_fill_uint_max, FX_ANY, KVP_EINVAL, return kvp_set_fill(p, 9, UINT32_MAX);)
ROW(set_fill_beyond, FX_ANY, KVP_ERANGE, return kvp_set_fill(p, BEYOND, 1);)
ROW(set_fill_retired, FX_S, KVP_ERANGE, return kvp_set_fill(p, RETIRED, 1);)
ROW(set_fill_vacant, FX_ANY, KVP_EDOUBLEFREE, return kvp_set_fill(p, 12, 1);)
ROW(set_fill_cached, FX_S, KVP_EDOUBLEFREE, return kvp_set_fill(p, CACHED, 1);)

/* kvp_block_get */
static kvp_block_info g_info;
ROW(block_get_null_pool, FX_ANY, KVP_EINVAL, return kvp_block_get(NULL, 1, &g_info);)
ROW(block_get_null_out, FX_ANY, KVP_EINVAL, return kvp_block_get(p, 1, NULL);)
ROW(block_get_beyond, FX_ANY, KVP_ERANGE, return kvp_block_get(p, BEYOND, &g_info);)
ROW(block_get_no_block, FX_ANY, KVP_ERANGE, return kvp_block_get(p, KVP_NO_BLOCK, &g_info);)
ROW(block_get_retired, FX_S, KVP_OK,
    kvp_status st = kvp_block_get(p, RETIRED, &g_info);
    ROW_CHECK(st != KVP_OK || g_info.state == KVP_BLOCK_RETIRED, "state %d, expected "
              "KVP_BLOCK_RETIRED", g_info.state); return st;)

/* kvp_claim */
ROW(claim_null_pool, FX_ANY, KVP_EINVAL, return kvp_claim(NULL, 9, A);)
ROW(claim_null_block, FX_S, KVP_EINVAL, return kvp_claim(p, 0, A);)
ROW(claim_beyond, FX_ANY, KVP_ERANGE, return kvp_claim(p, BEYOND, A);)
ROW(claim_retired, FX_S, KVP_ERANGE, return kvp_claim(p, RETIRED, A);)
ROW(claim_vacant, FX_ANY, KVP_ENOTFOUND, return kvp_claim(p, 12, A);)

/* kvp_publish */
ROW(publish_null_pool, FX_ANY, KVP_EINVAL,
    kvp_hash h = kvptest_hash(1); return kvp_publish(NULL, 2, &h);)
ROW(publish_null_hash, FX_ANY, KVP_EINVAL, return kvp_publish(p, 9, NULL);)
ROW(publish_null_block, FX_S, KVP_EINVAL,
    kvp_hash h = kvptest_hash(1); return kvp_publish(p, 0, &h);)
ROW(publish_beyond, FX_ANY, KVP_ERANGE,
    kvp_hash h = kvptest_hash(1); return kvp_publish(p, BEYOND, &h);)
ROW(publish_retired, FX_S, KVP_ERANGE,
    kvp_hash h = kvptest_hash(1); return kvp_publish(p, RETIRED, &h);)
ROW(publish_vacant, FX_ANY, KVP_EDOUBLEFREE,
    kvp_hash h = kvptest_hash(1); return kvp_publish(p, 12, &h);)
ROW(publish_cached_same_hash, FX_S, KVP_EDOUBLEFREE,
    kvp_hash h = kvptest_hash(107); return kvp_publish(p, CACHED, &h);)
ROW(publish_other_hash, FX_ANY, KVP_EBUSY,
    kvp_hash h = kvptest_hash(1); return kvp_publish(p, 9, &h);)
ROW(publish_same_hash_noop, FX_S, KVP_OK,
    kvp_hash h = kvptest_hash(109); return kvp_publish(p, 9, &h);)
ROW(publish_same_hash_noop_k, FX_K, KVP_OK,
    kvp_hash h = kvptest_hash(201); return kvp_publish(p, 9, &h);)

/* kvp_claim_prefix: refused before any lookup, *n_hit untouched; a miss on
 * the first hash and an empty chain claim nothing */
static kvp_hash g_chain[2];
#define CLAIM_PREFIX(pool, stream, hashes, n, out, n_hit)                                 \
    g_n = 77;                                                                             \
    kvp_status st = kvp_claim_prefix(pool, stream, hashes, n, A, out, n_hit);             \
    ROW_CHECK(g_n == (st == KVP_OK ? 0u : 77u), "*n_hit %zu", g_n);                        \
    return st;
ROW(claim_prefix_null_pool, FX_ANY, KVP_EINVAL,
    CLAIM_PREFIX(NULL, KVP_STREAM_K, g_chain, 1, g_ids, &g_n))
ROW(claim_prefix_null_n_hit, FX_ANY, KVP_EINVAL,
    CLAIM_PREFIX(p, KVP_STREAM_K, g_chain, 1, g_ids, NULL))
ROW(claim_prefix_null_hashes, FX_ANY, KVP_EINVAL,
    CLAIM_PREFIX(p, KVP_STREAM_K, NULL, 1, g_ids, &g_n))
ROW(claim_prefix_null_out, FX_ANY, KVP_EINVAL,
    CLAIM_PREFIX(p, KVP_STREAM_K, g_chain, 1, NULL, &g_n))
ROW(claim_prefix_bad_stream, FX_ANY, KVP_EINVAL,
    CLAIM_PREFIX(p, (kvp_stream)3, g_chain, 1, g_ids, &g_n))
ROW(claim_prefix_shared_on_separate, FX_K, KVP_EINVAL,
    g_chain[0] = kvptest_hash(201);
    CLAIM_PREFIX(p, KVP_STREAM_SHARED, g_chain, 1, g_ids, &g_n))
ROW(claim_prefix_first_misses, FX_ANY, KVP_OK,
    g_chain[0] = kvptest_hash(4242); g_chain[1] = kvptest_hash(109);
    CLAIM_PREFIX(p, KVP_STREAM_V, g_chain, 2, g_ids, &g_n))
ROW(claim_prefix_empty, FX_ANY, KVP_OK,
    CLAIM_PREFIX(p, KVP_STREAM_V, NULL, 0, NULL, &g_n))

/* kvp_publish_each: refused before any publish (*n_published untouched), or
 * by its first block (*n_published 0) */
static kvp_block g_pub[2];
#define PUBLISH_EACH(pool, ids, hashes, n, first)                                         \
    g_n = 77;                                                                             \
    g_pub[0] = (first);                                                                   \
    g_pub[1] = 9;                                                                         \
    g_chain[0] = kvptest_hash(1);                                                         \
    g_chain[1] = kvptest_hash(2);                                                         \
    kvp_status st = kvp_publish_each(pool, ids, hashes, n, &g_n);                         \
    ROW_CHECK(g_n == (st == KVP_EINVAL && !(pool && (first) == 0) ? 77u : 0u),            \
              "*n_published %zu", g_n);                                                   \
    return st;
ROW(publish_each_null_pool, FX_ANY, KVP_EINVAL, PUBLISH_EACH(NULL, g_pub, g_chain, 2, 9))
ROW(publish_each_null_ids, FX_ANY, KVP_EINVAL, PUBLISH_EACH(p, NULL, g_chain, 2, 9))
ROW(publish_each_null_hashes, FX_ANY, KVP_EINVAL, PUBLISH_EACH(p, g_pub, NULL, 2, 9))
ROW(publish_each_null_block, FX_S, KVP_EINVAL, PUBLISH_EACH(p, g_pub, g_chain, 2, 0))
ROW(publish_each_beyond, FX_ANY, KVP_ERANGE, PUBLISH_EACH(p, g_pub, g_chain, 2, BEYOND))
ROW(publish_each_vacant, FX_ANY, KVP_EDOUBLEFREE, PUBLISH_EACH(p, g_pub, g_chain, 2, 12))
ROW(publish_each_other_hash, FX_ANY, KVP_EBUSY, PUBLISH_EACH(p, g_pub + 1, g_chain, 1, 9))
ROW(publish_each_empty, FX_ANY, KVP_OK, PUBLISH_EACH(p, NULL, NULL, 0, 9))

/* kvp_lookup */
static kvp_hash g_h109;
ROW(lookup_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_lookup(NULL, KVP_STREAM_K, &g_h109, &g_b);)
ROW(lookup_null_hash, FX_ANY, KVP_EINVAL, return kvp_lookup(p, KVP_STREAM_K, NULL, &g_b);)
ROW(lookup_null_out, FX_ANY, KVP_EINVAL,
    return kvp_lookup(p, KVP_STREAM_K, &g_h109, NULL);)
ROW(lookup_bad_stream, FX_ANY, KVP_EINVAL,
    return kvp_lookup(p, (kvp_stream)3, &g_h109, &g_b);)
ROW(lookup_unknown_hash, FX_ANY, KVP_ENOTFOUND,
    kvp_hash h = kvptest_hash(4242); return kvp_lookup(p, KVP_STREAM_V, &h, &g_b);)
ROW(lookup_shared_on_separate, FX_K, KVP_EINVAL,
    kvp_hash h = kvptest_hash(201); return kvp_lookup(p, KVP_STREAM_SHARED, &h, &g_b);)
ROW(lookup_wrong_stream, FX_K, KVP_ENOTFOUND,
    kvp_hash h = kvptest_hash(202); return kvp_lookup(p, KVP_STREAM_V, &h, &g_b);)
ROW(lookup_found_changes_nothing, FX_ANY, KVP_OK,
    kvp_hash h = kvptest_hash(p && kvptest_info(p, 9).hash.b[31] == 109 ? 109 : 201);
    return kvp_lookup(p, KVP_STREAM_V, &h, &g_b);)

/* kvp_unpublish */
ROW(unpublish_null_pool, FX_ANY, KVP_EINVAL, return kvp_unpublish(NULL, 9);)
ROW(unpublish_null_block, FX_S, KVP_EINVAL, return kvp_unpublish(p, 0);)
ROW(unpublish_beyond, FX_ANY, KVP_ERANGE, return kvp_unpublish(p, BEYOND);)
ROW(unpublish_retired, FX_S, KVP_ERANGE, return kvp_unpublish(p, RETIRED);)
ROW(unpublish_in_use_unpublished, FX_S, KVP_ENOTFOUND, return kvp_unpublish(p, 1);)
ROW(unpublish_vacant, FX_ANY, KVP_ENOTFOUND, return kvp_unpublish(p, 12);)

/* index-wide calls */
ROW(clear_index_null, FX_ANY, KVP_EINVAL, return kvp_clear_index(NULL);)
ROW(evict_null_pool, FX_ANY, KVP_EINVAL, return kvp_evict(NULL, KVP_STREAM_K, 1, &g_u);)
ROW(evict_bad_stream, FX_ANY, KVP_EINVAL, return kvp_evict(p, (kvp_stream)3, 1, &g_u);)
ROW(evict_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_evict(p, KVP_STREAM_SHARED, 1, &g_u);)
ROW(evict_zero, FX_ANY, KVP_OK,
    g_u = 77; kvp_status st = kvp_evict(p, KVP_STREAM_K, 0, &g_u);
    ROW_CHECK(g_u == 0, "*n_evicted = %u, expected 0", (unsigned)g_u); return st;)
ROW(evict_none_cached, FX_K, KVP_OK,
    g_u = 77; kvp_status st = kvp_evict(p, KVP_STREAM_V, 5, &g_u);
    ROW_CHECK(g_u == 0, "*n_evicted = %u, expected 0", (unsigned)g_u); return st;)
ROW(ensure_free_null_pool, FX_ANY, KVP_EINVAL, return kvp_ensure_free(NULL, KVP_STREAM_K, 1);)
ROW(ensure_free_bad_stream, FX_ANY, KVP_EINVAL, return kvp_ensure_free(p, (kvp_stream)3, 1);)
ROW(ensure_free_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_ensure_free(p, KVP_STREAM_SHARED, 1);)
ROW(ensure_free_too_many, FX_ANY, KVP_EEXHAUSTED, return kvp_ensure_free(p, KVP_STREAM_K, 100);)
ROW(ensure_free_uint_max, FX_ANY, KVP_EEXHAUSTED,
    return kvp_ensure_free(p, KVP_STREAM_K, UINT32_MAX);)
ROW(ensure_free_v_short, FX_K, KVP_EEXHAUSTED, return kvp_ensure_free(p, KVP_STREAM_V, 6);)
ROW(ensure_free_enough_vacant, FX_ANY, KVP_OK, return kvp_ensure_free(p, KVP_STREAM_K, 3);)
ROW(reset_prefix_null, FX_ANY, KVP_EINVAL, return kvp_reset_prefix_cache(NULL);)
ROW(reset_prefix_busy, FX_ANY, KVP_EBUSY, return kvp_reset_prefix_cache(p);)

/* extend / shrink / retire_top */
ROW(extend_null_pool, FX_ANY, KVP_EINVAL, return kvp_extend(NULL, KVP_STREAM_K, 1, &g_u);)
ROW(extend_bad_stream, FX_ANY, KVP_EINVAL, return kvp_extend(p, (kvp_stream)3, 1, &g_u);)
ROW(extend_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_extend(p, KVP_STREAM_SHARED, 1, &g_u);)
ROW(extend_zero, FX_ANY, KVP_OK,
    g_u = 77; kvp_status st = kvp_extend(p, KVP_STREAM_K, 0, &g_u);
    ROW_CHECK(g_u == 0, "*n_added = %u, expected 0", (unsigned)g_u); return st;)
ROW(shrink_null_pool, FX_ANY, KVP_EINVAL, return kvp_shrink(NULL, KVP_STREAM_K, 0, &g_u);)
ROW(shrink_bad_stream, FX_ANY, KVP_EINVAL, return kvp_shrink(p, (kvp_stream)3, 0, &g_u);)
ROW(shrink_shared_on_separate, FX_K, KVP_EINVAL,
    return kvp_shrink(p, KVP_STREAM_SHARED, 0, &g_u);)
ROW(shrink_nothing_to_do, FX_ANY, KVP_OK,
    g_u = 77; kvp_status st = kvp_shrink(p, KVP_STREAM_K, 100, &g_u);
    ROW_CHECK(g_u == 0, "*n_retired = %u, expected 0", (unsigned)g_u); return st;)
static kvp_block g_r, g_m;
ROW(retire_top_null_pool, FX_ANY, KVP_EINVAL, return kvp_retire_top(NULL, &g_r, &g_m);)
ROW(retire_top_null_retired, FX_ANY, KVP_EINVAL, return kvp_retire_top(p, NULL, &g_m);)
ROW(retire_top_null_moved, FX_ANY, KVP_EINVAL, return kvp_retire_top(p, &g_r, NULL);)

/* stats */
static kvp_stats g_st[8];
static char g_buf[16384];
ROW(stats_get_null_pool, FX_ANY, KVP_EINVAL, return kvp_stats_get(NULL, g_st);)
ROW(stats_get_null_out, FX_ANY, KVP_EINVAL, return kvp_stats_get(p, NULL);)
ROW(stats_reset_null, FX_ANY, KVP_EINVAL, return kvp_stats_reset(NULL);)
ROW(stats_snapshot_null, FX_ANY, KVP_EINVAL, return kvp_stats_snapshot(NULL);)
ROW(stats_history_null_pool, FX_ANY, KVP_EINVAL, return kvp_stats_history(NULL, g_st, 8, &g_n);)
ROW(stats_history_null_nout, FX_ANY, KVP_EINVAL, return kvp_stats_history(p, g_st, 8, NULL);)
ROW(stats_history_null_out, FX_ANY, KVP_EINVAL, return kvp_stats_history(p, NULL, 2, &g_n);)
ROW(stats_history_cap_zero, FX_ANY, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_stats_history(p, g_st, 0, &g_n);
    ROW_CHECK(g_n == 1, "*n_out = %zu, expected 1", g_n); return st;)
ROW(prom_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_stats_prometheus(NULL, NULL, g_buf, sizeof g_buf, &g_n);)
ROW(prom_null_buf, FX_ANY, KVP_EINVAL, return kvp_stats_prometheus(p, NULL, NULL, 10, &g_n);)
ROW(prom_prefix_digit, FX_ANY, KVP_EINVAL,
    return kvp_stats_prometheus(p, "1kv", g_buf, sizeof g_buf, &g_n);)
ROW(prom_prefix_dash, FX_ANY, KVP_EINVAL,
    return kvp_stats_prometheus(p, "kv-pool", g_buf, sizeof g_buf, &g_n);)
ROW(prom_prefix_space, FX_ANY, KVP_EINVAL,
    return kvp_stats_prometheus(p, "kv pool", g_buf, sizeof g_buf, &g_n);)
ROW(prom_cap_small, FX_ANY, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_stats_prometheus(p, NULL, g_buf, 8, &g_n);
    ROW_CHECK(g_n > 8, "*needed = %zu, expected > 8", g_n); return st;)
ROW(json_null_pool, FX_ANY, KVP_EINVAL, return kvp_stats_json(NULL, g_buf, sizeof g_buf, &g_n);)
ROW(json_null_buf, FX_ANY, KVP_EINVAL, return kvp_stats_json(p, NULL, 10, &g_n);)
ROW(json_cap_small, FX_ANY, KVP_ESPACE,
    g_n = 0; kvp_status st = kvp_stats_json(p, g_buf, 4, &g_n);
    ROW_CHECK(g_n > 4, "*needed = %zu, expected > 4", g_n); return st;)

/* checking */
ROW(check_null, FX_ANY, KVP_EINVAL, return kvp_pool_check(NULL, g_buf, sizeof g_buf);)
ROW(check_null_msg, FX_ANY, KVP_OK, return kvp_pool_check(p, NULL, 0);)
ROW(check_tiny_msg, FX_ANY, KVP_OK, return kvp_pool_check(p, g_buf, 1);)
ROW(fingerprint_null_pool, FX_ANY, KVP_EINVAL,
    uint64_t fp; return kvp_pool_fingerprint(NULL, &fp);)
ROW(fingerprint_null_out, FX_ANY, KVP_EINVAL, return kvp_pool_fingerprint(p, NULL);)

/* hashing and verified calls (argument checks only) */
static kvp_hash g_hash_out[8];
ROW(hash_block_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_hash_block(NOPOOL, NULL, g_tokens, 16, 0, NULL, g_hash_out);)
ROW(hash_block_null_tokens, FX_ANY, KVP_EINVAL,
    return kvp_hash_block(p, NULL, NULL, 16, 0, NULL, g_hash_out);)
ROW(hash_block_null_out, FX_ANY, KVP_EINVAL,
    return kvp_hash_block(p, NULL, g_tokens, 16, 0, NULL, NULL);)
ROW(hash_block_short, FX_ANY, KVP_EINVAL,
    return kvp_hash_block(p, NULL, g_tokens, 15, 0, NULL, g_hash_out);)
ROW(hash_block_unaligned_start, FX_ANY, KVP_EINVAL,
    kvp_hash par = kvptest_hash(1);
    return kvp_hash_block(p, &par, g_tokens, 16, 5, NULL, g_hash_out);)
ROW(hash_block_root_not_first, FX_ANY, KVP_EINVAL,
    return kvp_hash_block(p, NULL, g_tokens, 16, 16, NULL, g_hash_out);)
ROW(hash_block_bad_span, FX_ANY, KVP_EINVAL,
    kvp_mm_span sp; memset(&sp, 0, sizeof sp); sp.start = 5; sp.end = 3;
    kvp_extra_keys ex; memset(&ex, 0, sizeof ex); ex.mm = &sp; ex.n_mm = 1;
    return kvp_hash_block(p, NULL, g_tokens, 16, 0, &ex, g_hash_out);)
ROW(hash_tokens_null_pool, FX_ANY, KVP_EINVAL,
    return kvp_hash_tokens(NOPOOL, g_tokens, 16, NULL, g_hash_out, 8, 0, &g_n);)
ROW(hash_tokens_null_tokens, FX_ANY, KVP_EINVAL,
    return kvp_hash_tokens(p, NULL, 16, NULL, g_hash_out, 8, 0, &g_n);)
ROW(hash_tokens_null_hashes, FX_ANY, KVP_EINVAL,
    return kvp_hash_tokens(p, g_tokens, 16, NULL, NULL, 8, 0, &g_n);)
ROW(hash_tokens_known_too_many, FX_ANY, KVP_EINVAL,
    return kvp_hash_tokens(p, g_tokens, 16, NULL, g_hash_out, 8, 2, &g_n);)
ROW(hash_tokens_cap_small, FX_ANY, KVP_ESPACE,
    static uint32_t toks[40]; g_n = 0;
    kvp_status st = kvp_hash_tokens(p, toks, 40, NULL, g_hash_out, 1, 0, &g_n);
    ROW_CHECK(g_n == 2, "*n_out = %zu, expected 2", g_n); return st;)
ROW(publish_verified_off, FX_ANY, KVP_EINVAL,
    kvp_hash h = kvptest_hash(5);
    return kvp_publish_verified(p, 9, &h, KVP_NO_BLOCK, g_tokens, 16);)
ROW(lookup_verified_off, FX_ANY, KVP_EINVAL,
    kvp_hash h = kvptest_hash(201);
    return kvp_lookup_verified(p, KVP_STREAM_V, &h, KVP_NO_BLOCK, g_tokens, 16, &g_b);)

#define R(id) &row_##id
static const row *const rows[] = {
    R(config_default_null), R(create_null_cfg), R(create_null_out),
    R(create_block_size_0), R(create_block_size_65536), R(create_num_over_max),
    R(create_num_over_limit), R(create_null_block_no_blocks), R(create_bad_reuse),
    R(create_alloc_missing), R(create_release_missing), R(pool_clear_null),
    R(alloc_null_pool), R(alloc_null_ids), R(alloc_null_nout), R(alloc_tokens_zero),
    R(alloc_tokens_overflow), R(alloc_bad_stream), R(alloc_negative_stream),
    R(alloc_format_256), R(alloc_format_uint_max), R(alloc_cap_small), R(alloc_cap_zero),
    R(alloc_exhausted), R(alloc_exhausted_registered), R(alloc_shared_on_separate),
    R(alloc_exhausted_v_only),
    R(take_null_pool), R(take_null_out), R(take_bad_stream), R(take_shared_on_separate),
    R(take_hinted_null_pool), R(take_hinted_null_hint), R(take_hinted_null_out),
    R(take_hinted_bad_stream), R(take_hinted_shared_on_separate),
    R(take_each_null_pool), R(take_each_null_n_taken), R(take_each_null_owners),
    R(take_each_null_out), R(take_each_bad_stream), R(take_each_bad_stream_none),
    R(take_each_shared_on_separate), R(take_each_none),
    R(take_id_null_pool), R(take_id_null_block), R(take_id_beyond), R(take_id_no_block),
    R(take_id_retired), R(take_id_in_use), R(take_id_shared_block),
    R(free_null_pool), R(free_null_ids), R(free_null_ids_zero_n), R(free_null_block),
    R(free_null_block_owner), R(free_beyond), R(free_no_block), R(free_retired),
    R(free_vacant_never_used), R(free_cached), R(free_cached_k), R(free_others_block),
    R(free_anon_on_owned), R(free_owner_on_anon), R(free_unknown_owner),
    R(free_mixed_not_owner), R(free_mixed_double), R(free_shared_twice), R(free_last_bad),
    R(free_owner_null_pool), R(free_owner_anon), R(free_owner_unknown),
    R(register_null_pool), R(register_anon), R(register_registered), R(register_holding), R(register_holding_k),
    R(release_null_pool), R(release_anon), R(release_unknown), R(release_holding),
    R(release_holding_unregistered),
    R(owner_blocks_null_pool), R(owner_blocks_null_nout), R(owner_blocks_null_ids),
    R(owner_blocks_anon), R(owner_blocks_unknown), R(owner_blocks_cap_small),
    R(owner_blocks_cap_zero), R(owner_blocks_cap_zero_k),
    R(free_count_null_pool), R(free_count_null_out), R(free_count_bad_stream),
    R(free_count_shared_on_separate),
    R(peek_next_null_pool), R(peek_next_null_out), R(peek_next_bad_stream),
    R(peek_next_shared_on_separate),
    R(set_fill_null_pool), R(set_fill_null_block), R(set_fill_over_block_size),
    R(set_fill_uint_max), R(set_fill_beyond), R(set_fill_retired), R(set_fill_vacant),
    R(set_fill_cached),
    R(block_get_null_pool), R(block_get_null_out), R(block_get_beyond),
    R(block_get_no_block), R(block_get_retired),
    R(claim_null_pool), R(claim_null_block), R(claim_beyond), R(claim_retired),
    R(claim_vacant),
    R(publish_null_pool), R(publish_null_hash), R(publish_null_block), R(publish_beyond),
    R(publish_retired), R(publish_vacant), R(publish_cached_same_hash),
    R(publish_other_hash), R(publish_same_hash_noop), R(publish_same_hash_noop_k),
    R(claim_prefix_null_pool), R(claim_prefix_null_n_hit), R(claim_prefix_null_hashes),
    R(claim_prefix_null_out), R(claim_prefix_bad_stream), R(claim_prefix_shared_on_separate),
    R(claim_prefix_first_misses), R(claim_prefix_empty),
    R(publish_each_null_pool), R(publish_each_null_ids), R(publish_each_null_hashes),
    R(publish_each_null_block), R(publish_each_beyond), R(publish_each_vacant),
    R(publish_each_other_hash), R(publish_each_empty),
    R(lookup_null_pool), R(lookup_null_hash), R(lookup_null_out), R(lookup_bad_stream),
    R(lookup_unknown_hash), R(lookup_shared_on_separate), R(lookup_wrong_stream),
    R(lookup_found_changes_nothing),
    R(unpublish_null_pool), R(unpublish_null_block), R(unpublish_beyond),
    R(unpublish_retired), R(unpublish_in_use_unpublished), R(unpublish_vacant),
    R(clear_index_null), R(evict_null_pool), R(evict_bad_stream),
    R(evict_shared_on_separate), R(evict_zero), R(evict_none_cached),
    R(ensure_free_null_pool), R(ensure_free_bad_stream), R(ensure_free_shared_on_separate),
    R(ensure_free_too_many), R(ensure_free_uint_max), R(ensure_free_v_short),
    R(ensure_free_enough_vacant), R(reset_prefix_null), R(reset_prefix_busy),
    R(extend_null_pool), R(extend_bad_stream), R(extend_shared_on_separate), R(extend_zero),
    R(shrink_null_pool), R(shrink_bad_stream), R(shrink_shared_on_separate),
    R(shrink_nothing_to_do),
    R(retire_top_null_pool), R(retire_top_null_retired), R(retire_top_null_moved),
    R(stats_get_null_pool), R(stats_get_null_out), R(stats_reset_null),
    R(stats_snapshot_null), R(stats_history_null_pool), R(stats_history_null_nout),
    R(stats_history_null_out), R(stats_history_cap_zero),
    R(prom_null_pool), R(prom_null_buf), R(prom_prefix_digit), R(prom_prefix_dash),
    R(prom_prefix_space), R(prom_cap_small),
    R(json_null_pool), R(json_null_buf), R(json_cap_small),
    R(check_null), R(check_null_msg), R(check_tiny_msg), R(fingerprint_null_pool),
    R(fingerprint_null_out),
    R(hash_block_null_pool), R(hash_block_null_tokens), R(hash_block_null_out),
    R(hash_block_short), R(hash_block_unaligned_start), R(hash_block_root_not_first),
    R(hash_block_bad_span), R(hash_tokens_null_pool), R(hash_tokens_null_tokens),
    R(hash_tokens_null_hashes), R(hash_tokens_known_too_many), R(hash_tokens_cap_small),
    R(publish_verified_off), R(lookup_verified_off),
};

/* ---- the runner --------------------------------------------------------- */

static int stats_equal_but_exhausted(const kvp_stats *a, const kvp_stats *b,
                                     char *what, size_t cap)
{
#define CMPF(f)                                                                 \
    if (a->f != b->f) {                                                         \
        snprintf(what, cap, "stats." #f " %llu -> %llu", (unsigned long long)a->f, \
                 (unsigned long long)b->f);                                     \
        return 0;                                                               \
    }
    CMPF(blocks) CMPF(in_use) CMPF(free) CMPF(vacant) CMPF(cached) CMPF(shared)
    CMPF(indexed) CMPF(fragmented) CMPF(owners) CMPF(peak_in_use) CMPF(alloc_calls)
    CMPF(blocks_allocated) CMPF(free_calls) CMPF(blocks_freed) CMPF(reused)
    CMPF(grown) CMPF(extended) CMPF(retired) CMPF(relocated) CMPF(evictions)
    CMPF(prefix_queries) CMPF(prefix_hits) CMPF(prefix_tokens_queried)
    CMPF(prefix_tokens_hit) CMPF(admitted_tokens) CMPF(cow_copies) CMPF(tokens_in_use)
#undef CMPF
    return 1;
}

static void run_table(int which, int thread_safe)
{
    size_t n_run = 0, n_failed = 0;
    g_h109 = kvptest_hash(109);
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const row *r = rows[i];
        if (!(r->fixtures & which))
            continue;
        n_run++;
        kvp_pool *p = fixture(which, thread_safe);
        uint64_t fp = kvptest_fp(p);
        kvp_stats before = kvptest_stats(p);
        size_t hist = kvptest_history_len(p);
        row_err[0] = '\0';
        kvp_status st = r->fn(p);
        char problem[600];
        problem[0] = '\0';
        if (st != r->expected) {
            snprintf(problem, sizeof problem, "returned %d (%s), expected %d (%s)", (int)st,
                     kvp_strerror(st), (int)r->expected, kvp_strerror(r->expected));
        } else if (row_err[0]) {
            snprintf(problem, sizeof problem, "%s", row_err);
        } else {
            uint64_t fp2 = 0;
            kvp_status fst = kvp_pool_fingerprint(p, &fp2);
            char msg[400];
            msg[0] = '\0';
            kvp_status cst = kvp_pool_check(p, msg, sizeof msg);
            kvp_stats after = kvptest_stats(p);
            char what[200];
            if (fst != KVP_OK || fp2 != fp)
                snprintf(problem, sizeof problem,
                         "fingerprint changed (%#llx -> %#llx, status %d)",
                         (unsigned long long)fp, (unsigned long long)fp2, (int)fst);
            else if (cst != KVP_OK)
                snprintf(problem, sizeof problem, "checker: %s", msg);
            else if (r->expected != KVP_OK &&
                     !stats_equal_but_exhausted(&before, &after, what, sizeof what))
                snprintf(problem, sizeof problem, "refused call changed %s", what);
            else if (kvptest_history_len(p) != hist)
                snprintf(problem, sizeof problem, "history length %zu -> %zu", hist,
                         kvptest_history_len(p));
            else if (r->expected == KVP_EEXHAUSTED && r->fn != row_fn_ensure_free_too_many &&
                     r->fn != row_fn_ensure_free_uint_max &&
                     r->fn != row_fn_ensure_free_v_short &&
                     after.exhausted != before.exhausted + 1)
                snprintf(problem, sizeof problem, "stats.exhausted %llu -> %llu, expected +1",
                         (unsigned long long)before.exhausted,
                         (unsigned long long)after.exhausted);
        }
        if (problem[0]) {
            n_failed++;
            print_error("  row %-34s [%s%s]: %s\n", r->name, which == FX_S ? "shared" : "separate",
                        thread_safe ? ", locked" : "", problem);
        }
        kvp_pool_destroy(p);
    }
    print_message("  %zu rows run on the %s fixture%s\n", n_run,
                  which == FX_S ? "shared" : "separate", thread_safe ? " (thread_safe)" : "");
    if (n_failed)
        fail_msg("%zu of %zu bad-input rows failed (listed above)", n_failed, n_run);
}

/* One run of the table: the fixture and whether the pool is thread-safe,
 * handed to the test as its state. */
typedef struct table_run {
    int which, thread_safe;
} table_run;

static table_run g_runs[] = {{FX_S, 0}, {FX_S, 1}, {FX_K, 0}, {FX_K, 1}};

static void test_badinput_table(void **state)
{
    const table_run *t = *state;
    run_table(t->which, t->thread_safe);
}
/* A cmocka entry for one run, under its own name (as
 * cmocka_unit_test_prestate, which names every entry after the function). */
#define TABLE_TEST(name, run) {(name), test_badinput_table, NULL, NULL, &(run)}

/* The retire_top case of the null block and of an empty pool. */
static void test_badinput_retire_edges(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(1);
    cfg.null_block = 1;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_block r, m;
    KVP_ASSERT_REFUSED(p, kvp_retire_top(p, &r, &m), KVP_EINVAL);
    kvp_pool_destroy(p);
    cfg = kvptest_config(0);
    p = kvptest_create(&cfg);
    KVP_ASSERT_REFUSED(p, kvp_retire_top(p, &r, &m), KVP_EEXHAUSTED);
    kvp_config c2 = kvptest_config(2);
    c2.prefix_caching = 0;
    kvp_pool *q = kvptest_create(&c2);
    kvp_block b = kvptest_take(q, KVP_STREAM_SHARED, 1);
    kvp_hash h = kvptest_hash(3);
    KVP_ASSERT_REFUSED(q, kvp_publish(q, b, &h), KVP_EINVAL);
    size_t np = 77;
    KVP_ASSERT_REFUSED(q, kvp_publish_each(q, &b, &h, 1, &np), KVP_EINVAL);
    KVP_ASSERT_EQ(np, 77);
    kvptest_check(p);
    kvptest_done(q);
    kvp_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TABLE_TEST("test_badinput_shared", g_runs[0]),
        TABLE_TEST("test_badinput_shared_locked", g_runs[1]),
        TABLE_TEST("test_badinput_separate", g_runs[2]),
        TABLE_TEST("test_badinput_separate_locked", g_runs[3]),
        cmocka_unit_test(test_badinput_retire_edges),
    };
    return cmocka_run_group_tests_name("badinput", tests, NULL, NULL);
}
