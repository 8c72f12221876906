/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_seq_model.c — model-based random test of sequences (kvpool.h
 * "Sequences"), in the spirit of test_model.c.
 *
 * A naive reference model (per sequence: its tokens and block table; per
 * block: state, ref count, fill, hash and the order it was published and
 * freed; the content index as "the first published block still indexed with
 * that hash") is driven in lock step with a real pool by a seeded splitmix64
 * stream of operations: admit (with create, and kvp_seq_probe first, whose
 * answers must predict it), append, truncate, fork, destroy, and now
 * and then kvp_evict, kvp_reset_prefix_cache, kvp_retire_top and kvp_extend,
 * plus refused calls (admit into a busy sequence, ids in use, reset while
 * blocks are held, retire with nothing to move into).  Hashes come from
 * kvp_hash_tokens (test_hashing.c checks those against Python).
 *
 * Which free block a fresh allocation takes is learned from the pool, but
 * checked against the reuse rules of the header: never a block in use, the
 * null block, or a block matched by the same admission; vacant before cached
 * (LIFO, LOWEST); lowest vacant id first (LOWEST); cached blocks least
 * recently freed first (every order).  Everything else is predicted.
 *
 * After every step: statuses, cached_tokens, every sequence's block table and
 * token count, every block's state/ref count/fill/published/hash, the stats
 * (in_use, vacant, cached, indexed, blocks, cow_copies, prefix_*,
 * tokens_in_use), the eviction callbacks (blocks and hashes, in order), and
 * kvp_pool_check; a refused call must leave kvp_pool_fingerprint unchanged.
 * Every 16 steps every indexed hash is looked up.
 *
 * Steps scale with env KVP_TEST_SCALE (kvptest_steps).  KVP_SEQ_MODEL_SEED
 * replaces the seeds; KVP_SEQ_MODEL_TRACE=1 prints each operation;
 * KVP_SEQ_MODEL_NO_EMPTY_FORK=1 never forks an empty sequence (forking one
 * passes NULL to memcpy in src/sequence.c, which UBSan aborts on), so that
 * a sanitizer run can look past that bug.
 */
#include "kvptest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB 160     /* model block ids */
#define MSEQ 12    /* live sequences at most */
#define MTOK 320   /* tokens per sequence at most */
#define MEV 256
#define M_NONE 9   /* id not created yet */

typedef struct mblock {
    int state;            /* KVP_BLOCK_* or M_NONE */
    uint32_t ref, fill;
    int pub;
    kvp_hash hash;
    uint64_t pub_stamp;   /* index order */
    uint64_t free_stamp;  /* free order (LRU for cached) */
} mblock;

typedef struct mseq {
    int live;
    uint64_t id;
    kvp_seq *h;
    int tenant;
    size_t ntok, nb;
    uint32_t tok[MTOK];
    kvp_block tab[MTOK];
} mseq;

typedef struct mcfg {
    uint32_t nblocks, bs;
    kvp_reuse reuse;
    int null_block, prefix_caching;
    kvp_hash_alg alg;
    uint64_t seed;
} mcfg;

typedef struct model {
    const mcfg *c;
    kvp_pool *pool;
    kvptest_evrec rec;
    uint32_t bs, top;
    mblock b[MB];
    mseq s[MSEQ];
    uint64_t stamp, next_id, rng;
    uint64_t cow, pq, ph, pt; /* copies; prefix blocks queried, hit; prompt tokens */
    /* expected eviction callbacks of this step */
    size_t nev;
    kvp_block ev_b[MEV];
    uint64_t ev_h[MEV];
    int ev_cleared[MEV];
    size_t step;
    const char *op;
    uint32_t prompts[4][64];
    int trace;
    int no_empty_fork;
} model;

static const uint8_t salt1[] = {'t', '1'};
static const uint8_t salt2[] = {'t', 'w', 'o'};

static const kvp_extra_keys *tenant_extra(int tenant, kvp_extra_keys *x)
{
    memset(x, 0, sizeof *x);
    if (tenant == 0)
        return NULL;
    if (tenant == 1) {
        x->salt = salt1;
        x->salt_len = sizeof salt1;
    } else {
        x->salt = salt2;
        x->salt_len = sizeof salt2;
        x->has_lora = 1;
        x->lora_id = 5;
    }
    return x;
}

static uint32_t below(model *m, uint32_t n)
{
    return kvptest_rand_below(&m->rng, n);
}

/* ---- failure reporting ----------------------------------------------------- */

static void mfail(model *m, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    print_error("seq model: config (blocks %u, bs %u, reuse %d, null %d, caching %d, alg %d, "
                "seed %" PRIu64 ") step %zu op %s:\n    %s\n",
                m->c->nblocks, m->c->bs, (int)m->c->reuse, m->c->null_block,
                m->c->prefix_caching, (int)m->c->alg, m->c->seed, m->step, m->op, buf);
    fail();
}

#define MCHECK_EQ(m, a, b, what)                                                           \
    do {                                                                                   \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                   \
        if (a_ != b_)                                                                      \
            mfail((m), "%s: got %" PRIu64 ", expected %" PRIu64, (what), a_, b_);          \
    } while (0)

static void expect_status(model *m, kvp_status got, kvp_status want, const char *what)
{
    if (got != want)
        mfail(m, "%s returned %d (%s), expected %d (%s)", what, (int)got, kvp_strerror(got),
              (int)want, kvp_strerror(want));
}

/* ---- model helpers ------------------------------------------------------- */

static int is_null(const model *m, kvp_block b)
{
    return m->c->null_block && b == 0;
}

static int is_free(const model *m, kvp_block b)
{
    return b < m->top && !is_null(m, b) &&
           (m->b[b].state == KVP_BLOCK_VACANT || m->b[b].state == KVP_BLOCK_CACHED);
}

static uint32_t free_count(const model *m)
{
    uint32_t n = 0;
    for (kvp_block b = 0; b < m->top; b++)
        n += is_free(m, b);
    return n;
}

static int contains(const kvp_block *set, size_t n, kvp_block b)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == b)
            return 1;
    return 0;
}

