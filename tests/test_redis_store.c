/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_store.c — the Redis block store (kvpi_redis_*, interop/
 * redis_store.c) against real redis-server processes on loopback ports:
 * blocks stored and loaded back bit-exact, the key layout, values that are
 * corrupt, truncated, of another length or of another model (misses, dst
 * untouched), a server killed and restarted, full servers (noeviction:
 * drops; allkeys-lru: later misses), two servers with one gone, a server
 * stopped (SIGSTOP) past the command timeout, unreachable endpoints, the
 * in-flight byte bound, the service thread's blocked signals (SIGPIPE), and
 * bad configurations and arguments refused with nothing created or counted.
 *
 * Every server a test starts is killed by the test's teardown, and by the
 * kernel if this process dies (PR_SET_PDEATHSIG).  Waits are bounded polls
 * (kvpi_redis_wait), never fixed sleeps.  Built as a skip when the interop
 * part is not (KVP_HAVE_INTEROP undefined).
 */
#define _GNU_SOURCE /* prctl's PR_SET_PDEATHSIG */

#include "kvptest.h"

#include <stdio.h>
#include <string.h>

#ifndef KVP_HAVE_INTEROP

static void test_redis_not_built(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_redis_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "kvpool_interop.h"

#include <dirent.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 8192     /* the engine example's block bytes */
#define MAX_SERVERS 4
#define WAIT_MS 10000  /* the bound on any wait for completions */

/* ---- redis-server processes ------------------------------------------- */

typedef struct rserver {
    pid_t pid;
    int port;
    char policy[32];  /* --maxmemory-policy, or "" */
    char maxmem[16];  /* --maxmemory, or "" */
} rserver;

static rserver servers[MAX_SERVERS];

/* Seconds on the monotonic clock. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A loopback TCP port nobody listens on right now (bound, then closed). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* 1 when the server on `port` answers PING. */
static int pings(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* Start (or restart) servers[i] on its port with its memory settings and
 * wait until it answers PING. */
static void server_start(int i)
{
    rserver *sv = &servers[i];
    if (!sv->port)
        sv->port = free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", sv->port);
    const char *argv[16] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no"};
    int n = 9;
    if (sv->maxmem[0]) {
        argv[n++] = "--maxmemory";
        argv[n++] = sv->maxmem;
        argv[n++] = "--maxmemory-policy";
        argv[n++] = sv->policy;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    sv->pid = pid;
    double until = mono_s() + WAIT_MS / 1000.0;
    while (!pings(sv->port)) {
        int st;
        assert_int_equal(waitpid(pid, &st, WNOHANG), 0); /* it must not have exited */
        assert_true(mono_s() < until);
        struct timespec nap = {0, 10000000}; /* between PINGs of a starting server */
        nanosleep(&nap, NULL);
    }
}

/* Kill servers[i] (stopped or not) and reap it. */
static void server_kill(int i)
{
    if (servers[i].pid > 0) {
        kill(servers[i].pid, SIGKILL);
        waitpid(servers[i].pid, NULL, 0);
        servers[i].pid = 0;
    }
}

/* Teardown of every test: kill what it started, forget the ports. */
static int kill_all(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_SERVERS; i++) {
        server_kill(i);
        memset(&servers[i], 0, sizeof servers[i]);
    }
    return 0;
}

/* ---- stores and blocks ------------------------------------------------- */

static char endpoints[MAX_SERVERS][64];
static const char *endpoint_ptrs[MAX_SERVERS];

/* A configuration for servers[0..n) with short timeouts and backoff. */
static kvpi_redis_config test_config(int n)
{
    kvpi_redis_config c;
    kvpi_redis_config_default(&c);
    for (int i = 0; i < n; i++) {
        snprintf(endpoints[i], sizeof endpoints[i], "127.0.0.1:%d", servers[i].port);
        endpoint_ptrs[i] = endpoints[i];
    }
    c.servers = endpoint_ptrs;
    c.n_servers = (size_t)n;
    c.connect_timeout_ms = 200;
    c.command_timeout_ms = 300;
    c.backoff_min_ms = 10;
    c.backoff_max_ms = 100;
    c.model = "test-model";
    c.hash_alg = "sha256";
    return c;
}

static kvpi_redis_store *create_ok(const kvpi_redis_config *c)
{
    kvpi_redis_store *s = NULL;
    char err[256] = "";
    kvpi_redis_status st = kvpi_redis_create(c, &s, err, sizeof err);
    if (st != KVPI_REDIS_OK)
        fail_msg("create: %s (%s)", kvpi_redis_strerror(st), err);
    return s;
}

/* Block i's hash and bytes (deterministic, distinct per i and seed). */
static kvp_hash block_hash(uint64_t i)
{
    return kvptest_hash(0x5eed0000u + i);
}

static void block_fill(uint8_t *b, size_t len, uint64_t i, uint64_t seed)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[k] = (uint8_t)x;
    }
}

