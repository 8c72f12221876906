/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c — `kvpool bench`: the command, and the churn and scale workloads
 * described in docs/PERFORMANCE.md.  The prefix workload is in bench_prefix.c; the harness both
 * use (generator, repetitions, memory readings, output) in bench_harness.c.
 *
 * churn and scale share one driver: the operation sequence (which live
 * sequence gets the next block, and whether that block completes it) is
 * generated up front from splitmix64 seeded with 42, then replayed against
 * the pool and against the floor (a stack of free ids and an id array per
 * sequence).  On the pool, the takes between two completions are one
 * kvp_take_each, as a decode step's takes would be: by rows into the
 * sequences' owner ids and their hints, kept side by side as an engine
 * keeps them in its request records; kvp_free_owner when a sequence
 * completes.  churn also times the same takes one kvp_take_hinted per block
 * (single_ns_per_block) and one plain kvp_take per block, which finds the
 * owner by lookup (lookup_ns_per_block).  Large allocations
 * are forced onto fresh mappings (mallopt) so that resident-memory growth
 * measures the pool and not reused heap.
 */
#define _GNU_SOURCE /* mallopt */

#include "bench.h"

#include "common.h"

#include <kvpool.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- churn driver ------------------------------------------------------- */

#define OP_DONE 0x80000000u /* this allocation completes its sequence */

/* One churn configuration ("churn" in docs/PERFORMANCE.md; "scale" varies it). */
typedef struct churn_spec {
    uint32_t blocks;         /* pool size */
    uint32_t live;           /* live sequences */
    uint32_t min_tokens, max_tokens; /* target length range */
    uint64_t allocations;
} churn_spec;

/* The generated operations and both sides' state. */
typedef struct churn {
    churn_spec spec;
    uint32_t *ops;           /* slot | OP_DONE, one per allocation */
    uint32_t *rows;          /* the same slots without OP_DONE */
    size_t *done;            /* indexes in ops of the OP_DONE entries */
    size_t ndone;
    kvp_block *out;          /* library: kvp_take_each's blocks, for the
                                longest run of takes between two frees */
    uint32_t max_seq;        /* blocks of the longest possible sequence */
    kvp_pool *pool;
    kvp_owner *owner;        /* library: owner id of each slot's sequence */
    uint32_t *hint;          /* library: its kvp_take_hinted hint */
    uint32_t *stack;         /* floor: free ids */
    uint32_t *seq;           /* floor: live x max_seq ids */
    uint32_t *len;           /* floor: ids held per slot */
} churn;

/* Blocks for a target drawn uniformly from the spec's token range. */
static uint32_t draw_target(bench_rng *rng, const churn_spec *sp)
{
    uint64_t tokens = bench_rng_range(rng, sp->min_tokens, sp->max_tokens);
    return (uint32_t)((tokens + BENCH_BLOCK_TOKENS - 1) / BENCH_BLOCK_TOKENS);
}

/* Free the driver's arrays and pool. */
static void churn_free(churn *c)
{
    kvp_pool_destroy(c->pool);
    free(c->ops);
    free(c->rows);
    free(c->done);
    free(c->out);
    free(c->owner);
    free(c->hint);
    free(c->stack);
    free(c->seq);
    free(c->len);
    memset(c, 0, sizeof *c);
}

/* Generate the operation sequence and allocate (and touch) every array the
 * runs use, so that neither generation nor first-touch faults are timed or
 * counted as pool memory.  Returns -1 when memory runs out. */
