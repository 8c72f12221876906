/*
 * pool.c — the block pool: lifecycle, block states, and the calls that hand
 * blocks out and take them back (alloc, take, claim, free).
 *
 * What it owns: every block's state, reference count and fill; the gauges
 * in_use, shared, fragmented, peak, and what the fast take leaves to the
 * next call: the tally of its counters (tally) and the records of the
 * blocks it hands to owners (take_to_owner; owner.c settles them).  The
 * free blocks' order is freelist.c's.
 *
 * Invariants (checked by check.c):
 * - A block is in exactly one state.  A free block (vacant or cached) is in
 *   its stream's free structures, or a fresh one in its fresh range
 *   (freelist.c).  A cached block is published.  A block in use has
 *   ref > 0 and is in no free structure.  A retired block is in the
 *   retired idset.
 * - ref == anon + sref + references held by owners.
 * - A fresh block's record is all zero (reads as vacant, no flags).
 * - A vacant block's fill is 0 and its flags at most EVER: handing it out
 *   then only stores into its record (hand_out_vacant).
 * - Except a pending reference's block: in use, but its record still as it
 *   was in the stack's array, until the next call that settles (kvp__enter).
 *
 * Why this shape: allocation and free are the hottest calls of an engine's
 * scheduler, so each is a handful of array accesses.  Their common case,
 * pop_vacant, pops the free structures itself and hands each block out as
 * it goes, instead of a kvp__pick and a kvp__free_remove per block.  The
 * decode step's takes (kvp_take, kvp_take_hinted, kvp_take_each) share one
 * inline loop, take_run, that keeps what it reads of the pool in registers
 * between takes; everything it declines goes out of line (take_other),
 * so the loop saves no registers for it.
 */
#include "kvp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>

/* initial-exec: one load per call instead of a __tls_get_addr call. */
__attribute__((tls_model("initial-exec"))) _Thread_local const kvp_pool *kvp__cb_pool;

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

/* The default allocator maps large blocks directly: fresh mappings are
 * zero and cost nothing until touched, whatever malloc's heap holds (after a
 * few large frees glibc serves big callocs from its heap, and clears them:
 * 12 ms for a 1M-block pool here instead of 0.3 ms). */
#define KVP__MAP_MIN ((size_t)1 << 20)

static void *std_alloc(void *user, size_t size)
{
    (void)user;
    if (size < KVP__MAP_MIN)
        return malloc(size);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void std_release(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size < KVP__MAP_MIN)
        free(ptr);
    else
        munmap(ptr, size);
}

static const kvp_allocator kvp__std_allocator = {std_alloc, std_release, NULL};

/* Uninitialised memory; with cfg.prefault written once, for the reason
 * kvp__zalloc gives. */
void *kvp__alloc(kvp_pool *p, size_t size)
{
    void *m = size ? p->mem.alloc(p->mem.user, size) : NULL;
    if (m && p->cfg.prefault)
        memset(m, 0, size);
    return m;
}

/* Zeroed memory.  With the default allocator large blocks are fresh
 * mappings, already zero and untouched: the reason a big pool is cheap to
 * make.  With cfg.prefault they are written anyway, which faults every page
 * in now rather than in the call that first touches it. */
void *kvp__zalloc(kvp_pool *p, size_t size)
{
    if (!size)
        return NULL;
    bool fresh = p->mem.alloc == std_alloc;
    void *m = !fresh                 ? p->mem.alloc(p->mem.user, size)
              : size < KVP__MAP_MIN ? calloc(1, size)
                                    : std_alloc(NULL, size);
    if (m && (!fresh || p->cfg.prefault))
        memset(m, 0, size);
    return m;
}

void kvp__release(kvp_pool *p, void *ptr, size_t size)
{
    if (ptr)
        p->mem.release(p->mem.user, ptr, size);
}

/* ------------------------------------------------------------------------ */
/* Entering and leaving                                                      */
/* ------------------------------------------------------------------------ */

/* The take's fast path (take, below) counts the blocks it hands out in
 * their stream's untallied alone, and every other call adds them to the
 * counters on entry, so whatever reads a counter sees it exact.  Each such
 * block is one allocation call, one block allocated, one reused (the
 * stack's array holds only blocks handed out before), one vacant block
 * less and one more in use; the peak is where the run of takes ended,
 * since nothing but another call lowers in_use.  So the take keeps one
 * increment instead of six counters and a compare. */
static void count_out(kvp_pool *p, uint64_t n);

static inline void tally(kvp_pool *p)
{
    uint64_t n = 0;
    for (int s = 0; s < p->nstreams; s++) {
        kvp__stream *st = &p->st[s];
        st->nvacant -= st->untallied;
        n += st->untallied;
        st->untallied = 0;
    }
    if (!n)
        return;
    p->ctr.alloc_calls += n;
    p->ctr.reused += n;
    count_out(p, n);
}

/* Every public call that reads or writes the pool goes through here: a call
 * from inside this pool's callback is refused (the lock is held, and the
 * state is mid-change), then the lock is taken if the pool has one, the
 * fast takes since the last call are counted (tally), and their blocks'
 * records written (kvp__settle; see take_to_owner).  kvp__enter_lazy leaves
 * the pending references as they are, for the calls that need no record
 * of them: kvp_free_owner, the take's general path and kvp_pool_check. */
kvp_status kvp__enter_lazy(kvp_pool *p)
{
    if (!p)
        return KVP_EINVAL;
    if (p->hooked) { /* else no callback of this pool can be running */
        if (kvp__cb_pool == p)
            return KVP_EBUSY;
        if (p->ts)
            pthread_mutex_lock(&p->lock);
    }
    tally(p);
    return KVP_OK;
}

kvp_status kvp__enter(kvp_pool *p)
{
    kvp_status rc = kvp__enter_lazy(p);
    if (rc)
        return rc;
    if (p->dirty)
        kvp__settle(p);
    p->run = 0;
    return KVP_OK;
}

/* Debug level 3: the whole pool checked after every call that changed it. */
static inline void self_check(kvp_pool *p, bool changed)
{
#if KVP_DEBUG >= 3
    if (changed) {
        tally(p);
        char msg[256];
        if (kvp__check(p, msg, sizeof msg) != KVP_OK) {
            fprintf(stderr, "kvpool: invariant broken: %s\n", msg);
            abort();
        }
    }
#else
    (void)p;
    (void)changed;
#endif
}

void kvp__leave(kvp_pool *p, bool changed)
{
    if (p->hooked) {
        kvp__ev_close(p);
        if (changed && p->cfg.history_every_call && p->cfg.history_len)
            kvp__history_push(p);
    }
    self_check(p, changed);
    if (p->ts)
        pthread_mutex_unlock(&p->lock);
}

