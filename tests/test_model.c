/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_model.c — model-based random test of the block lifecycle.
 *
 * What it covers: every state-changing call of the core API (alloc, take,
 * take_id, free, free_owner, owner register/release, set_fill, claim,
 * publish, lookup, unpublish, evict, ensure_free, clear_index,
 * reset_prefix_cache, extend, shrink, retire_top, pool_clear), good and bad
 * arguments, in every reuse order, with one shared free list and with
 * separate K/V lists, with and without the null block, growth on and off,
 * with an eviction callback and without one (then nothing is hooked and
 * takes run the library's fast path).
 *
 * How: a deliberately naive reference model (plain arrays and linear scans,
 * written from kvpool.h and its block states, not from src/; it lives
 * in tests/support/model.{h,c}, shared with fuzz/fuzz_pool.c) is driven
 * in lock step with a real pool by a seeded splitmix64 operation stream.
 * After every step the test compares the status, the ids returned, the
 * eviction callbacks (exact hashes, blocks and order, where attached), every kvp_stats
 * field, every block (kvp_block_get), every owner's block list, and runs
 * kvp_pool_check; a refused call must leave kvp_pool_fingerprint unchanged.
 * Where a configuration turns KV events on, a router's view replayed from
 * the events taken after each step must equal the model's index, one
 * announcement per hash whichever list holds it (mdl_events_diff).
 * Every WHOLE_EVERY steps it also compares every lookup and free count.
 * Pools are small (16..128 blocks) so the O(pool) checks after each step
 * stay cheap.  The step count scales with env KVP_TEST_SCALE (default 1).
 *
 * On a mismatch the test prints config, seed, step, the operation and both
 * values.  Where kvpool.h leaves a choice open the model follows the
 * implementation's documented choice and says so in a comment ("header is
 * silent", "open").
 *
 * Debugging knobs (environment): KVP_MODEL_SEED=n replaces every config's
 * seed; KVP_MODEL_TRACE=1 prints each step; KVP_MODEL_DUMP=1 prints the
 * model's free lists (as before the failing step) on a mismatch;
 * KVP_MODEL_MIMIC=1 follows two known deviations of the implementation from
 * the header (B2: LIFO never-used order after the never-used range is split;
 * B3: freeing K and V blocks in one call with separate lists in LIFO order)
 * so that a run can go past them to look for others.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "model.h"
#include "kvptest.h"

#define NHASH 8         /* hash alphabet: small, so duplicates are common */
#define WHOLE_EVERY 64  /* steps between whole-state comparisons */
#define NOP 28
#define MAXREFB 64      /* owner references per block the test creates */

/* ------------------------------------------------------------------------ */
/* Hash alphabet                                                             */
/* ------------------------------------------------------------------------ */

static kvp_hash g_hash[NHASH];

static void init_hashes(void)
{
    uint64_t s = 12345;
    memset(g_hash, 0, sizeof g_hash);
    for (int i = 0; i < NHASH; i++) {
        uint64_t v = kvptest_rand(&s);
        for (int k = 0; k < 8; k++)
            g_hash[i].b[24 + k] = (uint8_t)(v >> (56 - 8 * k));
    }
    /* 6: a full 32-byte value; 7: equal to 0 in the last 8 bytes, differs in
     * the first byte (hashes compare bytewise over all 32 bytes). */
    for (int k = 0; k < 24; k++)
        g_hash[6].b[k] = (uint8_t)kvptest_rand(&s);
    g_hash[7] = g_hash[0];
    g_hash[7].b[0] = 0xa5;
}

static int hash_index(const kvp_hash *h)
{
    if (!h)
        return -1;
    for (int i = 0; i < NHASH; i++)
        if (memcmp(h->b, g_hash[i].b, 32) == 0)
            return i;
    return -2;
}

/* ------------------------------------------------------------------------ */
/* Eviction log (library side)                                               */
/* ------------------------------------------------------------------------ */

typedef struct evlog {
    int n;
    int overflow;
    int hash[MAXEV];        /* alphabet index, -1 = "all cleared", -2 unknown */
    kvp_block block[MAXEV];
} evlog;

static void on_evict(void *user, const kvp_hash *hash, kvp_block block)
{
    evlog *l = user;
    if (l->n >= MAXEV) {
        l->overflow = 1;
        return;
    }
    l->hash[l->n] = hash_index(hash);
    l->block[l->n] = block;
    l->n++;
}

/* Owner values behind the model's owner indices (the model itself only
 * knows indices 0..NOWN-1 and -1 for KVP_ANON). */
static const kvp_owner g_ownval[NOWN] = {
    1, 2, 3, 42, 0, (kvp_owner)0xffffffffu + 5u, UINT64_MAX - 1u, 7,
};

static kvp_owner oval(int oi)
{
    return oi < 0 ? KVP_ANON : g_ownval[oi];
}

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

enum {
    OP_ALLOC, OP_TAKE, OP_TAKE_ID, OP_FREE, OP_FREE_OWNER, OP_REGISTER, OP_RELEASE,
    OP_SET_FILL, OP_CLAIM, OP_PUBLISH, OP_LOOKUP, OP_UNPUBLISH, OP_EVICT, OP_ENSURE,
    OP_CLEAR_INDEX, OP_RESET_PREFIX, OP_DRAIN, OP_EXTEND, OP_SHRINK, OP_RETIRE_TOP,
    OP_BLOCK_GET, OP_OWNER_BLOCKS, OP_FREE_COUNT, OP_POOL_CLEAR, OP_CLAIM_LOOKUP,
    OP_STATS_RESET, OP_TAKE_EACH, OP_SET_PRIORITY
};

static const char *const g_opname[NOP] = {
    "alloc", "take", "take_id", "free", "free_owner", "owner_register", "owner_release",
    "set_fill", "claim", "publish", "lookup", "unpublish", "evict", "ensure_free",
    "clear_index", "reset_prefix_cache", "drain+reset", "extend", "shrink", "retire_top",
    "block_get", "owner_blocks", "free_count", "pool_clear", "lookup+claim", "stats_reset",
    "take_each", "set_priority",
};

/* Relative weights. */
static const unsigned g_weight[NOP] = {
    140, 50, 35, 140, 45, 25, 25, 50, 50, 90, 40, 25, 25, 25,
    4, 8, 3, 25, 25, 25, 10, 15, 10, 1, 60, 2, 30, 30,
};

typedef struct ctx {
    mcfg c;
    model *m;
    kvp_pool *p;
    evlog lg;
    uint64_t rng;
    size_t step;
    char op[512];
    uint64_t ok[NOP], err[NOP];
    int lenient_reused, lenient_free_calls, lenient_exhausted;
    /* owner list before the step, for the ambiguity in cmp_owner */
    int sync_owner;
    uint32_t pre_n;
    kvp_block pre[OREFS];
    uint32_t hint[NOWN]; /* kvp_take_hinted's, kept across pool_clear on purpose */
    msub sub;            /* with c.events: what a router knows */
    /* Steps left in a quiet run (unhooked configurations): takes and
     * owner frees with nothing between them but kvp_pool_check, which
     * leaves pending references pending (every other call settles them). */
    size_t quiet;
} ctx;

static uint32_t rn(ctx *x, uint32_t n)
{
    return kvptest_rand_below(&x->rng, n);
}

static int chance(ctx *x, unsigned pct)
{
    return rn(x, 100) < pct;
}

static model g_pre; /* the model before the step (KVP_MODEL_DUMP only) */

static void dump_lists(const ctx *x)
{
    const model *m = &g_pre;
    (void)x;
    fprintf(stderr, "  (model free lists before the step)\n");
    static const char *const nm[4] = {"vacant/stack", "never-used", "cached(LRU)", "fifo-queue"};
    for (int L = 0; L < m->nl; L++) {
        const ilist *ls[4] = {&m->stk[L], &m->fresh[L], &m->cac[L], &m->fq[L]};
        for (int i = 0; i < 4; i++) {
            if (!ls[i]->n)
                continue;
            fprintf(stderr, "  model list %d %s (next first):", L, nm[i]);
            for (uint32_t j = 0; j < ls[i]->n; j++)
                fprintf(stderr, " %" PRIu32 "%s", ls[i]->v[j],
                        m->b[ls[i]->v[j]].state == KVP_BLOCK_CACHED ? "c" : "");
            fprintf(stderr, "\n");
        }
    }
}

static void bad(ctx *x, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\nMODEL MISMATCH config=%s seed=0x%016" PRIx64 " step=%zu op=%s\n  ",
            x->c.name, x->c.seed, x->step, x->op);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (getenv("KVP_MODEL_DUMP"))
        dump_lists(x);
    fail();
}