static int churn_init(churn *c, const churn_spec *sp)
{
    memset(c, 0, sizeof *c);
    c->spec = *sp;
    c->max_seq = (sp->max_tokens + BENCH_BLOCK_TOKENS - 1) / BENCH_BLOCK_TOKENS;
    c->ops = malloc(sp->allocations * sizeof *c->ops);
    c->rows = malloc(sp->allocations * sizeof *c->rows);
    c->done = malloc(sp->allocations * sizeof *c->done);
    c->owner = calloc(sp->live, sizeof *c->owner);
    c->hint = calloc(sp->live, sizeof *c->hint);
    c->stack = malloc((size_t)sp->blocks * sizeof *c->stack);
    c->seq = malloc((size_t)sp->live * c->max_seq * sizeof *c->seq);
    c->len = calloc(sp->live, sizeof *c->len);
    uint32_t *need = malloc(sp->live * sizeof *need);
    if (!c->ops || !c->rows || !c->done || !c->owner || !c->hint || !c->stack || !c->seq ||
        !c->len || !need) {
        free(need);
        churn_free(c);
        kvpt_error("out of memory");
        return -1;
    }
    /* Touched with a non-zero byte: malloc + memset(0) may be compiled into
     * calloc, which leaves fresh pages untouched, and the floor's 6 MB at 1M
     * blocks then became resident inside the library's RSS window. */
    memset(c->stack, 0xff, (size_t)sp->blocks * sizeof *c->stack);
    memset(c->seq, 0xff, (size_t)sp->live * c->max_seq * sizeof *c->seq);
    bench_rng rng = {BENCH_SEED};
    for (uint32_t s = 0; s < sp->live; s++) {
        need[s] = draw_target(&rng, sp);
        c->len[s] = 0;
    }
    size_t batch = 0, longest = 1;
    for (uint64_t i = 0; i < sp->allocations; i++) {
        uint32_t s = (uint32_t)bench_rng_range(&rng, 0, sp->live - 1);
        c->ops[i] = c->rows[i] = s;
        if (++batch > longest)
            longest = batch;
        if (++c->len[s] == need[s]) {
            c->ops[i] |= OP_DONE;
            c->done[c->ndone++] = (size_t)i;
            batch = 0;
            c->len[s] = 0;
            need[s] = draw_target(&rng, sp);
        }
    }
    free(need);
    c->out = malloc(longest * sizeof *c->out);
    if (!c->out) {
        churn_free(c);
        kvpt_error("out of memory");
        return -1;
    }
    return 0;
}

/* Create the pool for a spec: one shared stream, no growth; `mem` is the
 * memory hook (NULL: the library's default). */
static kvp_status churn_pool_create(const churn_spec *sp, const kvp_allocator *mem,
                                    kvp_pool **out)
{
    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = BENCH_BLOCK_TOKENS;
    cfg.num_blocks = sp->blocks;
    cfg.max_blocks = sp->blocks;
    cfg.allocator = mem;
    return kvp_pool_create(&cfg, out);
}

/* How the library side gives each allocation its block. */
typedef enum churn_call {
    CALL_EACH,   /* kvp_take_each: the takes between two frees in one call */
    CALL_HINTED, /* kvp_take_hinted, one call per block */
    CALL_LOOKUP  /* kvp_take, one call per block, the owner found by lookup */
} churn_call;

/* Library side: every allocation a take for its sequence's owner (the hint
 * kept beside the owner id, as an engine would keep it in its request
 * record), kvp_free_owner when a sequence completes and for every live
 * sequence at the end (so each allocation is timed with its free).  With
 * CALL_EACH the takes between two completions are one kvp_take_each, as a
 * decode step's takes would be.  Inline with `call` a constant, so each
 * timed loop is only its own calls, as an engine's would be. */
