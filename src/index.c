/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c — the content index: block hash -> block, per stream, and the calls
 * that publish, find, evict and forget content.
 *
 * What it owns: the bucket array, its secret, each published block's digest
 * and its place in a bucket chain (kvp__block.hnext and p->idx.dprev), and the
 * eviction count.
 *
 * Shape.  Chaining through the block records rather than a separate table
 * such as map.c's: a block holds at most one hash, so the index never needs
 * more entries than there are blocks and never allocates on publish; keys
 * are 32-byte digests, too large to keep in probe entries.  The copies of
 * one (stream, hash) are consecutive in their chain, in publish order: a
 * run.  A run's first copy is the one lookup returns; its dprev names the
 * run's last copy, every other copy carries KVP__F_COPY and its dprev names
 * the copy before it.  So a walk of a chain visits distinct hashes only
 * (first copy, then the entry after its last copy; a first copy alone, the
 * usual case, is followed by no copy and its dprev is not read), a publish
 * appends after its run's last copy, and a removal relinks the copy's
 * neighbours.  Every call costs O(distinct
 * hashes in one chain), however many copies a hash has.  Other files read
 * the index through kvp__index_first / kvp__index_next (index_walk.h),
 * never by walking the chains (check.c, which verifies them, aside).
 *
 * Chain length.  kvp__bucket_of is XXH3 keyed with a random secret drawn
 * per pool, so hashes chosen by a caller (hashes given to kvp_publish, a
 * custom hash function, a fixed root seed) land in buckets the caller
 * cannot predict: with at least one bucket per block, a chain holds about
 * one distinct hash.  Should a chain reach KVP__CHAIN_MAX distinct hashes
 * anyway (a caller that learnt the secret), the publish that finds it so
 * draws a fresh secret and re-chains the whole index in place, at most once
 * per bucket-count new hashes, so that re-chaining costs O(1) amortized.
 *
 * Invariants:
 * - A block is in a chain iff it is published; it is in the chain of
 *   kvp__bucket_of(its stream, its digest), in the run of its (stream,
 *   digest), the only run of that key in the chain.
 * - Runs are in publish order, and relocation replaces an entry in place:
 *   lookup returns the first published still indexed.
 * - A cached block is always published (free, content findable).
 */
#include "index.h"
#include "events.h"
#include "freelist.h"
#include "guard.h"
#include "hashing.h"
#include "index_walk.h"
#include "mem.h"
#include "policy.h"
#include "record.h"

/* Is indexed block c a copy of (s, h)? */
static bool same_key(const kvp_pool *p, uint32_t c, int s, const kvp_hash *h)
{
    return p->blocks[c].stream == (unsigned)s && memcmp(p->hashes[c].b, h->b, sizeof h->b) == 0;
}

/* The link naming first copy f in its chain: the bucket, or the hnext of
 * the previous run's last copy.  O(distinct hashes in the chain). */
static uint32_t *link_to_first(kvp_pool *p, uint32_t f)
{
    uint32_t *link = &p->idx.buckets[kvp__bucket_of(p, p->blocks[f].stream, &p->hashes[f])];
    while (*link != f + 1)
        link = &p->blocks[p->idx.dprev[*link - 1]].hnext;
    return link;
}

/* The first copy of indexed block b's run. */
static uint32_t first_of(const kvp_pool *p, uint32_t b)
{
    return kvp__index_first(p, p->blocks[b].stream, &p->hashes[b]);
}

/* Is indexed block b the last copy of its run? */
static bool is_last(const kvp_pool *p, uint32_t b)
{
    uint32_t n = kvp__chain_next(p, b);
    return n == KVP__NONE || kvp__index_is_first(p, n);
}

/* Move every run of the n chains of `old` to its chain in p->idx.buckets
 * (under the current secret and mask), whole and in order.  `old` may be
 * p->idx.buckets itself: the chains are first strung into one list through the
 * runs' last copies, emptying `old`, then dealt out.  O(n + entries). */
