/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c — the internal client interface (client.h): taking, claiming,
 * dropping, filling, publishing and looking up blocks as a user of the pool
 * does, composed from the mechanisms below it (block state transitions,
 * free structures, owners' references, the content index, growth).
 *
 * What it owns: nothing of the pool's state; only the order in which a
 * client's operation calls the mechanisms, so that the public calls
 * (take.c, free.c, pool.c) and sequence.c cannot disagree on it.
 *
 * Who calls it: take.c, free.c, pool.c and sequence.c.
 */
#include "client.h"
#include "block.h"
#include "events.h"
#include "freelist.h"
#include "index.h"
#include "owner.h"
#include "policy.h"
#include "record.h"
#include "resize.h"

/* The stream's vacant and cached blocks.  O(1). */
uint32_t kvp__client_free_blocks(const kvp_pool *p, int s)
{
    return p->st[s].nvacant + p->st[s].ncached;
}

/* Growth by the shortfall when the configuration allows it.  O(growth). */
kvp_status kvp__client_room(kvp_pool *p, int s, uint32_t avail, uint64_t need)
{
    if (avail >= need)
        return KVP_OK;
    uint64_t more = need - avail;
    if (!p->cfg.grow_on_exhaustion || more > kvp__max_blocks(p) - kvp__managed(p)) {
        p->ctr.exhausted++;
        return KVP_EEXHAUSTED;
    }
    kvp_status rc = kvp__grow(p, s, (uint32_t)more);
    if (!rc)
        p->ctr.grown += more;
    return rc;
}

/* The reuse order's pick, off the free structures, handed out.  O(1)
 * (O(log64 n) with LOWEST reuse). */
uint32_t kvp__client_take(kvp_pool *p, int s, uint32_t slot, unsigned format)
{
    uint32_t b = kvp__pick(p, s);
    kvp__free_remove(p, b);
    kvp__hand_out(p, b, slot, format);
    return b;
}

/* The claim hit noted for the policy; a cached block comes off the free
 * list into use, counted.  O(1) (O(owners of b) for an owner's xref). */
void kvp__client_claim(kvp_pool *p, uint32_t b, uint32_t slot)
{
    kvp__block *blk = &p->blocks[b];
    kvp__policy_hit(blk);
    if (blk->state == KVP_BLOCK_CACHED) {
        kvp__free_remove(p, b);
        blk->state = KVP_BLOCK_IN_USE;
        blk->prev = blk->next = KVP__NONE;
        kvp__account(p, blk, 1);
        if (++p->g.in_use > p->g.peak)
            p->g.peak = p->g.in_use;
    }
    kvp__ref_add(p, b, slot);
}


/* owner.c's reference, nothing else.  O(1) (an owner's xref: O(1)). */
void kvp__client_share(kvp_pool *p, uint32_t b, uint32_t slot)
{
    kvp__ref_add(p, b, slot);
}

/* The reference dropped, then the block freed if none is left.  O(1)
 * (O(owners of b) for an owner's xref). */
void kvp__client_drop(kvp_pool *p, uint32_t b, uint32_t slot, kvp__cursor *cur)
{
    kvp__ref_drop(p, b, slot);
    if (p->blocks[b].ref == 0)
        kvp__release_block(p, b, cur);
}

/* A batch of drops, the blocks' records prefetched KVP__PREFETCH ahead
 * (they lie anywhere in the pool).  O(n). */
void kvp__client_drop_each(kvp_pool *p, const uint32_t *blocks, size_t n, uint32_t slot)
{
    kvp__cursor cur = kvp__cursor_start(n);
    for (size_t j = n; j-- > 0 && n - j <= KVP__PREFETCH;)
        kvp__prefetch_block(p, blocks[j]);
    for (size_t i = n; i-- > 0;) {
        if (i >= KVP__PREFETCH)
            kvp__prefetch_block(p, blocks[i - KVP__PREFETCH]);
        kvp__client_drop(p, blocks[i], slot, &cur);
    }
    kvp__free_end(p, &cur);
}

/* The fill's share of the gauges moved with it.  O(1). */
void kvp__client_fill(kvp_pool *p, uint32_t b, uint32_t fill)
{
    kvp__block *blk = &p->blocks[b];
    kvp__account(p, blk, -1);
    blk->fill = (uint16_t)fill;
    kvp__account(p, blk, 1);
}

/* Verified publish where the pool records tokens, else the digest stored
 * and indexed.  O(block_size) verified, else O(1). */
void kvp__client_publish(kvp_pool *p, uint32_t b, const kvp_hash *h, const kvp__pubinfo *info)
{
    if (p->ver.vtok) {
        kvp__publish_verified(p, b, h, info);
    } else {
        p->hashes[b] = *h;
        kvp__index_insert(p, b, info);
    }
}

/* Verified lookup where the pool records tokens, else the index's first
 * match.  O(chain). */
uint32_t kvp__client_lookup(const kvp_pool *p, int s, const kvp_hash *h, uint32_t parent,
                            const uint32_t *tokens)
{
    return p->ver.vtok ? kvp__lookup_verified(p, s, h, parent, tokens) : kvp__index_find(p, s, h);
}

/* policy.c's priority change, when it raises.  O(1). */
bool kvp__client_raise(kvp_pool *p, uint32_t b, unsigned prio)
{
    if (kvp__priority(&p->blocks[b]) >= prio)
        return false;
    kvp__set_priority(p, b, prio);
    return true;
}

/* events.c's callback marker.  O(1). */
bool kvp__client_in_callback(const kvp_pool *p)
{
    return kvp__cb_pool == p;
}
