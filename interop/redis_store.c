/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_store.c — the Redis block store: keys and value headers, the
 * submission and completion queues, and the service thread that pipelines
 * GET and SET commands to the servers over non-blocking hiredis contexts.
 *
 * What it owns: kvpi_redis_store, its operations (one malloc'd `op` each,
 * from submit until poll), one connection per server, the counters.
 *
 * Invariants:
 * - An op lives on exactly one list at a time: the submission queue, a
 *   server's `pending` (routed, not sent) or `inflight` (sent, replies come
 *   back in order), or the completion queue.  Only the service thread
 *   touches the server lists; `mu` guards the two queues, the counters and
 *   inflight_bytes.
 * - inflight_bytes is the sum of the sizes of every op between a successful
 *   submit and its poll, so it never passes max_inflight_bytes and the
 *   store's memory stays bounded whatever the servers do.
 * - Every op finishes: a reply completes it; a connection that fails (error,
 *   EOF, connect timeout, or the oldest command past its deadline) completes
 *   everything it holds as DROPPED/MISS; a server waiting for its backoff
 *   completes what is routed to it at once.  So nothing waits longer than a
 *   connect plus a command timeout behind a bad server.
 * - dst is written only by the service thread, only for a load whose value
 *   passed every check, before the op reaches the completion queue.
 *
 * Why built this way: a non-blocking socket and one poll() over every
 * server lets a single thread keep `pipeline` commands in flight on each
 * connection and bound every wait by a deadline of its own, which the
 * blocking hiredis calls cannot.  hiredis formats the commands and parses
 * the replies; its output buffer is topped up only while it is shorter
 * than WRITE_CHUNK, because each partial write moves what is left of it.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvpool_interop.h"
#include "errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define VALUE_MAGIC "KVPB"
#define WRITE_CHUNK (256u << 10) /* output buffer top-up threshold */
#define IDLE_WAIT_MS 200         /* the longest poll() when nothing is due */
#define HIST_BUCKETS 128         /* 4 per power of two of microseconds */
#define READ_CHUNK (256u << 10)  /* bytes per read() of replies */
#define READS_PER_TURN 16        /* reads per connection per turn */

enum op_kind { OP_STORE, OP_LOAD };

typedef struct op {
    struct op *next;
    enum op_kind kind;
    kvpi_redis_result result;
    kvp_hash hash;
    uint64_t tag;
    uint64_t t_submit_ns;
    uint64_t deadline_ns; /* sent: when its reply is late */
    void *dst;            /* load: where the bytes go */
    size_t len;           /* store: block bytes; load: cap */
    uint8_t *value;       /* store: header + bytes (part of this allocation) */
} op;

typedef struct op_list {
    op *head, *tail;
    size_t n;
} op_list;

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

typedef struct server {
    char host[KVPI_REDIS_MAX_HOST + 1];
    int port;
    redisContext *ctx;
    enum conn_state state;
    bool ever_connected;
    uint64_t connect_deadline_ns;
    uint64_t retry_ns; /* DOWN: no connect before this */
    int backoff_ms;
    op_list pending, inflight;
} server;

struct kvpi_redis_store {
    /* set at create, read-only afterwards */
    char key_prefix[KVPI_REDIS_KEY_MAX]; /* "PREFIX:vN:MODEL:ALG:gG:SALT:" */
    size_t key_prefix_len;
    uint32_t layout;
    uint64_t connect_timeout_ns, command_timeout_ns;
    int backoff_min_ms, backoff_max_ms;
    size_t max_inflight;
    uint32_t pipeline;
    size_t n_servers;
    server *servers; /* the service thread's */
    struct pollfd *pf; /* the service thread's poll set: wake pipe, servers */
    char *rbuf;        /* the service thread's read buffer, READ_CHUNK bytes */
    int wake[2];     /* pipe: a submit or destroy wakes the thread */
    pthread_t thread;

    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* signalled when completions arrive */
    op_list submitted, completed;
    bool stop;
    size_t inflight_bytes;
    kvpi_redis_stats st;
    uint64_t hist[HIST_BUCKETS];
    uint64_t hist_n;
};

/* Monotonic nanoseconds. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Append o at the tail of l. */
static void list_push(op_list *l, op *o)
{
    o->next = NULL;
    if (l->tail)
        l->tail->next = o;
    else
        l->head = o;
    l->tail = o;
    l->n++;
}

/* Remove and return the head of l, or NULL. */
static op *list_pop(op_list *l)
{
    op *o = l->head;
    if (o) {
        l->head = o->next;
        if (!l->head)
            l->tail = NULL;
        l->n--;
    }
    return o;
}

