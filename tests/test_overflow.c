/*
 * test_overflow.c — the integer limits of the sizes, counts and positions
 * the library computes from a caller's or a configuration's numbers: one
 * row per limit, at its exact boundary (the largest value accepted, the
 * first value refused).
 *
 * A refused kvp_pool_create leaves *out as it was.  A refused call on a
 * pool leaves its fingerprint, statistics and history as they were, and
 * the checker passes.  An accepted boundary row checks what the call did.
 * Every pool row runs on an unlocked and a thread_safe pool.
 *
 * Reference counts are 32 bits.  Bringing one to 2^32 - 1 through the API
 * takes 2^32 claims (minutes), so the rows that need a block that close to
 * the limit set its count directly (force_refs, through kvp_internal.h),
 * as that many anonymous claims would leave it.
 */
#include "kvptest.h"
#include "kvp_internal.h" /* force_refs: a block's reference count */

#include <stdio.h>
#include <string.h>

/* ---- kvp_pool_create: the host arena and the event queue ---------------- */

typedef struct create_row {
    const char *name;
    size_t bytes[2];      /* block_bytes */
    uint32_t num_blocks, max_blocks;
    int separate_kv, host_arena;
    uint32_t event_capacity; /* with events; 0: events off */
    kvp_status expected;
    kvp_status also;      /* a second accepted outcome (the machine decides
                             whether that much memory can be mapped), or
                             `expected` again */
} create_row;

#define EIGHT_GIB_CAP (SIZE_MAX / KVP_MAX_BLOCKS) /* the largest block with the default cap */

static const create_row create_rows[] = {
    /* the report: 2 x (2^63 + 4096) wrapped to an 8 KiB arena */
    {"arena_2p63_plus_4096_two_blocks", {((size_t)1 << 63) + 4096, 0}, 2, 0, 0, 1, 0,
     KVP_EINVAL, KVP_EINVAL},
    {"arena_cap2_largest", {SIZE_MAX / 2, 0}, 2, 2, 0, 1, 0, KVP_ENOMEM, KVP_ENOMEM},
    {"arena_cap2_first_over", {SIZE_MAX / 2 + 1, 0}, 2, 2, 0, 1, 0, KVP_EINVAL, KVP_EINVAL},
    /* max_blocks 0 is the cap KVP_MAX_BLOCKS: the arena may grow that far */
    {"arena_default_cap_largest", {EIGHT_GIB_CAP, 0}, 1, 0, 0, 1, 0, KVP_OK, KVP_ENOMEM},
    {"arena_default_cap_first_over", {EIGHT_GIB_CAP + 1, 0}, 1, 0, 0, 1, 0, KVP_EINVAL,
     KVP_EINVAL},
    {"arena_v_cap4_largest", {4096, SIZE_MAX / 4}, 4, 4, 1, 1, 0, KVP_ENOMEM, KVP_ENOMEM},
    {"arena_v_cap4_first_over", {4096, SIZE_MAX / 4 + 1}, 4, 4, 1, 1, 0, KVP_EINVAL,
     KVP_EINVAL},
    /* without an arena block_bytes is only passed on: no size is computed */
    {"no_arena_block_bytes_max", {SIZE_MAX, 0}, 2, 0, 0, 0, 0, KVP_OK, KVP_OK},
    /* about 2 x 2^32 x (4 x 16 + 150) bytes: the machine decides */
    {"event_capacity_largest", {0, 0}, 2, 0, 0, 0, UINT32_MAX - 1, KVP_ENOMEM, KVP_OK},
    {"event_capacity_first_over", {0, 0}, 2, 0, 0, 0, UINT32_MAX, KVP_EINVAL, KVP_EINVAL},
};

