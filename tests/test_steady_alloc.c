/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_steady_alloc.c — the memory rule: once a workload has warmed up, a
 * request allocates nothing (kvpool.h conventions and kvp_seq_destroy).
 *
 * A counting allocator is handed to the pool.  Each path runs the same kind
 * of request stream twice: a warm-up that reaches the workload's largest
 * number of live requests and longest request, then a measured stretch of
 * the same shape.  The measured stretch must make zero allocations (and
 * zero releases: memory is kept, not churned).  Both counts are printed on
 * failure.  The pool is checked after every request.
 *
 * Paths: owners (kvp_take_each / kvp_take / kvp_free_owner, a decode loop's
 * calls) and sequences (kvp_seq_create, admit with prefix hits, append,
 * fork, destroy), with and without extra keys.
 */
#include "kvptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct counter {
    uint64_t allocs, releases;
} counter;

static void *count_alloc(void *user, size_t size)
{
    ((counter *)user)->allocs++;
    return malloc(size);
}

static void count_release(void *user, void *ptr, size_t size)
{
    (void)size;
    if (ptr)
        ((counter *)user)->releases++;
    free(ptr);
}

static kvp_pool *counted_pool(counter *c, kvp_allocator *a, uint32_t blocks)
{
    a->alloc = count_alloc;
    a->release = count_release;
    a->user = c;
    kvp_config cfg = kvptest_config(blocks);
    cfg.allocator = a;
    cfg.prefix_caching = 1;
    return kvptest_create(&cfg);
}

#define LIVE 8
#define MAX_TOKENS 96

/* ---- owners ------------------------------------------------------------- */

/* `rounds` rounds: each live request grows by one block per step (all of a
 * step's takes in one kvp_take_each, one plain kvp_take for request 0),
 * and a request that reaches its length is freed and replaced. */
static void owner_rounds(kvp_pool *pool, uint64_t *rng, kvp_owner *owners, uint32_t *hints,
                         uint32_t *len, uint64_t *next_owner, int rounds)
{
    uint32_t rows[LIVE];
    kvp_block out[LIVE];
    for (int r = 0; r < rounds; r++) {
        for (uint32_t i = 0; i < LIVE; i++)
            rows[i] = i;
        size_t taken = 0;
        KVP_ASSERT_OK(kvp_take_each(pool, KVP_STREAM_SHARED, owners, hints, rows, LIVE - 1, out,
                                    &taken));
        KVP_ASSERT_EQ(taken, LIVE - 1);
        kvp_block one;
        KVP_ASSERT_OK(kvp_take(pool, KVP_STREAM_SHARED, owners[LIVE - 1], &one));
        for (uint32_t i = 0; i < LIVE; i++) {
            if (--len[i] > 0)
                continue;
            KVP_ASSERT_OK(kvp_free_owner(pool, owners[i], NULL));
            owners[i] = (*next_owner)++;
            hints[i] = KVP_HINT_NONE;
            len[i] = 1 + (uint32_t)(kvptest_rand(rng) % 6);
        }
        kvptest_check(pool);
    }
}

static void test_owner_path_allocates_nothing(void **state)
{
    (void)state;
    counter c = {0, 0};
    kvp_allocator a;
    kvp_pool *pool = counted_pool(&c, &a, 256);
    uint64_t rng = 42, next_owner = 1;
    kvp_owner owners[LIVE];
    uint32_t hints[LIVE], len[LIVE];
    for (uint32_t i = 0; i < LIVE; i++) {
        owners[i] = next_owner++;
        hints[i] = KVP_HINT_NONE;
        len[i] = 1 + (uint32_t)(kvptest_rand(&rng) % 6);
    }
    owner_rounds(pool, &rng, owners, hints, len, &next_owner, 200);
    counter warm = c;
    owner_rounds(pool, &rng, owners, hints, len, &next_owner, 500);
    printf("owner path: %llu allocations, %llu releases in warm-up; %llu, %llu after\n",
           (unsigned long long)warm.allocs, (unsigned long long)warm.releases,
           (unsigned long long)(c.allocs - warm.allocs),
           (unsigned long long)(c.releases - warm.releases));
    KVP_ASSERT_EQ(c.allocs - warm.allocs, 0);
    KVP_ASSERT_EQ(c.releases - warm.releases, 0);
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(c.allocs, c.releases);
}

/* ---- sequences ---------------------------------------------------------- */

/* One request: a prompt from one of 4 families (so prefixes hit), admitted,
 * a few decode appends, sometimes a fork that appends too, then destroy.
 * `live` keeps up to LIVE sequences alive across requests. */
