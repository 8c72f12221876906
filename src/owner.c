/*
 * owner.c — owners (request ids) and the references they hold.
 *
 * What it owns: the owner slots, the map from owner id to slot, the xref slab,
 * and every block's ref/anon counts and owner links.
 *
 * A reference is anonymous (counted in kvp__block.anon) or held by an owner.
 * An owner's references form a doubly linked list in the order it took them,
 * so kvp_owner_blocks reports allocation order and kvp_free_owner costs
 * O(references held), never a scan.  The list's nodes live where the
 * reference does: the block's first owner inline in the block record (no
 * memory, the common case), further owners of the same block in xref nodes.
 *
 * Invariants:
 * - ref == anon + (owner != NONE) + length of the xref chain.
 * - owner == NONE implies xhead == NONE (dropping the inline reference
 *   promotes an xref into its place), so a block with one owner never costs
 *   an xref.
 * - An owner slot is in the map iff its id != KVP_ANON; nrefs is the length
 *   of its list; an owner with nrefs == 0 exists only while registered or
 *   inside kvp_free_owner.
 */
#include "kvp_internal.h"

static uint32_t mix(kvp_owner id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (uint32_t)id;
}

/* ------------------------------------------------------------------------ */
/* Reference-node links                                                      */
/* ------------------------------------------------------------------------ */

static uint32_t *np(kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? &p->xrefs[node & ~KVP__XREF].oprev : &p->blocks[node].prev;
}

static uint32_t *nn(kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? &p->xrefs[node & ~KVP__XREF].onext : &p->blocks[node].next;
}

uint32_t kvp__node_prev(const kvp_pool *p, uint32_t node)
{
    return *np((kvp_pool *)p, node);
}

uint32_t kvp__node_next(const kvp_pool *p, uint32_t node)
{
    return *nn((kvp_pool *)p, node);
}

uint32_t kvp__node_block(const kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? p->xrefs[node & ~KVP__XREF].block : node;
}

static void list_append(kvp_pool *p, kvp__owner *o, uint32_t node)
{
    *np(p, node) = o->tail;
    *nn(p, node) = KVP__NONE;
    if (o->tail != KVP__NONE)
        *nn(p, o->tail) = node;
    else
        o->head = node;
    o->tail = node;
    o->nrefs++;
}

static void list_unlink(kvp_pool *p, kvp__owner *o, uint32_t node)
{
    uint32_t prev = *np(p, node), next = *nn(p, node);
    if (prev != KVP__NONE)
        *nn(p, prev) = next;
    else
        o->head = next;
    if (next != KVP__NONE)
        *np(p, next) = prev;
    else
        o->tail = prev;
    o->nrefs--;
}

/* Put node `to` where node `from` is in owner o's list. */
static void list_replace(kvp_pool *p, kvp__owner *o, uint32_t from, uint32_t to)
{
    uint32_t prev = *np(p, from), next = *nn(p, from);
    *np(p, to) = prev;
    *nn(p, to) = next;
    if (prev != KVP__NONE)
        *nn(p, prev) = to;
    else
        o->head = to;
    if (next != KVP__NONE)
        *np(p, next) = to;
    else
        o->tail = to;
}

/* ------------------------------------------------------------------------ */
/* Owner table                                                               */
/* ------------------------------------------------------------------------ */

uint32_t kvp__owner_find(const kvp_pool *p, kvp_owner id)
{
    if (!p->omap)
        return KVP__NONE;
    for (uint32_t i = mix(id) & p->omask;; i = (i + 1) & p->omask) {
        uint32_t slot = p->omap[i];
        if (slot == KVP__NONE || p->owners[slot].id == id)
            return slot;
    }
}

static void map_put(uint32_t *map, uint32_t mask, const kvp__owner *owners, uint32_t slot)
{
    uint32_t i = mix(owners[slot].id) & mask;
    while (map[i] != KVP__NONE)
        i = (i + 1) & mask;
    map[i] = slot;
}

/* Make room for one more owner: a free slot, and the map at most 3/4 full.
 * Both double when short, so the cost is amortized O(1); on failure nothing
 * changes. */
