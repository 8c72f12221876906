/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_events.c — the KV-cache event queue (kvpool.h "Events", src/events.c).
 *
 * What it covers: each event kind at each point the content index changes
 * (publish, unpublish, evict, reuse and take_id of a cached block, shrink and
 * retire of a cached block, clear_index, reset_prefix_cache, pool_clear);
 * duplicates (announced once, removed when the last copy leaves); per-call
 * coalescing through sequences (one STORED per admission, parent = the
 * previous block for an append); one announcement per hash across separate
 * K/V lists; a sequence running through kvp_clear_index; tokens, LoRA names
 * and multimodal hashes carried from sequences; the external-hash rule
 * (last 8 bytes big-endian, 0 -> 1); the double buffer (a taken batch stays intact while new events
 * are recorded); overflow (drops counted in take and in stats, ALL_CLEARED
 * queued, the subscriber consistent again after the next take); events off;
 * allocation failures while creating the queue.
 *
 * The central check is a subscriber model: a set of external hashes to
 * which every taken batch is applied the way a router would.  A stored hash
 * must not be in the set (announced once, whichever K/V list holds it), a
 * removed one must be, a stored parent must be known (or, after an
 * ALL_CLEARED, have been known or lost to a drop); and when nothing was
 * dropped since the index last emptied the set must equal {external(h) : h
 * indexed}, read with kvp_block_get over every block.  It runs after every
 * step of random operations, with shared and separate lists, with a large
 * queue and with a tiny one, and kvp_pool_check (which checks the announced
 * marks) after each step too.
 */
#include "kvptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 4 /* tokens per block in these tests */

/* ---- helpers ------------------------------------------------------------- */

static kvp_config ev_config(uint32_t nblocks, uint32_t capacity)
{
    kvp_config cfg = kvptest_config(nblocks);
    cfg.block_size = BS;
    cfg.events = 1;
    cfg.event_capacity = capacity;
    return cfg;
}

static kvp_pool *ev_pool(uint32_t nblocks, uint32_t capacity)
{
    kvp_config cfg = ev_config(nblocks, capacity);
    return kvptest_create(&cfg);
}

/* Take a batch, asserting success; *dropped may be NULL. */
static const kvp_event *take(kvp_pool *pool, size_t *n, uint64_t *dropped)
{
    const kvp_event *ev = NULL;
    *n = 99999;
    KVP_ASSERT_OK(kvp_events_take(pool, &ev, n, dropped));
    assert_true(*n == 0 || ev != NULL);
    return ev;
}

static void assert_no_events(kvp_pool *pool)
{
    size_t n;
    uint64_t dropped = 77;
    take(pool, &n, &dropped);
    KVP_ASSERT_EQ(n, 0);
    KVP_ASSERT_EQ(dropped, 0);
}

static uint64_t ext(uint64_t v)
{
    kvp_hash h = kvptest_hash(v);
    return kvp_hash_external(&h);
}

/* Take one block for KVP_ANON and publish it under kvptest_hash(v). */
static kvp_block publish_new(kvp_pool *pool, uint64_t v)
{
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    kvp_hash h = kvptest_hash(v);
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    return b;
}

static void free1(kvp_pool *pool, kvp_block b)
{
    KVP_ASSERT_OK(kvp_free(pool, &b, 1, KVP_ANON));
}

/* Assert that the batch is exactly one event of `kind` with the one hash
 * ext(v) (for STORED/REMOVED). */
/* The next batch is one event of `kind`; unless it is ALL_CLEARED it
 * carries exactly the external hashes want[0..n_want-1], in order.  Returns
 * the event for further checks. */
static const kvp_event *expect_event_at(kvp_pool *pool, kvp_event_kind kind,
                                        const uint64_t *want, size_t n_want, const char *file,
                                        int line)
{
    size_t n;
    const kvp_event *ev = take(pool, &n, NULL);
    kvptest_assert_eq(n, 1, "events in the batch", "1", file, line);
    kvptest_assert_eq(ev[0].kind, kind, "ev[0].kind", "kind", file, line);
    if (kind != KVP_EVENT_ALL_CLEARED) {
        kvptest_assert_eq(ev[0].n_hashes, n_want, "ev[0].n_hashes", "expected", file, line);
        for (size_t i = 0; i < n_want; i++)
            kvptest_assert_eq(ev[0].hashes[i], want[i], "ev[0].hashes[i]", "expected", file,
                              line);
    }
    return ev;
}
#define EXPECT_EVENT(pool, kind, ...)                                                     \
    expect_event_at((pool), (kind), (const uint64_t[]){__VA_ARGS__},                      \
                    sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t), __FILE__, \
                    __LINE__)

/* One event of `kind` for the hash kvptest_hash(v) (no hash for
 * ALL_CLEARED). */
static void expect_one(kvp_pool *pool, kvp_event_kind kind, uint64_t v)
{
    EXPECT_EVENT(pool, kind, ext(v));
}

/* ---- the subscriber model ------------------------------------------------ */

#define MAXSET 8192
#define MAXEVER 16384
typedef struct submodel {
    uint64_t h[MAXSET]; /* the router's view: what it believes is cached */
    size_t n;
    uint64_t ever[MAXEVER]; /* every hash ever announced */
    size_t never;
    size_t stored, removed, cleared; /* events applied */
    uint64_t dropped;                /* drops reported by takes */
} submodel;

static long find(const uint64_t *set, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == h)
            return (long)i;
    return -1;
}

static long set_find(const submodel *m, uint64_t h)
{
    return find(m->h, m->n, h);
}

/* A parent a STORED event may name: one the router holds at that point
 * (routers reject a stored block whose parent they do not hold). */
static int parent_ok(const submodel *m, uint64_t parent)
{
    return set_find(m, parent) >= 0;
}

/* Apply one batch as a router would, checking the stream's promises. */
static void apply(submodel *m, const kvp_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const kvp_event *e = &ev[i];
        assert_non_null(e->medium);
        switch (e->kind) {
        case KVP_EVENT_STORED:
            m->stored++;
            assert_true(e->n_hashes > 0);
            KVP_ASSERT_EQ(e->block_size, BS);
            assert_true(e->n_tokens == 0 || e->n_tokens == e->n_hashes * BS);
            if (e->has_parent && !parent_ok(m, e->parent))
                fail_msg("STORED names parent %#llx, which the subscriber does not hold",
                         (unsigned long long)e->parent);
            for (size_t k = 0; k < e->n_hashes; k++) {
                assert_true(e->hashes[k] != 0);
                if (set_find(m, e->hashes[k]) >= 0)
                    fail_msg("hash %#llx announced twice", (unsigned long long)e->hashes[k]);
                assert_true(m->n < MAXSET);
                m->h[m->n++] = e->hashes[k];
                if (find(m->ever, m->never, e->hashes[k]) < 0) {
                    assert_true(m->never < MAXEVER);
                    m->ever[m->never++] = e->hashes[k];
                }
            }
            break;
        case KVP_EVENT_REMOVED:
            m->removed++;
            assert_true(e->n_hashes > 0);
            for (size_t k = 0; k < e->n_hashes; k++) {
                long at = set_find(m, e->hashes[k]);
                if (at < 0)
                    fail_msg("REMOVED %#llx, which is not announced",
                             (unsigned long long)e->hashes[k]);
                m->h[at] = m->h[--m->n];
            }
            break;
        case KVP_EVENT_ALL_CLEARED:
            m->cleared++;
            m->n = 0;
            break;
        default:
            fail_msg("unknown event kind %d", (int)e->kind);
        }
    }
}

