/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.h — a deliberately naive reference model of a kvpool pool.
 *
 * What it covers: the block lifecycle of kvpool.h — block states, reuse
 * orders (LIFO, LOWEST, FIFO), one shared or separate K/V free lists, the null block, growth with a cap, owners and
 * anonymous references, the content index (alphabet of small integer
 * "content ids" instead of 32-byte hashes), eviction callbacks, extend,
 * shrink, retire_top, pool_clear, the counters, and sequences at the level
 * of blocks held / reference counts / cached_tokens; and what a router that
 * replays the KV events knows (msub, mdl_events_diff).
 *
 * Why built this way: plain arrays and linear scans, written from the header
 * and not from src/, so it shares no code (and no bugs) with the library.
 * Every mdl_* operation returns the status kvpool must return and changes
 * the model only on success.  Drivers (tests/test_model.c, fuzz/fuzz_pool.c)
 * map content ids to real kvp_hash values themselves.  Where the header
 * leaves a choice open the model follows the implementation's documented
 * choice and says so in a comment.
 *
 * Moved out of tests/test_model.c unchanged (names prefixed mdl_); the
 * sequence part (mdl_seq_*) is new and used by the fuzzer.  No cmocka: the
 * fuzzer links this file directly.
 */
#ifndef KVP_MODEL_H
#define KVP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"

#define MB 320          /* model block ids (every config stays below) */
#define NOWN 8          /* named owners */
#define OREFS 2048      /* references one owner may hold in the model */
#define MAXEV 1024      /* eviction callbacks recorded per step */
#define MSEQ 8          /* live sequences */
#define MSEQB 128       /* blocks one sequence may hold */

#define M_NONE 9 /* id never created */
#define M_GONE 10 /* id above the initial pool after kvp_pool_clear */

typedef struct ilist {
    uint32_t n;
    kvp_block v[MB];
} ilist;

/* Holder index of references held by sequences (see holder_add). */
#define MDL_SEQ (-2)

typedef struct mblk {
    int state;        /* KVP_BLOCK_*, M_NONE or M_GONE */
    int list;         /* free-list index: 0, or 0 = K / 1 = V */
    unsigned format;
    int format_known;
    uint32_t fill;
    uint32_t anon;
    int nh;           /* holders in order of first acquisition */
    int h_own[NOWN];
    uint32_t h_cnt[NOWN];
    int h_multi[NOWN]; /* has held two or more at once since it became a holder */
    int hash;         /* alphabet index, -1 = not published */
    uint64_t seq;     /* publish sequence number of its index entry */
    int ever;
    int reborn;       /* id was retired and added again */
    int is_null;
    uint32_t seqref;  /* references held by model sequences (apart from anon) */
    unsigned prio;    /* retention priority (KVP_PRIORITY_NORMAL while vacant) */
    int hit;          /* claimed since published, or a ghost hit (SLRU) */
    int prot;         /* cached: its segment, evicted lowest first: SLRU's
                         protected one (1), LFU's frequency class */
    int freq;         /* LFU: frequency class (0..2), kept while in use */
    uint64_t stamp;   /* cached: when it joined its eviction group */
} mblk;

typedef struct mown {
    int active, registered;
    uint32_t n;
    kvp_block refs[OREFS]; /* in the order taken */
} mown;

typedef struct mcfg {
    const char *name;
    kvp_reuse reuse;
    int sep, nullb, grow, prefix;
    uint32_t bs, nblocks, maxb; /* maxb 0: unlimited */
    uint64_t seed;
    size_t steps;
    int unhooked; /* no eviction callback: with nothing else hooked, the
                     library's take runs its fast path (pool.c, take) */
    int decode;   /* test_model: no shrink or retire_top (the first keeps the
                     free sets, which turns that fast path off for good) and
                     more quiet runs, for the takes that defer */
    int events;   /* KV events on (the model ignores them; the tests check
                     what a subscriber sees against the index) */
    kvp_policy policy;
    uint32_t protected_percent; /* SLRU, LFU */
} mcfg;

