/*
 * plot.h — line charts through gnuplot, for `kvpool sweep --plot` and
 * `kvpool curve --plot`.
 *
 * gnuplot is an optional run-time dependency: the tool looks for it on PATH
 * and, when it is missing, says how to install it instead of failing.
 */
#ifndef KVPT_PLOT_H
#define KVPT_PLOT_H

#include <stddef.h>

/* One line of the chart: n points (x[i], y[i]), drawn in gnuplot's `style`
 * (e.g. "lines lw 2", "points pt 7"; NULL: "linespoints"). */
typedef struct kvpt_series {
    const char *title;
    size_t n;
    const double *x, *y;
    const char *style;
} kvpt_series;

/* The gnuplot terminal for `path` by its extension (".png" or ".svg", any
 * case), or NULL when the extension is neither. */
const char *kvpt_plot_terminal(const char *path);

/*
 * Draw the series into `path` (PNG or SVG by extension) with a log-scaled x
 * axis and a y axis from 0 to `ymax`; points with x <= 0 are left out.  Returns 0 on success, 1 when
 * gnuplot is not on PATH (an install hint was printed), -1 on failure (error
 * printed).
 */
int kvpt_plot(const char *path, const char *title, const char *xlabel, const char *ylabel,
              double ymax, const kvpt_series *series, size_t n_series);

#endif /* KVPT_PLOT_H */
