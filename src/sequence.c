/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sequence.c — per-request block tables: admit, append, truncate, fork,
 * destroy.
 *
 * What it owns: the sequence registry (request id -> sequence), each
 * sequence's block table, block hashes, the tokens of its partial last block,
 * and a copy of its extra keys.
 *
 * Sequences are a client of the pool like an engine would be: they hold
 * references of their own kind (KVP__SEQ: neither an owner's nor anonymous,
 * so no owner call or kvp_free can drop them) and take, claim, publish,
 * look up and drop blocks through the internal client interface
 * (client.h), which the public takes and frees use too; besides it they
 * call only hashing (hashing.h), block bytes (storage.h) and their
 * registry's map (map.h).  The pool knows nothing of them
 * except two hooks registered here: relocation (rewrite tables when
 * kvp_retire_top moves a block) and clear (drop every sequence).
 *
 * Why records are recycled: an engine creates and destroys a sequence per
 * request, so a destroyed sequence's record, with its arrays, waits on the
 * registry's spare list for the next create or fork.  In steady state a
 * request allocates nothing; the spares never outnumber the most sequences
 * that were ever live at once, and go with kvp_pool_clear / destroy.
 *
 * Why only the partial block's tokens are kept: a full block is summed up by
 * its hash, and the next block's hash needs only that parent hash and its own
 * tokens.  Hashing runs before the pool lock is taken (it is pure), and
 * every call checks that it can finish (free blocks, memory) before it
 * changes anything, so a refused call leaves ref counts and the index as
 * they were.
 *
 * Invariants: ntokens fits the table: nblocks == ceil(ntokens / block_size);
 * nhashes == ntokens / block_size; every block in the table is in use and
 * holds one sequence reference per appearance; blocks [0, nhashes) are
 * full, the last block's fill is ntokens % block_size (or full).
 */
#include "client.h" /* with guard.h and mem.h: every client enters, leaves and allocates */
#include "hashing.h"
#include "map.h" /* the registry */
#include "storage.h"

struct kvp_seq {
    kvp_pool *pool;
    uint64_t id;
    uint32_t index;      /* position in the registry's array */
    uint32_t *blocks;
    kvp_hash *hashes;    /* of the full blocks */
    size_t nblocks, nhashes, cap; /* cap: capacity of blocks and hashes */
    size_t ntokens;
    uint32_t *tail;      /* 2 x block_size: partial block tokens, scratch */
    kvp_extra_keys extra;
    bool has_extra;
    void *extra_mem;
    size_t extra_cap;    /* bytes at extra_mem */
    kvp_seq *next_spare; /* on the registry's spare list */
};

typedef struct registry {
    kvp__map map;        /* request id -> index in seqs */
    kvp_seq **seqs;
    uint32_t n, cap;
    kvp_seq *spare;      /* destroyed records, arrays kept, for reuse */
} registry;

/* ------------------------------------------------------------------------ */
/* Registry and hooks                                                        */
/* ------------------------------------------------------------------------ */

static void seq_free(kvp_pool *p, kvp_seq *q)
{
    kvp__release(p, q->blocks, q->cap * sizeof *q->blocks);
    kvp__release(p, q->hashes, q->cap * sizeof *q->hashes);
    kvp__release(p, q->tail, 2 * (size_t)p->cfg.block_size * sizeof *q->tail);
    kvp__release(p, q->extra_mem, q->extra_cap);
    kvp__release(p, q, sizeof *q);
}

/* Put an empty record (no blocks, not registered) on the spare list. */
static void seq_retire(kvp_pool *p, kvp_seq *q)
{
    registry *r = p->seq.reg;
    q->next_spare = r->spare;
    r->spare = q;
}

/* Relocation hook: every table entry naming `from` now names `to`.  This
 * walks all live sequences (relocation is rare: a shrinking boundary). */
static void on_relocate(kvp_pool *p, uint32_t from, uint32_t to)
{
    registry *r = p->seq.reg;
    for (uint32_t i = 0; i < r->n; i++)
        for (size_t k = 0; k < r->seqs[i]->nblocks; k++)
            if (r->seqs[i]->blocks[k] == from)
                r->seqs[i]->blocks[k] = to;
}