/* Move every op of `from` to the tail of `to`. */
static void list_splice(op_list *to, op_list *from)
{
    if (!from->head)
        return;
    if (to->tail)
        to->tail->next = from->head;
    else
        to->head = from->head;
    to->tail = from->tail;
    to->n += from->n;
    *from = (op_list){0};
}

const char *kvpi_redis_strerror(kvpi_redis_status st)
{
    switch (st) {
    case KVPI_REDIS_OK: return "ok";
    case KVPI_REDIS_BUSY: return "in-flight byte bound reached";
    case KVPI_REDIS_EINVAL: return "invalid argument";
    case KVPI_REDIS_ENOSERVERS: return "no servers, or too many";
    case KVPI_REDIS_EENDPOINT: return "malformed server endpoint";
    case KVPI_REDIS_EKEY: return "namespace field unfit for a key";
    case KVPI_REDIS_ENOMEM: return "out of memory";
    case KVPI_REDIS_ESYSTEM: return "cannot start the service thread";
    }
    return "unknown status";
}

void kvpi_redis_config_default(kvpi_redis_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->connect_timeout_ms = 250;
    cfg->command_timeout_ms = 500;
    cfg->backoff_min_ms = 50;
    cfg->backoff_max_ms = 2000;
    cfg->max_inflight_bytes = (size_t)64 << 20;
    cfg->pipeline = 64;
    cfg->layout_version = 1;
}

/* ------------------------------------------------------------------------ */
/* Configuration checks                                                      */
/* ------------------------------------------------------------------------ */

/* 0 when f[0..n) is fit for a key field: min_len..KVPI_REDIS_MAX_FIELD
 * bytes, each printable ASCII other than space and ':'. */
static int field_check(const char *what, const uint8_t *f, size_t n, size_t min_len, char *err,
                       size_t errcap)
{
    if (n < min_len || n > KVPI_REDIS_MAX_FIELD) {
        kvpi__set_err(err, errcap, "%s: %zu bytes (must be %zu..%d)", what, n, min_len,
                      KVPI_REDIS_MAX_FIELD);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (f[i] <= ' ' || f[i] >= 0x7f || f[i] == ':') {
            kvpi__set_err(err, errcap, "%s: byte %zu (0x%02x) does not belong in a key", what, i,
                          f[i]);
            return -1;
        }
    return 0;
}

/* Parse "HOST:PORT" (HOST may be [IPv6]) into sv.  0, or -1 with err. */
static int parse_endpoint(const char *ep, server *sv, char *err, size_t errcap)
{
    const char *colon = ep ? strrchr(ep, ':') : NULL;
    if (!colon) {
        kvpi__set_err(err, errcap, "server '%s': expected HOST:PORT", ep ? ep : "(null)");
        return -1;
    }
    const char *host = ep;
    size_t hl = (size_t)(colon - ep);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host++;
        hl -= 2;
    } else if (memchr(ep, ':', hl)) {
        kvpi__set_err(err, errcap, "server '%s': an IPv6 host goes in brackets", ep);
        return -1;
    }
    const char *port = colon + 1;
    size_t nd = strspn(port, "0123456789");
    unsigned long pv = nd && nd <= 5 && !port[nd] ? strtoul(port, NULL, 10) : 0;
    if (pv < 1 || pv > 65535) {
        kvpi__set_err(err, errcap, "server '%s': port '%s' is not in 1..65535", ep, port);
        return -1;
    }
    if (hl == 0 || hl > KVPI_REDIS_MAX_HOST) {
        kvpi__set_err(err, errcap, "server '%s': %s host", ep, hl ? "over-long" : "empty");
        return -1;
    }
    for (size_t i = 0; i < hl; i++)
        if ((uint8_t)host[i] <= ' ' || (uint8_t)host[i] >= 0x7f) {
            kvpi__set_err(err, errcap, "server '%s': bad byte in host", ep);
            return -1;
        }
    memcpy(sv->host, host, hl);
    sv->host[hl] = '\0';
    sv->port = (int)pv;
    return 0;
}

/* Check cfg's numbers and namespace; build s's key prefix.  Returns the
 * status, with err set on failure. */
