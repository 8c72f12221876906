/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvp_types.h — the pool's plain data structures, grouped by the file that
 * owns them.
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
 * Besides types, this header holds only the assertion and attribute macros,
 * the record bits, the pool record's size and its stream count.  Every function, inline ones
 * included, is declared in the header of the file that owns it (record.h
 * and index_walk.h are inline only, with no .c file), and a file includes
 * the headers of what it calls; docs/ARCHITECTURE.md draws which file
 * calls which.
 */
#ifndef KVP_TYPES_H
#define KVP_TYPES_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom, madvise, MAP_ANONYMOUS */
#endif

#include "kvp_checked.h"
#include "kvpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
/* XXH3 inlined: the content index's bucket function runs on every publish
 * and lookup, and a call into the shared library would cost as much as the
 * hash itself. */
#define XXH_INLINE_ALL
#include <xxhash.h>

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
#define KVP__F_COPY 0x80u      /* indexed, not the first copy of its (stream, hash)
                                  (index.c) */

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
    uint32_t hnext;        /* indexed: the next block in its index bucket's
                              chain, as a link (id + 1; 0 ends the chain:
                              see index.c) */
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
_Static_assert(sizeof(kvp__owner) == 40, "owner records: 32 bytes for the take, 8 for chains");
/* Owner frees and general-path takes (p->def.run) since the last call that
 * settled, before a take defers its record (defer.c). */
#define KVP__DEFER_AFTER 8u
/* Owner index buckets per owner slot: load factor at most 1/2, so a take's
 * lookup of a new owner (a miss) and a free's of an old one walk about
 * half a link instead of one. */
#define KVP__OWNER_BUCKETS 2u
#define KVP__OWNER_MAX_REFS (1u << 30) /* largest array (dead counts up to 2^31 - 1) */
#define KVP__LINE 64
/* Keyed hash tables (the content index, SLRU's ghost list): the size of
 * each one's random XXH3 secret, and the longest chain (distinct keys) a
 * table keeps before it draws a fresh secret and rebuilds (index.c). */
#define KVP__SECRET XXH3_SECRET_SIZE_MIN
#define KVP__CHAIN_MAX 16u

/* Map from 64-bit ids to 32-bit values (map.c). */
typedef struct kvp__map_entry {
    uint64_t key;
    uint32_t val; /* NONE = empty */
} kvp__map_entry;
typedef struct kvp__map {
    kvp__map_entry *e;
    uint32_t mask, count;
    uint32_t longest; /* the longest probe of a put since the table was built */
    uint64_t seed;    /* kvp__id_hash's key, drawn when the table is built */
} kvp__map;
/* A put that probes past KVP__PROBE_MAX slots has the next reserve rebuild
 * the map under a fresh seed. */
#define KVP__PROBE_MAX 64u

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

/* One stream's host arena (storage.c): block_bytes x capacity bytes, and
 * the one a growth has mapped but not yet committed (kvp__storage_reserve). */
typedef struct kvp__arena {
    uint8_t *base;
    size_t bytes;
    uint8_t *next;
} kvp__arena;

/* index.c: the content index, chained through kvp__block.hnext and
 * dprev, copies of one (stream, hash) consecutive in publish order; about
 * 1.5 buckets per block (kvp__bucket_count): at most two distinct (stream,
 * hash) per three buckets on average. */
typedef struct kvp__index {
    uint32_t *buckets;  /* chain heads, as links (id + 1; 0 = empty), so a
                           zeroed array is an empty index and costs no
                           page faults at creation */
    uint32_t *dprev;    /* cap entries: a first copy's last copy, any other
                           copy's (KVP__F_COPY) previous one (ids, indexed
                           blocks only) */
    uint32_t nbuckets;
    uint32_t nindexed;
    uint32_t rekey_in;  /* new (stream, hash) entries still to come before a
                           chain over KVP__CHAIN_MAX may re-key the index */
    uint8_t secret[KVP__SECRET]; /* the bucket function's key (random) */
} kvp__index;

/* index.c, verified hits (cfg.verify_hits): per block, the tokens and the
 * parent (id and content generation) recorded at publish, and the block's
 * own content generation, bumped whenever its indexed content goes away. */