static void test_create_arena_limits(void **state)
{
    (void)state;
    size_t failed = 0;
    for (size_t i = 0; i < ARRAY_LEN(create_rows); i++) {
        const create_row *r = &create_rows[i];
        kvp_config cfg = kvptest_config(r->num_blocks);
        cfg.max_blocks = r->max_blocks;
        cfg.separate_kv = r->separate_kv;
        cfg.host_arena = r->host_arena;
        cfg.block_bytes[0] = r->bytes[0];
        cfg.block_bytes[1] = r->bytes[1];
        cfg.events = r->event_capacity != 0;
        cfg.event_capacity = r->event_capacity;
        kvp_pool *const sentinel = (kvp_pool *)(uintptr_t)0x5a5a;
        kvp_pool *p = sentinel;
        kvp_status st = kvp_pool_create(&cfg, &p);
        const char *problem = NULL;
        if (st != r->expected && st != r->also)
            problem = "unexpected status";
        else if (st != KVP_OK && p != sentinel)
            problem = "a refused create wrote *out";
        if (problem) {
            failed++;
            print_error("  row %-32s: %s: %d (%s)\n", r->name, problem, (int)st,
                        kvp_strerror(st));
        }
        if (st == KVP_OK) {
            kvptest_check(p);
            kvp_pool_destroy(p);
        }
    }
    if (failed)
        fail_msg("%zu of %zu create rows failed (listed above)", failed, ARRAY_LEN(create_rows));
}

/* Block addresses at the growth cap: the arena grows with the pool, and
 * block i sits i x block_bytes into it, its bytes writable. */
static void test_arena_addresses_at_cap(void **state)
{
    (void)state;
    enum { BYTES = 4096, CAP = 64 };
    kvp_config cfg = kvptest_config(2);
    cfg.max_blocks = CAP;
    cfg.host_arena = 1;
    cfg.block_bytes[0] = BYTES;
    kvp_pool *p = kvptest_create(&cfg);
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(p, KVP_STREAM_SHARED, UINT32_MAX, &added));
    KVP_ASSERT_EQ(added, CAP - 2);
    uint8_t *base = NULL;
    KVP_ASSERT_OK(kvp_block_ptr(p, 0, (void **)&base));
    for (kvp_block b = 0; b < CAP; b++) {
        uint8_t *at = NULL;
        KVP_ASSERT_OK(kvp_block_ptr(p, b, (void **)&at));
        KVP_ASSERT_EQ((uintptr_t)at, (uintptr_t)base + (uintptr_t)b * BYTES);
        at[0] = (uint8_t)b;
        at[BYTES - 1] = (uint8_t)~b;
    }
    for (kvp_block b = 0; b < CAP; b++) {
        KVP_ASSERT_EQ(base[(size_t)b * BYTES], (uint8_t)b);
        KVP_ASSERT_EQ(base[(size_t)b * BYTES + BYTES - 1], (uint8_t)~b);
    }
    void *none = NULL;
    KVP_ASSERT_REFUSED(p, kvp_block_ptr(p, CAP, &none), KVP_ERANGE);
    kvp_pool_destroy(p);
}

/* ---- calls on a pool ---------------------------------------------------- */

/* The fixture: 16 blocks of 16 tokens, history 4 with one snapshot, and
 * sequence 1 admitted with the 33 tokens of g_prompt: blocks B0 and B1
 * full and published, a third partly filled. */
static uint32_t g_prompt[33];
static kvp_block g_b0;
static kvp_seq *g_seq;

static char row_err[256];
#define ROW_CHECK(cond, ...)                                                                 \
    do {                                                                                     \
        if (!(cond) && row_err[0] == '\0')                                                   \
            snprintf(row_err, sizeof row_err, __VA_ARGS__);                                  \
    } while (0)

static kvp_pool *fixture(int thread_safe)
{
    for (uint32_t i = 0; i < ARRAY_LEN(g_prompt); i++)
        g_prompt[i] = 1000 + i;
    kvp_config cfg = kvptest_config(16);
    cfg.thread_safe = thread_safe;
    cfg.history_len = 4;
    kvp_pool *p = kvptest_create(&cfg);
    size_t cached = 99, n_blocks = 0;
    const kvp_block *ids = NULL;
    KVP_ASSERT_OK(kvp_seq_create(p, 1, NULL, &g_seq));
    KVP_ASSERT_OK(kvp_seq_admit(g_seq, g_prompt, ARRAY_LEN(g_prompt), &cached));
    KVP_ASSERT_EQ(cached, 0);
    KVP_ASSERT_OK(kvp_seq_blocks(g_seq, &ids, &n_blocks, NULL));
    KVP_ASSERT_EQ(n_blocks, 3);
    g_b0 = ids[0];
    KVP_ASSERT_OK(kvp_stats_snapshot(p));
    kvptest_check(p);
    return p;
}

