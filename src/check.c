/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c — the invariant checker and the state fingerprint.
 *
 * kvp__check recomputes every count and walks every structure from
 * scratch (blocks, free lists, id sets, index chains, events' announced
 * marks, owner lists, xrefs, gauges) and compares it with what the pool
 * keeps incrementally.  It shares no bookkeeping code with the paths it
 * checks, so a bug in one does not hide in the other.  Tests and fuzzers
 * call it after every step; it is O(size of the pool + owners) and never
 * used on a hot path.  It reads the take's pending references as they are
 * (kvp__defer_check, defer.c), without settling them, so that a test can
 * check between takes and kvp_free_owner.
 *
 * kvp__fingerprint digests the logical state only: things a caller can
 * observe (states, references, owners, fills, hashes, reuse and eviction
 * order, equal-hash order in the index).  Internal capacities, slot numbers,
 * bucket layout and counters are left out, so a refused call that merely
 * grew a table still leaves the fingerprint unchanged.
 *
 * Who calls it: pool.c's kvp_pool_check and kvp_pool_fingerprint, and
 * guard.c's debug self-check.  It holds no public call itself, so that
 * guard.c, which runs it, reaches no file that calls guard.c back.
 */
#include "check.h"
#include "defer.h"
#include "events.h"
#include "idset.h"
#include "index_walk.h"
#include "map.h"
#include "policy.h"
#include "record.h"

#define XXH_STATIC_LINKING_ONLY
#include <stdarg.h>
#include <stdio.h>
#include <xxhash.h>

typedef struct ctx {
    char *msg;
    size_t cap;
} ctx;

static kvp_status fail(ctx *c, const char *fmt, ...)
{
    if (c->msg && c->cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, c->cap, fmt, ap);
        va_end(ap);
    }
    return KVP_ECORRUPT;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return fail(c, __VA_ARGS__);                                                           \
    } while (0)

static int fresh_stream(const kvp_pool *p, uint32_t b)
{
    for (int s = 0; s < kvp__streams(p); s++)
        if (b >= p->st[s].fresh_lo && b < p->st[s].fresh_hi)
            return s;
    return -1;
}

static uint32_t fresh_count(const kvp__stream *st)
{
    return st->fresh_hi > st->fresh_lo ? st->fresh_hi - st->fresh_lo : 0;
}

static uint32_t set_size(const kvp__idset *set)
{
    uint32_t n = 0;
    for (uint32_t b = kvp__idset_min(set); b != KVP__NONE; b = kvp__idset_next(set, b + 1))
        n++;
    return n;
}

