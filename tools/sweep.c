/*
 * sweep.c — `kvpool sweep`: each trace replayed (kvpt_replay, replay.c) at
 * each capacity; a table on stdout, and on request a CSV file and a plot of
 * hit rate against capacity.
 */
#define _POSIX_C_SOURCE 200809L

#include "sweep.h"

#include "common.h"
#include "plot.h"
#include "replay.h"

#include <errno.h>
#include <kvpool.h>
#include <stdlib.h>
#include <string.h>

static const char usage_sweep[] =
    "usage: kvpool sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot FILE]\n"
    "\n"
    "Replay each TRACE (as `kvpool replay` does) at each capacity and print a table.\n"
    "\n"
    "  --capacities A,B,C  block counts from 0 to 2147483647, comma-separated\n"
    "                      (0 = the whole trace)\n"
    "  --csv FILE          write trace,capacity,requests,blocks_requested,blocks_hit,\n"
    "                      hit_rate,tokens_hit_rate,evictions (trace = the path as\n"
    "                      given on the command line)\n"
    "  --plot FILE         draw hit rate against capacity (log scale), one line per\n"
    "                      trace (titled by its file name), with gnuplot; PNG or SVG\n"
    "                      by the extension.  Without gnuplot a hint to install it\n"
    "                      (apt-get install gnuplot-nox) is printed, and the rest of\n"
    "                      the command still succeeds.  Capacity 0 is not plotted.\n"
    "\n"
    "Each option may be given once.\n";

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
            if (k == n || kvpt_parse_u64(tok, KVP_MAX_BLOCKS, &caps[k]))
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

/* Write `s` as one CSV field (RFC 4180 quoting only when needed). */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* The part of `path` after its last '/'. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
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
            csv_field(f, s->paths[i]);
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
            kvpt_table_cell(tab, "%s", base_name(s->paths[i]));
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
        series[i] = (kvpt_series){base_name(s->paths[i]), s->n_caps, x + i * s->n_caps,
                                  y + i * s->n_caps};
    }
    rc = kvpt_plot(path, "Prefix-cache hit rate by capacity",
                   "capacity (blocks of 512 tokens, log scale)", "block hit rate", series,
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
    const char *caps_arg = NULL, *csv = NULL, *plot = NULL;
    const kvpt_opt opts[] = {
        {"capacities", KVPT_OPT_TEXT, &caps_arg, 0, 0, NULL, "e.g. 1000,10000,100000"},
        {"csv", KVPT_OPT_TEXT, &csv, 0, 0, NULL, NULL},
        {"plot", KVPT_OPT_TEXT, &plot, 0, 0, NULL, NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"sweep", usage_sweep, opts, "TRACE", 1, -1};
    int first, rc = kvpt_parse_args(&cli, argc, argv, &first);
    if (rc >= 0)
        return rc;
    if (plot && !kvpt_plot_terminal(plot))
        return kvpt_usage_error("sweep", "--plot: the file name must end in .png or .svg");
    sweep s = {argv + first, (size_t)(argc - first), NULL, 0, NULL};
    uint64_t *caps;
    s.n_caps = parse_capacities(caps_arg, &caps);
    if (!s.n_caps)
        return kvpt_usage_error("sweep", "--capacities: expected block counts from 0 to %u "
                                         "separated by commas, got '%s'", KVP_MAX_BLOCKS,
                                caps_arg);
    s.caps = caps;
    s.res = calloc(s.n_traces * s.n_caps, sizeof *s.res);
    rc = KVPT_EXIT_ERROR;
    if (!s.res) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < s.n_traces; i++) {
        kvpt_trace t;
        if (kvpt_trace_load(s.paths[i], &t))
            goto out;
        kvpt_progress prog;
        kvpt_progress_start(&prog, base_name(s.paths[i]), t.n_requests * s.n_caps);
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
