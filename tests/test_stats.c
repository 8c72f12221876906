/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stats.c — statistics and observability (kvpool.h "Statistics").
 *
 * Covers: every counter and gauge of kvp_stats through a scripted sequence of
 * calls (the whole struct is compared after each step; the prefix and COW
 * counters stay 0 without sequences), the take's fast path counted exactly
 * (against a hooked twin, the peak across a stats reset), failed calls counting
 * only `exhausted`, stats_reset, the null block in in_use, the history ring
 * (oldest first, wrap, ESPACE, history_len 0 and 1, history_every_call only
 * for changing calls), the Prometheus renderer (HELP/TYPE before samples,
 * counters named _total, prefix rules, values matching kvp_stats, ESPACE with
 * the exact needed length, nothing written when too small) and the JSON
 * renderer (a structural check and, when /usr/bin/python3 exists, json.load;
 * values matching kvp_stats; ESPACE exact).  O(1) reading is not testable.
 */
#define _POSIX_C_SOURCE 200809L
#include "kvptest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- whole-struct comparison ------------------------------------------- */

static double dabs(double x)
{
    return x < 0 ? -x : x;
}

#define STAT_FIELDS(X)                                                         \
    X(blocks) X(in_use) X(free) X(vacant) X(cached) X(shared) X(indexed)       \
    X(fragmented) X(owners) X(peak_in_use) X(alloc_calls) X(blocks_allocated) \
    X(free_calls) X(blocks_freed) X(reused) X(exhausted) X(grown) X(extended) \
    X(retired) X(relocated) X(evictions) X(prefix_queries) X(prefix_hits)      \
    X(prefix_tokens_queried) X(prefix_tokens_hit) X(admitted_tokens)          \
    X(cow_copies) X(tokens_in_use)

static void expect_stats_at(const kvp_stats *got, const kvp_stats *exp,
                            const char *step, const char *file, int line)
{
    int bad = 0;
#define CMP(f)                                                                  \
    if (got->f != exp->f) {                                                     \
        print_error("%s:%d: [%s] stats." #f " = %llu, expected %llu\n", file,   \
                    line, step, (unsigned long long)got->f,                     \
                    (unsigned long long)exp->f);                                \
        bad = 1;                                                                \
    }
    STAT_FIELDS(CMP)
#undef CMP
    double frag = exp->blocks ? (double)exp->fragmented / (double)exp->blocks : 0.0;
    double usage = exp->blocks ? (double)exp->in_use / (double)exp->blocks : 0.0;
    if (dabs(got->fragmentation - frag) > 1e-12) {
        print_error("%s:%d: [%s] fragmentation = %.17g, expected %.17g\n", file, line,
                    step, got->fragmentation, frag);
        bad = 1;
    }
    if (dabs(got->usage - usage) > 1e-12) {
        print_error("%s:%d: [%s] usage = %.17g, expected %.17g\n", file, line, step,
                    got->usage, usage);
        bad = 1;
    }
    if (bad)
        _fail(file, line);
}

static void expect_pool_stats_at(kvp_pool *pool, const kvp_stats *exp,
                                 const char *step, const char *file, int line)
{
    kvp_stats got = kvptest_stats_at(pool, file, line);
    expect_stats_at(&got, exp, step, file, line);
    kvptest_check_at(pool, file, line);
}
#define EXPECT_STATS(pool, exp, step) \
    expect_pool_stats_at((pool), &(exp), (step), __FILE__, __LINE__)

/* ---- counters ----------------------------------------------------------- */

