/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c — the continuous-batching loop over kvpool, and the dense
 * reference it is held to.
 *
 * What it owns: the samples ("units": one per sample of a request), the
 * waiting queue (preempted units at its front), the running list (in
 * admission order, so the youngest is last), every block's address in
 * kvpool's arena (taken once, at creation), the lanes (threads) and the batch
 * of decodes they compute, and the time spent inside kvpool calls.
 *
 * Invariants between steps: a running unit holds a sequence whose token
 * count equals the unit's computed tokens; a waiting unit holds none;
 * u->tokens[0..ntok) are the prompt and the tokens sampled so far, and
 * computed < ntok while the unit runs.  Every published block's K/V rows are
 * computed before an admission (the only call that can hit a block) comes
 * next: an admitted unit is computed before the next one is admitted, and
 * the step's appends are all computed before its admissions start.
 *
 * Why outputs do not depend on the batch: a token's K/V and logits depend
 * only on the tokens before it (the model is evaluated one position at a
 * time in a fixed order) and a draw is keyed by (seed, request, sample,
 * position).  So prefix caching, chunk sizes, preemption, relocation and
 * pool size change the work done, never the results.
 */
#define _POSIX_C_SOURCE 200809L

#include "engine.h"

#include <kvpool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { U_IDLE, U_WAITING, U_RUNNING, U_DONE } ustate;

typedef struct unit {
    const eng_request *req;
    unsigned sample;
    uint64_t seq_id;
    uint32_t *tokens;        /* n_prompt + max_tokens */
    size_t ntok, computed, ngen;
    int in_prefill;          /* admitted and its last token not yet reached */
    int admitted_once;
    int batched;             /* appended this step, waiting for its lane */
    kvp_seq *seq;
    float **bptr;            /* block addresses of the sequence, per compute */
    size_t bptr_cap;
    eng_output *out;
    ustate state;
} unit;

/* One thread's share of a step's batched decodes: batch entries first,
 * first + stride, ...; its own scratch, its own time inside kvpool, its
 * first error. */
typedef struct lane {
    struct engine *e;
    tfm_state st;
    size_t first, stride;
    double kv_seconds;
    kvp_status rc;
} lane;

typedef struct engine {
    const eng_config *cfg;
    const tfm_model *m;
    kvp_pool *pool;
    unit *units;
    size_t n_units, n_done;
    size_t *running, n_running;
    size_t *waiting, n_waiting; /* front at 0 */
    float **arena;           /* per block id: its address in the arena */
    tfm_state st;
    float *logits;
    lane *lanes;             /* `threads` of them: a step's plain decodes */
    size_t *batch, n_batch;  /* units appended this step, computed by the lanes */
    float *batch_logits;     /* n_batch x vocab */
    size_t batch_cap;
    float *spec_logits;      /* (spec_tokens + 1) x vocab */
    uint32_t *drafts;        /* spec_tokens */
    double t0, kv_seconds;
    eng_summary *sum;
    char *err;
    size_t cap;
} engine;

/* The monotonic clock in seconds. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* rc = call, with its time added to the engine's kvpool time. */
#define KVCALL(e, rc, call)                                                                        \
    do {                                                                                           \
        double t_ = now();                                                                         \
        (rc) = (call);                                                                             \
        (e)->kv_seconds += now() - t_;                                                             \
    } while (0)

/* Record "what: kvpool's message" as the run's error; returns -1. */
static int fail(engine *e, const char *what, kvp_status rc)
{
    snprintf(e->err, e->cap, "%s: %s", what, kvp_strerror(rc));
    return -1;
}

void eng_config_default(eng_config *c, const tfm_model *model)
{
    memset(c, 0, sizeof *c);
    c->model = model;
    c->block_size = 16;
    c->num_blocks = 1024;
    c->prefix_caching = 1;
    c->token_budget = 512;
    c->max_running = 256;
    c->temperature = 1.0f;
    c->threads = 1;
}

/* The draw for the token at position `pos` of sample `sample` of request
 * `id`: nothing else goes in. */
static uint64_t draw_key(uint64_t seed, uint64_t id, unsigned sample, size_t pos)
{
    return tfm_mix(tfm_mix(tfm_mix(tfm_mix(seed) ^ id) ^ sample) ^ (uint64_t)pos);
}

