/* SPDX-License-Identifier: Apache-2.0 */
/*
 * freelist.c — the free blocks of each stream, in reuse order: the q list,
 * the LIFO stack's array, the free id sets, and the calls that put a block
 * among them, pick the next one and take it out.
 *
 * What it owns: each stream's free structures (kvp__stream: qhead/qtail,
 * stk/nstk, the vacant and cached id sets, fresh_lo/fresh_hi,
 * fresh_mark) and its nvacant and ncached counts, and p->ordered.  Two
 * other places write these fields too: pool.c lays them
 * out at creation and clear, and take.c pops them itself in the common case
 * (the top of the LIFO array, or the q list's head).
 *
 * Invariants (checked by check.c):
 * - A vacant block is in its stream's vacant id set (unless fresh) and, in
 *   LIFO/FIFO order, in the stream's q list or (LIFO) its stack array.  A
 *   cached block is in the stream's cached id set and eviction lists
 *   (policy.c, which orders them), and in FIFO order also in the q list.  The id sets ("free sets") are kept only
 *   while p->ordered (LOWEST reuse, or since the first kvp_shrink), and are
 *   empty otherwise.
 * - nvacant + ncached + in-use blocks of a stream == its nblocks.
 * - q lists are doubly linked except for the head's prev, which is not kept.
 * - LIFO: a vacant block is in the stack's array (stk, nstk; marked by
 *   next == KVP__STACKED), in the q list below it, or fresh.  Those in the
 *   array have been handed out before (flag EVER).  A pending reference's
 *   block (defer.c) is in use though its record still reads as in the
 *   array; it is in none of these structures.
 *
 * The fresh range [fresh_lo, fresh_hi) holds vacant blocks never given a
 * record, taken lowest id first: in LIFO order after every freed vacant
 * block, in FIFO order before the queue, in LOWEST order by id with the
 * rest.  A stream's blocks need no set-up at creation that way.
 *
 * Why this shape: the reuse orders (kvp_reuse in kvpool.h) differ only here
 * (kvp__pick, kvp__free_insert, kvp__cached_to_vacant) and in take.c's
 * pop_vacant; everything else is shared.  Lists are linked through the
 * block records, so a free structure costs no memory of its own but the
 * LIFO array's 4 bytes per block, which buys the take its prefetch.
 */
#include "freelist.h"
#include "idset.h"
#include "mem.h"
#include "policy.h"
#include "record.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* The q list                                                               */
/* ------------------------------------------------------------------------ */

/* q list: vacant stack (LIFO) or free queue (FIFO).  The head's prev link is
 * not kept: taking the head, the common case, then reads only the block
 * taken and writes nothing in its successor, whose record may be far from
 * any cache (at 1M blocks that write was a second serial miss per take). */
static void q_unlink(kvp_pool *p, kvp__stream *st, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    bool head = b == st->qhead;
    kvp__assert_internal(head || blk->prev != KVP__NONE);
    if (st->fresh_mark == b)
        st->fresh_mark = blk->next;
    if (head)
        st->qhead = blk->next;
    else
        p->blocks[blk->prev].next = blk->next;
    if (blk->next == KVP__NONE)
        st->qtail = head ? KVP__NONE : blk->prev;
    else if (!head)
        p->blocks[blk->next].prev = blk->prev;
    blk->prev = blk->next = KVP__NONE;
}

/* Insert b after `at` (NONE: at the head). */
static void q_insert_after(kvp_pool *p, kvp__stream *st, uint32_t at, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(b != at && b != st->qhead && blk->state != KVP_BLOCK_IN_USE);
    blk->prev = at;
    blk->next = at == KVP__NONE ? st->qhead : p->blocks[at].next;
    if (blk->next != KVP__NONE)
        p->blocks[blk->next].prev = b;
    else
        st->qtail = b;
    if (at != KVP__NONE)
        p->blocks[at].next = b;
    else
        st->qhead = b;
}

/* ------------------------------------------------------------------------ */
/* The LIFO stack's array                                                   */
/* ------------------------------------------------------------------------ */

