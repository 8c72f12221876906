/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_storage.c — backing storage (kvpool.h "Backing storage").
 *
 * Host-arena pools: every sequence writes a distinct byte pattern into its
 * blocks through kvp_block_ptr; after fork, copy-on-write appends,
 * relocation (kvp_retire_top), shrink, growth by kvp_extend and by growth on
 * exhaustion (the arena moves: pointers are fetched again), each sequence
 * must still read its own bytes at its (possibly new) block ids.
 * Copy-hook pools (no arena): the hook is called for copy-on-write and for
 * relocation with the right (stream, src, dst), before the block table
 * changes, and a call back into the pool from the hook gets KVP_EBUSY.
 */
#include "kvptest.h"

#include <stdio.h>
#include <string.h>

#define BB 48      /* bytes per block */
#define MAXSEQ 8
#define MAXBLK 64

/* ---- host arena: a tiny model of each sequence's bytes -------------------- */

typedef struct tseq {
    kvp_seq *seq;
    uint64_t id;
    size_t nblocks;
    uint8_t bytes[MAXBLK][BB]; /* expected contents per logical block */
} tseq;

typedef struct world {
    kvp_pool *pool;
    tseq s[MAXSEQ];
    int live[MAXSEQ];
} world;

static uint8_t *ptr_at(kvp_pool *pool, kvp_block b, const char *file, int line)
{
    void *p = NULL;
    kvptest_assert_status(kvp_block_ptr(pool, b, &p), KVP_OK, "kvp_block_ptr", file, line);
    if (!p)
        _fail(file, line);
    return p;
}
#define PTR(pool, b) ptr_at((pool), (b), __FILE__, __LINE__)

static size_t seq_table(kvp_seq *s, const kvp_block **ids)
{
    size_t n = 0;
    KVP_ASSERT_OK(kvp_seq_blocks(s, ids, &n, NULL));
    return n;
}

/* Write a pattern for (sequence k, logical block i, version v) into the
 * block, and remember it. */
static void write_block(world *w, int k, size_t i, uint8_t v)
{
    const kvp_block *ids;
    size_t n = seq_table(w->s[k].seq, &ids);
    assert_true(i < n);
    uint8_t pat[BB];
    for (int j = 0; j < BB; j++)
        pat[j] = (uint8_t)(k * 53 + i * 17 + j * 3 + v * 101 + 1);
    memcpy(PTR(w->pool, ids[i]), pat, BB);
    memcpy(w->s[k].bytes[i], pat, BB);
}

/* Every live sequence reads its own bytes at its current ids. */
static void verify_at(world *w, const char *file, int line)
{
    for (int k = 0; k < MAXSEQ; k++) {
        if (!w->live[k])
            continue;
        const kvp_block *ids;
        size_t n = seq_table(w->s[k].seq, &ids);
        if (n != w->s[k].nblocks) {
            print_error("%s:%d: sequence %d has %zu blocks, expected %zu\n", file, line, k, n,
                        w->s[k].nblocks);
            _fail(file, line);
        }
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = ptr_at(w->pool, ids[i], file, line);
            if (memcmp(p, w->s[k].bytes[i], BB) != 0) {
                print_error("%s:%d: sequence %d block %zu (id %u): bytes differ (got %02x.., "
                            "expected %02x..)\n",
                            file, line, k, i, (unsigned)ids[i], p[0], w->s[k].bytes[i][0]);
                _fail(file, line);
            }
        }
    }
    kvptest_check_at(w->pool, file, line);
}
#define VERIFY(w) verify_at((w), __FILE__, __LINE__)

static void w_admit(world *w, int k, uint64_t id, const uint32_t *t, size_t n)
{
    KVP_ASSERT_OK(kvp_seq_create(w->pool, id, NULL, &w->s[k].seq));
    w->s[k].id = id;
    size_t cached = 0;
    KVP_ASSERT_OK(kvp_seq_admit(w->s[k].seq, t, n, &cached));
    const kvp_block *ids;
    w->s[k].nblocks = seq_table(w->s[k].seq, &ids);
    w->live[k] = 1;
    /* Blocks served from cache hold their content already: adopt it; write
     * the rest. */
    for (size_t i = 0; i < cached / 4; i++)
        memcpy(w->s[k].bytes[i], PTR(w->pool, ids[i]), BB);
    for (size_t i = cached / 4; i < w->s[k].nblocks; i++)
        write_block(w, k, i, 0);
}