static kvp_status check_blocks(kvp_pool *p, ctx *c, uint32_t *owned_refs)
{
    uint32_t vac[2] = {0}, cac[2] = {0}, used[2] = {0}, stacked[2] = {0}, retired = 0;
    uint64_t in_use = 0, shared = 0, frag = 0, published = 0, fill = 0;
    *owned_refs = 0;
    CHECK(p->top <= p->cap, "top %u beyond capacity %u", p->top, p->cap);
    CHECK(kvp__managed(p) <= kvp__max_blocks(p), "managed blocks %u above cap", kvp__managed(p));
    for (uint32_t b = 0; b < p->top; b++) {
        int fs = fresh_stream(p, b);
        const kvp__block *k = &p->blocks[b];
        if (fs >= 0) {
            static const kvp__block zero;
            CHECK(memcmp(k, &zero, sizeof zero) == 0, "block %u: fresh but its record is not zero",
                  b);
            vac[fs]++;
            continue;
        }
        int s = k->stream;
        CHECK(s < kvp__streams(p), "block %u: stream %d", b, s);
        if (k->flags & KVP__F_PENDING) { /* kvp__defer_check checked the record */
            (*owned_refs)++;
            used[s]++;
            in_use++;
            continue;
        }
        const kvp__stream *st = &p->st[s];
        bool in_vac = kvp__idset_has(&st->vacant, b), in_cac = kvp__idset_has(&st->cached, b);
        bool pub = (k->flags & KVP__F_PUBLISHED) != 0;
        CHECK(!(k->flags & KVP__F_NULL) || (b == 0 && p->cfg.null_block),
              "block %u: null flag on a non-null block", b);
        CHECK(k->fill <= p->cfg.block_size, "block %u: fill %u above block size", b, k->fill);
        CHECK(!(k->flags & KVP__F_MARK), "block %u: per-call mark left set", b);
        CHECK(k->ref == 0 || k->state == KVP_BLOCK_IN_USE, "block %u: free with %u refs", b,
              k->ref);
        CHECK(k->state == KVP_BLOCK_IN_USE || (k->anon == 0 && k->sref == 0 && k->owner == KVP__NONE),
              "block %u: free block keeps references", b);
        CHECK(k->owner != KVP__NONE || k->xhead == KVP__NONE,
              "block %u: xref without inline owner", b);
        CHECK(!pub || k->state == KVP_BLOCK_IN_USE || k->state == KVP_BLOCK_CACHED,
              "block %u: published in state %d", b, k->state);
        published += pub;
        switch (k->state) {
        case KVP_BLOCK_VACANT:
            CHECK(in_vac == p->ordered && !in_cac && !pub,
                  "block %u: vacant but vacant=%d cached=%d pub=%d (sets kept: %d)", b, in_vac,
                  in_cac, pub, p->ordered);
            CHECK(k->fill == 0 && !(k->flags & ~KVP__F_EVER) && k->retain == 0,
                  "block %u: vacant with fill %u, flags 0x%x, policy bits 0x%x", b, k->fill,
                  k->flags, k->retain);
            vac[s]++;
            stacked[s] += k->next == KVP__STACKED;
            break;
        case KVP_BLOCK_CACHED:
            CHECK(in_cac == p->ordered && !in_vac && pub,
                  "block %u: cached but vacant=%d cached=%d pub=%d (sets kept: %d)", b, in_vac,
                  in_cac, pub, p->ordered);
            cac[s]++;
            break;
        case KVP_BLOCK_IN_USE: {
            CHECK(!in_vac && !in_cac && !(k->retain & KVP__R_SEG),
                  "block %u: in use but in a free set or segment", b);
            uint32_t xn = 0;
            for (uint32_t x = k->xhead; x != KVP__NONE && xn <= p->own.xcap; x = p->own.xrefs[x].bnext) {
                CHECK(x < p->own.xcap && p->own.xrefs[x].block == b, "block %u: xref %u points elsewhere",
                      b, x);
                xn++;
            }
            uint32_t owned = (k->owner != KVP__NONE) + xn;
            CHECK(k->ref > 0 && k->ref == k->anon + k->sref + owned,
                  "block %u: ref %u != anon %u + seq %u + owned %u", b, k->ref, k->anon, k->sref,
                  owned);
            *owned_refs += owned;
            used[s]++;
            in_use++;
            shared += k->ref >= 2;
            frag += k->fill > 0 && k->fill < p->cfg.block_size;
            fill += k->fill;
            break;
        }
        case KVP_BLOCK_RETIRED:
            CHECK(kvp__idset_has(&p->retired, b) && !in_vac && !in_cac && !pub,
                  "block %u: retired but not only in the retired set", b);
            CHECK(b + 1 < p->top, "block %u: retired block at the top", b);
            retired++;
            break;
        default:
            return fail(c, "block %u: unknown state %d", b, k->state);
        }
    }
    CHECK(p->hwm >= p->top && p->hwm <= p->cap, "hwm %u outside [top, cap]", p->hwm);
    for (uint32_t b = p->top; b < p->hwm; b++)
        CHECK(p->blocks[b].state == KVP_BLOCK_RETIRED, "block %u above the top not retired", b);
    CHECK(retired == p->nretired && set_size(&p->retired) == retired,
          "retired: counted %u, kept %u", retired, p->nretired);
    for (int s = 0; s < kvp__streams(p); s++) {
        const kvp__stream *st = &p->st[s];
        CHECK(st->nvacant == vac[s] && st->ncached == cac[s],
              "stream %d: vacant %u/%u cached %u/%u (kept/counted)", s, st->nvacant, vac[s],
              st->ncached, cac[s]);
        CHECK(st->nblocks == vac[s] + cac[s] + used[s], "stream %d: nblocks %u != %u", s,
              st->nblocks, vac[s] + cac[s] + used[s]);
        CHECK(stacked[s] == st->nstk, "stream %d: %u blocks marked as in the stack array, %u there",
              s, stacked[s], st->nstk);
        CHECK(set_size(&st->vacant) == (p->ordered ? vac[s] - fresh_count(st) : 0),
              "stream %d: vacant set size", s);
        CHECK(set_size(&st->cached) == (p->ordered ? cac[s] : 0), "stream %d: cached set size", s);
    }
    CHECK(p->ordered || p->cfg.reuse != KVP_REUSE_LOWEST, "LOWEST reuse without its free sets");
    CHECK(in_use == p->g.in_use, "in_use kept %llu, counted %llu", (unsigned long long)p->g.in_use,
          (unsigned long long)in_use);
    CHECK(shared == p->g.shared, "shared kept %llu, counted %llu", (unsigned long long)p->g.shared,
          (unsigned long long)shared);
    CHECK(frag == p->g.fragmented, "fragmented kept %llu, counted %llu",
          (unsigned long long)p->g.fragmented, (unsigned long long)frag);
    CHECK(fill == p->g.fill_sum, "tokens in use kept %llu, counted %llu",
          (unsigned long long)p->g.fill_sum, (unsigned long long)fill);
    CHECK(published == p->idx.nindexed, "indexed kept %u, counted %llu", p->idx.nindexed,
          (unsigned long long)published);
    CHECK(p->g.peak >= p->g.in_use, "peak below in_use");
    return KVP_OK;
}