/* Give block b `refs` references in all, adding anonymous ones and keeping
 * the shared-blocks gauge the checker verifies. */
static void force_refs(kvp_pool *p, kvp_block b, uint32_t refs)
{
    kvp__block *blk = &p->blocks[b];
    if (blk->ref < 2 && refs >= 2)
        p->shared++;
    blk->anon += refs - blk->ref;
    blk->ref = refs;
    kvptest_check(p);
}

static uint32_t refs_of(kvp_pool *p, kvp_block b)
{
    return kvptest_info(p, b).ref_count;
}

typedef struct pool_row {
    const char *name;
    uint32_t b0_refs;     /* B0's references before the call; 0: as admitted */
    kvp_status expected;
    kvp_status (*fn)(kvp_pool *p);
} pool_row;

#define ROW(id, refs, exp, ...)                                                              \
    static kvp_status row_fn_##id(kvp_pool *p)                                               \
    {                                                                                        \
        __VA_ARGS__                                                                          \
    }                                                                                        \
    static const pool_row row_##id = {#id, refs, exp, row_fn_##id};

#define REF_MAX UINT32_MAX

/* kvp_claim: the reference count of the claimed block */
ROW(claim_anon_largest, REF_MAX - 1, KVP_OK,
    kvp_status st = kvp_claim(p, g_b0, KVP_ANON);
    ROW_CHECK(refs_of(p, g_b0) == REF_MAX, "refs %u", (unsigned)refs_of(p, g_b0));
    return st;)
ROW(claim_anon_first_over, REF_MAX, KVP_EINVAL, return kvp_claim(p, g_b0, KVP_ANON);)
ROW(claim_owner_largest, REF_MAX - 1, KVP_OK,
    kvp_status st = kvp_claim(p, g_b0, 7);
    ROW_CHECK(refs_of(p, g_b0) == REF_MAX, "refs %u", (unsigned)refs_of(p, g_b0));
    return st;)
ROW(claim_owner_first_over, REF_MAX, KVP_EINVAL, return kvp_claim(p, g_b0, 7);)

/* kvp_seq_fork: one more reference on each of the parent's blocks */
ROW(fork_largest, REF_MAX - 1, KVP_OK,
    kvp_seq *child = NULL;
    kvp_status st = kvp_seq_fork(g_seq, 2, &child);
    ROW_CHECK(refs_of(p, g_b0) == REF_MAX, "refs %u", (unsigned)refs_of(p, g_b0));
    return st;)
ROW(fork_first_over, REF_MAX, KVP_EINVAL,
    kvp_seq *child = NULL;
    kvp_status st = kvp_seq_fork(g_seq, 2, &child);
    ROW_CHECK(child == NULL, "a refused fork wrote *child");
    ROW_CHECK(kvp_seq_find(p, 2, &child) == KVP_ENOTFOUND, "the refused child exists");
    return st;)

/* kvp_seq_admit: a matching block that cannot take another reference is a
 * miss, not a wrapped count */
static kvp_status admit_again(kvp_pool *p, size_t expect_cached)
{
    kvp_seq *s = NULL;
    size_t cached = 99;
    kvp_status st = kvp_seq_create(p, 3, NULL, &s);
    if (st == KVP_OK)
        st = kvp_seq_admit(s, g_prompt, ARRAY_LEN(g_prompt), &cached);
    ROW_CHECK(cached == expect_cached, "cached_tokens %zu, expected %zu", cached, expect_cached);
    return st;
}
ROW(admit_largest, REF_MAX - 1, KVP_OK,
    kvp_status st = admit_again(p, 32);
    ROW_CHECK(refs_of(p, g_b0) == REF_MAX, "refs %u", (unsigned)refs_of(p, g_b0));
    return st;)
