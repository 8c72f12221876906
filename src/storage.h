/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage.h — block bytes: host arenas and copies (storage.c).
 */
#ifndef KVP_STORAGE_H
#define KVP_STORAGE_H

#include "kvp_types.h"

kvp_status kvp__storage_init(kvp_pool *p);
kvp_status kvp__storage_reserve(kvp_pool *p, uint32_t ncap);
void kvp__storage_commit(kvp_pool *p, uint32_t ncap);
void kvp__storage_unreserve(kvp_pool *p, uint32_t ncap);
void kvp__storage_free(kvp_pool *p);
void kvp__storage_copy(kvp_pool *p, int s, uint32_t src, uint32_t dst);

#endif /* KVP_STORAGE_H */