static void test_counters(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_config cfg = kvptest_config(8);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.grow_on_exhaustion = 1;
    cfg.max_blocks = 10;
    kvptest_evrec_attach(&rec, &cfg);
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_stats e;
    memset(&e, 0, sizeof e);
    e.blocks = 8;
    e.free = e.vacant = 8;
    EXPECT_STATS(pool, e, "fresh");

    kvp_block ids[16];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 48, 1, ids, 16); /* 0 1 2 */
    e.in_use = 3; e.free = e.vacant = 5; e.owners = 1; e.peak_in_use = 3;
    e.alloc_calls = 1; e.blocks_allocated = 3;
    EXPECT_STATS(pool, e, "alloc 3");

    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 2), 3);
    e.in_use = 4; e.free = e.vacant = 4; e.owners = 2; e.peak_in_use = 4;
    e.alloc_calls = 2; e.blocks_allocated = 4;
    EXPECT_STATS(pool, e, "take");

    KVP_ASSERT_OK(kvp_take_id(pool, 6, KVP_ANON));
    e.in_use = 5; e.free = e.vacant = 3; e.peak_in_use = 5;
    e.alloc_calls = 3; e.blocks_allocated = 5;
    EXPECT_STATS(pool, e, "take_id anon");

    KVP_ASSERT_OK(kvp_claim(pool, 0, 2));
    {
        /* Whether a claim counts in blocks_allocated is not specified. */
        kvp_stats g = kvptest_stats(pool);
        assert_true(g.blocks_allocated >= e.blocks_allocated);
        e.blocks_allocated = g.blocks_allocated;
        e.reused = g.reused;
    }
    e.shared = 1;
    EXPECT_STATS(pool, e, "claim in use");

    KVP_ASSERT_OK(kvp_set_fill(pool, 1, 5));
    e.fragmented = 1; e.tokens_in_use = 5;
    EXPECT_STATS(pool, e, "set_fill");

    kvp_hash h100 = kvptest_hash(100), h101 = kvptest_hash(101);
    KVP_ASSERT_OK(kvp_publish(pool, 0, &h100));
    KVP_ASSERT_OK(kvp_publish(pool, 1, &h101));
    e.indexed = 2;
    EXPECT_STATS(pool, e, "publish");

    kvptest_free1(pool, 1, 1);
    e.free_calls = 1; e.blocks_freed = 1; e.in_use = 4; e.free = 4; e.cached = 1;
    e.fragmented = 0; e.tokens_in_use = 0;
    EXPECT_STATS(pool, e, "free cached");

    kvptest_free1(pool, 0, 1);
    e.free_calls = 2; e.blocks_freed = 2; e.shared = 0;
    EXPECT_STATS(pool, e, "free one ref of shared");

    kvp_block one = 1;
    KVP_ASSERT_REFUSED(pool, kvp_free(pool, &one, 1, 1), KVP_EDOUBLEFREE);
    KVP_ASSERT_REFUSED(pool, kvp_take_id(pool, 2, 1), KVP_EBUSY);
    EXPECT_STATS(pool, e, "refused calls count nothing");

    size_t nf = 0;
    KVP_ASSERT_OK(kvp_free_owner(pool, 2, &nf));
    KVP_ASSERT_EQ(nf, 2);
    e.free_calls = 3; e.blocks_freed = 4; e.owners = 1; e.in_use = 2;
    e.free = 6; e.vacant = 4; e.cached = 2;
    EXPECT_STATS(pool, e, "free_owner");

    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 3), 3);
    e.reused += 1; e.alloc_calls = 4; e.blocks_allocated += 1; e.in_use = 3;
    e.free = 5; e.vacant = 3; e.owners = 2;
    EXPECT_STATS(pool, e, "take reused");

    /* 6 needed, 5 free (3 vacant never used, 2 cached used before), grow 1. */
    KVP_ASSERT_EQ(kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 6, 3, ids, 16), 6);
    e.reused += 2; e.evictions = 2; e.grown = 1; e.blocks = 9; e.in_use = 9;
    e.free = e.vacant = e.cached = 0; e.indexed = 0; e.alloc_calls = 5;
    e.blocks_allocated += 6; e.peak_in_use = 9;
    EXPECT_STATS(pool, e, "alloc with eviction and growth");
    KVP_ASSERT_EQ(rec.n, 2);

    kvp_block b;
    size_t n;
    KVP_ASSERT_REFUSED(pool, kvp_alloc(pool, KVP_STREAM_SHARED, 32, 4, 0, ids, 16, &n),
                       KVP_EEXHAUSTED);
    e.exhausted = 1;
    EXPECT_STATS(pool, e, "exhausted alloc");

    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 4), 9);
    e.grown = 2; e.blocks = 10; e.in_use = 10; e.peak_in_use = 10; e.owners = 3;
    e.alloc_calls = 6; e.blocks_allocated += 1;
    EXPECT_STATS(pool, e, "take with growth to the cap");

    KVP_ASSERT_REFUSED(pool, kvp_take(pool, KVP_STREAM_SHARED, 4, &b), KVP_EEXHAUSTED);
    e.exhausted = 2;
    EXPECT_STATS(pool, e, "exhausted take");

    uint32_t cnt = 0;
    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 5, &cnt));
    KVP_ASSERT_EQ(cnt, 0);
    EXPECT_STATS(pool, e, "extend at cap");

    KVP_ASSERT_OK(kvp_free_owner(pool, 3, &nf));
    KVP_ASSERT_EQ(nf, 7);
    e.free_calls = 4; e.blocks_freed += 7; e.in_use = 3; e.free = e.vacant = 7;
    e.owners = 2;
    EXPECT_STATS(pool, e, "free_owner 7");

    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 5, &cnt));
    KVP_ASSERT_EQ(cnt, 2);
    e.retired = 2; e.blocks = 8; e.free = e.vacant = 5;
    EXPECT_STATS(pool, e, "shrink");

    KVP_ASSERT_OK(kvp_extend(pool, KVP_STREAM_SHARED, 5, &cnt));
    KVP_ASSERT_EQ(cnt, 2);
    e.extended = 2; e.blocks = 10; e.free = e.vacant = 7;
    EXPECT_STATS(pool, e, "extend");

    kvp_block r, m;
    KVP_ASSERT_OK(kvp_retire_top(pool, &r, &m));
    KVP_ASSERT_EQ(r, 9);
    KVP_ASSERT_EQ(m, 0);
    e.relocated = 1; e.retired = 3; e.blocks = 9; e.free = e.vacant = 6;
    EXPECT_STATS(pool, e, "retire_top relocating");

    KVP_ASSERT_OK(kvp_set_fill(pool, 2, 3));
    KVP_ASSERT_OK(kvp_set_fill(pool, 0, 16));
    e.fragmented = 1; e.tokens_in_use = 19;
    EXPECT_STATS(pool, e, "fill");

    kvp_hash h7 = kvptest_hash(7);
    KVP_ASSERT_OK(kvp_publish(pool, 2, &h7));
    KVP_ASSERT_OK(kvp_unpublish(pool, 2));
    e.evictions = 3;
    EXPECT_STATS(pool, e, "unpublish");

    KVP_ASSERT_OK(kvp_stats_reset(pool));
    e.alloc_calls = e.blocks_allocated = e.free_calls = e.blocks_freed = 0;
    e.reused = e.exhausted = e.grown = e.extended = e.retired = e.relocated = 0;
    e.evictions = 0;
    e.peak_in_use = e.in_use;
    EXPECT_STATS(pool, e, "stats_reset");

    KVP_ASSERT_EQ(kvptest_take(pool, KVP_STREAM_SHARED, 5), 1);
    e.alloc_calls = 1; e.blocks_allocated = 1; e.reused = 1; e.in_use = 4;
    e.peak_in_use = 4; e.free = e.vacant = 5; e.owners = 3;
    EXPECT_STATS(pool, e, "after reset");
    kvp_pool_destroy(pool);
}

static void test_null_block_stats(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(4);
    cfg.null_block = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_stats e;
    memset(&e, 0, sizeof e);
    e.blocks = 4; e.in_use = 1; e.free = e.vacant = 3; e.peak_in_use = 1;
    EXPECT_STATS(pool, e, "fresh with null block");
    KVP_ASSERT_OK(kvp_stats_reset(pool));
    EXPECT_STATS(pool, e, "reset with null block");
    kvp_pool_destroy(pool);
}

