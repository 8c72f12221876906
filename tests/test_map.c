/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_map.c — the keyed id tables: map.c (request id -> sequence) and the
 * owner index (owner.c), against ids a caller chooses to collide.
 *
 * Covers: ids that shared one bucket under the unkeyed id hash spread under
 * a table's random seed; ids crafted for a table's own seed (as a caller
 * who learned it could) make it draw a fresh one and rebuild, after which
 * every id is still found with its value and the chains (probes) are short
 * again.  The tests look inside the tables (map.h, owner.h) for their seeds
 * and chains.
 */
#include "kvptest.h"
#include "map.h"
#include "owner.h"

#include <stdio.h>
#include <stdlib.h>

/* n distinct ids whose kvp__id_hash(id, seed) & mask is bucket, searched
 * from `from` upward. */
static void ids_in_bucket(uint64_t seed, uint32_t mask, uint32_t bucket, uint64_t from,
                          uint64_t *ids, size_t n)
{
    for (uint64_t id = from; n; id++)
        if ((kvp__id_hash(id, seed) & mask) == bucket) {
            *ids++ = id;
            n--;
        }
}

/* The longest probe from an entry's home slot to the entry, over the map. */
static uint32_t longest_probe(const kvp__map *m)
{
    uint32_t longest = 0;
    for (uint32_t i = 0; i <= m->mask; i++)
        if (m->e[i].val != KVP__NONE) {
            uint32_t d = (i - (kvp__id_hash(m->e[i].key, m->seed) & m->mask)) & m->mask;
            longest = d > longest ? d : longest;
        }
    return longest;
}

/* The longest chain of the owner index. */
static uint32_t longest_chain(const kvp_pool *p)
{
    uint32_t longest = 0;
    for (uint32_t b = 0; b <= p->own.bmask; b++) {
        uint32_t n = 0;
        for (uint32_t l = p->own.buckets[b]; l; l = p->own.slots[l - 1].link)
            n++;
        longest = n > longest ? n : longest;
    }
    return longest;
}

static void test_map_spreads_unkeyed_collisions(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp__map m = {0};
    KVP_ASSERT_OK(kvp__map_reserve(pool, &m, 500));
    uint64_t ids[200];
    ids_in_bucket(0, m.mask, 0, 1, ids, 200); /* one run under seed 0 */
    for (uint32_t i = 0; i < 200; i++)
        kvp__map_put(&m, ids[i], i);
    printf("unkeyed collisions: longest probe %u of %u slots\n", longest_probe(&m), m.mask + 1);
    assert_true(longest_probe(&m) < 40);
    for (uint32_t i = 0; i < 200; i++)
        KVP_ASSERT_EQ(kvp__map_get(&m, ids[i]), i);
    kvp__map_free(pool, &m);
    kvp_pool_destroy(pool);
}

static void test_map_rekeys_crafted_ids(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    kvp__map m = {0};
    KVP_ASSERT_OK(kvp__map_reserve(pool, &m, 500));
    uint64_t seed = m.seed;
    uint32_t mask = m.mask;
    uint64_t ids[200];
    ids_in_bucket(seed, mask, 7, 1, ids, 200); /* one run under the map's own seed */
    for (uint32_t i = 0; i < 200; i++) {
        KVP_ASSERT_OK(kvp__map_reserve(pool, &m, 1)); /* as the registry puts */
        kvp__map_put(&m, ids[i], i);
    }
    KVP_ASSERT_OK(kvp__map_reserve(pool, &m, 1));
    printf("crafted ids: seed %s, longest probe %u\n", m.seed != seed ? "renewed" : "kept",
           longest_probe(&m));
    assert_true(m.seed != seed);
    KVP_ASSERT_EQ(m.mask, mask);
    assert_true(longest_probe(&m) <= KVP__PROBE_MAX);
    for (uint32_t i = 0; i < 200; i++)
        KVP_ASSERT_EQ(kvp__map_get(&m, ids[i]), i);
    for (uint32_t i = 0; i < 200; i += 2)
        kvp__map_del(&m, ids[i]);
    for (uint32_t i = 0; i < 200; i++)
        KVP_ASSERT_EQ(kvp__map_get(&m, ids[i]), i % 2 ? i : KVP__NONE);
    KVP_ASSERT_EQ(m.count, 100);
    kvp__map_free(pool, &m);
    kvp_pool_destroy(pool);
}

static void test_owner_index_flood(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LOWEST);
    /* 300 owners: the table has 512 slots, so 128 more do not grow it */
    for (kvp_owner id = 1; id <= 300; id++)
        KVP_ASSERT_OK(kvp_owner_register(pool, id));
    uint32_t mask = pool->own.bmask;
    uint64_t seed = pool->own.seed;
    uint64_t unkeyed[64], crafted[64];
    ids_in_bucket(0, mask, 3, 1000, unkeyed, 64);
    for (int i = 0; i < 64; i++)
        KVP_ASSERT_OK(kvp_owner_register(pool, unkeyed[i]));
    printf("unkeyed collisions: longest chain %u\n", longest_chain(pool));
    assert_true(longest_chain(pool) <= KVP__CHAIN_MAX);
    KVP_ASSERT_EQ(pool->own.seed, seed);
    ids_in_bucket(seed, mask, 5, 1u << 20, crafted, 64);
    for (int i = 0; i < 64; i++)
        KVP_ASSERT_OK(kvp_owner_register(pool, crafted[i]));
    printf("crafted ids: seed %s, longest chain %u\n",
           pool->own.seed != seed ? "renewed" : "kept", longest_chain(pool));
    KVP_ASSERT_EQ(pool->own.bmask, mask);
    assert_true(pool->own.seed != seed);
    assert_true(longest_chain(pool) <= KVP__CHAIN_MAX);
    kvptest_check(pool);
    for (int i = 0; i < 64; i++) {
        KVP_ASSERT_STATUS(kvp_owner_register(pool, crafted[i]), KVP_EOWNERACTIVE);
        KVP_ASSERT_STATUS(kvp_owner_register(pool, unkeyed[i]), KVP_EOWNERACTIVE);
    }
    for (int i = 0; i < 64; i++)
        KVP_ASSERT_OK(kvp_owner_release(pool, crafted[i]));
    KVP_ASSERT_EQ(kvptest_stats(pool).owners, 364);
    kvptest_check(pool);
    kvp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_spreads_unkeyed_collisions),
        cmocka_unit_test(test_map_rekeys_crafted_ids),
        cmocka_unit_test(test_owner_index_flood),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
