/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.h — the stats snapshot and the history ring (history.c).
 */
#ifndef KVP_HISTORY_H
#define KVP_HISTORY_H

#include "kvp_types.h"

void kvp__stats_fill(const kvp_pool *p, kvp_stats *out);
void kvp__history_push(kvp_pool *p);

#endif /* KVP_HISTORY_H */