static inline __attribute__((always_inline)) double churn_run(churn *c, churn_call call)
{
    kvp_pool *pool = c->pool;
    kvp_owner *owner = c->owner, next = c->spec.live;
    uint32_t *hint = c->hint;
    for (uint32_t s = 0; s < c->spec.live; s++) {
        owner[s] = s;
        hint[s] = KVP_HINT_NONE;
    }
    kvp_status rc = KVP_OK;
    double t0 = kvpt_now();
    if (call == CALL_EACH) {
        size_t a = 0, n = (size_t)c->spec.allocations;
        for (size_t d = 0; d <= c->ndone; d++) {
            size_t e = d < c->ndone ? c->done[d] + 1 : n, got;
            rc = kvp_take_each(pool, KVP_STREAM_SHARED, owner, hint, c->rows + a, e - a, c->out,
                               &got);
            if (rc != KVP_OK || d == c->ndone)
                break;
            uint32_t s = c->rows[e - 1];
            if ((rc = kvp_free_owner(pool, owner[s], NULL)) != KVP_OK)
                break;
            owner[s] = next++;
            hint[s] = KVP_HINT_NONE;
            a = e;
        }
    } else {
        const uint32_t *op = c->ops, *end = op + c->spec.allocations;
        kvp_block b;
        for (; op < end; op++) {
            uint32_t s = *op & ~OP_DONE;
            rc = call == CALL_LOOKUP
                     ? kvp_take(pool, KVP_STREAM_SHARED, owner[s], &b)
                     : kvp_take_hinted(pool, KVP_STREAM_SHARED, owner[s], &hint[s], &b);
            if (rc != KVP_OK)
                break;
            if (*op & OP_DONE) {
                if ((rc = kvp_free_owner(pool, owner[s], NULL)) != KVP_OK)
                    break;
                owner[s] = next++;
                hint[s] = KVP_HINT_NONE;
            }
        }
    }
    for (uint32_t s = 0; s < c->spec.live && rc == KVP_OK; s++) {
        rc = kvp_free_owner(pool, owner[s], NULL);
        if (rc == KVP_ENOTFOUND) /* a sequence that had taken nothing yet */
            rc = KVP_OK;
    }
    double t = kvpt_now() - t0;
    if (rc != KVP_OK) {
        return kvpt_lib_error("churn", rc);
    }
    return t;
}

static double churn_lib(void *ctx)
{
    return churn_run(ctx, CALL_EACH);
}

static double churn_lib_hinted(void *ctx)
{
    return churn_run(ctx, CALL_HINTED);
}

static double churn_lib_lookup(void *ctx)
{
    return churn_run(ctx, CALL_LOOKUP);
}

/* Floor side: pop from the free stack into the sequence's array; on
 * completion push its ids back, newest first.
 *
 * Aligned so that only an edit to this function can move its loop: on the
 * AMD EPYC vCPUs of PERFORMANCE.md the loop runs about 25% slower with its
 * head on a 64-byte boundary than at the other three 16-byte offsets, and
 * without the alignment any change to the code before it could move it
 * there and back, and the ratio with it. */
__attribute__((aligned(64))) static double churn_floor(void *ctx)
{
    churn *c = ctx;
    uint32_t *stack = c->stack, *len = c->len, max_seq = c->max_seq;
    uint32_t top = c->spec.blocks;
    for (uint32_t i = 0; i < top; i++)
        stack[i] = top - 1 - i;
    memset(len, 0, c->spec.live * sizeof *len);
    const uint32_t *ops = c->ops;
    size_t n = (size_t)c->spec.allocations;
    double t0 = kvpt_now();
    for (size_t i = 0; i < n; i++) {
        uint32_t s = ops[i] & ~OP_DONE;
        uint32_t *ids = c->seq + (size_t)s * max_seq;
        ids[len[s]++] = stack[--top];
        if (ops[i] & OP_DONE) {
            for (uint32_t k = len[s]; k > 0; k--)
                stack[top++] = ids[k - 1];
            len[s] = 0;
        }
    }
    for (uint32_t s = 0; s < c->spec.live; s++) {
        uint32_t *ids = c->seq + (size_t)s * max_seq;
        for (uint32_t k = len[s]; k > 0; k--)
            stack[top++] = ids[k - 1];
        len[s] = 0;
    }
    return kvpt_now() - t0;
}

/* Nanoseconds per allocation of a run of `seconds`. */
static double per_block_ns(const churn *c, double seconds)
{
    return seconds * 1e9 / (double)c->spec.allocations;
}

/* ---- churn -------------------------------------------------------------- */

/* "churn" (docs/PERFORMANCE.md): 65,536 blocks, 256 sequences of [128, 2048] tokens,
 * 1,000,000 allocations (divided by `scale`). */