/* A request the model can run: sizes, ids, tokens, positions.  0 or -1. */
static int check_request(const tfm_model *m, const eng_request *r, char *err, size_t cap)
{
    size_t seq_len = (size_t)m->cfg.seq_len;
    if (!r->prompt || r->n_prompt == 0 || r->max_tokens == 0 || r->n == 0 || r->n > ENG_MAX_N ||
        r->id >= ENG_MAX_REQUEST_ID) {
        snprintf(err, cap, "request %llu: empty prompt, no tokens to generate, n outside 1..%u "
                 "or id too large", (unsigned long long)r->id, ENG_MAX_N);
        return -1;
    }
    if (r->n_prompt > seq_len || r->max_tokens > seq_len ||
        r->n_prompt + r->max_tokens - 1 > seq_len) {
        snprintf(err, cap, "request %llu: %zu + %zu tokens pass the model's %zu positions",
                 (unsigned long long)r->id, r->n_prompt, r->max_tokens, seq_len);
        return -1;
    }
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] >= (uint32_t)m->cfg.vocab_size) {
            snprintf(err, cap, "request %llu: token %u outside the vocabulary",
                     (unsigned long long)r->id, r->prompt[i]);
            return -1;
        }
    return 0;
}

/* Room for one sample's result. */
static int output_alloc(eng_output *o, const tfm_model *m, size_t max_tokens)
{
    memset(o, 0, sizeof *o);
    o->tokens = malloc(max_tokens * sizeof *o->tokens);
    o->logits = malloc((size_t)m->cfg.vocab_size * sizeof *o->logits);
    if (!o->tokens || !o->logits) {
        eng_output_free(o);
        return -1;
    }
    return 0;
}