/* A LIFO stream's vacant stack has two parts: its top in an array of ids
 * (stk, top last), and below it the q list, linked through the block
 * records, then the fresh range.  Frees push on the array and takes pop
 * it, so the common calls touch no neighbour's record and a take can
 * prefetch the block KVP__STK_AHEAD pops ahead; a list allows only one,
 * and at 1M blocks, where the blocks below the top were freed long ago, a
 * take would wait on the record.  The list holds what must go below the
 * blocks freed so far: cached blocks turned vacant, fresh blocks given a
 * record, blocks kvp__grow adds (never handed out: the array holds only
 * used blocks, so a take counts a reuse without reading the record), and
 * the array's own blocks when they must move (stack_spill: a block taken
 * by id from below the top, a free call reserving more room than is left,
 * or a growth, whose blocks go on top).  A spill moves each block once per
 * push that put it there, so every call stays O(1) amortized.  A block in
 * the array is marked by next == KVP__STACKED.
 *
 * The array has room for every block of its stream (4 bytes per block),
 * and grows with the stream (kvp__stk_reserve), so only a call that
 * reserves room for more entries than it can free on a stream (two streams
 * in one call, an owner's array holding dead entries or two references to
 * one block) can find too little.  A smaller array would overflow when the
 * frees that end a batch of sequences return most of the pool at once. */

/* Room in stream s's stack array for `blocks` blocks, growing it by half at
 * least (amortized O(1) per block added).  Changes nothing on failure. */
kvp_status kvp__stk_reserve(kvp_pool *p, int s, uint32_t blocks)
{
    kvp__stream *st = &p->st[s];
    if (p->cfg.reuse != KVP_REUSE_LIFO || (st->stk && blocks <= st->stkcap))
        return KVP_OK;
    uint32_t cap = st->stkcap + st->stkcap / 2;
    cap = cap > blocks ? cap : blocks;
    cap = cap ? cap : 1;
    uint32_t *stk = kvp__alloc(p, (size_t)cap * sizeof *stk);
    if (!stk)
        return KVP_ENOMEM;
    if (st->stk) {
        memcpy(stk, st->stk, (size_t)st->nstk * sizeof *stk);
        kvp__release(p, st->stk, (size_t)st->stkcap * sizeof *st->stk);
    }
    st->stk = stk;
    st->stkcap = cap;
    return KVP_OK;
}
/* Move the LIFO stack's array onto the head of its list, order kept:
 * O(blocks in the array), each put there by one push. */
static void stack_spill(kvp_pool *p, kvp__stream *st)
{
    for (uint32_t i = 0; i < st->nstk; i++)
        q_insert_after(p, st, KVP__NONE, st->stk[i]);
    st->nstk = 0;
}

/* Put vacant block b on top of stream s's stack where cur says (stack_room
 * reserves the call's room, or sends it to the list): blocks
 * freed together are reused in the order given, so the array is filled
 * downwards from room reserved, at the call's first block on the stream,
 * for every block the call could free (cur->max); kvp__free_end closes the
 * gap.  A call finding too little room spills the array into the list
 * first, and one that cannot fit at all goes to the list, each block below
 * the call's previous one. */
static inline bool stack_room(kvp_pool *p, kvp__stream *st, kvp__cursor *cur, int s)
{
    if (cur->w[s] == KVP__NONE) {
        if (cur->max > st->stkcap - st->nstk)
            stack_spill(p, st);
        cur->w[s] = cur->max <= st->stkcap ? st->nstk + cur->max : KVP__LISTED;
    }
    return cur->w[s] != KVP__LISTED;
}

static inline void stack_put(kvp_pool *p, kvp__stream *st, kvp__cursor *cur, int s, uint32_t b,
                             bool stacked)
{
    if (stack_room(p, st, cur, s)) {
        kvp__assert_internal(cur->w[s] > st->nstk);
        st->stk[--cur->w[s]] = b;
        if (!stacked)
            p->blocks[b].next = KVP__STACKED;
    } else {
        q_insert_after(p, st, cur->at[s], b);
        cur->at[s] = b;
    }
}

/* Make the blocks a call frees on stream s with `cur` go to the head of the
 * q list, in the order given, instead of onto the LIFO stack's array, which
 * is spilled there first: the reuse order is the one the array would have
 * given.  For blocks never handed out (kvp__grow's), which the array does
 * not hold, so that a take from the array need not read a record to count
 * a reuse.
 * O(blocks in the array), amortized over the frees that put them there. */
void kvp__free_listed(kvp_pool *p, int s, kvp__cursor *cur)
{
    if (p->cfg.reuse != KVP_REUSE_LIFO)
        return;
    stack_spill(p, &p->st[s]);
    cur->w[s] = KVP__LISTED;
}

/* The end of a call that freed blocks: the array's new entries lie from w
 * up to the room reserved, and move down onto the old top when fewer than
 * `max` blocks were freed (blocks still referenced, or cached).  O(1), or
 * O(blocks freed) in that case. */
void kvp__free_end(kvp_pool *p, kvp__cursor *cur)
{
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        uint32_t w = cur->w[s];
        if (w == KVP__NONE || w == KVP__LISTED)
            continue;
        uint32_t n = st->nstk + cur->max - w;
        if (w != st->nstk)
            memmove(st->stk + st->nstk, st->stk + w, (size_t)n * sizeof *st->stk);
        st->nstk += n;
    }
}