static int bench_churn(bench_out *out, unsigned scale)
{
    churn_spec sp = {65536, 256, 128, 2048, 1000000 / scale};
    churn c;
    if (churn_init(&c, &sp))
        return -1;
    kvp_status rc = churn_pool_create(&sp, NULL, &c.pool);
    if (rc != KVP_OK) {
        churn_free(&c);
        return kvpt_lib_error("kvp_pool_create", rc);
    }
    /* Plain kvp_take, then one kvp_take_hinted per block, then the figure
     * itself (kvp_take_each), each with its own floor. */
    double lib_s, floor_s, lookup_s, lookup_floor_s, single_s, single_floor_s;
    int ret = bench_reps(churn_lib_lookup, churn_floor, &c, &lookup_s, &lookup_floor_s);
    if (ret == 0)
        ret = bench_reps(churn_lib_hinted, churn_floor, &c, &single_s, &single_floor_s);
    if (ret == 0)
        ret = bench_reps(churn_lib, churn_floor, &c, &lib_s, &floor_s);
    if (ret == 0) {
        double ns = per_block_ns(&c, lib_s), fl = per_block_ns(&c, floor_s);
        double lk = per_block_ns(&c, lookup_s), lkfl = per_block_ns(&c, lookup_floor_s);
        double sg = per_block_ns(&c, single_s), sgfl = per_block_ns(&c, single_floor_s);
        uint64_t peak = bench_peak_rss_kb();
        char config[96], details[128];
        snprintf(config, sizeof config, "%u blocks, %u seqs", sp.blocks, sp.live);
        snprintf(details, sizeof details,
                 "kvp_take_hinted %.1f (%.1fx), kvp_take %.1f (%.1fx); peak RSS %llu KiB", sg,
                 sg / sgfl, lk, lk / lkfl, (unsigned long long)peak);
        json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s,"
                              " s:s, s:i}",
                              "workload", "churn", "blocks", (json_int_t)sp.blocks,
                              "live_sequences", (json_int_t)sp.live,
                              "allocations", (json_int_t)sp.allocations,
                              "ns_per_block", ns, "floor_ns_per_block", fl,
                              "ratio_to_floor", ns / fl, "single_ns_per_block", sg,
                              "single_ratio_to_floor", sg / sgfl, "lookup_ns_per_block", lk,
                              "lookup_ratio_to_floor", lk / lkfl,
                              "peak_rss_kb", (json_int_t)peak, "call", "kvp_take_each",
                              "prng", "splitmix64", "reps", BENCH_REPS);
        ret = bench_emit(out, o, config, details);
    }
    churn_free(&c);
    return ret;
}

/* ---- scale -------------------------------------------------------------- */

/* Publish every block of the pool under a distinct random hash (a digest's
 * tail is random) and free them all, so that every per-block structure
 * (record, digest, index) has been touched; `ids` holds the pool's size. */
static kvp_status touch_all(kvp_pool *pool, uint32_t blocks, kvp_block *ids)
{
    size_t n;
    kvp_status rc = kvp_alloc(pool, KVP_STREAM_SHARED, (uint64_t)blocks * BENCH_BLOCK_TOKENS,
                              KVP_ANON, KVP_FMT_FP16, ids, blocks, &n);
    bench_rng rng = {BENCH_SEED};
    for (size_t i = 0; i < n && rc == KVP_OK; i++) {
        kvp_hash h;
        memset(&h, 0, sizeof h);
        uint64_t tail = bench_rng_next(&rng);
        memcpy(h.b + 24, &tail, sizeof tail);
        rc = kvp_publish(pool, ids[i], &h);
    }
    if (rc == KVP_OK)
        rc = kvp_free(pool, ids, n, KVP_ANON);
    return rc;
}

/* A memory hook that counts the bytes the library holds. */
typedef struct counting {
    size_t live;
} counting;

/* malloc, counted. */
static void *count_alloc(void *user, size_t size)
{
    void *m = malloc(size);
    if (m)
        ((counting *)user)->live += size;
    return m;
}

/* free, counted. */
static void count_release(void *user, void *ptr, size_t size)
{
    ((counting *)user)->live -= size;
    free(ptr);
}

