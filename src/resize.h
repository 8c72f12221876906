/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resize.h — the id space: growth (resize.c).
 */
#ifndef KVP_RESIZE_H
#define KVP_RESIZE_H

#include "kvp_types.h"

kvp_status kvp__grow(kvp_pool *p, int s, uint32_t n);
uint32_t kvp__bucket_count(uint32_t cap);

#endif /* KVP_RESIZE_H */
