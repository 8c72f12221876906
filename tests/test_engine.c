/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine.c — the engine example (examples/engine/) against its dense
 * reference: kvpool as a real KV cache.
 *
 * Every configuration runs the same requests through the continuous-batching
 * loop, with kvp_pool_check and the engine's own invariants after every
 * step, and asserts that every sample's tokens and final logits equal, bit
 * for bit, those of the sample run alone over a contiguous K/V array:
 * prefix caching on and off, chunked prefill under a tiny token budget, a
 * pool small enough to force preemption, forks (n > 1) with copy-on-write, a
 * kvp_retire_top shrink in the middle, thread_safe (with two threads
 * computing decodes), verify_hits, greedy
 * decoding, speculative decoding (drafts rolled back with kvp_seq_truncate).
 * Each configuration also asserts that the mechanism it is about
 * really happened (hits, preemptions, forks, copies, relocations).  Also:
 * a llama2.c checkpoint written and read back gives the same results, and
 * hostile checkpoints and impossible requests are refused without a crash.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvptest.h"

#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NREQ 9
#define MAX_PROMPT 48

static const tfm_config tiny = {
    .dim = 32, .hidden_dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
    .vocab_size = 64, .seq_len = 256};

static tfm_model g_model;
static uint32_t g_prompts[NREQ][MAX_PROMPT];
static eng_request g_reqs[NREQ];
static eng_output g_ref[NREQ * 3][2]; /* per sample: [0] sampled, [1] greedy */
static size_t g_samples;

/* Requests sharing prefixes the way conversations do: a common system
 * prefix, two families of follow-ups, a few unrelated prompts.  With
 * `forks`, every third request asks for 3 samples. */
static size_t make_requests(eng_request *r, int forks)
{
    uint32_t sys[24];
    for (int i = 0; i < 24; i++)
        sys[i] = (uint32_t)(tfm_mix(1000 + (uint64_t)i) % 64);
    size_t total = 0;
    for (int q = 0; q < NREQ; q++) {
        uint32_t *p = g_prompts[q];
        size_t n = 0, shared = q < 6 ? (q % 2 ? 24 : 13) : 0;
        memcpy(p, sys, shared * sizeof *p);
        n = shared;
        size_t own = 3 + (size_t)(tfm_mix(7 * (uint64_t)q) % 22);
        for (size_t i = 0; i < own && n < MAX_PROMPT; i++)
            p[n++] = (uint32_t)(tfm_mix(((uint64_t)q << 20) + i) % 64);
        r[q] = (eng_request){.id = 100 + (uint64_t)q, .prompt = p, .n_prompt = n,
                             .max_tokens = 4 + (size_t)q % 7, .n = forks && q % 3 == 0 ? 3 : 1};
        total += r[q].n;
    }
    return total;
}

/* The seeded model and every sample's dense reference, sampled and greedy. */
static int setup(void **state)
{
    (void)state;
    char err[200];
    if (tfm_init_seeded(&g_model, &tiny, 42, err, sizeof err))
        return -1;
    g_samples = make_requests(g_reqs, 1);
    for (size_t q = 0, k = 0; q < NREQ; q++)
        for (unsigned s = 0; s < g_reqs[q].n; s++, k++)
            for (int greedy = 0; greedy < 2; greedy++)
                if (eng_dense(&g_model, &g_reqs[q], s, greedy ? 0.0f : 1.0f, 7, &g_ref[k][greedy],
                              err, sizeof err))
                    return -1;
    return 0;
}

/* Release the references and the model. */
static int teardown(void **state)
{
    (void)state;
    for (size_t k = 0; k < g_samples; k++)
        for (int g = 0; g < 2; g++)
            eng_output_free(&g_ref[k][g]);
    tfm_free(&g_model);
    return 0;
}

/* Run `cfg` over the requests (all with n = 1 unless `forks`) and compare
 * every sample with the dense reference. */