static uint64_t fingerprint(ctx *x)
{
    uint64_t f = 0;
    if (x->quiet) /* it would settle the pending references */
        return 0;
    kvp_status s = kvp_pool_fingerprint(x->p, &f);
    if (s != KVP_OK)
        bad(x, "kvp_pool_fingerprint returned %d (%s)", s, kvp_strerror(s));
    return f;
}

/* Compare a returned status; a refused call must not change the fingerprint. */
static void cmp_status(ctx *x, const char *call, kvp_status got, kvp_status exp, uint64_t fp)
{
    if (got != exp)
        bad(x, "%s: status expected %d (%s), got %d (%s)", call, exp, kvp_strerror(exp), got,
            kvp_strerror(got));
    if (got != KVP_OK && !x->quiet) {
        uint64_t f = fingerprint(x);
        if (f != fp)
            bad(x, "%s: refused with %s but the fingerprint changed %016" PRIx64
                " -> %016" PRIx64, call, kvp_strerror(got), fp, f);
    }
}

static void cmp_u64(ctx *x, const char *what, uint64_t exp, uint64_t got)
{
    if (exp != got)
        bad(x, "%s: expected %" PRIu64 ", got %" PRIu64, what, exp, got);
}

/* One stream call that reports a count (kvp_evict, kvp_extend, kvp_shrink),
 * run on the model and on the library: the statuses compared and, when the
 * call succeeds, the counts.  Returns the library's status. */
static kvp_status run_counted(ctx *x, const char *call, const char *what, int st, uint32_t n,
                              uint64_t fp, kvp_status (*mf)(model *, int, uint32_t, uint32_t *),
                              kvp_status (*kf)(kvp_pool *, kvp_stream, uint32_t, uint32_t *))
{
    uint32_t en = 0, gn = 0;
    kvp_status es = mf(x->m, st, n, &en);
    kvp_status gs = kf(x->p, (kvp_stream)st, n, &gn);
    cmp_status(x, call, gs, es, fp);
    if (es == KVP_OK)
        cmp_u64(x, what, en, gn);
    return gs;
}

/* One pool-wide call without arguments (kvp_clear_index,
 * kvp_reset_prefix_cache, kvp_pool_clear), run on the model and on the
 * library with the statuses compared.  Returns the library's status. */
static kvp_status run_whole(ctx *x, const char *call, uint64_t fp, kvp_status (*mf)(model *),
                            kvp_status (*kf)(kvp_pool *))
{
    kvp_status es = mf(x->m);
    kvp_status gs = kf(x->p);
    cmp_status(x, call, gs, es, fp);
    return gs;
}

static void cmp_events(ctx *x)
{
    model *m = x->m;
    if (x->c.unhooked) /* the count is still compared, as stats.evictions */
        return;
    if (x->lg.overflow || m->nev > MAXEV)
        bad(x, "eviction log overflow (model %d, library %d)", m->nev, x->lg.n);
    int same = m->nev == x->lg.n;
    for (int i = 0; same && i < m->nev; i++)
        same = m->ev_hash[i] == x->lg.hash[i] && m->ev_block[i] == x->lg.block[i];
    if (!same) {
        char a[4096], b[4096];
        size_t la = 0, lb = 0;
        a[0] = b[0] = 0;
        for (int i = 0; i < m->nev && la < sizeof a - 40; i++)
            la += (size_t)snprintf(a + la, sizeof a - la, " (h%d,b%" PRIu32 ")", m->ev_hash[i],
                                   m->ev_block[i]);
        for (int i = 0; i < x->lg.n && lb < sizeof b - 40; i++)
            lb += (size_t)snprintf(b + lb, sizeof b - lb, " (h%d,b%" PRIu32 ")", x->lg.hash[i],
                                   x->lg.block[i]);
        bad(x, "eviction callbacks (h-1 = all cleared):\n  expected %d:%s\n  got      %d:%s",
            m->nev, a, x->lg.n, b);
    }
}

static void stat_mismatch(void *user, const char *field, uint64_t exp, uint64_t got)
{
    cmp_u64(user, field, exp, got);
}

static void cmp_stats(ctx *x)
{
    model *m = x->m;
    kvp_stats g;
    kvp_status s = kvp_stats_get(x->p, &g);
    if (s != KVP_OK)
        bad(x, "kvp_stats_get: %s", kvp_strerror(s));
    kvp_stats e = mdl_gauges(m);
    /* Counters the header leaves open for this particular call: accept the
     * library's value when it is the model's plus one. */
    if (x->lenient_reused && g.reused == m->k.reused + 1)
        m->k.reused++;
    if (x->lenient_free_calls && g.free_calls == m->k.free_calls + 1)
        m->k.free_calls++;
    if (x->lenient_exhausted && g.exhausted == m->k.exhausted + 1)
        m->k.exhausted++;
    mdl_stats_diff(m, &g, stat_mismatch, x);
    double frag = e.blocks ? (double)e.fragmented / (double)e.blocks : 0.0;
    double usage = e.blocks ? (double)e.in_use / (double)e.blocks : 0.0;
    if (g.fragmentation != frag || g.usage != usage)
        bad(x, "stats.fragmentation/usage: expected %.6f/%.6f, got %.6f/%.6f", frag, usage,
            g.fragmentation, g.usage);
}

static const char *state_name(int s)
{
    switch (s) {
    case KVP_BLOCK_VACANT: return "vacant";
    case KVP_BLOCK_CACHED: return "cached";
    case KVP_BLOCK_IN_USE: return "in_use";
    case KVP_BLOCK_RETIRED: return "retired";
    case M_NONE: return "never-created";
    case M_GONE: return "gone(after clear)";
    default: return "?";
    }
}