typedef struct kvp__verified {
    uint32_t *vtok;   /* cap x block_size */
    uint32_t *vparent, *vpgen, *gen;
} kvp__verified;

/* owner.c: owner slots, the owner index chained through them, and the
 * xref slab. */
typedef struct kvp__owners {
    kvp__owner *slots;  /* cap slots, line-aligned inside mem */
    void *mem;
    uint32_t *buckets;  /* owner index: chain heads (slot + 1; 0 = empty) */
    uint32_t bmask;
    uint64_t seed;      /* kvp__id_hash's key, random; an insertion that makes a
                           chain longer than KVP__CHAIN_MAX draws a new one */
    uint32_t rekey_in;  /* insertions before the index may re-key again */
    uint32_t cap, n, free; /* slots, slots in use, first free slot */
    kvp__xref *xrefs;
    uint32_t xcap, xfree, nxfree;
} kvp__owners;

/* block.c: the gauges, kept exactly so that reading them is O(1). */
typedef struct kvp__gauges {
    uint64_t in_use, shared, fragmented, peak, fill_sum;
} kvp__gauges;

/* defer.c: what the deferred bookkeeping keeps of the pool's. */
typedef struct kvp__defer {
    uint32_t dirty;     /* first slot of the dirty chain (slot + 1; 0: none):
                           the owners that may hold pending references */
    uint64_t run;       /* owner frees and general-path takes since the last
                           call that settled (64 bits, so that it never
                           wraps) */
} kvp__defer;

/* history.c: the history ring of snapshots. */
typedef struct kvp__history {
    kvp_stats *ring;
    uint32_t head, count;
} kvp__history;

/* policy_slru.c, KVP_POLICY_SLRU's ghost list: the keys of the last `cap`
 * hashes evicted, in a ring (key, link), next to write at `next`, `used`
 * slots filled; buckets of chains through the ring (slot + 1, 0 ends);
 * keys made with its own random secret, renewed like the index's. */
typedef struct kvp__ghost {
    uint64_t *key;
    uint32_t *link, *bucket;
    uint32_t cap, bmask, next, used;
    uint32_t rekey_in;
    uint8_t secret[KVP__SECRET];
} kvp__ghost;

/* storage.c: nstreams arenas, NULL without host_arena. */
typedef struct kvp__storage {
    kvp__arena *arenas;
} kvp__storage;

/* sequence.c registers here; the pool only calls the hooks. */
typedef struct kvp__seq_hooks {
    void *reg;
    void (*relocate)(kvp_pool *p, uint32_t from, uint32_t to);
    void (*clear)(kvp_pool *p);
} kvp__seq_hooks;

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

    kvp__index idx;       /* index.c */
    kvp__verified ver;    /* index.c, with cfg.verify_hits */

    kvp__ghost ghost;     /* policy_slru.c */
    kvp__seq_hooks seq;   /* sequence.c */

    /* events (events.c); NULL when off */
    kvp__evq *evq;

    kvp__storage store;   /* storage.c */

    kvp__owners own;      /* owner.c */
    kvp__gauges g;        /* block.c */
    kvp__counters ctr;    /* stats.c */
    kvp__defer def;       /* defer.c */
    kvp__history hist;    /* history.c */

    kvp__policy pol; /* the eviction policy's row (policy.c) */

    kvp__stream st[]; /* nstreams streams (kvp__pool_bytes) */
};

/* The streams a configuration gives a pool: K and V apart, or one shared. */
static inline int kvp__nstreams(const kvp_config *c)
{
    return c->separate_kv ? 2 : 1;
}

/* Pool p's stream count, for loops over its streams: at least one, never
 * more than the public API's stream kinds, which lets the compiler unroll
 * them. */
static inline int kvp__streams(const kvp_pool *p)
{
    int n = p->nstreams;
    if (n < 1 || (unsigned)n > KVP__STREAMS_MAX)
        __builtin_unreachable();
    return n;
}

/* Bytes of a pool record with n streams. */
static inline size_t kvp__pool_bytes(int n)
{
    return sizeof(kvp_pool) + (size_t)n * sizeof(kvp__stream);
}

#endif /* KVP_TYPES_H */