/* Bytes the library holds for a pool of the spec's size once every block has
 * been used and published (touch_all), whatever is resident: a separate pool
 * through a counting memory hook.  `ids` holds the pool's size. */
static int allocated_bytes(const churn_spec *sp, kvp_block *ids, size_t *bytes)
{
    counting cnt = {0};
    kvp_allocator mem = {count_alloc, count_release, &cnt};
    kvp_pool *pool;
    kvp_status rc = churn_pool_create(sp, &mem, &pool);
    if (rc == KVP_OK) {
        rc = touch_all(pool, sp->blocks, ids);
        *bytes = cnt.live;
        kvp_pool_destroy(pool);
    }
    return rc == KVP_OK ? 0 : kvpt_lib_error("scale, counting allocator", rc);
}

/* Median of BENCH_REPS create/destroy pairs, in milliseconds. */
static int time_create(const churn_spec *sp, double *ms)
{
    double t[BENCH_REPS];
    for (int i = 0; i < BENCH_REPS; i++) {
        kvp_pool *pool;
        double t0 = kvpt_now();
        kvp_status rc = churn_pool_create(sp, NULL, &pool);
        t[i] = (kvpt_now() - t0) * 1e3;
        if (rc != KVP_OK) {
            return kvpt_lib_error("kvp_pool_create", rc);
        }
        kvp_pool_destroy(pool);
    }
    *ms = bench_median(t, BENCH_REPS);
    return 0;
}

/* One size of "scale": churn timing, creation time (median of fresh pools),
 * and memory three ways: resident growth over the pool's life after the
 * workload (bytes_per_block: blocks never handed out cost nothing, they are
 * set up on first touch), resident growth once every block has been used and
 * published (bytes_per_block_all_in), and the bytes the library holds through
 * its memory hook at that point (bytes_per_block_allocated, exact at every
 * size, where resident growth of a small pool hides in malloc's heap).
 * *ns receives ns_per_block. */
static int scale_one(bench_out *out, const churn_spec *sp, double ns_smallest, double *ns)
{
    churn c;
    if (churn_init(&c, sp))
        return -1;
    kvp_block *ids = malloc((size_t)sp->blocks * sizeof *ids);
    double create_ms = 0;
    int ret = -1;
    if (!ids) {
        kvpt_error("out of memory");
        goto out;
    }
    memset(ids, 0xff, (size_t)sp->blocks * sizeof *ids); /* resident now (see churn_init) */
    if (time_create(sp, &create_ms))
        goto out;
    uint64_t rss0 = bench_rss_kb();
    kvp_status rc = churn_pool_create(sp, NULL, &c.pool);
    if (rc != KVP_OK) {
        kvpt_lib_error("kvp_pool_create", rc);
        goto out;
    }
    double lib_s, floor_s;
    if (bench_reps(churn_lib, churn_floor, &c, &lib_s, &floor_s))
        goto out;
    uint64_t rss1 = bench_rss_kb();
    if ((rc = touch_all(c.pool, sp->blocks, ids)) != KVP_OK) {
        kvpt_lib_error("scale", rc);
        goto out;
    }
    uint64_t rss2 = bench_rss_kb();
    size_t held = 0;
    if (allocated_bytes(sp, ids, &held))
        goto out;
    double bpb = (double)(rss1 > rss0 ? rss1 - rss0 : 0) * 1024.0 / sp->blocks;
    double bpb_all = (double)(rss2 > rss0 ? rss2 - rss0 : 0) * 1024.0 / sp->blocks;
    double bpb_alloc = (double)held / sp->blocks;
    *ns = per_block_ns(&c, lib_s);
    double fl = per_block_ns(&c, floor_s);
    double flat = ns_smallest > 0 ? *ns / ns_smallest : 1.0;
    char config[96], details[160];
    snprintf(config, sizeof config, "%u blocks, %u seqs", sp->blocks, sp->live);
    snprintf(details, sizeof details,
             "%.2fx of smallest; create %.3f ms; RSS %.0f B/block (%.0f all in); "
             "allocated %.1f B/block",
             flat, create_ms, bpb, bpb_all, bpb_alloc);
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, "
                          "s:i}",
                          "workload", "scale", "blocks", (json_int_t)sp->blocks,
                          "live_sequences", (json_int_t)sp->live,
                          "allocations", (json_int_t)sp->allocations, "ns_per_block", *ns,
                          "floor_ns_per_block", fl, "ratio_to_floor", *ns / fl,
                          "ns_ratio_to_smallest", flat, "create_ms", create_ms,
                          "bytes_per_block", bpb, "bytes_per_block_all_in", bpb_all,
                          "bytes_per_block_allocated", bpb_alloc, "prng", "splitmix64", "reps", BENCH_REPS);
    ret = bench_emit(out, o, config, details);
