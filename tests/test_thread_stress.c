/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_thread_stress.c — N threads, mixed operations including sequences,
 * on one thread-safe pool, then conservation checks.
 *
 * What it covers: 2, 4 and 8 threads share one pool created with
 * `thread_safe` (growth on exhaustion with a cap, prefix caching on) and
 * each runs a fixed number of mixed operations: alloc, take, free (owner
 * and anonymous references), free_owner, set_fill, publish, lookup + claim
 * of a shared hash alphabet (so blocks are shared across threads), evict,
 * ensure_free, extend, shrink, stats_get, free_count, and sequences — each
 * thread its own (admit of shared prompt families so prefixes hit other
 * threads' blocks, append, fork, destroy).  Afterwards, single-threaded:
 * kvp_pool_check passes; blocks == in_use + free; every block's ref_count
 * and anon_refs equal exactly the references the threads recorded plus the
 * appearances in live sequence tables; every owner's kvp_owner_blocks is
 * exactly its recorded multiset; once everything is freed and every
 * sequence destroyed, no block is in use.
 *
 * Why this way: threads share only the pool and read-only tables; each keeps
 * its own record, read only after pthread_join, so the test itself is
 * race-free and the TSan build reports only the library.  retire_top is left
 * out (it moves blocks other threads hold, making records unverifiable; the
 * model test and the fuzzer cover it).  Operations per thread: env
 * KVP_STRESS_OPS if set (make stress), else 100000 x KVP_TEST_SCALE.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvptest.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT 8
#define OWNERS 3          /* per thread */
#define MAXREF 2048       /* references one thread records */
#define NHASH 12
#define POOL_BLOCKS 128
#define POOL_MAX 1024
#define BS 4
#define SEQS 3            /* per thread */

static kvp_hash g_hash[NHASH];

typedef struct thr {
    kvp_pool *p;
    int t;
    size_t ops, done, failed_ops;
    uint64_t rng;
    kvp_block ref[MAXREF];  /* references held */
    kvp_owner who[MAXREF];  /* by whom (KVP_ANON: anonymous) */
    size_t nref;
    kvp_seq *seq[SEQS];
    char err[256];
} thr;

static uint32_t rn(thr *x, uint32_t n)
{
    return kvptest_rand_below(&x->rng, n);
}

static kvp_owner owner_of(const thr *x, uint32_t i)
{
    return (kvp_owner)x->t * 100 + 1 + i;
}

static void note(thr *x, const char *what, kvp_status s)
{
    if (!x->err[0])
        snprintf(x->err, sizeof x->err, "thread %d op %zu: %s returned %s", x->t, x->done, what,
                 kvp_strerror(s));
}

static void record(thr *x, kvp_block b, kvp_owner o)
{
    if (x->nref < MAXREF) {
        x->ref[x->nref] = b;
        x->who[x->nref++] = o;
    }
}

static void drop_at(thr *x, size_t i)
{
    x->ref[i] = x->ref[x->nref - 1];
    x->who[i] = x->who[x->nref - 1];
    x->nref--;
}

/* Prompt of a family: shared by all threads, so admissions hit each other's
 * cached prefixes. */
static void prompt(uint32_t fam, uint32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        t[i] = fam * 1000 + (uint32_t)(i % 7);
}

static void seq_op(thr *x)
{
    kvp_pool *p = x->p;
    uint32_t k = rn(x, SEQS);
    uint64_t id = (uint64_t)x->t * 100 + k;
    uint32_t tok[64];
    kvp_status s;
    if (!x->seq[k]) {
        s = kvp_seq_create(p, id, NULL, &x->seq[k]);
        if (s)
            note(x, "kvp_seq_create", s);
        return;
    }
    const kvp_block *ids;
    size_t nb = 0, nt = 0, cached;
    kvp_seq_blocks(x->seq[k], &ids, &nb, &nt);
    switch (rn(x, 5)) {
    case 0:
        if (nt == 0) {
            size_t n = 1 + rn(x, 40);
            prompt(rn(x, 4), tok, n);
            s = kvp_seq_admit(x->seq[k], tok, n, &cached);
            if (s && s != KVP_EEXHAUSTED)
                note(x, "kvp_seq_admit", s);
        }
        break;
    case 1:
    case 2:
        if (nt && nt < 200) {
            size_t n = 1 + rn(x, 9);
            prompt(rn(x, 3) + 10, tok, n);
            s = kvp_seq_append(x->seq[k], tok, n);
            if (s && s != KVP_EEXHAUSTED)
                note(x, "kvp_seq_append", s);
        }
        break;
    case 3: {
        uint32_t j = rn(x, SEQS);
        if (j != k && !x->seq[j] && nt) {
            s = kvp_seq_fork(x->seq[k], (uint64_t)x->t * 100 + j, &x->seq[j]);
            if (s)
                note(x, "kvp_seq_fork", s);
        }
        break;
    }
    default:
        s = kvp_seq_destroy(x->seq[k]);
        if (s)
            note(x, "kvp_seq_destroy", s);
        x->seq[k] = NULL;
        break;
    }
}

static void *worker(void *arg)
{
    thr *x = arg;
    kvp_pool *p = x->p;
    for (x->done = 0; x->done < x->ops && !x->err[0]; x->done++) {
        uint32_t r = rn(x, 100);
        kvp_owner o = rn(x, 8) ? owner_of(x, rn(x, OWNERS)) : KVP_ANON;
        kvp_status s;
        if (r < 18) { /* alloc */
            kvp_block ids[8];
            size_t n = 0;
            s = kvp_alloc(p, KVP_STREAM_SHARED, 1 + rn(x, 4 * BS), o, rn(x, 6), ids, 8, &n);
            if (s == KVP_OK && x->nref + n <= MAXREF)
                for (size_t i = 0; i < n; i++)
                    record(x, ids[i], o);
            else if (s == KVP_OK)
                s = kvp_free(p, ids, n, o);
            if (s && s != KVP_EEXHAUSTED)
                note(x, "kvp_alloc", s);
        } else if (r < 24) { /* take */
            kvp_block b;
            s = kvp_take(p, KVP_STREAM_SHARED, o, &b);
            if (s == KVP_OK)
                record(x, b, o);
            else if (s != KVP_EEXHAUSTED)
                note(x, "kvp_take", s);
        } else if (r < 42) { /* free one to three references */
            for (uint32_t k = 1 + rn(x, 3); k > 0 && x->nref; k--) {
                size_t i = rn(x, (uint32_t)x->nref);
                s = kvp_free(p, &x->ref[i], 1, x->who[i]);
                if (s)
                    note(x, "kvp_free", s);
                drop_at(x, i);
            }
        } else if (r < 45) { /* free a whole owner */
            kvp_owner w = owner_of(x, rn(x, OWNERS));
            size_t n = 0, held = 0;
            for (size_t i = 0; i < x->nref; i++)
                held += x->who[i] == w;
            s = kvp_free_owner(p, w, &n);
            if (s == KVP_OK) {
                if (n != held)
                    note(x, "kvp_free_owner (count differs)", KVP_ECORRUPT);
                for (size_t i = x->nref; i-- > 0;)
                    if (x->who[i] == w)
                        drop_at(x, i);
            } else if (s != KVP_ENOTFOUND || held) {
                note(x, "kvp_free_owner", s);
            }
        } else if (r < 52) { /* set_fill on a block it holds */
            if (x->nref) {
                s = kvp_set_fill(p, x->ref[rn(x, (uint32_t)x->nref)], rn(x, BS + 1));
                if (s)
                    note(x, "kvp_set_fill", s);
            }
        } else if (r < 60) { /* publish a block it holds */
            if (x->nref) {
                s = kvp_publish(p, x->ref[rn(x, (uint32_t)x->nref)], &g_hash[rn(x, NHASH)]);
                if (s && s != KVP_EBUSY)
                    note(x, "kvp_publish", s);
            }
        } else if (r < 72) { /* lookup + claim: shares blocks across threads */
            kvp_block b;
            s = kvp_lookup(p, KVP_STREAM_SHARED, &g_hash[rn(x, NHASH)], &b);
            if (s == KVP_OK && x->nref < MAXREF) {
                s = kvp_claim(p, b, o);
                if (s == KVP_OK)
                    record(x, b, o);
                else if (s != KVP_ENOTFOUND && s != KVP_ERANGE) /* another thread reused
                                                   or shrank it away since the lookup */
                    note(x, "kvp_claim", s);
            } else if (s != KVP_OK && s != KVP_ENOTFOUND) {
                note(x, "kvp_lookup", s);
            }
        } else if (r < 74) {
            uint32_t n;
            s = kvp_evict(p, KVP_STREAM_SHARED, rn(x, 3), &n);
            if (s)
                note(x, "kvp_evict", s);
        } else if (r < 76) {
            s = kvp_ensure_free(p, KVP_STREAM_SHARED, rn(x, 4));
            if (s && s != KVP_EEXHAUSTED)
                note(x, "kvp_ensure_free", s);
        } else if (r < 78) {
            uint32_t n;
            s = kvp_extend(p, KVP_STREAM_SHARED, rn(x, 4), &n);
            if (s)
                note(x, "kvp_extend", s);
        } else if (r < 80) {
            uint32_t f = 0, n;
            kvp_free_count(p, KVP_STREAM_SHARED, &f);
            s = kvp_shrink(p, KVP_STREAM_SHARED, f > 64 ? f - 8 : f, &n);
            if (s)
                note(x, "kvp_shrink", s);
        } else if (r < 82) {
            kvp_stats st;
            s = kvp_stats_get(p, &st);
            if (s || st.blocks != st.in_use + st.free)
                note(x, "kvp_stats_get (blocks != in_use + free)", s ? s : KVP_ECORRUPT);
        } else {
            seq_op(x);
        }
    }
    return NULL;
}

static size_t ops_per_thread(void)
{
    const char *e = getenv("KVP_STRESS_OPS");
    if (e && *e)
        return (size_t)strtoull(e, NULL, 10);
    return kvptest_steps(100000);
}

static void conservation(kvp_pool *p, thr *th, int n)
{
    kvptest_check(p);
    kvp_stats st = kvptest_stats(p);
    KVP_ASSERT_EQ(st.blocks, st.in_use + st.free);
    /* expected references per block: recorded + sequence appearances */
    uint32_t *ref = calloc(POOL_MAX * 2, sizeof *ref), *anon = calloc(POOL_MAX * 2, sizeof *anon);
    uint32_t *sref = calloc(POOL_MAX * 2, sizeof *sref);
    assert_non_null(ref);
    assert_non_null(anon);
    assert_non_null(sref);
    for (int t = 0; t < n; t++) {
        for (size_t i = 0; i < th[t].nref; i++) {
            ref[th[t].ref[i]]++;
            anon[th[t].ref[i]] += th[t].who[i] == KVP_ANON;
        }
        for (int k = 0; k < SEQS; k++) {
            const kvp_block *ids;
            size_t nb = 0;
            if (!th[t].seq[k])
                continue;
            KVP_ASSERT_OK(kvp_seq_blocks(th[t].seq[k], &ids, &nb, NULL));
            for (size_t i = 0; i < nb; i++) {
                ref[ids[i]]++;
                sref[ids[i]]++;
            }
        }
    }
    uint64_t in_use = 0;
    for (kvp_block b = 0; b < POOL_MAX * 2; b++) {
        kvp_block_info bi;
        kvp_status s = kvp_block_get(p, b, &bi);
        if (s == KVP_ERANGE) {
            KVP_ASSERT_EQ(ref[b], 0);
            continue;
        }
        KVP_ASSERT_OK(s);
        if (bi.is_null) { /* in use for good, no references recorded */
            KVP_ASSERT_EQ(ref[b], 0);
            in_use++;
            continue;
        }
        KVP_ASSERT_EQ(bi.ref_count, ref[b]);
        KVP_ASSERT_EQ(bi.anon_refs, anon[b]);
        KVP_ASSERT_EQ(bi.seq_refs, sref[b]);
        KVP_ASSERT_EQ(bi.state == KVP_BLOCK_IN_USE, ref[b] > 0);
        in_use += bi.state == KVP_BLOCK_IN_USE;
    }
    KVP_ASSERT_EQ(in_use, st.in_use);
    /* owners: exactly the recorded multiset */
    for (int t = 0; t < n; t++)
        for (uint32_t i = 0; i < OWNERS; i++) {
            kvp_owner w = owner_of(&th[t], i);
            static kvp_block got[MAXREF];
            size_t cnt = 0, want = 0;
            kvp_status s = kvp_owner_blocks(p, w, got, MAXREF, &cnt);
            for (size_t k = 0; k < th[t].nref; k++)
                want += th[t].who[k] == w;
            if (s == KVP_ENOTFOUND) {
                KVP_ASSERT_EQ(want, 0);
                continue;
            }
            KVP_ASSERT_OK(s);
            KVP_ASSERT_EQ(cnt, want);
            for (size_t k = 0; k < cnt; k++) {
                size_t c1 = 0, c2 = 0;
                for (size_t j = 0; j < cnt; j++)
                    c1 += got[j] == got[k];
                for (size_t j = 0; j < th[t].nref; j++)
                    c2 += th[t].who[j] == w && th[t].ref[j] == got[k];
                KVP_ASSERT_EQ(c1, c2);
            }
        }
    free(ref);
    free(anon);
    free(sref);
}

static void stress(int n)
{
    kvp_config cfg = kvptest_config(POOL_BLOCKS);
    cfg.block_size = BS;
    cfg.thread_safe = 1;
    cfg.grow_on_exhaustion = 1;
    cfg.max_blocks = POOL_MAX;
    cfg.null_block = n == 4;
    cfg.reuse = (kvp_reuse)(n % 3);
    kvp_pool *p = kvptest_create(&cfg);
    thr th[MAXT];
    pthread_t tid[MAXT];
    memset(th, 0, sizeof th);
    size_t ops = ops_per_thread();
    for (int t = 0; t < n; t++) {
        th[t].p = p;
        th[t].t = t;
        th[t].ops = ops;
        th[t].rng = 0x5eed0000u + (uint64_t)t * 7919 + (uint64_t)n;
        assert_int_equal(pthread_create(&tid[t], NULL, worker, &th[t]), 0);
    }
    for (int t = 0; t < n; t++)
        assert_int_equal(pthread_join(tid[t], NULL), 0);
    size_t total = 0;
    for (int t = 0; t < n; t++) {
        if (th[t].err[0])
            fail_msg("%s", th[t].err);
        total += th[t].done;
    }
    conservation(p, th, n);
    /* release everything: nothing may stay in use */
    for (int t = 0; t < n; t++) {
        for (size_t i = 0; i < th[t].nref; i++)
            KVP_ASSERT_OK(kvp_free(p, &th[t].ref[i], 1, th[t].who[i]));
        th[t].nref = 0;
        for (int k = 0; k < SEQS; k++)
            if (th[t].seq[k]) {
                KVP_ASSERT_OK(kvp_seq_destroy(th[t].seq[k]));
                th[t].seq[k] = NULL;
            }
    }
    conservation(p, th, n);
    kvp_stats st = kvptest_stats(p);
    KVP_ASSERT_EQ(st.in_use, cfg.null_block ? 1 : 0);
    KVP_ASSERT_EQ(st.owners, 0);
    fprintf(stderr, "[thread_stress] %d threads x %zu ops = %zu operations; blocks %" PRIu64
            ", allocated %" PRIu64 ", prefix hits %" PRIu64 ", cow %" PRIu64 "\n", n, ops,
            total, st.blocks, st.blocks_allocated, st.prefix_hits, st.cow_copies);
    kvp_pool_destroy(p);
}

static void test_2_threads(void **state) { (void)state; stress(2); }
static void test_4_threads(void **state) { (void)state; stress(4); }
static void test_8_threads(void **state) { (void)state; stress(8); }

int main(void)
{
    for (int i = 0; i < NHASH; i++)
        g_hash[i] = kvptest_hash(0x1000 + (uint64_t)i);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_2_threads),
        cmocka_unit_test(test_4_threads),
        cmocka_unit_test(test_8_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