/* The index as a caller sees it: the external hash of every published
 * block, in any stream, each once (kvp_block_get over every id). */
static size_t index_set(kvp_pool *pool, uint64_t *out, size_t cap)
{
    size_t n = 0;
    kvp_block_info bi;
    kvp_status rc;
    for (kvp_block id = 0; (rc = kvp_block_get(pool, id, &bi)) != KVP_ERANGE; id++) {
        KVP_ASSERT_OK(rc);
        uint64_t x = kvp_hash_external(&bi.hash);
        if (bi.published && find(out, n, x) < 0) {
            assert_true(n < cap);
            out[n++] = x;
        }
    }
    return n;
}

/* The model's view against the index: exact (set == indexed) or, after
 * drops, a subset (a subscriber never believes in a block the pool lacks). */
static void compare(kvp_pool *pool, const submodel *m, int exact)
{
    static uint64_t idx[MAXSET];
    size_t n = index_set(pool, idx, MAXSET);
    for (size_t i = 0; i < m->n; i++)
        if (find(idx, n, m->h[i]) < 0)
            fail_msg("subscriber believes in %#llx, which the pool does not index",
                     (unsigned long long)m->h[i]);
    for (size_t i = 0; exact && i < n; i++)
        if (set_find(m, idx[i]) < 0)
            fail_msg("pool indexes %#llx, which the subscriber never learned",
                     (unsigned long long)idx[i]);
}

/* Take and apply; returns the drops reported. */
static uint64_t sync_model(kvp_pool *pool, submodel *m)
{
    size_t n;
    uint64_t dropped = 0;
    const kvp_event *ev = take(pool, &n, &dropped);
    m->dropped += dropped;
    apply(m, ev, n);
    if (dropped) { /* a lossy batch must end by telling subscribers to forget */
        assert_true(n > 0);
        KVP_ASSERT_EQ(ev[n - 1].kind, KVP_EVENT_ALL_CLEARED);
    }
    return dropped;
}

/* ---- events off, bad arguments, external hashes ------------------------- */

static void test_events_off(void **state)
{
    (void)state;
    kvp_pool *pool = kvptest_pool(8, KVP_REUSE_LIFO);
    const kvp_event *ev;
    size_t n;
    KVP_ASSERT_STATUS(kvp_events_take(pool, &ev, &n, NULL), KVP_EINVAL);
    publish_new(pool, 5);
    KVP_ASSERT_STATUS(kvp_events_take(pool, &ev, &n, NULL), KVP_EINVAL);
    KVP_ASSERT_EQ(kvptest_stats(pool).events_dropped, 0);
    kvp_pool_destroy(pool);

    pool = ev_pool(8, 0);
    KVP_ASSERT_STATUS(kvp_events_take(NULL, &ev, &n, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_events_take(pool, NULL, &n, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_events_take(pool, &ev, NULL, NULL), KVP_EINVAL);
    assert_no_events(pool);
    kvp_pool_destroy(pool);
}

static void test_external_hash(void **state)
{
    (void)state;
    kvp_hash h;
    memset(&h, 0, sizeof h);
    KVP_ASSERT_EQ(kvp_hash_external(&h), 1); /* 0 is never sent */
    memset(h.b, 0xab, 24);                    /* only the last 8 bytes count */
    KVP_ASSERT_EQ(kvp_hash_external(&h), 1);
    for (int i = 0; i < 8; i++)
        h.b[24 + i] = (uint8_t)(0x11 * (i + 1));
    KVP_ASSERT_EQ(kvp_hash_external(&h), 0x1122334455667788ull);
    h.b[31] = 1;
    h.b[24] = 0;
    KVP_ASSERT_EQ(kvp_hash_external(&h), 0x0022334455667701ull);

    /* a block published under a hash whose last 8 bytes are zero is
     * announced as 1 */
    kvp_pool *pool = ev_pool(4, 0);
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    memset(&h, 0, sizeof h);
    h.b[0] = 9;
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    expect_one(pool, KVP_EVENT_STORED, 1);
    kvp_pool_destroy(pool);
}

/* ---- each kind at each index change -------------------------------------- */

static void test_publish_stored(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    assert_no_events(pool);
    kvp_block b = publish_new(pool, 42);
    const kvp_event *ev = EXPECT_EVENT(pool, KVP_EVENT_STORED, 42);
    KVP_ASSERT_EQ(ev[0].has_parent, 0); /* plain publish names no parent */
    KVP_ASSERT_EQ(ev[0].n_tokens, 0);   /* ... and no tokens */
    KVP_ASSERT_EQ(ev[0].block_size, BS);
    assert_null(ev[0].lora_name);
    KVP_ASSERT_EQ(ev[0].n_mm, 0);
    assert_string_equal(ev[0].medium, "GPU");
    assert_no_events(pool); /* take drains */

    /* publishing again under the same hash is a no-op: no event */
    kvp_hash h = kvptest_hash(42);
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    assert_no_events(pool);
    /* a refused call records nothing */
    kvp_hash other = kvptest_hash(43);
    KVP_ASSERT_STATUS(kvp_publish(pool, b, &other), KVP_EBUSY);
    assert_no_events(pool);

    /* several publishes in one take: one event each, in order (plain
     * publishes name no parent, so they never chain) */
    publish_new(pool, 100);
    publish_new(pool, 101);
    size_t n;
    ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2);
    KVP_ASSERT_EQ(ev[0].hashes[0], 100);
    KVP_ASSERT_EQ(ev[1].hashes[0], 101);
    kvp_pool_destroy(pool);
}

static void test_medium(void **state)
{
    (void)state;
    char medium[8] = "CPU";
    kvp_config cfg = ev_config(4, 0);
    cfg.medium = medium;
    kvp_pool *pool = kvptest_create(&cfg);
    strcpy(medium, "XXX"); /* the pool keeps its own copy */
    kvp_block b = publish_new(pool, 3);
    KVP_ASSERT_OK(kvp_unpublish(pool, b));
    size_t n;
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2);
    assert_string_equal(ev[0].medium, "CPU");
    assert_string_equal(ev[1].medium, "CPU");
    kvp_pool_destroy(pool);
}

