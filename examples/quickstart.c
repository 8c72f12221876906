/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quickstart.c — kvpool in one realistic scene.
 *
 * Two requests share a pool of 8 blocks of 16 tokens.  Request 1 writes a
 * 40-token prompt (3 blocks), publishes its full blocks, and grows by a block
 * while decoding.  Request 2 arrives with the same first 32 tokens: it claims
 * the two published blocks instead of recomputing them.  Request 1 finishes;
 * its blocks stay cached.  A third request needs more room than is vacant,
 * which evicts the least recently freed cached block.  Finally the pool is
 * shrunk to give memory back, and the statistics are printed as Prometheus
 * text.  Every step is checked; the program exits non-zero on any failure.
 */
#include <kvpool.h>

#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        kvp_status rc_ = (call);                                                                   \
        if (rc_ != KVP_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, kvp_strerror(rc_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void on_evict(void *user, const kvp_hash *hash, kvp_block block)
{
    (void)user;
    if (hash)
        printf("  evicted block %u (hash ...%02x%02x)\n", block, hash->b[30], hash->b[31]);
    else
        printf("  index cleared\n");
}

/* A stand-in for a real chained block hash (kvp_hash_block comes later). */
static kvp_hash hash_of(uint64_t v)
{
    kvp_hash h = {{0}};
    for (int i = 0; i < 8; i++)
        h.b[31 - i] = (uint8_t)(v >> (8 * i));
    return h;
}

static void show(kvp_pool *pool, const char *what)
{
    kvp_stats st;
    char msg[200];
    TRY(kvp_stats_get(pool, &st));
    TRY(kvp_pool_check(pool, msg, sizeof msg));
    printf("%-44s in use %2llu  vacant %2llu  cached %2llu  shared %llu\n", what,
           (unsigned long long)st.in_use, (unsigned long long)st.vacant,
           (unsigned long long)st.cached, (unsigned long long)st.shared);
}

int main(void)
{
    kvp_config cfg;
    kvp_pool *pool;
    kvp_block a[4], b[4], c[8], id;
    size_t n;
    TRY(kvp_config_default(&cfg));
    cfg.block_size = 16;
    cfg.num_blocks = 8;
    cfg.on_evict = on_evict;
    TRY(kvp_pool_create(&cfg, &pool));
    show(pool, "new pool of 8 blocks");

    /* Request 1: a 40-token prompt, two full blocks published. */
    TRY(kvp_alloc(pool, KVP_STREAM_SHARED, 40, 1, KVP_FMT_FP16, a, 4, &n));
    TRY(kvp_set_fill(pool, a[0], 16));
    TRY(kvp_set_fill(pool, a[1], 16));
    TRY(kvp_set_fill(pool, a[2], 8));
    kvp_hash h0 = hash_of(100), h1 = hash_of(101);
    TRY(kvp_publish(pool, a[0], &h0));
    TRY(kvp_publish(pool, a[1], &h1));
    show(pool, "request 1: 40-token prompt in 3 blocks");

    /* Request 1 decodes past its third block: it grows by one.  A decode
     * loop keeps one hint per request, so the pool need not look the owner
     * up on every block. */
    uint32_t hint1 = KVP_HINT_NONE;
    TRY(kvp_set_fill(pool, a[2], 16));
    TRY(kvp_take_hinted(pool, KVP_STREAM_SHARED, 1, &hint1, &a[3]));
    TRY(kvp_set_fill(pool, a[3], 1));
    show(pool, "request 1 grows by a block");

    /* Request 2 shares the first 32 tokens: look up and claim. */
    TRY(kvp_lookup(pool, KVP_STREAM_SHARED, &h0, &b[0]));
    TRY(kvp_lookup(pool, KVP_STREAM_SHARED, &h1, &b[1]));
    TRY(kvp_claim(pool, b[0], 2));
    TRY(kvp_claim(pool, b[1], 2));
    TRY(kvp_alloc(pool, KVP_STREAM_SHARED, 10, 2, KVP_FMT_FP16, &b[2], 1, &n));
    show(pool, "request 2 reuses 2 blocks of request 1");

    /* A decode step: both requests cross a block boundary and get one more
     * block each, in one call.  An engine keeps each request's owner id and
     * hint in its own per-request arrays; rows say which requests take. */
    kvp_owner req[2] = {1, 2};
    uint32_t hints[2] = {hint1, KVP_HINT_NONE}, rows[2] = {0, 1};
    kvp_block step[2];
    TRY(kvp_take_each(pool, KVP_STREAM_SHARED, req, hints, rows, 2, step, &n));
    show(pool, "a decode step: one block each");

    /* Request 1 finishes: its published blocks stay cached. */
    TRY(kvp_free_owner(pool, 1, &n));
    TRY(kvp_free_owner(pool, 2, &n));
    show(pool, "both requests finished");

    /* Request 3 needs 7 blocks: the vacant ones first, then an eviction. */
    printf("request 3 needs 7 blocks:\n");
    TRY(kvp_alloc(pool, KVP_STREAM_SHARED, 7 * 16, 3, KVP_FMT_INT4, c, 8, &n));
    show(pool, "request 3 holds 7 blocks");
    TRY(kvp_free_owner(pool, 3, &n));

    /* Give memory back: keep 4 free blocks. */
    uint32_t retired;
    TRY(kvp_shrink(pool, KVP_STREAM_SHARED, 4, &retired));
    printf("shrink retired %u blocks\n", retired);
    show(pool, "after shrink");
    (void)id;

    size_t need;
    if (kvp_stats_prometheus(pool, NULL, NULL, 0, &need) != KVP_ESPACE)
        return 1;
    char *text = malloc(need + 1);
    TRY(kvp_stats_prometheus(pool, NULL, text, need + 1, NULL));
    fputs(text, stdout);
    free(text);
    kvp_pool_destroy(pool);
    return 0;
}
