/*
 * sweep.c — `kvpool sweep`: each trace replayed (kvpt_replay, replay.c) at
 * each capacity; a table on stdout, and on request a CSV file and a plot of
 * hit rate against capacity.
 *
 * Capacities are sorted ascending before anything runs (0, the whole trace,
 * last), so table, CSV and plot all read left to right.  Everything that can
 * be checked without replaying is checked first (the capacity list, the
 * plot's extension, gnuplot, that the output files can be created), so a
 * sweep that cannot finish is refused before its work, not after.  Output
 * files are written beside their targets and renamed over them complete.
 * The plot also draws each trace's ceiling: its hit rate with unlimited
 * capacity (no eviction), from the replay at capacity 0, run for the plot
 * when the sweep has no capacity that large.
 */
#define _POSIX_C_SOURCE 200809L

#include "sweep.h"

#include "common.h"
#include "plot.h"
#include "replay.h"

#include <kvpool.h>
#include <stdlib.h>
#include <string.h>

static const char usage_sweep[] =
    "usage: kvpool sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot FILE]\n"
    "\n"
    "Replay each TRACE (as `kvpool replay` does) at each capacity and print a table.\n"
    "\n"
    "  --capacities A,B,C  block counts from 0 to 2147483647, comma-separated, each\n"
    "                      once (0 = the whole trace); sorted ascending, 0 last\n"
    "  --csv FILE          write trace,capacity,requests,blocks_requested,blocks_hit,\n"
    "                      hit_rate,tokens_hit_rate,evictions (trace = the path as\n"
    "                      given on the command line)\n"
    "  --plot FILE         draw hit rate against capacity (log scale), one line per\n"
    "                      trace (titled by its file name) and, dashed, its hit rate\n"
    "                      with unlimited capacity, with gnuplot; PNG or SVG by the\n"
    "                      extension.  Needs gnuplot (apt-get install gnuplot-nox)\n"
    "                      and a capacity above 0; capacity 0 is drawn as the\n"
    "                      dashed line, not as a point.\n"
    "\n"
    "Each option may be given once.  The command line, gnuplot and the output\n"
    "directories are checked before the first replay; CSV and plot files appear\n"
    "complete or not at all.\n";

/* Results of a sweep: n_traces x n_caps replays, row-major by trace, and
 * each trace's hit rate with unlimited capacity (for the plot). */
typedef struct sweep {
    char **paths;
    size_t n_traces;
    uint64_t *caps;
    size_t n_caps;
    kvpt_replay_result *res;
    double *ceiling;
} sweep;

/* Ascending, with 0 (the whole trace, so the largest) last: 0 - 1 wraps to
 * the largest uint64_t. */
static int cap_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a - 1, y = *(const uint64_t *)b - 1;
    return (x > y) - (x < y);
}

/* Split "A,B,C" into sorted block counts; returns the count, or 0 after a
 * usage error was printed (not a count, an empty field, a count twice). */
static size_t parse_capacities(const char *list, uint64_t **out)
{
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    uint64_t *caps = malloc(n * sizeof *caps);
    *out = caps;
    if (!caps) {
        kvpt_error("out of memory");
        return 0;
    }
    const char *p = list;
    for (size_t k = 0; k < n; k++) {
        char field[24];
        size_t len = strcspn(p, ",");
        if (len < sizeof field) {
            memcpy(field, p, len);
            field[len] = 0;
        }
        if (len >= sizeof field || kvpt_parse_u64(field, KVP_MAX_BLOCKS, &caps[k])) {
            kvpt_usage_error("sweep", "--capacities: expected block counts from 0 to %u "
                                      "separated by commas, got '%s'", KVP_MAX_BLOCKS, list);
            return 0;
        }
        p += len + 1;
    }
    qsort(caps, n, sizeof *caps, cap_order);
    for (size_t k = 1; k < n; k++)
        if (caps[k] == caps[k - 1]) {
            kvpt_usage_error("sweep", "--capacities: %llu given twice",
                             (unsigned long long)caps[k]);
            return 0;
        }
    return n;
}

/* Write the sweep as CSV with the documented header, through a temporary
 * file renamed over `path` once complete. */
