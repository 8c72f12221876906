/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c — `kvpool replay`: a Mooncake trace through a prefix-caching
 * pool, and kvpt_replay(), the routine `kvpool sweep` (sweep.c) repeats.
 *
 * kvpt_replay() drives the library's public API
 * exactly as an engine would for a prompt: look up the longest cached prefix
 * (stopping at the first miss), claim it, allocate the rest, publish it, and
 * free every block tail first so that a request's last blocks are evicted
 * before its first.  The pool uses LIFO reuse (vacant before cached), the
 * eviction policy asked for (LRU by default: cached blocks leave least
 * recently freed first), prefix caching on, anonymous references (owner
 * bookkeeping would only add cost: each request frees exactly what it took,
 * in one call).  With a priority prefix of N, the first N blocks of every
 * request are given KVP_PRIORITY_HIGH while the request holds them (kept
 * while they stay cached), as a server would keep a system prompt.
 */
#define _POSIX_C_SOURCE 200809L

#include "replay.h"

#include "common.h"
#include "events.h" /* --events: publish KV-cache events */

#include <kvpool.h>
#include <stdlib.h>
#include <string.h>

/* See replay.h. */
const char *kvpt_policy_words(void)
{
    static char words[256];
    if (words[0])
        return words;
    size_t n = 0;
    for (int v = 0; kvp_policy_name(v); v++)
        n += (size_t)snprintf(words + n, sizeof words - n, "%s, ", kvp_policy_name(v));
    snprintf(words + n, sizeof words - n,
             "or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50)");
    return words;
}

/* See replay.h. */
int kvpt_policy_parse(const char *s, kvpt_replay_opts *o)
{
    char name[32];
    size_t len = strcspn(s, ":");
    if (len >= sizeof name)
        return -1;
    memcpy(name, s, len);
    name[len] = '\0';
    kvp_policy pol;
    if (kvp_policy_parse(name, &pol) != KVP_OK || (s[len] && pol == KVP_POLICY_LRU))
        return -1;
    uint64_t pct = 50; /* digits as every count of the tool: leading zeros allowed */
    if (s[len] && kvpt_parse_u64(s + len + 1, 100, &pct))
        return -1;
    o->policy = pol;
    o->protected_percent = (uint32_t)pct;
    return 0;
}

/* See replay.h. */
void kvpt_policy_label(const kvpt_replay_opts *o, char *buf, size_t cap)
{
    if (o->policy == KVP_POLICY_LRU || o->protected_percent == 50)
        snprintf(buf, cap, "%s", kvp_policy_name(o->policy));
    else
        snprintf(buf, cap, "%s:%u", kvp_policy_name(o->policy), (unsigned)o->protected_percent);
}

/* The block hash of hash id `id`: id + 1, big-endian, in the last 8 bytes,
 * the rest zero (so no id maps to the all-zero hash). */
static inline void id_hash(kvp_hash *h, uint64_t id)
{
    uint64_t v = id + 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v); /* one store; gcc kept the eight byte stores apart */
#elif !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
#error "id_hash needs the host byte order"
#endif
    memset(h->b, 0, 24);
    memcpy(h->b + 24, &v, sizeof v);
}

/* Serve one admitted request of n blocks (hash ids `ids`), its first `high`
 * blocks at KVP_PRIORITY_HIGH: returns the number of hit blocks, or -1 on a
 * library error.  Scratch arrays hold n entries each. */