static void w_fork(world *w, int parent, int k, uint64_t id)
{
    KVP_ASSERT_OK(kvp_seq_fork(w->s[parent].seq, id, &w->s[k].seq));
    w->s[k].id = id;
    w->s[k].nblocks = w->s[parent].nblocks;
    memcpy(w->s[k].bytes, w->s[parent].bytes, sizeof w->s[k].bytes);
    w->live[k] = 1;
}

/* Append tokens; new blocks get fresh patterns; the old last block (maybe
 * copied) keeps its bytes, then gets a new version written (the token). */
static void w_append(world *w, int k, const uint32_t *t, size_t n, uint8_t v)
{
    size_t before = w->s[k].nblocks, ntok = 0;
    const kvp_block *ids;
    KVP_ASSERT_OK(kvp_seq_blocks(w->s[k].seq, &ids, &before, &ntok));
    int partial = ntok % 4 != 0; /* block size 4 */
    KVP_ASSERT_OK(kvp_seq_append(w->s[k].seq, t, n));
    w->s[k].nblocks = seq_table(w->s[k].seq, &ids);
    VERIFY(w); /* the copy (if any) carried the bytes over */
    /* The token lands in the old last block only when it had room; a
     * shared one was copied first, so writing it touches no one else. */
    if (partial)
        write_block(w, k, before - 1, v);
    for (size_t i = before; i < w->s[k].nblocks; i++)
        write_block(w, k, i, v);
}

static void w_destroy(world *w, int k)
{
    KVP_ASSERT_OK(kvp_seq_destroy(w->s[k].seq));
    w->live[k] = 0;
}

/* Up to `rounds` kvp_retire_top calls, stopping early when no block is free
 * (KVP_EEXHAUSTED); every sequence must read its own bytes after each.
 * Returns how many of them moved a block in use. */
static int retire_rounds_at(world *w, int rounds, const char *file, int line)
{
    int moved_any = 0;
    for (int round = 0; round < rounds; round++) {
        kvp_block retired = 0, moved = 0;
        kvp_status st = kvp_retire_top(w->pool, &retired, &moved);
        if (st == KVP_EEXHAUSTED)
            break;
        kvptest_assert_status(st, KVP_OK, "kvp_retire_top", file, line);
        moved_any += moved != KVP_NO_BLOCK;
        verify_at(w, file, line);
    }
    return moved_any;
}
#define retire_rounds(w, rounds) retire_rounds_at((w), (rounds), __FILE__, __LINE__)

static kvp_config arena_config(uint32_t n, kvp_reuse reuse)
{
    kvp_config cfg = kvptest_config(n);
    cfg.block_size = 4;
    cfg.reuse = reuse;
    cfg.host_arena = 1;
    cfg.block_bytes[0] = BB;
    return cfg;
}

