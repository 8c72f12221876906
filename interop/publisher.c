/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.c — the KV-cache events publisher: ZeroMQ sockets, batch
 * numbering, the replay buffer and the service thread that sends batches,
 * reads subscriptions and answers replay requests.
 *
 * What it owns: kvpi_publisher and its sockets.  Every batch goes out as
 * exactly three frames — topic, sequence number (8 bytes, big-endian),
 * msgpack payload (encode.c) — the layout of vLLM's ZmqEventPublisher, so
 * its subscribers work unchanged (docs/EVENTS.md).
 *
 * Invariants:
 * - The caller's thread shares no lock and no socket with anything a peer
 *   can slow down.  kvpi_publisher_send encodes the batch, copies it into a
 *   reference-counted kept_batch and hands the pointer to the service thread
 *   over an inproc PAIR socket (ZeroMQ's lock-free pipe; ZMQ_DONTWAIT).
 *   That is all: O(batch), whatever subscribers and replay clients do.
 * - Only the service thread touches the XPUB, the ROUTER and the replay
 *   ring, so the ring needs no lock and nothing is held across a send.
 * - Kept batches are reference counted: the ring holds one reference, each
 *   frame in flight another (zmq_msg_init_data with a release callback), so
 *   publishing and replay send without copying and a batch leaving the ring
 *   stays alive until ZeroMQ is done with it.
 * - A destroyed publisher's last message is the end-of-stream marker (a
 *   batch without events, numbered next), after every batch it sent: its
 *   subscribers learn the last sequence number and that the stream ended.
 * - Every receiving socket bounds its frames (ZMQ_MAXMSGSIZE: a peer that
 *   sends a longer one is disconnected before it is stored) and its queue
 *   (ZMQ_RCVHWM), and each turn of the service loop reads a bounded number
 *   of messages, so no peer can make the publisher hold more than a fixed
 *   amount per connection.
 *
 * Why built this way:
 * - Encoding happens on the caller's thread: kvp_events_take hands out a
 *   buffer valid only until the next take, so encoding right there needs no
 *   copy of the events.
 * - The socket is an XPUB rather than a PUB: it behaves the same for
 *   subscribers, and also delivers their subscriptions, which is how
 *   kvpi_publisher_wait_subscriber sees one arrive (ZeroMQ's slow-joiner
 *   problem: messages sent before a subscription is in place are lost).  It
 *   runs in manual mode (ZMQ_XPUB_MANUAL): the service thread applies only
 *   filters that match the topic, so what peers subscribe to cannot grow the
 *   socket's subscription trie beyond the topic's prefixes.
 * - PUB-like sockets never block: past the high-water mark a slow subscriber
 *   loses messages and recovers them through replay.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvpool_interop.h"
#include "errmsg.h"
#include "publisher_hooks.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#define FORWARD_CHUNK 1024 /* batches forwarded per turn of the service loop */
#define SUB_CHUNK 64       /* subscription messages read per turn */
#define SERVICE_POLL_MS 5  /* the service thread's idle wait */
#define XPUB_RCVHWM 64     /* subscription messages queued per peer */
#define ROUTER_RCVHWM 16   /* replay requests queued per client */
#define HANDOFF_EP "inproc://kvpi-handoff"

/* One sent payload, shared by the ring and the frames in flight. */
typedef struct kept_batch {
    atomic_uint refs;
    uint64_t seq;
    size_t len;
    uint8_t data[];
} kept_batch;

struct kvpi_publisher {
    void *ctx;
    void *give;    /* PAIR: the caller's end of the hand-off */
    void *take;    /* PAIR: the service thread's end */
    void *pub;     /* XPUB, the service thread's */
    void *router;  /* replay ROUTER, the service thread's; NULL: none */
    char *topic;
    size_t topic_len;
    int64_t dp_rank;
    int linger_ms;
    char endpoint[256];
    char replay_ep[256];
    atomic_int subscribed;

    /* the caller's */
    uint64_t next_seq;
    uint64_t events_sent, events_dropped;
    kvpi_buf scratch; /* reused encoding buffer */

    /* the service thread's: the newest `count` batches, oldest at `head`,
     * sequence numbers increasing */
    kept_batch **ring;
    uint32_t ring_cap, head, count;
    pthread_t thread;
    bool thread_running;
    atomic_int stop;
    _Atomic(kvpi__replay_hook) hook;
    void *_Atomic hook_arg;
};

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
/* Endpoints                                                                 */
/* ------------------------------------------------------------------------ */

