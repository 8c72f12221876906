/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_load.c — `kvpool bench --workload load`: loading a trace against
 * reading it, against Python, and against replaying it.
 *
 * The row times kvpt_trace_load (read, inflate, cut into lines, parse and
 * check with simdjson) and its floor kvpt_trace_scan (the same reader with
 * no parsing: what the disk and igzip cost); beside them `zcat FILE >
 * /dev/null` as a separate process, Python's gzip + json.loads per line on
 * the same file (timed inside the interpreter, start-up excluded), and one
 * replay of the loaded trace at 10,000 blocks (the load should cost less).
 * Each repetition runs all five in turn, so a busy machine slows them alike;
 * the figures are the medians of BENCH_REPS repetitions after a warm-up.
 * The trace is the bundled Mooncake trace unless --trace names another.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include "common.h"
#include "replay.h"
#include "trace.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Python's side: the same work a Python planner does, timed in-process. */
static const char python_load[] =
    "import gzip, json, sys, time\n"
    "t = time.perf_counter()\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    g = gzip.open(f) if f.peek(2)[:2] == b'\\x1f\\x8b' else f\n"
    "    reqs = [json.loads(line) for line in g if line.strip()]\n"
    "print(time.perf_counter() - t, len(reqs))\n";

typedef struct load_ctx {
    const char *path;
} load_ctx;

/* One timed load; the trace is dropped. */
static double run_load(void *arg)
{
    load_ctx *c = arg;
    kvpt_trace t;
    if (kvpt_trace_load(c->path, &t))
        return -1;
    double s = t.load_seconds;
    kvpt_trace_free(&t);
    return s;
}

/* One timed read without parsing. */
static double run_scan(void *arg)
{
    load_ctx *c = arg;
    uint64_t lines, bytes;
    double t0 = kvpt_now();
    if (kvpt_trace_scan(c->path, &lines, &bytes))
        return -1;
    return kvpt_now() - t0;
}

/* Run argv (argv[0] looked up on PATH) with stdin from /dev/null and
 * stdout into `out` (up to cap - 1 bytes, NUL-terminated; NULL: to
 * /dev/null).  Returns the wall seconds, or -1 when it cannot run or exits
 * non-zero. */
static double run_child(char *const argv[], char *out, size_t cap)
{
    int fds[2] = {-1, -1};
    if (out && pipe(fds))
        return -1;
    double t0 = kvpt_now();
    pid_t pid = fork();
    if (pid < 0) {
        if (out) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, STDIN_FILENO);
        dup2(out ? fds[1] : null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (out) {
        size_t got = 0;
        ssize_t n;
        close(fds[1]);
        while (got < cap - 1 && (n = read(fds[0], out + got, cap - 1 - got)) > 0)
            got += (size_t)n;
        close(fds[0]);
        out[got] = 0;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ;
    double s = kvpt_now() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? s : -1;
}

/* `zcat -f FILE > /dev/null`: seconds, or -1 without zcat. */
static double zcat_once(const char *path)
{
    char *argv[] = {"zcat", "-f", "--", (char *)path, NULL};
    return run_child(argv, NULL, 0);
}

/* One Python load as timed by Python, or -1 when /usr/bin/python3 cannot
 * run it or finds another request count. */
static double python_once(const char *path, size_t requests)
{
    char *argv[] = {"/usr/bin/python3", "-c", (char *)python_load, (char *)path, NULL};
    char buf[128];
    double s;
    unsigned long long n = 0;
    if (run_child(argv, buf, sizeof buf) < 0 || sscanf(buf, "%lf %llu", &s, &n) != 2 ||
        n != requests)
        return -1;
    return s;
}

/* One replay at 10,000 blocks: its seconds, or -1. */
static double replay_once(const kvpt_trace *t)
{
    kvpt_replay_result r;
    return kvpt_replay(t, 10000, NULL, NULL, 0, &r) ? -1 : r.seconds;
}

/* See bench.h. */
int bench_load(bench_out *out, const char *path)
{
    load_ctx c = {path};
    kvpt_trace t;
    uint64_t lines, bytes;
    if (kvpt_trace_scan(path, &lines, &bytes) || kvpt_trace_load(path, &t))
        return -1;
    /* side by side: every repetition runs each contender once, in turn */
    enum { LOAD, FLOOR, ZCAT, PYTHON, REPLAY, N_TIMED };
    double v[N_TIMED][BENCH_REPS], m[N_TIMED];
    for (int rep = -1; rep < BENCH_REPS; rep++) {
        double x[N_TIMED] = {run_load(&c), run_scan(&c), zcat_once(path),
                             python_once(path, t.n_requests), replay_once(&t)};
        if (x[LOAD] < 0 || x[FLOOR] < 0 || x[REPLAY] < 0) {
            kvpt_trace_free(&t);
            return -1;
        }
        for (int k = 0; rep >= 0 && k < N_TIMED; k++)
            v[k][rep] = x[k];
    }
    for (int k = 0; k < N_TIMED; k++) {
        m[k] = bench_median(v[k], BENCH_REPS);
        if (v[k][0] < 0) /* zcat or Python missing: not measured */
            m[k] = -1;
    }
    double load_s = m[LOAD], floor_s = m[FLOOR], zcat_s = m[ZCAT], python_s = m[PYTHON],
           replay_s = m[REPLAY];
    double per = 1e9 / (double)t.total_blocks;
    size_t requests = t.n_requests;
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}",
                          "workload", "load", "trace", path, "bytes", (json_int_t)bytes,
                          "requests", (json_int_t)t.n_requests,
                          "hash_ids", (json_int_t)t.total_blocks,
                          "ns_per_block", load_s * per, "floor_ns_per_block", floor_s * per,
                          "ratio_to_floor", load_s / floor_s, "load_ms", load_s * 1e3,
                          "floor_ms", floor_s * 1e3, "replay_10000_ms", replay_s * 1e3);
    kvpt_trace_free(&t);
    if (!o) {
        kvpt_error("out of memory");
        return -1;
    }
    json_object_set_new(o, "zcat_ms", zcat_s >= 0 ? json_real(zcat_s * 1e3) : json_null());
    json_object_set_new(o, "python_ms", python_s >= 0 ? json_real(python_s * 1e3) : json_null());
    json_object_set_new(o, "python_ratio",
                        python_s >= 0 ? json_real(python_s / load_s) : json_null());
    json_object_set_new(o, "reps", json_integer(BENCH_REPS));
    char config[64], details[200];
    snprintf(config, sizeof config, "%.1f MB, %zu requests", (double)bytes / 1e6, requests);
    snprintf(details, sizeof details,
             "load %.1f ms (floor: read + inflate %.1f ms; zcat %.1f ms); Python %.1f ms "
             "(%.1fx); replay at 10,000 blocks %.1f ms",
             load_s * 1e3, floor_s * 1e3, zcat_s * 1e3, python_s * 1e3,
             python_s >= 0 ? python_s / load_s : 0.0, replay_s * 1e3);
    return bench_emit(out, o, config, details);
}