static void test_arena_sequences(void **state)
{
    (void)state;
    static world w;
    memset(&w, 0, sizeof w);
    kvp_config cfg = arena_config(8, KVP_REUSE_LOWEST);
    w.pool = kvptest_create(&cfg);
    uint32_t t[64];
    kvptest_tokens(t, 64, 1);
    uint32_t u[64];
    kvptest_tokens(u, 64, 1000);

    w_admit(&w, 0, 1, t, 10); /* 0 1 2 */
    VERIFY(&w);
    w_fork(&w, 0, 1, 2);
    VERIFY(&w);
    /* B writes into the shared partial block: COW copies the bytes. */
    const kvp_block *ids;
    seq_table(w.s[1].seq, &ids);
    kvp_block shared_last = ids[2];
    w_append(&w, 1, t + 10, 1, 1);
    seq_table(w.s[1].seq, &ids);
    assert_int_not_equal(ids[2], shared_last);
    KVP_ASSERT_EQ(kvptest_stats(w.pool).cow_copies, 1);
    VERIFY(&w);
    /* A appends in place (it holds its last block alone now). */
    w_append(&w, 0, t + 10, 3, 2); /* fills block 2, allocates block 3 */
    VERIFY(&w);
    w_admit(&w, 2, 3, u, 9); /* C */
    VERIFY(&w);

    /* Relocation: retire top blocks until an in-use one moves. */
    KVP_ASSERT_OK(kvp_seq_destroy(w.s[0].seq)); /* A goes: frees its own */
    w.live[0] = 0;
    VERIFY(&w);
    int moved_any = retire_rounds(&w, 8);
    assert_true(moved_any >= 1);
    KVP_ASSERT_EQ(kvptest_stats(w.pool).relocated, (uint64_t)moved_any);
    /* A retired id has no address. */
    kvp_stats st = kvptest_stats(w.pool);
    void *p = NULL;
    KVP_ASSERT_STATUS(kvp_block_ptr(w.pool, (kvp_block)st.blocks + 2, &p), KVP_ERANGE);

    /* Grow: the arena moves.  Fetch pointers again (VERIFY does). */
    uint8_t *before = PTR(w.pool, 0);
    uint32_t added = 0;
    KVP_ASSERT_OK(kvp_extend(w.pool, KVP_STREAM_SHARED, 200, &added));
    KVP_ASSERT_EQ(added, 200);
    VERIFY(&w);
    (void)before; /* may or may not equal the new address */
    /* New sequences in the new blocks; old ones keep their bytes. */
    w_admit(&w, 3, 4, u + 20, 40);
    w_fork(&w, 3, 4, 5);
    w_append(&w, 4, t, 3, 3);
    w_append(&w, 3, u, 5, 4);
    VERIFY(&w);
    /* Shrink: retires free blocks only, nothing moves. */
    uint32_t n_retired = 0;
    KVP_ASSERT_OK(kvp_shrink(w.pool, KVP_STREAM_SHARED, 0, &n_retired));
    assert_true(n_retired > 0);
    VERIFY(&w);
    /* And more relocation after shrink: free something low, retire top. */
    w_destroy(&w, 2);
    retire_rounds(&w, 4);
    /* Grow again (extend after shrink reuses retired ids first). */
    KVP_ASSERT_OK(kvp_extend(w.pool, KVP_STREAM_SHARED, 300, &added));
    VERIFY(&w);
    w_admit(&w, 5, 6, t, 60); /* hits b's first blocks */
    VERIFY(&w);
    KVP_ASSERT_EQ(memcmp(w.s[5].bytes[0], w.s[1].bytes[0], BB), 0);
    kvp_pool_destroy(w.pool);
}

/* Growth on exhaustion during admission moves the arena too. */
static void test_arena_grow_on_exhaustion(void **state)
{
    (void)state;
    static world w;
    memset(&w, 0, sizeof w);
    kvp_config cfg = arena_config(4, KVP_REUSE_LIFO);
    cfg.grow_on_exhaustion = 1;
    w.pool = kvptest_create(&cfg);
    uint32_t t[256];
    for (int i = 0; i < 256; i++)
        t[i] = (uint32_t)(i * 7);
    w_admit(&w, 0, 1, t, 14);
    w_fork(&w, 0, 1, 2);
    VERIFY(&w);
    for (int k = 2; k < 7; k++) {
        w_admit(&w, k, (uint64_t)(10 + k), t + 20 * k, 37);
        w_append(&w, 1, t + 100 + k, 1, (uint8_t)k);
        VERIFY(&w);
    }
    assert_true(kvptest_stats(w.pool).grown > 0);
    kvp_pool_destroy(w.pool);
}