static eng_summary run_and_compare(const eng_config *cfg, int forks, const tfm_model *model)
{
    eng_request reqs[NREQ];
    size_t total = make_requests(reqs, forks);
    eng_output outs[NREQ * 3];
    eng_summary sum;
    char err[256] = "";
    int rc = eng_run(cfg, reqs, NREQ, outs, &sum, err, sizeof err);
    if (rc)
        fail_msg("eng_run: %s", err);
    int greedy = cfg->temperature == 0.0f;
    size_t k = 0, kr = 0;
    for (size_t q = 0; q < NREQ; q++) {
        for (unsigned s = 0; s < g_reqs[q].n; s++, kr++) {
            if (s >= reqs[q].n)
                continue; /* the reference has samples this run did not ask for */
            const eng_output *ref = &g_ref[kr][greedy];
            const eng_output *o = &outs[k++];
            KVP_ASSERT_EQ(o->n_tokens, reqs[q].max_tokens);
            if (memcmp(o->tokens, ref->tokens, o->n_tokens * sizeof *o->tokens))
                fail_msg("request %zu sample %u: tokens differ from the dense reference", q, s);
            if (memcmp(o->logits, ref->logits, (size_t)model->cfg.vocab_size * sizeof(float)))
                fail_msg("request %zu sample %u: final logits differ from the dense reference", q,
                         s);
        }
    }
    KVP_ASSERT_EQ(k, total);
    for (size_t i = 0; i < total; i++)
        eng_output_free(&outs[i]);
    KVP_ASSERT_EQ(sum.requests, NREQ);
    KVP_ASSERT_EQ(sum.samples, total);
    return sum;
}

/* Blocks of 4 tokens, room for everything, 8 running, checks after every
 * step; each test changes what it is about. */
static eng_config base_config(void)
{
    eng_config c;
    eng_config_default(&c, &g_model);
    c.block_size = 4;
    c.num_blocks = 128;
    c.token_budget = 32;
    c.max_running = 8;
    c.seed = 7;
    c.check_each_step = 1;
    return c;
}

static void test_prefix_caching_on(void **state)
{
    (void)state;
    eng_config c = base_config();
    eng_summary s = run_and_compare(&c, 0, &g_model);
    KVP_ASSERT_EQ(s.preemptions, 0);
    if (s.prefill_tokens_cached == 0)
        fail_msg("no prompt token was served from cache");
    KVP_ASSERT_EQ(s.prefill_tokens_cached + s.prefill_tokens_computed, s.prompt_tokens);
}

static void test_prefix_caching_off(void **state)
{
    (void)state;
    eng_config c = base_config();
    c.prefix_caching = 0;
    eng_summary s = run_and_compare(&c, 0, &g_model);
    KVP_ASSERT_EQ(s.prefill_tokens_cached, 0);
    KVP_ASSERT_EQ(s.prefill_tokens_computed, s.prompt_tokens);
}

/* A budget of 2 tokens a step: every prompt is prefilled in chunks, the
 * first admitted after its cached prefix, the rest appended. */
static void test_chunked_prefill(void **state)
{
    (void)state;
    eng_config c = base_config();
    c.token_budget = 2;
    c.max_running = 2;
    eng_summary s = run_and_compare(&c, 0, &g_model);
    if (s.prefill_tokens_cached == 0)
        fail_msg("no prompt token was served from cache");
}

/* 14 blocks of 4 tokens: one request alone fits (at most 13 blocks), the
 * batch does not. */
static void test_preemption(void **state)
{
    (void)state;
    for (int caching = 0; caching < 2; caching++) {
        eng_config c = base_config();
        c.num_blocks = 14;
        c.prefix_caching = caching;
        eng_summary s = run_and_compare(&c, 0, &g_model);
        if (s.preemptions == 0)
            fail_msg("the small pool preempted nothing");
    }
}

static void test_forks(void **state)
{
    (void)state;
    for (int small = 0; small < 2; small++) {
        eng_config c = base_config();
        c.num_blocks = small ? 16 : 128;
        eng_summary s = run_and_compare(&c, 1, &g_model);
        KVP_ASSERT_EQ(s.forks, 6); /* 3 requests x 2 extra samples */
        if (s.cow_copies == 0)
            fail_msg("no copy-on-write happened");
        if (small && s.preemptions == 0)
            fail_msg("the small pool preempted nothing");
    }
}

/* kvp_retire_top in the middle of the run: blocks in use move (kvpool
 * copies their bytes and rewrites the tables) and decoding continues. */
static void test_retire_mid_run(void **state)
{
    (void)state;
    eng_config c = base_config();
    c.num_blocks = 40;
    c.retire_at_step = 4;
    c.retire_blocks = 24;
    eng_summary s = run_and_compare(&c, 1, &g_model);
    KVP_ASSERT_EQ(s.retired, 24);
    if (s.relocated == 0)
        fail_msg("the retire moved no block in use");
}

/* thread_safe with 1 and with 2 threads (the second computes half of each
 * step's decodes, calling kvp_seq_blocks concurrently), verify_hits. */