/* Poll until `want` completions are in out (bounded by WAIT_MS). */
static void collect(kvpi_redis_store *s, kvpi_redis_completion *out, size_t want)
{
    size_t got = 0;
    double until = mono_s() + WAIT_MS / 1000.0;
    while (got < want) {
        if (mono_s() > until)
            fail_msg("%zu of %zu completions after %d ms", got, want, WAIT_MS);
        kvpi_redis_wait(s, 50);
        size_t n = 0;
        assert_int_equal(kvpi_redis_poll(s, out + got, want - got, &n), KVPI_REDIS_OK);
        got += n;
    }
}

/* Store blocks first..first+n (seed), wait for all; result[i - first] gets
 * each block's result.  Returns how many were STORED. */
static size_t store_blocks(kvpi_redis_store *s, uint64_t first, size_t n, uint64_t seed,
                           kvpi_redis_result *result)
{
    uint8_t buf[BLOCK];
    kvpi_redis_completion *c = calloc(n, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        kvp_hash h = block_hash(first + i);
        block_fill(buf, BLOCK, first + i, seed);
        assert_int_equal(kvpi_redis_submit_store(s, &h, buf, BLOCK, first + i), KVPI_REDIS_OK);
    }
    collect(s, c, n);
    size_t stored = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(c[i].tag >= first && c[i].tag < first + n);
        assert_true(c[i].result == KVPI_REDIS_STORED || c[i].result == KVPI_REDIS_DROPPED);
        assert_int_equal(c[i].len, BLOCK);
        if (result)
            result[c[i].tag - first] = c[i].result;
        stored += c[i].result == KVPI_REDIS_STORED;
    }
    free(c);
    return stored;
}

/* Load blocks first..first+n and check them: a LOADED block holds exactly
 * the bytes stored with `seed`, a MISS left dst untouched.  result[i -
 * first] gets each result.  Returns how many were LOADED. */
static size_t load_blocks(kvpi_redis_store *s, uint64_t first, size_t n, uint64_t seed,
                          kvpi_redis_result *result)
{
    uint8_t *dst = malloc(n * BLOCK), want[BLOCK];
    memset(dst, 0xEE, n * BLOCK);
    kvpi_redis_completion *c = calloc(n, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        kvp_hash h = block_hash(first + i);
        assert_int_equal(kvpi_redis_submit_load(s, &h, dst + i * BLOCK, BLOCK, first + i),
                         KVPI_REDIS_OK);
    }
    collect(s, c, n);
    size_t loaded = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(c[k].tag - first);
        kvp_hash h = block_hash(c[k].tag);
        assert_memory_equal(&c[k].hash, &h, sizeof h);
        if (c[k].result == KVPI_REDIS_LOADED) {
            block_fill(want, BLOCK, c[k].tag, seed);
            assert_memory_equal(dst + i * BLOCK, want, BLOCK);
            loaded++;
        } else {
            assert_int_equal(c[k].result, KVPI_REDIS_MISS);
            for (size_t b = 0; b < BLOCK; b++)
                assert_int_equal(dst[i * BLOCK + b], 0xEE);
        }
        if (result)
            result[i] = c[k].result;
    }
    free(c);
    free(dst);
    return loaded;
}

