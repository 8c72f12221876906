/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c — the content index: block hash -> block, per stream, and the calls
 * that publish, find, evict and forget content.
 *
 * What it owns: the bucket array, each published block's digest and its
 * place in a bucket chain, and the eviction count.
 *
 * Built as chaining through the block records (kvp__block.hnext) rather than
 * a separate table such as map.c's: a block holds at most one hash, so the
 * index can never need more entries than there are blocks, never allocates
 * on publish, and removing a block's entry is a walk of one short chain;
 * keys are 32-byte digests, too large to keep in probe entries.  Other
 * files read it through kvp__index_first / kvp__index_next
 * (index_walk.h), never by walking the chains (check.c, which verifies
 * them, aside).  The bucket array has
 * at least 1.5 buckets per block (load factor <= 2/3: kvp__bucket_count).
 *
 * Invariants:
 * - A block is in a chain iff it is published; it is in the chain of
 *   kvp__bucket_of(its stream, its digest).
 * - New entries go to the tail of their chain, and relocation replaces an
 *   entry in place, so among blocks with equal hashes the chain order is the
 *   publish order: lookup returns the first published still indexed.
 * - A cached block is always published (free, content findable).
 */
#include "index.h"
#include "events.h"
#include "freelist.h"
#include "guard.h"
#include "index_walk.h"
#include "mem.h"
#include "policy.h"
#include "record.h"

/* Link b (digest already stored) at the tail of its chain, and tell the
 * event queue (`info` says what the publisher knows; may be NULL). */
void kvp__index_insert(kvp_pool *p, uint32_t b, const kvp__pubinfo *info)
{
    uint32_t *link = &p->buckets[kvp__bucket_of(p, p->blocks[b].stream, &p->hashes[b])];
    while (*link)
        link = &p->blocks[*link - 1].hnext;
    *link = b + 1;
    p->blocks[b].hnext = 0;
    p->blocks[b].flags |= KVP__F_PUBLISHED;
    p->nindexed++;
    kvp__policy_published(p, b);
    kvp__ev_stored(p, b, info);
}

static uint32_t *link_to(kvp_pool *p, uint32_t b)
{
    uint32_t *link = &p->buckets[kvp__bucket_of(p, p->blocks[b].stream, &p->hashes[b])];
    while (*link != b + 1)
        link = &p->blocks[*link - 1].hnext;
    return link;
}

void kvp__index_remove(kvp_pool *p, uint32_t b)
{
    uint32_t *link = link_to(p, b);
    *link = p->blocks[b].hnext;
    p->blocks[b].hnext = 0;
    kvp__ev_removed(p, b);
    p->blocks[b].flags &= (uint8_t)~(KVP__F_PUBLISHED | KVP__F_VERIFIED | KVP__F_ANNOUNCED);
    p->nindexed--;
    if (p->gen)
        p->gen[b]++; /* children recorded against this content no longer match */
}

/* Block `to` takes over `from`'s entry, at the same place in the chain.
 * `to` already carries from's digest and stream. */
void kvp__index_replace(kvp_pool *p, uint32_t from, uint32_t to)
{
    uint32_t *link = link_to(p, from);
    *link = to + 1;
    p->blocks[to].hnext = p->blocks[from].hnext;
    p->blocks[from].hnext = 0;
}

uint32_t kvp__index_find(const kvp_pool *p, int s, const kvp_hash *h)
{
    return kvp__index_first(p, s, h);
}

/* Evict b's content: the entry goes, the policy and the callback hear
 * of it, it counts. */
void kvp__unindex(kvp_pool *p, uint32_t b)
{
    kvp__policy_evicted(p, b);
    kvp__index_remove(p, b);
    p->ctr.evictions++;
    kvp__notify_evict(p, &p->hashes[b], b);
}

/* Re-chain every entry into `nbuckets` buckets, keeping chain order among
 * equal hashes (they share a chain before and after).  All or nothing. */
