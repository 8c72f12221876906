/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_pool.c — differential fuzzer: kvpool against the reference model.
 *
 * What it covers: the whole state-changing surface of kvpool.h — alloc,
 * take (one call per block, and kvp_take_each), take_id, free (with double
 * frees, foreign blocks, repeated ids, bad ids), free_owner, owner
 * register/release/blocks, set_fill, claim, claim_prefix,
 * publish, publish_each, lookup(+claim), unpublish, evict, ensure_free, clear_index,
 * reset_prefix_cache, extend, shrink, retire_top, pool_clear, stats_reset,
 * free_count, block_get, and sequences (create, find, admit, append, fork,
 * destroy) — in every reuse order, shared or separate K/V lists, with or
 * without the null block, growth, prefix caching and locking.
 *
 * How: the input's first 4 bytes pick the configuration, the rest decode to
 * operations (one opcode byte, then argument bytes; a short input just reads
 * zeros).  Each operation runs on the pool and on the reference model of
 * tests/support/model.{h,c} (shared with tests/test_model.c).  After every
 * operation (a quiet one: see the loop) the statuses and returned values must agree, a refused call
 * must leave kvp_pool_fingerprint unchanged, kvp_pool_check must pass, and
 * the eviction callbacks, every counter, every block (kvp_block_get), every
 * owner's reference list, every sequence's block table and every lookup of
 * the hash alphabet must match the model.  With KV events on (bit 5 of the
 * fourth byte), a subscriber's view built from the events taken after each
 * operation must equal the set of indexed hashes (cmp_subscriber).  A mismatch prints the
 * configuration, the operation and both values, then aborts (libFuzzer
 * reports it as a crash and saves the input).
 *
 * Why built this way: the model is naive and independent of src/, so any
 * disagreement is a bug in one of them; comparing everything after every
 * operation catches a wrong ref count, a free-list/index disagreement or a
 * lost block at the step that causes it, not later.  Sequence hashes are
 * computed with kvp_hash_tokens (pure) and mapped to small content ids for
 * the model; hashing itself is covered by the known-answer vectors.
 *
 * The number of operations executed is counted and printed at exit
 * ("[fuzz_pool] inputs=N operations=M").  Built with libFuzzer
 * (clang -fsanitize=fuzzer,address,undefined) by `make fuzz`, or with
 * fuzz/replay.c as an ordinary main (corpus replay, coverage build).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define NHASH 8        /* the alphabet kvp_publish uses: ids 0..7 */
#define NCONTENT 8192  /* content ids: alphabet + sequence chain hashes */
#define MAXTOK (MSEQB * 16)
#define MAXREFB 48     /* references per block the fuzzer creates */
#define POOL_BOUND 200 /* managed blocks the fuzzer lets a pool reach */

/* ------------------------------------------------------------------------ */
/* Input reader                                                              */
/* ------------------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static uint32_t u8(rd *r)
{
    return r->i < r->n ? r->p[r->i++] : 0;
}

/* ------------------------------------------------------------------------ */
/* Content ids <-> hashes                                                    */
/* ------------------------------------------------------------------------ */

static kvp_hash g_content[NCONTENT];
static int g_ncontent;
static int g_slot[2 * NCONTENT]; /* open addressing on the last 8 bytes, -1 empty */

static uint64_t tail64(const kvp_hash *h)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | h->b[24 + k];
    return v;
}

/* The content id of h; -2 when unknown and !insert (or the table is full). */
static int content_id(const kvp_hash *h, int insert)
{
    uint64_t v = tail64(h) * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(v >> 40) % (2 * NCONTENT);
    for (;; i = (i + 1) % (2 * NCONTENT)) {
        int c = g_slot[i];
        if (c < 0)
            break;
        if (memcmp(g_content[c].b, h->b, 32) == 0)
            return c;
    }
    if (!insert || g_ncontent >= NCONTENT)
        return -2;
    g_content[g_ncontent] = *h;
    g_slot[i] = g_ncontent;
    return g_ncontent++;
}

static void content_reset(void)
{
    memset(g_slot, 0xff, sizeof g_slot);
    g_ncontent = 0;
    uint64_t s = 12345;
    for (int i = 0; i < NHASH; i++) {
        kvp_hash h;
        memset(&h, 0, sizeof h);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        for (int k = 0; k < 8; k++)
            h.b[24 + k] = (uint8_t)(s >> (56 - 8 * k));
        if (i == 6) /* a full 32-byte value */
            for (int k = 0; k < 24; k++)
                h.b[k] = (uint8_t)(s >> (k % 8 * 8)) ^ (uint8_t)k;
        if (i == 7) { /* equal to 0 in the last 8 bytes, differs in byte 0 */
            h = g_content[0];
            h.b[0] = 0xa5;
        }
        content_id(&h, 1);
    }
}

/* ------------------------------------------------------------------------ */
/* State of one run                                                          */
/* ------------------------------------------------------------------------ */

typedef struct evlog {
    int n, overflow;
    int hash[MAXEV];
    kvp_block block[MAXEV];
} evlog;

static const kvp_owner g_ownval[NOWN] = {
    1, 2, 3, 42, 0, (kvp_owner)0xffffffffu + 5u, UINT64_MAX - 1u, 7,
};

typedef struct run {
    mcfg c;
    int ts;
    int cb; /* the eviction callback attached (compared in cmp_events) */
    msub sub; /* with c.events: what a router knows (cmp_subscriber) */
    kvp_pool *p;
    evlog lg;
    kvp_seq *seq[MSEQ];            /* handle per model slot */
    uint32_t tok[MSEQ][MAXTOK];    /* every token of each sequence */
    size_t op_index;
    char op[256];
    uint32_t hint[NOWN]; /* kvp_take_hinted's, kept across pool_clear on purpose */
    int quiet; /* this operation runs quietly (see LLVMFuzzerTestOneInput) */
} run;

static model g_m;
static run g_r;
static unsigned long long g_ops, g_inputs;
static int g_verbose;
/* KVP_FUZZ_AVOID_KNOWN=1: steer around library bugs already reported (see
 * docs/RELIABILITY.md) so a long run can look for others.  Off by default. */
static int g_avoid;

static void print_totals(void)
{
    fprintf(stderr, "[fuzz_pool] inputs=%llu operations=%llu\n", g_inputs, g_ops);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_verbose = getenv("KVP_FUZZ_VERBOSE") != NULL;
    g_avoid = getenv("KVP_FUZZ_AVOID_KNOWN") != NULL;
    atexit(print_totals);
    return 0;
}

static void on_evict(void *user, const kvp_hash *hash, kvp_block block)
{
    evlog *l = user;
    if (l->n >= MAXEV) {
        l->overflow = 1;
        return;
    }
    l->hash[l->n] = hash ? content_id(hash, 0) : -1;
    l->block[l->n] = block;
    l->n++;
}

static kvp_owner oval(int oi)
{
    return oi < 0 ? KVP_ANON : g_ownval[oi];
}

