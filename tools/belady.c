/* SPDX-License-Identifier: Apache-2.0 */
/*
 * belady.c — Belady's farthest-next-use eviction under the pool's rules
 * (see belady.h for what it computes and why it is optimal).
 *
 * The cached blocks wait in a binary max-heap keyed by (next use, depth).
 * A block's key changes only when a request uses it, so instead of
 * updating the heap in place each block carries a version: a use bumps it
 * and pushes a fresh entry, and entries whose version is old are dropped
 * when they reach the top.  Bumping the version of the blocks the current
 * request holds also keeps them from being evicted while it runs.  Every
 * push is one use of one block, so the heap never holds more entries than
 * the trace has hash ids.
 */
#include "belady.h"

#include "common.h"

#include <stdlib.h>

/* Block states: not cached; cached; cached and used by the running request;
 * used by the running request and being allocated. */
enum { ABSENT, CACHED, PINNED, INCOMING };

/* Key bits for the depth; requests have fewer ids than 2^20 (a line is at
 * most 1 MiB and an id takes at least two bytes). */
#define DEPTH_BITS 20

typedef struct entry {
    uint64_t key;
    uint32_t id, version;
} entry;

/* Push `e` on the max-heap h[0 .. *n). */
static void heap_push(entry *h, size_t *n, entry e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key >= e.key)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

/* Remove and return the largest entry of the non-empty heap h[0 .. *n). */
static entry heap_pop(entry *h, size_t *n)
{
    entry top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].key > h[c].key)
            c++;
        if (h[c].key <= last.key)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* See belady.h: a backward pass remembering each id's latest request. */
int kvpt_next_use(const kvpt_trace *t, const kvpt_dense *d, uint64_t **out)
{
    uint64_t *next = malloc((t->total_blocks ? t->total_blocks : 1) * sizeof *next);
    uint64_t *later = malloc((d->n_distinct ? d->n_distinct : 1) * sizeof *later);
    if (!next || !later) {
        free(next);
        free(later);
        *out = NULL;
        kvpt_error("out of memory");
        return -1;
    }
    for (uint64_t i = 0; i < d->n_distinct; i++)
        later[i] = t->n_requests;
    for (size_t q = t->n_requests; q-- > 0;) {
        for (uint64_t k = t->offset[q]; k < t->offset[q + 1]; k++)
            next[k] = later[d->id[k]];
        for (uint64_t k = t->offset[q]; k < t->offset[q + 1]; k++)
            later[d->id[k]] = q;
    }
    free(later);
    *out = next;
    return 0;
}

/* See belady.h. */
int kvpt_belady(const kvpt_trace *t, const kvpt_dense *d, const uint64_t *next,
                uint64_t capacity, uint64_t *blocks_hit, uint64_t *tokens_hit)
{
    size_t nd = d->n_distinct ? (size_t)d->n_distinct : 1;
    unsigned char *state = calloc(nd, 1);
    uint32_t *version = calloc(nd, sizeof *version);
    entry *heap = malloc((t->total_blocks ? t->total_blocks : 1) * sizeof *heap);
    if (!state || !version || !heap) {
        free(state);
        free(version);
        free(heap);
        kvpt_error("out of memory");
        return -1;
    }
    size_t n_heap = 0;
    uint64_t cached = 0, hits = 0, tokens = 0;
    for (size_t q = 0; q < t->n_requests; q++) {
        uint64_t lo = t->offset[q], n = t->offset[q + 1] - lo;
        if (n > capacity)
            continue;
        const uint32_t *ids = d->id + lo;
        uint64_t h = 0;
        while (h < n && state[ids[h]] == CACHED)
            h++;
        hits += h;
        uint64_t tok = h * KVPT_TRACE_BLOCK_TOKENS;
        tokens += tok < t->input_length[q] ? tok : t->input_length[q];
        uint64_t incoming = 0;
        for (uint64_t i = 0; i < n; i++) {
            unsigned char *s = &state[ids[i]];
            if (*s == CACHED) {
                *s = PINNED;
                version[ids[i]]++; /* its heap entry is now stale */
            } else if (*s == ABSENT) {
                *s = INCOMING;
                incoming++;
            }
        }
        while (cached + incoming > capacity) {
            entry e = heap_pop(heap, &n_heap);
            if (e.version == version[e.id]) { /* current, so CACHED */
                state[e.id] = ABSENT;
                cached--;
            }
        }
        for (uint64_t i = 0; i < n; i++) {
            uint32_t id = ids[i];
            if (state[id] != PINNED && state[id] != INCOMING)
                continue; /* a repeat within the request */
            cached += state[id] == INCOMING;
            state[id] = CACHED;
            uint64_t depth = i < (1u << DEPTH_BITS) ? i : (1u << DEPTH_BITS) - 1;
            heap_push(heap, &n_heap,
                      (entry){(next[lo + i] << DEPTH_BITS) | depth, id, ++version[id]});
        }
    }
    free(state);
    free(version);
    free(heap);
    *blocks_hit = hits;
    *tokens_hit = tokens;
    return 0;
}