static long serve(kvp_pool *pool, const uint64_t *ids, size_t n, size_t high, kvp_hash *hs,
                  kvp_block *blk, kvp_block *rev)
{
    size_t hit = 0;
    kvp_status rc;
    for (; hit < n; hit++) {
        id_hash(&hs[hit], ids[hit]);
        if (kvp_lookup(pool, KVP_STREAM_SHARED, &hs[hit], &blk[hit]) != KVP_OK)
            break;
        if ((rc = kvp_claim(pool, blk[hit], KVP_ANON)) != KVP_OK)
            return kvpt_lib_error("kvp_claim", rc);
    }
    if (hit < n) {
        size_t got;
        rc = kvp_alloc(pool, KVP_STREAM_SHARED, (uint64_t)(n - hit) * KVPT_TRACE_BLOCK_TOKENS,
                       KVP_ANON, KVP_FMT_FP16, blk + hit, n - hit, &got);
        if (rc != KVP_OK)
            return kvpt_lib_error("kvp_alloc", rc);
        for (size_t i = hit; i < n; i++) {
            if (i > hit)
                id_hash(&hs[i], ids[i]);
            if ((rc = kvp_publish(pool, blk[i], &hs[i])) != KVP_OK)
                return kvpt_lib_error("kvp_publish", rc);
        }
    }
    /* claimed or new alike; a prefix, so no block is above its parent's
     * priority (kvp_policy's prefix rule) */
    for (size_t i = 0; i < n && i < high; i++)
        if ((rc = kvp_set_priority(pool, blk[i], KVP_PRIORITY_HIGH)) != KVP_OK)
            return kvpt_lib_error("kvp_set_priority", rc);
    for (size_t i = 0; i < n; i++)
        rev[i] = blk[n - 1 - i];
    if ((rc = kvp_free(pool, rev, n, KVP_ANON)) != KVP_OK)
        return kvpt_lib_error("kvp_free", rc);
    return (long)hit;
}

/* See replay.h.  Pool creation and scratch allocation happen before the
 * clock starts; only the request loop is timed. */
int kvpt_replay(const kvpt_trace *t, uint64_t capacity, const kvpt_replay_opts *opts,
                kvpt_progress *progress, uint64_t progress_base, kvpt_replay_result *r)
{
    static const kvpt_replay_opts lru = KVPT_REPLAY_OPTS_DEFAULT;
    if (!opts)
        opts = &lru;
    memset(r, 0, sizeof *r);
    uint64_t whole = t->total_blocks ? t->total_blocks : 1;
    if (capacity == 0)
        capacity = whole;
    r->capacity = capacity;
    /* every block the replay allocates is one of the trace's, so a pool of
     * `whole` blocks never evicts: any larger one gives the same figures */
    uint64_t pool_blocks = capacity < whole ? capacity : whole;
    if (pool_blocks > KVP_MAX_BLOCKS)
        pool_blocks = KVP_MAX_BLOCKS;

    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = KVPT_TRACE_BLOCK_TOKENS;
    cfg.num_blocks = (uint32_t)pool_blocks;
    cfg.max_blocks = (uint32_t)pool_blocks;
    cfg.prefix_caching = 1;
    cfg.reuse = KVP_REUSE_LIFO;
    cfg.policy = opts->policy;
    cfg.protected_percent = opts->protected_percent;
    /* As a server would: the tables' page faults happen at creation, which
     * `seconds` leaves out, not in the first requests that touch them. */
    cfg.prefault = 1;
    if (kvpt_events_on()) { /* replay --events: room for a whole request's events */
        cfg.events = 1;
        uint64_t most = t->max_blocks < capacity ? t->max_blocks : capacity; /* longer: rejected */
        uint64_t want = 2 * (most < 2048 ? 2048 : most) + 2;
        cfg.event_capacity = want < UINT32_MAX ? (uint32_t)want : UINT32_MAX - 1; /* the most */
    }
    kvp_pool *pool;
    kvp_status rc = kvp_pool_create(&cfg, &pool);
    if (rc != KVP_OK)
        return kvpt_lib_error("kvp_pool_create", rc);

    size_t scratch = t->max_blocks ? (size_t)t->max_blocks : 1;
    kvp_hash *hs = malloc(scratch * sizeof *hs);
    kvp_block *blk = malloc(scratch * sizeof *blk);
    kvp_block *rev = malloc(scratch * sizeof *rev);
    int ret = -1;
    if (!hs || !blk || !rev) {
        kvpt_error("out of memory");
        goto out;
    }

    size_t high = opts->priority_prefix < SIZE_MAX ? (size_t)opts->priority_prefix : SIZE_MAX;
    double t0 = kvpt_now();
    for (size_t q = 0; q < t->n_requests; q++) {
        size_t n = (size_t)(t->offset[q + 1] - t->offset[q]);
        r->blocks_requested += n;
        if (n > capacity) {
            r->rejected++;
            continue;
        }
        long hit = serve(pool, t->ids + t->offset[q], n, high, hs, blk, rev);
        if (hit < 0 || kvpt_events_pump(pool)) /* events: one batch per request */
            goto out;
        uint64_t tok = (uint64_t)hit * KVPT_TRACE_BLOCK_TOKENS;
        r->blocks_hit += (uint64_t)hit;
        r->tokens_hit += tok < t->input_length[q] ? tok : t->input_length[q];
        if (progress && progress->on && (q & 1023) == 0)
            kvpt_progress_update(progress, progress_base + q);
    }
    r->seconds = kvpt_now() - t0;
    r->requests = t->n_requests;
    r->tokens_requested = t->total_input;

    kvp_stats st;
    if ((rc = kvp_stats_get(pool, &st)) != KVP_OK) {
        kvpt_lib_error("kvp_stats_get", rc);
        goto out;
    }
    r->evictions = st.evictions;
    r->peak_in_use = st.peak_in_use;
    ret = 0;
out:
    free(hs);
    free(blk);
    free(rev);
    kvp_pool_destroy(pool);
    return ret;
}

