/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.h — the content index and verified hits (index.c).
 */
#ifndef KVP_INDEX_H
#define KVP_INDEX_H

#include "kvp_types.h"

void kvp__index_insert(kvp_pool *p, uint32_t b, const kvp__pubinfo *info);
void kvp__index_remove(kvp_pool *p, uint32_t b);
void kvp__index_replace(kvp_pool *p, uint32_t from, uint32_t to);
uint32_t kvp__index_find(const kvp_pool *p, int s, const kvp_hash *h);
void kvp__unindex(kvp_pool *p, uint32_t b);
void kvp__forget_all(kvp_pool *p);
kvp_status kvp__index_init(kvp_pool *p);
kvp_status kvp__index_rebuild(kvp_pool *p, uint32_t nbuckets);

kvp_status kvp__verify_reserve(kvp_pool *p, uint32_t ncap, uint32_t **vtok, uint32_t **vparent,
                               uint32_t **vpgen, uint32_t **gen);
uint32_t kvp__lookup_verified(const kvp_pool *p, int s, const kvp_hash *h, uint32_t parent,
                              const uint32_t *tokens);
void kvp__publish_verified(kvp_pool *p, uint32_t b, const kvp_hash *h,
                           const kvp__pubinfo *info);

#endif /* KVP_INDEX_H */