static void test_unpublish_removed(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    kvp_block b = publish_new(pool, 7);
    expect_one(pool, KVP_EVENT_STORED, 7);
    KVP_ASSERT_OK(kvp_unpublish(pool, b));
    const kvp_event *ev = EXPECT_EVENT(pool, KVP_EVENT_REMOVED, 7);
    assert_string_equal(ev[0].medium, "GPU");
    /* unpublish of a cached (free) block too */
    b = publish_new(pool, 8);
    free1(pool, b);
    KVP_ASSERT_OK(kvp_unpublish(pool, b));
    size_t n;
    ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2);
    KVP_ASSERT_EQ(ev[0].kind, KVP_EVENT_STORED);
    KVP_ASSERT_EQ(ev[1].kind, KVP_EVENT_REMOVED);
    KVP_ASSERT_EQ(ev[1].hashes[0], 8);
    /* stored and removed within one batch, unpublish refused: nothing more */
    KVP_ASSERT_STATUS(kvp_unpublish(pool, b), KVP_ENOTFOUND);
    assert_no_events(pool);
    kvp_pool_destroy(pool);
}

static void test_evict_removed(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    kvp_block a = publish_new(pool, 1), b = publish_new(pool, 2), c = publish_new(pool, 3);
    kvp_block order[3] = {b, a, c}; /* b is the least recently freed */
    KVP_ASSERT_OK(kvp_free(pool, order, 3, KVP_ANON));
    size_t n;
    take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 3);
    uint32_t got = 0;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 2, &got));
    KVP_ASSERT_EQ(got, 2);
    /* removals in one call share one event, in eviction order */
    EXPECT_EVENT(pool, KVP_EVENT_REMOVED, 2, 1);
    /* kvp_ensure_free evicts too */
    KVP_ASSERT_OK(kvp_ensure_free(pool, KVP_STREAM_SHARED, 8));
    expect_one(pool, KVP_EVENT_REMOVED, 3);
    kvp_pool_destroy(pool);
}

static void test_reuse_and_take_id_removed(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(3, 0);
    kvp_block a = publish_new(pool, 10), b = publish_new(pool, 11), c = publish_new(pool, 12);
    kvp_block order[3] = {a, b, c};
    KVP_ASSERT_OK(kvp_free(pool, order, 3, KVP_ANON));
    size_t n;
    take(pool, &n, NULL);
    /* no vacant block: allocation reuses the least recently freed cached one */
    kvp_block got = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    KVP_ASSERT_EQ(got, a);
    expect_one(pool, KVP_EVENT_REMOVED, 10);
    /* taking a specific cached block evicts it */
    KVP_ASSERT_OK(kvp_take_id(pool, c, KVP_ANON));
    expect_one(pool, KVP_EVENT_REMOVED, 12);
    /* claiming a cached block keeps its content: no event */
    KVP_ASSERT_OK(kvp_claim(pool, b, KVP_ANON));
    assert_no_events(pool);
    /* vacant blocks go first: reusing one evicts nothing; once only the
     * cached block is left, its reuse removes it before the new STORED */
    kvp_block all[3] = {got, b, c};
    KVP_ASSERT_OK(kvp_free(pool, all, 3, KVP_ANON));
    publish_new(pool, 13);
    expect_one(pool, KVP_EVENT_STORED, 13);
    publish_new(pool, 14);
    expect_one(pool, KVP_EVENT_STORED, 14);
    publish_new(pool, 15);
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2);
    KVP_ASSERT_EQ(ev[0].kind, KVP_EVENT_REMOVED);
    KVP_ASSERT_EQ(ev[0].hashes[0], 11);
    KVP_ASSERT_EQ(ev[1].kind, KVP_EVENT_STORED);
    KVP_ASSERT_EQ(ev[1].hashes[0], 15);
    kvp_pool_destroy(pool);
}

static void test_shrink_retire_removed(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(4, 0);
    kvp_block ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = publish_new(pool, 20 + (uint64_t)i);
    KVP_ASSERT_OK(kvp_free(pool, ids, 4, KVP_ANON));
    size_t n;
    take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 4);
    /* retire the top block (cached): its content is evicted */
    kvp_block retired = KVP_NO_BLOCK, moved = 0;
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 3);
    KVP_ASSERT_EQ(moved, KVP_NO_BLOCK);
    expect_one(pool, KVP_EVENT_REMOVED, 23);
    /* shrink to one free block: two cached blocks go, highest ids first */
    uint32_t nret = 0;
    KVP_ASSERT_OK(kvp_shrink(pool, KVP_STREAM_SHARED, 1, &nret));
    KVP_ASSERT_EQ(nret, 2);
    EXPECT_EVENT(pool, KVP_EVENT_REMOVED, 22, 21);

    /* relocation of a block in use keeps its hash indexed: no event for it
     * (but the free block it moves into loses its content) */
    kvp_pool_destroy(pool);
    pool = ev_pool(3, 0);
    kvp_block x = publish_new(pool, 30), y = publish_new(pool, 31), z = publish_new(pool, 32);
    (void)y;
    free1(pool, x); /* x cached; z (top) in use */
    take(pool, &n, NULL);
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, z);
    KVP_ASSERT_EQ(moved, x);
    expect_one(pool, KVP_EVENT_REMOVED, 30);
    kvp_block found;
    kvp_hash h32 = kvptest_hash(32);
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_SHARED, &h32, &found));
    KVP_ASSERT_EQ(found, x);
    /* and the moved block's announcement moved with it */
    KVP_ASSERT_OK(kvp_unpublish(pool, x));
    expect_one(pool, KVP_EVENT_REMOVED, 32);
    kvp_pool_destroy(pool);
}

static void test_clears(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    kvp_block a = publish_new(pool, 1);
    kvp_block a2 = publish_new(pool, 2);
    size_t n;
    take(pool, &n, NULL);
    KVP_ASSERT_OK(kvp_clear_index(pool));
    expect_one(pool, KVP_EVENT_ALL_CLEARED, 0); /* one notice, no per-block ones */

    /* reset_prefix_cache: refused while blocks are in use (no event), then
     * one ALL_CLEARED */
    kvp_hash h = kvptest_hash(5);
    KVP_ASSERT_OK(kvp_publish(pool, a, &h));
    take(pool, &n, NULL);
    KVP_ASSERT_STATUS(kvp_reset_prefix_cache(pool), KVP_EBUSY);
    assert_no_events(pool);
    kvp_block held[2] = {a, a2};
    KVP_ASSERT_OK(kvp_free(pool, held, 2, KVP_ANON));
    KVP_ASSERT_OK(kvp_reset_prefix_cache(pool));
    expect_one(pool, KVP_EVENT_ALL_CLEARED, 0);

    /* pool_clear with content: ALL_CLEARED */
    publish_new(pool, 6);
    take(pool, &n, NULL);
    KVP_ASSERT_OK(kvp_pool_clear(pool));
    expect_one(pool, KVP_EVENT_ALL_CLEARED, 0);
    kvp_pool_destroy(pool);
}