out:
    free(ids);
    churn_free(&c);
    return ret;
}

/* "scale" (docs/PERFORMANCE.md): churn at 1,024, 65,536 and 1,048,576 blocks. */
static int bench_scale(bench_out *out, unsigned scale)
{
    const churn_spec specs[] = {
        {1024, 8, 16, 256, 1000000 / scale},
        {65536, 256, 128, 2048, 1000000 / scale},
        {1048576, 4096, 128, 2048, 1000000 / scale},
    };
    double smallest = 0, ns;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        if (scale_one(out, &specs[i], smallest, &ns))
            return -1;
        if (i == 0)
            smallest = ns;
    }
    return 0;
}

/* ---- command ------------------------------------------------------------ */

static const char usage_bench[] =
    "usage: kvpool bench [--workload churn|prefix|scale|load|all] [--quick] [--json]\n"
    "                    [--trace FILE]\n"
    "\n"
    "Run the workloads of docs/PERFORMANCE.md (block size 16, splitmix64 seeded\n"
    "with 42, operations generated before timing) and, right after each, its\n"
    "floor: the same operations on the simplest structure that could do the job.\n"
    "Figures are the median of 5 timed repetitions after one warm-up, library and\n"
    "floor timed back to back in each.\n"
    "\n"
    "  churn   65,536 blocks, 256 live sequences of [128, 2048] tokens, one block\n"
    "          at a time to a random sequence, 1,000,000 allocations; the takes\n"
    "          between two completions in one kvp_take_each (as a decode step's,\n"
    "          each sequence's hint kept beside its owner id), kvp_free_owner at\n"
    "          the end of a sequence; then the same one kvp_take_hinted per block,\n"
    "          and one plain kvp_take per block (owner looked up every call)\n"
    "  prefix  16,384 blocks, 64 system prompts of 1,024 tokens (Zipf 1.1) plus a\n"
    "          unique suffix of [256, 1024] tokens, 20,000 requests, with SHA-256\n"
    "          and with XXH3-128; each through the call-level path (hash_tokens,\n"
    "          claim_prefix, alloc, publish_each, free: api \"calls\") and through\n"
    "          the sequence API (seq_create, seq_admit, seq_destroy: api \"seq\");\n"
    "          then workload \"publish\": 10,000 and 80,000 blocks published in one\n"
    "          publish_each under one hash (keys \"duplicates\") or under hashes\n"
    "          that share a bucket without a keyed hash (keys \"crafted\"), the\n"
    "          floor the same publish of random distinct hashes\n"
    "  scale   churn at 1,024 blocks (8 sequences, [16, 256] tokens), 65,536 and\n"
    "          1,048,576 blocks (4,096 sequences): ns per block, pool creation\n"
    "          time, resident bytes per block\n"
    "  load    (only when asked) loading --trace FILE (default the bundled\n"
    "          data/mooncake_fast25_conversation_trace.jsonl.gz) against its floor,\n"
    "          reading and inflating it without parsing; beside them `zcat`,\n"
    "          Python's gzip + json.loads per line (timed in the interpreter) and\n"
    "          one replay at 10,000 blocks, each repetition running all in turn\n"
    "\n"
    "  --workload W  churn, prefix, scale, load or all (default all: not load)\n"
    "  --trace FILE  the trace of the load workload (only with --workload load)\n"
    "  --quick       1/50 of the operations (same pool sizes), for tests\n"
    "  --json        one JSON object per workload and configuration per line:\n"
    "                workload, ns_per_block, floor_ns_per_block, ratio_to_floor;\n"
    "                prefix adds hash, api, us_per_request, hit_rate,\n"
    "                floor_hit_rate; scale adds blocks, create_ms,\n"
    "                bytes_per_block (resident growth after the workload),\n"
    "                bytes_per_block_all_in (resident growth once every block\n"
    "                was used and published), bytes_per_block_allocated (bytes\n"
    "                held through the library's memory hook); churn adds\n"
    "                single_ns_per_block and single_ratio_to_floor\n"
    "                (kvp_take_hinted), lookup_ns_per_block and\n"
    "                lookup_ratio_to_floor (plain kvp_take), call and\n"
    "                peak_rss_kb; load adds trace, bytes, requests, hash_ids,\n"
    "                load_ms, floor_ms, zcat_ms, python_ms, python_ratio\n"
    "                (python_ms over load_ms) and replay_10000_ms\n"
    "\n"
    "Each option may be given once.\n";

