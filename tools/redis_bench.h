/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_bench.h — `kvpool redis-bench`: the Redis block store's throughput
 * (pipelined SET and GET of whole blocks through kvpi_redis_*) next to
 * redis-benchmark's on the same server, and their ratio.  Needs
 * libkvpool_interop; without it the command explains that and fails.
 */
#ifndef KVPT_REDIS_BENCH_H
#define KVPT_REDIS_BENCH_H

int kvpt_cmd_redis_bench(int argc, char **argv);

#endif /* KVPT_REDIS_BENCH_H */
