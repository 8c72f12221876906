/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.h — a continuous-batching decode loop whose KV cache is kvpool.
 *
 * Keys and values live in kvpool's host arena: one block holds every
 * layer's K and V for block_size positions (tfm_block_bytes).  Each running
 * sample is a kvpool sequence; attention reads its rows only through
 * kvp_seq_blocks and kvp_block_ptr.  A step runs every decode (one token
 * each), then continues chunked prefills, then admits waiting work, all
 * under a per-step token budget.  Admission claims the prompt's cached
 * prefix (kvp_seq_admit); a prompt longer than the budget is probed first
 * (kvp_seq_probe) and admitted as its cached prefix plus a first chunk,
 * later chunks appended.  A request with n > 1 samples forks its
 * sequence after the prompt (the shared partial block is copied on write by
 * kvpool, bytes included).  When the pool runs out the youngest running
 * sample is preempted (its sequence destroyed, its blocks left cached) and
 * requeued first; it is recomputed from its tokens, hitting what it cached.
 * At a chosen step the pool shrinks by kvp_retire_top: kvpool moves the
 * bytes of blocks in use and rewrites the tables.  With spec_tokens, a
 * decode step drafts tokens by prompt lookup, computes them with the
 * pending token in one pass, keeps the drafts that match what sampling
 * draws and cuts the rest off the sequence (kvp_seq_truncate).
 *
 * eng_dense runs one sample alone against a contiguous cache: the
 * reference every paged run must equal bit for bit.
 */
#ifndef KVPE_ENGINE_H
#define KVPE_ENGINE_H

#include "transformer.h"

#include <stddef.h>
#include <stdint.h>

/* Samples per request at most; sequence ids are request id x this + sample. */
#define ENG_MAX_N 64u
/* Threads computing a step's decodes at most. */
#define ENG_MAX_THREADS 8
/* Drafted tokens per speculative decode step at most. */
#define ENG_MAX_SPEC 16
/* Request ids are below this, so that every sequence id fits 64 bits. */
#define ENG_MAX_REQUEST_ID ((uint64_t)1 << 57)

typedef struct eng_request {
    uint64_t id;             /* distinct, < ENG_MAX_REQUEST_ID; keys sampling */
    const uint32_t *prompt;  /* n_prompt tokens < vocab; caller-owned */
    size_t n_prompt;         /* >= 1 */
    size_t max_tokens;       /* tokens generated per sample, >= 1 */
    unsigned n;              /* samples, 1..ENG_MAX_N */
} eng_request;

typedef struct eng_config {
    const tfm_model *model;
    uint32_t block_size;     /* tokens per block */
    uint32_t num_blocks;     /* pool size (no growth) */
    int prefix_caching;
    int thread_safe;         /* the pool's lock */
    size_t threads;          /* threads computing each step's plain decodes
                                (1..ENG_MAX_THREADS; above 1 they call
                                kvp_seq_blocks concurrently, so thread_safe
                                is required) */
    int verify_hits;
    size_t token_budget;     /* tokens computed per step, >= max_running */
    size_t max_running;      /* samples running at once */
    float temperature;       /* 0: greedy */
    uint64_t seed;           /* sampling */
    size_t retire_at_step;   /* step (from 1) that shrinks the pool; 0: none */
    uint32_t retire_blocks;  /* blocks retire_top takes off then */
    size_t spec_tokens;      /* speculative decoding: draft up to this many
                                tokens per decode step by prompt lookup,
                                verify them in one pass, roll the rejected
                                back with kvp_seq_truncate (0: off) */
    int check_each_step;     /* kvp_pool_check and the engine's own checks */
} eng_config;

/* One sample's result. */
typedef struct eng_output {
    uint32_t *tokens;        /* max_tokens generated tokens */
    size_t n_tokens;
    float *logits;           /* vocab_size: the logits the last token came from */
    size_t cached_tokens;    /* prompt tokens served from cache at the first
                                admission */
    double ttft;             /* seconds from the start of the run to the
                                first token */
} eng_output;

typedef struct eng_summary {
    size_t requests, samples, steps;
    uint64_t prompt_tokens;            /* sum of n_prompt */
    uint64_t prefill_tokens_computed;  /* tokens computed in prefill chunks
                                          (recomputation after preemption too) */
    uint64_t prefill_tokens_cached;    /* tokens admitted from cache */
    uint64_t first_cached_tokens;      /* of those, at first admissions */
    uint64_t decode_tokens;            /* tokens computed one per step */
    uint64_t preemptions, forks, cow_copies, relocated, retired;
    uint64_t spec_drafted, spec_accepted; /* draft tokens proposed, kept */
    size_t peak_running;
    double seconds, kvpool_seconds, kvpool_share, ttft_mean;
} eng_summary;

/* Defaults: block 16, 1024 blocks, prefix caching on, budget 512 tokens, 256
 * running, temperature 1, seed 0, one thread, no retire, no drafts, no
 * per-step checks. */
void eng_config_default(eng_config *c, const tfm_model *model);

/*
 * Run every request to completion.  outs[] holds one entry per sample,
 * request by request (request 0's samples, then request 1's, ...); each is
 * filled (release with eng_output_free).  *sum receives the figures.
 * Returns 0, or -1 with the reason in err (a bad request or configuration,
 * a request that alone needs more blocks than the pool keeps, a kvpool
 * error, a failed per-step check, out of memory); outs are then empty.
 */
int eng_run(const eng_config *cfg, const eng_request *reqs, size_t n_reqs, eng_output *outs,
            eng_summary *sum, char *err, size_t cap);

/*
 * The reference: sample `sample` of request r alone, with a contiguous K/V
 * array, sampled with the same keys as eng_run.  Returns 0 or -1 (out of
 * memory, bad request) with err set.
 */
int eng_dense(const tfm_model *m, const eng_request *r, unsigned sample, float temperature,
              uint64_t seed, eng_output *out, char *err, size_t cap);

void eng_output_free(eng_output *o);

#endif /* KVPE_ENGINE_H */
