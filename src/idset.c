/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idset.c — ordered sets of block ids.
 *
 * A 64-ary tree of bitmaps: level 0 has one bit per id, and a bit at level
 * l+1 says "word i of level l is not empty".  Insert and delete touch one word
 * per level only while a word changes between empty and non-empty; min, max
 * and successor descend one word per level.  For 2^31 ids that is 6 levels,
 * so every operation is effectively O(1), and the memory is about 1.02 bits
 * per id.  The pool uses it wherever it needs "lowest" or "highest" among free
 * or retired blocks without scanning.
 *
 * Invariant: for every level l > 0, bit i of level l is set iff word i of
 * level l-1 is non-zero.  The top level is a single word.
 */
#include "idset.h"
#include "mem.h"

static uint32_t words_for(uint32_t bits) { return (bits + 63u) / 64u; }

/* Lay out the levels for `cap` ids in one zeroed allocation. */
static kvp_status layout(kvp_pool *p, kvp__idset *set, uint32_t cap)
{
    kvp__idset s = {0};
    uint32_t bits = cap ? cap : 1;
    size_t total = 0;
    for (;;) {
        uint32_t w = words_for(bits);
        s.words[s.levels++] = w;
        total += w;
        if (w == 1)
            break;
        bits = w;
    }
    uint64_t *mem = kvp__zalloc(p, total * sizeof(uint64_t));
    if (!mem)
        return KVP_ENOMEM;
    for (int l = 0; l < s.levels; l++) {
        s.lv[l] = mem;
        mem += s.words[l];
    }
    s.cap = cap;
    s.bytes = total * sizeof(uint64_t);
    *set = s;
    return KVP_OK;
}

kvp_status kvp__idset_init(kvp_pool *p, kvp__idset *set, uint32_t cap)
{
    return layout(p, set, cap);
}

void kvp__idset_free(kvp_pool *p, kvp__idset *set)
{
    if (set->lv[0])
        kvp__release(p, set->lv[0], set->bytes);
    memset(set, 0, sizeof *set);
}

void kvp__idset_clear(kvp__idset *set)
{
    memset(set->lv[0], 0, set->bytes);
}

/* Grow to `cap` ids keeping the members; all or nothing.  O(cap / 64). */
kvp_status kvp__idset_resize(kvp_pool *p, kvp__idset *set, uint32_t cap)
{
    kvp__idset n;
    kvp_status rc = layout(p, &n, cap);
    if (rc)
        return rc;
    uint32_t keep = set->words[0] < n.words[0] ? set->words[0] : n.words[0];
    memcpy(n.lv[0], set->lv[0], keep * sizeof(uint64_t));
    for (int l = 1; l < n.levels; l++)
        for (uint32_t i = 0; i < n.words[l - 1]; i++)
            if (n.lv[l - 1][i])
                n.lv[l][i / 64] |= 1ull << (i % 64);
    kvp__idset_free(p, set);
    *set = n;
    return KVP_OK;
}

/* The upper levels of add and delete: reached only when a level-0 word
 * turns non-empty or empty (the inline parts in idset.h do the rest). */
void kvp__idset_add_up(kvp__idset *set, uint32_t id)
{
    for (int l = 1; l < set->levels; l++) {
        id /= 64;
        uint64_t *w = &set->lv[l][id / 64];
        bool was_empty = *w == 0;
        *w |= 1ull << (id % 64);
        if (!was_empty)
            return;
    }
}

void kvp__idset_del_up(kvp__idset *set, uint32_t id)
{
    for (int l = 1; l < set->levels; l++) {
        id /= 64;
        uint64_t *w = &set->lv[l][id / 64];
        *w &= ~(1ull << (id % 64));
        if (*w)
            return;
    }
}

bool kvp__idset_has(const kvp__idset *set, uint32_t id)
{
    return id < set->cap && (set->lv[0][id / 64] >> (id % 64)) & 1u;
}

uint32_t kvp__idset_min(const kvp__idset *set)
{
    uint32_t i = 0;
    for (int l = set->levels - 1; l >= 0; l--) {
        uint64_t w = set->lv[l][i];
        if (!w)
            return KVP__NONE;
        i = i * 64 + (uint32_t)__builtin_ctzll(w);
    }
    return i;
}

uint32_t kvp__idset_max(const kvp__idset *set)
{
    uint32_t i = 0;
    for (int l = set->levels - 1; l >= 0; l--) {
        uint64_t w = set->lv[l][i];
        if (!w)
            return KVP__NONE;
        i = i * 64 + (63u - (uint32_t)__builtin_clzll(w));
    }
    return i;
}

/* The smallest member >= from, or NONE.  Climbs while the rest of the current
 * word is empty, then descends along first set bits. */
uint32_t kvp__idset_next(const kvp__idset *set, uint32_t from)
{
    if (from >= set->cap)
        return KVP__NONE;
    uint32_t i = from;
    int l = 0;
    for (;;) {
        uint64_t w = set->lv[l][i / 64] & (~0ull << (i % 64));
        if (w) {
            i = (i / 64) * 64 + (uint32_t)__builtin_ctzll(w);
            break;
        }
        if (l + 1 == set->levels)
            return KVP__NONE;
        i = i / 64 + 1;
        l++;
        if (i / 64 >= set->words[l])
            return KVP__NONE;
    }
    while (l > 0) {
        l--;
        i = i * 64 + (uint32_t)__builtin_ctzll(set->lv[l][i]);
    }
    return i;
}