/* Store one block at a time until one is STORED (the server is back),
 * bounded by WAIT_MS. */
static void wait_stored(kvpi_redis_store *s)
{
    double until = mono_s() + WAIT_MS / 1000.0;
    while (store_blocks(s, 9999, 1, 0, NULL) != 1)
        assert_true(mono_s() < until);
}

static kvpi_redis_stats stats(kvpi_redis_store *s)
{
    kvpi_redis_stats st;
    kvpi_redis_stats_get(s, &st);
    return st;
}

/* ---- tests -------------------------------------------------------------- */

/* Many blocks stored and loaded back bit-exact; an absent block misses;
 * the key and value layout as documented; the counters. */
static void test_roundtrip(void **state)
{
    (void)state;
    server_start(0);
    kvpi_redis_config c = test_config(1);
    kvpi_redis_store *s = create_ok(&c);
    enum { N = 400 };
    assert_int_equal(store_blocks(s, 0, N, 1, NULL), N);
    assert_int_equal(load_blocks(s, 0, N, 1, NULL), N);
    assert_int_equal(load_blocks(s, N, 1, 1, NULL), 0);

    kvp_hash h = block_hash(7);
    char key[KVPI_REDIS_KEY_MAX], want[KVPI_REDIS_KEY_MAX];
    int wl = snprintf(want, sizeof want, "kvp:v1:test-model:sha256:g0::");
    for (int i = 0; i < 32; i++)
        wl += snprintf(want + wl, sizeof want - (size_t)wl, "%02x", h.b[i]);
    assert_int_equal(kvpi_redis_key(s, &h, key, sizeof key), (size_t)wl);
    assert_string_equal(key, want);
    assert_int_equal(kvpi_redis_key(s, &h, key, (size_t)wl), 0); /* no room for the NUL */
    redisContext *rc = redisConnect("127.0.0.1", servers[0].port);
    redisReply *r = redisCommand(rc, "GET %s", want);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, KVPI_REDIS_HEADER_BYTES + BLOCK);
    assert_memory_equal(r->str, "KVPB\x01\x00\x18\x00\x00\x20\x00\x00\x00\x00\x00\x00", 16);
    uint8_t b[BLOCK];
    block_fill(b, BLOCK, 7, 1);
    assert_memory_equal(r->str + KVPI_REDIS_HEADER_BYTES, b, BLOCK);
    freeReplyObject(r);
    redisFree(rc);

    kvpi_redis_stats st = stats(s);
    assert_int_equal(st.stores, N);
    assert_int_equal(st.stored, N);
    assert_int_equal(st.store_drops, 0);
    assert_int_equal(st.loads, N + 1);
    assert_int_equal(st.hits, N);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.bad_values, 0);
    assert_int_equal(st.bytes_stored, (uint64_t)N * BLOCK);
    assert_int_equal(st.bytes_loaded, (uint64_t)N * BLOCK);
    assert_int_equal(st.inflight_bytes, 0);
    assert_true(st.load_p50_us > 0 && st.load_p50_us <= st.load_p99_us);
    kvpi_redis_destroy(s);
}

/* Values that are not this store's block miss and leave dst untouched:
 * garbage, truncated, a payload byte flipped, another model's value copied
 * under this key, a value of another block size (both ways); an untouched
 * neighbour still loads. */