static void push_ev(model *m, kvp_block b, const kvp_hash *h)
{
    if (m->nev < MEV) {
        m->ev_b[m->nev] = b;
        m->ev_h[m->nev] = h ? kvptest_hash_u64(h) : 0;
        m->ev_cleared[m->nev] = h == NULL;
    }
    m->nev++;
}

/* Remove b's content (an eviction). */
static void evict_block(model *m, kvp_block b)
{
    push_ev(m, b, &m->b[b].hash);
    m->b[b].pub = 0;
    if (m->b[b].state == KVP_BLOCK_CACHED)
        m->b[b].state = KVP_BLOCK_VACANT;
}

static void publish(model *m, kvp_block b, const kvp_hash *h)
{
    if (!m->c->prefix_caching || m->b[b].pub)
        return;
    m->b[b].pub = 1;
    m->b[b].hash = *h;
    m->b[b].pub_stamp = ++m->stamp;
}

static kvp_block index_find(const model *m, const kvp_hash *h)
{
    kvp_block best = KVP_NO_BLOCK;
    uint64_t bs = UINT64_MAX;
    for (kvp_block b = 0; b < m->top; b++)
        if (m->b[b].pub && memcmp(m->b[b].hash.b, h->b, 32) == 0 && m->b[b].pub_stamp < bs) {
            bs = m->b[b].pub_stamp;
            best = b;
        }
    return best;
}

/* The least recently freed cached block not in `excl`. */
static kvp_block lru_cached(const model *m, const kvp_block *excl, size_t nexcl)
{
    kvp_block best = KVP_NO_BLOCK;
    uint64_t st = UINT64_MAX;
    for (kvp_block b = 0; b < m->top; b++)
        if (m->b[b].state == KVP_BLOCK_CACHED && !contains(excl, nexcl, b) &&
            m->b[b].free_stamp < st) {
            st = m->b[b].free_stamp;
            best = b;
        }
    return best;
}

/* Block b was handed out for fresh content: check the reuse rules, then
 * take it (evicting its content). */
static void take_fresh(model *m, kvp_block b, const kvp_block *excl, size_t nexcl)
{
    if (b >= m->top || !is_free(m, b))
        mfail(m, "fresh block %u is not a free block (state %d)", (unsigned)b,
              b < MB ? m->b[b].state : -1);
    if (contains(excl, nexcl, b))
        mfail(m, "fresh block %u was matched by the same call", (unsigned)b);
    if (m->c->reuse != KVP_REUSE_FIFO) {
        kvp_block lowest = KVP_NO_BLOCK;
        for (kvp_block v = 0; v < m->top && lowest == KVP_NO_BLOCK; v++)
            if (is_free(m, v) && m->b[v].state == KVP_BLOCK_VACANT)
                lowest = v;
        if (lowest != KVP_NO_BLOCK && m->b[b].state != KVP_BLOCK_VACANT)
            mfail(m, "took cached block %u while block %u was vacant", (unsigned)b,
                  (unsigned)lowest);
        if (m->c->reuse == KVP_REUSE_LOWEST && lowest != KVP_NO_BLOCK && b != lowest)
            mfail(m, "LOWEST took vacant block %u, lowest vacant is %u", (unsigned)b,
                  (unsigned)lowest);
    }
    if (m->b[b].state == KVP_BLOCK_CACHED) {
        kvp_block lru = lru_cached(m, excl, nexcl);
        if (b != lru)
            mfail(m, "took cached block %u, least recently freed is %u", (unsigned)b,
                  (unsigned)lru);
        evict_block(m, b);
    }
    m->b[b].state = KVP_BLOCK_IN_USE;
    m->b[b].ref = 1;
    m->b[b].fill = 0;
}