/* kvp_pool_clear drops whatever is queued.  Whatever it drops, a subscriber
 * that applied every earlier batch must still end up with the pool's view
 * (here: empty). */
static void test_pool_clear_keeps_subscriber_consistent(void **state)
{
    (void)state;
    submodel *m = calloc(1, sizeof *m);
    assert_non_null(m);
    kvp_pool *pool = ev_pool(8, 0);
    kvp_block b = publish_new(pool, 9);
    sync_model(pool, m); /* the subscriber knows 9 */
    KVP_ASSERT_OK(kvp_unpublish(pool, b)); /* REMOVED 9 queued ... */
    KVP_ASSERT_OK(kvp_pool_clear(pool));   /* ... and the index is empty */
    sync_model(pool, m);
    compare(pool, m, 1);
    kvp_pool_destroy(pool);
    free(m);
}

/* ---- duplicates --------------------------------------------------------- */

static void test_duplicates(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    kvp_block a = publish_new(pool, 50);
    kvp_block b = publish_new(pool, 50); /* a second copy: not announced */
    expect_one(pool, KVP_EVENT_STORED, 50);
    KVP_ASSERT_OK(kvp_unpublish(pool, a)); /* one copy left: no event */
    assert_no_events(pool);
    kvp_block c = publish_new(pool, 50); /* back to two copies: no event */
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, c));
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, b)); /* the last copy leaves */
    expect_one(pool, KVP_EVENT_REMOVED, 50);
    publish_new(pool, 50); /* enters again: announced again */
    expect_one(pool, KVP_EVENT_STORED, 50);

    /* the last copy leaving by eviction, after the first copy was reused */
    kvp_pool_destroy(pool);
    pool = ev_pool(2, 0);
    a = publish_new(pool, 60);
    b = publish_new(pool, 60);
    kvp_block both[2] = {a, b};
    KVP_ASSERT_OK(kvp_free(pool, both, 2, KVP_ANON));
    expect_one(pool, KVP_EVENT_STORED, 60);
    kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON); /* evicts a: b remains */
    assert_no_events(pool);
    uint32_t got;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 1, &got));
    KVP_ASSERT_EQ(got, 1);
    expect_one(pool, KVP_EVENT_REMOVED, 60);
    kvp_pool_destroy(pool);
}

/* ---- sequences: coalescing, parents, tokens, LoRA, multimodal ----------- */

/* With separate K/V lists, events are per hash: a router has no notion of
 * kvpool's lists, so a hash is announced when the first list takes a copy
 * and removed when the last copy leaves either list.  Lookups stay per
 * list. */
static void test_separate_lists_per_hash(void **state)
{
    (void)state;
    kvp_config cfg = ev_config(8, 0);
    cfg.separate_kv = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block k = kvptest_take(pool, KVP_STREAM_K, KVP_ANON);
    kvp_block v = kvptest_take(pool, KVP_STREAM_V, KVP_ANON);
    kvp_hash h = kvptest_hash(40);
    KVP_ASSERT_OK(kvp_publish(pool, k, &h));
    KVP_ASSERT_OK(kvp_publish(pool, v, &h));
    expect_one(pool, KVP_EVENT_STORED, 40); /* one hash, one announcement */
    kvptest_check(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, k)); /* V still holds it */
    assert_no_events(pool);
    kvptest_check(pool);
    kvp_block got;
    KVP_ASSERT_STATUS(kvp_lookup(pool, KVP_STREAM_K, &h, &got), KVP_ENOTFOUND);
    KVP_ASSERT_OK(kvp_lookup(pool, KVP_STREAM_V, &h, &got));
    KVP_ASSERT_EQ(got, v);
    KVP_ASSERT_OK(kvp_publish(pool, k, &h)); /* back in K: nothing new */
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, v)); /* K holds it now */
    assert_no_events(pool);
    kvptest_check(pool);
    free1(pool, k); /* cached in K */
    assert_no_events(pool);
    uint32_t n_ev;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_K, 1, &n_ev)); /* the last copy */
    KVP_ASSERT_EQ(n_ev, 1);
    expect_one(pool, KVP_EVENT_REMOVED, 40);
    kvptest_done(pool);
}

/* kvp_clear_index while a sequence runs: its blocks lose their hashes, and
 * its next full block, whose parent the subscriber was told to forget, is
 * announced all the same (naming that parent), since its hash is in the
 * index.  A later copy of it says nothing more.  The subscriber's view
 * equals the index at every step. */
static void test_clear_index_running_sequence(void **state)
{
    (void)state;
    submodel *m = calloc(1, sizeof *m);
    assert_non_null(m);
    kvp_pool *pool = ev_pool(16, 0);
    uint32_t t[12];
    kvptest_tokens(t, 12, 700);
    kvp_hash hs[3];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 12, NULL, hs, 3, 0, NULL));
    kvp_seq *s1, *s2;
    size_t cached;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &s1));
    KVP_ASSERT_OK(kvp_seq_admit(s1, t, 9, &cached)); /* 2 full blocks */
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    KVP_ASSERT_EQ(m->n, 2);
    compare(pool, m, 1);
    KVP_ASSERT_OK(kvp_clear_index(pool));
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    KVP_ASSERT_EQ(m->n, 0);
    compare(pool, m, 1);

    KVP_ASSERT_OK(kvp_seq_append(s1, t + 9, 3)); /* block 2 fills */
    const kvp_event *ev = EXPECT_EVENT(pool, KVP_EVENT_STORED, kvp_hash_external(&hs[2]));
    /* the hash it was chained from left the subscriber's view: no parent */
    KVP_ASSERT_EQ(ev[0].has_parent, 0);
    assert_memory_equal(ev[0].tokens, t + 8, BS * sizeof *t);
    apply(m, ev, 1);
    compare(pool, m, 1);
    kvptest_check(pool);

    /* the same prompt again: blocks 0 and 1 enter and are announced, block
     * 2 is a second copy */
    KVP_ASSERT_OK(kvp_seq_create(pool, 2, NULL, &s2));
    KVP_ASSERT_OK(kvp_seq_admit(s2, t, 12, &cached));
    KVP_ASSERT_EQ(cached, 0);
    size_t n;
    ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 1);
    KVP_ASSERT_EQ(ev[0].n_hashes, 2);
    apply(m, ev, n);
    KVP_ASSERT_EQ(m->n, 3);
    compare(pool, m, 1);
    kvptest_check(pool);

    /* both finish; everything cached leaves: each hash removed once */
    KVP_ASSERT_OK(kvp_seq_destroy(s1));
    KVP_ASSERT_OK(kvp_seq_destroy(s2));
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    compare(pool, m, 1);
    uint32_t evicted;
    KVP_ASSERT_OK(kvp_evict(pool, KVP_STREAM_SHARED, 16, &evicted));
    KVP_ASSERT_EQ(evicted, 4);
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    KVP_ASSERT_EQ(m->n, 0);
    compare(pool, m, 1);
    kvptest_done(pool);
    free(m);
}

