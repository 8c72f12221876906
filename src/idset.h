/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idset.h — ordered id sets (idset.c).
 */
#ifndef KVP_IDSET_H
#define KVP_IDSET_H

#include "kvp_types.h"

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

bool kvp__idset_has(const kvp__idset *set, uint32_t id);
uint32_t kvp__idset_min(const kvp__idset *set);
uint32_t kvp__idset_max(const kvp__idset *set);
uint32_t kvp__idset_next(const kvp__idset *set, uint32_t from);

#endif /* KVP_IDSET_H */