/* The take's fast path (nothing hooked, the LIFO stack's array not empty)
 * counts its blocks in one tally that the next call folds in
 * (defer.c).  The counters must read as if counted at once: the same as a
 * twin pool with an eviction callback, which is hooked and never takes
 * that path, after every call.  In a one-stream pool fast takes draw only
 * blocks used before, so they raise the peak only after kvp_stats_reset
 * has lowered it; the steps do that, and the free right after the run must
 * not lose it. */
#define STEP_RESET 9
static void test_fast_take_counters(void **state)
{
    (void)state;
    kvptest_evrec rec;
    kvp_config cfg = kvptest_config(16);
    kvp_pool *fast = kvptest_create(&cfg);
    kvptest_evrec_attach(&rec, &cfg);
    kvp_pool *hooked = kvptest_create(&cfg);
    kvp_pool *pools[2] = {fast, hooked};
    uint32_t hint[2][3];
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 3; o++)
            hint[i][o] = KVP_HINT_NONE;
    /* A take for owner o (1, 2), a free of owner -o, a stats reset; 0 ends.
     * After the reset every take but each owner's first is a fast one. */
    static const int steps[] = {1, 1, 1, 1, 1, 1, -1, STEP_RESET, 2, 1, 2, 2, 1, 1, -2,
                                2, -1, 1, 0};
    uint64_t in_use = 0, peak = 0;
    for (size_t k = 0; steps[k]; k++) {
        char what[32];
        snprintf(what, sizeof what, "step %zu (%d)", k, steps[k]);
        int o = steps[k] > 0 ? steps[k] : -steps[k];
        for (int i = 0; i < 2; i++) {
            kvp_block b;
            if (steps[k] == STEP_RESET)
                KVP_ASSERT_OK(kvp_stats_reset(pools[i]));
            else if (steps[k] > 0)
                KVP_ASSERT_OK(kvp_take_hinted(pools[i], KVP_STREAM_SHARED, (kvp_owner)o,
                                              &hint[i][o], &b));
            else
                KVP_ASSERT_OK(kvp_free_owner(pools[i], (kvp_owner)o, NULL));
        }
        kvp_stats want = kvptest_stats(hooked);
        EXPECT_STATS(fast, want, what);
        if (steps[k] == STEP_RESET)
            peak = in_use;
        else if (steps[k] > 0)
            peak = ++in_use > peak ? in_use : peak;
        else
            in_use = want.in_use;
        KVP_ASSERT_EQ(want.in_use, in_use);
        KVP_ASSERT_EQ(want.peak_in_use, peak);
    }
    /* The run after the reset reached 6 with fast takes. */
    KVP_ASSERT_EQ(kvptest_stats(fast).peak_in_use, 6);
    kvp_pool_destroy(fast);
    kvp_pool_destroy(hooked);
}

/* ---- history ------------------------------------------------------------ */

static void test_history_ring(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(16);
    cfg.history_len = 3;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_stats hist[8];
    size_t n = 99;
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
    KVP_ASSERT_EQ(n, 0);
    KVP_ASSERT_OK(kvp_stats_history(pool, NULL, 0, &n));
    KVP_ASSERT_EQ(n, 0);
    for (uint64_t i = 1; i <= 10; i++) {
        kvptest_take(pool, KVP_STREAM_SHARED, 1);
        uint64_t fp = kvptest_fp(pool);
        KVP_ASSERT_OK(kvp_stats_snapshot(pool));
        KVP_ASSERT_EQ(kvptest_fp(pool), fp); /* history is not pool state */
        size_t want = i < 3 ? i : 3;
        memset(hist, 0, sizeof hist);
        KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
        KVP_ASSERT_EQ(n, want);
        for (size_t k = 0; k < n; k++) {
            /* oldest first: in_use of snapshot j is j */
            uint64_t j = i - (n - 1 - k);
            if (hist[k].in_use != j)
                fail_msg("after %llu snapshots: history[%zu].in_use = %llu, expected %llu",
                         (unsigned long long)i, k, (unsigned long long)hist[k].in_use,
                         (unsigned long long)j);
            KVP_ASSERT_EQ(hist[k].alloc_calls, j);
            KVP_ASSERT_EQ(hist[k].blocks, 16);
        }
        kvptest_check(pool);
    }
    /* Too small: ESPACE with the count. */
    n = 0;
    KVP_ASSERT_STATUS(kvp_stats_history(pool, hist, 2, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    n = 0;
    KVP_ASSERT_STATUS(kvp_stats_history(pool, NULL, 0, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_STATUS(kvp_stats_history(pool, NULL, 3, &n), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_stats_history(pool, hist, 3, NULL), KVP_EINVAL);
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 3, &n));
    KVP_ASSERT_EQ(n, 3);
    /* stats_reset keeps the ring. */
    KVP_ASSERT_OK(kvp_stats_reset(pool));
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_EQ(hist[2].in_use, 10);
    KVP_ASSERT_EQ(hist[2].alloc_calls, 10);
    KVP_ASSERT_OK(kvp_stats_snapshot(pool));
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_EQ(hist[0].in_use, 9);
    KVP_ASSERT_EQ(hist[2].alloc_calls, 0);
    KVP_ASSERT_EQ(hist[2].in_use, 10);
    kvptest_done(pool);

    /* history_len 0: snapshots refused, the ring is empty. */
    cfg.history_len = 0;
    pool = kvptest_create(&cfg);
    KVP_ASSERT_REFUSED(pool, kvp_stats_snapshot(pool), KVP_EINVAL);
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
    KVP_ASSERT_EQ(n, 0);
    kvp_pool_destroy(pool);

    /* history_len 1: only the latest. */
    cfg.history_len = 1;
    pool = kvptest_create(&cfg);
    for (int i = 0; i < 3; i++) {
        kvptest_take(pool, KVP_STREAM_SHARED, 1);
        KVP_ASSERT_OK(kvp_stats_snapshot(pool));
    }
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 8, &n));
    KVP_ASSERT_EQ(n, 1);
    KVP_ASSERT_EQ(hist[0].in_use, 3);
    kvptest_done(pool);
}

