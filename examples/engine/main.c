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
    "usage: kvpool-engine --trace FILE [options]\n"
    "\n"
    "Serve the first requests of a Mooncake trace with a small Llama-shaped model\n"
    "whose KV cache lives in kvpool, and report what the cache saved.\n"
    "\n"
    "  --trace FILE          Mooncake trace (JSON Lines, plain or .gz)\n"
    "  --requests N          serve the first N requests (default 64)\n"
    "  --blocks B            pool size in blocks (default 4096)\n"
    "  --no-prefix-caching   compute every prompt token\n"
    "  --seed S              weights (unless --model) and sampling (default 0)\n"
    "  --json                one JSON line per request, then a summary line\n"
    "  --block-tokens T      tokens per trace hash id (default 16)\n"
    "  --block-size K        tokens per kvpool block (default 16)\n"
    "  --max-tokens M        cap on tokens generated per request (default 16)\n"
    "  --output-tokens M     generate exactly M tokens per request instead of the\n"
    "                        trace's scaled output length (default 0: scaled)\n"
    "  --budget N            tokens computed per step (default 512)\n"
    "  --max-running N       requests running at once (default 256)\n"
    "  --temperature X       0 for greedy (default 1)\n"
    "  --threads N           threads computing decode steps (default 1; above 1\n"
    "                        the pool is created thread_safe)\n"
    "  --spec-tokens K       speculative decoding: draft up to K tokens a step by\n"
    "                        prompt lookup, roll rejected ones back (default 0)\n"
    "  --model FILE          llama2.c checkpoint instead of seeded weights\n"
    "  --retire-at STEP      shrink the pool at this step by --retire blocks\n"
    "  --retire N\n"
    "\n"
    "Exit status: 0 success, 1 bad input or failure, 2 bad command line.\n";

typedef struct opts {
    const char *trace, *model;
    uint64_t requests, blocks, seed, block_tokens, block_size, max_tokens, output_tokens;
    uint64_t budget, max_running, spec_tokens, threads;
    uint64_t retire_at, retire;
    double temperature;
    int no_prefix, json;
} opts;

/* Report a bad command line on stderr; returns exit status 2. */
static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kvpool-engine: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'kvpool-engine --help'.\n");
    return KVPT_EXIT_USAGE;
}

/* Parse argv into *o; returns -1 to exit 0 (help), or an exit code > 0, or
 * 0 to run. */
static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.requests = 64, .blocks = 4096, .block_tokens = 16, .block_size = 16,
                .max_tokens = 16, .budget = 512, .max_running = 256, .temperature = 1.0,
                .threads = 1};
    static const struct {
        const char *name;
        size_t off;
        uint64_t max;
    } nums[] = {
        {"--requests", offsetof(opts, requests), 1u << 24},
        {"--blocks", offsetof(opts, blocks), 1u << 24},
        {"--seed", offsetof(opts, seed), UINT64_MAX},
        {"--block-tokens", offsetof(opts, block_tokens), TRACE_ID_TOKENS},
        {"--block-size", offsetof(opts, block_size), 65535},
        {"--max-tokens", offsetof(opts, max_tokens), 1u << 16},
        {"--output-tokens", offsetof(opts, output_tokens), 1u << 16},
        {"--budget", offsetof(opts, budget), 1u << 24},
        {"--max-running", offsetof(opts, max_running), 1u << 20},
        {"--spec-tokens", offsetof(opts, spec_tokens), ENG_MAX_SPEC},
        {"--threads", offsetof(opts, threads), ENG_MAX_THREADS},
        {"--retire-at", offsetof(opts, retire_at), 1u << 30},
        {"--retire", offsetof(opts, retire), 1u << 24},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--no-prefix-caching")) {
            o->no_prefix = 1;
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value (or is unknown)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--trace")) {
            o->trace = v;
            continue;
        }
        if (!strcmp(a, "--model")) {
            o->model = v;
            continue;
        }
        if (!strcmp(a, "--temperature")) {
            char *end;
            o->temperature = strtod(v, &end);
            if (*end || end == v || !(o->temperature >= 0.0 && o->temperature <= 100.0))
                return usage_error("--temperature: not a number in 0..100: %s", v);
            continue;
        }
        size_t k = 0;
        while (k < sizeof nums / sizeof nums[0] && strcmp(a, nums[k].name))
            k++;
        if (k == sizeof nums / sizeof nums[0])
            return usage_error("unknown option %s", a);
        uint64_t *dst = (uint64_t *)((char *)o + nums[k].off);
        if (kvpt_parse_u64(v, nums[k].max, dst))
            return usage_error("bad value for %s", a);
    }
    if (!o->trace)
        return usage_error("%s", "--trace FILE is required");
    if (!o->requests || !o->blocks || !o->block_tokens || !o->block_size || !o->max_tokens ||
        !o->budget || !o->max_running || !o->threads)
        return usage_error("%s", "counts must be at least 1");
    if (o->max_running > o->budget)
        return usage_error("%s", "--budget must be at least --max-running");
    return 0;
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
    int prc = parse(argc, argv, &o);
    if (prc)
        return prc < 0 ? KVPT_EXIT_OK : prc;
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