static void test_bad_values_miss(void **state)
{
    (void)state;
    server_start(0);
    kvpi_redis_config c = test_config(1);
    kvpi_redis_store *s = create_ok(&c);
    assert_int_equal(store_blocks(s, 0, 6, 3, NULL), 6);
    kvpi_redis_config oc = c;
    oc.model = "other-model";
    kvpi_redis_store *other = create_ok(&oc);
    assert_int_equal(store_blocks(other, 2, 1, 3, NULL), 1);

    redisContext *rc = redisConnect("127.0.0.1", servers[0].port);
    char k[6][KVPI_REDIS_KEY_MAX], ok[KVPI_REDIS_KEY_MAX];
    for (int i = 0; i < 6; i++) {
        kvp_hash h = block_hash((uint64_t)i);
        kvpi_redis_key(s, &h, k[i], sizeof k[i]);
    }
    kvp_hash h2 = block_hash(2);
    kvpi_redis_key(other, &h2, ok, sizeof ok);
    freeReplyObject(redisCommand(rc, "SET %s %s", k[0], "not a block"));
    redisReply *r = redisCommand(rc, "GET %s", k[3]);
    assert_int_equal(r->len, KVPI_REDIS_HEADER_BYTES + BLOCK);
    r->str[KVPI_REDIS_HEADER_BYTES + 100] ^= 1;
    freeReplyObject(redisCommand(rc, "SET %s %b", k[3], r->str, (size_t)r->len));
    /* truncated: all but the last byte */
    freeReplyObject(redisCommand(rc, "SET %s %b", k[1], r->str, (size_t)r->len - 1));
    freeReplyObject(r);
    r = redisCommand(rc, "GET %s", ok);
    freeReplyObject(redisCommand(rc, "SET %s %b", k[2], r->str, (size_t)r->len));
    freeReplyObject(r);
    redisFree(rc);

    /* block 4 rewritten by a writer whose blocks are half as long */
    uint8_t half[BLOCK / 2];
    memset(half, 0x11, sizeof half);
    kvp_hash h4 = block_hash(4);
    kvpi_redis_completion done;
    assert_int_equal(kvpi_redis_submit_store(s, &h4, half, sizeof half, 4), KVPI_REDIS_OK);
    collect(s, &done, 1);
    assert_int_equal(done.result, KVPI_REDIS_STORED);

    kvpi_redis_result res[6];
    assert_int_equal(load_blocks(s, 0, 6, 3, res), 1);
    for (int i = 0; i < 5; i++)
        assert_int_equal(res[i], KVPI_REDIS_MISS);
    assert_int_equal(res[5], KVPI_REDIS_LOADED);
    assert_int_equal(stats(s).bad_values, 5);

    /* and a reader with half-size blocks misses block 5's full value */
    memset(half, 0xEE, sizeof half);
    kvp_hash h5 = block_hash(5);
    assert_int_equal(kvpi_redis_submit_load(s, &h5, half, sizeof half, 5), KVPI_REDIS_OK);
    collect(s, &done, 1);
    assert_int_equal(done.result, KVPI_REDIS_MISS);
    for (size_t i = 0; i < sizeof half; i++)
        assert_int_equal(half[i], 0xEE);
    kvpi_redis_destroy(other);
    kvpi_redis_destroy(s);
}

/* A server killed mid-run: loads miss and stores drop (none hang), then
 * it restarts empty on the same port, the store reconnects and hits
 * again. */
static void test_server_restart(void **state)
{
    (void)state;
    server_start(0);
    kvpi_redis_config c = test_config(1);
    kvpi_redis_store *s = create_ok(&c);
    assert_int_equal(store_blocks(s, 0, 50, 5, NULL), 50);
    server_kill(0);
    assert_int_equal(load_blocks(s, 0, 50, 5, NULL), 0);
    assert_int_equal(store_blocks(s, 0, 50, 5, NULL), 0);
    server_start(0);
    wait_stored(s);
    assert_int_equal(load_blocks(s, 0, 50, 5, NULL), 0); /* the restarted server is empty */
    assert_int_equal(store_blocks(s, 0, 50, 6, NULL), 50);
    assert_int_equal(load_blocks(s, 0, 50, 6, NULL), 50);
    assert_true(stats(s).reconnects >= 1);
    kvpi_redis_destroy(s);
}

/* Store `n` blocks into a server with maxmemory and `policy`, then load
 * them all; stored[i] and loaded[i] get block i's results. */