static size_t history_count(kvp_pool *pool)
{
    size_t n = 0;
    kvp_status st = kvp_stats_history(pool, NULL, 0, &n);
    if (st != KVP_OK && st != KVP_ESPACE)
        KVP_ASSERT_OK(st);
    return n;
}

static void test_history_every_call(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.history_len = 16;
    cfg.history_every_call = 1;
    cfg.reuse = KVP_REUSE_LOWEST;
    kvp_pool *pool = kvptest_create(&cfg);
    KVP_ASSERT_EQ(history_count(pool), 0);
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_EQ(history_count(pool), 1);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 32, 1, ids, 8);
    KVP_ASSERT_EQ(history_count(pool), 2);

    /* Calls that change nothing take no snapshot. */
    kvp_hash h = kvptest_hash(1);
    kvp_block out;
    kvp_block_info info;
    kvp_stats st;
    uint32_t u;
    size_t n;
    uint64_t fp;
    char buf[8192];
    KVP_ASSERT_STATUS(kvp_lookup(pool, KVP_STREAM_SHARED, &h, &out), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_block_get(pool, b, &info));
    KVP_ASSERT_OK(kvp_stats_get(pool, &st));
    KVP_ASSERT_OK(kvp_free_count(pool, KVP_STREAM_SHARED, &u));
    KVP_ASSERT_OK(kvp_owner_blocks(pool, 1, ids, 8, &n));
    KVP_ASSERT_OK(kvp_pool_fingerprint(pool, &fp));
    KVP_ASSERT_OK(kvp_pool_check(pool, buf, sizeof buf));
    KVP_ASSERT_OK(kvp_stats_json(pool, buf, sizeof buf, &n));
    KVP_ASSERT_OK(kvp_stats_prometheus(pool, NULL, buf, sizeof buf, &n));
    kvp_stats hist[16];
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 16, &n));
    KVP_ASSERT_EQ(n, 2);
    kvp_block seven = 7;
    KVP_ASSERT_STATUS(kvp_free(pool, &seven, 1, 1), KVP_EDOUBLEFREE);
    KVP_ASSERT_EQ(history_count(pool), 2);

    /* Changing calls do, and the snapshot is the state after the call. */
    KVP_ASSERT_OK(kvp_set_fill(pool, b, 3));
    KVP_ASSERT_EQ(history_count(pool), 3);
    kvptest_free1(pool, b, 1);
    KVP_ASSERT_EQ(history_count(pool), 4);
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 16, &n));
    kvp_stats now = kvptest_stats(pool);
    expect_stats_at(&hist[n - 1], &now, "last snapshot == now", __FILE__, __LINE__);
    KVP_ASSERT_EQ(hist[0].in_use, 1);
    KVP_ASSERT_EQ(hist[1].in_use, 3);
    KVP_ASSERT_EQ(hist[2].fragmented, 1);
    KVP_ASSERT_EQ(hist[3].in_use, 2);
    /* A manual snapshot still appends. */
    KVP_ASSERT_OK(kvp_stats_snapshot(pool));
    KVP_ASSERT_EQ(history_count(pool), 5);
    /* The ring wraps at history_len. */
    for (int i = 0; i < 40; i++) {
        kvp_block x = kvptest_take(pool, KVP_STREAM_SHARED, 2);
        kvptest_free1(pool, x, 2);
    }
    KVP_ASSERT_EQ(history_count(pool), 16);
    KVP_ASSERT_OK(kvp_stats_history(pool, hist, 16, &n));
    now = kvptest_stats(pool);
    expect_stats_at(&hist[15], &now, "last snapshot after wrap", __FILE__, __LINE__);
    KVP_ASSERT_EQ(hist[14].in_use, now.in_use + 1);
    kvptest_done(pool);
}

/* ---- Prometheus --------------------------------------------------------- */

typedef struct prom_family {
    char name[128];
    char type[32];
    int has_help;
    int n_samples;
} prom_family;

static int valid_metric_name(const char *s, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalpha(c) || c == '_' || c == ':' || (i > 0 && isdigit(c))))
            return 0;
    }
    return 1;
}

static prom_family *family_of(prom_family *fams, int nf, const char *name, size_t len)
{
    for (int i = 0; i < nf; i++) {
        size_t fl = strlen(fams[i].name);
        if (fl == len && memcmp(fams[i].name, name, len) == 0)
            return &fams[i];
        /* A counter family may be named without its _total suffix. */
        if (fl + 6 == len && memcmp(fams[i].name, name, fl) == 0 &&
            memcmp(name + fl, "_total", 6) == 0)
            return &fams[i];
    }
    return NULL;
}

/* Check the exposition text and count counter and gauge families; find the
 * value of the sample named prefix_<want> or prefix_<want>_total (a counter
 * when want_counter; prefix<want> for a prefix ending in ':').  The metric names are assumed to follow the kvp_stats
 * field names. */
typedef struct prom_result {
    int n_counters, n_gauges, n_samples;
    int found;
    double value;
} prom_result;

