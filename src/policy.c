/* SPDX-License-Identifier: Apache-2.0 */
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
 * - The ghost list's chains hold each key at most once, at the ring slot of
 *   its latest eviction; a key whose slot the ring reaches again, or that
 *   is published again, leaves them.
 *
 * Why this shape: the order lives in the block records' links, so LRU costs
 * no memory beyond the records, and every operation is a list unlink or
 * append plus a count of trailing zeros.  The ghost list remembers evicted
 * hashes by a 64-bit key in a ring the size of the initial pool, which is
 * the recency horizon SLRU needs to recognise content that comes back;
 * finding a key walks one short chain, with no table to probe or shift.
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

/* A 64-bit key for stream s's hash h: XXH3 of the whole digest keyed with
 * the ghost list's random secret, so hashes that differ anywhere get
 * different keys but with probability 2^-64, and a caller choosing hashes
 * cannot aim them at one bucket (the key's low bits pick it). */
static uint64_t ghost_key(const kvp_pool *p, int s, const kvp_hash *h)
{
    uint64_t x = XXH3_64bits_withSecret(h->b, sizeof h->b, p->ghost.secret, sizeof p->ghost.secret);
    return x ^ (uint64_t)s * 0x9e3779b97f4a7c15ull;
}

/* The ghost list: a ring of `cap` slots, each holding the key of one
 * eviction and a link, and buckets of chains through the ring, as the
 * content index chains through the block records.  Buckets and links name
 * a slot as slot + 1 (0 ends a chain).  A slot is in its key's chain until
 * the ring comes round to it again or its key is published; then its link
 * is GHOST_DEAD.  A key is in at most one chain entry: its latest eviction. */
#define GHOST_DEAD UINT32_MAX

static uint32_t *ghost_chain(kvp_pool *p, uint64_t key)
{
    return &p->ghost.bucket[key & p->ghost.bmask];
}

/* Take slot s out of the chain that *link starts (s is in it). */
static void ghost_unlink(kvp_pool *p, uint32_t *link, uint32_t s)
{
    while (*link != s + 1)
        link = &p->ghost.link[*link - 1];
    *link = p->ghost.link[s];
    p->ghost.link[s] = GHOST_DEAD;
}

/* The slot holding key in the chain that `head` starts, or NONE; *len
 * counts the entries passed. */
static uint32_t ghost_find(const kvp_pool *p, uint32_t head, uint64_t key, uint32_t *len)
{
    *len = 0;
    for (uint32_t e = head; e; e = p->ghost.link[e - 1], ++*len)
        if (p->ghost.key[e - 1] == key)
            return e - 1;
    return KVP__NONE;
}

/* The ghost list of an SLRU pool: num_blocks slots (at least one) and a
 * power of two of buckets, at least as many.  All or nothing. */
kvp_status kvp__ghost_create(kvp_pool *p)
{
    if (p->cfg.policy != KVP_POLICY_SLRU)
        return KVP_OK;
    uint32_t cap = p->cfg.num_blocks ? p->cfg.num_blocks : 1, nb = 1;
    while (nb < cap)
        nb *= 2;
    p->ghost.cap = cap;
    p->ghost.bmask = nb - 1;
    p->ghost.key = kvp__alloc(p, (size_t)cap * sizeof *p->ghost.key);
    p->ghost.link = kvp__alloc(p, (size_t)cap * sizeof *p->ghost.link);
    p->ghost.bucket = kvp__zalloc(p, (size_t)nb * sizeof *p->ghost.bucket);
    if (!p->ghost.key || !p->ghost.link || !p->ghost.bucket ||
        kvp__random(p->ghost.secret, sizeof p->ghost.secret)) {
        kvp__ghost_destroy(p);
        return KVP_ENOMEM;
    }
    return KVP_OK;
}

void kvp__ghost_destroy(kvp_pool *p)
{
    size_t cap = p->ghost.cap, nb = p->ghost.cap ? (size_t)p->ghost.bmask + 1 : 0;
    kvp__release(p, p->ghost.key, cap * sizeof *p->ghost.key);
    kvp__release(p, p->ghost.link, cap * sizeof *p->ghost.link);
    kvp__release(p, p->ghost.bucket, nb * sizeof *p->ghost.bucket);
    memset(&p->ghost, 0, sizeof p->ghost);
}

/* Forget every evicted hash (the index was cleared).  O(buckets). */
void kvp__ghost_clear(kvp_pool *p)
{
    if (!p->ghost.cap)
        return;
    memset(p->ghost.bucket, 0, ((size_t)p->ghost.bmask + 1) * sizeof *p->ghost.bucket);
    p->ghost.next = p->ghost.used = 0;
}

/* A chain reached KVP__CHAIN_MAX keys: draw a fresh secret and forget
 * every remembered hash (the keys cannot be remade under the new secret
 * without their digests; the ghost list is a hint), unless the last
 * re-keying was fewer than `cap` evictions ago or the kernel gives no
 * random bytes.  True if it re-keyed. */
static bool ghost_rekey(kvp_pool *p)
{
    if (p->ghost.rekey_in || kvp__random(p->ghost.secret, sizeof p->ghost.secret))
        return false;
    kvp__ghost_clear(p);
    p->ghost.rekey_in = p->ghost.cap;
    return true;
}

/* Block b's hash is being evicted: remember it (its older entry goes),
 * forgetting the oldest remembered when the ring is full.  O(1) expected:
 * keys are keyed hashes, so chains hold fewer entries than one per bucket
 * whatever hashes a caller chooses, and a chain at KVP__CHAIN_MAX
 * re-keys (amortized O(1)). */
void kvp__ghost_evicted(kvp_pool *p, uint32_t b)
{
    if (!p->ghost.cap)
        return;
    if (p->ghost.rekey_in)
        p->ghost.rekey_in--;
    uint64_t key = ghost_key(p, p->blocks[b].stream, &p->hashes[b]);
    uint32_t len, old = ghost_find(p, *ghost_chain(p, key), key, &len);
    if (old == KVP__NONE && len >= KVP__CHAIN_MAX && ghost_rekey(p))
        key = ghost_key(p, p->blocks[b].stream, &p->hashes[b]);
    uint32_t s = p->ghost.next;
    if (p->ghost.used < p->ghost.cap)
        p->ghost.used++;
    else if (p->ghost.link[s] != GHOST_DEAD)
        ghost_unlink(p, ghost_chain(p, p->ghost.key[s]), s);
    uint32_t *head = ghost_chain(p, key);
    if ((old = ghost_find(p, *head, key, &len)) != KVP__NONE)
        ghost_unlink(p, head, old);
    p->ghost.key[s] = key;
    p->ghost.link[s] = *head;
    *head = s + 1;
    p->ghost.next = s + 1 == p->ghost.cap ? 0 : s + 1;
}

/* Block b is being published: a hash evicted recently comes back as if
 * claimed once (KVP__R_HIT), and leaves the ghost list.  O(1) expected. */
void kvp__ghost_published(kvp_pool *p, uint32_t b)
{
    if (!p->ghost.cap)
        return;
    uint64_t key = ghost_key(p, p->blocks[b].stream, &p->hashes[b]);
    uint32_t *head = ghost_chain(p, key), len, s = ghost_find(p, *head, key, &len);
    if (s == KVP__NONE)
        return;
    ghost_unlink(p, head, s);
    p->blocks[b].retain |= KVP__R_HIT;
}
