/* SPDX-License-Identifier: Apache-2.0 */
/*
 * block.h — a block's state transitions (block.c).
 */
#ifndef KVP_BLOCK_H
#define KVP_BLOCK_H

#include "kvp_types.h"

void kvp__hand_out_vacant(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s);
void kvp__hand_out_counted(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format, int s);
void kvp__hand_out(kvp_pool *p, uint32_t b, uint32_t oslot, unsigned format);
void kvp__release_block(kvp_pool *p, uint32_t b, kvp__cursor *cur);

#endif /* KVP_BLOCK_H */
