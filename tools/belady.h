/* SPDX-License-Identifier: Apache-2.0 */
/*
 * belady.h — the clairvoyant eviction policy (Belady's MIN) run under the
 * pool's rules, for the optimal column of `kvpool curve --optimal`.
 *
 * What is simulated, at one capacity C: requests in file order, each of at
 * most C blocks (longer ones are rejected, as a replay does); a request's
 * hits are the cached blocks of its prefix up to the first miss; its other
 * blocks are allocated, evicting cached blocks that the request does not
 * use, the one whose next use (the index of the next request that has it)
 * is farthest first, the deeper one (later in its request) first among
 * equals; then all of the request's blocks stay cached.
 *
 * What it is: on a prefix-tree trace (curve.h) a block's next use is never
 * later than its descendants', so this policy never keeps a block without
 * its prefix and its hits are every cached block of a request.  Serving a
 * request = making a set of blocks resident, counting the ones already
 * there; for that problem evicting the farthest next use is optimal (the
 * exchange argument of Belady's MIN carries over to requests of several
 * pages that must be resident together), so no eviction policy of the pool,
 * clairvoyant or not, hits more blocks at C.  tests/test_curve.py checks it
 * against an exhaustive search over every eviction choice on small random
 * prefix-tree traces.  On a trace that is not a prefix tree it is still a
 * policy's result, not a proven bound.  Token hits are those of the same
 * run: the policy maximises blocks, not tokens.
 */
#ifndef KVPT_BELADY_H
#define KVPT_BELADY_H

#include "curve.h"
#include "trace.h"

#include <stdint.h>

/*
 * For each hash id of `t` (total_blocks entries, file order) the index of
 * the next request after its own that has the same id (d: the renamed ids),
 * or t->n_requests when there is none; into *out (caller frees).  Returns 0,
 * or -1 with "out of memory" printed.  O(total_blocks) time and memory.
 */
int kvpt_next_use(const kvpt_trace *t, const kvpt_dense *d, uint64_t **out);

/*
 * Run the policy of the file comment over `t` at `capacity` (> 0) blocks and
 * store the block and token hits (tokens as `kvpool replay` counts them).
 * `next` is kvpt_next_use's array.  Returns 0, or -1 with "out of memory"
 * printed.  O(total_blocks log total_blocks) time, O(n_distinct +
 * total_blocks) memory.
 */
int kvpt_belady(const kvpt_trace *t, const kvpt_dense *d, const uint64_t *next,
                uint64_t capacity, uint64_t *blocks_hit, uint64_t *tokens_hit);

#endif /* KVPT_BELADY_H */
