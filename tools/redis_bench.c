/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_bench.c — `kvpool redis-bench --server HOST:PORT`: stores then loads
 * --ops blocks of --size bytes through one kvpi_redis store keeping
 * --pipeline operations outstanding, then runs
 *   redis-benchmark -t set,get -d SIZE -P PIPELINE -c CLIENTS -n OPS -r KEYS
 * against the same server and prints both throughputs and their ratio
 * (docs/TIERS.md gives the figures and the target).
 *
 * Blocks cycle over --keys distinct hashes, as redis-benchmark's -r cycles
 * over its keys, so the server's memory stays bounded (keys x size).
 */
#define _POSIX_C_SOURCE 200809L /* popen, clock_gettime */

#include "redis_bench.h"

#include "common.h"

#include <stdio.h>

#ifndef KVP_HAVE_INTEROP

int kvpt_cmd_redis_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return kvpt_error("redis-bench: built without the interop part (needs hiredis)");
}

#else

#include "kvpool_interop.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char usage_redis_bench[] =
    "usage: kvpool redis-bench --server HOST:PORT [--size BYTES] [--pipeline D]\n"
    "                          [--ops N] [--keys K] [--clients C]\n"
    "\n"
    "Store, then load, N blocks of BYTES through the Redis block store with D\n"
    "operations outstanding, then run redis-benchmark (SET and GET, value size\n"
    "BYTES, pipeline D, C clients, N requests over K keys) on the same server and\n"
    "print operations per second for both and the store's share of\n"
    "redis-benchmark's.  Use a scratch server: the run leaves K blocks on it.\n"
    "\n"
    "  --server HOST:PORT  the Redis server (required)\n"
    "  --size BYTES        block bytes (default 8192, the engine example's block)\n"
    "  --pipeline D        operations outstanding (default 16)\n"
    "  --ops N             operations per phase (default 100000)\n"
    "  --keys K            distinct blocks (default 1000)\n"
    "  --clients C         redis-benchmark's connections (default 1: the store\n"
    "                      uses one connection per server)\n";

/* Seconds on the monotonic clock. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system) used by this process (who RUSAGE_SELF) or
 * its waited-for children (RUSAGE_CHILDREN) so far. */
static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Run `ops` stores (load == 0) or loads through s in rounds of `depth`
 * (submit them, then take their completions: redis-benchmark's -P does the
 * same with its commands) over `keys` hashes.  Returns operations per second, or -1 when an
 * operation failed (dropped or missed: the server is not keeping up or is
 * full). */
static double run_phase(kvpi_redis_store *s, int load, uint64_t ops, uint64_t depth,
                        uint64_t keys, size_t size, uint8_t *bufs)
{
    kvpi_redis_completion done[256];
    uint64_t sent = 0, finished = 0, failed = 0;
    double t0 = mono_s();
    while (finished < ops) {
        while (sent < ops && sent - finished < depth && (sent % depth || sent == finished)) {
            kvp_hash h;
            memset(&h, 0, sizeof h);
            uint64_t k = sent % keys;
            memcpy(h.b + 24, &k, sizeof k);
            uint8_t *b = bufs + (sent % depth) * size; /* slot free: its op finished */
            kvpi_redis_status st =
                load ? kvpi_redis_submit_load(s, &h, b, size, sent)
                     : kvpi_redis_submit_store(s, &h, b, size, sent);
            if (st != KVPI_REDIS_OK)
                return -1;
            sent++;
        }
        kvpi_redis_wait(s, 1000);
        size_t n = 0;
        kvpi_redis_poll(s, done, sizeof done / sizeof done[0], &n);
        for (size_t i = 0; i < n; i++)
            failed += done[i].result == KVPI_REDIS_DROPPED || done[i].result == KVPI_REDIS_MISS;
        finished += n;
    }
    double dt = mono_s() - t0;
    return failed ? -1 : (double)ops / dt;
}

/* Run redis-benchmark and read its SET and GET requests per second from
 * its CSV output.  Returns 0, or -1. */
static int run_redis_benchmark(const char *host, const char *port, uint64_t size,
                               uint64_t depth, uint64_t ops, uint64_t keys, uint64_t clients,
                               double *set_rps, double *get_rps)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "redis-benchmark -h '%s' -p %s -t set,get -d %" PRIu64 " -P %" PRIu64
             " -n %" PRIu64 " -r %" PRIu64 " -c %" PRIu64 " --csv 2>/dev/null",
             host, port, size, depth, ops, keys, clients);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    *set_rps = *get_rps = -1;
    while (fgets(line, sizeof line, p)) {
        double v;
        if (sscanf(line, "\"SET\",\"%lf\"", &v) == 1)
            *set_rps = v;
        else if (sscanf(line, "\"GET\",\"%lf\"", &v) == 1)
            *get_rps = v;
    }
    int rc = pclose(p);
    return rc == 0 && *set_rps > 0 && *get_rps > 0 ? 0 : -1;
}

