/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvptest.h — small shared helpers for the kvpool cmocka tests.
 *
 * Include this instead of cmocka.h: it pulls in the headers cmocka needs
 * (stdarg, stddef, setjmp, stdint) and kvpool.h.  Every helper that can fail
 * fails the current cmocka test with the file and line of the caller and
 * prints both the value it got and the value it expected.
 *
 * Status assertions
 *   KVP_ASSERT_STATUS(expr, expected)  expr must return `expected`; on failure
 *                                      prints both codes and kvp_strerror().
 *   KVP_ASSERT_OK(expr)                same with KVP_OK.
 *   KVP_ASSERT_REFUSED(pool, expr, st) fingerprint, run expr, assert status
 *                                      st, assert the fingerprint is
 *                                      unchanged, run the checker.
 *   KVP_ASSERT_EQ(a, b)                integer equality, both values printed
 *                                      (as unsigned 64-bit and signed).
 *
 * Pool helpers (all assert success)
 *   kvptest_check(pool)       kvp_pool_check(); fails with its message.
 *   kvptest_done(pool)        kvptest_check(), then kvp_pool_destroy(): the
 *                             end of a pool the test still expects whole.
 *   kvptest_fp(pool)          kvp_pool_fingerprint().
 *   kvptest_config(n)         kvp_config_default() with num_blocks = n and
 *                             block_size = 16; change fields, then
 *   kvptest_create(&cfg)      kvp_pool_create() + check; end with
 *                             kvptest_done() or kvp_pool_destroy().
 *   kvptest_pool(n, reuse)    shorthand for the two above.
 *   kvptest_stats(pool)       kvp_stats_get() by value.
 *   kvptest_history_len(pool) entries in the history ring.
 *   kvptest_info(pool, id)    kvp_block_get() by value.
 *   kvptest_free_count(pool, stream)
 *   kvptest_take(pool, stream, owner)         kvp_take(), returns the id.
 *   KVPTEST_EXPECT_TAKES(pool, stream, owner, ids...)
 *                                             takes one by one: each must be
 *                                             the next id given, and
 *                                             kvp_peek_next must name it first
 *                                             (or none, when the take grows the
 *                                             pool) and change nothing; then
 *                                             checks the pool.
 *   kvptest_alloc(pool, stream, tokens, owner, ids, cap)  kvp_alloc() with
 *                             format FP16, returns the count.
 *   kvptest_owner_blocks(pool, owner, ids, cap)  returns the count.
 *   kvptest_lookup(pool, hv)  kvp_lookup() of kvptest_hash(hv) in the shared
 *                             stream: the block, or KVP_NO_BLOCK when the
 *                             hash is not indexed.
 *
 * Hashes
 *   kvptest_hash(v)      a kvp_hash that is zero except for v stored
 *                        big-endian in the last 8 bytes.
 *   kvptest_hash_u64(h)  reads those last 8 bytes back.
 *
 * Tokens
 *   kvptest_tokens(t, n, first)  fills t[0..n-1] with first, first + 1, ...
 *                                (a prompt of consecutive token ids).
 *
 * Eviction recorder
 *   kvptest_evrec r; kvptest_evrec_attach(&r, &cfg);   (before create)
 *   Every callback appends an entry: hash value (last 8 bytes, and the whole
 *   hash in r.full[]) and block, or
 *   cleared = 1 for an "all cleared" notice (hash NULL, block KVP_NO_BLOCK;
 *   a notice that breaks that pairing is counted in r.bad).  r.n counts all
 *   callbacks, r.n_cleared the notices; the first KVPTEST_EVREC_MAX entries
 *   are kept.  kvptest_evrec_reset(&r) forgets everything.
 *   KVPTEST_EXPECT_EVREC(&r, i, hv, b)  entry i recorded hash value hv
 *                                        evicted from block b.
 *
 * Scale
 *   kvptest_scale()      env KVP_TEST_SCALE as a double (default 1.0).
 *   kvptest_steps(base)  base * scale, at least 1.
 *
 * Random streams (splitmix64: a seed gives the same stream on every run)
 *   kvptest_rand(&state)           advances state, returns the next value.
 *   kvptest_rand_below(&state, n)  kvptest_rand() % n; 0, drawing
 *                                  nothing, when n is 0.
 *
 * Allocator hooks that check sizes
 *   kvptest_sized_alloc(size)   malloc of size bytes behind a 16-byte header
 *                               that records size (the block keeps malloc's
 *                               16-byte alignment); NULL when malloc fails.
 *   kvptest_sized_release(ptr)  frees a block of kvptest_sized_alloc and
 *                               returns the size it recorded, for the hook to
 *                               compare with the size the library passed.
 */
