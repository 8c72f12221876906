/* SPDX-License-Identifier: Apache-2.0 */
/*
 * take.c — handing blocks out: kvp_alloc, kvp_take, kvp_take_each,
 * kvp_take_id, kvp_claim and kvp_claim_prefix.
 *
 * What it owns: the choice of the block a take hands out and of the path
 * it takes there.  The records it writes are block.c's, the owners'
 * arrays owner.c's, the free structures freelist.c's.
 *
 * One shape, two paths:
 * - take_fast, inline in the public takes: a run of takes that are each the
 *   usual case of a decode step (an existing owner, found by its hint or a
 *   lookup, with room in its array; a block on top of the LIFO stack's
 *   array; a pool with nothing hooked or ordered, p->fast).  It keeps what
 *   it reads of the pool in registers between takes, defers the records
 *   and counts (defer.c) and stops at the first take it declines.
 * - take_slow, out of line: any one take.  It serves the next most common
 *   cases without entering (a new owner in a slot that kept an array, an
 *   anonymous take, a take outside a run, a block from the q list) and
 *   everything else through take_general, which enters, makes room
 *   (owners, arrays, growth) and takes in reuse order.
 * kvp_take is one take_fast, else take_slow (take_single); kvp_take_each
 * the loop of the two (take_each, in take_batch), or take_single for one
 * hinted take;
 * kvp_alloc is take_general's core for many blocks.  Out of line, take_slow
 * costs take_fast no saved registers.
 *
 * Invariant: a take either hands out exactly the block the reuse order
 * names and changes nothing else visible, or fails and changes nothing.
 *
 * Who calls it: the public API.  Its general path takes and claims
 * through client.c, as sequence.c does.
 */
#include "block.h"
#include "client.h"
#include "defer.h"
#include "freelist.h"
#include "guard.h"
#include "index.h"
#include "owner.h"
#include "record.h"

/* ------------------------------------------------------------------------ */
/* Owners and room                                                           */
/* ------------------------------------------------------------------------ */

/* The slot of `owner` (not KVP_ANON), or NONE.  `hint` is a slot the
 * caller believes is owner's (NONE if none).  It is trusted only after
 * reading that the slot holds owner, which is the read the lookup would end
 * with anyway: ids are unique among used slots and unused ones hold
 * KVP_ANON, so no value of hint can pick another owner's slot. */
static inline uint32_t owner_slot(const kvp_pool *p, kvp_owner owner, uint32_t hint)
{
    return hint < p->own.cap && p->own.slots[hint].id == owner ? hint : kvp__owner_find(p, owner);
}

/* Find `owner`'s slot (owner_slot, with `hint`), or make room to create it
 * (*create set; the slot it will get is p->own.free), and room in its array
 * for n more references.  For KVP_ANON *slot is NONE.  Changes nothing
 * visible. */
