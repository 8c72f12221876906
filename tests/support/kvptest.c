/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvptest.c — shared helpers for the kvpool cmocka tests (see kvptest.h).
 */
#include "kvptest.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvptest_assert_status(int got, int expected, const char *expr,
                           const char *file, int line)
{
    if (got == expected)
        return;
    print_error("%s:%d: %s\n    returned %d (%s)\n    expected %d (%s)\n", file,
                line, expr, got, kvp_strerror(got), expected,
                kvp_strerror(expected));
    _fail(file, line);
}

void kvptest_assert_eq(uint64_t a, uint64_t b, const char *ea, const char *eb,
                       const char *file, int line)
{
    if (a == b)
        return;
    print_error("%s:%d: %s == %s failed\n    got      %llu (%lld, %#llx)\n"
                "    expected %llu (%lld, %#llx)\n",
                file, line, ea, eb, (unsigned long long)a, (long long)a,
                (unsigned long long)a, (unsigned long long)b, (long long)b,
                (unsigned long long)b);
    _fail(file, line);
}

void kvptest_check_at(kvp_pool *pool, const char *file, int line)
{
    char msg[512];
    msg[0] = '\0';
    kvp_status st = kvp_pool_check(pool, msg, sizeof msg);
    if (st == KVP_OK)
        return;
    msg[sizeof msg - 1] = '\0';
    print_error("%s:%d: kvp_pool_check returned %d (%s): %s\n", file, line,
                (int)st, kvp_strerror(st), msg);
    _fail(file, line);
}

void kvptest_done_at(kvp_pool *pool, const char *file, int line)
{
    kvptest_check_at(pool, file, line);
    kvp_pool_destroy(pool);
}

uint64_t kvptest_fp_at(kvp_pool *pool, const char *file, int line)
{
    uint64_t fp = 0;
    kvptest_assert_status(kvp_pool_fingerprint(pool, &fp), KVP_OK,
                          "kvp_pool_fingerprint", file, line);
    return fp;
}

void kvptest_assert_fp_at(kvp_pool *pool, uint64_t before, const char *expr,
                          const char *file, int line)
{
    uint64_t after = kvptest_fp_at(pool, file, line);
    if (after == before)
        return;
    print_error("%s:%d: refused call %s changed the pool\n"
                "    fingerprint before %#llx, after %#llx\n",
                file, line, expr, (unsigned long long)before,
                (unsigned long long)after);
    _fail(file, line);
}

kvp_config kvptest_config(uint32_t num_blocks)
{
    kvp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (kvp_config_default(&cfg) != KVP_OK)
        fail_msg("kvp_config_default failed");
    cfg.block_size = 16;
    cfg.num_blocks = num_blocks;
    return cfg;
}

kvp_pool *kvptest_create_at(const kvp_config *cfg, const char *file, int line)
{
    kvp_pool *pool = NULL;
    kvptest_assert_status(kvp_pool_create(cfg, &pool), KVP_OK, "kvp_pool_create",
                          file, line);
    if (pool == NULL) {
        print_error("%s:%d: kvp_pool_create returned OK and a NULL pool\n", file,
                    line);
        _fail(file, line);
    }
    kvptest_check_at(pool, file, line);
    return pool;
}

kvp_pool *kvptest_pool_at(uint32_t num_blocks, kvp_reuse reuse, const char *file,
                          int line)
{
    kvp_config cfg = kvptest_config(num_blocks);
    cfg.reuse = reuse;
    return kvptest_create_at(&cfg, file, line);
}

kvp_stats kvptest_stats_at(kvp_pool *pool, const char *file, int line)
{
    kvp_stats s;
    memset(&s, 0, sizeof s);
    kvptest_assert_status(kvp_stats_get(pool, &s), KVP_OK, "kvp_stats_get", file,
                          line);
    return s;
}

void kvptest_expect_stats_at(kvp_pool *pool, const kvptest_stat *want, const char *file,
                             int line)
{
    kvp_stats s = kvptest_stats_at(pool, file, line);
    int bad = 0;
    for (size_t i = 0; want[i].name; i++) {
        uint64_t got;
        memcpy(&got, (const char *)&s + want[i].offset, sizeof got);
        if (got == want[i].want)
            continue;
        print_error("%s:%d: stats.%s: got %llu, expected %llu\n", file, line, want[i].name,
                    (unsigned long long)got, (unsigned long long)want[i].want);
        bad = 1;
    }
    if (bad)
        _fail(file, line);
}

