/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c — the pool as a whole: configuration, create, destroy and clear,
 * and the calls that read or set one block or one stream (fill, free
 * count, next block, block info).
 *
 * What it owns: the configuration, checked once at creation; the initial
 * layout of blocks into streams (reset_blocks, shared by create and
 * clear so the two cannot disagree); the arrays' lifetime.
 *
 * Invariants: a pool exists only fully made (a failed create releases
 * everything it allocated); after create and after clear every block of the
 * initial pool is fresh, the index, owners and counters empty, and only the
 * null block (cfg.null_block) in use.
 *
 * It also holds the public calls whose work guard.c itself runs after
 * every call: kvp_events_take (events.c), kvp_pool_check and
 * kvp_pool_fingerprint (check.c).  Kept here, above guard.c, they leave
 * events.c and check.c without a public call, so guard.c reaches no file
 * that calls it back.
 *
 * Who calls it: the public API only.
 */
#include "check.h"
#include "client.h"
#include "events.h"
#include "freelist.h"
#include "guard.h"
#include "hashing.h"
#include "idset.h"
#include "index.h"
#include "mem.h"
#include "owner.h"
#include "policy.h"
#include "policy_table.h"
#include "record.h"
#include "resize.h"
#include "status.h"
#include "storage.h"


/* ------------------------------------------------------------------------ */
/* Configuration and lifecycle                                               */
/* ------------------------------------------------------------------------ */

kvp_status kvp_config_default(kvp_config *cfg)
{
    if (!cfg)
        return KVP_EINVAL;
    memset(cfg, 0, sizeof *cfg);
    cfg->block_size = 16;
    cfg->num_blocks = 1024;
    cfg->prefix_caching = 1;
    cfg->reuse = KVP_REUSE_LIFO;
    cfg->history_len = 64;
    cfg->protected_percent = 50;
    return KVP_OK;
}

/* Blocks of stream s at creation (and after kvp_pool_clear): an equal
 * share, the first streams one more while blocks remain (with K and V
 * apart, K has the first half, rounded up). */
static uint32_t initial_blocks(const kvp_pool *p, int s)
{
    uint32_t n = p->cfg.num_blocks, per = n / (uint32_t)p->nstreams, rest = n % (uint32_t)p->nstreams;
    return per + ((uint32_t)s < rest);
}

/* Lay out the initial blocks: stream ranges, all fresh, and the null block.
 * Used by create and by clear, so the two cannot disagree.  The id sets and
 * buckets must be zero already (fresh from kvp__zalloc, or wiped by
 * kvp_pool_clear), so creation touches none of their pages. */
static void reset_blocks(kvp_pool *p)
{
    uint32_t n = p->cfg.num_blocks;
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        st->qhead = st->qtail = st->fresh_mark = KVP__NONE;
        kvp__policy_reset(st);
        st->fresh_lo = s == 0 ? 0 : p->st[s - 1].fresh_hi;
        st->fresh_hi = st->fresh_lo + initial_blocks(p, s);
        st->nblocks = st->nvacant = st->fresh_hi - st->fresh_lo;
        st->ncached = 0;
        st->nstk = st->untallied = 0;
    }
    p->ordered = p->cfg.reuse == KVP_REUSE_LOWEST; /* free sets kept from the start
                                                       (else from kvp__order on) */
    kvp__fast_reset(p);
    p->nretired = 0;
    p->top = p->hwm = n;
    p->g.in_use = p->g.shared = p->g.fragmented = p->g.peak = p->g.fill_sum = 0;
    p->idx.nindexed = 0;
    if (p->cfg.null_block) {
        p->st[0].fresh_lo = 1;
        p->st[0].nvacant--;
        kvp__init_block(p, 0, 0, KVP_BLOCK_IN_USE);
        p->blocks[0].ref = p->blocks[0].anon = 1;
        p->blocks[0].flags = KVP__F_NULL | KVP__F_EVER;
        p->g.in_use = p->g.peak = 1;
    }
}

/* The reuse orders' names, indexed by kvp_reuse. */
static const char *const reuse_names[] = {
    [KVP_REUSE_LIFO] = "lifo",
    [KVP_REUSE_LOWEST] = "lowest",
    [KVP_REUSE_FIFO] = "fifo",
};