kvp_status kvp__index_rebuild(kvp_pool *p, uint32_t nbuckets)
{
    uint32_t *nb = kvp__zalloc(p, (size_t)nbuckets * sizeof *nb);
    if (!nb)
        return KVP_ENOMEM;
    uint32_t *old = p->buckets, oldn = p->bmask + 1;
    p->buckets = nb;
    p->bmask = nbuckets - 1;
    for (uint32_t i = 0; i < oldn; i++) {
        uint32_t b = old[i] - 1u;
        while (b != KVP__NONE) {
            uint32_t next = kvp__chain_next(p, b);
            uint32_t *link = &nb[kvp__bucket_of(p, p->blocks[b].stream, &p->hashes[b])];
            while (*link)
                link = &p->blocks[*link - 1].hnext;
            *link = b + 1;
            p->blocks[b].hnext = 0;
            b = next;
        }
    }
    kvp__release(p, old, (size_t)oldn * sizeof *old);
    return KVP_OK;
}

/* Forget all content: cached blocks become vacant, blocks in use lose their
 * hash, the index empties, and one "all cleared" notice goes out.  No
 * per-block callbacks and no eviction counts. */
void kvp__forget_all(kvp_pool *p)
{
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        for (uint32_t b; (b = kvp__policy_victim(st)) != KVP__NONE;)
            kvp__cached_to_vacant(p, b); /* unindexed below, silently */
    }
    for (uint32_t i = 0; i <= p->bmask; i++) {
        for (uint32_t b = kvp__chain_first(p, i); b != KVP__NONE;) {
            uint32_t next = kvp__chain_next(p, b);
            p->blocks[b].hnext = 0;
            p->blocks[b].flags &= (uint8_t)~(KVP__F_PUBLISHED | KVP__F_VERIFIED | KVP__F_ANNOUNCED);
            if (p->gen)
                p->gen[b]++;
            b = next;
        }
        p->buckets[i] = 0;
    }
    p->nindexed = 0;
    kvp__policy_forget(p);
    kvp__ev_cleared(p);
    kvp__notify_evict(p, NULL, KVP_NO_BLOCK);
}

/* ------------------------------------------------------------------------ */
/* Verified hits                                                             */
/* ------------------------------------------------------------------------ */

/* New verification arrays for `ncap` blocks holding the current ones' data.
 * All or nothing; the caller swaps them in (and frees the old ones) or
 * releases them. */
kvp_status kvp__verify_reserve(kvp_pool *p, uint32_t ncap, uint32_t **vtok, uint32_t **vparent,
                               uint32_t **vpgen, uint32_t **gen)
{
    size_t bs = p->cfg.block_size;
    *vtok = kvp__zalloc(p, (size_t)ncap * bs * sizeof(uint32_t));
    *vparent = kvp__zalloc(p, (size_t)ncap * sizeof(uint32_t));
    *vpgen = kvp__zalloc(p, (size_t)ncap * sizeof(uint32_t));
    *gen = kvp__zalloc(p, (size_t)ncap * sizeof(uint32_t));
    if (!*vtok || !*vparent || !*vpgen || !*gen) {
        kvp__release(p, *vtok, (size_t)ncap * bs * sizeof(uint32_t));
        kvp__release(p, *vparent, (size_t)ncap * sizeof(uint32_t));
        kvp__release(p, *vpgen, (size_t)ncap * sizeof(uint32_t));
        kvp__release(p, *gen, (size_t)ncap * sizeof(uint32_t));
        *vtok = *vparent = *vpgen = *gen = NULL;
        return KVP_ENOMEM;
    }
    if (p->vtok) {
        memcpy(*vtok, p->vtok, (size_t)p->top * bs * sizeof(uint32_t));
        memcpy(*vparent, p->vparent, (size_t)p->top * sizeof(uint32_t));
        memcpy(*vpgen, p->vpgen, (size_t)p->top * sizeof(uint32_t));
        memcpy(*gen, p->gen, (size_t)p->top * sizeof(uint32_t));
    }
    return KVP_OK;
}

