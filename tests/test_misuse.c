/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_misuse.c — every detectable caller mistake is refused and changes
 * nothing.
 *
 * What it covers: double frees (a free block; more references than the
 * block has), freeing a block another owner holds, anonymous vs owner
 * references, all-or-nothing frees with one bad id, stale ids after shrink
 * and retire_top, ids past the top, the null block, the wrong stream (with
 * separate K/V lists) and unknown streams, counts that overflow (tokens,
 * formats, sequence lengths, bad configurations), output buffers too small
 * (alloc, owner_blocks, hash_tokens, stats_history, Prometheus/JSON text),
 * owner misuse (register twice, release while holding, unknown owners,
 * KVP_ANON where an owner is needed), index misuse (publish a free block or
 * under a second hash, prefix caching off, unpublish twice), verified-hit
 * misuse, sequence misuse (admit into a non-empty sequence, fork or create
 * to an existing id, sequences on a K/V pool, bad lengths), hash misuse
 * (wrong n, misaligned start, missing parent, inverted spans, n_known too
 * big), NULL arguments, and re-entrant calls from the eviction callback and
 * the copy hook into a thread-safe and into a single-threaded pool (every
 * call refused with KVP_EBUSY; calling another pool works).
 *
 * How: each mistake runs through KVP_ASSERT_REFUSED (kvptest.h):
 * fingerprint, call, expected status, same fingerprint, kvp_pool_check.
 * Sequence tables are compared too, since the fingerprint covers the pool,
 * not sequence handles.  Expected statuses come from kvpool.h.
 *
 * Why: the header's promise "a call that fails changes nothing" is only
 * worth something if every refusal path keeps it; a model test reaches
 * most paths at random, this suite names each one.  Undetectable misuse
 * (use after destroy, stale sequence handles, dropping a sequence's
 * anonymous reference with kvp_free(KVP_ANON)) is listed in
 * docs/RELIABILITY.md instead.
 */
#include "kvptest.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint32_t g_tok[256];

static void init_tokens(void)
{
    for (uint32_t i = 0; i < 256; i++)
        g_tok[i] = i * 7 + 1;
}

/* ---- frees ---- */

