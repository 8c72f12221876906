/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curve.c — `kvpool curve`: the exact LRU hit-rate curve of a trace from
 * reuse distances (why one pass is exact: curve.h), the optimal policy's
 * points beside it (belady.h), spatial sampling for traces too large to
 * track every block, and the planner's answers (--target).
 *
 * The pass keeps, per hash id seen, the time of its last touch.  Times are
 * handed out one per touch, so the times after an id's last touch that are
 * still some id's last touch (live) count the distinct ids touched since:
 * its stack depth.  A Fenwick tree counts the dead times (a touch makes the
 * id's previous time dead: one update per touch, one query per depth).
 * When times run out the live ones are renumbered 1..k in order and the
 * tree cleared, so memory follows the distinct ids, not the length of the
 * trace.  A request's depths are all read before any of its blocks is
 * touched again (the cache a request sees is the one before it), then its
 * blocks are touched tail first so that its first block ends on top.  Block j counts as a hit at
 * every capacity above the largest depth among blocks 0..j: the prefix rule
 * (for a prefix tree that largest depth is block j's own).
 *
 * Sampling (SHARDS, Waldspurger et al., FAST'15): only ids whose hash falls
 * below rate x 2^24 are tracked; a sampled depth d stands for d / rate
 * blocks and each sampled block for 1 / rate blocks.  A few very hot ids
 * (a system prompt's blocks) falling in or out of the sample sway the
 * number of sampled uses far from rate x uses, so the estimate counts
 * misses rather than hits (SHARDS-adj): hits(C) = uses - misses(C) / rate,
 * the difference going to the smallest distance.
 */
#define _POSIX_C_SOURCE 200809L

#include "curve.h"

#include "belady.h"
#include "common.h"
#include "output.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- id map --------------------------------------------------------------- */

/* Open addressing with linear probing, keys stored as id + 1 (0: empty; a
 * trace id is below 2^63, so id + 1 never wraps).  At most half full.  When
 * the ids are small (below `direct`, as when a trace numbers its blocks
 * densely), slot id is id's own slot and nothing is hashed. */
typedef struct slot {
    uint64_t key;
    uint64_t value;  /* pass: last touch time (0: none); dense: the new id */
    uint64_t parent; /* pass: the id before it in its first request, + 1; 0
                        for a first block */
    uint64_t misses; /* pass: its uses that miss at capacity pass.miss_at */
} slot;

typedef struct idmap {
    slot *s;
    uint64_t mask, n;
    uint64_t direct;  /* > 0: s has this many slots, indexed by id */
} idmap;

/* splitmix64's finaliser: the map's hash and the sampling hash. */
static inline uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* An empty map with room for `expect` ids before it grows.  Returns -1 when
 * memory runs out. */
static int map_init(idmap *m, uint64_t expect)
{
    uint64_t cap = 1024;
    while (cap < 2 * expect)
        cap *= 2;
    m->s = calloc(cap, sizeof *m->s);
    m->mask = cap - 1;
    m->n = 0;
    m->direct = 0;
    return m->s ? 0 : -1;
}

/* Make room for `extra` more ids without passing half full, so that the
 * next `extra` insertions move no slot.  Returns -1 when memory runs out
 * (the map is unchanged). */
static int map_reserve(idmap *m, uint64_t extra)
{
    if (m->direct || 2 * (m->n + extra) <= m->mask + 1)
        return 0;
    idmap big;
    if (map_init(&big, m->n + extra))
        return -1;
    for (uint64_t j = 0; j <= m->mask; j++)
        if (m->s[j].key) {
            uint64_t k = mix(m->s[j].key) & big.mask;
            while (big.s[k].key)
                k = (k + 1) & big.mask;
            big.s[k] = m->s[j];
        }
    big.n = m->n;
    free(m->s);
    *m = big;
    return 0;
}

/* The slot of `id`, inserted (value and parent 0) when absent, which needs
 * room made by map_reserve; *fresh tells which. */
static slot *map_get(idmap *m, uint64_t id, int *fresh)
{
    uint64_t key = id + 1;
    if (m->direct) {
        slot *s = &m->s[id];
        *fresh = s->key == 0;
        s->key = key;
        return s;
    }
    for (uint64_t i = mix(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->s[i].key == key) {
            *fresh = 0;
            return &m->s[i];
        }
        if (m->s[i].key == 0) {
            m->s[i].key = key;
            m->n++;
            *fresh = 1;
            return &m->s[i];
        }
    }
}

/* ---- dense ids (belady.h) ------------------------------------------------- */

/* See curve.h. */
int kvpt_dense_build(const kvpt_trace *t, kvpt_dense *d)
{
    memset(d, 0, sizeof *d);
    idmap m;
    d->id = malloc((t->total_blocks ? t->total_blocks : 1) * sizeof *d->id);
    if (!d->id || map_init(&m, 1024)) {
        free(d->id);
        d->id = NULL;
        kvpt_error("out of memory");
        return -1;
    }
    for (uint64_t k = 0; k < t->total_blocks; k++) {
        int fresh;
        if (map_reserve(&m, 1)) {
            free(m.s);
            kvpt_dense_free(d);
            kvpt_error("out of memory");
            return -1;
        }
        slot *s = map_get(&m, t->ids[k], &fresh);
        if (fresh && d->n_distinct == UINT32_MAX) {
            free(m.s);
            kvpt_dense_free(d);
            kvpt_error("more than %u distinct hash ids", UINT32_MAX - 1);
            return -1;
        }
        if (fresh)
            s->value = d->n_distinct++;
        d->id[k] = (uint32_t)s->value;
    }
    free(m.s);
    return 0;
}

/* See curve.h. */
void kvpt_dense_free(kvpt_dense *d)
{
    free(d->id);
    memset(d, 0, sizeof *d);
}

/* ---- the reuse-distance pass ---------------------------------------------- */

/* The fewest distinct ids a sample may track: with fewer, reuse distances
 * rest on too few ids for the bounds below to hold. */
#define SAMPLE_MIN_IDS 1000

/* Sampling threshold scale: an id is sampled when mix(id) mod 2^24 is below
 * rate x 2^24. */
#define SAMPLE_BITS 24
#define SAMPLE_ALL (1u << SAMPLE_BITS)
/* owner[] value of a time whose mark was removed. */
#define DEAD UINT64_MAX

/* Touch times 1..cap: a Fenwick tree of the dead ones and, per time, the
 * id whose last touch it is (or DEAD). */
typedef struct timeline {
    uint32_t *tree;
    uint64_t *owner;
    uint64_t cap, now;  /* now: the next time to hand out */
    uint64_t live, dead; /* times handed out = live + dead; live = ids */
} timeline;

/* Mark time i dead. */
static inline void fw_kill(timeline *c, uint64_t i)
{
    c->owner[i] = DEAD;
    c->dead++;
    for (; i <= c->cap; i += i & (~i + 1))
        c->tree[i]++;
}

/* Dead times among 1..i. */
static inline uint64_t fw_prefix(const timeline *c, uint64_t i)
{
    uint64_t sum = 0;
    for (; i; i -= i & (~i + 1))
        sum += c->tree[i];
    return sum;
}

/* Renumber the live times 1..k in order (each id's slot follows), doubling
 * the capacity until they fill at most half of it with room for `need` more
 * times, and clear the tree (no time is dead).  O(cap).  Returns -1 when
 * memory runs out. */
static int clock_compact(timeline *c, idmap *m, uint64_t need)
{
    uint64_t k = 0;
    for (uint64_t i = 1; i < c->now; i++)
        if (c->owner[i] != DEAD) {
            int fresh;
            c->owner[++k] = c->owner[i];
            map_get(m, c->owner[k], &fresh)->value = k; /* present: inserts nothing */
        }
    if (2 * k + need > c->cap) {
        uint64_t cap = 2 * c->cap;
        while (2 * k + need > cap)
            cap *= 2;
        uint32_t *tree = realloc(c->tree, (cap + 1) * sizeof *tree);
        if (tree)
            c->tree = tree;
        uint64_t *owner = realloc(c->owner, (cap + 1) * sizeof *owner);
        if (owner)
            c->owner = owner;
        if (!tree || !owner)
            return -1;
        c->cap = cap;
    }
    memset(c->tree, 0, (c->cap + 1) * sizeof *c->tree);
    c->now = k + 1;
    c->dead = 0;
    return 0;
}

/* One pass's histogram: hits[b] blocks and toks[b] tokens first hit at
 * capacity b + 1 (their largest prefix depth is b, scaled when sampled). */
typedef struct pass {
    uint64_t *hits, *toks;
    uint64_t n, cap;        /* buckets used / allocated */
    uint64_t distinct;      /* ids tracked */
    uint64_t uses, use_tokens;        /* blocks and tokens of the admitted requests */
    uint64_t sampled, sampled_tokens; /* of those, tracked */
    int tree;               /* no tracked id had two parents */
    size_t bad_request;     /* the first request giving one a second parent */
    uint64_t miss_at;       /* the capacity slot.misses counts misses at */
    double miss_sq;         /* the sum over tracked ids of misses squared */
} pass;

/* Count `blocks` blocks and `tokens` tokens in bucket b.  Returns -1 when
 * memory runs out. */
static int pass_count(pass *p, uint64_t b, uint64_t blocks, uint64_t tokens)
{
    if (b >= p->cap) {
        uint64_t cap = p->cap ? p->cap : 4096;
        while (cap <= b)
            cap *= 2;
        uint64_t *h = realloc(p->hits, cap * sizeof *h);
        if (h)
            p->hits = h;
        uint64_t *k = realloc(p->toks, cap * sizeof *k);
        if (k)
            p->toks = k;
        if (!h || !k)
            return -1;
        memset(p->hits + p->cap, 0, (cap - p->cap) * sizeof *h);
        memset(p->toks + p->cap, 0, (cap - p->cap) * sizeof *k);
        p->cap = cap;
    }
    p->hits[b] += blocks;
    p->toks[b] += tokens;
    if (b >= p->n)
        p->n = b + 1;
    return 0;
}

/* Free a pass's arrays. */
static void pass_free(pass *p)
{
    free(p->hits);
    free(p->toks);
    memset(p, 0, sizeof *p);
}

/* Tokens of block i of request q: 512, the last one what is left. */
static inline uint64_t block_tokens(const kvpt_trace *t, size_t q, uint64_t i, uint64_t n)
{
    return i + 1 < n ? KVPT_TRACE_BLOCK_TOKENS
                     : t->input_length[q] - (n - 1) * KVPT_TRACE_BLOCK_TOKENS;
}

/*
 * The pass of the file comment over the requests of at most `max_len`
 * blocks, tracking the ids sampled at `threshold` / 2^24 (SAMPLE_ALL: every
 * id, exact), into *p (zeroed first).  Returns 0, or -1 with "out of
 * memory" printed.  O(blocks x log(distinct ids)) time, O(distinct ids +
 * largest request) memory.
 */
static int reuse_pass(const kvpt_trace *t, uint64_t max_len, uint32_t threshold, pass *p)
{
    memset(p, 0, sizeof *p);
    p->tree = 1;
    p->miss_at = max_len < t->max_blocks ? max_len : t->max_blocks;
    idmap m = {0};
    timeline c = {0};
    slot **slots = malloc((t->max_blocks ? t->max_blocks : 1) * sizeof *slots);
    c.cap = 1u << 16;
    c.now = 1;
    c.tree = calloc(c.cap + 1, sizeof *c.tree);
    c.owner = malloc((c.cap + 1) * sizeof *c.owner);
    int rc = -1;
    /* every id tracked and none far beyond the count of ids: index by id */
    uint64_t top = 0;
    for (uint64_t k = 0; threshold == SAMPLE_ALL && k < t->total_blocks; k++)
        top = t->ids[k] > top ? t->ids[k] : top;
    if (threshold == SAMPLE_ALL && top < 2 * t->total_blocks + 1024) {
        m.direct = top + 1;
        m.s = calloc(m.direct, sizeof *m.s);
    } else if (map_init(&m, 1u << 16)) {
        m.s = NULL;
    }
    if (!slots || !c.tree || !c.owner || !m.s)
        goto out;
    for (size_t q = 0; q < t->n_requests; q++) {
        const uint64_t *ids = t->ids + t->offset[q];
        uint64_t n = t->offset[q + 1] - t->offset[q], k = 0, deepest = 0;
        if (n > max_len)
            continue;
        p->uses += n;
        p->use_tokens += t->input_length[q];
        if (map_reserve(&m, n)) /* the slots below stay put until the next request */
            goto out;
        /* depths first: the cache as it was before this request */
        for (uint64_t i = 0; i < n; i++) {
            if (threshold != SAMPLE_ALL && (mix(ids[i] + 1) & (SAMPLE_ALL - 1)) >= threshold)
                continue;
            int fresh;
            slot *s = map_get(&m, ids[i], &fresh);
            uint64_t parent = i ? ids[i - 1] + 1 : 0;
            if (fresh)
                s->parent = parent;
            else if (s->parent != parent && p->tree) {
                p->tree = 0;
                p->bad_request = q;
            }
            /* live times after s->value: those handed out after it, less the dead */
            uint64_t d = s->value ? (c.now - 1 - s->value) - (c.dead - fw_prefix(&c, s->value))
                                  : UINT64_MAX;
            if (d != UINT64_MAX && threshold != SAMPLE_ALL)
                d = (uint64_t)((double)d * SAMPLE_ALL / threshold);
            if (k == 0 || d > deepest)
                deepest = d;
            if (deepest >= p->miss_at) { /* (m + 1)^2 - m^2 */
                p->miss_sq += 2.0 * (double)s->misses + 1;
                s->misses++;
            }
            uint64_t tok = block_tokens(t, q, i, n);
            p->sampled++;
            p->sampled_tokens += tok;
            if (deepest != UINT64_MAX && pass_count(p, deepest, 1, tok))
                goto out;
            slots[k++] = s;
        }
        /* then touch, tail first, so the first block ends on top */
        if (c.now + k > c.cap + 1 && clock_compact(&c, &m, k))
            goto out;
        for (uint64_t j = k; j-- > 0;) {
            slot *s = slots[j];
            if (s->value)
                fw_kill(&c, s->value);
            else
                c.live++;
            s->value = c.now++;
            c.owner[s->value] = s->key - 1;
        }
    }
    p->distinct = c.live;
    rc = 0;
out:
    if (rc)
        kvpt_error("out of memory");
    free(slots);
    free(c.tree);
    free(c.owner);
    free(m.s);
    return rc;
}

/* ---- the curve of one trace ----------------------------------------------- */

/* Options of one `kvpool curve` run. */
typedef struct opts {
    const char *csv, *plot;
    kvpt_output csv_out, plot_out; /* checked before any work */
    int json, optimal, all, sample_check;
    uint32_t threshold;     /* sampling: SAMPLE_ALL = exact */
    double target_share, target_rate; /* < 0: not asked */
    uint64_t *marks;
    size_t n_marks;
} opts;

/* One trace's results.  blocks[C], tokens[C]: hits at capacity C for
 * from <= C <= hi (the one pass covers lo..hi, lo = the largest request). */
typedef struct result {
    const char *path;
    uint64_t requests, blocks_requested, tokens_requested, largest;
    uint64_t lo, hi, from, distinct;
    uint64_t *blocks, *tokens;
    uint64_t unl_blocks, unl_tokens;
    int tree;
    size_t bad_request;
    double load_seconds, seconds, optimal_seconds;
    double err_max, err_mean;   /* --sample-check */
    uint64_t sample_ids;        /* --sample: the distinct ids tracked */
    double sample_bound;        /* --sample: the hit rate's error bound */
    uint64_t resolved;          /* --sample: the smallest capacity resolved */
    /* the table's capacities, with their hits; optimal only at C >= lo */
    uint64_t *grid, *grid_blocks, *grid_tokens, *opt_blocks, *opt_tokens;
    size_t n_grid;
} result;

/* Release a result's arrays. */
static void result_free(result *r)
{
    free(r->blocks);
    free(r->tokens);
    free(r->grid);
    free(r->grid_blocks);
    free(r->grid_tokens);
    free(r->opt_blocks);
    free(r->opt_tokens);
}

/* The whole trace's hits from `count` sampled hits below some capacity >=
 * 1 (SHARDS-adj: uses minus the scaled misses; see the file comment). */
static uint64_t scaled(uint64_t count, uint64_t sampled, uint64_t uses, uint32_t threshold)
{
    if (threshold == SAMPLE_ALL)
        return count;
    double miss = (double)(sampled - count) * SAMPLE_ALL / threshold;
    return miss >= (double)uses ? 0 : uses - (uint64_t)llround(miss);
}

/* Fill blocks[C], tokens[C] for C in [c0, c1] (c0 >= 1) from pass p
 * (cumulative buckets below C), scaled. */
static void fill_from_pass(result *r, const pass *p, uint64_t c0, uint64_t c1, uint32_t threshold)
{
    uint64_t b = 0, k = 0;
    for (uint64_t i = 0; i + 1 < c0 && i < p->n; i++) {
        b += p->hits[i];
        k += p->toks[i];
    }
    for (uint64_t c = c0; c <= c1; c++) {
        if (c - 1 < p->n) {
            b += p->hits[c - 1];
            k += p->toks[c - 1];
        }
        r->blocks[c] = scaled(b, p->sampled, p->uses, threshold);
        r->tokens[c] = scaled(k, p->sampled_tokens, p->use_tokens, threshold);
    }
}

/* The hits at capacity c below the largest request: one pass over the
 * requests of at most c blocks.  Returns -1 (printed) when memory runs out. */
static int hits_below(const kvpt_trace *t, uint64_t c, uint32_t threshold, uint64_t *blocks,
                      uint64_t *tokens)
{
    pass p;
    if (reuse_pass(t, c, threshold, &p))
        return -1;
    uint64_t b = 0, k = 0;
    for (uint64_t i = 0; i < c && i < p.n; i++) {
        b += p.hits[i];
        k += p.toks[i];
    }
    *blocks = scaled(b, p.sampled, p.uses, threshold);
    *tokens = scaled(k, p.sampled_tokens, p.use_tokens, threshold);
    pass_free(&p);
    return 0;
}

/* --all-capacities: fill capacities 1 .. lo-1, one pass per distinct
 * request length below the largest (curve.h).  Returns -1 (printed). */
static int fill_below(result *r, const kvpt_trace *t, uint32_t threshold)
{
    unsigned char *has = calloc(r->lo + 1, 1);
    if (!has) {
        kvpt_error("out of memory");
        return -1;
    }
    for (size_t q = 0; q < t->n_requests; q++)
        has[t->offset[q + 1] - t->offset[q]] = 1;
    r->blocks[0] = r->tokens[0] = 0;
    uint64_t c = 1;
    for (; c < r->lo && !has[c]; c++) /* every request rejected */
        r->blocks[c] = r->tokens[c] = 0;
    while (c < r->lo) {
        uint64_t end = c + 1;
        while (end < r->lo && !has[end])
            end++;
        pass p;
        if (reuse_pass(t, c, threshold, &p)) {
            free(has);
            return -1;
        }
        fill_from_pass(r, &p, c, end - 1, threshold);
        pass_free(&p);
        c = end;
    }
    free(has);
    return 0;
}

/* Append capacity c to the sorted, duplicate-free grid g[0 .. *n). */
static void grid_add(uint64_t *g, size_t *n, uint64_t c)
{
    size_t i = *n;
    while (i > 0 && g[i - 1] > c)
        i--;
    if (i > 0 && g[i - 1] == c)
        return;
    memmove(g + i + 1, g + i, (*n - i) * sizeof *g);
    g[i] = c;
    (*n)++;
}

/* The table's capacities: from, lo, hi, 1-2-5 steps between, and the
 * marks; each with its hits (marks below `from` by their own pass) and,
 * with --optimal, the optimal policy's at C >= lo.  Returns -1 (printed). */
static int fill_grid(result *r, const kvpt_trace *t, const opts *o)
{
    size_t cap = 3 * 20 + 3 + o->n_marks;
    r->grid = malloc(cap * sizeof *r->grid);
    r->grid_blocks = malloc(cap * sizeof *r->grid_blocks);
    r->grid_tokens = malloc(cap * sizeof *r->grid_tokens);
    r->opt_blocks = calloc(cap, sizeof *r->opt_blocks);
    r->opt_tokens = calloc(cap, sizeof *r->opt_tokens);
    if (!r->grid || !r->grid_blocks || !r->grid_tokens || !r->opt_blocks || !r->opt_tokens) {
        kvpt_error("out of memory");
        return -1;
    }
    size_t n = 0;
    grid_add(r->grid, &n, r->from);
    grid_add(r->grid, &n, r->lo);
    grid_add(r->grid, &n, r->hi);
    for (uint64_t dec = 1; dec <= UINT64_MAX / 10 && dec <= r->hi; dec *= 10)
        for (int k = 0; k < 3; k++) {
            uint64_t c = dec * (uint64_t[]){1, 2, 5}[k];
            if (c > r->from && c < r->hi)
                grid_add(r->grid, &n, c);
        }
    for (size_t i = 0; i < o->n_marks; i++)
        grid_add(r->grid, &n, o->marks[i]);
    r->n_grid = n;
    for (size_t i = 0; i < n; i++) {
        uint64_t c = r->grid[i];
        if (c >= r->from && c <= r->hi) {
            r->grid_blocks[i] = r->blocks[c];
            r->grid_tokens[i] = r->tokens[c];
        } else if (c > r->hi) { /* nothing is evicted any more */
            r->grid_blocks[i] = r->unl_blocks;
            r->grid_tokens[i] = r->unl_tokens;
        } else if (hits_below(t, c, o->threshold, &r->grid_blocks[i], &r->grid_tokens[i])) {
            return -1;
        }
    }
    if (!o->optimal)
        return 0;
    double t0 = kvpt_now();
    kvpt_dense d;
    uint64_t *next = NULL;
    int rc = -1;
    if (kvpt_dense_build(t, &d))
        return -1;
    if (kvpt_next_use(t, &d, &next))
        goto out;
    for (size_t i = 0; i < n; i++)
        if (r->grid[i] >= r->lo &&
            kvpt_belady(t, &d, next, r->grid[i], &r->opt_blocks[i], &r->opt_tokens[i]))
            goto out;
    rc = 0;
out:
    free(next);
    kvpt_dense_free(&d);
    r->optimal_seconds = kvpt_now() - t0;
    return rc;
}

/* --sample-check: the exact pass too, and the largest and mean absolute
 * difference of the block hit rate over lo..hi.  Returns -1 (printed). */
static int sample_check(result *r, const kvpt_trace *t)
{
    pass p;
    if (reuse_pass(t, UINT64_MAX, SAMPLE_ALL, &p))
        return -1;
    uint64_t hi = p.distinct > r->lo ? p.distinct : r->lo, b = 0;
    double sum = 0, worst = 0, total = (double)r->blocks_requested;
    for (uint64_t c = 1; c <= hi; c++) {
        if (c - 1 < p.n)
            b += p.hits[c - 1];
        if (c < r->lo)
            continue;
        uint64_t est = c <= r->hi ? r->blocks[c] : r->unl_blocks;
        double e = fabs((double)est - (double)b) / total;
        sum += e;
        worst = e > worst ? e : worst;
    }
    pass_free(&p);
    r->err_max = worst;
    r->err_mean = sum / (double)(hi - r->lo + 1);
    return 0;
}

/*
 * The error bounds of a sampled pass p into r, or a refusal when it tracked
 * fewer than SAMPLE_MIN_IDS ids (returns -1, printed).  Ids fall in the
 * sample independently with probability q, and the estimate of the hits at
 * a capacity C is the uses less the tracked ids' misses over q: its
 * variance over the sample is (1 - q) / q^2 times the sum of their squared
 * misses, largest at the smallest capacity, so two standard errors there
 * bound the hit rate's at every capacity.  A tracked reuse distance d
 * stands for d / q blocks, counted from about q x d ids: its relative
 * standard error is 1 / sqrt(q x d), within 10% at two standard errors
 * from d = 400 / q up, the smallest capacity the sample resolves.  The
 * bound is completed by band_of once the curve is known.
 */
static int sample_bounds(result *r, const pass *p, const opts *o)
{
    double q = (double)o->threshold / SAMPLE_ALL;
    r->sample_ids = p->distinct;
    if (p->distinct < SAMPLE_MIN_IDS) {
        /* none tracked: the trace has no more distinct blocks than blocks */
        double need = p->distinct ? q * SAMPLE_MIN_IDS / (double)p->distinct
                                  : SAMPLE_MIN_IDS / (double)(p->uses ? p->uses : 1);
        kvpt_error("%s: --sample %.3g tracks %llu distinct blocks, fewer than the %d an error "
                   "bound needs: use --sample %.2g or more, or leave out --sample",
                   kvpt_safe_text(r->path), q, (unsigned long long)p->distinct, SAMPLE_MIN_IDS,
                   need < 1 ? ceil(need * 1.2 * 1000) / 1000 : 1.0);
        return -1;
    }
    r->sample_bound = p->uses ? 2 * sqrt((1 - q) * p->miss_sq) / (q * (double)p->uses) : 0;
    r->resolved = (uint64_t)ceil(400 / q);
    return 0;
}

/* The most the estimated block hit rate changes between capacities C / 1.1
 * and 1.1 C, for C from r->resolved (or the largest request) up: what a
 * capacity known within 10% adds to the hit rate's error. */
static double band_of(const result *r)
{
    uint64_t worst = 0;
    uint64_t c0 = r->resolved > r->lo ? r->resolved : r->lo;
    for (uint64_t c = c0; c <= r->hi; c++) {
        uint64_t a = (uint64_t)floor((double)c / 1.1), b = (uint64_t)ceil((double)c * 1.1);
        uint64_t d = r->blocks[b < r->hi ? b : r->hi] - r->blocks[a > r->lo ? a : r->lo];
        worst = d > worst ? d : worst;
    }
    return r->blocks_requested ? (double)worst / (double)r->blocks_requested : 0;
}

/* Load one trace and compute everything the options ask for into *r.
 * Returns 0, or -1 with the error printed. */
static int curve_one(const char *path, const opts *o, result *r)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    kvpt_trace t;
    if (kvpt_trace_load(path, &t))
        return -1;
    r->load_seconds = t.load_seconds;
    r->requests = t.n_requests;
    r->blocks_requested = t.total_blocks;
    r->tokens_requested = t.total_input;
    r->largest = t.max_blocks;
    r->lo = t.max_blocks;
    int rc = -1;
    double t0 = kvpt_now();
    pass p;
    if (reuse_pass(&t, UINT64_MAX, o->threshold, &p))
        goto out;
    r->tree = p.tree;
    r->bad_request = p.bad_request;
    if (o->threshold != SAMPLE_ALL && sample_bounds(r, &p, o)) {
        pass_free(&p);
        goto out;
    }
    r->distinct = o->threshold == SAMPLE_ALL
                      ? p.distinct
                      : (uint64_t)llround((double)p.distinct * SAMPLE_ALL / o->threshold);
    r->hi = r->distinct > r->lo ? r->distinct : r->lo;
    if (p.n > r->hi)
        r->hi = p.n;
    r->from = o->all ? 1 : r->lo;
    r->blocks = malloc((r->hi + 1) * sizeof *r->blocks);
    r->tokens = malloc((r->hi + 1) * sizeof *r->tokens);
    if (!r->blocks || !r->tokens) {
        kvpt_error("out of memory");
        pass_free(&p);
        goto out;
    }
    fill_from_pass(r, &p, r->lo, r->hi, o->threshold);
    pass_free(&p);
    if (o->threshold != SAMPLE_ALL)
        r->sample_bound += band_of(r);
    r->unl_blocks = r->blocks[r->hi];
    r->unl_tokens = r->tokens[r->hi];
    if (o->all && fill_below(r, &t, o->threshold))
        goto out;
    r->seconds = kvpt_now() - t0;
    if (o->sample_check && o->threshold != SAMPLE_ALL && sample_check(r, &t))
        goto out;
    rc = fill_grid(r, &t, o);
out:
    kvpt_trace_free(&t);
    return rc;
}

/* The smallest capacity in from..hi with at least `need` hit blocks, or 0. */
static uint64_t smallest_reaching(const result *r, double need)
{
    for (uint64_t c = r->from; c <= r->hi; c++)
        if ((double)r->blocks[c] >= need)
            return c;
    return 0;
}

/* The hit blocks a --target asks for: a share of the unlimited hits, or a
 * hit rate; negative when neither was asked. */
static double target_blocks(const result *r, const opts *o)
{
    if (o->target_share >= 0)
        return o->target_share * (double)r->unl_blocks;
    if (o->target_rate >= 0)
        return o->target_rate * (double)r->blocks_requested;
    return -1;
}

/* ---- output --------------------------------------------------------------- */

/* Hits over requested, 0 for nothing requested. */
static double rate(uint64_t hit, uint64_t of)
{
    return of ? (double)hit / (double)of : 0.0;
}

/* Print one trace's summary and table. */
static void print_text(const result *r, const opts *o)
{
    printf("%s: %llu requests, %llu blocks, %llu distinct, largest request %llu blocks\n",
           kvpt_safe_text(r->path), (unsigned long long)r->requests,
           (unsigned long long)r->blocks_requested,
           (unsigned long long)r->distinct, (unsigned long long)r->largest);
    printf("LRU curve for capacities %llu..%llu %s in %.3f s (load %.3f s)%s\n",
           (unsigned long long)r->from, (unsigned long long)r->hi,
           o->threshold != SAMPLE_ALL ? "estimated from a sample"
           : r->tree                  ? "exact (prefix tree)"
                                      : "NOT exact (not a prefix tree)",
           r->seconds, r->load_seconds,
           o->optimal ? "; optimal policy at capacities from the largest request" : "");
    if (!r->tree)
        printf("warning: request %zu gives a hash id a second parent: a replay may differ "
               "from this curve\n", r->bad_request + 1);
    if (o->threshold != SAMPLE_ALL)
        printf("sample: %llu distinct blocks (rate %.3g); hit rates within +-%.4f, capacities "
               "within 10%% from %llu up (2 standard errors)\n",
               (unsigned long long)r->sample_ids, (double)o->threshold / SAMPLE_ALL,
               r->sample_bound, (unsigned long long)r->resolved);
    if (o->sample_check && o->threshold != SAMPLE_ALL)
        printf("sampling error against the exact curve: max %.5f, mean %.5f (block hit "
               "rate)\n", r->err_max, r->err_mean);
    printf("unlimited: hit rate %.4f, tokens hit rate %.4f\n",
           rate(r->unl_blocks, r->blocks_requested), rate(r->unl_tokens, r->tokens_requested));
    static const char *const headers[] = {"capacity", "blocks_hit", "hit_rate",
                                          "tokens_hit_rate", "share_of_unlimited",
                                          "optimal_hit_rate"};
    kvpt_table *tab = kvpt_table_new(o->optimal ? 6 : 5, headers, "rrrrrr");
    if (!tab)
        return;
    for (size_t i = 0; i < r->n_grid; i++) {
        kvpt_table_cell(tab, "%llu", (unsigned long long)r->grid[i]);
        kvpt_table_cell(tab, "%llu", (unsigned long long)r->grid_blocks[i]);
        kvpt_table_cell(tab, "%.4f", rate(r->grid_blocks[i], r->blocks_requested));
        kvpt_table_cell(tab, "%.4f", rate(r->grid_tokens[i], r->tokens_requested));
        kvpt_table_cell(tab, "%.4f", rate(r->grid_blocks[i], r->unl_blocks));
        if (o->optimal && r->grid[i] >= r->lo)
            kvpt_table_cell(tab, "%.4f", rate(r->opt_blocks[i], r->blocks_requested));
        else if (o->optimal)
            kvpt_table_cell(tab, "-");
    }
    kvpt_table_print(tab, stdout);
    kvpt_table_free(tab);
    double need = target_blocks(r, o);
    if (need >= 0) {
        uint64_t c = smallest_reaching(r, need);
        char asked[96];
        if (o->target_share >= 0)
            snprintf(asked, sizeof asked, "%g of the unlimited hit rate (hit rate %.4f)",
                     o->target_share, need / (double)r->blocks_requested);
        else
            snprintf(asked, sizeof asked, "hit rate %g", o->target_rate);
        if (c)
            printf("target %s: reached at capacity %llu (hit rate %.4f)\n", asked,
                   (unsigned long long)c, rate(r->blocks[c], r->blocks_requested));
        else
            printf("target %s: not reached at any capacity\n", asked);
        if (c && o->threshold != SAMPLE_ALL)
            printf("  estimated: hit rate +-%.4f; %s\n", r->sample_bound,
                   c >= r->resolved ? "capacity within 10%"
                                    : "capacity below what the sample resolves (use a larger "
                                      "--sample)");
    }
    fputc('\n', stdout);
}

/* One trace as a JSON object (documented in `kvpool curve --help`). */
static int print_json(const result *r, const opts *o)
{
    json_t *points = json_array();
    for (size_t i = 0; points && i < r->n_grid; i++) {
        json_t *pt = json_pack("{s:I, s:I, s:f, s:I, s:f}", "capacity", (json_int_t)r->grid[i],
                               "blocks_hit", (json_int_t)r->grid_blocks[i], "hit_rate",
                               rate(r->grid_blocks[i], r->blocks_requested), "tokens_hit",
                               (json_int_t)r->grid_tokens[i], "tokens_hit_rate",
                               rate(r->grid_tokens[i], r->tokens_requested));
        if (pt && o->optimal && r->grid[i] >= r->lo)
            json_object_set_new(pt, "optimal", json_pack("{s:I, s:f, s:I, s:f}",
                "blocks_hit", (json_int_t)r->opt_blocks[i], "hit_rate",
                rate(r->opt_blocks[i], r->blocks_requested), "tokens_hit",
                (json_int_t)r->opt_tokens[i], "tokens_hit_rate",
                rate(r->opt_tokens[i], r->tokens_requested)));
        json_array_append_new(points, pt);
    }
    json_t *obj = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:f, s:I, s:I, "
                            "s:{s:I, s:f, s:I, s:f}, s:f, s:f, s:o}",
        "trace", r->path, "requests", (json_int_t)r->requests,
        "blocks_requested", (json_int_t)r->blocks_requested,
        "tokens_requested", (json_int_t)r->tokens_requested,
        "distinct_blocks", (json_int_t)r->distinct, "largest_request", (json_int_t)r->largest,
        "prefix_tree", r->tree, "exact", r->tree && o->threshold == SAMPLE_ALL,
        "sample_rate", (double)o->threshold / SAMPLE_ALL,
        "from_capacity", (json_int_t)r->from, "to_capacity", (json_int_t)r->hi,
        "unlimited", "blocks_hit", (json_int_t)r->unl_blocks,
        "hit_rate", rate(r->unl_blocks, r->blocks_requested),
        "tokens_hit", (json_int_t)r->unl_tokens,
        "tokens_hit_rate", rate(r->unl_tokens, r->tokens_requested),
        "seconds", r->seconds, "load_seconds", r->load_seconds, "points", points);
    if (!obj)
        return kvpt_error("cannot render JSON");
    if (o->optimal)
        json_object_set_new(obj, "optimal_seconds", json_real(r->optimal_seconds));
    if (o->threshold != SAMPLE_ALL)
        json_object_set_new(obj, "sample", json_pack("{s:I, s:f, s:I}", "distinct_blocks",
                                                     (json_int_t)r->sample_ids, "hit_rate_bound",
                                                     r->sample_bound, "resolved_from",
                                                     (json_int_t)r->resolved));
    if (o->sample_check && o->threshold != SAMPLE_ALL)
        json_object_set_new(obj, "sample_error", json_pack("{s:f, s:f}", "max_abs",
                                                           r->err_max, "mean_abs", r->err_mean));
    double need = target_blocks(r, o);
    if (need >= 0) {
        uint64_t c = smallest_reaching(r, need);
        json_t *tg = json_pack("{s:f, s:o}", "hit_rate", need / (double)r->blocks_requested,
                               "capacity", c ? json_integer((json_int_t)c) : json_null());
        if (tg && o->threshold != SAMPLE_ALL)
            json_object_set_new(tg, "capacity_resolved", json_boolean(c && c >= r->resolved));
        json_object_set_new(obj, "target", tg);
    }
    return kvpt_json_line(obj) ? kvpt_error("cannot render JSON") : KVPT_EXIT_OK;
}

/* Write every capacity of every trace as CSV (a trace column first when
 * there are several) into `out`, which sees it only once complete. */
static int write_csv(const result *rs, size_t n, kvpt_output *out)
{
    FILE *f = kvpt_output_open(out);
    if (!f)
        return KVPT_EXIT_ERROR;
    fputs(n > 1 ? "trace," : "", f);
    fputs("capacity,blocks_hit,hit_rate,tokens_hit,tokens_hit_rate\n", f);
    for (size_t i = 0; i < n; i++) {
        const result *r = &rs[i];
        for (uint64_t c = r->from; c <= r->hi; c++) {
            if (n > 1) {
                kvpt_csv_field(f, r->path);
                fputc(',', f);
            }
            fprintf(f, "%llu,%llu,%.6f,%llu,%.6f\n", (unsigned long long)c,
                    (unsigned long long)r->blocks[c], rate(r->blocks[c], r->blocks_requested),
                    (unsigned long long)r->tokens[c], rate(r->tokens[c], r->tokens_requested));
        }
    }
    return kvpt_output_close(out, f);
}

/* Points of the LRU line per trace: log-spaced capacities. */
#define PLOT_POINTS 600

/* Draw every trace's LRU curve with its unlimited ceiling, the optimal
 * points, the marks and the capacity a --target reached, each line named
 * by its trace when there are several (the one trace in the title
 * otherwise).  Returns an exit code. */
static int plot_curves(const result *rs, char *const *paths, size_t n, opts *o)
{
    /* a colour per trace: gnuplot's defaults without yellow (5) */
    static const int colour[] = {1, 2, 3, 4, 6, 7, 8};
    size_t pre, suf;
    kvpt_name_affixes(paths, n, &pre, &suf);
    size_t per = PLOT_POINTS + 1 + 64 + 64 + 1;
    kvpt_chart ch;
    if (kvpt_chart_init(&ch, n * per, 4 * n, 5 * n * 160))
        return KVPT_EXIT_ERROR;
    double *x = ch.x, *y = ch.y;
    kvpt_series *series = ch.series;
    char (*titles)[160] = (char (*)[160])ch.titles;
    size_t ns = 0, nt = 0;
    for (size_t i = 0; i < n; i++) {
        const result *r = &rs[i];
        double *px = x + i * per, *py = y + i * per;
        size_t k = 0;
        uint64_t last = 0;
        double lo = (double)(r->from ? r->from : 1), ratio = (double)r->hi / lo;
        for (size_t j = 0; j <= PLOT_POINTS; j++) {
            uint64_t c = (uint64_t)llround(lo * pow(ratio, (double)j / PLOT_POINTS));
            if (c <= last || c < r->from || c > r->hi)
                continue;
            px[k] = (double)c;
            py[k++] = rate(r->blocks[c], r->blocks_requested);
            last = c;
        }
        const char *base = kvpt_base_name(r->path);
        char name[64] = "";
        if (n > 1)
            snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - pre - suf), base + pre);
        const char *sep = n > 1 ? ": " : "";
        int lc = colour[i % (sizeof colour / sizeof colour[0])];
        double unl = rate(r->unl_blocks, r->blocks_requested);
        snprintf(titles[nt], sizeof titles[nt], "LRU%s%s", sep, name);
        snprintf(titles[nt + 1], sizeof titles[nt + 1], "%s%sunlimited capacity: %.4f", name,
                 n > 1 ? ", " : "", unl);
        series[ns++] =
            (kvpt_series){titles[nt], k, px, py, titles[nt + 1], unl, "lines lw 2", lc};
        nt += 2;
        px += k;
        py += k;
        size_t m = 0;
        for (size_t g = 0; o->optimal && g < r->n_grid && m < 64; g++)
            if (r->grid[g] >= r->lo) {
                px[m] = (double)r->grid[g];
                py[m++] = rate(r->opt_blocks[g], r->blocks_requested);
            }
        if (m) {
            snprintf(titles[nt], sizeof titles[nt], "%s%s", n > 1 ? "optimal: " :
                     "optimal (Belady, prefix-respecting)", name);
            series[ns++] = (kvpt_series){titles[nt++], m, px, py, NULL, 0,
                                         "linespoints lw 1.5 dt 3 pt 6 ps 1.2", lc};
        }
        px += m;
        py += m;
        m = 0;
        for (size_t g = 0; g < r->n_grid && m < 64; g++)
            for (size_t j = 0; j < o->n_marks; j++)
                if (o->marks[j] == r->grid[g]) {
                    px[m] = (double)r->grid[g];
                    py[m++] = rate(r->grid_blocks[g], r->blocks_requested);
                    break;
                }
        if (m) {
            snprintf(titles[nt], sizeof titles[nt], "%s%s", n > 1 ? "marks: " :
                     "marked capacities", name);
            series[ns++] = (kvpt_series){titles[nt++], m, px, py, NULL, 0,
                                         "points pt 7 ps 1.6", lc};
        }
        px += m;
        py += m;
        double need = target_blocks(r, o);
        uint64_t c = need >= 0 ? smallest_reaching(r, need) : 0;
        if (c) {
            px[0] = (double)c;
            py[0] = rate(r->blocks[c], r->blocks_requested);
            snprintf(titles[nt], sizeof titles[nt], "target reached at %llu%s%s",
                     (unsigned long long)c, sep, name);
            series[ns++] = (kvpt_series){titles[nt++], 1, px, py, NULL, 0,
                                         "points pt 5 ps 2", lc};
        }
    }
    char title[200];
    snprintf(title, sizeof title, "LRU prefix-cache hit rate at every capacity%s%s",
             n == 1 ? ": " : "", n == 1 ? kvpt_base_name(rs[0].path) : "");
    return kvpt_chart_hit_rate(&ch, &o->plot_out, title, ns);
}

