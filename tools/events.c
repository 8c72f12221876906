/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c — `kvpool events`, `kvpool events-demo` and the publisher hook
 * behind `kvpool replay --events` (events.h).
 *
 * What it owns: the CLI side of KV-cache events.  Publishing itself is
 * libkvpool_interop's (interop/) and decoding what a subscriber receives is
 * event_decode.c's; this file opens the sockets (publishers bind and
 * subscribers connect unless told otherwise, as vLLM's do), bounds what the
 * subscriber accepts, and pumps a pool's queue into a publisher.
 *
 * Why built this way: the demo takes the events itself (rather than
 * kvpi_publisher_drain) so that it can print kvpool's own view of them at
 * the end for tests to compare against what arrived.
 */
#define _GNU_SOURCE /* poll, open_memstream */

#include "events.h"

#include "common.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVP_HAVE_INTEROP

static int not_built(const char *what)
{
    return kvpt_error("%s: this kvpool was built without the interop part (ZeroMQ, msgpack, "
                      "libcbor); install libzmq3-dev libmsgpack-dev libcbor-dev and rebuild",
                      what);
}

int kvpt_cmd_events(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return not_built("events");
}

int kvpt_cmd_events_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return not_built("events-demo");
}

int kvpt_events_check(const char *cmd, const char *endpoint, int connect)
{
    (void)cmd;
    (void)endpoint;
    (void)connect;
    return not_built("--events");
}

int kvpt_events_start(const char *endpoint, int connect, const char *topic, double wait_s)
{
    (void)endpoint;
    (void)connect;
    (void)topic;
    (void)wait_s;
    not_built("--events");
    return -1;
}

int kvpt_events_on(void)
{
    return 0;
}

int kvpt_events_pump(kvp_pool *pool)
{
    (void)pool;
    return 0;
}

void kvpt_events_stop(void)
{
}

#else /* KVP_HAVE_INTEROP */

#include "event_decode.h"
#include "kvpool_interop.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <zmq.h>

static void json_cstr(FILE *f, const char *s)
{
    if (s)
        kvpt_json_text(f, s, strlen(s));
    else
        fputs("null", f);
}

/* Check an endpoint named on the command line (kvpi_endpoint_check): a
 * refusal is a usage error of `cmd`, prefixed with the option's name when
 * `opt` is not NULL.  Returns KVPT_EXIT_OK or KVPT_EXIT_USAGE. */
static int endpoint_usage(const char *cmd, const char *opt, const char *ep, int bind)
{
    char err[512];
    if (kvpi_endpoint_check(ep, bind, err, sizeof err) == 0)
        return KVPT_EXIT_OK;
    return opt ? kvpt_usage_error(cmd, "%s: %s", opt, err) : kvpt_usage_error(cmd, "%s", err);
}

/* ------------------------------------------------------------------------ */
/* kvpool events: the subscriber                                            */
/* ------------------------------------------------------------------------ */

static uint64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The largest frame `kvpool events` accepts by default (--max-bytes), and
 * the messages it lets ZeroMQ queue: together they bound its memory. */
#define EVENTS_MAX_BYTES (16u << 20)
#define EVENTS_RCVHWM 64

/* Receive one whole message, keeping at most 3 frames: every frame of a
 * started message is read (a signal does not cut it short), so the socket
 * is never left mid-message.  Returns the frame count, or -1 when nothing
 * could be read. */
static int recv_message(void *sock, zmq_msg_t f[3])
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            if (n && zmq_errno() == EINTR)
                continue;
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 3)
            f[n] = m;
        else
            zmq_msg_close(&m);
        n++;
    }
    return n ? n : -1;
}

/* The SUB socket's monitor: it reports each disconnection, and whether
 * libzmq is connecting again by itself (it does after a peer closed the
 * connection; it does not after a frame over ZMQ_MAXMSGSIZE, a protocol
 * error on its side). */
#define EVENTS_MONITOR "inproc://kvpool-events-monitor"

/* How long after a disconnection the subscriber waits for the monitor's
 * reconnection event (libzmq sends it at once, from the same I/O thread)
 * and for the messages that arrived before it, before it says what
 * happened. */