static void drop_ref(model *m, kvp_block b)
{
    if (m->b[b].ref == 0)
        mfail(m, "model: drop on a free block %u", (unsigned)b);
    if (--m->b[b].ref == 0) {
        m->b[b].state = m->b[b].pub ? KVP_BLOCK_CACHED : KVP_BLOCK_VACANT;
        m->b[b].free_stamp = ++m->stamp;
    }
}

static size_t seq_hashes(model *m, const mseq *s, size_t ntok, kvp_hash *out, size_t cap)
{
    kvp_extra_keys x;
    size_t n = 0;
    kvp_status st =
        kvp_hash_tokens(m->pool, s->tok, ntok, tenant_extra(s->tenant, &x), out, cap, 0, &n);
    expect_status(m, st, KVP_OK, "kvp_hash_tokens");
    return n;
}

static int live_count(const model *m)
{
    int n = 0;
    for (int i = 0; i < MSEQ; i++)
        n += m->s[i].live;
    return n;
}

static int pick_live(model *m)
{
    int n = live_count(m);
    if (!n)
        return -1;
    int k = (int)below(m, (uint32_t)n);
    for (int i = 0; i < MSEQ; i++)
        if (m->s[i].live && k-- == 0)
            return i;
    return -1;
}

static int free_slot(const model *m)
{
    for (int i = 0; i < MSEQ; i++)
        if (!m->s[i].live)
            return i;
    return -1;
}

static uint64_t existing_id(model *m)
{
    int i = pick_live(m);
    return i < 0 ? 0 : m->s[i].id;
}

/* ---- operations ------------------------------------------------------------ */

static void make_prompt(model *m, uint32_t *t, size_t *n)
{
    uint32_t bs = m->bs;
    const uint32_t *base = m->prompts[below(m, 4)];
    size_t l1 = below(m, 6 * bs + 1);
    if (l1 > 64)
        l1 = 64;
    size_t l2 = below(m, 2 * bs + 2);
    memcpy(t, base, l1 * sizeof *t);
    for (size_t i = 0; i < l2; i++)
        t[l1 + i] = below(m, 3);
    *n = l1 + l2;
}

static void op_admit(model *m)
{
    m->op = "admit";
    int k = free_slot(m);
    if (k < 0)
        return;
    mseq *s = &m->s[k];
    kvp_extra_keys x;
    /* Create, sometimes with an id in use (refused). */
    if (live_count(m) > 0 && below(m, 20) == 0) {
        m->op = "create(existing id)";
        kvp_seq *h = NULL;
        uint64_t fp = kvptest_fp(m->pool);
        expect_status(m, kvp_seq_create(m->pool, existing_id(m), NULL, &h), KVP_EOWNERACTIVE,
                      "kvp_seq_create");
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused create");
        return;
    }
    memset(s, 0, sizeof *s);
    s->id = m->next_id++;
    s->tenant = below(m, 4) == 0 ? (int)(1 + below(m, 2)) : 0;
    expect_status(m, kvp_seq_create(m->pool, s->id, tenant_extra(s->tenant, &x), &s->h), KVP_OK,
                  "kvp_seq_create");
    s->live = 1;
    if (below(m, 8) == 0) /* stays empty for a while: appends start it */
        return;
    size_t n;
    make_prompt(m, s->tok, &n);
    if (n == 0) {
        m->op = "admit(0 tokens)";
        uint64_t fp = kvptest_fp(m->pool);
        expect_status(m, kvp_seq_admit(s->h, s->tok, 0, NULL), KVP_EINVAL, "kvp_seq_admit");
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused admit");
        return;
    }
    uint32_t bs = m->bs;
    kvp_hash h[MTOK];
    size_t nfull = seq_hashes(m, s, n, h, MTOK);
    size_t max_hit = m->c->prefix_caching ? (n - 1) / bs : 0, hit = 0;
    kvp_block matched[MTOK];
    for (; hit < max_hit; hit++) {
        kvp_block b = index_find(m, &h[hit]);
        if (b == KVP_NO_BLOCK)
            break;
        matched[hit] = b;
    }
    size_t nblocks = (n + bs - 1) / bs;
    uint32_t matched_cached = 0;
    for (size_t i = 0; i < hit; i++)
        matched_cached += m->b[matched[i]].state == KVP_BLOCK_CACHED &&
                          !contains(matched, i, matched[i]);
    uint64_t avail = free_count(m) - matched_cached;
    kvp_status want = nblocks - hit > avail ? KVP_EEXHAUSTED : KVP_OK;
    uint64_t fp = kvptest_fp(m->pool);
    /* kvp_seq_probe predicts this admission and changes nothing. */
    size_t pc = 0, pn = 0;
    expect_status(m, kvp_seq_probe(s->h, s->tok, n, &pc, &pn), KVP_OK, "kvp_seq_probe");
    MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after probe");
    MCHECK_EQ(m, pc, hit * bs, "probed cached_tokens");
    MCHECK_EQ(m, pn, nblocks - hit + matched_cached, "probed blocks_needed");
    size_t cached = 77777;
    kvp_status got = kvp_seq_admit(s->h, s->tok, n, &cached);
    expect_status(m, got, want, "kvp_seq_admit");
    if (got != KVP_OK) {
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused admit");
        return; /* the sequence stays, empty */
    }
    MCHECK_EQ(m, cached, hit * bs, "cached_tokens");
    const kvp_block *ids;
    size_t nb = 0, nt = 0;
    expect_status(m, kvp_seq_blocks(s->h, &ids, &nb, &nt), KVP_OK, "kvp_seq_blocks");
    MCHECK_EQ(m, nb, nblocks, "blocks after admit");
    for (size_t i = 0; i < hit; i++) {
        MCHECK_EQ(m, ids[i], matched[i], "hit block");
        kvp_block b = matched[i];
        if (m->b[b].state == KVP_BLOCK_CACHED) {
            m->b[b].state = KVP_BLOCK_IN_USE;
            m->b[b].ref = 0;
        }
        m->b[b].ref++;
    }
    for (size_t i = hit; i < nblocks; i++)
        take_fresh(m, ids[i], matched, hit);
    for (size_t i = hit; i < nblocks; i++)
        m->b[ids[i]].fill = i < nfull ? bs : (uint32_t)(n % bs);
    for (size_t i = hit; i < nfull; i++)
        publish(m, ids[i], &h[i]);
    memcpy(s->tab, ids, nblocks * sizeof *ids);
    s->nb = nblocks;
    s->ntok = n;
    m->pq += max_hit;
    m->ph += hit;
    m->pt += n;
    /* Admission into a sequence with tokens: busy. */
    if (below(m, 16) == 0) {
        m->op = "admit(busy)";
        fp = kvptest_fp(m->pool);
        expect_status(m, kvp_seq_admit(s->h, s->tok, 1, NULL), KVP_EBUSY, "kvp_seq_admit");
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused admit");
    }
}