/* ---- command -------------------------------------------------------------- */

/* Parse "A,B,C" block counts (at least 1 each) into o->marks.  Returns -1 on
 * a bad list or when memory runs out. */
static int parse_marks(const char *list, opts *o)
{
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (n > 64)
        return -1;
    o->marks = malloc(n * sizeof *o->marks);
    if (!o->marks)
        return -1;
    const char *p = list;
    for (size_t i = 0; i < n; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char buf[32];
        if (len == 0 || len >= sizeof buf)
            return -1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (kvpt_parse_u64(buf, UINT32_MAX, &o->marks[i]) || o->marks[i] == 0)
            return -1;
        p = comma ? comma + 1 : p + len;
    }
    o->n_marks = n;
    return 0;
}

/* Parse a fraction in (0, 1]. */
static int parse_fraction(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v > 0 && v <= 1))
        return -1;
    *out = v;
    return 0;
}

static const char usage_curve[] =
    "usage: kvpool curve TRACE [TRACE...] [--csv FILE] [--json] [--plot FILE]\n"
    "                    [--mark A,B,C] [--target S | --target-rate R] [--optimal]\n"
    "                    [--all-capacities] [--sample RATE [--sample-check]]\n"
    "\n"
    "The hit rate `kvpool replay --capacity C` would report, at every capacity C from\n"
    "the largest request to the trace's distinct block count, in one pass: the LRU\n"
    "cache of C blocks holds the C most recently freed distinct blocks, so a block\n"
    "hits at C exactly when its reuse distance (distinct blocks freed since its last\n"
    "use), and every one of its prefix's, is below C.  Exact when every hash id has\n"
    "one parent (a prefix tree, as in the Mooncake traces; checked, and said when\n"
    "not).  Below the largest request a replay rejects the longer requests, so\n"
    "those capacities need one pass per request length (--all-capacities).  Prints\n"
    "a summary and a table at 1-2-5 steps, the ends and the marks.\n"
    "\n"
    "  --csv FILE        every capacity: capacity,blocks_hit,hit_rate,tokens_hit,\n"
    "                    tokens_hit_rate (a first column trace with several TRACEs)\n"
    "  --json            one object per trace: trace, requests, blocks_requested,\n"
    "                    tokens_requested, distinct_blocks, largest_request,\n"
    "                    prefix_tree, exact, sample_rate, from_capacity,\n"
    "                    to_capacity, unlimited {blocks_hit, hit_rate, tokens_hit,\n"
    "                    tokens_hit_rate}, seconds (the passes), load_seconds, points\n"
    "                    (the table's rows: capacity, blocks_hit, hit_rate,\n"
    "                    tokens_hit, tokens_hit_rate, optimal {same four}), and\n"
    "                    optimal_seconds, sample, sample_error, target when asked\n"
    "  --plot FILE       hit rate against capacity (log scale, hit rate from 0) with\n"
    "                    the unlimited ceiling, the marks, the optimal points and\n"
    "                    the capacity a target reaches; PNG or SVG\n"
    "  --mark A,B,C      capacities to show in the table and on the plot (exact at\n"
    "                    any capacity, by their own pass below the largest request)\n"
    "  --target S        the smallest capacity reaching share S of the unlimited hit\n"
    "                    rate (e.g. 0.9)\n"
    "  --target-rate R   the smallest capacity reaching block hit rate R\n"
    "  --optimal         also the clairvoyant policy (evict the block used again\n"
    "                    farthest in the future, never a prefix before its blocks)\n"
    "                    simulated at each table capacity from the largest request:\n"
    "                    on a prefix tree no eviction policy hits more blocks\n"
    "  --all-capacities  the CSV and the target search start at capacity 1\n"
    "  --sample RATE     track only the blocks whose hash falls in a RATE share\n"
    "                    (SHARDS): memory and time shrink by about RATE, figures are\n"
    "                    estimates.  Refused when fewer than 1000 distinct blocks\n"
    "                    fall in the sample.  Printed with every sampled result:\n"
    "                    the sample's size, a bound on the error of every hit rate\n"
    "                    (two standard errors over which ids are sampled, plus what\n"
    "                    a capacity off by 10% changes) and the capacity from which\n"
    "                    the sample resolves capacities within 10% (400 / RATE);\n"
    "                    JSON: sample {distinct_blocks, hit_rate_bound,\n"
    "                    resolved_from}, and target.capacity_resolved\n"
    "  --sample-check    with --sample, also run the exact pass and report the\n"
    "                    largest and mean absolute error of the block hit rate\n"
    "\n"
    "Each option may be given once.  CSV and plot files appear complete or not at\n"
    "all: a regular FILE is replaced, a device or FIFO is written in place, a\n"
    "symbolic link is followed (its target is written), and a FILE that is one of\n"
    "the TRACEs is refused.\n";

