/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_thread.c — many threads on one thread-safe pool.
 *
 * What it covers: 2, 4 and 8 threads hammer one pool created with
 * `thread_safe` using mixed calls (alloc, free, free_owner, set_fill,
 * publish, lookup + claim of shared hashes, evict, extend, shrink,
 * stats_get, stats_prometheus), each thread with its own owners.  Afterwards
 * the pool must be consistent: kvp_pool_check passes, blocks == in_use +
 * free, every block's references are exactly the ones the threads recorded
 * they hold (per block and per owner), and once every thread has freed
 * everything only the null block (if any) is in use.  A second test checks
 * the callback rule: an eviction callback calling back into the same
 * thread-safe pool gets KVP_EBUSY and changes nothing, while calling another
 * pool works.
 *
 * Why it is built this way: the threads share nothing but the pool and a
 * read-only hash alphabet; each keeps its own record and the records are
 * only read after pthread_join, so the test itself has no data race and the
 * ThreadSanitizer build (build-tsan/test_thread) reports only the library.
 * retire_top is left out on purpose: it moves blocks other threads hold,
 * which would make the per-thread records unverifiable.  Operation counts
 * scale with env KVP_TEST_SCALE (default 1; sanitizer builds set 0.2).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "kvptest.h"

#define MAXT 8
#define OWNERS_PER_THREAD 4
#define MAXREF 4096   /* references one thread records */
#define NHASH 16
#define BASE_OPS 20000 /* per thread at scale 1 */
#define POOL_BLOCKS 256
#define POOL_MAX 1024

static kvp_hash g_hash[NHASH];

static void init_hashes(void)
{
    memset(g_hash, 0, sizeof g_hash);
    for (int i = 0; i < NHASH; i++) {
        uint64_t v = (uint64_t)i + 1;
        for (int k = 0; k < 8; k++)
            g_hash[i].b[24 + k] = (uint8_t)(v >> (56 - 8 * k));
    }
}

/* One thread's view: the references it holds, per owner, in order. */
typedef struct worker {
    kvp_pool *pool;
    int tid;
    size_t ops;
    uint64_t rng;
    kvp_owner owner[OWNERS_PER_THREAD];
    uint32_t nref[OWNERS_PER_THREAD];
    kvp_block ref[OWNERS_PER_THREAD][MAXREF];
    /* first failure, reported by the main thread after join */
    char err[256];
    uint64_t n_ok, n_claims, n_stats;
} worker;

static uint32_t rn(worker *w, uint32_t n)
{
    return kvptest_rand_below(&w->rng, n);
}

static int werr(worker *w, const char *fmt, ...)
{
    if (w->err[0])
        return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return 1;
}

static int expect(worker *w, const char *what, kvp_status got, kvp_status a, kvp_status b,
                  kvp_status c)
{
    if (got == a || got == b || got == c)
        return 0;
    return werr(w, "thread %d: %s returned %d (%s)", w->tid, what, got, kvp_strerror(got));
}

