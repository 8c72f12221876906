/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvpool.h — the one public header of libkvpool.
 *
 * kvpool is the bookkeeping layer for a paged KV cache: which block is free,
 * who holds it, how full it is, what content it holds (so a later request can
 * reuse it), which cached block to evict, how the pool grows and shrinks, and
 * the numbers about all of it.  Block ids index the caller's own storage;
 * kvpool never touches tensors.
 *
 * Conventions (they hold for every call below):
 * - Every call returns a kvp_status; results come back through out-parameters.
 *   KVP_OK is 0.  kvp_strerror() names every code.
 * - A call that fails changes nothing: arguments are checked, and memory is
 *   reserved, before any state is touched.  The only things a failed call may
 *   change are failure counters (kvp_stats.exhausted) and the capacity of
 *   internal tables, neither of which is part of kvp_pool_fingerprint().
 * - Output arrays are caller-owned.  A call that fills one takes its capacity;
 *   when it is too small the call returns KVP_ESPACE and reports the size it
 *   needed, and changes nothing.
 * - Thread rules: a pool created with `thread_safe` takes an internal mutex
 *   around every call, so any thread may call any function.  A pool without
 *   it takes no lock at all; the caller must serialise every call on it.
 * - Callbacks (eviction) run inside the call that caused them, on the calling
 *   thread, with the pool's lock held.  They must not call back into the same
 *   pool: such a call returns KVP_EBUSY and does nothing (detected in both
 *   modes).  Calling into another pool is allowed.
 * - Lifecycle: kvp_pool_create() returns a handle that stays valid until
 *   kvp_pool_destroy().  Using a handle after destroy, or destroying it while
 *   another thread is inside a call on it, is undefined behaviour and cannot
 *   be detected.
 * - Complexity figures use n for the number of ids passed and "O(1)" for
 *   amortized constant time independent of the pool size.  No call listed as
 *   O(1) or O(n) scans the pool or allocates memory after creation, except
 *   where it grows something (pool growth, the owner table, shared-owner
 *   references), and then always geometrically.
 */
#ifndef KVPOOL_H
#define KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVP_API __attribute__((visibility("default")))
#else
#define KVP_API
#endif

#define KVPOOL_VERSION_MAJOR 0
#define KVPOOL_VERSION_MINOR 1
#define KVPOOL_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Every call returns one of these.  The numeric values are stable.
 *
 * KVP_STATUS_MAP(X) lists every code once, in value order, as
 * X(NAME, value, Word, "message"): NAME the enumerator's suffix (KVP_NAME),
 * Word a CamelCase name for bindings (an exception class, say), message what
 * kvp_strerror() returns.  The enum, kvp_status_name() and kvp_strerror()
 * are generated from it; a binding can expand it for its own tables.
 */
#define KVP_STATUS_MAP(X)                                                              \
    /* success */                                                                      \
    X(OK, 0, Ok, "success")                                                            \
    /* an argument is invalid: NULL pointer, zero or overflowing count, unknown       \
     * stream or format, the null block, a bad configuration */                        \
    X(EINVAL, 1, InvalidArgument, "invalid argument")                                  \
    /* not enough free blocks, and growth was not allowed or would pass the cap */     \
    X(EEXHAUSTED, 2, Exhausted, "not enough free blocks")                              \
    /* no such owner, hash, content or name */                                         \
    X(ENOTFOUND, 3, NotFound, "not found")                                             \
    /* the named owner holds no reference on that block (or, for KVP_ANON, the        \
     * block has no anonymous reference left) */                                       \
    X(ENOTOWNER, 4, NotOwner, "the owner holds no such reference")                     \
    /* the block is already free */                                                    \
    X(EDOUBLEFREE, 5, DoubleFree, "block is already free")                             \
    /* explicit registration of an owner still active */                               \
    X(EOWNERACTIVE, 6, OwnerActive, "owner is already active")                         \
    /* the object is in use: reset while blocks are held, a block in use where a      \
     * free one is needed, a re-entrant call from a callback */                        \
    X(EBUSY, 7, Busy, "busy: in use, or called from a callback")                       \
    /* the allocator refused memory */                                                 \
    X(ENOMEM, 8, NoMemory, "out of memory")                                            \
    /* a block id outside the pool or retired */                                       \
    X(ERANGE, 9, Range, "no such block (out of range or retired)")                     \
    /* the caller's output buffer is too small; the size needed was reported */        \
    X(ESPACE, 10, Space, "output buffer too small")                                    \
    /* kvp_pool_check found a broken invariant */                                      \
    X(ECORRUPT, 11, Corrupt, "pool invariant broken")

#define KVP__STATUS_ENUM(name, value, word, msg) KVP_##name = value,
typedef enum kvp_status { KVP_STATUS_MAP(KVP__STATUS_ENUM) } kvp_status;
#undef KVP__STATUS_ENUM

/* The number of codes: they run from 0 to KVP_STATUS_COUNT - 1. */
#define KVP__STATUS_ONE(name, value, word, msg) +1
#define KVP_STATUS_COUNT (0 KVP_STATUS_MAP(KVP__STATUS_ONE))

/* The message for a status code (a static string; never NULL, also for
 * unknown values: "unknown status").  Thread-safe, O(1). */
KVP_API const char *kvp_strerror(int status);

/* The enumerator's name of a status code ("KVP_EINVAL"), a static string, or
 * NULL for a value that is no code.  Thread-safe, O(1). */
KVP_API const char *kvp_status_name(int status);

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct kvp_pool kvp_pool;      /* opaque */

/* A block id: a stable index into the caller's storage. */
typedef uint32_t kvp_block;
#define KVP_NO_BLOCK ((kvp_block)UINT32_MAX)
/* The largest number of block ids a pool can address. */
#define KVP_MAX_BLOCKS ((uint32_t)0x7fffffffu)

/* An owner is a request id.  KVP_ANON stands for "no owner": the reference is
 * anonymous and is dropped by naming KVP_ANON. */
typedef uint64_t kvp_owner;
#define KVP_ANON ((kvp_owner)UINT64_MAX)

/*
 * A block hash: 32 bytes, compared bytewise.  A 128-bit digest sits in the
 * last 16 bytes with the first 16 zero, so the last 8 bytes identify a block
 * under either algorithm.
 */
typedef struct kvp_hash {
    uint8_t b[32];
} kvp_hash;

/*
 * Streams.  With one shared free list (the default) all three values are
 * accepted and mean the same list.  With separate K and V lists every block
 * belongs to KVP_STREAM_K or KVP_STREAM_V and KVP_STREAM_SHARED is refused.
 */
typedef enum kvp_stream {
    KVP_STREAM_SHARED = 0,
    KVP_STREAM_K = 1,
    KVP_STREAM_V = 2
} kvp_stream;

/* Format tags recorded per block.  Values from KVP_FMT_USER up to 255 are the
 * caller's own. */
enum {
    KVP_FMT_FP16 = 0,
    KVP_FMT_BF16 = 1,
    KVP_FMT_FP8 = 2,
    KVP_FMT_INT8 = 3,
    KVP_FMT_INT4 = 4,
    KVP_FMT_INT2 = 5,
    KVP_FMT_USER = 64
};

/*
 * Reuse order of free blocks.  In every order vacant blocks are reused
 * before cached ones (FIFO aside: see below), and cached
 * ones leave in eviction order (kvp_policy).
 * - KVP_REUSE_LIFO: vacant before cached; vacant blocks most recently freed
 *   first; never-used blocks after every freed vacant block, lowest id first.
 *   A cached block that loses its content while free (kvp_evict,
 *   kvp_unpublish, kvp_clear_index, kvp_reset_prefix_cache) joins the vacant
 *   blocks behind those already there, ahead of the never-used ones.
 * - KVP_REUSE_LOWEST: vacant before cached; vacant blocks lowest id first
 *   (keeps the top of the pool free for shrinking).
 * - KVP_REUSE_FIFO: one queue for all free blocks, vacant or cached, in the
 *   order they were freed; never-used blocks first, in id order.  A cached
 *   block that loses its content keeps its place in the queue.
 */
typedef enum kvp_reuse {
    KVP_REUSE_LIFO = 0,
    KVP_REUSE_LOWEST = 1,
    KVP_REUSE_FIFO = 2
} kvp_reuse;

