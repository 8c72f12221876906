/* SPDX-License-Identifier: Apache-2.0 */
/*
 * defer.h — the take's deferred bookkeeping (defer.c).
 */
#ifndef KVP_DEFER_H
#define KVP_DEFER_H

#include "kvp_types.h"

void kvp__defer_count(kvp__stream *st, uint32_t n);
void kvp__defer_tally(kvp_pool *p);
void kvp__defer_settle(kvp_pool *p);
void kvp__defer_settle_owner(kvp_pool *p, uint32_t slot);
bool kvp__defer_ready(const kvp_pool *p);
void kvp__defer_tick(kvp_pool *p);
void kvp__defer_mark(kvp_pool *p, kvp__owner *o, uint32_t slot);
void kvp__defer_slot_init(kvp__owner *o);
void kvp__defer_appended(kvp__owner *o);
void kvp__defer_slot_freed(kvp__owner *o);
uint32_t kvp__defer_free_owner(kvp_pool *p, kvp__owner *o, kvp__cursor *cur);
uint32_t kvp__defer_pending_from(const kvp__owner *o);
kvp_status kvp__defer_check(kvp_pool *p, char *msg, size_t cap);
void kvp__defer_uncheck(kvp_pool *p);

#endif /* KVP_DEFER_H */