static void op_append(model *m)
{
    m->op = "append";
    int k = pick_live(m);
    if (k < 0)
        return;
    mseq *s = &m->s[k];
    uint32_t bs = m->bs;
    size_t n = below(m, 2 * bs + 2);
    if (s->ntok + n > MTOK)
        n = MTOK - s->ntok;
    uint32_t t[MTOK];
    for (size_t i = 0; i < n; i++)
        t[i] = below(m, 3);
    size_t old = s->ntok, total = old + n;
    size_t old_fill = old % bs;
    size_t nblocks = (total + bs - 1) / bs, nfull = total / bs, first = old / bs;
    int cow = old_fill && n > 0 && m->b[s->tab[s->nb - 1]].ref > 1;
    size_t fresh = nblocks - s->nb;
    kvp_status want = fresh + (size_t)cow > free_count(m) ? KVP_EEXHAUSTED : KVP_OK;
    uint64_t fp = kvptest_fp(m->pool);
    kvp_status got = kvp_seq_append(s->h, t, n);
    expect_status(m, got, want, "kvp_seq_append");
    if (got != KVP_OK || n == 0) {
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused/empty append");
        return;
    }
    memcpy(s->tok + old, t, n * sizeof *t);
    const kvp_block *ids;
    size_t nb = 0, nt = 0;
    expect_status(m, kvp_seq_blocks(s->h, &ids, &nb, &nt), KVP_OK, "kvp_seq_blocks");
    MCHECK_EQ(m, nb, nblocks, "blocks after append");
    MCHECK_EQ(m, nt, total, "tokens after append");
    for (size_t i = 0; i + 1 < s->nb; i++)
        MCHECK_EQ(m, ids[i], s->tab[i], "unchanged table entry");
    if (s->nb) {
        kvp_block last = s->tab[s->nb - 1];
        if (cow) {
            if (ids[s->nb - 1] == last)
                mfail(m, "shared partial block %u written without a copy", (unsigned)last);
            take_fresh(m, ids[s->nb - 1], NULL, 0);
            m->b[ids[s->nb - 1]].fill = m->b[last].fill;
            drop_ref(m, last);
            m->cow++;
        } else {
            MCHECK_EQ(m, ids[s->nb - 1], last, "last block (no copy expected)");
        }
    }
    for (size_t i = s->nb; i < nblocks; i++)
        take_fresh(m, ids[i], NULL, 0);
    for (size_t i = first; i < nblocks; i++)
        m->b[ids[i]].fill = i < nfull ? bs : (uint32_t)(total % bs);
    s->ntok = total;
    memcpy(s->tab, ids, nblocks * sizeof *ids);
    s->nb = nblocks;
    if (nfull > first) {
        kvp_hash h[MTOK];
        seq_hashes(m, s, total, h, MTOK);
        for (size_t i = first; i < nfull; i++)
            publish(m, ids[i], &h[i]);
    }
}

