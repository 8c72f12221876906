/*
 * publisher_hooks.h — internal hooks into publisher.c for tests (not
 * installed, not part of the API).
 *
 * Why: the replay thread must never hold the ring's lock while it sends
 * (an engine's publish call would wait for a whole replay).  Whether it does
 * is a matter of structure, not speed, so tests check it structurally: a
 * hook runs on the replay thread right before each batch is sent, and asks
 * whether the ring lock is free at that moment.
 */
#ifndef KVPI_PUBLISHER_HOOKS_H
#define KVPI_PUBLISHER_HOOKS_H

#include "kvpool_interop.h"

/* Called on the service thread right before each replayed batch is sent. */
typedef void (*kvpi__replay_hook)(kvpi_publisher *pub, void *arg);

/* Install (or, with NULL, remove) the hook.  Any thread; takes effect for
 * the next batch sent. */
void kvpi__publisher_set_replay_hook(kvpi_publisher *pub, kvpi__replay_hook fn, void *arg);

/* 1 when the replay ring's lock is held right now (by any thread, the
 * caller included), else 0.  Takes and releases the lock when it is
 * free. */
int kvpi__publisher_ring_busy(kvpi_publisher *pub);

#endif /* KVPI_PUBLISHER_HOOKS_H */