static kvpi_redis_status check_config(const kvpi_redis_config *cfg, kvpi_redis_store *s,
                                      char *err, size_t errcap)
{
    if (cfg->connect_timeout_ms <= 0 || cfg->command_timeout_ms <= 0 ||
        cfg->backoff_min_ms <= 0 || cfg->backoff_max_ms < cfg->backoff_min_ms ||
        cfg->pipeline == 0 || cfg->max_inflight_bytes == 0) {
        kvpi__set_err(err, errcap,
                      "timeouts, backoff, pipeline and max_inflight_bytes must be positive "
                      "(backoff_max_ms >= backoff_min_ms)");
        return KVPI_REDIS_EINVAL;
    }
    if (!cfg->servers || cfg->n_servers == 0 || cfg->n_servers > KVPI_REDIS_MAX_SERVERS) {
        kvpi__set_err(err, errcap, "%zu servers (must be 1..%d)", cfg->servers ? cfg->n_servers : 0,
                      KVPI_REDIS_MAX_SERVERS);
        return KVPI_REDIS_ENOSERVERS;
    }
    const char *prefix = cfg->prefix ? cfg->prefix : "kvp";
    if (!cfg->model || !cfg->hash_alg || (cfg->salt_len && !cfg->salt)) {
        kvpi__set_err(err, errcap, "model and hash_alg are required (and salt when salt_len > 0)");
        return KVPI_REDIS_EKEY;
    }
    if (field_check("prefix", (const uint8_t *)prefix, strlen(prefix), 1, err, errcap) ||
        field_check("model", (const uint8_t *)cfg->model, strlen(cfg->model), 1, err, errcap) ||
        field_check("hash_alg", (const uint8_t *)cfg->hash_alg, strlen(cfg->hash_alg), 1, err,
                    errcap) ||
        field_check("salt", cfg->salt, cfg->salt_len, 0, err, errcap))
        return KVPI_REDIS_EKEY;
    int n = snprintf(s->key_prefix, sizeof s->key_prefix, "%s:v%u:%s:%s:g%u:%.*s:", prefix,
                     (unsigned)cfg->layout_version, cfg->model, cfg->hash_alg,
                     (unsigned)cfg->group, (int)cfg->salt_len,
                     cfg->salt ? (const char *)cfg->salt : "");
    s->key_prefix_len = (size_t)n;
    return KVPI_REDIS_OK;
}

/* ------------------------------------------------------------------------ */
/* Keys and values                                                           */
/* ------------------------------------------------------------------------ */

size_t kvpi_redis_key(const kvpi_redis_store *s, const kvp_hash *hash, char *key, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t need = s->key_prefix_len + 2 * sizeof hash->b;
    if (cap <= need)
        return 0;
    memcpy(key, s->key_prefix, s->key_prefix_len);
    char *p = key + s->key_prefix_len;
    for (size_t i = 0; i < sizeof hash->b; i++) {
        *p++ = hex[hash->b[i] >> 4];
        *p++ = hex[hash->b[i] & 15];
    }
    *p = '\0';
    return need;
}

size_t kvpi_redis_server_of(const kvpi_redis_store *s, const kvp_hash *hash)
{
    /* the last 8 bytes identify a block under every hash algorithm */
    uint64_t v = 0;
    for (int i = 24; i < 32; i++)
        v = v << 8 | hash->b[i];
    v *= 0x9E3779B97F4A7C15ull; /* spread hashes that differ in few bits */
    return (size_t)((v >> 32) % s->n_servers);
}

/* Little-endian stores and loads for the header. */
static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* XXH3-64 over the key, the header's first 16 bytes and the payload. */
static uint64_t value_checksum(const char *key, size_t key_len, const uint8_t head[16],
                               const uint8_t *payload, size_t len)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, key, key_len);
    XXH3_64bits_update(&st, head, 16);
    XXH3_64bits_update(&st, payload, len);
    return XXH3_64bits_digest(&st);
}

/* Write the header of a value holding payload[0..len) under key into
 * out[0..KVPI_REDIS_HEADER_BYTES):
 *   0 magic "KVPB" | 4 layout (u16) | 6 header bytes (u16) |
 *   8 payload length (u64) | 16 checksum (u64), little-endian. */
static void value_header(const kvpi_redis_store *s, const char *key, size_t key_len,
                         const uint8_t *payload, size_t len, uint8_t *out)
{
    memcpy(out, VALUE_MAGIC, 4);
    put_le(out + 4, s->layout, 2);
    put_le(out + 6, KVPI_REDIS_HEADER_BYTES, 2);
    put_le(out + 8, len, 8);
    put_le(out + 16, value_checksum(key, key_len, out, payload, len), 8);
}

/* 1 when v[0..n) is this store's value for key holding exactly `len`
 * bytes, else 0. */
