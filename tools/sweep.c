/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sweep.c — `kvpool sweep`: each trace replayed (kvpt_replay, replay.c) at
 * each capacity under each eviction setting asked for (policy x priority
 * prefix); a table on stdout, and on request a CSV file, the optimal
 * policy's hit rate beside it (belady.h) and a plot of hit rate against
 * capacity.
 *
 * Capacities are sorted ascending before anything runs (0, the whole trace,
 * last), so table, CSV and plot all read left to right.  Everything that can
 * be checked without replaying is checked first (the lists, the plot's
 * extension, gnuplot, that the output files can be created), so a sweep
 * that cannot finish is refused before its work, not after.  Output files
 * appear complete (kvpt_output, common.h).  The
 * plot also draws each trace's ceiling: its hit rate with unlimited
 * capacity (no eviction, so the same under every policy), from the replay
 * at capacity 0, run for the plot when the sweep has no capacity that large.
 */
#define _POSIX_C_SOURCE 200809L

#include "sweep.h"

#include "belady.h"
#include "common.h"
#include "curve.h"
#include "plot.h"
#include "replay.h"

#include <kvpool.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char usage_sweep[] =
    "usage: kvpool sweep TRACE [TRACE...] --capacities A,B,C [--policy P,Q]\n"
    "                    [--priority-prefix N,M] [--optimal] [--csv FILE]\n"
    "                    [--plot FILE]\n"
    "\n"
    "Replay each TRACE (as `kvpool replay` does) at each capacity, under each policy\n"
    "and priority prefix, and print a table.\n"
    "\n"
    "  --capacities A,B,C  block counts from 0 to 2147483647, comma-separated, each\n"
    "                      once (0 = the whole trace); sorted ascending, 0 last.\n"
    "                      Pools are no larger than the trace's block count, as in\n"
    "                      `kvpool replay`: a larger one gives the same figures\n"
    "  --policy P,Q        eviction policies, comma-separated, each once: lru (the\n"
    "                      default), slru, lfu, NAME:PERCENT (`kvpool replay\n"
    "                      --help`);\n"
    "                      when given, the table and CSV have a policy column\n"
    "  --priority-prefix N,M  block counts, comma-separated, each once, sorted\n"
    "                      ascending: the first N blocks of every request get\n"
    "                      priority high (`kvpool replay --help`); default 0; when\n"
    "                      given, the table and CSV have a priority_prefix column.\n"
    "                      Every policy runs with every prefix.\n"
    "  --optimal           also the optimal policy's block hit rate (as `kvpool\n"
    "                      curve --optimal`: clairvoyant, the most any policy can\n"
    "                      hit) at each capacity from the trace's largest request\n"
    "                      up: an optimal_hit_rate column, and points on the plot\n"
    "  --csv FILE          the table's columns: trace,capacity,requests,rejected,\n"
    "                      blocks_requested,blocks_hit,hit_rate,tokens_hit_rate,\n"
    "                      evictions,seconds (trace = the path as given on the\n"
    "                      command line), with policy and priority_prefix after\n"
    "                      trace and optimal_hit_rate before seconds when those\n"
    "                      options are given (empty below the largest request)\n"
    "  --plot FILE         draw hit rate against capacity (log scale), one line per\n"
    "                      trace and setting (titled by the trace's file name and\n"
    "                      the setting) and, dashed, each trace's hit rate with\n"
    "                      unlimited capacity, with gnuplot; PNG or SVG by the\n"
    "                      extension.  Needs gnuplot (apt-get install gnuplot-nox)\n"
    "                      and a capacity above 0; capacity 0 is drawn as the\n"
    "                      dashed line, not as a point.\n"
    "\n"
    "Each option may be given once.  The command line, gnuplot and the output\n"
    "directories are checked before the first replay; CSV and plot files appear\n"
    "complete or not at all.  A regular FILE is replaced, a device or FIFO is\n"
    "written in place, a symbolic link is followed (its target is written), and\n"
    "a FILE that is one of the TRACEs is refused.\n";

/* Results of a sweep: n_traces x n_cfgs x n_caps replays, row-major by trace
 * then setting; each trace's hit rate with unlimited capacity (for the
 * plot); with --optimal, n_traces x n_caps optimal hit rates (NaN below the
 * trace's largest request). */
