/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resize.c — growth, shrink and relocation of the pool.
 *
 * What it owns: the id space [0, top), the retired set, array capacity.
 *
 * Ids are never renumbered behind the caller's back: growth first refills
 * ids that shrink retired (lowest first), then appends above the top; only
 * kvp_retire_top moves a block, and it reports the move.  Keeping the
 * highest id always managed (retired ids at the top are trimmed off) makes
 * "refill retired ids, then append" hand out exactly the ids a reader expects.
 *
 * Arrays grow by doubling, all or nothing: everything new is allocated before
 * anything is switched over, so a failed growth leaves the pool as it was
 * (larger internal capacities are not part of the state).
 */
#include "resize.h"
#include "freelist.h"
#include "guard.h"
#include "idset.h"
#include "index.h"
#include "mem.h"
#include "owner.h"
#include "record.h"
#include "storage.h"

/* Index buckets for `cap` blocks: cap + cap / 2 (at least 1, at most
 * 2^31), so there are at most two distinct (stream, hash) per three
 * buckets on average and the buckets cost 6 bytes per block; a hash picks
 * its bucket by multiplying 32 bits of its keyed hash by the count, which
 * needs no power of two.  A publish, lookup or eviction
 * walks the distinct hashes of one chain (index.c), each step a read of
 * another block's record, so the load factor bounds their cost. */
uint32_t kvp__bucket_count(uint32_t cap)
{
    uint64_t n = (uint64_t)cap + cap / 2;
    return n == 0 ? 1 : n > (1u << 31) ? (1u << 31) : (uint32_t)n;
}

/* Make the arrays hold at least `need` ids. */
static kvp_status reserve(kvp_pool *p, uint32_t need)
{
    if (need <= p->cap)
        return KVP_OK;
    uint32_t limit = kvp__max_blocks(p);
    uint32_t ncap = p->cap > limit / 2 ? limit : p->cap * 2;
    if (ncap < need)
        ncap = need;
    kvp__block *nb = kvp__alloc(p, (size_t)ncap * sizeof *nb);
    kvp_hash *nh = kvp__alloc(p, (size_t)ncap * sizeof *nh);
    uint32_t *nd = kvp__alloc(p, (size_t)ncap * sizeof *nd);
    uint32_t *vtok = NULL, *vparent = NULL, *vpgen = NULL, *gen = NULL;
    kvp_status rc = nb && nh && nd ? KVP_OK : KVP_ENOMEM;
    for (int s = 0; s < kvp__streams(p) && !rc; s++) {
        rc = kvp__idset_resize(p, &p->st[s].vacant, ncap);
        if (!rc)
            rc = kvp__idset_resize(p, &p->st[s].cached, ncap);
    }
    if (!rc)
        rc = kvp__idset_resize(p, &p->retired, ncap);
    uint32_t nbuckets = kvp__bucket_count(ncap);
    if (!rc && nbuckets > p->idx.nbuckets)
        rc = kvp__index_rebuild(p, nbuckets);
    if (!rc && p->ver.vtok)
        rc = kvp__verify_reserve(p, ncap, &vtok, &vparent, &vpgen, &gen);
    if (!rc)
        rc = kvp__storage_reserve(p, ncap);
    size_t bs = p->cfg.block_size;
    if (rc) {
        kvp__release(p, nb, (size_t)ncap * sizeof *nb);
        kvp__release(p, nh, (size_t)ncap * sizeof *nh);
        kvp__release(p, nd, (size_t)ncap * sizeof *nd);
        if (vtok) {
            kvp__release(p, vtok, (size_t)ncap * bs * sizeof *vtok);
            kvp__release(p, vparent, (size_t)ncap * sizeof *vparent);
            kvp__release(p, vpgen, (size_t)ncap * sizeof *vpgen);
            kvp__release(p, gen, (size_t)ncap * sizeof *gen);
        }
        return rc;
    }
    memcpy(nb, p->blocks, (size_t)p->top * sizeof *nb);
    memcpy(nh, p->hashes, (size_t)p->top * sizeof *nh);
    memcpy(nd, p->idx.dprev, (size_t)p->top * sizeof *nd);
    kvp__release(p, p->blocks, (size_t)p->cap * sizeof *p->blocks);
    kvp__release(p, p->hashes, (size_t)p->cap * sizeof *p->hashes);
    kvp__release(p, p->idx.dprev, (size_t)p->cap * sizeof *p->idx.dprev);
    p->blocks = nb;
    p->hashes = nh;
    p->idx.dprev = nd;
    if (vtok) {
        kvp__release(p, p->ver.vtok, (size_t)p->cap * bs * sizeof *vtok);
        kvp__release(p, p->ver.vparent, (size_t)p->cap * sizeof *vparent);
        kvp__release(p, p->ver.vpgen, (size_t)p->cap * sizeof *vpgen);
        kvp__release(p, p->ver.gen, (size_t)p->cap * sizeof *gen);
        p->ver.vtok = vtok;
        p->ver.vparent = vparent;
        p->ver.vpgen = vpgen;
        p->ver.gen = gen;
    }
    kvp__storage_commit(p, ncap);
    p->cap = ncap;
    return KVP_OK;
}

/* Add n vacant blocks to stream s (the caller checked the cap).  They join
 * the free blocks as if freed now, lowest id first. */
