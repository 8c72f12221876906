/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c — the eviction order of cached free blocks: the lists every
 * policy orders blocks in, and the dispatch to the pool's policy (p->pol,
 * its row of policy_table.c's table) that decides where a block goes.
 *
 * What it owns: each stream's eviction lists (lhead, ltail, lmask, nseg),
 * the lprev/lnext links of cached blocks and the KVP__R_SEG bits of their
 * records (block.c and freelist.c clear every KVP__R_* bit when a block's
 * content goes, and kvp__policy_hit sets KVP__R_HIT on a claim), and the
 * calls through the pool's row (p->pol).  The table of policies and the
 * choice of the pool's row are policy_table.c's.  Each policy's file (policy_lru.c, policy_slru.c, policy_lfu.c) owns what
 * only it keeps.
 *
 * Invariants (checked by check.c and each policy's check):
 * - A block is in exactly one list iff it is cached: list
 *   KVP__SEGS * priority + segment, the segment in KVP__R_SEG and below the
 *   policy's `segments`.  Bit i of lmask is set iff list i is not empty;
 *   nseg[i] is the length of list i when its segment is not 0 (segment 0's
 *   lengths are not kept: no policy needs them).
 * - Each list runs from the least recently put there (head) to the most
 *   recent; the victim is the head of the first non-empty list, so lower
 *   priorities go first, and within one, lower segments first.
 * - A vacant block's retain bits are 0; a block in use has no KVP__R_SEG.
 *
 * Why this shape: the order lives in the block records' links, so a policy
 * costs no memory beyond the records unless it keeps history of its own,
 * and every operation is a list unlink or append plus a count of trailing
 * zeros.  A policy expresses its order by the segment it puts a block in and
 * by moving blocks between segments; the victim rule is the same for all,
 * so reuse and eviction never call through the table.  An insertion whose
 * block has none of the policy's `slow` bits goes to segment 0's most
 * recent end without a call (LRU's every insertion, SLRU's of blocks never
 * claimed), so the common step stays inline.
 */
#include "policy.h"

#include <string.h>

/* A policy's rule for `valid`: refuse FIFO reuse, which reuses free blocks
 * in the order freed, whatever the policy would say. */
kvp_status kvp__policy_refuse_fifo(const kvp_config *c)
{
    return c->reuse == KVP_REUSE_FIFO ? KVP_EINVAL : KVP_OK;
}

/* Release what the policy keeps (also after a failed create, or none). */
void kvp__policy_destroy(kvp_pool *p)
{
    if (p->pol.destroy)
        p->pol.destroy(p);
}

/* The index was emptied: the policy forgets the history it keeps. */
void kvp__policy_forget(kvp_pool *p)
{
    if (p->pol.forget)
        p->pol.forget(p);
}

/* The call to a policy's evicted hook, out of line and cold: a call on the
 * eviction path of a flattened take would otherwise cost every take there
 * the registers it clobbers. */
static KVP__COLD void call_evicted(kvp_pool *p, uint32_t b)
{
    p->pol.evicted(p, b);
}

/* Block b's content is being evicted (index.c): the policy hears of it. */
void kvp__policy_evicted(kvp_pool *p, uint32_t b)
{
    if (__builtin_expect(p->pol.evicted != NULL, 0))
        call_evicted(p, b);
}

/* Block b is being published (index.c): the policy hears of it. */
void kvp__policy_published(kvp_pool *p, uint32_t b)
{
    if (p->pol.published)
        p->pol.published(p, b);
}

/* The policy's own invariants (check.c), KVP_OK when it keeps none. */
kvp_status kvp__policy_check(const kvp_pool *p, char *msg, size_t cap)
{
    return p->pol.check ? p->pol.check(p, msg, cap) : KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Lists                                                                     */
/* ------------------------------------------------------------------------ */

/* The list a cached block's record puts it in. */
unsigned kvp__list_of(const kvp__block *blk)
{
    return KVP__SEGS * kvp__priority(blk) + kvp__segment(blk);
}

/* Take block b out of list l of stream st (it is in it). */
void kvp__list_unlink(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(st->lmask & (1u << l));
    uint32_t prev = blk->lprev, next = blk->lnext;
    if (prev != KVP__NONE)
        p->blocks[prev].lnext = next;
    else
        st->lhead[l] = next;
    if (next != KVP__NONE)
        p->blocks[next].lprev = prev;
    else
        st->ltail[l] = prev;
    if (prev == KVP__NONE && next == KVP__NONE) /* it was alone */
        st->lmask &= ~(1u << l);
    blk->lprev = blk->lnext = KVP__NONE;
}

/* Put block b at the most recent end of list l of stream st. */
void kvp__list_append(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    uint32_t tail = st->ltail[l];
    kvp__assert_internal(b != tail);
    blk->lprev = tail;
    blk->lnext = KVP__NONE;
    if (tail != KVP__NONE) {
        p->blocks[tail].lnext = b;
    } else {
        st->lhead[l] = b;
        st->lmask |= 1u << l;
    }
    st->ltail[l] = b;
}

/* Put cached block b (in no list) at the most recent end of segment seg of
 * its priority, counted when seg is not 0. */
void kvp__seg_append(kvp_pool *p, uint32_t b, unsigned seg)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    blk->retain = (uint16_t)((blk->retain & ~KVP__R_SEG) | seg << KVP__R_SEG_SHIFT);
    unsigned l = kvp__list_of(blk);
    kvp__list_append(p, st, l, b);
    if (seg)
        st->nseg[l]++;
}

/* Move the least recently put block of segment seg (not 0, not empty) of
 * priority k in stream st to the most recent end of segment seg - 1: what
 * a policy does to a segment over its share.  The moved block. */
uint32_t kvp__seg_demote(kvp_pool *p, kvp__stream *st, unsigned k, unsigned seg)
{
    unsigned l = KVP__SEGS * k + seg;
    uint32_t d = st->lhead[l];
    kvp__list_unlink(p, st, l, d);
    st->nseg[l]--;
    kvp__seg_append(p, d, seg - 1);
    return d;
}

/* Empty lists, for a stream being laid out (pool.c). */
void kvp__policy_reset(kvp__stream *st)
{
    for (unsigned l = 0; l < KVP__LISTS; l++)
        st->lhead[l] = st->ltail[l] = KVP__NONE;
    st->lmask = 0;
    memset(st->nseg, 0, sizeof st->nseg);
}

/* Block b just became cached: to the most recent end of its priority's
 * first segment, or where the policy's insert puts it when the block has
 * one of the policy's slow bits. */
void kvp__policy_insert(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(blk->state == KVP_BLOCK_CACHED && !(blk->retain & KVP__R_SEG));
    if (blk->retain & p->pol.slow) {
        p->pol.insert(p, b);
        return;
    }
    kvp__list_append(p, &p->st[blk->stream], kvp__list_of(blk), b);
}

/* Block b (cached) leaves its list: claimed, evicted or vacated. */
void kvp__policy_remove(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(blk->state == KVP_BLOCK_CACHED);
    kvp__stream *st = &p->st[blk->stream];
    unsigned l = kvp__list_of(blk);
    kvp__list_unlink(p, st, l, b);
    if (blk->retain & KVP__R_SEG) {
        st->nseg[l]--;
        blk->retain &= (uint16_t)~KVP__R_SEG;
    }
}

/* Give block b (in use or cached) retention priority prio; a cached block
 * is put back as kvp__policy_insert puts a freed one. */
void kvp__set_priority(kvp_pool *p, uint32_t b, unsigned prio)
{
    kvp__block *blk = &p->blocks[b];
    bool cached = blk->state == KVP_BLOCK_CACHED;
    if (cached)
        kvp__policy_remove(p, b);
    blk->retain = (uint16_t)((blk->retain & ~KVP__R_PRIO) | (prio ^ KVP_PRIORITY_NORMAL));
    if (cached)
        kvp__policy_insert(p, b);
}