static void test_block_ptr_errors(void **state)
{
    (void)state;
    kvp_config cfg = arena_config(4, KVP_REUSE_LIFO);
    kvp_pool *pool = kvptest_create(&cfg);
    void *p = NULL;
    KVP_ASSERT_STATUS(kvp_block_ptr(NULL, 0, &p), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_block_ptr(pool, 0, NULL), KVP_EINVAL);
    KVP_ASSERT_STATUS(kvp_block_ptr(pool, 4, &p), KVP_ERANGE);
    KVP_ASSERT_STATUS(kvp_block_ptr(pool, KVP_NO_BLOCK, &p), KVP_ERANGE);
    /* Distinct, block_bytes apart, aligned; never-used blocks have them. */
    uint8_t *b0 = PTR(pool, 0), *b1 = PTR(pool, 1), *b3 = PTR(pool, 3);
    KVP_ASSERT_EQ((uintptr_t)(b1 - b0), BB);
    KVP_ASSERT_EQ((uintptr_t)(b3 - b0), 3 * BB);
    KVP_ASSERT_EQ((uintptr_t)b0 % 64, 0);
    memset(b3, 0xee, BB); /* writable */
    kvp_pool_destroy(pool);

    /* No arena: refused. */
    kvp_config plain = kvptest_config(4);
    plain.block_bytes[0] = BB;
    kvp_pool *pp = kvptest_create(&plain);
    KVP_ASSERT_STATUS(kvp_block_ptr(pp, 0, &p), KVP_EINVAL);
    kvp_pool_destroy(pp);

    /* Separate K/V arenas: K and V ids address their own stream's arena. */
    kvp_config kv = kvptest_config(8);
    kv.separate_kv = 1;
    kv.host_arena = 1;
    kv.block_bytes[0] = 32;
    kv.block_bytes[1] = 16;
    kvp_pool *kp = kvptest_create(&kv);
    uint8_t *k0 = PTR(kp, 0), *k1 = PTR(kp, 1), *v4 = PTR(kp, 4), *v5 = PTR(kp, 5);
    KVP_ASSERT_EQ((uintptr_t)(k1 - k0), 32);
    KVP_ASSERT_EQ((uintptr_t)(v5 - v4), 16);
    memset(k0, 1, 32 * 4);
    memset(v4, 2, 16);
    memset(v5, 3, 16);
    KVP_ASSERT_EQ(k0[0], 1);
    KVP_ASSERT_EQ(v4[15], 2);
    kvp_pool_destroy(kp);

    /* Only a V arena (block_bytes[0] = 0): K ids have no address. */
    kv.block_bytes[0] = 0;
    kp = kvptest_create(&kv);
    KVP_ASSERT_STATUS(kvp_block_ptr(kp, 0, &p), KVP_EINVAL);
    (void)PTR(kp, 4);
    kvp_pool_destroy(kp);
}

/* ---- copy hook ------------------------------------------------------------ */

typedef struct hook_rec {
    kvp_pool *pool;
    size_t n;
    kvp_stream stream[32];
    kvp_block src[32], dst[32];
    /* What the watched table said at call time. */
    const kvp_block *watch;
    size_t watch_i;
    kvp_block watched[32];
    int reenter_status[32];
    int reenter_status2[32];
} hook_rec;

static void copy_hook(void *user, kvp_stream stream, kvp_block src, kvp_block dst)
{
    hook_rec *r = user;
    size_t i = r->n++;
    if (i >= 32)
        return;
    r->stream[i] = stream;
    r->src[i] = src;
    r->dst[i] = dst;
    r->watched[i] = r->watch ? r->watch[r->watch_i] : KVP_NO_BLOCK;
    kvp_stats st;
    r->reenter_status[i] = (int)kvp_stats_get(r->pool, &st);
    kvp_block_info bi;
    r->reenter_status2[i] = (int)kvp_block_get(r->pool, src, &bi);
}

/* The hook's call number i (from 0) copied src to dst in stream. */
static void expect_copy_at(const hook_rec *r, size_t i, kvp_stream stream, kvp_block src,
                           kvp_block dst, const char *file, int line)
{
    kvptest_assert_eq(r->stream[i], stream, "stream", "expected", file, line);
    kvptest_assert_eq(r->src[i], src, "src", "expected", file, line);
    kvptest_assert_eq(r->dst[i], dst, "dst", "expected", file, line);
}
#define expect_copy(r, i, stream, src, dst) \
    expect_copy_at((r), (i), (stream), (src), (dst), __FILE__, __LINE__)

/* 8 blocks, reuse order LOWEST, the copy hook recording into r (cleared
 * here; r->pool is set once the pool exists). */
static kvp_config hook_config(hook_rec *r)
{
    memset(r, 0, sizeof *r);
    kvp_config cfg = kvptest_config(8);
    cfg.reuse = KVP_REUSE_LOWEST;
    cfg.copy = copy_hook;
    cfg.copy_user = r;
    return cfg;
}