static void cmp_block(ctx *x, kvp_block id)
{
    model *m = x->m;
    mblk *k = id < MB ? &m->b[id] : NULL;
    kvp_block_info bi;
    memset(&bi, 0, sizeof bi);
    kvp_status s = kvp_block_get(x->p, id, &bi);
    if (!k || k->state == M_NONE) {
        if (s != KVP_ERANGE)
            bad(x, "block_get(%" PRIu32 ") of a never-created id: expected ERANGE, got %s", id,
                kvp_strerror(s));
        return;
    }
    if (k->state == M_GONE) {
        /* Above the initial pool after kvp_pool_clear: the header does not
         * say whether these ids still count as created. */
        if (s != KVP_ERANGE && !(s == KVP_OK && bi.state == KVP_BLOCK_RETIRED))
            bad(x, "block_get(%" PRIu32 ") after pool_clear: expected ERANGE or retired, got %s"
                " state %d", id, kvp_strerror(s), bi.state);
        return;
    }
    if (s != KVP_OK)
        bad(x, "block_get(%" PRIu32 ") (model: %s): expected OK (\"retired blocks are "
            "described\"), got %s", id, state_name(k->state), kvp_strerror(s));
    if (bi.state != k->state)
        bad(x, "block %" PRIu32 ": state expected %s, got %s", id, state_name(k->state),
            state_name(bi.state));
    if (k->state == KVP_BLOCK_RETIRED)
        return;
    kvp_stream es = mdl_list_stream(m, k->list);
    if (bi.stream != es)
        bad(x, "block %" PRIu32 ": stream expected %d, got %d", id, es, bi.stream);
    if (!!bi.is_null != k->is_null)
        bad(x, "block %" PRIu32 ": is_null expected %d, got %d", id, k->is_null, bi.is_null);
    if (k->is_null) {
        if (bi.published)
            bad(x, "null block %" PRIu32 " is published", id);
        return;
    }
    if (bi.ref_count != mdl_refcnt(k) || bi.anon_refs != k->anon)
        bad(x, "block %" PRIu32 ": ref_count/anon_refs expected %" PRIu32 "/%" PRIu32
            ", got %" PRIu32 "/%" PRIu32, id, mdl_refcnt(k), k->anon, bi.ref_count, bi.anon_refs);
    if (!!bi.published != (k->hash >= 0))
        bad(x, "block %" PRIu32 ": published expected %d, got %d", id, k->hash >= 0,
            bi.published);
    if (k->hash >= 0 && memcmp(bi.hash.b, g_hash[k->hash].b, 32) != 0)
        bad(x, "block %" PRIu32 ": hash expected h%d, got h%d", id, k->hash,
            hash_index(&bi.hash));
    if (bi.priority != k->prio)
        bad(x, "block %" PRIu32 ": priority expected %u, got %u", id, k->prio, bi.priority);
    if (!k->reborn && !!bi.ever_allocated != k->ever)
        bad(x, "block %" PRIu32 ": ever_allocated expected %d, got %d", id, k->ever,
            bi.ever_allocated);
    kvp_owner eo = k->nh ? g_ownval[k->h_own[0]] : KVP_ANON;
    if (bi.owner != eo) {
        int holds = 0;
        for (int i = 0; i < k->nh; i++)
            holds |= g_ownval[k->h_own[i]] == bi.owner;
        if (!holds)
            bad(x, "block %" PRIu32 ": owner expected %" PRIu64 ", got %" PRIu64
                " which holds no reference", id, eo, bi.owner);
        /* Once an owner has held several references on the block, which of
         * them a free drops (and so who has held "first") is open: any
         * holder will do.  Otherwise the first owner holding it is the
         * earliest one. */
        int multi = 0;
        for (int i = 0; i < k->nh; i++)
            multi |= k->h_multi[i];
        if (!multi)
            bad(x, "block %" PRIu32 ": owner expected %" PRIu64 " (\"the first owner holding "
                "it\": the earliest of its %d current holders), got %" PRIu64, id, eo, k->nh,
                bi.owner);
    }
    if (k->state == KVP_BLOCK_IN_USE) {
        if (bi.fill != k->fill)
            bad(x, "block %" PRIu32 ": fill expected %" PRIu32 ", got %" PRIu32, id, k->fill,
                bi.fill);
        if (!k->format_known) {
            k->format = bi.format;
            k->format_known = 1;
        }
        if (bi.format != k->format)
            bad(x, "block %" PRIu32 ": format expected %u, got %u", id, k->format, bi.format);
    }
}

static int is_subsequence(const kvp_block *a, uint32_t na, const kvp_block *b, uint32_t nb)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < nb && j < na; i++)
        if (b[i] == a[j])
            j++;
    return j == na;
}

static int cmp_u32(const void *a, const void *b)
{
    kvp_block x = *(const kvp_block *)a, y = *(const kvp_block *)b;
    return x < y ? -1 : x > y;
}

static void cmp_owner(ctx *x, int oi)
{
    model *m = x->m;
    mown *o = &m->o[oi];
    static kvp_block got[OREFS], s1[OREFS], s2[OREFS];
    size_t n = 0;
    kvp_status s = kvp_owner_blocks(x->p, g_ownval[oi], got, OREFS, &n);
    if (!o->active) {
        if (s != KVP_ENOTFOUND)
            bad(x, "owner_blocks(%" PRIu64 ") of an inactive owner: expected ENOTFOUND, got %s",
                g_ownval[oi], kvp_strerror(s));
        return;
    }
    if (s != KVP_OK)
        bad(x, "owner_blocks(%" PRIu64 "): expected OK, got %s", g_ownval[oi], kvp_strerror(s));
    if (n == o->n && memcmp(got, o->refs, n * sizeof got[0]) == 0)
        return;
    if (n == o->n && x->sync_owner == oi) {
        /* The header does not say which of several references an owner
         * holds on one block kvp_free drops: accept any, provided the result
         * is the same multiset and keeps the earlier order. */
        memcpy(s1, got, n * sizeof got[0]);
        memcpy(s2, o->refs, n * sizeof got[0]);
        qsort(s1, n, sizeof s1[0], cmp_u32);
        qsort(s2, n, sizeof s2[0], cmp_u32);
        if (memcmp(s1, s2, n * sizeof s1[0]) == 0 &&
            is_subsequence(got, (uint32_t)n, x->pre, x->pre_n)) {
            memcpy(o->refs, got, n * sizeof got[0]);
            return;
        }
    }
    char a[2048], b[2048];
    size_t la = 0, lb = 0;
    a[0] = b[0] = 0;
    for (uint32_t i = 0; i < o->n && la < sizeof a - 16; i++)
        la += (size_t)snprintf(a + la, sizeof a - la, " %" PRIu32, o->refs[i]);
    for (size_t i = 0; i < n && lb < sizeof b - 16; i++)
        lb += (size_t)snprintf(b + lb, sizeof b - lb, " %" PRIu32, got[i]);
    bad(x, "owner_blocks(%" PRIu64 "):\n  expected %" PRIu32 ":%s\n  got      %zu:%s",
        g_ownval[oi], o->n, a, n, b);
}

static void cmp_whole(ctx *x)
{
    model *m = x->m;
    for (int st = 0; st <= 2; st++) {
        int L = mdl_list(m, st);
        if (L < 0)
            continue;
        uint32_t fc = 0;
        kvp_status s = kvp_free_count(x->p, (kvp_stream)st, &fc);
        if (s != KVP_OK)
            bad(x, "free_count(%d): %s", st, kvp_strerror(s));
        cmp_u64(x, "free_count", mdl_n_free(m, L), fc);
        for (int h = 0; h < NHASH; h++) {
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            kvp_status es = mdl_lookup(m, st, h, &e);
            kvp_status gs = kvp_lookup(x->p, (kvp_stream)st, &g_hash[h], &g);
            if (es != gs || (es == KVP_OK && e != g))
                bad(x, "whole-state lookup(stream %d, h%d): expected %s/%" PRIu32
                    ", got %s/%" PRIu32, st, h, kvp_strerror(es), e, kvp_strerror(gs), g);
        }
    }
}

static void check_pool(ctx *x)
{
    char msg[512];
    kvp_status s = kvp_pool_check(x->p, msg, sizeof msg);
    if (s != KVP_OK)
        bad(x, "kvp_pool_check: %s: %s", kvp_strerror(s), s == KVP_ECORRUPT ? msg : "");
}

static void check_all(ctx *x)
{
    model *m = x->m;
    check_pool(x);
    cmp_events(x);
    cmp_stats(x);
    for (kvp_block i = 0; i < m->top + 2 && i < MB; i++)
        cmp_block(x, i);
    cmp_block(x, KVP_NO_BLOCK);
    for (int oi = 0; oi < NOWN; oi++)
        cmp_owner(x, oi);
    if (x->step % WHOLE_EVERY == 0)
        cmp_whole(x);
    char msg[256]; /* KV events: a router's view equals the index */
    if (x->c.events && mdl_events_diff(m, &x->sub, x->p, g_hash, msg, sizeof msg))
        bad(x, "events: %s", msg);
}

/* ---- pickers ---- */

static int pick_owner(ctx *x)
{
    return chance(x, 12) ? -1 : (int)rn(x, NOWN);
}

static int pick_stream(ctx *x)
{
    if (chance(x, 3))
        return x->c.sep ? (chance(x, 50) ? KVP_STREAM_SHARED : 3 + (int)rn(x, 5)) : 3 + (int)rn(x, 5);
    return x->c.sep ? 1 + (int)rn(x, 2) : (int)rn(x, 3);
}