/* ------------------------------------------------------------------------ */
/* Reuse order                                                               */
/* ------------------------------------------------------------------------ */

/* Take free block b out of its place in reuse order (LIFO: the array or
 * the list; FIFO: the queue).  From below the array's top, the array is
 * spilled first. */
static void order_unlink(kvp_pool *p, kvp__stream *st, uint32_t b)
{
    if (p->blocks[b].next == KVP__STACKED) {
        if (st->stk[st->nstk - 1] == b) {
            st->nstk--;
            p->blocks[b].next = KVP__NONE;
            return;
        }
        stack_spill(p, st);
    }
    q_unlink(p, st, b);
}

/* Give every fresh block of stream s a record, placed where the reuse order
 * already put it: behind the freed vacant blocks (LIFO), ahead of the queue
 * (FIFO), or in the id set alone (LOWEST).  Needed only when a fresh block
 * in the middle of the range is taken by id; each block is materialised at
 * most once per pool life, so the cost is amortized O(1). */
KVP__COLD static void materialize_fresh(kvp_pool *p, int s)
{
    kvp__stream *st = &p->st[s];
    uint32_t lo = st->fresh_lo, hi = st->fresh_hi;
    st->fresh_lo = st->fresh_hi = 0;
    uint32_t at = p->cfg.reuse == KVP_REUSE_LIFO ? st->qtail : KVP__NONE;
    if (p->cfg.reuse == KVP_REUSE_LIFO && lo < hi && st->fresh_mark == KVP__NONE)
        st->fresh_mark = lo;
    for (uint32_t b = lo; b < hi; b++) {
        kvp__init_block(p, b, s, KVP_BLOCK_VACANT);
        kvp__fset_add(p, &st->vacant, b);
        if (p->cfg.reuse != KVP_REUSE_LOWEST) {
            q_insert_after(p, st, at, b);
            at = b;
        }
    }
}

/* The block the next allocation of stream s gets, or NONE. */
uint32_t kvp__pick(kvp_pool *p, int s)
{
    kvp__stream *st = &p->st[s];
    bool fresh = st->fresh_lo < st->fresh_hi;
    switch (p->cfg.reuse) {
    case KVP_REUSE_LIFO:
        if (st->nstk)
            return st->stk[st->nstk - 1];
        if (st->qhead != KVP__NONE)
            return st->qhead;
        if (fresh)
            return st->fresh_lo;
        return kvp__policy_victim(st);
    case KVP_REUSE_LOWEST: {
        uint32_t v = kvp__idset_min(&st->vacant);
        if (fresh && (v == KVP__NONE || st->fresh_lo < v))
            return st->fresh_lo;
        return v != KVP__NONE ? v : kvp__policy_victim(st);
    }
    default: /* FIFO */
        return fresh ? st->fresh_lo : st->qhead;
    }
}

/* Start keeping the free sets (see kvp__fset_add): one pass over each
 * stream's free lists, which hold every free block but the fresh ones (LIFO:
 * the vacant stack and the eviction lists; FIFO: the queue of all free
 * blocks, and the eviction lists for the cached ones).  Once per pool life,
 * O(free blocks), amortized over the frees that put them there. */
void kvp__order(kvp_pool *p)
{
    if (p->ordered)
        return;
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        for (uint32_t i = 0; i < st->nstk; i++)
            kvp__idset_add(&st->vacant, st->stk[i]);
        for (uint32_t b = st->qhead; b != KVP__NONE; b = p->blocks[b].next)
            if (p->blocks[b].state == KVP_BLOCK_VACANT)
                kvp__idset_add(&st->vacant, b);
        for (unsigned l = 0; l < KVP__LISTS; l++)
            for (uint32_t b = st->lhead[l]; b != KVP__NONE; b = p->blocks[b].lnext)
                kvp__idset_add(&st->cached, b);
    }
    p->ordered = true;
    kvp__fast_reset(p);
}

/* Set p->fast from the stream map, hooked and ordered: the take's fast path
 * (take.c) then answers "may I serve this stream value" with one load.
 * hooked is fixed at creation; ordered changes at creation and in
 * kvp_pool_clear (pool.c) and in kvp__order, each
 * of which calls this.  Only entries that change are written: the take
 * reads its entry before it takes the pool's lock, and a thread-safe pool
 * (hooked) keeps every entry NULL from creation on, so no thread ever
 * writes what another reads without the lock. */
