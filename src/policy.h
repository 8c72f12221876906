/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h — the eviction order of cached blocks (policy.c, and a file per
 * policy).
 */
#ifndef KVP_POLICY_H
#define KVP_POLICY_H

#include "kvp_types.h"

/* The policies' rows (policy_*.c), which policy_table.c's table lists. */
extern const kvp__policy kvp__policy_lru, kvp__policy_slru, kvp__policy_lfu;
kvp_status kvp__policy_refuse_fifo(const kvp_config *c);
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

#endif /* KVP_POLICY_H */
