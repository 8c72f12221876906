/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_prefix.c — the "prefix" workload (docs/PERFORMANCE.md): prompt admission with prefix caching,
 * with SHA-256 and with XXH3-128, through two library paths and one floor.
 *
 * Requests (a Zipf-chosen system prompt plus a unique suffix) are generated
 * up front into one token array.  The library runs them either call by call
 * (kvp_hash_tokens, kvp_claim_prefix for the longest cached prefix,
 * kvp_alloc for the rest, kvp_publish_each for the new full blocks, kvp_free
 * tail first: api "calls") or through the sequence API (kvp_seq_create,
 * kvp_seq_admit, kvp_seq_destroy: api "seq"), which is the path an engine
 * uses.  The floor hashes through the same kvp_hash_tokens on the same pool
 * and keeps a plain open-addressing table from hash to slot, with slots
 * recycled first-in first-out.  Each repetition starts from an empty cache.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include "common.h"

#include <kvpool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    PREFIX_BLOCKS = 16384,
    PREFIX_PROMPTS = 64,
    PREFIX_PROMPT_TOKENS = 1024,
    PREFIX_REQUESTS = 20000,
    PREFIX_SUFFIX_MIN = 256,
    PREFIX_SUFFIX_MAX = 1024,
    PREFIX_VOCAB = 32000,
    /* blocks of the longest request, partial last block included */
    PREFIX_MAX_BLOCKS = (PREFIX_PROMPT_TOKENS + PREFIX_SUFFIX_MAX) / BENCH_BLOCK_TOKENS + 1,
    TABLE_SIZE = 2 * PREFIX_BLOCKS /* floor table: power of two, load <= 1/2 */
};

/* An entry of the floor's table. */
typedef struct floor_entry {
    kvp_hash key;
    uint32_t slot;
    uint32_t used;
} floor_entry;

/* The workload and both sides' state. */
typedef struct prefix {
    size_t n_requests;
    uint32_t *tokens;        /* every request's prompt, back to back */
    size_t *start;           /* n_requests + 1 offsets into tokens */
    uint64_t full_blocks;    /* sum of full blocks over requests */
    kvp_pool *pool;
    int use_seq;             /* library path: sequence API */
    uint64_t hits;           /* library: hit blocks in the last run */
    kvp_hash hashes[PREFIX_MAX_BLOCKS];
    kvp_block ids[PREFIX_MAX_BLOCKS], rev[PREFIX_MAX_BLOCKS];
    /* floor */
    floor_entry *table;      /* TABLE_SIZE entries */
    kvp_hash *slot_hash;     /* PREFIX_BLOCKS: content of each slot */
    uint8_t *slot_full;      /* the slot holds an indexed hash */
    uint64_t floor_hits;
} prefix;

/* Generate prompts and requests (docs/PERFORMANCE.md, "prefix"): token ids uniform in [0, 32000),
 * prompt rank r chosen with weight 1 / r^1.1, suffix length uniform in
 * [256, 1024].  Returns -1 when memory runs out. */
