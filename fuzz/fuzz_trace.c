/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_trace.c — the trace line parser (kvpt_trace_add_line, tools/trace.c)
 * on arbitrary bytes.
 *
 * What it covers: everything a trace file controls once the reader has cut
 * it into lines — the JSON parser, the field checks, the hash-id count rule
 * and the growth of the flat arrays.  The input is split at each newline
 * and every piece, blank ones included (the loader skips those; the parser
 * must refuse them), goes to kvpt_trace_add_line on one growing trace, as
 * the loader feeds it.
 *
 * Checks after every call, independent of the parser: an accepted piece
 * starts with '{' and ends with '}' (JSON blanks aside), and its request has
 * at least one hash id, exactly ceil(input_length / 512) of them, ids below
 * 2^63, and totals and offsets that add up; a refused piece leaves a
 * non-empty one-line printable reason and the trace's requests, totals and
 * earlier ids unchanged.  A broken check aborts (libFuzzer saves the
 * input); AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer
 * catch crashes, undefined behaviour and leaks.
 *
 * Why: the rules are what makes a trace trustworthy for a replay, and the
 * parser sits behind this one function, so any parser that replaces it must
 * pass the same checks.  Built with libFuzzer by `make
 * build-fuzz/fuzz_trace`; seeds in fuzz/corpus-trace/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort with a message: libFuzzer reports it as a crash. */
#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_trace: check failed at line %d: %s\n", __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* A checksum of every stored hash id and input length. */
static uint64_t digest(const kvpt_trace *t)
{
    uint64_t h = 1469598103934665603u;
    for (uint64_t i = 0; i < t->total_blocks; i++)
        h = (h ^ t->ids[i]) * 1099511628211u;
    for (size_t r = 0; r < t->n_requests; r++)
        h = (h ^ t->input_length[r] ^ t->offset[r + 1]) * 1099511628211u;
    return h;
}

/* Whether the piece, JSON blanks aside, starts with '{' and ends with '}'. */
static int looks_like_object(const char *s, size_t n)
{
    size_t a = 0, b = n;
    while (a < b && strchr(" \t\r", s[a]) && s[a])
        a++;
    while (b > a && strchr(" \t\r", s[b - 1]) && s[b - 1])
        b--;
    return b - a >= 2 && s[a] == '{' && s[b - 1] == '}';
}

/* Feed one piece and check the outcome (see the file comment). */
static void feed(kvpt_trace *t, const char *s, size_t n)
{
    size_t before_n = t->n_requests;
    uint64_t before_blocks = t->total_blocks, before_input = t->total_input;
    uint64_t before_max = t->max_blocks, before_digest = digest(t);
    char err[256];
    memset(err, 'z', sizeof err);
    if (kvpt_trace_add_line(t, s, n, err, sizeof err) == 0) {
        CHECK(n <= KVPT_TRACE_MAX_LINE && looks_like_object(s, n));
        CHECK(t->n_requests == before_n + 1);
        uint64_t k = t->offset[before_n + 1] - t->offset[before_n];
        uint64_t inp = t->input_length[before_n];
        CHECK(t->offset[before_n] == before_blocks && t->total_blocks == before_blocks + k);
        CHECK(k >= 1 && (k - 1) * KVPT_TRACE_BLOCK_TOKENS < inp &&
              inp <= k * KVPT_TRACE_BLOCK_TOKENS);
        CHECK(t->total_input == before_input + inp && t->total_input >= before_input);
        CHECK(t->max_blocks == (k > before_max ? k : before_max));
        for (uint64_t i = before_blocks; i < t->total_blocks; i++)
            CHECK(t->ids[i] <= (uint64_t)INT64_MAX);
        return;
    }
    const char *nul = memchr(err, '\0', sizeof err);
    CHECK(nul && nul > err);
    size_t len = (size_t)(nul - err);
    for (size_t i = 0; i < len; i++)
        CHECK(err[i] >= 0x20 && err[i] < 0x7f);
    CHECK(t->n_requests == before_n && t->total_blocks == before_blocks);
    CHECK(t->total_input == before_input && t->max_blocks == before_max);
    CHECK(digest(t) == before_digest);
}

/* Split at newlines and feed every piece to one trace, then free it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvpt_trace t;
    memset(&t, 0, sizeof t);
    const char *s = (const char *)data, *end = s + size;
    for (;;) {
        const char *nl = s < end ? memchr(s, '\n', (size_t)(end - s)) : NULL;
        feed(&t, s, (size_t)((nl ? nl : end) - s));
        if (!nl)
            break;
        s = nl + 1;
    }
    kvpt_trace_free(&t);
    return 0;
}