kvp_status kvp__owner_reserve(kvp_pool *p)
{
    if (p->ofree == KVP__NONE) {
        uint32_t ncap = p->ocap ? p->ocap * 2 : 16;
        kvp__owner *no = kvp__alloc(p, (size_t)ncap * sizeof *no);
        if (!no)
            return KVP_ENOMEM;
        if (p->ocap)
            memcpy(no, p->owners, (size_t)p->ocap * sizeof *no);
        for (uint32_t i = p->ocap; i < ncap; i++) {
            no[i].id = KVP_ANON;
            no[i].head = i + 1 < ncap ? i + 1 : KVP__NONE;
        }
        kvp__release(p, p->owners, (size_t)p->ocap * sizeof *p->owners);
        p->ofree = p->ocap;
        p->owners = no;
        p->ocap = ncap;
    }
    uint32_t msize = p->omap ? p->omask + 1 : 0;
    if ((uint64_t)(p->nowners + 1) * 4 > (uint64_t)msize * 3) {
        uint32_t nsize = msize ? msize * 2 : 32;
        uint32_t *nm = kvp__alloc(p, (size_t)nsize * sizeof *nm);
        if (!nm)
            return KVP_ENOMEM;
        memset(nm, 0xff, (size_t)nsize * sizeof *nm);
        for (uint32_t i = 0; i < msize; i++)
            if (p->omap[i] != KVP__NONE)
                map_put(nm, nsize - 1, p->owners, p->omap[i]);
        kvp__release(p, p->omap, (size_t)msize * sizeof *p->omap);
        p->omap = nm;
        p->omask = nsize - 1;
    }
    return KVP_OK;
}

/* Add owner `id` (not present; room reserved).  Returns its slot. */
uint32_t kvp__owner_add(kvp_pool *p, kvp_owner id)
{
    uint32_t slot = p->ofree;
    kvp__owner *o = &p->owners[slot];
    p->ofree = o->head;
    o->id = id;
    o->head = o->tail = KVP__NONE;
    o->nrefs = 0;
    o->registered = 0;
    map_put(p->omap, p->omask, p->owners, slot);
    p->nowners++;
    return slot;
}

/* Remove an owner that holds no references.  Linear probing deletes by
 * shifting later entries of the run back, so no tombstones accumulate. */
void kvp__owner_remove(kvp_pool *p, uint32_t slot)
{
    kvp__assert(p->owners[slot].nrefs == 0);
    uint32_t i = mix(p->owners[slot].id) & p->omask;
    while (p->omap[i] != slot)
        i = (i + 1) & p->omask;
    for (uint32_t j = (i + 1) & p->omask; p->omap[j] != KVP__NONE; j = (j + 1) & p->omask) {
        uint32_t home = mix(p->owners[p->omap[j]].id) & p->omask;
        /* Move entry j into hole i unless its home lies cyclically in (i, j]. */
        if (((j - home) & p->omask) >= ((j - i) & p->omask)) {
            p->omap[i] = p->omap[j];
            i = j;
        }
    }
    p->omap[i] = KVP__NONE;
    p->owners[slot].id = KVP_ANON;
    p->owners[slot].head = p->ofree;
    p->ofree = slot;
    p->nowners--;
}

/* Forget every owner and xref, keeping the memory (kvp_pool_clear). */
void kvp__owners_reset(kvp_pool *p)
{
    if (p->omap)
        memset(p->omap, 0xff, ((size_t)p->omask + 1) * sizeof *p->omap);
    p->ofree = KVP__NONE;
    for (uint32_t i = p->ocap; i-- > 0;) {
        p->owners[i].id = KVP_ANON;
        p->owners[i].head = p->ofree;
        p->ofree = i;
    }
    p->nowners = 0;
    p->xfree = KVP__NONE;
    for (uint32_t i = p->xcap; i-- > 0;) {
        p->xrefs[i].block = KVP__NONE;
        p->xrefs[i].onext = p->xfree;
        p->xfree = i;
    }
    p->nxfree = p->xcap;
}

void kvp__owners_destroy(kvp_pool *p)
{
    kvp__release(p, p->owners, (size_t)p->ocap * sizeof *p->owners);
    kvp__release(p, p->omap, p->omap ? ((size_t)p->omask + 1) * sizeof *p->omap : 0);
    kvp__release(p, p->xrefs, (size_t)p->xcap * sizeof *p->xrefs);
}