/* kvp__enter for calls that name a stream: *s receives its index. */
kvp_status kvp__enter_stream(kvp_pool *p, int stream, int *s)
{
    if (!p || (*s = kvp__stream_index(p, stream)) < 0)
        return KVP_EINVAL;
    return kvp__enter(p);
}

/* Map a public stream value to an internal index, or -1 if refused. */
int kvp__stream_index(const kvp_pool *p, int stream)
{
    if (stream < KVP_STREAM_SHARED || stream > KVP_STREAM_V)
        return -1;
    if (p->nstreams == 1)
        return 0;
    return stream == KVP_STREAM_SHARED ? -1 : stream - 1;
}

/* Set p->fast from the stream map, hooked and ordered: the take's fast path
 * (take, kvp_take_each) then answers "may I serve this stream value" with
 * one load, where it made four tests.  hooked is fixed at creation;
 * ordered changes at creation, in kvp_pool_clear (both through
 * kvp__reset_blocks) and in kvp__order, each of which calls this. */
void kvp__fast_reset(kvp_pool *p)
{
    for (int v = KVP_STREAM_SHARED; v <= KVP_STREAM_V; v++) {
        int s = kvp__stream_index(p, v);
        p->fast[v] = s < 0 || p->hooked || p->ordered ? NULL : &p->st[s];
    }
}

/* Callbacks run with a thread-local marker set, which is what makes a call
 * back into the same pool detectable in both locking modes. */
void kvp__notify_evict(kvp_pool *p, const kvp_hash *h, uint32_t b)
{
    if (!p->cfg.on_evict)
        return;
    const kvp_pool *outer = kvp__cb_pool;
    kvp__cb_pool = p;
    p->cfg.on_evict(p->cfg.evict_user, h, h ? b : KVP_NO_BLOCK);
    kvp__cb_pool = outer;
}

/* ------------------------------------------------------------------------ */
/* Configuration and lifecycle                                               */
/* ------------------------------------------------------------------------ */

kvp_status kvp_config_default(kvp_config *cfg)
{
    if (!cfg)
        return KVP_EINVAL;
    memset(cfg, 0, sizeof *cfg);
    cfg->block_size = 16;
    cfg->num_blocks = 1024;
    cfg->prefix_caching = 1;
    cfg->reuse = KVP_REUSE_LIFO;
    cfg->history_len = 64;
    return KVP_OK;
}

/* The growth cap a configuration sets: no array, table or arena of the
 * pool is ever sized for more ids than this. */
static uint32_t growth_cap(const kvp_config *c)
{
    return c->max_blocks ? c->max_blocks : KVP_MAX_BLOCKS;
}

uint32_t kvp__max_blocks(const kvp_pool *p)
{
    return growth_cap(&p->cfg);
}

/* Blocks of stream s at creation (and after kvp_pool_clear): one stream
 * has them all; with separate K and V, K has the first half, rounded up. */
static uint32_t initial_blocks(const kvp_pool *p, int s)
{
    uint32_t n = p->cfg.num_blocks, k = p->nstreams == 2 ? (n + 1) / 2 : n;
    return s == 0 ? k : n - k;
}

/* Lay out the initial blocks: stream ranges, all fresh, and the null block.
 * Used by create and by clear, so the two cannot disagree.  The id sets and
 * buckets must be zero already (fresh from kvp__zalloc, or wiped by
 * kvp_pool_clear), so creation touches none of their pages. */
void kvp__reset_blocks(kvp_pool *p)
{
    uint32_t n = p->cfg.num_blocks;
    for (int s = 0; s < p->nstreams; s++) {
        kvp__stream *st = &p->st[s];
        st->qhead = st->qtail = st->lhead = st->ltail = st->fresh_mark = KVP__NONE;
        st->fresh_lo = s == 0 ? 0 : initial_blocks(p, 0);
        st->fresh_hi = st->fresh_lo + initial_blocks(p, s);
        st->nblocks = st->nvacant = st->fresh_hi - st->fresh_lo;
        st->ncached = 0;
        st->nstk = st->untallied = 0;
    }
    p->ordered = p->cfg.reuse == KVP_REUSE_LOWEST; /* free sets kept from the start
                                                       (else from kvp__order on) */
    kvp__fast_reset(p);
    p->nretired = 0;
    p->top = p->hwm = n;
    p->in_use = p->shared = p->fragmented = p->peak = p->fill_sum = 0;
    p->nindexed = 0;
    if (p->cfg.null_block) {
        p->st[0].fresh_lo = 1;
        p->st[0].nvacant--;
        kvp__init_block(p, 0, 0, KVP_BLOCK_IN_USE);
        p->blocks[0].ref = p->blocks[0].anon = 1;
        p->blocks[0].flags = KVP__F_NULL | KVP__F_EVER;
        p->in_use = p->peak = 1;
    }
}