static void fill_full_server(const char *policy, size_t n, kvpi_redis_result *stored,
                             kvpi_redis_result *loaded, kvpi_redis_stats *st)
{
    snprintf(servers[0].maxmem, sizeof servers[0].maxmem, "%s", "3mb");
    snprintf(servers[0].policy, sizeof servers[0].policy, "%s", policy);
    server_start(0);
    kvpi_redis_config c = test_config(1);
    kvpi_redis_store *s = create_ok(&c);
    for (size_t i = 0; i < n; i += 100)
        store_blocks(s, i, 100, 8, stored + i);
    for (size_t i = 0; i < n; i += 100)
        load_blocks(s, i, 100, 8, loaded + i);
    *st = stats(s);
    kvpi_redis_destroy(s);
}

/* maxmemory + noeviction: stores past the limit are dropped (counted);
 * every stored block loads back exact, every dropped one misses. */
static void test_full_noeviction(void **state)
{
    (void)state;
    enum { N = 1000 }; /* 8 MB of blocks into 3 MB */
    kvpi_redis_result st_r[N], ld_r[N];
    kvpi_redis_stats st;
    fill_full_server("noeviction", N, st_r, ld_r, &st);
    size_t stored = 0;
    for (size_t i = 0; i < N; i++) {
        stored += st_r[i] == KVPI_REDIS_STORED;
        assert_int_equal(ld_r[i], st_r[i] == KVPI_REDIS_STORED ? KVPI_REDIS_LOADED
                                                               : KVPI_REDIS_MISS);
    }
    assert_true(stored > 0 && stored < N);
    assert_int_equal(st.store_drops, N - stored);
    assert_int_equal(st.hits, stored);
}

/* maxmemory + allkeys-lru: stores succeed, the oldest blocks are evicted
 * and later miss; what loads is exact (load_blocks checks). */
static void test_full_lru(void **state)
{
    (void)state;
    enum { N = 1000 };
    kvpi_redis_result st_r[N], ld_r[N];
    kvpi_redis_stats st;
    fill_full_server("allkeys-lru", N, st_r, ld_r, &st);
    assert_true(st.stored > N / 2);
    assert_true(st.hits > 0 && st.misses > N / 2); /* 3 MB hold under 400 blocks */
    size_t early_misses = 0; /* Redis's LRU is sampled: most, not all, old blocks go */
    for (size_t i = 0; i < 100; i++)
        early_misses += ld_r[i] == KVPI_REDIS_MISS;
    assert_true(early_misses >= 50);
    assert_int_equal(st.bad_values, 0);
}

/* Two servers, one killed: blocks on the live one load and store, those
 * on the dead one miss and drop. */
static void test_two_servers_one_down(void **state)
{
    (void)state;
    server_start(0);
    server_start(1);
    kvpi_redis_config c = test_config(2);
    kvpi_redis_store *s = create_ok(&c);
    enum { N = 200 };
    assert_int_equal(store_blocks(s, 0, N, 9, NULL), N);
    size_t on1 = 0;
    for (uint64_t i = 0; i < N; i++) {
        kvp_hash h = block_hash(i);
        on1 += kvpi_redis_server_of(s, &h) == 1;
    }
    assert_true(on1 > N / 4 && on1 < 3 * N / 4);
    server_kill(1);
    kvpi_redis_result ld[N], sr[N];
    assert_int_equal(load_blocks(s, 0, N, 9, ld), N - on1);
    assert_int_equal(store_blocks(s, 0, N, 10, sr), N - on1);
    for (uint64_t i = 0; i < N; i++) {
        kvp_hash h = block_hash(i);
        int dead = kvpi_redis_server_of(s, &h) == 1;
        assert_int_equal(ld[i], dead ? KVPI_REDIS_MISS : KVPI_REDIS_LOADED);
        assert_int_equal(sr[i], dead ? KVPI_REDIS_DROPPED : KVPI_REDIS_STORED);
    }
    kvpi_redis_destroy(s);
}

/* A server stopped (SIGSTOP) longer than the command timeout: loads miss
 * and stores drop within the wait bound, the timeout is counted; after
 * SIGCONT it serves again.  Destroy returns with the server stopped. */