typedef struct sweep {
    char **paths;
    size_t n_traces;
    uint64_t *caps;
    size_t n_caps;
    kvpt_replay_opts *cfgs; /* every policy with every priority prefix */
    size_t n_cfgs;
    int show_policy, show_prefix, optimal; /* --policy, --priority-prefix, --optimal given */
    kvpt_replay_result *res;
    double *ceiling;
    double *opt;
} sweep;

/* Ascending, with 0 (the whole trace, so the largest) last: 0 - 1 wraps to
 * the largest uint64_t. */
static int cap_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a - 1, y = *(const uint64_t *)b - 1;
    return (x > y) - (x < y);
}

/* Ascending. */
static int count_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Split the --`opt` list "A,B,C" into block counts sorted by `order`;
 * returns the count, or 0 after a usage error was printed (not a count, an
 * empty field, a count twice). */
static size_t parse_counts(const char *opt, const char *list,
                           int (*order)(const void *, const void *), uint64_t **out)
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
            kvpt_usage_error("sweep", "--%s: expected block counts from 0 to %u "
                                      "separated by commas, got '%s'", opt, KVP_MAX_BLOCKS, list);
            return 0;
        }
        p += len + 1;
    }
    qsort(caps, n, sizeof *caps, order);
    for (size_t k = 1; k < n; k++)
        if (caps[k] == caps[k - 1]) {
            kvpt_usage_error("sweep", "--%s: %llu given twice", opt,
                             (unsigned long long)caps[k]);
            return 0;
        }
    return n;
}

/* Split the --policy list "P,Q" into policies, in the order given, into
 * out[max]; returns the count, or 0 after a usage error was printed (not a
 * policy, an empty field, a policy twice). */
static size_t parse_policies(const char *list, kvpt_replay_opts *out, size_t max)
{
    size_t n = 0;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        char field[16] = "";
        if (len < sizeof field)
            memcpy(field, p, len);
        if (n == max || len >= sizeof field || kvpt_policy_parse(field, &out[n])) {
            kvpt_usage_error("sweep", "--policy: expected %s, several separated by commas, "
                                      "got '%s'", kvpt_policy_words(), list);
            return 0;
        }
        for (size_t k = 0; k < n; k++)
            if (out[k].policy == out[n].policy &&
                out[k].protected_percent == out[n].protected_percent) {
                kvpt_usage_error("sweep", "--policy: %s given twice", field);
                return 0;
            }
        n++;
        p += len;
        if (!*p)
            return n;
    }
}

/* "LRU", "SLRU:20, priority prefix 4": setting k of the sweep, upper-case. */
static void cfg_label(const kvpt_replay_opts *c, char *buf, size_t cap)
{
    char name[16];
    kvpt_policy_label(c, name, sizeof name);
    size_t k = 0;
    for (; name[k] && k + 1 < cap; k++)
        buf[k] = (char)toupper((unsigned char)name[k]);
    buf[k] = 0;
    if (c->priority_prefix)
        snprintf(buf + k, cap - k, ", priority prefix %llu",
                 (unsigned long long)c->priority_prefix);
}

/* Write the sweep as CSV with the documented header into `out`, which
 * sees it only once complete. */
static int write_csv(const sweep *s, kvpt_output *out)
{
    FILE *f = kvpt_output_open(out);
    if (!f)
        return KVPT_EXIT_ERROR;
    fprintf(f, "trace%s%s,capacity,requests,rejected,blocks_requested,blocks_hit,hit_rate,"
               "tokens_hit_rate,evictions%s,seconds\n",
            s->show_policy ? ",policy" : "", s->show_prefix ? ",priority_prefix" : "",
            s->optimal ? ",optimal_hit_rate" : "");
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t k = 0; k < s->n_cfgs; k++) {
            for (size_t j = 0; j < s->n_caps; j++) {
                const kvpt_replay_result *r = &s->res[(i * s->n_cfgs + k) * s->n_caps + j];
                kvpt_csv_field(f, s->paths[i]);
                char label[16];
                kvpt_policy_label(&s->cfgs[k], label, sizeof label);
                if (s->show_policy)
                    fprintf(f, ",%s", label);
                if (s->show_prefix)
                    fprintf(f, ",%llu", (unsigned long long)s->cfgs[k].priority_prefix);
                fprintf(f, ",%llu,%llu,%llu,%llu,%llu,%.6f,%.6f,%llu",
                        (unsigned long long)s->caps[j], (unsigned long long)r->requests,
                        (unsigned long long)r->rejected, (unsigned long long)r->blocks_requested,
                        (unsigned long long)r->blocks_hit, kvpt_hit_rate(r),
                        kvpt_tokens_hit_rate(r), (unsigned long long)r->evictions);
                if (s->optimal) {
                    double o = s->opt[i * s->n_caps + j];
                    fputc(',', f);
                    if (!isnan(o))
                        fprintf(f, "%.6f", o);
                }
                fprintf(f, ",%.6f\n", r->seconds);
            }
        }
    }
    return kvpt_output_close(out, f);
}