/*
 * Eviction order of cached free blocks: which one loses its content when the
 * pool needs a vacant block (reuse, kvp_evict, kvp_ensure_free, relocation).
 * Retention priorities come first under every policy: every cached block of
 * a lower priority is evicted before any of a higher one (kvp_set_priority);
 * the policy orders blocks of equal priority.  Each is O(1) per block freed,
 * claimed, evicted or given a priority (SLRU: expected, for the ghost list's
 * hash lookups, and amortized, for a shrink's demotions).
 * - KVP_POLICY_LRU: least recently freed first.
 * - KVP_POLICY_SLRU: segmented LRU with a ghost list, which favours content
 *   used more than once.  A cached block is "protected" when it was claimed
 *   (kvp_claim, a sequence's admission) since its content was published, or
 *   when its hash was among the pool's last num_blocks evicted hashes (the
 *   ghost list, which kvp_clear_index, kvp_reset_prefix_cache and
 *   kvp_pool_clear empty) when it was published; otherwise it is
 *   "probationary".
 *   Probationary blocks are evicted before protected ones of the same
 *   priority, each group least recently freed first.  A priority's protected
 *   blocks are at most protected_percent of the stream's blocks: a block
 *   freed into a full protected group moves that group's least recently
 *   freed blocks to the most recently freed end of the probationary group
 *   until it fits.  The ghost list costs 16-20 bytes per block of
 *   num_blocks, allocated at creation.
 *   Refused with KVP_REUSE_FIFO, which reuses free blocks in the order freed.
 * - KVP_POLICY_LFU: least frequently used first, with aging.  A cached
 *   block's frequency class (0, 1 or 2) counts the times its content was
 *   freed after being claimed (kvp_claim, a sequence's admission), up to 2;
 *   it starts at 0 when the content is published.  Lower classes are
 *   evicted first, each least recently freed first.  Aging: classes 1 and 2
 *   of a priority each hold at most protected_percent / 2 of the stream's
 *   blocks; a block freed into a full class moves that class's least
 *   recently freed blocks one class down (1 to 0, 2 to 1) until it fits.
 *   No memory beyond the block records.  Refused with KVP_REUSE_FIFO.
 *
 * Prefix rule.  A block can be hit only together with its whole prefix, so
 * evicting a cached block's parent while keeping the child wastes the child.
 * Every policy evicts a child before its parent when a request's blocks are
 * freed last block first (sequences and kvp_seq_destroy do), claims take a
 * prefix from its first block (kvp_claim_prefix, sequences), and a block's
 * priority is never above its parent's (kvp_seq_raise_priority keeps that).
 */
typedef enum kvp_policy {
    KVP_POLICY_LRU = 0,
    KVP_POLICY_SLRU = 1,
    KVP_POLICY_LFU = 2
} kvp_policy;

/* Retention priorities (kvp_set_priority).  A block's priority belongs to its
 * content: it is KVP_PRIORITY_NORMAL when a block is handed out, and goes
 * back to it when the block becomes vacant or is reused. */
#define KVP_PRIORITY_LOW 0u
#define KVP_PRIORITY_NORMAL 1u
#define KVP_PRIORITY_HIGH 2u
#define KVP_PRIORITY_MAX 3u

/*
 * Eviction callback.  Called once for every hash that leaves the content index
 * (reuse of a cached block, kvp_evict, kvp_take_id, kvp_unpublish, retire or
 * shrink of a cached block, relocation into a cached block) with the evicted
 * hash and the block that held it.  Called once with hash == NULL and block ==
 * KVP_NO_BLOCK when the whole index is cleared (kvp_clear_index,
 * kvp_reset_prefix_cache, kvp_pool_clear).  See the callback rule above.
 */
typedef void (*kvp_evict_fn)(void *user, const kvp_hash *hash, kvp_block block);

/*
 * Memory hook.  Every allocation the library makes goes through it.
 * `alloc` returns `size` bytes aligned for any type, or NULL; `release`
 * returns a block obtained from `alloc` together with its size.  Both may be
 * called from any thread that calls into a pool using them.
 */
typedef struct kvp_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*release)(void *user, void *ptr, size_t size);
    void *user;
} kvp_allocator;

/*
 * Block hash algorithms.  SHA-256 comes from OpenSSL libcrypto, XXH3-128 from
 * libxxhash; KVP_HASH_CUSTOM calls kvp_config.hash_fn.
 */
typedef enum kvp_hash_alg {
    KVP_HASH_SHA256 = 0,
    KVP_HASH_XXH3_128 = 1,
    KVP_HASH_CUSTOM = 2
} kvp_hash_alg;

/*
 * Names of the configuration's enumerations, from the library's own tables,
 * so that command lines, bindings and logs spell them alike:
 *   reuse orders   "lifo", "lowest", "fifo"
 *   policies       "lru", "slru", ...  (one per kvp_policy)
 *   hash algorithms "sha256", "xxh3", "custom"
 * kvp_X_name returns the name of a value (a static string), or NULL for a
 * value that is none; the values run from 0 up to the first NULL, so a
 * caller can list them all.  kvp_X_parse sets *out to the value named
 * (exact, lower-case match).  Errors: KVP_EINVAL (NULL name or out),
 * KVP_ENOTFOUND (no such name); *out is set only on success.
 * Thread-safe; O(1) for names, O(values) for parses.
 */
KVP_API const char *kvp_reuse_name(int reuse);
KVP_API kvp_status kvp_reuse_parse(const char *name, kvp_reuse *out);
KVP_API const char *kvp_policy_name(int policy);
KVP_API kvp_status kvp_policy_parse(const char *name, kvp_policy *out);
KVP_API const char *kvp_hash_alg_name(int alg);
KVP_API kvp_status kvp_hash_alg_parse(const char *name, kvp_hash_alg *out);

/* A multimodal input: its content hash and the prompt tokens [start, end)
 * it covers (absolute positions). */
typedef struct kvp_mm_span {
    kvp_hash hash;
    uint64_t start, end;
} kvp_mm_span;

/*
 * Extra keys mixed into block hashes besides the tokens.  All optional; a
 * NULL kvp_extra_keys pointer means none.  The caller owns the arrays; calls
 * that keep extra keys (kvp_seq_create) copy them.
 */
typedef struct kvp_extra_keys {
    int has_lora;             /* lora_id counts */
    uint64_t lora_id;         /* LoRA adapter id */
    const char *lora_name;    /* for events; not hashed; may be NULL */
    const kvp_mm_span *mm;    /* multimodal spans, n_mm of them */
    size_t n_mm;
    const uint8_t *salt;      /* cache salt (tenant isolation), salt_len bytes;
                                 hashed into the first block only */
    size_t salt_len;
} kvp_extra_keys;

/*
 * Caller-supplied block hash (KVP_HASH_CUSTOM): hash the block whose tokens
 * are tokens[0..n) and which starts at absolute token position `start`, with
 * parent hash `parent` (the pool's root seed for the first block), into *out.
 * Must be pure and thread-safe; it runs without the pool lock.
 */
typedef kvp_status (*kvp_hash_fn)(void *user, const kvp_hash *parent, const uint32_t *tokens,
                                  size_t n, uint64_t start, const kvp_extra_keys *extra,
                                  kvp_hash *out);

/*
 * Storage copy hook: copy the contents of block `src` into block `dst` (both
 * in `stream`, as KVP_STREAM_SHARED/_K/_V).  Called for copy-on-write and for
 * relocation, before the change is visible.  Runs inside the call, under the
 * pool lock; it must not call into the pool.
 */
typedef void (*kvp_copy_fn)(void *user, kvp_stream stream, kvp_block src, kvp_block dst);

/*
 * Pool configuration.  Start from kvp_config_default() and change fields.
 */
