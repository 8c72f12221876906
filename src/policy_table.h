/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_table.h — the table of eviction policies (policy_table.c).
 */
#ifndef KVP_POLICY_TABLE_H
#define KVP_POLICY_TABLE_H

#include "kvp_types.h"

/* The configuration names a policy of the table and meets its rules:
 * KVP_OK or KVP_EINVAL.  O(1). */
kvp_status kvp__policy_config_valid(const kvp_config *c);
/* Copy the configured policy's row into the pool (p->pol) and set up what
 * the policy keeps.  All or nothing: KVP_OK or KVP_ENOMEM. */
kvp_status kvp__policy_create(kvp_pool *p);

#endif /* KVP_POLICY_TABLE_H */
