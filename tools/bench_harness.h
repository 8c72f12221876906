/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_harness.h — what every benchmark workload shares: the seeded
 * generator, the repetition harness, resident-memory readings and result
 * output.
 *
 * Every workload is a pair of timed runs over one pre-generated operation
 * sequence: the library, and its floor (the simplest structure that could do
 * the same job).  The harness runs them back to back, one warm-up and then
 * BENCH_REPS repetitions, and keeps the medians.
 */
#ifndef KVPT_BENCH_HARNESS_H
#define KVPT_BENCH_HARNESS_H

#include "output.h"

#include <jansson.h>
#include <stdint.h>

/* Timed repetitions after the warm-up (at least 5: docs/PERFORMANCE.md). */
#define BENCH_REPS 5
/* The workloads' block size and generator seed (docs/PERFORMANCE.md). */
#define BENCH_BLOCK_TOKENS 16u
#define BENCH_SEED 42u

/* splitmix64 (Steele, Lea, Flood 2014): the one generator of every workload. */
typedef struct bench_rng {
    uint64_t s;
} bench_rng;

uint64_t bench_rng_next(bench_rng *r);
/* Uniform in [lo, hi] (modulo reduction; the bias is below 2^-40 for the
 * ranges used here). */
uint64_t bench_rng_range(bench_rng *r, uint64_t lo, uint64_t hi);
/* Uniform in [0, 1). */
double bench_rng_unit(bench_rng *r);

/* One timed run: returns its seconds, or a negative value after printing an
 * error.  Setup that must not be timed happens inside, before the clock. */
typedef double (*bench_fn)(void *ctx);

/* Sort v[0..n) ascending and return its middle element (n odd).  O(n^2). */
double bench_median(double *v, size_t n);

/* Warm-up, then BENCH_REPS repetitions of lib then floor; *lib_s and
 * *floor_s receive the median seconds.  Returns -1 when a run fails. */
int bench_reps(bench_fn lib, bench_fn floor_fn, void *ctx, double *lib_s, double *floor_s);

/* VmRSS and VmHWM of this process in KiB (0 when unreadable). */
uint64_t bench_rss_kb(void);
uint64_t bench_peak_rss_kb(void);

/* Where results go: JSON lines as they come, or one table at the end. */
typedef struct bench_out {
    int json;
    kvpt_table *table;
} bench_out;

/* Emit one result.  `obj` (taken over) holds at least workload, ns_per_block,
 * floor_ns_per_block and ratio_to_floor; `config` and `details` are the
 * table's descriptive columns.  Returns -1 when output fails. */
int bench_emit(bench_out *out, json_t *obj, const char *config, const char *details);

#endif /* KVPT_BENCH_HARNESS_H */