/* See kvpool.h. */
const char *kvp_reuse_name(int reuse)
{
    return reuse >= 0 && (size_t)reuse < sizeof reuse_names / sizeof reuse_names[0]
               ? reuse_names[reuse]
               : NULL;
}

/* See kvpool.h. */
KVP__DEFINE_PARSE(kvp_reuse_parse, kvp_reuse, kvp_reuse_name)

static kvp_status validate_config(const kvp_config *c)
{
    if (c->block_size == 0 || c->block_size > 65535)
        return KVP_EINVAL;
    if (c->num_blocks > KVP_MAX_BLOCKS || c->max_blocks > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (c->max_blocks && c->num_blocks > c->max_blocks)
        return KVP_EINVAL;
    if (c->null_block && c->num_blocks == 0)
        return KVP_EINVAL;
    if (!kvp_reuse_name((int)c->reuse) || kvp__policy_config_valid(c))
        return KVP_EINVAL;
    if (c->allocator && (!c->allocator->alloc || !c->allocator->release))
        return KVP_EINVAL;
    if (c->history_len > (1u << 20))
        return KVP_EINVAL;
    if (kvp__hash_config_valid(c))
        return KVP_EINVAL;
    if (c->host_arena && !c->block_bytes[0] && !c->block_bytes[1])
        return KVP_EINVAL;
    if (c->block_bytes[1] && !c->separate_kv)
        return KVP_EINVAL;
    /* The event queue keeps capacity + 1 records (events.c), counted in 32
     * bits. */
    if (c->events && c->event_capacity == UINT32_MAX)
        return KVP_EINVAL;
    /* A stream's host arena holds block_bytes[s] for every id up to the
     * growth cap (storage.c): refused here when that size does not fit
     * size_t, so no arena size or block address computed later can wrap. */
    size_t arena;
    for (unsigned s = 0; s < KVP__STREAMS_MAX && c->host_arena; s++)
        if (!kvp__mul_size(c->block_bytes[s], kvp__growth_cap(c), &arena))
            return KVP_EINVAL;
    return KVP_OK;
}

static void free_arrays(kvp_pool *p)
{
    kvp__release(p, p->blocks, (size_t)p->cap * sizeof *p->blocks);
    kvp__release(p, p->hashes, (size_t)p->cap * sizeof *p->hashes);
    kvp__release(p, p->idx.dprev, (size_t)p->cap * sizeof *p->idx.dprev);
    kvp__release(p, p->idx.buckets, (size_t)p->idx.nbuckets * sizeof *p->idx.buckets);
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__idset_free(p, &p->st[s].vacant);
        kvp__idset_free(p, &p->st[s].cached);
        kvp__release(p, p->st[s].stk, (size_t)p->st[s].stkcap * sizeof *p->st[s].stk);
    }
    kvp__idset_free(p, &p->retired);
    kvp__release(p, p->hist.ring, (size_t)p->cfg.history_len * sizeof *p->hist.ring);
    kvp__release(p, p->ver.vtok, (size_t)p->cap * p->cfg.block_size * sizeof *p->ver.vtok);
    kvp__release(p, p->ver.vparent, (size_t)p->cap * sizeof *p->ver.vparent);
    kvp__release(p, p->ver.vpgen, (size_t)p->cap * sizeof *p->ver.vpgen);
    kvp__release(p, p->ver.gen, (size_t)p->cap * sizeof *p->ver.gen);
    kvp__policy_destroy(p);
    kvp__storage_free(p);
    kvp__events_free(p);
}

