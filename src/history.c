/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.c — one kvp_stats snapshot of the pool, and the ring of them.
 *
 * What it owns: the assembly of a kvp_stats from the pool's gauges and
 * counters, and the history ring (hist, hist_head, hist_count).  A leaf:
 * it reads the pool and calls nothing.
 *
 * Every gauge is kept exactly by the code that changes it (block.c,
 * freelist.c, owner.c, index.c, resize.c, and defer.c's catch-up on
 * entry), so a snapshot is O(1).
 *
 * Who calls it: stats.c's public calls, and guard.c after every call that
 * changed the pool when cfg.history_every_call is set.
 */
#include "history.h"
#include "record.h"

/* The pool's kvp_stats as it stands (the caller entered). */
void kvp__stats_fill(const kvp_pool *p, kvp_stats *o)
{
    memset(o, 0, sizeof *o);
    o->blocks = kvp__managed(p);
    o->in_use = p->g.in_use;
    for (int s = 0; s < kvp__streams(p); s++) {
        o->vacant += p->st[s].nvacant;
        o->cached += p->st[s].ncached;
    }
    o->free = o->vacant + o->cached;
    o->shared = p->g.shared;
    o->indexed = p->idx.nindexed;
    o->fragmented = p->g.fragmented;
    o->owners = p->own.n;
    o->peak_in_use = p->g.peak;
    o->alloc_calls = p->ctr.alloc_calls;
    o->blocks_allocated = p->ctr.blocks_allocated;
    o->free_calls = p->ctr.free_calls;
    o->blocks_freed = p->ctr.blocks_freed;
    o->reused = p->ctr.reused;
    o->exhausted = p->ctr.exhausted;
    o->grown = p->ctr.grown;
    o->extended = p->ctr.extended;
    o->retired = p->ctr.retired;
    o->relocated = p->ctr.relocated;
    o->evictions = p->ctr.evictions;
    o->prefix_queries = p->ctr.prefix_queries;
    o->prefix_hits = p->ctr.prefix_hits;
    o->prefix_tokens_queried = p->ctr.prefix_queries * p->cfg.block_size;
    o->prefix_tokens_hit = p->ctr.prefix_hits * p->cfg.block_size;
    o->admitted_tokens = p->ctr.admitted_tokens;
    o->cow_copies = p->ctr.cow_copies;
    o->tokens_in_use = p->g.fill_sum;
    o->events_dropped = p->ctr.events_dropped;
    o->fragmentation = o->blocks ? (double)o->fragmented / (double)o->blocks : 0.0;
    o->usage = o->blocks ? (double)o->in_use / (double)o->blocks : 0.0;
}

/* Append a snapshot to the history ring, the oldest going when it is
 * full. */
void kvp__history_push(kvp_pool *p)
{
    uint32_t len = p->cfg.history_len;
    kvp__stats_fill(p, &p->hist.ring[(p->hist.head + p->hist.count) % len]);
    if (p->hist.count < len)
        p->hist.count++;
    else
        p->hist.head = (p->hist.head + 1) % len;
}