static prom_result check_prometheus(const char *text, const char *prefix,
                                    const char *want, int want_counter)
{
    prom_result res = {0, 0, 0, 0, 0.0};
    prom_family fams[128];
    int nf = 0;
    size_t plen = strlen(prefix);
    size_t sep = plen && prefix[plen - 1] == ':' ? 0 : 1; /* "vllm:" + name */
    size_t tl = strlen(text);
    if (tl == 0 || text[tl - 1] != '\n')
        fail_msg("Prometheus text does not end with a newline");
    const char *p = text;
    int lineno = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = (size_t)(nl - p);
        char line[512];
        lineno++;
        if (len >= sizeof line) {
            fail_msg("line %d too long", lineno);
            len = sizeof line - 1; /* not reached: fail_msg does not return */
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        if (len == 0)
            continue;
        if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
            int is_help = line[2] == 'H';
            char *name = line + 7;
            char *sp = strchr(name, ' ');
            if (sp == NULL)
                fail_msg("line %d: malformed: %s", lineno, line);
            size_t nl2 = (size_t)(sp - name);
            if (!valid_metric_name(name, nl2) || strncmp(name, prefix, plen) != 0 ||
                (sep && name[plen] != '_'))
                fail_msg("line %d: bad metric name (prefix \"%s\"): %s", lineno, prefix,
                         line);
            prom_family *f = NULL;
            for (int i = 0; i < nf; i++)
                if (strlen(fams[i].name) == nl2 && memcmp(fams[i].name, name, nl2) == 0)
                    f = &fams[i];
            if (f == NULL) {
                if (nf == (int)ARRAY_LEN(fams))
                    fail_msg("too many metric families");
                f = &fams[nf++];
                memset(f, 0, sizeof *f);
                memcpy(f->name, name, nl2 < 127 ? nl2 : 127);
            }
            if (f->n_samples > 0)
                fail_msg("line %d: HELP/TYPE after samples of %s", lineno, f->name);
            if (is_help) {
                if (f->has_help)
                    fail_msg("line %d: second HELP for %s", lineno, f->name);
                f->has_help = 1;
                if (sp[1] == '\0')
                    fail_msg("line %d: empty HELP for %s", lineno, f->name);
            } else {
                if (f->type[0])
                    fail_msg("line %d: second TYPE for %s", lineno, f->name);
                const char *t = sp + 1;
                if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "untyped") &&
                    strcmp(t, "histogram") && strcmp(t, "summary"))
                    fail_msg("line %d: unknown type \"%s\"", lineno, t);
                snprintf(f->type, sizeof f->type, "%s", t);
                if (strcmp(t, "counter") == 0)
                    res.n_counters++;
                if (strcmp(t, "gauge") == 0)
                    res.n_gauges++;
            }
            continue;
        }
        if (line[0] == '#')
            continue; /* a comment */
        /* A sample: name[{labels}] value [timestamp] */
        size_t nlen = strcspn(line, "{ ");
        if (!valid_metric_name(line, nlen) || strncmp(line, prefix, plen) != 0 ||
            (sep && line[plen] != '_'))
            fail_msg("line %d: bad sample name (prefix \"%s\"): %s", lineno, prefix, line);
        prom_family *f = family_of(fams, nf, line, nlen);
        if (f == NULL || !f->type[0] || !f->has_help)
            fail_msg("line %d: sample without HELP and TYPE before it: %s", lineno, line);
        f->n_samples++;
        int is_counter = strcmp(f->type, "counter") == 0;
        if (is_counter && (nlen < 6 || memcmp(line + nlen - 6, "_total", 6) != 0))
            fail_msg("line %d: counter sample not named *_total: %s", lineno, line);
        const char *v = line + nlen;
        if (*v == '{') {
            v = strchr(v, '}');
            if (v == NULL)
                fail_msg("line %d: unterminated labels", lineno);
            v++;
        }
        if (*v != ' ')
            fail_msg("line %d: no value: %s", lineno, line);
        v++;
        char *end = NULL;
        double val = strtod(v, &end);
        if (end == v || (*end != '\0' && *end != ' '))
            fail_msg("line %d: bad value: %s", lineno, line);
        res.n_samples++;
        char name[256];
        memcpy(name, line, nlen < 255 ? nlen : 255);
        name[nlen < 255 ? nlen : 255] = '\0';
        /* Names are matched exactly: prefix_<want> or prefix_<want>_total. */
        const char *rest = name + plen + sep;
        size_t wl = want ? strlen(want) : 0;
        int match = want && strncmp(rest, want, wl) == 0 &&
                    (rest[wl] == '\0' || strcmp(rest + wl, "_total") == 0);
        if (!res.found && match && (!want_counter || is_counter)) {
            res.found = 1;
            res.value = val;
        }
    }
    for (int i = 0; i < nf; i++)
        if (fams[i].n_samples == 0)
            fail_msg("metric family %s has no sample", fams[i].name);
    return res;
}

/* A pool with distinct, non-zero numbers in several counters. */
static kvp_pool *busy_pool(void)
{
    kvp_config cfg = kvptest_config(8);
    cfg.reuse = KVP_REUSE_LOWEST;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block ids[8];
    kvptest_alloc(pool, KVP_STREAM_SHARED, 16 * 5, 1, ids, 8);
    for (int i = 0; i < 3; i++) {
        kvp_hash h = kvptest_hash(10 + (uint64_t)i);
        KVP_ASSERT_OK(kvp_publish(pool, ids[i], &h));
    }
    KVP_ASSERT_OK(kvp_free(pool, ids, 3, 1));
    uint32_t ne = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 2, &ne)); /* evictions 2 */
    KVP_ASSERT_OK(kvp_set_fill(pool, ids[3], 7));
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.evictions, 2);
    KVP_ASSERT_EQ(st.in_use, 2);
    KVP_ASSERT_EQ(st.blocks_allocated, 5);
    return pool;
}

/* Render with options into a malloc'd string, checking the two-pass sizes. */
static char *render_opts(kvp_pool *pool, const kvp_prometheus_opts *opts)
{
    size_t need = 0, got = 0;
    KVP_ASSERT_STATUS(kvp_stats_prometheus_opts(pool, opts, NULL, 0, &need), KVP_ESPACE);
    if (need == 0)
        fail_msg("Prometheus: needed length 0");
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    KVP_ASSERT_OK(kvp_stats_prometheus_opts(pool, opts, buf, need + 1, &got));
    KVP_ASSERT_EQ(got, need);
    KVP_ASSERT_EQ(strlen(buf), need);
    return buf;
}

/* The same with kvp_stats_prometheus's arguments: a prefix, no labels. */
static char *render_prom(kvp_pool *pool, const char *prefix, size_t *len_out)
{
    kvp_prometheus_opts opts = {prefix, NULL, 0};
    char *buf = render_opts(pool, &opts);
    *len_out = strlen(buf);
    return buf;
}