static void test_seq_coalescing(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(16, 0);
    uint32_t t[24];
    kvptest_tokens(t, 24, 1000);
    kvp_hash hs[6];
    size_t nh = 0;
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 24, NULL, hs, 6, 0, &nh));
    KVP_ASSERT_EQ(nh, 6);

    kvp_seq *s;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &s));
    size_t cached = 99;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 17, &cached)); /* 4 full blocks + 1 token */
    KVP_ASSERT_EQ(cached, 0);
    /* one call, one chain: one event */
    const kvp_event *ev =
        EXPECT_EVENT(pool, KVP_EVENT_STORED, kvp_hash_external(&hs[0]),
                     kvp_hash_external(&hs[1]), kvp_hash_external(&hs[2]),
                     kvp_hash_external(&hs[3]));
    KVP_ASSERT_EQ(ev[0].has_parent, 0);
    KVP_ASSERT_EQ(ev[0].n_tokens, 16);
    assert_memory_equal(ev[0].tokens, t, 16 * sizeof *t);
    KVP_ASSERT_EQ(ev[0].block_size, BS);
    assert_null(ev[0].lora_name);
    KVP_ASSERT_EQ(ev[0].n_mm, 0);

    /* append fills block 4: STORED with the previous block as parent */
    KVP_ASSERT_OK(kvp_seq_append(s, t + 17, 3));
    ev = EXPECT_EVENT(pool, KVP_EVENT_STORED, kvp_hash_external(&hs[4]));
    KVP_ASSERT_EQ(ev[0].has_parent, 1);
    KVP_ASSERT_EQ(ev[0].parent, kvp_hash_external(&hs[3]));
    KVP_ASSERT_EQ(ev[0].n_tokens, BS);
    assert_memory_equal(ev[0].tokens, t + 16, BS * sizeof *t);

    /* an append that fills nothing: no event */
    KVP_ASSERT_OK(kvp_seq_append(s, t + 20, 1));
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_seq_destroy(s)); /* blocks stay cached: no event */
    assert_no_events(pool);

    /* a second request with the same prefix: hits, and its new block names
     * the last hit block as parent */
    uint32_t t2[13];
    memcpy(t2, t, 8 * sizeof *t);
    kvptest_tokens(t2 + 8, 5, 5000);
    kvp_hash hs2[3];
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t2, 12, NULL, hs2, 3, 0, NULL));
    KVP_ASSERT_OK(kvp_seq_create(pool, 2, NULL, &s));
    KVP_ASSERT_OK(kvp_seq_admit(s, t2, 13, &cached));
    KVP_ASSERT_EQ(cached, 8);
    size_t n;
    ev = take(pool, &n, NULL);
    size_t stored = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != KVP_EVENT_STORED)
            continue; /* (a cached block may be evicted for room) */
        stored++;
        KVP_ASSERT_EQ(ev[i].n_hashes, 1);
        KVP_ASSERT_EQ(ev[i].hashes[0], kvp_hash_external(&hs2[2]));
        KVP_ASSERT_EQ(ev[i].has_parent, 1);
        KVP_ASSERT_EQ(ev[i].parent, kvp_hash_external(&hs[1]));
        assert_memory_equal(ev[i].tokens, t2 + 8, BS * sizeof *t);
    }
    KVP_ASSERT_EQ(stored, 1);
    KVP_ASSERT_OK(kvp_seq_destroy(s));
    kvp_pool_destroy(pool);
}

/* Sequence `id` with extra keys x admits 5 tokens counted from `first`:
 * the one event this stores names no LoRA adapter. */
static void expect_no_lora_name(kvp_pool *pool, uint64_t id, const kvp_extra_keys *x,
                                uint32_t first)
{
    uint32_t t[5];
    kvptest_tokens(t, 5, first);
    kvp_seq *s;
    KVP_ASSERT_OK(kvp_seq_create(pool, id, x, &s));
    size_t cached, n;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 5, &cached));
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 1);
    assert_null(ev[0].lora_name);
    KVP_ASSERT_OK(kvp_seq_destroy(s));
}

static void test_seq_lora_and_mm(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(16, 0);
    uint32_t t[9];
    kvptest_tokens(t, 9, 1);

    kvp_mm_span span = {kvptest_hash(0xabc), 2, 6}; /* overlaps blocks 0 and 1 */
    char name[16] = "adapter-a";
    kvp_extra_keys x = {1, 7, name, &span, 1, NULL, 0};
    kvp_seq *s;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, &x, &s));
    strcpy(name, "XXXXXXXX"); /* the sequence keeps its own copy */
    size_t cached;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 9, &cached));
    size_t n;
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 1);
    KVP_ASSERT_EQ(ev[0].n_hashes, 2);
    assert_non_null(ev[0].lora_name);
    assert_string_equal(ev[0].lora_name, "adapter-a");
    KVP_ASSERT_EQ(ev[0].n_mm, 2); /* the input, once per block it overlaps */
    assert_memory_equal(ev[0].mm[0].b, span.hash.b, 32);
    assert_memory_equal(ev[0].mm[1].b, span.hash.b, 32);
    assert_non_null(ev[0].mm_per_block);
    KVP_ASSERT_EQ(ev[0].mm_per_block[0], 1);
    KVP_ASSERT_EQ(ev[0].mm_per_block[1], 1);
    kvp_hash hs[2];
    x.lora_name = "adapter-a";
    KVP_ASSERT_OK(kvp_hash_tokens(pool, t, 8, &x, hs, 2, 0, NULL));
    KVP_ASSERT_EQ(ev[0].hashes[0], kvp_hash_external(&hs[0]));
    KVP_ASSERT_EQ(ev[0].hashes[1], kvp_hash_external(&hs[1]));
    /* a later block outside the span carries the name but no input */
    uint32_t more[3] = {77, 78, 79};
    KVP_ASSERT_OK(kvp_seq_append(s, more, 3));
    ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 1);
    assert_string_equal(ev[0].lora_name, "adapter-a");
    KVP_ASSERT_EQ(ev[0].n_mm, 0);
    KVP_ASSERT_EQ(ev[0].parent, kvp_hash_external(&hs[1]));
    KVP_ASSERT_OK(kvp_seq_destroy(s));

    /* has_lora without a name, and a name without has_lora: no name sent */
    kvp_extra_keys y = {1, 9, NULL, NULL, 0, NULL, 0};
    expect_no_lora_name(pool, 2, &y, 900);
    kvp_extra_keys z = {0, 0, "ignored", NULL, 0, NULL, 0};
    expect_no_lora_name(pool, 3, &z, 1900);
    kvp_pool_destroy(pool);
}