__attribute__((noreturn, format(printf, 1, 2))) static void bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr,
            "\nFUZZ MISMATCH config reuse=%d policy=%d sep=%d null=%d grow=%d prefix=%d ts=%d events=%d"
            " bs=%" PRIu32 " blocks=%" PRIu32 " max=%" PRIu32 "\n  op #%zu: %s\n  ",
            g_r.c.reuse, g_r.c.policy, g_r.c.sep, g_r.c.nullb, g_r.c.grow, g_r.c.prefix, g_r.ts, g_r.c.events,
            g_r.c.bs, g_r.c.nblocks, g_r.c.maxb, g_r.op_index, g_r.op);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

#define OPF(...) snprintf(g_r.op, sizeof g_r.op, __VA_ARGS__)

static uint64_t fingerprint(void)
{
    uint64_t f = 0;
    if (g_r.quiet) /* it would settle the pending references */
        return 0;
    kvp_status s = kvp_pool_fingerprint(g_r.p, &f);
    if (s != KVP_OK)
        bad("kvp_pool_fingerprint: %s", kvp_strerror(s));
    return f;
}

static void cmp_status(const char *call, kvp_status got, kvp_status exp, uint64_t fp)
{
    if (got != exp)
        bad("%s: status expected %d (%s), got %d (%s)", call, exp, kvp_strerror(exp), got,
            kvp_strerror(got));
    if (got != KVP_OK && !g_r.quiet && fingerprint() != fp)
        bad("%s: refused with %s but the fingerprint changed", call, kvp_strerror(got));
}

/* A batch call that does the model's loop: the same count done (en, gn),
 * the same blocks (e, g: NULL when the call returns none), the same status;
 * one refused before doing anything changed nothing. */
static void cmp_batch(const char *call, kvp_status gs, kvp_status es, size_t gn, size_t en,
                      const kvp_block *e, const kvp_block *g, uint64_t fp)
{
    if (gn != en)
        bad("%s: expected %zu done (%s), got %zu (%s)", call, en, kvp_strerror(es), gn,
            kvp_strerror(gs));
    if (en == 0)
        cmp_status(call, gs, es, fp);
    else if (gs != es)
        bad("%s after %zu done: status expected %s, got %s", call, en, kvp_strerror(es),
            kvp_strerror(gs));
    for (size_t k = 0; e && k < en; k++)
        if (e[k] != g[k])
            bad("%s, item %zu: expected block %" PRIu32 ", got %" PRIu32, call, k, e[k], g[k]);
}

static void cmp_u64(const char *what, uint64_t exp, uint64_t got)
{
    if (exp != got)
        bad("%s: expected %" PRIu64 ", got %" PRIu64, what, exp, got);
}

/* One stream call that reports a count (kvp_evict, kvp_extend, kvp_shrink),
 * run on the model and on the library: the statuses compared and, when the
 * call succeeds, the counts. */
static void run_counted(const char *call, const char *what, int st, uint32_t n, uint64_t fp,
                        kvp_status (*mf)(model *, int, uint32_t, uint32_t *),
                        kvp_status (*kf)(kvp_pool *, kvp_stream, uint32_t, uint32_t *))
{
    uint32_t en = 0, gn = 0;
    kvp_status es = mf(&g_m, st, n, &en);
    kvp_status gs = kf(g_r.p, (kvp_stream)st, n, &gn);
    cmp_status(call, gs, es, fp);
    if (es == KVP_OK)
        cmp_u64(what, en, gn);
}

/* One pool-wide call without arguments (kvp_clear_index,
 * kvp_reset_prefix_cache, kvp_pool_clear), run on the model and on the
 * library with the statuses compared. */
static void run_whole(const char *call, uint64_t fp, kvp_status (*mf)(model *),
                      kvp_status (*kf)(kvp_pool *))
{
    kvp_status es = mf(&g_m);
    cmp_status(call, kf(g_r.p), es, fp);
}

/* ------------------------------------------------------------------------ */
/* Whole-state comparison after every operation                              */
/* ------------------------------------------------------------------------ */

static void cmp_events(void)
{
    model *m = &g_m;
    if (!g_r.cb) /* the count is still compared, as stats.evictions */
        return;
    if (g_r.lg.overflow || m->nev > MAXEV)
        bad("eviction log overflow");
    if (m->nev != g_r.lg.n)
        bad("eviction callbacks: expected %d, got %d (first expected h%d/b%" PRIu32
            ", got h%d/b%" PRIu32 ")", m->nev, g_r.lg.n, m->nev ? m->ev_hash[0] : 0,
            m->nev ? m->ev_block[0] : 0, g_r.lg.n ? g_r.lg.hash[0] : 0,
            g_r.lg.n ? g_r.lg.block[0] : 0);
    for (int i = 0; i < m->nev; i++)
        if (m->ev_hash[i] != g_r.lg.hash[i] || m->ev_block[i] != g_r.lg.block[i])
            bad("eviction callback %d: expected (h%d, b%" PRIu32 "), got (h%d, b%" PRIu32 ")",
                i, m->ev_hash[i], m->ev_block[i], g_r.lg.hash[i], g_r.lg.block[i]);
}

/* Take the events queued since the last comparison and apply them as a
 * router would, rejecting a stored block whose parent it does not hold; its
 * view must equal the model's index (mdl_events_diff), which cmp_block
 * holds equal to the pool's.  Nothing may be dropped: the
 * queue (4096 hashes) holds far more than the operations between two
 * comparisons make. */
static void cmp_subscriber(void)
{
    char msg[256];
    if (mdl_events_diff(&g_m, &g_r.sub, g_r.p, g_content, msg, sizeof msg))
        bad("events: %s", msg);
}

static void stat_mismatch(void *user, const char *field, uint64_t exp, uint64_t got)
{
    (void)user;
    cmp_u64(field, exp, got);
}

static void cmp_stats(void)
{
    model *m = &g_m;
    kvp_stats g;
    kvp_status s = kvp_stats_get(g_r.p, &g);
    if (s != KVP_OK)
        bad("kvp_stats_get: %s", kvp_strerror(s));
    mdl_stats_diff(m, &g, stat_mismatch, NULL);
}