static void test_prometheus(void **state)
{
    (void)state;
    kvp_pool *pool = busy_pool();
    size_t len = 0;
    char *text = render_prom(pool, NULL, &len);
    prom_result r = check_prometheus(text, "kvpool", "evictions", 1);
    if (r.n_counters < 11)
        fail_msg("only %d counter families (11 rate counters in kvp_stats)\n%s",
                 r.n_counters, text);
    if (r.n_gauges < 9)
        fail_msg("only %d gauge families\n%s", r.n_gauges, text);
    if (!r.found)
        fail_msg("no counter sample named kvpool_evictions_total\n%s", text);
    if (r.value != 2.0)
        fail_msg("evictions counter = %g, expected 2", r.value);
    r = check_prometheus(text, "kvpool", "in_use", 0);
    if (!r.found || r.value != 2.0)
        fail_msg("no in_use sample with value 2 (found %d, value %g)", r.found, r.value);
    assert_non_null(strstr(text, "# HELP kvpool_"));
    assert_non_null(strstr(text, "# TYPE kvpool_"));
    assert_non_null(strstr(text, "_total "));

    /* Rendering changes nothing and is deterministic. */
    uint64_t fp = kvptest_fp(pool);
    size_t len2 = 0;
    char *again = render_prom(pool, NULL, &len2);
    KVP_ASSERT_EQ(len2, len);
    assert_string_equal(again, text);
    KVP_ASSERT_EQ(kvptest_fp(pool), fp);
    free(again);

    /* Exact sizes: cap == length is too small and writes nothing. */
    char *buf = malloc(len + 16);
    assert_non_null(buf);
    const size_t caps[4] = {1, len / 2, len - 1, len};
    for (int i = 0; i < 4; i++) {
        memset(buf, 'x', len + 16);
        size_t need = 0;
        KVP_ASSERT_REFUSED(pool, kvp_stats_prometheus(pool, NULL, buf, caps[i], &need),
                           KVP_ESPACE);
        KVP_ASSERT_EQ(need, len);
        size_t changed = 0, first = 0;
        for (size_t k = 0; k < len + 16; k++)
            if (buf[k] != 'x' && changed++ == 0)
                first = k;
        if (changed)
            fail_msg("cap %zu: KVP_ESPACE but %zu bytes written (first at %zu); the "
                     "header says nothing is written", caps[i], changed, first);
    }
    memset(buf, 'x', len + 16);
    KVP_ASSERT_OK(kvp_stats_prometheus(pool, NULL, buf, len + 1, NULL));
    KVP_ASSERT_EQ(buf[len], '\0');
    assert_string_equal(buf, text);
    KVP_ASSERT_STATUS(kvp_stats_prometheus(pool, NULL, NULL, 5, NULL), KVP_EINVAL);
    free(buf);
    free(text);
    kvptest_done(pool);
}

static void test_prometheus_prefix(void **state)
{
    (void)state;
    kvp_pool *pool = busy_pool();
    size_t len = 0;
    char *def = render_prom(pool, NULL, &len);
    char *named = render_prom(pool, "kvpool", &len);
    assert_string_equal(def, named); /* NULL means "kvpool" */
    free(def);
    free(named);

    const char *good[] = {"vllm_kv", "_x", "A9_", "a", "x1", "vllm:", "ns:kv", ":"};
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        char *t = render_prom(pool, good[i], &len);
        prom_result r = check_prometheus(t, good[i], "evictions", 1);
        if (!r.found || r.value != 2.0)
            fail_msg("prefix %s: evictions sample missing or wrong", good[i]);
        free(t);
    }
    const char *bad[] = {"1abc", "9", "a-b", "a b", "kv.pool", "a\nb", "x{y}", "\xc3\xa9"};
    char buf[16384];
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        size_t need = 0;
        kvp_status st = kvp_stats_prometheus(pool, bad[i], buf, sizeof buf, &need);
        if (st != KVP_EINVAL)
            fail_msg("prefix \"%s\": returned %d (%s), expected KVP_EINVAL", bad[i],
                     (int)st, kvp_strerror(st));
    }
    KVP_ASSERT_STATUS(kvp_stats_prometheus(NULL, NULL, buf, sizeof buf, NULL), KVP_EINVAL);
    kvptest_done(pool);
}

/* promtool check metrics on the text: the format as Prometheus reads it,
 * and its naming lint.  colon_names: the text uses a prefix with ':' (as
 * vLLM's names do), and the lint's one complaint about that, "metric names
 * should not contain ':'" (':' is meant for recording rules), is the only
 * one allowed.  Returns 0 when promtool is not installed. */
static int promtool_check(const char *text, int colon_names)
{
    if (access("/usr/bin/promtool", X_OK) != 0)
        return 0;
    char path[] = "/tmp/kvp_promtool_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/promtool check metrics >%s 2>&1", path);
    FILE *p = popen(cmd, "w");
    assert_non_null(p);
    fputs(text, p);
    int rc = pclose(p);
    FILE *out = fopen(path, "r");
    assert_non_null(out);
    char line[512];
    int other = 0, lines = 0;
    while (fgets(line, sizeof line, out)) {
        lines++;
        if (!colon_names || !strstr(line, "metric names should not contain ':'")) {
            other = 1;
            print_error("promtool: %s", line);
        }
    }
    fclose(out);
    unlink(path);
    if (other || (rc != 0 && lines == 0))
        fail_msg("promtool check metrics failed (rc %d) on:\n%s", rc, text);
    return 1;
}

/* The exact sample line `name value`, or NULL. */
static const char *find_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return p;
    return NULL;
}

/* A pool where two requests with the same 40-token prompt were admitted
 * (block_size 16): 80 prompt tokens, the second admission's 2 full blocks
 * (32 tokens; the last token is never served from cache) hit. */
