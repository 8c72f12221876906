/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.h — the allocator calls (mem.c).
 */
#ifndef KVP_MEM_H
#define KVP_MEM_H

#include "kvp_types.h"

extern const kvp_allocator kvp__std_allocator;
void *kvp__alloc(kvp_pool *p, size_t size);
void *kvp__zalloc(kvp_pool *p, size_t size);
void kvp__release(kvp_pool *p, void *ptr, size_t size);

#endif /* KVP_MEM_H */