static int value_ok(const kvpi_redis_store *s, const char *key, size_t key_len, const uint8_t *v,
                    size_t n, size_t len)
{
    if (n != KVPI_REDIS_HEADER_BYTES + len || memcmp(v, VALUE_MAGIC, 4) != 0 ||
        get_le(v + 4, 2) != s->layout || get_le(v + 6, 2) != KVPI_REDIS_HEADER_BYTES ||
        get_le(v + 8, 8) != len)
        return 0;
    return get_le(v + 16, 8) ==
           value_checksum(key, key_len, v, v + KVPI_REDIS_HEADER_BYTES, len);
}

/* ------------------------------------------------------------------------ */
/* Finishing operations                                                      */
/* ------------------------------------------------------------------------ */

/* The histogram bucket of a latency: 4 buckets per power of two. */
static unsigned hist_bucket(uint64_t us)
{
    if (us < 4)
        return (unsigned)us;
    unsigned msb = 63u - (unsigned)__builtin_clzll(us);
    unsigned b = msb * 4 + (unsigned)((us >> (msb - 2)) & 3);
    return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

/* The largest latency in bucket b (what percentiles report). */
static uint64_t hist_upper(unsigned b)
{
    if (b < 4)
        return b;
    unsigned msb = b / 4, sub = b % 4;
    return ((uint64_t)(4 + sub + 1) << (msb - 2)) - 1;
}

/* The latency at quantile q (0..1) of the recorded loads; mu held. */
static uint64_t hist_quantile(const kvpi_redis_store *s, double q)
{
    if (!s->hist_n)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(s->hist_n - 1)) + 1, seen = 0;
    for (unsigned b = 0; b < HIST_BUCKETS; b++) {
        seen += s->hist[b];
        if (seen >= rank)
            return hist_upper(b);
    }
    return hist_upper(HIST_BUCKETS - 1);
}

/* Give the finished ops of `done` to the caller: count them, record load
 * latencies, queue them for poll and wake waiters.  Store values are freed
 * with their op at poll. */