/* Stream s's stack array holds distinct vacant blocks of the stream, each
 * handed out before (flags exactly EVER: pop_top counts a reuse without
 * reading the record) and marked as held there (check_blocks counts the
 * marked ones against nstk, so the array holds every marked block).
 * Duplicates are found with the per-call mark, which is clear between
 * calls and cleared again here. */
static kvp_status check_stack(kvp_pool *p, ctx *c, int s)
{
    const kvp__stream *st = &p->st[s];
    uint32_t j = 0, b = KVP__NONE;
    bool ok = true;
    for (; j < st->nstk && ok; j++) {
        b = st->stk[j];
        ok = b < p->top && p->blocks[b].state == KVP_BLOCK_VACANT &&
             p->blocks[b].stream == s && p->blocks[b].next == KVP__STACKED &&
             p->blocks[b].flags == KVP__F_EVER;
        if (ok)
            p->blocks[b].flags |= KVP__F_MARK;
    }
    for (uint32_t i = 0; i < j - !ok; i++)
        p->blocks[st->stk[i]].flags &= ~KVP__F_MARK;
    CHECK(ok,
          "stream %d: stack array entry %u (block %u) is not a used vacant block held there "
          "once",
          s, j - 1, b);
    return KVP_OK;
}

static kvp_status check_lists(kvp_pool *p, ctx *c)
{
    for (int s = 0; s < kvp__streams(p); s++) {
        const kvp__stream *st = &p->st[s];
        uint32_t total = 0;
        for (unsigned l = 0; l < KVP__LISTS; l++) {
            uint32_t n = 0, prev = KVP__NONE;
            for (uint32_t b = st->lhead[l]; b != KVP__NONE; prev = b, b = p->blocks[b].lnext) {
                CHECK(b < p->top && n++ < p->top, "stream %d: eviction list %u broken at %u", s,
                      l, b);
                const kvp__block *k = &p->blocks[b];
                CHECK(k->state == KVP_BLOCK_CACHED && k->stream == s && k->lprev == prev &&
                          kvp__list_of(k) == l && kvp__segment(k) < p->pol.segments,
                      "stream %d: eviction list %u holds block %u wrongly", s, l, b);
            }
            CHECK(st->ltail[l] == prev && ((st->lmask >> l) & 1) == (n > 0) &&
                      st->nseg[l] == (l % KVP__SEGS ? n : 0),
                  "stream %d: eviction list %u: length %u, counted %u, mask 0x%x", s, l, n,
                  st->nseg[l], st->lmask);
            total += n;
        }
        CHECK(total == st->ncached && st->lmask >> KVP__LISTS == 0,
              "stream %d: eviction lists hold %u, cached %u", s, total, st->ncached);
        CHECK((p->cfg.reuse == KVP_REUSE_LIFO) == (st->stk != NULL) &&
                  (st->stk || st->nstk == 0),
              "stream %d: stack array %s in reuse order %d", s, st->stk ? "kept" : "missing",
              p->cfg.reuse);
        CHECK(!st->stk || (st->nstk <= st->stkcap && st->stkcap >= st->nblocks),
              "stream %d: stack array holds %u ids with room for %u, the stream %u blocks", s,
              st->nstk, st->stkcap, st->nblocks);
        kvp_status rc = check_stack(p, c, s);
        if (rc)
            return rc;
        if (p->cfg.reuse == KVP_REUSE_LOWEST) {
            CHECK(st->qhead == KVP__NONE, "stream %d: queue used in LOWEST order", s);
            continue;
        }
        bool fifo = p->cfg.reuse == KVP_REUSE_FIFO;
        uint32_t n = 0, prev = KVP__NONE;
        for (uint32_t b = st->qhead; b != KVP__NONE; prev = b, b = p->blocks[b].next) {
            CHECK(b < p->top && n++ < p->top, "stream %d: free queue broken at %u", s, b);
            int state = p->blocks[b].state;
            CHECK((state == KVP_BLOCK_VACANT || (fifo && state == KVP_BLOCK_CACHED)) &&
                      p->blocks[b].stream == s && (b == st->qhead || p->blocks[b].prev == prev),
                  "stream %d: free queue holds block %u wrongly", s, b);
        }
        bool seen_mark = st->fresh_mark == KVP__NONE;
        for (uint32_t b = st->fresh_mark; b != KVP__NONE; b = p->blocks[b].next)
            CHECK(b < p->top && !(p->blocks[b].flags & KVP__F_EVER) &&
                      p->blocks[b].state == KVP_BLOCK_VACANT,
                  "stream %d: used block %u among never-used ones", s, b);
        for (uint32_t b = st->qhead; b != KVP__NONE && !seen_mark; b = p->blocks[b].next)
            seen_mark = b == st->fresh_mark;
        CHECK(seen_mark, "stream %d: never-used mark %u not in the free queue", s, st->fresh_mark);
        uint32_t want = st->nvacant - fresh_count(st) - st->nstk + (fifo ? st->ncached : 0);
        CHECK(n == want && st->qtail == prev, "stream %d: free queue length %u, expected %u", s,
              n, want);
    }
    return KVP_OK;
}