/* Refuse what can be refused before any work: a trace that cannot be
 * opened, standard input named twice, output files that cannot be created,
 * a plot without gnuplot.  Returns an exit code, or -1 to go on. */
static int check_before(char **paths, size_t n, opts *o)
{
    int rc = kvpt_check_traces("curve", paths, n);
    if (rc >= 0)
        return rc;
    if (o->plot && kvpt_plot_check(&o->plot_out, o->plot, paths, n))
        return KVPT_EXIT_ERROR;
    if (o->csv && kvpt_output_check(&o->csv_out, "--csv", o->csv, paths, n))
        return KVPT_EXIT_ERROR;
    return -1;
}

/* Read the texts of --mark, --target, --target-rate and --sample into *o.
 * Returns -1 when they are fine, else KVPT_EXIT_USAGE (refusal printed). */
static int read_values(opts *o, const char *mark, const char *target, const char *target_rate,
                       const char *sample)
{
    double rate_arg;
    if (mark && parse_marks(mark, o))
        return kvpt_usage_error("curve", "--mark: expected up to 64 block counts (>= 1) "
                                         "separated by commas, got '%s'", mark);
    if (target && parse_fraction(target, &o->target_share))
        return kvpt_usage_error("curve", "--target: expected a share of the unlimited hit "
                                         "rate in (0, 1], got '%s'", target);
    if (target_rate && parse_fraction(target_rate, &o->target_rate))
        return kvpt_usage_error("curve", "--target-rate: expected a hit rate in (0, 1], "
                                         "got '%s'", target_rate);
    if (target && target_rate)
        return kvpt_usage_error("curve", "--target and --target-rate exclude each other");
    if (sample) {
        if (parse_fraction(sample, &rate_arg) || rate_arg * SAMPLE_ALL < 1)
            return kvpt_usage_error("curve", "--sample: expected a rate in [2^-24, 1], got '%s'",
                                    sample);
        o->threshold = (uint32_t)llround(rate_arg * SAMPLE_ALL);
    }
    if (o->plot && !kvpt_plot_terminal(o->plot))
        return kvpt_usage_error("curve", "--plot: the file name must end in .png or .svg");
    return -1;
}