/* Print the sweep as an aligned table. */
static void print_sweep_table(const sweep *s)
{
    const char *headers[13];
    char align[14];
    size_t nc = 0;
    headers[nc] = "trace", align[nc++] = 'l';
    if (s->show_policy)
        headers[nc] = "policy", align[nc++] = 'l';
    if (s->show_prefix)
        headers[nc] = "priority_prefix", align[nc++] = 'r';
    static const char *const rest[] = {"capacity",  "requests",        "rejected",
                                       "blocks_requested", "blocks_hit", "hit_rate",
                                       "tokens_hit_rate", "evictions"};
    for (size_t c = 0; c < sizeof rest / sizeof rest[0]; c++)
        headers[nc] = rest[c], align[nc++] = 'r';
    if (s->optimal)
        headers[nc] = "optimal_hit_rate", align[nc++] = 'r';
    headers[nc] = "seconds", align[nc++] = 'r';
    align[nc] = 0;
    kvpt_table *tab = kvpt_table_new(nc, headers, align);
    if (!tab)
        return;
    for (size_t i = 0; i < s->n_traces; i++) {
        for (size_t k = 0; k < s->n_cfgs; k++) {
            for (size_t j = 0; j < s->n_caps; j++) {
                const kvpt_replay_result *r = &s->res[(i * s->n_cfgs + k) * s->n_caps + j];
                kvpt_table_cell(tab, "%s", kvpt_safe_text(kvpt_base_name(s->paths[i])));
                char label[16];
                kvpt_policy_label(&s->cfgs[k], label, sizeof label);
                if (s->show_policy)
                    kvpt_table_cell(tab, "%s", label);
                if (s->show_prefix)
                    kvpt_table_cell(tab, "%llu", (unsigned long long)s->cfgs[k].priority_prefix);
                kvpt_table_cell(tab, "%llu", (unsigned long long)s->caps[j]);
                kvpt_table_cell(tab, "%llu", (unsigned long long)r->requests);
                kvpt_table_cell(tab, "%llu", (unsigned long long)r->rejected);
                kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_requested);
                kvpt_table_cell(tab, "%llu", (unsigned long long)r->blocks_hit);
                kvpt_table_cell(tab, "%.4f", kvpt_hit_rate(r));
                kvpt_table_cell(tab, "%.4f", kvpt_tokens_hit_rate(r));
                kvpt_table_cell(tab, "%llu", (unsigned long long)r->evictions);
                if (s->optimal) {
                    double o = s->opt[i * s->n_caps + j];
                    if (isnan(o))
                        kvpt_table_cell(tab, "-");
                    else
                        kvpt_table_cell(tab, "%.4f", o);
                }
                kvpt_table_cell(tab, "%.3f", r->seconds);
            }
        }
    }
    kvpt_table_print(tab, stdout);
    kvpt_table_free(tab);
}

/* gnuplot colours for the settings of a sweep with several (or with the
 * optimal points): its default colours without yellow (5), black for the
 * optimal; the traces told apart by their point shapes. */
static const int cfg_colour[] = {1, 2, 3, 4, 6, 7};
enum { OPT_COLOUR = 8 };
static const int trace_point[] = {7, 5, 9, 11, 13}; /* filled: circle, square, triangles, diamond */

/* Plot hit rate against capacity: one line per trace and setting, a
 * ceiling per trace and, with --optimal, the optimal points per trace; a
 * setting's colour is the same for every trace, a trace's point shape the
 * same for every setting, and lines with a priority prefix are drawn thin
 * and dashed, so a line equal to another still shows.  Several traces are
 * named by what their file names do not share.  Without --policy,
 * --priority-prefix and --optimal: one line per trace in gnuplot's colours,
 * titled by the file name.  Returns an exit code. */