/* ------------------------------------------------------------------------ */
/* References                                                                */
/* ------------------------------------------------------------------------ */

/* Make sure n xref nodes are free; doubles the slab when short. */
kvp_status kvp__xref_reserve(kvp_pool *p, uint32_t n)
{
    if (p->nxfree >= n)
        return KVP_OK;
    uint32_t ncap = p->xcap ? p->xcap : 16;
    while (ncap - p->xcap + p->nxfree < n)
        ncap *= 2;
    if (ncap == p->xcap)
        ncap *= 2;
    if (ncap > KVP__XREF)
        return KVP_ENOMEM;
    kvp__xref *nx = kvp__alloc(p, (size_t)ncap * sizeof *nx);
    if (!nx)
        return KVP_ENOMEM;
    if (p->xcap)
        memcpy(nx, p->xrefs, (size_t)p->xcap * sizeof *nx);
    for (uint32_t i = ncap; i-- > p->xcap;) {
        nx[i].block = KVP__NONE;
        nx[i].onext = p->xfree;
        p->xfree = i;
    }
    kvp__release(p, p->xrefs, (size_t)p->xcap * sizeof *p->xrefs);
    p->nxfree += ncap - p->xcap;
    p->xrefs = nx;
    p->xcap = ncap;
    return KVP_OK;
}

/* Add one reference on block b for owner slot `oslot` (NONE: anonymous).
 * A second owner needs a free xref (reserved by the caller). */
void kvp__ref_add(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    if (++blk->ref == 2)
        p->shared++;
    if (oslot == KVP__NONE) {
        blk->anon++;
    } else if (blk->owner == KVP__NONE) {
        blk->owner = oslot;
        list_append(p, &p->owners[oslot], b);
    } else {
        uint32_t xi = p->xfree;
        kvp__xref *x = &p->xrefs[xi];
        p->xfree = x->onext;
        p->nxfree--;
        x->block = b;
        x->owner = oslot;
        x->bprev = KVP__NONE;
        x->bnext = blk->xhead;
        if (blk->xhead != KVP__NONE)
            p->xrefs[blk->xhead].bprev = xi;
        blk->xhead = xi;
        list_append(p, &p->owners[oslot], xi | KVP__XREF);
    }
}

static void xref_unchain(kvp_pool *p, kvp__block *blk, uint32_t xi)
{
    kvp__xref *x = &p->xrefs[xi];
    if (x->bprev != KVP__NONE)
        p->xrefs[x->bprev].bnext = x->bnext;
    else
        blk->xhead = x->bnext;
    if (x->bnext != KVP__NONE)
        p->xrefs[x->bnext].bprev = x->bprev;
    x->block = KVP__NONE;
    x->onext = p->xfree;
    p->xfree = xi;
    p->nxfree++;
}

/* Drop the reference that list node `node` stands for. */
void kvp__ref_drop_node(kvp_pool *p, uint32_t node)
{
    uint32_t b = kvp__node_block(p, node);
    kvp__block *blk = &p->blocks[b];
    if (node & KVP__XREF) {
        uint32_t xi = node & ~KVP__XREF;
        list_unlink(p, &p->owners[p->xrefs[xi].owner], node);
        xref_unchain(p, blk, xi);
    } else {
        list_unlink(p, &p->owners[blk->owner], node);
        blk->owner = KVP__NONE;
        blk->prev = blk->next = KVP__NONE;
        if (blk->xhead != KVP__NONE) {
            /* Promote the oldest xref (the chain's tail: new ones go to the
             * head) so the inline owner stays the earliest holder. */
            uint32_t xi = blk->xhead;
            while (p->xrefs[xi].bnext != KVP__NONE)
                xi = p->xrefs[xi].bnext;
            uint32_t oslot = p->xrefs[xi].owner;
            list_replace(p, &p->owners[oslot], xi | KVP__XREF, b);
            blk->owner = oslot;
            xref_unchain(p, blk, xi);
        }
    }
    if (--blk->ref == 1)
        p->shared--;
}

/* Drop one reference on b held by `oslot` (NONE: anonymous); the caller has
 * checked that one is held. */