static void test_server_stopped(void **state)
{
    (void)state;
    server_start(0);
    kvpi_redis_config c = test_config(1);
    kvpi_redis_store *s = create_ok(&c);
    assert_int_equal(store_blocks(s, 0, 20, 11, NULL), 20);
    kill(servers[0].pid, SIGSTOP);
    double t0 = mono_s();
    assert_int_equal(load_blocks(s, 0, 20, 11, NULL), 0);
    assert_int_equal(store_blocks(s, 20, 5, 11, NULL), 0);
    printf("# stopped server: 20 loads + 5 stores finished in %.0f ms (command timeout %d ms)\n",
           (mono_s() - t0) * 1e3, c.command_timeout_ms);
    assert_true(stats(s).timeouts >= 1);
    kill(servers[0].pid, SIGCONT);
    wait_stored(s);
    assert_int_equal(load_blocks(s, 0, 20, 11, NULL), 20);

    kill(servers[0].pid, SIGSTOP);
    uint8_t dst[BLOCK];
    kvp_hash h = block_hash(0);
    assert_int_equal(kvpi_redis_submit_load(s, &h, dst, BLOCK, 0), KVPI_REDIS_OK);
    t0 = mono_s();
    kvpi_redis_destroy(s);
    printf("# destroy with the server stopped: %.0f ms\n", (mono_s() - t0) * 1e3);
    kill(servers[0].pid, SIGCONT);
}

/* Endpoints nobody answers (a closed loopback port, a TEST-NET address):
 * stores drop, loads miss, connect failures are counted. */
static void test_unreachable(void **state)
{
    (void)state;
    char closed[32];
    snprintf(closed, sizeof closed, "127.0.0.1:%d", free_port());
    const char *eps[] = {closed, "192.0.2.1:6379"};
    for (int i = 0; i < 2; i++) {
        kvpi_redis_config c = test_config(0);
        c.servers = &eps[i];
        c.n_servers = 1;
        kvpi_redis_store *s = create_ok(&c);
        assert_int_equal(store_blocks(s, 0, 10, 12, NULL), 0);
        assert_int_equal(load_blocks(s, 0, 10, 12, NULL), 0);
        kvpi_redis_stats st = stats(s);
        assert_int_equal(st.store_drops, 10);
        assert_int_equal(st.misses, 10);
        assert_true(st.connect_failures >= 1);
        kvpi_redis_destroy(s);
    }
}

/* The in-flight byte bound: bytes stay counted until polled, a store past
 * it is BUSY (dropped, counted), a load past it BUSY (load_busy); polling
 * frees the room. */
static void test_inflight_bound(void **state)
{
    (void)state;
    server_start(0);
    kvpi_redis_config c = test_config(1);
    c.max_inflight_bytes = 4 * BLOCK;
    kvpi_redis_store *s = create_ok(&c);
    uint8_t buf[BLOCK] = {1}, dst[BLOCK];
    for (uint64_t i = 0; i < 10; i++) {
        kvp_hash h = block_hash(i);
        assert_int_equal(kvpi_redis_submit_store(s, &h, buf, BLOCK, i),
                         i < 4 ? KVPI_REDIS_OK : KVPI_REDIS_BUSY);
    }
    kvp_hash h = block_hash(0);
    assert_int_equal(kvpi_redis_submit_load(s, &h, dst, BLOCK, 0), KVPI_REDIS_BUSY);
    kvpi_redis_stats st = stats(s);
    assert_int_equal(st.stores, 10);
    assert_int_equal(st.store_drops, 6);
    assert_int_equal(st.load_busy, 1);
    assert_int_equal(st.loads, 0);
    assert_int_equal(st.inflight_bytes, 4 * BLOCK);
    kvpi_redis_completion done[4];
    collect(s, done, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(done[i].result, KVPI_REDIS_STORED);
    assert_int_equal(stats(s).inflight_bytes, 0);
    assert_int_equal(kvpi_redis_submit_load(s, &h, dst, BLOCK, 0), KVPI_REDIS_OK);
    collect(s, done, 1);
    assert_int_equal(done[0].result, KVPI_REDIS_LOADED);
    assert_memory_equal(dst, buf, BLOCK);
    kvpi_redis_destroy(s);
}

/* The store's service thread blocks SIGPIPE (so a write to a connection a
 * server closed is an error, not the end of the process) and every other
 * signal.  Read from /proc: the one thread named kvpi-redis. */
static void test_thread_blocks_signals(void **state)
{
    (void)state;
    const char *eps[] = {"127.0.0.1:1"};
    kvpi_redis_config c = test_config(0);
    c.servers = eps;
    c.n_servers = 1;
    kvpi_redis_store *s = create_ok(&c);
    /* a finished operation shows the thread is in its loop (a thread being
     * created runs with every signal blocked until it starts) */
    assert_int_equal(store_blocks(s, 0, 1, 13, NULL), 0);
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], line[256], name[64] = "";
        unsigned long long blocked = 0;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
            sscanf(line, "Name: %63s", name);
            sscanf(line, "SigBlk: %llx", &blocked);
        }
        fclose(f);
        if (strcmp(name, "kvpi-redis") != 0)
            continue;
        assert_true(blocked & (1ull << (SIGPIPE - 1)));
        assert_true(blocked & (1ull << (SIGINT - 1)));
        found++;
    }
    closedir(d);
    assert_int_equal(found, 1);
    kvpi_redis_destroy(s);
}