ROW(admit_first_over_is_a_miss, REF_MAX, KVP_OK,
    kvp_status st = admit_again(p, 0);
    ROW_CHECK(refs_of(p, g_b0) == REF_MAX, "refs %u", (unsigned)refs_of(p, g_b0));
    return st;)

/* kvp_hash_block: the block's end, start + n, is a 64-bit position */
static kvp_status hash_at(kvp_pool *p, uint64_t start)
{
    kvp_hash parent = kvptest_hash(1), out;
    return kvp_hash_block(p, &parent, g_prompt, 16, start, NULL, &out);
}
ROW(hash_block_start_largest, 0, KVP_OK, return hash_at(p, UINT64_MAX - 31);)
ROW(hash_block_start_first_over, 0, KVP_EINVAL, return hash_at(p, UINT64_MAX - 15);)

#define R(id) &row_##id
static const pool_row *const pool_rows[] = {
    R(claim_anon_largest), R(claim_anon_first_over), R(claim_owner_largest),
    R(claim_owner_first_over), R(fork_largest), R(fork_first_over), R(admit_largest),
    R(admit_first_over_is_a_miss), R(hash_block_start_largest),
    R(hash_block_start_first_over),
};

static size_t history_len_of(kvp_pool *p)
{
    size_t n = 0;
    kvp_status st = kvp_stats_history(p, NULL, 0, &n);
    if (st != KVP_OK && st != KVP_ESPACE)
        fail_msg("kvp_stats_history returned %d", (int)st);
    return n;
}

static void run_pool_rows(int thread_safe)
{
    size_t failed = 0;
    for (size_t i = 0; i < ARRAY_LEN(pool_rows); i++) {
        const pool_row *r = pool_rows[i];
        kvp_pool *p = fixture(thread_safe);
        if (r->b0_refs)
            force_refs(p, g_b0, r->b0_refs);
        uint64_t fp = kvptest_fp(p);
        kvp_stats before = kvptest_stats(p);
        size_t hist = history_len_of(p);
        row_err[0] = '\0';
        kvp_status st = r->fn(p);
        char problem[400] = "";
        char msg[256] = "";
        kvp_stats after = kvptest_stats(p);
        if (st != r->expected)
            snprintf(problem, sizeof problem, "returned %d (%s), expected %d (%s)", (int)st,
                     kvp_strerror(st), (int)r->expected, kvp_strerror(r->expected));
        else if (row_err[0])
            snprintf(problem, sizeof problem, "%s", row_err);
        else if (kvp_pool_check(p, msg, sizeof msg) != KVP_OK)
            snprintf(problem, sizeof problem, "checker: %s", msg);
        else if (st != KVP_OK && kvptest_fp(p) != fp)
            snprintf(problem, sizeof problem, "a refused call changed the fingerprint");
        else if (st != KVP_OK && memcmp(&before, &after, sizeof before) != 0)
            snprintf(problem, sizeof problem, "a refused call changed the statistics");
        else if (history_len_of(p) != hist)
            snprintf(problem, sizeof problem, "history length %zu -> %zu", hist,
                     history_len_of(p));
        if (problem[0]) {
            failed++;
            print_error("  row %-30s [%s]: %s\n", r->name, thread_safe ? "locked" : "unlocked",
                        problem);
        }
        kvp_pool_destroy(p);
    }
    if (failed)
        fail_msg("%zu of %zu pool rows failed (listed above)", failed, ARRAY_LEN(pool_rows));
}

static void test_pool_limits(void **state)
{
    (void)state;
    run_pool_rows(0);
}

static void test_pool_limits_locked(void **state)
{
    (void)state;
    run_pool_rows(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_arena_limits),
        cmocka_unit_test(test_arena_addresses_at_cap),
        cmocka_unit_test(test_pool_limits),
        cmocka_unit_test(test_pool_limits_locked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
