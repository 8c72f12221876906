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
    return p->idx.buckets[bucket] - 1u;
}

/* The block after indexed block b in its chain (NONE at the end). */
static inline uint32_t kvp__chain_next(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].hnext - 1u;
}

/* Is indexed block b the first copy of its (stream, hash)? */
static inline bool kvp__index_is_first(const kvp_pool *p, uint32_t b)
{
    return !(p->blocks[b].flags & KVP__F_COPY);
}

/* The entry after the run that first copy b starts: b's own next entry
 * when that is no copy (b is alone, the usual case: nothing more read),
 * else the entry after b's last copy (NONE at the end). */
static inline uint32_t kvp__chain_skip(const kvp_pool *p, uint32_t b)
{
    uint32_t n = kvp__chain_next(p, b);
    return n != KVP__NONE && (p->blocks[n].flags & KVP__F_COPY) ? kvp__chain_next(p, p->idx.dprev[b])
                                                                   : n;
}

/* The content index's bucket of (stream, hash): XXH3 of the whole digest
 * keyed with the pool's random secret, so that no caller choosing hashes
 * can aim them at one bucket; the stream flips the top bits. */
static inline uint32_t kvp__bucket_of(const kvp_pool *p, int s, const kvp_hash *h)
{
    uint64_t x = XXH3_64bits_withSecret(h->b, sizeof h->b, p->idx.secret, sizeof p->idx.secret);
    x ^= (uint64_t)s * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(((x ^ x >> 32) & 0xffffffffu) * p->idx.nbuckets >> 32);
}

/* The content index's iterator: the indexed blocks of stream s holding
 * hash h, in publish order.  kvp__index_first gives the first (NONE if
 * none), kvp__index_next the one after indexed block b with the same
 * stream and hash (NONE after the last): O(distinct hashes in a chain),
 * then O(1) per copy.  Read-only, for index.c, events.c and check.c. */
static inline uint32_t kvp__index_first(const kvp_pool *p, int s, const kvp_hash *h)
{
    for (uint32_t c = kvp__chain_first(p, kvp__bucket_of(p, s, h)); c != KVP__NONE;
         c = kvp__chain_skip(p, c))
        if (p->blocks[c].stream == (unsigned)s && memcmp(p->hashes[c].b, h->b, sizeof h->b) == 0)
            return c;
    return KVP__NONE;
}

static inline uint32_t kvp__index_next(const kvp_pool *p, uint32_t b)
{
    uint32_t n = kvp__chain_next(p, b);
    return n == KVP__NONE || kvp__index_is_first(p, n) ? KVP__NONE : n;
}

#endif /* KVP_INDEX_WALK_H */