static void seq_requests(kvp_pool *pool, uint64_t *rng, kvp_seq **live, uint64_t *next_id,
                         const kvp_extra_keys *x, int requests)
{
    uint32_t prompt[MAX_TOKENS];
    for (int r = 0; r < requests; r++) {
        uint32_t slot = (uint32_t)(kvptest_rand(rng) % LIVE);
        if (live[slot]) {
            KVP_ASSERT_OK(kvp_seq_destroy(live[slot]));
            live[slot] = NULL;
        }
        uint32_t family = (uint32_t)(kvptest_rand(rng) % 4);
        size_t n = 20 + (size_t)(kvptest_rand(rng) % 40);
        for (size_t i = 0; i < n; i++)
            prompt[i] = i < 32 ? family * 1000 + (uint32_t)i : (uint32_t)kvptest_rand(rng);
        kvp_seq *q;
        KVP_ASSERT_OK(kvp_seq_create(pool, (*next_id)++, x, &q));
        size_t cached = 0;
        KVP_ASSERT_OK(kvp_seq_admit(q, prompt, n, &cached));
        for (int t = 0; t < 1 + (int)(kvptest_rand(rng) % 24); t++) {
            uint32_t tok = (uint32_t)kvptest_rand(rng);
            KVP_ASSERT_OK(kvp_seq_append(q, &tok, 1));
        }
        if (kvptest_rand(rng) % 4 == 0) {
            kvp_seq *child;
            KVP_ASSERT_OK(kvp_seq_fork(q, (*next_id)++, &child));
            uint32_t tok = 7;
            KVP_ASSERT_OK(kvp_seq_append(child, &tok, 1));
            KVP_ASSERT_OK(kvp_seq_destroy(child));
        }
        live[slot] = q;
        kvptest_check(pool);
    }
}

static void seq_path(const kvp_extra_keys *x)
{
    counter c = {0, 0};
    kvp_allocator a;
    kvp_pool *pool = counted_pool(&c, &a, 512);
    uint64_t rng = 7, next_id = 1;
    kvp_seq *live[LIVE] = {0};
    seq_requests(pool, &rng, live, &next_id, x, 300);
    counter warm = c;
    seq_requests(pool, &rng, live, &next_id, x, 1000);
    printf("sequence path (%s): %llu allocations, %llu releases in warm-up; %llu, %llu after\n",
           x ? "extra keys" : "no extra keys", (unsigned long long)warm.allocs,
           (unsigned long long)warm.releases, (unsigned long long)(c.allocs - warm.allocs),
           (unsigned long long)(c.releases - warm.releases));
    KVP_ASSERT_EQ(c.allocs - warm.allocs, 0);
    KVP_ASSERT_EQ(c.releases - warm.releases, 0);
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(c.allocs, c.releases);
}

static void test_seq_path_allocates_nothing(void **state)
{
    (void)state;
    seq_path(NULL);
}

static void test_seq_path_with_extra_keys_allocates_nothing(void **state)
{
    (void)state;
    static const uint8_t salt[5] = {1, 2, 3, 4, 5};
    kvp_extra_keys x;
    memset(&x, 0, sizeof x);
    x.lora_name = "adapter-a";
    x.salt = salt;
    x.salt_len = sizeof salt;
    seq_path(&x);
}

/* A refused create (bad extra keys) after warm-up neither allocates nor
 * loses the spare it tried; the next create still allocates nothing. */
static void test_refused_create_keeps_spares(void **state)
{
    (void)state;
    counter c = {0, 0};
    kvp_allocator a;
    kvp_pool *pool = counted_pool(&c, &a, 64);
    kvp_seq *q;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &q));
    KVP_ASSERT_OK(kvp_seq_destroy(q));
    counter warm = c;
    kvp_extra_keys bad;
    memset(&bad, 0, sizeof bad);
    bad.n_mm = 1; /* spans without an array */
    KVP_ASSERT_REFUSED(pool, kvp_seq_create(pool, 2, &bad, &q), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_find(pool, 2, &q), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_seq_create(pool, 3, NULL, &q));
    KVP_ASSERT_EQ(c.allocs - warm.allocs, 0);
    KVP_ASSERT_OK(kvp_seq_destroy(q));
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(c.allocs, c.releases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner_path_allocates_nothing),
        cmocka_unit_test(test_seq_path_allocates_nothing),
        cmocka_unit_test(test_seq_path_with_extra_keys_allocates_nothing),
        cmocka_unit_test(test_refused_create_keeps_spares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