#define EVENTS_GRACE_S 0.5

/* What the subscriber knows about the stream it follows. */
typedef struct follow {
    const char *ep;
    int bind;
    uint64_t got, expect, lost; /* batches printed; next seq; seqs missed */
    int have_prev;              /* a batch was seen: `expect` is meaningful */
    int gone;                   /* a publisher left without ending its stream */
    double grace_end;           /* > 0: a disconnection awaits its verdict */
    int retrying;               /* libzmq reconnects by itself since then */
} follow;

/* Read one monitor event and note a disconnection, or that libzmq is
 * connecting again by itself. */
static void monitor_event(void *mon, follow *fw)
{
    zmq_msg_t f[3];
    int n = recv_message(mon, f);
    uint16_t id = 0;
    if (n >= 1 && zmq_msg_size(&f[0]) >= 2)
        memcpy(&id, zmq_msg_data(&f[0]), sizeof id); /* host order, by libzmq */
    for (int i = 0; i < n && i < 3; i++)
        zmq_msg_close(&f[i]);
    if (id == ZMQ_EVENT_DISCONNECTED) {
        fw->grace_end = kvpt_now() + EVENTS_GRACE_S;
        fw->retrying = 0;
    } else if (id == ZMQ_EVENT_CONNECT_RETRIED && fw->grace_end > 0) {
        fw->retrying = 1;
    }
}

/* Say what a disconnection without an end-of-stream marker was (every
 * message that arrived before it has been read): the publisher went away
 * (libzmq connects again by itself), or, when connecting, a frame over
 * --max-bytes (libzmq gave up on the connection: make it again; nothing is
 * queued any more, so nothing is dropped). */
static void disconnected(void *sub, follow *fw, uint64_t max_bytes)
{
    fw->grace_end = 0;
    char after[64] = "before any batch";
    if (fw->have_prev)
        snprintf(after, sizeof after, "after batch %" PRIu64, fw->expect - 1);
    if (fw->bind) {
        fw->gone = 1;
        fprintf(stderr, "kvpool events: a publisher disconnected without an end-of-stream "
                        "marker %s (it went away, or sent a frame over --max-bytes); any "
                        "later batches of its stream are lost\n", after);
    } else if (fw->retrying) {
        fw->gone = 1;
        fprintf(stderr, "kvpool events: the publisher at %s went away without an "
                        "end-of-stream marker %s (it was stopped or crashed); any later "
                        "batches are lost; waiting for it to come back\n", fw->ep, after);
    } else {
        fprintf(stderr, "kvpool events: dropped the connection to %s: a frame over "
                        "--max-bytes (%" PRIu64 ") arrived %s; connecting again\n",
                fw->ep, max_bytes, after);
        zmq_disconnect(sub, fw->ep);
        if (zmq_connect(sub, fw->ep) != 0)
            kvpt_error("connect %s: %s", fw->ep, zmq_strerror(zmq_errno()));
    }
}

/* The end-of-stream marker numbered `seq`: the publisher sent batches up
 * to seq - 1.  Report any missing at the end and the totals. */
static void end_of_stream(follow *fw, uint64_t seq)
{
    if (fw->have_prev && seq > fw->expect) {
        if (seq - fw->expect == 1)
            fprintf(stderr, "kvpool events: gap at the end: batch %" PRIu64
                            " never arrived\n", fw->expect);
        else
            fprintf(stderr, "kvpool events: gap at the end: batches %" PRIu64 " to %" PRIu64
                            " never arrived\n", fw->expect, seq - 1);
        fw->lost += seq - fw->expect;
    }
    if (seq == 0)
        fprintf(stderr, "kvpool events: end of stream: the publisher sent no batch\n");
    else
        fprintf(stderr, "kvpool events: end of stream after batch %" PRIu64 " (%" PRIu64
                        " received, %" PRIu64 " lost)\n", seq - 1, fw->got, fw->lost);
}

/* One message from the SUB socket: print a batch, noting any gap before
 * it.  Returns 1 for the end-of-stream marker, else 0. */