static int prefix_generate(prefix *p, size_t n_requests)
{
    bench_rng rng = {BENCH_SEED};
    uint32_t *prompts = malloc(PREFIX_PROMPTS * PREFIX_PROMPT_TOKENS * sizeof *prompts);
    double cdf[PREFIX_PROMPTS], sum = 0;
    size_t *choice = malloc(n_requests * sizeof *choice);
    size_t *suffix = malloc(n_requests * sizeof *suffix);
    p->start = malloc((n_requests + 1) * sizeof *p->start);
    int rc = -1;
    if (!prompts || !choice || !suffix || !p->start)
        goto out;
    for (size_t i = 0; i < PREFIX_PROMPTS * PREFIX_PROMPT_TOKENS; i++)
        prompts[i] = (uint32_t)bench_rng_range(&rng, 0, PREFIX_VOCAB - 1);
    for (int r = 0; r < PREFIX_PROMPTS; r++)
        cdf[r] = (sum += 1.0 / pow(r + 1, 1.1));
    size_t total = 0;
    for (size_t q = 0; q < n_requests; q++) {
        double u = bench_rng_unit(&rng) * sum;
        size_t r = 0;
        while (r + 1 < PREFIX_PROMPTS && cdf[r] <= u)
            r++;
        choice[q] = r;
        suffix[q] = (size_t)bench_rng_range(&rng, PREFIX_SUFFIX_MIN, PREFIX_SUFFIX_MAX);
        p->start[q] = total;
        total += PREFIX_PROMPT_TOKENS + suffix[q];
        p->full_blocks += (PREFIX_PROMPT_TOKENS + suffix[q]) / BENCH_BLOCK_TOKENS;
    }
    p->start[n_requests] = total;
    p->tokens = malloc(total * sizeof *p->tokens);
    if (!p->tokens)
        goto out;
    for (size_t q = 0; q < n_requests; q++) {
        uint32_t *dst = p->tokens + p->start[q];
        memcpy(dst, prompts + choice[q] * PREFIX_PROMPT_TOKENS,
               PREFIX_PROMPT_TOKENS * sizeof *dst);
        for (size_t i = 0; i < suffix[q]; i++)
            dst[PREFIX_PROMPT_TOKENS + i] = (uint32_t)bench_rng_range(&rng, 0, PREFIX_VOCAB - 1);
    }
    p->n_requests = n_requests;
    rc = 0;
out:
    free(prompts);
    free(choice);
    free(suffix);
    return rc;
}

/* One request call by call; adds its hit blocks to p->hits. */
static kvp_status admit_calls(prefix *p, const uint32_t *tok, size_t n)
{
    kvp_pool *pool = p->pool;
    size_t nfull, hit = 0, got = 0;
    kvp_status rc = kvp_hash_tokens(pool, tok, n, NULL, p->hashes, PREFIX_MAX_BLOCKS, 0, &nfull);
    if (rc == KVP_OK)
        rc = kvp_claim_prefix(pool, KVP_STREAM_SHARED, p->hashes, nfull, KVP_ANON, p->ids, &hit);
    if (rc == KVP_OK && n > hit * BENCH_BLOCK_TOKENS)
        rc = kvp_alloc(pool, KVP_STREAM_SHARED, n - hit * BENCH_BLOCK_TOKENS, KVP_ANON,
                       KVP_FMT_FP16, p->ids + hit, PREFIX_MAX_BLOCKS - hit, &got);
    if (rc == KVP_OK)
        rc = kvp_publish_each(pool, p->ids + hit, p->hashes + hit, nfull - hit, NULL);
    size_t held = hit + got;
    for (size_t i = 0; i < held; i++)
        p->rev[i] = p->ids[held - 1 - i];
    if (rc == KVP_OK)
        rc = kvp_free(pool, p->rev, held, KVP_ANON);
    p->hits += hit;
    return rc;
}

/* One request through the sequence API; adds its hit blocks to p->hits. */
static kvp_status admit_seq(prefix *p, uint64_t id, const uint32_t *tok, size_t n)
{
    kvp_seq *seq;
    size_t cached = 0;
    kvp_status rc = kvp_seq_create(p->pool, id, NULL, &seq);
    if (rc != KVP_OK)
        return rc;
    rc = kvp_seq_admit(seq, tok, n, &cached);
    kvp_status rc2 = kvp_seq_destroy(seq);
    p->hits += cached / BENCH_BLOCK_TOKENS;
    return rc != KVP_OK ? rc : rc2;
}

/* Library side: empty the cache (untimed), then every request. */
static double prefix_lib(void *ctx)
{
    prefix *p = ctx;
    kvp_status rc = kvp_pool_clear(p->pool);
    if (rc != KVP_OK)
        return kvpt_lib_error("kvp_pool_clear", rc);
    p->hits = 0;
    double t0 = kvpt_now();
    for (size_t q = 0; q < p->n_requests && rc == KVP_OK; q++) {
        const uint32_t *tok = p->tokens + p->start[q];
        size_t n = p->start[q + 1] - p->start[q];
        rc = p->use_seq ? admit_seq(p, q, tok, n) : admit_calls(p, tok, n);
    }
    double t = kvpt_now() - t0;
    if (rc != KVP_OK)
        return kvpt_lib_error(p->use_seq ? "prefix, seq path" : "prefix, call path", rc);
    return t;
}