static void cmp_block(kvp_block id)
{
    model *m = &g_m;
    mblk *k = id < MB ? &m->b[id] : NULL;
    kvp_block_info bi;
    memset(&bi, 0, sizeof bi);
    kvp_status s = kvp_block_get(g_r.p, id, &bi);
    if (!k || k->state == M_NONE) {
        if (s != KVP_ERANGE)
            bad("block_get(%" PRIu32 ") never created: expected ERANGE, got %s", id,
                kvp_strerror(s));
        return;
    }
    if (k->state == M_GONE) { /* open after pool_clear (see test_model.c) */
        if (s != KVP_ERANGE && !(s == KVP_OK && bi.state == KVP_BLOCK_RETIRED))
            bad("block_get(%" PRIu32 ") after pool_clear: got %s state %d", id,
                kvp_strerror(s), bi.state);
        return;
    }
    if (s != KVP_OK)
        bad("block_get(%" PRIu32 "): %s", id, kvp_strerror(s));
    if (bi.state != k->state)
        bad("block %" PRIu32 ": state expected %d, got %d", id, k->state, bi.state);
    if (k->state == KVP_BLOCK_RETIRED)
        return;
    if (bi.stream != mdl_list_stream(m, k->list))
        bad("block %" PRIu32 ": stream expected %d, got %d", id, mdl_list_stream(m, k->list),
            bi.stream);
    if (!!bi.is_null != k->is_null)
        bad("block %" PRIu32 ": is_null expected %d, got %d", id, k->is_null, bi.is_null);
    if (k->is_null)
        return;
    if (bi.ref_count != mdl_refcnt(k) || bi.anon_refs != k->anon || bi.seq_refs != k->seqref)
        bad("block %" PRIu32 ": ref_count/anon/seq expected %" PRIu32 "/%" PRIu32 "/%" PRIu32
            ", got %" PRIu32 "/%" PRIu32 "/%" PRIu32,
            id, mdl_refcnt(k), k->anon, k->seqref, bi.ref_count, bi.anon_refs, bi.seq_refs);
    if (!!bi.published != (k->hash >= 0))
        bad("block %" PRIu32 ": published expected %d, got %d", id, k->hash >= 0, bi.published);
    if (k->hash >= 0 && content_id(&bi.hash, 0) != k->hash)
        bad("block %" PRIu32 ": hash expected c%d, got c%d", id, k->hash,
            content_id(&bi.hash, 0));
    if (!k->reborn && !!bi.ever_allocated != k->ever)
        bad("block %" PRIu32 ": ever_allocated expected %d, got %d", id, k->ever,
            bi.ever_allocated);
    if (bi.priority != k->prio)
        bad("block %" PRIu32 ": priority expected %u, got %u", id, k->prio, bi.priority);
    int holds = bi.owner == KVP_ANON && k->nh == 0;
    for (int i = 0; i < k->nh; i++)
        holds |= g_ownval[k->h_own[i]] == bi.owner;
    if (!holds)
        bad("block %" PRIu32 ": owner %" PRIu64 " holds no reference on it", id, bi.owner);
    if (k->state == KVP_BLOCK_IN_USE) {
        if (bi.fill != k->fill)
            bad("block %" PRIu32 ": fill expected %" PRIu32 ", got %" PRIu32, id, k->fill,
                bi.fill);
        if (!k->format_known) {
            k->format = bi.format;
            k->format_known = 1;
        }
        if (bi.format != k->format)
            bad("block %" PRIu32 ": format expected %u, got %u", id, k->format, bi.format);
    }
}

static void cmp_owner(int oi)
{
    static kvp_block got[OREFS];
    mown *o = &g_m.o[oi];
    size_t n = 0;
    kvp_status s = kvp_owner_blocks(g_r.p, g_ownval[oi], got, OREFS, &n);
    if (!o->active) {
        if (s != KVP_ENOTFOUND)
            bad("owner_blocks(%" PRIu64 ") inactive: expected ENOTFOUND, got %s", g_ownval[oi],
                kvp_strerror(s));
        return;
    }
    if (s != KVP_OK)
        bad("owner_blocks(%" PRIu64 "): %s", g_ownval[oi], kvp_strerror(s));
    if (n != o->n)
        bad("owner_blocks(%" PRIu64 "): expected %" PRIu32 " references, got %zu", g_ownval[oi],
            o->n, n);
    for (size_t i = 0; i < n; i++)
        if (got[i] != o->refs[i])
            bad("owner_blocks(%" PRIu64 ")[%zu]: expected %" PRIu32 ", got %" PRIu32
                " (the order taken; free drops the oldest)", g_ownval[oi], i, o->refs[i],
                got[i]);
}

static void cmp_seqs(void)
{
    for (int q = 0; q < MSEQ; q++) {
        mseq *s = &g_m.sq[q];
        if (!s->live)
            continue;
        const kvp_block *ids = NULL;
        size_t nb = 0, nt = 0;
        kvp_status st = kvp_seq_blocks(g_r.seq[q], &ids, &nb, &nt);
        if (st != KVP_OK)
            bad("seq_blocks(%" PRIu64 "): %s", s->id, kvp_strerror(st));
        cmp_u64("seq n_tokens", s->ntokens, nt);
        cmp_u64("seq n_blocks", s->nblocks, nb);
        for (size_t i = 0; i < nb; i++)
            if (ids[i] != s->blocks[i])
                bad("seq %" PRIu64 " block[%zu]: expected %" PRIu32 ", got %" PRIu32, s->id, i,
                    s->blocks[i], ids[i]);
        kvp_seq *f = NULL;
        if (kvp_seq_find(g_r.p, s->id, &f) != KVP_OK || f != g_r.seq[q])
            bad("seq_find(%" PRIu64 ") does not return its handle", s->id);
    }
}

static void cmp_lookups(void)
{
    model *m = &g_m;
    for (int st = 0; st <= 2; st++) {
        int L = mdl_list(m, st);
        if (L < 0)
            continue;
        uint32_t fc = 0;
        if (kvp_free_count(g_r.p, (kvp_stream)st, &fc) != KVP_OK)
            bad("free_count(%d) failed", st);
        cmp_u64("free_count", mdl_n_free(m, L), fc);
        for (int h = 0; h < NHASH; h++) {
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            kvp_status es = mdl_lookup(m, st, h, &e);
            kvp_status gs = kvp_lookup(g_r.p, (kvp_stream)st, &g_content[h], &g);
            if (es != gs || (es == KVP_OK && e != g))
                bad("lookup(stream %d, h%d): expected %s/%" PRIu32 ", got %s/%" PRIu32, st, h,
                    kvp_strerror(es), e, kvp_strerror(gs), g);
        }
    }
}

static void check_pool(void)
{
    char msg[512];
    kvp_status s = kvp_pool_check(g_r.p, msg, sizeof msg);
    if (s != KVP_OK)
        bad("kvp_pool_check: %s: %s", kvp_strerror(s), s == KVP_ECORRUPT ? msg : "");
}

static void check_all(void)
{
    check_pool();
    cmp_events();
    cmp_stats();
    for (kvp_block i = 0; i < g_m.top + 2 && i < MB; i++)
        cmp_block(i);
    for (int oi = 0; oi < NOWN; oi++)
        cmp_owner(oi);
    cmp_seqs();
    cmp_lookups();
    if (g_r.c.events)
        cmp_subscriber();
}

/* ------------------------------------------------------------------------ */
/* Argument pickers                                                          */
/* ------------------------------------------------------------------------ */

static int pick_owner(rd *r)
{
    return (int)(u8(r) % (NOWN + 1)) - 1;
}

static int pick_stream(rd *r)
{
    uint32_t v = u8(r);
    if (v >= 250)
        return 3 + (int)(v % 5); /* unknown stream */
    if (g_m.c.sep)
        return v % 16 == 0 ? KVP_STREAM_SHARED : 1 + (int)(v % 2);
    return (int)(v % 3);
}

/* Any id: mostly a created one, sometimes past the top or KVP_NO_BLOCK. */
static kvp_block pick_id(rd *r)
{
    uint32_t v = u8(r);
    uint32_t top = g_m.top ? g_m.top : 1;
    if (v >= 248)
        return v == 255 ? KVP_NO_BLOCK : top + (v & 3);
    return v % top;
}

typedef int (*pred)(const mblk *k);
static int pr_inuse(const mblk *k) { return k->state == KVP_BLOCK_IN_USE && !k->is_null; }
static int pr_free(const mblk *k) { return mdl_is_free(k); }
static int pr_published(const mblk *k) { return k->hash >= 0; }
static int pr_cached(const mblk *k) { return k->state == KVP_BLOCK_CACHED; }

