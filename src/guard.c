/* SPDX-License-Identifier: Apache-2.0 */
/*
 * guard.c — entering and leaving the API: the hub every public call that
 * reads or writes a pool passes through.
 *
 * What it owns: the lock, the refusal of calls from inside a callback, the
 * catch-up of the take's deferred bookkeeping on entry, the after-call work
 * on leaving (closing the call's events, the per-call history, the debug
 * self-check) and the unlock.
 *
 * Invariant: between a kvp__enter and its kvp__leave the caller holds the
 * pool alone (locked, or serialised by its caller), no callback of this
 * pool is running, and every count and record reads exact (the deferred
 * bookkeeping caught up, defer.c).  kvp__enter_lazy guarantees the counts
 * only, for the calls that read no record of another owner's takes.
 *
 * Who calls it: the public functions only; no mechanism function does.  It
 * calls defer.c, events.c (the call's batch and the callback marker),
 * history.c (per-call history) and check.c (debug self-check), none of
 * which holds a public function, so nothing it reaches calls it back.
 */
#include "guard.h"
#include "check.h"
#include "defer.h"
#include "events.h"
#include "history.h"
#include "record.h"

#include <stdio.h>
#include <stdlib.h>

/* Every public call that reads or writes the pool goes through here: a call
 * from inside this pool's callback is refused (the lock is held, and the
 * state is mid-change), then the lock is taken if the pool has one and the
 * fast takes since the last call are counted.  Their records may still be
 * pending (defer.c): for the calls that read no other owner's records
 * (kvp_free_owner, the take's general path, kvp_pool_check). */
kvp_status kvp__enter_lazy(kvp_pool *p)
{
    if (!p)
        return KVP_EINVAL;
    if (p->hooked) { /* else no callback of this pool can be running */
        if (kvp__cb_pool == p)
            return KVP_EBUSY;
        if (p->ts)
            pthread_mutex_lock(&p->lock);
    }
    kvp__defer_tally(p);
    return KVP_OK;
}

/* kvp__enter_lazy, and every pending record written. */
kvp_status kvp__enter(kvp_pool *p)
{
    kvp_status rc = kvp__enter_lazy(p);
    if (rc)
        return rc;
    kvp__defer_settle(p);
    return KVP_OK;
}

/* kvp__enter for calls that name a stream: *s receives its index. */
kvp_status kvp__enter_stream(kvp_pool *p, int stream, int *s)
{
    if (!p || (*s = kvp__stream_index(p, stream)) < 0)
        return KVP_EINVAL;
    return kvp__enter(p);
}

#if KVP_DEBUG >= 3
/* Debug level 3: the whole pool checked after every call that changed it;
 * a broken invariant aborts with its description. */
void kvp__self_check(kvp_pool *p, bool changed)
{
    if (!changed)
        return;
    kvp__defer_tally(p);
    char msg[256];
    if (kvp__check(p, msg, sizeof msg) != KVP_OK) {
        fprintf(stderr, "kvpool: invariant broken: %s\n", msg);
        abort();
    }
}
#endif

/* The end of every call kvp__enter began; `changed` says whether it
 * changed the pool (history, self-check). */
void kvp__leave(kvp_pool *p, bool changed)
{
    if (p->hooked) {
        kvp__ev_close(p);
        if (changed && p->cfg.history_every_call && p->cfg.history_len)
            kvp__history_push(p);
    }
    kvp__self_check(p, changed);
    if (p->ts)
        pthread_mutex_unlock(&p->lock);
}
