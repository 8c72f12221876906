/* SPDX-License-Identifier: Apache-2.0 */
/*
 * free.c — taking blocks back: kvp_free and kvp_free_owner, the mirror of
 * take.c.
 *
 * What it owns: the checks a free makes before it changes anything, and
 * the order it drops references in.  Dropping one is owner.c's, putting a
 * block whose last reference went among the free ones block.c's and
 * freelist.c's.
 *
 * Invariant: a free either drops every reference it names and changes
 * nothing else visible but the blocks that became free, or fails and
 * changes nothing (kvp_free checks every id in one pass before dropping
 * any).  Blocks freed together are reused in the order given (the cursor,
 * freelist.c).
 *
 * Why this shape: the blocks a free names lie anywhere in the pool, so
 * both loops prefetch their records KVP__PREFETCH entries ahead, and the
 * usual case of kvp_free's check is one test on a record it reads anyway.
 *
 * Who calls it: the public API.
 */
#include "block.h"
#include "client.h"
#include "defer.h"
#include "freelist.h"
#include "guard.h"
#include "owner.h"
#include "record.h"

/* kvp_free's check of one id outside the usual case: it exists, is in use,
 * and the owner holds as many references on it as it is named so far in this
 * call.  Marks the block (its count lives in the LRU link, which a block in
 * use does not need) unless the id itself is refused; *marked says which. */
KVP__COLD static kvp_status check_named(kvp_pool *p, uint32_t b, uint32_t oslot, kvp_owner owner,
                                        bool *marked)
{
    *marked = false;
    kvp_status rc = kvp__check_in_use(p, b);
    if (rc)
        return rc;
    kvp__block *blk = &p->blocks[b];
    if (!(blk->flags & KVP__F_MARK)) {
        blk->flags |= KVP__F_MARK;
        blk->count = 0;
    }
    *marked = true;
    uint32_t times = ++blk->count;
    if (times > blk->ref)
        return KVP_EDOUBLEFREE;
    uint32_t held = owner == KVP_ANON ? blk->anon
                    : oslot == KVP__NONE ? 0
                                         : kvp__refs_held(p, b, oslot);
    return times > held ? KVP_ENOTOWNER : KVP_OK;
}

/* Drop one reference per id named (kvpool.h): one pass checks and marks
 * every id, a second drops the references; a refusal unmarks and changes
 * nothing. */
KVP__FLATTEN kvp_status kvp_free(kvp_pool *pool, const kvp_block *ids, size_t n,
                                 kvp_owner owner)
{
    if (!pool || (!ids && n))
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = owner == KVP_ANON ? KVP__NONE : kvp__owner_find(pool, owner);
    /* Check everything first, in one pass, marking each block named (see
     * check_named); then drop the references, unmarking. */
    for (size_t j = 0; j < n && j < KVP__PREFETCH; j++)
        kvp__prefetch_block(pool, ids[j]);
    size_t i = 0;
    for (; i < n; i++) {
        if (i + KVP__PREFETCH < n)
            kvp__prefetch_block(pool, ids[i + KVP__PREFETCH]);
        kvp__block *blk = ids[i] < pool->top ? &pool->blocks[ids[i]] : NULL;
        /* The usual case, decided in one test: first naming of a block in use
         * (not the null block) on which the caller holds a reference. */
        if (blk && blk->state == KVP_BLOCK_IN_USE &&
            !(blk->flags & (KVP__F_MARK | KVP__F_NULL)) &&
            (slot == KVP__NONE ? owner == KVP_ANON && blk->anon : blk->owner == slot)) {
            blk->flags |= KVP__F_MARK;
            blk->count = 1;
            continue;
        }
        bool marked;
        if ((rc = check_named(pool, ids[i], slot, owner, &marked))) {
            i += marked; /* a marked one is unmarked below with the rest */
            break;
        }
    }
    if (rc) {
        while (i-- > 0)
            pool->blocks[ids[i]].flags &= (uint8_t)~KVP__F_MARK;
    } else if (n) {
        kvp__cursor cur = kvp__cursor_start(n);
        for (i = 0; i < n; i++) {
            uint32_t b = ids[i];
            pool->blocks[b].flags &= (uint8_t)~KVP__F_MARK;
            kvp__client_drop(pool, b, slot, &cur);
        }
        kvp__free_end(pool, &cur);
        if (slot != KVP__NONE && kvp__owner_live(&pool->own.slots[slot]) == 0 &&
            !pool->own.slots[slot].registered)
            kvp__owner_remove(pool, slot);
        pool->ctr.free_calls++;
        pool->ctr.blocks_freed += n;
    }
    kvp__leave(pool, rc == KVP_OK && n > 0);
    return rc;
}

/* Drop every reference an owner holds and forget the owner (kvpool.h):
 * its pending references first (defer.c), then the rest newest first. */
KVP__FLATTEN kvp_status kvp_free_owner(kvp_pool *pool, kvp_owner owner, size_t *n_freed)
{
    if (!pool || owner == KVP_ANON)
        return KVP_EINVAL;
    /* Lazy: no other owner's references are read, and this one's pending
     * ones go back as they are */
    kvp_status rc = kvp__enter_lazy(pool);
    if (rc)
        return rc;
    uint32_t *link = kvp__owner_link(pool, owner), slot;
    if (!link) {
        kvp__leave(pool, false);
        return KVP_ENOTFOUND;
    }
    slot = *link - 1;
    kvp__owner *o = &pool->own.slots[slot];
    kvp__cursor cur = kvp__cursor_start(o->len);
    size_t n = kvp__owner_live(o);
    uint32_t end = kvp__defer_free_owner(pool, o, &cur);
    /* The owner's blocks lie anywhere in the pool (at 1M blocks their misses
     * are most of the cost of a free). */
    for (uint32_t j = end; j-- > 0 && end - j <= KVP__PREFETCH;)
        kvp__prefetch_block(pool, o->refs[j]);
    for (uint32_t i = end; i-- > 0;) {
        uint32_t node = o->refs[i];
        if (i >= KVP__PREFETCH)
            kvp__prefetch_block(pool, o->refs[i - KVP__PREFETCH]);
        if (node == KVP__NONE)
            continue;
        uint32_t b = kvp__node_block(pool, node);
        kvp__node_drop(pool, node, true);
        if (pool->blocks[b].ref == 0)
            kvp__release_block(pool, b, &cur);
    }
    kvp__free_end(pool, &cur);
    kvp__owner_unlink(pool, link, slot); /* nothing above adds or removes owners */
    kvp__defer_tick(pool);
    pool->ctr.free_calls++;
    pool->ctr.blocks_freed += n;
    if (n_freed)
        *n_freed = n;
    kvp__leave(pool, true);
    return KVP_OK;
}
