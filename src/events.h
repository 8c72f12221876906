/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h — the event queue and the eviction callback (events.c).
 */
#ifndef KVP_EVENTS_H
#define KVP_EVENTS_H

#include "kvp_types.h"

extern __attribute__((tls_model("initial-exec"))) _Thread_local const kvp_pool *kvp__cb_pool;
void kvp__notify_evict(kvp_pool *p, const kvp_hash *h, uint32_t b);
kvp_status kvp__events_init(kvp_pool *p);
void kvp__events_free(kvp_pool *p);
void kvp__ev_stored(kvp_pool *p, uint32_t b, const kvp__pubinfo *info);
void kvp__ev_removed(kvp_pool *p, uint32_t b);
void kvp__ev_cleared(kvp_pool *p);
void kvp__ev_close(kvp_pool *p);
void kvp__ev_take(kvp_pool *p, const kvp_event **events, size_t *n, uint64_t *dropped);
/* Were events dropped since the index was last emptied?  Until then, every
 * indexed hash has exactly one announced copy (kvp__check); after a drop,
 * at most one.  False with events off. */
bool kvp__ev_lossy(const kvp_pool *p);

#endif /* KVP_EVENTS_H */
