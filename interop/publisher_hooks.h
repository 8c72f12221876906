/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_hooks.h — an internal hook into publisher.c for tests (not
 * installed, not part of the API).
 *
 * Why: a replay must never make the caller's publish call wait (an engine's
 * scheduler step would wait for a whole replay).  That is a matter of
 * structure, not speed, so tests check it structurally: the hook runs on the
 * service thread right before each replayed batch is sent, and a test can
 * park the thread there, mid-replay, and show that kvpi_publisher_send
 * still returns.
 */
#ifndef KVPI_PUBLISHER_HOOKS_H
#define KVPI_PUBLISHER_HOOKS_H

#include "kvpool_interop.h"

/* Called on the service thread right before each replayed batch is sent. */
typedef void (*kvpi__replay_hook)(kvpi_publisher *pub, void *arg);

/* Install (or, with NULL, remove) the hook.  Any thread; takes effect for
 * the next batch replayed. */
void kvpi__publisher_set_replay_hook(kvpi_publisher *pub, kvpi__replay_hook fn, void *arg);

#endif /* KVPI_PUBLISHER_HOOKS_H */