/* Mostly a block satisfying p (the n-th, chosen by a byte), else any id. */
static kvp_block pick_where(rd *r, pred p)
{
    uint32_t v = u8(r);
    if (v < 200) {
        kvp_block c[MB];
        uint32_t n = 0;
        for (uint32_t i = 0; i < g_m.top; i++)
            if (p(&g_m.b[i]))
                c[n++] = i;
        if (n)
            return c[v % n];
    }
    return pick_id(r);
}

/* Tokens: families share prefixes so admissions hit the cache. */
static uint32_t fam_token(uint32_t fam, size_t i)
{
    uint64_t z = ((uint64_t)fam << 32 | (uint64_t)i) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)((z >> 40) % 5);
}

static const kvp_extra_keys *extra_of(int tag, kvp_extra_keys *buf)
{
    static const uint8_t salt[2] = {'s', '1'};
    if (tag == 0)
        return NULL;
    memset(buf, 0, sizeof *buf);
    if (tag == 1) {
        buf->salt = salt;
        buf->salt_len = sizeof salt;
    } else {
        buf->has_lora = 1;
        buf->lora_id = 7;
    }
    return buf;
}

/* Content ids of full blocks [from, to) of tokens[0..n) for sequence slot q
 * (extra keys by tag).  Returns 0 when the content table is full. */
static int chain_ids(int tag, const uint32_t *tokens, size_t n, size_t from, size_t to,
                     int *out)
{
    static kvp_hash h[MSEQB];
    kvp_extra_keys xb;
    size_t nout = 0;
    kvp_status s = kvp_hash_tokens(g_r.p, tokens, n, extra_of(tag, &xb), h, MSEQB, 0, &nout);
    if (s != KVP_OK)
        bad("kvp_hash_tokens: %s", kvp_strerror(s));
    if (nout != n / g_m.c.bs)
        bad("kvp_hash_tokens: %zu blocks for %zu tokens", nout, n);
    for (size_t i = from; i < to; i++)
        if ((out[i - from] = content_id(&h[i], 1)) < 0)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

enum {
    OP_ALLOC, OP_TAKE, OP_TAKE_ID, OP_FREE, OP_FREE2, OP_FREE_OWNER, OP_REGISTER, OP_RELEASE,
    OP_SET_FILL, OP_CLAIM, OP_PUBLISH, OP_LOOKUP_CLAIM, OP_UNPUBLISH, OP_EVICT, OP_ENSURE,
    OP_EXTEND, OP_SHRINK, OP_RETIRE_TOP, OP_OWNER_BLOCKS, OP_SEQ_CREATE, OP_SEQ_ADMIT,
    OP_SEQ_APPEND, OP_SEQ_APPEND2, OP_SEQ_FORK, OP_SEQ_DESTROY, OP_RARE, OP_SEQ_TRUNCATE,
    OP_SET_PRIORITY, OP_SEQ_RAISE, NOPS
};

static kvp_status do_free(rd *r)
{
    model *m = &g_m;
    int oi = pick_owner(r);
    kvp_block ids[16];
    size_t n = 0;
    /* the references it holds */
    static kvp_block pool[OREFS];
    uint32_t np = 0;
    if (oi >= 0) {
        for (uint32_t i = 0; i < m->o[oi].n; i++)
            pool[np++] = m->o[oi].refs[i];
    } else {
        for (uint32_t i = 0; i < m->top && np < OREFS - MAXREFB; i++)
            for (uint32_t k = 0; k < m->b[i].anon; k++)
                pool[np++] = i;
    }
    uint32_t want = np ? 1 + u8(r) % (np < 6 ? np : 6) : 0;
    for (uint32_t i = 0; i < want; i++) {
        uint32_t j = i + u8(r) % (np - i);
        kvp_block t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        ids[n++] = pool[i];
    }
    uint32_t f = u8(r) % 16;
    if (f == 0)
        ids[n++] = pick_where(r, pr_free); /* double free */
    else if (f == 1)
        ids[n++] = pick_where(r, pr_inuse); /* maybe not its block */
    else if (f == 2 && n) {
        kvp_block again = ids[u8(r) % n]; /* named once more */
        ids[n++] = again;
    }
    else if (f == 3)
        ids[n++] = pick_id(r);
    else if (f == 4)
        n = 0;
    uint64_t fp = fingerprint();
    OPF("free(owner=%" PRIu64 ", n=%zu, first=%" PRIu32 ")", oval(oi), n, n ? ids[0] : 0);
    kvp_status es = mdl_free(m, ids, n, oi);
    kvp_status gs = kvp_free(g_r.p, n ? ids : NULL, n, oval(oi));
    cmp_status("kvp_free", gs, es, fp);
    return gs;
}

static int owner_room(int oi, uint32_t more)
{
    return oi < 0 || g_m.o[oi].n + more + MAXREFB < OREFS;
}

/* kvp_take_each: 1 + v % 6 takes from stream st, the first for owner oi,
 * by rows into the owners' table (row NOWN: anonymous) with their kept
 * hints, or (v / 6 odd) without rows and hints.  Each must be the take the
 * model makes, in order, the call stopping at the first that fails. */
static void do_take_each(rd *r, int st, int oi, uint32_t v, uint64_t fp)
{
    model *m = &g_m;
    size_t n = 1 + v % 6, gn = SIZE_MAX, en = 0;
    int by_rows = (v / 6) % 2 == 0, ois[6];
    kvp_owner tab[NOWN + 1], own[6];
    uint32_t rows[6];
    for (int j = 0; j < NOWN; j++)
        tab[j] = oval(j);
    tab[NOWN] = KVP_ANON;
    char *o = g_r.op + OPF("take_each(stream=%d,%s owners=", st, by_rows ? " rows, hints," : "");
    for (size_t k = 0; k < n; k++) {
        if (k)
            oi = pick_owner(r);
        if (!owner_room(oi, 64))
            oi = -1;
        ois[k] = oi;
        rows[k] = oi < 0 ? NOWN : (uint32_t)oi;
        own[k] = oval(oi);
        o += snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), "%s%" PRIu64, k ? "," : "",
                      oval(oi));
    }
    snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), ")");
    kvp_block e[6], g[6];
    uint32_t hints[NOWN + 1];
    memcpy(hints, g_r.hint, sizeof g_r.hint);
    hints[NOWN] = KVP_HINT_NONE;
    kvp_status gs = by_rows ? kvp_take_each(g_r.p, (kvp_stream)st, tab, hints, rows, n, g, &gn)
                            : kvp_take_each(g_r.p, (kvp_stream)st, own, NULL, NULL, n, g, &gn);
    kvp_status es = mdl_take_each(m, st, ois, n, e, &en);
    cmp_batch("kvp_take_each", gs, es, gn, en, e, g, fp);
    if (by_rows)
        memcpy(g_r.hint, hints, sizeof g_r.hint);
}

/* kvp_claim_prefix of a chain of 1 + v % 4 hashes for owner oi in stream
 * st: the blocks the model's loop of lookups and claims finds, in order,
 * stopping at the first miss.  Skipped when the claims could pass the
 * fuzzer's reference bounds. */
