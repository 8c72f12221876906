/* SPDX-License-Identifier: Apache-2.0 */
/*
 * defer.c — the take's deferred bookkeeping: what the fast take leaves
 * undone, and the one place that does it later.
 *
 * The protocol.  A take on the fast path (take.c) does two things late:
 *
 * 1. Counting.  It counts the blocks it hands out in their stream's
 *    `untallied` alone.  Each such block is one allocation call, one block
 *    allocated, one reused (the stack's array holds only blocks handed out
 *    before), one vacant block less and one more in use; the peak is where
 *    the run of takes ended, since nothing but another call lowers in_use.
 *    kvp__defer_tally folds them into the counters; every other call does
 *    it on entry (guard.c), so whatever reads a counter sees it exact.
 *
 * 2. Recording.  In a run — once KVP__DEFER_AFTER owner frees and
 *    general-path takes (p->def.run) have passed since the last call that
 *    settled — a take by an owner appends the block to the owner's array
 *    and leaves the block's record as it was in the stack's array (vacant,
 *    used before, next KVP__STACKED).  The block is then a pending
 *    reference.  Pending references are a suffix of their owner's array,
 *    refs[pend, len), and every slot that may hold some is on the dirty
 *    chain (p->def.dirty, through dnext) exactly once, pend != KVP__NONE saying
 *    so.  Three things end a pending reference:
 *    - kvp__defer_settle, on entry to every call that reads records
 *      (kvp__enter), writes every pending record as the take would have,
 *      empties the chain and ends the run;
 *    - kvp__defer_settle_owner writes one owner's, before a general-path
 *      take appends a recorded reference to it (so they stay a suffix);
 *    - kvp__defer_free_owner gives them back to the stack's array without
 *      reading or writing their records (kvp_free_owner).
 *    A slot whose owner goes stays on the chain with pend 0, so that reusing
 *    it between two settles never chains it twice.
 *
 * Why: in a decode loop the block's record is the take's one cold cache
 * line, and kvp_free_owner's, which reads it back; a block taken and freed by
 * its owner with no other call between never has its record touched.  Only
 * in a run, because a settle writes the same record later, colder, at a
 * fixed cost per owner: an engine that makes another call every step (a
 * fill, a publish) never defers; a decode loop of takes and owner frees
 * alone defers once a few sequences have ended.
 *
 * Who calls it: guard.c (tally, settle), take.c (count, ready, mark, tick,
 * settle_owner), free.c (free_owner, tick), owner.c (the slot's pend as
 * owners come and go), check.c (check, uncheck, pending_from).
 */
#include "defer.h"
#include "freelist.h"
#include "record.h"

#include <stdio.h>

/* ---- counting ---- */

/* Count n blocks a fast take handed out of stream st's stack array. */
void kvp__defer_count(kvp__stream *st, uint32_t n)
{
    st->untallied += n;
}

/* Fold the fast takes' counts into the pool's counters. */
void kvp__defer_tally(kvp_pool *p)
{
    uint64_t n = 0;
    for (int s = 0; s < kvp__streams(p); s++) {
        kvp__stream *st = &p->st[s];
        st->nvacant -= st->untallied;
        n += st->untallied;
        st->untallied = 0;
    }
    if (!n)
        return;
    p->ctr.alloc_calls += n;
    p->ctr.reused += n;
    kvp__count_out(p, n);
}

/* ---- recording ---- */

/* May a take defer its record now (in a run)? */
bool kvp__defer_ready(const kvp_pool *p)
{
    return p->def.run >= KVP__DEFER_AFTER;
}

/* One more owner free or general-path take in the run. */
void kvp__defer_tick(kvp_pool *p)
{
    p->def.run++;
}

/* Before a deferring take appends to owner slot `slot` (o): its pending
 * references start at the end of its array if it has none yet, and the
 * slot joins the dirty chain (once: a slot already there has pend set). */
void kvp__defer_mark(kvp_pool *p, kvp__owner *o, uint32_t slot)
{
    if (o->pend == KVP__NONE) {
        o->pend = o->len;
        o->dnext = p->def.dirty;
        p->def.dirty = slot + 1;
    }
}

/* Write the records of slot's pending references as the take would have:
 * in use, one reference, this owner at this position.  The slot stays on
 * the dirty chain with none left.  Out of line: inlined into every call's
 * entry, its registers would be saved by every call. */
static KVP__NOINLINE void settle_owner(kvp_pool *p, uint32_t slot)
{
    kvp__owner *o = &p->own.slots[slot];
    /* locals: a record store may alias the array and its length */
    const uint32_t *refs = o->refs;
    uint32_t from = o->pend, len = o->len;
    /* the first is written at once; a settle after each take has only it */
    for (uint32_t i = from + 1; i < len && i <= from + KVP__PREFETCH; i++)
        kvp__prefetch_record(p, refs[i]);
    for (uint32_t i = from; i < len; i++) {
        if (i + KVP__PREFETCH < len)
            kvp__prefetch_record(p, refs[i + KVP__PREFETCH]);
        int s = p->nstreams == 1 ? 0 : (int)p->blocks[refs[i]].stream;
        kvp__record_owned(p, refs[i], slot, i, s);
    }
    o->pend = len;
}

/* Settle every slot on the dirty chain and empty it: O(pending references
 * + slots on the chain), each put there by a take. */
static KVP__NOINLINE void settle_all(kvp_pool *p)
{
    for (uint32_t l = p->def.dirty; l;) {
        kvp__owner *o = &p->own.slots[l - 1];
        settle_owner(p, l - 1);
        o->pend = KVP__NONE;
        l = o->dnext;
    }
    p->def.dirty = 0;
}

/* Settle every pending reference and end the run (on entry to every call
 * that reads records: a test, then out of line when there is work). */