static void drop_ref(worker *w, int o, uint32_t i)
{
    memmove(&w->ref[o][i], &w->ref[o][i + 1], (w->nref[o] - i - 1) * sizeof w->ref[o][0]);
    w->nref[o]--;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    kvp_pool *p = w->pool;
    static const kvp_stream any = KVP_STREAM_SHARED;
    for (size_t step = 0; step < w->ops && !w->err[0]; step++) {
        int o = (int)rn(w, OWNERS_PER_THREAD);
        uint32_t r = rn(w, 100);
        kvp_status s;
        if (r < 26) { /* alloc */
            kvp_block ids[16];
            size_t n = 0;
            uint64_t tokens = 1 + rn(w, 16 * 6);
            if (w->nref[o] + 16 > MAXREF)
                continue;
            s = kvp_alloc(p, any, tokens, w->owner[o], rn(w, 6), ids, 16, &n);
            if (expect(w, "kvp_alloc", s, KVP_OK, KVP_EEXHAUSTED, KVP_OK))
                break;
            if (s == KVP_OK) {
                if (n != (tokens + 15) / 16) {
                    werr(w, "thread %d: alloc returned %zu blocks for %" PRIu64 " tokens",
                         w->tid, n, tokens);
                    break;
                }
                for (size_t i = 0; i < n; i++)
                    w->ref[o][w->nref[o]++] = ids[i];
            }
        } else if (r < 42) { /* free some of one owner's references */
            if (!w->nref[o])
                continue;
            kvp_block ids[8];
            uint32_t k = 1 + rn(w, w->nref[o] < 8 ? w->nref[o] : 8);
            for (uint32_t i = 0; i < k; i++) {
                uint32_t j = rn(w, w->nref[o]);
                ids[i] = w->ref[o][j];
                drop_ref(w, o, j);
            }
            s = kvp_free(p, ids, k, w->owner[o]);
            if (expect(w, "kvp_free of its own references", s, KVP_OK, KVP_OK, KVP_OK))
                break;
        } else if (r < 48) { /* free_owner */
            size_t n = 0;
            s = kvp_free_owner(p, w->owner[o], &n);
            if (expect(w, "kvp_free_owner", s, w->nref[o] ? KVP_OK : KVP_ENOTFOUND,
                       w->nref[o] ? KVP_OK : KVP_ENOTFOUND, KVP_OK))
                break;
            if (s == KVP_OK && n != w->nref[o]) {
                werr(w, "thread %d: free_owner dropped %zu references, it held %" PRIu32,
                     w->tid, n, w->nref[o]);
                break;
            }
            w->nref[o] = 0;
        } else if (r < 56) { /* set_fill on one of its blocks */
            if (!w->nref[o])
                continue;
            s = kvp_set_fill(p, w->ref[o][rn(w, w->nref[o])], rn(w, 17));
            if (expect(w, "kvp_set_fill", s, KVP_OK, KVP_OK, KVP_OK))
                break;
        } else if (r < 68) { /* publish one of its blocks under a shared hash */
            if (!w->nref[o])
                continue;
            s = kvp_publish(p, w->ref[o][rn(w, w->nref[o])], &g_hash[rn(w, NHASH)]);
            /* EBUSY: another thread sharing the block published it first */
            if (expect(w, "kvp_publish", s, KVP_OK, KVP_EBUSY, KVP_OK))
                break;
        } else if (r < 82) { /* lookup a shared hash, claim what was found */
            kvp_block b = KVP_NO_BLOCK;
            if (w->nref[o] + 1 > MAXREF)
                continue;
            s = kvp_lookup(p, any, &g_hash[rn(w, NHASH)], &b);
            if (expect(w, "kvp_lookup", s, KVP_OK, KVP_ENOTFOUND, KVP_OK))
                break;
            if (s != KVP_OK)
                continue;
            /* Between the two calls another thread may have evicted the
             * block (ENOTFOUND) or shrunk it away (ERANGE). */
            s = kvp_claim(p, b, w->owner[o]);
            if (expect(w, "kvp_claim", s, KVP_OK, KVP_ENOTFOUND, KVP_ERANGE))
                break;
            if (s == KVP_OK) {
                w->ref[o][w->nref[o]++] = b;
                w->n_claims++;
            }
        } else if (r < 86) {
            uint32_t n = 0;
            s = kvp_evict(p, any, 1 + rn(w, 4), &n);
            if (expect(w, "kvp_evict", s, KVP_OK, KVP_OK, KVP_OK))
                break;
        } else if (r < 89) {
            uint32_t n = 0;
            s = kvp_extend(p, any, 1 + rn(w, 8), &n);
            if (expect(w, "kvp_extend", s, KVP_OK, KVP_OK, KVP_OK))
                break;
        } else if (r < 92) {
            uint32_t n = 0;
            s = kvp_shrink(p, any, 32 + rn(w, 64), &n);
            if (expect(w, "kvp_shrink", s, KVP_OK, KVP_OK, KVP_OK))
                break;
        } else if (r < 97) {
            kvp_stats st;
            s = kvp_stats_get(p, &st);
            if (expect(w, "kvp_stats_get", s, KVP_OK, KVP_OK, KVP_OK))
                break;
            if (st.blocks != st.in_use + st.free || st.free != st.vacant + st.cached) {
                werr(w, "thread %d: inconsistent stats blocks=%" PRIu64 " in_use=%" PRIu64
                     " free=%" PRIu64 " vacant=%" PRIu64 " cached=%" PRIu64, w->tid,
                     st.blocks, st.in_use, st.free, st.vacant, st.cached);
                break;
            }
            w->n_stats++;
        } else {
            char buf[16384];
            size_t need = 0;
            s = kvp_stats_prometheus(p, NULL, buf, sizeof buf, &need);
            if (expect(w, "kvp_stats_prometheus", s, KVP_OK, KVP_OK, KVP_OK))
                break;
            if (need == 0 || strlen(buf) != need) {
                werr(w, "thread %d: prometheus length %zu, strlen %zu", w->tid, need,
                     strlen(buf));
                break;
            }
        }
        w->n_ok++;
    }
    return NULL;
}

