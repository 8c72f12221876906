/* SPDX-License-Identifier: Apache-2.0 */
/*
 * freelist.h — each stream's free blocks in reuse order (freelist.c).
 */
#ifndef KVP_FREELIST_H
#define KVP_FREELIST_H

#include "kvp_types.h"
#include "idset.h"

/* A cursor for a call that frees at most `max` blocks per stream. */
static inline kvp__cursor kvp__cursor_start(size_t max)
{
    kvp__cursor cur;
    for (unsigned s = 0; s < KVP__STREAMS_MAX; s++)
        cur.at[s] = cur.w[s] = KVP__NONE;
    cur.max = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
    return cur;
}

uint32_t kvp__pick(kvp_pool *p, int s);
void kvp__free_remove(kvp_pool *p, uint32_t b);
void kvp__free_insert(kvp_pool *p, uint32_t b, kvp__cursor *cur);
void kvp__free_listed(kvp_pool *p, int s, kvp__cursor *cur);
void kvp__free_end(kvp_pool *p, kvp__cursor *cur);
void kvp__free_stacked(kvp_pool *p, const uint32_t *refs, uint32_t n, kvp__cursor *cur);
void kvp__fast_reset(kvp_pool *p);
kvp_status kvp__stk_reserve(kvp_pool *p, int s, uint32_t blocks);
void kvp__cached_to_vacant(kvp_pool *p, uint32_t b);

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
void kvp__order(kvp_pool *p);

#endif /* KVP_FREELIST_H */
