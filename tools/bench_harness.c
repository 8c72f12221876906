/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_harness.c — the harness every benchmark workload shares (see
 * bench_harness.h): splitmix64, repetitions with medians, resident-memory
 * readings from /proc, and result output as JSON lines or a table row.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_harness.h"

#include <stdlib.h>
#include <string.h>

/* ---- generator ---------------------------------------------------------- */

/* splitmix64: add the golden gamma, then mix. */
uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Modulo reduction of a 64-bit draw. */
uint64_t bench_rng_range(bench_rng *r, uint64_t lo, uint64_t hi)
{
    return lo + bench_rng_next(r) % (hi - lo + 1);
}

/* The top 53 bits as a double in [0, 1). */
double bench_rng_unit(bench_rng *r)
{
    return (double)(bench_rng_next(r) >> 11) * 0x1p-53;
}

/* ---- harness ------------------------------------------------------------ */

/* See bench_harness.h: insertion sort, n is small. */
double bench_median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
        }
    return v[n / 2];
}

/* See bench_harness.h.  Repetition 0 is the warm-up and is not kept. */
int bench_reps(bench_fn lib, bench_fn floor_fn, void *ctx, double *lib_s, double *floor_s)
{
    double l[BENCH_REPS], f[BENCH_REPS];
    for (int rep = -1; rep < BENCH_REPS; rep++) {
        double a = lib(ctx);
        double b = a < 0 ? -1 : floor_fn(ctx);
        if (a < 0 || b < 0)
            return -1;
        if (rep >= 0) {
            l[rep] = a;
            f[rep] = b;
        }
    }
    *lib_s = bench_median(l, BENCH_REPS);
    *floor_s = bench_median(f, BENCH_REPS);
    return 0;
}

/* Read one "Key:   N kB" line of /proc/self/status. */
static uint64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t k = strlen(key);
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') {
            kb = strtoull(line + k + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* Current resident set. */
uint64_t bench_rss_kb(void)
{
    return status_kb("VmRSS");
}

/* Peak resident set (high-water mark) of the process so far. */
uint64_t bench_peak_rss_kb(void)
{
    return status_kb("VmHWM");
}

/* See bench_harness.h. */
int bench_emit(bench_out *out, json_t *obj, const char *config, const char *details)
{
    if (out->json)
        return kvpt_json_line(obj);
    double ns = json_real_value(json_object_get(obj, "ns_per_block"));
    double fl = json_real_value(json_object_get(obj, "floor_ns_per_block"));
    kvpt_table_cell(out->table, "%s", json_string_value(json_object_get(obj, "workload")));
    kvpt_table_cell(out->table, "%s", config);
    kvpt_table_cell(out->table, "%.1f", ns);
    kvpt_table_cell(out->table, "%.1f", fl);
    kvpt_table_cell(out->table, "%.2f", fl > 0 ? ns / fl : 0.0);
    kvpt_table_cell(out->table, "%s", details);
    json_decref(obj);
    return 0;
}