/* `kvpool bench [--workload churn|prefix|scale|load|all] [--quick] [--json]
 * [--trace FILE]`. */
int kvpt_cmd_bench(int argc, char **argv)
{
    const char *workload = "all", *trace = NULL;
    int quick = 0;
    bench_out out = {0, NULL};
    const kvpt_opt opts[] = {
        {"workload", KVPT_OPT_CHOICE, &workload, 0, 0, "churn|prefix|scale|load|all", NULL},
        {"quick", KVPT_OPT_FLAG, &quick, 0, 0, NULL, NULL},
        {"json", KVPT_OPT_FLAG, &out.json, 0, 0, NULL, NULL},
        {"trace", KVPT_OPT_TEXT, &trace, 0, 0, NULL, NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"bench", usage_bench, opts, "", 0, 0};
    int first, rc = kvpt_parse_args(&cli, argc, argv, &first);
    if (rc >= 0)
        return rc;
    unsigned scale = quick ? 50 : 1;
    int all = strcmp(workload, "all") == 0;
    int churn_on = all || strcmp(workload, "churn") == 0;
    int prefix_on = all || strcmp(workload, "prefix") == 0;
    int scale_on = all || strcmp(workload, "scale") == 0;
    int load_on = strcmp(workload, "load") == 0; /* needs a trace file: asked by name */
    if (trace && !load_on)
        return kvpt_usage_error("bench", "--trace is the trace of the load workload: give "
                                         "--workload load with it");
    if (!trace)
        trace = "data/mooncake_fast25_conversation_trace.jsonl.gz";

    /* Fixed threshold: every large allocation is its own mapping, returned
     * on free, so resident growth around a pool is that pool's. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    static const char *const headers[] = {"workload", "configuration", "ns/block",
                                          "floor ns/block", "ratio", "details"};
    if (!out.json && !(out.table = kvpt_table_new(6, headers, "llrrrl")))
        return kvpt_error("out of memory");
    rc = 0;
    if (churn_on)
        rc = bench_churn(&out, scale);
    if (rc == 0 && prefix_on)
        rc = bench_prefix(&out, scale);
    if (rc == 0 && scale_on)
        rc = bench_scale(&out, scale);
    if (rc == 0 && load_on)
        rc = bench_load(&out, trace);
    if (out.table) {
        if (rc == 0) {
            kvpt_table_print(out.table, stdout);
            printf("\nmedian of %d repetitions after a warm-up; splitmix64 seeded with %u;%s\n"
                   "ratio = ns/block over the floor's, measured back to back.\n",
                   BENCH_REPS, BENCH_SEED, scale > 1 ? " --quick (1/50 of the operations);" : "");
        }
        kvpt_table_free(out.table);
    }
    return rc ? KVPT_EXIT_ERROR : KVPT_EXIT_OK;
}
