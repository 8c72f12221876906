/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h — KV-cache events in the kvpool CLI: `kvpool events` (a
 * subscriber that prints what a publisher sends), `kvpool events-demo` (a
 * scripted scenario published live, for tests and demos), and the hook that
 * lets `kvpool replay --events ENDPOINT` publish a replay's events.
 *
 * Everything here needs libkvpool_interop (ZeroMQ, msgpack); without it
 * (KVP_HAVE_INTEROP undefined) the commands explain that and fail, and the
 * hook refuses to start.
 */
#ifndef KVPT_EVENTS_H
#define KVPT_EVENTS_H

#include <kvpool.h>

int kvpt_cmd_events(int argc, char **argv);
int kvpt_cmd_events_demo(int argc, char **argv);

/* ---- the replay hook ----------------------------------------------------- */

/* Check `endpoint` for --events before anything is opened (to connect to
 * with connect != 0, else to bind).  Returns KVPT_EXIT_OK, or
 * KVPT_EXIT_USAGE with the refusal printed as a usage error of `cmd`
 * (KVPT_EXIT_ERROR when built without the interop part). */
int kvpt_events_check(const char *cmd, const char *endpoint, int connect);

/* Open a publisher on `endpoint` (bound, or with connect != 0 connected to)
 * with `topic` (NULL: ""), then wait up to wait_s seconds for a subscriber.
 * Returns 0, or -1 with the error printed (a bad endpoint: its port, its
 * host). */
int kvpt_events_start(const char *endpoint, int connect, const char *topic, double wait_s);

/* Is a publisher open (kvpt_events_start succeeded)? */
int kvpt_events_on(void);

/* Drain `pool`'s event queue and publish the batch.  Returns 0, or -1 with
 * the error printed.  A no-op when no publisher is open. */
int kvpt_events_pump(kvp_pool *pool);

/* Let queued messages leave (linger), report on stderr what was sent — or
 * that no subscriber ever subscribed, so nothing reached anyone — and close
 * the publisher.  A no-op when none is open. */
void kvpt_events_stop(void);

#endif /* KVPT_EVENTS_H */