size_t kvptest_history_len_at(kvp_pool *pool, const char *file, int line)
{
    size_t n = 0;
    kvp_status st = kvp_stats_history(pool, NULL, 0, &n);
    if (st != KVP_ESPACE)
        kvptest_assert_status(st, KVP_OK, "kvp_stats_history", file, line);
    return n;
}

kvp_block_info kvptest_info_at(kvp_pool *pool, kvp_block id, const char *file,
                               int line)
{
    kvp_block_info info;
    memset(&info, 0, sizeof info);
    kvptest_assert_status(kvp_block_get(pool, id, &info), KVP_OK, "kvp_block_get",
                          file, line);
    return info;
}

uint32_t kvptest_free_count_at(kvp_pool *pool, kvp_stream s, const char *file,
                               int line)
{
    uint32_t n = UINT32_MAX;
    kvptest_assert_status(kvp_free_count(pool, s, &n), KVP_OK, "kvp_free_count",
                          file, line);
    return n;
}

kvp_block kvptest_take_at(kvp_pool *pool, kvp_stream s, kvp_owner owner,
                          const char *file, int line)
{
    kvp_block b = KVP_NO_BLOCK;
    kvptest_assert_status(kvp_take(pool, s, owner, &b), KVP_OK, "kvp_take", file,
                          line);
    return b;
}

/* Take blocks one by one and compare with the expected ids; before each,
 * kvp_peek_next must name the same block (or none, when the stream has no
 * free block and the take grows the pool) and change nothing. */
void kvptest_expect_takes_at(kvp_pool *pool, kvp_stream s, kvp_owner owner,
                             const kvp_block *exp, size_t n, const char *file, int line)
{
    for (size_t i = 0; i < n; i++) {
        kvp_block next = KVP_NO_BLOCK;
        uint32_t nfree = 1;
        uint64_t fp = kvptest_fp(pool);
        kvp_status st = kvp_peek_next(pool, s, &next);
        bool grows = st == KVP_OK && next == KVP_NO_BLOCK &&
                     kvp_free_count(pool, s, &nfree) == KVP_OK && nfree == 0;
        if (st != KVP_OK || (next != exp[i] && !grows) || kvptest_fp(pool) != fp) {
            print_error("%s:%d: before take #%zu kvp_peek_next gave %s, block %u (expected %u)"
                        "%s\n", file, line, i, kvp_strerror(st), (unsigned)next,
                        (unsigned)exp[i], kvptest_fp(pool) != fp ? ", and changed the pool" : "");
            _fail(file, line);
        }
        kvp_block b = kvptest_take_at(pool, s, owner, file, line);
        if (b != exp[i]) {
            print_error("%s:%d: take #%zu returned block %u, expected %u\n", file,
                        line, i, (unsigned)b, (unsigned)exp[i]);
            _fail(file, line);
        }
    }
    kvptest_check_at(pool, file, line);
}

size_t kvptest_alloc_at(kvp_pool *pool, kvp_stream s, uint64_t tokens,
                        kvp_owner owner, kvp_block *ids, size_t cap,
                        const char *file, int line)
{
    size_t n = 0;
    kvptest_assert_status(kvp_alloc(pool, s, tokens, owner, KVP_FMT_FP16, ids, cap, &n),
                          KVP_OK, "kvp_alloc", file, line);
    return n;
}

void kvptest_tokens(uint32_t *t, size_t n, uint32_t first)
{
    for (size_t i = 0; i < n; i++)
        t[i] = first + (uint32_t)i;
}

size_t kvptest_owner_blocks_at(kvp_pool *pool, kvp_owner owner, kvp_block *ids,
                               size_t cap, const char *file, int line)
{
    size_t n = 0;
    kvptest_assert_status(kvp_owner_blocks(pool, owner, ids, cap, &n), KVP_OK,
                          "kvp_owner_blocks", file, line);
    return n;
}

kvp_hash kvptest_hash(uint64_t v)
{
    kvp_hash h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 8; i++)
        h.b[31 - i] = (uint8_t)(v >> (8 * i));
    return h;
}