typedef struct kvp_config {
    uint32_t block_size;        /* tokens per block, 1..65535 (default 16) */
    uint32_t num_blocks;        /* blocks at creation (default 1024).  With
                                   separate K/V lists, K gets ids
                                   [0, ceil(n/2)) and V the rest. */
    uint32_t max_blocks;        /* growth cap on managed blocks; 0 means
                                   KVP_MAX_BLOCKS (default 0) */
    int separate_kv;            /* separate K and V free lists (default 0) */
    int grow_on_exhaustion;     /* kvp_alloc/kvp_take grow the stream just
                                   enough instead of failing (default 0) */
    int thread_safe;            /* lock around every call (default 0) */
    int null_block;             /* reserve block 0 as the null block: never
                                   handed out, freed or published (default 0) */
    int prefix_caching;         /* keep content on free blocks so it can be
                                   claimed again (default 1).  When 0,
                                   publishing is refused (KVP_EINVAL) and every
                                   free block is vacant. */
    kvp_reuse reuse;            /* reuse order (default KVP_REUSE_LIFO) */
    kvp_policy policy;          /* eviction order of cached blocks (default
                                   KVP_POLICY_LRU) */
    uint32_t protected_percent; /* KVP_POLICY_SLRU: the most a priority's
                                   protected blocks may be, in percent of the
                                   stream's blocks, 0..100 (default 50);
                                   KVP_POLICY_LFU: the most its classes
                                   above 0 may be together */
    uint32_t history_len;       /* stats history ring length (default 64) */
    int history_every_call;     /* snapshot after every changing call
                                   (default 0; costs a copy per call) */
    kvp_evict_fn on_evict;      /* eviction callback or NULL */
    void *evict_user;           /* passed to on_evict */
    const kvp_allocator *allocator; /* NULL: malloc/free.  Copied at create. */
    int prefault;               /* write every bookkeeping table when it is
                                   allocated (creation, growth), so that no
                                   later call takes a page fault on it
                                   (default 0: with the default allocator the
                                   tables of a large pool are fresh mappings,
                                   free until first touched, so creation is
                                   almost free and each block's first use
                                   faults in its share, about 90 bytes; in a
                                   VM a fault can cost tens of microseconds).
                                   The storage arena is not prefaulted. */

    /* Hashing (see "Block hashing" below). */
    kvp_hash_alg hash_alg;      /* default KVP_HASH_SHA256 */
    kvp_hash_fn hash_fn;        /* with KVP_HASH_CUSTOM */
    void *hash_user;            /* passed to hash_fn */
    kvp_hash root_seed;         /* parent of every first block (default all
                                   zero: identical on every machine) */
    int random_root;            /* draw root_seed from getrandom() at
                                   creation instead (default 0) */
    int verify_hits;            /* beyond: keep each published block's tokens
                                   and parent, and confirm both on verified
                                   lookups (default 0).  Costs
                                   4 * block_size + 12 bytes per block. */

    /* Backing storage (optional).  block_bytes[s] is the size of one block of
     * stream s (index 0: shared or K, 1: V).  With host_arena, kvpool
     * allocates an aligned arena (huge pages when the system gives them) and
     * kvp_block_ptr returns addresses in it; otherwise, when copy is set,
     * kvpool calls it to move bytes it cannot touch (device memory).  An
     * arena may grow to block_bytes[s] x the growth cap (max_blocks, or
     * KVP_MAX_BLOCKS when 0), which must fit in size_t: with host_arena,
     * block_bytes[s] is at most SIZE_MAX / that cap. */
    size_t block_bytes[2];
    int host_arena;             /* default 0 */
    kvp_copy_fn copy;           /* default NULL */
    void *copy_user;

    /* KV-cache events (see "Events" below). */
    int events;                 /* record events (default 0: nothing is
                                   recorded and nothing is paid) */
    uint32_t event_capacity;    /* block hashes the queue holds between two
                                   kvp_events_take calls (default 4096; at
                                   most UINT32_MAX - 1).
                                   Reserved at creation for two buffers:
                                   about 2 x capacity x (4 x block_size + 150)
                                   bytes, tokens included */
    const char *medium;         /* storage medium named in events (default
                                   "GPU"); copied at creation */
} kvp_config;

/* Fill *cfg with the defaults listed above.  O(1). */
KVP_API kvp_status kvp_config_default(kvp_config *cfg);

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Create a pool.  *out receives the handle, owned by the caller until
 * kvp_pool_destroy().  Never-used blocks are set up lazily, so creation costs
 * O(num_blocks / 64) plus the allocator's cost for zeroed memory.
 * Errors: KVP_EINVAL (NULL argument; block_size 0 or > 65535; num_blocks >
 * max_blocks or > KVP_MAX_BLOCKS; null_block with num_blocks 0; unknown reuse
 * order or policy (one kvp_policy_name does not name); KVP_POLICY_SLRU or
 * KVP_POLICY_LFU with KVP_REUSE_FIFO; protected_percent
 * above 100; allocator missing a function; with host_arena, a block_bytes[s]
 * above SIZE_MAX / the growth cap; with events, event_capacity UINT32_MAX),
 * KVP_ENOMEM.  *out is set only on success.
 */
KVP_API kvp_status kvp_pool_create(const kvp_config *cfg, kvp_pool **out);

/*
 * Destroy a pool and release all its memory.  NULL is accepted and ignored.
 * No callbacks run.  Not from a callback.  O(owners + size of tables).
 */
KVP_API void kvp_pool_destroy(kvp_pool *pool);

/*
 * Return the pool to its just-created state whatever is in use: the initial
 * number of blocks, all blocks never used, no owners, no sequences, an empty
 * index, zeroed statistics and history.  Fires one "all cleared" eviction
 * callback when the index held anything; with events on, queues an
 * ALL_CLEARED event (after any events not yet taken).  Keeps internal memory.
 * Errors: KVP_EINVAL (NULL), KVP_EBUSY (from a callback).  O(initial blocks +
 * owners + size of the index): it rewrites the initial blocks' records.
 */
KVP_API kvp_status kvp_pool_clear(kvp_pool *pool);

/* ------------------------------------------------------------------------ */
/* Owner-tracked allocation                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Allocate ceil(tokens / block_size) blocks from `stream` to `owner` (or
 * anonymously with KVP_ANON), tag them with `format`, and write their ids in
 * reuse order to ids[0..]; *n_out receives the count.  Each block gets one
 * reference held by `owner`, fill 0.  Vacant blocks go first in the configured
 * order, then cached blocks least recently freed first; taking a cached block
 * evicts its content (callback, counted).  All or nothing: when fewer blocks
 * are free, the stream grows just enough if grow_on_exhaustion allows it
 * within max_blocks (the new blocks join as kvp_extend's do, so in LIFO order
 * they are the first taken); otherwise KVP_EEXHAUSTED (counted in
 * stats.exhausted).
 * An owner not yet active becomes active; one already active grows.
 * Errors: KVP_EINVAL (NULL pool/ids/n_out, tokens 0, unknown stream, format >
 * 255), KVP_ESPACE (ids_cap below the count; *n_out = count), KVP_EEXHAUSTED,
 * KVP_ENOMEM, KVP_EBUSY (from a callback).
 * O(blocks allocated); growth is amortized.
 */
KVP_API kvp_status kvp_alloc(kvp_pool *pool, kvp_stream stream, uint64_t tokens,
                             kvp_owner owner, unsigned format, kvp_block *ids,
                             size_t ids_cap, size_t *n_out);

/*
 * Take one block from `stream` for fresh content, held by `owner` (or
 * KVP_ANON): the same choice and rules as kvp_alloc for one block, with fill
 * 0 and format KVP_FMT_FP16.  Errors as kvp_alloc.  O(1).
 */
KVP_API kvp_status kvp_take(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                            kvp_block *out);

/* The "no hint yet" value of a take's hint (kvp_take_each). */
#define KVP_HINT_NONE UINT32_MAX

/*
 * A decode step's takes in one call: take k gives one block to owners[r],
 * r = rows[k] (rows NULL: r = k), and stores the block in out[k].  The
 * takes run in order, each exactly as a kvp_take for owners[r] would, so a
 * row may appear more than once and the pool ends in the state the n
 * kvp_take calls would leave.  The caller owns every array: owners and
 * hints (when given) must hold every row that rows names, out n entries.
 *
 * Hints: kvp_take finds an owner by a hash lookup on every call; for
 * callers that take block after block for the same owners, hints[r] (hints
 * NULL: none) is a value an earlier take stored for owners[r], or
 * KVP_HINT_NONE, and a hint that still names the owner's place in the pool
 * skips the lookup.  Keep one hint per owner beside the owner id (in the
 * request's own record); start it at KVP_HINT_NONE.  Any value is safe: a
 * hint is checked against the owner before it is used, so a stale one (the
 * owner freed and its place reused, the pool cleared), another owner's, or
 * garbage costs the lookup and is replaced, and never picks the wrong
 * owner.  Each successful take by an owner sets its hint (KVP_ANON's is
 * left as it was).
 *
 * *n_taken receives the takes done (0 when the call is refused): n on
 * KVP_OK.  Else the status is that of the first take that failed
 * (KVP_EEXHAUSTED, KVP_ENOMEM, ...), which changed nothing, its hint
 * included; the *n_taken takes before it stand, their blocks in out.
 * KVP_EINVAL (NULL pool or n_taken, NULL owners or out with n > 0, unknown
 * stream or KVP_STREAM_SHARED with separate lists) is returned before any
 * take.
 * O(n); the call's own checks are made once, not per take.  Thread rules
 * as kvp_take; hints are the caller's memory, written during the call, so
 * concurrent calls must not share them.  A pool with a lock takes it for
 * each take, so other threads' calls may come between them.
 */
KVP_API kvp_status kvp_take_each(kvp_pool *pool, kvp_stream stream, const kvp_owner *owners,
                                 uint32_t *hints, const uint32_t *rows, size_t n,
                                 kvp_block *out, size_t *n_taken);

/*
 * kvp_take with a hint (see kvp_take_each): kvp_take_each of one take.
 * Errors: as kvp_take, and KVP_EINVAL for a NULL hint.  O(1).
 */
static inline kvp_status kvp_take_hinted(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                                         uint32_t *hint, kvp_block *out)
{
    size_t n_taken;
    if (!hint)
        return KVP_EINVAL;
    return kvp_take_each(pool, stream, &owner, hint, NULL, 1, out, &n_taken);
}

