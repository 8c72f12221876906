/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.h — `kvpool replay`, and replaying a loaded trace through a kvpool
 * pool with prefix caching: the one routine behind both `kvpool replay` and
 * `kvpool sweep`.
 */
#ifndef KVPT_REPLAY_H
#define KVPT_REPLAY_H

#include "output.h"
#include "trace.h"

#include <kvpool.h>
#include <stdint.h>

/* How a replay's pool chooses what to evict: the library's policy among
 * cached free blocks (with SLRU's protected share), and how many leading
 * blocks of each request are given KVP_PRIORITY_HIGH (0: none, every block
 * keeps KVP_PRIORITY_NORMAL). */
typedef struct kvpt_replay_opts {
    kvp_policy policy;
    uint32_t protected_percent;
    uint64_t priority_prefix;
} kvpt_replay_opts;

/* The default: LRU, no priorities. */
#define KVPT_REPLAY_OPTS_DEFAULT {KVP_POLICY_LRU, 50, 0}

/* What --policy accepts, for messages: the library's policy names, and
 * NAME:PERCENT for those with a protected share (a static string). */
const char *kvpt_policy_words(void);

/* The policy written `s` (a name of kvp_policy_name, or NAME:PERCENT for a
 * policy other than lru) into o->policy and o->protected_percent.  Returns
 * 0, or -1 when `s` is none of them. */
int kvpt_policy_parse(const char *s, kvpt_replay_opts *o);

/* o's policy as --policy writes it ("lru", "slru", "slru:20"), into buf. */
void kvpt_policy_label(const kvpt_replay_opts *o, char *buf, size_t cap);

typedef struct kvpt_replay_result {
    uint64_t capacity;          /* the capacity asked for (0 resolved) */
    uint64_t requests, rejected;
    uint64_t blocks_requested, blocks_hit;
    uint64_t tokens_requested;  /* sum of input_length */
    uint64_t tokens_hit;        /* sum of min(hit blocks x 512, input_length) */
    uint64_t evictions, peak_in_use;
    double seconds;             /* the replay loop alone */
} kvpt_replay_result;

/*
 * Replay every request of `t` in file order through a fresh pool of
 * `capacity` blocks (0: one block per hash id in the whole trace, so nothing
 * is ever evicted; a larger capacity is served by a pool of that size,
 * whose figures are the same) with the eviction of `opts` (NULL: LRU, no priorities)
 * and fill *r.  `progress` (may be NULL) is advanced from `progress_base` by
 * one per request.  Returns 0, or -1 with the error printed (the pool cannot
 * be created, or a library call fails).
 */
int kvpt_replay(const kvpt_trace *t, uint64_t capacity, const kvpt_replay_opts *opts,
                kvpt_progress *progress, uint64_t progress_base, kvpt_replay_result *r);

/* blocks_hit / blocks_requested and tokens_hit / tokens_requested (0 when
 * nothing was requested). */
double kvpt_hit_rate(const kvpt_replay_result *r);
double kvpt_tokens_hit_rate(const kvpt_replay_result *r);

/* `kvpool replay TRACE --capacity BLOCKS [--json] [--events ...]`
 * (argv[0] = "replay"); returns the exit code. */
int kvpt_cmd_replay(int argc, char **argv);

#endif /* KVPT_REPLAY_H */