/* Clear hook (kvp_pool_clear, kvp_pool_destroy): the pool's blocks are being
 * reset wholesale, so the sequences just go. */
static void on_clear(kvp_pool *p)
{
    registry *r = p->seq.reg;
    for (uint32_t i = 0; i < r->n; i++)
        seq_free(p, r->seqs[i]);
    while (r->spare) {
        kvp_seq *q = r->spare;
        r->spare = q->next_spare;
        seq_free(p, q);
    }
    kvp__map_free(p, &r->map);
    kvp__release(p, r->seqs, r->cap * sizeof *r->seqs);
    kvp__release(p, r, sizeof *r);
    p->seq.reg = NULL;
    p->seq.relocate = NULL;
    p->seq.clear = NULL;
}

/* Room for one more sequence in the registry (created on first use). */
static kvp_status registry_reserve(kvp_pool *p)
{
    if (!p->seq.reg) {
        registry *r = kvp__zalloc(p, sizeof *r);
        if (!r)
            return KVP_ENOMEM;
        p->seq.reg = r;
        p->seq.relocate = on_relocate;
        p->seq.clear = on_clear;
    }
    registry *r = p->seq.reg;
    if (r->n == r->cap) {
        uint32_t ncap = r->cap ? r->cap * 2 : 16;
        kvp_seq **ns = kvp__alloc(p, ncap * sizeof *ns);
        if (!ns)
            return KVP_ENOMEM;
        if (r->n)
            memcpy(ns, r->seqs, r->n * sizeof *ns);
        kvp__release(p, r->seqs, r->cap * sizeof *r->seqs);
        r->seqs = ns;
        r->cap = ncap;
    }
    return kvp__map_reserve(p, &r->map, 1);
}

static void registry_add(kvp_pool *p, kvp_seq *q)
{
    registry *r = p->seq.reg;
    q->index = r->n;
    r->seqs[r->n++] = q;
    kvp__map_put(&r->map, q->id, q->index);
}

static void registry_remove(kvp_pool *p, kvp_seq *q)
{
    registry *r = p->seq.reg;
    kvp__map_del(&r->map, q->id);
    kvp_seq *last = r->seqs[--r->n];
    if (last != q) { /* move the last one into q's place */
        r->seqs[q->index] = last;
        kvp__map_del(&r->map, last->id);
        kvp__map_put(&r->map, last->id, q->index);
        last->index = q->index;
    }
}

static kvp_seq *registry_find(const kvp_pool *p, uint64_t id)
{
    const registry *r = p->seq.reg;
    uint32_t i = r ? kvp__map_get(&r->map, id) : KVP__NONE;
    return i == KVP__NONE ? NULL : r->seqs[i];
}

/* ------------------------------------------------------------------------ */
/* Sequence memory                                                           */
/* ------------------------------------------------------------------------ */

/* Copy extra keys (or none) into memory owned by the sequence, reusing what
 * it already has when that is large enough.  Changes nothing on failure. */
static kvp_status copy_extra(kvp_pool *p, kvp_seq *q, const kvp_extra_keys *x)
{
    q->has_extra = false;
    if (!x)
        return KVP_OK;
    kvp_status rc = kvp__extra_valid(x);
    if (rc)
        return rc;
    size_t name = x->lora_name ? strlen(x->lora_name) + 1 : 0;
    size_t bytes = x->n_mm * sizeof *x->mm + x->salt_len + name;
    if (bytes > q->extra_cap) {
        void *nm = kvp__alloc(p, bytes);
        if (!nm)
            return KVP_ENOMEM;
        kvp__release(p, q->extra_mem, q->extra_cap);
        q->extra_mem = nm;
        q->extra_cap = bytes;
    }
    uint8_t *m = q->extra_mem;
    q->extra = *x;
    q->has_extra = true;
    if (x->n_mm) {
        memcpy(m, x->mm, x->n_mm * sizeof *x->mm);
        q->extra.mm = (const kvp_mm_span *)m;
        m += x->n_mm * sizeof *x->mm;
    }
    if (x->salt_len) {
        memcpy(m, x->salt, x->salt_len);
        q->extra.salt = m;
        m += x->salt_len;
    }
    if (name) {
        memcpy(m, x->lora_name, name);
        q->extra.lora_name = (const char *)m;
    }
    return KVP_OK;
}

