/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h — the internal client interface: what a user of the pool does
 * with blocks (take, claim, share, drop, fill, publish, look up, raise a
 * priority), in one set of calls that the public takes, claims and frees
 * and sequence.c all use (client.c).
 *
 * A client names a reference's kind by `slot`: an owner slot, KVP__NONE
 * for an anonymous reference, KVP__SEQ for a sequence's.  Every call runs
 * inside a public call that entered (guard.h, included here: a client
 * enters and leaves, and allocates through mem.h) and checks nothing a
 * caller promised; each says what it needs.
 */
#ifndef KVP_CLIENT_H
#define KVP_CLIENT_H

#include "guard.h"
#include "kvp_types.h"
#include "mem.h"

/* Free blocks of stream s (vacant and cached): what a take may use. */
uint32_t kvp__client_free_blocks(const kvp_pool *p, int s);
/* Make sure `need` blocks can be taken from stream s when `avail` of its
 * free blocks may be used: grow just enough if the configuration allows,
 * else count an exhausted attempt (KVP_EEXHAUSTED).  Changes nothing else
 * on failure. */
kvp_status kvp__client_room(kvp_pool *p, int s, uint32_t avail, uint64_t need);
/* Take the next free block of stream s in reuse order for fresh content,
 * with one reference of kind `slot` (room made by kvp__client_room). */
uint32_t kvp__client_take(kvp_pool *p, int s, uint32_t slot, unsigned format);
/* One more reference of kind `slot` on block b, which holds content (in
 * use, or cached: then off the free list, content kept).  A second owner's
 * xref is reserved by the caller. */
void kvp__client_claim(kvp_pool *p, uint32_t b, uint32_t slot);
/* One more reference of kind `slot` on block b, which is in use (no claim:
 * the eviction policy does not count it as a hit). */
void kvp__client_share(kvp_pool *p, uint32_t b, uint32_t slot);
/* Drop one reference of kind `slot` on block b (in use), freeing b when it
 * was the last; cur is the calling free's insertion point (freelist.c). */
void kvp__client_drop(kvp_pool *p, uint32_t b, uint32_t slot, kvp__cursor *cur);
/* Drop one reference of kind `slot` on each of blocks[0, n), last first,
 * as one free (blocks freed together are reused in the order given). */
void kvp__client_drop_each(kvp_pool *p, const uint32_t *blocks, size_t n, uint32_t slot);
/* Set block b's (in use) fill to `fill` tokens, with the gauges. */
void kvp__client_fill(kvp_pool *p, uint32_t b, uint32_t fill);
/* Index block b (in use, unpublished) under *h, recording what `info`
 * knows for events and, on a pool verifying hits, for verification. */
void kvp__client_publish(kvp_pool *p, uint32_t b, const kvp_hash *h, const kvp__pubinfo *info);
/* The block of stream s indexed under *h whose content follows block
 * `parent` (NONE: first) with `tokens` where the pool verifies hits, or
 * NONE. */
uint32_t kvp__client_lookup(const kvp_pool *p, int s, const kvp_hash *h, uint32_t parent,
                            const uint32_t *tokens);
/* Raise block b's (in use or cached) retention priority to `prio`: false
 * if it was that high already. */
bool kvp__client_raise(kvp_pool *p, uint32_t b, unsigned prio);
/* Is the calling thread inside a callback of pool p (where every changing
 * call is refused)? */
bool kvp__client_in_callback(const kvp_pool *p);

/* Block b's references, all kinds. */
static inline uint32_t kvp__client_refs(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].ref;
}

/* Block b's fill, in tokens. */
static inline uint32_t kvp__client_fill_of(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].fill;
}

/* Is block b indexed (its content published)? */
static inline bool kvp__client_published(const kvp_pool *p, uint32_t b)
{
    return (p->blocks[b].flags & KVP__F_PUBLISHED) != 0;
}

/* Is block b cached (free, content kept)? */
static inline bool kvp__client_cached(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].state == KVP_BLOCK_CACHED;
}

/* Per-call marks on blocks (KVP__F_MARK), for counting each block once
 * among repeats: kvp__client_mark marks b and says whether it was unmarked,
 * kvp__client_tally also counts how often b was marked in this call (1 the
 * first time), kvp__client_unmark clears the mark (every marked block
 * before the call returns). */
static inline bool kvp__client_mark(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    bool first = !(blk->flags & KVP__F_MARK);
    blk->flags |= KVP__F_MARK;
    return first;
}

static inline uint32_t kvp__client_tally(kvp_pool *p, uint32_t b)
{
    kvp__block *blk = &p->blocks[b];
    if (!(blk->flags & KVP__F_MARK)) {
        blk->flags |= KVP__F_MARK;
        blk->count = 0;
    }
    return ++blk->count;
}

static inline void kvp__client_unmark(kvp_pool *p, uint32_t b)
{
    p->blocks[b].flags &= (uint8_t)~KVP__F_MARK;
}

#endif /* KVP_CLIENT_H */