typedef int (*blk_pred)(const mblk *k);
static int pr_inuse(const mblk *k) { return k->state == KVP_BLOCK_IN_USE && !k->is_null; }
static int pr_free(const mblk *k) { return mdl_is_free(k); }
static int pr_cached(const mblk *k) { return k->state == KVP_BLOCK_CACHED; }
static int pr_vacant(const mblk *k) { return k->state == KVP_BLOCK_VACANT; }
static int pr_published(const mblk *k) { return k->hash >= 0; }
static int pr_retired(const mblk *k) { return k->state == KVP_BLOCK_RETIRED; }

static kvp_block pick_where(ctx *x, blk_pred pred)
{
    kvp_block c[MB];
    uint32_t n = 0;
    for (uint32_t i = 0; i < x->m->top; i++)
        if (pred(&x->m->b[i]))
            c[n++] = i;
    return n ? c[rn(x, n)] : KVP_NO_BLOCK;
}

/* An id the call must refuse as KVP_ERANGE (or the null block: EINVAL). */
static kvp_block pick_bad_id(ctx *x)
{
    switch (rn(x, 4)) {
    case 0: return x->m->top + rn(x, 3);
    case 1: return KVP_NO_BLOCK;
    case 2: {
        kvp_block r = pick_where(x, pr_retired);
        return r != KVP_NO_BLOCK ? r : x->m->top;
    }
    default: return x->c.nullb ? 0 : x->m->top + 7;
    }
}

/* Mostly a block with the wanted property, sometimes anything. */
static kvp_block pick_target(ctx *x, blk_pred pred, unsigned pct_good)
{
    kvp_block b = KVP_NO_BLOCK;
    if (chance(x, pct_good))
        b = pick_where(x, pred);
    if (b == KVP_NO_BLOCK) {
        unsigned r = rn(x, 10);
        if (r < 3)
            b = pick_where(x, pr_inuse);
        else if (r < 5)
            b = pick_where(x, pr_cached);
        else if (r < 7)
            b = pick_where(x, pr_vacant);
    }
    return b != KVP_NO_BLOCK ? b : pick_bad_id(x);
}

/* ---- one step ---- */

#define OPF(...) snprintf(x->op, sizeof x->op, __VA_ARGS__)

/* Deviation B3 (mimic mode): keep every owner on one stream with separate
 * K/V lists in LIFO order, since freeing K and V blocks in one call corrupts
 * the pool. */
static int mimic_kv(const ctx *x)
{
    return mdl_mimic && x->c.sep && x->c.reuse == KVP_REUSE_LIFO;
}

static kvp_status do_free_owner(ctx *x, int oi)
{
    model *m = x->m;
    uint64_t fp = fingerprint(x);
    OPF("free_owner(owner=%" PRIu64 "%s)", oval(oi), oi >= 0 && m->o[oi].active ? "" : " inactive");
    size_t en = 0, gn = 0;
    kvp_status es = mdl_free_owner(m, oi, &en);
    kvp_status gs = kvp_free_owner(x->p, oval(oi), &gn);
    cmp_status(x, "kvp_free_owner", gs, es, fp);
    if (es == KVP_OK)
        cmp_u64(x, "free_owner n_freed", en, gn);
    return gs;
}

static kvp_status do_free(ctx *x, const kvp_block *ids, size_t n, int oi)
{
    model *m = x->m;
    uint64_t fp = fingerprint(x);
    size_t l = (size_t)OPF("free(owner=%" PRIu64 ", n=%zu, ids=", oval(oi), n);
    for (size_t i = 0; i < n && l < sizeof x->op - 16; i++)
        l += (size_t)snprintf(x->op + l, sizeof x->op - l, "%s%" PRIu32, i ? "," : "", ids[i]);
    snprintf(x->op + l, sizeof x->op - l, ")");
    if (oi >= 0) {
        x->sync_owner = oi;
        x->pre_n = m->o[oi].n;
        memcpy(x->pre, m->o[oi].refs, m->o[oi].n * sizeof x->pre[0]);
    }
    if (n == 0)
        x->lenient_free_calls = 1;
    kvp_status es = mdl_free(m, ids, n, oi);
    kvp_status gs = kvp_free(x->p, n ? ids : NULL, n, oval(oi));
    cmp_status(x, "kvp_free", gs, es, fp);
    return gs;
}

static kvp_status gen_free(ctx *x)
{
    model *m = x->m;
    kvp_block ids[64];
    size_t n = 0;
    int oi;
    /* an owner (or KVP_ANON) that holds something, usually */
    int cands[NOWN + 1], nc = 0;
    for (int i = 0; i < NOWN; i++)
        if (m->o[i].active && m->o[i].n)
            cands[nc++] = i;
    int anon_blocks = 0;
    for (uint32_t i = 0; i < m->top; i++)
        anon_blocks += m->b[i].anon > 0 && m->b[i].state == KVP_BLOCK_IN_USE;
    if (anon_blocks)
        cands[nc++] = -1;
    oi = nc && chance(x, 92) ? cands[rn(x, (uint32_t)nc)] : pick_owner(x);
    /* the blocks it holds */
    kvp_block pool[OREFS];
    uint32_t np = 0;
    if (oi >= 0) {
        for (uint32_t i = 0; i < m->o[oi].n; i++)
            pool[np++] = m->o[oi].refs[i];
    } else {
        for (uint32_t i = 0; i < m->top; i++)
            for (uint32_t r = 0; r < m->b[i].anon && m->b[i].state == KVP_BLOCK_IN_USE; r++)
                pool[np++] = i;
    }
    uint32_t want = np ? 1 + rn(x, np < 6 ? np : 6) : 0;
    for (uint32_t i = 0; i < want; i++) { /* distinct references, random order */
        uint32_t j = i + rn(x, np - i);
        kvp_block t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        ids[n++] = pool[i];
    }
    unsigned r = rn(x, 100);
    if (r < 4) {
        kvp_block b = pick_where(x, pr_free); /* double free */
        if (b != KVP_NO_BLOCK)
            ids[n++] = b;
    } else if (r < 8) {
        kvp_block b = pick_where(x, pr_inuse); /* maybe not its block */
        if (b != KVP_NO_BLOCK)
            ids[n++] = b;
    } else if (r < 11 && n) {
        ids[n] = ids[rn(x, (uint32_t)n)]; /* named once more */
        n++;
    } else if (r < 13) {
        ids[n++] = pick_bad_id(x);
    } else if (r < 14) {
        n = 0;
    }
    if (mdl_mimic && m->c.sep && n > 1) { /* deviation B3: one stream per call */
        size_t w = 0;
        int L0 = ids[0] < MB ? m->b[ids[0]].list : 0;
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= MB || m->b[ids[i]].list == L0)
                ids[w++] = ids[i];
        n = w;
    }
    if (n > 1 && chance(x, 50)) { /* move the odd one to a random place */
        uint32_t j = rn(x, (uint32_t)n);
        kvp_block t = ids[j];
        ids[j] = ids[n - 1];
        ids[n - 1] = t;
    }
    return do_free(x, ids, n, oi);
}

