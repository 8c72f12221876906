/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — kvpool-engine: the engine example run over a Mooncake trace.
 *
 * Each hash id of the trace becomes a fixed block of --block-tokens tokens
 * drawn from a generator seeded by that id, so equal ids give equal tokens
 * and prompts share prefixes exactly as the trace says.  Lengths scale by
 * block-tokens / 512 (the trace's tokens per hash id).  The outputs depend
 * on the trace, --requests, --seed and the model only, never on --blocks or
 * --no-prefix-caching, so two runs can be compared with diff.
 */
#include "common.h"
#include "engine.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per hash id in the Mooncake trace. */
#define TRACE_ID_TOKENS 512u

static const char usage_text[] =
    "usage: kvpool-engine TRACE [options]\n"
    "       kvpool-engine --trace FILE [options]\n"
    "\n"
    "Serve the first requests of a Mooncake trace with a small Llama-shaped model\n"
    "whose KV cache lives in kvpool, and report what the cache saved.\n"
    "\n"
    "  TRACE, --trace FILE   Mooncake trace (JSON Lines, plain or .gz)\n"
    "  --requests N          serve the first N requests (1 to 16777216; default 64)\n"
    "  --blocks B            pool size in blocks (1 to 16777216; default 4096)\n"
    "  --no-prefix-caching   compute every prompt token\n"
    "  --seed S              weights (unless --model) and sampling (default 0)\n"
    "  --json                one JSON line per request, then a summary line\n"
    "  --block-tokens T      tokens per trace hash id (1 to 512; default 16)\n"
    "  --block-size K        tokens per kvpool block (1 to 65535; default 16)\n"
    "  --max-tokens M        cap on tokens generated per request (1 to 65536;\n"
    "                        default 16)\n"
    "  --output-tokens M     generate exactly M tokens per request instead of the\n"
    "                        trace's scaled output length (0 to 65536; default 0:\n"
    "                        scaled)\n"
    "  --budget N            tokens computed per step (1 to 16777216, at least\n"
    "                        --max-running; default 512)\n"
    "  --max-running N       requests running at once (1 to 1048576; default 256)\n"
    "  --temperature X       0 to 100, 0 for greedy (default 1)\n"
    "  --threads N           threads computing decode steps (1 to 8; default 1;\n"
    "                        above 1 the pool is created thread_safe)\n"
    "  --spec-tokens K       speculative decoding: draft up to K tokens a step by\n"
    "                        prompt lookup, roll rejected ones back (0 to 16;\n"
    "                        default 0)\n"
    "  --model FILE          llama2.c checkpoint instead of seeded weights\n"
    "  --retire-at STEP      shrink the pool at this step by --retire blocks\n"
    "                        (0 to 1073741824)\n"
    "  --retire N            (0 to 16777216)\n"
    "\n"
    "Each option may be given once.\n"
    "Exit status: 0 success, 1 bad input or failure, 2 bad command line.\n";

typedef struct opts {
    const char *trace, *model;
    uint64_t requests, blocks, seed, block_tokens, block_size, max_tokens, output_tokens;
    uint64_t budget, max_running, spec_tokens, threads;
    uint64_t retire_at, retire;
    double temperature;
    int no_prefix, json;
} opts;


/* Parse argv into *o with the tool's parser (kvpt_parse_args: each count's
 * range in its message); returns -1 to run, else the exit code (0 after
 * --help). */
static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.requests = 64, .blocks = 4096, .block_tokens = 16, .block_size = 16,
                .max_tokens = 16, .budget = 512, .max_running = 256, .temperature = 1.0,
                .threads = 1};
    const char *trace = NULL, *temperature = NULL;
    const kvpt_opt table[] = {
        {"trace", KVPT_OPT_TEXT, &trace, 0, 0, NULL, NULL},
        {"requests", KVPT_OPT_COUNT, &o->requests, 1, 1u << 24, "a request count", NULL},
        {"blocks", KVPT_OPT_COUNT, &o->blocks, 1, 1u << 24, "a block count", NULL},
        {"no-prefix-caching", KVPT_OPT_FLAG, &o->no_prefix, 0, 0, NULL, NULL},
        {"seed", KVPT_OPT_COUNT, &o->seed, 0, UINT64_MAX, "a seed", NULL},
        {"json", KVPT_OPT_FLAG, &o->json, 0, 0, NULL, NULL},
        {"block-tokens", KVPT_OPT_COUNT, &o->block_tokens, 1, TRACE_ID_TOKENS,
         "a token count", NULL},
        {"block-size", KVPT_OPT_COUNT, &o->block_size, 1, 65535, "a token count", NULL},
        {"max-tokens", KVPT_OPT_COUNT, &o->max_tokens, 1, 1u << 16, "a token count", NULL},
        {"output-tokens", KVPT_OPT_COUNT, &o->output_tokens, 0, 1u << 16, "a token count",
         NULL},
        {"budget", KVPT_OPT_COUNT, &o->budget, 1, 1u << 24, "a token count", NULL},
        {"max-running", KVPT_OPT_COUNT, &o->max_running, 1, 1u << 20, "a request count",
         NULL},
        {"temperature", KVPT_OPT_TEXT, &temperature, 0, 0, NULL, NULL},
        {"threads", KVPT_OPT_COUNT, &o->threads, 1, ENG_MAX_THREADS, "a thread count", NULL},
        {"spec-tokens", KVPT_OPT_COUNT, &o->spec_tokens, 0, ENG_MAX_SPEC, "a token count",
         NULL},
        {"model", KVPT_OPT_TEXT, &o->model, 0, 0, NULL, NULL},
        {"retire-at", KVPT_OPT_COUNT, &o->retire_at, 0, 1u << 30, "a step", NULL},
        {"retire", KVPT_OPT_COUNT, &o->retire, 0, 1u << 24, "a block count", NULL},
        {NULL, 0, NULL, 0, 0, NULL, NULL},
    };
    const kvpt_cli cli = {NULL, usage_text, table, "TRACE", 0, 1};
    int first, rc = kvpt_parse_args(&cli, argc, argv, &first);
    if (rc >= 0)
        return rc;
    if (trace && first < argc)
        return kvpt_usage_error(NULL, "give the trace once: as TRACE or as --trace FILE");
    o->trace = trace ? trace : first < argc ? argv[first] : NULL;
    if (!o->trace)
        return kvpt_usage_error(NULL, "a trace is required: kvpool-engine TRACE, or --trace "
                                      "FILE (e.g. data/mooncake_fast25_conversation_trace."
                                      "jsonl.gz)");
    if (temperature) {
        char *end;
        o->temperature = strtod(temperature, &end);
        if (*end || end == temperature || !(o->temperature >= 0.0 && o->temperature <= 100.0))
            return kvpt_usage_error(NULL, "--temperature: expected a number from 0 to 100, "
                                          "got '%s'", kvpt_safe_text(temperature));
    }
    if (o->max_running > o->budget)
        return kvpt_usage_error(NULL, "--budget (%llu) must be at least --max-running (%llu)",
                                (unsigned long long)o->budget,
                                (unsigned long long)o->max_running);
    return -1;
}

