/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plot.c — line charts rendered by gnuplot (see plot.h).
 *
 * The script and the data go to gnuplot's standard input, the data inline
 * ('-' files); gnuplot's own output (warnings, errors) goes to an unnamed
 * temporary file and never reaches the terminal: a failure is reported as
 * one line of ours.  gnuplot draws into the output's temporary file
 * (kvpt_output), moved to the target only once complete, so the target is
 * never empty or partial.  Axes are fitted here rather than left to gnuplot, so that every
 * chart frames its data the same way: a margin on each side, no point on
 * the frame, tick labels in one format.  Titles are written as
 * double-quoted gnuplot strings (backslash escapes) with the terminal in
 * noenhanced mode, so file names with underscores, quotes or backslashes
 * print as they are.
 */
#define _GNU_SOURCE /* pipe2, environ */

#include "plot.h"

#include "common.h"
#include "output.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether an executable named `name` is in one of PATH's directories. */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char buf[4096];
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* an empty PATH entry means the current directory */
        int n = snprintf(buf, sizeof buf, "%.*s/%s", len ? (int)len : 1, len ? p : ".", name);
        if (n > 0 && (size_t)n < sizeof buf && access(buf, X_OK) == 0)
            return 1;
        if (!colon)
            return 0;
        p = colon + 1;
    }
}

/* Case-insensitive test of the extension. */
static int has_ext(const char *path, const char *ext)
{
    size_t n = strlen(path), k = strlen(ext);
    if (n < k)
        return 0;
    for (size_t i = 0; i < k; i++)
        if (tolower((unsigned char)path[n - k + i]) != ext[i])
            return 0;
    return 1;
}

/* See plot.h. */
const char *kvpt_plot_terminal(const char *path)
{
    if (has_ext(path, ".png"))
        return "pngcairo size 960,600 noenhanced font ',10'";
    if (has_ext(path, ".svg"))
        return "svg size 960,600 dynamic noenhanced font ',10'";
    return NULL;
}

/* Write `text`, made printable (kvpt_safe_text), as a double-quoted gnuplot
 * string: a backslash before each '"' and '\\'.  (Single quotes would
 * need '' for a quote, and gnuplot 5.4 misreads two of those in a row.) */
static void gp_string(FILE *gp, const char *text)
{
    const char *s = kvpt_safe_text(text);
    fputc('"', gp);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', gp);
        fputc(*s, gp);
    }
    fputc('"', gp);
}

/* See plot.h. */
int kvpt_plot_check(kvpt_output *o, const char *path, char *const *inputs, size_t n_inputs)
{
    if (!on_path("gnuplot")) {
        kvpt_error("--plot needs gnuplot, which is not on PATH: install it with "
                   "`apt-get install gnuplot-nox`, or leave out --plot");
        return -1;
    }
    return kvpt_output_check(o, "--plot", path, inputs, n_inputs);
}

/* ---- axes --------------------------------------------------------------- */

/* A log axis spanning fewer than FEW_TICKS decades is labelled at the data
 * (when there are at most MANY_TICKS values) rather than at decades; at
 * most MANY_TICKS 1-2-5 steps are labelled before only decades are. */
enum { FEW_TICKS = 3, MANY_TICKS = 9 };

/* A round step (1, 2 or 5 times a power of ten) near `raw`. */
static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The y range [*lo, *hi] grown by a margin, so no point touches the frame;
 * a flat set of values gets a band around it.  Values that are all >= 0
 * (rates, counts) are drawn from 0, so heights compare as ratios: the axis
 * dips below 0 by at most 4% of it, too little for a negative tick. */
static void fit_y(double *lo, double *hi)
{
    int non_negative = *lo >= 0;
    if (non_negative)
        *lo = 0;
    double span = *hi - *lo;
    double pad = span > 0 ? span * 0.08 : fabs(*hi) > 0 ? fabs(*hi) * 0.1 : 0.05;
    *lo -= pad;
    *hi += pad;
    if (non_negative)
        *lo = -fmin(pad, *hi * 0.04);
}

/* Write `v` as a tick label: whole numbers with thousands separators
 * (1,000,000, never 1e+06), others in %g. */
