/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_table.c — the table of eviction policies (kvp_policy): one row
 * per policy, each defined in its own file (policy_lru.c, policy_slru.c,
 * policy_lfu.c), their names, the configuration check and the choice of
 * the pool's row.
 *
 * What it owns: the table alone.  Adding a policy is its file, its row
 * here and its kvp_policy value; kvp_policy_name/kvp_policy_parse, the
 * configuration check and every caller that lists the names follow.
 *
 * Why a file of its own: the rows call policy.c's list helpers, and the
 * table names the rows, so with the table in policy.c the two would call
 * each other.  Here the table sits above the rows, policy.c below them.
 *
 * Who calls it: pool.c (validation, creation); the public API.
 */
#include "policy_table.h"
#include "policy.h"
#include "status.h"

/* The policies, indexed by kvp_policy: one row each, in its own file. */
static const kvp__policy *const policies[] = {
    [KVP_POLICY_LRU] = &kvp__policy_lru,
    [KVP_POLICY_SLRU] = &kvp__policy_slru,
    [KVP_POLICY_LFU] = &kvp__policy_lfu,
};
#define NPOLICIES (sizeof policies / sizeof policies[0])

/* See kvpool.h. */
const char *kvp_policy_name(int policy)
{
    return policy >= 0 && (size_t)policy < NPOLICIES ? policies[policy]->name : NULL;
}

/* See kvpool.h. */
KVP__DEFINE_PARSE(kvp_policy_parse, kvp_policy, kvp_policy_name)

/* The configuration names a policy of the table and meets its rules.
 * KVP_OK or KVP_EINVAL (pool.c's validation). */
kvp_status kvp__policy_config_valid(const kvp_config *c)
{
    if ((unsigned)c->policy >= NPOLICIES || c->protected_percent > 100)
        return KVP_EINVAL;
    const kvp__policy *pol = policies[c->policy];
    return pol->valid ? pol->valid(c) : KVP_OK;
}

/* Choose the pool's policy (its configuration was validated) and set up
 * what the policy keeps.  All or nothing: KVP_OK or KVP_ENOMEM. */
kvp_status kvp__policy_create(kvp_pool *p)
{
    p->pol = *policies[p->cfg.policy];
    return p->pol.create ? p->pol.create(p) : KVP_OK;
}
