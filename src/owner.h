/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.h — owners and their references (owner.c).
 */
#ifndef KVP_OWNER_H
#define KVP_OWNER_H

#include "kvp_types.h"


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
    const kvp__owner *o = &p->own.slots[oslot];
    uint32_t len = o->id == KVP_ANON ? 0 : o->len;
    return (uint64_t)len + n <= o->cap ? KVP_OK : kvp__refs_grow(p, oslot, n);
}
uint32_t kvp__refs_held(const kvp_pool *p, uint32_t b, uint32_t oslot);
void kvp__owner_relocate(kvp_pool *p, uint32_t to);
void kvp__owners_reset(kvp_pool *p);
void kvp__owners_destroy(kvp_pool *p);

#endif /* KVP_OWNER_H */