KVP__COLD kvp_status kvp__grow(kvp_pool *p, int s, uint32_t n)
{
    uint32_t from_retired = n < p->nretired ? n : p->nretired;
    kvp_status rc = kvp__stk_reserve(p, s, p->st[s].nblocks + n);
    if (!rc)
        rc = reserve(p, p->top + (n - from_retired));
    if (rc)
        return rc;
    kvp__cursor cur = kvp__cursor_start(n);
    kvp__free_listed(p, s, &cur);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b;
        if (p->nretired) {
            b = kvp__idset_min(&p->retired);
            kvp__idset_del(&p->retired, b);
            p->nretired--;
        } else {
            b = p->top++;
            if (p->top > p->hwm)
                p->hwm = p->top;
        }
        kvp__init_block(p, b, s, KVP_BLOCK_VACANT);
        kvp__free_insert(p, b, &cur);
        p->st[s].nblocks++;
    }
    kvp__free_end(p, &cur);
    return KVP_OK;
}

/* Drop retired ids off the top, so the highest id is always managed. */
static void trim_top(kvp_pool *p)
{
    while (p->top > 0 && p->blocks[p->top - 1].state == KVP_BLOCK_RETIRED) {
        kvp__idset_del(&p->retired, p->top - 1);
        p->nretired--;
        p->top--;
    }
}

/* Mark b (already out of every free structure) retired. */
static void retire(kvp_pool *p, uint32_t b, int s)
{
    kvp__init_block(p, b, s, KVP_BLOCK_RETIRED);
    p->st[s].nblocks--;
    kvp__idset_add(&p->retired, b);
    p->nretired++;
    p->ctr.retired++;
    trim_top(p);
}

/* Retire free block b; cached content is evicted. */
static void retire_free(kvp_pool *p, uint32_t b)
{
    int s = kvp__stream_of(p, b);
    if (kvp__state(p, b) == KVP_BLOCK_CACHED)
        kvp__unindex(p, b);
    kvp__free_remove(p, b);
    retire(p, b, s);
}

/* Give block src's whole identity to free block dst (already taken out of
 * the free structures, its old content evicted). */
static void adopt(kvp_pool *p, uint32_t dst, uint32_t src)
{
    kvp__block *d = &p->blocks[dst], *s = &p->blocks[src];
    kvp__storage_copy(p, s->stream, src, dst);
    if (p->ver.vtok) { /* the recorded tokens and parent move; src's children
                      recorded (src, gen) and must stop matching */
        size_t bs = p->cfg.block_size;
        memcpy(p->ver.vtok + dst * bs, p->ver.vtok + src * bs, bs * sizeof *p->ver.vtok);
        p->ver.vparent[dst] = p->ver.vparent[src];
        p->ver.vpgen[dst] = p->ver.vpgen[src];
        p->ver.gen[src]++;
    }
    uint32_t hnext = d->hnext;
    *d = *s;
    d->hnext = hnext;
    d->lprev = d->lnext = KVP__NONE;
    if (s->flags & KVP__F_PUBLISHED) {
        p->hashes[dst] = p->hashes[src];
        kvp__index_replace(p, src, dst);
    }
    kvp__owner_relocate(p, dst);
    if (p->seq.relocate)
        p->seq.relocate(p, src, dst);
}

kvp_status kvp_extend(kvp_pool *pool, kvp_stream stream, uint32_t n, uint32_t *n_added)
{
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    uint32_t room = kvp__max_blocks(pool) - kvp__managed(pool);
    uint32_t k = n < room ? n : room;
    rc = k ? kvp__grow(pool, s, k) : KVP_OK;
    if (!rc) {
        pool->ctr.extended += k;
        if (n_added)
            *n_added = k;
    }
    kvp__leave(pool, !rc && k > 0);
    return rc;
}

/* The highest vacant id of stream s (fresh ones included), or NONE. */
static uint32_t highest_vacant(const kvp_pool *p, int s)
{
    const kvp__stream *st = &p->st[s];
    uint32_t v = kvp__idset_max(&st->vacant);
    if (st->fresh_lo < st->fresh_hi && (v == KVP__NONE || st->fresh_hi - 1 > v))
        v = st->fresh_hi - 1;
    return v;
}

kvp_status kvp_shrink(kvp_pool *pool, kvp_stream stream, uint32_t target_free, uint32_t *n_retired)
{
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    kvp__stream *st = &pool->st[s];
    uint32_t k = 0;
    if (st->nvacant + st->ncached > target_free)
        kvp__order(pool);
    while (st->nvacant + st->ncached > target_free) {
        uint32_t b = highest_vacant(pool, s);
        retire_free(pool, b != KVP__NONE ? b : kvp__idset_max(&st->cached));
        k++;
    }
    if (n_retired)
        *n_retired = k;
    kvp__leave(pool, k > 0);
    return KVP_OK;
}

kvp_status kvp_retire_top(kvp_pool *pool, kvp_block *retired, kvp_block *moved_to)
{
    if (!pool || !retired || !moved_to)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t t = pool->top ? pool->top - 1 : KVP__NONE;
    uint32_t dst = KVP__NONE;
    if (t == KVP__NONE)
        rc = KVP_EEXHAUSTED;
    else if (kvp__state(pool, t) != KVP_BLOCK_IN_USE)
        retire_free(pool, t);
    else if (pool->blocks[t].flags & KVP__F_NULL)
        rc = KVP_EINVAL;
    else if ((dst = kvp__pick(pool, pool->blocks[t].stream)) == KVP__NONE)
        rc = KVP_EEXHAUSTED;
    else {
        int s = pool->blocks[t].stream;
        if (kvp__state(pool, dst) == KVP_BLOCK_CACHED)
            kvp__unindex(pool, dst);
        kvp__free_remove(pool, dst);
        adopt(pool, dst, t);
        retire(pool, t, s);
        pool->ctr.relocated++;
    }
    if (!rc) {
        *retired = t;
        *moved_to = dst;
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}
