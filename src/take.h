/* SPDX-License-Identifier: Apache-2.0 */
/*
 * take.h — handing blocks out, the internal calls (take.c).
 */
#ifndef KVP_TAKE_H
#define KVP_TAKE_H

#include "kvp_types.h"

kvp_status kvp__room_for(kvp_pool *p, int s, uint32_t avail, uint64_t need);
uint32_t kvp__take_block(kvp_pool *p, int s, uint32_t oslot, unsigned format);

#endif /* KVP_TAKE_H */