kvp_status kvp_pool_create(const kvp_config *cfg, kvp_pool **out)
{
    if (!cfg || !out)
        return KVP_EINVAL;
    kvp_status rc = validate_config(cfg);
    if (rc)
        return rc;
    const kvp_allocator *mem = cfg->allocator ? cfg->allocator : &kvp__std_allocator;
    int nstreams = kvp__nstreams(cfg);
    kvp_pool *p = mem->alloc(mem->user, kvp__pool_bytes(nstreams));
    if (!p)
        return KVP_ENOMEM;
    memset(p, 0, kvp__pool_bytes(nstreams));
    p->cfg = *cfg;
    p->mem = *mem;
    p->cfg.allocator = NULL; /* the copy in p->mem is the one used */
    p->nstreams = nstreams;
    p->ts = cfg->thread_safe != 0;
    p->own.free = p->own.xfree = KVP__NONE;

    uint32_t cap = cfg->num_blocks ? cfg->num_blocks : 1;
    p->cap = cap;
    p->idx.nbuckets = kvp__bucket_count(cap);
    p->blocks = kvp__zalloc(p, (size_t)cap * sizeof *p->blocks);
    p->hashes = kvp__zalloc(p, (size_t)cap * sizeof *p->hashes);
    p->idx.dprev = kvp__alloc(p, (size_t)cap * sizeof *p->idx.dprev);
    p->idx.buckets = kvp__zalloc(p, (size_t)p->idx.nbuckets * sizeof *p->idx.buckets);
    p->hist.ring = kvp__zalloc(p, (size_t)cfg->history_len * sizeof *p->hist.ring);
    rc = (!p->blocks || !p->hashes || !p->idx.dprev || !p->idx.buckets || (cfg->history_len && !p->hist.ring))
             ? KVP_ENOMEM
             : KVP_OK;
    for (int s = 0; s < kvp__streams(p) && !rc; s++) {
        rc = kvp__idset_init(p, &p->st[s].vacant, cap);
        if (!rc)
            rc = kvp__idset_init(p, &p->st[s].cached, cap);
        if (!rc)
            rc = kvp__stk_reserve(p, s, initial_blocks(p, s));
    }
    if (!rc)
        rc = kvp__idset_init(p, &p->retired, cap);
    if (!rc && cfg->verify_hits)
        rc = kvp__verify_reserve(p, cap, &p->ver.vtok, &p->ver.vparent, &p->ver.vpgen, &p->ver.gen);
    if (!rc)
        rc = kvp__policy_create(p);
    if (!rc)
        rc = kvp__storage_init(p);
    if (!rc)
        rc = kvp__events_init(p);
    if (!rc && cfg->random_root)
        rc = kvp__random(p->cfg.root_seed.b, sizeof p->cfg.root_seed.b);
    if (!rc)
        rc = kvp__index_init(p);
    if (!rc && p->ts && pthread_mutex_init(&p->lock, NULL) != 0)
        rc = KVP_ENOMEM;
    if (rc) {
        free_arrays(p);
        p->mem.release(p->mem.user, p, kvp__pool_bytes(nstreams));
        return rc;
    }
    p->hooked = p->ts || p->evq || (p->cfg.history_every_call && p->cfg.history_len) ||
                p->cfg.on_evict || p->cfg.copy;
    reset_blocks(p);
    *out = p;
    return KVP_OK;
}

void kvp_pool_destroy(kvp_pool *pool)
{
    if (!pool)
        return;
    if (pool->seq.clear)
        pool->seq.clear(pool);
    kvp__owners_destroy(pool);
    free_arrays(pool);
    if (pool->ts)
        pthread_mutex_destroy(&pool->lock);
    kvp_allocator mem = pool->mem;
    mem.release(mem.user, pool, kvp__pool_bytes(pool->nstreams));
}

kvp_status kvp_pool_clear(kvp_pool *pool)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    bool had_index = pool->idx.nindexed > 0;
    if (pool->seq.clear)
        pool->seq.clear(pool);
    kvp__owners_reset(pool);
    for (int s = 0; s < kvp__streams(pool); s++) {
        kvp__idset_clear(&pool->st[s].vacant);
        kvp__idset_clear(&pool->st[s].cached);
    }
    kvp__idset_clear(&pool->retired);
    memset(pool->blocks, 0, (size_t)pool->cfg.num_blocks * sizeof *pool->blocks); /* fresh again */
    memset(pool->idx.buckets, 0, (size_t)pool->idx.nbuckets * sizeof *pool->idx.buckets);
    reset_blocks(pool);
    kvp__policy_forget(pool);
    memset(&pool->ctr, 0, sizeof pool->ctr);
    pool->hist.head = pool->hist.count = 0;
    /* Queued events stay (a subscriber may already know their hashes); the
     * clear that follows them makes its view empty, as the index is. */
    kvp__ev_cleared(pool);
    if (had_index)
        kvp__notify_evict(pool, NULL, KVP_NO_BLOCK);
    kvp__leave(pool, true);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Fill, counts, block info                                                  */