static void *worker_drain(void *arg)
{
    worker *w = arg;
    for (int o = 0; o < OWNERS_PER_THREAD && !w->err[0]; o++) {
        size_t n = 0;
        kvp_status s = kvp_free_owner(w->pool, w->owner[o], &n);
        if (s != (w->nref[o] ? KVP_OK : KVP_ENOTFOUND))
            werr(w, "thread %d: final free_owner: %s", w->tid, kvp_strerror(s));
        else if (s == KVP_OK && n != w->nref[o])
            werr(w, "thread %d: final free_owner dropped %zu, held %" PRIu32, w->tid, n,
                 w->nref[o]);
        w->nref[o] = 0;
    }
    return NULL;
}

static uint64_t g_evictions_seen; /* written only inside callbacks (pool lock held) */

static void count_evict(void *user, const kvp_hash *h, kvp_block b)
{
    (void)user;
    (void)h;
    (void)b;
    g_evictions_seen++;
}

static int cmp_block(const void *a, const void *b)
{
    kvp_block x = *(const kvp_block *)a, y = *(const kvp_block *)b;
    return x < y ? -1 : x > y;
}

/* Runs fn on each of the nthreads workers, one thread each, waits for all
 * of them, then fails the test with the first error a worker recorded. */
static void run_workers(worker *w, int nthreads, void *(*fn)(void *))
{
    pthread_t th[MAXT];
    for (int t = 0; t < nthreads; t++)
        assert_int_equal(pthread_create(&th[t], NULL, fn, &w[t]), 0);
    for (int t = 0; t < nthreads; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    for (int t = 0; t < nthreads; t++)
        if (w[t].err[0])
            fail_msg("%s", w[t].err);
}

static void run_threads(int nthreads, int null_block, kvp_reuse reuse)
{
    kvp_config cfg;
    assert_int_equal(kvp_config_default(&cfg), KVP_OK);
    cfg.block_size = 16;
    cfg.num_blocks = POOL_BLOCKS;
    cfg.max_blocks = POOL_MAX;
    cfg.grow_on_exhaustion = 1;
    cfg.thread_safe = 1;
    cfg.null_block = null_block;
    cfg.reuse = reuse;
    cfg.on_evict = count_evict;
    kvp_pool *p = NULL;
    assert_int_equal(kvp_pool_create(&cfg, &p), KVP_OK);
    g_evictions_seen = 0;

    worker *w = calloc((size_t)nthreads, sizeof *w);
    assert_non_null(w);
    size_t ops = (size_t)((double)BASE_OPS * kvptest_scale());
    if (ops < 100)
        ops = 100;
    for (int t = 0; t < nthreads; t++) {
        w[t].pool = p;
        w[t].tid = t;
        w[t].ops = ops;
        w[t].rng = 0xabcdef00ull + (uint64_t)t * 7919u + (uint64_t)nthreads;
        for (int o = 0; o < OWNERS_PER_THREAD; o++)
            w[t].owner[o] = (kvp_owner)(t + 1) * 1000u + (kvp_owner)o;
    }
    run_workers(w, nthreads, worker_main);

    /* Conservation. */
    kvptest_check(p);
    kvp_stats st;
    assert_int_equal(kvp_stats_get(p, &st), KVP_OK);
    assert_true(st.blocks == st.in_use + st.free);
    assert_true(st.free == st.vacant + st.cached);

    /* Every block's references are the ones the threads recorded. */
    uint32_t top = (uint32_t)POOL_MAX + 64;
    uint32_t *expect_refs = calloc(top, sizeof *expect_refs);
    assert_non_null(expect_refs);
    uint64_t total_refs = 0;
    for (int t = 0; t < nthreads; t++)
        for (int o = 0; o < OWNERS_PER_THREAD; o++)
            for (uint32_t i = 0; i < w[t].nref[o]; i++) {
                assert_true(w[t].ref[o][i] < top);
                expect_refs[w[t].ref[o][i]]++;
                total_refs++;
            }
    uint64_t in_use = 0, shared = 0;
    for (kvp_block b = 0; b < top; b++) {
        kvp_block_info bi;
        kvp_status s = kvp_block_get(p, b, &bi);
        if (s == KVP_ERANGE) {
            if (expect_refs[b])
                fail_msg("block %" PRIu32 ": threads hold %" PRIu32 " references, block_get "
                         "says ERANGE", b, expect_refs[b]);
            continue;
        }
        assert_int_equal(s, KVP_OK);
        if (bi.is_null) {
            assert_int_equal(bi.state, KVP_BLOCK_IN_USE);
            in_use++;
            continue;
        }
        if (bi.ref_count != expect_refs[b] || bi.anon_refs != 0)
            fail_msg("block %" PRIu32 ": ref_count %" PRIu32 " (anon %" PRIu32 "), threads "
                     "recorded %" PRIu32, b, bi.ref_count, bi.anon_refs, expect_refs[b]);
        if (expect_refs[b]) {
            assert_int_equal(bi.state, KVP_BLOCK_IN_USE);
            in_use++;
            shared += expect_refs[b] >= 2;
        } else {
            assert_true(bi.state != KVP_BLOCK_IN_USE);
        }
    }
    assert_true(st.in_use == in_use);
    assert_true(st.shared == shared);

    /* Per owner: the same multiset of blocks. */
    static kvp_block got[MAXREF], want[MAXREF];
    uint64_t owners = 0;
    for (int t = 0; t < nthreads; t++)
        for (int o = 0; o < OWNERS_PER_THREAD; o++) {
            size_t n = 0;
            kvp_status s = kvp_owner_blocks(p, w[t].owner[o], got, MAXREF, &n);
            if (!w[t].nref[o]) {
                assert_int_equal(s, KVP_ENOTFOUND);
                continue;
            }
            owners++;
            assert_int_equal(s, KVP_OK);
            assert_int_equal(n, w[t].nref[o]);
            memcpy(want, w[t].ref[o], n * sizeof want[0]);
            qsort(got, n, sizeof got[0], cmp_block);
            qsort(want, n, sizeof want[0], cmp_block);
            if (memcmp(got, want, n * sizeof got[0]) != 0)
                fail_msg("owner %" PRIu64 ": blocks differ from the thread's record",
                         w[t].owner[o]);
        }
    assert_true(st.owners == owners);

    /* Everyone frees everything, in parallel. */
    run_workers(w, nthreads, worker_drain);
    kvptest_check(p);
    assert_int_equal(kvp_stats_get(p, &st), KVP_OK);
    assert_true(st.in_use == (uint64_t)(null_block ? 1 : 0));
    assert_true(st.owners == 0);
    assert_true(st.blocks == st.in_use + st.free);
    assert_true(st.evictions == g_evictions_seen);

    uint64_t nops = 0, nclaims = 0;
    for (int t = 0; t < nthreads; t++) {
        nops += w[t].n_ok;
        nclaims += w[t].n_claims;
    }
    fprintf(stderr, "[thread] %d threads x %zu ops: %" PRIu64 " calls ok, %" PRIu64
            " claims, %" PRIu64 " refs held at the end, %" PRIu64 " evictions, blocks %" PRIu64
            "\n", nthreads, ops, nops, nclaims, total_refs, st.evictions, st.blocks);
    free(expect_refs);
    free(w);
    kvp_pool_destroy(p);
}

static void test_two_threads(void **s)
{
    (void)s;
    run_threads(2, 0, KVP_REUSE_LIFO);
}

static void test_four_threads(void **s)
{
    (void)s;
    run_threads(4, 1, KVP_REUSE_FIFO);
}

static void test_eight_threads(void **s)
{
    (void)s;
    run_threads(8, 0, KVP_REUSE_LOWEST);
}

/* ---- re-entrant call from a callback ------------------------------------ */

typedef struct reenter {
    kvp_pool *self;
    kvp_pool *other;
    int calls;
    kvp_status st_stats, st_take, st_free_count, st_clear, st_other;
    uint64_t fp_before;
} reenter;

static void reenter_cb(void *user, const kvp_hash *h, kvp_block b)
{
    reenter *r = user;
    kvp_stats st;
    kvp_block out;
    uint32_t n;
    (void)h;
    (void)b;
    r->calls++;
    r->st_stats = kvp_stats_get(r->self, &st);
    r->st_take = kvp_take(r->self, KVP_STREAM_SHARED, 99, &out);
    r->st_free_count = kvp_free_count(r->self, KVP_STREAM_SHARED, &n);
    r->st_clear = kvp_clear_index(r->self);
    r->st_other = kvp_take(r->other, KVP_STREAM_SHARED, 5, &out);
}

static void reenter_case(int thread_safe)
{
    reenter r;
    memset(&r, 0, sizeof r);
    kvp_config cfg;
    assert_int_equal(kvp_config_default(&cfg), KVP_OK);
    cfg.num_blocks = 8;
    kvp_pool *other = NULL;
    assert_int_equal(kvp_pool_create(&cfg, &other), KVP_OK);
    cfg.thread_safe = thread_safe;
    cfg.on_evict = reenter_cb;
    cfg.evict_user = &r;
    kvp_pool *p = NULL;
    assert_int_equal(kvp_pool_create(&cfg, &p), KVP_OK);
    r.self = p;
    r.other = other;

    kvp_block b;
    assert_int_equal(kvp_take(p, KVP_STREAM_SHARED, 1, &b), KVP_OK);
    assert_int_equal(kvp_publish(p, b, &g_hash[3]), KVP_OK);
    assert_int_equal(kvp_free(p, &b, 1, 1), KVP_OK);
    uint32_t n = 0;
    assert_int_equal(kvp_evict(p, KVP_STREAM_SHARED, 1, &n), KVP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.st_stats, KVP_EBUSY);
    assert_int_equal(r.st_take, KVP_EBUSY);
    assert_int_equal(r.st_free_count, KVP_EBUSY);
    assert_int_equal(r.st_clear, KVP_EBUSY);
    assert_int_equal(r.st_other, KVP_OK);

    /* The refused calls changed nothing: block b is vacant and no block is
     * in use, owner 99 does not exist; the other pool has one block out. */
    kvp_stats st;
    assert_int_equal(kvp_stats_get(p, &st), KVP_OK);
    assert_true(st.in_use == 0 && st.owners == 0 && st.cached == 0 && st.evictions == 1);
    assert_int_equal(kvp_stats_get(other, &st), KVP_OK);
    assert_true(st.in_use == 1);
    kvptest_check(p);
    kvptest_check(other);

    /* The pool works normally after the callback returned. */
    assert_int_equal(kvp_take(p, KVP_STREAM_SHARED, 2, &b), KVP_OK);
    assert_int_equal(kvp_free_owner(p, 2, NULL), KVP_OK);
    kvptest_done(p);
    kvp_pool_destroy(other);
}

static void test_callback_reentry_thread_safe(void **s)
{
    (void)s;
    reenter_case(1);
}

static void test_callback_reentry_single_threaded(void **s)
{
    (void)s;
    /* "such a call returns KVP_EBUSY and does nothing (detected in both
     * modes)" */
    reenter_case(0);
}

/* A callback on one thread re-entering must not block other threads: while
 * thread A sits in a callback, thread B's calls simply wait for the lock. */
typedef struct cross {
    kvp_pool *p;
    int calls;
    kvp_status st;
} cross;

static void cross_cb(void *user, const kvp_hash *h, kvp_block b)
{
    cross *c = user;
    kvp_stats st;
    (void)h;
    (void)b;
    c->calls++;
    c->st = kvp_stats_get(c->p, &st);
}

static void *cross_worker(void *arg)
{
    kvp_pool *p = arg;
    for (int i = 0; i < 200; i++) {
        kvp_stats st;
        if (kvp_stats_get(p, &st) != KVP_OK)
            return (void *)1;
    }
    return NULL;
}

static void test_callback_reentry_with_other_threads(void **s)
{
    (void)s;
    cross c;
    memset(&c, 0, sizeof c);
    kvp_config cfg;
    assert_int_equal(kvp_config_default(&cfg), KVP_OK);
    cfg.num_blocks = 64;
    cfg.thread_safe = 1;
    cfg.on_evict = cross_cb;
    cfg.evict_user = &c;
    assert_int_equal(kvp_pool_create(&cfg, &c.p), KVP_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cross_worker, c.p), 0);
    int busy = 0;
    for (int i = 0; i < 50; i++) {
        kvp_block b;
        assert_int_equal(kvp_take(c.p, KVP_STREAM_SHARED, 1, &b), KVP_OK);
        assert_int_equal(kvp_publish(c.p, b, &g_hash[i % NHASH]), KVP_OK);
        assert_int_equal(kvp_free(c.p, &b, 1, 1), KVP_OK);
        assert_int_equal(kvp_unpublish(c.p, b), KVP_OK);
        busy += c.st == KVP_EBUSY;
    }
    void *ret = NULL;
    assert_int_equal(pthread_join(th, &ret), 0);
    assert_null(ret);
    assert_int_equal(c.calls, 50);
    assert_int_equal(busy, 50);
    kvptest_check(c.p);
    kvp_pool_destroy(c.p);
}

int main(void)
{
    init_hashes();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_four_threads),
        cmocka_unit_test(test_eight_threads),
        cmocka_unit_test(test_callback_reentry_thread_safe),
        cmocka_unit_test(test_callback_reentry_single_threaded),
        cmocka_unit_test(test_callback_reentry_with_other_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
