/* SPDX-License-Identifier: Apache-2.0 */
/*
 * record.h — one block record and the id space: constructors, predicates,
 * the stream map, the gauges a record change moves, reference-node decoding;
 * inline, calling nothing (no .c file).
 */
#ifndef KVP_RECORD_H
#define KVP_RECORD_H

#include "kvp_types.h"

/* Ask for block b's record ahead of use.  Batch loops over scattered blocks
 * run this KVP__PREFETCH entries ahead, and over their first entries before
 * they start, so that the misses overlap instead of queueing.
 *
 * kvp__prefetch_record is for ids known to be blocks (free-list links).
 * kvp__prefetch_block takes anything (xref nodes, tombstones, bad input)
 * and prefetches block 0 for what is not a block id.  It selects rather
 * than branches, because a compiler may delete a prefetch guarded by a
 * branch; tests/test_codegen.py checks that the prefetches are in the
 * binary. */
static inline void kvp__prefetch_record(const kvp_pool *p, uint32_t b)
{
    /* Both ends: half of the 48-byte records cross a line, and a take reads
     * state, near the end, first. */
    __builtin_prefetch(&p->blocks[b], 1);
    __builtin_prefetch((const char *)&p->blocks[b] + sizeof(kvp__block) - 1, 1);
}

static inline void kvp__prefetch_block(const kvp_pool *p, uint32_t b)
{
    kvp__prefetch_record(p, b < p->top ? b : 0);
}

/* A vacant block's record made that of a block in use (the caller adds its
 * stream and references): stores only, no read (block.c). */
static inline void kvp__record_in_use(kvp__block *blk, unsigned format)
{
    blk->flags = KVP__F_EVER;
    blk->state = KVP_BLOCK_IN_USE;
    blk->prev = blk->next = KVP__NONE;
    blk->format = (uint8_t)format;
}

/* Block b's record as a take by owner slot `slot` leaves it, at position
 * pos of the owner's array: in use, one reference, format FP16; stores
 * only.  The take writes it, or defer.c for a deferred one.  The stream s
 * is stored though the record holds it already: with all four byte-wide
 * fields stored the compiler needs no read-modify-write of their word,
 * which would read a cold record (tests/test_codegen.py checks the
 * compiled take). */
static inline void kvp__record_owned(kvp_pool *p, uint32_t b, uint32_t slot, uint32_t pos, int s)
{
    kvp__block *blk = &p->blocks[b];
    kvp__record_in_use(blk, KVP_FMT_FP16);
    blk->stream = (unsigned)s;
    blk->opos = pos;
    blk->ref = 1;
    blk->owner = slot;
}

/* A record set up as a block of stream s in `state` with nothing else:
 * no links, references, fill or flags. */
static inline void kvp__init_block(kvp_pool *p, uint32_t b, int s, int state)
{
    kvp__block *blk = &p->blocks[b];
    blk->prev = blk->next = blk->lprev = blk->lnext = KVP__NONE;
    blk->ref = blk->anon = blk->sref = 0;
    blk->owner = blk->xhead = KVP__NONE;
    blk->hnext = 0;
    blk->fill = 0;
    blk->format = 0;
    blk->stream = (unsigned)s;
    blk->state = (unsigned)state;
    blk->flags = 0;
    blk->retain = 0;
}

/* Map a public stream value to an internal index, or -1 if refused: a
 * shared pool's one stream serves every value, a pool with streams apart
 * serves KVP_STREAM_K + s as stream s. */
static inline int kvp__stream_index(const kvp_pool *p, int stream)
{
    if (stream < KVP_STREAM_SHARED || stream > KVP_STREAM_V)
        return -1;
    if (p->nstreams == 1)
        return 0;
    return stream == KVP_STREAM_SHARED || stream - KVP_STREAM_K >= p->nstreams
               ? -1
               : stream - KVP_STREAM_K;
}

/* The public stream value of internal stream s (kvp__stream_index's
 * inverse). */
static inline kvp_stream kvp__stream_value(const kvp_pool *p, int s)
{
    return p->nstreams == 1 ? KVP_STREAM_SHARED : (kvp_stream)(KVP_STREAM_K + s);
}

/* ---- one record's state, and the gauges ---- */

