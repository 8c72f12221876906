/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_slru.c — KVP_POLICY_SLRU: segmented LRU with a ghost list.
 *
 * What it owns: the protected segment (segment 1) of each priority, and
 * p->ghost, the keys of recently evicted hashes.
 *
 * Invariants (checked by slru_check and check.c):
 * - A cached block is in segment 1 iff it was claimed since published, or
 *   its hash was in the ghost list when published (KVP__R_HIT), and it was
 *   not handed back to segment 0 since.
 * - After every insertion into a priority's protected segment it holds at
 *   most protected_percent of the stream's blocks.
 * - The ghost list's chains hold each key at most once, at the ring slot of
 *   its latest eviction; a key whose slot the ring reaches again, or that
 *   is published again, leaves them.
 *
 * Why this shape: the ghost list remembers evicted hashes by a 64-bit key in
 * a ring the size of the initial pool, which is the recency horizon SLRU
 * needs to recognise content that comes back; finding a key walks one short
 * chain, with no table to probe or shift.
 */
#include "policy.h"
#include "hashing.h"
#include "mem.h"

#include <stdio.h>
#include <string.h>

/* A block with KVP__R_HIT became cached: to the most recent end of its
 * priority's protected segment.  A protected segment over its share then
 * hands its least recent blocks to the probationary segment's most recent
 * end, O(1) amortized: each block handed on was put there by one insertion
 * (more than one only after a shrink). */
static void slru_insert(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    kvp__stream *st = &p->st[blk->stream];
    unsigned k = kvp__priority(blk), l = KVP__SEGS * k + 1;
    kvp__seg_append(p, b, 1);
    while ((uint64_t)st->nseg[l] * 100 > (uint64_t)st->nblocks * p->cfg.protected_percent)
        kvp__seg_demote(p, st, k, 1);
}

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

static void ghost_destroy(kvp_pool *p);

/* The ghost list of an SLRU pool: num_blocks slots (at least one) and a
 * power of two of buckets, at least as many.  All or nothing. */
static kvp_status ghost_create(kvp_pool *p)
{
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
        ghost_destroy(p);
        return KVP_ENOMEM;
    }
    return KVP_OK;
}

/* Release the ghost list (also a partly allocated one, or none). */
static void ghost_destroy(kvp_pool *p)
{
    size_t cap = p->ghost.cap, nb = p->ghost.cap ? (size_t)p->ghost.bmask + 1 : 0;
    kvp__release(p, p->ghost.key, cap * sizeof *p->ghost.key);
    kvp__release(p, p->ghost.link, cap * sizeof *p->ghost.link);
    kvp__release(p, p->ghost.bucket, nb * sizeof *p->ghost.bucket);
    memset(&p->ghost, 0, sizeof p->ghost);
}

/* Forget every evicted hash (the index was cleared).  O(buckets). */
static void ghost_clear(kvp_pool *p)
{
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
    ghost_clear(p);
    p->ghost.rekey_in = p->ghost.cap;
    return true;
}

/* Block b's hash is being evicted: remember it (its older entry goes),
 * forgetting the oldest remembered when the ring is full.  O(1) expected:
 * keys are keyed hashes, so chains hold fewer entries than one per bucket
 * whatever hashes a caller chooses, and a chain at KVP__CHAIN_MAX
 * re-keys (amortized O(1)). */
static void ghost_evicted(kvp_pool *p, uint32_t b)
{
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
static void ghost_published(kvp_pool *p, uint32_t b)
{
    uint64_t key = ghost_key(p, p->blocks[b].stream, &p->hashes[b]);
    uint32_t *head = ghost_chain(p, key), len, s = ghost_find(p, *head, key, &len);
    if (s == KVP__NONE)
        return;
    ghost_unlink(p, head, s);
    p->blocks[b].retain |= KVP__R_HIT;
}

/* The ghost list's invariants: the ring's filled slots are each in the
 * chain of their key's bucket, once, or in none (GHOST_DEAD); chains hold
 * nothing else.  KVP_OK, or KVP_ECORRUPT with a message in msg. */
static kvp_status ghost_check(const kvp_pool *p, char *msg, size_t cap)
{
    uint32_t want = p->cfg.num_blocks ? p->cfg.num_blocks : 1;
    if (p->ghost.cap != want || p->ghost.used > p->ghost.cap ||
        (p->ghost.next != p->ghost.used % p->ghost.cap && p->ghost.used != p->ghost.cap)) {
        snprintf(msg, cap, "ghost list: cap %u, used %u, next %u", p->ghost.cap, p->ghost.used,
                 p->ghost.next);
        return KVP_ECORRUPT;
    }
    uint32_t chained = 0, live = 0;
    for (uint32_t i = 0; i <= p->ghost.bmask; i++)
        for (uint32_t e = p->ghost.bucket[i]; e; e = p->ghost.link[e - 1])
            if (e - 1 >= p->ghost.used || chained++ >= p->ghost.used ||
                p->ghost.link[e - 1] == GHOST_DEAD || (p->ghost.key[e - 1] & p->ghost.bmask) != i) {
                snprintf(msg, cap, "ghost list: bucket %u's chain holds slot %u wrongly", i, e - 1);
                return KVP_ECORRUPT;
            }
    for (uint32_t s = 0; s < p->ghost.used; s++)
        live += p->ghost.link[s] != GHOST_DEAD;
    if (live != chained) {
        snprintf(msg, cap, "ghost list: %u slots linked, %u in chains", live, chained);
        return KVP_ECORRUPT;
    }
    return KVP_OK;
}

const kvp__policy kvp__policy_slru = {
    .name = "slru",
    .segments = 2,
    .slow = KVP__R_HIT,
    .valid = kvp__policy_refuse_fifo,
    .create = ghost_create,
    .destroy = ghost_destroy,
    .insert = slru_insert,
    .evicted = ghost_evicted,
    .published = ghost_published,
    .forget = ghost_clear,
    .check = ghost_check,
};
