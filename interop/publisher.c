/*
 * publisher.c — the KV-cache events publisher: ZeroMQ sockets, batch
 * numbering, the replay buffer and the thread that answers replay requests.
 *
 * What it owns: kvpi_publisher and its sockets.  Every batch goes out as
 * exactly three frames — topic, sequence number (8 bytes, big-endian),
 * msgpack payload (encode.c) — the layout of vLLM's ZmqEventPublisher, so
 * its subscribers work unchanged (docs/EVENTS.md).
 *
 * Why built this way:
 * - Publishing is synchronous, on the caller's thread: kvp_events_take hands
 *   out a buffer valid only until the next take, so encoding right there
 *   needs no copy of the events and no queue between threads.  PUB sockets
 *   never block (a slow subscriber loses messages at its high-water mark and
 *   recovers them through replay), so the caller is never held up.
 * - The socket is an XPUB rather than a PUB: it behaves the same for
 *   subscribers, and also delivers their subscriptions, which is how
 *   kvpi_publisher_wait_subscriber sees one arrive (ZeroMQ's slow-joiner
 *   problem: messages sent before a subscription is in place are lost).
 * - Replay needs answering while the caller is busy elsewhere, so it has its
 *   own thread, the only user of the ROUTER socket (ZeroMQ sockets are not
 *   thread-safe); the ring of recent payloads it reads is shared under a
 *   mutex.  Without a replay endpoint no thread is started.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvpool_interop.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

typedef struct kept_batch {
    uint64_t seq;
    uint8_t *payload;
    size_t len;
} kept_batch;

struct kvpi_publisher {
    void *ctx;
    void *pub;     /* XPUB */
    void *router;  /* replay, owned by the replay thread once it runs */
    char *topic;
    size_t topic_len;
    int64_t dp_rank;
    int linger_ms;
    char endpoint[256];
    char replay_ep[256];
    bool subscribed;

    uint64_t next_seq;
    uint64_t events_sent, events_dropped;
    kvpi_buf scratch; /* reused encoding buffer */

    /* replay ring: the newest `count` batches, oldest at `head` */
    pthread_mutex_t lock;
    kept_batch *ring;
    uint32_t ring_cap, head, count;
    pthread_t thread;
    bool thread_running;
    atomic_int stop;
};

static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

void kvpi_publisher_config_default(kvpi_publisher_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->replay_batches = 10000;
    cfg->sndhwm = 100000;
    cfg->dp_rank = KVPI_NO_DP_RANK;
    cfg->linger_ms = 1000;
}

static void put_be64(uint8_t out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        out[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t in[8])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | in[i];
    return v;
}

/* ------------------------------------------------------------------------ */
/* Replay                                                                    */
/* ------------------------------------------------------------------------ */

/* Keep a copy of a sent batch; the oldest goes when the ring is full.
 * Memory refused: the batch is simply not replayable. */
static void keep(kvpi_publisher *p, uint64_t seq, const uint8_t *payload, size_t len)
{
    if (!p->ring_cap)
        return;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return;
    memcpy(copy, payload, len);
    pthread_mutex_lock(&p->lock);
    kept_batch *slot;
    if (p->count == p->ring_cap) {
        slot = &p->ring[p->head];
        free(slot->payload);
        p->head = (p->head + 1) % p->ring_cap;
    } else {
        slot = &p->ring[(p->head + p->count) % p->ring_cap];
        p->count++;
    }
    *slot = (kept_batch){seq, copy, len};
    pthread_mutex_unlock(&p->lock);
}

/* Receive one whole multipart message into at most `max` frames (the rest
 * are discarded).  Returns the frame count, or -1. */
static int recv_frames(void *sock, zmq_msg_t *frames, int max)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            for (int i = 0; i < n && i < max; i++)
                zmq_msg_close(&frames[i]);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < max)
            frames[n] = m;
        else
            zmq_msg_close(&m);
        n++;
    }
    return n;
}

/* Send [identity, "", seq, payload] to a replay client. */
static int send_reply(void *router, const void *id, size_t id_len, const uint8_t seq[8],
                      const uint8_t *payload, size_t len)
{
    if (zmq_send(router, id, id_len, ZMQ_SNDMORE) < 0 || zmq_send(router, "", 0, ZMQ_SNDMORE) < 0 ||
        zmq_send(router, seq, 8, ZMQ_SNDMORE) < 0 || zmq_send(router, payload, len, 0) < 0)
        return -1;
    return 0;
}

/* Answer one request: [identity, "", start (8 bytes BE)] gets every kept
 * batch numbered start or later, oldest first, then the end marker
 * (sequence -1, empty payload).  Malformed requests are ignored, as vLLM
 * does. */
