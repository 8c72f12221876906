/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_overflow.c — the integer limits of the sizes, counts and positions
 * the library computes from a caller's or a configuration's numbers: one
 * row per limit, at its exact boundary (the largest value accepted, the
 * first value refused).
 *
 * A refused kvp_pool_create leaves *out as it was.  A refused call on a
 * pool leaves its fingerprint, statistics and history as they were, and
 * the checker passes.  An accepted boundary value checks what the call did.
 * Every call on a pool runs on an unlocked and a thread_safe pool.
 *
 * Reference counts are 32 bits.  Bringing one to 2^32 - 1 through the API
 * takes 2^32 claims (minutes), so the rows that need a block that close to
 * the limit set its count directly (force_refs, through kvp_types.h),
 * as that many anonymous claims would leave it.
 */
#include "kvptest.h"
#include "kvp_types.h" /* force_refs: a block's reference count */

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
    /* 2 x (2^63 + 4096) would wrap to an 8 KiB arena */
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

static void test_create_limits(void **state)
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
            kvptest_done(p);
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

/* The fixture: 16 blocks of 16 tokens (unlocked or thread_safe), history 4
 * with one snapshot, and sequence 1 admitted with the 33 tokens of
 * g_prompt: blocks B0 (*b0) and B1 full and published, a third partly
 * filled. */
static uint32_t g_prompt[33];

static kvp_pool *fixture(int thread_safe, kvp_seq **seq, kvp_block *b0)
{
    for (uint32_t i = 0; i < ARRAY_LEN(g_prompt); i++)
        g_prompt[i] = 1000 + i;
    kvp_config cfg = kvptest_config(16);
    cfg.thread_safe = thread_safe;
    cfg.history_len = 4;
    kvp_pool *p = kvptest_create(&cfg);
    size_t cached = 99, n_blocks = 0;
    const kvp_block *ids = NULL;
    KVP_ASSERT_OK(kvp_seq_create(p, 1, NULL, seq));
    KVP_ASSERT_OK(kvp_seq_admit(*seq, g_prompt, ARRAY_LEN(g_prompt), &cached));
    KVP_ASSERT_EQ(cached, 0);
    KVP_ASSERT_OK(kvp_seq_blocks(*seq, &ids, &n_blocks, NULL));
    KVP_ASSERT_EQ(n_blocks, 3);
    *b0 = ids[0];
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
        p->g.shared++;
    blk->anon += refs - blk->ref;
    blk->ref = refs;
    kvptest_check(p);
}

static uint32_t refs_of(kvp_pool *p, kvp_block b)
{
    return kvptest_info(p, b).ref_count;
}

/* What a refused call must leave as it was. */
typedef struct state {
    uint64_t fp;
    kvp_stats stats;
    size_t hist;
} state;

static state state_of(kvp_pool *p)
{
    state s = {kvptest_fp(p), kvptest_stats(p), kvptest_history_len(p)};
    return s;
}

/* `expr` returns `status` and changes nothing (fingerprint, statistics,
 * history); the checker passes. */
#define REFUSED(p, expr, status)                                                                 do {                                                                                             state before_ = state_of(p);                                                                 KVP_ASSERT_STATUS(expr, status);                                                             state after_ = state_of(p);                                                                  KVP_ASSERT_EQ(after_.fp, before_.fp);                                                        assert_memory_equal(&after_.stats, &before_.stats, sizeof before_.stats);                    KVP_ASSERT_EQ(after_.hist, before_.hist);                                                    kvptest_check(p);                                                                        } while (0)

#define REF_MAX UINT32_MAX

/* kvp_claim, anonymous and by an owner: the claimed block's count. */
static void claim_rows(int thread_safe)
{
    const kvp_owner who[] = {KVP_ANON, 7};
    for (size_t i = 0; i < ARRAY_LEN(who); i++) {
        kvp_seq *seq;
        kvp_block b0;
        kvp_pool *p = fixture(thread_safe, &seq, &b0);
        force_refs(p, b0, REF_MAX - 1); /* largest accepted */
        KVP_ASSERT_OK(kvp_claim(p, b0, who[i]));
        KVP_ASSERT_EQ(refs_of(p, b0), REF_MAX);
        kvptest_check(p);
        REFUSED(p, kvp_claim(p, b0, who[i]), KVP_EINVAL); /* first refused */
        REFUSED(p, kvp_claim(p, b0, who[1 - i]), KVP_EINVAL);
        kvp_pool_destroy(p);
    }
}

/* kvp_seq_fork: one more reference on each of the parent's blocks. */
static void fork_rows(int thread_safe)
{
    kvp_seq *seq, *child = NULL;
    kvp_block b0;
    kvp_pool *p = fixture(thread_safe, &seq, &b0);
    force_refs(p, b0, REF_MAX - 1);
    KVP_ASSERT_OK(kvp_seq_fork(seq, 2, &child));
    KVP_ASSERT_EQ(refs_of(p, b0), REF_MAX);
    kvptest_check(p);
    child = NULL;
    REFUSED(p, kvp_seq_fork(seq, 3, &child), KVP_EINVAL);
    assert_null(child);
    KVP_ASSERT_STATUS(kvp_seq_find(p, 3, &child), KVP_ENOTFOUND);
    kvp_pool_destroy(p);
}

/* kvp_seq_admit: a matching block that cannot take another reference is a
 * miss (fresh blocks instead), never a wrapped count. */
static void admit_rows(int thread_safe)
{
    const struct {
        uint32_t refs;
        size_t cached;
    } rows[] = {{REF_MAX - 1, 32}, {REF_MAX, 0}};
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        kvp_seq *seq, *again;
        kvp_block b0;
        kvp_pool *p = fixture(thread_safe, &seq, &b0);
        force_refs(p, b0, rows[i].refs);
        size_t cached = 99;
        KVP_ASSERT_OK(kvp_seq_create(p, 3, NULL, &again));
        KVP_ASSERT_OK(kvp_seq_admit(again, g_prompt, ARRAY_LEN(g_prompt), &cached));
        KVP_ASSERT_EQ(cached, rows[i].cached);
        KVP_ASSERT_EQ(refs_of(p, b0), REF_MAX);
        kvptest_done(p);
    }
}

/* kvp_hash_block: the block's end, start + n, is a 64-bit position. */
static void hash_rows(int thread_safe)
{
    kvp_seq *seq;
    kvp_block b0;
    kvp_pool *p = fixture(thread_safe, &seq, &b0);
    kvp_hash parent = kvptest_hash(1), out;
    KVP_ASSERT_OK(kvp_hash_block(p, &parent, g_prompt, 16, UINT64_MAX - 31, NULL, &out));
    REFUSED(p, kvp_hash_block(p, &parent, g_prompt, 16, UINT64_MAX - 15, NULL, &out),
            KVP_EINVAL);
    kvp_pool_destroy(p);
}

static void test_pool_limits(void **unused)
{
    (void)unused;
    for (int thread_safe = 0; thread_safe < 2; thread_safe++) {
        claim_rows(thread_safe);
        fork_rows(thread_safe);
        admit_rows(thread_safe);
        hash_rows(thread_safe);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_limits),
        cmocka_unit_test(test_arena_addresses_at_cap),
        cmocka_unit_test(test_pool_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