static const kvp_extra_keys *extra_of(const kvp_seq *q)
{
    return q->has_extra ? &q->extra : NULL;
}

/* Room for `nblocks` blocks and hashes; doubling; invisible on failure. */
static kvp_status seq_reserve(kvp_pool *p, kvp_seq *q, size_t nblocks)
{
    if (nblocks <= q->cap)
        return KVP_OK;
    size_t ncap = q->cap ? q->cap * 2 : 8;
    while (ncap < nblocks)
        ncap *= 2;
    uint32_t *nb = kvp__alloc(p, ncap * sizeof *nb);
    kvp_hash *nh = kvp__alloc(p, ncap * sizeof *nh);
    if (!nb || !nh) {
        kvp__release(p, nb, ncap * sizeof *nb);
        kvp__release(p, nh, ncap * sizeof *nh);
        return KVP_ENOMEM;
    }
    if (q->nblocks)
        memcpy(nb, q->blocks, q->nblocks * sizeof *nb);
    if (q->nhashes)
        memcpy(nh, q->hashes, q->nhashes * sizeof *nh);
    kvp__release(p, q->blocks, q->cap * sizeof *q->blocks);
    kvp__release(p, q->hashes, q->cap * sizeof *q->hashes);
    q->blocks = nb;
    q->hashes = nh;
    q->cap = ncap;
    return KVP_OK;
}

/* An empty sequence record with room for `nblocks` blocks and a copy of
 * `x`, not yet registered: a spare when there is one, else new memory.  On
 * failure nothing is allocated and the spare list is as it was. */
