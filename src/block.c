/* SPDX-License-Identifier: Apache-2.0 */
/*
 * block.c — block states and the pool's gauges: what handing a block out
 * and releasing its last reference do to its record and to the counts (a
 * claim, a client's operation, is client.c's).
 *
 * What it owns: the transitions of a block's state (free to in use, in use
 * to free) and what they do to the gauges in_use, peak, fragmented and
 * fill_sum (kvp_stats).  Where a free block sits is freelist.c's, who
 * holds a reference owner.c's, its hash index.c's.  The predicates on one
 * record (fresh, state, id checks) and the gauge updates are inline in
 * record.h, for every file.
 *
 * Invariants (checked by check.c):
 * - A block is in exactly one state.  A free block (vacant or cached) is in
 *   its stream's free structures, or a fresh one in its fresh range
 *   (freelist.c).  A cached block is published.  A block in use has
 *   ref > 0 and is in no free structure.  A retired block is in the
 *   retired idset.
 * - A fresh block's record is all zero (reads as vacant, no flags).
 * - A vacant block's fill is 0 and its flags at most EVER, so handing it
 *   out only stores into its record (kvp__hand_out_vacant): the record of
 *   the block on top of the stack is often not in cache, and stores do not
 *   wait for the line where a read would.
 * - in_use counts blocks in use; fragmented and fill_sum count those with a
 *   fill (kvp__account), so every gauge reads in O(1).
 *
 * Who calls it: the hand-out and take-back paths: take.c, free.c,
 * client.c.
 */
#include "block.h"
#include "freelist.h"
#include "index.h"
#include "owner.h"
#include "record.h"

/* Hand out vacant block b of stream s (already out of the free
 * structures): one reference goes to `oslot`.  Stores only, no read of the
 * record (the invariant on vacant records above); the caller counts it. */
void kvp__hand_out_vacant(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s)
{
    kvp__block *blk = &p->blocks[b];
    kvp__record_in_use(blk, format);
    blk->stream = (unsigned)s;
    kvp__ref_first(p, b, oslot);
}

/* kvp__hand_out_vacant for a block whose record the caller reads anyway:
 * its EVER flag says whether this is a reuse. */
void kvp__hand_out_counted(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s)
{
    p->ctr.reused += (p->blocks[b].flags & KVP__F_EVER) != 0;
    kvp__hand_out_vacant(p, b, oslot, format, s);
}

/* Hand out free block b (already out of the free structures) for fresh
 * content: a cached block's old content is evicted, and one reference goes
 * to `oslot`.  Counted here. */
void kvp__hand_out(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format)
{
    kvp__block *blk = &p->blocks[b];
    if (blk->flags & KVP__F_PUBLISHED) { /* cached: now as if vacant */
        kvp__unindex(p, b);
        blk->fill = 0;
        blk->retain = 0;
    }
    kvp__hand_out_counted(p, b, oslot, format, blk->stream);
    kvp__count_out(p, 1);
}

/* The last reference on block b went: account for it and free it (cur:
 * the calling free's insertion point, freelist.c). */
void kvp__release_block(kvp_pool *p, uint32_t b, kvp__cursor *cur)
{
    kvp__assert_internal(p->blocks[b].ref == 0 && p->blocks[b].state == KVP_BLOCK_IN_USE);
    kvp__account(p, &p->blocks[b], -1);
    p->g.in_use--;
    kvp__free_insert(p, b, cur);
}