/* One entry of the index: a published block below top, in bucket i. */
static kvp_status check_entry(kvp_pool *p, ctx *c, uint32_t b, uint32_t i)
{
    CHECK(b < p->top && p->idx.dprev[b] < p->top, "index chain %u broken at block %u", i, b);
    CHECK(p->blocks[b].flags & KVP__F_PUBLISHED, "index holds unpublished block %u", b);
    CHECK(kvp__bucket_of(p, p->blocks[b].stream, &p->hashes[b]) == i,
          "block %u in the wrong bucket", b);
    return KVP_OK;
}

static bool same_key_of(const kvp_pool *p, uint32_t a, uint32_t b)
{
    return p->blocks[a].stream == p->blocks[b].stream &&
           memcmp(p->hashes[a].b, p->hashes[b].b, sizeof p->hashes[a].b) == 0;
}

/* The chains: each a list of runs, one per distinct (stream, hash), its
 * copies consecutive, the first's dprev its last, every other marked
 * KVP__F_COPY with its previous as dprev; no two runs of one key; nindexed
 * entries in all. */
static kvp_status check_index(kvp_pool *p, ctx *c)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->idx.nbuckets; i++) {
        uint32_t f = kvp__chain_first(p, i);
        while (f != KVP__NONE) {
            kvp_status rc = check_entry(p, c, f, i);
            if (rc)
                return rc;
            CHECK(n++ < p->idx.nindexed && !(p->blocks[f].flags & KVP__F_COPY),
                  "index chain %u: more entries than %u, or copy %u first", i, p->idx.nindexed, f);
            uint32_t last = f, x = kvp__chain_next(p, f);
            for (; x != KVP__NONE; last = x, x = kvp__chain_next(p, x)) {
                if ((rc = check_entry(p, c, x, i)))
                    return rc;
                if (!(p->blocks[x].flags & KVP__F_COPY))
                    break; /* x starts the next run */
                CHECK(n++ < p->idx.nindexed && same_key_of(p, x, f) && p->idx.dprev[x] == last,
                      "index chain %u: block %u in the run of block %u, after %u", i, x, f,
                      last);
            }
            CHECK(p->idx.dprev[f] == last, "index: run of block %u ends at %u, its last copy %u", f,
                  last, p->idx.dprev[f]);
            uint32_t runs = 0;
            for (uint32_t g = x; g != KVP__NONE; g = kvp__chain_skip(p, g))
                CHECK(g < p->top && p->idx.dprev[g] < p->top && runs++ < p->idx.nindexed &&
                          !same_key_of(p, f, g),
                      "index chain %u: block %u after a run of block %u's key, or broken", i, g, f);
            f = x;
        }
    }
    CHECK(n == p->idx.nindexed, "index holds %u entries, kept %u", n, p->idx.nindexed);
    return KVP_OK;
}