static int plot_sweep(const sweep *s, kvpt_output *out)
{
    enum { NAME = 64, TITLE = 192, STYLE = 64 };
    size_t lines = s->n_traces * s->n_cfgs, n_series = lines + (s->optimal ? s->n_traces : 0);
    size_t n = n_series * s->n_caps;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    kvpt_series *series = malloc(n_series * sizeof *series);
    char *titles = malloc(2 * n_series * TITLE), *styles = malloc(n_series * STYLE);
    int rc = KVPT_EXIT_ERROR;
    if (!x || !y || !series || !titles || !styles) {
        kvpt_error("out of memory");
        goto out;
    }
    int plain = s->n_cfgs == 1 && !s->optimal && !s->show_policy && !s->show_prefix;
    size_t ns = 0, pre = 0, suf = 0;
    if (!plain)
        kvpt_name_affixes(s->paths, s->n_traces, &pre, &suf);
    for (size_t i = 0; i < s->n_traces; i++) {
        char cut[NAME];
        const char *name = kvpt_base_name(s->paths[i]);
        if (pre + suf) {
            snprintf(cut, sizeof cut, "%.*s", (int)(strlen(name) - pre - suf), name + pre);
            name = cut;
        }
        int point = trace_point[i % (sizeof trace_point / sizeof trace_point[0])];
        for (size_t k = 0; k < s->n_cfgs; k++, ns++) {
            const kvpt_replay_result *row = &s->res[(i * s->n_cfgs + k) * s->n_caps];
            double *px = x + ns * s->n_caps, *py = y + ns * s->n_caps;
            for (size_t j = 0; j < s->n_caps; j++) {
                px[j] = (double)s->caps[j];
                py[j] = kvpt_hit_rate(&row[j]);
            }
            char *title = titles + 2 * ns * TITLE, *ceiling = title + TITLE, label[64];
            if (plain) {
                snprintf(title, TITLE, "%s", name);
            } else {
                cfg_label(&s->cfgs[k], label, sizeof label);
                snprintf(title, TITLE, "%s%s%s", s->n_traces > 1 ? name : "",
                         s->n_traces > 1 ? ": " : "", label);
            }
            snprintf(ceiling, TITLE, "%s%sunlimited capacity: %.4f",
                     s->n_traces > 1 ? name : "", s->n_traces > 1 ? ", " : "", s->ceiling[i]);
            /* one ceiling per trace: on its first line, or on its optimal points */
            int has_ceiling = k == 0 && !s->optimal;
            series[ns] = (kvpt_series){title, s->n_caps, px, py, has_ceiling ? ceiling : NULL,
                                       s->ceiling[i], NULL, 0};
            if (!plain) {
                char *style = styles + ns * STYLE;
                if (s->cfgs[k].priority_prefix)
                    snprintf(style, STYLE, "linespoints lw 1.5 dt 2 pt %d ps 0.8", point);
                else
                    snprintf(style, STYLE, "linespoints lw 2 pt %d ps 1.1", point);
                series[ns].style = style;
                series[ns].colour =
                    cfg_colour[k % (sizeof cfg_colour / sizeof cfg_colour[0])];
            }
        }
        if (s->optimal) {
            double *px = x + ns * s->n_caps, *py = y + ns * s->n_caps;
            size_t m = 0;
            for (size_t j = 0; j < s->n_caps; j++)
                if (!isnan(s->opt[i * s->n_caps + j]) && s->caps[j] > 0) {
                    px[m] = (double)s->caps[j];
                    py[m++] = s->opt[i * s->n_caps + j];
                }
            char *title = titles + 2 * ns * TITLE, *ceiling = title + TITLE;
            char *style = styles + ns * STYLE;
            snprintf(title, TITLE, "%s%soptimal (Belady)", s->n_traces > 1 ? name : "",
                     s->n_traces > 1 ? ": " : "");
            snprintf(ceiling, TITLE, "%s%sunlimited capacity: %.4f",
                     s->n_traces > 1 ? name : "", s->n_traces > 1 ? ", " : "", s->ceiling[i]);
            snprintf(style, STYLE, "linespoints lw 1.5 dt 3 pt %d ps 1.3", point - 1); /* open */
            series[ns++] = (kvpt_series){title, m, px, py, ceiling, s->ceiling[i], style,
                                         OPT_COLOUR};
        }
    }
    char chart[TITLE + 48] = "Prefix-cache hit rate by capacity";
    if (pre + suf) { /* the names the lines leave out */
        const char *first = kvpt_base_name(s->paths[0]);
        snprintf(chart, sizeof chart, "Prefix-cache hit rate by capacity: %.*s*%s",
                 (int)(pre < NAME ? pre : NAME), first, first + strlen(first) - suf);
    }
    rc = kvpt_plot(out, chart, "capacity (blocks of 512 tokens, log scale)", "block hit rate",
                   series, ns) == 0
             ? KVPT_EXIT_OK
             : KVPT_EXIT_ERROR;
out:
    free(x);
    free(y);
    free(series);
    free(titles);
    free(styles);
    return rc;
}