static void do_claim_prefix(rd *r, int st, int oi, uint32_t v, uint64_t fp)
{
    model *m = &g_m;
    size_t n = 1 + v % 4, gn = 0, en = 0;
    int hs[4];
    kvp_hash gh[4];
    char *o = g_r.op + OPF("claim_prefix(stream=%d, owner=%" PRIu64 ",", st, oval(oi));
    for (size_t k = 0; k < n; k++) {
        hs[k] = (int)(u8(r) % NHASH);
        gh[k] = g_content[hs[k]];
        o += snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), " h%d", hs[k]);
        kvp_block b;
        if (mdl_lookup(m, st, hs[k], &b) == KVP_OK && b < MB &&
            mdl_refcnt(&m->b[b]) + n + 1 >= MAXREFB)
            return;
    }
    snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), ")");
    if (!owner_room(oi, (uint32_t)n))
        return;
    kvp_block e[4], g[4];
    kvp_status es = mdl_claim_prefix(m, st, hs, n, oi, e, &en);
    kvp_status gs = kvp_claim_prefix(g_r.p, (kvp_stream)st, gh, n, oval(oi), g, &gn);
    cmp_batch("kvp_claim_prefix", gs, es, gn, en, e, g, fp);
}

/* kvp_publish_each of 1 + v % 3 blocks in use (or not) under hashes of the
 * alphabet: the model's loop of publishes, stopping at the first refused. */
static void do_publish_each(rd *r, uint32_t v, uint64_t fp)
{
    model *m = &g_m;
    size_t n = 1 + v % 3, gn = 0, en = 0;
    int hs[3];
    kvp_block ids[3];
    kvp_hash gh[3];
    char *o = g_r.op + OPF("publish_each(");
    for (size_t k = 0; k < n; k++) {
        ids[k] = pick_where(r, pr_inuse);
        hs[k] = (int)(u8(r) % NHASH);
        gh[k] = g_content[hs[k]];
        o += snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), " %" PRIu32 ":h%d", ids[k],
                      hs[k]);
    }
    snprintf(o, (size_t)(g_r.op + sizeof g_r.op - o), ")");
    kvp_status es = mdl_publish_each(m, ids, hs, n, &en);
    kvp_status gs = kvp_publish_each(g_r.p, ids, gh, n, &gn);
    cmp_batch("kvp_publish_each", gs, es, gn, en, NULL, NULL, fp);
}

static void do_seq(rd *r, int op)
{
    model *m = &g_m;
    kvp_pool *p = g_r.p;
    uint64_t fp = fingerprint();
    kvp_status es, gs;
    uint64_t id = u8(r) % 6;
    int q = mdl_seq_find(m, id);
    switch (op) {
    case OP_SEQ_CREATE: {
        int tag = (int)(u8(r) % 3), slot = -1;
        kvp_extra_keys xb;
        kvp_seq *h = NULL;
        int nlive = 0;
        for (int i = 0; i < MSEQ; i++)
            nlive += m->sq[i].live;
        if (nlive >= MSEQ - 1)
            return;
        OPF("seq_create(%" PRIu64 ", extra=%d)", id, tag);
        es = mdl_seq_create(m, id, tag, &slot);
        gs = kvp_seq_create(p, id, extra_of(tag, &xb), &h);
        cmp_status("kvp_seq_create", gs, es, fp);
        if (es == KVP_OK)
            g_r.seq[slot] = h;
        break;
    }
    case OP_SEQ_ADMIT: {
        uint32_t fam = u8(r) % 4, len = 1 + u8(r) % (m->c.bs * 8), div = u8(r);
        if (q < 0)
            return;
        if (len > MSEQB * m->c.bs)
            len = MSEQB * m->c.bs;
        static uint32_t t[MAXTOK]; /* the sequence's tokens only if admitted */
        for (uint32_t i = 0; i < len; i++)
            t[i] = fam_token(div < 128 || i < div % len ? fam : fam + 16 + div, i);
        static int h[MSEQB];
        if (!chain_ids(m->sq[q].extra, t, len, 0, len / m->c.bs, h))
            return;
        size_t ec = 0, gc = 99, pc = 0, pn = 0;
        uint32_t nfree = 0;
        OPF("seq_admit(%" PRIu64 ", n=%" PRIu32 ", family=%" PRIu32 ")", id, len, fam);
        /* kvp_seq_probe first: it changes nothing (the model is not told)
         * and predicts the admission. */
        kvp_status ps = kvp_seq_probe(g_r.seq[q], t, len, &pc, &pn);
        kvp_status fs = kvp_free_count(p, KVP_STREAM_SHARED, &nfree);
        es = mdl_seq_admit(m, q, len, h, &ec);
        gs = kvp_seq_admit(g_r.seq[q], t, len, &gc);
        cmp_status("kvp_seq_admit", gs, es, fp);
        if (es == KVP_OK || es == KVP_EEXHAUSTED)
            cmp_status("kvp_seq_probe", ps, KVP_OK, fp);
        if (ps == KVP_OK && fs == KVP_OK && !m->c.grow)
            cmp_status("kvp_seq_admit as probed", gs, pn <= nfree ? KVP_OK : KVP_EEXHAUSTED, fp);
        if (es == KVP_OK) {
            cmp_u64("seq_admit cached_tokens as probed", pc, gc);
            cmp_u64("seq_admit cached_tokens", ec, gc);
            memcpy(g_r.tok[q], t, len * sizeof t[0]);
        }
        break;
    }
    case OP_SEQ_APPEND:
    case OP_SEQ_APPEND2: {
        uint32_t n = u8(r) % (op == OP_SEQ_APPEND ? 3 : m->c.bs * 3 + 1), fam = u8(r) % 3;
        if (q < 0)
            return;
        size_t old = m->sq[q].ntokens;
        if (old + n > (size_t)MSEQB * m->c.bs)
            return;
        uint32_t *t = g_r.tok[q];
        for (uint32_t i = 0; i < n; i++)
            t[old + i] = fam_token(fam, old + i);
        static int h[MSEQB];
        size_t first = old / m->c.bs, nfull = (old + n) / m->c.bs;
        if (!chain_ids(m->sq[q].extra, t, old + n, first, nfull, h))
            return;
        OPF("seq_append(%" PRIu64 ", n=%" PRIu32 ") at %zu tokens", id, n, old);
        es = mdl_seq_append(m, q, n, h);
        gs = kvp_seq_append(g_r.seq[q], n ? t + old : NULL, n);
        cmp_status("kvp_seq_append", gs, es, fp);
        break;
    }
    case OP_SEQ_FORK: {
        uint64_t child = u8(r) % 6;
        int slot = -1, nlive = 0;
        kvp_seq *h = NULL;
        for (int i = 0; i < MSEQ; i++)
            nlive += m->sq[i].live;
        if (q < 0 || nlive >= MSEQ - 1)
            return;
        if (g_avoid && m->sq[q].nblocks == 0)
            return; /* known bug F1: fork of an empty sequence */
        for (uint32_t i = 0; i < m->sq[q].nblocks; i++)
            if (m->b[m->sq[q].blocks[i]].seqref >= MAXREFB)
                return;
        OPF("seq_fork(%" PRIu64 " -> %" PRIu64 ")", id, child);
        es = mdl_seq_fork(m, q, child, &slot);
        gs = kvp_seq_fork(g_r.seq[q], child, &h);
        cmp_status("kvp_seq_fork", gs, es, fp);
        if (es == KVP_OK) {
            g_r.seq[slot] = h;
            memcpy(g_r.tok[slot], g_r.tok[q], sizeof g_r.tok[q]);
        }
        break;
    }
    case OP_SEQ_TRUNCATE: {
        if (q < 0)
            return;
        size_t have = m->sq[q].ntokens, cut = u8(r) % (m->c.bs * 3 + 2);
        size_t n = cut > have ? have + 1 : have - cut; /* now and then one too many */
        OPF("seq_truncate(%" PRIu64 ", %zu) of %zu tokens", id, n, have);
        es = mdl_seq_truncate(m, q, n);
        gs = kvp_seq_truncate(g_r.seq[q], g_r.tok[q], n);
        cmp_status("kvp_seq_truncate", gs, es, fp);
        break;
    }
    case OP_SEQ_RAISE: {
        if (q < 0)
            return;
        size_t n = u8(r) % (m->sq[q].nblocks + 2);
        unsigned prio = u8(r) % (KVP_PRIORITY_MAX + 2); /* one past the highest: refused */
        OPF("seq_raise_priority(%" PRIu64 ", %zu blocks, %u)", id, n, prio);
        es = mdl_seq_raise_priority(m, q, n, prio);
        gs = kvp_seq_raise_priority(g_r.seq[q], n, prio);
        cmp_status("kvp_seq_raise_priority", gs, es, fp);
        break;
    }
    case OP_SEQ_DESTROY:
        if (q < 0) {
            kvp_seq *h = NULL;
            OPF("seq_find(%" PRIu64 ") absent", id);
            cmp_status("kvp_seq_find", kvp_seq_find(p, id, &h), KVP_ENOTFOUND, fp);
            return;
        }
        OPF("seq_destroy(%" PRIu64 ")", id);
        es = mdl_seq_destroy(m, q);
        gs = kvp_seq_destroy(g_r.seq[q]);
        cmp_status("kvp_seq_destroy", gs, es, fp);
        g_r.seq[q] = NULL;
        break;
    default:
        break;
    }
}