static void op_truncate(model *m)
{
    m->op = "truncate";
    int k = pick_live(m);
    if (k < 0)
        return;
    mseq *s = &m->s[k];
    uint32_t bs = m->bs;
    if (below(m, 12) == 0) {
        m->op = "truncate(longer)";
        uint64_t fp = kvptest_fp(m->pool);
        expect_status(m, kvp_seq_truncate(s->h, s->tok, s->ntok + 1 + below(m, 3)), KVP_EINVAL,
                      "kvp_seq_truncate");
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused truncate");
        return;
    }
    uint32_t span = s->ntok < 2 * bs + 2 ? (uint32_t)s->ntok + 1 : 2 * bs + 2;
    size_t n = s->ntok - below(m, span), fill = n % bs, keep = (n + bs - 1) / bs;
    kvp_block last = fill ? s->tab[keep - 1] : KVP_NO_BLOCK;
    int copy = n < s->ntok && fill && (m->b[last].ref > 1 || m->b[last].pub);
    uint32_t sole = 0;
    for (size_t i = keep; i < s->nb; i++)
        sole += m->b[s->tab[i]].ref == 1;
    kvp_status want = copy && free_count(m) + sole == 0 ? KVP_EEXHAUSTED : KVP_OK;
    uint64_t fp = kvptest_fp(m->pool);
    kvp_status got = kvp_seq_truncate(s->h, s->tok, n);
    expect_status(m, got, want, "kvp_seq_truncate");
    if (got != KVP_OK || n == s->ntok) {
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused/empty truncate");
        return;
    }
    for (size_t i = s->nb; i-- > keep;)
        drop_ref(m, s->tab[i]);
    const kvp_block *ids;
    size_t nb = 0, nt = 0;
    expect_status(m, kvp_seq_blocks(s->h, &ids, &nb, &nt), KVP_OK, "kvp_seq_blocks");
    MCHECK_EQ(m, nb, keep, "blocks after truncate");
    MCHECK_EQ(m, nt, n, "tokens after truncate");
    for (size_t i = 0; i + 1 < keep; i++)
        MCHECK_EQ(m, ids[i], s->tab[i], "unchanged table entry");
    if (copy) {
        if (ids[keep - 1] == last)
            mfail(m, "truncated into shared/published block %u without a copy", (unsigned)last);
        take_fresh(m, ids[keep - 1], NULL, 0);
        m->b[ids[keep - 1]].fill = (uint32_t)fill;
        drop_ref(m, last);
        m->cow++;
    } else if (fill) {
        MCHECK_EQ(m, ids[keep - 1], last, "last block (no copy expected)");
        m->b[last].fill = (uint32_t)fill;
    }
    s->ntok = n;
    s->nb = keep;
    if (keep)
        memcpy(s->tab, ids, keep * sizeof *ids);
}

static void op_fork(model *m)
{
    m->op = "fork";
    int p = pick_live(m), k = free_slot(m);
    if (p < 0 || k < 0)
        return;
    mseq *ps = &m->s[p], *s = &m->s[k];
    kvp_seq *h = NULL;
    if (ps->nb == 0 && m->no_empty_fork)
        return;
    if (below(m, 10) == 0) {
        m->op = "fork(existing id)";
        uint64_t fp = kvptest_fp(m->pool);
        expect_status(m, kvp_seq_fork(ps->h, existing_id(m), &h), KVP_EOWNERACTIVE,
                      "kvp_seq_fork");
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused fork");
        return;
    }
    uint64_t id = m->next_id++;
    expect_status(m, kvp_seq_fork(ps->h, id, &h), KVP_OK, "kvp_seq_fork");
    *s = *ps;
    s->id = id;
    s->h = h;
    for (size_t i = 0; i < s->nb; i++)
        m->b[s->tab[i]].ref++;
}

static void op_destroy(model *m)
{
    m->op = "destroy";
    int k = pick_live(m);
    if (k < 0)
        return;
    mseq *s = &m->s[k];
    expect_status(m, kvp_seq_destroy(s->h), KVP_OK, "kvp_seq_destroy");
    for (size_t i = s->nb; i-- > 0;)
        drop_ref(m, s->tab[i]);
    s->live = 0;
    kvp_seq *h = NULL;
    expect_status(m, kvp_seq_find(m->pool, s->id, &h), KVP_ENOTFOUND, "kvp_seq_find");
}

static void op_evict(model *m)
{
    m->op = "evict";
    uint32_t n = 1 + below(m, 3), got = 99;
    expect_status(m, kvp_evict(m->pool, KVP_STREAM_SHARED, n, &got), KVP_OK, "kvp_evict");
    uint32_t want = 0;
    for (; want < n; want++) {
        kvp_block b = lru_cached(m, NULL, 0);
        if (b == KVP_NO_BLOCK)
            break;
        evict_block(m, b);
        m->b[b].free_stamp = ++m->stamp; /* vacant order: unspecified, unchecked */
    }
    MCHECK_EQ(m, got, want, "evicted");
}

