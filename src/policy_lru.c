/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_lru.c — KVP_POLICY_LRU: least recently freed first.
 *
 * What it owns: nothing beyond its row.  Every cached block sits in segment
 * 0 of its priority, so each insertion is policy.c's inline append (no slow
 * bits) and the victim rule alone gives the order.
 */
#include "policy.h"

const kvp__policy kvp__policy_lru = {
    .name = "lru",
    .segments = 1,
};