/* Hit blocks over requested blocks. */
double kvpt_hit_rate(const kvpt_replay_result *r)
{
    return r->blocks_requested ? (double)r->blocks_hit / (double)r->blocks_requested : 0.0;
}

/* Hit tokens (capped at each prompt's length) over prompt tokens. */
double kvpt_tokens_hit_rate(const kvpt_replay_result *r)
{
    return r->tokens_requested ? (double)r->tokens_hit / (double)r->tokens_requested : 0.0;
}

/* Print one replay as a two-column table. */
static void print_replay_table(const kvpt_trace *t, const kvpt_replay_opts *o,
                               const kvpt_replay_result *r)
{
    static const char *const headers[] = {"metric", "value"};
    kvpt_table *tab = kvpt_table_new(2, headers, "lr");
    if (!tab)
        return;
    double bps = r->seconds > 0 ? (double)r->blocks_requested / r->seconds : 0.0;
    kvpt_table_cell(tab, "trace");
    kvpt_table_cell(tab, "%s", kvpt_safe_text(t->path));
    kvpt_table_cell(tab, "capacity (blocks)");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->capacity);
    char label[16];
    kvpt_policy_label(o, label, sizeof label);
    kvpt_table_cell(tab, "policy");
    kvpt_table_cell(tab, "%s", label);
    kvpt_table_cell(tab, "priority prefix");
    kvpt_table_cell(tab, "%llu", (unsigned long long)o->priority_prefix);
    kvpt_table_cell(tab, "requests");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->requests);
    kvpt_table_cell(tab, "rejected");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->rejected);
    kvpt_table_cell(tab, "blocks requested");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_requested);
    kvpt_table_cell(tab, "blocks hit");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_hit);
    kvpt_table_cell(tab, "hit rate");
    kvpt_table_cell(tab, "%.4f", kvpt_hit_rate(r));
    kvpt_table_cell(tab, "tokens hit rate");
    kvpt_table_cell(tab, "%.4f", kvpt_tokens_hit_rate(r));
    kvpt_table_cell(tab, "evictions");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->evictions);
    kvpt_table_cell(tab, "peak in use (blocks)");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->peak_in_use);
    kvpt_table_cell(tab, "load time (s)");
    kvpt_table_cell(tab, "%.3f", t->load_seconds);
    kvpt_table_cell(tab, "replay time (s)");
    kvpt_table_cell(tab, "%.4f", r->seconds);
    kvpt_table_cell(tab, "blocks per second");
    kvpt_table_cell(tab, "%.3g", bps);
    kvpt_table_print(tab, stdout);
    kvpt_table_free(tab);
}