static int on_message(void *sub, int json, follow *fw)
{
    zmq_msg_t f[3];
    int n = recv_message(sub, f), end = 0;
    if (n != 3 || zmq_msg_size(&f[1]) != 8) {
        fprintf(stderr, "kvpool events: skipping a message of %d frames\n", n);
    } else {
        uint64_t seq = be64(zmq_msg_data(&f[1]));
        int pr = kvpt_event_print(stdout, json, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), seq,
                                  zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        if (pr == 1) {
            end_of_stream(fw, seq);
            end = 1;
        } else {
            if (fw->have_prev && seq != fw->expect) {
                fprintf(stderr, "kvpool events: gap: expected batch %" PRIu64 ", got %" PRIu64
                                "\n", fw->expect, seq);
                if (seq > fw->expect)
                    fw->lost += seq - fw->expect;
            }
            if (pr)
                fprintf(stderr, "kvpool events: batch %" PRIu64 " is not a msgpack batch\n",
                        seq);
            fw->have_prev = 1;
            fw->expect = seq + 1;
            fw->got++;
        }
    }
    for (int i = 0; i < n && i < 3; i++)
        zmq_msg_close(&f[i]);
    return end;
}

/* Milliseconds from now until `t` (0 when past), for zmq_poll. */
static long ms_until(double t)
{
    double ms = (t - kvpt_now()) * 1000;
    return ms > 0 ? (long)ms + 1 : 0;
}

static const char usage_events[] =
    "usage: kvpool events ENDPOINT [--bind] [--topic T] [--json] [--count N]\n"
    "                     [--timeout S] [--max-bytes N]\n"
    "\n"
    "Subscribe to a KV-cache events publisher (kvpool or vLLM: ZeroMQ PUB, frames\n"
    "topic / sequence / msgpack batch) and print every batch as it arrives.\n"
    "ENDPOINT is connected to (vLLM and llm-d engines bind port 5557), e.g.\n"
    "tcp://127.0.0.1:5557.  Whatever the publisher sends, output is safe: JSON\n"
    "stays valid (invalid UTF-8 as U+FFFD, NaN as null) and no control character\n"
    "reaches the terminal.  Gaps in the sequence numbers are reported on stderr.\n"
    "A kvpool publisher ends its stream with a batch without events: there the\n"
    "command reports any batches missing at the end and stops.  A publisher that\n"
    "goes away without it (stopped or crashed; vLLM's never send one) is reported\n"
    "and waited for.\n"
    "\n"
    "  --bind        bind ENDPOINT instead (the publisher connects); a port '*' is\n"
    "                chosen by the system and printed on stderr\n"
    "  --topic T     subscribe to topics starting with T (default: all); llm-d\n"
    "                names them kv@<pod address>@<model name>\n"
    "  --json        one JSON object per batch: topic, seq, ts, dp_rank, events\n"
    "                (each with \"type\" and its named fields)\n"
    "  --count N     stop after N batches (0, the default: never)\n"
    "  --timeout S   stop after S seconds without a message (0 to 1000000; 0, the\n"
    "                default: never)\n"
    "  --max-bytes N refuse frames longer than N bytes (16 or more; default 16 MiB):\n"
    "                the connection is dropped, then made again\n"
    "\n"
    "Each option may be given once.  Exit status: 0 when no batch was lost, 1 when\n"
    "some were (a gap, or a publisher gone without ending its stream) or on an\n"
    "error, 2 for a bad command line.\n";

/* `kvpool events ENDPOINT`: subscribe (connect, or --bind) and print every
 * batch until the end-of-stream marker, --count or --timeout.  A monitor
 * tells disconnections apart (docs/EVENTS.md): a publisher that ended its
 * stream, one that went away without ending it, a frame over --max-bytes.
 * The SUB socket is never disconnected while messages wait in it (libzmq
 * would drop them, and abort if one is read half), so every message that
 * arrived is printed.  Frames longer than --max-bytes are refused by ZeroMQ
 * before they are stored, and at most EVENTS_RCVHWM messages wait in
 * ZeroMQ's queue (past that the publisher drops them for us, and the gap
 * is reported), so memory stays within EVENTS_RCVHWM x --max-bytes plus a
 * bounded multiple of one message while decoding. */