/* Events: announced marks sit on the first copies of indexed hashes only,
 * at most one per hash over every stream (the subscriber's view), and every
 * indexed hash has one unless an event was dropped since the index last
 * emptied. */
static kvp_status check_announced(kvp_pool *p, ctx *c)
{
    bool lossy = kvp__ev_lossy(p);
    for (uint32_t b = 0; b < p->top; b++) {
        uint8_t f = p->blocks[b].flags;
        CHECK(!(f & KVP__F_ANNOUNCED) || (p->evq && (f & KVP__F_PUBLISHED)),
              "block %u announced but not indexed, or events off", b);
        CHECK(!(f & KVP__F_COPY) || (f & KVP__F_PUBLISHED), "block %u a copy, not indexed", b);
        if (!p->evq || !(f & KVP__F_PUBLISHED))
            continue;
        const kvp_hash *h = &p->hashes[b];
        uint32_t first = kvp__index_first(p, p->blocks[b].stream, h);
        CHECK(!(f & KVP__F_ANNOUNCED) || first == b,
              "block %u announced but not its hash's first copy %u", b, first);
        if (first != b)
            continue;
        uint32_t marks = 0;
        for (int s = 0; s < kvp__streams(p); s++) {
            uint32_t d = kvp__index_first(p, s, h);
            marks += d != KVP__NONE && (p->blocks[d].flags & KVP__F_ANNOUNCED);
        }
        CHECK(marks <= 1, "the hash of block %u is announced by %u copies", b, marks);
        CHECK(marks == 1 || lossy, "block %u is indexed, its hash not announced", b);
    }
    return KVP_OK;
}

/* The first slot holding owner id in its index bucket (NONE if none),
 * walked here rather than through owner.c's lookup, which is checked. */
