/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map.c — a small open-addressing map from 64-bit ids to 32-bit values.
 *
 * Used for request ids -> sequences.  Linear probing over a power-of-two
 * table kept at most 3/4 full; deletion shifts
 * the rest of the run back instead of leaving tombstones, so lookups stay
 * short however many ids come and go.  Keys are stored in the entries, so a
 * lookup touches one cache line in the common case.
 *
 * Invariants: every entry with val != NONE is reachable from its home slot
 * without crossing an empty entry; count is the number of such entries.
 *
 * Keys are caller ids, so the home slot is a keyed hash (kvp__id_hash with
 * the map's random seed): ids chosen to share a run under one seed do not
 * under another, and a put that probes past KVP__PROBE_MAX slots makes the
 * next reserve rebuild the table under a fresh seed, which keeps probes
 * short in the worst case a caller can choose.
 *
 * The pool's other tables do not use it, each for a reason of its own:
 * the owner index (owner.c) is on the take's path and chains through the
 * owner records it reads anyway, saving the map's separate entry line; the
 * content index (index.c) has 32-byte keys, at most one per block, and
 * chains through the block records (copies of one hash consecutive), so it
 * never allocates on publish and needs no entry storage; SLRU's ghost list
 * (policy_slru.c) drops its oldest key
 * at every insertion, which a chain through its ring unlinks in place where
 * this map would shift a run back.  A sequence lookup is once per call, not per
 * block, so a plain map serves it best.
 */
#include "map.h"
#include "hashing.h"
#include "mem.h"

static uint32_t map_home(uint64_t key, uint64_t seed, uint32_t mask)
{
    return kvp__id_hash(key, seed) & mask;
}

uint32_t kvp__map_get(const kvp__map *m, uint64_t key)
{
    if (!m->e)
        return KVP__NONE;
    for (uint32_t i = map_home(key, m->seed, m->mask);; i = (i + 1) & m->mask) {
        if (m->e[i].val == KVP__NONE || m->e[i].key == key)
            return m->e[i].val;
    }
}

/* Put key in the first empty slot of its run; the slots probed past it. */
static uint32_t map_insert(kvp__map_entry *e, uint64_t seed, uint32_t mask, uint64_t key,
                           uint32_t val)
{
    uint32_t i = map_home(key, seed, mask), probes = 0;
    while (e[i].val != KVP__NONE) {
        i = (i + 1) & mask;
        probes++;
    }
    e[i].key = key;
    e[i].val = val;
    return probes;
}

/* Room for `extra` more entries; doubles when short, and rebuilds under a
 * fresh seed when a put probed past KVP__PROBE_MAX (a failed rebuild keeps
 * the table as it is: probes stay correct, only longer).  All or nothing. */
kvp_status kvp__map_reserve(kvp_pool *p, kvp__map *m, uint32_t extra)
{
    uint64_t size = m->e ? (uint64_t)m->mask + 1 : 0;
    uint64_t want = (uint64_t)m->count + extra;
    bool rekey = m->longest > KVP__PROBE_MAX;
    if (want * 4 <= size * 3 && !rekey)
        return KVP_OK;
    uint64_t nsize = size ? size : 32;
    while (want * 4 > nsize * 3)
        nsize *= 2;
    if (nsize > (1ull << 31))
        return KVP_ENOMEM;
    uint64_t seed;
    if (kvp__random(&seed, sizeof seed))
        seed = m->seed;
    kvp__map_entry *ne = kvp__alloc(p, (size_t)nsize * sizeof *ne);
    if (!ne)
        return nsize == size ? KVP_OK : KVP_ENOMEM;
    for (uint64_t i = 0; i < nsize; i++)
        ne[i].val = KVP__NONE;
    for (uint64_t i = 0; i < size; i++)
        if (m->e[i].val != KVP__NONE)
            map_insert(ne, seed, (uint32_t)nsize - 1, m->e[i].key, m->e[i].val);
    kvp__release(p, m->e, (size_t)size * sizeof *m->e);
    m->e = ne;
    m->mask = (uint32_t)nsize - 1;
    m->seed = seed;
    m->longest = 0;
    return KVP_OK;
}

void kvp__map_put(kvp__map *m, uint64_t key, uint32_t val)
{
    uint32_t n = map_insert(m->e, m->seed, m->mask, key, val);
    if (n > m->longest)
        m->longest = n;
    m->count++;
}

void kvp__map_del(kvp__map *m, uint64_t key)
{
    uint32_t i = map_home(key, m->seed, m->mask);
    while (m->e[i].key != key || m->e[i].val == KVP__NONE)
        i = (i + 1) & m->mask;
    for (uint32_t j = (i + 1) & m->mask; m->e[j].val != KVP__NONE; j = (j + 1) & m->mask) {
        uint32_t h = map_home(m->e[j].key, m->seed, m->mask);
        /* Move entry j into hole i unless its home lies cyclically in (i, j]. */
        if (((j - h) & m->mask) >= ((j - i) & m->mask)) {
            m->e[i] = m->e[j];
            i = j;
        }
    }
    m->e[i].val = KVP__NONE;
    m->count--;
}

void kvp__map_free(kvp_pool *p, kvp__map *m)
{
    kvp__release(p, m->e, m->e ? ((size_t)m->mask + 1) * sizeof *m->e : 0);
    memset(m, 0, sizeof *m);
}