/* Table position for a hash: its last 8 bytes (the digest's tail under either
 * algorithm), folded. */
static size_t table_home(const kvp_hash *h)
{
    uint64_t v;
    memcpy(&v, h->b + 24, sizeof v);
    return (size_t)((v * 0x9e3779b97f4a7c15u) >> 32) & (TABLE_SIZE - 1);
}

/* Find `h` in the floor table; returns its entry index or -1. */
static long table_find(const prefix *p, const kvp_hash *h)
{
    for (size_t i = table_home(h);; i = (i + 1) & (TABLE_SIZE - 1)) {
        if (!p->table[i].used)
            return -1;
        if (memcmp(&p->table[i].key, h, sizeof *h) == 0)
            return (long)i;
    }
}

/* Insert `h` -> slot (an existing entry for h is overwritten). */
static void table_put(prefix *p, const kvp_hash *h, uint32_t slot)
{
    size_t i = table_home(h);
    while (p->table[i].used && memcmp(&p->table[i].key, h, sizeof *h) != 0)
        i = (i + 1) & (TABLE_SIZE - 1);
    p->table[i] = (floor_entry){*h, slot, 1};
}

/* Remove entry i, shifting later entries of the probe run back (linear
 * probing deletion without tombstones). */
static void table_remove(prefix *p, size_t i)
{
    for (size_t j = (i + 1) & (TABLE_SIZE - 1); p->table[j].used; j = (j + 1) & (TABLE_SIZE - 1)) {
        size_t home = table_home(&p->table[j].key);
        /* entry j may move to the hole at i if its home is not in (i, j] */
        if (((j - home) & (TABLE_SIZE - 1)) >= ((j - i) & (TABLE_SIZE - 1))) {
            p->table[i] = p->table[j];
            i = j;
        }
    }
    p->table[i].used = 0;
}

/* Floor side: same hashing entry point, the table, FIFO slot recycling. */
static double prefix_floor(void *ctx)
{
    prefix *p = ctx;
    memset(p->table, 0, TABLE_SIZE * sizeof *p->table);
    memset(p->slot_full, 0, PREFIX_BLOCKS);
    p->floor_hits = 0;
    uint32_t cursor = 0;
    kvp_status rc = KVP_OK;
    double t0 = kvpt_now();
    for (size_t q = 0; q < p->n_requests && rc == KVP_OK; q++) {
        const uint32_t *tok = p->tokens + p->start[q];
        size_t n = p->start[q + 1] - p->start[q], nfull, hit = 0;
        rc = kvp_hash_tokens(p->pool, tok, n, NULL, p->hashes, PREFIX_MAX_BLOCKS, 0, &nfull);
        while (hit < nfull && table_find(p, &p->hashes[hit]) >= 0)
            hit++;
        size_t nblocks = (n + BENCH_BLOCK_TOKENS - 1) / BENCH_BLOCK_TOKENS;
        for (size_t i = hit; i < nblocks; i++) {
            uint32_t slot = cursor;
            cursor = cursor + 1 == PREFIX_BLOCKS ? 0 : cursor + 1;
            if (p->slot_full[slot]) {
                long e = table_find(p, &p->slot_hash[slot]);
                if (e >= 0 && p->table[e].slot == slot)
                    table_remove(p, (size_t)e);
            }
            p->slot_full[slot] = i < nfull;
            if (i < nfull) {
                p->slot_hash[slot] = p->hashes[i];
                table_put(p, &p->hashes[i], slot);
            }
        }
        p->floor_hits += hit;
    }
    double t = kvpt_now() - t0;
    return rc == KVP_OK ? t : kvpt_lib_error("prefix floor, kvp_hash_tokens", rc);
}