/* Checks tcp://HOST:PORT (the part after a "source;" prefix); see the
 * header.  Resolves HOST only for a connect. */
int kvpi_endpoint_check(const char *ep, int bind, char *err, size_t errcap)
{
    if (!ep || !*ep) {
        kvpi__set_err(err, errcap, "no endpoint given");
        return -1;
    }
    if (!strstr(ep, "://")) {
        kvpi__set_err(err, errcap,
                "'%s' is not an endpoint (expected TRANSPORT://ADDRESS, e.g. "
                "tcp://127.0.0.1:5557)", ep);
        return -1;
    }
    if (strncmp(ep, "tcp://", 6) != 0)
        return 0; /* ipc://, inproc://: ZeroMQ checks them synchronously */
    const char *addr = ep + 6;
    const char *semi = strrchr(addr, ';');
    if (semi)
        addr = semi + 1;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) {
        kvpi__set_err(err, errcap, "%s: expected tcp://HOST:PORT", ep);
        return -1;
    }
    const char *port = colon + 1;
    if (strcmp(port, "*") == 0) {
        if (!bind) {
            kvpi__set_err(err, errcap, "%s: port '*' (chosen by the system) can only be bound", ep);
            return -1;
        }
    } else {
        unsigned long v = 0;
        size_t nd = strspn(port, "0123456789");
        if (nd == 0 || nd > 5 || port[nd] != '\0' || (v = strtoul(port, NULL, 10)) < 1 ||
            v > 65535) {
            kvpi__set_err(err, errcap,
                    "%s: port '%s' is not in 1..65535%s", ep, port,
                    bind ? " (or '*' for a port chosen by the system)" : "");
            return -1;
        }
    }
    char host[256];
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') { /* [IPv6] */
        addr++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof host) {
        kvpi__set_err(err, errcap, "%s: %s host", ep, hl ? "over-long" : "empty");
        return -1;
    }
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (strcmp(host, "*") == 0) {
        if (!bind) {
            kvpi__set_err(err, errcap, "%s: cannot connect to host '*' (bind it, or name a host)",
                          ep);
            return -1;
        }
        return 0;
    }
    if (bind)
        return 0; /* zmq_bind resolves interfaces synchronously and says why */
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        kvpi__set_err(err, errcap, "%s: cannot resolve host '%s': %s", ep, host, gai_strerror(rc));
        return -1;
    }
    freeaddrinfo(res);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Kept batches                                                              */
/* ------------------------------------------------------------------------ */

static void kept_unref(kept_batch *k)
{
    if (k && atomic_fetch_sub(&k->refs, 1) == 1)
        free(k);
}

/* zmq_msg_init_data's release callback: a frame has left. */
static void kept_release(void *data, void *hint)
{
    (void)data;
    kept_unref(hint);
}

/* Send k's payload as the last frame of a message, sharing it (one more
 * reference, released by ZeroMQ).  Returns 0, or -1. */
static int send_payload(void *sock, kept_batch *k)
{
    zmq_msg_t m;
    atomic_fetch_add(&k->refs, 1);
    if (zmq_msg_init_data(&m, k->data, k->len, kept_release, k) != 0) {
        kept_unref(k);
        return -1;
    }
    if (zmq_msg_send(&m, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m); /* releases the reference */
        return -1;
    }
    return 0;
}

/* The ring takes over the caller's reference to k; the oldest batch goes
 * when it is full.  Without replay, k is simply released. */
static void ring_keep(kvpi_publisher *p, kept_batch *k)
{
    if (!p->ring_cap) {
        kept_unref(k);
        return;
    }
    if (p->count == p->ring_cap) {
        kept_unref(p->ring[p->head]);
        p->ring[p->head] = k;
        p->head = (p->head + 1) % p->ring_cap;
    } else {
        p->ring[(p->head + p->count) % p->ring_cap] = k;
        p->count++;
    }
}

/* Position in the ring of the first batch numbered `from` or later
 * (count when none).  O(log count). */