static void test_thread_safe_and_verify_hits(void **state)
{
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        eng_config c = base_config();
        c.thread_safe = mode != 1;
        c.verify_hits = mode != 0;
        c.threads = mode >= 2 ? 2 : 1;
        c.spec_tokens = mode == 3 ? 2 : 0; /* drafts serially, the rest on two threads */
        c.num_blocks = 20;
        eng_summary s = run_and_compare(&c, 1, &g_model);
        if (s.prefill_tokens_cached == 0)
            fail_msg("no prompt token was served from cache");
        if (s.preemptions == 0)
            fail_msg("the small pool preempted nothing");
    }
}

static void test_greedy(void **state)
{
    (void)state;
    eng_config c = base_config();
    c.temperature = 0.0f;
    c.num_blocks = 16;
    run_and_compare(&c, 1, &g_model);
}

/* Speculative decoding: drafts by prompt lookup, verified in one pass, the
 * rejected ones cut off the sequence by kvp_seq_truncate (into shared and
 * published blocks too, with forks and a small pool).  The tokens must be
 * those of plain decoding. */
static void test_speculative(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++) {
        eng_config c = base_config();
        c.spec_tokens = 3;
        c.temperature = mode == 0 ? 0.0f : 1.0f;
        c.num_blocks = mode == 2 ? 16 : 128;
        c.token_budget = 12;
        c.max_running = 4;
        eng_summary s = run_and_compare(&c, mode != 0, &g_model);
        if (s.spec_drafted == 0 || s.spec_drafted == s.spec_accepted)
            fail_msg("mode %d: %llu drafted, %llu accepted: no rollback", mode,
                     (unsigned long long)s.spec_drafted, (unsigned long long)s.spec_accepted);
        if (mode == 0 && s.spec_accepted == 0)
            fail_msg("greedy decoding accepted no draft");
        if (mode == 2 && s.preemptions == 0)
            fail_msg("the small pool preempted nothing");
    }
}

/* A checkpoint written in the llama2.c format and read back holds the same
 * weights; the engine on the loaded model matches the reference. */
static void test_checkpoint_roundtrip(void **state)
{
    (void)state;
    char path[] = "/tmp/kvp_engine_ckptXXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        fail_msg("mkstemp");
    close(fd);
    char err[200];
    if (tfm_save(&g_model, path, err, sizeof err))
        fail_msg("tfm_save: %s", err);
    tfm_model loaded;
    if (tfm_load(&loaded, path, err, sizeof err))
        fail_msg("tfm_load: %s", err);
    KVP_ASSERT_EQ(loaded.n_floats, g_model.n_floats);
    KVP_ASSERT_EQ(memcmp(loaded.mem, g_model.mem, g_model.n_floats * sizeof(float)), 0);
    KVP_ASSERT_EQ(memcmp(&loaded.cfg, &g_model.cfg, sizeof loaded.cfg), 0);
    eng_config c = base_config();
    c.model = &loaded;
    c.num_blocks = 16;
    run_and_compare(&c, 1, &loaded);
    tfm_free(&loaded);
    unlink(path);
}

