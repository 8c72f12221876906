/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.h — the invariant checker and the fingerprint (check.c).
 */
#ifndef KVP_CHECK_H
#define KVP_CHECK_H

#include "kvp_types.h"

kvp_status kvp__check(kvp_pool *p, char *msg, size_t cap);
uint64_t kvp__fingerprint(const kvp_pool *p);

#endif /* KVP_CHECK_H */