/* The stream whose never-touched ids of the initial pool hold block b, or
 * -1 if b is not such a fresh block. */
static inline int kvp__fresh_stream(const kvp_pool *p, uint32_t b)
{
    for (int s = 0; s < kvp__streams(p); s++)
        if (b >= p->st[s].fresh_lo && b < p->st[s].fresh_hi)
            return s;
    return -1;
}

/* A fresh block: one of a stream's never-touched ids of the initial pool. */
static inline bool kvp__is_fresh(const kvp_pool *p, uint32_t b)
{
    return kvp__fresh_stream(p, b) >= 0;
}

/* The internal stream of block b: a fresh block's (zero) record does not
 * say it, its place in the fresh ranges does. */
static inline int kvp__stream_of(const kvp_pool *p, uint32_t b)
{
    int s = kvp__fresh_stream(p, b);
    return s >= 0 ? s : (int)p->blocks[b].stream;
}

/* The state of block b (below top); a fresh record is zero: VACANT. */
static inline int kvp__state(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].state;
}

/* The common id check: KVP_ERANGE for ids that do not exist or are retired,
 * KVP_EINVAL for the null block. */
static inline kvp_status kvp__check_id(const kvp_pool *p, uint32_t b)
{
    if (b >= p->top)
        return KVP_ERANGE;
    if (p->blocks[b].state == KVP_BLOCK_RETIRED)
        return KVP_ERANGE;
    if (p->blocks[b].flags & KVP__F_NULL)
        return KVP_EINVAL;
    return KVP_OK;
}

/* kvp__check_id, and the block must be in use (KVP_EDOUBLEFREE if free). */
static inline kvp_status kvp__check_in_use(const kvp_pool *p, uint32_t b)
{
    kvp_status rc = kvp__check_id(p, b);
    if (!rc && kvp__state(p, b) != KVP_BLOCK_IN_USE)
        rc = KVP_EDOUBLEFREE;
    return rc;
}

/* Is the block in use and partly filled (counted in `fragmented`)? */
static inline bool kvp__is_frag(const kvp_pool *p, const kvp__block *blk)
{
    return blk->state == KVP_BLOCK_IN_USE && blk->fill > 0 && blk->fill < p->cfg.block_size;
}

/* Add (sign 1) or remove (sign -1) an in-use block's share of the gauges
 * that depend on its fill. */
static inline void kvp__account(kvp_pool *p, const kvp__block *blk, int sign)
{
    if (!blk->fill) /* the usual case on alloc and free: no share */
        return;
    p->g.fragmented += (uint64_t)(int64_t)(sign * (int)kvp__is_frag(p, blk));
    p->g.fill_sum += (uint64_t)(int64_t)(sign * (int)blk->fill);
}

/* Count n blocks handed out: allocated, in use, and the peak. */
static inline void kvp__count_out(kvp_pool *p, uint64_t n)
{
    p->ctr.blocks_allocated += n;
    p->g.in_use += n;
    if (p->g.in_use > p->g.peak)
        p->g.peak = p->g.in_use;
}

/* The block a reference node names, and the node's position in its
 * owner's array: the block itself for the inline owner, else its xref. */
static inline uint32_t kvp__node_block(const kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? p->own.xrefs[node & ~KVP__XREF].block : node;
}

static inline uint32_t kvp__node_pos(const kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? p->own.xrefs[node & ~KVP__XREF].pos : p->blocks[node].opos;
}

/* The growth cap a configuration sets: no array, table or arena of the
 * pool is ever sized for more ids than this. */
static inline uint32_t kvp__growth_cap(const kvp_config *c)
{
    return c->max_blocks ? c->max_blocks : KVP_MAX_BLOCKS;
}

static inline uint32_t kvp__max_blocks(const kvp_pool *p)
{
    return kvp__growth_cap(&p->cfg);
}

/* Blocks the pool manages: ids below top that are not retired. */
static inline uint32_t kvp__managed(const kvp_pool *p)
{
    return p->top - p->nretired;
}

/* Live entries (references) in an owner's array. */
static inline uint32_t kvp__owner_live(const kvp__owner *o)
{
    return o->len - o->dead;
}

#endif /* KVP_RECORD_H */
