/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curve.h — the LRU hit-rate curve of a trace at every capacity in one pass
 * (`kvpool curve`), and the per-block facts the optimal policy (belady.h)
 * shares with it.
 *
 * Why one pass is exact: `kvpool replay` serves each admitted request by
 * claiming its cached prefix, allocating the rest (vacant blocks first, then
 * the least recently freed cached ones) and freeing all of it tail first.
 * So the cached blocks are always the most recently freed distinct hash ids,
 * ordered by a stack in which a request puts its blocks on top, its first
 * block topmost.  When every hash id has one parent (the id before it in
 * every request that has it, or none: a prefix tree, as in the Mooncake
 * traces), a block is always above its descendants on the stack, so at
 * capacity C a request's hits are exactly its blocks whose stack depth (the
 * number of distinct ids freed after it: its reuse distance) is below C, and
 * they form its prefix.  A Fenwick tree over touch times gives each depth in
 * O(log n); a histogram of depths gives every capacity at once.
 *
 * Below the largest request a replay rejects the requests longer than C and
 * they touch nothing, so the pass for C sees only the requests of at most C
 * blocks: one pass per distinct request length below the largest covers
 * every smaller capacity (`--all-capacities`).
 *
 * When an id has two parents the stack argument can break (a replay can
 * hold two blocks with one hash), so the result is marked not exact.
 */
#ifndef KVPT_CURVE_H
#define KVPT_CURVE_H

#include "trace.h"

#include <stdint.h>

/* The trace's hash ids renamed 0 .. n_distinct-1 in order of first use. */
typedef struct kvpt_dense {
    uint32_t *id;          /* per hash id of the trace (total_blocks) */
    uint64_t n_distinct;
} kvpt_dense;

/*
 * Rename the hash ids of `t` into *d (see kvpt_dense).  Returns 0, or -1
 * with the error printed (then *d is empty): out of memory, or 2^32 - 1
 * distinct ids or more.  O(total_blocks) expected time and memory.
 */
int kvpt_dense_build(const kvpt_trace *t, kvpt_dense *d);

/* Release *d and zero it. */
void kvpt_dense_free(kvpt_dense *d);

/* `kvpool curve TRACE [TRACE...]` (usage in main.c). */
int kvpt_cmd_curve(int argc, char **argv);

#endif /* KVPT_CURVE_H */