/*
 * Take the specific free block `id` (vacant or cached) for fresh content,
 * held by `owner`, with fill 0 and format KVP_FMT_FP16; a cached block's
 * content is evicted (callback, counted).
 * Errors: KVP_EINVAL (NULL pool, the null block), KVP_ERANGE (no such block),
 * KVP_EBUSY (the block is in use, or from a callback), KVP_ENOMEM.  O(1)
 * amortized: in LIFO order the most recently freed blocks of a stream are
 * kept in an array, and taking one from below its top first moves the whole
 * array into the stream's free list (O(blocks there), each moved at most
 * once per free that put it there).
 */
KVP_API kvp_status kvp_take_id(kvp_pool *pool, kvp_block id, kvp_owner owner);

/*
 * Drop one reference on each of ids[0..n), each held by `owner` (KVP_ANON:
 * an anonymous reference).  A block whose last reference goes becomes free:
 * cached if it is published, vacant otherwise.  Blocks freed in one call join
 * the free blocks in the order given: the first given is the first reused
 * (and, when cached, the first evicted).  An id may appear several times if
 * the owner holds that many references on it; each time the owner's oldest
 * remaining reference on that block is dropped.  n == 0 is a no-op.  When the owner (not
 * explicitly registered) drops its last reference, its record goes.
 * All or nothing: every id is checked before any is freed.
 * Errors: KVP_EINVAL (NULL pool, NULL ids with n > 0, the null block),
 * KVP_ERANGE (no such block), KVP_EDOUBLEFREE (a free block, or more
 * references dropped than the block has), KVP_ENOTOWNER (the owner holds no
 * reference on a block, or fewer than the times it is named), KVP_EBUSY.
 * O(n), plus O(owners sharing a block) for a block shared by several owners.
 */
KVP_API kvp_status kvp_free(kvp_pool *pool, const kvp_block *ids, size_t n,
                            kvp_owner owner);

/*
 * Drop every reference `owner` holds, newest first (so its first block is the
 * last freed), and retire its record (registered or not).  *n_freed (may be
 * NULL) receives the number of references dropped.
 * Errors: KVP_EINVAL (NULL pool, KVP_ANON), KVP_ENOTFOUND (owner not active),
 * KVP_EBUSY.  O(references the owner holds), never a scan of the pool.
 */
KVP_API kvp_status kvp_free_owner(kvp_pool *pool, kvp_owner owner, size_t *n_freed);

/*
 * Mark `owner` active before it allocates, so that a second registration of
 * an id still active is caught (a wrapped request counter, two callers racing
 * on one id).  Allocation for an active owner is always growth, never an
 * error.  Errors: KVP_EINVAL (NULL pool, KVP_ANON), KVP_EOWNERACTIVE (the
 * owner holds references or is registered), KVP_ENOMEM, KVP_EBUSY.  O(1).
 */
KVP_API kvp_status kvp_owner_register(kvp_pool *pool, kvp_owner owner);

/*
 * Clear an active owner that holds no references (registered and never
 * allocated, or everything already freed).  Errors: KVP_EINVAL (NULL pool,
 * KVP_ANON), KVP_ENOTFOUND (not active), KVP_EBUSY (it still holds
 * references: use kvp_free_owner; or from a callback).  O(1).
 */
KVP_API kvp_status kvp_owner_release(kvp_pool *pool, kvp_owner owner);

/*
 * Copy the blocks `owner` holds references on, in the order it took them
 * (a block appears once per reference), to ids[0..]; *n_out receives the
 * count.  Errors: KVP_EINVAL (NULL pool/n_out, NULL ids with cap > 0,
 * KVP_ANON), KVP_ENOTFOUND (owner not active), KVP_ESPACE (cap too small;
 * *n_out = count needed), KVP_EBUSY.  O(references the owner holds).
 */
KVP_API kvp_status kvp_owner_blocks(kvp_pool *pool, kvp_owner owner, kvp_block *ids,
                                    size_t ids_cap, size_t *n_out);

/*
 * Number of free blocks (vacant and cached) of `stream`.  Errors: KVP_EINVAL
 * (NULL argument, unknown stream or KVP_STREAM_SHARED with separate lists),
 * KVP_EBUSY.  O(1).
 */
KVP_API kvp_status kvp_free_count(kvp_pool *pool, kvp_stream stream, uint32_t *out);

/*
 * The block the next allocation from `stream` would take, without taking
 * it: *next receives its id, or KVP_NO_BLOCK when the stream has no free
 * block (the allocation would then grow the pool or fail).  For callers that
 * keep state of their own per block (objects, host buffers) and want it in
 * cache before they allocate: the Python binding's vLLM drop-in prefetches
 * the next block's object this way.  Changes nothing; the answer holds until
 * the next call that changes the pool.  Errors: KVP_EINVAL (NULL argument,
 * unknown stream or KVP_STREAM_SHARED with separate lists), KVP_EBUSY.  O(1);
 * O(log64 blocks) with KVP_REUSE_LOWEST.
 */
KVP_API kvp_status kvp_peek_next(kvp_pool *pool, kvp_stream stream, kvp_block *next);

/*
 * Set the fill level (tokens used) of a block in use, keeping the
 * fragmentation count exact.  Errors: KVP_EINVAL (NULL pool, the null block,
 * fill > block_size), KVP_ERANGE, KVP_EDOUBLEFREE (the block is free),
 * KVP_EBUSY.  O(1).
 */
KVP_API kvp_status kvp_set_fill(kvp_pool *pool, kvp_block id, uint32_t fill);

/*
 * What the pool knows of one block.  state is one of the KVP_BLOCK_* values.
 */
enum { KVP_BLOCK_VACANT = 0, KVP_BLOCK_CACHED = 1, KVP_BLOCK_IN_USE = 2, KVP_BLOCK_RETIRED = 3 };
typedef struct kvp_block_info {
    int state;
    kvp_stream stream;        /* KVP_STREAM_SHARED, _K or _V */
    unsigned format;
    uint32_t ref_count;
    uint32_t anon_refs;       /* references without an owner */
    uint32_t seq_refs;        /* references held by sequences */
    uint32_t fill;            /* tokens used; 0 for a vacant block */
    int published;            /* has a content hash */
    int ever_allocated;       /* handed out at least once */
    int is_null;
    kvp_owner owner;          /* the first owner holding it, or KVP_ANON */
    kvp_hash hash;            /* valid when published */
    unsigned priority;        /* retention priority (kvp_set_priority) */
} kvp_block_info;

/* Describe block `id`.  Errors: KVP_EINVAL (NULL), KVP_ERANGE (beyond the
 * highest id ever created; retired blocks are described), KVP_EBUSY.  O(1). */
KVP_API kvp_status kvp_block_get(kvp_pool *pool, kvp_block id, kvp_block_info *out);

/* ------------------------------------------------------------------------ */
/* Shared blocks and the content index                                       */
/* ------------------------------------------------------------------------ */

/*
 * Take a share of block `id` for the content it holds, for `owner` (or
 * KVP_ANON).  A block in use gets one more reference; a cached free block
 * leaves the free list with its content (O(1)).  Errors: KVP_EINVAL (NULL
 * pool, the null block, a block already holding UINT32_MAX references),
 * KVP_ERANGE, KVP_ENOTFOUND (the block is vacant: it holds no content to
 * share), KVP_ENOMEM (a second owner's reference needs memory), KVP_EBUSY.
 * O(1).
 */
KVP_API kvp_status kvp_claim(kvp_pool *pool, kvp_block id, kvp_owner owner);

/*
 * Index block `id` (in use) under `hash` in its stream's index.  Several
 * blocks may hold the same hash; lookup returns the one published first that
 * is still indexed.  Publishing a block again under the hash it has is a
 * no-op.  Errors: KVP_EINVAL (NULL argument, the null block, prefix caching
 * off), KVP_ERANGE, KVP_EDOUBLEFREE (the block is free), KVP_EBUSY (the block
 * is published under another hash, or from a callback).  O(1) expected,
 * however many blocks hold the same hash.
 *
 * Cost guarantee of the index (publish, lookup, unpublish, eviction): the
 * index places a hash by XXH3 of its 32 bytes keyed with a secret drawn at
 * random for each pool, so hashes chosen by a caller (given directly, made
 * by a custom hash function or from a fixed root seed) cannot be aimed at
 * one place, and there are at least as many places as blocks.  Should 16
 * distinct hashes still meet in one place, the publish that finds them
 * draws a fresh secret and re-places every entry (O(blocks), at most once
 * per pool size of new hashes: O(1) amortized).  Copies of one hash cost
 * nothing extra to find, add or remove.  The tables of owner ids and of
 * sequences' request ids are keyed the same way (a random seed per pool),
 * and draw a fresh seed when a chain or probe grows past a bound, so ids a
 * caller picks keep those calls O(1) expected too.
 */