/* create refuses cfg with status `want`, writes a message, leaves out. */
static void refused(const kvpi_redis_config *c, kvpi_redis_status want)
{
    kvpi_redis_store *sentinel = (kvpi_redis_store *)&servers, *s = sentinel;
    char err[256] = "";
    assert_int_equal(kvpi_redis_create(c, &s, err, sizeof err), want);
    assert_ptr_equal(s, sentinel);
    assert_true(err[0] != '\0');
}

/* Bad configurations and arguments: specific statuses, nothing created,
 * nothing counted. */
static void test_bad_config(void **state)
{
    (void)state;
    const char *ok_ep[] = {"127.0.0.1:6379"};
    kvpi_redis_config base = test_config(0), c;
    base.servers = ok_ep;
    base.n_servers = 1;
    kvpi_redis_store *s = NULL;
    assert_int_equal(kvpi_redis_create(NULL, &s, NULL, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_create(&base, NULL, NULL, 0), KVPI_REDIS_EINVAL);
    assert_null(s);

    c = base, c.n_servers = 0, refused(&c, KVPI_REDIS_ENOSERVERS);
    c = base, c.servers = NULL, refused(&c, KVPI_REDIS_ENOSERVERS);
    c = base, c.n_servers = KVPI_REDIS_MAX_SERVERS + 1, refused(&c, KVPI_REDIS_ENOSERVERS);
    static const char *bad_eps[] = {"localhost", "host:", "host:0", "host:65536", "host:12a",
                                    ":6379", "::1:6379", "ho st:6379", "host:-1", NULL};
    for (int i = 0; bad_eps[i]; i++) {
        const char *two[] = {"127.0.0.1:6379", bad_eps[i]};
        c = base, c.servers = two, c.n_servers = 2;
        refused(&c, KVPI_REDIS_EENDPOINT);
    }
    const char *null_ep[] = {NULL};
    c = base, c.servers = null_ep, refused(&c, KVPI_REDIS_EENDPOINT);

    char longf[KVPI_REDIS_MAX_FIELD + 2];
    memset(longf, 'm', sizeof longf - 1);
    longf[sizeof longf - 1] = '\0';
    static const char *bad_fields[] = {"", "a b", "a:b", "a\nb", "a\x7f", "caf\xc3\xa9", NULL};
    for (int i = 0; bad_fields[i]; i++) {
        c = base, c.model = bad_fields[i], refused(&c, KVPI_REDIS_EKEY);
        c = base, c.hash_alg = bad_fields[i], refused(&c, KVPI_REDIS_EKEY);
        c = base, c.prefix = bad_fields[i], refused(&c, KVPI_REDIS_EKEY);
        if (bad_fields[i][0]) {
            c = base, c.salt = (const uint8_t *)bad_fields[i];
            c.salt_len = strlen(bad_fields[i]);
            refused(&c, KVPI_REDIS_EKEY);
        }
    }
    c = base, c.model = longf, refused(&c, KVPI_REDIS_EKEY);
    c = base, c.model = NULL, refused(&c, KVPI_REDIS_EKEY);
    c = base, c.hash_alg = NULL, refused(&c, KVPI_REDIS_EKEY);
    c = base, c.salt = (const uint8_t *)"a\0b", c.salt_len = 3, refused(&c, KVPI_REDIS_EKEY);
    c = base, c.salt = NULL, c.salt_len = 2, refused(&c, KVPI_REDIS_EKEY);
    c = base, c.connect_timeout_ms = 0, refused(&c, KVPI_REDIS_EINVAL);
    c = base, c.command_timeout_ms = -1, refused(&c, KVPI_REDIS_EINVAL);
    c = base, c.backoff_max_ms = c.backoff_min_ms - 1, refused(&c, KVPI_REDIS_EINVAL);
    c = base, c.pipeline = 0, refused(&c, KVPI_REDIS_EINVAL);
    c = base, c.max_inflight_bytes = 0, refused(&c, KVPI_REDIS_EINVAL);

    /* the edges that are fine: a field of the longest length, [IPv6], a
     * salt, another prefix */
    longf[KVPI_REDIS_MAX_FIELD] = '\0';
    const char *v6[] = {"[::1]:6379"};
    c = base, c.model = longf, c.servers = v6, c.prefix = "kv", c.salt = (const uint8_t *)"s-1";
    c.salt_len = 3;
    s = create_ok(&c);
    kvp_hash h = block_hash(1);
    char key[KVPI_REDIS_KEY_MAX];
    assert_true(kvpi_redis_key(s, &h, key, sizeof key) > 0);
    assert_memory_equal(key, "kv:v1:mmmm", 10);
    assert_non_null(strstr(key, ":sha256:g0:s-1:"));

    /* refused arguments change nothing */
    kvpi_redis_stats before = stats(s), after;
    uint8_t b[16];
    size_t n = 7;
    kvpi_redis_completion out[1];
    assert_int_equal(kvpi_redis_submit_store(s, NULL, b, 16, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_store(s, &h, NULL, 16, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_store(s, &h, b, 0, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_store(s, &h, b, KVPI_REDIS_MAX_VALUE, 0),
                     KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_store(NULL, &h, b, 16, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_load(s, NULL, b, 16, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_load(s, &h, NULL, 16, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_submit_load(s, &h, b, 0, 0), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_poll(s, NULL, 1, &n), KVPI_REDIS_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(kvpi_redis_poll(s, out, 1, NULL), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_poll(NULL, out, 1, &n), KVPI_REDIS_EINVAL);
    assert_int_equal(kvpi_redis_wait(NULL, 10), 0);
    kvpi_redis_stats_get(s, NULL);
    kvpi_redis_stats zero, none;
    memset(&zero, 0, sizeof zero);
    memset(&none, 0xff, sizeof none);
    kvpi_redis_stats_get(NULL, &none);
    assert_memory_equal(&none, &zero, sizeof zero);
    after = stats(s);
    assert_memory_equal(&before, &after, sizeof before);
    kvpi_redis_destroy(s);
    kvpi_redis_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bad_config, kill_all),
        cmocka_unit_test_teardown(test_roundtrip, kill_all),
        cmocka_unit_test_teardown(test_bad_values_miss, kill_all),
        cmocka_unit_test_teardown(test_server_restart, kill_all),
        cmocka_unit_test_teardown(test_full_noeviction, kill_all),
        cmocka_unit_test_teardown(test_full_lru, kill_all),
        cmocka_unit_test_teardown(test_two_servers_one_down, kill_all),
        cmocka_unit_test_teardown(test_server_stopped, kill_all),
        cmocka_unit_test_teardown(test_unreachable, kill_all),
        cmocka_unit_test_teardown(test_inflight_bound, kill_all),
        cmocka_unit_test_teardown(test_thread_blocks_signals, kill_all),
    };
    return cmocka_run_group_tests(tests, NULL, kill_all);
}

#endif /* KVP_HAVE_INTEROP */