void kvp__ref_drop(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    if (oslot == KVP__NONE) {
        blk->anon--;
        if (--blk->ref == 1)
            p->shared--;
        return;
    }
    if (blk->owner == oslot) {
        kvp__ref_drop_node(p, b);
        return;
    }
    uint32_t xi = blk->xhead;
    while (p->xrefs[xi].owner != oslot)
        xi = p->xrefs[xi].bnext;
    kvp__ref_drop_node(p, xi | KVP__XREF);
}

uint32_t kvp__refs_held(const kvp_pool *p, uint32_t b, uint32_t oslot)
{
    const kvp__block *blk = &p->blocks[b];
    uint32_t n = blk->owner == oslot;
    for (uint32_t xi = blk->xhead; xi != KVP__NONE; xi = p->xrefs[xi].bnext)
        n += p->xrefs[xi].owner == oslot;
    return n;
}

/* Block `to` has just received `from`'s record (relocation): make the owner
 * list and the xrefs point at the new id. */
void kvp__owner_relocate(kvp_pool *p, uint32_t from, uint32_t to)
{
    kvp__block *blk = &p->blocks[to];
    if (blk->owner != KVP__NONE) {
        kvp__owner *o = &p->owners[blk->owner];
        if (blk->prev != KVP__NONE)
            *nn(p, blk->prev) = to;
        else
            o->head = to;
        if (blk->next != KVP__NONE)
            *np(p, blk->next) = to;
        else
            o->tail = to;
    }
    for (uint32_t xi = blk->xhead; xi != KVP__NONE; xi = p->xrefs[xi].bnext)
        p->xrefs[xi].block = to;
    (void)from;
}

/* ------------------------------------------------------------------------ */
/* Public owner calls                                                        */
/* ------------------------------------------------------------------------ */

kvp_status kvp_free_owner(kvp_pool *pool, kvp_owner owner, size_t *n_freed)
{
    if (!pool || owner == KVP_ANON)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = kvp__owner_find(pool, owner);
    if (slot == KVP__NONE) {
        kvp__leave(pool, false);
        return KVP_ENOTFOUND;
    }
    kvp__owner *o = &pool->owners[slot];
    uint32_t cursor = KVP__NONE;
    size_t n = 0;
    while (o->tail != KVP__NONE) {
        uint32_t node = o->tail;
        uint32_t b = kvp__node_block(pool, node);
        kvp__ref_drop_node(pool, node);
        if (pool->blocks[b].ref == 0)
            kvp__release_block(pool, b, &cursor);
        n++;
    }
    kvp__owner_remove(pool, slot);
    pool->ctr.free_calls++;
    pool->ctr.blocks_freed += n;
    if (n_freed)
        *n_freed = n;
    kvp__leave(pool, true);
    return KVP_OK;
}

kvp_status kvp_owner_register(kvp_pool *pool, kvp_owner owner)
{
    if (!pool || owner == KVP_ANON)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    if (kvp__owner_find(pool, owner) != KVP__NONE)
        rc = KVP_EOWNERACTIVE;
    else
        rc = kvp__owner_reserve(pool);
    if (!rc)
        pool->owners[kvp__owner_add(pool, owner)].registered = 1;
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_owner_release(kvp_pool *pool, kvp_owner owner)
{
    if (!pool || owner == KVP_ANON)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = kvp__owner_find(pool, owner);
    if (slot == KVP__NONE)
        rc = KVP_ENOTFOUND;
    else if (pool->owners[slot].nrefs)
        rc = KVP_EBUSY;
    else
        kvp__owner_remove(pool, slot);
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_owner_blocks(kvp_pool *pool, kvp_owner owner, kvp_block *ids, size_t ids_cap,
                            size_t *n_out)
{
    if (!pool || !n_out || (!ids && ids_cap) || owner == KVP_ANON)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = kvp__owner_find(pool, owner);
    if (slot == KVP__NONE) {
        rc = KVP_ENOTFOUND;
    } else {
        const kvp__owner *o = &pool->owners[slot];
        *n_out = o->nrefs;
        if (ids_cap < o->nrefs) {
            rc = KVP_ESPACE;
        } else {
            size_t i = 0;
            for (uint32_t node = o->head; node != KVP__NONE; node = kvp__node_next(pool, node))
                ids[i++] = kvp__node_block(pool, node);
        }
    }
    kvp__leave(pool, false);
    return rc;
}