static void test_copy_hook(void **state)
{
    (void)state;
    for (int thread_safe = 0; thread_safe < 2; thread_safe++) {
        static hook_rec r;
        kvp_config cfg = hook_config(&r);
        cfg.block_size = 4;
        cfg.block_bytes[0] = BB;
        cfg.thread_safe = thread_safe;
        kvp_pool *pool = kvptest_create(&cfg);
        r.pool = pool;
        uint32_t t[32];
        kvptest_tokens(t, 32, 5);
        kvp_seq *a = NULL, *b = NULL;
        KVP_ASSERT_OK(kvp_seq_create(pool, 1, NULL, &a));
        KVP_ASSERT_OK(kvp_seq_admit(a, t, 10, NULL)); /* 0 1 2 */
        KVP_ASSERT_OK(kvp_seq_fork(a, 2, &b));
        KVP_ASSERT_EQ(r.n, 0); /* fork copies nothing */
        const kvp_block *ids;
        size_t n = 0;
        KVP_ASSERT_OK(kvp_seq_blocks(b, &ids, &n, NULL));
        r.watch = ids;
        r.watch_i = 2;
        KVP_ASSERT_OK(kvp_seq_append(b, t + 10, 1));
        KVP_ASSERT_EQ(r.n, 1);
        expect_copy(&r, 0, KVP_STREAM_SHARED, 2, 3);
        KVP_ASSERT_EQ(r.watched[0], 2); /* table not yet changed */
        KVP_ASSERT_EQ(r.reenter_status[0], KVP_EBUSY);
        KVP_ASSERT_EQ(r.reenter_status2[0], KVP_EBUSY);
        KVP_ASSERT_OK(kvp_seq_blocks(b, &ids, &n, NULL));
        KVP_ASSERT_EQ(ids[2], 3);
        r.watch = NULL;
        /* No copy for an exclusive block, a full shared one, or a fresh
         * block. */
        KVP_ASSERT_OK(kvp_seq_append(a, t + 10, 1));
        KVP_ASSERT_OK(kvp_seq_append(b, t + 11, 5));
        KVP_ASSERT_EQ(r.n, 1);
        kvptest_check(pool);

        /* Relocation: b's blocks are 0 1 3 4; a's 0 1 2.  Free 5..7 are at
         * the top: retire them, then the top (4, b's) moves down. */
        kvp_seq *c = NULL;
        KVP_ASSERT_OK(kvp_seq_create(pool, 3, NULL, &c));
        uint32_t u[4] = {1, 1, 1, 1};
        KVP_ASSERT_OK(kvp_seq_admit(c, u, 3, NULL)); /* 5 */
        kvp_block retired, moved;
        /* 7, 6: free, dropped, no copy. */
        KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
        KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
        KVP_ASSERT_EQ(r.n, 1);
        KVP_ASSERT_OK(kvp_seq_destroy(a)); /* frees 2 (a's own) */
        KVP_ASSERT_OK(kvp_seq_blocks(c, &ids, &n, NULL));
        r.watch = ids;
        r.watch_i = 0;
        KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
        KVP_ASSERT_EQ(retired, 5);
        KVP_ASSERT_EQ(moved, 2);
        KVP_ASSERT_EQ(r.n, 2);
        expect_copy(&r, 1, KVP_STREAM_SHARED, 5, 2);
        KVP_ASSERT_EQ(r.watched[1], 5); /* before the table changed */
        KVP_ASSERT_EQ(r.reenter_status[1], KVP_EBUSY);
        KVP_ASSERT_OK(kvp_seq_blocks(c, &ids, &n, NULL));
        KVP_ASSERT_EQ(ids[0], 2);
        r.watch = NULL;
        kvptest_done(pool);
    }
}

/* Copy hook with separate K/V lists: the stream passed is K or V. */
static void test_copy_hook_streams(void **state)
{
    (void)state;
    static hook_rec r;
    kvp_config cfg = hook_config(&r);
    cfg.separate_kv = 1;
    cfg.block_bytes[0] = 64;
    cfg.block_bytes[1] = 64;
    kvp_pool *pool = kvptest_create(&cfg);
    r.pool = pool;
    /* K: 0..3, V: 4..7.  Take V blocks until 7 is in use. */
    kvp_block v[4];
    for (int i = 0; i < 4; i++)
        v[i] = kvptest_take(pool, KVP_STREAM_V, 1);
    KVP_ASSERT_EQ(v[3], 7);
    KVP_ASSERT_OK(kvp_free(pool, &v[0], 1, 1)); /* 4 free */
    kvp_block retired, moved;
    KVP_ASSERT_OK(kvp_retire_top(pool, &retired, &moved));
    KVP_ASSERT_EQ(retired, 7);
    KVP_ASSERT_EQ(moved, 4);
    KVP_ASSERT_EQ(r.n, 1);
    expect_copy(&r, 0, KVP_STREAM_V, 7, 4);
    kvptest_done(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_sequences),
        cmocka_unit_test(test_arena_grow_on_exhaustion),
        cmocka_unit_test(test_block_ptr_errors),
        cmocka_unit_test(test_copy_hook),
        cmocka_unit_test(test_copy_hook_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