static uint32_t first_in_bucket(const kvp_pool *p, kvp_owner id)
{
    uint32_t n = 0;
    for (uint32_t l = p->own.buckets[kvp__id_hash(id, p->own.seed) & p->own.bmask];
         l && l - 1 < p->own.cap && n++ < p->own.cap; l = p->own.slots[l - 1].link)
        if (p->own.slots[l - 1].id == id)
            return l - 1;
    return KVP__NONE;
}

static kvp_status check_owners(kvp_pool *p, ctx *c, uint32_t owned_refs)
{
    uint32_t active = 0, refs = 0, mapped = 0;
    for (uint32_t i = 0; p->own.buckets && i <= p->own.bmask; i++)
        for (uint32_t l = p->own.buckets[i]; l; l = p->own.slots[l - 1].link) {
            CHECK(l - 1 < p->own.cap && mapped++ < p->own.cap && p->own.slots[l - 1].id != KVP_ANON &&
                      (kvp__id_hash(p->own.slots[l - 1].id, p->own.seed) & p->own.bmask) == i,
                  "owner index: bucket %u chains slot %u wrongly", i, l - 1);
        }
    for (uint32_t slot = 0; slot < p->own.cap; slot++) {
        const kvp__owner *o = &p->own.slots[slot];
        if (o->id == KVP_ANON)
            continue;
        active++;
        CHECK(first_in_bucket(p, o->id) == slot, "owner %llu not found in the map",
              (unsigned long long)o->id);
        CHECK(kvp__owner_live(o) > 0 || o->registered,
              "owner %llu holds nothing and is not registered", (unsigned long long)o->id);
        uint32_t n = 0, end = kvp__defer_pending_from(o);
        CHECK(o->len <= o->cap && (o->len == 0 || o->refs[o->len - 1] != KVP__NONE),
              "owner %llu: array length %u", (unsigned long long)o->id, o->len);
        n += o->len - end; /* pending: kvp__defer_check checked them */
        for (uint32_t i = 0; i < end; i++) {
            uint32_t node = o->refs[i];
            if (node == KVP__NONE)
                continue;
            n++;
            uint32_t b = kvp__node_block(p, node);
            CHECK(kvp__node_pos(p, node) == i && b < p->top &&
                      p->blocks[b].state == KVP_BLOCK_IN_USE,
                  "owner %llu: bad entry %u for block %u", (unsigned long long)o->id, i, b);
            if (node & KVP__XREF)
                CHECK((node & ~KVP__XREF) < p->own.xcap && p->own.xrefs[node & ~KVP__XREF].owner == slot,
                      "xref of block %u: wrong owner", b);
            else
                CHECK(p->blocks[b].owner == slot, "block %u: inline owner mismatch", b);
        }
        CHECK(n == kvp__owner_live(o), "owner %llu: %u live entries, %u by its count",
              (unsigned long long)o->id, n, kvp__owner_live(o));
        refs += n;
    }
    CHECK(active == p->own.n && mapped == active, "owners: %u active, %u mapped, kept %u",
          active, mapped, p->own.n);
    CHECK(refs == owned_refs, "owner lists hold %u references, blocks %u", refs, owned_refs);
    uint32_t xfree = 0;
    for (uint32_t x = p->own.xfree; x != KVP__NONE; x = p->own.xrefs[x].pos) {
        CHECK(x < p->own.xcap && xfree++ < p->own.xcap && p->own.xrefs[x].block == KVP__NONE,
              "xref free list broken at %u", x);
    }
    CHECK(xfree == p->own.nxfree, "xref free list %u, kept %u", xfree, p->own.nxfree);
    return KVP_OK;
}

