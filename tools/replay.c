/*
 * replay.c — `kvpool replay` and `kvpool sweep`: a Mooncake trace through a
 * prefix-caching pool, once or at many capacities.
 *
 * Both commands share kvpt_replay(), which drives the library's public API
 * exactly as an engine would for a prompt: look up the longest cached prefix
 * (stopping at the first miss), claim it, allocate the rest, publish it, and
 * free every block tail first so that a request's last blocks are evicted
 * before its first.  The pool uses LIFO reuse (vacant before cached; cached
 * blocks leave least recently freed first), prefix caching on, anonymous
 * references (owner bookkeeping would only add cost: each request frees
 * exactly what it took, in one call).
 */
#define _GNU_SOURCE /* getopt_long */

#include "replay.h"

#include "common.h"
#include "events.h" /* --events: publish KV-cache events */
#include "plot.h"

#include <errno.h>
#include <getopt.h>
#include <kvpool.h>
#include <stdlib.h>
#include <string.h>

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

/* Serve one admitted request of n blocks (hash ids `ids`): returns the
 * number of hit blocks, or -1 on a library error.  Scratch arrays hold
 * n entries each. */
static long serve(kvp_pool *pool, const uint64_t *ids, size_t n, kvp_hash *hs, kvp_block *blk,
                  kvp_block *rev)
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
    for (size_t i = 0; i < n; i++)
        rev[i] = blk[n - 1 - i];
    if ((rc = kvp_free(pool, rev, n, KVP_ANON)) != KVP_OK)
        return kvpt_lib_error("kvp_free", rc);
    return (long)hit;
}

/* See replay.h.  Pool creation and scratch allocation happen before the
 * clock starts; only the request loop is timed. */