static void do_step(ctx *x, int op)
{
    model *m = x->m;
    kvp_pool *p = x->p;
    uint64_t fp = fingerprint(x);
    kvp_status es = KVP_OK, gs = KVP_OK;
    switch (op) {
    case OP_ALLOC:
    case OP_TAKE: {
        int st = pick_stream(x), oi = pick_owner(x);
        if (mimic_kv(x) && oi >= 0 && mdl_list(m, st) >= 0)
            st = 1 + oi % 2;
        if (op == OP_TAKE) {
            OPF("take(stream=%d, owner=%" PRIu64 ")", st, oval(oi));
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            size_t en = 0;
            es = mdl_alloc(m, st, 1, oi, 0, 1, 1, &e, &en);
            kvp_block nx = KVP_NO_BLOCK;
            kvp_status ps = KVP_OK;
            if (!x->quiet) {
                ps = kvp_peek_next(p, (kvp_stream)st, &nx);
                if (fingerprint(x) != fp)
                    bad(x, "kvp_peek_next changed the pool");
            }
            /* Half the takes are hinted: with the owner's kept hint, another
             * owner's, or garbage; all must behave as kvp_take. */
            unsigned how = rn(x, 8);
            if (how < 4) {
                gs = kvp_take(p, (kvp_stream)st, oval(oi), &g);
            } else {
                uint32_t h = how == 4   ? rn(x, 64)
                             : how == 5 ? x->hint[rn(x, NOWN)]
                                        : oi >= 0 ? x->hint[oi] : KVP_HINT_NONE;
                uint32_t h0 = h;
                OPF("take_hinted(stream=%d, owner=%" PRIu64 ", hint=%" PRIu32 ")", st, oval(oi), h);
                gs = kvp_take_hinted(p, (kvp_stream)st, oval(oi), &h, &g);
                if ((gs != KVP_OK || oi < 0) && h != h0)
                    bad(x, "take_hinted (%s, owner %" PRIu64 ") changed the hint %" PRIu32
                        " to %" PRIu32, kvp_strerror(gs), oval(oi), h0, h);
                if (gs == KVP_OK && oi >= 0)
                    x->hint[oi] = h;
            }
            if (ps != KVP_OK ? gs != ps : gs == KVP_OK && nx != KVP_NO_BLOCK && nx != g)
                bad(x, "kvp_peek_next: %s, block %" PRIu32 "; the take: %s, block %" PRIu32,
                    kvp_strerror(ps), nx, kvp_strerror(gs), g);
            cmp_status(x, "kvp_take", gs, es, fp);
            if (es == KVP_OK && e != g)
                bad(x, "take: expected block %" PRIu32 ", got %" PRIu32, e, g);
            break;
        }
        uint64_t tokens = 1 + rn(x, m->c.bs * (chance(x, 10) ? 12 : 4));
        unsigned fmt = chance(x, 50) ? rn(x, 6) : rn(x, 256);
        size_t cap = 64;
        unsigned r = rn(x, 100);
        if (r < 2)
            tokens = 0;
        else if (r < 3)
            tokens = UINT64_MAX;
        else if (r < 5)
            fmt = 256 + rn(x, 1000);
        else if (r < 7) {
            uint64_t c = tokens / m->c.bs + (tokens % m->c.bs != 0);
            cap = (size_t)c - 1;
        }
        kvp_block e[64], g[64];
        size_t en = 0, gn = 0;
        OPF("alloc(stream=%d, tokens=%" PRIu64 ", owner=%" PRIu64 ", format=%u, cap=%zu)", st,
            tokens, oval(oi), fmt, cap);
        es = mdl_alloc(m, st, tokens, oi, fmt, cap, 0, e, &en);
        gs = kvp_alloc(p, (kvp_stream)st, tokens, oval(oi), fmt, g, cap, &gn);
        cmp_status(x, "kvp_alloc", gs, es, fp);
        if (es == KVP_OK || es == KVP_ESPACE)
            cmp_u64(x, "alloc n_out", en, gn);
        if (es == KVP_OK)
            for (size_t i = 0; i < en; i++)
                if (e[i] != g[i])
                    bad(x, "alloc: ids[%zu] expected %" PRIu32 ", got %" PRIu32
                        " (the order is the reuse order)", i, e[i], g[i]);
        break;
    }
    case OP_TAKE_EACH: {
        /* Up to 6 takes from one stream in one kvp_take_each: by rows into
         * the owners' table (row NOWN: anonymous) with their kept hints,
         * or without rows, or without hints.  Each must be the take the
         * model makes, in order, the call stopping at the first failure. */
        int st = pick_stream(x), ois[6];
        size_t n = 1 + rn(x, 6), gn = SIZE_MAX, en = 0;
        kvp_owner tab[NOWN + 1], own[6];
        uint32_t tabh[NOWN + 1], hs[6], rows[6];
        for (int j = 0; j < NOWN; j++) {
            tab[j] = oval(j);
            tabh[j] = x->hint[j];
        }
        tab[NOWN] = KVP_ANON;
        tabh[NOWN] = KVP_HINT_NONE;
        int by_rows = !chance(x, 20), hinted = !chance(x, 25);
        char *o = x->op + snprintf(x->op, sizeof x->op, "take_each(stream=%d,%s%s owners=", st,
                                   by_rows ? " rows," : "", hinted ? " hints," : "");
        for (size_t k = 0; k < n; k++) {
            int oi = pick_owner(x);
            if (mimic_kv(x) && oi >= 0 && mdl_list(m, st) >= 0 && 1 + oi % 2 != st)
                oi = -1; /* as OP_TAKE: an owner keeps to one list */
            ois[k] = oi;
            rows[k] = oi < 0 ? NOWN : (uint32_t)oi;
            own[k] = oval(oi);
            hs[k] = oi < 0 ? KVP_HINT_NONE : x->hint[oi];
            o += snprintf(o, (size_t)(x->op + sizeof x->op - o), "%s%" PRIu64, k ? "," : "",
                          oval(oi));
        }
        snprintf(o, (size_t)(x->op + sizeof x->op - o), ")");
        kvp_block e[6], g[6];
        for (size_t k = 0; k < n; k++)
            g[k] = KVP_NO_BLOCK;
        gs = by_rows ? kvp_take_each(p, (kvp_stream)st, tab, hinted ? tabh : NULL, rows, n, g, &gn)
                     : kvp_take_each(p, (kvp_stream)st, own, hinted ? hs : NULL, NULL, n, g, &gn);
        es = mdl_take_each(m, st, ois, n, e, &en);
        if (gn != en)
            bad(x, "kvp_take_each: expected %zu takes (%s), got %zu (%s)", en, kvp_strerror(es),
                gn, kvp_strerror(gs));
        if (en == 0)
            cmp_status(x, "kvp_take_each", gs, es, fp);
        else if (gs != es)
            bad(x, "kvp_take_each after %zu takes: status expected %s, got %s", en,
                kvp_strerror(es), kvp_strerror(gs));
        for (size_t k = 0; k < en && k < gn; k++) {
            if (e[k] != g[k])
                bad(x, "kvp_take_each, take %zu: expected block %" PRIu32 ", got %" PRIu32, k,
                    e[k], g[k]);
            if (hinted && ois[k] >= 0)
                x->hint[ois[k]] = by_rows ? tabh[ois[k]] : hs[k];
        }
        break;
    }
    case OP_TAKE_ID: {
        kvp_block id = pick_target(x, pr_free, 75);
        int oi = pick_owner(x);
        if (mimic_kv(x) && oi >= 0 && id < MB && m->b[id].list != oi % 2)
            oi = -1;
        OPF("take_id(id=%" PRIu32 " %s, owner=%" PRIu64 ")", id,
            id < MB ? state_name(m->b[id].state) : "", oval(oi));
        es = mdl_take_id(m, id, oi);
        gs = kvp_take_id(p, id, oval(oi));
        cmp_status(x, "kvp_take_id", gs, es, fp);
        break;
    }
    case OP_FREE:
        gs = gen_free(x);
        break;
    case OP_FREE_OWNER: {
        int oi = (int)rn(x, NOWN);
        if (chance(x, 5))
            oi = -1;
        gs = do_free_owner(x, oi);
        break;
    }
    case OP_REGISTER:
    case OP_RELEASE: {
        int reg = op == OP_REGISTER;
        int oi = pick_owner(x);
        OPF("owner_%s(%" PRIu64 ")", reg ? "register" : "release", oval(oi));
        es = reg ? mdl_register(m, oi) : mdl_release(m, oi);
        gs = reg ? kvp_owner_register(p, oval(oi)) : kvp_owner_release(p, oval(oi));
        cmp_status(x, reg ? "kvp_owner_register" : "kvp_owner_release", gs, es, fp);
        break;
    }
    case OP_SET_FILL: {
        kvp_block id = pick_target(x, pr_inuse, 85);
        uint32_t fill = chance(x, 4) ? m->c.bs + 1 + rn(x, 5) : rn(x, m->c.bs + 1);
        if (chance(x, 30))
            fill = chance(x, 50) ? 0 : m->c.bs;
        if (fill > m->c.bs && mdl_bad_id(m, id))
            fill = 0; /* one fault at a time */
        OPF("set_fill(id=%" PRIu32 ", fill=%" PRIu32 ")", id, fill);
        es = mdl_set_fill(m, id, fill);
        gs = kvp_set_fill(p, id, fill);
        cmp_status(x, "kvp_set_fill", gs, es, fp);
        break;
    }
    case OP_CLAIM:
    case OP_CLAIM_LOOKUP: {
        int oi = pick_owner(x);
        kvp_block id;
        if (op == OP_CLAIM_LOOKUP) {
            int st = pick_stream(x), h = (int)rn(x, NHASH);
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            OPF("lookup(stream=%d, h%d) then claim", st, h);
            es = mdl_lookup(m, st, h, &e);
            gs = kvp_lookup(p, (kvp_stream)st, &g_hash[h], &g);
            cmp_status(x, "kvp_lookup", gs, es, fp);
            if (es != KVP_OK) {
                if (gs == KVP_OK)
                    bad(x, "lookup found %" PRIu32, g);
                break;
            }
            if (e != g)
                bad(x, "lookup(stream=%d, h%d): expected block %" PRIu32 ", got %" PRIu32, st,
                    h, e, g);
            id = e;
        } else {
            id = pick_target(x, pr_published, 70);
        }
        if (id < MB && mdl_refcnt(&m->b[id]) + 1 >= MAXREFB) {
            OPF("claim skipped (block %" PRIu32 " has enough references)", id);
            break;
        }
        fp = fingerprint(x);
        if (mimic_kv(x) && oi >= 0 && id < MB && m->b[id].list != oi % 2)
            oi = -1;
        OPF("claim(id=%" PRIu32 " %s, owner=%" PRIu64 ")", id,
            id < MB ? state_name(m->b[id].state) : "", oval(oi));
        if (id < MB && m->b[id].state == KVP_BLOCK_CACHED)
            x->lenient_reused = 1;
        es = mdl_claim(m, id, oi);
        gs = kvp_claim(p, id, oval(oi));
        cmp_status(x, "kvp_claim", gs, es, fp);
        break;
    }
    case OP_PUBLISH: {
        kvp_block id = pick_target(x, pr_inuse, 85);
        int h = (int)rn(x, NHASH);
        if (id < MB && m->b[id].hash >= 0 && chance(x, 50))
            h = m->b[id].hash;
        OPF("publish(id=%" PRIu32 " %s, h%d)", id, id < MB ? state_name(m->b[id].state) : "", h);
        es = mdl_publish(m, id, h);
        gs = kvp_publish(p, id, &g_hash[h]);
        cmp_status(x, "kvp_publish", gs, es, fp);
        break;
    }
    case OP_LOOKUP: {
        int st = pick_stream(x), h = (int)rn(x, NHASH);
        kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
        OPF("lookup(stream=%d, h%d)", st, h);
        es = mdl_lookup(m, st, h, &e);
        gs = kvp_lookup(p, (kvp_stream)st, &g_hash[h], &g);
        cmp_status(x, "kvp_lookup", gs, es, fp);
        if (es == KVP_OK && e != g)
            bad(x, "lookup: expected block %" PRIu32 ", got %" PRIu32, e, g);
        if (fingerprint(x) != fp)
            bad(x, "lookup changed the fingerprint");
        break;
    }
    case OP_UNPUBLISH: {
        kvp_block id = pick_target(x, pr_published, 80);
        OPF("unpublish(id=%" PRIu32 " %s)", id, id < MB ? state_name(m->b[id].state) : "");
        es = mdl_unpublish(m, id);
        gs = kvp_unpublish(p, id);
        cmp_status(x, "kvp_unpublish", gs, es, fp);
        break;
    }
    case OP_EVICT: {
        int st = pick_stream(x);
        uint32_t n = rn(x, 5);
        OPF("evict(stream=%d, n=%" PRIu32 ")", st, n);
        gs = run_counted(x, "kvp_evict", "evict n_evicted", st, n, fp, mdl_evict, kvp_evict);
        break;
    }
    case OP_ENSURE: {
        int st = pick_stream(x);
        int L = mdl_list(m, st);
        uint32_t f = L >= 0 ? mdl_n_free(m, L) : 4;
        uint32_t n = rn(x, f + 3);
        OPF("ensure_free(stream=%d, n=%" PRIu32 ")", st, n);
        x->lenient_exhausted = 1;
        es = mdl_ensure(m, st, n);
        gs = kvp_ensure_free(p, (kvp_stream)st, n);
        cmp_status(x, "kvp_ensure_free", gs, es, fp);
        break;
    }
    case OP_CLEAR_INDEX:
        OPF("clear_index()");
        gs = run_whole(x, "kvp_clear_index", fp, mdl_clear_index, kvp_clear_index);
        break;
    case OP_DRAIN:
        for (int oi = 0; oi < NOWN; oi++)
            if (m->o[oi].active)
                do_free_owner(x, oi);
        for (uint32_t i = 0; i < m->top; i++)
            if (m->b[i].state == KVP_BLOCK_IN_USE && m->b[i].anon && !m->b[i].is_null) {
                kvp_block ids[64];
                uint32_t n = m->b[i].anon;
                for (uint32_t r = 0; r < n && r < 64; r++)
                    ids[r] = i;
                do_free(x, ids, n < 64 ? n : 64, -1);
            }
        fp = fingerprint(x);
        /* fall through */
    case OP_RESET_PREFIX:
        OPF("reset_prefix_cache()");
        gs = run_whole(x, "kvp_reset_prefix_cache", fp, mdl_reset_prefix, kvp_reset_prefix_cache);
        break;
    case OP_EXTEND: {
        int st = pick_stream(x);
        uint32_t n = rn(x, 7);
        if (!m->c.maxb && mdl_managed(m) + n > 200)
            n = 0;
        OPF("extend(stream=%d, n=%" PRIu32 ")", st, n);
        gs = run_counted(x, "kvp_extend", "extend n_added", st, n, fp, mdl_extend, kvp_extend);
        break;
    }
    case OP_SHRINK: {
        int st = pick_stream(x);
        int L = mdl_list(m, st);
        uint32_t f = L >= 0 ? mdl_n_free(m, L) : 4;
        uint32_t t = f > 3 ? f - 1 - rn(x, 3) : rn(x, f + 2);
        if (chance(x, 5))
            t = 0;
        OPF("shrink(stream=%d, target_free=%" PRIu32 ")", st, t);
        gs = run_counted(x, "kvp_shrink", "shrink n_retired", st, t, fp, mdl_shrink, kvp_shrink);
        break;
    }
    case OP_RETIRE_TOP: {
        kvp_block er = KVP_NO_BLOCK, em = KVP_NO_BLOCK, gr = KVP_NO_BLOCK, gm = KVP_NO_BLOCK;
        OPF("retire_top()");
        x->lenient_exhausted = 1;
        es = mdl_retire_top(m, &er, &em);
        gs = kvp_retire_top(p, &gr, &gm);
        cmp_status(x, "kvp_retire_top", gs, es, fp);
        if (es == KVP_OK && (er != gr || em != gm))
            bad(x, "retire_top: expected retired %" PRIu32 " moved_to %" PRIu32
                ", got retired %" PRIu32 " moved_to %" PRIu32, er, em, gr, gm);
        break;
    }
    case OP_SET_PRIORITY: {
        kvp_block id = pick_target(x, chance(x, 60) ? pr_cached : pr_inuse, 85);
        unsigned prio = rn(x, KVP_PRIORITY_MAX + 2); /* one past the highest: refused */
        OPF("set_priority(id=%" PRIu32 " %s, %u)", id, id < MB ? state_name(m->b[id].state) : "",
            prio);
        es = mdl_set_priority(m, id, prio);
        gs = kvp_set_priority(p, id, prio);
        cmp_status(x, "kvp_set_priority", gs, es, fp);
        if (id < MB)
            cmp_block(x, id);
        break;
    }
    case OP_BLOCK_GET: {
        kvp_block id = pick_bad_id(x);
        OPF("block_get(%" PRIu32 ")", id);
        cmp_block(x, id);
        break;
    }
    case OP_OWNER_BLOCKS: {
        int oi = pick_owner(x);
        kvp_block ids[4];
        size_t gn = 0;
        size_t cap = rn(x, 3);
        OPF("owner_blocks(%" PRIu64 ", cap=%zu)", oval(oi), cap);
        gs = kvp_owner_blocks(p, oval(oi), cap ? ids : NULL, cap, &gn);
        es = oi < 0 ? KVP_EINVAL : !m->o[oi].active ? KVP_ENOTFOUND
             : m->o[oi].n > cap ? KVP_ESPACE : KVP_OK;
        cmp_status(x, "kvp_owner_blocks", gs, es, fp);
        if (es == KVP_ESPACE || es == KVP_OK)
            cmp_u64(x, "owner_blocks n_out", m->o[oi].n, gn);
        if (es == KVP_OK)
            for (size_t i = 0; i < gn; i++)
                if (ids[i] != m->o[oi].refs[i])
                    bad(x, "owner_blocks ids[%zu]: expected %" PRIu32 ", got %" PRIu32, i,
                        m->o[oi].refs[i], ids[i]);
        break;
    }
    case OP_FREE_COUNT: {
        int st = pick_stream(x);
        int L = mdl_list(m, st);
        uint32_t g = 0;
        OPF("free_count(stream=%d)", st);
        gs = kvp_free_count(p, (kvp_stream)st, &g);
        es = L < 0 ? KVP_EINVAL : KVP_OK;
        cmp_status(x, "kvp_free_count", gs, es, fp);
        if (es == KVP_OK)
            cmp_u64(x, "free_count", mdl_n_free(m, L), g);
        break;
    }
    case OP_POOL_CLEAR:
        OPF("pool_clear()");
        gs = run_whole(x, "kvp_pool_clear", fp, mdl_pool_clear, kvp_pool_clear);
        break;
    case OP_STATS_RESET: {
        OPF("stats_reset()");
        gs = kvp_stats_reset(p);
        cmp_status(x, "kvp_stats_reset", gs, KVP_OK, fp);
        if (fingerprint(x) != fp)
            bad(x, "stats_reset changed the fingerprint");
        mctr z;
        memset(&z, 0, sizeof z);
        z.peak = mdl_gauges(m).in_use;
        m->k = z;
        break;
    }
    default:
        break;
    }
    if (gs == KVP_OK)
        x->ok[op]++;
    else
        x->err[op]++;
}