int kvpt_cmd_redis_bench(int argc, char **argv)
{
    const char *server = NULL;
    uint64_t size = 8192, depth = 16, ops = 100000, keys = 1000, clients = 1;
    const kvpt_opt opts[] = {
        {"server", KVPT_OPT_TEXT, &server, 0, 0, NULL, "(HOST:PORT of a scratch Redis server)"},
        {"size", KVPT_OPT_COUNT, &size, 1, 64u << 20, "a block size in bytes", NULL},
        {"pipeline", KVPT_OPT_COUNT, &depth, 1, 256, "a pipeline depth", NULL},
        {"ops", KVPT_OPT_COUNT, &ops, 1, UINT32_MAX, "a number of operations", NULL},
        {"keys", KVPT_OPT_COUNT, &keys, 1, UINT32_MAX, "a number of keys", NULL},
        {"clients", KVPT_OPT_COUNT, &clients, 1, 1000, "a number of clients", NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"redis-bench", usage_redis_bench, opts, NULL, 0, 0};
    int first, parsed = kvpt_parse_args(&cli, argc, argv, &first);
    if (parsed >= 0)
        return parsed;
    kvpi_redis_config c;
    kvpi_redis_config_default(&c);
    c.servers = &server;
    c.n_servers = 1;
    c.pipeline = (uint32_t)depth;
    c.command_timeout_ms = 5000;
    c.connect_timeout_ms = 1000;
    c.max_inflight_bytes = (size_t)(depth * size);
    c.prefix = "kvp-bench";
    c.model = "bench";
    c.hash_alg = "none";
    kvpi_redis_store *s = NULL;
    char err[256];
    kvpi_redis_status st = kvpi_redis_create(&c, &s, err, sizeof err);
    if (st != KVPI_REDIS_OK)
        return st == KVPI_REDIS_EENDPOINT ? kvpt_usage_error("redis-bench", "--server: %s", err)
                                          : kvpt_error("redis-bench: %s", err);
    uint8_t *bufs = malloc((size_t)(depth * size));
    if (!bufs) {
        kvpi_redis_destroy(s);
        return kvpt_error("redis-bench: out of memory");
    }
    for (uint64_t i = 0; i < depth * size; i++)
        bufs[i] = (uint8_t)(i * 131 + 7);
    double cpu0 = cpu_s(RUSAGE_SELF);
    double set_ours = run_phase(s, 0, ops, depth, keys, (size_t)size, bufs);
    double get_ours = set_ours > 0 ? run_phase(s, 1, ops, depth, keys, (size_t)size, bufs) : -1;
    double cpu_ours = cpu_s(RUSAGE_SELF) - cpu0;
    kvpi_redis_stats rs;
    kvpi_redis_stats_get(s, &rs);
    kvpi_redis_destroy(s);
    free(bufs);
    if (set_ours < 0 || get_ours < 0)
        return kvpt_error("redis-bench: operations failed against %s (is it up, with room "
                          "for %" PRIu64 " blocks?)", server, keys);

    char host[KVPI_REDIS_MAX_HOST + 1];
    const char *colon = strrchr(server, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - server), server);
    if (host[0] == '[') { /* [IPv6] */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    double set_ref, get_ref, cpu1 = cpu_s(RUSAGE_CHILDREN);
    if (run_redis_benchmark(host, colon + 1, size, depth, ops, keys, clients, &set_ref,
                            &get_ref) != 0)
        return kvpt_error("redis-bench: redis-benchmark failed (installed? server up?)");
    printf("block %" PRIu64 " bytes, pipeline %" PRIu64 ", %" PRIu64 " ops, %" PRIu64
           " keys, redis-benchmark clients %" PRIu64 "\n",
           size, depth, ops, keys, clients);
    printf("%-5s %14s %18s %7s\n", "op", "store ops/s", "redis-benchmark", "ratio");
    printf("%-5s %14.0f %18.0f %7.2f\n", "SET", set_ours, set_ref, set_ours / set_ref);
    printf("%-5s %14.0f %18.0f %7.2f\n", "GET", get_ours, get_ref, get_ours / get_ref);
    /* client CPU per operation does not depend on what else the machine runs */
    printf("client CPU per operation: store %.1f us, redis-benchmark %.1f us\n",
           cpu_ours * 1e6 / (2.0 * (double)ops),
           (cpu_s(RUSAGE_CHILDREN) - cpu1) * 1e6 / (2.0 * (double)ops));
    printf("load latency p50 %" PRIu64 " us, p99 %" PRIu64 " us (target ratio >= 0.80)\n",
           rs.load_p50_us, rs.load_p99_us);
    return KVPT_EXIT_OK;
}

#endif /* KVP_HAVE_INTEROP */