int kvpt_replay(const kvpt_trace *t, uint64_t capacity, kvpt_progress *progress,
                uint64_t progress_base, kvpt_replay_result *r)
{
    memset(r, 0, sizeof *r);
    if (capacity == 0)
        capacity = t->total_blocks ? t->total_blocks : 1;
    if (capacity > KVP_MAX_BLOCKS)
        capacity = KVP_MAX_BLOCKS;
    r->capacity = capacity;

    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = KVPT_TRACE_BLOCK_TOKENS;
    cfg.num_blocks = (uint32_t)capacity;
    cfg.max_blocks = (uint32_t)capacity;
    cfg.prefix_caching = 1;
    cfg.reuse = KVP_REUSE_LIFO;
    /* As a server would: the tables' page faults happen at creation, which
     * `seconds` leaves out, not in the first requests that touch them. */
    cfg.prefault = 1;
    if (kvpt_events_on()) { /* replay --events: room for a whole request's events */
        cfg.events = 1;
        cfg.event_capacity = 2 * (uint32_t)(t->max_blocks < 2048 ? 2048 : t->max_blocks) + 2;
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

    double t0 = kvpt_now();
    for (size_t q = 0; q < t->n_requests; q++) {
        size_t n = (size_t)(t->offset[q + 1] - t->offset[q]);
        r->blocks_requested += n;
        if (n > capacity) {
            r->rejected++;
            continue;
        }
        long hit = serve(pool, t->ids + t->offset[q], n, hs, blk, rev);
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

/* Parse a capacity argument: a block count up to KVP_MAX_BLOCKS. */
static int parse_capacity(const char *s, uint64_t *out)
{
    return kvpt_parse_u64(s, KVP_MAX_BLOCKS, out);
}

/* Print one replay as a two-column table. */
static void print_replay_table(const kvpt_trace *t, const kvpt_replay_result *r)
{
    static const char *const headers[] = {"metric", "value"};
    kvpt_table *tab = kvpt_table_new(2, headers, "lr");
    if (!tab)
        return;
    double bps = r->seconds > 0 ? (double)r->blocks_requested / r->seconds : 0.0;
    kvpt_table_cell(tab, "trace");
    kvpt_table_cell(tab, "%s", t->path);
    kvpt_table_cell(tab, "capacity (blocks)");
    kvpt_table_cell(tab, "%llu", (unsigned long long)r->capacity);
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
static int print_replay_json(const kvpt_trace *t, const kvpt_replay_result *r)
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
    return kvpt_json_line(o) ? kvpt_error("cannot render JSON") : KVPT_EXIT_OK;
}

/* `kvpool replay TRACE --capacity BLOCKS [--json]`. */
int kvpt_cmd_replay(int argc, char **argv)
{
    static const struct option opts[] = {
        {"capacity", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"events", required_argument, NULL, 'E'},
        {"topic", required_argument, NULL, 'T'},
        {"events-wait", required_argument, NULL, 'W'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t capacity = 0;
    int have_capacity = 0, json = 0, c;
    const char *events_ep = NULL, *events_topic = NULL; /* --events (events.c) */
    double events_wait = 2;
    char *end;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (parse_capacity(optarg, &capacity))
                return kvpt_usage_error("replay", "--capacity: not a block count: '%s'", optarg);
            have_capacity = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'E':
            events_ep = optarg;
            break;
        case 'T':
            events_topic = optarg;
            break;
        case 'W':
            events_wait = strtod(optarg, &end);
            if (*end || !(events_wait >= 0))
                return kvpt_usage_error("replay", "--events-wait: not seconds: '%s'", optarg);
            break;
        case 'h':
            kvpt_usage(stdout, "replay");
            return KVPT_EXIT_OK;
        default:
            return kvpt_usage_error("replay", "unknown or incomplete option '%s'",
                                    argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return kvpt_usage_error("replay", "expected exactly one TRACE, got %d", argc - optind);
    if (!have_capacity)
        return kvpt_usage_error("replay", "--capacity is required (0: the whole trace)");

    kvpt_trace t;
    if (kvpt_trace_load(argv[optind], &t))
        return KVPT_EXIT_ERROR;
    if (events_ep && kvpt_events_start(events_ep, events_topic, events_wait)) {
        kvpt_trace_free(&t);
        return KVPT_EXIT_ERROR;
    }
    kvpt_progress prog;
    kvpt_progress_start(&prog, "replay", t.n_requests);
    kvpt_replay_result r;
    int rc = kvpt_replay(&t, capacity, &prog, 0, &r);
    kvpt_progress_end(&prog);
    kvpt_events_stop(); /* lets queued messages leave */
    if (rc == 0) {
        if (json)
            rc = print_replay_json(&t, &r);
        else
            print_replay_table(&t, &r);
    }
    kvpt_trace_free(&t);
    return rc ? KVPT_EXIT_ERROR : KVPT_EXIT_OK;
}

/* Split "A,B,C" into block counts.  Returns the count, or 0 on a bad list. */
static size_t parse_capacities(const char *list, uint64_t **out)
{
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    uint64_t *caps = malloc(n * sizeof *caps);
    char *copy = strdup(list);
    size_t k = 0;
    if (caps && copy) {
        char *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (k == n || parse_capacity(tok, &caps[k]))
                break;
            k++;
        }
        /* strtok_r skips empty fields: count them as errors too */
        if (k != n)
            k = 0;
    } else {
        k = 0;
    }
    free(copy);
    if (!k) {
        free(caps);
        caps = NULL;
    }
    *out = caps;
    return k;
}

/* Results of a sweep: n_traces x n_caps replays, row-major by trace. */
typedef struct sweep {
    char **paths;
    size_t n_traces;
    const uint64_t *caps;
    size_t n_caps;
    kvpt_replay_result *res;
} sweep;

/* Write the sweep as CSV with the documented header. */
static int write_csv(const sweep *s, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return kvpt_error("%s: %s", path, strerror(errno));
    fputs("trace,capacity,requests,blocks_requested,blocks_hit,hit_rate,tokens_hit_rate,"
          "evictions\n", f);
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t j = 0; j < s->n_caps; j++) {
            const kvpt_replay_result *r = &s->res[i * s->n_caps + j];
            kvpt_csv_field(f, s->paths[i]);
            fprintf(f, ",%llu,%llu,%llu,%llu,%.6f,%.6f,%llu\n", (unsigned long long)s->caps[j],
                    (unsigned long long)r->requests, (unsigned long long)r->blocks_requested,
                    (unsigned long long)r->blocks_hit, kvpt_hit_rate(r),
                    kvpt_tokens_hit_rate(r), (unsigned long long)r->evictions);
        }
    }
    if (fclose(f) != 0)
        return kvpt_error("%s: %s", path, strerror(errno));
    return KVPT_EXIT_OK;
}

/* Print the sweep as an aligned table. */
static void print_sweep_table(const sweep *s)
{
    static const char *const headers[] = {"trace",      "capacity",        "requests",
                                          "rejected",   "blocks_requested", "blocks_hit",
                                          "hit_rate",   "tokens_hit_rate", "evictions",
                                          "seconds"};
    kvpt_table *tab = kvpt_table_new(10, headers, "lrrrrrrrrr");
    if (!tab)
        return;
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t j = 0; j < s->n_caps; j++) {
            const kvpt_replay_result *r = &s->res[i * s->n_caps + j];
            kvpt_table_cell(tab, "%s", kvpt_base_name(s->paths[i]));
            kvpt_table_cell(tab, "%llu", (unsigned long long)s->caps[j]);
            kvpt_table_cell(tab, "%llu", (unsigned long long)r->requests);
            kvpt_table_cell(tab, "%llu", (unsigned long long)r->rejected);
            kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_requested);
            kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_hit);
            kvpt_table_cell(tab, "%.4f", kvpt_hit_rate(r));
            kvpt_table_cell(tab, "%.4f", kvpt_tokens_hit_rate(r));
            kvpt_table_cell(tab, "%llu", (unsigned long long)r->evictions);
            kvpt_table_cell(tab, "%.3f", r->seconds);
        }
    }
    kvpt_table_print(tab, stdout);
    kvpt_table_free(tab);
}

