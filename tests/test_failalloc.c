/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_failalloc.c — allocation-failure injection at every allocation.
 *
 * What it covers: every place kvpool allocates memory — pool creation (all
 * tables, ordered id sets, verify arrays, history, SLRU's ghost list), growth (kvp_extend,
 * grow_on_exhaustion from kvp_alloc/kvp_take and from sequence admission),
 * owner records (new owners, the owner table and id map doubling, an
 * owner's reference array growing), shared-owner references (claims by
 * further owners, one by one or by kvp_claim_prefix: the xref slab), index
 * growth (rebuilt with the pool), verify arrays (verify_hits), hashing of
 * long blocks, and sequences
 * (create with extra keys, admit, probe, append, fork).
 *
 * How: a kvp_allocator that counts allocations, tracks outstanding bytes
 * (checking that every release names the size it was allocated with), and
 * can be armed to refuse exactly the k-th allocation from now.  For each
 * scenario and each k = 1, 2, ...: build the pool and its state with the
 * allocator disarmed, take the fingerprint (and sequence tables), arm it,
 * make the one call, disarm.  The call must return KVP_ENOMEM with nothing
 * changed (fingerprint, sequence tables, kvp_pool_check) — or, once k is
 * past the allocations the call makes, succeed without the failure having
 * fired.  After kvp_pool_destroy the outstanding bytes must be zero (the
 * ASan build's LeakSanitizer checks the same independently).  Setups are
 * varied (1..N existing owners, references, sequences) so that every
 * doubling point is hit, not only the first.
 *
 * Why this way: refusing one allocation at a time, at every position,
 * proves each growth point is reserved before state is touched, which is
 * what the header's "a call that fails changes nothing" promises.  The
 * total number of failure points injected is printed at the end.
 */
#include "kvptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The failing, counting allocator                                           */
/* ------------------------------------------------------------------------ */

typedef struct failmem {
    size_t n_alloc;      /* allocations since arming */
    size_t fail_at;      /* 0: never fail; k: refuse the k-th since arming */
    int fired;
    long long outstanding; /* bytes */
    size_t bad_release;  /* releases whose size did not match */
} failmem;

static void *fm_alloc(void *user, size_t size)
{
    failmem *f = user;
    if (f->fail_at && ++f->n_alloc == f->fail_at) {
        f->fired = 1;
        return NULL;
    }
    void *p = kvptest_sized_alloc(size);
    if (!p)
        return NULL;
    f->outstanding += (long long)size;
    return p;
}

static void fm_release(void *user, void *ptr, size_t size)
{
    failmem *f = user;
    if (!ptr)
        return;
    size_t got = kvptest_sized_release(ptr);
    if (got != size)
        f->bad_release++;
    f->outstanding -= (long long)got;
}

static failmem g_fm;
static const kvp_allocator g_alloc = {fm_alloc, fm_release, &g_fm};

static void arm(size_t k)
{
    g_fm.n_alloc = 0;
    g_fm.fail_at = k;
    g_fm.fired = 0;
}

static void disarm(void)
{
    g_fm.fail_at = 0;
}

static size_t g_points;  /* failure points injected (ENOMEM returned) */
static size_t g_calls;   /* calls made under injection */

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                 */
/* ------------------------------------------------------------------------ */

#define MAXSEQ 16 /* setup_seq makes 2 + v sequences, v < 8 */
static kvp_seq *g_seq[MAXSEQ];

typedef struct scenario {
    const char *name;
    int nvariants;
    void (*config)(kvp_config *cfg, int v);
    void (*setup)(kvp_pool *p, int v);          /* allocator disarmed */
    kvp_status (*action)(kvp_pool *p, int v);   /* the one call under test */
} scenario;

static kvp_config base_config(void)
{
    kvp_config c = kvptest_config(8);
    c.allocator = &g_alloc;
    return c;
}

static uint32_t g_tokens[4096];

static void fill_tokens(void)
{
    for (size_t i = 0; i < sizeof g_tokens / sizeof g_tokens[0]; i++)
        g_tokens[i] = (uint32_t)(i * 2654435761u % 50000u);
}

/* ---- creation ---- */

static void cfg_create(kvp_config *c, int v)
{
    c->num_blocks = 64;
    c->separate_kv = v & 1;
    c->reuse = (kvp_reuse)((v >> 1) % 3);
    c->verify_hits = (v >> 2) & 1;
    c->null_block = v == 3;
    c->history_len = v == 5 ? 0 : 16;
    c->policy = (v & 1) && c->reuse != KVP_REUSE_FIFO ? KVP_POLICY_SLRU : KVP_POLICY_LRU;
}

/* ---- growth ---- */

static void cfg_extend(kvp_config *c, int v)
{
    c->num_blocks = (uint32_t)(v % 4) * 8;
    c->reuse = (kvp_reuse)(v % 3);
    c->separate_kv = v >= 8;
    c->verify_hits = v % 2;
}

static void setup_extend(kvp_pool *p, int v)
{
    (void)v;
    /* some retired ids to refill, some cached content */
    kvp_block ids[8];
    kvp_stream s = v >= 8 ? KVP_STREAM_K : KVP_STREAM_SHARED;
    uint32_t free_n = kvptest_free_count(p, s);
    if (free_n >= 2) {
        size_t n = kvptest_alloc(p, s, 16, 1, ids, 8);
        KVP_ASSERT_OK(kvp_publish(p, ids[0], &(kvp_hash){{1}}));
        KVP_ASSERT_OK(kvp_free(p, ids, n, 1));
        KVP_ASSERT_OK(kvp_shrink(p, s, free_n - 1, NULL));
    }
}

static kvp_status act_extend(kvp_pool *p, int v)
{
    uint32_t added = 0;
    return kvp_extend(p, v >= 8 ? KVP_STREAM_V : KVP_STREAM_SHARED, 100 + (uint32_t)v * 37,
                      &added);
}

static void cfg_grow(kvp_config *c, int v)
{
    c->num_blocks = 4;
    c->grow_on_exhaustion = 1;
    c->verify_hits = v & 1;
    c->reuse = (kvp_reuse)(v % 3);
}

static void setup_grow(kvp_pool *p, int v)
{
    kvp_block ids[8];
    (void)v;
    kvptest_alloc(p, KVP_STREAM_SHARED, 48, 7, ids, 8);
}

static kvp_status act_grow(kvp_pool *p, int v)
{
    kvp_block ids[128];
    size_t n = 0;
    if (v >= 4) {
        kvp_block b;
        return kvp_take(p, KVP_STREAM_SHARED, 9, &b);
    }
    return kvp_alloc(p, KVP_STREAM_SHARED, 16u * (1 + 20u * (uint32_t)v), 7, 0, ids, 128, &n);
}

/* ---- owners ---- */

static void cfg_owners(kvp_config *c, int v)
{
    c->num_blocks = 128;
    (void)v;
}

static void setup_owners(kvp_pool *p, int v)
{
    /* v existing owners, so the new one lands on every doubling point */
    for (int i = 0; i < v; i++)
        KVP_ASSERT_OK(kvp_owner_register(p, 1000 + (kvp_owner)i));
}

static kvp_status act_owner_alloc(kvp_pool *p, int v)
{
    kvp_block ids[2];
    size_t n;
    (void)v;
    return kvp_alloc(p, KVP_STREAM_SHARED, 16, 77, 0, ids, 2, &n);
}

static kvp_status act_owner_register(kvp_pool *p, int v)
{
    (void)v;
    return kvp_owner_register(p, 77);
}

static kvp_status act_owner_take_id(kvp_pool *p, int v)
{
    (void)v;
    return kvp_take_id(p, 100, 77);
}

/* an owner's reference array growing: it holds v references already */
static void setup_refs(kvp_pool *p, int v)
{
    for (int i = 0; i < v; i++)
        kvptest_take(p, KVP_STREAM_SHARED, 5);
}

static kvp_status act_refs_take(kvp_pool *p, int v)
{
    kvp_block b;
    (void)v;
    return kvp_take(p, KVP_STREAM_SHARED, 5, &b);
}

static kvp_status act_refs_alloc(kvp_pool *p, int v)
{
    kvp_block ids[8];
    size_t n;
    (void)v;
    return kvp_alloc(p, KVP_STREAM_SHARED, 16 * 7, 5, 0, ids, 8, &n);
}

/* ---- shared-owner references (claims by further owners) ---- */

static void setup_shared(kvp_pool *p, int v)
{
    /* block 0 held by owner 1, plus v further owners each claiming it and
     * v blocks claimed by owner 2 (so owner 2's xref array grows too) */
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_OK(kvp_publish(p, b, &(kvp_hash){{7}}));
    for (int i = 0; i < v; i++)
        KVP_ASSERT_OK(kvp_claim(p, b, 100 + (kvp_owner)i));
    for (int i = 0; i < v; i++) {
        kvp_block c = kvptest_take(p, KVP_STREAM_SHARED, 3);
        KVP_ASSERT_OK(kvp_claim(p, c, 2));
    }
}

static kvp_status act_claim_new_owner(kvp_pool *p, int v)
{
    (void)v;
    return kvp_claim(p, 0, 99);
}

static kvp_status act_claim_owner2(kvp_pool *p, int v)
{
    (void)v;
    return kvp_claim(p, 0, 2);
}

static kvp_status act_claim_anon_then_owner(kvp_pool *p, int v)
{
    (void)v;
    return kvp_claim(p, 0, 100); /* an owner claiming a block it already holds */
}

/* kvp_claim_prefix of the chain (block 0's hash, a hash not indexed) for a
 * new owner (v even) or owner 2: its one claim is the one that allocates. */
static kvp_status act_claim_prefix(kvp_pool *p, int v)
{
    kvp_hash chain[2] = {{{7}}, {{8}}};
    kvp_block out[2];
    size_t n_hit = 0;
    return kvp_claim_prefix(p, KVP_STREAM_SHARED, chain, 2, v % 2 ? 2 : 99, out, &n_hit);
}

/* ---- verify arrays, hashing ---- */

static void cfg_verify(kvp_config *c, int v)
{
    c->num_blocks = 2 + (uint32_t)v;
    c->verify_hits = 1;
    c->grow_on_exhaustion = 1;
    c->block_size = v >= 3 ? 256 : 16; /* long blocks hash through the heap */
}

static void setup_verify(kvp_pool *p, int v)
{
    kvp_block b = kvptest_take(p, KVP_STREAM_SHARED, 1);
    KVP_ASSERT_OK(kvp_publish_verified(p, b, &(kvp_hash){{3}}, KVP_NO_BLOCK, g_tokens,
                                       v >= 3 ? 256 : 16));
}

static kvp_status act_verify_grow(kvp_pool *p, int v)
{
    kvp_block ids[16];
    size_t n;
    return kvp_alloc(p, KVP_STREAM_SHARED, (v >= 3 ? 256u : 16u) * (3 + (uint32_t)v), 1, 0,
                     ids, 16, &n);
}

static kvp_status act_verify_publish(kvp_pool *p, int v)
{
    kvp_block b;
    size_t bs = v >= 3 ? 256 : 16;
    kvp_status rc = kvp_take(p, KVP_STREAM_SHARED, 1, &b);
    if (rc)
        return rc;
    return kvp_publish_verified(p, b, &(kvp_hash){{4}}, 0, g_tokens + bs, bs);
}

static kvp_status act_hash_block(kvp_pool *p, int v)
{
    kvp_hash h;
    kvp_mm_span mm = {{{5}}, 0, 3};
    kvp_extra_keys x = {1, 3, "lora", &mm, 1, (const uint8_t *)"salt", 4};
    return kvp_hash_block(p, NULL, g_tokens, v >= 3 ? 256 : 16, 0, &x, &h);
}

/* ---- sequences ---- */

static void cfg_seq(kvp_config *c, int v)
{
    c->num_blocks = 16;
    c->grow_on_exhaustion = v & 1;
    c->verify_hits = (v >> 1) & 1;
    c->block_size = v >= 4 ? 256 : 4;
    c->hash_alg = v & 1 ? KVP_HASH_XXH3_128 : KVP_HASH_SHA256;
}

static size_t seq_bs(int v)
{
    return v >= 4 ? 256 : 4;
}

static void setup_seq(kvp_pool *p, int v)
{
    /* an admitted sequence with a cached prefix published, a second one
     * empty, a few more so the registry has grown */
    size_t bs = seq_bs(v), cached = 0;
    kvp_mm_span mm = {{{9}}, 1, 2};
    kvp_extra_keys x = {1, 11, "adapter", &mm, 1, (const uint8_t *)"tenant", 6};
    memset(g_seq, 0, sizeof g_seq);
    KVP_ASSERT_OK(kvp_seq_create(p, 1, &x, &g_seq[0]));
    KVP_ASSERT_OK(kvp_seq_admit(g_seq[0], g_tokens, 3 * bs + 1, &cached));
    KVP_ASSERT_OK(kvp_seq_create(p, 2, v & 2 ? NULL : &x, &g_seq[1]));
    for (int i = 2; i < 2 + v; i++)
        KVP_ASSERT_OK(kvp_seq_create(p, 10 + (uint64_t)i, NULL, &g_seq[i]));
}

static kvp_status act_seq_create(kvp_pool *p, int v)
{
    kvp_seq *s;
    kvp_mm_span mm[3] = {{{{1}}, 0, 1}, {{{2}}, 1, 5}, {{{3}}, 6, 9}};
    kvp_extra_keys x = {1, 5, "name", mm, 3, (const uint8_t *)"salty", 5};
    return kvp_seq_create(p, 99, v & 1 ? &x : NULL, &s);
}

static kvp_status act_seq_admit(kvp_pool *p, int v)
{
    size_t cached = 0;
    (void)p;
    /* the cached prefix plus enough blocks to grow the table (and the pool) */
    return kvp_seq_admit(g_seq[1], g_tokens, seq_bs(v) * (size_t)(6 + 3 * (v & 1)) + 2,
                         &cached);
}

static kvp_status act_seq_append(kvp_pool *p, int v)
{
    (void)p;
    return kvp_seq_append(g_seq[0], g_tokens + 3 * seq_bs(v) + 1,
                          seq_bs(v) * (size_t)(5 + 3 * (v & 1)) + 1);
}

static kvp_status act_seq_probe(kvp_pool *p, int v)
{
    size_t cached = 0, needed = 0;
    (void)p;
    /* long enough to grow the sequence's hash array */
    return kvp_seq_probe(g_seq[1], g_tokens, seq_bs(v) * (size_t)(6 + 3 * (v & 1)) + 2, &cached,
                         &needed);
}

static kvp_status act_seq_fork(kvp_pool *p, int v)
{
    kvp_seq *c;
    (void)p;
    (void)v;
    return kvp_seq_fork(g_seq[0], 50, &c);
}

static const scenario g_sc[] = {
    {"extend", 12, cfg_extend, setup_extend, act_extend},
    {"grow_on_exhaustion", 6, cfg_grow, setup_grow, act_grow},
    {"owner: new owner alloc", 40, cfg_owners, setup_owners, act_owner_alloc},
    {"owner: register", 40, cfg_owners, setup_owners, act_owner_register},
    {"owner: take_id", 20, cfg_owners, setup_owners, act_owner_take_id},
    {"owner refs: take", 40, cfg_owners, setup_refs, act_refs_take},
    {"owner refs: alloc 7", 40, cfg_owners, setup_refs, act_refs_alloc},
    {"shared refs: new owner claims", 24, cfg_owners, setup_shared, act_claim_new_owner},
    {"shared refs: owner 2 claims", 24, cfg_owners, setup_shared, act_claim_owner2},
    {"shared refs: claim again", 24, cfg_owners, setup_shared, act_claim_anon_then_owner},
    {"shared refs: claim_prefix", 24, cfg_owners, setup_shared, act_claim_prefix},
    {"verify: growth", 5, cfg_verify, setup_verify, act_verify_grow},
    {"verify: publish", 5, cfg_verify, setup_verify, act_verify_publish},
    {"hash_block (long block)", 5, cfg_verify, setup_verify, act_hash_block},
    {"seq: create", 8, cfg_seq, setup_seq, act_seq_create},
    {"seq: admit", 8, cfg_seq, setup_seq, act_seq_admit},
    {"seq: append", 8, cfg_seq, setup_seq, act_seq_append},
    {"seq: fork", 8, cfg_seq, setup_seq, act_seq_fork},
    {"seq: probe", 8, cfg_seq, setup_seq, act_seq_probe},
};

#define NSC (sizeof g_sc / sizeof g_sc[0])

/* The block tables of the live sequences, as one digest. */
static uint64_t seq_digest(void)
{
    uint64_t d = 1469598103934665603ull;
    for (int i = 0; i < MAXSEQ; i++) {
        const kvp_block *ids;
        size_t n = 0, t = 0;
        if (!g_seq[i])
            continue;
        KVP_ASSERT_OK(kvp_seq_blocks(g_seq[i], &ids, &n, &t));
        d = (d ^ n ^ (t << 20)) * 1099511628211ull;
        for (size_t k = 0; k < n; k++)
            d = (d ^ ids[k]) * 1099511628211ull;
    }
    return d;
}

static void run_scenario(const scenario *sc, int verify)
{
    size_t points = 0, ran = 0;
    for (int v = 0; v < sc->nvariants; v++) {
        kvp_config probe = base_config();
        sc->config(&probe, v);
        if (!!probe.verify_hits != verify)
            continue;
        ran++;
        for (size_t k = 1;; k++) {
            kvp_config cfg = base_config();
            sc->config(&cfg, v);
            kvp_pool *p = NULL;
            g_fm.outstanding = 0;
            disarm();
            KVP_ASSERT_OK(kvp_pool_create(&cfg, &p));
            memset(g_seq, 0, sizeof g_seq);
            sc->setup(p, v);
            kvptest_check(p);
            uint64_t fp = kvptest_fp(p), sd = seq_digest();
            arm(k);
            kvp_status st = sc->action(p, v);
            int fired = g_fm.fired;
            size_t made = g_fm.n_alloc;
            disarm();
            g_calls++;
            if (st == KVP_ENOMEM) {
                if (!fired)
                    fprintf(stderr, "%s v%d k=%zu: ENOMEM without a refused allocation\n",
                            sc->name, v, k);
                KVP_ASSERT_EQ(fired, 1);
                KVP_ASSERT_EQ(kvptest_fp(p), fp);
                KVP_ASSERT_EQ(seq_digest(), sd);
                kvptest_check(p);
                points++;
            } else {
                if (st != KVP_OK || fired)
                    fprintf(stderr, "%s v%d k=%zu: status %s after %zu allocations, "
                            "failure %s\n", sc->name, v, k, kvp_strerror(st), made,
                            fired ? "fired" : "not reached");
                KVP_ASSERT_OK(st);
                KVP_ASSERT_EQ(fired, 0); /* a refused allocation must not be swallowed */
                kvptest_check(p);
            }
            kvp_pool_destroy(p);
            KVP_ASSERT_EQ(g_fm.outstanding, 0);
            KVP_ASSERT_EQ(g_fm.bad_release, 0);
            if (st == KVP_OK)
                break;
        }
    }
    if (ran)
        fprintf(stderr, "[failalloc] %-32s %4zu failure points%s\n", sc->name, points,
                verify ? " (verify_hits)" : "");
    g_points += points;
}

static void run_create(int verify)
{
    size_t points = 0;
    for (int v = 0; v < 8; v++) {
        if (((v >> 2) & 1) != verify)
            continue;
        for (size_t k = 1;; k++) {
            kvp_config cfg = base_config();
            cfg_create(&cfg, v);
            kvp_pool *p = (kvp_pool *)&points; /* must stay untouched on failure */
            g_fm.outstanding = 0;
            arm(k);
            kvp_status st = kvp_pool_create(&cfg, &p);
            int fired = g_fm.fired;
            disarm();
            g_calls++;
            if (st == KVP_ENOMEM) {
                KVP_ASSERT_EQ(fired, 1);
                KVP_ASSERT_EQ((uintptr_t)p, (uintptr_t)&points);
                KVP_ASSERT_EQ(g_fm.outstanding, 0);
                KVP_ASSERT_EQ(g_fm.bad_release, 0);
                points++;
                continue;
            }
            KVP_ASSERT_OK(st);
            KVP_ASSERT_EQ(fired, 0);
            kvptest_done(p);
            KVP_ASSERT_EQ(g_fm.outstanding, 0);
            break;
        }
    }
    fprintf(stderr, "[failalloc] %-32s %4zu failure points\n",
            verify ? "pool_create (verify_hits)" : "pool_create", points);
    g_points += points;
}

static void test_create(void **state)
{
    (void)state;
    run_create(0);
}

static void test_scenarios(void **state)
{
    (void)state;
    fill_tokens();
    for (size_t i = 0; i < NSC; i++)
        run_scenario(&g_sc[i], 0);
}

static void test_total(void **state)
{
    (void)state;
    fprintf(stderr, "[failalloc] total: %zu failure points injected over %zu calls\n",
            g_points, g_calls);
    assert_true(g_points > 0);
}

/* Configurations with verify_hits run last, so that the figures above are
 * printed even if one of them crashes the process (see docs/RELIABILITY.md:
 * a double free on a refused verify-array allocation was found here). */
static void test_verify_create(void **state)
{
    (void)state;
    run_create(1);
}

static void test_verify_scenarios(void **state)
{
    (void)state;
    fill_tokens();
    for (size_t i = 0; i < NSC; i++)
        run_scenario(&g_sc[i], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_scenarios),
        cmocka_unit_test(test_total),
        cmocka_unit_test(test_verify_create),
        cmocka_unit_test(test_verify_scenarios),
        cmocka_unit_test(test_total),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