static kvp_pool *admitted_pool(void)
{
    kvp_config cfg = kvptest_config(16);
    cfg.prefix_caching = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    uint32_t toks[40];
    for (uint32_t i = 0; i < 40; i++)
        toks[i] = 100 + i;
    for (uint64_t r = 1; r <= 2; r++) {
        kvp_seq *seq;
        size_t cached = 99;
        KVP_ASSERT_OK(kvp_seq_create(pool, r, NULL, &seq));
        KVP_ASSERT_OK(kvp_seq_admit(seq, toks, 40, &cached));
        KVP_ASSERT_EQ(cached, r == 1 ? 0 : 32);
    }
    kvp_stats st = kvptest_stats(pool);
    KVP_ASSERT_EQ(st.admitted_tokens, 80);
    KVP_ASSERT_EQ(st.prefix_tokens_hit, 32);
    return pool;
}

static void test_prometheus_vllm_names(void **state)
{
    (void)state;
    kvp_pool *pool = admitted_pool();
    kvp_stats st = kvptest_stats(pool);
    size_t len = 0;
    char *text = render_prom(pool, NULL, &len);
    check_prometheus(text, "kvpool", NULL, 0);
    assert_non_null(find_line(text, "# TYPE kvpool_prefix_cache_queries_total counter"));
    assert_non_null(find_line(text, "kvpool_prefix_cache_queries_total 80"));
    assert_non_null(find_line(text, "kvpool_prefix_cache_hits_total 32"));
    assert_non_null(find_line(text, "kvpool_admitted_tokens_total 80"));
    assert_non_null(find_line(text, "# TYPE kvpool_kv_cache_usage_perc gauge"));
    char want[96];
    snprintf(want, sizeof want, "kvpool_kv_cache_usage_perc %.6f", st.usage);
    if (st.usage <= 0.0 || !find_line(text, want))
        fail_msg("no line \"%s\" (usage %g) in\n%s", want, st.usage, text);
    promtool_check(text, 0);
    free(text);

    /* A prefix ending in ':' is joined without '_'. */
    char colon[16384];
    KVP_ASSERT_OK(kvp_stats_prometheus(pool, "vllm:", colon, sizeof colon, NULL));
    text = strdup(colon);
    prom_result r = check_prometheus(text, "vllm:", "prefix_cache_hits", 1);
    if (!r.found || r.value != 32.0)
        fail_msg("vllm:prefix_cache_hits_total missing or not 32\n%s", text);
    assert_non_null(find_line(text, "vllm:prefix_cache_queries_total 80"));
    assert_null(strstr(text, "vllm:_"));
    promtool_check(text, 1);
    free(text);

    /* The JSON object keeps one key per kvp_stats field. */
    char json[8192];
    KVP_ASSERT_OK(kvp_stats_json(pool, json, sizeof json, NULL));
    assert_non_null(strstr(json, "\"admitted_tokens\":80"));
    assert_null(strstr(json, "prefix_cache_hits"));
    kvptest_done(pool);
}

static void test_prometheus_labels(void **state)
{
    (void)state;
    kvp_pool *pool = admitted_pool();
    kvp_label labels[2] = {{"model_name", "llama-3-8b"}, {"pool", "gpu\"0\"\\a\nb"}};
    kvp_prometheus_opts opts = {"vllm:", labels, 2};
    char *text = render_opts(pool, &opts);
    check_prometheus(text, "vllm:", NULL, 0);
    const char *lab = "{model_name=\"llama-3-8b\",pool=\"gpu\\\"0\\\"\\\\a\\nb\"}";
    char want[256];
    snprintf(want, sizeof want, "vllm:prefix_cache_hits_total%s 32", lab);
    if (!find_line(text, want))
        fail_msg("no line %s in\n%s", want, text);
    snprintf(want, sizeof want, "vllm:blocks%s 16", lab);
    if (!find_line(text, want))
        fail_msg("no line %s in\n%s", want, text);
    /* Every sample carries the labels. */
    for (const char *p = text; *p; p = strchr(p, '\n') + 1)
        if (*p != '#' && strncmp(strchr(p, '{') ? strchr(p, '{') : "", lab, strlen(lab)) != 0)
            fail_msg("a sample without the labels: %.80s", p);
    promtool_check(text, 1);
    free(text);
    kvp_prometheus_opts own = {NULL, labels, 2};
    text = render_opts(pool, &own);
    promtool_check(text, 0);
    free(text);

    /* No labels, NULL prefix: kvp_stats_prometheus's text; NULL opts too. */
    kvp_prometheus_opts plain = {NULL, NULL, 0};
    char *a = render_opts(pool, &plain), *b = render_opts(pool, NULL);
    char c[16384];
    KVP_ASSERT_OK(kvp_stats_prometheus(pool, NULL, c, sizeof c, NULL));
    assert_string_equal(a, c);
    assert_string_equal(b, c);
    free(a);
    free(b);

    /* Refused: bad, reserved or repeated names, NULL strings, a bad prefix.
     * Nothing is written and the pool is unchanged. */
    const kvp_label bad[][2] = {
        {{"9x", "v"}, {"pool", "p"}},     {{"a-b", "v"}, {"pool", "p"}},
        {{"", "v"}, {"pool", "p"}},       {{"__name__", "v"}, {"pool", "p"}},
        {{"group", "g"}, {"pool", "p"}},  {{"pool", "a"}, {"tier", "t"}},
        {{"pool", "a"}, {"pool", "b"}},   {{NULL, "v"}, {"pool", "p"}},
        {{"model_name", NULL}, {"pool", "p"}}, {{"a:b", "v"}, {"pool", "p"}},
    };
    char buf[16384];
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        kvp_prometheus_opts o = {"kvpool", bad[i], 2};
        memset(buf, 'x', sizeof buf);
        size_t need = 12345;
        KVP_ASSERT_REFUSED(pool, kvp_stats_prometheus_opts(pool, &o, buf, sizeof buf, &need),
                           KVP_EINVAL);
        KVP_ASSERT_EQ(need, 12345);
        KVP_ASSERT_EQ(buf[0], 'x');
    }
    kvp_prometheus_opts nolabels = {NULL, NULL, 1}, badprefix = {"9p", labels, 1};
    KVP_ASSERT_REFUSED(pool, kvp_stats_prometheus_opts(pool, &nolabels, buf, sizeof buf, NULL),
                       KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_stats_prometheus_opts(pool, &badprefix, buf, sizeof buf, NULL),
                       KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_stats_prometheus_opts(NULL, &opts, buf, sizeof buf, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(pool, kvp_stats_prometheus_opts(pool, &opts, NULL, 3, NULL), KVP_EINVAL);
    kvptest_done(pool);
}

/* ---- JSON --------------------------------------------------------------- */

/* Structural check: one object, balanced, strings closed, nothing after. */
static void check_json_structure(const char *s)
{
    size_t i = 0, n = strlen(s);
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i == n || s[i] != '{')
        fail_msg("JSON does not start with '{': %s", s);
    int depth = 0, in_str = 0;
    size_t end = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            else if ((unsigned char)c < 0x20)
                fail_msg("control character inside a JSON string at %zu", i);
            continue;
        }
        if (c == '"')
            in_str = 1;
        else if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']') {
            if (--depth < 0)
                fail_msg("unbalanced JSON at %zu", i);
            if (depth == 0) {
                end = i + 1;
                break;
            }
        }
    }
    if (in_str || depth != 0 || end == 0)
        fail_msg("JSON not closed: %s", s);
    for (i = end; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            fail_msg("garbage after the JSON object at %zu: %s", i, s + i);
    if (strstr(s, "nan") || strstr(s, "inf") || strstr(s, "NaN") || strstr(s, "Infinity"))
        fail_msg("JSON contains a non-finite number: %s", s);
}