static int write_csv(const sweep *s, const char *path)
{
    char tmp[4096];
    FILE *f = kvpt_open_beside(path, tmp, sizeof tmp);
    if (!f)
        return KVPT_EXIT_ERROR;
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
    return kvpt_close_beside(f, tmp, path);
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

/* Plot hit rate against capacity, one line and one ceiling per trace.
 * Returns an exit code. */
static int plot_sweep(const sweep *s, const char *path)
{
    enum { TITLE = 96 };
    kvpt_chart ch;
    if (kvpt_chart_init(&ch, s->n_traces * s->n_caps, s->n_traces, s->n_traces * TITLE))
        return KVPT_EXIT_ERROR;
    double *x = ch.x, *y = ch.y;
    char *titles = ch.titles;
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t j = 0; j < s->n_caps; j++) {
            x[i * s->n_caps + j] = (double)s->caps[j];
            y[i * s->n_caps + j] = kvpt_hit_rate(&s->res[i * s->n_caps + j]);
        }
        snprintf(titles + i * TITLE, TITLE, "%s%sunlimited capacity: %.4f",
                 s->n_traces > 1 ? kvpt_base_name(s->paths[i]) : "", s->n_traces > 1 ? ", " : "",
                 s->ceiling[i]);
        ch.series[i] = (kvpt_series){kvpt_base_name(s->paths[i]), s->n_caps, x + i * s->n_caps,
                                     y + i * s->n_caps, titles + i * TITLE, s->ceiling[i], NULL};
    }
    return kvpt_chart_hit_rate(&ch, path, "Prefix-cache hit rate by capacity", s->n_traces);
}

/* Refuse what can be refused before the first replay: a trace that cannot
 * be opened, standard input named twice, output files that cannot be
 * created, a plot without gnuplot.  Returns an exit code, or -1 to go on. */
static int check_before(const sweep *s, const char *csv, const char *plot)
{
    int rc = kvpt_check_traces("sweep", s->paths, s->n_traces);
    if (rc >= 0)
        return rc;
    if (plot && kvpt_plot_check(plot))
        return KVPT_EXIT_ERROR;
    if (csv && kvpt_check_writable("--csv", csv))
        return KVPT_EXIT_ERROR;
    return -1;
}

/* Replay trace i at every capacity and, for a plot, find its ceiling: the
 * result of a capacity at least the trace's total, else one more replay at
 * capacity 0.  Returns 0, or -1 with the error printed. */
static int sweep_trace(sweep *s, size_t i, int want_ceiling)
{
    kvpt_trace t;
    if (kvpt_trace_load(s->paths[i], &t))
        return -1;
    kvpt_replay_result *row = s->res + i * s->n_caps, extra;
    const kvpt_replay_result *unlimited = NULL;
    for (size_t j = 0; j < s->n_caps; j++)
        if (s->caps[j] == 0 || s->caps[j] >= t.total_blocks)
            unlimited = &row[j];
    int more = want_ceiling && !unlimited;
    kvpt_progress prog;
    kvpt_progress_start(&prog, kvpt_base_name(s->paths[i]), t.n_requests * (s->n_caps + more));
    int failed = 0;
    for (size_t j = 0; j < s->n_caps && !failed; j++)
        failed = kvpt_replay(&t, s->caps[j], &prog, j * t.n_requests, &row[j]);
    if (!failed && more) {
        failed = kvpt_replay(&t, 0, &prog, s->n_caps * t.n_requests, &extra);
        unlimited = &extra;
    }
    kvpt_progress_end(&prog);
    kvpt_trace_free(&t);
    if (!failed && want_ceiling)
        s->ceiling[i] = kvpt_hit_rate(unlimited);
    return failed ? -1 : 0;
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
    sweep s = {argv + first, (size_t)(argc - first), NULL, 0, NULL, NULL};
    rc = KVPT_EXIT_USAGE;
    s.n_caps = parse_capacities(caps_arg, &s.caps);
    if (!s.n_caps)
        goto out;
    if (plot && s.caps[0] == 0) { /* sorted: 0 comes first only when alone */
        rc = kvpt_usage_error("sweep", "--plot needs a capacity above 0 (capacity 0, the "
                                       "whole trace, is drawn as the dashed ceiling)");
        goto out;
    }
    if ((rc = check_before(&s, csv, plot)) >= 0)
        goto out;
    rc = KVPT_EXIT_ERROR;
    s.res = calloc(s.n_traces * s.n_caps, sizeof *s.res);
    s.ceiling = calloc(s.n_traces, sizeof *s.ceiling);
    if (!s.res || !s.ceiling) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < s.n_traces; i++)
        if (sweep_trace(&s, i, plot != NULL))
            goto out;
    print_sweep_table(&s);
    rc = KVPT_EXIT_OK;
    if (csv)
        rc = write_csv(&s, csv);
    if (rc == KVPT_EXIT_OK && plot)
        rc = plot_sweep(&s, plot);
out:
    free(s.caps);
    free(s.res);
    free(s.ceiling);
    return rc;
}
