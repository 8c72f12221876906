/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_lfu.c — KVP_POLICY_LFU: least frequently used first, with aging.
 *
 * What it owns: each cached block's frequency class, 0 to KVP__SEGS - 1, in
 * its record's KVP__R_FREQ bits (kept while the block is in use, cleared
 * with the other policy bits when its content goes), and the segments
 * above 0 of each priority, one per class.
 *
 * The rule: a block's class counts the claims of its content, one per time
 * it was freed after a claim, up to the top class.  A block becoming cached
 * goes to the most recent end of its class's segment; the victim is the
 * least recently freed block of the lowest class.  Aging: a class above 0
 * holds at most protected_percent / (KVP__SEGS - 1) of the stream's blocks;
 * an insertion over that share moves the class's least recently freed
 * blocks down one class (their count decays), which may in turn push the
 * class below over its share.  So content claimed often but long ago drifts
 * down, and content never claimed again leaves before any that was.
 *
 * Invariant (lfu_check): a cached block's segment is its class.
 *
 * Why it suits prefix caches: a claim takes a prefix from its first block,
 * so a block's parent is claimed at least as often as the block and sits in
 * the same class or a higher one; within a class the parent, freed after
 * the child (requests free last block first), is the more recent.  Either
 * way the child leaves first.  It keeps no memory beyond the records and
 * costs O(1) amortized per insertion: each block moved down was moved there
 * by an insertion, at most KVP__SEGS - 1 moves per block freed.
 */
#include "policy.h"

#include <stdio.h>

/* Block record blk's frequency class. */
static unsigned lfu_class(const kvp__block *blk)
{
    return (blk->retain & KVP__R_FREQ) >> KVP__R_FREQ_SHIFT;
}

/* Set block record blk's frequency class to c. */
static void lfu_set_class(kvp__block *blk, unsigned c)
{
    blk->retain = (uint16_t)((blk->retain & ~KVP__R_FREQ) | c << KVP__R_FREQ_SHIFT);
}

/* Block b, claimed since it was last freed or holding a class above 0,
 * became cached: a claim raises its class by one (and is spent), then it
 * joins its class's segment, and each class from there down to 1 over its
 * share hands its least recently freed blocks one class down. */
static void lfu_insert(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    unsigned c = lfu_class(blk), k = kvp__priority(blk);
    if ((blk->retain & KVP__R_HIT) && c + 1 < KVP__SEGS)
        c++;
    blk->retain &= (uint16_t)~KVP__R_HIT;
    lfu_set_class(blk, c);
    kvp__seg_append(p, b, c);
    uint64_t share = (uint64_t)st->nblocks * p->cfg.protected_percent;
    for (; c > 0; c--)
        while ((uint64_t)st->nseg[KVP__SEGS * k + c] * 100 * (KVP__SEGS - 1) > share)
            lfu_set_class(&p->blocks[kvp__seg_demote(p, st, k, c)], c - 1);
}

/* Every cached block sits in the segment of its class.  KVP_OK, or
 * KVP_ECORRUPT with a message in msg. */
static kvp_status lfu_check(const kvp_pool *p, char *msg, size_t cap)
{
    for (int s = 0; s < kvp__streams(p); s++)
        for (unsigned l = 0; l < KVP__LISTS; l++)
            for (uint32_t b = p->st[s].lhead[l]; b != KVP__NONE; b = p->blocks[b].lnext)
                if (kvp__segment(&p->blocks[b]) != lfu_class(&p->blocks[b])) {
                    snprintf(msg, cap, "block %u: class %u in segment %u", b,
                             lfu_class(&p->blocks[b]), kvp__segment(&p->blocks[b]));
                    return KVP_ECORRUPT;
                }
    return KVP_OK;
}

const kvp__policy kvp__policy_lfu = {
    .name = "lfu",
    .segments = KVP__SEGS,
    .slow = KVP__R_HIT | KVP__R_FREQ,
    .valid = kvp__policy_refuse_fifo,
    .insert = lfu_insert,
    .check = lfu_check,
};