static void op_reset(model *m)
{
    m->op = "reset_prefix_cache";
    int busy = 0;
    for (kvp_block b = 0; b < m->top; b++)
        busy |= !is_null(m, b) && m->b[b].state == KVP_BLOCK_IN_USE;
    uint64_t fp = kvptest_fp(m->pool);
    kvp_status got = kvp_reset_prefix_cache(m->pool);
    expect_status(m, got, busy ? KVP_EBUSY : KVP_OK, "kvp_reset_prefix_cache");
    if (busy) {
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused reset");
        return;
    }
    for (kvp_block b = 0; b < m->top; b++) {
        m->b[b].pub = 0;
        if (m->b[b].state == KVP_BLOCK_CACHED)
            m->b[b].state = KVP_BLOCK_VACANT;
    }
    push_ev(m, KVP_NO_BLOCK, NULL);
}

static void op_retire_top(model *m)
{
    m->op = "retire_top";
    kvp_block top = KVP_NO_BLOCK;
    for (kvp_block b = m->top; b-- > 0;)
        if (m->b[b].state != KVP_BLOCK_RETIRED) {
            top = b;
            break;
        }
    kvp_status want = KVP_OK;
    if (top == KVP_NO_BLOCK)
        want = KVP_EEXHAUSTED;
    else if (is_null(m, top))
        want = KVP_EINVAL;
    else if (m->b[top].state == KVP_BLOCK_IN_USE && free_count(m) == 0)
        want = KVP_EEXHAUSTED;
    uint64_t fp = kvptest_fp(m->pool);
    kvp_block retired = 12345, moved = 12345;
    kvp_status got = kvp_retire_top(m->pool, &retired, &moved);
    expect_status(m, got, want, "kvp_retire_top");
    if (got != KVP_OK) {
        MCHECK_EQ(m, kvptest_fp(m->pool), fp, "fingerprint after refused retire_top");
        return;
    }
    MCHECK_EQ(m, retired, top, "retired id");
    mblock *src = &m->b[top];
    if (src->state != KVP_BLOCK_IN_USE) {
        MCHECK_EQ(m, moved, KVP_NO_BLOCK, "moved_to of a free top block");
        if (src->pub)
            evict_block(m, top);
    } else {
        take_fresh(m, moved, NULL, 0);
        mblock *dst = &m->b[moved];
        dst->ref = src->ref;
        dst->fill = src->fill;
        dst->pub = src->pub;
        dst->hash = src->hash;
        dst->pub_stamp = src->pub_stamp;
        for (int i = 0; i < MSEQ; i++)
            if (m->s[i].live)
                for (size_t j = 0; j < m->s[i].nb; j++)
                    if (m->s[i].tab[j] == top)
                        m->s[i].tab[j] = moved;
    }
    memset(src, 0, sizeof *src);
    src->state = KVP_BLOCK_RETIRED;
}

static void op_extend(model *m)
{
    m->op = "extend";
    uint32_t n = 1 + below(m, 6);
    if (m->top + n > MB)
        return;
    uint32_t added = 0;
    expect_status(m, kvp_extend(m->pool, KVP_STREAM_SHARED, n, &added), KVP_OK, "kvp_extend");
    MCHECK_EQ(m, added, n, "blocks added");
    for (uint32_t i = 0; i < n; i++) {
        kvp_block b = KVP_NO_BLOCK;
        for (kvp_block r = 0; r < m->top; r++)
            if (m->b[r].state == KVP_BLOCK_RETIRED) {
                b = r;
                break;
            }
        if (b == KVP_NO_BLOCK)
            b = m->top++;
        memset(&m->b[b], 0, sizeof m->b[b]);
        m->b[b].state = KVP_BLOCK_VACANT;
        m->b[b].free_stamp = ++m->stamp;
    }
}

/* ---- comparison ------------------------------------------------------------ */

