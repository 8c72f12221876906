/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hashing.h — chained block hashes (hashing.c).
 */
#ifndef KVP_HASHING_H
#define KVP_HASHING_H

#include "kvp_types.h"

kvp_status kvp__hash_config_valid(const kvp_config *c);
kvp_status kvp__random(void *buf, size_t n);
kvp_status kvp__extra_valid(const kvp_extra_keys *x);
kvp_status kvp__hash_chain(const kvp_pool *p, const uint32_t *tokens, size_t nblocks,
                           const kvp_extra_keys *x, kvp_hash *hashes, size_t known);

#endif /* KVP_HASHING_H */