static kvp_status seq_new(kvp_pool *p, uint64_t id, const kvp_extra_keys *x, size_t nblocks,
                          kvp_seq **out)
{
    registry *r = p->seq.reg;
    kvp_seq *q = r->spare;
    if (q) {
        r->spare = q->next_spare;
    } else {
        q = kvp__zalloc(p, sizeof *q);
        if (!q)
            return KVP_ENOMEM;
        q->pool = p;
        q->tail = kvp__alloc(p, 2 * (size_t)p->cfg.block_size * sizeof *q->tail);
    }
    kvp_status rc = q->tail ? copy_extra(p, q, x) : KVP_ENOMEM;
    if (!rc)
        rc = seq_reserve(p, q, nblocks);
    if (rc) {
        if (q->tail)
            seq_retire(p, q);
        else
            seq_free(p, q);
        return rc;
    }
    kvp__assert(q->nblocks == 0 && q->nhashes == 0 && q->ntokens == 0);
    q->id = id;
    *out = q;
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Pool operations on behalf of sequences                                    */
/* ------------------------------------------------------------------------ */

/* A fresh block (one sequence reference) for a sequence. */
static uint32_t take_block(kvp_pool *p)
{
    return kvp__client_take(p, 0, KVP__SEQ, KVP_FMT_FP16);
}

/* Publish full block i of q (its hash is q->hashes[i], its tokens `tokens`). */
static void publish_block(kvp_pool *p, kvp_seq *q, size_t i, const uint32_t *tokens)
{
    uint32_t b = q->blocks[i];
    if (!p->cfg.prefix_caching || kvp__client_published(p, b))
        return;
    kvp__pubinfo info = {i ? q->blocks[i - 1] : KVP__NONE, i ? &q->hashes[i - 1] : NULL, tokens,
                         extra_of(q), i * p->cfg.block_size};
    kvp__client_publish(p, b, &q->hashes[i], &info);
}

/* Drop the sequence's references, last block first. */
static void release_all(kvp_pool *p, kvp_seq *q)
{
    kvp__client_drop_each(p, q->blocks, q->nblocks, KVP__SEQ);
    p->ctr.blocks_freed += q->nblocks;
    q->nblocks = q->nhashes = q->ntokens = 0;
}

/* Would one more sequence reference per appearance in q's table wrap a
 * block's 32-bit reference count?  Counts the appearances in the blocks'
 * per-call counters (q's blocks are in use), marking and unmarking them. */
static bool refs_would_wrap(kvp_pool *p, const kvp_seq *q)
{
    bool wrap = false;
    for (size_t i = 0; i < q->nblocks; i++) {
        uint32_t b = q->blocks[i];
        wrap |= kvp__client_refs(p, b) > UINT32_MAX - kvp__client_tally(p, b);
    }
    for (size_t i = 0; i < q->nblocks; i++)
        kvp__client_unmark(p, q->blocks[i]);
    return wrap;
}

/* A new, unregistered sequence `id` with a copy of `x` and room for the
 * blocks of `parent` (NULL: none), with a registry slot reserved for it.
 * Refused with KVP_EOWNERACTIVE when sequence `id` exists, and with
 * KVP_EINVAL when taking a reference to each of parent's blocks would wrap a
 * block's count. */
static kvp_status seq_open(kvp_pool *p, uint64_t id, const kvp_extra_keys *x,
                           const kvp_seq *parent, kvp_seq **q)
{
    if (registry_find(p, id))
        return KVP_EOWNERACTIVE;
    if (parent && refs_would_wrap(p, parent))
        return KVP_EINVAL;
    kvp_status rc = registry_reserve(p);
    return rc ? rc : seq_new(p, id, x, parent ? parent->nblocks : 0, q);
}

/* ------------------------------------------------------------------------ */
/* Public calls                                                              */
/* ------------------------------------------------------------------------ */

kvp_status kvp_seq_create(kvp_pool *pool, uint64_t request_id, const kvp_extra_keys *extra,
                          kvp_seq **out)
{
    if (!pool || !out || pool->nstreams != 1)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp_seq *q = NULL;
    rc = seq_open(pool, request_id, extra, NULL, &q);
    if (!rc) {
        registry_add(pool, q);
        *out = q;
    }
    kvp__leave(pool, false);
    return rc;
}

kvp_status kvp_seq_find(kvp_pool *pool, uint64_t request_id, kvp_seq **out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp_seq *q = registry_find(pool, request_id);
    if (q)
        *out = q;
    else
        rc = KVP_ENOTFOUND;
    kvp__leave(pool, false);
    return rc;
}

KVP__FLATTEN kvp_status kvp_seq_destroy(kvp_seq *seq)
{
    if (!seq)
        return KVP_EINVAL;
    kvp_pool *p = seq->pool;
    kvp_status rc = kvp__enter(p);
    if (rc)
        return rc;
    bool changed = seq->nblocks > 0;
    release_all(p, seq);
    p->ctr.free_calls += changed;
    registry_remove(p, seq);
    seq_retire(p, seq);
    kvp__leave(p, changed);
    return KVP_OK;
}

/* Raising whole prefixes only (kvpool.h): each block is raised together with
 * every block before it in the sequence, its prefix, so a parent's priority
 * stays at least its child's. */
kvp_status kvp_seq_raise_priority(kvp_seq *seq, size_t n_blocks, unsigned priority)
{
    if (!seq)
        return KVP_EINVAL;
    kvp_pool *p = seq->pool;
    if (priority > KVP_PRIORITY_MAX || p->cfg.reuse == KVP_REUSE_FIFO)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(p);
    if (rc)
        return rc;
    size_t n = n_blocks < seq->nblocks ? n_blocks : seq->nblocks;
    bool changed = false;
    for (size_t i = 0; i < n; i++)
        changed |= kvp__client_raise(p, seq->blocks[i], priority);
    kvp__leave(p, changed);
    return KVP_OK;
}

/* Start admitting (or probing) tokens[0..n) into seq: the block count, room
 * in seq's arrays, the full blocks' hashes (pure, so before the lock, into
 * seq's arrays, which only become meaningful when ntokens does), then the
 * lock.  A call from a callback is refused first: the outer call owns those
 * arrays.  On KVP_OK the caller holds the lock. */
static kvp_status admit_enter(kvp_seq *seq, const uint32_t *tokens, size_t n, size_t *nblocks)
{
    if (!seq || !tokens || n == 0)
        return KVP_EINVAL;
    kvp_pool *p = seq->pool;
    size_t bs = p->cfg.block_size;
    *nblocks = n / bs + (n % bs != 0); /* no overflow */
    if (*nblocks > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (seq->ntokens || kvp__client_in_callback(p))
        return KVP_EBUSY;
    kvp_status rc = seq_reserve(p, seq, *nblocks);
    if (!rc && p->cfg.prefix_caching)
        rc = kvp__hash_chain(p, tokens, n / bs, extra_of(seq), seq->hashes, 0);
    return rc ? rc : kvp__enter(p);
}

/* Under the lock: the longest cached prefix of tokens[0..n), leaving at least
 * one token to compute, into seq->blocks[0..k); returns k.  *matched_free
 * receives how many distinct matched blocks are cached (free): claiming them
 * takes them off the free list. */
static size_t match_prefix(kvp_pool *p, kvp_seq *seq, const uint32_t *tokens, size_t n,
                           uint32_t *matched_free)
{
    size_t bs = p->cfg.block_size;
    size_t max_hit = p->cfg.prefix_caching ? (n - 1) / bs : 0, k = 0;
    for (uint32_t parent = KVP__NONE; k < max_hit; k++) {
        uint32_t b = kvp__client_lookup(p, 0, &seq->hashes[k], parent, tokens + k * bs);
        /* A block that could not take one more reference for each time it
         * may be named here (k earlier matches and this one) without its
         * 32-bit count wrapping is a miss. */
        if (b == KVP__NONE || kvp__client_refs(p, b) > UINT32_MAX - 1 - k)
            break;
        seq->blocks[k] = parent = b;
    }
    /* Count each cached block once (a mark flag catches repeats). */
    uint32_t nfree = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t b = seq->blocks[i];
        nfree += kvp__client_cached(p, b) && kvp__client_mark(p, b);
    }
    for (size_t i = 0; i < k; i++)
        kvp__client_unmark(p, seq->blocks[i]);
    *matched_free = nfree;
    return k;
}

KVP__FLATTEN kvp_status kvp_seq_admit(kvp_seq *seq, const uint32_t *tokens, size_t n,
                                      size_t *cached_tokens)
{
    size_t nblocks;
    kvp_status rc = admit_enter(seq, tokens, n, &nblocks);
    if (rc)
        return rc;
    kvp_pool *p = seq->pool;
    size_t bs = p->cfg.block_size, nfull = n / bs;
    size_t max_hit = p->cfg.prefix_caching ? (n - 1) / bs : 0;
    uint32_t matched_free;
    size_t k = match_prefix(p, seq, tokens, n, &matched_free);
    uint32_t avail = kvp__client_free_blocks(p, 0) - matched_free;
    rc = kvp__client_room(p, 0, avail, nblocks - k);
    if (!rc) {
        for (size_t i = 0; i < k; i++)
            kvp__client_claim(p, seq->blocks[i], KVP__SEQ);
        for (size_t i = k; i < nblocks; i++)
            seq->blocks[i] = take_block(p);
        for (size_t i = k; i < nblocks; i++)
            kvp__client_fill(p, seq->blocks[i], i < nfull ? (uint32_t)bs : (uint32_t)(n % bs));
        seq->nblocks = nblocks;
        seq->nhashes = p->cfg.prefix_caching ? nfull : 0;
        seq->ntokens = n;
        for (size_t i = k; i < seq->nhashes; i++)
            publish_block(p, seq, i, tokens + i * bs);
        memcpy(seq->tail, tokens + nfull * bs, (n - nfull * bs) * sizeof *tokens);
        p->ctr.prefix_queries += max_hit;
        p->ctr.prefix_hits += k;
        p->ctr.admitted_tokens += n;
        p->ctr.alloc_calls++;
        if (cached_tokens)
            *cached_tokens = k * bs;
    }
    kvp__leave(p, rc == KVP_OK);
    return rc;
}

kvp_status kvp_seq_probe(kvp_seq *seq, const uint32_t *tokens, size_t n, size_t *cached_tokens,
                         size_t *blocks_needed)
{
    if (!cached_tokens || !blocks_needed)
        return KVP_EINVAL;
    size_t nblocks;
    kvp_status rc = admit_enter(seq, tokens, n, &nblocks);
    if (rc)
        return rc;
    kvp_pool *p = seq->pool;
    uint32_t matched_free;
    size_t k = match_prefix(p, seq, tokens, n, &matched_free);
    *cached_tokens = k * p->cfg.block_size;
    *blocks_needed = nblocks - k + matched_free;
    kvp__leave(p, false);
    return KVP_OK;
}

/* The tokens of full block `i` of an append: the first one that completes
 * the old partial block is assembled in the scratch half of tail; later
 * ones lie whole in the caller's array. */
static const uint32_t *block_tokens(const kvp_seq *q, size_t bs, size_t i, size_t first,
                                    const uint32_t *tokens, size_t old_fill)
{
    if (i == first && old_fill)
        return q->tail + bs;
    return tokens + (i - first) * bs - old_fill;
}

KVP__FLATTEN kvp_status kvp_seq_append(kvp_seq *seq, const uint32_t *tokens, size_t n)
{
    if (!seq || (!tokens && n))
        return KVP_EINVAL;
    kvp_pool *p = seq->pool;
    if (kvp__client_in_callback(p))
        return KVP_EBUSY; /* before touching the sequence's arrays */
    if (n == 0)
        return KVP_OK;
    size_t bs = p->cfg.block_size;
    if (n > SIZE_MAX - seq->ntokens)
        return KVP_EINVAL;
    size_t old_fill = seq->ntokens % bs;
    size_t total = seq->ntokens + n;
    size_t nfull = total / bs, nblocks = nfull + (total % bs != 0);
    if (nblocks > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    kvp_status rc = seq_reserve(p, seq, nblocks);
    if (rc)
        return rc;
    /* Hash the blocks this append fills, before the lock. */
    size_t first = seq->ntokens / bs; /* first block that may become full */
    if (old_fill && nfull > first) {
        memcpy(seq->tail + bs, seq->tail, old_fill * sizeof *tokens);
        memcpy(seq->tail + bs + old_fill, tokens, (bs - old_fill) * sizeof *tokens);
    }
    bool hashing = p->cfg.prefix_caching != 0;
    for (size_t i = first; hashing && i < nfull; i++) {
        const uint32_t *bt = block_tokens(seq, bs, i, first, tokens, old_fill);
        kvp_hash *parent = i ? &seq->hashes[i - 1] : NULL;
        rc = kvp_hash_block(p, parent, bt, bs, i * bs, extra_of(seq), &seq->hashes[i]);
        if (rc)
            return rc;
    }
    if ((rc = kvp__enter(p)))
        return rc;
    /* Copy-on-write: a write lands in a shared partial last block. */
    uint32_t last = seq->nblocks ? seq->blocks[seq->nblocks - 1] : KVP__NONE;
    bool cow = old_fill && kvp__client_refs(p, last) > 1;
    size_t fresh = nblocks - seq->nblocks;
    rc = kvp__client_room(p, 0, kvp__client_free_blocks(p, 0), fresh + cow);
    if (!rc) {
        if (cow) {
            uint32_t b = take_block(p);
            kvp__storage_copy(p, 0, last, b);
            kvp__client_fill(p, b, kvp__client_fill_of(p, last));
            kvp__client_drop_each(p, &last, 1, KVP__SEQ); /* still referenced: ref > 1 */
            seq->blocks[seq->nblocks - 1] = b;
            p->ctr.cow_copies++;
        }
        for (size_t i = seq->nblocks; i < nblocks; i++)
            seq->blocks[i] = take_block(p);
        for (size_t i = first; i < nblocks; i++)
            kvp__client_fill(p, seq->blocks[i], i < nfull ? (uint32_t)bs : (uint32_t)(total % bs));
        seq->nblocks = nblocks;
        if (hashing) {
            for (size_t i = first; i < nfull; i++)
                publish_block(p, seq, i, block_tokens(seq, bs, i, first, tokens, old_fill));
            seq->nhashes = nfull;
        }
        /* The new partial block's tokens. */
        size_t fill = total % bs;
        if (nfull > first || !old_fill)
            memcpy(seq->tail, tokens + n - fill, fill * sizeof *tokens);
        else
            memcpy(seq->tail + old_fill, tokens, n * sizeof *tokens);
        seq->ntokens = total;
        p->ctr.alloc_calls += fresh + cow > 0;
    }
    kvp__leave(p, rc == KVP_OK);
    return rc;
}

/* Blocks of q from index `from` on that only q holds (ref 1): what dropping
 * them puts back on the free list. */
static uint32_t sole_blocks(const kvp_pool *p, const kvp_seq *q, size_t from)
{
    uint32_t n = 0;
    for (size_t i = from; i < q->nblocks; i++)
        n += kvp__client_refs(p, q->blocks[i]) == 1;
    return n;
}

kvp_status kvp_seq_truncate(kvp_seq *seq, const uint32_t *tokens, size_t n)
{
    if (!seq)
        return KVP_EINVAL;
    kvp_pool *p = seq->pool;
    size_t bs = p->cfg.block_size, fill = n % bs;
    if (n > seq->ntokens || (fill && !tokens))
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(p);
    if (rc)
        return rc;
    if (n == seq->ntokens) {
        kvp__leave(p, false);
        return KVP_OK;
    }
    size_t keep = n / bs + (fill != 0);
    size_t old_fill = seq->ntokens % bs;
    /* The cut lies in the old partial block: its tokens are known. */
    if (fill && old_fill && keep == seq->nblocks &&
        memcmp(seq->tail, tokens + (n - fill), fill * sizeof *tokens))
        rc = KVP_EINVAL;
    /* A new partial last block that others hold or that is published keeps
     * its content for them: the sequence continues in a copy. */
    uint32_t last = fill ? seq->blocks[keep - 1] : KVP__NONE;
    bool copy = fill && (kvp__client_refs(p, last) > 1 || kvp__client_published(p, last));
    if (!rc && copy)
        rc = kvp__client_room(p, 0, kvp__client_free_blocks(p, 0) + sole_blocks(p, seq, keep), 1);
    if (!rc) {
        size_t dropped = seq->nblocks - keep;
        /* The tail first (its blocks may serve the copy), its free
         * insertions closed before the take. */
        kvp__client_drop_each(p, seq->blocks + keep, dropped, KVP__SEQ);
        seq->nblocks = keep;
        if (copy) {
            uint32_t b = take_block(p);
            kvp__storage_copy(p, 0, last, b);
            kvp__client_fill(p, b, (uint32_t)fill);
            seq->blocks[keep - 1] = b;
            kvp__client_drop_each(p, &last, 1, KVP__SEQ);
            p->ctr.cow_copies++;
            p->ctr.alloc_calls++;
            dropped++;
        } else if (fill) {
            kvp__client_fill(p, last, (uint32_t)fill);
        }
        p->ctr.free_calls += dropped > 0;
        p->ctr.blocks_freed += dropped;
        seq->nhashes = p->cfg.prefix_caching ? n / bs : 0;
        memmove(seq->tail, tokens ? tokens + (n - fill) : seq->tail, fill * sizeof *seq->tail);
        seq->ntokens = n;
    }
    kvp__leave(p, rc == KVP_OK);
    return rc;
}

kvp_status kvp_seq_fork(kvp_seq *parent, uint64_t child_id, kvp_seq **child)
{
    if (!parent || !child)
        return KVP_EINVAL;
    kvp_pool *p = parent->pool;
    kvp_status rc = kvp__enter(p);
    if (rc)
        return rc;
    kvp_seq *q = NULL;
    rc = seq_open(p, child_id, extra_of(parent), parent, &q);
    if (!rc) {
        if (parent->nblocks)
            memcpy(q->blocks, parent->blocks, parent->nblocks * sizeof *q->blocks);
        if (parent->nhashes)
            memcpy(q->hashes, parent->hashes, parent->nhashes * sizeof *q->hashes);
        memcpy(q->tail, parent->tail, p->cfg.block_size * sizeof *q->tail);
        q->nblocks = parent->nblocks;
        q->nhashes = parent->nhashes;
        q->ntokens = parent->ntokens;
        for (size_t i = 0; i < q->nblocks; i++)
            kvp__client_share(p, q->blocks[i], KVP__SEQ);
        registry_add(p, q);
        *child = q;
    }
    kvp__leave(p, rc == KVP_OK && q->nblocks > 0);
    return rc;
}

kvp_status kvp_seq_blocks(kvp_seq *seq, const kvp_block **ids, size_t *n_blocks, size_t *n_tokens)
{
    if (!seq || !ids || !n_blocks)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(seq->pool);
    if (rc)
        return rc;
    *ids = seq->blocks;
    *n_blocks = seq->nblocks;
    if (n_tokens)
        *n_tokens = seq->ntokens;
    kvp__leave(seq->pool, false);
    return KVP_OK;
}