KVP_API kvp_status kvp_publish(kvp_pool *pool, kvp_block id, const kvp_hash *hash);

/*
 * Find the block indexed under `hash` in `stream`, in use or cached.  Counts
 * nothing and changes nothing.  Errors: KVP_EINVAL (NULL argument, bad
 * stream), KVP_ENOTFOUND, KVP_EBUSY.  O(1) expected.
 */
KVP_API kvp_status kvp_lookup(kvp_pool *pool, kvp_stream stream, const kvp_hash *hash,
                              kvp_block *out);

/*
 * Find and claim the longest cached prefix of a chain of hashes: one call
 * for the loop "for each hashes[i] in order: kvp_lookup in `stream`, stop at
 * the first miss, kvp_claim the block found for `owner` (or KVP_ANON)",
 * with exactly that loop's result: the same blocks, references, owners'
 * holdings, gauges and counters (kvp_stats), the same events.
 *
 * out_ids[0..*n_hit) receive the blocks claimed, hashes[i]'s in out_ids[i];
 * *n_hit < n means hashes[*n_hit] missed (KVP_OK) or its claim failed.  The
 * caller owns both arrays (out_ids holds n entries); the library keeps
 * neither.  Each claimed block holds one more reference for `owner`, freed
 * as any other (kvp_free, kvp_free_owner).
 *
 * Errors: KVP_EINVAL (NULL pool or n_hit, NULL hashes or out_ids with
 * n > 0, unknown stream) before any lookup, with *n_hit untouched and
 * nothing changed; KVP_EBUSY (from a callback), nothing changed.  Else the
 * status of the first claim that failed (as kvp_claim: KVP_EINVAL for a
 * block already holding UINT32_MAX references, KVP_ENOMEM), which changed
 * nothing; the *n_hit claims before it stand.
 * O(n) expected (one index chain per hash); the call's own checks and its
 * entry are made once, not per hash.  Thread rules: those of every call
 * (top of this header); a pool with a lock holds it for the whole call, so
 * no other thread's call comes between the lookups and the claims.  Per-call history (history_every_call)
 * records it as one call.
 */
KVP_API kvp_status kvp_claim_prefix(kvp_pool *pool, kvp_stream stream, const kvp_hash *hashes,
                                    size_t n, kvp_owner owner, kvp_block *out_ids,
                                    size_t *n_hit);

/*
 * Publish n blocks: one call for the loop "kvp_publish(pool, ids[i],
 * &hashes[i]) for i in order, stopping at the first failure", with that
 * loop's result (the same index entries, events and counts).  The arrays
 * are the caller's and are only read.
 *
 * *n_published (may be NULL) receives the publishes done, n on KVP_OK.
 * Errors: KVP_EINVAL (NULL pool, NULL ids or hashes with n > 0, prefix
 * caching off) before any publish, nothing changed and *n_published
 * untouched; KVP_EBUSY from a callback, nothing changed.  Else the status
 * of the first publish refused (as kvp_publish: KVP_EINVAL for the null
 * block, KVP_ERANGE, KVP_EDOUBLEFREE, KVP_EBUSY for a block published under
 * another hash), which changed nothing; the publishes before it stand.
 * O(n) expected; one entry for the whole call.  Thread rules: those of
 * every call; a pool with a lock holds it for the whole call.  Per-call
 * history records it as one call.
 */
KVP_API kvp_status kvp_publish_each(kvp_pool *pool, const kvp_block *ids, const kvp_hash *hashes,
                                    size_t n, size_t *n_published);

/*
 * Remove block `id`'s entry from the index (an eviction: callback, counted).
 * A cached free block becomes vacant.  Other blocks with the same hash keep
 * theirs.  Errors: KVP_EINVAL (NULL pool, the null block), KVP_ERANGE,
 * KVP_ENOTFOUND (not published), KVP_EBUSY.  O(1) expected.
 */
KVP_API kvp_status kvp_unpublish(kvp_pool *pool, kvp_block id);

/*
 * Drop every index entry; blocks in use stay valid but are no longer
 * findable, cached blocks become vacant.  Fires one "all cleared" callback, no
 * per-block ones, counts no evictions.  Errors: KVP_EINVAL, KVP_EBUSY (from a
 * callback).  O(indexed blocks + size / 64).
 */
KVP_API kvp_status kvp_clear_index(kvp_pool *pool);

/*
 * Evict up to `n` cached blocks of `stream` in eviction order (kvp_policy;
 * each:
 * callback, counted; the block becomes vacant).  *n_evicted (may be NULL)
 * receives how many.  Errors: KVP_EINVAL (NULL pool, bad stream), KVP_EBUSY.
 * O(evicted).
 */
KVP_API kvp_status kvp_evict(kvp_pool *pool, kvp_stream stream, uint32_t n,
                             uint32_t *n_evicted);

/*
 * Make at least `n` vacant blocks available in `stream` by evicting cached
 * blocks in eviction order (kvp_policy), without growing.  All or nothing: when vacant
 * plus cached blocks are fewer than n, KVP_EEXHAUSTED and nothing is evicted.
 * Errors: KVP_EINVAL, KVP_EEXHAUSTED, KVP_EBUSY.  O(evicted).
 */
KVP_API kvp_status kvp_ensure_free(kvp_pool *pool, kvp_stream stream, uint32_t n);

/*
 * Give block `id`, which holds content (in use or cached), the retention
 * priority `priority` (KVP_PRIORITY_LOW..KVP_PRIORITY_MAX, see kvp_policy):
 * cached blocks of lower priorities are evicted first.  A cached block moves
 * to the most recently freed end of its new priority's order (under
 * KVP_POLICY_SLRU, to the protected segment if it was claimed since
 * published).  The priority lasts while the block holds this content.  Give
 * a block no higher priority than its parent's, or the parent can be evicted
 * while the child is kept (kvp_seq_raise_priority does this for a
 * sequence's blocks).  Errors: KVP_EINVAL (NULL pool, priority above
 * KVP_PRIORITY_MAX, the null block, a FIFO pool, which reuses free blocks in
 * the order freed), KVP_ERANGE (unknown or retired id), KVP_ENOTFOUND (the
 * block is vacant: no content), KVP_EBUSY.  A refusal changes nothing.  O(1).
 */
KVP_API kvp_status kvp_set_priority(kvp_pool *pool, kvp_block id, unsigned priority);

/*
 * Forget every block's content.  Refused with KVP_EBUSY while any block
 * other than the null block is in use.  Fires one "all cleared" callback.
 * Errors: KVP_EINVAL, KVP_EBUSY.  O(indexed blocks + size / 64).
 */
KVP_API kvp_status kvp_reset_prefix_cache(kvp_pool *pool);

/* ------------------------------------------------------------------------ */
/* Growth, shrink, relocation                                                */
/* ------------------------------------------------------------------------ */

/*
 * Add up to `n` vacant blocks to `stream`, never past max_blocks.  Ids come
 * first from those retired by shrink (lowest first), then above the top.  New
 * blocks join the vacant blocks as if freed now, in id order.  *n_added (may
 * be NULL) receives how many.  Errors: KVP_EINVAL (NULL pool, bad stream),
 * KVP_ENOMEM (nothing added), KVP_EBUSY.  O(n) amortized.
 */
KVP_API kvp_status kvp_extend(kvp_pool *pool, kvp_stream stream, uint32_t n,
                              uint32_t *n_added);

/*
 * Retire free blocks of `stream` until at most `target_free` remain free:
 * vacant blocks first, then cached ones (evicted), highest ids first within
 * each.  Never touches a block in use.  *n_retired (may be NULL) receives the
 * count.  Errors: KVP_EINVAL, KVP_EBUSY.  O(retired).
 */
KVP_API kvp_status kvp_shrink(kvp_pool *pool, kvp_stream stream, uint32_t target_free,
                              uint32_t *n_retired);

/*
 * Retire the highest managed block.  A free block is simply dropped (a cached
 * one is evicted) and *moved_to = KVP_NO_BLOCK.  A block in use moves, with
 * its whole identity (references, owners, hash and index entry, fill, format),
 * into a free block of its stream taken in reuse order (evicting it if
 * cached), and *moved_to receives the new id; the caller must rewrite its
 * tables.  *retired receives the old id.  Errors: KVP_EINVAL (NULL argument;
 * the top block is the null block), KVP_EEXHAUSTED (no managed block, or no
 * free block to move into: nothing changes), KVP_EBUSY.  O(1) plus
 * O(owners sharing the block).
 */
KVP_API kvp_status kvp_retire_top(kvp_pool *pool, kvp_block *retired, kvp_block *moved_to);

/* ------------------------------------------------------------------------ */
/* Block hashing                                                             */
/* ------------------------------------------------------------------------ */