static void test_publish_verified_carries_tokens(void **state)
{
    (void)state;
    kvp_config cfg = ev_config(8, 0);
    cfg.verify_hits = 1;
    kvp_pool *pool = kvptest_create(&cfg);
    kvp_block a = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    uint32_t ta[BS] = {1, 2, 3, 4}, tb[BS] = {5, 6, 7, 8};
    kvp_hash ha = kvptest_hash(71), hb = kvptest_hash(72);
    KVP_ASSERT_OK(kvp_publish_verified(pool, a, &ha, KVP_NO_BLOCK, ta, BS));
    KVP_ASSERT_OK(kvp_publish_verified(pool, b, &hb, a, tb, BS));
    size_t n;
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2); /* two calls: two events */
    KVP_ASSERT_EQ(ev[0].has_parent, 0);
    assert_memory_equal(ev[0].tokens, ta, sizeof ta);
    KVP_ASSERT_EQ(ev[1].has_parent, 1);
    KVP_ASSERT_EQ(ev[1].parent, 71);
    KVP_ASSERT_EQ(ev[1].n_tokens, BS);
    assert_memory_equal(ev[1].tokens, tb, sizeof tb);
    kvp_pool_destroy(pool);
}

/* A batch handed out stays intact while the next one fills. */
static void test_double_buffer(void **state)
{
    (void)state;
    kvp_pool *pool = ev_pool(8, 0);
    publish_new(pool, 1);
    publish_new(pool, 2);
    size_t n1;
    const kvp_event *first = take(pool, &n1, NULL);
    KVP_ASSERT_EQ(n1, 2);
    for (uint64_t v = 3; v < 8; v++)
        publish_new(pool, v);
    KVP_ASSERT_EQ(first[0].hashes[0], 1);
    KVP_ASSERT_EQ(first[1].hashes[0], 2);
    size_t n2;
    const kvp_event *second = take(pool, &n2, NULL);
    KVP_ASSERT_EQ(n2, 5);
    KVP_ASSERT_EQ(second[4].hashes[0], 7);
    kvp_pool_destroy(pool);
}

/* ---- random operations against the subscriber model --------------------- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    return kvptest_rand(&rng_state);
}

#define NSEQ 6
#define NPLAIN 24

typedef struct world {
    kvp_pool *pool;
    int sep; /* separate K/V lists: plain blocks in both, no sequences */
    kvp_seq *seq[NSEQ];
    uint32_t seqtok[NSEQ][64];
    size_t seqlen[NSEQ];
    kvp_block plain[NPLAIN];
    size_t nplain;
    submodel *m;
    int inexact; /* events were dropped: the subscriber may know a strict
                    subset of the index until the index empties */
    int emptied; /* this step emptied the index */
    size_t exact_checks;
} world;

/* Prompts share prefixes: a few system prompts and small vocabularies. */
static size_t make_prompt(uint32_t *t, size_t cap)
{
    size_t n = 1 + rnd() % (cap - 8);
    uint32_t sys = (uint32_t)(rnd() % 3);
    size_t shared = (rnd() % 4) * BS;
    for (size_t i = 0; i < n; i++)
        t[i] = i < shared ? sys * 100 + (uint32_t)i : (uint32_t)(rnd() % 4);
    return n;
}

/* A stream plain blocks and evictions may use. */
static kvp_stream some_stream(const world *w)
{
    return w->sep ? (rnd() % 2 ? KVP_STREAM_K : KVP_STREAM_V) : KVP_STREAM_SHARED;
}

static void random_op(world *w)
{
    kvp_pool *pool = w->pool;
    kvp_status rc;
    uint64_t op = rnd() % 12;
    if (w->sep && op >= 4 && op <= 8) /* no sequences with separate lists */
        op = rnd() % 4;
    switch (op) {
    case 0:
    case 1: { /* a plain block published under a small hash (duplicates) */
        if (w->nplain == NPLAIN)
            break;
        kvp_block b;
        if (kvp_take(pool, some_stream(w), KVP_ANON, &b) != KVP_OK)
            break;
        kvp_hash h = kvptest_hash(1 + rnd() % 12);
        if (rnd() % 4)
            KVP_ASSERT_OK(kvp_publish(pool, b, &h));
        w->plain[w->nplain++] = b;
        break;
    }
    case 2: { /* free a plain block */
        if (!w->nplain)
            break;
        size_t k = rnd() % w->nplain;
        free1(pool, w->plain[k]);
        w->plain[k] = w->plain[--w->nplain];
        break;
    }
    case 3: { /* unpublish a plain block */
        if (!w->nplain)
            break;
        rc = kvp_unpublish(pool, w->plain[rnd() % w->nplain]);
        assert_true(rc == KVP_OK || rc == KVP_ENOTFOUND);
        break;
    }
    case 4:
    case 5: { /* admit a new sequence */
        int i = (int)(rnd() % NSEQ);
        if (w->seq[i])
            break;
        KVP_ASSERT_OK(kvp_seq_create(pool, (uint64_t)i, NULL, &w->seq[i]));
        w->seqlen[i] = make_prompt(w->seqtok[i], 40);
        size_t cached;
        rc = kvp_seq_admit(w->seq[i], w->seqtok[i], w->seqlen[i], &cached);
        if (rc != KVP_OK) {
            KVP_ASSERT_STATUS(rc, KVP_EEXHAUSTED);
            KVP_ASSERT_OK(kvp_seq_destroy(w->seq[i]));
            w->seq[i] = NULL;
        }
        break;
    }
    case 6:
    case 7: { /* append to a sequence */
        int i = (int)(rnd() % NSEQ);
        if (!w->seq[i] || w->seqlen[i] > 56)
            break;
        uint32_t more[6];
        size_t k = 1 + rnd() % 6;
        for (size_t j = 0; j < k; j++)
            more[j] = (uint32_t)(rnd() % 3);
        if (kvp_seq_append(w->seq[i], more, k) != KVP_OK)
            break;
        memcpy(w->seqtok[i] + w->seqlen[i], more, k * sizeof *more);
        w->seqlen[i] += k;
        break;
    }
    case 8: { /* destroy a sequence */
        int i = (int)(rnd() % NSEQ);
        if (!w->seq[i])
            break;
        KVP_ASSERT_OK(kvp_seq_destroy(w->seq[i]));
        w->seq[i] = NULL;
        break;
    }
    case 9: { /* evict or ensure_free */
        uint32_t got;
        if (rnd() % 2)
            KVP_ASSERT_OK(kvp_evict(pool, some_stream(w), (uint32_t)(rnd() % 4), &got));
        else
            (void)kvp_ensure_free(pool, some_stream(w), (uint32_t)(rnd() % 16));
        break;
    }
    case 10: { /* shrink a little, or grow back */
        kvp_stream st = some_stream(w);
        if (rnd() % 2) {
            uint32_t fc = kvptest_free_count(pool, st);
            KVP_ASSERT_OK(kvp_shrink(pool, st, fc > 2 ? fc - 2 : fc, NULL));
        } else {
            KVP_ASSERT_OK(kvp_extend(pool, st, 2, NULL));
        }
        break;
    }
    default: { /* rare: clear the index, or reset the prefix cache */
        uint64_t r = rnd() % 24;
        if (r == 2) { /* everything finishes: then the prefix cache resets */
            for (int i = 0; i < NSEQ; i++)
                if (w->seq[i]) {
                    KVP_ASSERT_OK(kvp_seq_destroy(w->seq[i]));
                    w->seq[i] = NULL;
                }
            if (w->nplain)
                KVP_ASSERT_OK(kvp_free(pool, w->plain, w->nplain, KVP_ANON));
            w->nplain = 0;
            r = 1;
        }
        /* blocks in use lose their hash on clear_index; whatever their
         * sequences publish next names a parent the subscriber was told to
         * forget, and is announced all the same */
        if (r == 0) {
            KVP_ASSERT_OK(kvp_clear_index(pool));
            w->emptied = 1;
        } else if (r == 1 && kvp_reset_prefix_cache(pool) == KVP_OK) {
            w->emptied = 1;
        }
        break;
    }
    }
}