typedef struct mctr {
    uint64_t peak, alloc_calls, blocks_allocated, free_calls, blocks_freed,
        reused, exhausted, grown, extended, retired, relocated, evictions;
    uint64_t prefix_queries, prefix_hits, cow_copies; /* sequences only */
} mctr;

/* A sequence at the level the pool sees it: the blocks it holds (one
 * anonymous reference per appearance), its token count and the content ids
 * of its full blocks. */
typedef struct mseq {
    int live;
    uint64_t id;
    int extra;          /* the driver's tag for its extra keys (fork copies) */
    size_t ntokens;
    uint32_t nblocks, nhashes;
    kvp_block blocks[MSEQB];
    int hashes[MSEQB];  /* content ids of the full blocks */
} mseq;

typedef struct model {
    mcfg c;
    int nl;           /* free lists: 1 shared, 2 separate */
    uint32_t top;     /* ids [0, top) have been created */
    mblk b[MB];
    mown o[NOWN];
    ilist stk[2];     /* LIFO: freed vacant stack (front = next); LOWEST:
                         vacant sorted by id */
    ilist fresh[2];   /* LIFO: never-used vacant, ascending */
    ilist cac[2];     /* LIFO/LOWEST: cached, least recently freed first */
    ilist fq[2];      /* FIFO: every free block, next first */
    uint64_t clock;   /* eviction-order stamps */
    /* SLRU's ghost list: the last `cap` evictions, oldest first, each
     * (list, content id), alive until that content is published again */
    uint32_t ghost_n;
    struct { int list, hash, alive; } ghost[MB * 4];
    uint64_t seq;
    mctr k;
    int nev;
    int ev_hash[MAXEV];
    kvp_block ev_block[MAXEV];
    mseq sq[MSEQ];    /* sequences; slot order is the driver's business */
} model;

/* KVP_MODEL_MIMIC=1 (test_model): follow the implementation's known
 * deviations from the header so a run can go past them to find others.
 * Off by default: the test fails on them. */
extern int mdl_mimic;

/* Queries and operations.  oi: owner index 0..NOWN-1, -1 = KVP_ANON;
 * L: free-list index; h: content id (>= 0). */
uint32_t mdl_refcnt(const mblk *k);
uint32_t mdl_held(const mblk *k, int oi);
int mdl_is_free(const mblk *k);
int mdl_is_managed(const mblk *k);
int mdl_list(const model *m, int stream);
kvp_stream mdl_list_stream(const model *m, int L);
uint32_t mdl_managed(const model *m);
uint32_t mdl_n_state(const model *m, int L, int state);
uint32_t mdl_n_free(const model *m, int L);
void mdl_init(model *m, const mcfg *c);
kvp_stats mdl_gauges(const model *m);
/* Move the model's peak up to the blocks in use now (the library keeps it
 * at every change; the model only when told). */
void mdl_note_peak(model *m);
int mdl_stats_diff(model *m, const kvp_stats *got,
                   void (*bad)(void *user, const char *field, uint64_t exp, uint64_t got),
                   void *user);
int mdl_bad_id(const model *m, kvp_block id);
kvp_status mdl_alloc(model *m, int stream, uint64_t tokens, int oi, unsigned fmt,
                          size_t cap, int take, kvp_block *ids, size_t *n_out);
/* kvp_take_each: one take (mdl_alloc of one block) for each owner ois[k]
 * in order, stopping at the first that fails; *n_taken the takes done. */
kvp_status mdl_take_each(model *m, int stream, const int *ois, size_t n, kvp_block *ids,
                         size_t *n_taken);