static void rechain(kvp_pool *p, uint32_t *old, uint32_t n)
{
    uint32_t list = 0, *tail = &list;
    for (uint32_t i = 0; i < n; i++) {
        if (!old[i])
            continue;
        *tail = old[i];
        old[i] = 0;
        uint32_t last = p->idx.dprev[*tail - 1];
        while (p->blocks[last].hnext)
            last = p->idx.dprev[p->blocks[last].hnext - 1];
        tail = &p->blocks[last].hnext;
    }
    for (uint32_t f = list - 1u; f != KVP__NONE;) {
        uint32_t last = p->idx.dprev[f], next = kvp__chain_next(p, last);
        uint32_t *head = &p->idx.buckets[kvp__bucket_of(p, p->blocks[f].stream, &p->hashes[f])];
        p->blocks[last].hnext = *head;
        *head = f + 1;
        f = next;
    }
}

/* A chain reached KVP__CHAIN_MAX distinct hashes: draw a fresh secret and
 * re-chain in place, unless the last re-keying was fewer than a bucket
 * count of new hashes ago, or the kernel gives no random bytes (the index
 * stays as it is, correct, its chain long). */
static KVP__COLD void rekey(kvp_pool *p)
{
    if (p->idx.rekey_in || kvp__random(p->idx.secret, sizeof p->idx.secret))
        return;
    rechain(p, p->idx.buckets, p->idx.nbuckets);
    p->idx.rekey_in = p->idx.nbuckets;
}

kvp_status kvp__index_init(kvp_pool *p)
{
    return kvp__random(p->idx.secret, sizeof p->idx.secret);
}

/* Link b (digest already stored) after the last copy of its run, or as a
 * run of its own at the head of its chain, and tell the event queue
 * (`info` says what the publisher knows; may be NULL). */
void kvp__index_insert(kvp_pool *p, uint32_t b, const kvp__pubinfo *info)
{
    int s = p->blocks[b].stream;
    uint32_t *head = &p->idx.buckets[kvp__bucket_of(p, s, &p->hashes[b])], distinct = 0, f;
    for (f = *head - 1u; f != KVP__NONE && !same_key(p, f, s, &p->hashes[b]);
         f = kvp__chain_skip(p, f))
        distinct++;
    if (f != KVP__NONE) {
        uint32_t last = p->idx.dprev[f];
        p->blocks[b].hnext = p->blocks[last].hnext;
        p->blocks[last].hnext = b + 1;
        p->idx.dprev[b] = last;
        p->idx.dprev[f] = b;
        p->blocks[b].flags |= KVP__F_COPY;
    } else {
        p->idx.dprev[b] = b;
        p->blocks[b].hnext = *head;
        *head = b + 1;
        if (p->idx.rekey_in)
            p->idx.rekey_in--;
    }
    p->blocks[b].flags |= KVP__F_PUBLISHED;
    p->idx.nindexed++;
    if (f == KVP__NONE && distinct >= KVP__CHAIN_MAX)
        rekey(p);
    kvp__policy_published(p, b);
    kvp__ev_stored(p, b, info);
}

/* Take indexed block b out of its chain, its run's order otherwise kept. */
static void unlink_entry(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    uint32_t prev = p->idx.dprev[b], next = blk->hnext - 1u;
    if (kvp__index_is_first(p, b)) {
        uint32_t *link = link_to_first(p, b);
        if (prev == b) { /* the only copy */
            *link = blk->hnext;
        } else {         /* the second copy becomes the first */
            p->idx.dprev[next] = prev;
            p->blocks[next].flags &= (uint8_t)~KVP__F_COPY;
            *link = next + 1;
        }
    } else {
        p->idx.dprev[is_last(p, b) ? first_of(p, b) : next] = prev;
        p->blocks[prev].hnext = blk->hnext;
    }
    blk->hnext = 0;
}