static void tick_label(FILE *gp, double v)
{
    if (v != floor(v) || fabs(v) >= 1e15) {
        fprintf(gp, "\"%g\"", v);
        return;
    }
    char digits[32], out[48];
    snprintf(digits, sizeof digits, "%.0f", fabs(v));
    size_t n = strlen(digits), k = 0;
    if (v < 0)
        out[k++] = '-';
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            out[k++] = ',';
        out[k++] = digits[i];
    }
    out[k] = 0;
    fprintf(gp, "\"%s\"", out);
}

/* Write one tick of the x axis: its label and position. */
static void x_tick(FILE *gp, const char **sep, double v)
{
    fputs(*sep, gp);
    tick_label(gp, v);
    fprintf(gp, " %.17g", v);
    *sep = ", ";
}

/* Write "set xtics (...)" for a log axis over [lo, hi]: over three decades
 * or more, the decades (with their 2 and 5 steps when that makes few
 * enough ticks); over a narrower range, the data's own x values when there
 * are few enough of them, else the 1-2-5 steps. */
static void log_ticks(FILE *gp, double lo, double hi, const kvpt_series *series,
                      size_t n_series)
{
    static const double steps[] = {1, 2, 5};
    size_t decades = 0, all = 0, data = 0;
    for (double p = pow(10, floor(log10(lo))); p <= hi; p *= 10)
        for (size_t m = 0; m < 3; m++)
            if (p * steps[m] >= lo && p * steps[m] <= hi) {
                all++;
                decades += m == 0;
            }
    for (size_t i = 0; i < n_series; i++)
        data += series[i].n;
    const char *sep = "";
    fputs("set xtics (", gp);
    if (decades < FEW_TICKS && data <= MANY_TICKS) {
        /* label each distinct x once, wherever it first appears */
        for (size_t i = 0; i < n_series; i++)
            for (size_t k = 0; k < series[i].n; k++) {
                double v = series[i].x[k];
                int dup = !(v > 0);
                for (size_t a = 0; a <= i && !dup; a++)
                    for (size_t b = 0; b < (a == i ? k : series[a].n) && !dup; b++)
                        dup = series[a].x[b] == v;
                if (!dup)
                    x_tick(gp, &sep, v);
            }
    } else {
        size_t per_decade = decades >= FEW_TICKS && all > MANY_TICKS ? 1 : 3;
        for (double p = pow(10, floor(log10(lo))); p <= hi; p *= 10)
            for (size_t m = 0; m < per_decade; m++)
                if (p * steps[m] >= lo && p * steps[m] <= hi)
                    x_tick(gp, &sep, p * steps[m]);
    }
    fputs(")\n", gp);
}

/* Write the axis settings: x (log) and y ranges with margins around every
 * point and ceiling, round y steps printed with as many decimals as the
 * step needs.  Returns -1 when there is no point with x > 0. */
static int write_axes(FILE *gp, const kvpt_series *series, size_t n_series)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (size_t i = 0; i < n_series; i++) {
        for (size_t k = 0; k < series[i].n; k++) {
            if (!(series[i].x[k] > 0))
                continue;
            xlo = fmin(xlo, series[i].x[k]);
            xhi = fmax(xhi, series[i].x[k]);
            ylo = fmin(ylo, series[i].y[k]);
            yhi = fmax(yhi, series[i].y[k]);
        }
        if (series[i].ceiling_title) {
            ylo = fmin(ylo, series[i].ceiling);
            yhi = fmax(yhi, series[i].ceiling);
        }
    }
    if (!(xlo <= xhi) || !isfinite(ylo) || !isfinite(yhi))
        return -1;
    /* about 5% of the log width on each side; a single x gets a factor of 2 */
    double f = xhi > xlo ? fmax(1.2, pow(xhi / xlo, 0.05)) : 2;
    xlo /= f;
    xhi *= f;
    fit_y(&ylo, &yhi);
    double step = nice_step((yhi - ylo) / 6);
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    fprintf(gp, "set logscale x 10\nset xrange [%.17g:%.17g]\n", xlo, xhi);
    log_ticks(gp, xlo, xhi, series, n_series);
    fprintf(gp, "set yrange [%.17g:%.17g]\nset ytics %.17g\nset format y '%%.%df'\n", ylo,
            yhi, step, decimals);
    return 0;
}