static void do_rare(rd *r)
{
    model *m = &g_m;
    kvp_pool *p = g_r.p;
    uint64_t fp = fingerprint();
    kvp_status es, gs;
    switch (u8(r) % 8) {
    case 0:
        OPF("clear_index()");
        run_whole("kvp_clear_index", fp, mdl_clear_index, kvp_clear_index);
        break;
    case 1:
        OPF("reset_prefix_cache()");
        run_whole("kvp_reset_prefix_cache", fp, mdl_reset_prefix, kvp_reset_prefix_cache);
        break;
    case 2:
        OPF("pool_clear()");
        run_whole("kvp_pool_clear", fp, mdl_pool_clear, kvp_pool_clear);
        memset(g_r.seq, 0, sizeof g_r.seq);
        break;
    case 3: {
        OPF("stats_reset()");
        cmp_status("kvp_stats_reset", kvp_stats_reset(p), KVP_OK, fp);
        if (fingerprint() != fp)
            bad("stats_reset changed the fingerprint");
        mctr z;
        memset(&z, 0, sizeof z);
        z.peak = mdl_gauges(m).in_use;
        m->k = z;
        break;
    }
    case 4: {
        kvp_block id = pick_id(r);
        OPF("block_get(%" PRIu32 ")", id);
        cmp_block(id);
        break;
    }
    case 5: {
        int st = pick_stream(r), L = mdl_list(m, st);
        uint32_t g = 0;
        OPF("free_count(%d)", st);
        cmp_status("kvp_free_count", kvp_free_count(p, (kvp_stream)st, &g),
                   L < 0 ? KVP_EINVAL : KVP_OK, fp);
        if (L >= 0)
            cmp_u64("free_count", mdl_n_free(m, L), g);
        break;
    }
    case 6: { /* drain every owner, then reset the prefix cache */
        for (int oi = 0; oi < NOWN; oi++) {
            if (!m->o[oi].active)
                continue;
            size_t en = 0, gn = 0;
            fp = fingerprint();
            OPF("drain: free_owner(%" PRIu64 ")", oval(oi));
            es = mdl_free_owner(m, oi, &en);
            gs = kvp_free_owner(p, oval(oi), &gn);
            cmp_status("kvp_free_owner", gs, es, fp);
            cmp_u64("free_owner n_freed", en, gn);
        }
        fp = fingerprint();
        OPF("drain: reset_prefix_cache()");
        run_whole("kvp_reset_prefix_cache", fp, mdl_reset_prefix, kvp_reset_prefix_cache);
        break;
    }
    default: {
        kvp_seq *h = NULL;
        uint64_t id = u8(r) % 6;
        int q = mdl_seq_find(m, id);
        OPF("seq_find(%" PRIu64 ")", id);
        gs = kvp_seq_find(p, id, &h);
        cmp_status("kvp_seq_find", gs, q >= 0 ? KVP_OK : KVP_ENOTFOUND, fp);
        if (q >= 0 && h != g_r.seq[q])
            bad("seq_find returned another handle");
        break;
    }
    }
}