/* Token i of the block that trace hash id `id` stands for. */
static uint32_t id_token(uint64_t id, uint64_t i, int vocab)
{
    return (uint32_t)(tfm_mix(tfm_mix(id) + i) % (uint64_t)vocab);
}

/* ceil(x * num / den) without overflow for the sizes a trace holds. */
static uint64_t scale_up(uint64_t x, uint64_t num, uint64_t den)
{
    return x / den * num + ((x % den) * num + den - 1) / den;
}

/* The requests for the first n of trace t: prompts of the scaled input
 * length (at most the ids' blocks, at least 1), outputs of the scaled
 * output length capped by max_tokens (or output_tokens when set), both
 * within the model's positions. */
static int build_requests(const kvpt_trace *t, const opts *o, const tfm_model *m,
                          eng_request *reqs, uint32_t **tok_out)
{
    size_t n = (size_t)o->requests, total = 0;
    size_t seq_len = (size_t)m->cfg.seq_len;
    if (seq_len < 2)
        return kvpt_error("the model has fewer than 2 positions");
    size_t *len = malloc(n * sizeof *len);
    if (!len)
        return kvpt_error("out of memory");
    for (size_t q = 0; q < n; q++) {
        uint64_t nid = t->offset[q + 1] - t->offset[q];
        uint64_t want = scale_up(t->input_length[q], o->block_tokens, TRACE_ID_TOKENS);
        uint64_t cap = nid * o->block_tokens;
        uint64_t outl = scale_up(t->output_length[q], o->block_tokens, TRACE_ID_TOKENS);
        outl = outl < 1 ? 1 : outl > o->max_tokens ? o->max_tokens : outl;
        if (o->output_tokens)
            outl = o->output_tokens;
        if (outl > seq_len / 2)
            outl = seq_len / 2;
        want = want < 1 ? 1 : want > cap ? cap : want;
        if (want + outl - 1 > seq_len)
            want = seq_len - outl + 1;
        len[q] = (size_t)want;
        reqs[q] = (eng_request){.id = q, .n_prompt = (size_t)want, .max_tokens = (size_t)outl,
                                .n = 1};
        total += (size_t)want;
    }
    uint32_t *tok = malloc((total ? total : 1) * sizeof *tok);
    if (!tok) {
        free(len);
        return kvpt_error("out of memory");
    }
    for (size_t q = 0, at = 0; q < n; q++) {
        const uint64_t *ids = t->ids + t->offset[q];
        for (size_t i = 0; i < len[q]; i++)
            tok[at + i] = id_token(ids[i / o->block_tokens], i % o->block_tokens,
                                   m->cfg.vocab_size);
        reqs[q].prompt = tok + at;
        at += len[q];
    }
    free(len);
    *tok_out = tok;
    return 0;
}