static void finish(kvpi_redis_store *s, op_list *done)
{
    if (!done->n)
        return;
    uint64_t t = now_ns();
    pthread_mutex_lock(&s->mu);
    for (op *o = done->head; o; o = o->next) {
        switch (o->result) {
        case KVPI_REDIS_STORED:
            s->st.stored++;
            s->st.bytes_stored += o->len;
            break;
        case KVPI_REDIS_DROPPED:
            s->st.store_drops++;
            break;
        case KVPI_REDIS_LOADED:
            s->st.hits++;
            s->st.bytes_loaded += o->len;
            break;
        case KVPI_REDIS_MISS:
            s->st.misses++;
            break;
        }
        if (o->kind == OP_LOAD) {
            s->hist[hist_bucket((t - o->t_submit_ns) / 1000)]++;
            s->hist_n++;
        }
    }
    list_splice(&s->completed, done);
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Mark o failed (a store dropped, a load missed) and add it to done. */
static void fail_op(op *o, op_list *done)
{
    o->result = o->kind == OP_STORE ? KVPI_REDIS_DROPPED : KVPI_REDIS_MISS;
    list_push(done, o);
}

/* Complete o from its reply r (NULL when the connection broke). */
static void complete_op(kvpi_redis_store *s, op *o, const redisReply *r, op_list *done,
                        uint64_t *bad_values)
{
    if (o->kind == OP_STORE) {
        o->result = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0
                        ? KVPI_REDIS_STORED
                        : KVPI_REDIS_DROPPED;
    } else {
        char key[KVPI_REDIS_KEY_MAX];
        size_t kl = kvpi_redis_key(s, &o->hash, key, sizeof key);
        o->result = KVPI_REDIS_MISS;
        if (r && r->type == REDIS_REPLY_STRING) {
            if (value_ok(s, key, kl, (const uint8_t *)r->str, (size_t)r->len, o->len)) {
                memcpy(o->dst, r->str + KVPI_REDIS_HEADER_BYTES, o->len);
                o->result = KVPI_REDIS_LOADED;
            } else {
                ++*bad_values;
            }
        }
    }
    list_push(done, o);
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */
/* ------------------------------------------------------------------------ */

/* Close sv's connection and fail everything routed to it; the next
 * connect waits for the backoff, which then doubles (up to the bound). */
static void conn_fail(kvpi_redis_store *s, server *sv, op_list *done, uint64_t t)
{
    if (sv->ctx)
        redisFree(sv->ctx);
    sv->ctx = NULL;
    if (sv->state == CONN_CONNECTING) {
        pthread_mutex_lock(&s->mu);
        s->st.connect_failures++;
        pthread_mutex_unlock(&s->mu);
    }
    sv->state = CONN_DOWN;
    sv->retry_ns = t + (uint64_t)sv->backoff_ms * 1000000u;
    sv->backoff_ms = sv->backoff_ms * 2 > s->backoff_max_ms ? s->backoff_max_ms
                                                             : sv->backoff_ms * 2;
    op *o;
    while ((o = list_pop(&sv->inflight)))
        fail_op(o, done);
    while ((o = list_pop(&sv->pending)))
        fail_op(o, done);
}

/* Start a non-blocking connect to sv. */
static void conn_start(kvpi_redis_store *s, server *sv, op_list *done, uint64_t t)
{
    sv->state = CONN_CONNECTING;
    sv->connect_deadline_ns = t + s->connect_timeout_ns;
    sv->ctx = redisConnectNonBlock(sv->host, sv->port);
    if (!sv->ctx || sv->ctx->err)
        conn_fail(s, sv, done, t);
}

/* The connect of sv has signalled: keep it if the socket reports no
 * error. */
static void conn_finish(kvpi_redis_store *s, server *sv, op_list *done, uint64_t t)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(sv->ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
        conn_fail(s, sv, done, t);
        return;
    }
    sv->state = CONN_UP;
    sv->backoff_ms = s->backoff_min_ms;
    sv->ctx->reader->maxbuf = 0; /* keep the read buffer between replies */
    if (sv->ever_connected) {
        pthread_mutex_lock(&s->mu);
        s->st.reconnects++;
        pthread_mutex_unlock(&s->mu);
    }
    sv->ever_connected = true;
}

/* Format commands for pending ops into sv's output buffer while the
 * pipeline and WRITE_CHUNK allow; each sent op gets its reply deadline. */
static void conn_fill(kvpi_redis_store *s, server *sv, op_list *done, uint64_t t)
{
    char key[KVPI_REDIS_KEY_MAX];
    while (sv->pending.head && sv->inflight.n < s->pipeline &&
           sdslen(sv->ctx->obuf) < WRITE_CHUNK) {
        op *o = sv->pending.head;
        size_t kl = kvpi_redis_key(s, &o->hash, key, sizeof key);
        const char *argv[3] = {o->kind == OP_STORE ? "SET" : "GET", key, (const char *)o->value};
        size_t argl[3] = {3, kl, KVPI_REDIS_HEADER_BYTES + o->len};
        if (redisAppendCommandArgv(sv->ctx, o->kind == OP_STORE ? 3 : 2, argv, argl) !=
            REDIS_OK) {
            conn_fail(s, sv, done, t);
            return;
        }
        list_pop(&sv->pending);
        o->deadline_ns = t + s->command_timeout_ns;
        list_push(&sv->inflight, o);
    }
}

/* Read what sv has sent and complete the ops its replies answer. */
static void conn_read(kvpi_redis_store *s, server *sv, op_list *done, uint64_t t)
{
    /* read in READ_CHUNK pieces (redisBufferRead takes 16 KiB a call) until
     * the socket is empty or READS_PER_TURN pieces are in */
    for (int reads = 0; reads < READS_PER_TURN; reads++) {
        ssize_t got = read(sv->ctx->fd, s->rbuf, READ_CHUNK);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        if (got <= 0 || redisReaderFeed(sv->ctx->reader, s->rbuf, (size_t)got) != REDIS_OK) {
            conn_fail(s, sv, done, t); /* closed by the server, or a socket error */
            return;
        }
        if (got < (ssize_t)READ_CHUNK)
            break;
    }
    uint64_t bad = 0;
    void *reply;
    while (sv->inflight.head) {
        if (redisGetReplyFromReader(sv->ctx, &reply) != REDIS_OK) {
            conn_fail(s, sv, done, t);
            break;
        }
        if (!reply)
            break;
        complete_op(s, list_pop(&sv->inflight), reply, done, &bad);
        freeReplyObject(reply);
    }
    if (bad) {
        pthread_mutex_lock(&s->mu);
        s->st.bad_values += bad;
        pthread_mutex_unlock(&s->mu);
    }
}

/* ------------------------------------------------------------------------ */
/* The service thread                                                        */
/* ------------------------------------------------------------------------ */

/* Route newly submitted ops to their servers (on stop, fail them), then
 * per server: connect when due, time out a connect or a late reply, fail
 * what waits on a server in backoff, fill the pipeline.  Returns the
 * earliest deadline (ns) the poll must wake for. */
static uint64_t service_turn(kvpi_redis_store *s, bool stopping, op_list *done, uint64_t t)
{
    pthread_mutex_lock(&s->mu);
    op_list in = s->submitted;
    s->submitted = (op_list){0};
    pthread_mutex_unlock(&s->mu);
    op *o;
    while ((o = list_pop(&in))) {
        if (stopping)
            fail_op(o, done);
        else
            list_push(&s->servers[kvpi_redis_server_of(s, &o->hash)].pending, o);
    }
    uint64_t wake = t + (uint64_t)IDLE_WAIT_MS * 1000000u;
    for (size_t i = 0; i < s->n_servers; i++) {
        server *sv = &s->servers[i];
        if (stopping)
            while ((o = list_pop(&sv->pending)))
                fail_op(o, done);
        if (sv->state == CONN_DOWN && !stopping && t >= sv->retry_ns)
            conn_start(s, sv, done, t);
        if (sv->state == CONN_DOWN) {
            while ((o = list_pop(&sv->pending)))
                fail_op(o, done);
            if (!stopping && sv->retry_ns < wake)
                wake = sv->retry_ns;
            continue;
        }
        if (sv->state == CONN_CONNECTING) {
            if (t >= sv->connect_deadline_ns)
                conn_fail(s, sv, done, t);
            else if (sv->connect_deadline_ns < wake)
                wake = sv->connect_deadline_ns;
            continue;
        }
        if (sv->inflight.head && t >= sv->inflight.head->deadline_ns) {
            pthread_mutex_lock(&s->mu);
            s->st.timeouts++;
            pthread_mutex_unlock(&s->mu);
            conn_fail(s, sv, done, t);
            continue;
        }
        conn_fill(s, sv, done, t);
        /* write at once rather than a poll() later: the socket is rarely full */
        int wdone = 0;
        if (sv->state == CONN_UP && sdslen(sv->ctx->obuf) &&
            redisBufferWrite(sv->ctx, &wdone) != REDIS_OK) {
            conn_fail(s, sv, done, t);
            continue;
        }
        if (sv->inflight.head && sv->inflight.head->deadline_ns < wake)
            wake = sv->inflight.head->deadline_ns;
    }
    return wake;
}

/* 1 while some server still has a connect or a command under way. */
static int anything_in_flight(const kvpi_redis_store *s)
{
    for (size_t i = 0; i < s->n_servers; i++)
        if (s->servers[i].inflight.head)
            return 1;
    return 0;
}

/* The service loop: a turn (service_turn), then one poll() over the wake
 * pipe and every connection until the earliest deadline, then the socket
 * events: connects finishing, output written, replies read.  On stop it
 * goes on until no command is in flight (each bounded by its deadline). */
static void *service_thread(void *arg)
{
    kvpi_redis_store *s = arg;
    struct pollfd *pf = s->pf;
#ifdef __linux__
    prctl(PR_SET_NAME, "kvpi-redis"); /* what top -H and /proc show */
#endif
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stop;
        pthread_mutex_unlock(&s->mu);
        op_list done = {0};
        uint64_t t = now_ns();
        uint64_t wake = service_turn(s, stopping, &done, t);
        finish(s, &done);
        if (stopping && !anything_in_flight(s))
            break;
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        for (size_t i = 0; i < s->n_servers; i++) {
            server *sv = &s->servers[i];
            short ev = 0;
            if (sv->state == CONN_CONNECTING)
                ev = POLLOUT;
            else if (sv->state == CONN_UP)
                ev = (short)(POLLIN | (sdslen(sv->ctx->obuf) ? POLLOUT : 0));
            pf[i + 1] = (struct pollfd){.fd = ev ? sv->ctx->fd : -1, .events = ev};
        }
        int ms = wake > t ? (int)((wake - t + 999999) / 1000000) : 0;
        poll(pf, s->n_servers + 1, ms);
        if (pf[0].revents) {
            char buf[64];
            while (read(s->wake[0], buf, sizeof buf) == (ssize_t)sizeof buf)
                ;
        }
        t = now_ns();
        for (size_t i = 0; i < s->n_servers; i++) {
            server *sv = &s->servers[i];
            short re = pf[i + 1].revents;
            if (!re)
                continue;
            if (sv->state == CONN_CONNECTING) {
                conn_finish(s, sv, &done, t);
                continue;
            }
            int wdone = 0;
            if ((re & POLLOUT) && redisBufferWrite(sv->ctx, &wdone) != REDIS_OK) {
                conn_fail(s, sv, &done, t);
                continue;
            }
            if (re & (POLLIN | POLLHUP | POLLERR))
                conn_read(s, sv, &done, t);
        }
        finish(s, &done);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                                */
/* ------------------------------------------------------------------------ */

/* Free an op list. */
static void free_ops(op_list *l)
{
    op *o;
    while ((o = list_pop(l)))
        free(o);
}

/* Free what create allocated, the thread having stopped (or never run). */
static void free_store(kvpi_redis_store *s)
{
    for (size_t i = 0; s->servers && i < s->n_servers; i++)
        if (s->servers[i].ctx)
            redisFree(s->servers[i].ctx);
    free_ops(&s->submitted);
    free_ops(&s->completed);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->done_cv);
    free(s->servers);
    free(s->pf);
    free(s->rbuf);
    free(s);
}

/* Make a non-blocking, close-on-exec pipe.  0, or -1. */
static int wake_pipe(int fd[2])
{
    if (pipe(fd) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (fcntl(fd[i], F_SETFL, O_NONBLOCK) != 0 || fcntl(fd[i], F_SETFD, FD_CLOEXEC) != 0) {
            close(fd[0]);
            close(fd[1]);
            return -1;
        }
    return 0;
}

kvpi_redis_status kvpi_redis_create(const kvpi_redis_config *cfg, kvpi_redis_store **out,
                                    char *err, size_t errcap)
{
    if (!cfg || !out) {
        kvpi__set_err(err, errcap, "no configuration or no output pointer");
        return KVPI_REDIS_EINVAL;
    }
    kvpi_redis_store *s = calloc(1, sizeof *s);
    if (!s) {
        kvpi__set_err(err, errcap, "out of memory");
        return KVPI_REDIS_ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    kvpi_redis_status st = check_config(cfg, s, err, errcap);
    if (st != KVPI_REDIS_OK)
        goto fail;
    s->servers = calloc(cfg->n_servers, sizeof *s->servers);
    s->pf = calloc(cfg->n_servers + 1, sizeof *s->pf);
    s->rbuf = malloc(READ_CHUNK);
    if (!s->servers || !s->pf || !s->rbuf) {
        kvpi__set_err(err, errcap, "out of memory");
        st = KVPI_REDIS_ENOMEM;
        goto fail;
    }
    s->n_servers = cfg->n_servers;
    for (size_t i = 0; i < cfg->n_servers; i++) {
        if (parse_endpoint(cfg->servers[i], &s->servers[i], err, errcap) != 0) {
            st = KVPI_REDIS_EENDPOINT;
            goto fail;
        }
        s->servers[i].backoff_ms = cfg->backoff_min_ms;
    }
    s->layout = cfg->layout_version;
    s->connect_timeout_ns = (uint64_t)cfg->connect_timeout_ms * 1000000u;
    s->command_timeout_ns = (uint64_t)cfg->command_timeout_ms * 1000000u;
    s->backoff_min_ms = cfg->backoff_min_ms;
    s->backoff_max_ms = cfg->backoff_max_ms;
    s->max_inflight = cfg->max_inflight_bytes;
    s->pipeline = cfg->pipeline;
    if (wake_pipe(s->wake) != 0) {
        kvpi__set_err(err, errcap, "cannot create the wake-up pipe: %s", strerror(errno));
        st = KVPI_REDIS_ESYSTEM;
        goto fail;
    }
    /* the thread starts with every signal blocked: a write to a connection
     * the server has closed fails with EPIPE instead of raising SIGPIPE
     * (which would end the engine), and the program's own signals go to
     * its own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int started = pthread_create(&s->thread, NULL, service_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        kvpi__set_err(err, errcap, "cannot start the service thread");
        st = KVPI_REDIS_ESYSTEM;
        goto fail;
    }
    *out = s;
    return KVPI_REDIS_OK;
fail:
    free_store(s);
    return st;
}

/* Wake the service thread (a full pipe already will). */
static void wake_thread(kvpi_redis_store *s)
{
    ssize_t w = write(s->wake[1], "", 1);
    (void)w;
}

void kvpi_redis_destroy(kvpi_redis_store *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_mutex_unlock(&s->mu);
    wake_thread(s);
    pthread_join(s->thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    free_store(s);
}

/* Reserve o's bytes of the in-flight bound, count o and queue it (mu
 * taken here).  Returns 0, or -1 when the bound would be passed. */
static int submit(kvpi_redis_store *s, op *o)
{
    pthread_mutex_lock(&s->mu);
    if (o->len > s->max_inflight - s->inflight_bytes) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    s->inflight_bytes += o->len;
    if (o->kind == OP_STORE)
        s->st.stores++;
    else
        s->st.loads++;
    bool was_empty = !s->submitted.head;
    list_push(&s->submitted, o);
    pthread_mutex_unlock(&s->mu);
    if (was_empty)
        wake_thread(s);
    return 0;
}

/* Count a refused submit (busy) under mu. */
static void count_busy(kvpi_redis_store *s, enum op_kind kind)
{
    pthread_mutex_lock(&s->mu);
    if (kind == OP_STORE) {
        s->st.stores++;
        s->st.store_drops++;
    } else {
        s->st.load_busy++;
    }
    pthread_mutex_unlock(&s->mu);
}

kvpi_redis_status kvpi_redis_submit_store(kvpi_redis_store *s, const kvp_hash *hash,
                                          const void *bytes, size_t len, uint64_t tag)
{
    if (!s || !hash || !bytes || len == 0 || len > KVPI_REDIS_MAX_VALUE - KVPI_REDIS_HEADER_BYTES)
        return KVPI_REDIS_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool over = len > s->max_inflight - s->inflight_bytes;
    pthread_mutex_unlock(&s->mu);
    if (over) { /* refused before the copy is paid for */
        count_busy(s, OP_STORE);
        return KVPI_REDIS_BUSY;
    }
    op *o = malloc(sizeof *o + KVPI_REDIS_HEADER_BYTES + len);
    if (!o)
        return KVPI_REDIS_ENOMEM;
    *o = (op){.kind = OP_STORE, .hash = *hash, .tag = tag, .len = len,
              .t_submit_ns = now_ns(), .value = (uint8_t *)(o + 1)};
    char key[KVPI_REDIS_KEY_MAX];
    size_t kl = kvpi_redis_key(s, hash, key, sizeof key);
    memcpy(o->value + KVPI_REDIS_HEADER_BYTES, bytes, len);
    value_header(s, key, kl, o->value + KVPI_REDIS_HEADER_BYTES, len, o->value);
    if (submit(s, o) != 0) { /* another thread took the room meanwhile */
        free(o);
        count_busy(s, OP_STORE);
        return KVPI_REDIS_BUSY;
    }
    return KVPI_REDIS_OK;
}

kvpi_redis_status kvpi_redis_submit_load(kvpi_redis_store *s, const kvp_hash *hash, void *dst,
                                         size_t cap, uint64_t tag)
{
    if (!s || !hash || !dst || cap == 0 || cap > KVPI_REDIS_MAX_VALUE - KVPI_REDIS_HEADER_BYTES)
        return KVPI_REDIS_EINVAL;
    op *o = malloc(sizeof *o);
    if (!o)
        return KVPI_REDIS_ENOMEM;
    *o = (op){.kind = OP_LOAD, .hash = *hash, .tag = tag, .len = cap, .dst = dst,
              .t_submit_ns = now_ns()};
    if (submit(s, o) != 0) {
        free(o);
        count_busy(s, OP_LOAD);
        return KVPI_REDIS_BUSY;
    }
    return KVPI_REDIS_OK;
}

kvpi_redis_status kvpi_redis_poll(kvpi_redis_store *s, kvpi_redis_completion *out, size_t max,
                                  size_t *n)
{
    if (n)
        *n = 0;
    if (!s || !n || (max && !out))
        return KVPI_REDIS_EINVAL;
    op_list got = {0};
    pthread_mutex_lock(&s->mu);
    while (got.n < max && s->completed.head) {
        op *o = list_pop(&s->completed);
        s->inflight_bytes -= o->len;
        list_push(&got, o);
    }
    pthread_mutex_unlock(&s->mu);
    op *o;
    while ((o = list_pop(&got))) {
        out[*n] = (kvpi_redis_completion){.tag = o->tag, .hash = o->hash, .result = o->result,
                                          .len = o->len};
        ++*n;
        free(o);
    }
    return KVPI_REDIS_OK;
}

size_t kvpi_redis_wait(kvpi_redis_store *s, int timeout_ms)
{
    if (!s)
        return 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&s->mu);
    while (!s->completed.head && timeout_ms > 0 &&
           pthread_cond_timedwait(&s->done_cv, &s->mu, &until) == 0)
        ;
    size_t n = s->completed.n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kvpi_redis_stats_get(kvpi_redis_store *s, kvpi_redis_stats *out)
{
    if (!out)
        return;
    if (!s) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->load_p50_us = hist_quantile(s, 0.50);
    out->load_p99_us = hist_quantile(s, 0.99);
    out->inflight_bytes = s->inflight_bytes;
    pthread_mutex_unlock(&s->mu);
}