void kvp__defer_settle(kvp_pool *p)
{
    if (p->def.dirty)
        settle_all(p);
    p->def.run = 0;
}

/* Settle owner slot's pending references, before a call that does not
 * settle them all appends a recorded one.  The slot stays on the chain. */
void kvp__defer_settle_owner(kvp_pool *p, uint32_t slot)
{
    const kvp__owner *o = &p->own.slots[slot];
    if (o->pend != KVP__NONE && o->pend < o->len)
        settle_owner(p, slot);
}

/* ---- owners coming and going (owner.c) ---- */

/* A slot as the owner table makes it or forgets it: not on the chain. */
void kvp__defer_slot_init(kvp__owner *o)
{
    o->pend = KVP__NONE;
}

/* After a recorded append to o's array (pending ones settled first): a
 * chained slot's pending suffix stays empty. */
void kvp__defer_appended(kvp__owner *o)
{
    kvp__assert_internal(o->pend == KVP__NONE || o->pend + 1 == o->len);
    if (o->pend != KVP__NONE)
        o->pend = o->len;
}

/* Slot o's owner goes (its array emptied): a chained slot keeps its place
 * on the chain, with nothing pending. */
void kvp__defer_slot_freed(kvp__owner *o)
{
    if (o->pend != KVP__NONE)
        o->pend = 0;
}

/* ---- freeing ---- */

/* Give owner o's pending references back to the stack's array, last
 * first, records untouched (they read as the array needs them); returns
 * where the recorded ones end, for the caller to free the rest. */
uint32_t kvp__defer_free_owner(kvp_pool *p, kvp__owner *o, kvp__cursor *cur)
{
    if (o->pend == KVP__NONE)
        return o->len;
    uint32_t n = o->len - o->pend;
    p->g.in_use -= n;
    kvp__free_stacked(p, o->refs + o->pend, n, cur);
    return o->pend;
}

/* ---- checking (check.c) ---- */

/* Where owner o's pending references start (its length if none). */
uint32_t kvp__defer_pending_from(const kvp__owner *o)
{
    return o->pend == KVP__NONE ? o->len : o->pend;
}

#define DCHECK(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            if (msg && cap)                                                                  \
                snprintf(msg, cap, __VA_ARGS__);                                             \
            return KVP_ECORRUPT;                                                             \
        }                                                                                    \
    } while (0)

/* The protocol's invariants, read as they stand: every slot with pend set
 * is on the dirty chain once; an unused one holds nothing; each pending
 * entry names a block whose record still reads as held in the stack's
 * array (vacant, used before, next STACKED, no references); only a run
 * defers.  The blocks are marked KVP__F_PENDING for check.c, which counts
 * them as in use with one owned reference (and refuses a marked block in
 * the array, or named twice); kvp__defer_uncheck clears the marks whatever
 * this found. */
kvp_status kvp__defer_check(kvp_pool *p, char *msg, size_t cap)
{
    uint32_t chained = 0, flagged = 0;
    for (uint32_t l = p->def.dirty; l; l = p->own.slots[l - 1].dnext) {
        DCHECK(l - 1 < p->own.cap && chained++ < p->own.cap, "dirty chain broken at slot %u", l - 1);
        const kvp__owner *o = &p->own.slots[l - 1];
        DCHECK(o->pend != KVP__NONE && o->pend <= o->len && o->len <= o->cap,
               "slot %u on the dirty chain: pending from %u of %u", l - 1, o->pend, o->len);
        DCHECK(o->id != KVP_ANON || (o->pend == 0 && o->len == 0),
               "unused slot %u holds pending references", l - 1);
        DCHECK(o->pend == o->len || (p->cfg.reuse == KVP_REUSE_LIFO && !p->ordered),
               "owner %llu: pending references outside LIFO order", (unsigned long long)o->id);
        for (uint32_t i = o->pend; i < o->len; i++) {
            uint32_t b = o->refs[i];
            DCHECK(b < p->top && !kvp__is_fresh(p, b), "owner %llu: pending entry %u is %u",
                   (unsigned long long)o->id, i, b);
            kvp__block *k = &p->blocks[b];
            DCHECK(k->state == KVP_BLOCK_VACANT && k->flags == KVP__F_EVER &&
                       k->next == KVP__STACKED && k->ref == 0 && k->owner == KVP__NONE &&
                       k->stream < kvp__streams(p),
                   "owner %llu: pending block %u (entry %u) is not as its take left it "
                   "(state %d, flags 0x%x, ref %u)",
                   (unsigned long long)o->id, b, i, k->state, k->flags, k->ref);
            k->flags |= KVP__F_PENDING;
        }
    }
    for (uint32_t slot = 0; slot < p->own.cap; slot++)
        flagged += p->own.slots[slot].pend != KVP__NONE;
    DCHECK(flagged == chained, "%u slots flagged dirty, %u on the chain", flagged, chained);
    DCHECK(p->def.run >= KVP__DEFER_AFTER || !p->def.dirty,
           "%u slots on the dirty chain in a run of %llu owner frees and general takes",
           chained, (unsigned long long)p->def.run);
    return KVP_OK;
}

/* Clear the marks kvp__defer_check set, bounded by what it could walk. */
void kvp__defer_uncheck(kvp_pool *p)
{
    uint32_t n = 0;
    for (uint32_t l = p->def.dirty; l && l - 1 < p->own.cap && n++ < p->own.cap;
         l = p->own.slots[l - 1].dnext) {
        const kvp__owner *o = &p->own.slots[l - 1];
        for (uint32_t i = o->pend; o->len <= o->cap && i < o->len; i++)
            if (o->refs[i] < p->top)
                p->blocks[o->refs[i]].flags &= ~KVP__F_PENDING;
    }
}