static void compare(model *m, int lookups)
{
    kvp_pool *pool = m->pool;
    /* eviction callbacks */
    MCHECK_EQ(m, m->rec.n, m->nev, "eviction callbacks");
    MCHECK_EQ(m, m->rec.bad, 0, "malformed eviction callbacks");
    for (size_t i = 0; i < m->nev && i < MEV && i < KVPTEST_EVREC_MAX; i++) {
        MCHECK_EQ(m, m->rec.cleared[i], m->ev_cleared[i], "callback kind");
        if (!m->ev_cleared[i]) {
            MCHECK_EQ(m, m->rec.block[i], m->ev_b[i], "evicted block");
            MCHECK_EQ(m, m->rec.hash[i], m->ev_h[i], "evicted hash");
        }
    }
    /* sequences */
    for (int i = 0; i < MSEQ; i++) {
        mseq *s = &m->s[i];
        if (!s->live)
            continue;
        const kvp_block *ids;
        size_t nb = 0, nt = 0;
        expect_status(m, kvp_seq_blocks(s->h, &ids, &nb, &nt), KVP_OK, "kvp_seq_blocks");
        MCHECK_EQ(m, nb, s->nb, "table length");
        MCHECK_EQ(m, nt, s->ntok, "token count");
        for (size_t j = 0; j < nb; j++)
            if (ids[j] != s->tab[j])
                mfail(m, "sequence %" PRIu64 " block %zu: got %u, expected %u", s->id, j,
                      (unsigned)ids[j], (unsigned)s->tab[j]);
    }
    /* blocks */
    uint64_t in_use = 0, vacant = 0, cached = 0, indexed = 0, managed = 0, tokens = 0;
    for (kvp_block b = 0; b < m->top; b++) {
        mblock *mb = &m->b[b];
        kvp_block_info bi;
        expect_status(m, kvp_block_get(pool, b, &bi), KVP_OK, "kvp_block_get");
        if (is_null(m, b)) {
            MCHECK_EQ(m, bi.is_null, 1, "null block flag");
            in_use++;
            managed++;
            continue;
        }
        if (bi.state != mb->state)
            mfail(m, "block %u state %d, expected %d", (unsigned)b, bi.state, mb->state);
        if (mb->state == KVP_BLOCK_RETIRED)
            continue;
        managed++;
        MCHECK_EQ(m, bi.published, mb->pub, "published");
        if (mb->pub && memcmp(bi.hash.b, mb->hash.b, 32) != 0)
            mfail(m, "block %u: hash differs", (unsigned)b);
        indexed += mb->pub;
        if (mb->state == KVP_BLOCK_IN_USE) {
            in_use++;
            tokens += mb->fill;
            if (bi.ref_count != mb->ref || bi.fill != mb->fill)
                mfail(m, "block %u: ref %u fill %u, expected ref %u fill %u", (unsigned)b,
                      bi.ref_count, bi.fill, mb->ref, mb->fill);
            MCHECK_EQ(m, bi.seq_refs, mb->ref, "sequence references");
            MCHECK_EQ(m, bi.anon_refs, 0, "anonymous references");
        } else {
            MCHECK_EQ(m, bi.ref_count, 0, "free block ref count");
            vacant += mb->state == KVP_BLOCK_VACANT;
            cached += mb->state == KVP_BLOCK_CACHED;
        }
    }
    kvp_stats st = kvptest_stats(pool);
    MCHECK_EQ(m, st.in_use, in_use, "stats.in_use");
    MCHECK_EQ(m, st.vacant, vacant, "stats.vacant");
    MCHECK_EQ(m, st.cached, cached, "stats.cached");
    MCHECK_EQ(m, st.free, vacant + cached, "stats.free");
    MCHECK_EQ(m, st.indexed, indexed, "stats.indexed");
    MCHECK_EQ(m, st.blocks, managed, "stats.blocks");
    MCHECK_EQ(m, st.cow_copies, m->cow, "stats.cow_copies");
    MCHECK_EQ(m, st.prefix_queries, m->pq, "stats.prefix_queries");
    MCHECK_EQ(m, st.prefix_hits, m->ph, "stats.prefix_hits");
    MCHECK_EQ(m, st.prefix_tokens_queried, m->pq * m->bs, "stats.prefix_tokens_queried");
    MCHECK_EQ(m, st.prefix_tokens_hit, m->ph * m->bs, "stats.prefix_tokens_hit");
    MCHECK_EQ(m, st.admitted_tokens, m->pt, "stats.admitted_tokens");
    MCHECK_EQ(m, st.tokens_in_use, tokens, "stats.tokens_in_use");
    MCHECK_EQ(m, st.owners, 0, "stats.owners");
    if (lookups) {
        for (kvp_block b = 0; b < m->top; b++) {
            if (!m->b[b].pub)
                continue;
            kvp_block got = KVP_NO_BLOCK;
            expect_status(m, kvp_lookup(pool, KVP_STREAM_SHARED, &m->b[b].hash, &got), KVP_OK,
                          "kvp_lookup");
            MCHECK_EQ(m, got, index_find(m, &m->b[b].hash), "lookup result");
        }
    }
    char msg[256];
    kvp_status cst = kvp_pool_check(pool, msg, sizeof msg);
    if (cst != KVP_OK)
        mfail(m, "kvp_pool_check: %s", msg);
}

/* ---- driver ------------------------------------------------------------------ */