/* json.load with Python, and check that some key path ending in `key` holds
 * `value`.  Returns 0 when Python is not available. */
static int python_check_json(const char *json, const char *key, double value)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        return 0;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import json, sys\n"
             "d = json.load(sys.stdin)\n"
             "assert isinstance(d, dict), \"not an object\"\n"
             "found = []\n"
             "def walk(o, path):\n"
             "    if isinstance(o, dict):\n"
             "        for k, v in o.items(): walk(v, path + [k])\n"
             "    elif isinstance(o, list):\n"
             "        for i, v in enumerate(o): walk(v, path + [str(i)])\n"
             "    elif isinstance(o, (int, float)) and not isinstance(o, bool):\n"
             "        if path and path[-1] == \"%s\": found.append(o)\n"
             "walk(d, [])\n"
             "if %.17g not in found:\n"
             "    sys.stderr.write(\"key %s: %%r, expected %.17g\\n\" %% (found,))\n"
             "    sys.exit(1)\n"
             "'",
             key, value, key, value);
    FILE *p = popen(cmd, "w");
    if (p == NULL)
        return 0;
    fputs(json, p);
    int rc = pclose(p);
    if (rc != 0)
        fail_msg("python3 json.load / key check failed (rc %d) on:\n%s", rc, json);
    return 1;
}

static void test_json(void **state)
{
    (void)state;
    kvp_pool *pool = busy_pool();
    size_t need = 0;
    KVP_ASSERT_STATUS(kvp_stats_json(pool, NULL, 0, &need), KVP_ESPACE);
    if (need == 0)
        fail_msg("JSON: needed length 0");
    char *buf = malloc(need + 16);
    assert_non_null(buf);
    size_t got = 0;
    KVP_ASSERT_OK(kvp_stats_json(pool, buf, need + 1, &got));
    KVP_ASSERT_EQ(got, need);
    KVP_ASSERT_EQ(strlen(buf), need);
    check_json_structure(buf);
    assert_non_null(strstr(buf, "\"evictions\""));
    if (python_check_json(buf, "evictions", 2.0)) {
        python_check_json(buf, "in_use", 2.0);
        python_check_json(buf, "blocks_allocated", 5.0);
        python_check_json(buf, "fragmented", 1.0);
    } else {
        print_message("note: /usr/bin/python3 not available, JSON parse check skipped\n");
    }
    char *copy = strdup(buf);
    assert_non_null(copy);
    /* Too small writes nothing. */
    const size_t caps[3] = {1, need - 1, need};
    for (int i = 0; i < 3; i++) {
        memset(buf, 'x', need + 16);
        size_t n2 = 0;
        KVP_ASSERT_REFUSED(pool, kvp_stats_json(pool, buf, caps[i], &n2), KVP_ESPACE);
        KVP_ASSERT_EQ(n2, need);
        size_t changed = 0, first = 0;
        for (size_t k = 0; k < need + 16; k++)
            if (buf[k] != 'x' && changed++ == 0)
                first = k;
        if (changed)
            fail_msg("cap %zu: KVP_ESPACE but %zu bytes written (first at %zu); the "
                     "header says nothing is written", caps[i], changed, first);
    }
    KVP_ASSERT_OK(kvp_stats_json(pool, buf, need + 16, NULL));
    assert_string_equal(buf, copy);
    KVP_ASSERT_STATUS(kvp_stats_json(pool, NULL, 4, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_stats_json(NULL, buf, need + 16, NULL), KVP_EINVAL);

    /* A fresh pool (all zero, no blocks) renders valid JSON too. */
    kvp_config cfg = kvptest_config(0);
    kvp_pool *empty = kvptest_create(&cfg);
    char small[8192];
    KVP_ASSERT_OK(kvp_stats_json(empty, small, sizeof small, &need));
    check_json_structure(small);
    python_check_json(small, "blocks", 0.0);
    size_t plen = 0;
    char *prom = render_prom(empty, NULL, &plen);
    check_prometheus(prom, "kvpool", NULL, 0);
    free(prom);
    kvp_pool_destroy(empty);
    free(copy);
    free(buf);
    kvptest_done(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_take_counters),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_null_block_stats),
        cmocka_unit_test(test_history_ring),
        cmocka_unit_test(test_history_every_call),
        cmocka_unit_test(test_prometheus),
        cmocka_unit_test(test_prometheus_prefix),
        cmocka_unit_test(test_prometheus_vllm_names),
        cmocka_unit_test(test_prometheus_labels),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}