/* `kvpool curve TRACE [TRACE...] [options]`. */
int kvpt_cmd_curve(int argc, char **argv)
{
    opts o = {.threshold = SAMPLE_ALL, .target_share = -1, .target_rate = -1};
    const char *mark = NULL, *target = NULL, *target_rate = NULL, *sample = NULL;
    const kvpt_opt table[] = {
        {"csv", KVPT_OPT_TEXT, &o.csv, 0, 0, NULL, NULL},
        {"json", KVPT_OPT_FLAG, &o.json, 0, 0, NULL, NULL},
        {"plot", KVPT_OPT_TEXT, &o.plot, 0, 0, NULL, NULL},
        {"mark", KVPT_OPT_TEXT, &mark, 0, 0, NULL, NULL},
        {"target", KVPT_OPT_TEXT, &target, 0, 0, NULL, NULL},
        {"target-rate", KVPT_OPT_TEXT, &target_rate, 0, 0, NULL, NULL},
        {"optimal", KVPT_OPT_FLAG, &o.optimal, 0, 0, NULL, NULL},
        {"all-capacities", KVPT_OPT_FLAG, &o.all, 0, 0, NULL, NULL},
        {"sample", KVPT_OPT_TEXT, &sample, 0, 0, NULL, NULL},
        {"sample-check", KVPT_OPT_FLAG, &o.sample_check, 0, 0, NULL, NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"curve", usage_curve, table, "TRACE", 1, -1};
    int first, rc = kvpt_parse_args(&cli, argc, argv, &first);
    if (rc >= 0)
        return rc;
    char **paths = argv + first;
    size_t n = (size_t)(argc - first);
    if ((rc = read_values(&o, mark, target, target_rate, sample)) >= 0 ||
        (rc = check_before(paths, n, &o)) >= 0)
        goto done;
    result *rs = calloc(n, sizeof *rs);
    rc = KVPT_EXIT_ERROR;
    if (!rs) {
        kvpt_error("out of memory");
        goto done;
    }
    size_t done_n = 0;
    for (; done_n < n; done_n++) {
        if (curve_one(paths[done_n], &o, &rs[done_n]))
            break;
        if (o.json ? print_json(&rs[done_n], &o) : (print_text(&rs[done_n], &o), 0))
            break;
    }
    if (done_n == n) {
        rc = KVPT_EXIT_OK;
        if (o.csv)
            rc = write_csv(rs, n, &o.csv_out);
        if (rc == KVPT_EXIT_OK && o.plot)
            rc = plot_curves(rs, paths, n, &o);
    }
    for (size_t i = 0; i < n; i++)
        result_free(&rs[i]);
    free(rs);
done:
    free(o.marks);
    return rc;
}