void eng_output_free(eng_output *o)
{
    free(o->tokens);
    free(o->logits);
    memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------------------ */
/* Dense reference                                                           */
/* ------------------------------------------------------------------------ */

int eng_dense(const tfm_model *m, const eng_request *r, unsigned sample, float temperature,
              uint64_t seed, eng_output *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    if (check_request(m, r, err, cap))
        return -1;
    /* One block as long as the whole sequence: position j at row j. */
    size_t npos = r->n_prompt + r->max_tokens - 1;
    float *cache = calloc(1, tfm_block_bytes(&m->cfg, npos));
    tfm_state st;
    int rc = -1;
    if (tfm_state_init(&st, m, npos)) {
        free(cache);
        snprintf(err, cap, "out of memory");
        return -1;
    }
    if (!cache || output_alloc(out, m, r->max_tokens)) {
        snprintf(err, cap, "out of memory");
        goto done;
    }
    tfm_kv kv = {&cache, npos};
    for (size_t p = 0; p < r->n_prompt; p++)
        tfm_forward(m, &st, r->prompt[p], p, &kv, p + 1 == r->n_prompt ? out->logits : NULL);
    for (size_t i = 0; i < r->max_tokens; i++) {
        uint32_t tok = tfm_sample(out->logits, m->cfg.vocab_size, temperature,
                                  draw_key(seed, r->id, sample, r->n_prompt + i));
        out->tokens[i] = tok;
        if (i + 1 < r->max_tokens)
            tfm_forward(m, &st, tok, r->n_prompt + i, &kv, out->logits);
    }
    out->n_tokens = r->max_tokens;
    rc = 0;
done:
    tfm_state_free(&st);
    free(cache);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Queues                                                                    */
/* ------------------------------------------------------------------------ */

/* Take unit u out of the running list, keeping the others' order. */
static void running_remove(engine *e, size_t u)
{
    for (size_t i = 0; i < e->n_running; i++)
        if (e->running[i] == u) {
            memmove(e->running + i, e->running + i + 1, (e->n_running - i - 1) * sizeof(size_t));
            e->n_running--;
            return;
        }
}

/* Unit u runs, as the youngest. */
static void running_push(engine *e, size_t u)
{
    e->running[e->n_running++] = u;
    e->units[u].state = U_RUNNING;
    if (e->n_running > e->sum->peak_running)
        e->sum->peak_running = e->n_running;
}

/* Preempt unit v: drop its sequence (its blocks stay cached for its
 * return) and put it first in the waiting queue. */
static int preempt(engine *e, size_t v)
{
    unit *u = &e->units[v];
    kvp_status rc;
    KVCALL(e, rc, kvp_seq_destroy(u->seq));
    if (rc)
        return fail(e, "kvp_seq_destroy", rc);
    u->seq = NULL;
    u->computed = 0;
    running_remove(e, v);
    for (size_t i = 0; u->batched && i < e->n_batch; i++)
        if (e->batch[i] == v) {
            memmove(e->batch + i, e->batch + i + 1, (e->n_batch - i - 1) * sizeof(size_t));
            e->n_batch--;
            u->batched = 0;
        }
    memmove(e->waiting + 1, e->waiting, e->n_waiting * sizeof(size_t));
    e->waiting[0] = v;
    e->n_waiting++;
    u->state = U_WAITING;
    e->sum->preemptions++;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Computing                                                                 */
/* ------------------------------------------------------------------------ */

static int take_token(engine *e, size_t ui);

/* The first logits of a request with n > 1 samples: fork a sequence for
 * every other sample (they share every block) and draw its first token. */
static int fork_samples(engine *e, size_t ui)
{
    unit *u = &e->units[ui];
    for (unsigned c = 1; c < u->req->n; c++) {
        size_t ci = ui + c;
        unit *k = &e->units[ci];
        memcpy(k->tokens, u->tokens, u->ntok * sizeof *u->tokens);
        k->ntok = k->computed = u->ntok;
        kvp_status rc;
        KVCALL(e, rc, kvp_seq_fork(u->seq, k->seq_id, &k->seq));
        if (rc)
            return fail(e, "kvp_seq_fork", rc);
        k->admitted_once = 1;
        k->out->cached_tokens = u->out->cached_tokens;
        running_push(e, ci);
        e->sum->forks++;
        if (take_token(e, ci))
            return -1;
    }
    return 0;
}

/* Draw unit ui's next token from e->logits; finish the unit when it has
 * all its tokens. */
static int take_token(engine *e, size_t ui)
{
    unit *u = &e->units[ui];
    const tfm_model *m = e->m;
    uint32_t tok = tfm_sample(e->logits, m->cfg.vocab_size, e->cfg->temperature,
                              draw_key(e->cfg->seed, u->req->id, u->sample, u->ntok));
    if (u->ngen == 0)
        u->out->ttft = now() - e->t0;
    u->tokens[u->ntok++] = tok;
    u->out->tokens[u->ngen++] = tok;
    if (u->ngen < u->req->max_tokens)
        return 0;
    memcpy(u->out->logits, e->logits, (size_t)m->cfg.vocab_size * sizeof *e->logits);
    u->out->n_tokens = u->ngen;
    kvp_status rc;
    KVCALL(e, rc, kvp_seq_destroy(u->seq));
    if (rc)
        return fail(e, "kvp_seq_destroy", rc);
    u->seq = NULL;
    running_remove(e, ui);
    u->state = U_DONE;
    e->n_done++;
    return 0;
}

/* Point kv at unit ui's blocks, read through its table (the sequence must
 * hold b tokens), adding the time of the kvpool call to *kv_seconds.  Any
 * thread may run it for a unit no other thread touches meanwhile.  Returns
 * KVP_OK, the call's error, KVP_ECORRUPT (another token count) or
 * KVP_ENOMEM. */
static kvp_status kv_view(engine *e, size_t ui, size_t b, tfm_kv *kv, double *kv_seconds)
{
    unit *u = &e->units[ui];
    const kvp_block *ids;
    size_t nb, nt;
    double t0 = now();
    kvp_status rc = kvp_seq_blocks(u->seq, &ids, &nb, &nt);
    *kv_seconds += now() - t0;
    if (rc)
        return rc;
    if (nt != b)
        return KVP_ECORRUPT;
    if (nb > u->bptr_cap) {
        float **np = realloc(u->bptr, nb * 2 * sizeof *np);
        if (!np)
            return KVP_ENOMEM;
        u->bptr = np;
        u->bptr_cap = nb * 2;
    }
    for (size_t i = 0; i < nb; i++)
        u->bptr[i] = e->arena[ids[i]];
    *kv = (tfm_kv){u->bptr, e->cfg->block_size};
    return KVP_OK;
}

/* kv_view for the loop's own thread, the error recorded. */
static int view(engine *e, size_t ui, size_t b, tfm_kv *kv)
{
    kvp_status rc = kv_view(e, ui, b, kv, &e->kv_seconds);
    if (rc == KVP_ECORRUPT)
        snprintf(e->err, e->cap, "sequence %llu does not hold the %zu tokens computed",
                 (unsigned long long)e->units[ui].seq_id, b);
    return rc ? (rc == KVP_ECORRUPT ? -1 : fail(e, "kvp_seq_blocks", rc)) : 0;
}

/* Compute positions [a, b) of unit ui, whose sequence now holds b tokens,
 * reading and writing K/V through the sequence's block table; at the last
 * known token, draw the next one. */
static int compute(engine *e, size_t ui, size_t a, size_t b)
{
    unit *u = &e->units[ui];
    tfm_kv kv;
    if (view(e, ui, b, &kv))
        return -1;
    for (size_t p = a; p < b; p++)
        tfm_forward(e->m, &e->st, u->tokens[p], p, &kv, p + 1 == u->ntok ? e->logits : NULL);
    u->computed = b;
    if (b < u->ntok)
        return 0;
    u->in_prefill = 0;
    if (u->sample == 0 && u->ngen == 0 && u->req->n > 1 && fork_samples(e, ui))
        return -1;
    return take_token(e, ui);
}

/* Append unit ui's next n tokens (from u->computed) to its sequence, or
 * (truncate) cut the sequence back to n tokens, preempting the youngest
 * running unit while the pool is exhausted.  Returns 1 when done, 0 when
 * ui itself was preempted, -1 on error. */
static int with_room(engine *e, size_t ui, int truncate, size_t n)
{
    unit *u = &e->units[ui];
    for (;;) {
        kvp_status rc;
        if (truncate)
            KVCALL(e, rc, kvp_seq_truncate(u->seq, u->tokens, n));
        else
            KVCALL(e, rc, kvp_seq_append(u->seq, u->tokens + u->computed, n));
        if (rc == KVP_OK)
            return 1;
        if (rc != KVP_EEXHAUSTED)
            return fail(e, truncate ? "kvp_seq_truncate" : "kvp_seq_append", rc);
        size_t v = e->running[e->n_running - 1];
        if (preempt(e, v))
            return -1;
        if (v == ui)
            return 0;
    }
}

/* Append the next n tokens of running unit ui and compute them;
 * *self_preempted is set when ui had to be preempted instead. */
static int advance(engine *e, size_t ui, size_t n, int *self_preempted)
{
    unit *u = &e->units[ui];
    int r = with_room(e, ui, 0, n);
    *self_preempted = r == 0;
    if (r <= 0)
        return r;
    if (u->in_prefill)
        e->sum->prefill_tokens_computed += n;
    else
        e->sum->decode_tokens += n;
    return compute(e, ui, u->computed, u->computed + n);
}

/* Draft up to k tokens for decoding unit u by prompt lookup: the tokens
 * that followed the latest earlier occurrence of its last token.  Writes
 * them to e->drafts and after u's tokens; returns how many. */
static size_t propose(engine *e, unit *u, size_t k)
{
    uint32_t last = u->tokens[u->ntok - 1];
    for (size_t i = u->ntok - 1; k > 0 && i-- > 0;)
        if (u->tokens[i] == last) {
            size_t n = 0;
            for (; n < k && i + 1 + n < u->ntok; n++)
                e->drafts[n] = u->tokens[i + 1 + n];
            memcpy(u->tokens + u->ntok, e->drafts, n * sizeof *e->drafts);
            return n;
        }
    return 0;
}

/*
 * A speculative decode step of unit ui with k drafted tokens: append the
 * pending token and the drafts, compute all k + 1 positions, then draw
 * token after token as plain decoding would (same logits, same keys),
 * keeping drafts while each equals the token drawn at its place.  The
 * rejected drafts' positions are cut off the sequence (kvp_seq_truncate).
 */
static int decode_spec(engine *e, size_t ui, size_t k, int *self_preempted)
{
    unit *u = &e->units[ui];
    size_t base = u->computed, vocab = (size_t)e->m->cfg.vocab_size;
    int r = with_room(e, ui, 0, k + 1);
    *self_preempted = r == 0;
    if (r <= 0)
        return r;
    tfm_kv kv;
    if (view(e, ui, base + k + 1, &kv))
        return -1;
    for (size_t j = 0; j <= k; j++)
        tfm_forward(e->m, &e->st, u->tokens[base + j], base + j, &kv, e->spec_logits + j * vocab);
    u->computed = base + k + 1;
    e->sum->decode_tokens += k + 1;
    e->sum->spec_drafted += k;
    for (size_t j = 0; j <= k; j++) {
        memcpy(e->logits, e->spec_logits + j * vocab, vocab * sizeof *e->logits);
        u->ntok = base + 1 + j;
        if (take_token(e, ui))
            return -1;
        if (u->state == U_DONE)
            return 0;
        if (j == k || u->tokens[base + 1 + j] != e->drafts[j])
            break;
        e->sum->spec_accepted++;
    }
    size_t keep = u->ntok - 1; /* the new token is pending, as after any decode */
    if (keep == u->computed)
        return 0;
    r = with_room(e, ui, 1, keep);
    *self_preempted = r == 0;
    if (r > 0)
        u->computed = keep;
    return r < 0 ? -1 : 0;
}

/* Admit the first waiting unit: its cached prefix and a first chunk of at
 * most *budget tokens, when the pool has room for its whole prompt now.
 * Returns 1 when admitted, 0 when it has to wait, -1 on error. */
static int admit_front(engine *e, size_t *budget)
{
    size_t ui = e->waiting[0];
    unit *u = &e->units[ui];
    kvp_status rc;
    KVCALL(e, rc, kvp_seq_create(e->pool, u->seq_id, NULL, &u->seq));
    if (rc)
        return fail(e, "kvp_seq_create", rc);
    /* A prompt within the budget is admitted whole (all or nothing).  A
     * longer one is probed first: where its cached prefix ends, and whether
     * the whole prompt would fit now; then its prefix and a first chunk are
     * admitted. */
    size_t cached = 0, needed = 0, got = 0, upto = u->ntok;
    uint32_t nfree = 0;
    int chunked = u->ntok > *budget;
    if (chunked) {
        KVCALL(e, rc, kvp_seq_probe(u->seq, u->tokens, u->ntok, &cached, &needed));
        if (!rc)
            KVCALL(e, rc, kvp_free_count(e->pool, KVP_STREAM_SHARED, &nfree));
        if (rc)
            return fail(e, "kvp_seq_probe", rc);
        upto = cached + (u->ntok - cached < *budget ? u->ntok - cached : *budget);
    }
    if (needed <= nfree)
        KVCALL(e, rc, kvp_seq_admit(u->seq, u->tokens, upto, &got));
    if (needed > nfree || rc == KVP_EEXHAUSTED) {
        KVCALL(e, rc, kvp_seq_destroy(u->seq));
        u->seq = NULL;
        return rc ? fail(e, "kvp_seq_destroy", rc) : 0;
    }
    if (rc)
        return fail(e, "kvp_seq_admit", rc);
    if (chunked && got != cached) {
        snprintf(e->err, e->cap, "sequence %llu: admitted %zu cached tokens, probed %zu",
                 (unsigned long long)u->seq_id, got, cached);
        return -1;
    }
    cached = got;
    size_t n = upto - cached;
    memmove(e->waiting, e->waiting + 1, --e->n_waiting * sizeof(size_t));
    running_push(e, ui);
    u->in_prefill = 1;
    if (!u->admitted_once) {
        u->out->cached_tokens = cached;
        e->sum->first_cached_tokens += cached;
        u->admitted_once = 1;
    }
    e->sum->prefill_tokens_cached += cached;
    e->sum->prefill_tokens_computed += n;
    *budget -= n;
    return compute(e, ui, cached, cached + n) ? -1 : 1;
}

/* Shrink the pool by retire_blocks blocks, top first; kvpool moves the
 * bytes and the tables of blocks in use.  Preempts when no free block is
 * left to move into. */
static int retire(engine *e)
{
    for (uint32_t k = 0; k < e->cfg->retire_blocks; k++) {
        kvp_block old, moved;
        kvp_status rc;
        for (;;) {
            KVCALL(e, rc, kvp_retire_top(e->pool, &old, &moved));
            if (rc != KVP_EEXHAUSTED || e->n_running == 0)
                break;
            if (preempt(e, e->running[e->n_running - 1]))
                return -1;
        }
        if (rc)
            return fail(e, "kvp_retire_top", rc);
        e->arena[old] = NULL;
        e->sum->retired++;
        e->sum->relocated += moved != KVP_NO_BLOCK;
    }
    return 0;
}

/* A lane's work: the forward pass of its share of the batch, each unit's
 * logits into its own row of batch_logits.  kvp_seq_blocks runs here, on
 * several threads at once (the pool is thread_safe). */
static void *run_lane(void *arg)
{
    lane *l = arg;
    engine *e = l->e;
    size_t vocab = (size_t)e->m->cfg.vocab_size;
    for (size_t i = l->first; i < e->n_batch && !l->rc; i += l->stride) {
        unit *u = &e->units[e->batch[i]];
        tfm_kv kv;
        l->rc = kv_view(e, e->batch[i], u->computed + 1, &kv, &l->kv_seconds);
        if (!l->rc)
            tfm_forward(e->m, &l->st, u->tokens[u->computed], u->computed, &kv,
                        e->batch_logits + i * vocab);
    }
    return NULL;
}

/* Compute the batched decodes on the lanes (up to threads - 1 more
 * threads besides this one; a lane whose thread cannot start runs here
 * after), then draw each unit's token in batch order. */
static int flush_batch(engine *e)
{
    size_t n = e->n_batch, vocab = (size_t)e->m->cfg.vocab_size;
    size_t nl = e->cfg->threads < n ? e->cfg->threads : n;
    pthread_t tid[ENG_MAX_THREADS];
    int started[ENG_MAX_THREADS] = {0};
    for (size_t w = 0; w < nl; w++)
        e->lanes[w] = (lane){e, e->lanes[w].st, w, nl, 0.0, KVP_OK};
    for (size_t w = 1; w < nl; w++)
        started[w] = pthread_create(&tid[w], NULL, run_lane, &e->lanes[w]) == 0;
    for (size_t w = 0; w < nl; w++)
        if (w == 0 || !started[w])
            run_lane(&e->lanes[w]);
    for (size_t w = 1; w < nl; w++)
        if (started[w])
            pthread_join(tid[w], NULL);
    for (size_t w = 0; w < nl; w++) {
        e->kv_seconds += e->lanes[w].kv_seconds;
        if (e->lanes[w].rc == KVP_ECORRUPT) {
            snprintf(e->err, e->cap, "a batched sequence does not hold the tokens computed");
            return -1;
        }
        if (e->lanes[w].rc)
            return fail(e, "kvp_seq_blocks", e->lanes[w].rc);
    }
    e->n_batch = 0;
    for (size_t i = 0; i < n; i++) {
        size_t ui = e->batch[i];
        unit *u = &e->units[ui];
        u->batched = 0;
        u->computed++;
        memcpy(e->logits, e->batch_logits + i * vocab, vocab * sizeof *e->logits);
        if (take_token(e, ui))
            return -1;
    }
    return 0;
}

/* Append the pending token of decoding unit ui and queue its computation
 * for the lanes (room in the batch made first). */
static int batch_decode(engine *e, size_t ui, int *self_preempted)
{
    size_t vocab = (size_t)e->m->cfg.vocab_size;
    if (e->n_running > e->batch_cap) {
        size_t cap = e->n_running * 2;
        size_t *nb = realloc(e->batch, cap * sizeof *nb);
        if (nb)
            e->batch = nb;
        float *nl = nb ? realloc(e->batch_logits, cap * vocab * sizeof *nl) : NULL;
        if (!nl) {
            snprintf(e->err, e->cap, "out of memory");
            return -1;
        }
        e->batch_logits = nl;
        e->batch_cap = cap;
    }
    int r = with_room(e, ui, 0, 1);
    *self_preempted = r == 0;
    if (r <= 0)
        return r;
    e->units[ui].batched = 1;
    e->batch[e->n_batch++] = ui;
    e->sum->decode_tokens++;
    return 0;
}

/* One step: decodes (with drafts when speculating), then prefill chunks
 * of running units, then admissions, within the token budget. */
static int step(engine *e)
{
    size_t budget = e->cfg->token_budget, decodes = 0;
    if (e->sum->steps == e->cfg->retire_at_step && retire(e))
        return -1;
    for (size_t i = 0; i < e->n_running; i++)
        decodes += !e->units[e->running[i]].in_prefill;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < e->n_running && budget > 0;) {
            size_t ui = e->running[i];
            unit *u = &e->units[ui];
            if (u->in_prefill != pass) {
                i++;
                continue;
            }
            size_t left = u->ntok - u->computed, n = left < budget ? left : budget, k = 0;
            if (!pass) {
                /* Drafts may use the budget the remaining decodes leave. */
                size_t room = budget > decodes ? budget - decodes : 0;
                size_t cap = u->req->max_tokens - u->ngen - 1;
                decodes--;
                k = e->cfg->spec_tokens < room ? e->cfg->spec_tokens : room;
                k = propose(e, u, k < cap ? k : cap);
            }
            int self = 0, rc;
            if (k)
                rc = decode_spec(e, ui, k, &self);
            else if (!pass && e->cfg->threads > 1)
                rc = batch_decode(e, ui, &self);
            else
                rc = advance(e, ui, n, &self);
            if (rc)
                return -1;
            if (self)
                break; /* it was the youngest: nothing after it */
            budget -= n + k;
            i += e->units[ui].state == U_RUNNING; /* a finished unit left the list */
        }
        if (!pass && flush_batch(e))
            return -1;
    }
    while (budget > 0 && e->n_waiting > 0 && e->n_running < e->cfg->max_running) {
        int r = admit_front(e, &budget);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
    }
    return 0;
}

/* The engine's own invariants and kvp_pool_check, after a step. */
static int check_step(engine *e)
{
    char msg[256];
    kvp_status rc = kvp_pool_check(e->pool, msg, sizeof msg);
    if (rc) {
        snprintf(e->err, e->cap, "step %zu: kvp_pool_check: %s", e->sum->steps, msg);
        return -1;
    }
    for (size_t i = 0; i < e->n_running; i++) {
        unit *u = &e->units[e->running[i]];
        const kvp_block *ids;
        size_t nb, nt;
        if ((rc = kvp_seq_blocks(u->seq, &ids, &nb, &nt)))
            return fail(e, "kvp_seq_blocks", rc);
        size_t bs = e->cfg->block_size;
        if (nt != u->computed || nb != (nt + bs - 1) / bs || u->computed >= u->ntok) {
            snprintf(e->err, e->cap, "step %zu: sequence %llu: %zu tokens in %zu blocks, "
                     "engine computed %zu of %zu", e->sum->steps,
                     (unsigned long long)u->seq_id, nt, nb, u->computed, u->ntok);
            return -1;
        }
        for (size_t j = 0; j < nb; j++) {
            kvp_block_info info;
            if ((rc = kvp_block_get(e->pool, ids[j], &info)))
                return fail(e, "kvp_block_get", rc);
            if (info.state != KVP_BLOCK_IN_USE || info.seq_refs == 0) {
                snprintf(e->err, e->cap, "step %zu: block %u of sequence %llu not held",
                         e->sum->steps, ids[j], (unsigned long long)u->seq_id);
                return -1;
            }
        }
    }
    for (size_t i = 0; i < e->n_waiting; i++)
        if (e->units[e->waiting[i]].seq) {
            snprintf(e->err, e->cap, "step %zu: a waiting unit holds a sequence", e->sum->steps);
            return -1;
        }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Setup and the run                                                         */
/* ------------------------------------------------------------------------ */

/* A configuration the loop can run.  0 or -1 with err set. */
static int check_config(const eng_config *c, char *err, size_t cap)
{
    if (!c->model || c->block_size == 0 || c->block_size > 65535 || c->num_blocks == 0 ||
        c->max_running == 0 || c->token_budget < c->max_running ||
        c->retire_blocks >= c->num_blocks || c->temperature < 0.0f ||
        c->spec_tokens > ENG_MAX_SPEC || c->threads == 0 || c->threads > ENG_MAX_THREADS ||
        (c->threads > 1 && !c->thread_safe)) {
        snprintf(err, cap, "bad engine configuration (block size 1..65535, blocks > retired, "
                 "token budget >= max running >= 1, temperature >= 0, drafts <= %d, "
                 "threads 1..%d, more than one only with thread_safe)",
                 ENG_MAX_SPEC, ENG_MAX_THREADS);
        return -1;
    }
    return 0;
}

/* Units, queues and results for every request; checks that each sample
 * alone fits the pool that remains after the retire. */
static int setup(engine *e, const eng_request *reqs, size_t n_reqs, eng_output *outs)
{
    const eng_config *c = e->cfg;
    size_t total = 0, max_pos = 1, worst = 0;
    uint32_t keep = c->num_blocks - (c->retire_at_step ? c->retire_blocks : 0);
    for (size_t r = 0; r < n_reqs; r++) {
        if (check_request(e->m, &reqs[r], e->err, e->cap))
            return -1;
        size_t npos = reqs[r].n_prompt + reqs[r].max_tokens - 1;
        if (npos > max_pos) {
            max_pos = npos;
            worst = r;
        }
        total += reqs[r].n;
        e->sum->prompt_tokens += reqs[r].n_prompt;
    }
    size_t need = (max_pos + c->block_size - 1) / c->block_size;
    if (n_reqs && need > keep) {
        snprintf(e->err, e->cap, "request %llu needs %zu blocks (the most of any request), "
                 "the pool keeps %u", (unsigned long long)reqs[worst].id, need, keep);
        return -1;
    }
    e->units = calloc(total ? total : 1, sizeof *e->units);
    e->running = malloc((total ? total : 1) * sizeof(size_t));
    e->waiting = malloc((total ? total : 1) * sizeof(size_t));
    e->arena = calloc(c->num_blocks, sizeof *e->arena);
    e->logits = malloc((size_t)e->m->cfg.vocab_size * sizeof *e->logits);
    e->spec_logits = malloc((c->spec_tokens + 1) * (size_t)e->m->cfg.vocab_size * sizeof(float));
    e->drafts = malloc((c->spec_tokens ? c->spec_tokens : 1) * sizeof *e->drafts);
    e->lanes = calloc(c->threads, sizeof *e->lanes);
    for (size_t w = 0; e->lanes && w < c->threads; w++)
        if (tfm_state_init(&e->lanes[w].st, e->m, max_pos)) {
            snprintf(e->err, e->cap, "out of memory");
            return -1;
        }
    if (!e->units || !e->running || !e->waiting || !e->arena || !e->logits || !e->spec_logits ||
        !e->drafts || !e->lanes ||
        tfm_state_init(&e->st, e->m, max_pos)) {
        snprintf(e->err, e->cap, "out of memory");
        return -1;
    }
    for (size_t r = 0, ui = 0; r < n_reqs; r++)
        for (unsigned s = 0; s < reqs[r].n; s++, ui++) {
            unit *u = &e->units[ui];
            u->req = &reqs[r];
            u->sample = s;
            u->seq_id = reqs[r].id * ENG_MAX_N + s;
            u->out = &outs[ui];
            u->tokens = malloc((reqs[r].n_prompt + reqs[r].max_tokens) * sizeof *u->tokens);
            e->n_units = ui + 1;
            if (!u->tokens || output_alloc(u->out, e->m, reqs[r].max_tokens)) {
                snprintf(e->err, e->cap, "out of memory");
                return -1;
            }
            memcpy(u->tokens, reqs[r].prompt, reqs[r].n_prompt * sizeof *u->tokens);
            u->ntok = reqs[r].n_prompt;
            if (s == 0) {
                e->waiting[e->n_waiting++] = ui;
                u->state = U_WAITING;
            }
        }
    e->sum->requests = n_reqs;
    e->sum->samples = total;
    return 0;
}

/* The pool (no growth, a host arena of blocks holding every layer's K and
 * V, XXH3 block hashes) and the address of every block. */
static kvp_status create_pool(engine *e)
{
    const eng_config *c = e->cfg;
    kvp_config pc;
    kvp_config_default(&pc);
    pc.block_size = c->block_size;
    pc.num_blocks = pc.max_blocks = c->num_blocks;
    pc.prefix_caching = c->prefix_caching;
    pc.thread_safe = c->thread_safe;
    pc.verify_hits = c->verify_hits;
    pc.hash_alg = KVP_HASH_XXH3_128;
    pc.host_arena = 1;
    pc.block_bytes[0] = tfm_block_bytes(&e->m->cfg, c->block_size);
    kvp_status rc = kvp_pool_create(&pc, &e->pool);
    /* Every block's address, once: it stays valid while the pool does not
     * grow, and this one never does; lanes then only read the table. */
    for (uint32_t b = 0; !rc && b < c->num_blocks; b++)
        rc = kvp_block_ptr(e->pool, b, (void **)&e->arena[b]);
    return rc;
}

/* Release everything the run holds but the outputs. */
static void teardown(engine *e)
{
    for (size_t i = 0; i < e->n_units; i++) {
        free(e->units[i].tokens);
        free(e->units[i].bptr);
    }
    free(e->units);
    free(e->running);
    free(e->waiting);
    free(e->arena);
    free(e->logits);
    free(e->spec_logits);
    free(e->drafts);
    for (size_t w = 0; e->lanes && w < e->cfg->threads; w++)
        tfm_state_free(&e->lanes[w].st);
    free(e->lanes);
    free(e->batch);
    free(e->batch_logits);
    tfm_state_free(&e->st);
    kvp_pool_destroy(e->pool);
}

int eng_run(const eng_config *cfg, const eng_request *reqs, size_t n_reqs, eng_output *outs,
            eng_summary *sum, char *err, size_t cap)
{
    engine e;
    memset(&e, 0, sizeof e);
    memset(sum, 0, sizeof *sum);
    e.cfg = cfg;
    e.m = cfg->model;
    e.sum = sum;
    e.err = err;
    e.cap = cap;
    int rc = check_config(cfg, err, cap) ? -1 : setup(&e, reqs, n_reqs, outs);
    kvp_status st = rc ? KVP_OK : create_pool(&e);
    if (st)
        rc = fail(&e, "kvp_pool_create", st);
    e.t0 = now();
    while (!rc && e.n_done < e.n_units) {
        sum->steps++;
        uint64_t before = sum->prefill_tokens_computed + sum->decode_tokens;
        rc = step(&e);
        if (!rc && sum->prefill_tokens_computed + sum->decode_tokens == before &&
            e.n_done < e.n_units) {
            snprintf(err, cap, "step %zu computed nothing", sum->steps);
            rc = -1;
        }
        if (!rc && cfg->check_each_step)
            rc = check_step(&e);
    }
    sum->seconds = now() - e.t0;
    if (!rc) {
        kvp_stats ks;
        if ((st = kvp_stats_get(e.pool, &ks)))
            rc = fail(&e, "kvp_stats_get", st);
        else
            sum->cow_copies = ks.cow_copies;
    }
    sum->kvpool_seconds = e.kv_seconds;
    sum->kvpool_share = sum->seconds > 0 ? e.kv_seconds / sum->seconds : 0.0;
    for (size_t i = 0; i < e.n_units; i++)
        sum->ttft_mean += outs[i].ttft / (double)e.n_units;
    teardown(&e);
    if (rc)
        for (size_t i = 0; i < e.n_units; i++)
            eng_output_free(&outs[i]);
    return rc;
}