/*
 * The hash of one full block, chained: it covers the parent block's hash,
 * the block's token ids and the extra keys.  Exact bytes hashed, so that any
 * language can reproduce a kvpool hash (all integers little-endian):
 *
 *   parent     32 bytes   the parent's kvp_hash; the pool's root seed for
 *                         the first block of a sequence
 *   n          u32        number of tokens (the block size)
 *   tokens     n x u32    token ids
 *   flags      u8         bit 0: LoRA, bit 1: multimodal, bit 2: salt
 *   lora_id    u64        if bit 0 (extra->has_lora)
 *   k          u32        if bit 1: number of spans that overlap this block
 *   spans      k x (32-byte hash, u32 start, u32 end), if bit 1: each span
 *                         overlapping [block start, block start + n), in the
 *                         order given, with start/end made relative to the
 *                         block start and clipped to [0, n]
 *   salt_len   u32        if bit 2 (salt given, first block only)
 *   salt       salt_len bytes
 *
 * Bit 1 is set only when at least one span overlaps the block; bit 2 only on
 * the first block (start 0) and only with salt_len > 0, so the salt reaches
 * later blocks through the chain.  SHA-256 fills all 32 bytes of the result;
 * XXH3-128 (seed 0) writes its canonical (big-endian) 16 bytes into bytes
 * 16..31 and zeroes bytes 0..15.
 */

/*
 * Hash one full block: tokens[0..n) with n == block_size, starting at
 * absolute token position `start` (a multiple of block_size), child of
 * `parent` (NULL: the root seed, and then start must be 0).  Pure: reads the
 * pool's configuration only.  Errors: KVP_EINVAL (NULL pool/tokens/out; n !=
 * block_size; start not a multiple of it; start + n above UINT64_MAX;
 * parent NULL with start != 0; a span with end < start), or what a custom
 * hash function returns.  Thread rules: callable concurrently, also on a
 * pool without locking, as long as the pool is not destroyed meanwhile.
 * O(n + spans).
 */
KVP_API kvp_status kvp_hash_block(const kvp_pool *pool, const kvp_hash *parent,
                                  const uint32_t *tokens, size_t n, uint64_t start,
                                  const kvp_extra_keys *extra, kvp_hash *out);

/*
 * Hash every full block of tokens[0..n_tokens) as a chain into
 * hashes[0..n_tokens / block_size).  The first `n_known` entries of hashes[]
 * are taken as already computed for this same token prefix and are not
 * recomputed, so a request that grows by one block costs one block hash.
 * *n_out (may be NULL) receives the number of full blocks.  Errors:
 * KVP_EINVAL (NULL pool; NULL tokens with n_tokens > 0; NULL hashes with
 * cap > 0; n_known above the number of full blocks), KVP_ESPACE (cap too
 * small; *n_out = blocks needed), or a custom hash function's status.
 * Thread rules as kvp_hash_block.  O(new blocks x block_size).
 */
KVP_API kvp_status kvp_hash_tokens(const kvp_pool *pool, const uint32_t *tokens, size_t n_tokens,
                                   const kvp_extra_keys *extra, kvp_hash *hashes, size_t cap,
                                   size_t n_known, size_t *n_out);

/* ------------------------------------------------------------------------ */
/* Verified hits (beyond)                                                    */
/* ------------------------------------------------------------------------ */

/*
 * With verify_hits, a published block can carry its token ids and its parent
 * block, and a verified lookup accepts a block only if both match.  Parents
 * are recorded as (id, content generation), so a parent whose content was
 * evicted, replaced or relocated since never confirms a child: even a hash
 * function under which everything collides cannot hand one request another's
 * cache.  A miss is always safe; a hit is exact.
 */

/*
 * kvp_publish, and record tokens[0..n) (n == block_size) and the parent block
 * `parent` (KVP_NO_BLOCK for a chain's first block; otherwise a published
 * block).  Errors: as kvp_publish, except that a block already published
 * (under any hash) is refused with KVP_EBUSY; KVP_EINVAL also for
 * verify_hits off, NULL tokens, n != block_size, or a parent that is not
 * published.  O(n).
 */
KVP_API kvp_status kvp_publish_verified(kvp_pool *pool, kvp_block id, const kvp_hash *hash,
                                        kvp_block parent, const uint32_t *tokens, size_t n);

/*
 * Find a block indexed under `hash` in `stream` that was published verified
 * with exactly tokens[0..n) and with `parent` as its parent (KVP_NO_BLOCK for
 * a first block), as it is now.  Among several such blocks, the first
 * published.  Counts nothing.  Errors: KVP_EINVAL (NULL argument, verify_hits
 * off, n != block_size, bad stream), KVP_ENOTFOUND.  O(n x blocks with that
 * hash).
 */
KVP_API kvp_status kvp_lookup_verified(kvp_pool *pool, kvp_stream stream, const kvp_hash *hash,
                                       kvp_block parent, const uint32_t *tokens, size_t n,
                                       kvp_block *out);

/* ------------------------------------------------------------------------ */
/* Sequences (per-request block tables)                                      */
/* ------------------------------------------------------------------------ */

/*
 * A sequence is one request's block table, managed through the pool: admit a
 * prompt (reusing the longest cached prefix), append generated tokens (a
 * block is allocated when the last one fills and published when it becomes
 * full), fork (the child shares every block; copy-on-write when a write lands
 * in a shared partial block), destroy (tail first, so a request's last blocks
 * are evicted before its first).  Sequences hold references of their own
 * kind (kvp_block_info.seq_refs): no owner call and no kvp_free can drop
 * them (kvp_free with KVP_ANON on a block only a sequence holds is refused
 * with KVP_ENOTOWNER).  They need one shared free
 * list (not separate_kv).  A sequence handle belongs to its pool and stays valid until
 * kvp_seq_destroy, kvp_pool_clear or kvp_pool_destroy.  Locking follows the
 * pool's.
 */
typedef struct kvp_seq kvp_seq;

/*
 * Create an empty sequence for `request_id` with extra keys (copied; NULL for
 * none).  A multimodal span [start, end) with end == start covers no token.
 * Errors: KVP_EINVAL (NULL pool/out; a pool with separate K/V lists; a span
 * with end < start, or NULL arrays with non-zero counts in extra),
 * KVP_EOWNERACTIVE (a sequence with that id exists), KVP_ENOMEM, KVP_EBUSY.
 * O(size of extra keys).
 */
KVP_API kvp_status kvp_seq_create(kvp_pool *pool, uint64_t request_id,
                                  const kvp_extra_keys *extra, kvp_seq **out);

/* Find the sequence of `request_id`.  Errors: KVP_EINVAL, KVP_ENOTFOUND,
 * KVP_EBUSY.  O(1) expected. */
KVP_API kvp_status kvp_seq_find(kvp_pool *pool, uint64_t request_id, kvp_seq **out);

/* Free the sequence's blocks, last block first, and the sequence.  The handle
 * is invalid afterwards (the pool may hand the same memory to a later
 * kvp_seq_create or kvp_seq_fork: a destroyed sequence's memory is kept for
 * reuse, so creating, admitting, appending and destroying requests allocates
 * nothing once as many sequences as are live at once have existed; it is
 * released by kvp_pool_clear and kvp_pool_destroy).  Errors: KVP_EINVAL
 * (NULL), KVP_EBUSY (from a callback).  O(blocks). */
KVP_API kvp_status kvp_seq_destroy(kvp_seq *seq);

/*
 * Admit a prompt into an empty sequence: hash its full blocks, claim the
 * longest prefix of them found in the index (verified lookups with
 * verify_hits), allocate blocks for the rest, publish the prompt's full blocks
 * that were not cached, and report in *cached_tokens how many prompt tokens
 * were served from cache.  At least one token is always left to compute: the
 * hit covers at most the first n-1 tokens, in whole blocks.  Blocks matched
 * here are never evicted to make room for this admission.  A matching block
 * that could not take one more reference without passing UINT32_MAX
 * references counts as a miss.  Counts prefix queries and hits (blocks and
 * tokens).  All or nothing.
 * Errors: KVP_EINVAL (NULL seq/tokens, n == 0, n needing more than
 * KVP_MAX_BLOCKS blocks), KVP_EBUSY (the sequence
 * already has tokens; or from a callback), KVP_EEXHAUSTED, KVP_ENOMEM.
 * O(n) plus O(1) per block.
 */
KVP_API kvp_status kvp_seq_admit(kvp_seq *seq, const uint32_t *tokens, size_t n,
                                 size_t *cached_tokens);