static void serve_replay(kvpi_publisher *p)
{
    zmq_msg_t f[3];
    int n = recv_frames(p->router, f, 3);
    if (n < 0)
        return;
    if (n == 3 && zmq_msg_size(&f[1]) == 0 && zmq_msg_size(&f[2]) == 8) {
        uint64_t start = get_be64(zmq_msg_data(&f[2]));
        const void *id = zmq_msg_data(&f[0]);
        size_t id_len = zmq_msg_size(&f[0]);
        pthread_mutex_lock(&p->lock);
        for (uint32_t i = 0; i < p->count; i++) {
            const kept_batch *k = &p->ring[(p->head + i) % p->ring_cap];
            if (k->seq < start)
                continue;
            uint8_t seq[8];
            put_be64(seq, k->seq);
            if (send_reply(p->router, id, id_len, seq, k->payload, k->len))
                break;
        }
        pthread_mutex_unlock(&p->lock);
        static const uint8_t end_seq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        send_reply(p->router, id, id_len, end_seq, (const uint8_t *)"", 0);
    }
    for (int i = 0; i < n && i < 3; i++)
        zmq_msg_close(&f[i]);
}

static void *replay_thread(void *arg)
{
    kvpi_publisher *p = arg;
    while (!atomic_load(&p->stop)) {
        zmq_pollitem_t it = {p->router, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, 50);
        if (rc < 0 && zmq_errno() != EINTR)
            break;
        if (rc > 0 && (it.revents & ZMQ_POLLIN))
            serve_replay(p);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                                */
/* ------------------------------------------------------------------------ */

static void close_all(kvpi_publisher *p)
{
    if (p->thread_running) {
        atomic_store(&p->stop, 1);
        pthread_join(p->thread, NULL);
        p->thread_running = false;
    }
    if (p->router) {
        int zero = 0;
        zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(p->router);
    }
    if (p->pub) {
        zmq_setsockopt(p->pub, ZMQ_LINGER, &p->linger_ms, sizeof p->linger_ms);
        zmq_close(p->pub);
    }
    if (p->ctx)
        zmq_ctx_term(p->ctx);
    for (uint32_t i = 0; i < p->count; i++)
        free(p->ring[(p->head + i) % p->ring_cap].payload);
    free(p->ring);
    free(p->topic);
    kvpi_buf_free(&p->scratch);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int kvpi_publisher_create(const kvpi_publisher_config *cfg, kvpi_publisher **out, char *err,
                          size_t errcap)
{
    kvpi_publisher_config def;
    if (!cfg) {
        kvpi_publisher_config_default(&def);
        cfg = &def;
    }
    if (!out) {
        set_err(err, errcap, "no output pointer");
        return -1;
    }
    kvpi_publisher *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, errcap, "out of memory");
        return -1;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->dp_rank = cfg->dp_rank;
    p->linger_ms = cfg->linger_ms;
    const char *topic = cfg->topic ? cfg->topic : "";
    p->topic_len = strlen(topic);
    p->topic = malloc(p->topic_len + 1);
    p->ring_cap = cfg->replay_endpoint ? cfg->replay_batches : 0;
    p->ring = p->ring_cap ? calloc(p->ring_cap, sizeof *p->ring) : NULL;
    p->ctx = zmq_ctx_new();
    if (!p->topic || (p->ring_cap && !p->ring) || !p->ctx) {
        set_err(err, errcap, "out of memory");
        goto fail;
    }
    memcpy(p->topic, topic, p->topic_len + 1);

    const char *ep = cfg->endpoint ? cfg->endpoint : KVPI_DEFAULT_ENDPOINT;
    p->pub = zmq_socket(p->ctx, ZMQ_XPUB);
    int hwm = cfg->sndhwm > 0 ? cfg->sndhwm : 100000;
    if (!p->pub || zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm)) {
        set_err(err, errcap, "cannot open the PUB socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    bool bind = strchr(ep, '*') != NULL;
    if ((bind ? zmq_bind(p->pub, ep) : zmq_connect(p->pub, ep)) != 0) {
        set_err(err, errcap, "cannot %s %s: %s", bind ? "bind" : "connect to", ep,
                zmq_strerror(zmq_errno()));
        goto fail;
    }
    size_t len = sizeof p->endpoint;
    if (!bind || zmq_getsockopt(p->pub, ZMQ_LAST_ENDPOINT, p->endpoint, &len) != 0)
        snprintf(p->endpoint, sizeof p->endpoint, "%s", ep);

    if (cfg->replay_endpoint) {
        p->router = zmq_socket(p->ctx, ZMQ_ROUTER);
        if (!p->router || zmq_bind(p->router, cfg->replay_endpoint) != 0) {
            set_err(err, errcap, "cannot bind the replay socket at %s: %s",
                    cfg->replay_endpoint, zmq_strerror(zmq_errno()));
            goto fail;
        }
        len = sizeof p->replay_ep;
        if (zmq_getsockopt(p->router, ZMQ_LAST_ENDPOINT, p->replay_ep, &len) != 0)
            snprintf(p->replay_ep, sizeof p->replay_ep, "%s", cfg->replay_endpoint);
        if (pthread_create(&p->thread, NULL, replay_thread, p) != 0) {
            set_err(err, errcap, "cannot start the replay thread");
            goto fail;
        }
        p->thread_running = true;
    }
    *out = p;
    return 0;
fail:
    p->linger_ms = 0;
    close_all(p);
    return -1;
}

void kvpi_publisher_destroy(kvpi_publisher *pub)
{
    if (pub)
        close_all(pub);
}

const char *kvpi_publisher_endpoint(const kvpi_publisher *pub)
{
    return pub->endpoint;
}

const char *kvpi_publisher_replay_endpoint(const kvpi_publisher *pub)
{
    return pub->router ? pub->replay_ep : NULL;
}

/* ------------------------------------------------------------------------ */
/* Subscriptions                                                             */
/* ------------------------------------------------------------------------ */

/* Read every subscription message waiting on the XPUB socket (or wait up to
 * timeout_ms for the first); note whether one matches our topic. */
static void read_subscriptions(kvpi_publisher *p, int timeout_ms)
{
    for (;;) {
        zmq_pollitem_t it = {p->pub, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, timeout_ms) <= 0 || !(it.revents & ZMQ_POLLIN))
            return;
        timeout_ms = 0;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->pub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        const uint8_t *d = zmq_msg_data(&m);
        size_t n = zmq_msg_size(&m);
        /* 1 + filter: subscribe; a filter matches when it is a prefix of
         * our topic (ZeroMQ's prefix matching) */
        if (n >= 1 && d[0] == 1 && n - 1 <= p->topic_len && memcmp(d + 1, p->topic, n - 1) == 0)
            p->subscribed = true;
        zmq_msg_close(&m);
    }
}

int kvpi_publisher_wait_subscriber(kvpi_publisher *pub, int timeout_ms)
{
    double deadline = kvpi_now() + (timeout_ms < 0 ? 1e12 : timeout_ms / 1000.0);
    read_subscriptions(pub, 0);
    while (!pub->subscribed) {
        double left = deadline - kvpi_now();
        if (left <= 0)
            break;
        read_subscriptions(pub, left > 0.1 ? 100 : (int)(left * 1000) + 1);
    }
    return pub->subscribed;
}

/* ------------------------------------------------------------------------ */
/* Publishing                                                                */
/* ------------------------------------------------------------------------ */

int kvpi_publisher_send(kvpi_publisher *pub, const kvp_event *events, size_t n, double timestamp)
{
    if (!pub || (n && !events))
        return -1;
    read_subscriptions(pub, 0); /* keep the subscription queue short */
    if (n == 0)
        return 0;
    if (kvpi_encode_batch(events, n, timestamp < 0 ? kvpi_now() : timestamp, pub->dp_rank,
                          &pub->scratch))
        return -1;
    uint8_t seq[8];
    put_be64(seq, pub->next_seq);
    /* A PUB socket never blocks: past the high-water mark zmq_send drops the
     * message and still succeeds, and the number stays used (subscribers see
     * the gap and ask for a replay). */
    if (zmq_send(pub->pub, pub->topic, pub->topic_len, ZMQ_SNDMORE) < 0 ||
        zmq_send(pub->pub, seq, sizeof seq, ZMQ_SNDMORE) < 0 ||
        zmq_send(pub->pub, pub->scratch.data, pub->scratch.len, 0) < 0)
        return -1;
    keep(pub, pub->next_seq, pub->scratch.data, pub->scratch.len);
    pub->next_seq++;
    pub->events_sent += n;
    return 0;
}

int kvpi_publisher_drain(kvpi_publisher *pub, kvp_pool *pool, uint64_t *dropped)
{
    const kvp_event *ev;
    size_t n;
    uint64_t lost = 0;
    if (!pub || kvp_events_take(pool, &ev, &n, &lost) != KVP_OK)
        return -2;
    pub->events_dropped += lost;
    if (dropped)
        *dropped = lost;
    return kvpi_publisher_send(pub, ev, n, -1.0);
}

uint64_t kvpi_publisher_next_seq(const kvpi_publisher *pub)
{
    return pub->next_seq;
}

uint64_t kvpi_publisher_events_sent(const kvpi_publisher *pub)
{
    return pub->events_sent;
}

uint64_t kvpi_publisher_events_dropped(const kvpi_publisher *pub)
{
    return pub->events_dropped;
}