/* ---- running gnuplot ---------------------------------------------------- */

/* Copy the last line of gnuplot's output that says something (not its echo
 * of the script, not the '^' under it) into why[cap], its "line N:" prefix
 * and control characters dropped. */
static void last_reason(FILE *capture, char *why, size_t cap)
{
    char line[512];
    why[0] = 0;
    rewind(capture);
    while (fgets(line, sizeof line, capture)) {
        char *p = line;
        while (isspace((unsigned char)*p) || *p == '^')
            p++;
        if (!*p || strncmp(p, "gnuplot>", 8) == 0)
            continue;
        char *colon = strstr(p, "line ");
        if (colon && (colon = strchr(colon, ':')) && colon - p < 24)
            p = colon + 1 + (colon[1] == ' ');
        size_t k = 0;
        for (; *p && k + 1 < cap; p++)
            if ((unsigned char)*p >= 0x20 && *p != 0x7f)
                why[k++] = *p;
        why[k] = 0;
    }
}

/* Run gnuplot on `script` (len bytes on its standard input), its standard
 * output and error into a capture file.  Returns 0 when it exits with
 * status 0; otherwise -1 with one line saying why in why[cap]. */
static int run_gnuplot(const char *script, size_t len, char *why, size_t cap)
{
    FILE *capture = tmpfile();
    int in[2] = {-1, -1};
    if (!capture || pipe2(in, O_CLOEXEC) != 0) {
        snprintf(why, cap, "cannot start gnuplot: %s", strerror(errno));
        if (capture)
            fclose(capture);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fileno(capture), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fileno(capture), STDERR_FILENO);
    char *argv[] = {"gnuplot", NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    if (err) {
        close(in[1]);
        fclose(capture);
        snprintf(why, cap, "cannot start gnuplot: %s", strerror(err));
        return -1;
    }
    /* gnuplot may stop reading early: a closed pipe is its failure to
     * report, not a signal to kill us */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGPIPE, &ign, &old);
    for (size_t done = 0; done < len;) {
        ssize_t w = write(in[1], script + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(in[1]);
    sigaction(SIGPIPE, &old, NULL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
        last_reason(capture, why, cap);
        if (!why[0])
            snprintf(why, cap, "gnuplot ended with status %d", status);
    }
    fclose(capture);
    return ok ? 0 : -1;
}

/* Write the whole gnuplot script for the chart, drawing into `out`.
 * Returns -1 when there is nothing to plot. */
static int write_script(FILE *gp, const char *out, const char *path, const char *title,
                        const char *xlabel, const char *ylabel, const kvpt_series *series,
                        size_t n_series)
{
    fprintf(gp, "set terminal %s\nset output ", kvpt_plot_terminal(path));
    gp_string(gp, out);
    fputs("\nset title ", gp);
    gp_string(gp, title);
    fputs("\nset xlabel ", gp);
    gp_string(gp, xlabel);
    fputs("\nset ylabel ", gp);
    gp_string(gp, ylabel);
    fputs("\nset grid\nset key below height 1\n", gp);
    if (write_axes(gp, series, n_series))
        return -1;
    fputs("plot ", gp);
    for (size_t i = 0; i < n_series; i++) {
        size_t lc = series[i].colour > 0 ? (size_t)series[i].colour : i + 1;
        fprintf(gp, "%s'-' using 1:2 with %s lc %zu title ", i ? ", " : "",
                series[i].style ? series[i].style : "linespoints lw 2 pt 7 ps 1.2", lc);
        gp_string(gp, series[i].title);
        if (series[i].ceiling_title) {
            fprintf(gp, ", %.17g with lines dt 2 lw 1.5 lc %zu title ", series[i].ceiling, lc);
            gp_string(gp, series[i].ceiling_title);
        }
    }
    fputc('\n', gp);
    for (size_t i = 0; i < n_series; i++) {
        for (size_t k = 0; k < series[i].n; k++)
            if (series[i].x[k] > 0)
                fprintf(gp, "%.17g %.17g\n", series[i].x[k], series[i].y[k]);
        fputs("e\n", gp);
    }
    return 0;
}

/* See plot.h. */
int kvpt_plot(kvpt_output *o, const char *title, const char *xlabel, const char *ylabel,
              const kvpt_series *series, size_t n_series)
{
    const char *path = o->path;
    if (!kvpt_plot_terminal(path)) {
        kvpt_error("%s: a plot's file name must end in .png or .svg", kvpt_safe_text(path));
        return -1;
    }
    if (!on_path("gnuplot")) {
        fprintf(stderr, "kvpool: gnuplot not found on PATH, so no plot was drawn; install it "
                        "with `apt-get install gnuplot-nox` and run again\n");
        return 1;
    }
    char why[256] = "";
    int fd = kvpt_output_temp(o);
    if (fd < 0) {
        kvpt_error("%s: cannot create the plot: %s", kvpt_safe_text(path), strerror(errno));
        return -1;
    }
    close(fd);
    char *script = NULL;
    size_t len = 0;
    FILE *gp = open_memstream(&script, &len);
    int rc = -1;
    if (!gp) {
        snprintf(why, sizeof why, "out of memory");
    } else {
        int nothing = write_script(gp, o->tmp, path, title, xlabel, ylabel, series, n_series);
        if (fclose(gp) != 0)
            snprintf(why, sizeof why, "out of memory");
        else if (nothing)
            snprintf(why, sizeof why, "no point with x above 0 to plot");
        else
            rc = run_gnuplot(script, len, why, sizeof why);
    }
    free(script);
    struct stat st;
    if (rc == 0 && (stat(o->tmp, &st) != 0 || st.st_size == 0)) {
        snprintf(why, sizeof why, "gnuplot wrote nothing");
        rc = -1;
    }
    if (rc == 0 && kvpt_output_commit(o) != 0) {
        snprintf(why, sizeof why, "%s", strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        if (o->tmp[0])
            unlink(o->tmp);
        kvpt_error("%s: no plot drawn: %s", kvpt_safe_text(path), why);
    }
    return rc;
}

/* Whether `c` separates the words of a file name. */
static int is_sep(char c)
{
    return c == '_' || c == '-' || c == '.';
}

/* See plot.h. */
void kvpt_name_affixes(char *const *paths, size_t n, size_t *pre, size_t *suf)
{
    *pre = *suf = 0;
    if (n < 2)
        return;
    const char *first = kvpt_base_name(paths[0]);
    size_t len0 = strlen(first), p = len0, q = len0;
    for (size_t i = 1; i < n; i++) {
        const char *name = kvpt_base_name(paths[i]);
        size_t len = strlen(name), k = 0;
        while (k < p && k < len && name[k] == first[k])
            k++;
        p = k;
        for (k = 0; k < q && k < len && name[len - 1 - k] == first[len0 - 1 - k]; k++)
            ;
        q = k;
    }
    while (p > 0 && !is_sep(first[p - 1])) /* end after a separator */
        p--;
    while (q > 0 && !is_sep(first[len0 - q])) /* start at a separator */
        q--;
    for (size_t i = 0; i < n; i++)
        if (strlen(kvpt_base_name(paths[i])) <= p + q)
            p = q = 0;
    *pre = p;
    *suf = q;
}

/* See plot.h. */
int kvpt_chart_init(kvpt_chart *c, size_t n_points, size_t n_series, size_t title_bytes)
{
    c->x = malloc(n_points * sizeof *c->x);
    c->y = malloc(n_points * sizeof *c->y);
    c->series = malloc(n_series * sizeof *c->series);
    c->titles = malloc(title_bytes);
    if (c->x && c->y && c->series && c->titles)
        return 0;
    kvpt_error("out of memory");
    free(c->x);
    free(c->y);
    free(c->series);
    free(c->titles);
    return -1;
}

/* See plot.h. */
int kvpt_chart_hit_rate(kvpt_chart *c, kvpt_output *o, const char *title, size_t n_series)
{
    int rc = kvpt_plot(o, title, "capacity (blocks of 512 tokens, log scale)",
                       "block hit rate", c->series, n_series) == 0
                 ? KVPT_EXIT_OK
                 : KVPT_EXIT_ERROR;
    free(c->x);
    free(c->y);
    free(c->series);
    free(c->titles);
    return rc;
}