static kvp_status validate_config(const kvp_config *c)
{
    if (c->block_size == 0 || c->block_size > 65535)
        return KVP_EINVAL;
    if (c->num_blocks > KVP_MAX_BLOCKS || c->max_blocks > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (c->max_blocks && c->num_blocks > c->max_blocks)
        return KVP_EINVAL;
    if (c->null_block && c->num_blocks == 0)
        return KVP_EINVAL;
    if ((unsigned)c->reuse > KVP_REUSE_FIFO)
        return KVP_EINVAL;
    if (c->allocator && (!c->allocator->alloc || !c->allocator->release))
        return KVP_EINVAL;
    if (c->history_len > (1u << 20))
        return KVP_EINVAL;
    if ((unsigned)c->hash_alg > KVP_HASH_CUSTOM || (c->hash_alg == KVP_HASH_CUSTOM && !c->hash_fn))
        return KVP_EINVAL;
    if (c->host_arena && !c->block_bytes[0] && !c->block_bytes[1])
        return KVP_EINVAL;
    if (c->block_bytes[1] && !c->separate_kv)
        return KVP_EINVAL;
    /* The event queue keeps capacity + 1 records (events.c), counted in 32
     * bits. */
    if (c->events && c->event_capacity == UINT32_MAX)
        return KVP_EINVAL;
    /* A stream's host arena holds block_bytes[s] for every id up to the
     * growth cap (storage.c): refused here when that size does not fit
     * size_t, so no arena size or block address computed later can wrap. */
    size_t arena;
    for (int s = 0; s < 2 && c->host_arena; s++)
        if (!kvp__mul_size(c->block_bytes[s], growth_cap(c), &arena))
            return KVP_EINVAL;
    return KVP_OK;
}

uint32_t kvp__pow2_at_least(uint32_t n)
{
    uint32_t b = 1;
    while (b < n)
        b <<= 1;
    return b;
}

/* Index buckets for `cap` blocks: the power of two in [1.5 cap, 3 cap), so
 * the load factor is at most 2/3 and the buckets cost at most 12 bytes per
 * block (above 2^30 blocks: 2^31 buckets, the most a 32-bit mask holds).
 * Publishing walks its chain to the tail and evicting walks to the block,
 * each step a read of another block's record: at load factors up to 1 (one
 * bucket per block, rounded up) that walk was most of a publish (perf: 70%
 * of kvp_publish's samples in the replay). */
uint32_t kvp__bucket_count(uint32_t cap)
{
    uint32_t want = cap > (1u << 30) ? (1u << 31) : cap + (cap + 1) / 2;
    return kvp__pow2_at_least(want);
}

static void free_arrays(kvp_pool *p)
{
    kvp__release(p, p->blocks, (size_t)p->cap * sizeof *p->blocks);
    kvp__release(p, p->hashes, (size_t)p->cap * sizeof *p->hashes);
    kvp__release(p, p->buckets, ((size_t)p->bmask + 1) * sizeof *p->buckets);
    for (int s = 0; s < 2; s++) {
        kvp__idset_free(p, &p->st[s].vacant);
        kvp__idset_free(p, &p->st[s].cached);
        kvp__release(p, p->st[s].stk, (size_t)p->st[s].stkcap * sizeof *p->st[s].stk);
    }
    kvp__idset_free(p, &p->retired);
    kvp__release(p, p->hist, (size_t)p->cfg.history_len * sizeof *p->hist);
    kvp__release(p, p->vtok, (size_t)p->cap * p->cfg.block_size * sizeof *p->vtok);
    kvp__release(p, p->vparent, (size_t)p->cap * sizeof *p->vparent);
    kvp__release(p, p->vpgen, (size_t)p->cap * sizeof *p->vpgen);
    kvp__release(p, p->gen, (size_t)p->cap * sizeof *p->gen);
    kvp__storage_free(p);
    kvp__events_free(p);
}

kvp_status kvp_pool_create(const kvp_config *cfg, kvp_pool **out)
{
    if (!cfg || !out)
        return KVP_EINVAL;
    kvp_status rc = validate_config(cfg);
    if (rc)
        return rc;
    const kvp_allocator *mem = cfg->allocator ? cfg->allocator : &kvp__std_allocator;
    kvp_pool *p = mem->alloc(mem->user, sizeof *p);
    if (!p)
        return KVP_ENOMEM;
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->mem = *mem;
    p->cfg.allocator = NULL; /* the copy in p->mem is the one used */
    p->nstreams = cfg->separate_kv ? 2 : 1;
    p->ts = cfg->thread_safe != 0;
    p->ofree = p->xfree = KVP__NONE;

    uint32_t cap = cfg->num_blocks ? cfg->num_blocks : 1;
    p->cap = cap;
    p->bmask = kvp__bucket_count(cap) - 1;
    p->blocks = kvp__zalloc(p, (size_t)cap * sizeof *p->blocks);
    p->hashes = kvp__zalloc(p, (size_t)cap * sizeof *p->hashes);
    p->buckets = kvp__zalloc(p, ((size_t)p->bmask + 1) * sizeof *p->buckets);
    p->hist = kvp__zalloc(p, (size_t)cfg->history_len * sizeof *p->hist);
    rc = (!p->blocks || !p->hashes || !p->buckets || (cfg->history_len && !p->hist))
             ? KVP_ENOMEM
             : KVP_OK;
    for (int s = 0; s < 2 && !rc; s++) {
        rc = kvp__idset_init(p, &p->st[s].vacant, s < p->nstreams ? cap : 0);
        if (!rc)
            rc = kvp__idset_init(p, &p->st[s].cached, s < p->nstreams ? cap : 0);
        if (!rc && s < p->nstreams)
            rc = kvp__stk_reserve(p, s, initial_blocks(p, s));
    }
    if (!rc)
        rc = kvp__idset_init(p, &p->retired, cap);
    if (!rc && cfg->verify_hits)
        rc = kvp__verify_reserve(p, cap, &p->vtok, &p->vparent, &p->vpgen, &p->gen);
    if (!rc)
        rc = kvp__storage_init(p);
    if (!rc)
        rc = kvp__events_init(p);
    if (!rc && cfg->random_root &&
        getrandom(p->cfg.root_seed.b, sizeof p->cfg.root_seed.b, 0) !=
            (ssize_t)sizeof p->cfg.root_seed.b)
        rc = KVP_ENOMEM;
    if (!rc && p->ts && pthread_mutex_init(&p->lock, NULL) != 0)
        rc = KVP_ENOMEM;
    if (rc) {
        free_arrays(p);
        p->mem.release(p->mem.user, p, sizeof *p);
        return rc;
    }
    p->hooked = p->ts || p->evq || (p->cfg.history_every_call && p->cfg.history_len) ||
                p->cfg.on_evict || p->cfg.copy;
    kvp__reset_blocks(p);
    *out = p;
    return KVP_OK;
}

void kvp_pool_destroy(kvp_pool *pool)
{
    if (!pool)
        return;
    if (pool->seq_clear)
        pool->seq_clear(pool);
    kvp__owners_destroy(pool);
    free_arrays(pool);
    if (pool->ts)
        pthread_mutex_destroy(&pool->lock);
    kvp_allocator mem = pool->mem;
    mem.release(mem.user, pool, sizeof *pool);
}

kvp_status kvp_pool_clear(kvp_pool *pool)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    bool had_index = pool->nindexed > 0;
    if (pool->seq_clear)
        pool->seq_clear(pool);
    kvp__owners_reset(pool);
    for (int s = 0; s < pool->nstreams; s++) {
        kvp__idset_clear(&pool->st[s].vacant);
        kvp__idset_clear(&pool->st[s].cached);
    }
    kvp__idset_clear(&pool->retired);
    memset(pool->blocks, 0, (size_t)pool->cfg.num_blocks * sizeof *pool->blocks); /* fresh again */
    memset(pool->buckets, 0, ((size_t)pool->bmask + 1) * sizeof *pool->buckets);
    kvp__reset_blocks(pool);
    memset(&pool->ctr, 0, sizeof pool->ctr);
    pool->hist_head = pool->hist_count = 0;
    /* Queued events stay (a subscriber may already know their hashes); the
     * clear that follows them makes its view empty, as the index is. */
    kvp__ev_cleared(pool);
    if (had_index)
        kvp__notify_evict(pool, NULL, KVP_NO_BLOCK);
    kvp__leave(pool, true);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Block states                                                              */
/* ------------------------------------------------------------------------ */

bool kvp__is_fresh(const kvp_pool *p, uint32_t b)
{
    for (int s = 0; s < p->nstreams; s++)
        if (b >= p->st[s].fresh_lo && b < p->st[s].fresh_hi)
            return true;
    return false;
}

/* The internal stream of block b: a fresh block's (zero) record does not
 * say it, its place in the fresh ranges does. */
int kvp__stream_of(const kvp_pool *p, uint32_t b)
{
    if (kvp__is_fresh(p, b))
        return b < p->st[0].fresh_hi ? 0 : 1;
    return p->blocks[b].stream;
}

int kvp__state(const kvp_pool *p, uint32_t b)
{
    return p->blocks[b].state; /* a fresh record is zero: VACANT */
}

/* The common id check: KVP_ERANGE for ids that do not exist or are retired,
 * KVP_EINVAL for the null block. */
kvp_status kvp__check_id(const kvp_pool *p, uint32_t b)
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
kvp_status kvp__check_in_use(const kvp_pool *p, uint32_t b)
{
    kvp_status rc = kvp__check_id(p, b);
    if (!rc && kvp__state(p, b) != KVP_BLOCK_IN_USE)
        rc = KVP_EDOUBLEFREE;
    return rc;
}

void kvp__init_block(kvp_pool *p, uint32_t b, int s, int state)
{
    kvp__block *blk = &p->blocks[b];
    blk->prev = blk->next = blk->lprev = blk->lnext = KVP__NONE;
    blk->ref = blk->anon = blk->sref = 0;
    blk->owner = blk->xhead = KVP__NONE;
    blk->hnext = 0;
    blk->fill = 0;
    blk->format = 0;
    blk->stream = (uint8_t)s;
    blk->state = (uint8_t)state;
    blk->flags = 0;
    blk->pad = 0;
}

bool kvp__is_frag(const kvp_pool *p, const kvp__block *blk)
{
    return blk->state == KVP_BLOCK_IN_USE && blk->fill > 0 && blk->fill < p->cfg.block_size;
}

/* Add (sign 1) or remove (sign -1) an in-use block's share of the gauges
 * that depend on its fill. */
void kvp__account(kvp_pool *p, const kvp__block *blk, int sign)
{
    if (!blk->fill) /* the usual case on alloc and free: no share */
        return;
    p->fragmented += (uint64_t)(int64_t)(sign * (int)kvp__is_frag(p, blk));
    p->fill_sum += (uint64_t)(int64_t)(sign * (int)blk->fill);
}

/* The last reference on block b went: account for it and free it. */
void kvp__release_block(kvp_pool *p, uint32_t b, kvp__cursor *cur)
{
    kvp__account(p, &p->blocks[b], -1);
    p->in_use--;
    kvp__free_insert(p, b, cur);
}

/* Hand out block b of stream s, which holds no content (vacant, already
 * removed from the free structures): one reference goes to `oslot`.  The
 * counts, reuse included, are the caller's, once per call (count_out).
 *
 * Only stores, no read of the record: a vacant block's fill is 0 and its
 * flags at most EVER (checked by check.c), so nothing in it needs keeping.
 * At 1M blocks the record of the block on top of the stack is often not in
 * cache; a read there stalled the take (perf: its costliest instruction),
 * stores do not wait for the line. */
static void hand_out_vacant(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s)
{
    kvp__block *blk = &p->blocks[b];
    kvp__record_in_use(blk, format);
    blk->stream = (unsigned)s;
    kvp__ref_first(p, b, oslot);
}

/* hand_out_vacant for a block whose record the caller reads anyway: its
 * EVER flag says whether this is a reuse. */
static void hand_out_counted(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s)
{
    p->ctr.reused += (p->blocks[b].flags & KVP__F_EVER) != 0;
    hand_out_vacant(p, b, oslot, format, s);
}

/* Count n blocks handed out (the call's, or the fast takes' in tally). */
static void count_out(kvp_pool *p, uint64_t n)
{
    p->ctr.blocks_allocated += n;
    p->in_use += n;
    if (p->in_use > p->peak)
        p->peak = p->in_use;
}

/* Hand out block b (already removed from the free structures) for fresh
 * content: its old content is evicted, and one reference goes to `oslot`. */
void kvp__hand_out(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format)
{
    kvp__block *blk = &p->blocks[b];
    if (blk->flags & KVP__F_PUBLISHED) { /* cached: now as if vacant */
        kvp__unindex(p, b);
        blk->fill = 0;
    }
    hand_out_counted(p, b, oslot, format, blk->stream);
    count_out(p, 1);
}

/* ------------------------------------------------------------------------ */
/* Allocation                                                                */
/* ------------------------------------------------------------------------ */

/* The slot of `owner` (not KVP_ANON), or NONE.  `hint` is a slot the
 * caller believes is owner's (kvp_take_hinted; NONE otherwise).  It is
 * trusted only after reading that the slot holds owner, which is the read
 * the lookup would end with anyway: ids are unique among used slots and
 * unused ones hold KVP_ANON, so no value of hint can pick another owner's
 * slot. */
static inline uint32_t owner_slot(const kvp_pool *p, kvp_owner owner, uint32_t hint)
{
    return hint < p->ocap && p->owners[hint].id == owner ? hint : kvp__owner_find(p, owner);
}

/* Find `owner`'s slot (owner_slot, with `hint`), or make room to create it
 * (*create set; the slot it will get is p->ofree), and room in its array
 * for n more references.  For KVP_ANON *slot is NONE.  Changes nothing
 * visible. */
static kvp_status owner_prepare(kvp_pool *p, kvp_owner owner, uint32_t hint, uint32_t n,
                                uint32_t *slot, bool *create)
{
    *create = false;
    *slot = KVP__NONE;
    if (owner == KVP_ANON)
        return KVP_OK;
    uint32_t s = owner_slot(p, owner, hint);
    if (s == KVP__NONE) {
        kvp_status rc = kvp__owner_reserve(p);
        if (rc)
            return rc;
        *create = true;
        s = p->ofree;
    }
    kvp_status rc = kvp__refs_reserve(p, s, n);
    if (!rc && !*create)
        *slot = s;
    return rc;
}

/* Make sure `need` blocks can be taken from stream s when `avail` of its
 * free blocks may be used: grow just enough if the configuration allows,
 * else count an exhausted attempt.  Changes nothing else on failure. */
kvp_status kvp__room_for(kvp_pool *p, int s, uint32_t avail, uint64_t need)
{
    if (avail >= need)
        return KVP_OK;
    uint64_t more = need - avail;
    if (!p->cfg.grow_on_exhaustion || more > kvp__max_blocks(p) - kvp__managed(p)) {
        p->ctr.exhausted++;
        return KVP_EEXHAUSTED;
    }
    kvp_status rc = kvp__grow(p, s, (uint32_t)more);
    if (!rc)
        p->ctr.grown += more;
    return rc;
}

/* Take the next free block of stream s in reuse order for fresh content,
 * with one reference for owner slot `oslot` (room checked by the caller). */
uint32_t kvp__take_block(kvp_pool *p, int s, uint32_t oslot, unsigned format)
{
    uint32_t b = kvp__pick(p, s);
    kvp__free_remove(p, b);
    kvp__hand_out(p, b, oslot, format);
    return b;
}

/* Hand out the block on top of stream s's LIFO stack array (not empty).
 * It was handed out before, since only kvp__release_block puts blocks
 * there (see kvp__free_listed): the caller counts a reuse without reading
 * its record. */
static inline uint32_t pop_top(kvp_pool *p, int s, uint32_t oslot, unsigned format)
{
    kvp__stream *st = &p->st[s];
    uint32_t b = st->stk[--st->nstk];
    kvp__fset_del(p, &st->vacant, b);
    hand_out_vacant(p, b, oslot, format, s);
    return b;
}

/* After a pop: prefetch the block the stack will hand out KVP__STK_AHEAD
 * pops later, or `next` (the q list's head) when the array holds fewer. */
static inline void prefetch_ahead(const kvp_pool *p, const kvp__stream *st, uint32_t next)
{
    uint32_t ahead = st->nstk > KVP__STK_AHEAD ? st->stk[st->nstk - 1 - KVP__STK_AHEAD] : next;
    if (ahead != KVP__NONE)
        kvp__prefetch_record(p, ahead);
}

/* Before a deferred take appends to owner slot `slot` (o): its pending
 * references start at the end of its array if it has none yet, and the
 * slot joins the dirty chain (once: a slot already there has pend set). */
static inline void defer_chain(kvp_pool *p, kvp__owner *o, uint32_t slot)
{
    if (o->pend == KVP__NONE) {
        o->pend = o->len;
        o->dnext = p->dirty;
        p->dirty = slot + 1;
    }
}

/* The fast take's hand-out to an owner: the block on top of the stack's
 * array, appended to the owner's array.  Its record is written here, as
 * kvp__hand_out would, or, with `defer` (the callers pass it in a run of
 * takes and owner frees long enough to hold KVP__DEFER_AFTER owner frees
 * or general-path takes; p->run: the fast take itself counts nothing),
 * deferred: the block becomes a pending reference, its record still that
 * of a block held in the array (vacant, used before, next STACKED), and
 * the owner's slot joins the dirty chain with its first one.
 *
 * Why defer: in a decode loop the record was the take's one cold line, and
 * kvp_free_owner's, which read it back; at 1M blocks one miss per block
 * cycle was most of the cost.  A block whose
 * owner frees it before any other call goes back to the array with its
 * record untouched (kvp__free_pending).  Every other call that could see
 * it writes the records first (kvp__enter, kvp__settle), and so do the
 * take's other paths for the owner they append to, which keeps the pending
 * references a suffix of its array (kvp__owner_settle in take_list and
 * alloc_locked).  Why only in a run: a settle writes the same record later,
 * colder, at a fixed cost per owner, so deferring costs when a settle
 * comes first.  An engine that makes another call every step (a fill, a
 * publish) runs a few takes between them and never defers; a decode loop
 * of takes and owner frees alone defers once a few sequences have ended. */
static inline uint32_t take_to_owner(kvp_pool *p, kvp__stream *st, uint32_t slot, bool defer)
{
    uint32_t b = st->stk[--st->nstk];
    kvp__owner *o = &p->owners[slot];
    if (!defer) {
        kvp__record_owned(p, b, slot, o->len, (int)(st - p->st));
        prefetch_ahead(p, st, st->qhead);
    } else {
        defer_chain(p, o, slot);
    }
    o->refs[o->len++] = b;
    return b;
}

/* The common case of kvp__take_block, for up to n blocks at once: pop the
 * LIFO stack's array, then, while the next block in reuse order is the
 * head of the q list and vacant (LIFO, or FIFO once the never-used range
 * is spent), pop that.  A take prefetches the block KVP__STK_AHEAD pops
 * ahead in the array; a list is a chain of dependent loads, so there only
 * its new head is prefetched, for the next call.  Returns how many blocks
 * it took. */
static uint32_t pop_vacant(kvp_pool *p, int s, uint32_t n, uint32_t oslot,
                           unsigned format, uint32_t *ids)
{
    kvp__stream *st = &p->st[s];
    if (p->cfg.reuse == KVP_REUSE_LOWEST ||
        (p->cfg.reuse == KVP_REUSE_FIFO && st->fresh_lo < st->fresh_hi))
        return 0;
    uint32_t i = 0;
    /* in a run, a single take by an owner defers as the fast one does (a
     * sequence's first block is taken here, as its owner is new) */
    if (n == 1 && oslot < KVP__SEQ && format == KVP_FMT_FP16 && !p->ordered &&
        p->run >= KVP__DEFER_AFTER && st->nstk)
        ids[i++] = take_to_owner(p, st, oslot, true);
    for (; i < n && st->nstk; i++)
        ids[i] = pop_top(p, s, oslot, format);
    p->ctr.reused += i;
    uint32_t from_list = i, b = st->qhead;
    for (; i < n && b != KVP__NONE && p->blocks[b].state == KVP_BLOCK_VACANT; i++) {
        uint32_t next = p->blocks[b].next;
        if (b == st->fresh_mark)
            st->fresh_mark = next;
        kvp__fset_del(p, &st->vacant, b);
        hand_out_counted(p, b, oslot, format, s);
        ids[i] = b;
        b = next;
    }
    if (i > from_list) {
        st->qhead = b;
        if (b == KVP__NONE)
            st->qtail = KVP__NONE;
    }
    if (i) {
        prefetch_ahead(p, st, b);
        st->nvacant -= i;
        count_out(p, i);
    }
    return i;
}

/* kvp__take_block n times into ids[] (room checked by the caller). */
void kvp__take_blocks(kvp_pool *p, int s, uint32_t n, uint32_t oslot, unsigned format,
                      uint32_t *ids)
{
    for (uint32_t i = pop_vacant(p, s, n, oslot, format, ids); i < n; i++)
        ids[i] = kvp__take_block(p, s, oslot, format);
}

/* Add a reference for owner slot `oslot` (NONE: anonymous) to block b, which
 * holds content: one more reference if in use; off the free list, content
 * kept, if cached.  A second owner's xref is reserved by the caller. */
void kvp__claim_block(kvp_pool *p, uint32_t b, uint32_t oslot)
{
    kvp__block *blk = &p->blocks[b];
    if (blk->state == KVP_BLOCK_CACHED) {
        kvp__free_remove(p, b);
        blk->state = KVP_BLOCK_IN_USE;
        blk->prev = blk->next = KVP__NONE;
        kvp__account(p, blk, 1);
        if (++p->in_use > p->peak)
            p->peak = p->in_use;
    }
    kvp__ref_add(p, b, oslot);
}

/* kvp_alloc's work once the arguments are checked.  `hint` (NULL: none) is
 * kvp_take_hinted's: read for the owner lookup, and set to the owner's slot
 * on success. */
static kvp_status alloc_locked(kvp_pool *p, int s, uint32_t nb, kvp_owner owner,
                               uint32_t *hint, unsigned format, kvp_block *ids)
{
    uint32_t slot;
    bool create;
    kvp_status rc = owner_prepare(p, owner, hint ? *hint : KVP__NONE, nb, &slot, &create);
    if (!rc)
        rc = kvp__room_for(p, s, p->st[s].nvacant + p->st[s].ncached, nb);
    if (rc)
        return rc;
    if (create)
        slot = kvp__owner_add(p, owner);
    else if (slot != KVP__NONE)
        kvp__owner_settle(p, slot); /* take_one enters lazily */
    kvp__take_blocks(p, s, nb, slot, format, ids);
    p->ctr.alloc_calls++;
    if (hint && slot != KVP__NONE)
        *hint = slot;
    return KVP_OK;
}

KVP__FLATTEN kvp_status kvp_alloc(kvp_pool *pool, kvp_stream stream, uint64_t tokens,
                                  kvp_owner owner,
                     unsigned format, kvp_block *ids, size_t ids_cap, size_t *n_out)
{
    if (!pool || !ids || !n_out || tokens == 0 || format > 255)
        return KVP_EINVAL;
    int s = kvp__stream_index(pool, stream);
    if (s < 0)
        return KVP_EINVAL;
    uint64_t nb = (tokens - 1) / pool->cfg.block_size + 1;
    if (nb > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (ids_cap < nb) {
        *n_out = (size_t)nb;
        return KVP_ESPACE;
    }
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = alloc_locked(pool, s, (uint32_t)nb, owner, NULL, format, ids);
    if (!rc)
        *n_out = (size_t)nb;
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* The end of a fast take out of line (take_other, take_new, take_list),
 * updating the caller's hint if there is one: kvp__leave for a pool the
 * fast path serves, which has nothing to close, record or unlock, only the
 * debug self-check. */
static inline void take_done(kvp_pool *p, uint32_t slot, uint32_t *hint)
{
    if (hint && slot != KVP__NONE)
        *hint = slot;
    self_check(p, true);
}

/* kvp_take and kvp_take_hinted's general path, which differ only in the
 * hint (NULL: none). */
static KVP__FLATTEN KVP__NOINLINE kvp_status take_one(kvp_pool *pool, kvp_stream stream,
                                                     kvp_owner owner, uint32_t *hint,
                                                     kvp_block *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    int s = kvp__stream_index(pool, stream);
    if (s < 0)
        return KVP_EINVAL;
    /* Lazy: other owners' pending references stay so (the new owner of
     * a decode step's first take would otherwise settle them all), and
     * this owner's are settled before its append (alloc_locked). */
    kvp_status rc = kvp__enter_lazy(pool);
    if (rc)
        return rc;
    rc = alloc_locked(pool, s, 1, owner, hint, KVP_FMT_FP16, out);
    if (!rc)
        pool->run++;
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* The decode step's take when the next block is not on the LIFO stack's
 * array: from the q list (FIFO order, or LIFO once the array is empty),
 * else the general path.  Out of line, as is take_other, so that take
 * below calls nothing but in tail position (six arguments at most, all in
 * registers, keep the call a tail call; the stream is found again). */
static KVP__FLATTEN KVP__NOINLINE kvp_status take_list(kvp_pool *p, uint32_t slot,
                                                      kvp_stream stream, kvp_owner owner,
                                                      uint32_t *hint, kvp_block *out)
{
    if (slot != KVP__NONE)
        kvp__owner_settle(p, slot);
    if (!pop_vacant(p, kvp__stream_index(p, stream), 1, slot, KVP_FMT_FP16, out))
        return take_one(p, stream, owner, hint, out);
    p->ctr.alloc_calls++;
    take_done(p, slot, hint);
    return KVP_OK;
}

/* The fast take's first block for an owner the pool does not hold yet, as
 * at the start of every sequence in a decode loop: when a free owner slot
 * has kept an array (its last owner's) and the stack's array a block, the
 * owner is added and the block handed out as the fast take would, counted
 * in p->run as the general path counts it.  Else the general path, which
 * makes room.  Out of line, as take_other.  This was the general path's
 * costliest case in a decode loop: a second owner lookup, the room checks,
 * and entering and leaving (about 250 instructions against 60). */
static KVP__NOINLINE kvp_status take_new(kvp_pool *p, kvp_stream stream, kvp_owner owner,
                                         uint32_t *hint, kvp_block *out)
{
    kvp__stream *st = p->fast[stream];
    if (p->ofree == KVP__NONE || !p->owners[p->ofree].cap || !st->nstk)
        return take_one(p, stream, owner, hint, out);
    uint32_t slot = kvp__owner_add(p, owner);
    *out = take_to_owner(p, st, slot, p->run >= KVP__DEFER_AFTER);
    p->run++;
    st->untallied++;
    take_done(p, slot, hint);
    return KVP_OK;
}

/* The decode step's takes, inline in kvp_take, kvp_take_hinted (n = 1)
 * and kvp_take_each, for a stream the fast path may serve (p->fast:
 * nothing hooked, so no lock, events, history or callbacks to run, and no
 * free sets kept).  Takes i, i+1, ... as kvp_take_each numbers them, while
 * each is the usual case: a run (so the record is deferred, as
 * take_to_owner does), an existing owner found by its hint (or, without
 * hints, by lookup) with room in its array, and a block on top of the LIFO
 * stack's array.  That is the general path's own lookup (owner_slot) minus
 * the checks these conditions settle.  Returns the first take it declines
 * (n if none), for take_other.
 *
 * The stack's size, and what the takes read of the pool, stay in registers
 * between takes and go back to the stream once at the end: stored and
 * reloaded by every take, the size would make a chain of dependent memory
 * operations through the whole decode loop. */
static inline __attribute__((always_inline)) size_t
take_run(kvp_pool *pool, kvp__stream *st, const kvp_owner *owners, uint32_t *hints,
         const uint32_t *rows, size_t i, size_t n, kvp_block *out)
{
    if (pool->run < KVP__DEFER_AFTER)
        return i;
    kvp__owner *own = pool->owners;
    uint32_t ocap = pool->ocap, *stk = st->stk, nstk = st->nstk;
    size_t first = i;
    for (; i < n; i++) {
        size_t r = rows ? rows[i] : i;
        kvp_owner id = owners[r];
        if (id == KVP_ANON)
            break;
        uint32_t slot = hints ? hints[r] : kvp__owner_find(pool, id); /* NONE >= ocap */
        /* kvp__refs_reserve's room test, for an owner known to exist */
        if (slot >= ocap || own[slot].id != id || own[slot].len >= own[slot].cap || !nstk)
            break;
        kvp__owner *o = &own[slot];
        uint32_t b = stk[--nstk];
        defer_chain(pool, o, slot);
        o->refs[o->len++] = b;
        out[i] = b;
    }
    st->nstk = nstk;
    st->untallied += (uint32_t)(i - first);
    return i;
}

/* One take take_run declined, on a stream the fast path serves: a new
 * owner (take_new), a full array (take_one, which grows it), an empty
 * stack's array (take_list), else the top of the stack's array with its
 * record written, taken anonymously or outside a run.  Out of line, so
 * that the takes that inline take_run save no registers for it (six saved
 * and restored took 12 of the take's 75 instructions). */
static KVP__NOINLINE kvp_status take_other(kvp_pool *p, kvp_stream stream, kvp_owner owner,
                                           uint32_t *hint, kvp_block *out)
{
    kvp__stream *st = p->fast[stream];
    uint32_t slot = KVP__NONE;
    if (owner != KVP_ANON) {
        slot = owner_slot(p, owner, hint ? *hint : KVP__NONE);
        if (slot == KVP__NONE)
            return take_new(p, stream, owner, hint, out);
        if (p->owners[slot].len >= p->owners[slot].cap)
            return take_one(p, stream, owner, hint, out);
    }
    if (!st->nstk)
        return take_list(p, slot, stream, owner, hint, out);
    if (slot != KVP__NONE) {
        *out = take_to_owner(p, st, slot, p->run >= KVP__DEFER_AFTER);
    } else {
        *out = pop_top(p, (int)(st - p->st), slot, KVP_FMT_FP16);
        prefetch_ahead(p, st, st->qhead);
    }
    st->untallied++;
    take_done(p, slot, hint);
    return KVP_OK;
}

/* kvp_take and kvp_take_hinted: take_run for one take when p->fast allows
 * it, else take_other or the general path. */
static inline kvp_status take(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                              uint32_t *hint, kvp_block *out)
{
    kvp__stream *st;
    if (!pool || !out || (unsigned)stream > KVP_STREAM_V || !(st = pool->fast[stream]))
        return take_one(pool, stream, owner, hint, out);
    if (!take_run(pool, st, &owner, hint, NULL, 0, 1, out))
        return take_other(pool, stream, owner, hint, out);
    self_check(pool, true);
    return KVP_OK;
}

KVP__FLATTEN kvp_status kvp_take(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                                 kvp_block *out)
{
    return take(pool, stream, owner, NULL, out);
}

KVP__FLATTEN kvp_status kvp_take_hinted(kvp_pool *pool, kvp_stream stream, kvp_owner owner,
                                        uint32_t *hint, kvp_block *out)
{
    if (!hint)
        return KVP_EINVAL;
    return take(pool, stream, owner, hint, out);
}

/* kvp_take_each's takes: runs of take_run with take_other between them on
 * a stream the fast path serves (st), or take_one for each take on one it
 * does not (st NULL).  Inlined for the usual arguments (hints and rows
 * given: then no take tests either) and once for the rest. */
static inline __attribute__((always_inline)) kvp_status
take_each(kvp_pool *pool, kvp__stream *st, kvp_stream stream, const kvp_owner *owners,
          uint32_t *hints, const uint32_t *rows, size_t n, kvp_block *out, size_t *n_taken)
{
    kvp_status rc = KVP_OK;
    size_t i = 0;
    while ((i = st ? take_run(pool, st, owners, hints, rows, i, n, out) : i) < n) {
        size_t r = rows ? rows[i] : i;
        uint32_t *hint = hints ? &hints[r] : NULL;
        rc = st ? take_other(pool, stream, owners[r], hint, &out[i])
                : take_one(pool, stream, owners[r], hint, &out[i]);
        if (rc != KVP_OK)
            break;
        i++;
    }
    if (st) /* take_other and take_one end their own takes */
        self_check(pool, i > 0);
    *n_taken = i;
    return rc;
}

/* A decode step's takes in one call: each is the take kvp_take_hinted
 * makes, so a batch and the same calls one by one leave the pool in the
 * same state; the arguments and the fast path's stream are checked once. */
KVP__FLATTEN kvp_status kvp_take_each(kvp_pool *pool, kvp_stream stream, const kvp_owner *owners,
                                      uint32_t *hints, const uint32_t *rows, size_t n,
                                      kvp_block *out, size_t *n_taken)
{
    if (!n_taken)
        return KVP_EINVAL;
    *n_taken = 0;
    if (!pool || (n && (!owners || !out)) || kvp__stream_index(pool, stream) < 0)
        return KVP_EINVAL;
    kvp__stream *st = pool->fast[stream];
    if (st && hints && rows)
        return take_each(pool, st, stream, owners, hints, rows, n, out, n_taken);
    return take_each(pool, st, stream, owners, hints, rows, n, out, n_taken);
}

kvp_status kvp_take_id(kvp_pool *pool, kvp_block id, kvp_owner owner)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot;
    bool create;
    rc = kvp__check_id(pool, id);
    if (!rc && kvp__state(pool, id) == KVP_BLOCK_IN_USE)
        rc = KVP_EBUSY;
    if (!rc)
        rc = owner_prepare(pool, owner, KVP__NONE, 1, &slot, &create);
    if (!rc) {
        if (create)
            slot = kvp__owner_add(pool, owner);
        kvp__free_remove(pool, id);
        kvp__hand_out(pool, id, slot, KVP_FMT_FP16);
        pool->ctr.alloc_calls++;
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Claim and free                                                            */
/* ------------------------------------------------------------------------ */

KVP__FLATTEN kvp_status kvp_claim(kvp_pool *pool, kvp_block id, kvp_owner owner)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = KVP__NONE;
    bool create = false;
    rc = kvp__check_id(pool, id);
    int state = rc ? 0 : kvp__state(pool, id);
    if (!rc && state == KVP_BLOCK_VACANT)
        rc = KVP_ENOTFOUND;
    /* The reference count is 32 bits, and anonymous claims cost no memory
     * that would run out first: the one past UINT32_MAX is refused. */
    if (!rc && pool->blocks[id].ref == UINT32_MAX)
        rc = KVP_EINVAL;
    if (!rc)
        rc = owner_prepare(pool, owner, KVP__NONE, 1, &slot, &create);
    /* A second owner on a block needs an xref node. */
    if (!rc && owner != KVP_ANON && state == KVP_BLOCK_IN_USE &&
        pool->blocks[id].owner != KVP__NONE)
        rc = kvp__xref_reserve(pool, 1);
    if (!rc) {
        if (create)
            slot = kvp__owner_add(pool, owner);
        kvp__claim_block(pool, id, slot);
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

/* kvp_free's check of one id outside the usual case: it exists, is in use,
 * and the owner holds as many references on it as it is named so far in this
 * call.  Marks the block (its count lives in the LRU link, which a block in
 * use does not need) unless the id itself is refused; *marked says which. */
KVP__COLD static kvp_status check_named(kvp_pool *p, uint32_t b, uint32_t oslot, kvp_owner owner,
                                        bool *marked)
{
    *marked = false;
    kvp_status rc = kvp__check_in_use(p, b);
    if (rc)
        return rc;
    kvp__block *blk = &p->blocks[b];
    if (!(blk->flags & KVP__F_MARK)) {
        blk->flags |= KVP__F_MARK;
        blk->count = 0;
    }
    *marked = true;
    uint32_t times = ++blk->count;
    if (times > blk->ref)
        return KVP_EDOUBLEFREE;
    uint32_t held = owner == KVP_ANON ? blk->anon
                    : oslot == KVP__NONE ? 0
                                         : kvp__refs_held(p, b, oslot);
    return times > held ? KVP_ENOTOWNER : KVP_OK;
}

KVP__FLATTEN kvp_status kvp_free(kvp_pool *pool, const kvp_block *ids, size_t n,
                                 kvp_owner owner)
{
    if (!pool || (!ids && n))
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    uint32_t slot = owner == KVP_ANON ? KVP__NONE : kvp__owner_find(pool, owner);
    /* Check everything first, in one pass, marking each block named (see
     * check_named); then drop the references, unmarking. */
    for (size_t j = 0; j < n && j < KVP__PREFETCH; j++)
        kvp__prefetch_block(pool, ids[j]);
    size_t i = 0;
    for (; i < n; i++) {
        if (i + KVP__PREFETCH < n)
            kvp__prefetch_block(pool, ids[i + KVP__PREFETCH]);
        kvp__block *blk = ids[i] < pool->top ? &pool->blocks[ids[i]] : NULL;
        /* The usual case, decided in one test: first naming of a block in use
         * (not the null block) on which the caller holds a reference. */
        if (blk && blk->state == KVP_BLOCK_IN_USE &&
            !(blk->flags & (KVP__F_MARK | KVP__F_NULL)) &&
            (slot == KVP__NONE ? owner == KVP_ANON && blk->anon : blk->owner == slot)) {
            blk->flags |= KVP__F_MARK;
            blk->count = 1;
            continue;
        }
        bool marked;
        if ((rc = check_named(pool, ids[i], slot, owner, &marked))) {
            i += marked; /* a marked one is unmarked below with the rest */
            break;
        }
    }
    if (rc) {
        while (i-- > 0)
            pool->blocks[ids[i]].flags &= (uint8_t)~KVP__F_MARK;
    } else if (n) {
        kvp__cursor cur = KVP__CURSOR(n);
        for (i = 0; i < n; i++) {
            uint32_t b = ids[i];
            pool->blocks[b].flags &= (uint8_t)~KVP__F_MARK;
            kvp__ref_drop(pool, b, slot);
            if (pool->blocks[b].ref == 0)
                kvp__release_block(pool, b, &cur);
        }
        kvp__free_end(pool, &cur);
        if (slot != KVP__NONE && kvp__owner_live(&pool->owners[slot]) == 0 &&
            !pool->owners[slot].registered)
            kvp__owner_remove(pool, slot);
        pool->ctr.free_calls++;
        pool->ctr.blocks_freed += n;
    }
    kvp__leave(pool, rc == KVP_OK && n > 0);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Fill, counts, block info                                                  */
/* ------------------------------------------------------------------------ */

kvp_status kvp_set_fill(kvp_pool *pool, kvp_block id, uint32_t fill)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = kvp__check_id(pool, id);
    if (!rc && fill > pool->cfg.block_size)
        rc = KVP_EINVAL;
    if (!rc && kvp__state(pool, id) != KVP_BLOCK_IN_USE)
        rc = KVP_EDOUBLEFREE;
    if (!rc) {
        kvp__block *blk = &pool->blocks[id];
        kvp__account(pool, blk, -1);
        blk->fill = (uint16_t)fill;
        kvp__account(pool, blk, 1);
    }
    kvp__leave(pool, rc == KVP_OK);
    return rc;
}

kvp_status kvp_free_count(kvp_pool *pool, kvp_stream stream, uint32_t *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    *out = pool->st[s].nvacant + pool->st[s].ncached;
    kvp__leave(pool, false);
    return KVP_OK;
}

KVP__FLATTEN kvp_status kvp_peek_next(kvp_pool *pool, kvp_stream stream, kvp_block *next)
{
    if (!pool || !next)
        return KVP_EINVAL;
    int s;
    kvp_status rc = kvp__enter_stream(pool, stream, &s);
    if (rc)
        return rc;
    uint32_t b = kvp__pick(pool, s);
    *next = b == KVP__NONE ? KVP_NO_BLOCK : b;
    kvp__leave(pool, false);
    return KVP_OK;
}

static kvp_stream public_stream(const kvp_pool *p, int s)
{
    return p->nstreams == 1 ? KVP_STREAM_SHARED : (kvp_stream)(s + 1);
}

kvp_status kvp_block_get(kvp_pool *pool, kvp_block id, kvp_block_info *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    if (id >= pool->hwm) {
        kvp__leave(pool, false);
        return KVP_ERANGE;
    }
    memset(out, 0, sizeof *out);
    out->owner = KVP_ANON;
    if (id >= pool->top) {
        out->state = KVP_BLOCK_RETIRED;
        out->stream = public_stream(pool, pool->blocks[id].stream);
    } else if (kvp__is_fresh(pool, id)) {
        out->state = KVP_BLOCK_VACANT;
        out->stream = public_stream(pool, kvp__stream_of(pool, id));
    } else {
        const kvp__block *blk = &pool->blocks[id];
        out->state = blk->state;
        out->stream = public_stream(pool, blk->stream);
        out->format = blk->format;
        out->ref_count = blk->ref;
        out->anon_refs = blk->anon;
        out->seq_refs = blk->sref;
        out->fill = blk->fill;
        out->published = (blk->flags & KVP__F_PUBLISHED) != 0;
        out->ever_allocated = (blk->flags & KVP__F_EVER) != 0;
        out->is_null = (blk->flags & KVP__F_NULL) != 0;
        if (blk->owner != KVP__NONE)
            out->owner = pool->owners[blk->owner].id;
        if (out->published)
            out->hash = pool->hashes[id];
    }
    kvp__leave(pool, false);
    return KVP_OK;
}