static int pick_op(ctx *x)
{
    unsigned total = 0;
    for (int i = 0; i < NOP; i++)
        total += g_weight[i];
    unsigned r = rn(x, total);
    for (int i = 0; i < NOP; i++) {
        if (r < g_weight[i])
            return i;
        r -= g_weight[i];
    }
    return 0;
}

static size_t g_total_steps;

static void run_config(const mcfg *c)
{
    static model m;
    ctx *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->c = *c;
    x->m = &m;
    x->rng = c->seed;
    for (int oi = 0; oi < NOWN; oi++)
        x->hint[oi] = KVP_HINT_NONE;
    mdl_init(&m, c);

    kvp_config cfg;
    assert_int_equal(kvp_config_default(&cfg), KVP_OK);
    cfg.block_size = c->bs;
    cfg.num_blocks = c->nblocks;
    cfg.max_blocks = c->maxb;
    cfg.separate_kv = c->sep;
    cfg.grow_on_exhaustion = c->grow;
    cfg.null_block = c->nullb;
    cfg.prefix_caching = c->prefix;
    cfg.reuse = c->reuse;
    cfg.policy = c->policy;
    cfg.protected_percent = c->protected_percent;
    cfg.events = c->events;
    if (!c->unhooked) {
        cfg.on_evict = on_evict;
        cfg.evict_user = &x->lg;
    }
    assert_int_equal(kvp_pool_create(&cfg, &x->p), KVP_OK);
    OPF("create");
    check_all(x);

    for (x->step = 1; x->step <= c->steps; x->step++) {
        x->lg.n = 0;
        x->lg.overflow = 0;
        m.nev = 0;
        x->lenient_reused = x->lenient_free_calls = x->lenient_exhausted = 0;
        x->sync_owner = -1;
        if (getenv("KVP_MODEL_DUMP"))
            g_pre = m;
        /* long enough for takes to start deferring (KVP__DEFER_AFTER: 8
         * owner frees or new owners), with owner frees often enough that
         * most takes succeed */
        if (c->unhooked && !x->quiet && chance(x, c->decode ? 8 : 3))
            x->quiet = 100 + rn(x, 400);
        int op = x->quiet ? (chance(x, 70) ? (chance(x, 25) ? OP_TAKE_EACH : OP_TAKE)
                                           : OP_FREE_OWNER)
                          : pick_op(x);
        if (c->decode && (op == OP_SHRINK || op == OP_RETIRE_TOP))
            op = OP_TAKE;
        do_step(x, op);
        if (getenv("KVP_MODEL_TRACE"))
            fprintf(stderr, "  #%zu %s%s\n", x->step, x->op, x->quiet ? " (quiet)" : "");
        mdl_note_peak(&m);
        if (x->quiet && --x->quiet)
            check_pool(x);
        else
            check_all(x);
        /* keep the pool small */
        if (mdl_managed(&m) > MB - 16 && !c->maxb)
            bad(x, "model pool grew past the test's bound");
    }
    g_total_steps += c->steps;

    fprintf(stderr, "[model] %-28s seed=0x%016" PRIx64 " steps=%zu blocks=%" PRIu32
            " top=%" PRIu32 "\n        ok/err:", c->name, c->seed, c->steps, mdl_managed(&m), m.top);
    for (int i = 0; i < NOP; i++)
        fprintf(stderr, " %s=%" PRIu64 "/%" PRIu64, g_opname[i], x->ok[i], x->err[i]);
    fprintf(stderr, "\n");
    kvp_pool_destroy(x->p);
    free(x);
}