kvp_status kvp__check(kvp_pool *p, char *msg, size_t cap)
{
    ctx cc = {msg, cap}, *c = &cc;
    uint32_t owned;
    kvp_status rc = kvp__defer_check(p, msg, cap);
    if (!rc)
        rc = check_blocks(p, c, &owned);
    if (!rc)
        rc = check_lists(p, c);
    if (!rc)
        rc = kvp__policy_check(p, msg, cap);
    if (!rc)
        rc = check_index(p, c);
    if (!rc)
        rc = check_announced(p, c);
    if (!rc)
        rc = check_owners(p, c, owned);
    kvp__defer_uncheck(p);
    if (!rc && msg && cap)
        msg[0] = '\0';
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Fingerprint                                                               */
/* ------------------------------------------------------------------------ */

static void feed(XXH3_state_t *h, const void *data, size_t len)
{
    XXH3_64bits_update(h, data, len);
}

static void feed32(XXH3_state_t *h, uint32_t v) { feed(h, &v, sizeof v); }

/* Position of b among the indexed blocks with its hash and stream. */
static uint32_t dup_rank(const kvp_pool *p, uint32_t b)
{
    const kvp__block *k = &p->blocks[b];
    uint32_t rank = 0;
    for (uint32_t x = kvp__index_first(p, k->stream, &p->hashes[b]); x != b && x != KVP__NONE;
         x = kvp__index_next(p, x))
        rank++;
    return rank;
}

static void fingerprint(const kvp_pool *p, XXH3_state_t *h)
{
    feed32(h, p->top);
    for (int s = 0; s < kvp__streams(p); s++) {
        const kvp__stream *st = &p->st[s];
        feed32(h, st->fresh_lo);
        feed32(h, st->fresh_hi);
        /* reuse order: the LIFO stack's array from its top, then the list
         * (where the two meet is not state a caller can see) */
        for (uint32_t i = st->nstk; i-- > 0;)
            feed32(h, st->stk[i]);
        for (uint32_t b = st->qhead; b != KVP__NONE; b = p->blocks[b].next)
            feed32(h, b);
        feed32(h, KVP__NONE);
        for (unsigned l = 0; l < KVP__LISTS; l++) {
            for (uint32_t b = st->lhead[l]; b != KVP__NONE; b = p->blocks[b].lnext)
                feed32(h, b);
            feed32(h, KVP__NONE);
        }
    }
    for (uint32_t b = 0; b < p->top; b++) {
        if (kvp__is_fresh(p, b))
            continue;
        const kvp__block *k = &p->blocks[b];
        struct {
            uint32_t id, ref, anon, sref, fill, format, stream, state, flags, retain;
            kvp_owner owner;
        } rec = {b, k->ref, k->anon, k->sref, k->fill, k->format, k->stream, k->state, k->flags, k->retain,
                 k->owner == KVP__NONE ? KVP_ANON : p->own.slots[k->owner].id};
        feed(h, &rec, sizeof rec);
        if (k->flags & KVP__F_PUBLISHED) {
            feed(h, &p->hashes[b], sizeof p->hashes[b]);
            feed32(h, dup_rank(p, b));
        }
    }
    /* Owners in slot order would depend on slot numbering: combine their
     * digests with a commutative sum instead. */
    uint64_t owners = 0;
    XXH3_state_t oh;
    for (uint32_t slot = 0; slot < p->own.cap; slot++) {
        const kvp__owner *o = &p->own.slots[slot];
        if (o->id == KVP_ANON)
            continue;
        XXH3_64bits_reset(&oh);
        feed(&oh, &o->id, sizeof o->id);
        feed32(&oh, o->registered);
        for (uint32_t i = 0; i < o->len; i++)
            if (o->refs[i] != KVP__NONE)
                feed32(&oh, kvp__node_block(p, o->refs[i]));
        owners += XXH3_64bits_digest(&oh);
    }
    feed(h, &owners, sizeof owners);
}

/* The digest of the pool's logical state (kvp_pool_fingerprint). */
uint64_t kvp__fingerprint(const kvp_pool *p)
{
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    fingerprint(p, &h);
    return XXH3_64bits_digest(&h);
}