static uint32_t ring_find(const kvpi_publisher *p, uint64_t from)
{
    uint32_t lo = 0, hi = p->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->ring[(p->head + mid) % p->ring_cap]->seq < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ------------------------------------------------------------------------ */
/* The service thread                                                        */
/* ------------------------------------------------------------------------ */

/* Forward up to `max` handed-off batches to the subscribers, then keep them
 * for replay.  Returns the number forwarded. */
static int forward_batches(kvpi_publisher *p, int max)
{
    int n = 0;
    for (; n < max; n++) {
        kept_batch *k;
        if (zmq_recv(p->take, &k, sizeof k, ZMQ_DONTWAIT) != (int)sizeof k)
            break;
        uint8_t seq[8];
        put_be64(seq, k->seq);
        /* past a subscriber's high-water mark the message is dropped for it
         * (the number stays used: it sees the gap and asks for a replay) */
        if (zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
            zmq_send(p->pub, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
            send_payload(p->pub, k);
        ring_keep(p, k);
    }
    return n;
}

/* Read up to SUB_CHUNK subscription messages; apply (manual mode) those
 * whose filter matches the topic — a prefix of it, as ZeroMQ matches — and
 * note that a subscriber is there.  Returns the number read. */
static int read_subscriptions(kvpi_publisher *p)
{
    int got = 0;
    for (; got < SUB_CHUNK; got++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->pub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        const uint8_t *d = zmq_msg_data(&m);
        size_t n = zmq_msg_size(&m);
        /* 1 + filter: subscribe; 0 + filter: unsubscribe */
        if (n >= 1 && d[0] <= 1 && n - 1 <= p->topic_len &&
            memcmp(d + 1, p->topic, n - 1) == 0 &&
            zmq_setsockopt(p->pub, d[0] ? ZMQ_SUBSCRIBE : ZMQ_UNSUBSCRIBE, d + 1, n - 1) == 0 &&
            d[0])
            atomic_store(&p->subscribed, 1);
        zmq_msg_close(&m);
    }
    return got;
}

/* Receive one whole multipart message into at most `max` frames (the rest
 * are discarded).  Returns the frame count, or -1. */
static int recv_frames(void *sock, zmq_msg_t *frames, int max)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
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

/* Send [identity, "", seq] ahead of a payload frame, without waiting. */
static int send_head(void *router, const void *id, size_t id_len, const uint8_t seq[8])
{
    if (zmq_send(router, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(router, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    return 0;
}

/* Answer one request: [identity, "", start (8 bytes BE)] gets every kept
 * batch numbered start or later, oldest first, then the end marker
 * (sequence -1, empty payload).  Malformed requests are ignored, as vLLM
 * does.  Frames share the kept payloads; nothing is copied.  Returns 1 when
 * a request was read, else 0. */
static int serve_replay(kvpi_publisher *p)
{
    zmq_msg_t f[3];
    int n = recv_frames(p->router, f, 3);
    if (n < 0)
        return 0;
    if (n == 3 && zmq_msg_size(&f[1]) == 0 && zmq_msg_size(&f[2]) == 8) {
        const void *id = zmq_msg_data(&f[0]);
        size_t id_len = zmq_msg_size(&f[0]);
        for (uint32_t i = ring_find(p, get_be64(zmq_msg_data(&f[2]))); i < p->count; i++) {
            kept_batch *k = p->ring[(p->head + i) % p->ring_cap];
            kvpi__replay_hook hook = atomic_load(&p->hook);
            if (hook)
                hook(p, atomic_load(&p->hook_arg));
            uint8_t seq[8];
            put_be64(seq, k->seq);
            if (send_head(p->router, id, id_len, seq) != 0 || send_payload(p->router, k) != 0)
                break;
        }
        static const uint8_t end_seq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        if (send_head(p->router, id, id_len, end_seq) == 0)
            zmq_send(p->router, "", 0, ZMQ_DONTWAIT);
    }
    for (int i = 0; i < n && i < 3; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

/* The service loop: each turn forwards handed-off batches, reads a chunk of
 * subscriptions and answers at most one replay request, then waits up to
 * SERVICE_POLL_MS for more.  On stop, forwards whatever is still handed
 * off, so destroy's linger covers every batch sent. */
static void *service_thread(void *arg)
{
    kvpi_publisher *p = arg;
    while (!atomic_load(&p->stop)) {
        int busy = forward_batches(p, FORWARD_CHUNK) == FORWARD_CHUNK;
        busy |= read_subscriptions(p) == SUB_CHUNK;
        if (p->router)
            busy |= serve_replay(p);
        zmq_pollitem_t it[3] = {{p->take, 0, ZMQ_POLLIN, 0},
                                {p->pub, 0, ZMQ_POLLIN, 0},
                                {p->router, 0, ZMQ_POLLIN, 0}};
        if (!busy && zmq_poll(it, p->router ? 3 : 2, SERVICE_POLL_MS) < 0 &&
            zmq_errno() != EINTR)
            break;
    }
    while (forward_batches(p, FORWARD_CHUNK) > 0)
        ;
    return NULL;
}

void kvpi__publisher_set_replay_hook(kvpi_publisher *pub, kvpi__replay_hook fn, void *arg)
{
    atomic_store(&pub->hook_arg, arg);
    atomic_store(&pub->hook, fn);
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                                */
/* ------------------------------------------------------------------------ */

static void close_socket(void *sock, int linger_ms)
{
    if (sock) {
        zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        zmq_close(sock);
    }
}

/* End the stream: after every batch, the end-of-stream marker — a batch
 * without events, numbered next — on the XPUB (the caller's once the
 * service thread has stopped; never kept for replay).  Dropped for a
 * subscriber at its high-water mark, like any batch. */
static void end_stream(kvpi_publisher *p)
{
    uint8_t seq[8];
    put_be64(seq, p->next_seq);
    if (kvpi_encode_batch(NULL, 0, kvpi_now(), p->dp_rank, &p->scratch) == 0 &&
        zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
        zmq_send(p->pub, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
        zmq_send(p->pub, p->scratch.data, p->scratch.len, ZMQ_DONTWAIT);
}

/* Stop the service thread once it has forwarded every batch handed to it,
 * end a running publisher's stream, let queued messages leave for up to
 * the linger, free everything. */
static void close_all(kvpi_publisher *p)
{
    if (p->thread_running) {
        atomic_store(&p->stop, 1);
        pthread_join(p->thread, NULL);
        p->thread_running = false;
        end_stream(p);
    }
    close_socket(p->give, 0);
    close_socket(p->take, 0);
    close_socket(p->router, 0);
    close_socket(p->pub, p->linger_ms);
    if (p->ctx)
        zmq_ctx_term(p->ctx); /* releases every frame still in flight */
    for (uint32_t i = 0; i < p->count; i++)
        kept_unref(p->ring[(p->head + i) % p->ring_cap]);
    free(p->ring);
    free(p->topic);
    kvpi_buf_free(&p->scratch);
    free(p);
}

/* Socket options that bound what a peer can make a receiving socket hold. */
static int bound_receive(void *sock, int64_t max_frame, int rcvhwm)
{
    return zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) ||
           zmq_setsockopt(sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
}

/* Open, bound and attach the XPUB socket.  Returns 0, or -1 with err set. */
static int open_pub(kvpi_publisher *p, const kvpi_publisher_config *cfg, char *err,
                    size_t errcap)
{
    const char *ep = cfg->endpoint ? cfg->endpoint : KVPI_DEFAULT_ENDPOINT;
    bool bind = !cfg->connect;
    if (kvpi_endpoint_check(ep, bind, err, errcap) != 0)
        return -1;
    p->pub = zmq_socket(p->ctx, ZMQ_XPUB);
    int hwm = cfg->sndhwm > 0 ? cfg->sndhwm : 100000, one = 1;
    int64_t max_sub = (int64_t)p->topic_len + 1 > KVPI_MAX_SUBSCRIPTION
                          ? (int64_t)p->topic_len + 1
                          : KVPI_MAX_SUBSCRIPTION;
    if (!p->pub || zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm) ||
        zmq_setsockopt(p->pub, ZMQ_XPUB_MANUAL, &one, sizeof one) ||
        bound_receive(p->pub, max_sub, XPUB_RCVHWM)) {
        kvpi__set_err(err, errcap, "cannot open the PUB socket: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    if ((bind ? zmq_bind(p->pub, ep) : zmq_connect(p->pub, ep)) != 0) {
        kvpi__set_err(err, errcap, "cannot %s %s: %s", bind ? "bind" : "connect to", ep,
                      zmq_strerror(zmq_errno()));
        return -1;
    }
    size_t len = sizeof p->endpoint;
    if (!bind || zmq_getsockopt(p->pub, ZMQ_LAST_ENDPOINT, p->endpoint, &len) != 0)
        snprintf(p->endpoint, sizeof p->endpoint, "%s", ep);
    /* the hand-off holds as many batches as a subscriber may lag */
    p->take = zmq_socket(p->ctx, ZMQ_PAIR);
    p->give = zmq_socket(p->ctx, ZMQ_PAIR);
    if (!p->take || !p->give || zmq_setsockopt(p->take, ZMQ_RCVHWM, &hwm, sizeof hwm) ||
        zmq_setsockopt(p->give, ZMQ_SNDHWM, &hwm, sizeof hwm) ||
        zmq_bind(p->take, HANDOFF_EP) || zmq_connect(p->give, HANDOFF_EP)) {
        kvpi__set_err(err, errcap, "cannot open the hand-off socket: %s",
                      zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* Open, bound and bind the replay ROUTER.  Returns 0, or -1 with err set. */
static int open_router(kvpi_publisher *p, const char *ep, char *err, size_t errcap)
{
    if (kvpi_endpoint_check(ep, 1, err, errcap) != 0)
        return -1;
    p->router = zmq_socket(p->ctx, ZMQ_ROUTER);
    /* room for one whole replay per client: frames share the kept payloads */
    int sndhwm = p->ring_cap < INT32_MAX - 2 ? (int)p->ring_cap + 2 : INT32_MAX;
    if (!p->router || zmq_setsockopt(p->router, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm) ||
        bound_receive(p->router, KVPI_MAX_REPLAY_REQUEST, ROUTER_RCVHWM) ||
        zmq_bind(p->router, ep) != 0) {
        kvpi__set_err(err, errcap, "cannot bind the replay socket at %s: %s", ep,
                      zmq_strerror(zmq_errno()));
        return -1;
    }
    size_t len = sizeof p->replay_ep;
    if (zmq_getsockopt(p->router, ZMQ_LAST_ENDPOINT, p->replay_ep, &len) != 0)
        snprintf(p->replay_ep, sizeof p->replay_ep, "%s", ep);
    return 0;
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
        kvpi__set_err(err, errcap, "no output pointer");
        return -1;
    }
    kvpi_publisher *p = calloc(1, sizeof *p);
    if (!p) {
        kvpi__set_err(err, errcap, "out of memory");
        return -1;
    }
    p->dp_rank = cfg->dp_rank;
    p->linger_ms = cfg->linger_ms;
    const char *topic = cfg->topic ? cfg->topic : "";
    p->topic_len = strlen(topic);
    p->topic = malloc(p->topic_len + 1);
    p->ring_cap = cfg->replay_endpoint ? cfg->replay_batches : 0;
    p->ring = p->ring_cap ? calloc(p->ring_cap, sizeof *p->ring) : NULL;
    p->ctx = zmq_ctx_new();
    if (!p->topic || (p->ring_cap && !p->ring) || !p->ctx) {
        kvpi__set_err(err, errcap, "out of memory");
        goto fail;
    }
    memcpy(p->topic, topic, p->topic_len + 1);
    if (open_pub(p, cfg, err, errcap) != 0 ||
        (cfg->replay_endpoint && open_router(p, cfg->replay_endpoint, err, errcap) != 0))
        goto fail;
    if (pthread_create(&p->thread, NULL, service_thread, p) != 0) {
        kvpi__set_err(err, errcap, "cannot start the publisher's service thread");
        goto fail;
    }
    p->thread_running = true;
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

int kvpi_publisher_wait_subscriber(kvpi_publisher *pub, int timeout_ms)
{
    double deadline = kvpi_now() + (timeout_ms < 0 ? 1e12 : timeout_ms / 1000.0);
    while (!atomic_load(&pub->subscribed) && kvpi_now() < deadline)
        zmq_poll(NULL, 0, SERVICE_POLL_MS); /* a sleep */
    return atomic_load(&pub->subscribed);
}

/* ------------------------------------------------------------------------ */
/* Publishing                                                                */
/* ------------------------------------------------------------------------ */

int kvpi_publisher_send(kvpi_publisher *pub, const kvp_event *events, size_t n, double timestamp)
{
    if (!pub || (n && !events))
        return -1;
    if (n == 0)
        return 0;
    if (kvpi_encode_batch(events, n, timestamp < 0 ? kvpi_now() : timestamp, pub->dp_rank,
                          &pub->scratch))
        return -1;
    kept_batch *k = malloc(sizeof *k + pub->scratch.len);
    if (!k)
        return -1;
    atomic_init(&k->refs, 1);
    k->seq = pub->next_seq;
    k->len = pub->scratch.len;
    memcpy(k->data, pub->scratch.data, k->len);
    /* the pointer itself crosses the lock-free pipe; the service thread
     * owns the reference from here.  EAGAIN: sndhwm batches are waiting. */
    if (zmq_send(pub->give, &k, sizeof k, ZMQ_DONTWAIT) != (int)sizeof k) {
        free(k);
        return -1;
    }
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
