/* SPDX-License-Identifier: Apache-2.0 */
/*
 * output.h — how the tool talks to people and programs: aligned text tables,
 * one-line JSON objects, and a progress bar on stderr.
 *
 * Tables are collected whole and printed at the end so that every column can
 * be sized to its widest cell.  The progress bar exists only when stderr is a
 * terminal, so pipes and test harnesses see exactly the documented output.
 */
#ifndef KVPT_OUTPUT_H
#define KVPT_OUTPUT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kvpt_table kvpt_table;

/* A table with `ncols` columns titled headers[0..ncols); align[i] is 'l' or
 * 'r' for column i.  Returns NULL when memory runs out. */
kvpt_table *kvpt_table_new(size_t ncols, const char *const *headers, const char *align);

/* Append one cell (printf-style); cells fill rows left to right.  Returns -1
 * when memory runs out. */
int kvpt_table_cell(kvpt_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print the header, a rule, and every row, columns two spaces apart. */
void kvpt_table_print(const kvpt_table *t, FILE *out);

/* Free the table (NULL is ignored). */
void kvpt_table_free(kvpt_table *t);

/* Print `obj` as one compact line (keys in insertion order) on stdout and
 * release it.  Returns -1 when it cannot be rendered. */
int kvpt_json_line(json_t *obj);

/* Write `s` as one CSV field (RFC 4180 quoting only when needed). */
void kvpt_csv_field(FILE *f, const char *s);

/* The part of `path` after its last '/' (a pointer into `path`). */
const char *kvpt_base_name(const char *path);

/* A progress bar on stderr, redrawn at most ten times a second, only when
 * stderr is a terminal. */
typedef struct kvpt_progress {
    int on;
    const char *label;
    uint64_t total;
    double next_draw;
} kvpt_progress;

void kvpt_progress_start(kvpt_progress *p, const char *label, uint64_t total);
/* Cheap when off; call as often as convenient. */
void kvpt_progress_update(kvpt_progress *p, uint64_t done);
/* Erase the bar. */
void kvpt_progress_end(kvpt_progress *p);

#endif /* KVPT_OUTPUT_H */
