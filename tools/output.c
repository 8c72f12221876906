/* SPDX-License-Identifier: Apache-2.0 */
/*
 * output.c — text tables, JSON lines, CSV fields and the progress bar (see
 * output.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "output.h"

#include "common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kvpt_table {
    size_t ncols;
    const char *const *headers;
    const char *align;
    char **cells;  /* row-major */
    size_t n, cap;
};

/* Allocate an empty table; headers and align are kept by reference. */
kvpt_table *kvpt_table_new(size_t ncols, const char *const *headers, const char *align)
{
    kvpt_table *t = calloc(1, sizeof *t);
    if (t) {
        t->ncols = ncols;
        t->headers = headers;
        t->align = align;
    }
    return t;
}

/* Format the cell into its own string and append it. */
int kvpt_table_cell(kvpt_table *t, const char *fmt, ...)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        char **cells = realloc(t->cells, cap * sizeof *cells);
        if (!cells)
            return -1;
        t->cells = cells;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len < 0 ? NULL : malloc((size_t)len + 1);
    if (!s)
        return -1;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    t->cells[t->n++] = s;
    return 0;
}

/* Print one row of `ncols` strings padded to `width`. */
static void print_row(const kvpt_table *t, const char *const *row, const size_t *width, FILE *out)
{
    for (size_t c = 0; c < t->ncols; c++) {
        const char *sep = c + 1 < t->ncols ? "  " : "";
        int w = (int)width[c];
        if (t->align[c] == 'r')
            fprintf(out, "%*s%s", w, row[c], sep);
        else if (c + 1 < t->ncols)
            fprintf(out, "%-*s%s", w, row[c], sep);
        else
            fputs(row[c], out); /* no trailing blanks */
    }
    fputc('\n', out);
}

/* Size each column to its widest cell, then print header, rule and rows. */
void kvpt_table_print(const kvpt_table *t, FILE *out)
{
    size_t *width = calloc(t->ncols, sizeof *width);
    if (!width)
        return;
    for (size_t c = 0; c < t->ncols; c++)
        width[c] = strlen(t->headers[c]);
    for (size_t i = 0; i < t->n; i++) {
        size_t len = strlen(t->cells[i]);
        if (len > width[i % t->ncols])
            width[i % t->ncols] = len;
    }
    print_row(t, t->headers, width, out);
    for (size_t c = 0; c < t->ncols; c++) {
        for (size_t k = 0; k < width[c]; k++)
            fputc('-', out);
        fputs(c + 1 < t->ncols ? "  " : "\n", out);
    }
    for (size_t i = 0; i + t->ncols <= t->n; i += t->ncols)
        print_row(t, (const char *const *)t->cells + i, width, out);
    free(width);
}

/* Free every cell and the table. */
void kvpt_table_free(kvpt_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* Compact, insertion-ordered, one object per line: easy for `jq` and for
 * line-by-line readers. */
int kvpt_json_line(json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(obj);
    if (!s)
        return -1;
    puts(s);
    free(s);
    return 0;
}

/* Decide once whether a bar is shown at all. */
void kvpt_progress_start(kvpt_progress *p, const char *label, uint64_t total)
{
    p->on = isatty(STDERR_FILENO) && total > 0;
    p->label = label;
    p->total = total;
    p->next_draw = 0;
}

/* Redraw "label [#####.....]  42%" when at least 0.1 s has passed. */
void kvpt_progress_update(kvpt_progress *p, uint64_t done)
{
    if (!p->on)
        return;
    double now = kvpt_now();
    if (now < p->next_draw)
        return;
    p->next_draw = now + 0.1;
    enum { WIDTH = 40 };
    uint64_t filled = done >= p->total ? WIDTH : done * WIDTH / p->total;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bar[i] = (uint64_t)i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %3d%%", p->label, bar,
            (int)(done >= p->total ? 100 : done * 100 / p->total));
    fflush(stderr);
}

/* Clear the bar's line so later output starts clean. */
void kvpt_progress_end(kvpt_progress *p)
{
    if (!p->on)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->on = 0;
}

/* Quote only when the field holds a comma, a quote or a line break. */
void kvpt_csv_field(FILE *f, const char *s)
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

/* See output.h. */
const char *kvpt_base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}