/* Write the header h and then `extra` zero bytes to path. */
static void write_file(const char *path, const int32_t h[7], size_t extra)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("fopen %s", path);
    fwrite(h, sizeof(int32_t), 7, f);
    for (size_t i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

/* Truncated, overlong and nonsensical checkpoints are refused with a
 * reason, and leave the model empty. */
static void test_checkpoint_refusals(void **state)
{
    (void)state;
    char path[] = "/tmp/kvp_engine_badXXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        fail_msg("mkstemp");
    close(fd);
    /* dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 4 (shared),
     * seq 4: 4*8 + 8 + 64 + 2*32 + 64 + 8 + 3*128 + 8 = 632 floats, then
     * rotary 4 * 4 = 16. */
    const int32_t good[7] = {8, 16, 1, 2, 1, 4, 4};
    const size_t floats = 632 + 16;
    static const struct {
        int32_t h[7];
        size_t bytes;
    } rows[] = {
        {{8, 16, 1, 2, 1, 4, 4}, 0},                       /* header only */
        {{8, 16, 1, 2, 1, 4, 4}, (632 + 16) * 4 - 1},      /* one byte short */
        {{8, 16, 1, 2, 1, 4, 4}, (632 + 16) * 4 + 1},      /* one byte long */
        {{8, 16, 1, 2, 1, -4, 4}, (632 + 16) * 4},         /* no classifier */
        {{0, 16, 1, 2, 1, 4, 4}, 0},                       /* zero dim */
        {{8, 16, 1, 3, 1, 4, 4}, 0},                       /* heads do not divide */
        {{8, 16, 1, 8, 1, 4, 4}, 0},                       /* head size 1 (odd) */
        {{8, 16, 1, 2, 3, 4, 4}, 0},                       /* kv heads do not divide */
        {{8, 16, 1, 2, 1, INT32_MIN, 4}, 0},               /* vocab INT32_MIN */
        {{65536, 262144, 1024, 1, 1, 4194304, 1}, 0},      /* more than 2^32 weights */
        {{-8, 16, 1, 2, 1, 4, 4}, 0},                      /* negative dim */
    };
    char err[200];
    tfm_model m;
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        write_file(path, rows[i].h, rows[i].bytes);
        err[0] = '\0';
        if (tfm_load(&m, path, err, sizeof err) == 0)
            fail_msg("row %zu: a bad checkpoint was accepted", i);
        if (!err[0])
            fail_msg("row %zu: refused without a reason", i);
        KVP_ASSERT_EQ(m.mem == NULL, 1);
    }
    /* The right length loads. */
    write_file(path, good, floats * 4);
    if (tfm_load(&m, path, err, sizeof err))
        fail_msg("a good checkpoint was refused: %s", err);
    tfm_free(&m);
    KVP_ASSERT_EQ(tfm_load(&m, "/nonexistent/kvp_engine", err, sizeof err), -1);
    unlink(path);
}

/* Requests and configurations the engine cannot run are refused before
 * anything runs, with the reason. */
static void test_engine_refusals(void **state)
{
    (void)state;
    eng_request reqs[NREQ];
    make_requests(reqs, 0);
    eng_output outs[NREQ];
    eng_summary sum;
    char err[256];
    eng_config c = base_config();
    uint32_t need = 0; /* blocks of the longest request */
    for (size_t q = 0; q < NREQ; q++) {
        uint32_t b = (uint32_t)((reqs[q].n_prompt + reqs[q].max_tokens - 2) / c.block_size + 1);
        need = b > need ? b : need;
    }
    c.num_blocks = need - 1;
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), -1);
    if (!strstr(err, "needs"))
        fail_msg("unexpected reason: %s", err);
    c.num_blocks = need;
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), 0);
    for (size_t q = 0; q < NREQ; q++)
        eng_output_free(&outs[q]);
    c.num_blocks = need + 10;
    c.retire_at_step = 2;
    c.retire_blocks = 11; /* keeps one block too few */
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), -1);
    c = base_config();
    c.token_budget = c.max_running - 1;
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), -1);
    c = base_config();
    c.threads = 2; /* without thread_safe */
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), -1);
    c.thread_safe = 1;
    c.threads = ENG_MAX_THREADS + 1;
    KVP_ASSERT_EQ(eng_run(&c, reqs, NREQ, outs, &sum, err, sizeof err), -1);
    c = base_config();
    eng_request bad = reqs[0];
    uint32_t tok[2] = {1, 64}; /* 64 is outside the vocabulary */
    bad.prompt = tok;
    bad.n_prompt = 2;
    KVP_ASSERT_EQ(eng_run(&c, &bad, 1, outs, &sum, err, sizeof err), -1);
    bad = reqs[0];
    bad.max_tokens = (size_t)tiny.seq_len; /* passes the last position */
    KVP_ASSERT_EQ(eng_run(&c, &bad, 1, outs, &sum, err, sizeof err), -1);
    bad = reqs[0];
    bad.n = ENG_MAX_N + 1;
    KVP_ASSERT_EQ(eng_run(&c, &bad, 1, outs, &sum, err, sizeof err), -1);
    /* Two requests with one id: kvpool refuses the second sequence. */
    eng_request dup[2] = {reqs[0], reqs[1]};
    dup[1].id = dup[0].id;
    KVP_ASSERT_EQ(eng_run(&c, dup, 2, outs, &sum, err, sizeof err), -1);
    if (!strstr(err, "kvp_seq_create"))
        fail_msg("unexpected reason: %s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_caching_on),
        cmocka_unit_test(test_prefix_caching_off),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_forks),
        cmocka_unit_test(test_retire_mid_run),
        cmocka_unit_test(test_thread_safe_and_verify_hits),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_checkpoint_refusals),
        cmocka_unit_test(test_engine_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