/*
 * What kvp_seq_admit(seq, tokens, n) would do now, without doing it:
 * *cached_tokens receives the prompt tokens it would serve from cache (the
 * same longest-prefix rule, verified with verify_hits), *blocks_needed the
 * free blocks it would take: the blocks after the cached prefix plus the
 * matched blocks that are cached (free) now.  The admission succeeds without
 * growth exactly when *blocks_needed <= kvp_free_count, as long as nothing
 * changes the pool in between.  An engine uses it to admit a long prompt in
 * chunks: admit tokens[0..cached + chunk) (the same prefix is found, since it
 * leaves a token to compute), compute, then kvp_seq_append the next chunk.
 * Changes nothing and counts nothing (no prefix queries or hits).
 * Errors: as kvp_seq_admit without KVP_EEXHAUSTED: KVP_EINVAL (NULL
 * seq/tokens/cached_tokens/blocks_needed, n == 0, n needing more than
 * KVP_MAX_BLOCKS blocks), KVP_EBUSY (the sequence already has tokens; or
 * from a callback), KVP_ENOMEM (room for the sequence's hashes).  O(n) plus
 * O(1) per block.
 */
KVP_API kvp_status kvp_seq_probe(kvp_seq *seq, const uint32_t *tokens, size_t n,
                                 size_t *cached_tokens, size_t *blocks_needed);

/*
 * Append tokens[0..n) (generated tokens, or a prompt's continuation) to a
 * sequence: fill the last block, allocate blocks as they are needed, publish
 * each block when it becomes full.  Appending into a shared, partly filled
 * last block first copies it into a fresh block (copy-on-write, through the
 * storage hook, counted in cow_copies).  All or nothing.  Errors: KVP_EINVAL
 * (NULL seq, NULL tokens with n > 0, a total needing more than
 * KVP_MAX_BLOCKS blocks), KVP_EEXHAUSTED, KVP_ENOMEM, KVP_EBUSY.
 * O(n) plus O(1) per block.
 */
KVP_API kvp_status kvp_seq_append(kvp_seq *seq, const uint32_t *tokens, size_t n);

/*
 * Keep only the first n tokens of a sequence (n <= its token count): the
 * rollback of rejected speculative tokens, or a prompt cut back.  Blocks
 * past the first ceil(n / block_size) are dropped, last first (a published
 * one stays cached: its content is still right for its hash).  When n ends
 * inside a block that another sequence also holds or that is published,
 * that block keeps its content for the others and the sequence continues in
 * a fresh copy of it (through the storage hook, counted in cow_copies; both
 * are in use while it is made, as peak_in_use shows), so later writes never
 * land in bytes others read; otherwise the block's fill
 * becomes n % block_size.  tokens[0..n) are the sequence's tokens as the
 * caller keeps them; only the n % block_size tokens of the new partial
 * block are read (the sequence keeps no tokens of full blocks), and when
 * the cut lies in the current partial block they must match the ones it
 * holds.  n == the token count changes nothing.  All or nothing.
 * Errors: KVP_EINVAL (NULL seq; n above the token count; NULL tokens with
 * n % block_size != 0; tokens that differ from those of the current partial
 * block), KVP_EEXHAUSTED (a copy is needed and no block is free, counting
 * the blocks the truncation frees), KVP_ENOMEM, KVP_EBUSY.  O(dropped
 * blocks + block_size).
 */
KVP_API kvp_status kvp_seq_truncate(kvp_seq *seq, const uint32_t *tokens, size_t n);

/*
 * Raise the retention priority (kvp_set_priority) of the first `n_blocks`
 * blocks the sequence holds (all of them when it holds fewer) to `priority`;
 * a block already higher keeps its own.  A block's prefix is raised with it,
 * so priorities never increase along a prefix: e.g. a system prompt's blocks
 * kept longer than the conversations that follow it.  Errors: KVP_EINVAL
 * (NULL sequence, priority above KVP_PRIORITY_MAX, a FIFO pool), KVP_EBUSY.
 * A refusal changes nothing.  O(n_blocks).
 */
KVP_API kvp_status kvp_seq_raise_priority(kvp_seq *seq, size_t n_blocks, unsigned priority);

/*
 * Fork: create sequence `child_id` sharing every block of `parent` (one more
 * reference each), with the same tokens and extra keys.  Errors: KVP_EINVAL
 * (NULL argument; a block that would pass UINT32_MAX references),
 * KVP_EOWNERACTIVE (child_id exists), KVP_ENOMEM, KVP_EBUSY.  O(blocks +
 * tokens).
 */
KVP_API kvp_status kvp_seq_fork(kvp_seq *parent, uint64_t child_id, kvp_seq **child);

/*
 * The block table, in logical order, without copying: *ids points into the
 * sequence and stays valid until the next call that changes this sequence
 * (admit, append, truncate, destroy) or relocates a block (kvp_retire_top), or
 * kvp_pool_clear.  *n_tokens (may be NULL) receives the token count.
 * Errors: KVP_EINVAL.  O(1).
 */
KVP_API kvp_status kvp_seq_blocks(kvp_seq *seq, const kvp_block **ids, size_t *n_blocks,
                                  size_t *n_tokens);

/* ------------------------------------------------------------------------ */
/* Backing storage                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Address of block `id`'s bytes in the host arena (host_arena set, and
 * block_bytes for its stream non-zero).  The address stays valid until the
 * pool grows past its arena (growth moves the arena) or is destroyed.
 * Errors: KVP_EINVAL (NULL argument; no host arena), KVP_ERANGE, KVP_EBUSY.
 * O(1).
 */
KVP_API kvp_status kvp_block_ptr(kvp_pool *pool, kvp_block id, void **out);

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * With `events` set, every change to the content index is recorded at the
 * point it happens, for routers that track what each engine caches (the
 * stream vLLM publishes):
 * - KVP_EVENT_STORED: hashes entered the index.  Blocks published in one call
 *   as a chain form one event (hashes[i]'s parent is hashes[i-1], hashes[0]'s
 *   is `parent`, or none for a chain's first block).  Sequences supply token
 *   ids (n_tokens = n_hashes x block_size) and LoRA / multimodal keys; a
 *   plain kvp_publish supplies neither and names no parent.
 * - KVP_EVENT_REMOVED: hashes left the index (eviction, unpublish, retire or
 *   shrink of a cached block).
 * - KVP_EVENT_ALL_CLEARED: the whole index was dropped (kvp_clear_index,
 *   kvp_reset_prefix_cache, kvp_pool_clear), or events were lost (below).
 * Events are per hash, not per stream (a router keys blocks by hash alone):
 * a hash is announced when a copy enters the index, in any stream, while no
 * copy is announced, and removed when its last copy leaves every stream;
 * copies in between, in the same or the other list, say nothing.  Unless
 * events were dropped, applying every event (STORED adds, REMOVED removes,
 * ALL_CLEARED empties) gives exactly the set of hashes in the index.
 * A parent is the hash the block was chained from, named only while the
 * subscriber holds it: every STORED names as parent either nothing or a
 * hash that applying the events before it leaves in the subscriber's view.
 * When the parent's hash is no longer announced (a sequence that keeps
 * running after kvp_clear_index or kvp_reset_prefix_cache, a parent
 * unpublished, evicted, retired or shrunk away before its child was
 * published, or a drop that lost its announcement) the block is indexed
 * and announced without a parent, as the first block of a chain: its own
 * hash is findable, and routers reject a stored block whose parent they do
 * not hold.  A parent that leaves after its child was announced is removed
 * as usual; the child stays.
 * Hashes in events are external: the last 8 bytes of the kvp_hash read
 * big-endian as an unsigned integer, with 0 replaced by 1 (0 is never sent).
 * The queue is bounded by event_capacity hashes.  When an event does not
 * fit it is dropped and counted, an ALL_CLEARED event takes a slot kept for
 * it, and every further event is dropped until the next take, so a
 * subscriber never keeps a stale view: it sees the cache as empty and
 * learns it again, each hash when a copy of it is next published (a hash
 * indexed before the drop and not published since stays unannounced until
 * the index empties).
 */
typedef enum kvp_event_kind {
    KVP_EVENT_STORED = 1,
    KVP_EVENT_REMOVED = 2,
    KVP_EVENT_ALL_CLEARED = 3
} kvp_event_kind;

typedef struct kvp_event {
    kvp_event_kind kind;
    const uint64_t *hashes;     /* external hashes (STORED, REMOVED) */
    size_t n_hashes;
    int has_parent;             /* STORED: parent is meaningful */
    uint64_t parent;
    const uint32_t *tokens;     /* STORED: tokens the blocks cover, or none */
    size_t n_tokens;
    uint32_t block_size;
    const char *lora_name;      /* STORED: NULL without LoRA */
    const kvp_hash *mm;         /* STORED: hashes of the multimodal inputs
                                   overlapping the blocks, block by block */
    size_t n_mm;
    const uint32_t *mm_per_block; /* STORED: n_hashes counts; block i's
                                   inputs follow block i-1's in mm */
    const char *medium;
} kvp_event;

