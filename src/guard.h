/* SPDX-License-Identifier: Apache-2.0 */
/*
 * guard.h — entering and leaving a public call (guard.c).
 */
#ifndef KVP_GUARD_H
#define KVP_GUARD_H

#include "kvp_types.h"

kvp_status kvp__enter(kvp_pool *p);
kvp_status kvp__enter_lazy(kvp_pool *p);
kvp_status kvp__enter_stream(kvp_pool *p, int stream, int *s);
void kvp__leave(kvp_pool *p, bool changed);
#if KVP_DEBUG >= 3
void kvp__self_check(kvp_pool *p, bool changed);
#else
static inline void kvp__self_check(kvp_pool *p, bool changed)
{
    (void)p;
    (void)changed;
}
#endif

#endif /* KVP_GUARD_H */