static kvp_status owner_prepare(kvp_pool *p, kvp_owner owner, uint32_t hint, uint32_t n,
                                uint32_t *slot, bool *create)
{
    *create = false;
    *slot = KVP__NONE;
    if (owner == KVP_ANON)
        return KVP_OK;
    uint32_t s = owner_slot(p, owner, hint);
    if (s == KVP__NONE) {
        kvp_status rc = kvp__owner_reserve(p);
        if (rc)
            return rc;
        *create = true;
        s = p->own.free;
    }
    kvp_status rc = kvp__refs_reserve(p, s, n);
    if (!rc && !*create)
        *slot = s;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Popping the free structures                                               */
/* ------------------------------------------------------------------------ */

/* After a pop: prefetch the block the stack will hand out KVP__STK_AHEAD
 * pops later, or `next` (the q list's head) when the array holds fewer. */
static inline void prefetch_ahead(const kvp_pool *p, const kvp__stream *st, uint32_t next)
{
    uint32_t ahead = st->nstk > KVP__STK_AHEAD ? st->stk[st->nstk - 1 - KVP__STK_AHEAD] : next;
    if (ahead != KVP__NONE)
        kvp__prefetch_record(p, ahead);
}

/* Hand out the block on top of stream s's LIFO stack array (not empty).
 * Only blocks handed out before are there (freelist.c), so the caller
 * counts a reuse without reading the record. */
static inline uint32_t pop_top(kvp_pool *p, int s, uint32_t oslot, unsigned format)
{
    kvp__stream *st = &p->st[s];
    uint32_t b = st->stk[--st->nstk];
    kvp__fset_del(p, &st->vacant, b);
    kvp__hand_out_vacant(p, b, oslot, format, s);
    return b;
}

/* The top of the stack's array, appended to owner slot's array: its record
 * written (and the next pop's prefetched), or with `defer` left for later
 * (defer.c).  The caller counts it (kvp__defer_count). */
static inline uint32_t take_to_owner(kvp_pool *p, kvp__stream *st, uint32_t slot, bool defer)
{
    uint32_t b = st->stk[--st->nstk];
    kvp__owner *o = &p->own.slots[slot];
    if (!defer) {
        kvp__record_owned(p, b, slot, o->len, (int)(st - p->st));
        prefetch_ahead(p, st, st->qhead);
    } else {
        kvp__defer_mark(p, o, slot);
    }
    o->refs[o->len++] = b;
    return b;
}

/* The common case of a take in reuse order, for up to n blocks at once:
 * pop the LIFO stack's array, then, while the next block in reuse order is
 * the head of the q list and vacant (LIFO, or FIFO once the never-used
 * range is spent), pop that.  A list is a chain of dependent loads, so
 * there only its new head is prefetched, for the next call.  Counts what it
 * takes; returns how many. */
static inline uint32_t pop_vacant(kvp_pool *p, int s, uint32_t n, uint32_t oslot,
                                  unsigned format, uint32_t *ids)
{
    kvp__stream *st = &p->st[s];
    if (p->cfg.reuse == KVP_REUSE_LOWEST ||
        (p->cfg.reuse == KVP_REUSE_FIFO && st->fresh_lo < st->fresh_hi))
        return 0;
    uint32_t i = 0;
    /* in a run, a single take by an owner defers as the fast one does (a
     * sequence's first block is taken here, as its owner is new) */
    if (n == 1 && oslot < KVP__SEQ && format == KVP_FMT_FP16 && !p->ordered &&
        kvp__defer_ready(p) && st->nstk)
        ids[i++] = take_to_owner(p, st, oslot, true);
    for (; i < n && st->nstk; i++)
        ids[i] = pop_top(p, s, oslot, format);
    p->ctr.reused += i;
    uint32_t from_list = i, b = st->qhead;
    for (; i < n && b != KVP__NONE && p->blocks[b].state == KVP_BLOCK_VACANT; i++) {
        uint32_t next = p->blocks[b].next;
        if (b == st->fresh_mark)
            st->fresh_mark = next;
        kvp__fset_del(p, &st->vacant, b);
        kvp__hand_out_counted(p, b, oslot, format, s);
        ids[i] = b;
        b = next;
    }
    if (i > from_list) {
        st->qhead = b;
        if (b == KVP__NONE)
            st->qtail = KVP__NONE;
    }
    if (i) {
        prefetch_ahead(p, st, b);
        st->nvacant -= i;
        kvp__count_out(p, i);
    }
    return i;
}

/* pop_vacant of one block, for take_slow: out of line, so that take_slow,
 * which must not read the record of the block it hands out
 * (test_codegen.py), does not hold this one's reads of the list's
 * records. */
static KVP__NOINLINE uint32_t pop_list(kvp_pool *p, int s, uint32_t oslot, uint32_t *out)
{
    return pop_vacant(p, s, 1, oslot, KVP_FMT_FP16, out);
}

/* ------------------------------------------------------------------------ */
/* The general path                                                          */
/* ------------------------------------------------------------------------ */

/* nb blocks of stream s for `owner` into ids[], inside a call: owner, its
 * array and the stream made room for first, then taken in reuse order.
 * `hint` (NULL: none) is read for the owner lookup and set to the owner's
 * slot on success. */
static kvp_status take_locked(kvp_pool *p, int s, uint32_t nb, kvp_owner owner, uint32_t *hint,
                              unsigned format, kvp_block *ids)
{
    uint32_t slot;
    bool create;
    kvp_status rc = owner_prepare(p, owner, hint ? *hint : KVP__NONE, nb, &slot, &create);
    if (!rc)
        rc = kvp__client_room(p, s, kvp__client_free_blocks(p, s), nb);
    if (rc)
        return rc;
    if (create)
        slot = kvp__owner_add(p, owner);
    else if (slot != KVP__NONE)
        kvp__defer_settle_owner(p, slot); /* entered lazily by take_general */
    for (uint32_t i = pop_vacant(p, s, nb, slot, format, ids); i < nb; i++)
        ids[i] = kvp__client_take(p, s, slot, format);
    p->ctr.alloc_calls++;
    if (hint && slot != KVP__NONE)
        *hint = slot;
    return KVP_OK;
}

/* One take by the general path (arguments checked by the caller).  Enters
 * lazily: other owners' pending references stay pending (the new owner of a
 * decode step's first take would otherwise settle them all). */
static KVP__FLATTEN KVP__NOINLINE kvp_status take_general(kvp_pool *pool, kvp_stream stream,
                                                         kvp_owner owner, uint32_t *hint,
                                                         kvp_block *out)
{
    kvp_status rc = kvp__enter_lazy(pool);
    if (rc)
        return rc;
    rc = take_locked(pool, kvp__stream_index(pool, stream), 1, owner, hint, KVP_FMT_FP16, out);
    if (!rc)
        kvp__defer_tick(pool);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The fast path and the slow one                                            */
/* ------------------------------------------------------------------------ */

/* Takes i, i+1, ... of a take_each on a stream the fast path serves (st),
 * while each is the usual case (see the file comment) in a run (its record
 * deferred).  Returns the first take it declines (n if none).  The stack's
 * size stays in a register between takes and goes back to the stream once:
 * stored and reloaded by every take, it would chain the decode loop's
 * memory operations one after another. */
static inline __attribute__((always_inline)) size_t
take_fast(kvp_pool *pool, kvp__stream *st, const kvp_owner *owners, uint32_t *hints,
          const uint32_t *rows, size_t i, size_t n, kvp_block *out)
{
    if (!kvp__defer_ready(pool))
        return i;
    kvp__owner *own = pool->own.slots;
    uint32_t ocap = pool->own.cap, *stk = st->stk, nstk = st->nstk;
    size_t first = i;
    for (; i < n; i++) {
        size_t r = rows ? rows[i] : i;
        kvp_owner id = owners[r];
        if (id == KVP_ANON)
            break;
        uint32_t slot = hints ? hints[r] : kvp__owner_find(pool, id); /* NONE >= ocap */
        /* kvp__refs_reserve's room test, for an owner known to exist */
        if (slot >= ocap || own[slot].id != id || own[slot].len >= own[slot].cap || !nstk)
            break;
        kvp__owner *o = &own[slot];
        uint32_t b = stk[--nstk];
        kvp__defer_mark(pool, o, slot);
        o->refs[o->len++] = b;
        out[i] = b;
    }
    st->nstk = nstk;
    kvp__defer_count(st, (uint32_t)(i - first));
    return i;
}

/* Any one take (arguments checked by the caller).  On a stream the fast
 * path serves it takes without entering when it can: the top of the stack's
 * array for an existing owner with room, for a new owner whose free slot
 * kept an array (counted in the run, as the general path would), or
 * anonymously; else the head of the q list.  Everything else goes to
 * take_general. */
static KVP__NOINLINE kvp_status take_slow(kvp_pool *p, kvp_stream stream, kvp_owner owner,
                                          uint32_t *hint, kvp_block *out)
{
    kvp__stream *st = p->fast[stream];
    if (!st)
        return take_general(p, stream, owner, hint, out);
    uint32_t slot = KVP__NONE;
    bool defer = kvp__defer_ready(p);
    if (owner != KVP_ANON) {
        slot = owner_slot(p, owner, hint ? *hint : KVP__NONE);
        if (slot == KVP__NONE) {
            if (p->own.free == KVP__NONE || !p->own.slots[p->own.free].cap || !st->nstk)
                return take_general(p, stream, owner, hint, out);
            slot = kvp__owner_add(p, owner);
            kvp__defer_tick(p);
        } else if (p->own.slots[slot].len >= p->own.slots[slot].cap) {
            return take_general(p, stream, owner, hint, out);
        }
    }
    if (st->nstk) {
        if (slot != KVP__NONE) {
            *out = take_to_owner(p, st, slot, defer);
        } else {
            *out = pop_top(p, (int)(st - p->st), slot, KVP_FMT_FP16);
            prefetch_ahead(p, st, st->qhead);
        }
        kvp__defer_count(st, 1);
    } else {
        if (slot != KVP__NONE)
            kvp__defer_settle_owner(p, slot);
        if (!pop_list(p, (int)(st - p->st), slot, out))
            return take_general(p, stream, owner, hint, out);
        p->ctr.alloc_calls++;
    }
    if (hint && slot != KVP__NONE)
        *hint = slot;
    return KVP_OK;
}

/* n takes as kvp_take_each numbers them: runs of take_fast with take_slow
 * between them.  The arguments and the fast path's stream are checked
 * once. */
static inline __attribute__((always_inline)) kvp_status
take_each(kvp_pool *pool, kvp_stream stream, const kvp_owner *owners, uint32_t *hints,
          const uint32_t *rows, size_t n, kvp_block *out, size_t *n_taken)
{
    if (!pool || (n && (!owners || !out)) || (unsigned)stream > KVP_STREAM_V)
        return KVP_EINVAL;
    kvp__stream *st = pool->fast[stream];
    if (!st && kvp__stream_index(pool, stream) < 0)
        return KVP_EINVAL;
    kvp_status rc = KVP_OK;
    size_t i = 0;
    while ((i = st ? take_fast(pool, st, owners, hints, rows, i, n, out) : i) < n) {
        size_t r = rows ? rows[i] : i;
        rc = take_slow(pool, stream, owners[r], hints ? &hints[r] : NULL, &out[i]);
        if (rc != KVP_OK)
            break;
        i++;
    }
    if (st) /* take_general checks its own takes */
        kvp__self_check(pool, i > 0);
    *n_taken = i;
    return rc;
}

/* One take, as take_each makes it, with nothing to do after take_slow:
 * every call there is a tail call, so the take keeps no register for
 * later and saves none. */
static inline __attribute__((always_inline)) kvp_status
take_single(kvp_pool *pool, kvp_stream stream, kvp_owner owner, uint32_t *hint, kvp_block *out)
{
    if (!pool || !out || (unsigned)stream > KVP_STREAM_V)
        return KVP_EINVAL;
    kvp__stream *st = pool->fast[stream];
    if (!st) {
        if (kvp__stream_index(pool, stream) < 0)
            return KVP_EINVAL;
        return take_slow(pool, stream, owner, hint, out);
    }
    if (!take_fast(pool, st, &owner, hint, NULL, 0, 1, out))
        return take_slow(pool, stream, owner, hint, out);
    kvp__self_check(pool, true);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* The public takes                                                          */
/* ------------------------------------------------------------------------ */

/* One take (kvpool.h): take_fast, else take_slow. */
KVP__FLATTEN kvp_status kvp_take(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                                 kvp_block *out)
{
    return take_single(pool, stream, owner, NULL, out);
}

/* kvp_take_each of any other shape: inlined for the usual arguments (a
 * decode step: hints and rows given, no test of either per take) and once
 * for the rest. */
static KVP__FLATTEN KVP__NOINLINE kvp_status take_batch(kvp_pool *pool, kvp_stream stream,
                                                       const kvp_owner *owners, uint32_t *hints,
                                                       const uint32_t *rows, size_t n,
                                                       kvp_block *out, size_t *n_taken)
{
    if (hints && rows)
        return take_each(pool, stream, owners, hints, rows, n, out, n_taken);
    return take_each(pool, stream, owners, hints, rows, n, out, n_taken);
}

/* One hinted take (kvp_take_hinted) is take_single here, in this function's
 * small frame; any other shape is take_batch's, out of line with the batch
 * loop's larger one. */
KVP__FLATTEN kvp_status kvp_take_each(kvp_pool *pool, kvp_stream stream, const kvp_owner *owners,
                                      uint32_t *hints, const uint32_t *rows, size_t n,
                                      kvp_block *out, size_t *n_taken)
{
    if (!n_taken)
        return KVP_EINVAL;
    *n_taken = 0;
    if (n == 1 && hints && !rows && owners) {
        kvp_status rc = take_single(pool, stream, *owners, hints, out);
        *n_taken = rc == KVP_OK;
        return rc;
    }
    return take_batch(pool, stream, owners, hints, rows, n, out, n_taken);
}

/* The blocks for `tokens` tokens in one call (kvpool.h): every argument
 * checked before entering, then take_locked. */
KVP__FLATTEN kvp_status kvp_alloc(kvp_pool *pool, kvp_stream stream, uint64_t tokens,
                                  kvp_owner owner, unsigned format, kvp_block *ids,
                                  size_t ids_cap, size_t *n_out)
{
    if (!pool || !ids || !n_out || tokens == 0 || format > 255)
        return KVP_EINVAL;
    int s = kvp__stream_index(pool, stream);
    if (s < 0)
        return KVP_EINVAL;
    uint64_t nb = (tokens - 1) / pool->cfg.block_size + 1;
    if (nb > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (ids_cap < nb) {
        *n_out = (size_t)nb;
        return KVP_ESPACE;
    }
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = take_locked(pool, s, (uint32_t)nb, owner, NULL, format, ids);
    if (!rc)
        *n_out = (size_t)nb;
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* A named free block (kvpool.h): checked, owner room made, then taken out
 * of the free structures wherever it sits and handed out. */
kvp_status kvp_take_id(kvp_pool *pool, kvp_block id, kvp_owner owner)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot;
    bool create;
    rc = kvp__check_id(pool, id);
    if (!rc && kvp__state(pool, id) == KVP_BLOCK_IN_USE)
        rc = KVP_EBUSY;
    if (!rc)
        rc = owner_prepare(pool, owner, KVP__NONE, 1, &slot, &create);
    if (!rc) {
        if (create)
            slot = kvp__owner_add(pool, owner);
        kvp__free_remove(pool, id);
        kvp__hand_out(pool, id, slot, KVP_FMT_FP16);
        pool->ctr.alloc_calls++;
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* One more reference for `owner` on block id, which must hold content (the
 * caller entered): every check and reservation first, then
 * kvp__client_claim; a refusal changes nothing. */
static kvp_status claim_locked(kvp_pool *pool, kvp_block id, kvp_owner owner)
{
    uint32_t slot = KVP__NONE;
    bool create = false;
    kvp_status rc = kvp__check_id(pool, id);
    int state = rc ? 0 : kvp__state(pool, id);
    if (!rc && state == KVP_BLOCK_VACANT)
        rc = KVP_ENOTFOUND;
    /* The reference count is 32 bits, and anonymous claims cost no memory
     * that would run out first: the one past UINT32_MAX is refused. */
    if (!rc && pool->blocks[id].ref == UINT32_MAX)
        rc = KVP_EINVAL;
    if (!rc)
        rc = owner_prepare(pool, owner, KVP__NONE, 1, &slot, &create);
    /* A second owner on a block needs an xref node. */
    if (!rc && owner != KVP_ANON && state == KVP_BLOCK_IN_USE &&
        pool->blocks[id].owner != KVP__NONE)
        rc = kvp__xref_reserve(pool, 1);
    if (!rc) {
        if (create)
            slot = kvp__owner_add(pool, owner);
        kvp__client_claim(pool, id, slot);
    }
    return rc;
}

/* One more reference on a block with content (kvpool.h). */
KVP__FLATTEN kvp_status kvp_claim(kvp_pool *pool, kvp_block id, kvp_owner owner)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = claim_locked(pool, id, owner);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* The longest cached prefix of a hash chain, claimed (kvpool.h): under one
 * entry, each hash looked up in order and its block claimed as kvp_claim
 * does, up to the first miss or failed claim; the claims before it stand. */
KVP__FLATTEN kvp_status kvp_claim_prefix(kvp_pool *pool, kvp_stream stream,
                                         const kvp_hash *hashes, size_t n, kvp_owner owner,
                                         kvp_block *out_ids, size_t *n_hit)
{
    if (!n_hit || (n && (!hashes || !out_ids)))
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    size_t i = 0;
    for (; i < n; i++) {
        uint32_t b = kvp__index_find(pool, s, &hashes[i]);
        if (b == KVP__NONE || (rc = claim_locked(pool, b, owner)) != KVP_OK)
            break;
        out_ids[i] = b;
    }
    *n_hit = i;
    kvp__leave(pool, i > 0);
    return rc;
}
