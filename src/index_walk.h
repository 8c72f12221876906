/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_walk.h — the content index's chains and its read-only iterator:
 * inline, calling nothing (no .c file), for the index and the files below it
 * that read it.
 */
#ifndef KVP_INDEX_WALK_H
#define KVP_INDEX_WALK_H

#include "kvp_types.h"

/* Index chains: links hold id + 1, so 0 (zeroed memory) means "none" and
 * decoding is one subtraction (0 - 1 wraps to KVP__NONE). */
static inline uint32_t kvp__chain_first(const kvp_pool *p, uint32_t bucket)
{
    return p->buckets[bucket] - 1u;
}

static inline uint32_t kvp__chain_next(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].hnext - 1u;
}

/* The content index's bucket of (stream, hash): the last 8 bytes identify a
 * block under every algorithm.  A full 64-bit finalizer (murmur3's fmix64)
 * makes every input bit reach the low bits: digests are random, but hashes
 * made from small integers (trace ids stored big-endian) vary only in their
 * top bytes as read here, and a multiply alone would leave those out. */
static inline uint32_t kvp__bucket_of(const kvp_pool *p, int s, const kvp_hash *h)
{
    uint64_t x;
    memcpy(&x, h->b + 24, sizeof x);
    x ^= (uint64_t)s * 0x9e3779b97f4a7c15ull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x & p->bmask;
}

/* The content index's iterator: the indexed blocks of stream s holding
 * hash h, in publish order.  kvp__index_first gives the first (NONE if
 * none), kvp__index_next the one after indexed block b with the same
 * stream and hash (NONE after the last).  Read-only, for index.c, events.c
 * and check.c. */
static inline uint32_t kvp__index_next_from(const kvp_pool *p, uint32_t c, int s,
                                            const kvp_hash *h)
{
    for (; c != KVP__NONE; c = kvp__chain_next(p, c))
        if (p->blocks[c].stream == (unsigned)s && memcmp(p->hashes[c].b, h->b, sizeof h->b) == 0)
            return c;
    return KVP__NONE;
}

static inline uint32_t kvp__index_first(const kvp_pool *p, int s, const kvp_hash *h)
{
    return kvp__index_next_from(p, kvp__chain_first(p, kvp__bucket_of(p, s, h)), s, h);
}

static inline uint32_t kvp__index_next(const kvp_pool *p, uint32_t b)
{
    return kvp__index_next_from(p, kvp__chain_next(p, b), p->blocks[b].stream, &p->hashes[b]);
}

#endif /* KVP_INDEX_WALK_H */