void kvp__publish_verified(kvp_pool *p, uint32_t b, const kvp_hash *h,
                           const kvp__pubinfo *info)
{
    size_t bs = p->cfg.block_size;
    memcpy(p->vtok + (size_t)b * bs, info->tokens, bs * sizeof *info->tokens);
    p->vparent[b] = info->parent;
    p->vpgen[b] = info->parent == KVP__NONE ? 0 : p->gen[info->parent];
    p->hashes[b] = *h;
    kvp__index_insert(p, b, info);
    p->blocks[b].flags |= KVP__F_VERIFIED;
}

/* Does b hold exactly `tokens`, as the child of `parent` as it is now? */
static bool verified(const kvp_pool *p, uint32_t b, uint32_t parent, const uint32_t *tokens)
{
    size_t bs = p->cfg.block_size;
    if (!(p->blocks[b].flags & KVP__F_VERIFIED) || p->vparent[b] != parent)
        return false;
    if (parent != KVP__NONE && (!(p->blocks[parent].flags & KVP__F_PUBLISHED) ||
                                p->gen[parent] != p->vpgen[b]))
        return false;
    return memcmp(p->vtok + (size_t)b * bs, tokens, bs * sizeof *tokens) == 0;
}

uint32_t kvp__lookup_verified(const kvp_pool *p, int s, const kvp_hash *h, uint32_t parent,
                              const uint32_t *tokens)
{
    for (uint32_t b = kvp__index_first(p, s, h); b != KVP__NONE; b = kvp__index_next(p, b))
        if (verified(p, b, parent, tokens))
            return b;
    return KVP__NONE;
}

/* ------------------------------------------------------------------------ */
/* Public calls                                                              */
/* ------------------------------------------------------------------------ */

/* Index block id (in use) under *hash (the caller entered): a no-op when it
 * has that hash, KVP_EBUSY when it has another; a refusal changes nothing.
 * *changed is set when the index changed. */
static kvp_status publish_locked(kvp_pool *pool, kvp_block id, const kvp_hash *hash,
                                 bool *changed)
{
    kvp_status rc = kvp__check_in_use(pool, id);
    if (rc)
        return rc;
    kvp__block *blk = &pool->blocks[id];
    if (!(blk->flags & KVP__F_PUBLISHED)) {
        pool->hashes[id] = *hash;
        kvp__index_insert(pool, id, NULL);
        *changed = true;
    } else if (memcmp(pool->hashes[id].b, hash->b, sizeof hash->b) != 0) {
        rc = KVP_EBUSY;
    }
    return rc;
}

KVP__FLATTEN kvp_status kvp_publish(kvp_pool *pool, kvp_block id, const kvp_hash *hash)
{
    if (!pool || !hash || !pool->cfg.prefix_caching)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    bool changed = false;
    rc = publish_locked(pool, id, hash, &changed);
    kvp__leave(pool, changed);
    return rc;
}

/* n publishes in order under one entry (kvpool.h): the first refusal stops
 * the run, the publishes before it stand. */
KVP__FLATTEN kvp_status kvp_publish_each(kvp_pool *pool, const kvp_block *ids,
                                         const kvp_hash *hashes, size_t n, size_t *n_published)
{
    if (!pool || (n && (!ids || !hashes)) || !pool->cfg.prefix_caching)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    bool changed = false;
    size_t i = 0;
    while (i < n && (rc = publish_locked(pool, ids[i], &hashes[i], &changed)) == KVP_OK)
        i++;
    if (n_published)
        *n_published = i;
    kvp__leave(pool, changed);
    return rc;
}

KVP__FLATTEN kvp_status kvp_lookup(kvp_pool *pool, kvp_stream stream, const kvp_hash *hash,
                                   kvp_block *out)
{
    if (!pool || !hash || !out)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    uint32_t b = kvp__index_find(pool, s, hash);
    if (b == KVP__NONE)
        rc = KVP_ENOTFOUND;
    else
        *out = b;
    kvp__leave(pool, false);
    return rc;
}

