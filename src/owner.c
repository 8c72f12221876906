/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.c — owners (request ids) and the references they hold.
 *
 * What it owns: the owner slots, the map from owner id to slot, the xref slab,
 * and every block's ref/anon counts and owner links.
 *
 * A reference is anonymous (counted in kvp__block.anon), held by a sequence
 * (kvp__block.sref; slot KVP__SEQ), or held by an owner.
 * An owner's references are an array of nodes in the order it took them, so
 * kvp_owner_blocks reports allocation order and kvp_free_owner is one
 * sequential pass over O(references held), never a scan of the pool and
 * never a pointer chase.  The node for a block's first owner is the block id
 * (the block stores its position: no memory, the common case); further
 * owners of the same block get xref nodes.  Dropping one reference leaves a
 * tombstone, so it is O(1); an array compacts once half of it is dead.
 *
 * Invariants (a pending reference, defer.c, excepted):
 * - ref == anon + sref + (owner != NONE) + length of the xref chain.
 * - owner == NONE implies xhead == NONE (dropping the inline reference
 *   promotes the oldest xref into its place), so a block with one owner never
 *   costs an xref.
 * - Every live node sits at the position it records, in its owner's array;
 *   dead counts the tombstones; refs[len-1] is live when len > 0.
 * - An owner slot is chained in the owner index iff its id != KVP_ANON; an
 *   owner with no live entry exists only while registered or inside
 *   kvp_free_owner.
 *
 * A take on the fast path may leave a reference pending: in its owner's
 * array, its block's record not yet written (defer.c states the protocol).
 * This file knows it only through the kvp__defer_ calls on a slot's
 * lifecycle.
 *
 * The owner index chains through the slots themselves (a bucket array of
 * slot + 1 links, KVP__OWNER_BUCKETS per slot), like the block index, and
 * not map.c's open-addressing table: a lookup reads a small bucket array
 * and then the owner record it needs anyway, where a map of (id, slot)
 * pairs would be one more dependent cache miss per take once there are
 * thousands of owners.  The block index's shape (index.c) differs again
 * because its keys are 32-byte digests kept beside the records.  Owner ids
 * are the caller's, so a bucket is a keyed hash of the id (the index's
 * random seed), and an insertion that makes its chain longer than
 * KVP__CHAIN_MAX draws a fresh seed and relinks every owner (at most once
 * per cap insertions), so chains stay short whatever ids a caller picks.
 */
#include "owner.h"
#include "defer.h"
#include "guard.h"
#include "hashing.h"
#include "map.h"
#include "mem.h"
#include "record.h"

/* ------------------------------------------------------------------------ */
/* Reference nodes and owner arrays                                          */
/* ------------------------------------------------------------------------ */

static void set_pos(kvp_pool *p, uint32_t node, uint32_t pos)
{
    if (node & KVP__XREF)
        p->own.xrefs[node & ~KVP__XREF].pos = pos;
    else
        p->blocks[node].opos = pos;
}

/* Append (room reserved by kvp__refs_reserve; pending references settled,
 * defer.c). */
static void arr_append(kvp_pool *p, kvp__owner *o, uint32_t node)
{
    kvp__assert_internal(o->len < o->cap);
    set_pos(p, node, o->len);
    o->refs[o->len++] = node;
    kvp__defer_appended(o);
}

/* Remove the entry at pos: a tombstone, trailing tombstones trimmed, and a
 * compaction once half the array is dead (amortized O(1)). */
static void arr_remove(kvp_pool *p, kvp__owner *o, uint32_t pos)
{
    kvp__assert_internal(pos < o->len && o->refs[pos] != KVP__NONE &&
                         kvp__defer_pending_from(o) == o->len);
    o->refs[pos] = KVP__NONE;
    o->dead++;
    while (o->len && o->refs[o->len - 1] == KVP__NONE) {
        o->len--;
        o->dead--;
    }
    if (o->len >= 32 && o->dead > o->len / 2) {
        uint32_t j = 0;
        for (uint32_t i = 0; i < o->len; i++)
            if (o->refs[i] != KVP__NONE) {
                set_pos(p, o->refs[i], j);
                o->refs[j++] = o->refs[i];
            }
        o->len = j;
        o->dead = 0;
    }
}