kvp_status mdl_take_id(model *m, kvp_block id, int oi);
kvp_status mdl_free(model *m, const kvp_block *ids, size_t n, int oi);
kvp_status mdl_free_owner(model *m, int oi, size_t *n_freed);
kvp_status mdl_register(model *m, int oi);
kvp_status mdl_release(model *m, int oi);
kvp_status mdl_set_fill(model *m, kvp_block id, uint32_t fill);
kvp_status mdl_claim(model *m, kvp_block id, int oi);
kvp_status mdl_set_priority(model *m, kvp_block id, unsigned prio);
kvp_status mdl_seq_raise_priority(model *m, int slot, size_t n, unsigned prio);
/* The cached block of list L evicted next, or KVP_NO_BLOCK. */
kvp_block mdl_victim(const model *m, int L);
kvp_status mdl_publish(model *m, kvp_block id, int h);
kvp_status mdl_lookup(const model *m, int stream, int h, kvp_block *out);
/* kvp_claim_prefix: mdl_lookup + mdl_claim of each hs[k] in order up to the
 * first miss or failed claim; *n_hit the claims done, their blocks in ids. */
kvp_status mdl_claim_prefix(model *m, int stream, const int *hs, size_t n, int oi,
                            kvp_block *ids, size_t *n_hit);
/* kvp_publish_each: mdl_publish of (ids[k], hs[k]) in order up to the
 * first that fails; *n_done the publishes done. */
kvp_status mdl_publish_each(model *m, const kvp_block *ids, const int *hs, size_t n,
                            size_t *n_done);
kvp_status mdl_unpublish(model *m, kvp_block id);
kvp_status mdl_evict(model *m, int stream, uint32_t n, uint32_t *n_ev);
kvp_status mdl_ensure(model *m, int stream, uint32_t n);
kvp_status mdl_clear_index(model *m);
kvp_status mdl_reset_prefix(model *m);
kvp_status mdl_extend(model *m, int stream, uint32_t n, uint32_t *added);
kvp_status mdl_shrink(model *m, int stream, uint32_t target, uint32_t *n_ret);
kvp_status mdl_retire_top(model *m, kvp_block *ret, kvp_block *moved);
kvp_status mdl_pool_clear(model *m);

/* Sequences.  slot: index into m->sq.  h[] gives the content ids of the
 * full blocks the call may publish (admit: blocks 0..n/bs-1; append: blocks
 * ntokens/bs .. (ntokens+n)/bs-1, first one at h[0]).  The driver keeps
 * appends within MSEQB blocks. */
kvp_status mdl_seq_create(model *m, uint64_t id, int extra, int *slot);
kvp_status mdl_seq_admit(model *m, int slot, size_t n, const int *h, size_t *cached);
kvp_status mdl_seq_append(model *m, int slot, size_t n, const int *h);
kvp_status mdl_seq_truncate(model *m, int slot, size_t n);
kvp_status mdl_seq_fork(model *m, int parent, uint64_t child_id, int *slot);
kvp_status mdl_seq_destroy(model *m, int slot);
int mdl_seq_find(const model *m, uint64_t id);

/* KV events as a router sees them (kvpool.h "Events"): announcements per
 * external hash (distinct hashes may share one: content 7 shares content
 * 0's last 8 bytes on purpose).  Zero-initialised = nothing known. */
#define MSUB (2 * MB)
typedef struct msub {
    uint64_t ext[MSUB];
    int cnt[MSUB];
    int n;
} msub;

/* Take pool p's queued events and apply them to v as a router would
 * (STORED adds its hashes, REMOVED removes announced ones, ALL_CLEARED
 * empties; a STORED naming a parent v does not hold is rejected), then compare v with the model's index: each external hash
 * announced once per distinct content id indexed in any list (events are
 * per hash, not per list).  Nothing may have been dropped.  content[c] is
 * content id c's hash.  Returns 0, or -1 with the first difference in msg
 * (cap bytes). */
int mdl_events_diff(const model *m, msub *v, kvp_pool *p, const kvp_hash *content, char *msg,
                    size_t cap);

#endif /* KVP_MODEL_H */