/* Random operations; after every one the subscriber model takes the batch
 * and must equal the index (a subset only after drops), and the pool
 * passes its checker. */
static void run_random(int sep, uint32_t capacity, uint64_t seed, size_t steps)
{
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->m = calloc(1, sizeof *w->m);
    assert_non_null(w->m);
    rng_state = seed;
    kvp_config cfg = ev_config(48, capacity);
    cfg.max_blocks = 64;
    cfg.separate_kv = sep;
    w->sep = sep;
    w->pool = kvptest_create(&cfg);
    uint64_t dropped_total = 0;
    for (size_t step = 0; step < steps; step++) {
        w->emptied = 0;
        random_op(w);
        uint64_t d = sync_model(w->pool, w->m);
        dropped_total += d;
        /* drops in a step that empties the index come before the clear */
        if (w->emptied)
            w->inexact = 0;
        else if (d)
            w->inexact = 1;
        compare(w->pool, w->m, !w->inexact);
        w->exact_checks += !w->inexact;
        kvptest_check(w->pool);
    }
    if (capacity >= 4096) {
        KVP_ASSERT_EQ(w->exact_checks, steps);
        KVP_ASSERT_EQ(dropped_total, 0);
    } else {
        assert_true(dropped_total > 0); /* the tiny queue did overflow */
    }
    KVP_ASSERT_EQ(kvptest_stats(w->pool).events_dropped, dropped_total);
    assert_true(w->m->stored > 0 && w->m->removed > 0);
    /* after a full clear the model is exact again */
    for (int i = 0; i < NSEQ; i++)
        if (w->seq[i])
            KVP_ASSERT_OK(kvp_seq_destroy(w->seq[i]));
    if (w->nplain)
        KVP_ASSERT_OK(kvp_free(w->pool, w->plain, w->nplain, KVP_ANON));
    sync_model(w->pool, w->m);
    KVP_ASSERT_OK(kvp_reset_prefix_cache(w->pool));
    KVP_ASSERT_EQ(sync_model(w->pool, w->m), 0);
    compare(w->pool, w->m, 1);
    kvptest_check(w->pool);
    kvp_pool_destroy(w->pool);
    free(w->m);
    free(w);
}

static void test_random_subscriber_model(void **state)
{
    (void)state;
    size_t steps = kvptest_steps(20000);
    for (uint64_t seed = 1; seed <= 4; seed++)
        run_random(0, 4096, seed, steps);
}

/* With separate K/V lists a hash is announced once while either list holds
 * it, so the router's view still equals the index. */
static void test_random_separate_lists(void **state)
{
    (void)state;
    size_t steps = kvptest_steps(20000);
    for (uint64_t seed = 21; seed <= 24; seed++)
        run_random(1, 4096, seed, steps);
    for (uint64_t seed = 31; seed <= 32; seed++)
        run_random(1, 1, seed, steps / 2);
}

static void test_random_overflow(void **state)
{
    (void)state;
    size_t steps = kvptest_steps(10000);
    for (uint64_t seed = 11; seed <= 14; seed++)
        run_random(0, 3, seed, steps);
}

/* ---- overflow, in detail ------------------------------------------------- */