/* Run one (hash, api) configuration and emit its row. */
static int prefix_run(bench_out *out, prefix *p, const char *hash_name, int use_seq)
{
    p->use_seq = use_seq;
    double lib_s, floor_s;
    if (bench_reps(prefix_lib, prefix_floor, p, &lib_s, &floor_s))
        return -1;
    double blocks = (double)p->full_blocks, reqs = (double)p->n_requests;
    double ns = lib_s * 1e9 / blocks, fl = floor_s * 1e9 / blocks;
    double hit_rate = (double)p->hits / blocks, floor_hit = (double)p->floor_hits / blocks;
    const char *api = use_seq ? "seq" : "calls";
    char config[96], details[160];
    snprintf(config, sizeof config, "%s, api %s%s", hash_name, api,
             use_seq ? " (engine path)" : "");
    snprintf(details, sizeof details, "%.1f us/request (floor %.1f); hit rate %.4f (floor %.4f)",
             lib_s * 1e6 / reqs, floor_s * 1e6 / reqs, hit_rate, floor_hit);
    json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, "
                          "s:f, s:s, s:i}",
                          "workload", "prefix", "hash", hash_name, "api", api,
                          "engine_path", use_seq, "blocks", (json_int_t)PREFIX_BLOCKS,
                          "requests", (json_int_t)p->n_requests,
                          "full_blocks", (json_int_t)p->full_blocks, "ns_per_block", ns,
                          "floor_ns_per_block", fl, "ratio_to_floor", ns / fl,
                          "us_per_request", lib_s * 1e6 / reqs,
                          "floor_us_per_request", floor_s * 1e6 / reqs, "hit_rate", hit_rate,
                          "floor_hit_rate", floor_hit, "prng", "splitmix64", "reps", BENCH_REPS);
    return bench_emit(out, o, config, details);
}

/* ---- publish: duplicates and crafted hashes ----------------------------- */

/* One publish row: n blocks taken, then published in one kvp_publish_each
 * (timed) under `keys`; the floor publishes n random distinct hashes the
 * same way.  Duplicates (every block under one hash) and crafted hashes
 * (ones an unkeyed finalizer of the last 8 bytes puts in one bucket) must
 * cost about what random ones do, at every n. */
typedef struct publish_run {
    uint32_t n;
    kvp_block *ids;
    kvp_hash *keys, *random;
} publish_run;

/* Publish n blocks of a fresh pool under hs[0..n) and return the seconds. */
static double publish_time(uint32_t n, kvp_block *ids, const kvp_hash *hs)
{
    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = BENCH_BLOCK_TOKENS;
    cfg.num_blocks = n;
    kvp_pool *pool;
    kvp_status rc = kvp_pool_create(&cfg, &pool);
    if (rc != KVP_OK)
        return kvpt_lib_error("kvp_pool_create", rc);
    size_t got = 0;
    rc = kvp_alloc(pool, KVP_STREAM_SHARED, (size_t)n * BENCH_BLOCK_TOKENS, 1, KVP_FMT_FP16, ids,
                   n, &got);
    double t0 = kvpt_now();
    if (rc == KVP_OK)
        rc = kvp_publish_each(pool, ids, hs, n, NULL);
    double t = kvpt_now() - t0;
    kvp_pool_destroy(pool);
    return rc == KVP_OK ? t : kvpt_lib_error("publish", rc);
}

static double publish_lib(void *ctx)
{
    publish_run *r = ctx;
    return publish_time(r->n, r->ids, r->keys);
}

static double publish_floor(void *ctx)
{
    publish_run *r = ctx;
    return publish_time(r->n, r->ids, r->random);
}

/* MurmurHash3's fmix64, undone step by step: crafted keys are inverses of
 * values whose low 32 bits are zero. */
static uint64_t unfmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0x9cb4b2f8129337dbull;
    x ^= x >> 33;
    x *= 0x4f74430c22a54005ull;
    x ^= x >> 33;
    return x;
}

