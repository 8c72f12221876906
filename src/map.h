/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map.h — maps from 64-bit ids to 32-bit values (map.c), and the id hash
 * they and the owner index use.
 */
#ifndef KVP_MAP_H
#define KVP_MAP_H

#include "kvp_types.h"

/* Hash of a caller's 64-bit id (owner, request) for a power-of-two table,
 * keyed with the table's random seed: the id and the seed mixed by one
 * round of MurmurHash3's 64-bit finalizer (the top half folded into the
 * bottom, so sequential ids spread), one multiply on the take's path.  A
 * mix this short is no secret-keeping hash, so the tables also bound their
 * chains (probes) and draw a fresh seed past the bound: ids crafted for one
 * seed spread under the next. */
static inline uint32_t kvp__id_hash(uint64_t key, uint64_t seed)
{
    key ^= seed;
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

uint32_t kvp__map_get(const kvp__map *m, uint64_t key);
kvp_status kvp__map_reserve(kvp_pool *p, kvp__map *m, uint32_t extra);
void kvp__map_put(kvp__map *m, uint64_t key, uint32_t val);
void kvp__map_del(kvp__map *m, uint64_t key);
void kvp__map_free(kvp_pool *p, kvp__map *m);

#endif /* KVP_MAP_H */