static void test_double_free(void **state)
{
    (void)state;
    kvp_pool *p = kvptest_pool(16, KVP_REUSE_LIFO);
    kvp_block ids[4];
    size_t n = kvptest_alloc(p, KVP_STREAM_SHARED, 48, 1, ids, 4);
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_OK(kvp_free(p, ids, 1, 1));
    /* the owner record stays: it still holds ids[1], ids[2] */
    KVP_ASSERT_REFUSED(p, kvp_free(p, ids, 1, 1), KVP_EDOUBLEFREE);
    /* all or nothing: a good id before the bad one is not freed */
    kvp_block mix[2] = {ids[1], ids[0]};
    KVP_ASSERT_REFUSED(p, kvp_free(p, mix, 2, 1), KVP_EDOUBLEFREE);
    /* more references than the block has */
    kvp_block twice[2] = {ids[1], ids[1]};
    KVP_ASSERT_REFUSED(p, kvp_free(p, twice, 2, 1), KVP_EDOUBLEFREE);
    /* anonymous: one reference, dropped twice */
    kvp_block a = kvptest_take(p, KVP_STREAM_SHARED, KVP_ANON);
    kvp_block aa[2] = {a, a};
    KVP_ASSERT_REFUSED(p, kvp_free(p, aa, 2, KVP_ANON), KVP_EDOUBLEFREE);
    KVP_ASSERT_OK(kvp_free(p, &a, 1, KVP_ANON));
    KVP_ASSERT_REFUSED(p, kvp_free(p, &a, 1, KVP_ANON), KVP_EDOUBLEFREE);
    /* a never-used block */
    KVP_ASSERT_REFUSED(p, kvp_free(p, (kvp_block[]){15}, 1, 1), KVP_EDOUBLEFREE);
    /* free_owner twice */
    KVP_ASSERT_OK(kvp_free_owner(p, 1, NULL));
    KVP_ASSERT_REFUSED(p, kvp_free_owner(p, 1, NULL), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(p, kvp_free(p, ids + 1, 1, 1), KVP_EDOUBLEFREE);
    kvp_pool_destroy(p);
}

static void test_foreign_free(void **state)
{
    (void)state;
    kvp_pool *p = kvptest_pool(16, KVP_REUSE_FIFO);
    kvp_block a = kvptest_take(p, KVP_STREAM_SHARED, 1);
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 2);
    kvp_block c = kvptest_take(p, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_REFUSED(p, kvp_free(p, &b, 1, 1), KVP_ENOTOWNER);       /* owner 2's */
    KVP_ASSERT_REFUSED(p, kvp_free(p, &a, 1, KVP_ANON), KVP_ENOTOWNER); /* no anon ref */
    KVP_ASSERT_REFUSED(p, kvp_free(p, &c, 1, 1), KVP_ENOTOWNER);       /* anonymous one */
    KVP_ASSERT_REFUSED(p, kvp_free(p, &a, 1, 9), KVP_ENOTOWNER);       /* unknown owner */
    /* a shared block: owner 2 claims a; owner 2 names it twice */
    KVP_ASSERT_OK(kvp_publish(p, a, &(kvp_hash){{1}}));
    KVP_ASSERT_OK(kvp_claim(p, a, 2));
    kvp_block aa[2] = {a, a};
    KVP_ASSERT_REFUSED(p, kvp_free(p, aa, 2, 2), KVP_ENOTOWNER);
    /* all or nothing across owners' blocks */
    kvp_block mix[2] = {a, b};
    KVP_ASSERT_REFUSED(p, kvp_free(p, mix, 2, 1), KVP_ENOTOWNER);
    /* release while holding; ANON where an owner is needed */
    KVP_ASSERT_REFUSED(p, kvp_owner_release(p, 1), KVP_EBUSY);
    KVP_ASSERT_REFUSED(p, kvp_owner_release(p, 9), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(p, kvp_owner_register(p, 1), KVP_EOWNERACTIVE);
    KVP_ASSERT_OK(kvp_owner_register(p, 5));
    KVP_ASSERT_REFUSED(p, kvp_owner_register(p, 5), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(p, kvp_owner_register(p, KVP_ANON), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_owner_release(p, KVP_ANON), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_free_owner(p, KVP_ANON, NULL), KVP_EINVAL);
    size_t nn = 0;
    KVP_ASSERT_REFUSED(p, kvp_owner_blocks(p, KVP_ANON, NULL, 0, &nn), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_owner_blocks(p, 9, NULL, 0, &nn), KVP_ENOTFOUND);
    kvp_pool_destroy(p);
}

/* ---- ids ---- */

static void test_bad_ids(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.null_block = 1;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    /* retire block 7 (free, top) and 6 by shrink: both stale afterwards */
    kvp_block ret = 0, moved = 0;
    KVP_ASSERT_OK(kvp_retire_top(p, &ret, &moved));
    KVP_ASSERT_EQ(ret, 7);
    KVP_ASSERT_OK(kvp_shrink(p, KVP_STREAM_SHARED, 4, NULL));
    kvp_block stale[] = {ret, 6, 8, 1000, KVP_NO_BLOCK};
    kvp_hash h = kvptest_hash(3);
    for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) {
        kvp_block s = stale[i];
        KVP_ASSERT_REFUSED(p, kvp_free(p, &s, 1, 1), KVP_ERANGE);
        KVP_ASSERT_REFUSED(p, kvp_claim(p, s, 1), KVP_ERANGE);
        KVP_ASSERT_REFUSED(p, kvp_take_id(p, s, 1), KVP_ERANGE);
        KVP_ASSERT_REFUSED(p, kvp_publish(p, s, &h), KVP_ERANGE);
        KVP_ASSERT_REFUSED(p, kvp_unpublish(p, s), KVP_ERANGE);
        KVP_ASSERT_REFUSED(p, kvp_set_fill(p, s, 1), KVP_ERANGE);
    }
    /* the null block */
    kvp_block z = 0;
    KVP_ASSERT_REFUSED(p, kvp_free(p, &z, 1, KVP_ANON), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_claim(p, 0, 1), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_take_id(p, 0, 1), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_publish(p, 0, &h), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_unpublish(p, 0), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_set_fill(p, 0, 1), KVP_EINVAL);
    /* block state mistakes */
    KVP_ASSERT_REFUSED(p, kvp_take_id(p, b, 2), KVP_EBUSY);          /* in use */
    KVP_ASSERT_REFUSED(p, kvp_claim(p, 3, 2), KVP_ENOTFOUND);        /* vacant */
    KVP_ASSERT_REFUSED(p, kvp_set_fill(p, b, 17), KVP_EINVAL);       /* > block_size */
    KVP_ASSERT_REFUSED(p, kvp_set_fill(p, 3, 1), KVP_EDOUBLEFREE);   /* free */
    KVP_ASSERT_REFUSED(p, kvp_publish(p, 3, &h), KVP_EDOUBLEFREE);   /* free */
    KVP_ASSERT_REFUSED(p, kvp_unpublish(p, b), KVP_ENOTFOUND);       /* not published */
    KVP_ASSERT_OK(kvp_publish(p, b, &h));
    kvp_hash h2 = kvptest_hash(4);
    KVP_ASSERT_REFUSED(p, kvp_publish(p, b, &h2), KVP_EBUSY);        /* another hash */
    KVP_ASSERT_REFUSED(p, kvp_reset_prefix_cache(p), KVP_EBUSY);     /* in use */
    kvp_pool_destroy(p);

    /* retire_top: only the null block left / nothing to move into */
    cfg = kvptest_config(1);
    cfg.null_block = 1;
    p = kvptest_create(&cfg);
    KVP_ASSERT_REFUSED(p, kvp_retire_top(p, &ret, &moved), KVP_EINVAL);
    kvp_pool_destroy(p);
    p = kvptest_pool(2, KVP_REUSE_LIFO);
    kvptest_take(p, KVP_STREAM_SHARED, 1);
    kvptest_take(p, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_REFUSED(p, kvp_retire_top(p, &ret, &moved), KVP_EEXHAUSTED);
    kvp_pool_destroy(p);
}

/* ---- streams, counts, buffers ---- */

static void test_streams_and_counts(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.separate_kv = 1;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_block ids[8], b;
    size_t n = 0;
    uint32_t u = 0;
    kvp_hash h = kvptest_hash(1);
    kvp_stream bad[] = {KVP_STREAM_SHARED, (kvp_stream)3, (kvp_stream)-1};
    for (size_t i = 0; i < 3; i++) {
        kvp_stream s = bad[i];
        KVP_ASSERT_REFUSED(p, kvp_alloc(p, s, 16, 1, 0, ids, 8, &n), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_take(p, s, 1, &b), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_free_count(p, s, &u), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_peek_next(p, s, &b), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_evict(p, s, 1, &u), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_ensure_free(p, s, 1), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_extend(p, s, 1, &u), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_shrink(p, s, 0, &u), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_lookup(p, s, &h, &b), KVP_EINVAL);
    }
    /* sequences need one shared list */
    kvp_seq *q = NULL;
    KVP_ASSERT_REFUSED(p, kvp_seq_create(p, 1, NULL, &q), KVP_EINVAL);
    /* counts */
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, 0, 1, 0, ids, 8, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, UINT64_MAX, 1, 0, ids, 8, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, (uint64_t)KVP_MAX_BLOCKS * 16 + 1, 1, 0,
                                    ids, 8, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, 16, 1, 256, ids, 8, &n), KVP_EINVAL);
    /* too small an output buffer: the size needed is reported */
    n = 0;
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, 48, 1, 0, ids, 2, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    /* exhaustion is all or nothing */
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, KVP_STREAM_K, 16 * 5, 1, 0, ids, 8, &n), KVP_EEXHAUSTED);
    kvptest_alloc(p, KVP_STREAM_K, 48, 1, ids, 8);
    KVP_ASSERT_REFUSED(p, kvp_owner_blocks(p, 1, ids, 2, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_REFUSED(p, kvp_ensure_free(p, KVP_STREAM_K, 2), KVP_EEXHAUSTED);
    kvp_pool_destroy(p);

    /* bad configurations */
    kvp_pool *none = NULL;
    kvp_config c = kvptest_config(8);
    c.block_size = 0;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    c.block_size = 65536;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    c = kvptest_config(8);
    c.max_blocks = 4;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    c = kvptest_config(0);
    c.null_block = 1;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    c = kvptest_config(8);
    c.reuse = (kvp_reuse)7;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    kvp_allocator half = {NULL, NULL, NULL};
    c = kvptest_config(8);
    c.allocator = &half;
    KVP_ASSERT_STATUS(kvp_pool_create(&c, &none), KVP_EINVAL);
    assert_null(none);
}

static void test_buffers(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.history_len = 4;
    kvp_pool *p = kvptest_create(&cfg);
    KVP_ASSERT_OK(kvp_stats_snapshot(p));
    KVP_ASSERT_OK(kvp_stats_snapshot(p));
    kvp_stats st[1];
    size_t n = 0;
    KVP_ASSERT_REFUSED(p, kvp_stats_history(p, st, 1, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 2);
    char buf[16];
    memset(buf, 'x', sizeof buf);
    size_t need = 0;
    KVP_ASSERT_REFUSED(p, kvp_stats_prometheus(p, NULL, buf, sizeof buf, &need), KVP_ESPACE);
    assert_true(need >= sizeof buf);
    KVP_ASSERT_EQ(buf[0], 'x'); /* "the buffer is left as it was" */
    KVP_ASSERT_REFUSED(p, kvp_stats_json(p, buf, sizeof buf, &need), KVP_ESPACE);
    KVP_ASSERT_EQ(buf[0], 'x');
    KVP_ASSERT_REFUSED(p, kvp_stats_prometheus(p, "9bad", buf, sizeof buf, &need), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_stats_prometheus(p, "bad-name", buf, sizeof buf, &need),
                       KVP_EINVAL);
    kvp_hash hs[1];
    KVP_ASSERT_REFUSED(p, kvp_hash_tokens(p, g_tok, 48, NULL, hs, 1, 0, &n), KVP_ESPACE);
    KVP_ASSERT_EQ(n, 3);
    KVP_ASSERT_REFUSED(p, kvp_hash_tokens(p, g_tok, 48, NULL, hs, 1, 4, &n), KVP_EINVAL);
    void *ptr = NULL;
    KVP_ASSERT_REFUSED(p, kvp_block_ptr(p, 0, &ptr), KVP_EINVAL); /* no host arena */
    kvp_pool_destroy(p);
    cfg.history_len = 0;
    p = kvptest_create(&cfg);
    KVP_ASSERT_REFUSED(p, kvp_stats_snapshot(p), KVP_EINVAL);
    kvp_pool_destroy(p);
}

/* ---- index and hashing ---- */

static void test_index_and_hash(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.prefix_caching = 0;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    kvp_hash h = kvptest_hash(1), out;
    KVP_ASSERT_REFUSED(p, kvp_publish(p, b, &h), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_publish_verified(p, b, &h, KVP_NO_BLOCK, g_tok, 16), KVP_EINVAL);
    kvp_pool_destroy(p);

    cfg = kvptest_config(8);
    cfg.verify_hits = 1;
    p = kvptest_create(&cfg);
    b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    kvp_block c = kvptest_take(p, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_REFUSED(p, kvp_publish_verified(p, b, &h, KVP_NO_BLOCK, g_tok, 15), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_publish_verified(p, b, &h, KVP_NO_BLOCK, NULL, 16), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_publish_verified(p, b, &h, c, g_tok, 16), KVP_EINVAL); /* parent
                                                                    not published */
    KVP_ASSERT_OK(kvp_publish_verified(p, b, &h, KVP_NO_BLOCK, g_tok, 16));
    KVP_ASSERT_REFUSED(p, kvp_publish_verified(p, b, &h, KVP_NO_BLOCK, g_tok, 16), KVP_EBUSY);
    kvp_block f;
    KVP_ASSERT_REFUSED(p, kvp_lookup_verified(p, KVP_STREAM_SHARED, &h, KVP_NO_BLOCK, g_tok, 8,
                                              &f), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_lookup_verified(p, KVP_STREAM_SHARED, &h, KVP_NO_BLOCK, g_tok + 1,
                                              16, &f), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(p, kvp_unpublish(p, c), KVP_ENOTFOUND);
    /* hashing: wrong n, misaligned start, no parent past the start,
     * inverted span */
    KVP_ASSERT_REFUSED(p, kvp_hash_block(p, NULL, g_tok, 15, 0, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_hash_block(p, &h, g_tok, 16, 8, NULL, &out), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_hash_block(p, NULL, g_tok, 16, 16, NULL, &out), KVP_EINVAL);
    kvp_mm_span sp = {{{1}}, 5, 2};
    kvp_extra_keys x = {0, 0, NULL, &sp, 1, NULL, 0};
    KVP_ASSERT_REFUSED(p, kvp_hash_block(p, NULL, g_tok, 16, 0, &x, &out), KVP_EINVAL);
    kvp_seq *q = NULL;
    KVP_ASSERT_REFUSED(p, kvp_seq_create(p, 1, &x, &q), KVP_EINVAL);
    kvp_pool_destroy(p);
}

/* ---- sequences ---- */

static uint64_t seq_digest(kvp_seq *q)
{
    const kvp_block *ids;
    size_t n = 0, t = 0;
    KVP_ASSERT_OK(kvp_seq_blocks(q, &ids, &n, &t));
    uint64_t d = n * 1000003u + t;
    for (size_t i = 0; i < n; i++)
        d = d * 31 + ids[i];
    return d;
}

static void test_sequences(void **state)
{
    (void)state;
    kvp_config cfg = kvptest_config(8);
    cfg.block_size = 4;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_seq *a = NULL, *b = NULL, *c = NULL;
    size_t cached = 0;
    KVP_ASSERT_OK(kvp_seq_create(p, 1, NULL, &a));
    KVP_ASSERT_OK(kvp_seq_admit(a, g_tok, 10, &cached));
    KVP_ASSERT_OK(kvp_seq_create(p, 2, NULL, &b));
    uint64_t da = seq_digest(a), db = seq_digest(b);
    /* admit into a non-empty sequence */
    KVP_ASSERT_REFUSED(p, kvp_seq_admit(a, g_tok, 10, &cached), KVP_EBUSY);
    /* create / fork to an existing id */
    KVP_ASSERT_REFUSED(p, kvp_seq_create(p, 2, NULL, &c), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(p, kvp_seq_fork(a, 2, &c), KVP_EOWNERACTIVE);
    KVP_ASSERT_REFUSED(p, kvp_seq_fork(a, 1, &c), KVP_EOWNERACTIVE);
    /* bad lengths and arguments */
    KVP_ASSERT_REFUSED(p, kvp_seq_admit(b, g_tok, 0, &cached), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_seq_admit(b, NULL, 4, &cached), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_seq_append(a, NULL, 3), KVP_EINVAL);
    /* exhaustion: all or nothing (8 blocks, 3 held) */
    KVP_ASSERT_REFUSED(p, kvp_seq_admit(b, g_tok + 100, 4 * 6, &cached), KVP_EEXHAUSTED);
    KVP_ASSERT_REFUSED(p, kvp_seq_append(a, g_tok, 4 * 6), KVP_EEXHAUSTED);
    kvp_seq *f = NULL;
    KVP_ASSERT_REFUSED(p, kvp_seq_find(p, 3, &f), KVP_ENOTFOUND);
    KVP_ASSERT_REFUSED(p, kvp_seq_find(p, 1, NULL), KVP_EINVAL);
    KVP_ASSERT_EQ(seq_digest(a), da);
    KVP_ASSERT_EQ(seq_digest(b), db);
    /* the sequence's blocks cannot be taken or reset away */
    const kvp_block *ids;
    size_t n;
    KVP_ASSERT_OK(kvp_seq_blocks(a, &ids, &n, NULL));
    KVP_ASSERT_REFUSED(p, kvp_take_id(p, ids[0], 1), KVP_EBUSY);
    KVP_ASSERT_REFUSED(p, kvp_reset_prefix_cache(p), KVP_EBUSY);
    kvp_block first = ids[0];
    KVP_ASSERT_REFUSED(p, kvp_free(p, &first, 1, 1), KVP_ENOTOWNER); /* not owner 1's */
    KVP_ASSERT_OK(kvp_seq_destroy(a));
    KVP_ASSERT_OK(kvp_seq_destroy(b));
    KVP_ASSERT_REFUSED(p, kvp_seq_destroy(NULL), KVP_EINVAL);
    kvptest_done(p);
}

/* Token counts whose block count overflows size_t: "zero or overflowing
 * count" is KVP_EINVAL.  Separate tests, so a crash here (cmocka catches the
 * signal) does not hide the rest. */
static void seq_overflow(int append)
{
    kvp_config cfg = kvptest_config(8);
    cfg.block_size = 4;
    kvp_pool *p = kvptest_create(&cfg);
    kvp_seq *a = NULL;
    size_t cached = 0;
    KVP_ASSERT_OK(kvp_seq_create(p, 1, NULL, &a));
    if (append) {
        KVP_ASSERT_OK(kvp_seq_admit(a, g_tok, 10, &cached));
        uint64_t d = seq_digest(a);
        KVP_ASSERT_REFUSED(p, kvp_seq_append(a, g_tok, SIZE_MAX - 4), KVP_EINVAL);
        KVP_ASSERT_EQ(seq_digest(a), d);
    } else {
        KVP_ASSERT_REFUSED(p, kvp_seq_admit(a, g_tok, SIZE_MAX, &cached), KVP_EINVAL);
        KVP_ASSERT_REFUSED(p, kvp_seq_admit(a, g_tok, SIZE_MAX - 2, &cached), KVP_EINVAL);
        KVP_ASSERT_EQ(seq_digest(a), 0);
    }
    kvp_pool_destroy(p);
}

static void test_seq_admit_overflow(void **state)
{
    (void)state;
    seq_overflow(0);
}

static void test_seq_append_overflow(void **state)
{
    (void)state;
    seq_overflow(1);
}

/* ---- NULL arguments ---- */

static void test_null_args(void **state)
{
    (void)state;
    kvp_pool *p = kvptest_pool(8, KVP_REUSE_LIFO);
    kvp_block ids[2], b;
    size_t n;
    uint32_t u;
    uint64_t fp;
    kvp_hash h = kvptest_hash(1);
    kvp_stats st;
    KVP_ASSERT_STATUS(kvp_alloc(NULL, 0, 16, 1, 0, ids, 2, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, 0, 16, 1, 0, NULL, 2, &n), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_alloc(p, 0, 16, 1, 0, ids, 2, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_take(p, 0, 1, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_free(p, NULL, 1, 1), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_publish(p, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_lookup(p, 0, NULL, &b), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_lookup(p, 0, &h, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_free_count(p, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_block_get(p, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_owner_blocks(p, 1, NULL, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_retire_top(p, NULL, &b), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_stats_get(p, NULL), KVP_EINVAL);
    KVP_ASSERT_REFUSED(p, kvp_pool_fingerprint(p, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_take(NULL, 0, 1, &b), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_free(NULL, ids, 0, 1), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_free_count(NULL, 0, &u), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_stats_get(NULL, &st), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_pool_fingerprint(NULL, &fp), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_pool_check(NULL, NULL, 0), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_pool_clear(NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_admit(NULL, ids, 1, &n), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_append(NULL, ids, 1), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_fork(NULL, 1, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_seq_blocks(NULL, NULL, NULL, NULL), KVP_EINVAL);
    kvp_pool_destroy(NULL); /* accepted and ignored */
    kvp_pool_destroy(p);
}

/* ---- re-entrant callbacks ---- */

typedef struct reenter {
    kvp_pool *self, *other;
    kvp_seq *seq;
    int calls, busy, other_ok, total;
} reenter;

/* Every kind of call into the same pool must be refused with KVP_EBUSY;
 * calling another pool must work. */
static void try_everything(reenter *r)
{
    kvp_pool *p = r->self;
    kvp_block ids[2], b = 1;
    size_t n;
    uint32_t u;
    uint64_t fp;
    kvp_stats st;
    kvp_hash h = kvptest_hash(9);
    kvp_seq *q;
    char buf[64];
    kvp_status got[] = {
        kvp_alloc(p, 0, 4, 1, 0, ids, 2, &n), kvp_take(p, 0, 1, &b),
        kvp_take_hinted(p, 0, 1, &(uint32_t){KVP_HINT_NONE}, &b), kvp_take_id(p, 3, 1),
        kvp_free(p, &b, 1, 1), kvp_free_owner(p, 1, &n), kvp_owner_register(p, 77),
        kvp_owner_release(p, 1), kvp_owner_blocks(p, 1, ids, 2, &n),
        kvp_free_count(p, 0, &u), kvp_set_fill(p, 1, 1), kvp_block_get(p, 1, &(kvp_block_info){0}),
        kvp_claim(p, 1, 2), kvp_publish(p, 1, &h), kvp_lookup(p, 0, &h, &b),
        kvp_unpublish(p, 1), kvp_clear_index(p), kvp_evict(p, 0, 1, &u),
        kvp_ensure_free(p, 0, 1), kvp_reset_prefix_cache(p), kvp_extend(p, 0, 1, &u),
        kvp_shrink(p, 0, 0, &u), kvp_retire_top(p, &b, &b), kvp_pool_clear(p),
        kvp_stats_get(p, &st), kvp_stats_reset(p), kvp_stats_snapshot(p),
        kvp_stats_json(p, buf, sizeof buf, &n), kvp_pool_check(p, NULL, 0),
        kvp_pool_fingerprint(p, &fp), kvp_seq_create(p, 50, NULL, &q),
        kvp_seq_find(p, 1, &q), kvp_seq_append(r->seq, g_tok, 3),
        kvp_seq_fork(r->seq, 60, &q), kvp_seq_destroy(r->seq),
        kvp_seq_blocks(r->seq, (const kvp_block **)&q, &n, NULL),
    };
    r->calls++;
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++) {
        r->total++;
        if (got[i] == KVP_EBUSY)
            r->busy++;
        else
            fprintf(stderr, "re-entrant call #%zu returned %s, expected %s\n", i,
                    kvp_strerror(got[i]), kvp_strerror(KVP_EBUSY));
    }
    kvp_block ob;
    if (kvp_take(r->other, 0, 1, &ob) == KVP_OK && kvp_free(r->other, &ob, 1, 1) == KVP_OK)
        r->other_ok++;
}

static void on_evict_reenter(void *user, const kvp_hash *hash, kvp_block block)
{
    (void)hash;
    (void)block;
    try_everything(user);
}

static void on_copy_reenter(void *user, kvp_stream s, kvp_block src, kvp_block dst)
{
    (void)s;
    (void)src;
    (void)dst;
    try_everything(user);
}

static void reentry(int thread_safe)
{
    reenter r;
    memset(&r, 0, sizeof r);
    r.other = kvptest_pool(4, KVP_REUSE_LIFO);
    kvp_config cfg = kvptest_config(4);
    cfg.block_size = 4;
    cfg.thread_safe = thread_safe;
    cfg.on_evict = on_evict_reenter;
    cfg.evict_user = &r;
    cfg.copy = on_copy_reenter;
    cfg.copy_user = &r;
    kvp_pool *p = kvptest_create(&cfg);
    r.self = p;
    size_t cached;
    kvp_seq *a, *c;
    KVP_ASSERT_OK(kvp_seq_create(p, 1, NULL, &a));
    KVP_ASSERT_OK(kvp_seq_admit(a, g_tok, 6, &cached)); /* 2 blocks, first published */
    r.seq = a;
    /* eviction callback: evict the published block's content (a cached copy) */
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    kvp_hash h = kvptest_hash(5);
    KVP_ASSERT_OK(kvp_publish(p, b, &h));
    KVP_ASSERT_OK(kvp_free(p, &b, 1, 1));
    uint32_t ev = 0;
    KVP_ASSERT_OK(kvp_evict(p, KVP_STREAM_SHARED, 1, &ev));
    KVP_ASSERT_EQ(ev, 1);
    kvptest_check(p);
    /* copy hook: fork, then append into the shared partial block (COW) */
    KVP_ASSERT_OK(kvp_seq_fork(a, 2, &c));
    KVP_ASSERT_OK(kvp_seq_append(c, g_tok, 1));
    kvptest_check(p);
    KVP_ASSERT_EQ(r.calls, 2);
    KVP_ASSERT_EQ(r.busy, r.total);
    KVP_ASSERT_EQ(r.other_ok, 2);
    fprintf(stderr, "[misuse] %s pool: %d re-entrant calls refused with EBUSY\n",
            thread_safe ? "thread-safe" : "single-threaded", r.busy);
    kvp_pool_destroy(p);
    kvp_pool_destroy(r.other);
}

static void test_reentry_thread_safe(void **state)
{
    (void)state;
    reentry(1);
}

static void test_reentry_single_threaded(void **state)
{
    (void)state;
    reentry(0);
}

int main(void)
{
    init_tokens();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_free),
        cmocka_unit_test(test_foreign_free),
        cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_streams_and_counts),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_index_and_hash),
        cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_seq_admit_overflow),
        cmocka_unit_test(test_seq_append_overflow),
        cmocka_unit_test(test_null_args),
        cmocka_unit_test(test_reentry_thread_safe),
        cmocka_unit_test(test_reentry_single_threaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