static int publish_rows(bench_out *out, unsigned scale)
{
    static const char *const kinds[] = {"duplicates", "crafted"};
    static const uint32_t sizes[] = {10000, 80000};
    int ret = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0] && !ret; z++) {
        uint32_t n = sizes[z] / (scale > 1 ? 10 : 1);
        publish_run r = {n, malloc(n * sizeof *r.ids), calloc(n, sizeof *r.keys),
                         calloc(n, sizeof *r.random)};
        if (!r.ids || !r.keys || !r.random)
            ret = kvpt_error("out of memory");
        bench_rng rng = {BENCH_SEED};
        for (uint32_t i = 0; i < n && !ret; i++)
            for (int w = 0; w < 4; w++) {
                uint64_t v = bench_rng_next(&rng);
                memcpy(r.random[i].b + 8 * w, &v, sizeof v);
            }
        for (size_t k = 0; k < 2 && !ret; k++) {
            for (uint32_t i = 0; i < n; i++) {
                memset(&r.keys[i], 0, sizeof r.keys[i]);
                uint64_t x = k == 0 ? 1 : unfmix64((uint64_t)(i + 1) << 32);
                memcpy(r.keys[i].b + 24, &x, sizeof x);
            }
            double lib_s, floor_s;
            if (bench_reps(publish_lib, publish_floor, &r, &lib_s, &floor_s)) {
                ret = -1;
                break;
            }
            double ns = lib_s * 1e9 / n, fl = floor_s * 1e9 / n;
            char config[96];
            snprintf(config, sizeof config, "%s keys, %u blocks", kinds[k], n);
            json_t *o = json_pack("{s:s, s:s, s:I, s:f, s:f, s:f, s:s, s:i}", "workload",
                                  "publish", "keys", kinds[k], "blocks", (json_int_t)n,
                                  "ns_per_block", ns, "floor_ns_per_block", fl,
                                  "ratio_to_floor", ns / fl, "prng", "splitmix64", "reps",
                                  BENCH_REPS);
            ret = bench_emit(out, o, config, "kvp_publish_each; floor: random distinct hashes");
        }
        free(r.ids);
        free(r.keys);
        free(r.random);
    }
    return ret;
}

/* See bench.h: both hashes, both library paths. */
int bench_prefix(bench_out *out, unsigned scale)
{
    static const kvp_hash_alg hashes[] = {KVP_HASH_SHA256, KVP_HASH_XXH3_128};
    prefix *p = calloc(1, sizeof *p);
    int ret = -1;
    if (!p) {
        kvpt_error("out of memory");
        return -1;
    }
    p->table = malloc(TABLE_SIZE * sizeof *p->table);
    p->slot_hash = malloc(PREFIX_BLOCKS * sizeof *p->slot_hash);
    p->slot_full = malloc(PREFIX_BLOCKS);
    if (!p->table || !p->slot_hash || !p->slot_full ||
        prefix_generate(p, PREFIX_REQUESTS / scale)) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t h = 0; h < sizeof hashes / sizeof hashes[0]; h++) {
        kvp_config cfg;
        kvp_config_default(&cfg);
        cfg.block_size = BENCH_BLOCK_TOKENS;
        cfg.num_blocks = PREFIX_BLOCKS;
        cfg.max_blocks = PREFIX_BLOCKS;
        cfg.hash_alg = hashes[h];
        kvp_status rc = kvp_pool_create(&cfg, &p->pool);
        if (rc != KVP_OK) {
            kvpt_lib_error("kvp_pool_create", rc);
            goto out;
        }
        const char *name = kvp_hash_alg_name(hashes[h]); /* the library's: "sha256", "xxh3" */
        int failed = prefix_run(out, p, name, 0) || prefix_run(out, p, name, 1);
        kvp_pool_destroy(p->pool);
        p->pool = NULL;
        if (failed)
            goto out;
    }
    ret = publish_rows(out, scale);
out:
    free(p->tokens);
    free(p->start);
    free(p->table);
    free(p->slot_hash);
    free(p->slot_full);
    free(p);
    return ret;
}
