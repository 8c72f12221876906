/*
 * policy.c — the eviction order of cached free blocks (kvp_policy): one list
 * per retention priority and segment in each stream, and the ghost list of
 * KVP_POLICY_SLRU.
 *
 * What it owns: each stream's eviction lists (lhead, ltail, lmask, nprot),
 * the lprev/lnext links of cached blocks, the KVP__R_* bits of the block
 * records (block.c and freelist.c clear them when a block's content goes,
 * and kvp__policy_hit sets KVP__R_HIT on a claim), and p->ghost.
 *
 * Invariants (checked by check.c):
 * - A block is in exactly one list iff it is cached: list
 *   2 * priority + segment, segment 1 (protected) only under SLRU.
 *   Bit i of lmask is set iff list i is not empty; nprot[k] is the length
 *   of priority k's protected list.
 * - Each list runs from the least recently put there (head) to the most
 *   recent; the victim is the head of the first non-empty list, so lower
 *   priorities go first, and within one, probationary blocks before
 *   protected ones.
 * - A vacant block's retain bits are 0; a block in use has no KVP__R_PROT.
 * - Under SLRU, after every insertion into a priority's protected list it
 *   holds at most protected_percent of the stream's blocks.
 * - The ghost map holds each key at most once, at the ring slot of its
 *   latest eviction; a key whose slot is overwritten or that is published
 *   again leaves the map.
 *
 * Why this shape: the order lives in the block records' links, so LRU costs
 * no memory beyond the records, and every operation is a list unlink or
 * append plus a count of trailing zeros.  The ghost list remembers evicted
 * hashes by a 64-bit key in a ring the size of the initial pool, which is
 * the recency horizon SLRU needs to recognise content that comes back.
 */
#include "kvp_internal.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* Lists                                                                     */
/* ------------------------------------------------------------------------ */

static unsigned list_of(const kvp__block *blk)
{
    return 2u * kvp__priority(blk) + ((blk->retain & KVP__R_PROT) != 0);
}

static void list_unlink(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b)
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

static void list_append(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b)
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

/* Empty lists, for a stream being laid out (pool.c). */
void kvp__policy_reset(kvp__stream *st)
{
    for (unsigned l = 0; l < KVP__LISTS; l++)
        st->lhead[l] = st->ltail[l] = KVP__NONE;
    st->lmask = 0;
    memset(st->nprot, 0, sizeof st->nprot);
}

/* Block b just became cached: to the most recent end of its priority's
 * list, protected under SLRU when it was claimed since published.  A
 * protected list over its share then hands its least recent blocks to the
 * probationary list's most recent end, O(1) amortized: each block handed on
 * was put there by one insertion (more than one only after a shrink). */
void kvp__policy_insert(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    kvp__assert_internal(blk->state == KVP_BLOCK_CACHED && !(blk->retain & KVP__R_PROT));
    if (p->cfg.policy != KVP_POLICY_SLRU || !(blk->retain & KVP__R_HIT)) {
        list_append(p, st, list_of(blk), b);
        return;
    }
    blk->retain |= KVP__R_PROT;
    unsigned l = list_of(blk), k = l / 2;
    list_append(p, st, l, b);
    st->nprot[k]++;
    while ((uint64_t)st->nprot[k] * 100 > (uint64_t)st->nblocks * p->cfg.protected_percent) {
        uint32_t d = st->lhead[l];
        list_unlink(p, st, l, d);
        st->nprot[k]--;
        p->blocks[d].retain &= (uint16_t)~KVP__R_PROT;
        list_append(p, st, l - 1, d);
    }
}

/* Block b (cached) leaves its list: claimed, evicted or vacated. */
void kvp__policy_remove(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__assert_internal(blk->state == KVP_BLOCK_CACHED);
    kvp__stream *st = &p->st[blk->stream];
    list_unlink(p, st, list_of(blk), b);
    if (blk->retain & KVP__R_PROT) {
        st->nprot[kvp__priority(blk)]--;
        blk->retain &= (uint16_t)~KVP__R_PROT;
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

/* ------------------------------------------------------------------------ */
/* The ghost list                                                            */
/* ------------------------------------------------------------------------ */

/* A 64-bit key for stream s's hash h: every byte counts, so hashes that
 * differ anywhere get different keys but with probability 2^-64. */
static uint64_t ghost_key(int s, const kvp_hash *h)
{
    uint64_t w[4];
    memcpy(w, h->b, sizeof w);
    uint64_t x = (uint64_t)s * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) {
        x ^= w[i];
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 32;
    }
    return x;
}

/* The ghost list of an SLRU pool: num_blocks slots (at least one).  All or
 * nothing. */
kvp_status kvp__ghost_create(kvp_pool *p)
{
    if (p->cfg.policy != KVP_POLICY_SLRU)
        return KVP_OK;
    p->ghost.cap = p->cfg.num_blocks ? p->cfg.num_blocks : 1;
    p->ghost.ring = kvp__alloc(p, (size_t)p->ghost.cap * sizeof *p->ghost.ring);
    if (!p->ghost.ring || kvp__map_reserve(p, &p->ghost.map, p->ghost.cap) != KVP_OK) {
        kvp__ghost_destroy(p);
        return KVP_ENOMEM;
    }
    return KVP_OK;
}

void kvp__ghost_destroy(kvp_pool *p)
{
    kvp__release(p, p->ghost.ring, (size_t)p->ghost.cap * sizeof *p->ghost.ring);
    kvp__map_free(p, &p->ghost.map);
    memset(&p->ghost, 0, sizeof p->ghost);
}

/* Forget every evicted hash (the index was cleared).  O(map size). */
void kvp__ghost_clear(kvp_pool *p)
{
    if (!p->ghost.cap)
        return;
    kvp__map_clear(&p->ghost.map);
    p->ghost.next = p->ghost.used = 0;
}

/* Block b's hash is being evicted: remember it, forgetting the oldest
 * remembered when the ring is full.  O(1). */
void kvp__ghost_evicted(kvp_pool *p, uint32_t b)
{
    if (!p->ghost.cap)
        return;
    uint64_t key = ghost_key(p->blocks[b].stream, &p->hashes[b]);
    uint32_t slot = p->ghost.next;
    if (p->ghost.used == p->ghost.cap)
        kvp__map_del_if(&p->ghost.map, p->ghost.ring[slot], slot);
    else
        p->ghost.used++;
    p->ghost.ring[slot] = key;
    kvp__map_set(&p->ghost.map, key, slot);
    p->ghost.next = slot + 1 == p->ghost.cap ? 0 : slot + 1;
}

/* Block b is being published: a hash evicted recently comes back as if
 * claimed once (KVP__R_HIT), and leaves the ghost list.  O(1). */
void kvp__ghost_published(kvp_pool *p, uint32_t b)
{
    if (!p->ghost.cap)
        return;
    uint64_t key = ghost_key(p->blocks[b].stream, &p->hashes[b]);
    if (kvp__map_take(&p->ghost.map, key) != KVP__NONE)
        p->blocks[b].retain |= KVP__R_HIT;
}