/* Refuse what can be refused before the first replay: a trace that cannot
 * be opened, standard input named twice, output files that cannot be
 * created, a plot without gnuplot.  Returns an exit code, or -1 to go on. */
static int check_before(const sweep *s, const char *csv, const char *plot,
                        kvpt_output *csv_out, kvpt_output *plot_out)
{
    int rc = kvpt_check_traces("sweep", s->paths, s->n_traces);
    if (rc >= 0)
        return rc;
    if (plot && kvpt_plot_check(plot_out, plot, s->paths, s->n_traces))
        return KVPT_EXIT_ERROR;
    if (csv && kvpt_output_check(csv_out, "--csv", csv, s->paths, s->n_traces))
        return KVPT_EXIT_ERROR;
    return -1;
}

/* The optimal policy's block hit rate on `t` at every capacity of the sweep
 * from the largest request up (capacity 0: the trace's block count) into
 * out[n_caps], NaN below.  Returns 0, or -1 with the error printed. */
static int optimal_row(const sweep *s, const kvpt_trace *t, double *out)
{
    kvpt_dense d;
    uint64_t *next = NULL;
    if (kvpt_dense_build(t, &d))
        return -1;
    int failed = kvpt_next_use(t, &d, &next);
    for (size_t j = 0; j < s->n_caps && !failed; j++) {
        uint64_t c = s->caps[j] ? s->caps[j] : t->total_blocks, hit, tok;
        out[j] = NAN;
        if (c < t->max_blocks || c == 0)
            continue;
        failed = kvpt_belady(t, &d, next, c, &hit, &tok);
        if (!failed && t->total_blocks)
            out[j] = (double)hit / (double)t->total_blocks;
    }
    free(next);
    kvpt_dense_free(&d);
    return failed ? -1 : 0;
}

/* Replay trace i at every capacity under every setting and, for a plot,
 * find its ceiling: the result of a capacity at least the trace's total,
 * else one more replay at capacity 0.  Returns 0, or -1 with the error
 * printed. */
static int sweep_trace(sweep *s, size_t i, int want_ceiling)
{
    kvpt_trace t;
    if (kvpt_trace_load(s->paths[i], &t))
        return -1;
    kvpt_replay_result *rows = s->res + i * s->n_cfgs * s->n_caps, extra;
    const kvpt_replay_result *unlimited = NULL;
    for (size_t j = 0; j < s->n_caps; j++)
        if (s->caps[j] == 0 || s->caps[j] >= t.total_blocks)
            unlimited = &rows[j];
    int more = want_ceiling && !unlimited;
    size_t runs = s->n_cfgs * s->n_caps;
    kvpt_progress prog;
    kvpt_progress_start(&prog, kvpt_safe_text(kvpt_base_name(s->paths[i])),
                        t.n_requests * (runs + more));
    int failed = 0;
    for (size_t k = 0; k < s->n_cfgs && !failed; k++)
        for (size_t j = 0; j < s->n_caps && !failed; j++)
            failed = kvpt_replay(&t, s->caps[j], &s->cfgs[k], &prog,
                                 (k * s->n_caps + j) * t.n_requests, &rows[k * s->n_caps + j]);
    if (!failed && more) {
        failed = kvpt_replay(&t, 0, NULL, &prog, runs * t.n_requests, &extra);
        unlimited = &extra;
    }
    kvpt_progress_end(&prog);
    if (!failed && s->optimal)
        failed = optimal_row(s, &t, s->opt + i * s->n_caps);
    kvpt_trace_free(&t);
    if (!failed && want_ceiling)
        s->ceiling[i] = kvpt_hit_rate(unlimited);
    return failed ? -1 : 0;
}

