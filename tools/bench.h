/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h — `kvpool bench` and the workloads it runs beside churn and scale
 * (bench.c): each workload file reports through the harness of
 * bench_harness.h.
 */
#ifndef KVPT_BENCH_H
#define KVPT_BENCH_H

#include "bench_harness.h"

/* `kvpool bench [--workload churn|prefix|scale|load|all] [--quick] [--json]
 * [--trace FILE]` (argv[0] = "bench"); returns the exit code. */
int kvpt_cmd_bench(int argc, char **argv);

/* The prefix workload (bench_prefix.c); `scale` divides the request count.
 * Returns 0, or -1 with the error printed. */
int bench_prefix(bench_out *out, unsigned scale);

/* The load workload (bench_load.c): loading the trace at `path` against
 * reading it, zcat, Python and a replay.  Returns 0, or -1 with the error
 * printed. */
int bench_load(bench_out *out, const char *path);

#endif /* KVPT_BENCH_H */