void kvp__fast_reset(kvp_pool *p)
{
    for (int v = KVP_STREAM_SHARED; v <= KVP_STREAM_V; v++) {
        int s = kvp__stream_index(p, v);
        kvp__stream *f = s < 0 || p->hooked || p->ordered ? NULL : &p->st[s];
        if (p->fast[v] != f)
            p->fast[v] = f;
    }
}

/* Take free block b out of every free structure, keeping its content.  A
 * fresh block gets its record here. */
void kvp__free_remove(kvp_pool *p, uint32_t b)
{
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        if (b < st->fresh_lo || b >= st->fresh_hi)
            continue;
        if (b == st->fresh_lo)
            st->fresh_lo++;
        else if (b == st->fresh_hi - 1)
            st->fresh_hi--;
        else {
            materialize_fresh(p, s);
            break;
        }
        kvp__init_block(p, b, s, KVP_BLOCK_VACANT);
        st->nvacant--;
        return;
    }
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    if (blk->state == KVP_BLOCK_CACHED) {
        kvp__policy_remove(p, b);
        kvp__fset_del(p, &st->cached, b);
        st->ncached--;
    } else {
        kvp__fset_del(p, &st->vacant, b);
        st->nvacant--;
    }
    if (p->cfg.reuse != KVP_REUSE_LOWEST &&
        (blk->state == KVP_BLOCK_VACANT || p->cfg.reuse == KVP_REUSE_FIFO))
        order_unlink(p, st, b);
}

/* Put block b, whose last reference just went, among the free blocks.
 * cur carries the LIFO insertion point through one call (stack_put), so
 * that blocks freed together are reused in the order given; the call ends
 * with kvp__free_end. */
void kvp__free_insert(kvp_pool *p, uint32_t b, kvp__cursor *cur)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    if (blk->flags & KVP__F_PUBLISHED) {
        blk->state = KVP_BLOCK_CACHED;
        kvp__policy_insert(p, b);
        kvp__fset_add(p, &st->cached, b);
        st->ncached++;
        if (p->cfg.reuse == KVP_REUSE_FIFO)
            q_insert_after(p, st, st->qtail, b);
        return;
    }
    blk->state = KVP_BLOCK_VACANT;
    blk->fill = 0;
    blk->retain = 0;
    kvp__fset_add(p, &st->vacant, b);
    st->nvacant++;
    if (p->cfg.reuse == KVP_REUSE_LIFO)
        stack_put(p, st, cur, blk->stream, b, false);
    else if (p->cfg.reuse == KVP_REUSE_FIFO)
        q_insert_after(p, st, st->qtail, b);
}

/* A cached free block whose content is gone (the caller unindexed it)
 * becomes vacant: it keeps its place in the FIFO queue, goes to the bottom of the LIFO stack
 * (reused after the blocks vacant before it), or into the id set (LOWEST). */
void kvp__cached_to_vacant(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    kvp__policy_remove(p, b);
    kvp__fset_del(p, &st->cached, b);
    st->ncached--;
    blk->state = KVP_BLOCK_VACANT;
    blk->fill = 0;
    blk->retain = 0;
    kvp__fset_add(p, &st->vacant, b);
    st->nvacant++;
    if (p->cfg.reuse == KVP_REUSE_LIFO) /* behind freed vacant, ahead of never-used */
        q_insert_after(p, st,
                       st->fresh_mark == KVP__NONE   ? st->qtail
                       : st->fresh_mark == st->qhead ? KVP__NONE
                                                     : p->blocks[st->fresh_mark].prev,
                       b);
}

/* Put blocks refs[0, n) back on the LIFO stack's array, last first, like
 * kvp__free_insert, when their records still read as the array needs them
 * (vacant, fill 0, next STACKED: defer.c's pending references): nothing is
 * written to them, and in a one-stream pool nothing read. */
void kvp__free_stacked(kvp_pool *p, const uint32_t *refs, uint32_t n, kvp__cursor *cur)
{
    kvp__assert(p->cfg.reuse == KVP_REUSE_LIFO && !p->ordered);
    if (p->nstreams == 1) {
        kvp__stream *st = &p->st[0];
        st->nvacant += n;
        if (n && stack_room(p, st, cur, 0)) {
            /* stack_put of refs[n-1] down to refs[0], in one copy: they are
             * the call's first blocks, so the room below w holds them */
            cur->w[0] -= n;
            memcpy(st->stk + cur->w[0], refs, (size_t)n * sizeof *refs);
            return;
        }
        for (uint32_t i = n; i-- > 0;)
            stack_put(p, st, cur, 0, refs[i], true);
        return;
    }
    for (uint32_t i = n; i-- > 0;) {
        int s = p->blocks[refs[i]].stream;
        p->st[s].nvacant++;
        stack_put(p, &p->st[s], cur, s, refs[i], true);
    }
}
