/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvp_internal.h — the pool's data structures, shared by the files in src/.
 *
 * Layout, and why:
 * - Block metadata is one array of 48-byte records indexed by block id, plus a
 *   parallel array of 32-byte digests that only published blocks use.  Arrays
 *   of plain records keep every per-block operation a couple of cache lines.
 * - Links are 32-bit ids, never pointers, so arrays can be reallocated when
 *   the pool grows and the checker can validate every link by range.
 * - An owner's references are an array of node ids in the order it took
 *   them, so freeing a whole owner is a sequential pass, not a pointer chase.
 *   The node for a block's first owner is the block id itself, and the block
 *   records its position (opos); further owners of the same block get an
 *   xref node from a slab, which records its own position.  Removing one
 *   reference leaves a tombstone; arrays compact when half dead.
 * - Never-used blocks of the initial pool are not initialised at creation: each
 *   stream keeps them as a "fresh" id range [fresh_lo, fresh_hi) whose records
 *   are set up when first touched.  That makes creating a 1M-block pool cost
 *   almost nothing beyond zeroed memory.  A fresh block's record stays all
 *   zero (kvp_pool_clear re-zeroes them), which reads as a vacant block with
 *   no flags, so state and id checks need not ask whether a block is fresh.
 * - Ordered id sets (idset.c) answer "lowest vacant", "highest vacant",
 *   "highest cached" and "lowest retired" in O(log64 n) for LOWEST reuse,
 *   shrink and growth.  The vacant and cached ones are kept only from the
 *   first time something asks (kvp__order), so LIFO and FIFO pools that never
 *   shrink do not pay for them on every take and free.
 * - A LIFO stream keeps the top of its vacant stack as an array of ids
 *   (freelist.c, "The LIFO stack's array"): frees and takes touch no neighbour's
 *   record, and a take can prefetch the record of the block it will hand
 *   out a few takes later.
 *
 * Besides types, this header holds only inline helpers that read or write
 * one record (or the pool's fields) and call nothing, so no file reaches
 * another through it; docs/ARCHITECTURE.md draws which file calls which.
 */
#ifndef KVP_INTERNAL_H
#define KVP_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom, madvise, MAP_ANONYMOUS */
#endif

#include "kvp_checked.h"
#include "kvpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#ifndef KVP_DEBUG
#define KVP_DEBUG 0
#endif

/* Assertions.  kvp__assert (debug level 1 and up) guards what a call's
 * arguments and the pool's own state promise at its boundaries;
 * kvp__assert_internal (level 2 and up) guards each step inside the hot
 * paths (reference counts, list and array moves), where it costs a test per
 * block, so that a broken step fails where it happens rather than at the
 * next whole-pool check (level 3, guard.c). */
#if KVP_DEBUG >= 1
#include <assert.h>
#define kvp__assert(x) assert(x)
#else
#define kvp__assert(x) ((void)0)
#endif
#if KVP_DEBUG >= 2
#define kvp__assert_internal(x) assert(x)
#else
#define kvp__assert_internal(x) ((void)0)
#endif

#define KVP__NONE UINT32_MAX
/* The most streams a pool can have: one per kvp_config.block_bytes entry
 * (a stream kind of the public API).  A pool has cfg-many (kvp__nstreams),
 * its per-stream arrays sized at creation; only per-call scratch on the
 * stack (kvp__cursor) is sized by this bound. */
#define KVP__STREAMS_MAX (sizeof ((kvp_config *)0)->block_bytes / sizeof(size_t))
#define KVP__XREF 0x80000000u /* tag on reference-node ids naming an xref */
#define KVP__SEQ 0xfffffffeu  /* "owner slot" of references held by sequences */
#define KVP__STACKED 0xfffffffdu /* next link of a vacant block in its LIFO stack's array */
#define KVP__LISTED 0xfffffffcu  /* cursor slot: the call's blocks go to the q list */
/* How far ahead batch loops prefetch block records: far enough to cover a
 * miss to memory at about 15 cycles per block freed, also when memory is
 * slow (the 1M-block scale row gains; small pools lose nothing). */
#define KVP__PREFETCH 32
#define KVP__STK_AHEAD 4      /* how many pops ahead a LIFO take prefetches */

/* On the hottest entry points: inline every call the compiler can see (all
 * of the library, in the unity build).  The per-block work is a dozen small
 * steps; as calls, their register saves and restores would be a large share
 * of a take and its free. */
#if defined(__GNUC__) && !defined(__clang__)
#define KVP__FLATTEN __attribute__((flatten))
#else
#define KVP__FLATTEN
#endif

/* On the rare steps a flattened entry point can reach (growing a table, the
 * pool, an owner's array): kept out of line, so that their register needs
 * do not spill into the common path. */
#if defined(__GNUC__)
#define KVP__COLD __attribute__((noinline, cold))
#define KVP__NOINLINE __attribute__((noinline))
#else
#define KVP__COLD
#define KVP__NOINLINE
#endif

/* Block flags. */
#define KVP__F_EVER 0x01u      /* handed out at least once */
#define KVP__F_PUBLISHED 0x02u /* has a digest and sits in the index */
#define KVP__F_NULL 0x04u      /* the reserved null block */
#define KVP__F_VERIFIED 0x08u  /* published with tokens and parent recorded */
#define KVP__F_ANNOUNCED 0x10u /* the indexed copy whose hash events announced */
#define KVP__F_MARK 0x20u      /* per-call mark (admission), always clear between calls */
#define KVP__F_PENDING 0x40u   /* kvp__check's mark on pending references' blocks, set
                                  and cleared inside it */

/* Eviction policy bits of a block record (policy.c): its retention
 * priority, whether it was claimed (or its hash found in the ghost list)
 * since its content was published, while cached its segment, and the bits
 * a policy keeps of its own (KVP_POLICY_LFU's frequency class). */
#define KVP__R_PRIO 0x3u  /* retention priority XOR KVP_PRIORITY_NORMAL, so
                             that 0 (a vacant block's) reads as NORMAL */
#define KVP__R_HIT 0x4u   /* claimed since published, or a ghost hit */
#define KVP__R_SEG 0x18u  /* cached: its segment, 0 (evicted first) to 2 */
#define KVP__R_SEG_SHIFT 3
#define KVP__R_FREQ 0x60u /* KVP_POLICY_LFU: frequency class, kept in use */
#define KVP__R_FREQ_SHIFT 5
#define KVP__SEGS 3u      /* segments per retention priority */
#define KVP__LISTS (KVP__SEGS * (KVP_PRIORITY_MAX + 1)) /* eviction lists per stream */

/* An eviction policy: one row of policy.c's table, copied into the pool at
 * creation (p->pol).  Every cached block sits in a list of its priority's
 * `segments` (policy.c); the policy decides which, and the victim is always
 * the least recently put block of the lowest non-empty segment of the
 * lowest priority.  NULL hooks do nothing. */
typedef struct kvp__policy {
    const char *name;       /* kvp_policy_name's */
    unsigned segments;      /* segments per priority it uses, 1..KVP__SEGS */
    uint16_t slow;          /* KVP__R_* bits: a block becoming cached with
                               any of them goes to insert, one with none to
                               segment 0's most recent end */
    kvp_status (*valid)(const kvp_config *c); /* its rules: KVP_OK or EINVAL */
    kvp_status (*create)(kvp_pool *p);        /* all or nothing; ENOMEM */
    void (*destroy)(kvp_pool *p);             /* also after a failed create */
    void (*insert)(kvp_pool *p, uint32_t b);  /* b became cached (slow bits) */
    void (*evicted)(kvp_pool *p, uint32_t b); /* b's content is being evicted */
    void (*published)(kvp_pool *p, uint32_t b); /* b is being published */
    void (*forget)(kvp_pool *p);              /* the index was emptied */
    kvp_status (*check)(const kvp_pool *p, char *msg, size_t cap); /* ECORRUPT */
} kvp__policy;
extern const kvp__policy kvp__policy_lru, kvp__policy_slru, kvp__policy_lfu;

/* What a publisher knows about a block being indexed (for events and
 * verified hits): its parent block (NONE if first or unknown) and the hash
 * the block was chained from (NULL if none; the parent's digest, which the
 * parent block itself may no longer hold), its tokens (or NULL), the
 * sequence's extra keys (or NULL) and the block's first token position. */
typedef struct kvp__pubinfo {
    uint32_t parent;
    const kvp_hash *parent_hash;
    const uint32_t *tokens;
    const kvp_extra_keys *extra;
    uint64_t start;
} kvp__pubinfo;

typedef struct kvp__evq kvp__evq; /* events.c */

typedef struct kvp__block {
    union {
        uint32_t prev; /* free: vacant stack / free queue links (the
                          head's prev is not kept: see q_unlink) */
        uint32_t opos; /* in use: position of the inline reference in its
                          owner's array */
    };
    uint32_t next;
    union {
        uint32_t lprev;    /* cached: its eviction list (policy.c) */
        uint32_t count;    /* in use: per-call counter (kvp_free validation) */
    };
    uint32_t lnext;
    uint32_t ref;          /* all references */
    uint32_t anon;         /* anonymous references */
    uint32_t sref;         /* references held by sequences (kept apart from
                              anonymous ones, so kvp_free cannot drop them) */
    uint32_t owner;        /* owner slot of the inline reference, or NONE */
    uint32_t xhead;        /* first xref (further owners), or NONE */
    uint32_t hnext;        /* next block in the same index bucket, as a link
                              (id + 1; 0 ends the chain: see kvp__chain) */
    uint16_t fill;
    /* Byte-wide fields as bit-fields of unsigned int, not uint8_t: a store
     * through a character type may alias any object, so each one made the
     * compiler reload the pool's fields and pointers in the per-block loops;
     * a bit-field store aliases only its own type.  Same layout. */
    unsigned format : 8;
    unsigned stream : 8; /* internal stream index, 0 or 1 */
    unsigned state : 8;  /* KVP_BLOCK_* */
    unsigned flags : 8;  /* KVP__F_* */
    uint16_t retain;       /* eviction policy bits (KVP__R_*), 0 while vacant */
} kvp__block;
_Static_assert(sizeof(kvp__block) == 48, "block records stay 48 bytes (memory budget)");

/* A reference held by an owner that is not the block's inline owner. */
typedef struct kvp__xref {
    uint32_t block;        /* NONE while on the free list */
    uint32_t owner;        /* owner slot */
    uint32_t pos;          /* position in the owner's array; free-list link
                              while unused */
    uint32_t bprev, bnext; /* the block's xref chain (xref indices) */
} kvp__xref;

typedef struct kvp__owner {
    /* what a take reads and writes, in the first 32 bytes */
    kvp_owner id;     /* KVP_ANON while the slot is unused */
    uint32_t *refs;   /* reference nodes, oldest first; NONE = removed */
    uint32_t len;     /* entries used in refs, tombstones included */
    uint32_t cap;     /* capacity of refs (kept when the slot is reused) */
    unsigned dead : 31; /* tombstones in refs[0, len): live entries are len -
                           dead (kvp__owner_live), so an append writes len
                           alone */
    unsigned registered : 1;
    uint32_t pend;    /* NONE: the slot is not on the dirty chain; else it is
                         (once), and refs[pend, len) are pending references
                         (defer.c), 0 while the slot is unused */
    uint32_t link;    /* in use: next slot in its index bucket, as slot + 1
                         (0 ends the chain); unused: next free slot */
    uint32_t dnext;   /* next slot on the dirty chain, as slot + 1 (0 ends it) */
} kvp__owner;
/* Live entries (references) in an owner's array. */
static inline uint32_t kvp__owner_live(const kvp__owner *o)
{
    return o->len - o->dead;
}
_Static_assert(sizeof(kvp__owner) == 40, "owner records: 32 bytes for the take, 8 for chains");
/* Owner frees and general-path takes (p->run) since the last call that
 * settled, before a take defers its record (defer.c). */
#define KVP__DEFER_AFTER 8u
/* Owner index buckets per owner slot: load factor at most 1/2, so a take's
 * lookup of a new owner (a miss) and a free's of an old one walk about
 * half a link instead of one. */
#define KVP__OWNER_BUCKETS 2u
#define KVP__OWNER_MAX_REFS (1u << 30) /* largest array (dead counts up to 2^31 - 1) */
#define KVP__LINE 64

/* Map from 64-bit ids to 32-bit values (map.c). */
typedef struct kvp__map_entry {
    uint64_t key;
    uint32_t val; /* NONE = empty */
} kvp__map_entry;
typedef struct kvp__map {
    kvp__map_entry *e;
    uint32_t mask, count;
} kvp__map;

/* Ordered set of ids: a 64-ary tree of bitmaps (idset.c). */
#define KVP__IDSET_MAXLV 6
typedef struct kvp__idset {
    uint64_t *lv[KVP__IDSET_MAXLV]; /* lv[0] = one bit per id */
    uint32_t words[KVP__IDSET_MAXLV];
    int levels;
    uint32_t cap; /* ids [0, cap) */
    size_t bytes; /* of the single allocation behind lv[] */
} kvp__idset;

typedef struct kvp__stream {
    uint32_t qhead, qtail;   /* LIFO: vacant stack (head = top); FIFO: queue of
                                all free blocks (head = oldest); LOWEST: unused */
    /* cached blocks, in eviction order (policy.c): one list per retention
     * priority and segment, head evicted first; bit i of lmask is set
     * while list i is not empty; nseg[i]: list i's length (segment 0's
     * lists: 0, not kept) */
    uint32_t lhead[KVP__LISTS], ltail[KVP__LISTS];
    uint32_t lmask;
    uint32_t nseg[KVP__LISTS];
    uint32_t fresh_lo, fresh_hi; /* never-touched ids of the initial pool */
    uint32_t fresh_mark;     /* LIFO: first never-used block in the q list
                                (they form its tail, in id order), or NONE */
    uint32_t nvacant;        /* vacant blocks, fresh ones included */
    uint32_t ncached;
    uint32_t nblocks;        /* managed blocks of this stream */
    uint32_t *stk;           /* LIFO: the top of the vacant stack, nstk ids,
                                top last, above the q list (see "The LIFO
                                stack's array" in freelist.c); NULL in
                                other orders */
    uint32_t nstk, stkcap;
    uint32_t untallied;      /* blocks the take's fast path handed out since
                                the last call, not yet in nvacant or the
                                pool's counters (defer.c); fewer than the
                                stream's blocks, as a free tallies */
    kvp__idset vacant;       /* vacant ids, fresh ones excluded */
    kvp__idset cached;
} kvp__stream;
/* 3 x 128 bytes: &p->st[s] is then two cheap instructions (a three-way add
 * and a shift) on the take's paths; other sizes cost a third. */
_Static_assert(sizeof(kvp__stream) == 384, "stream records stay 384 bytes (take's addressing)");

/* One free call's LIFO insertion state, per stream: where the next block
 * goes in the stack's array (NONE: the call has freed none on the stream
 * yet; KVP__LISTED: its blocks go to the q list, each after at[s], NONE
 * meaning at the head).  Blocks freed together are reused in the order
 * given, so the array is filled downwards from room reserved for `max`
 * blocks, at most as many as the call can free per stream, and
 * kvp__free_end closes the gap the ones not freed left.  kvp__cursor_start(max)
 * starts a call. */
typedef struct kvp__cursor {
    uint32_t at[KVP__STREAMS_MAX];
    uint32_t w[KVP__STREAMS_MAX];
    uint32_t max;
} kvp__cursor;
/* A cursor for a call that frees at most `max` blocks per stream. */
static inline kvp__cursor kvp__cursor_start(size_t max)
{
    kvp__cursor cur;
    for (unsigned s = 0; s < KVP__STREAMS_MAX; s++)
        cur.at[s] = cur.w[s] = KVP__NONE;
    cur.max = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
    return cur;
}

/* One stream's host arena (storage.c): block_bytes x capacity bytes, and
 * the one a growth has mapped but not yet committed (kvp__storage_reserve). */
typedef struct kvp__arena {
    uint8_t *base;
    size_t bytes;
    uint8_t *next;
} kvp__arena;

/* Rate counters (reset by kvp_stats_reset). */
typedef struct kvp__counters {
    uint64_t alloc_calls, blocks_allocated, free_calls, blocks_freed, reused,
        exhausted, grown, extended, retired, relocated, evictions, prefix_queries, prefix_hits,
        admitted_tokens, cow_copies, events_dropped;
} kvp__counters;

struct kvp_pool {
    kvp_config cfg;
    kvp_allocator mem;
    int nstreams;
    bool ts;
    bool ordered; /* the streams' vacant and cached id sets are kept (kvp__order) */
    bool hooked; /* any of: ts, an event queue, per-call history, a callback
                    (on_evict, copy); without them enter and leave are a test */
    kvp__stream *fast[KVP_STREAM_V + 1]; /* per public stream value, the stream the take's
                             fast path may serve, or NULL: a refused value,
                             or a pool hooked or ordered (kvp__fast_reset) */
    pthread_mutex_t lock;

    /* blocks */
    uint32_t top;       /* ids [0, top) exist; top-1 is never retired */
    uint32_t hwm;       /* highest top so far: ids in [top, hwm) are retired */
    uint32_t cap;       /* capacity of the arrays below */
    kvp__block *blocks;
    kvp_hash *hashes;
    kvp__idset retired; /* retired ids below top */
    uint32_t nretired;

    /* index: chained through kvp__block.hnext, bucket count the power of two
     * in [1.5 cap, 3 cap) (kvp__bucket_count): load factor at most 2/3 */
    uint32_t *buckets;  /* chain heads, as links (id + 1; 0 = empty), so a
                           zeroed array is an empty index and costs no
                           page faults at creation */
    uint32_t bmask;
    uint32_t nindexed;

    /* verified hits (cfg.verify_hits): per block, the tokens and the parent
     * (id and content generation) recorded at publish, and the block's own
     * content generation, bumped whenever its indexed content goes away */
    uint32_t *vtok;   /* cap x block_size */
    uint32_t *vparent, *vpgen, *gen;

    /* ghost list (policy_slru.c, KVP_POLICY_SLRU): the keys of the last `cap`
     * hashes evicted, in a ring (key, link), next to write at `next`, `used`
     * slots filled; buckets of chains through the ring (slot + 1, 0 ends) */
    struct {
        uint64_t *key;
        uint32_t *link, *bucket;
        uint32_t cap, bmask, next, used;
    } ghost;

    /* sequences (sequence.c) register here; the pool only calls the hooks */
    void *seqs;
    void (*seq_relocate)(kvp_pool *p, uint32_t from, uint32_t to);
    void (*seq_clear)(kvp_pool *p);

    /* events (events.c); NULL when off */
    kvp__evq *evq;

    /* backing storage (storage.c): nstreams arenas, NULL without host_arena */
    kvp__arena *arenas;

    /* owners: slots, the owner index chained through them, and the xref slab */
    kvp__owner *owners; /* ocap slots, line-aligned inside omem */
    void *omem;
    uint32_t *obuckets; /* owner index: ocap chain heads (slot + 1; 0 = empty) */
    uint32_t obmask;
    uint32_t ocap, nowners, ofree;
    kvp__xref *xrefs;
    uint32_t xcap, xfree, nxfree;

    /* gauges kept exactly, so reading them is O(1) */
    uint64_t in_use, shared, fragmented, peak, fill_sum;
    kvp__counters ctr;
    uint32_t dirty;     /* first slot of the dirty chain (slot + 1; 0: none):
                           the owners that may hold pending references */
    uint64_t run;       /* owner frees and general-path takes since the last
                           call that settled (defer.c; 64 bits, so that it
                           never wraps) */

    /* history ring */
    kvp_stats *hist;
    uint32_t hist_head, hist_count;

    kvp__policy pol; /* the eviction policy's row (policy.c) */

    kvp__stream st[]; /* nstreams streams (kvp__pool_bytes) */
};

/* The streams a configuration gives a pool: K and V apart, or one shared. */
static inline int kvp__nstreams(const kvp_config *c)
{
    return c->separate_kv ? 2 : 1;
}

/* Bytes of a pool record with n streams. */
static inline size_t kvp__pool_bytes(int n)
{
    return sizeof(kvp_pool) + (size_t)n * sizeof(kvp__stream);
}

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
    for (int s = 0; s < p->nstreams; s++)
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
    p->fragmented += (uint64_t)(int64_t)(sign * (int)kvp__is_frag(p, blk));
    p->fill_sum += (uint64_t)(int64_t)(sign * (int)blk->fill);
}

/* Count n blocks handed out: allocated, in use, and the peak. */
static inline void kvp__count_out(kvp_pool *p, uint64_t n)
{
    p->ctr.blocks_allocated += n;
    p->in_use += n;
    if (p->in_use > p->peak)
        p->peak = p->in_use;
}

/* The block a reference node names, and the node's position in its
 * owner's array: the block itself for the inline owner, else its xref. */
static inline uint32_t kvp__node_block(const kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? p->xrefs[node & ~KVP__XREF].block : node;
}

static inline uint32_t kvp__node_pos(const kvp_pool *p, uint32_t node)
{
    return node & KVP__XREF ? p->xrefs[node & ~KVP__XREF].pos : p->blocks[node].opos;
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

/* Hash of a caller's 64-bit id (owner, request) for a power-of-two table:
 * the top half folded into the bottom, so sequential ids spread. */
static inline uint32_t kvp__id_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

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

/* ---- names (status.c) ---- */
/* The value whose name_of(value) is `name`, trying 0, 1, ... up to the
 * first NULL: KVP_EINVAL for a NULL name, KVP_ENOTFOUND for none. */
kvp_status kvp__name_parse(const char *name, const char *(*name_of)(int), int *out);
/* Define kvpool.h's `kvp_status fn(const char *name, type *out)`: the value
 * of `type` that name_of names, as kvp__name_parse finds it; *out is set
 * only on success, KVP_EINVAL for a NULL out. */
#define KVP__DEFINE_PARSE(fn, type, name_of)                                               \
    kvp_status fn(const char *name, type *out)                                             \
    {                                                                                      \
        int v;                                                                             \
        kvp_status rc = out ? kvp__name_parse(name, name_of, &v) : KVP_EINVAL;             \
        if (!rc)                                                                           \
            *out = (type)v;                                                                \
        return rc;                                                                         \
    }

/* ---- memory (mem.c) ---- */
extern const kvp_allocator kvp__std_allocator;
void *kvp__alloc(kvp_pool *p, size_t size);
void *kvp__zalloc(kvp_pool *p, size_t size);
void kvp__release(kvp_pool *p, void *ptr, size_t size);

/* ---- entering and leaving the API (guard.c) ---- */
kvp_status kvp__enter(kvp_pool *p);
kvp_status kvp__enter_lazy(kvp_pool *p);
kvp_status kvp__enter_stream(kvp_pool *p, int stream, int *s);
void kvp__leave(kvp_pool *p, bool changed);
#if KVP_DEBUG >= 3
void kvp__self_check(kvp_pool *p, bool changed);
#else
static inline void kvp__self_check(kvp_pool *p, bool changed)
{
    (void)p;
    (void)changed;
}
#endif

/* ---- the take's deferred bookkeeping (defer.c) ---- */
void kvp__defer_count(kvp__stream *st, uint32_t n);
void kvp__defer_tally(kvp_pool *p);
void kvp__defer_settle(kvp_pool *p);
void kvp__defer_settle_owner(kvp_pool *p, uint32_t slot);
bool kvp__defer_ready(const kvp_pool *p);
void kvp__defer_tick(kvp_pool *p);
void kvp__defer_mark(kvp_pool *p, kvp__owner *o, uint32_t slot);
void kvp__defer_slot_init(kvp__owner *o);
void kvp__defer_appended(kvp__owner *o);
void kvp__defer_slot_freed(kvp__owner *o);
uint32_t kvp__defer_free_owner(kvp_pool *p, kvp__owner *o, kvp__cursor *cur);
uint32_t kvp__defer_pending_from(const kvp__owner *o);
kvp_status kvp__defer_check(kvp_pool *p, char *msg, size_t cap);
void kvp__defer_uncheck(kvp_pool *p);

/* ---- eviction order (policy.c, and a file per policy) ---- */
kvp_status kvp__policy_config_valid(const kvp_config *c);
kvp_status kvp__policy_refuse_fifo(const kvp_config *c);
kvp_status kvp__policy_create(kvp_pool *p);
void kvp__policy_destroy(kvp_pool *p);
void kvp__policy_forget(kvp_pool *p);
kvp_status kvp__policy_check(const kvp_pool *p, char *msg, size_t cap);
void kvp__policy_insert(kvp_pool *p, uint32_t b);
void kvp__policy_remove(kvp_pool *p, uint32_t b);
void kvp__policy_evicted(kvp_pool *p, uint32_t b);
void kvp__policy_published(kvp_pool *p, uint32_t b);
void kvp__policy_reset(kvp__stream *st);
void kvp__set_priority(kvp_pool *p, uint32_t b, unsigned prio);
unsigned kvp__list_of(const kvp__block *blk);
void kvp__list_unlink(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b);
void kvp__list_append(kvp_pool *p, kvp__stream *st, unsigned l, uint32_t b);
void kvp__seg_append(kvp_pool *p, uint32_t b, unsigned seg);
uint32_t kvp__seg_demote(kvp_pool *p, kvp__stream *st, unsigned k, unsigned seg);
/* The cached block of stream st evicted next, or NONE. */
static inline uint32_t kvp__policy_victim(const kvp__stream *st)
{
    return st->lmask ? st->lhead[__builtin_ctz(st->lmask)] : KVP__NONE;
}
/* Block record blk's segment (cached) within its priority's lists. */
static inline unsigned kvp__segment(const kvp__block *blk)
{
    return (blk->retain & KVP__R_SEG) >> KVP__R_SEG_SHIFT;
}
/* Block record blk's retention priority. */
static inline unsigned kvp__priority(const kvp__block *blk)
{
    return (blk->retain & KVP__R_PRIO) ^ KVP_PRIORITY_NORMAL;
}
/* Block b was claimed for the content it holds (policy.c's frequency bit). */
static inline void kvp__policy_hit(kvp__block *blk)
{
    blk->retain |= KVP__R_HIT;
}

/* ---- free structures (freelist.c) ---- */
uint32_t kvp__pick(kvp_pool *p, int s);
void kvp__free_remove(kvp_pool *p, uint32_t b);
void kvp__free_insert(kvp_pool *p, uint32_t b, kvp__cursor *cur);
void kvp__free_listed(kvp_pool *p, int s, kvp__cursor *cur);
void kvp__free_end(kvp_pool *p, kvp__cursor *cur);
void kvp__free_stacked(kvp_pool *p, const uint32_t *refs, uint32_t n, kvp__cursor *cur);
void kvp__fast_reset(kvp_pool *p);
kvp_status kvp__stk_reserve(kvp_pool *p, int s, uint32_t blocks);
void kvp__cached_to_vacant(kvp_pool *p, uint32_t b);

/* ---- block state transitions (block.c) ---- */
void kvp__hand_out_vacant(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s);
void kvp__hand_out_counted(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s);
void kvp__hand_out(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format);
void kvp__claim_block(kvp_pool *p, uint32_t b, uint32_t oslot);
void kvp__release_block(kvp_pool *p, uint32_t b, kvp__cursor *cur);

/* ---- handing blocks out (take.c) ---- */
kvp_status kvp__room_for(kvp_pool *p, int s, uint32_t avail, uint64_t need);
uint32_t kvp__take_block(kvp_pool *p, int s, uint32_t oslot, unsigned format);

/* ---- owners and references (owner.c) ---- */
uint32_t kvp__owner_find(const kvp_pool *p, kvp_owner id);
kvp_status kvp__owner_reserve(kvp_pool *p);
uint32_t kvp__owner_add(kvp_pool *p, kvp_owner id);
void kvp__owner_remove(kvp_pool *p, uint32_t slot);
uint32_t *kvp__owner_link(const kvp_pool *p, kvp_owner id);
void kvp__owner_unlink(kvp_pool *p, uint32_t *link, uint32_t slot);
void kvp__node_drop(kvp_pool *p, uint32_t node, bool whole);
kvp_status kvp__xref_reserve(kvp_pool *p, uint32_t n);
void kvp__ref_first(kvp_pool *p, uint32_t b, uint32_t oslot);
void kvp__ref_add(kvp_pool *p, uint32_t b, uint32_t oslot);
void kvp__ref_drop(kvp_pool *p, uint32_t b, uint32_t oslot);
kvp_status kvp__refs_grow(kvp_pool *p, uint32_t oslot, uint32_t n);

/* Room in owner slot oslot's array for n more references (the slot may be
 * the free one kvp__owner_add takes next, whose length counts as 0). */
static inline kvp_status kvp__refs_reserve(kvp_pool *p, uint32_t oslot, uint32_t n)
{
    const kvp__owner *o = &p->owners[oslot];
    uint32_t len = o->id == KVP_ANON ? 0 : o->len;
    return (uint64_t)len + n <= o->cap ? KVP_OK : kvp__refs_grow(p, oslot, n);
}
uint32_t kvp__refs_held(const kvp_pool *p, uint32_t b, uint32_t oslot);
void kvp__owner_relocate(kvp_pool *p, uint32_t to);
void kvp__owners_reset(kvp_pool *p);
void kvp__owners_destroy(kvp_pool *p);

/* ---- content index (index.c) ---- */
void kvp__index_insert(kvp_pool *p, uint32_t b, const kvp__pubinfo *info);
void kvp__index_remove(kvp_pool *p, uint32_t b);
void kvp__index_replace(kvp_pool *p, uint32_t from, uint32_t to);
uint32_t kvp__index_find(const kvp_pool *p, int s, const kvp_hash *h);
void kvp__unindex(kvp_pool *p, uint32_t b);
void kvp__forget_all(kvp_pool *p);
kvp_status kvp__index_rebuild(kvp_pool *p, uint32_t nbuckets);

/* ---- hashing (hashing.c) ---- */
kvp_status kvp__hash_config_valid(const kvp_config *c);
kvp_status kvp__extra_valid(const kvp_extra_keys *x);
kvp_status kvp__hash_chain(const kvp_pool *p, const uint32_t *tokens, size_t nblocks,
                           const kvp_extra_keys *x, kvp_hash *hashes, size_t known);

/* ---- verified hits (index.c) ---- */
kvp_status kvp__verify_reserve(kvp_pool *p, uint32_t ncap, uint32_t **vtok, uint32_t **vparent,
                               uint32_t **vpgen, uint32_t **gen);
uint32_t kvp__lookup_verified(const kvp_pool *p, int s, const kvp_hash *h, uint32_t parent,
                              const uint32_t *tokens);
void kvp__publish_verified(kvp_pool *p, uint32_t b, const kvp_hash *h,
                           const kvp__pubinfo *info);

/* ---- events and the callback (events.c) ---- */
extern __attribute__((tls_model("initial-exec"))) _Thread_local const kvp_pool *kvp__cb_pool;
void kvp__notify_evict(kvp_pool *p, const kvp_hash *h, uint32_t b);
kvp_status kvp__events_init(kvp_pool *p);
void kvp__events_free(kvp_pool *p);
void kvp__ev_stored(kvp_pool *p, uint32_t b, const kvp__pubinfo *info);
void kvp__ev_removed(kvp_pool *p, uint32_t b);
void kvp__ev_cleared(kvp_pool *p);
void kvp__ev_close(kvp_pool *p);
void kvp__ev_take(kvp_pool *p, const kvp_event **events, size_t *n, uint64_t *dropped);
/* Were events dropped since the index was last emptied?  Until then, every
 * indexed hash has exactly one announced copy (kvp__check); after a drop,
 * at most one.  False with events off. */
bool kvp__ev_lossy(const kvp_pool *p);

/* ---- storage (storage.c) ---- */
kvp_status kvp__storage_init(kvp_pool *p);
kvp_status kvp__storage_reserve(kvp_pool *p, uint32_t ncap);
void kvp__storage_commit(kvp_pool *p, uint32_t ncap);
void kvp__storage_unreserve(kvp_pool *p, uint32_t ncap);
void kvp__storage_free(kvp_pool *p);
void kvp__storage_copy(kvp_pool *p, int s, uint32_t src, uint32_t dst);

/* ---- growth (resize.c) ---- */
kvp_status kvp__grow(kvp_pool *p, int s, uint32_t n);
uint32_t kvp__pow2_at_least(uint32_t n);
uint32_t kvp__bucket_count(uint32_t cap);

/* ---- id maps (map.c) ---- */
uint32_t kvp__map_get(const kvp__map *m, uint64_t key);
kvp_status kvp__map_reserve(kvp_pool *p, kvp__map *m, uint32_t extra);
void kvp__map_put(kvp__map *m, uint64_t key, uint32_t val);
void kvp__map_del(kvp__map *m, uint64_t key);
void kvp__map_free(kvp_pool *p, kvp__map *m);

/* ---- ordered id sets (idset.c) ---- */
kvp_status kvp__idset_init(kvp_pool *p, kvp__idset *set, uint32_t cap);
kvp_status kvp__idset_resize(kvp_pool *p, kvp__idset *set, uint32_t cap);
void kvp__idset_free(kvp_pool *p, kvp__idset *set);
void kvp__idset_clear(kvp__idset *set);
void kvp__idset_add_up(kvp__idset *set, uint32_t id);
void kvp__idset_del_up(kvp__idset *set, uint32_t id);

/* Add/delete touch one word unless it turns non-empty/empty (hot paths). */
static inline void kvp__idset_add(kvp__idset *set, uint32_t id)
{
    kvp__assert(id < set->cap);
    uint64_t *w = &set->lv[0][id / 64];
    uint64_t was = *w;
    *w = was | 1ull << (id % 64);
    if (!was)
        kvp__idset_add_up(set, id);
}

static inline void kvp__idset_del(kvp__idset *set, uint32_t id)
{
    kvp__assert(id < set->cap);
    uint64_t *w = &set->lv[0][id / 64];
    *w &= ~(1ull << (id % 64));
    if (!*w)
        kvp__idset_del_up(set, id);
}

/* The streams' vacant and cached id sets ("free sets") answer the lowest and
 * highest free id, which only LOWEST reuse and kvp_shrink ask.  Until one of
 * them does they stay empty: a take and its free each skip a bitmap update
 * (about a tenth of a churn take+free).  kvp__order starts keeping them. */
static inline void kvp__fset_add(const kvp_pool *p, kvp__idset *set, uint32_t id)
{
    if (p->ordered)
        kvp__idset_add(set, id);
}

static inline void kvp__fset_del(const kvp_pool *p, kvp__idset *set, uint32_t id)
{
    if (p->ordered)
        kvp__idset_del(set, id);
}
void kvp__order(kvp_pool *p); /* freelist.c */
bool kvp__idset_has(const kvp__idset *set, uint32_t id);
uint32_t kvp__idset_min(const kvp__idset *set);
uint32_t kvp__idset_max(const kvp__idset *set);
uint32_t kvp__idset_next(const kvp__idset *set, uint32_t from);

/* ---- the stats snapshot and the history ring (history.c) ---- */
void kvp__stats_fill(const kvp_pool *p, kvp_stats *out);
void kvp__history_push(kvp_pool *p);

/* ---- checking (check.c) ---- */
kvp_status kvp__check(kvp_pool *p, char *msg, size_t cap);
uint64_t kvp__fingerprint(const kvp_pool *p);

#endif /* KVP_INTERNAL_H */
