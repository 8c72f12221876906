/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plot.h — line charts through gnuplot, for `kvpool sweep --plot` and
 * `kvpool curve --plot`.
 *
 * gnuplot is an optional run-time dependency: the tool looks for it on PATH
 * and, when it is missing, says how to install it.  A command checks with
 * kvpt_plot_check before its work, so that a plot that cannot be drawn is
 * refused before anything runs.
 */
#ifndef KVPT_PLOT_H
#define KVPT_PLOT_H

#include "common.h"

#include <stddef.h>

/* One line of the chart: n points (x[i], y[i]), drawn in the order given
 * in gnuplot's `style` (e.g. "lines lw 2", "points pt 7"; NULL: lines with
 * a mark at each point) in gnuplot's colour number `colour` (0: the
 * series' position in the chart, from 1); and, when ceiling_title is not
 * NULL, the level y = ceiling (a limit the line tends to) as a dashed line
 * of the same colour. */
typedef struct kvpt_series {
    const char *title;
    size_t n;
    const double *x, *y;
    const char *ceiling_title;
    double ceiling;
    const char *style;
    int colour;
} kvpt_series;

/* The gnuplot terminal for `path` by its extension (".png" or ".svg", any
 * case), or NULL when the extension is neither. */
const char *kvpt_plot_terminal(const char *path);

/* Check that a plot can be drawn at `path` (its extension checked by the
 * caller with kvpt_plot_terminal): gnuplot is on PATH and `path` can be
 * written as kvpt_output_check says (not one of the n `inputs`), filling
 * *o.  Returns 0, or -1 with the reason printed as one line naming --plot.
 * Leaves nothing behind. */
int kvpt_plot_check(kvpt_output *o, const char *path, char *const *inputs, size_t n_inputs);

/*
 * Draw the series into o (from kvpt_plot_check; PNG or SVG by extension) with a log-scaled x
 * axis; points with x <= 0 are left out, and at least one point must
 * remain.  Both axes are fitted to the points and ceilings with a margin on
 * every side; x ticks are labelled as whole numbers with thousands
 * separators (or %g), y ticks at a round step with a fixed number of
 * decimals.  gnuplot draws into o's temporary file, committed
 * (kvpt_output_commit) only when complete and not empty; its own messages
 * are never shown.  Returns 0 on success, 1 when gnuplot is not on PATH (an
 * install hint was printed), -1 on failure (one line printed, `path`
 * untouched, no temporary file left).
 */
int kvpt_plot(kvpt_output *o, const char *title, const char *xlabel, const char *ylabel,
              const kvpt_series *series, size_t n_series);

/* How many leading and trailing bytes the base names of the n paths share,
 * cut at word separators ('_', '-', '.'; "mooncake_fast25_" and
 * "_trace.jsonl.gz" of the two bundled traces), so a chart can tell them
 * apart by what differs; both 0 when that would leave a name empty or
 * n < 2. */
void kvpt_name_affixes(char *const *paths, size_t n, size_t *pre, size_t *suf);

/* The memory of a hit-rate chart for the caller to fill: the points, the
 * series and the text of their titles. */
typedef struct kvpt_chart {
    double *x, *y;
    kvpt_series *series;
    char *titles;
} kvpt_chart;

/* Allocate room for n_points points, n_series series and title_bytes of
 * titles.  Returns 0, or -1 with "out of memory" printed and nothing held. */
int kvpt_chart_init(kvpt_chart *c, size_t n_points, size_t n_series, size_t title_bytes);

/* Draw c's first n_series series as block hit rate against capacity (in
 * blocks of 512 tokens) into o with kvpt_plot, then free c's memory.
 * Returns an exit code. */
int kvpt_chart_hit_rate(kvpt_chart *c, kvpt_output *o, const char *title, size_t n_series);

#endif /* KVPT_PLOT_H */