/* Every policy with every priority prefix into s->cfgs.  Returns 0, or -1
 * after an error was printed. */
static int make_cfgs(sweep *s, const char *policy_arg, const char *prefix_arg)
{
    kvpt_replay_opts pol[8] = {KVPT_REPLAY_OPTS_DEFAULT};
    uint64_t *pre = NULL, zero = 0;
    size_t n_pol = 1, n_pre = 1;
    if (policy_arg && !(n_pol = parse_policies(policy_arg, pol, 8)))
        return -1;
    if (prefix_arg && !(n_pre = parse_counts("priority-prefix", prefix_arg, count_order, &pre))) {
        free(pre);
        return -1;
    }
    s->cfgs = malloc(n_pol * n_pre * sizeof *s->cfgs);
    if (!s->cfgs) {
        free(pre);
        kvpt_error("out of memory");
        return -1;
    }
    for (size_t a = 0; a < n_pol; a++)
        for (size_t b = 0; b < n_pre; b++)
            s->cfgs[a * n_pre + b] = (kvpt_replay_opts){pol[a].policy, pol[a].protected_percent,
                                                        pre ? pre[b] : zero};
    s->n_cfgs = n_pol * n_pre;
    free(pre);
    return 0;
}

/* `kvpool sweep TRACE [TRACE...] --capacities A,B,C [--policy P,Q]
 * [--priority-prefix N,M] [--optimal] [--csv FILE] [--plot FILE]`. */
int kvpt_cmd_sweep(int argc, char **argv)
{
    const char *caps_arg = NULL, *csv = NULL, *plot = NULL, *policy_arg = NULL,
               *prefix_arg = NULL;
    int optimal = 0;
    const kvpt_opt opts[] = {
        {"capacities", KVPT_OPT_TEXT, &caps_arg, 0, 0, NULL, "e.g. 1000,10000,100000"},
        {"policy", KVPT_OPT_TEXT, &policy_arg, 0, 0, NULL, NULL},
        {"priority-prefix", KVPT_OPT_TEXT, &prefix_arg, 0, 0, NULL, NULL},
        {"optimal", KVPT_OPT_FLAG, &optimal, 0, 0, NULL, NULL},
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
    sweep s = {argv + first, (size_t)(argc - first), NULL, 0, NULL, 0,
               policy_arg != NULL, prefix_arg != NULL, optimal, NULL, NULL, NULL};
    rc = KVPT_EXIT_USAGE;
    s.n_caps = parse_counts("capacities", caps_arg, cap_order, &s.caps);
    if (!s.n_caps)
        goto out;
    if (make_cfgs(&s, policy_arg, prefix_arg))
        goto out;
    if (plot && s.caps[0] == 0) { /* sorted: 0 comes first only when alone */
        rc = kvpt_usage_error("sweep", "--plot needs a capacity above 0 (capacity 0, the "
                                       "whole trace, is drawn as the dashed ceiling)");
        goto out;
    }
    kvpt_output csv_out, plot_out;
    if ((rc = check_before(&s, csv, plot, &csv_out, &plot_out)) >= 0)
        goto out;
    rc = KVPT_EXIT_ERROR;
    s.res = calloc(s.n_traces * s.n_cfgs * s.n_caps, sizeof *s.res);
    s.ceiling = calloc(s.n_traces, sizeof *s.ceiling);
    s.opt = calloc(s.n_traces * s.n_caps, sizeof *s.opt);
    if (!s.res || !s.ceiling || !s.opt) {
        kvpt_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < s.n_traces; i++)
        if (sweep_trace(&s, i, plot != NULL))
            goto out;
    print_sweep_table(&s);
    rc = KVPT_EXIT_OK;
    if (csv)
        rc = write_csv(&s, &csv_out);
    if (rc == KVPT_EXIT_OK && plot)
        rc = plot_sweep(&s, &plot_out);
out:
    free(s.caps);
    free(s.cfgs);
    free(s.res);
    free(s.ceiling);
    free(s.opt);
    return rc;
}