/* ------------------------------------------------------------------------ */
/* Configurations                                                            */
/* ------------------------------------------------------------------------ */

#define BASE_STEPS 10000

static const mcfg g_cfgs[] = {
    /* name, reuse, sep, null, grow, prefix, bs, n, max, seed, steps, unhooked, decode, events,
     * policy, protected_percent */
    {"lifo-shared",            KVP_REUSE_LIFO,   0, 0, 0, 1, 16, 32, 64, 0x1001, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"lifo-shared-null-grow",  KVP_REUSE_LIFO,   0, 1, 1, 1, 4, 16, 48, 0x1002, 0, 0, 0, 1, KVP_POLICY_LRU, 0},
    {"lifo-kv-null-grow",      KVP_REUSE_LIFO,   1, 1, 1, 1, 8, 40, 96, 0x1003, 0, 0, 0, 1, KVP_POLICY_LRU, 0},
    {"lowest-shared-grow",     KVP_REUSE_LOWEST, 0, 0, 1, 1, 16, 24, 64, 0x2001, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"lowest-kv",              KVP_REUSE_LOWEST, 1, 0, 0, 1, 1, 64, 128, 0x2002, 0, 0, 0, 1, KVP_POLICY_LRU, 0},
    {"lowest-shared-null",     KVP_REUSE_LOWEST, 0, 1, 0, 1, 16, 128, 160, 0x2003, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"fifo-shared-grow",       KVP_REUSE_FIFO,   0, 0, 1, 1, 16, 16, 48, 0x3001, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"fifo-kv-null",           KVP_REUSE_FIFO,   1, 1, 0, 1, 16, 128, 192, 0x3002, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"fifo-kv-grow",           KVP_REUSE_FIFO,   1, 0, 1, 1, 2, 32, 80, 0x3003, 0, 0, 0, 1, KVP_POLICY_LRU, 0},
    {"lifo-noprefix-grow",     KVP_REUSE_LIFO,   0, 0, 1, 0, 16, 16, 40, 0x4001, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    {"lowest-unlimited",       KVP_REUSE_LOWEST, 0, 1, 0, 1, 16, 32, 0, 0x4002, 0, 0, 0, 0, KVP_POLICY_LRU, 0},
    /* Nothing hooked, so takes run the fast path (take.c), which
     * the configurations above, all with an eviction callback, never do. */
    {"lifo-shared-unhooked",   KVP_REUSE_LIFO,   0, 0, 0, 1, 16, 32, 64, 0x5001, 0, 1, 0, 0, KVP_POLICY_LRU, 0},
    {"lifo-kv-grow-unhooked",  KVP_REUSE_LIFO,   1, 1, 1, 1, 8, 40, 96, 0x5002, 0, 1, 0, 0, KVP_POLICY_LRU, 0},
    {"fifo-shared-unhooked",   KVP_REUSE_FIFO,   0, 0, 1, 1, 16, 16, 48, 0x5003, 0, 1, 0, 0, KVP_POLICY_LRU, 0},
    /* Decode-like: quiet runs of takes and owner frees, long enough for
     * takes to defer, and nothing that turns the fast path off. */
    {"lifo-decode",            KVP_REUSE_LIFO,   0, 0, 1, 0, 16, 64, 160, 0x5004, 0, 1, 1, 0, KVP_POLICY_LRU, 0},
    {"lifo-kv-decode",         KVP_REUSE_LIFO,   1, 1, 0, 1, 8, 128, 0, 0x5005, 0, 1, 1, 0, KVP_POLICY_LRU, 0},
    /* SLRU: probationary and protected segments and the ghost list, with
     * priorities, in the LIFO and LOWEST orders (FIFO refuses it). */
    {"lifo-slru",              KVP_REUSE_LIFO,   0, 0, 0, 1, 16, 32, 64, 0x6001, 0, 0, 0, 1,
     KVP_POLICY_SLRU, 10},
    {"lifo-kv-null-grow-slru", KVP_REUSE_LIFO,   1, 1, 1, 1, 8, 40, 96, 0x6002, 0, 0, 0, 0,
     KVP_POLICY_SLRU, 25},
    {"lowest-shared-grow-slru", KVP_REUSE_LOWEST, 0, 0, 1, 1, 16, 24, 64, 0x6003, 0, 0, 0, 0,
     KVP_POLICY_SLRU, 5},
    {"lifo-slru-unhooked",     KVP_REUSE_LIFO,   0, 1, 1, 1, 16, 32, 64, 0x6004, 0, 1, 0, 0,
     KVP_POLICY_SLRU, 100},
    /* LFU: frequency classes and their aging, with priorities, in the LIFO
     * and LOWEST orders (FIFO refuses it). */
    {"lifo-lfu",               KVP_REUSE_LIFO,   0, 0, 0, 1, 16, 32, 64, 0x7001, 0, 0, 0, 1,
     KVP_POLICY_LFU, 20},
    {"lifo-kv-null-grow-lfu",  KVP_REUSE_LIFO,   1, 1, 1, 1, 8, 40, 96, 0x7002, 0, 0, 0, 0,
     KVP_POLICY_LFU, 50},
    {"lowest-shared-grow-lfu", KVP_REUSE_LOWEST, 0, 0, 1, 1, 16, 24, 64, 0x7003, 0, 0, 0, 0,
     KVP_POLICY_LFU, 5},
    {"lifo-lfu-unhooked",      KVP_REUSE_LIFO,   0, 1, 1, 1, 16, 32, 64, 0x7004, 0, 1, 0, 0,
     KVP_POLICY_LFU, 100},
};

#define NCFG (sizeof g_cfgs / sizeof g_cfgs[0])

static void run_index(size_t i, size_t weight)
{
    mcfg c = g_cfgs[i];
    const char *seed_env = getenv("KVP_MODEL_SEED");
    if (seed_env && *seed_env)
        c.seed = strtoull(seed_env, NULL, 0);
    double steps = (double)BASE_STEPS * (double)weight * kvptest_scale();
    c.steps = steps < 50 ? 50 : (size_t)steps;
    run_config(&c);
}

/* 24 configurations, weights 1 or 2: 31 x BASE_STEPS steps in all. */
static void test_lifo_shared(void **s) { (void)s; run_index(0, 1); }
static void test_lifo_shared_null_grow(void **s) { (void)s; run_index(1, 2); }
static void test_lifo_kv_null_grow(void **s) { (void)s; run_index(2, 2); }
static void test_lowest_shared_grow(void **s) { (void)s; run_index(3, 2); }
static void test_lowest_kv(void **s) { (void)s; run_index(4, 1); }
static void test_lowest_shared_null(void **s) { (void)s; run_index(5, 1); }
static void test_fifo_shared_grow(void **s) { (void)s; run_index(6, 2); }
static void test_fifo_kv_null(void **s) { (void)s; run_index(7, 1); }
static void test_fifo_kv_grow(void **s) { (void)s; run_index(8, 2); }
static void test_lifo_noprefix_grow(void **s) { (void)s; run_index(9, 1); }
static void test_lowest_unlimited(void **s) { (void)s; run_index(10, 1); }
static void test_lifo_shared_unhooked(void **s) { (void)s; run_index(11, 1); }
static void test_lifo_kv_grow_unhooked(void **s) { (void)s; run_index(12, 1); }
static void test_fifo_shared_unhooked(void **s) { (void)s; run_index(13, 1); }
static void test_lifo_decode(void **s) { (void)s; run_index(14, 1); }
static void test_lifo_kv_decode(void **s) { (void)s; run_index(15, 1); }
static void test_lifo_slru(void **s) { (void)s; run_index(16, 2); }
static void test_lifo_kv_null_grow_slru(void **s) { (void)s; run_index(17, 1); }
static void test_lowest_shared_grow_slru(void **s) { (void)s; run_index(18, 1); }
static void test_lifo_slru_unhooked(void **s) { (void)s; run_index(19, 1); }
static void test_lifo_lfu(void **s) { (void)s; run_index(20, 2); }
static void test_lifo_kv_null_grow_lfu(void **s) { (void)s; run_index(21, 1); }
static void test_lowest_shared_grow_lfu(void **s) { (void)s; run_index(22, 1); }
static void test_lifo_lfu_unhooked(void **s) { (void)s; run_index(23, 1); }

static void test_total(void **s)
{
    (void)s;
    fprintf(stderr, "[model] total steps: %zu\n", g_total_steps);
}

int main(void)
{
    const char *mim = getenv("KVP_MODEL_MIMIC");
    mdl_mimic = mim && *mim && *mim != '0';
    init_hashes();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifo_shared),
        cmocka_unit_test(test_lifo_shared_null_grow),
        cmocka_unit_test(test_lifo_kv_null_grow),
        cmocka_unit_test(test_lowest_shared_grow),
        cmocka_unit_test(test_lowest_kv),
        cmocka_unit_test(test_lowest_shared_null),
        cmocka_unit_test(test_fifo_shared_grow),
        cmocka_unit_test(test_fifo_kv_null),
        cmocka_unit_test(test_fifo_kv_grow),
        cmocka_unit_test(test_lifo_noprefix_grow),
        cmocka_unit_test(test_lowest_unlimited),
        cmocka_unit_test(test_lifo_shared_unhooked),
        cmocka_unit_test(test_lifo_kv_grow_unhooked),
        cmocka_unit_test(test_fifo_shared_unhooked),
        cmocka_unit_test(test_lifo_decode),
        cmocka_unit_test(test_lifo_kv_decode),
        cmocka_unit_test(test_lifo_slru),
        cmocka_unit_test(test_lifo_kv_null_grow_slru),
        cmocka_unit_test(test_lowest_shared_grow_slru),
        cmocka_unit_test(test_lifo_slru_unhooked),
        cmocka_unit_test(test_lifo_lfu),
        cmocka_unit_test(test_lifo_kv_null_grow_lfu),
        cmocka_unit_test(test_lowest_shared_grow_lfu),
        cmocka_unit_test(test_lifo_lfu_unhooked),
        cmocka_unit_test(test_total),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