static void do_op(rd *r, int op)
{
    model *m = &g_m;
    kvp_pool *p = g_r.p;
    uint64_t fp = fingerprint();
    kvp_status es, gs;
    switch (op) {
    case OP_ALLOC:
    case OP_TAKE: {
        int st = pick_stream(r), oi = pick_owner(r);
        uint32_t v = u8(r);
        if (!owner_room(oi, 64))
            return;
        if (op == OP_TAKE && v % 8 == 3) { /* one in eight: a kvp_take_each */
            do_take_each(r, st, oi, v / 8, fp);
            break;
        }
        if (op == OP_TAKE) {
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            size_t en = 0;
            OPF("take(stream=%d, owner=%" PRIu64 ")", st, oval(oi));
            es = mdl_alloc(m, st, 1, oi, 0, 1, 1, &e, &en);
            kvp_block nx = KVP_NO_BLOCK;
            kvp_status ps = KVP_OK;
            if (!g_r.quiet) {
                ps = kvp_peek_next(p, (kvp_stream)st, &nx);
                if (fingerprint() != fp)
                    bad("kvp_peek_next changed the pool");
            }
            /* Half the takes are hinted: with the owner's kept hint, another
             * owner's, or garbage; all must behave as kvp_take. */
            if (v % 8 < 3) {
                gs = kvp_take(p, (kvp_stream)st, oval(oi), &g);
            } else {
                uint32_t h = v % 8 == 4   ? v / 8
                             : v % 8 == 5 ? g_r.hint[v / 8 % NOWN]
                                          : oi >= 0 ? g_r.hint[oi] : KVP_HINT_NONE;
                uint32_t h0 = h;
                OPF("take_hinted(stream=%d, owner=%" PRIu64 ", hint=%" PRIu32 ")", st, oval(oi), h);
                gs = kvp_take_hinted(p, (kvp_stream)st, oval(oi), &h, &g);
                if ((gs != KVP_OK || oi < 0) && h != h0)
                    bad("take_hinted (%s, owner %" PRIu64 ") changed the hint %" PRIu32
                        " to %" PRIu32, kvp_strerror(gs), oval(oi), h0, h);
                if (gs == KVP_OK && oi >= 0)
                    g_r.hint[oi] = h;
            }
            if (ps != KVP_OK ? gs != ps : gs == KVP_OK && nx != KVP_NO_BLOCK && nx != g)
                bad("kvp_peek_next: %s, block %" PRIu32 "; the take: %s, block %" PRIu32,
                    kvp_strerror(ps), nx, kvp_strerror(gs), g);
            cmp_status("kvp_take", gs, es, fp);
            if (es == KVP_OK && e != g)
                bad("take: expected block %" PRIu32 ", got %" PRIu32, e, g);
            break;
        }
        uint64_t tokens = 1 + u8(r) % (m->c.bs * 6);
        unsigned fmt = u8(r);
        size_t cap = 64;
        if (v < 4)
            tokens = v < 2 ? 0 : UINT64_MAX;
        else if (v < 8)
            fmt = 256 + v;
        else if (v < 14)
            cap = (size_t)((tokens + m->c.bs - 1) / m->c.bs) - 1;
        kvp_block e[64], g[64];
        size_t en = 0, gn = 0;
        OPF("alloc(stream=%d, tokens=%" PRIu64 ", owner=%" PRIu64 ", format=%u, cap=%zu)", st,
            tokens, oval(oi), fmt, cap);
        es = mdl_alloc(m, st, tokens, oi, fmt, cap, 0, e, &en);
        gs = kvp_alloc(p, (kvp_stream)st, tokens, oval(oi), fmt, g, cap, &gn);
        cmp_status("kvp_alloc", gs, es, fp);
        if (es == KVP_OK || es == KVP_ESPACE)
            cmp_u64("alloc n_out", en, gn);
        if (es == KVP_OK)
            for (size_t i = 0; i < en; i++)
                if (e[i] != g[i])
                    bad("alloc ids[%zu]: expected %" PRIu32 ", got %" PRIu32, i, e[i], g[i]);
        break;
    }
    case OP_TAKE_ID: {
        kvp_block id = pick_where(r, pr_free);
        int oi = pick_owner(r);
        if (!owner_room(oi, 1))
            return;
        OPF("take_id(%" PRIu32 ", owner=%" PRIu64 ")", id, oval(oi));
        es = mdl_take_id(m, id, oi);
        gs = kvp_take_id(p, id, oval(oi));
        cmp_status("kvp_take_id", gs, es, fp);
        break;
    }
    case OP_FREE:
    case OP_FREE2:
        do_free(r);
        break;
    case OP_FREE_OWNER: {
        int oi = pick_owner(r);
        size_t en = 0, gn = 0;
        OPF("free_owner(%" PRIu64 ")", oval(oi));
        es = mdl_free_owner(m, oi, &en);
        gs = kvp_free_owner(p, oval(oi), &gn);
        cmp_status("kvp_free_owner", gs, es, fp);
        if (es == KVP_OK)
            cmp_u64("free_owner n_freed", en, gn);
        break;
    }
    case OP_REGISTER:
    case OP_RELEASE: {
        int oi = pick_owner(r);
        OPF("owner_%s(%" PRIu64 ")", op == OP_REGISTER ? "register" : "release", oval(oi));
        if (op == OP_REGISTER) {
            es = mdl_register(m, oi);
            gs = kvp_owner_register(p, oval(oi));
        } else {
            es = mdl_release(m, oi);
            gs = kvp_owner_release(p, oval(oi));
        }
        cmp_status("kvp_owner_register/release", gs, es, fp);
        break;
    }
    case OP_SET_FILL: {
        kvp_block id = pick_where(r, pr_inuse);
        uint32_t fill = u8(r) % (m->c.bs + 3);
        if (fill > m->c.bs && mdl_bad_id(m, id))
            fill = 0; /* one fault at a time: the order of checks is open */
        OPF("set_fill(%" PRIu32 ", %" PRIu32 ")", id, fill);
        es = mdl_set_fill(m, id, fill);
        gs = kvp_set_fill(p, id, fill);
        cmp_status("kvp_set_fill", gs, es, fp);
        break;
    }
    case OP_CLAIM:
    case OP_LOOKUP_CLAIM: {
        int oi = pick_owner(r);
        kvp_block id;
        if (op == OP_LOOKUP_CLAIM) {
            uint32_t v = u8(r);
            if (v % 4 == 1) { /* one in four: a kvp_claim_prefix */
                do_claim_prefix(r, pick_stream(r), oi, v / 4, fp);
                return;
            }
            int st = pick_stream(r), h = (int)(u8(r) % NHASH);
            kvp_block e = KVP_NO_BLOCK, g = KVP_NO_BLOCK;
            OPF("lookup(stream=%d, h%d)", st, h);
            es = mdl_lookup(m, st, h, &e);
            gs = kvp_lookup(p, (kvp_stream)st, &g_content[h], &g);
            cmp_status("kvp_lookup", gs, es, fp);
            if (fingerprint() != fp)
                bad("lookup changed the fingerprint");
            if (es != KVP_OK)
                break;
            if (e != g)
                bad("lookup: expected block %" PRIu32 ", got %" PRIu32, e, g);
            id = e;
        } else {
            id = pick_where(r, pr_published);
        }
        if ((id < MB && mdl_refcnt(&m->b[id]) + 1 >= MAXREFB) || !owner_room(oi, 1))
            return;
        OPF("claim(%" PRIu32 ", owner=%" PRIu64 ")", id, oval(oi));
        es = mdl_claim(m, id, oi);
        gs = kvp_claim(p, id, oval(oi));
        cmp_status("kvp_claim", gs, es, fp);
        break;
    }
    case OP_PUBLISH: {
        uint32_t v = u8(r);
        if (v % 4 == 1) { /* one in four: a kvp_publish_each */
            do_publish_each(r, v / 4, fp);
            return;
        }
        kvp_block id = pick_where(r, pr_inuse);
        int h = (int)(u8(r) % NHASH);
        if (id < MB && m->b[id].hash >= 0 && h == 0)
            h = m->b[id].hash < NHASH ? m->b[id].hash : 0;
        OPF("publish(%" PRIu32 ", h%d)", id, h);
        es = mdl_publish(m, id, h);
        gs = kvp_publish(p, id, &g_content[h]);
        cmp_status("kvp_publish", gs, es, fp);
        break;
    }
    case OP_UNPUBLISH: {
        kvp_block id = pick_where(r, pr_published);
        OPF("unpublish(%" PRIu32 ")", id);
        es = mdl_unpublish(m, id);
        gs = kvp_unpublish(p, id);
        cmp_status("kvp_unpublish", gs, es, fp);
        break;
    }
    case OP_EVICT:
    case OP_ENSURE: {
        int st = pick_stream(r);
        uint32_t n = u8(r) % 8;
        if (op == OP_EVICT) {
            OPF("evict(stream=%d, %" PRIu32 ")", st, n);
            run_counted("kvp_evict", "evict n_evicted", st, n, fp, mdl_evict, kvp_evict);
        } else {
            OPF("ensure_free(stream=%d, %" PRIu32 ")", st, n);
            es = mdl_ensure(m, st, n);
            gs = kvp_ensure_free(p, (kvp_stream)st, n);
            cmp_status("kvp_ensure_free", gs, es, fp);
        }
        break;
    }
    case OP_EXTEND: {
        int st = pick_stream(r);
        uint32_t n = u8(r) % 8;
        if (mdl_managed(m) + n > POOL_BOUND)
            n = 0;
        OPF("extend(stream=%d, %" PRIu32 ")", st, n);
        run_counted("kvp_extend", "extend n_added", st, n, fp, mdl_extend, kvp_extend);
        break;
    }
    case OP_SHRINK: {
        int st = pick_stream(r), L = mdl_list(m, st);
        uint32_t f = L >= 0 ? mdl_n_free(m, L) : 4, v = u8(r);
        uint32_t t = v < 16 ? 0 : f > 3 ? f - 1 - v % 3 : v % (f + 2);
        OPF("shrink(stream=%d, target=%" PRIu32 ")", st, t);
        run_counted("kvp_shrink", "shrink n_retired", st, t, fp, mdl_shrink, kvp_shrink);
        break;
    }
    case OP_RETIRE_TOP: {
        kvp_block er = KVP_NO_BLOCK, em = KVP_NO_BLOCK, gr = KVP_NO_BLOCK, gm = KVP_NO_BLOCK;
        OPF("retire_top()");
        es = mdl_retire_top(m, &er, &em);
        gs = kvp_retire_top(p, &gr, &gm);
        cmp_status("kvp_retire_top", gs, es, fp);
        if (es == KVP_OK && (er != gr || em != gm))
            bad("retire_top: expected %" PRIu32 "->%" PRIu32 ", got %" PRIu32 "->%" PRIu32, er,
                em, gr, gm);
        break;
    }
    case OP_OWNER_BLOCKS: {
        int oi = pick_owner(r);
        kvp_block ids[4];
        size_t gn = 0, cap = u8(r) % 4;
        OPF("owner_blocks(%" PRIu64 ", cap=%zu)", oval(oi), cap);
        gs = kvp_owner_blocks(p, oval(oi), cap ? ids : NULL, cap, &gn);
        es = oi < 0 ? KVP_EINVAL : !m->o[oi].active ? KVP_ENOTFOUND
             : m->o[oi].n > cap ? KVP_ESPACE : KVP_OK;
        cmp_status("kvp_owner_blocks", gs, es, fp);
        if (es == KVP_OK || es == KVP_ESPACE)
            cmp_u64("owner_blocks n_out", m->o[oi].n, gn);
        break;
    }
    case OP_RARE:
        do_rare(r);
        break;
    case OP_SET_PRIORITY: {
        kvp_block id = pick_where(r, u8(r) & 1 ? pr_cached : pr_inuse);
        unsigned prio = u8(r) % (KVP_PRIORITY_MAX + 2); /* one past the highest: refused */
        OPF("set_priority(%" PRIu32 ", %u)", id, prio);
        es = mdl_set_priority(m, id, prio);
        gs = kvp_set_priority(p, id, prio);
        cmp_status("kvp_set_priority", gs, es, fp);
        break;
    }
    default:
        do_seq(r, op);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                               */
/* ------------------------------------------------------------------------ */

static const uint32_t g_bs[4] = {1, 2, 4, 16};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    mcfg c;
    memset(&c, 0, sizeof c);
    uint32_t b0 = u8(&r), b1 = u8(&r), b2 = u8(&r), b3 = u8(&r);
    c.name = "fuzz";
    c.reuse = (kvp_reuse)(b0 % 3);
    c.sep = (b0 >> 2) & 1;
    c.nullb = (b0 >> 3) & 1;
    c.grow = (b0 >> 4) & 1;
    c.prefix = ((b0 >> 5) & 3) != 0;
    c.bs = g_bs[b1 & 3];
    c.nblocks = (b1 >> 2) % 48;
    if (c.nullb && c.nblocks == 0)
        c.nblocks = 1;
    c.maxb = (c.grow || (b2 & 1)) ? c.nblocks + 1 + (b2 >> 1) % 100 : 0;
    c.events = (b3 >> 5) & 1;
    /* bit 6: a policy other than LRU (not with FIFO, which refuses them),
     * bit 7 which: SLRU or LFU */
    c.policy = !((b3 >> 6) & 1) || c.reuse == KVP_REUSE_FIFO ? KVP_POLICY_LRU
               : (b3 >> 7) & 1                                ? KVP_POLICY_LFU
                                                               : KVP_POLICY_SLRU;
    c.protected_percent = (b0 * 37u + b2) % 101;
    g_inputs++;
    memset(&g_r, 0, sizeof g_r);
    g_r.c = c;
    g_r.ts = b3 & 1;
    /* Without the callback (and lock and history) nothing is hooked, and
     * takes run the library's fast path: both are compared with the model. */
    g_r.cb = !((b3 >> 4) & 1);
    for (int oi = 0; oi < NOWN; oi++)
        g_r.hint[oi] = KVP_HINT_NONE;
    content_reset();
    mdl_init(&g_m, &c);

    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = c.bs;
    cfg.num_blocks = c.nblocks;
    cfg.max_blocks = c.maxb;
    cfg.separate_kv = c.sep;
    cfg.grow_on_exhaustion = c.grow;
    cfg.null_block = c.nullb;
    cfg.prefix_caching = c.prefix;
    cfg.reuse = c.reuse;
    cfg.policy = c.policy;
    cfg.protected_percent = c.protected_percent;
    cfg.thread_safe = g_r.ts;
    cfg.history_len = (b3 >> 1) & 1 ? 4 : 0;
    cfg.history_every_call = (b3 >> 2) & 1;
    cfg.hash_alg = (b3 >> 3) & 1 ? KVP_HASH_XXH3_128 : KVP_HASH_SHA256;
    cfg.events = c.events;
    if (g_r.cb) {
        cfg.on_evict = on_evict;
        cfg.evict_user = &g_r.lg;
    }
    kvp_status s = kvp_pool_create(&cfg, &g_r.p);
    if (s != KVP_OK)
        bad("kvp_pool_create: %s", kvp_strerror(s));
    OPF("create");
    check_all();

    for (g_r.op_index = 1; r.i < r.n; g_r.op_index++) {
        g_r.lg.n = 0;
        g_r.lg.overflow = 0;
        g_m.nev = 0;
        g_r.op[0] = 0;
        /* Bit 7 of the opcode byte runs a take or an owner free quietly:
         * nothing before it and only kvp_pool_check after, calls that leave
         * the fast take's pending references pending (any other settles
         * them), so that runs of such operations reach kvp_free_owner
         * with references still pending.  The next loud one compares all. */
        uint32_t code = u8(&r);
        int op = (int)((code & 0x7f) % NOPS);
        g_r.quiet = (code & 0x80) && (op == OP_TAKE || op == OP_FREE_OWNER);
        do_op(&r, op);
        if (g_verbose)
            fprintf(stderr, "  #%zu %s%s\n", g_r.op_index, g_r.op, g_r.quiet ? " (quiet)" : "");
        mdl_note_peak(&g_m);
        if (g_r.quiet)
            check_pool();
        else
            check_all();
        g_r.quiet = 0;
        g_ops++;
        if (mdl_managed(&g_m) > POOL_BOUND + 64)
            bad("pool grew past the fuzzer's bound");
    }
    check_all();
    kvp_pool_destroy(g_r.p);
    g_r.p = NULL;
    return 0;
}