int kvpt_cmd_events(int argc, char **argv)
{
    const char *topic = "";
    int json = 0, bind = 0;
    uint64_t count = 0, max_bytes = EVENTS_MAX_BYTES;
    double timeout = 0;
    const kvpt_opt opts[] = {
        {"topic", KVPT_OPT_TEXT, &topic, 0, 0, NULL, NULL},
        {"json", KVPT_OPT_FLAG, &json, 0, 0, NULL, NULL},
        {"count", KVPT_OPT_COUNT, &count, 0, UINT64_MAX, "a number of batches", NULL},
        {"timeout", KVPT_OPT_SECONDS, &timeout, 0, KVPT_SECONDS_MAX, NULL, NULL},
        {"bind", KVPT_OPT_FLAG, &bind, 0, 0, NULL, NULL},
        {"max-bytes", KVPT_OPT_COUNT, &max_bytes, 16, INT64_MAX, "a size in bytes", NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"events", usage_events, opts, "ENDPOINT", 1, 1};
    int first, parsed = kvpt_parse_args(&cli, argc, argv, &first);
    if (parsed >= 0)
        return parsed;
    const char *ep = argv[first];
    if (endpoint_usage("events", NULL, ep, bind))
        return KVPT_EXIT_USAGE;

    void *ctx = zmq_ctx_new();
    void *sub = ctx ? zmq_socket(ctx, ZMQ_SUB) : NULL, *mon = NULL;
    int rc = KVPT_EXIT_ERROR;
    int64_t maxmsg = (int64_t)max_bytes;
    int hwm = EVENTS_RCVHWM;
    if (!sub || zmq_setsockopt(sub, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
        zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0) {
        kvpt_error("cannot open a SUB socket");
        goto out;
    }
    if (zmq_socket_monitor(sub, EVENTS_MONITOR,
                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) != 0 ||
        !(mon = zmq_socket(ctx, ZMQ_PAIR)) || zmq_connect(mon, EVENTS_MONITOR) != 0) {
        kvpt_error("cannot monitor the SUB socket: %s", zmq_strerror(zmq_errno()));
        goto out;
    }
    if ((bind ? zmq_bind(sub, ep) : zmq_connect(sub, ep)) != 0 ||
        zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0) {
        kvpt_error("%s %s: %s", bind ? "bind" : "connect", ep, zmq_strerror(zmq_errno()));
        goto out;
    }
    if (bind) { /* say where, when the port was chosen by the system */
        char last[256];
        size_t len = sizeof last;
        if (zmq_getsockopt(sub, ZMQ_LAST_ENDPOINT, last, &len) == 0)
            fprintf(stderr, "kvpool events: listening on %s\n", last);
    }
    follow fw = {ep, bind, 0, 0, 0, 0, 0, 0, 0};
    double last_msg = kvpt_now();
    int ended = 0;
    rc = KVPT_EXIT_OK;
    while (!ended && (!count || fw.got < count)) {
        long wait = timeout > 0 ? ms_until(last_msg + timeout) : -1;
        if (fw.grace_end > 0 && (wait < 0 || ms_until(fw.grace_end) < wait))
            wait = ms_until(fw.grace_end);
        zmq_pollitem_t it[2] = {{sub, 0, ZMQ_POLLIN, 0}, {mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, wait) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            rc = kvpt_error("poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (it[1].revents & ZMQ_POLLIN)
            monitor_event(mon, &fw);
        if (it[0].revents & ZMQ_POLLIN) {
            ended = on_message(sub, json, &fw);
            last_msg = kvpt_now();
            continue; /* a verdict waits until nothing is left to read */
        }
        int timed_out = timeout > 0 && kvpt_now() >= last_msg + timeout;
        if (fw.grace_end > 0 && (timed_out || kvpt_now() >= fw.grace_end))
            disconnected(sub, &fw, max_bytes);
        if (timed_out) {
            fprintf(stderr, "kvpool events: no message for %g s; stopping\n", timeout);
            break;
        }
    }
    if (rc == KVPT_EXIT_OK && (fw.lost || fw.gone))
        rc = KVPT_EXIT_ERROR;
out:
    if (mon) {
        zmq_socket_monitor(sub, NULL, 0);
        zmq_close(mon);
    }
    if (sub) {
        int zero = 0;
        zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(sub);
    }
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The replay hook                                                           */
/* ------------------------------------------------------------------------ */

static kvpi_publisher *g_pub;

int kvpt_events_check(const char *cmd, const char *endpoint, int connect)
{
    return endpoint_usage(cmd, "--events", endpoint, !connect);
}

int kvpt_events_start(const char *endpoint, int connect, const char *topic, double wait_s)
{
    kvpi_publisher_config pc;
    kvpi_publisher_config_default(&pc);
    pc.endpoint = endpoint;
    pc.connect = connect;
    pc.topic = topic;
    char err[512] = "";
    if (kvpi_publisher_create(&pc, &g_pub, err, sizeof err) != 0) {
        kvpt_error("--events: %s", err);
        return -1;
    }
    if (wait_s > 0 && !kvpi_publisher_wait_subscriber(g_pub, (int)(wait_s * 1000)))
        fprintf(stderr, "kvpool: no subscriber on %s after %.1f s; publishing anyway\n",
                kvpi_publisher_endpoint(g_pub), wait_s);
    return 0;
}

int kvpt_events_on(void)
{
    return g_pub != NULL;
}

int kvpt_events_pump(kvp_pool *pool)
{
    if (!g_pub)
        return 0;
    int rc = kvpi_publisher_drain(g_pub, pool, NULL);
    if (rc)
        kvpt_error("publishing events failed (%s)",
                   rc == -2 ? "the pool records no events" : zmq_strerror(zmq_errno()));
    return rc ? -1 : 0;
}

void kvpt_events_stop(void)
{
    if (!g_pub)
        return;
    if (kvpi_publisher_wait_subscriber(g_pub, 0))
        fprintf(stderr,
                "kvpool: published %" PRIu64 " events in %" PRIu64 " batches on %s (%" PRIu64
                " lost to a full queue)\n",
                kvpi_publisher_events_sent(g_pub), kvpi_publisher_next_seq(g_pub),
                kvpi_publisher_endpoint(g_pub), kvpi_publisher_events_dropped(g_pub));
    else
        fprintf(stderr,
                "kvpool: no subscriber connected to %s: %" PRIu64 " events in %" PRIu64
                " batches reached no one\n",
                kvpi_publisher_endpoint(g_pub), kvpi_publisher_events_sent(g_pub),
                kvpi_publisher_next_seq(g_pub));
    kvpi_publisher_destroy(g_pub); /* lingers until sent, at most linger_ms */
    g_pub = NULL;
}

/* ------------------------------------------------------------------------ */
/* kvpool events-demo: a scripted scenario                                  */
/* ------------------------------------------------------------------------ */

#define DEMO_BS 4
#define DEMO_MAXH 64

typedef struct demo {
    kvp_pool *pool;
    kvpi_publisher *pub;
    uint64_t drain_every, steps;
    FILE *view;          /* kvpool's own view, written as the batches go */
    int first_batch;
    kvp_hash known[DEMO_MAXH]; /* every hash the scenario computed */
    size_t nknown;
    uint64_t dropped;
} demo;

static void json_u64s(FILE *f, const uint64_t *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%" PRIu64, i ? "," : "", v[i]);
    fputc(']', f);
}

/* Take the pool's events, note them in the view, publish them. */
static int demo_flush(demo *d)
{
    const kvp_event *ev;
    size_t n;
    uint64_t lost = 0;
    kvp_status st = kvp_events_take(d->pool, &ev, &n, &lost);
    if (st)
        return kvpt_error("kvp_events_take: %s", kvp_strerror(st));
    d->dropped += lost;
    if (!n)
        return 0;
    FILE *f = d->view;
    fputs(d->first_batch ? "[" : ",[", f);
    d->first_batch = 0;
    for (size_t i = 0; i < n; i++) {
        const kvp_event *e = &ev[i];
        fputs(i ? ",{" : "{", f);
        if (e->kind == KVP_EVENT_STORED) {
            fputs("\"type\":\"BlockStored\",\"block_hashes\":", f);
            json_u64s(f, e->hashes, e->n_hashes);
            fputs(",\"parent_block_hash\":", f);
            if (e->has_parent)
                fprintf(f, "%" PRIu64, e->parent);
            else
                fputs("null", f);
            fputs(",\"token_ids\":[", f);
            for (size_t k = 0; k < e->n_tokens; k++)
                fprintf(f, "%s%" PRIu32, k ? "," : "", e->tokens[k]);
            fprintf(f, "],\"block_size\":%" PRIu32 ",\"medium\":", e->block_size);
            json_cstr(f, e->medium);
            fputs(",\"lora_name\":", f);
            json_cstr(f, e->lora_name);
            fprintf(f, ",\"n_mm\":%zu", e->n_mm);
        } else if (e->kind == KVP_EVENT_REMOVED) {
            fputs("\"type\":\"BlockRemoved\",\"block_hashes\":", f);
            json_u64s(f, e->hashes, e->n_hashes);
            fputs(",\"medium\":", f);
            json_cstr(f, e->medium);
        } else {
            fputs("\"type\":\"AllBlocksCleared\"", f);
        }
        fputc('}', f);
    }
    fputc(']', f);
    if (kvpi_publisher_send(d->pub, ev, n, -1.0))
        return kvpt_error("publishing failed: %s", zmq_strerror(zmq_errno()));
    return 0;
}

/* One scenario step done: publish every `drain_every` steps. */
static int demo_step(demo *d)
{
    d->steps++;
    return d->steps % d->drain_every ? 0 : demo_flush(d);
}

static void demo_know(demo *d, const uint32_t *t, size_t n, const kvp_extra_keys *x)
{
    kvp_hash hs[16];
    size_t nh = 0;
    if (kvp_hash_tokens(d->pool, t, n, x, hs, 16, 0, &nh) != KVP_OK)
        return;
    for (size_t i = 0; i < nh && d->nknown < DEMO_MAXH; i++)
        d->known[d->nknown++] = hs[i];
}

/* Create sequence `id` and admit tokens[0..n). */
static int demo_admit(demo *d, uint64_t id, const uint32_t *t, size_t n,
                      const kvp_extra_keys *x, kvp_seq **out)
{
    size_t cached;
    kvp_status st = kvp_seq_create(d->pool, id, x, out);
    if (!st)
        st = kvp_seq_admit(*out, t, n, &cached);
    if (st)
        return kvpt_error("sequence %" PRIu64 ": %s", id, kvp_strerror(st));
    demo_know(d, t, n, x);
    return demo_step(d);
}

static void fill(uint32_t *t, size_t n, uint32_t base)
{
    for (size_t i = 0; i < n; i++)
        t[i] = base + (uint32_t)i;
}

/* The scenario (docs/EVENTS.md): admit, hit, append, evict, reuse, reset,
 * LoRA + multimodal. */
static int demo_run(demo *d)
{
    uint32_t a[20], b[13], c[32], e[9];
    fill(a, 20, 1000);             /* prompt A: 17 tokens, then 3 appended */
    memcpy(b, a, 8 * sizeof *b);   /* prompt B: A's first two blocks + 5 */
    fill(b + 8, 5, 2000);
    fill(c, 32, 3000);             /* prompt C: 8 full blocks, forces reuse */
    fill(e, 9, 4000);              /* prompt E: LoRA and an image */
    kvp_seq *s1, *s2, *s3, *s4;
    kvp_status st;
    if (demo_admit(d, 1, a, 17, NULL, &s1) || demo_admit(d, 2, b, 13, NULL, &s2))
        return -1;
    if ((st = kvp_seq_append(s1, a + 17, 3)) != KVP_OK)
        return kvpt_error("append: %s", kvp_strerror(st));
    demo_know(d, a, 20, NULL);
    if (demo_step(d))
        return -1;
    kvp_seq_destroy(s2);
    kvp_seq_destroy(s1);
    if (demo_step(d))
        return -1;
    uint32_t got;
    if ((st = kvp_evict(d->pool, KVP_STREAM_SHARED, 2, &got)) != KVP_OK)
        return kvpt_error("evict: %s", kvp_strerror(st));
    if (demo_step(d) || demo_admit(d, 3, c, 32, NULL, &s3))
        return -1;
    kvp_seq_destroy(s3);
    if (demo_step(d))
        return -1;
    if ((st = kvp_reset_prefix_cache(d->pool)) != KVP_OK)
        return kvpt_error("reset: %s", kvp_strerror(st));
    if (demo_step(d))
        return -1;
    kvp_mm_span img = {{{0}}, 1, 3};
    for (int i = 0; i < 32; i++)
        img.hash.b[i] = (uint8_t)(0xa0 + i);
    kvp_extra_keys x = {1, 1, "demo-lora", &img, 1, NULL, 0};
    if (demo_admit(d, 4, e, 9, &x, &s4))
        return -1;
    kvp_seq_destroy(s4);
    if (demo_step(d))
        return -1;
    return demo_flush(d); /* whatever is left */
}

/* Wait until stdin closes or `hold` seconds pass (replay keeps answering). */
static void demo_hold(double hold)
{
    double end = kvpt_now() + hold;
    while (kvpt_now() < end) {
        struct pollfd p = {STDIN_FILENO, POLLIN, 0};
        int r = poll(&p, 1, 100);
        if (r > 0) {
            char buf[256];
            if (read(STDIN_FILENO, buf, sizeof buf) <= 0)
                return; /* EOF: the test is done with us */
        } else if (r < 0) {
            return;
        }
    }
}

static const char usage_events_demo[] =
    "usage: kvpool events-demo ENDPOINT [--connect] [--replay EP] [--topic T]\n"
    "                          [--events-wait S] [--event-capacity N]\n"
    "                          [--drain-every N] [--hold S]\n"
    "\n"
    "Run a scripted scenario through sequences on a pool with events on (admit, hit,\n"
    "append, evict, reuse, reset, LoRA + multimodal) and publish its events on\n"
    "ENDPOINT, bound (e.g. tcp://127.0.0.1:*).  Prints one JSON line\n"
    "with the endpoints, and at the end one with kvpool's own view: batches,\n"
    "events_sent, events_dropped, indexed (external hashes), view (the events of\n"
    "each batch).\n"
    "\n"
    "  --connect            connect to ENDPOINT instead (the subscriber binds)\n"
    "  --replay EP          bind a replay ROUTER socket at EP\n"
    "  --topic T            topic (default kv@127.0.0.1@kvpool-demo)\n"
    "  --events-wait S      wait up to S seconds for a subscriber first (default 2)\n"
    "  --event-capacity N   the pool's event queue, in hashes, 1 to 1000000\n"
    "                       (default 4096)\n"
    "  --drain-every N      publish after every N scenario steps, 1 to 1000\n"
    "                       (default 1)\n"
    "  --hold S             afterwards keep answering replay requests for up to S\n"
    "                       seconds, or until standard input closes\n"
    "\n"
    "Each option may be given once; seconds are 0 to 1000000.\n";

/* `kvpool events-demo ENDPOINT`: run the scripted scenario and publish its
 * events; prints the endpoints first and kvpool's own view last. */
int kvpt_cmd_events_demo(int argc, char **argv)
{
    kvpi_publisher_config pc;
    kvpi_publisher_config_default(&pc);
    pc.topic = "kv@127.0.0.1@kvpool-demo";
    double wait_s = 2, hold = 0;
    uint64_t capacity = 0, every = 1;
    const kvpt_opt opts[] = {
        {"topic", KVPT_OPT_TEXT, &pc.topic, 0, 0, NULL, NULL},
        {"replay", KVPT_OPT_TEXT, &pc.replay_endpoint, 0, 0, NULL, NULL},
        {"events-wait", KVPT_OPT_SECONDS, &wait_s, 0, KVPT_SECONDS_MAX, NULL, NULL},
        {"event-capacity", KVPT_OPT_COUNT, &capacity, 1, 1000000, "a number of hashes",
         NULL},
        {"drain-every", KVPT_OPT_COUNT, &every, 1, 1000, "a number of steps", NULL},
        {"hold", KVPT_OPT_SECONDS, &hold, 0, KVPT_SECONDS_MAX, NULL, NULL},
        {"connect", KVPT_OPT_FLAG, &pc.connect, 0, 0, NULL, NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {"events-demo", usage_events_demo, opts, "ENDPOINT", 1, 1};
    int first, parsed = kvpt_parse_args(&cli, argc, argv, &first);
    if (parsed >= 0)
        return parsed;
    pc.endpoint = argv[first];
    if (endpoint_usage("events-demo", NULL, pc.endpoint, !pc.connect) ||
        (pc.replay_endpoint && endpoint_usage("events-demo", "--replay", pc.replay_endpoint, 1)))
        return KVPT_EXIT_USAGE;

    demo d;
    memset(&d, 0, sizeof d);
    d.drain_every = every;
    d.first_batch = 1;
    char err[512] = "";
    if (kvpi_publisher_create(&pc, &d.pub, err, sizeof err) != 0)
        return kvpt_error("events-demo: %s", err);
    const char *rep = kvpi_publisher_replay_endpoint(d.pub);
    fputs("{\"endpoint\":", stdout);
    json_cstr(stdout, kvpi_publisher_endpoint(d.pub));
    fputs(",\"replay_endpoint\":", stdout);
    json_cstr(stdout, rep);
    fputs("}\n", stdout);
    fflush(stdout);

    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = DEMO_BS;
    cfg.num_blocks = 10; /* small: prompt C must reuse cached blocks */
    cfg.events = 1;
    cfg.event_capacity = (uint32_t)capacity;
    kvp_status st = kvp_pool_create(&cfg, &d.pool);
    int rc = KVPT_EXIT_ERROR;
    char *view = NULL;
    size_t view_len = 0;
    d.view = open_memstream(&view, &view_len);
    if (st || !d.view) {
        kvpt_error("events-demo: %s", st ? kvp_strerror(st) : "out of memory");
        goto out;
    }
    if (wait_s > 0 && !kvpi_publisher_wait_subscriber(d.pub, (int)(wait_s * 1000)))
        fprintf(stderr, "kvpool events-demo: no subscriber after %.1f s; publishing anyway\n",
                wait_s);
    if (demo_run(&d))
        goto out;
    fclose(d.view);
    d.view = NULL;

    kvp_stats stats;
    kvp_stats_get(d.pool, &stats);
    uint64_t indexed[DEMO_MAXH];
    size_t nidx = 0;
    for (size_t i = 0; i < d.nknown; i++) {
        kvp_block blk;
        if (kvp_lookup(d.pool, KVP_STREAM_SHARED, &d.known[i], &blk) != KVP_OK)
            continue;
        uint64_t h = kvp_hash_external(&d.known[i]);
        size_t k = 0;
        while (k < nidx && indexed[k] != h)
            k++;
        if (k == nidx)
            indexed[nidx++] = h;
    }
    printf("{\"done\":true,\"batches\":%" PRIu64 ",\"events_sent\":%" PRIu64
           ",\"events_dropped\":%" PRIu64 ",\"stats_events_dropped\":%" PRIu64
           ",\"block_size\":%d,\"indexed\":",
           kvpi_publisher_next_seq(d.pub), kvpi_publisher_events_sent(d.pub), d.dropped,
           stats.events_dropped, DEMO_BS);
    json_u64s(stdout, indexed, nidx);
    printf(",\"view\":[%s]}\n", view ? view : "");
    fflush(stdout);
    demo_hold(hold);
    rc = KVPT_EXIT_OK;
out:
    if (d.view)
        fclose(d.view);
    free(view);
    kvp_pool_destroy(d.pool);
    kvpi_publisher_destroy(d.pub);
    return rc;
}

#endif /* KVP_HAVE_INTEROP */
