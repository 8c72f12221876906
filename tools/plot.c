/*
 * plot.c — line charts rendered by gnuplot (see plot.h).
 *
 * The script and the data go to gnuplot's standard input through popen(), the
 * data inline ('-' files), so no temporary files are left behind.  Titles are
 * written as single-quoted gnuplot strings with the terminal in noenhanced
 * mode, so file names with underscores or quotes print as they are.
 */
#define _POSIX_C_SOURCE 200809L

#include "plot.h"

#include "common.h"

#include <ctype.h>
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

/* Write `s` as a single-quoted gnuplot string ('' stands for a quote). */
static void gp_string(FILE *gp, const char *s)
{
    fputc('\'', gp);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', gp);
        if (*s != '\n' && *s != '\r')
            fputc(*s, gp);
    }
    fputc('\'', gp);
}

/* See plot.h. */
int kvpt_plot(const char *path, const char *title, const char *xlabel, const char *ylabel,
              double ymax, const kvpt_series *series, size_t n_series)
{
    if (!on_path("gnuplot")) {
        fprintf(stderr, "kvpool: gnuplot not found on PATH, so no plot was drawn; install it "
                        "with `apt-get install gnuplot-nox` and run again\n");
        return 1;
    }
    fflush(stdout);
    FILE *gp = popen("gnuplot", "w");
    if (!gp) {
        kvpt_error("cannot run gnuplot");
        return -1;
    }
    fprintf(gp, "set terminal %s\nset output ", kvpt_plot_terminal(path));
    gp_string(gp, path);
    fputs("\nset title ", gp);
    gp_string(gp, title);
    fputs("\nset xlabel ", gp);
    gp_string(gp, xlabel);
    fputs("\nset ylabel ", gp);
    gp_string(gp, ylabel);
    fprintf(gp, "\nset logscale x 10\nset yrange [0:%.17g]\nset grid\nset key top left\nplot ",
            ymax);
    for (size_t i = 0; i < n_series; i++) {
        fputs(i ? ", " : "", gp);
        fprintf(gp, "'-' using 1:2 with %s title ",
                series[i].style ? series[i].style : "linespoints");
        gp_string(gp, series[i].title);
    }
    fputc('\n', gp);
    for (size_t i = 0; i < n_series; i++) {
        for (size_t k = 0; k < series[i].n; k++)
            if (series[i].x[k] > 0)
                fprintf(gp, "%.17g %.17g\n", series[i].x[k], series[i].y[k]);
        fputs("e\n", gp);
    }
    int status = pclose(gp);
    struct stat st;
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        stat(path, &st) != 0 || st.st_size == 0) {
        kvpt_error("%s: gnuplot failed to draw the plot", path);
        return -1;
    }
    return 0;
}