static void test_overflow(void **state)
{
    (void)state;
    submodel *m = calloc(1, sizeof *m);
    assert_non_null(m);
    kvp_pool *pool = ev_pool(32, 4);
    kvp_block ids[10];
    for (uint64_t v = 1; v <= 2; v++)
        ids[v - 1] = publish_new(pool, v);
    sync_model(pool, m); /* the subscriber knows 1 and 2 */
    compare(pool, m, 1);

    for (uint64_t v = 3; v <= 10; v++) /* 8 events into a queue of 4 */
        ids[v - 1] = publish_new(pool, v);
    KVP_ASSERT_OK(kvp_unpublish(pool, ids[0])); /* dropped as well */
    kvptest_check(pool);
    size_t n;
    uint64_t dropped = 0;
    const kvp_event *ev = take(pool, &n, &dropped);
    KVP_ASSERT_EQ(n, 5); /* 4 stored + the kept ALL_CLEARED */
    for (int i = 0; i < 4; i++) {
        KVP_ASSERT_EQ(ev[i].kind, KVP_EVENT_STORED);
        KVP_ASSERT_EQ(ev[i].hashes[0], 3 + (uint64_t)i);
    }
    KVP_ASSERT_EQ(ev[4].kind, KVP_EVENT_ALL_CLEARED);
    KVP_ASSERT_EQ(dropped, 4); /* 7..10 stored; 1's removal was never due */
    KVP_ASSERT_EQ(kvptest_stats(pool).events_dropped, 4);
    m->dropped += dropped;
    apply(m, ev, n);
    compare(pool, m, 0); /* empty: a subset of the index */
    KVP_ASSERT_EQ(m->n, 0);

    /* after the take, recording resumes; a hash forgotten by the overflow
     * leaves silently, and is announced again when a copy of it is next
     * published */
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, ids[1])); /* 2: not announced now */
    assert_no_events(pool);
    kvp_block again = publish_new(pool, 3); /* a second copy of 3 */
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    KVP_ASSERT_EQ(m->stored, 7); /* 1, 2, 3..6, and 3 again */
    KVP_ASSERT_EQ(m->n, 1);
    assert_true(set_find(m, 3) >= 0);
    publish_new(pool, 3); /* a third: 3 is announced already */
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, again)); /* the mark moves to a copy */
    assert_no_events(pool);
    KVP_ASSERT_OK(kvp_unpublish(pool, ids[2])); /* and to the third */
    assert_no_events(pool);
    kvptest_check(pool);
    kvp_block b = publish_new(pool, 11);
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    compare(pool, m, 0);
    KVP_ASSERT_EQ(m->n, 2); /* 3 and 11: 4..10 stay unannounced */
    free1(pool, b);
    KVP_ASSERT_OK(kvp_unpublish(pool, b));
    KVP_ASSERT_EQ(sync_model(pool, m), 0);
    KVP_ASSERT_EQ(m->n, 1);
    kvptest_check(pool);

    /* the queue also bounds tokens: a 4-block admission fits, five blocks
     * of tokens in one take do not */
    KVP_ASSERT_OK(kvp_clear_index(pool));
    sync_model(pool, m);
    uint32_t t[21];
    kvptest_tokens(t, 21, 300);
    kvp_seq *s;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &s));
    size_t cached;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 21, &cached)); /* 5 full blocks */
    ev = take(pool, &n, &dropped);
    KVP_ASSERT_EQ(dropped, 1);
    KVP_ASSERT_EQ(n, 2);
    KVP_ASSERT_EQ(ev[0].n_hashes, 4);
    KVP_ASSERT_EQ(ev[1].kind, KVP_EVENT_ALL_CLEARED);
    KVP_ASSERT_OK(kvp_seq_destroy(s));
    kvp_pool_destroy(pool);
    free(m);
}

/* ---- allocation failures while creating the event queue ----------------- */

typedef struct failer {
    long fail_at; /* fail the allocation with this index (-1: never) */
    long count;
    size_t live; /* bytes outstanding */
} failer;

static void *f_alloc(void *user, size_t size)
{
    failer *f = user;
    if (f->count++ == f->fail_at)
        return NULL;
    void *p = malloc(size);
    if (p)
        f->live += size;
    return p;
}

static void f_release(void *user, void *ptr, size_t size)
{
    failer *f = user;
    if (!ptr)
        return;
    f->live -= size;
    free(ptr);
}

static void test_create_alloc_failures(void **state)
{
    (void)state;
    failer f = {-1, 0, 0};
    kvp_allocator a = {f_alloc, f_release, &f};
    kvp_config plain = ev_config(16, 8);
    plain.events = 0;
    plain.allocator = &a;
    kvp_pool *pool = NULL;
    KVP_ASSERT_OK(kvp_pool_create(&plain, &pool));
    long without = f.count;
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(f.live, 0);

    kvp_config cfg = ev_config(16, 8);
    cfg.medium = "HBM";
    cfg.allocator = &a;
    f.count = 0;
    KVP_ASSERT_OK(kvp_pool_create(&cfg, &pool));
    long with = f.count;
    assert_true(with > without); /* the queue allocates at creation */
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(f.live, 0);

    for (long k = 0; k < with; k++) {
        f = (failer){k, 0, 0};
        pool = NULL;
        KVP_ASSERT_STATUS(kvp_pool_create(&cfg, &pool), KVP_ENOMEM);
        assert_null(pool);
        if (f.live != 0)
            fail_msg("failing allocation %ld of %ld leaked %zu bytes", k, with, f.live);
    }

    /* a pool that survives creation records without allocating, except to
     * intern a LoRA name; when that fails the event goes without the name */
    f = (failer){-1, 0, 0};
    KVP_ASSERT_OK(kvp_pool_create(&cfg, &pool));
    kvp_extra_keys x = {1, 1, "lora-x", NULL, 0, NULL, 0};
    kvp_seq *s;
    KVP_ASSERT_OK(kvp_seq_create(pool, 1, &x, &s));
    long before = f.count;
    kvp_block b = kvptest_take(pool, KVP_STREAM_SHARED, KVP_ANON);
    kvp_hash h = kvptest_hash(5);
    KVP_ASSERT_OK(kvp_publish(pool, b, &h));
    KVP_ASSERT_OK(kvp_unpublish(pool, b));
    size_t n;
    take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 2);
    KVP_ASSERT_EQ(f.count, before); /* no allocation for plain events */
    uint32_t t[5] = {1, 2, 3, 4, 5};
    size_t cached;
    KVP_ASSERT_OK(kvp_seq_admit(s, t, 1, &cached)); /* no full block yet */
    f.fail_at = f.count; /* the next allocation (the intern) fails */
    KVP_ASSERT_OK(kvp_seq_append(s, t + 1, 4));
    const kvp_event *ev = take(pool, &n, NULL);
    KVP_ASSERT_EQ(n, 1);
    KVP_ASSERT_EQ(ev[0].kind, KVP_EVENT_STORED);
    assert_null(ev[0].lora_name);
    KVP_ASSERT_OK(kvp_seq_destroy(s));
    kvp_pool_destroy(pool);
    KVP_ASSERT_EQ(f.live, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_off),
        cmocka_unit_test(test_external_hash),
        cmocka_unit_test(test_publish_stored),
        cmocka_unit_test(test_medium),
        cmocka_unit_test(test_unpublish_removed),
        cmocka_unit_test(test_evict_removed),
        cmocka_unit_test(test_reuse_and_take_id_removed),
        cmocka_unit_test(test_shrink_retire_removed),
        cmocka_unit_test(test_clears),
        cmocka_unit_test(test_pool_clear_keeps_subscriber_consistent),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_separate_lists_per_hash),
        cmocka_unit_test(test_clear_index_running_sequence),
        cmocka_unit_test(test_seq_coalescing),
        cmocka_unit_test(test_seq_lora_and_mm),
        cmocka_unit_test(test_publish_verified_carries_tokens),
        cmocka_unit_test(test_double_buffer),
        cmocka_unit_test(test_random_subscriber_model),
        cmocka_unit_test(test_random_separate_lists),
        cmocka_unit_test(test_random_overflow),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_create_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