kvp_status kvp_publish_verified(kvp_pool *pool, kvp_block id, const kvp_hash *hash,
                                kvp_block parent, const uint32_t *tokens, size_t n)
{
    if (!pool || !hash || !tokens || !pool->cfg.prefix_caching || !pool->cfg.verify_hits ||
        n != pool->cfg.block_size)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = kvp__check_in_use(pool, id);
    if (!rc && parent != KVP_NO_BLOCK &&
        (parent >= pool->top || !(pool->blocks[parent].flags & KVP__F_PUBLISHED) ||
         parent == id))
        rc = KVP_EINVAL;
    if (!rc && (pool->blocks[id].flags & KVP__F_PUBLISHED))
        rc = KVP_EBUSY;
    if (!rc) {
        bool first = parent == KVP_NO_BLOCK;
        kvp__pubinfo info = {first ? KVP__NONE : parent, first ? NULL : &pool->hashes[parent],
                             tokens, NULL, 0};
        kvp__publish_verified(pool, id, hash, &info);
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_lookup_verified(kvp_pool *pool, kvp_stream stream, const kvp_hash *hash,
                               kvp_block parent, const uint32_t *tokens, size_t n, kvp_block *out)
{
    if (!pool || !hash || !tokens || !out || !pool->cfg.verify_hits ||
        n != pool->cfg.block_size)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    bool parent_ok =
        parent == KVP_NO_BLOCK || (parent < pool->top && !kvp__is_fresh(pool, parent));
    uint32_t b = parent_ok ? kvp__lookup_verified(pool, s, hash, parent, tokens) : KVP__NONE;
    if (b == KVP__NONE)
        rc = KVP_ENOTFOUND;
    else
        *out = b;
    kvp__leave(pool, false);
    return rc;
}

kvp_status kvp_unpublish(kvp_pool *pool, kvp_block id)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = kvp__check_id(pool, id);
    if (!rc && !(pool->blocks[id].flags & KVP__F_PUBLISHED))
        rc = KVP_ENOTFOUND;
    if (!rc) {
        kvp__unindex(pool, id);
        if (pool->blocks[id].state == KVP_BLOCK_CACHED)
            kvp__cached_to_vacant(pool, id);
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_clear_index(kvp_pool *pool)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp__forget_all(pool);
    kvp__leave(pool, true);
    return KVP_OK;
}

kvp_status kvp_reset_prefix_cache(kvp_pool *pool)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    if (pool->g.in_use > (pool->cfg.null_block ? 1u : 0u))
        rc = KVP_EBUSY;
    else
        kvp__forget_all(pool);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* Evict the next n cached blocks of stream s in eviction order (n
 * available). */
static void evict_next(kvp_pool *p, int s, uint32_t n)
{
    while (n--) {
        uint32_t b = kvp__policy_victim(&p->st[s]);
        kvp__unindex(p, b);
        kvp__cached_to_vacant(p, b);
    }
}

kvp_status kvp_evict(kvp_pool *pool, kvp_stream stream, uint32_t n, uint32_t *n_evicted)
{
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    uint32_t k = n < pool->st[s].ncached ? n : pool->st[s].ncached;
    evict_next(pool, s, k);
    if (n_evicted)
        *n_evicted = k;
    kvp__leave(pool, k > 0);
    return KVP_OK;
}

kvp_status kvp_ensure_free(kvp_pool *pool, kvp_stream stream, uint32_t n)
{
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    const kvp__stream *st = &pool->st[s];
    uint32_t k = 0;
    if ((uint64_t)st->nvacant + st->ncached < n)
        rc = KVP_EEXHAUSTED;
    else if (st->nvacant < n)
        evict_next(pool, s, k = n - st->nvacant);
    kvp__leave(pool, k > 0);
    return rc;
}