/* One JSON line per request, then the summary line. */
static void print_json(const eng_request *reqs, const eng_output *outs, size_t n,
                       const eng_summary *s, const opts *o)
{
    for (size_t q = 0; q < n; q++) {
        printf("{\"id\":%llu,\"prompt_tokens\":%zu,\"cached_tokens\":%zu,\"output\":[",
               (unsigned long long)reqs[q].id, reqs[q].n_prompt, outs[q].cached_tokens);
        for (size_t i = 0; i < outs[q].n_tokens; i++)
            printf("%s%u", i ? "," : "", outs[q].tokens[i]);
        printf("]}\n");
    }
    printf("{\"summary\":{\"requests\":%zu,\"blocks\":%llu,\"prefix_caching\":%s,"
           "\"prompt_tokens\":%llu,\"prefill_tokens_computed\":%llu,"
           "\"prefill_tokens_cached\":%llu,\"first_admission_cached_tokens\":%llu,"
           "\"decode_tokens\":%llu,\"preemptions\":%llu,\"cow_copies\":%llu,"
           "\"relocated\":%llu,\"spec_drafted\":%llu,\"spec_accepted\":%llu,"
           "\"steps\":%zu,\"peak_running\":%zu,\"seconds\":%.6f,"
           "\"ttft_mean_seconds\":%.6f,\"kvpool_seconds\":%.6f,\"kvpool_share\":%.6f}}\n",
           s->requests, (unsigned long long)o->blocks, o->no_prefix ? "false" : "true",
           (unsigned long long)s->prompt_tokens, (unsigned long long)s->prefill_tokens_computed,
           (unsigned long long)s->prefill_tokens_cached,
           (unsigned long long)s->first_cached_tokens, (unsigned long long)s->decode_tokens,
           (unsigned long long)s->preemptions, (unsigned long long)s->cow_copies,
           (unsigned long long)s->relocated, (unsigned long long)s->spec_drafted,
           (unsigned long long)s->spec_accepted, s->steps, s->peak_running, s->seconds,
           s->ttft_mean, s->kvpool_seconds, s->kvpool_share);
}