/* The external (64-bit) form of a block hash, as events carry it.  O(1). */
KVP_API uint64_t kvp_hash_external(const kvp_hash *hash);

/*
 * Drain every event queued since the last take, oldest first, as one batch:
 * *events points to *n events (valid until the next kvp_events_take,
 * kvp_pool_clear or kvp_pool_destroy); *dropped (may be NULL) receives how
 * many events were lost since the last take.  Errors: KVP_EINVAL (NULL
 * pool/events/n; events not enabled), KVP_EBUSY.  O(1).
 */
KVP_API kvp_status kvp_events_take(kvp_pool *pool, const kvp_event **events, size_t *n,
                                   uint64_t *dropped);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

/*
 * Counters.  Gauges describe the pool now; counters (marked "rate") count
 * since creation or the last kvp_stats_reset().
 */
typedef struct kvp_stats {
    uint64_t blocks;           /* managed blocks (not retired) */
    uint64_t in_use;           /* blocks with references (the null block too) */
    uint64_t free;             /* vacant + cached */
    uint64_t vacant;
    uint64_t cached;
    uint64_t shared;           /* blocks with two or more references */
    uint64_t indexed;          /* index entries */
    uint64_t fragmented;       /* in use with 0 < fill < block_size */
    uint64_t owners;           /* active owners */
    uint64_t peak_in_use;      /* high-water mark of in_use; reset to in_use */
    uint64_t alloc_calls;      /* rate: successful kvp_alloc/kvp_take/take_id,
                                  and admissions/appends/truncations that
                                  took blocks */
    uint64_t blocks_allocated; /* rate */
    uint64_t free_calls;       /* rate: successful kvp_free (n > 0),
                                  kvp_free_owner, kvp_seq_destroy of a
                                  sequence holding blocks, kvp_seq_truncate
                                  dropping references */
    uint64_t blocks_freed;     /* rate: references dropped */
    uint64_t reused;           /* rate: blocks handed out for fresh content that
                                  had been handed out before (claims of
                                  content do not count) */
    uint64_t exhausted;        /* rate: allocation attempts (alloc, take,
                                  admission, append, truncate) refused for lack of
                                  blocks; kvp_ensure_free and kvp_retire_top
                                  failures do not count */
    uint64_t grown;            /* rate: blocks added by growth on exhaustion */
    uint64_t extended;         /* rate: blocks added by kvp_extend */
    uint64_t retired;          /* rate: blocks retired (shrink, retire_top) */
    uint64_t relocated;        /* rate: blocks moved by retire_top */
    uint64_t evictions;        /* rate: hashes evicted */
    uint64_t prefix_queries;   /* rate: full blocks looked up at admission
                                  (after the leave-one-token cap) */
    uint64_t prefix_hits;      /* rate: of those, blocks served from cache */
    uint64_t prefix_tokens_queried; /* rate: prefix_queries x block_size */
    uint64_t prefix_tokens_hit;     /* rate: prefix_hits x block_size */
    uint64_t admitted_tokens;  /* rate: prompt tokens admitted by kvp_seq_admit,
                                  cached or not (its n) */
    uint64_t cow_copies;       /* rate: copy-on-write copies */
    uint64_t tokens_in_use;    /* gauge: sum of fill over blocks in use */
    uint64_t events_dropped;   /* rate: events lost to a full queue */
    double fragmentation;      /* fragmented / blocks (0 with no blocks) */
    double usage;              /* in_use / blocks (0 with no blocks) */
} kvp_stats;

/* Copy the counters.  Errors: KVP_EINVAL (NULL), KVP_EBUSY.  O(1). */
KVP_API kvp_status kvp_stats_get(kvp_pool *pool, kvp_stats *out);

/* Zero the rate counters and set peak_in_use to in_use.  The history ring is
 * kept.  Errors: KVP_EINVAL, KVP_EBUSY.  O(1). */
KVP_API kvp_status kvp_stats_reset(kvp_pool *pool);

/* Append a snapshot of the counters to the history ring (the oldest is
 * dropped when full).  Errors: KVP_EINVAL (NULL; history_len 0), KVP_EBUSY.
 * O(1). */
KVP_API kvp_status kvp_stats_snapshot(kvp_pool *pool);

/* Copy the history ring, oldest first, into out[0..]; *n_out receives the
 * count.  Errors: KVP_EINVAL (NULL pool/n_out, NULL out with cap > 0),
 * KVP_ESPACE (*n_out = count needed), KVP_EBUSY.  O(history_len). */
KVP_API kvp_status kvp_stats_history(kvp_pool *pool, kvp_stats *out, size_t cap,
                                     size_t *n_out);

/*
 * Render the counters as Prometheus text exposition (HELP and TYPE lines,
 * then one sample; counters end in _total) or as one JSON object.  Writes a
 * NUL-terminated string into buf[0..cap); *needed (may be NULL) receives its
 * length without the NUL.  Errors: KVP_EINVAL (NULL pool; NULL buf with cap >
 * 0; bad prefix), KVP_ESPACE (cap <= length; the buffer is left as it was),
 * KVP_EBUSY.  O(number of metrics).
 *
 * The exposition has one family per kvp_stats field, named after the field,
 * and three families under the names vLLM's dashboards use:
 * kv_cache_usage_perc (gauge 0..1, the usage field), prefix_cache_queries
 * (counter, prompt tokens admitted: admitted_tokens) and prefix_cache_hits
 * (counter, prompt tokens served from the prefix cache: prefix_tokens_hit).
 * Only admissions (kvp_seq_admit) count towards the prefix families: a
 * kvp_lookup or kvp_claim_prefix is not a request's admission.
 *
 * Each name is `prefix`, then '_', then the metric's name; a prefix ending in
 * ':' is followed directly by the name ("vllm:" gives
 * vllm:kv_cache_usage_perc).  A prefix (NULL: "kvpool") is letters, digits,
 * '_' and ':', not starting with a digit.  The JSON object has one key per
 * kvp_stats field.
 */
KVP_API kvp_status kvp_stats_prometheus(kvp_pool *pool, const char *prefix, char *buf,
                                        size_t cap, size_t *needed);
KVP_API kvp_status kvp_stats_json(kvp_pool *pool, char *buf, size_t cap, size_t *needed);

/* A label attached to every sample of an exposition: `name="value"`. */
typedef struct kvp_label {
    const char *name;  /* letters, digits and '_', not starting with a digit
                          or "__"; "group" and "tier" are reserved */
    const char *value; /* any UTF-8; '\\', '"' and newline are escaped */
} kvp_label;

/* What kvp_stats_prometheus_opts writes. */
typedef struct kvp_prometheus_opts {
    const char *prefix;      /* as kvp_stats_prometheus's; NULL: "kvpool" */
    const kvp_label *labels; /* n_labels labels, in this order on every sample
                                (e.g. model_name, pool) */
    size_t n_labels;
} kvp_prometheus_opts;

/*
 * kvp_stats_prometheus with labels: the same families, each sample carrying
 * opts->labels.  The label names "group" and "tier" are reserved for samples
 * split by those dimensions.  opts NULL is the same as
 * kvp_stats_prometheus(pool, NULL, ...).  The strings are read during the call
 * only.  Errors: those of kvp_stats_prometheus, and KVP_EINVAL (NULL labels
 * with n_labels > 0; a NULL name or value; a bad, reserved or repeated label
 * name); nothing is written on an error.
 * O(number of metrics x length of the labels).
 */
KVP_API kvp_status kvp_stats_prometheus_opts(kvp_pool *pool, const kvp_prometheus_opts *opts,
                                             char *buf, size_t cap, size_t *needed);

/* ------------------------------------------------------------------------ */
/* Checking                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Walk the whole pool (blocks, free lists and sets, reference counts, owner
 * records, the index, every counter; with events on, that each indexed hash
 * is announced once unless events were dropped since the index last
 * emptied) and verify every invariant.  On the first broken one returns
 * KVP_ECORRUPT and writes a message naming it into msg[0..cap) (msg may be
 * NULL).  Errors: KVP_EINVAL (NULL pool), KVP_EBUSY.
 * It changes nothing, so a check between two calls does not change what
 * the second one does.
 * O(size of the pool + owners): for tests and debugging, never hot paths.
 */
KVP_API kvp_status kvp_pool_check(kvp_pool *pool, char *msg, size_t cap);

/*
 * A 64-bit digest of the pool's whole logical state: every block's state,
 * references, owners, fill, format, hash; the order free blocks will be
 * reused and evicted; owner records; index entries and their order.  Not
 * included: statistics counters, history, and internal capacities.  Equal
 * states give equal digests, so tests can prove a refused call changed
 * nothing.  Errors: KVP_EINVAL, KVP_EBUSY.  O(size of the pool + owners).
 */
KVP_API kvp_status kvp_pool_fingerprint(kvp_pool *pool, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