uint64_t kvptest_hash_u64(const kvp_hash *h)
{
    uint64_t v = 0;
    for (int i = 24; i < 32; i++)
        v = (v << 8) | h->b[i];
    return v;
}

void kvptest_evrec_fn(void *user, const kvp_hash *hash, kvp_block block)
{
    kvptest_evrec *r = user;
    int cleared = hash == NULL;
    if ((hash == NULL) != (block == KVP_NO_BLOCK))
        r->bad++;
    if (r->n < KVPTEST_EVREC_MAX) {
        r->hash[r->n] = hash ? kvptest_hash_u64(hash) : 0;
        if (hash)
            r->full[r->n] = *hash;
        else
            memset(&r->full[r->n], 0, sizeof r->full[r->n]);
        r->block[r->n] = block;
        r->cleared[r->n] = cleared;
    }
    r->n++;
    if (cleared)
        r->n_cleared++;
}

void kvptest_evrec_reset(kvptest_evrec *r)
{
    memset(r, 0, sizeof *r);
}

void kvptest_evrec_expect_at(const kvptest_evrec *r, size_t i, uint64_t hv, kvp_block b,
                             const char *file, int line)
{
    kvptest_assert_eq(r->hash[i], hv, "evicted hash", "expected", file, line);
    kvptest_assert_eq(r->block[i], b, "evicted block", "expected", file, line);
}

void kvptest_evrec_attach(kvptest_evrec *r, kvp_config *cfg)
{
    kvptest_evrec_reset(r);
    cfg->on_evict = kvptest_evrec_fn;
    cfg->evict_user = r;
}

kvp_pool *kvptest_rec_pool_at(kvptest_evrec *rec, uint32_t num_blocks, kvp_reuse reuse,
                              const char *file, int line)
{
    kvp_config cfg = kvptest_config(num_blocks);
    cfg.reuse = reuse;
    kvptest_evrec_attach(rec, &cfg);
    return kvptest_create_at(&cfg, file, line);
}

double kvptest_scale(void)
{
    const char *s = getenv("KVP_TEST_SCALE");
    if (s == NULL || *s == '\0')
        return 1.0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v > 0.0))
        return 1.0;
    return v;
}

size_t kvptest_steps(size_t base)
{
    double v = (double)base * kvptest_scale();
    if (v < 1.0)
        return 1;
    return (size_t)v;
}

/* splitmix64 (Steele, Lea and Flood): every 64-bit state gives a
 * well-mixed value, so consecutive seeds still give unrelated streams. */
uint64_t kvptest_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A zero bound draws nothing: the stream is left where it was. */
uint32_t kvptest_rand_below(uint64_t *state, uint32_t n)
{
    return n ? (uint32_t)(kvptest_rand(state) % n) : 0;
}

/* The header is 16 bytes, not sizeof(size_t), so the caller's block keeps
 * the alignment malloc gives. */
#define KVPTEST_SIZE_HDR 16u

void *kvptest_sized_alloc(size_t size)
{
    unsigned char *p = malloc(size + KVPTEST_SIZE_HDR);
    if (p == NULL)
        return NULL;
    memcpy(p, &size, sizeof size);
    return p + KVPTEST_SIZE_HDR;
}

size_t kvptest_sized_release(void *ptr)
{
    unsigned char *p = (unsigned char *)ptr - KVPTEST_SIZE_HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    free(p);
    return size;
}

void kvptest_free1(kvp_pool *pool, kvp_block b, kvp_owner owner)
{
    KVP_ASSERT_OK(kvp_free(pool, &b, 1, owner));
}

void kvptest_publish(kvp_pool *pool, kvp_block b, uint64_t hv)
{
    kvp_hash h = kvptest_hash(hv);
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
}

kvp_block kvptest_lookup_at(kvp_pool *pool, kvp_stream s, uint64_t hv, const char *file,
                            int line)
{
    kvp_hash h = kvptest_hash(hv);
    kvp_block out = KVP_NO_BLOCK;
    kvp_status st = kvp_lookup(pool, s, &h, &out);
    if (st == KVP_ENOTFOUND)
        return KVP_NO_BLOCK;
    kvptest_assert_status(st, KVP_OK, "kvp_lookup", file, line);
    return out;
}