/* Plot hit rate against capacity, one line per trace.  Returns an exit
 * code; a missing gnuplot is not an error. */
static int plot_sweep(const sweep *s, const char *path)
{
    size_t n = s->n_traces * s->n_caps;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    kvpt_series *series = malloc(s->n_traces * sizeof *series);
    int rc = KVPT_EXIT_ERROR;
    if (!x || !y || !series) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t j = 0; j < s->n_caps; j++) {
            x[i * s->n_caps + j] = (double)s->caps[j];
            y[i * s->n_caps + j] = kvpt_hit_rate(&s->res[i * s->n_caps + j]);
        }
        series[i] = (kvpt_series){kvpt_base_name(s->paths[i]), s->n_caps, x + i * s->n_caps,
                                  y + i * s->n_caps, NULL};
    }
    rc = kvpt_plot(path, "Prefix-cache hit rate by capacity",
                   "capacity (blocks of 512 tokens, log scale)", "block hit rate", 1.0, series,
                   s->n_traces) < 0
             ? KVPT_EXIT_ERROR
             : KVPT_EXIT_OK;
out:
    free(x);
    free(y);
    free(series);
    return rc;
}

/* `kvpool sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot FILE]`. */
int kvpt_cmd_sweep(int argc, char **argv)
{
    static const struct option opts[] = {
        {"capacities", required_argument, NULL, 'c'},
        {"csv", required_argument, NULL, 's'},
        {"plot", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *caps_arg = NULL, *csv = NULL, *plot = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            caps_arg = optarg;
            break;
        case 's':
            csv = optarg;
            break;
        case 'p':
            plot = optarg;
            break;
        case 'h':
            kvpt_usage(stdout, "sweep");
            return KVPT_EXIT_OK;
        default:
            return kvpt_usage_error("sweep", "unknown or incomplete option '%s'",
                                    argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return kvpt_usage_error("sweep", "expected at least one TRACE");
    if (!caps_arg)
        return kvpt_usage_error("sweep", "--capacities is required, e.g. 1000,10000,100000");
    if (plot && !kvpt_plot_terminal(plot))
        return kvpt_usage_error("sweep", "--plot: the file name must end in .png or .svg");
    sweep s = {argv + optind, (size_t)(argc - optind), NULL, 0, NULL};
    uint64_t *caps;
    s.n_caps = parse_capacities(caps_arg, &caps);
    if (!s.n_caps)
        return kvpt_usage_error("sweep", "--capacities: expected block counts separated by "
                                         "commas, got '%s'", caps_arg);
    s.caps = caps;
    s.res = calloc(s.n_traces * s.n_caps, sizeof *s.res);
    int rc = KVPT_EXIT_ERROR;
    if (!s.res) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < s.n_traces; i++) {
        kvpt_trace t;
        if (kvpt_trace_load(s.paths[i], &t))
            goto out;
        kvpt_progress prog;
        kvpt_progress_start(&prog, kvpt_base_name(s.paths[i]), t.n_requests * s.n_caps);
        int failed = 0;
        for (size_t j = 0; j < s.n_caps && !failed; j++)
            failed = kvpt_replay(&t, s.caps[j], &prog, j * t.n_requests,
                                 &s.res[i * s.n_caps + j]);
        kvpt_progress_end(&prog);
        kvpt_trace_free(&t);
        if (failed)
            goto out;
    }
    print_sweep_table(&s);
    rc = KVPT_EXIT_OK;
    if (csv)
        rc = write_csv(&s, csv);
    if (rc == KVPT_EXIT_OK && plot)
        rc = plot_sweep(&s, plot);
out:
    free(caps);
    free(s.res);
    return rc;
}
