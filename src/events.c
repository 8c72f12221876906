/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c — what the pool tells the outside about its content: the bounded
 * queue of KV-cache events, and the on_evict callback.
 *
 * What it owns: the callback marker (kvp__cb_pool), two event buffers (one filling, one handed to the caller by
 * kvp_events_take), the "announced" mark on indexed blocks, interned LoRA
 * names, the drop counter and the "lossy" state.
 *
 * The index calls in here at the exact points it changes (index.c), so the
 * stream can never disagree with the index.  Events are per hash, whatever
 * stream (K or V list) holds it: a hash is announced when a copy enters and
 * no copy is announced, and removed when its last copy leaves.  The
 * subscriber's view (every event applied) is exactly the set of hashes with
 * a copy carrying KVP__F_ANNOUNCED, one copy per hash; when it leaves, the
 * mark moves to another copy if there is one, otherwise a REMOVED event goes
 * out.  Until an event is dropped that view is the whole index.  After a
 * drop (lossy) the view is empty (ALL_CLEARED) and fills again as copies of
 * hashes are published, so each indexed hash is announced again at its next
 * publish; the index emptying ends the lossy state.
 *
 * A stored block names the hash it was chained from as its parent only
 * while the subscriber holds that hash (an announced copy is indexed);
 * otherwise (kvp_clear_index, an eviction or unpublish took it out of the
 * index while its sequence ran, or a drop lost it) it is announced without
 * a parent: its own hash is in the index, and a router rejects a stored
 * block whose parent it does not hold (kvpool.h "Events").
 *
 * Events made during one call coalesce: consecutive stored blocks that chain
 * (each one's parent is the previous one) share one STORED event, removals
 * share one REMOVED event.  Only the newest event is ever open, so each
 * event's hashes and tokens are contiguous in the buffer's arenas.
 *
 * Bounded by event_capacity hashes (and as many blocks of tokens and
 * multimodal hashes); records have one slot more, kept for the ALL_CLEARED
 * that follows a drop.  Buffers are allocated at creation, so recording never
 * allocates, except to intern a LoRA name not seen before.
 */
#include "events.h"
#include "index_walk.h"
#include "mem.h"

/* The callback marker: the pool whose callback this thread is running, so
 * that a call back into it is refused in both locking modes (guard.c).
 * initial-exec: one load per call instead of a __tls_get_addr call. */
__attribute__((tls_model("initial-exec"))) _Thread_local const kvp_pool *kvp__cb_pool;

/* Tell the caller's on_evict callback that block b's content h went (h
 * NULL: all of the index), with the marker set. */
void kvp__notify_evict(kvp_pool *p, const kvp_hash *h, uint32_t b)
{
    if (!p->cfg.on_evict)
        return;
    const kvp_pool *outer = kvp__cb_pool;
    kvp__cb_pool = p;
    p->cfg.on_evict(p->cfg.evict_user, h, h ? b : KVP_NO_BLOCK);
    kvp__cb_pool = outer;
}

typedef struct evbuf {
    kvp_event *ev;
    uint32_t nev;
    uint64_t *h;
    uint32_t nh;
    uint32_t *tok;
    size_t ntok;
    kvp_hash *mm;
    uint32_t nmm;
    uint32_t *mmc; /* per stored block: how many of mm are its own */
} evbuf;

struct kvp__evq {
    evbuf buf[2];
    int cur;
    uint32_t cap;   /* hashes, multimodal hashes and blocks of tokens */
    bool open;      /* the newest event may still grow (same call) */
    bool full;      /* the kept slot is used: drop until the next take */
    bool lossy;     /* a drop since the index was last emptied: hashes may be
                       indexed unannounced (see kvp__ev_lossy) */
    uint64_t dropped;
    char *medium;
    size_t medium_bytes;
    char **names;   /* interned LoRA names */
    uint32_t nnames, names_cap;
};

/* ------------------------------------------------------------------------ */
/* Set-up                                                                    */
/* ------------------------------------------------------------------------ */

static size_t tokcap(const kvp_pool *p, const kvp__evq *q)
{
    return (size_t)q->cap * p->cfg.block_size;
}

static void buf_free(kvp_pool *p, kvp__evq *q, evbuf *b)
{
    kvp__release(p, b->ev, ((size_t)q->cap + 1) * sizeof *b->ev);
    kvp__release(p, b->h, (size_t)q->cap * sizeof *b->h);
    kvp__release(p, b->tok, tokcap(p, q) * sizeof *b->tok);
    kvp__release(p, b->mm, (size_t)q->cap * sizeof *b->mm);
    kvp__release(p, b->mmc, (size_t)q->cap * sizeof *b->mmc);
}

void kvp__events_free(kvp_pool *p)
{
    kvp__evq *q = p->evq;
    if (!q)
        return;
    for (int i = 0; i < 2; i++)
        buf_free(p, q, &q->buf[i]);
    for (uint32_t i = 0; i < q->nnames; i++)
        kvp__release(p, q->names[i], strlen(q->names[i]) + 1);
    kvp__release(p, q->names, q->names_cap * sizeof *q->names);
    kvp__release(p, q->medium, q->medium_bytes);
    kvp__release(p, q, sizeof *q);
    p->evq = NULL;
}

kvp_status kvp__events_init(kvp_pool *p)
{
    if (!p->cfg.events)
        return KVP_OK;
    kvp__evq *q = kvp__zalloc(p, sizeof *q);
    if (!q)
        return KVP_ENOMEM;
    p->evq = q;
    q->cap = p->cfg.event_capacity ? p->cfg.event_capacity : 4096;
    const char *medium = p->cfg.medium ? p->cfg.medium : "GPU";
    q->medium_bytes = strlen(medium) + 1;
    q->medium = kvp__alloc(p, q->medium_bytes);
    bool ok = q->medium != NULL;
    for (int i = 0; i < 2 && ok; i++) {
        evbuf *b = &q->buf[i];
        b->ev = kvp__alloc(p, ((size_t)q->cap + 1) * sizeof *b->ev);
        b->h = kvp__alloc(p, (size_t)q->cap * sizeof *b->h);
        b->tok = kvp__alloc(p, tokcap(p, q) * sizeof *b->tok);
        b->mm = kvp__alloc(p, (size_t)q->cap * sizeof *b->mm);
        b->mmc = kvp__alloc(p, (size_t)q->cap * sizeof *b->mmc);
        ok = b->ev && b->h && b->tok && b->mm && b->mmc;
    }
    if (!ok) {
        kvp__events_free(p);
        return KVP_ENOMEM;
    }
    memcpy(q->medium, medium, q->medium_bytes);
    return KVP_OK;
}

/* A stable copy of a LoRA name for events (names are few; a linear search
 * is cheaper than a table).  NULL when memory runs out: the event then goes
 * without the name rather than not at all. */
static const char *intern(kvp_pool *p, kvp__evq *q, const char *name)
{
    for (uint32_t i = 0; i < q->nnames; i++)
        if (strcmp(q->names[i], name) == 0)
            return q->names[i];
    if (q->nnames == q->names_cap) {
        uint32_t ncap = q->names_cap ? q->names_cap * 2 : 8;
        char **nn = kvp__alloc(p, ncap * sizeof *nn);
        if (!nn)
            return NULL;
        if (q->nnames)
            memcpy(nn, q->names, q->nnames * sizeof *nn);
        kvp__release(p, q->names, q->names_cap * sizeof *q->names);
        q->names = nn;
        q->names_cap = ncap;
    }
    size_t len = strlen(name) + 1;
    char *copy = kvp__alloc(p, len);
    if (!copy)
        return NULL;
    memcpy(copy, name, len);
    return q->names[q->nnames++] = copy;
}

/* ------------------------------------------------------------------------ */
/* Recording                                                                 */
/* ------------------------------------------------------------------------ */

uint64_t kvp_hash_external(const kvp_hash *h)
{
    uint64_t x = 0;
    for (int i = 24; i < 32; i++)
        x = x << 8 | h->b[i];
    return x ? x : 1;
}

/* The first indexed copy of hash h in some stream, other than b, carrying
 * all of `flags` (0: any); NONE if there is none.  Only first copies carry
 * the announced mark, so this finds the announced copy, and the copy that
 * takes the mark over when b leaves.  O(streams): events are per hash, not
 * per stream, as a router has no notion of kvpool's K and V lists. */
static uint32_t copy_of(const kvp_pool *p, const kvp_hash *h, uint32_t b, uint8_t flags)
{
    for (int s = 0; s < kvp__streams(p); s++) {
        uint32_t c = kvp__index_first(p, s, h);
        if (c != KVP__NONE && c == b)
            c = kvp__index_next(p, b);
        if (c != KVP__NONE && (p->blocks[c].flags & flags) == flags)
            return c;
    }
    return KVP__NONE;
}

static kvp_event *new_event(kvp__evq *q, evbuf *b, kvp_event_kind kind)
{
    kvp_event *e = &b->ev[b->nev++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->medium = q->medium;
    e->hashes = b->h + b->nh;
    e->tokens = b->tok + b->ntok;
    e->mm = b->mm + b->nmm;
    e->mm_per_block = b->mmc + b->nh; /* one count per hash of the event */
    q->open = kind != KVP_EVENT_ALL_CLEARED;
    return e;
}

/* An event is lost: count it.  The index may now hold hashes no subscriber
 * knows of, until a copy of each is published again or the index empties. */
static void drop(kvp_pool *p, kvp__evq *q)
{
    q->lossy = true;
    q->dropped++;
    p->ctr.events_dropped++;
}

/* The queue cannot take an event: drop it, take every mark off (nothing is
 * announced now), tell subscribers to forget everything (in the kept slot),
 * and drop every further event until the next take. */
static void overflow(kvp_pool *p, kvp__evq *q)
{
    drop(p, q);
    if (q->full)
        return;
    for (uint32_t b = 0; b < p->top; b++) /* only indexed blocks carry the mark */
        if (p->blocks[b].flags & KVP__F_ANNOUNCED)
            p->blocks[b].flags &= (uint8_t)~KVP__F_ANNOUNCED;
    new_event(q, &q->buf[q->cur], KVP_EVENT_ALL_CLEARED);
    q->full = true;
}

void kvp__ev_stored(kvp_pool *p, uint32_t b, const kvp__pubinfo *info)
{
    kvp__evq *q = p->evq;
    if (!q || copy_of(p, &p->hashes[b], b, KVP__F_ANNOUNCED) != KVP__NONE)
        return; /* off, or the hash is announced already */
    /* a parent the subscriber does not hold is left out (kvpool.h "Events") */
    const kvp_hash *parent = info ? info->parent_hash : NULL;
    if (parent && copy_of(p, parent, KVP__NONE, KVP__F_ANNOUNCED) == KVP__NONE)
        parent = NULL;
    if (q->full) {
        drop(p, q);
        return;
    }
    evbuf *buf = &q->buf[q->cur];
    size_t bs = p->cfg.block_size;
    const uint32_t *tokens = info ? info->tokens : NULL;
    const kvp_extra_keys *x = info ? info->extra : NULL;
    uint64_t start = info ? info->start : 0;
    uint32_t k = 0; /* multimodal spans overlapping this block */
    for (size_t i = 0; x && i < x->n_mm; i++)
        k += x->mm[i].start < start + bs && x->mm[i].end > start && x->mm[i].end > x->mm[i].start;
    const char *lora = x && x->has_lora && x->lora_name ? intern(p, q, x->lora_name) : NULL;

    kvp_event *e = buf->nev ? &buf->ev[buf->nev - 1] : NULL;
    bool extend = q->open && e && e->kind == KVP_EVENT_STORED && parent &&
                  e->hashes[e->n_hashes - 1] == kvp_hash_external(parent) &&
                  (e->n_tokens > 0) == (tokens != NULL) && e->lora_name == lora;
    if ((!extend && buf->nev >= q->cap) || buf->nh >= q->cap || buf->nmm + k > q->cap ||
        (tokens && buf->ntok + bs > tokcap(p, q))) {
        overflow(p, q);
        return;
    }
    if (!extend) {
        e = new_event(q, buf, KVP_EVENT_STORED);
        e->block_size = (uint32_t)bs;
        e->lora_name = lora;
        if (parent) {
            e->has_parent = 1;
            e->parent = kvp_hash_external(parent);
        }
    }
    buf->mmc[buf->nh] = k;
    buf->h[buf->nh++] = kvp_hash_external(&p->hashes[b]);
    e->n_hashes++;
    if (tokens) {
        memcpy(buf->tok + buf->ntok, tokens, bs * sizeof *tokens);
        buf->ntok += bs;
        e->n_tokens += bs;
    }
    for (size_t i = 0; x && i < x->n_mm; i++)
        if (x->mm[i].start < start + bs && x->mm[i].end > start && x->mm[i].end > x->mm[i].start) {
            buf->mm[buf->nmm++] = x->mm[i].hash;
            e->n_mm++;
        }
    p->blocks[kvp__index_first(p, p->blocks[b].stream, &p->hashes[b])].flags |= KVP__F_ANNOUNCED;
}

void kvp__ev_removed(kvp_pool *p, uint32_t b)
{
    kvp__evq *q = p->evq;
    if (!q || !(p->blocks[b].flags & KVP__F_ANNOUNCED))
        return;
    p->blocks[b].flags &= (uint8_t)~KVP__F_ANNOUNCED;
    uint32_t c = copy_of(p, &p->hashes[b], b, 0);
    if (c != KVP__NONE) { /* the hash stays: another copy carries the mark */
        p->blocks[c].flags |= KVP__F_ANNOUNCED;
        return;
    }
    if (q->full) {
        drop(p, q);
        return;
    }
    evbuf *buf = &q->buf[q->cur];
    kvp_event *e = buf->nev ? &buf->ev[buf->nev - 1] : NULL;
    bool extend = q->open && e && e->kind == KVP_EVENT_REMOVED;
    if ((!extend && buf->nev >= q->cap) || buf->nh >= q->cap) {
        overflow(p, q);
        return;
    }
    if (!extend)
        e = new_event(q, buf, KVP_EVENT_REMOVED);
    buf->h[buf->nh++] = kvp_hash_external(&p->hashes[b]);
    e->n_hashes++;
}

/* The index emptied (its blocks' marks are gone with their PUBLISHED flag):
 * whatever was lost, the subscriber's view (empty) is the index again. */
void kvp__ev_cleared(kvp_pool *p)
{
    kvp__evq *q = p->evq;
    if (!q)
        return;
    q->lossy = false;
    if (q->full)
        return;
    evbuf *buf = &q->buf[q->cur];
    new_event(q, buf, KVP_EVENT_ALL_CLEARED);
    q->full = buf->nev > q->cap; /* it took the kept slot */
}

bool kvp__ev_lossy(const kvp_pool *p)
{
    return p->evq && p->evq->lossy;
}

/* A call ends: its events are complete. */
void kvp__ev_close(kvp_pool *p)
{
    if (p->evq)
        p->evq->open = false;
}

/* Hand the caller the filling buffer's events and start the other one
 * (kvp_events_take; the caller entered, events are on). */
void kvp__ev_take(kvp_pool *p, const kvp_event **events, size_t *n, uint64_t *dropped)
{
    kvp__evq *q = p->evq;
    evbuf *taken = &q->buf[q->cur];
    q->cur ^= 1;
    evbuf *next = &q->buf[q->cur];
    next->nev = next->nh = next->nmm = 0;
    next->ntok = 0;
    q->open = q->full = false;
    *events = taken->ev;
    *n = taken->nev;
    if (dropped)
        *dropped = q->dropped;
    q->dropped = 0;
}