/* ------------------------------------------------------------------------ */

kvp_status kvp_set_fill(kvp_pool *pool, kvp_block id, uint32_t fill)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = kvp__check_id(pool, id);
    if (!rc && fill > pool->cfg.block_size)
        rc = KVP_EINVAL;
    if (!rc && kvp__state(pool, id) != KVP_BLOCK_IN_USE)
        rc = KVP_EDOUBLEFREE;
    if (!rc)
        kvp__client_fill(pool, id, fill);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_free_count(kvp_pool *pool, kvp_stream stream, uint32_t *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    *out = pool->st[s].nvacant + pool->st[s].ncached;
    kvp__leave(pool, false);
    return KVP_OK;
}

KVP__FLATTEN kvp_status kvp_peek_next(kvp_pool *pool, kvp_stream stream, kvp_block *next)
{
    if (!pool || !next)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    uint32_t b = kvp__pick(pool, s);
    *next = b == KVP__NONE ? KVP_NO_BLOCK : b;
    kvp__leave(pool, false);
    return KVP_OK;
}

/* A block with content gets a retention priority (kvpool.h, policy.c). */
kvp_status kvp_set_priority(kvp_pool *pool, kvp_block id, unsigned priority)
{
    if (!pool)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = kvp__check_id(pool, id);
    if (!rc && (priority > KVP_PRIORITY_MAX || pool->cfg.reuse == KVP_REUSE_FIFO ||
                (pool->blocks[id].flags & KVP__F_NULL)))
        rc = KVP_EINVAL;
    if (!rc && kvp__state(pool, id) != KVP_BLOCK_IN_USE && kvp__state(pool, id) != KVP_BLOCK_CACHED)
        rc = KVP_ENOTFOUND;
    if (!rc)
        kvp__set_priority(pool, id, priority);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_block_get(kvp_pool *pool, kvp_block id, kvp_block_info *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    if (id >= pool->hwm) {
        kvp__leave(pool, false);
        return KVP_ERANGE;
    }
    memset(out, 0, sizeof *out);
    out->owner = KVP_ANON;
    out->priority = KVP_PRIORITY_NORMAL;
    if (id >= pool->top) {
        out->state = KVP_BLOCK_RETIRED;
        out->stream = kvp__stream_value(pool, pool->blocks[id].stream);
    } else if (kvp__is_fresh(pool, id)) {
        out->state = KVP_BLOCK_VACANT;
        out->stream = kvp__stream_value(pool, kvp__stream_of(pool, id));
    } else {
        const kvp__block *blk = &pool->blocks[id];
        out->state = blk->state;
        out->stream = kvp__stream_value(pool, blk->stream);
        out->format = blk->format;
        out->ref_count = blk->ref;
        out->anon_refs = blk->anon;
        out->seq_refs = blk->sref;
        out->fill = blk->fill;
        out->published = (blk->flags & KVP__F_PUBLISHED) != 0;
        out->ever_allocated = (blk->flags & KVP__F_EVER) != 0;
        out->is_null = (blk->flags & KVP__F_NULL) != 0;
        out->priority = kvp__priority(blk);
        if (blk->owner != KVP__NONE)
            out->owner = pool->own.slots[blk->owner].id;
        if (out->published)
            out->hash = pool->hashes[id];
    }
    kvp__leave(pool, false);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Events taken, the check, the fingerprint                                  */
/* ------------------------------------------------------------------------ */

kvp_status kvp_events_take(kvp_pool *pool, const kvp_event **events, size_t *n,
                           uint64_t *dropped)
{
    if (!pool || !events || !n || !pool->evq)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp__ev_take(pool, events, n, dropped);
    kvp__leave(pool, false);
    return KVP_OK;
}

/* Enters lazily: the take's pending references are checked as they are. */
kvp_status kvp_pool_check(kvp_pool *pool, char *msg, size_t cap)
{
    kvp_status rc = kvp__enter_lazy(pool);
    if (rc)
        return rc;
    rc = kvp__check(pool, msg, cap);
    kvp__leave(pool, false);
    return rc;
}

kvp_status kvp_pool_fingerprint(kvp_pool *pool, uint64_t *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    *out = kvp__fingerprint(pool);
    kvp__leave(pool, false);
    return KVP_OK;
}
