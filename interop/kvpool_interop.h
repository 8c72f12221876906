/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvpool_interop.h — the optional interop part of kvpool: libkvpool_interop.
 *
 * What it owns: (1) the KV-cache events publisher, which drains a pool's
 * event queue (kvp_events_take) and sends each batch over a ZeroMQ PUB
 * socket in the wire format vLLM's ZmqEventPublisher uses, so routers built
 * for vLLM (llm-d's KV-cache indexer, the vLLM example subscriber) can follow
 * a kvpool-managed cache; (2) the msgpack encoding of one batch, exposed on
 * its own so it can be tested byte for byte; (3) a block hash function for
 * KVP_HASH_CUSTOM that reproduces vLLM's `sha256_cbor` block hashes; (4) a
 * Redis block store: the bytes of cached blocks kept on Redis servers under
 * their block hash, stored and loaded asynchronously (docs/TIERS.md).
 *
 * Why a separate library: the core (libkvpool) depends only on libc,
 * pthreads, libcrypto and libxxhash (ARCHITECTURE.md).  ZeroMQ, msgpack-c,
 * libcbor and hiredis live here, behind the public kvpool.h API only, so an engine
 * that does not publish events never links them.  docs/EVENTS.md describes
 * the wire format, topics, endpoints, replay and the hash mode.
 *
 * Thread rules: a publisher is used by one thread at a time (the caller's);
 * it runs one internal service thread of its own, which sends the batches,
 * reads subscriptions and answers replay requests.  A Redis store's calls
 * may come from any thread (their header says which); it runs one service
 * thread of its own, which alone talks to the servers.  The encoder,
 * kvpi_endpoint_check and the hash function are pure and thread-safe.
 */
#ifndef KVPOOL_INTEROP_H
#define KVPOOL_INTEROP_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* A growable byte buffer (malloc'd).  Start zeroed; free with
 * kvpi_buf_free. */
typedef struct kvpi_buf {
    uint8_t *data;
    size_t len, cap;
} kvpi_buf;

void kvpi_buf_free(kvpi_buf *b);

/* No data-parallel rank: the third element of the payload is nil. */
#define KVPI_NO_DP_RANK INT64_MIN

/*
 * Encode one batch as the msgpack payload vLLM publishes:
 *   [timestamp (float64 seconds), [event...], data_parallel_rank or nil]
 * with each event a positional array whose first element is its tag:
 *   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
 *    lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
 *    kv_cache_spec_sliding_window]
 *   ["BlockRemoved", block_hashes, medium, group_idx]
 *   ["AllBlocksCleared"]
 * Hashes are unsigned integers (kvpool's external hashes), lora_id nil,
 * group_idx 0, the two kv_cache_spec fields nil; extra_keys nil unless the
 * event names multimodal inputs (docs/EVENTS.md gives that encoding).
 * `dp_rank` KVPI_NO_DP_RANK encodes nil.  Replaces out's contents.
 * Returns 0, or -1 when memory runs out or an event is malformed (also: more
 * than UINT32_MAX events, hashes or tokens, the most a msgpack array holds).
 */
int kvpi_encode_batch(const kvp_event *events, size_t n, double timestamp, int64_t dp_rank,
                      kvpi_buf *out);

/* Seconds since the Unix epoch (CLOCK_REALTIME), as batches carry them. */
double kvpi_now(void);

/* ------------------------------------------------------------------------ */
/* Publisher                                                                 */
/* ------------------------------------------------------------------------ */

/* The llm-d convention for topics is "kv@<pod address>@<model name>".  The
 * engine binds its PUB socket and subscribers connect; the default binds
 * port 5557 of the loopback interface only (a deployment that routes across
 * hosts binds port 5557 of a pod address, or of every interface with the
 * host "*", explicitly). */
#define KVPI_DEFAULT_ENDPOINT "tcp://127.0.0.1:5557"

/* Bounds on what the publisher accepts from peers (ZMQ_MAXMSGSIZE: a peer
 * that sends a longer frame is disconnected before the frame is stored).
 * A subscription frame is 1 byte plus the filter; a filter longer than the
 * topic can never match it, so the bound is the larger of the topic length
 * + 1 and KVPI_MAX_SUBSCRIPTION.  A replay request frame is at most 8
 * bytes (the ROUTER's own identity frame is not received from the peer). */
#define KVPI_MAX_SUBSCRIPTION 256
#define KVPI_MAX_REPLAY_REQUEST 64

typedef struct kvpi_publisher_config {
    const char *endpoint;        /* PUB endpoint; NULL: KVPI_DEFAULT_ENDPOINT
                                    (checked by kvpi_endpoint_check) */
    int connect;                 /* 0 (default): bind `endpoint`, as vLLM
                                    does; 1: connect to it (the subscriber
                                    binds) */
    const char *replay_endpoint; /* ROUTER endpoint for replay, always bound;
                                    NULL: no replay */
    const char *topic;           /* first frame of every message; NULL: "" */
    uint32_t replay_batches;     /* batches kept for replay (default 10000) */
    int sndhwm;                  /* ZMQ send high-water mark in messages
                                    (default 100000) */
    int64_t dp_rank;             /* data-parallel rank, or KVPI_NO_DP_RANK
                                    (the default) */
    int linger_ms;               /* time queued messages get to leave at
                                    destroy (default 1000; -1 forever) */
} kvpi_publisher_config;

typedef struct kvpi_publisher kvpi_publisher;

/* Fill *cfg with the defaults above (all endpoints NULL, bind). */
void kvpi_publisher_config_default(kvpi_publisher_config *cfg);

/*
 * Check a ZeroMQ endpoint before binding (bind != 0) or connecting to it.
 * tcp endpoints must read tcp://HOST:PORT with PORT 1..65535, or "*" (a port
 * chosen by the system) when binding; HOST "*" (every interface) only when
 * binding; a HOST to connect to must resolve (getaddrinfo, so the wait is
 * bounded by the system resolver's timeout; ZeroMQ itself would retry an
 * unresolvable name forever).  Other transports (ipc://, inproc://) pass
 * unchecked.  Returns 0, or -1 with a message in err[0..errcap) (err may be
 * NULL).  Thread-safe; changes nothing.
 */
int kvpi_endpoint_check(const char *endpoint, int bind, char *err, size_t errcap);

/*
 * Create a publisher: check the endpoints (kvpi_endpoint_check), open the
 * PUB socket (an XPUB, so that subscriptions can be seen), bind or connect
 * it, bind the replay ROUTER socket when configured, and start the service
 * thread that sends the batches, reads subscriptions and answers replay
 * requests (it alone uses those sockets and the replay ring).  Every
 * socket that receives bounds its frames (KVPI_MAX_SUBSCRIPTION,
 * KVPI_MAX_REPLAY_REQUEST).  On failure returns -1, leaves *out unchanged
 * and writes a message into err[0..errcap) (err may be NULL).
 */
int kvpi_publisher_create(const kvpi_publisher_config *cfg, kvpi_publisher **out, char *err,
                          size_t errcap);

/*
 * Stop the service thread once it has sent every batch handed to it, end
 * the stream (the end-of-stream marker: a batch without events numbered
 * kvpi_publisher_next_seq, after every batch, not kept for replay;
 * docs/EVENTS.md), flush queued messages (for up to the configured linger),
 * close the sockets.  NULL is ignored.
 */
void kvpi_publisher_destroy(kvpi_publisher *pub);

/* The endpoint actually bound (a "*" port resolved), or the endpoint
 * connected to; for the replay socket NULL when there is none.  Valid until
 * destroy. */
const char *kvpi_publisher_endpoint(const kvpi_publisher *pub);
const char *kvpi_publisher_replay_endpoint(const kvpi_publisher *pub);

/*
 * Wait up to timeout_ms (0: just look; -1: forever) until a subscriber whose
 * filter matches the topic has subscribed.  Returns 1 when one has, 0 on
 * timeout.  Subscriptions seen earlier count (so 0 at the end of a run
 * means no subscriber ever received anything).  The service thread reads
 * subscriptions; this call only looks at what it has seen.
 */
int kvpi_publisher_wait_subscriber(kvpi_publisher *pub, int timeout_ms);

/*
 * Send one batch of events as one message (topic, sequence number, payload),
 * keep it for replay, and number it: the first batch is 0, every batch sent
 * gets the next number, an empty batch (n == 0) is not sent and takes no
 * number (a batch without events is the end-of-stream marker, which only
 * kvpi_publisher_destroy sends).  timestamp < 0: now.  Returns 0, or -1 (encoding failure, out
 * of memory, or `sndhwm` batches still waiting for the service thread; the
 * number is not used).
 * Never waits for peers or for the service thread: the call encodes the
 * batch, copies it into one reference-counted buffer (shared by the
 * subscribers' message and the replay ring) and hands it to the service
 * thread through a lock-free, non-blocking inproc pipe; it shares no lock
 * with that thread.  O(n), whatever subscribers and replay clients do; a
 * slow subscriber loses messages at its high-water mark instead.
 */
int kvpi_publisher_send(kvpi_publisher *pub, const kvp_event *events, size_t n,
                        double timestamp);

/*
 * kvp_events_take on `pool`, then kvpi_publisher_send of the batch.  *dropped
 * (may be NULL) receives the events the pool lost since its last take (the
 * pool has already queued an ALL_CLEARED for them).  Returns 0, -1 on a
 * send failure, or -2 when kvp_events_take fails (events not enabled).
 */
int kvpi_publisher_drain(kvpi_publisher *pub, kvp_pool *pool, uint64_t *dropped);

/* Numbers: the next sequence number to be sent (= batches sent), and the
 * events sent and dropped (as reported by drains) so far. */
uint64_t kvpi_publisher_next_seq(const kvpi_publisher *pub);
uint64_t kvpi_publisher_events_sent(const kvpi_publisher *pub);
uint64_t kvpi_publisher_events_dropped(const kvpi_publisher *pub);

/* ------------------------------------------------------------------------ */
/* vLLM-compatible block hashes                                              */
/* ------------------------------------------------------------------------ */

/*
 * vLLM's `sha256_cbor` block hash: SHA-256 of the canonical CBOR encoding of
 * the 3-element array
 *   [parent digest (32-byte byte string), token ids (array of unsigned
 *    integers, shortest form), extra keys (null, or an array)]
 * where extra keys (docs/EVENTS.md) are, in vLLM's order: the LoRA name
 * (text; the lora_id as an unsigned integer when no name is given), then one
 * [identifier, offset] pair per multimodal input overlapping the block
 * (identifier: the mm hash as 64 lowercase hex digits; offset: span start
 * minus block start, may be negative), then the cache salt (as text, first
 * block only).  A kvp_hash_fn: pass as kvp_config.hash_fn with
 * KVP_HASH_CUSTOM (hash_user unused).  Returns KVP_EINVAL for NULL
 * arguments and for start + n above UINT64_MAX.
 */
kvp_status kvpi_vllm_hash_fn(void *user, const kvp_hash *parent, const uint32_t *tokens,
                             size_t n, uint64_t start, const kvp_extra_keys *extra,
                             kvp_hash *out);

/* vLLM's NONE_HASH for a seed string (its PYTHONHASHSEED): SHA-256 of the
 * CBOR text string `seed`.  Returns KVP_EINVAL for NULL arguments. */
kvp_status kvpi_vllm_none_hash(const char *seed, kvp_hash *out);

/* Configure *cfg for vLLM-identical hashes: hash_alg KVP_HASH_CUSTOM,
 * hash_fn kvpi_vllm_hash_fn, root_seed kvpi_vllm_none_hash(seed),
 * random_root 0.  Returns KVP_EINVAL for NULL arguments. */
kvp_status kvpi_vllm_hash_configure(kvp_config *cfg, const char *seed);

/* ------------------------------------------------------------------------ */
/* Redis block store                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A store keeps whole blocks (opaque bytes) on one or more Redis servers,
 * one Redis string per block, under a key made of a namespace and the
 * block's hash:
 *
 *   PREFIX:vLAYOUT:MODEL:HASHALG:gGROUP:SALT:HEX
 *
 * (HEX: the 32 hash bytes as 64 lowercase hex digits; SALT may be empty).
 * Keys spread over the servers by the hash (kvpi_redis_server_of).  Each
 * value is a 24-byte header followed by the block's bytes; a load checks
 * the header and its XXH3 checksum (over the key, the header and the bytes)
 * and treats any value that fails, or whose length is not the reader's
 * block size, as a miss.  docs/TIERS.md gives the exact layout.
 *
 * Every operation is asynchronous: a submit queues it and returns at once;
 * the store's service thread pipelines the commands to the servers; the
 * finished operations come back through kvpi_redis_poll.  A server that is
 * down, slow, stopped, out of memory or evicting never makes a call fail or
 * wait: its operations finish as KVPI_REDIS_MISS or KVPI_REDIS_DROPPED
 * within the configured timeouts, and the thread reconnects with bounded
 * exponential backoff.
 */

/* Bounds on the namespace fields and the server list. */
#define KVPI_REDIS_MAX_FIELD 128  /* bytes in prefix, model, hash_alg, salt */
#define KVPI_REDIS_MAX_SERVERS 64
#define KVPI_REDIS_MAX_HOST 255
#define KVPI_REDIS_HEADER_BYTES 24   /* the value header before the block */
#define KVPI_REDIS_MAX_VALUE (512u << 20) /* Redis's limit on a string */
/* Room for any key kvpi_redis_key writes, with its terminating NUL. */
#define KVPI_REDIS_KEY_MAX (4 * KVPI_REDIS_MAX_FIELD + 96)

typedef enum kvpi_redis_status {
    KVPI_REDIS_OK = 0,
    KVPI_REDIS_BUSY,       /* the in-flight byte bound would be passed: the
                              operation is not queued (a store counts as a
                              drop) */
    KVPI_REDIS_EINVAL,     /* NULL argument, zero length, number out of range */
    KVPI_REDIS_ENOSERVERS, /* no server, or more than KVPI_REDIS_MAX_SERVERS */
    KVPI_REDIS_EENDPOINT,  /* a server that does not read HOST:PORT */
    KVPI_REDIS_EKEY,       /* a namespace field unfit for a key */
    KVPI_REDIS_ENOMEM,     /* out of memory */
    KVPI_REDIS_ESYSTEM     /* the service thread or its wake-up pipe could
                              not be created */
} kvpi_redis_status;

/* A short English description of a status; never NULL. */
const char *kvpi_redis_strerror(kvpi_redis_status st);

typedef struct kvpi_redis_config {
    const char *const *servers; /* n_servers endpoints "HOST:PORT" (HOST a
                                   name, an IPv4 address or [IPv6]; PORT
                                   1..65535) */
    size_t n_servers;           /* 1..KVPI_REDIS_MAX_SERVERS */
    int connect_timeout_ms;     /* a connect not done by then fails
                                   (default 250) */
    int command_timeout_ms;     /* a command without its reply by then fails
                                   its connection (default 500) */
    int backoff_min_ms;         /* first wait before a reconnect (default 50) */
    int backoff_max_ms;         /* the wait doubles up to this (default 2000) */
    size_t max_inflight_bytes;  /* bound on the bytes of operations submitted
                                   and not yet polled (default 64 MiB) */
    uint32_t pipeline;          /* commands in flight per server (default 64) */
    /* the key namespace (checked: 1..KVPI_REDIS_MAX_FIELD bytes each, every
     * byte printable ASCII other than space and ':'; salt may be empty) */
    const char *prefix;         /* NULL: "kvp" */
    uint32_t layout_version;    /* written in every key and value (default 1) */
    const char *model;          /* required: the model's name */
    const char *hash_alg;       /* required: the block hash's name, e.g.
                                   "sha256" */
    uint32_t group;             /* KV-cache group index */
    const uint8_t *salt;        /* cache salt (salt_len bytes; NULL if 0) */
    size_t salt_len;
} kvpi_redis_config;

typedef struct kvpi_redis_store kvpi_redis_store;

/* What became of one operation. */
typedef enum kvpi_redis_result {
    KVPI_REDIS_STORED = 1, /* a store: the server has the value */
    KVPI_REDIS_DROPPED,    /* a store that did not happen (server down, slow,
                              out of memory, or the store shut down) */
    KVPI_REDIS_LOADED,     /* a load: the block's bytes are in dst */
    KVPI_REDIS_MISS        /* a load that found nothing usable; dst is
                              untouched */
} kvpi_redis_result;

typedef struct kvpi_redis_completion {
    uint64_t tag;            /* the caller's tag from the submit */
    kvp_hash hash;           /* the block's hash */
    kvpi_redis_result result;
    size_t len;              /* the block's bytes (stored, or loaded) */
} kvpi_redis_completion;

typedef struct kvpi_redis_stats {
    uint64_t stores;        /* stores submitted (accepted or busy) */
    uint64_t stored;        /* stores the servers acknowledged */
    uint64_t store_drops;   /* stores that did not happen, busy included */
    uint64_t loads;         /* loads accepted */
    uint64_t load_busy;     /* loads refused with KVPI_REDIS_BUSY */
    uint64_t hits, misses;  /* loads finished LOADED / MISS */
    uint64_t bad_values;    /* misses whose value failed the checks */
    uint64_t bytes_stored;  /* block bytes acknowledged by the servers */
    uint64_t bytes_loaded;  /* block bytes written into dst */
    uint64_t timeouts;      /* connections failed by the command timeout */
    uint64_t connect_failures; /* connects that failed or timed out */
    uint64_t reconnects;    /* connections made after a server's first */
    uint64_t load_p50_us, load_p99_us; /* load latency, submit to finish,
                                          finished loads (upper bound of a
                                          histogram bucket, at most 25% above
                                          the latency) */
    size_t inflight_bytes;  /* bytes submitted and not yet polled */
} kvpi_redis_stats;

/* Fill *cfg with the defaults above (no servers, no model, no hash_alg). */
void kvpi_redis_config_default(kvpi_redis_config *cfg);

/*
 * Check the configuration, copy it and start the service thread, which
 * connects to the servers on its own (create never waits for a server: an
 * unreachable one makes operations miss, not create fail).  The thread
 * runs with every signal blocked: a server closing a connection never
 * raises SIGPIPE, and the program's signals go to its own threads.  On failure
 * returns the status (KVPI_REDIS_EINVAL for cfg or out NULL or a timeout,
 * backoff or pipeline not positive, ENOSERVERS, EENDPOINT, EKEY, ENOMEM,
 * ESYSTEM), writes a message into err[0..errcap) (err may be NULL), creates
 * nothing and leaves *out unchanged.  O(servers + fields).
 */
kvpi_redis_status kvpi_redis_create(const kvpi_redis_config *cfg, kvpi_redis_store **out,
                                    char *err, size_t errcap);

/*
 * Stop: operations not yet sent finish as dropped/miss at once, those in
 * flight get until their command timeout, then the thread ends, the
 * connections close and everything is freed, completions not polled
 * included.  Returns within about the connect or command timeout, whichever
 * is longer, even when a server has stopped answering.  No dst is written
 * after it returns.  No other call on the store may run concurrently or
 * follow.  NULL is ignored.
 */
void kvpi_redis_destroy(kvpi_redis_store *s);

/*
 * Queue a store of bytes[0..len) under `hash`.  The bytes are copied (the
 * caller may reuse them at once) with their header and checksum computed
 * here, on the caller's thread.  Returns KVPI_REDIS_OK (a completion with
 * `tag` follows: STORED or DROPPED), KVPI_REDIS_BUSY when len more bytes
 * would pass max_inflight_bytes (nothing queued, counted as a store and a
 * drop, no completion), or KVPI_REDIS_EINVAL (NULL pointer, len 0, len
 * above KVPI_REDIS_MAX_VALUE - KVPI_REDIS_HEADER_BYTES; nothing counted),
 * KVPI_REDIS_ENOMEM.  Never waits for the servers.  O(len).  Thread-safe.
 */
kvpi_redis_status kvpi_redis_submit_store(kvpi_redis_store *s, const kvp_hash *hash,
                                          const void *bytes, size_t len, uint64_t tag);

/*
 * Queue a load of the block stored under `hash` into dst[0..cap), cap being
 * the block's exact size: a value holding another number of bytes misses.
 * dst must stay valid until the completion with `tag` is polled (or the
 * store destroyed); it is written only for a LOADED completion.  Returns
 * KVPI_REDIS_OK, KVPI_REDIS_BUSY (cap more bytes would pass
 * max_inflight_bytes; nothing queued, counted in load_busy, no
 * completion), KVPI_REDIS_EINVAL (as for a store; nothing counted),
 * KVPI_REDIS_ENOMEM.  Never waits.  O(1).  Thread-safe.
 */
kvpi_redis_status kvpi_redis_submit_load(kvpi_redis_store *s, const kvp_hash *hash, void *dst,
                                         size_t cap, uint64_t tag);

/*
 * Take up to `max` finished operations, oldest first, into out[0..*n); their
 * bytes leave the in-flight count.  Returns KVPI_REDIS_OK, or
 * KVPI_REDIS_EINVAL for a NULL s, n, or out with max > 0 (*n untouched when
 * n is valid: set to 0).  Never waits.  O(*n).  Thread-safe.
 */
kvpi_redis_status kvpi_redis_poll(kvpi_redis_store *s, kvpi_redis_completion *out, size_t max,
                                  size_t *n);

/*
 * Wait up to timeout_ms (0: just look) until at least one finished
 * operation is ready to poll; returns how many are.  For programs that have
 * nothing else to do (tests, benchmarks); an engine step polls instead.
 * A NULL s returns 0 at once.  Thread-safe.
 */
size_t kvpi_redis_wait(kvpi_redis_store *s, int timeout_ms);

/* Copy the counters into *out (a consistent snapshot; all zero for a NULL
 * s; nothing for a NULL out).  Thread-safe. */
void kvpi_redis_stats_get(kvpi_redis_store *s, kvpi_redis_stats *out);

/*
 * Write the key of `hash` into key[0..cap) with its NUL and return its
 * length, or 0 when cap is too small (KVPI_REDIS_KEY_MAX always suffices).
 * For operators and tests that look at the servers directly.  s, hash
 * and key must not be NULL.  Pure.
 */
size_t kvpi_redis_key(const kvpi_redis_store *s, const kvp_hash *hash, char *key, size_t cap);

/* The index (into cfg->servers) of the server that holds `hash` (s and
 * hash not NULL).  Pure. */
size_t kvpi_redis_server_of(const kvpi_redis_store *s, const kvp_hash *hash);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_INTEROP_H */