/* Print one replay as the documented JSON object. */
static int print_replay_json(const kvpt_trace *t, const kvpt_replay_opts *opts,
                             const kvpt_replay_result *r)
{
    double bps = r->seconds > 0 ? (double)r->blocks_requested / r->seconds : 0.0;
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:I, s:I, s:f, "
                          "s:f, s:f}",
                          "trace", t->path,
                          "capacity", (json_int_t)r->capacity,
                          "requests", (json_int_t)r->requests,
                          "rejected", (json_int_t)r->rejected,
                          "blocks_requested", (json_int_t)r->blocks_requested,
                          "blocks_hit", (json_int_t)r->blocks_hit,
                          "hit_rate", kvpt_hit_rate(r),
                          "tokens_requested", (json_int_t)r->tokens_requested,
                          "tokens_hit", (json_int_t)r->tokens_hit,
                          "tokens_hit_rate", kvpt_tokens_hit_rate(r),
                          "evictions", (json_int_t)r->evictions,
                          "peak_in_use", (json_int_t)r->peak_in_use,
                          "seconds", r->seconds,
                          "load_seconds", t->load_seconds,
                          "blocks_per_second", bps);
    char label[16];
    kvpt_policy_label(opts, label, sizeof label);
    if (o && (json_object_set_new(o, "policy", json_string(label)) ||
              json_object_set_new(o, "priority_prefix",
                                  json_integer((json_int_t)opts->priority_prefix)))) {
        json_decref(o);
        o = NULL;
    }
    return kvpt_json_line(o) ? kvpt_error("cannot render JSON") : KVPT_EXIT_OK;
}

static const char usage_replay[] =
    "usage: kvpool replay TRACE --capacity BLOCKS [--policy lru|slru|lfu[:PERCENT]]\n"
    "                     [--priority-prefix N] [--json]\n"
    "                     [--events ENDPOINT [--events-connect] [--topic T]\n"
    "                      [--events-wait S]]\n"
    "\n"
    "Replay TRACE (Mooncake JSON Lines, plain or gzip: {\"timestamp\", \"input_length\",\n"
    "\"output_length\", \"hash_ids\"}) through a pool of BLOCKS blocks of 512 tokens with\n"
    "prefix caching.  Per request, in file order: claim the longest cached prefix of\n"
    "its hash_ids, allocate the rest (evicting cached blocks as --policy says),\n"
    "publish them, then free all of them tail first so they stay cached.  A request\n"
    "with more hash ids than BLOCKS is rejected (counted, no hits, and a warning\n"
    "on stderr names the capacity that admits every request).  The pool is\n"
    "created with prefault, as a server would at start-up, so its page faults fall\n"
    "before the timed loop.\n"
    "\n"
    "TRACE '-' is standard input; pipes and FIFOs work (the input is read once).\n"
    "Each line is at most 1 MiB, its fields non-negative integers (no key twice),\n"
    "and hash_ids has exactly ceil(input_length / 512) ids.  An input with no\n"
    "request, data after the gzip stream (consecutive gzip members are one\n"
    "stream) or a line breaking a rule is refused as \"FILE:LINE: what is wrong\".\n"
    "\n"
    "  --capacity BLOCKS  pool size in blocks, 0 to 2147483647; 0 = large enough\n"
    "                     for the whole trace.  A pool larger than the trace's\n"
    "                     block count (the sum of its requests' hash ids) never\n"
    "                     evicts and gives the same figures, so the pool is\n"
    "                     created no larger than that\n"
    "  --policy P         which cached block is evicted first: lru (the default),\n"
    "                     the least recently freed; or slru, segmented LRU with\n"
    "                     a ghost list: a block claimed again since it was\n"
    "                     published, or whose hash was evicted recently, is\n"
    "                     protected, and probationary blocks go before it;\n"
    "                     slru:PERCENT caps the protected blocks at PERCENT of\n"
    "                     the pool (0-100; slru alone is slru:50); or lfu,\n"
    "                     least frequently claimed first, with aging: a block\n"
    "                     freed after one claim, or two and more, outlives\n"
    "                     those claimed less, and lfu:PERCENT caps those two\n"
    "                     classes at PERCENT / 2 of the pool each\n"
    "  --priority-prefix N  the first N blocks of every request get retention\n"
    "                     priority high (kvp_set_priority after claim or\n"
    "                     allocation), so cached blocks of normal priority are\n"
    "                     evicted before them: a system prompt kept; default 0\n"
    "  --json             one JSON object: requests, rejected, blocks_requested,\n"
    "                     blocks_hit, hit_rate, tokens_requested, tokens_hit,\n"
    "                     tokens_hit_rate, evictions, peak_in_use, seconds (replay\n"
    "                     loop), load_seconds (read + parse), blocks_per_second,\n"
    "                     policy, priority_prefix\n"
    "  --events ENDPOINT  publish the replay's KV-cache events live (ZeroMQ, vLLM\n"
    "                     wire format, one batch per request; docs/EVENTS.md),\n"
    "                     bound, e.g. tcp://127.0.0.1:5557 (port 1-65535, or '*'\n"
    "                     for one chosen by the system)\n"
    "  --events-connect   connect to ENDPOINT instead (the subscriber binds); its\n"
    "                     host must resolve\n"
    "  --topic T          topic of every message (default empty; llm-d:\n"
    "                     kv@<pod address>@<model name>)\n"
    "  --events-wait S    first wait up to S seconds for a subscriber (default 2)\n"
    "\n"
    "Each option may be given once.  A progress bar is drawn on stderr when stderr\n"
    "is a terminal.\n";