/* Room for n more entries in the array of owner slot `oslot` (an existing
 * owner, or the free slot kvp__owner_add will use next), doubling: the slow
 * half of kvp__refs_reserve.  A failure changes nothing visible. */
KVP__COLD kvp_status kvp__refs_grow(kvp_pool *p, uint32_t oslot, uint32_t n)
{
    kvp__owner *o = &p->own.slots[oslot];
    uint32_t len = o->id == KVP_ANON ? 0 : o->len;
    uint64_t ncap = o->cap ? o->cap : 8;
    while (ncap < (uint64_t)len + n)
        ncap *= 2;
    if (ncap > KVP__OWNER_MAX_REFS)
        return KVP_ENOMEM;
    uint32_t *nr = kvp__alloc(p, (size_t)ncap * sizeof *nr);
    if (!nr)
        return KVP_ENOMEM;
    if (len)
        memcpy(nr, o->refs, (size_t)len * sizeof *nr);
    kvp__release(p, o->refs, (size_t)o->cap * sizeof *o->refs);
    o->refs = nr;
    o->cap = (uint32_t)ncap;
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Owner table                                                               */
/* ------------------------------------------------------------------------ */

/* The link that chains owner `id` into the owner index (its bucket, or the
 * link of the slot before it), holding its slot + 1; NULL if it is not
 * there.  Finding an owner and unlinking it share this one walk. */
uint32_t *kvp__owner_link(const kvp_pool *p, kvp_owner id)
{
    if (!p->own.buckets)
        return NULL;
    for (uint32_t *l = &p->own.buckets[kvp__id_hash(id, p->own.seed) & p->own.bmask]; *l;
         l = &p->own.slots[*l - 1].link)
        if (p->own.slots[*l - 1].id == id)
            return l;
    return NULL;
}

uint32_t kvp__owner_find(const kvp_pool *p, kvp_owner id)
{
    const uint32_t *l = kvp__owner_link(p, id);
    return l ? *l - 1 : KVP__NONE;
}

/* Chain slot into the index (its id set) under seed. */
static void index_link(kvp__owner *owners, uint32_t *buckets, uint32_t mask, uint64_t seed,
                       uint32_t slot)
{
    uint32_t *head = &buckets[kvp__id_hash(owners[slot].id, seed) & mask];
    owners[slot].link = *head;
    *head = slot + 1;
}

/* Chain every owner in use into nb (mask + 1 buckets, zeroed) under seed. */
static void owner_index_build(kvp__owner *owners, uint32_t cap, uint32_t *nb, uint32_t mask,
                        uint64_t seed)
{
    for (uint32_t i = 0; i < cap; i++)
        if (owners[i].id != KVP_ANON)
            index_link(owners, nb, mask, seed, i);
}

/* Release the slot array and the index buckets (not the owners' arrays). */
static void free_table(kvp_pool *p)
{
    kvp__release(p, p->own.mem, (size_t)p->own.cap * sizeof(kvp__owner) + KVP__LINE - 1);
    kvp__release(p, p->own.buckets, (size_t)p->own.cap * KVP__OWNER_BUCKETS * sizeof *p->own.buckets);
}

/* Double the slots and the index buckets (KVP__OWNER_BUCKETS per slot)
 * together; on failure nothing changes. */
KVP__COLD static kvp_status grow_table(kvp_pool *p)
{
    uint32_t ncap = p->own.cap ? p->own.cap * 2 : 16;
    if (!p->own.cap && kvp__random(&p->own.seed, sizeof p->own.seed))
        p->own.seed = 0; /* no random bytes: still correct, and re-keying retries */
    void *mem = kvp__alloc(p, (size_t)ncap * sizeof(kvp__owner) + KVP__LINE - 1);
    uint32_t *nb = kvp__zalloc(p, (size_t)ncap * KVP__OWNER_BUCKETS * sizeof *nb);
    if (!mem || !nb) {
        kvp__release(p, mem, (size_t)ncap * sizeof(kvp__owner) + KVP__LINE - 1);
        kvp__release(p, nb, (size_t)ncap * KVP__OWNER_BUCKETS * sizeof *nb);
        return KVP_ENOMEM;
    }
    /* Line-aligned, so where records cross lines does not depend on the
     * allocator. */
    kvp__owner *no = (kvp__owner *)(((uintptr_t)mem + KVP__LINE - 1) & ~(uintptr_t)(KVP__LINE - 1));
    if (p->own.cap)
        memcpy(no, p->own.slots, (size_t)p->own.cap * sizeof *no);
    memset(no + p->own.cap, 0, (size_t)(ncap - p->own.cap) * sizeof *no);
    for (uint32_t i = p->own.cap; i < ncap; i++) {
        no[i].id = KVP_ANON;
        kvp__defer_slot_init(&no[i]);
        no[i].link = i + 1 < ncap ? i + 1 : KVP__NONE;
    }
    owner_index_build(no, p->own.cap, nb, ncap * KVP__OWNER_BUCKETS - 1, p->own.seed);
    free_table(p);
    p->own.free = p->own.cap;
    p->own.mem = mem;
    p->own.slots = no;
    p->own.buckets = nb;
    p->own.bmask = ncap * KVP__OWNER_BUCKETS - 1;
    p->own.cap = ncap;
    return KVP_OK;
}

/* Make room for one more owner: a free slot, the table doubling when short
 * (amortized O(1)); on failure nothing changes.  The slot kvp__owner_add will
 * use is then p->ofree. */
kvp_status kvp__owner_reserve(kvp_pool *p)
{
    return p->own.free != KVP__NONE ? KVP_OK : grow_table(p);
}

/* Add owner `id` (not present; room reserved).  Returns its slot. */
/* The length of the index chain slot heads (it was just linked there). */
static uint32_t owner_chain_length(const kvp_pool *p, uint32_t slot)
{
    uint32_t n = 0;
    for (uint32_t l = slot + 1; l; l = p->own.slots[l - 1].link)
        n++;
    return n;
}

/* A chain grew past KVP__CHAIN_MAX: draw a fresh seed and relink every
 * owner under it, in place (O(cap)); the next cap insertions do not re-key
 * again, so the cost is amortized O(1).  Without random bytes the index
 * stays as it is (correct, its chains longer). */
KVP__COLD static void owner_rekey(kvp_pool *p)
{
    p->own.rekey_in = p->own.cap;
    if (kvp__random(&p->own.seed, sizeof p->own.seed))
        return;
    memset(p->own.buckets, 0, ((size_t)p->own.bmask + 1) * sizeof *p->own.buckets);
    owner_index_build(p->own.slots, p->own.cap, p->own.buckets, p->own.bmask, p->own.seed);
}

uint32_t kvp__owner_add(kvp_pool *p, kvp_owner id)
{
    uint32_t slot = p->own.free;
    kvp__owner *o = &p->own.slots[slot];
    p->own.free = o->link;
    o->id = id;
    o->len = o->dead = 0;
    o->registered = 0;
    index_link(p->own.slots, p->own.buckets, p->own.bmask, p->own.seed, slot);
    p->own.n++;
    if (p->own.rekey_in)
        p->own.rekey_in--;
    else if (owner_chain_length(p, slot) > KVP__CHAIN_MAX)
        owner_rekey(p);
    return slot;
}

/* Remove the owner in `slot`, which `link` (kvp__owner_link's) chains into
 * the index; its array keeps its capacity for the slot's next owner. */
void kvp__owner_unlink(kvp_pool *p, uint32_t *link, uint32_t slot)
{
    kvp__owner *o = &p->own.slots[slot];
    kvp__assert(*link == slot + 1);
    *link = o->link;
    o->id = KVP_ANON;
    o->len = o->dead = 0;
    kvp__defer_slot_freed(o);
    o->link = p->own.free;
    p->own.free = slot;
    p->own.n--;
}

/* Remove the owner in `slot`: kvp__owner_unlink, after the walk to its link. */
void kvp__owner_remove(kvp_pool *p, uint32_t slot)
{
    kvp__owner_unlink(p, kvp__owner_link(p, p->own.slots[slot].id), slot);
}

/* Forget every owner and xref, keeping the memory (kvp_pool_clear). */
void kvp__owners_reset(kvp_pool *p)
{
    if (p->own.buckets)
        memset(p->own.buckets, 0, (size_t)p->own.cap * KVP__OWNER_BUCKETS * sizeof *p->own.buckets);
    p->own.free = KVP__NONE;
    for (uint32_t i = p->own.cap; i-- > 0;) {
        kvp__owner *o = &p->own.slots[i];
        o->id = KVP_ANON;
        o->len = o->dead = 0;
        kvp__defer_slot_init(o);
        o->link = p->own.free;
        p->own.free = i;
    }
    kvp__assert_internal(!p->def.dirty); /* the caller entered, which settles */
    p->own.n = 0;
    p->own.xfree = KVP__NONE;
    for (uint32_t i = p->own.xcap; i-- > 0;) {
        p->own.xrefs[i].block = KVP__NONE;
        p->own.xrefs[i].pos = p->own.xfree;
        p->own.xfree = i;
    }
    p->own.nxfree = p->own.xcap;
}

void kvp__owners_destroy(kvp_pool *p)
{
    for (uint32_t i = 0; i < p->own.cap; i++)
        kvp__release(p, p->own.slots[i].refs, (size_t)p->own.slots[i].cap * sizeof(uint32_t));
    free_table(p);
    kvp__release(p, p->own.xrefs, (size_t)p->own.xcap * sizeof *p->own.xrefs);
}

/* ------------------------------------------------------------------------ */
/* References                                                                */
/* ------------------------------------------------------------------------ */

/* Make sure n xref nodes are free; doubles the slab when short. */
kvp_status kvp__xref_reserve(kvp_pool *p, uint32_t n)
{
    if (p->own.nxfree >= n)
        return KVP_OK;
    uint64_t ncap = p->own.xcap ? (uint64_t)p->own.xcap * 2 : 16;
    while (ncap - p->own.xcap + p->own.nxfree < n)
        ncap *= 2;
    if (ncap > KVP__XREF)
        return KVP_ENOMEM;
    kvp__xref *nx = kvp__alloc(p, (size_t)ncap * sizeof *nx);
    if (!nx)
        return KVP_ENOMEM;
    if (p->own.xcap)
        memcpy(nx, p->own.xrefs, (size_t)p->own.xcap * sizeof *nx);
    for (uint32_t i = (uint32_t)ncap; i-- > p->own.xcap;) {
        nx[i].block = KVP__NONE;
        nx[i].pos = p->own.xfree;
        p->own.xfree = i;
    }
    kvp__release(p, p->own.xrefs, (size_t)p->own.xcap * sizeof *p->own.xrefs);
    p->own.nxfree += (uint32_t)ncap - p->own.xcap;
    p->own.xrefs = nx;
    p->own.xcap = (uint32_t)ncap;
    return KVP_OK;
}

/* The first reference on block b, which holds none (it is being handed
 * out): nothing shared to count, and the owner, if any, is the inline one.
 * The owner's array has room. */
void kvp__ref_first(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert(blk->ref == 0 && blk->owner == KVP__NONE);
    blk->ref = 1;
    if (oslot == KVP__NONE) {
        blk->anon = 1;
    } else if (oslot == KVP__SEQ) {
        blk->sref = 1;
    } else {
        blk->owner = oslot;
        arr_append(p, &p->own.slots[oslot], b);
    }
}

/* Add one reference on block b for owner slot `oslot` (NONE: anonymous,
 * KVP__SEQ: a sequence's).
 * The owner's array has room, and a second owner's xref is reserved. */
void kvp__ref_add(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    if (blk->ref == 0) {
        kvp__ref_first(p, b, oslot);
        return;
    }
    kvp__assert_internal(blk->state == KVP_BLOCK_IN_USE && blk->ref < UINT32_MAX);
    if (++blk->ref == 2)
        p->g.shared++;
    if (oslot == KVP__NONE) {
        blk->anon++;
    } else if (oslot == KVP__SEQ) {
        blk->sref++;
    } else if (blk->owner == KVP__NONE) {
        blk->owner = oslot;
        arr_append(p, &p->own.slots[oslot], b);
    } else {
        uint32_t xi = p->own.xfree;
        kvp__assert_internal(xi != KVP__NONE && p->own.nxfree > 0);
        kvp__xref *x = &p->own.xrefs[xi];
        p->own.xfree = x->pos;
        p->own.nxfree--;
        x->block = b;
        x->owner = oslot;
        x->bprev = KVP__NONE;
        x->bnext = blk->xhead;
        if (blk->xhead != KVP__NONE)
            p->own.xrefs[blk->xhead].bprev = xi;
        blk->xhead = xi;
        arr_append(p, &p->own.slots[oslot], xi | KVP__XREF);
    }
}

static void xref_unchain(kvp_pool *p, kvp__block *blk, uint32_t xi)
{
    kvp__xref *x = &p->own.xrefs[xi];
    if (x->bprev != KVP__NONE)
        p->own.xrefs[x->bprev].bnext = x->bnext;
    else
        blk->xhead = x->bnext;
    if (x->bnext != KVP__NONE)
        p->own.xrefs[x->bnext].bprev = x->bprev;
    x->block = KVP__NONE;
    x->pos = p->own.xfree;
    p->own.xfree = xi;
    p->own.nxfree++;
}

/* Drop the reference that `node` stands for.  `whole` is set while the
 * owner's whole array is being dropped (kvp_free_owner), which then skips
 * maintaining that array entry by entry. */
void kvp__node_drop(kvp_pool *p, uint32_t node, bool whole)
{
    uint32_t b = kvp__node_block(p, node);
    kvp__block *blk = &p->blocks[b];
    if (node & KVP__XREF) {
        uint32_t xi = node & ~KVP__XREF;
        if (!whole)
            arr_remove(p, &p->own.slots[p->own.xrefs[xi].owner], p->own.xrefs[xi].pos);
        xref_unchain(p, blk, xi);
    } else {
        if (!whole)
            arr_remove(p, &p->own.slots[blk->owner], blk->opos);
        blk->owner = KVP__NONE;
        if (blk->xhead != KVP__NONE) {
            /* Promote the oldest xref (the chain's tail: new ones go to the
             * head) so the inline owner stays the earliest holder. */
            uint32_t xi = blk->xhead;
            while (p->own.xrefs[xi].bnext != KVP__NONE)
                xi = p->own.xrefs[xi].bnext;
            kvp__xref *x = &p->own.xrefs[xi];
            blk->owner = x->owner;
            blk->opos = x->pos;
            p->own.slots[x->owner].refs[x->pos] = b;
            xref_unchain(p, blk, xi);
        }
    }
    kvp__assert_internal(blk->ref > 0);
    if (--blk->ref == 1)
        p->g.shared--;
}

/* Drop one reference on b held by `oslot` (NONE: anonymous, KVP__SEQ: a
 * sequence's); the caller has checked that one is held. */
void kvp__ref_drop(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(blk->state == KVP_BLOCK_IN_USE && blk->ref > 0);
    if (oslot == KVP__NONE || oslot == KVP__SEQ) {
        kvp__assert_internal(oslot == KVP__NONE ? blk->anon > 0 : blk->sref > 0);
        if (oslot == KVP__NONE)
            blk->anon--;
        else
            blk->sref--;
        if (--blk->ref == 1)
            p->g.shared--;
        return;
    }
    if (blk->owner == oslot) {
        kvp__node_drop(p, b, false);
        return;
    }
    /* The owner's oldest xref: the chain runs newest first. */
    uint32_t xi = KVP__NONE;
    for (uint32_t x = blk->xhead; x != KVP__NONE; x = p->own.xrefs[x].bnext)
        if (p->own.xrefs[x].owner == oslot)
            xi = x;
    kvp__assert_internal(xi != KVP__NONE);
    kvp__node_drop(p, xi | KVP__XREF, false);
}

uint32_t kvp__refs_held(const kvp_pool *p, uint32_t b, uint32_t oslot)
{
    const kvp__block *blk = &p->blocks[b];
    uint32_t n = blk->owner == oslot;
    for (uint32_t xi = blk->xhead; xi != KVP__NONE; xi = p->own.xrefs[xi].bnext)
        n += p->own.xrefs[xi].owner == oslot;
    return n;
}

/* Block `to` has just received another block's record (relocation): the
 * owner array entry and the xrefs follow the new id. */
void kvp__owner_relocate(kvp_pool *p, uint32_t to)
{
    kvp__block *blk = &p->blocks[to];
    if (blk->owner != KVP__NONE)
        p->own.slots[blk->owner].refs[blk->opos] = to;
    for (uint32_t xi = blk->xhead; xi != KVP__NONE; xi = p->own.xrefs[xi].bnext)
        p->own.xrefs[xi].block = to;
}

/* ------------------------------------------------------------------------ */
/* Public owner calls                                                        */
/* ------------------------------------------------------------------------ */

/* What every public owner call starts with: refuse a missing pool or the
 * anonymous owner, enter the pool, and find the owner's slot (KVP__NONE when
 * it has none).  On an error the pool is not entered. */
static kvp_status enter_owner(kvp_pool *pool, kvp_owner owner, uint32_t *slot)
{
    if (!pool || owner == KVP_ANON)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    *slot = rc ? KVP__NONE : kvp__owner_find(pool, owner);
    return rc;
}

kvp_status kvp_owner_register(kvp_pool *pool, kvp_owner owner)
{
    uint32_t slot;
    kvp_status rc = enter_owner(pool, owner, &slot);
    if (rc)
        return rc;
    if (slot != KVP__NONE)
        rc = KVP_EOWNERACTIVE;
    else
        rc = kvp__owner_reserve(pool);
    if (!rc)
        pool->own.slots[kvp__owner_add(pool, owner)].registered = 1;
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_owner_release(kvp_pool *pool, kvp_owner owner)
{
    uint32_t slot;
    kvp_status rc = enter_owner(pool, owner, &slot);
    if (rc)
        return rc;
    if (slot == KVP__NONE)
        rc = KVP_ENOTFOUND;
    else if (kvp__owner_live(&pool->own.slots[slot]))
        rc = KVP_EBUSY;
    else
        kvp__owner_remove(pool, slot);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_owner_blocks(kvp_pool *pool, kvp_owner owner, kvp_block *ids, size_t ids_cap,
                            size_t *n_out)
{
    if (!n_out || (!ids && ids_cap))
        return KVP_EINVAL;
    uint32_t slot;
    kvp_status rc = enter_owner(pool, owner, &slot);
    if (rc)
        return rc;
    if (slot == KVP__NONE) {
        rc = KVP_ENOTFOUND;
    } else {
        const kvp__owner *o = &pool->own.slots[slot];
        *n_out = kvp__owner_live(o);
        if (ids_cap < *n_out) {
            rc = KVP_ESPACE;
        } else {
            size_t n = 0;
            for (uint32_t i = 0; i < o->len; i++)
                if (o->refs[i] != KVP__NONE)
                    ids[n++] = kvp__node_block(pool, o->refs[i]);
        }
    }
    kvp__leave(pool, false);
    return rc;
}