void kvp__index_remove(kvp_pool *p, uint32_t b)
{
    kvp__ev_removed(p, b);
    unlink_entry(p, b);
    p->blocks[b].flags &=
        (uint8_t)~(KVP__F_PUBLISHED | KVP__F_VERIFIED | KVP__F_ANNOUNCED | KVP__F_COPY);
    p->idx.nindexed--;
    if (p->ver.gen)
        p->ver.gen[b]++; /* children recorded against this content no longer match */
}

/* Block `to` takes over `from`'s entry, at the same place in its run.
 * `to` already carries from's digest and stream. */
void kvp__index_replace(kvp_pool *p, uint32_t from, uint32_t to)
{
    uint32_t prev = p->idx.dprev[from], next = p->blocks[from].hnext - 1u;
    if (kvp__index_is_first(p, from)) {
        *link_to_first(p, from) = to + 1;
        p->idx.dprev[to] = prev == from ? to : prev;
        if (prev != from)
            p->idx.dprev[next] = to;
    } else {
        p->idx.dprev[is_last(p, from) ? first_of(p, from) : next] = to;
        p->blocks[prev].hnext = to + 1;
        p->idx.dprev[to] = prev;
    }
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

/* Re-chain every entry into `nbuckets` buckets, each run whole and in
 * order.  All or nothing. */
kvp_status kvp__index_rebuild(kvp_pool *p, uint32_t nbuckets)
{
    uint32_t *nb = kvp__zalloc(p, (size_t)nbuckets * sizeof *nb);
    if (!nb)
        return KVP_ENOMEM;
    uint32_t *old = p->idx.buckets, oldn = p->idx.nbuckets;
    p->idx.buckets = nb;
    p->idx.nbuckets = nbuckets;
    rechain(p, old, oldn);
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
    for (uint32_t i = 0; i < p->idx.nbuckets; i++) {
        for (uint32_t b = kvp__chain_first(p, i); b != KVP__NONE;) {
            uint32_t next = kvp__chain_next(p, b);
            p->blocks[b].hnext = 0;
            p->blocks[b].flags &=
                (uint8_t)~(KVP__F_PUBLISHED | KVP__F_VERIFIED | KVP__F_ANNOUNCED | KVP__F_COPY);
            if (p->ver.gen)
                p->ver.gen[b]++;
            b = next;
        }
        p->idx.buckets[i] = 0;
    }
    p->idx.nindexed = 0;
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
    if (p->ver.vtok) {
        memcpy(*vtok, p->ver.vtok, (size_t)p->top * bs * sizeof(uint32_t));
        memcpy(*vparent, p->ver.vparent, (size_t)p->top * sizeof(uint32_t));
        memcpy(*vpgen, p->ver.vpgen, (size_t)p->top * sizeof(uint32_t));
        memcpy(*gen, p->ver.gen, (size_t)p->top * sizeof(uint32_t));
    }
    return KVP_OK;
}

void kvp__publish_verified(kvp_pool *p, uint32_t b, const kvp_hash *h,
                           const kvp__pubinfo *info)
{
    size_t bs = p->cfg.block_size;
    memcpy(p->ver.vtok + (size_t)b * bs, info->tokens, bs * sizeof *info->tokens);
    p->ver.vparent[b] = info->parent;
    p->ver.vpgen[b] = info->parent == KVP__NONE ? 0 : p->ver.gen[info->parent];
    p->hashes[b] = *h;
    kvp__index_insert(p, b, info);
    p->blocks[b].flags |= KVP__F_VERIFIED;
}

/* Does b hold exactly `tokens`, as the child of `parent` as it is now? */
static bool verified(const kvp_pool *p, uint32_t b, uint32_t parent, const uint32_t *tokens)
{
    size_t bs = p->cfg.block_size;
    if (!(p->blocks[b].flags & KVP__F_VERIFIED) || p->ver.vparent[b] != parent)
        return false;
    if (parent != KVP__NONE && (!(p->blocks[parent].flags & KVP__F_PUBLISHED) ||
                                p->ver.gen[parent] != p->ver.vpgen[b]))
        return false;
    return memcmp(p->ver.vtok + (size_t)b * bs, tokens, bs * sizeof *tokens) == 0;
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