static void run_config(const mcfg *c, size_t steps)
{
    static model mm;
    model *m = &mm;
    memset(m, 0, sizeof *m);
    m->c = c;
    m->bs = c->bs;
    const char *seed_env = getenv("KVP_SEQ_MODEL_SEED");
    m->rng = seed_env ? strtoull(seed_env, NULL, 0) : c->seed;
    const char *tr = getenv("KVP_SEQ_MODEL_TRACE");
    m->trace = tr && *tr == '1';
    const char *nef = getenv("KVP_SEQ_MODEL_NO_EMPTY_FORK");
    m->no_empty_fork = nef && *nef == '1';
    kvp_config cfg = kvptest_config(c->nblocks);
    cfg.block_size = c->bs;
    cfg.reuse = c->reuse;
    cfg.null_block = c->null_block;
    cfg.prefix_caching = c->prefix_caching;
    cfg.hash_alg = c->alg;
    kvptest_evrec_attach(&m->rec, &cfg);
    m->pool = kvptest_create(&cfg);
    m->top = c->nblocks;
    for (kvp_block b = 0; b < MB; b++)
        m->b[b].state = b < m->top ? KVP_BLOCK_VACANT : M_NONE;
    for (kvp_block b = 0; b < m->top; b++)
        m->b[b].free_stamp = 0; /* never used: equal stamps, only vacant */
    if (c->null_block)
        m->b[0].state = KVP_BLOCK_IN_USE;
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 64; i++)
            m->prompts[p][i] = below(m, 4) + (uint32_t)(p == 3 ? 10 : 0);
    m->next_id = 1;
    for (m->step = 0; m->step < steps; m->step++) {
        kvptest_evrec_reset(&m->rec);
        m->nev = 0;
        uint32_t r = below(m, 100);
        int live = live_count(m);
        uint32_t fc = free_count(m);
        /* Lean to destroy when the pool is tight or many sequences live. */
        if (live >= MSEQ || (fc < m->top / 8 && below(m, 2)))
            r = 60;
        if (r < 30)
            op_admit(m);
        else if (r < 50)
            op_append(m);
        else if (r < 55)
            op_truncate(m);
        else if (r < 60)
            op_fork(m);
        else if (r < 85)
            op_destroy(m);
        else if (r < 88)
            op_evict(m);
        else if (r < 90)
            op_reset(m);
        else if (r < 95)
            op_retire_top(m);
        else
            op_extend(m);
        if (m->trace)
            fprintf(stderr, "step %zu: %s\n", m->step, m->op);
        compare(m, m->step % 16 == 0);
    }
    kvp_stats st = kvptest_stats(m->pool);
    printf("    %zu steps: %" PRIu64 " admissions/appends, %" PRIu64 " hit blocks of %" PRIu64
           ", %" PRIu64 " cow, %" PRIu64 " evictions, %" PRIu64 " relocated, %" PRIu64
           " exhausted\n",
           steps, st.alloc_calls, m->ph, m->pq, m->cow, st.evictions, st.relocated,
           st.exhausted);
    kvp_pool_destroy(m->pool);
}

static const mcfg configs[] = {
    {16, 1, KVP_REUSE_LIFO, 0, 1, KVP_HASH_SHA256, 1},
    {24, 2, KVP_REUSE_LOWEST, 0, 1, KVP_HASH_SHA256, 2},
    {32, 4, KVP_REUSE_FIFO, 0, 1, KVP_HASH_XXH3_128, 3},
    {48, 8, KVP_REUSE_LIFO, 1, 1, KVP_HASH_SHA256, 4},
    {64, 3, KVP_REUSE_LOWEST, 1, 1, KVP_HASH_XXH3_128, 5},
    {20, 5, KVP_REUSE_FIFO, 1, 1, KVP_HASH_SHA256, 6},
    {40, 2, KVP_REUSE_FIFO, 0, 1, KVP_HASH_SHA256, 7},
    {64, 7, KVP_REUSE_LIFO, 0, 1, KVP_HASH_XXH3_128, 8},
    {32, 4, KVP_REUSE_LOWEST, 0, 0, KVP_HASH_SHA256, 9},
    {16, 2, KVP_REUSE_LOWEST, 1, 1, KVP_HASH_SHA256, 10},
};

#define STEPS_PER_CONFIG 30000

static void test_seq_model(void **state)
{
    int which = *(int *)*state;
    run_config(&configs[which], kvptest_steps(STEPS_PER_CONFIG));
}

static int idx[sizeof configs / sizeof configs[0]];

int main(void)
{
    struct CMUnitTest tests[sizeof configs / sizeof configs[0]];
    static char names[sizeof configs / sizeof configs[0]][64];
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        idx[i] = (int)i;
        const mcfg *c = &configs[i];
        snprintf(names[i], sizeof names[i], "seq_model_%zu_n%u_bs%u_r%d%s%s", i, c->nblocks,
                 c->bs, (int)c->reuse, c->null_block ? "_null" : "",
                 c->prefix_caching ? "" : "_nocache");
        tests[i].name = names[i];
        tests[i].test_func = test_seq_model;
        tests[i].setup_func = NULL;
        tests[i].teardown_func = NULL;
        tests[i].initial_state = &idx[i];
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