/* `kvpool replay TRACE --capacity BLOCKS [--policy P] [--priority-prefix N]
 * [--json] [--events ...]`. */
int kvpt_cmd_replay(int argc, char **argv)
{
    uint64_t capacity = 0;
    const char *policy = "lru";
    kvpt_replay_opts ro = KVPT_REPLAY_OPTS_DEFAULT;
    int json = 0, events_connect = 0;
    const char *events_ep = NULL, *events_topic = NULL; /* --events (events.c) */
    double events_wait = 2;
    const kvpt_opt opts[] = {
        {"capacity", KVPT_OPT_COUNT, &capacity, 0, KVP_MAX_BLOCKS, "a block count",
         "0: the whole trace"},
        {"policy", KVPT_OPT_TEXT, &policy, 0, 0, NULL, NULL},
        {"priority-prefix", KVPT_OPT_COUNT, &ro.priority_prefix, 0, KVP_MAX_BLOCKS,
         "a block count", NULL},
        {"json", KVPT_OPT_FLAG, &json, 0, 0, NULL, NULL},
        {"events", KVPT_OPT_TEXT, &events_ep, 0, 0, NULL, NULL},
        {"topic", KVPT_OPT_TEXT, &events_topic, 0, 0, NULL, NULL},
        {"events-wait", KVPT_OPT_SECONDS, &events_wait, 0, KVPT_SECONDS_MAX, NULL, NULL},
        {"events-connect", KVPT_OPT_FLAG, &events_connect, 0, 0, NULL, NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"replay", usage_replay, opts, "TRACE", 1, 1};
    int first, rc = kvpt_parse_args(&cli, argc, argv, &first);
    if (rc >= 0)
        return rc;
    if (kvpt_policy_parse(policy, &ro))
        return kvpt_usage_error("replay", "--policy: expected %s, got '%s'", kvpt_policy_words(),
                                policy);

    if (events_ep && (rc = kvpt_events_check("replay", events_ep, events_connect)))
        return rc;

    kvpt_trace t;
    if (kvpt_trace_load(argv[first], &t))
        return KVPT_EXIT_ERROR;
    if (events_ep && kvpt_events_start(events_ep, events_connect, events_topic, events_wait)) {
        kvpt_trace_free(&t);
        return KVPT_EXIT_ERROR;
    }
    kvpt_progress prog;
    kvpt_progress_start(&prog, "replay", t.n_requests);
    kvpt_replay_result r;
    rc = kvpt_replay(&t, capacity, &ro, &prog, 0, &r);
    kvpt_progress_end(&prog);
    kvpt_events_stop(); /* lets queued messages leave */
    if (rc == 0) {
        if (json)
            rc = print_replay_json(&t, &ro, &r);
        else
            print_replay_table(&t, &ro, &r);
    }
    if (rc == 0 && r.rejected)
        fprintf(stderr, "kvpool replay: warning: %llu of %llu requests rejected (more blocks "
                        "than --capacity %llu); capacity %llu, the longest request, admits "
                        "them all\n",
                (unsigned long long)r.rejected, (unsigned long long)r.requests,
                (unsigned long long)r.capacity, (unsigned long long)t.max_blocks);
    kvpt_trace_free(&t);
    return rc ? KVPT_EXIT_ERROR : KVPT_EXIT_OK;
}