/* The summary as aligned text. */
static void print_text(const eng_summary *s, const opts *o)
{
    double saved = s->prompt_tokens ? (double)s->first_cached_tokens / (double)s->prompt_tokens
                                    : 0.0;
    printf("requests                 %zu\n", s->requests);
    printf("pool                     %llu blocks of %llu tokens, prefix caching %s\n",
           (unsigned long long)o->blocks, (unsigned long long)o->block_size,
           o->no_prefix ? "off" : "on");
    printf("prompt tokens            %llu\n", (unsigned long long)s->prompt_tokens);
    printf("prefill tokens computed  %llu\n", (unsigned long long)s->prefill_tokens_computed);
    printf("prefill tokens cached    %llu (first admissions: %.1f%% of prompt tokens)\n",
           (unsigned long long)s->prefill_tokens_cached, 100.0 * saved);
    printf("decode tokens            %llu\n", (unsigned long long)s->decode_tokens);
    printf("preemptions              %llu\n", (unsigned long long)s->preemptions);
    if (o->spec_tokens)
        printf("draft tokens             %llu proposed, %llu accepted\n",
               (unsigned long long)s->spec_drafted, (unsigned long long)s->spec_accepted);
    printf("steps                    %zu (peak %zu running)\n", s->steps, s->peak_running);
    printf("wall time                %.3f s\n", s->seconds);
    printf("time to first token      %.3f s (mean)\n", s->ttft_mean);
    printf("inside kvpool            %.4f s (%.3f%% of step time)\n", s->kvpool_seconds,
           100.0 * s->kvpool_share);
}

/* Load the model and the trace, build the requests, run, print. */
int main(int argc, char **argv)
{
    opts o;
    kvpt_program = "kvpool-engine";
    int prc = parse(argc, argv, &o);
    if (prc >= 0)
        return prc;
    char err[300];
    tfm_model m;
    static const tfm_config seeded = {.dim = 64, .hidden_dim = 176, .n_layers = 2, .n_heads = 4,
                                      .n_kv_heads = 2, .vocab_size = 512, .seq_len = 16384};
    if (o.model ? tfm_load(&m, o.model, err, sizeof err)
                : tfm_init_seeded(&m, &seeded, o.seed, err, sizeof err))
        return kvpt_error("%s", err);
    kvpt_trace t;
    if (kvpt_trace_load(o.trace, &t)) {
        tfm_free(&m);
        return KVPT_EXIT_ERROR;
    }
    int ret = KVPT_EXIT_ERROR;
    if (o.requests > t.n_requests)
        o.requests = t.n_requests;
    size_t n = (size_t)o.requests;
    eng_request *reqs = calloc(n ? n : 1, sizeof *reqs);
    eng_output *outs = calloc(n ? n : 1, sizeof *outs);
    uint32_t *tokens = NULL;
    if (!reqs || !outs) {
        kvpt_error("out of memory");
        goto out;
    }
    if (build_requests(&t, &o, &m, reqs, &tokens))
        goto out;
    eng_config c;
    eng_config_default(&c, &m);
    c.block_size = (uint32_t)o.block_size;
    c.num_blocks = (uint32_t)o.blocks;
    c.prefix_caching = !o.no_prefix;
    c.token_budget = (size_t)o.budget;
    c.max_running = (size_t)o.max_running;
    c.temperature = (float)o.temperature;
    c.seed = o.seed;
    c.retire_at_step = (size_t)o.retire_at;
    c.retire_blocks = (uint32_t)o.retire;
    c.spec_tokens = (size_t)o.spec_tokens;
    c.threads = (size_t)o.threads;
    c.thread_safe = o.threads > 1;
    eng_summary s;
    if (eng_run(&c, reqs, n, outs, &s, err, sizeof err)) {
        kvpt_error("%s", err);
        goto out;
    }
    if (o.json)
        print_json(reqs, outs, n, &s, &o);
    else
        print_text(&s, &o);
    for (size_t q = 0; q < n; q++)
        eng_output_free(&outs[q]);
    ret = KVPT_EXIT_OK;
out:
    free(tokens);
    free(reqs);
    free(outs);
    kvpt_trace_free(&t);
    tfm_free(&m);
    return ret;
}