#ifndef KVPTEST_H
#define KVPTEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "kvpool.h"

/* ---- status assertions ------------------------------------------------- */

void kvptest_assert_status(int got, int expected, const char *expr,
                           const char *file, int line);
void kvptest_assert_eq(uint64_t a, uint64_t b, const char *ea, const char *eb,
                       const char *file, int line);

#define KVP_ASSERT_STATUS(expr, expected) \
    kvptest_assert_status((int)(expr), (int)(expected), #expr, __FILE__, __LINE__)
#define KVP_ASSERT_OK(expr) KVP_ASSERT_STATUS(expr, KVP_OK)
#define KVP_ASSERT_EQ(a, b) \
    kvptest_assert_eq((uint64_t)(a), (uint64_t)(b), #a, #b, __FILE__, __LINE__)

/* ---- pool helpers ------------------------------------------------------- */

void kvptest_check_at(kvp_pool *pool, const char *file, int line);
uint64_t kvptest_fp_at(kvp_pool *pool, const char *file, int line);
void kvptest_assert_fp_at(kvp_pool *pool, uint64_t before, const char *expr,
                          const char *file, int line);

#define kvptest_check(pool) kvptest_check_at((pool), __FILE__, __LINE__)
void kvptest_done_at(kvp_pool *pool, const char *file, int line);
#define kvptest_done(pool) kvptest_done_at((pool), __FILE__, __LINE__)
#define kvptest_fp(pool) kvptest_fp_at((pool), __FILE__, __LINE__)

#define KVP_ASSERT_REFUSED(pool, expr, status)                               \
    do {                                                                     \
        uint64_t kvpt_fp_before_ = kvptest_fp(pool);                         \
        KVP_ASSERT_STATUS(expr, status);                                     \
        kvptest_assert_fp_at((pool), kvpt_fp_before_, #expr, __FILE__,       \
                             __LINE__);                                      \
        kvptest_check(pool);                                                 \
    } while (0)

kvp_config kvptest_config(uint32_t num_blocks);
kvp_pool *kvptest_create_at(const kvp_config *cfg, const char *file, int line);
#define kvptest_create(cfg) kvptest_create_at((cfg), __FILE__, __LINE__)
kvp_pool *kvptest_pool_at(uint32_t num_blocks, kvp_reuse reuse, const char *file,
                          int line);
#define kvptest_pool(n, reuse) kvptest_pool_at((n), (reuse), __FILE__, __LINE__)

kvp_stats kvptest_stats_at(kvp_pool *pool, const char *file, int line);
#define kvptest_stats(pool) kvptest_stats_at((pool), __FILE__, __LINE__)

/* One expected counter (a uint64_t field) of kvp_stats, written
 * ST(field, value): the field's name and offset, and the value it should
 * hold. */
typedef struct kvptest_stat {
    const char *name;
    size_t offset;
    uint64_t want;
} kvptest_stat;
#define ST(field, value) {#field, offsetof(kvp_stats, field), (uint64_t)(value)}

/* Read pool's stats once and expect each listed counter to hold its value,
 * e.g. KVPTEST_EXPECT_STATS(pool, ST(in_use, 3), ST(cached, 0)).  A failure
 * lists every counter that differs, at the caller's line.  `want` ends with
 * a NULL name. */
void kvptest_expect_stats_at(kvp_pool *pool, const kvptest_stat *want, const char *file,
                             int line);
#define KVPTEST_EXPECT_STATS(pool, ...)                                               \
    kvptest_expect_stats_at((pool), (const kvptest_stat[]){__VA_ARGS__, {NULL, 0, 0}}, \
                            __FILE__, __LINE__)

size_t kvptest_history_len_at(kvp_pool *pool, const char *file, int line);
#define kvptest_history_len(pool) kvptest_history_len_at((pool), __FILE__, __LINE__)
kvp_block_info kvptest_info_at(kvp_pool *pool, kvp_block id, const char *file,
                               int line);
#define kvptest_info(pool, id) kvptest_info_at((pool), (id), __FILE__, __LINE__)
uint32_t kvptest_free_count_at(kvp_pool *pool, kvp_stream s, const char *file,
                               int line);
#define kvptest_free_count(pool, s) \
    kvptest_free_count_at((pool), (s), __FILE__, __LINE__)
kvp_block kvptest_take_at(kvp_pool *pool, kvp_stream s, kvp_owner owner,
                          const char *file, int line);
#define kvptest_take(pool, s, owner) \
    kvptest_take_at((pool), (s), (owner), __FILE__, __LINE__)
void kvptest_expect_takes_at(kvp_pool *pool, kvp_stream s, kvp_owner owner,
                             const kvp_block *exp, size_t n, const char *file, int line);
#define KVPTEST_EXPECT_TAKES(pool, s, owner, ...)                                        \
    do {                                                                                 \
        const kvp_block exp_[] = {__VA_ARGS__};                                          \
        kvptest_expect_takes_at((pool), (s), (owner), exp_, ARRAY_LEN(exp_), __FILE__,   \
                                __LINE__);                                               \
    } while (0)
size_t kvptest_alloc_at(kvp_pool *pool, kvp_stream s, uint64_t tokens,
                        kvp_owner owner, kvp_block *ids, size_t cap,
                        const char *file, int line);
#define kvptest_alloc(pool, s, tokens, owner, ids, cap) \
    kvptest_alloc_at((pool), (s), (tokens), (owner), (ids), (cap), __FILE__, __LINE__)
void kvptest_tokens(uint32_t *t, size_t n, uint32_t first);
size_t kvptest_owner_blocks_at(kvp_pool *pool, kvp_owner owner, kvp_block *ids,
                               size_t cap, const char *file, int line);
#define kvptest_owner_blocks(pool, owner, ids, cap) \
    kvptest_owner_blocks_at((pool), (owner), (ids), (cap), __FILE__, __LINE__)

/* ---- hashes ------------------------------------------------------------- */

kvp_hash kvptest_hash(uint64_t v);
uint64_t kvptest_hash_u64(const kvp_hash *h);

/* ---- eviction recorder -------------------------------------------------- */

#define KVPTEST_EVREC_MAX 256
typedef struct kvptest_evrec {
    size_t n;                 /* callbacks seen (all kinds) */
    size_t n_cleared;         /* "all cleared" notices seen */
    size_t bad;               /* hash NULL xor block KVP_NO_BLOCK */
    uint64_t hash[KVPTEST_EVREC_MAX];   /* kvptest_hash_u64 of the hash */
    kvp_hash full[KVPTEST_EVREC_MAX];   /* the whole hash (zero if cleared) */
    kvp_block block[KVPTEST_EVREC_MAX];
    int cleared[KVPTEST_EVREC_MAX];
} kvptest_evrec;

void kvptest_evrec_fn(void *user, const kvp_hash *hash, kvp_block block);
void kvptest_evrec_attach(kvptest_evrec *r, kvp_config *cfg);
void kvptest_evrec_reset(kvptest_evrec *r);
void kvptest_evrec_expect_at(const kvptest_evrec *r, size_t i, uint64_t hv, kvp_block b,
                             const char *file, int line);
#define KVPTEST_EXPECT_EVREC(r, i, hv, b) \
    kvptest_evrec_expect_at((r), (i), (hv), (b), __FILE__, __LINE__)

/* kvptest_pool(n, reuse) with its evictions recorded in rec (reset first). */
kvp_pool *kvptest_rec_pool_at(kvptest_evrec *rec, uint32_t num_blocks, kvp_reuse reuse,
                              const char *file, int line);
#define kvptest_rec_pool(rec, n, reuse) \
    kvptest_rec_pool_at((rec), (n), (reuse), __FILE__, __LINE__)

/* ---- scale -------------------------------------------------------------- */

double kvptest_scale(void);
size_t kvptest_steps(size_t base);

/* ---- random streams ----------------------------------------------------- */

uint64_t kvptest_rand(uint64_t *state);
uint32_t kvptest_rand_below(uint64_t *state, uint32_t n);

/* ---- allocator hooks ---------------------------------------------------- */

void *kvptest_sized_alloc(size_t size);
size_t kvptest_sized_release(void *ptr);

/* Small helpers several suites share (defined here once). */
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Drop one reference on b held by owner; the test fails otherwise. */
void kvptest_free1(kvp_pool *pool, kvp_block b, kvp_owner owner);
/* Publish b under kvptest_hash(hv); the test fails otherwise. */
void kvptest_publish(kvp_pool *pool, kvp_block b, uint64_t hv);
/* The block indexed under kvptest_hash(hv) in stream s, or KVP_NO_BLOCK. */
kvp_block kvptest_lookup_at(kvp_pool *pool, kvp_stream s, uint64_t hv, const char *file,
                            int line);
#define kvptest_lookup(pool, hv) \
    kvptest_lookup_at((pool), KVP_STREAM_SHARED, (hv), __FILE__, __LINE__)

#endif /* KVPTEST_H */
