/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h — Mooncake request traces (JSON Lines, plain or gzip) read once,
 * line by line, into flat arrays.
 *
 * A replay must time the cache, not the parser, so a trace is read and
 * checked completely before anything runs: per request its input length and
 * its hash ids, all requests' ids in one array indexed by an offset table.
 * Memory is those arrays (8 bytes per hash id, 16 per request) plus one
 * window of at most KVPT_TRACE_MAX_LINE bytes, 1 MiB of text read ahead,
 * and the parser's buffers for the longest line (simdjson: about 14 bytes
 * per byte of line); never the whole file.
 *
 * What a trace line must be (kvpt_trace_add_line enforces it):
 *   - one JSON object of at most KVPT_TRACE_MAX_LINE bytes, no key twice;
 *   - "timestamp", "input_length", "output_length": non-negative integers;
 *   - "hash_ids": a non-empty array of non-negative integers, one per block
 *     of KVPT_TRACE_BLOCK_TOKENS tokens, the last one possibly partial:
 *     len(hash_ids) == ceil(input_length / KVPT_TRACE_BLOCK_TOKENS), the
 *     rule every line of the published Mooncake traces follows;
 *   - other keys are allowed and ignored.
 * A trace has at least one request, and its total input_length fits in 64
 * bits.
 */
#ifndef KVPT_TRACE_H
#define KVPT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens per block of the Mooncake traces: one hash id per 512 tokens. */
#define KVPT_TRACE_BLOCK_TOKENS 512u

/* The longest line accepted, in bytes, without its newline: 1 MiB holds
 * over 100,000 hash ids (the longest line of the bundled traces is 2,699
 * bytes) and bounds what one line may cost to parse. */
#define KVPT_TRACE_MAX_LINE (1u << 20)

/* The JSON parser's state kept across lines (trace_json.cpp). */
typedef struct kvpt_json kvpt_json;

typedef struct kvpt_trace {
    const char *path;        /* as given (not copied) */
    size_t n_requests;
    uint64_t *offset;        /* n_requests + 1 entries: request r's hash ids
                                are ids[offset[r] .. offset[r + 1]) */
    uint64_t *ids;           /* every request's hash ids, in file order */
    uint64_t *input_length;  /* per request, tokens */
    uint64_t *output_length; /* per request, tokens */
    uint64_t total_blocks;   /* == offset[n_requests] */
    uint64_t total_input;    /* sum of input_length */
    uint64_t max_blocks;     /* hash ids of the longest request */
    double load_seconds;     /* reading, decompressing and parsing */
    size_t req_cap, ids_cap; /* allocated entries of input_length, of ids */
    kvpt_json *json;         /* the parser, made by the first line */
} kvpt_trace;

/*
 * Read and validate the trace at `path` ("-": standard input) into *t.  The
 * input is read once, front to back, so pipes, FIFOs and /dev/stdin work; it
 * is gzip when it starts with the gzip magic bytes, plain text otherwise.
 * Reading and inflating run on a second thread, ended before the return.
 * Several gzip members one after the other are one stream (as gzip -d reads
 * them); anything else after the last member is refused.  On error prints
 * one line "kvpool: FILE[:LINE]: what is wrong" on stderr (FILE is "standard
 * input" for "-"), leaves *t empty, and returns -1; returns 0 on success.
 * Errors: the file cannot be opened or read; a name ending in ".gz" that is
 * not gzip; corrupt or truncated gzip data; data after the gzip stream; a
 * line longer than KVPT_TRACE_MAX_LINE; a line breaking the rules above; no
 * request at all (empty, or only blank lines); the total input_length
 * overflowing; out of memory.  Blank lines (spaces, tabs, CR) are skipped;
 * lines are numbered from 1.  Time and memory: linear in the input, memory
 * as in the file comment.
 */
int kvpt_trace_load(const char *path, kvpt_trace *t);

/*
 * Parse one line (`len` bytes at `line`, no newline, need not be
 * NUL-terminated) and append its request to *t, which is a zeroed struct or
 * one this function or kvpt_trace_load filled.  Returns 0, or -1 with the
 * reason (no file or line number) in `err` (`errcap` bytes, NUL-terminated)
 * and the requests and totals of *t unchanged: the line is longer than
 * KVPT_TRACE_MAX_LINE, breaks a rule of the file comment (a blank line is
 * "bad JSON"), would overflow the total input_length, or memory runs out
 * ("out of memory").  The JSON parser (simdjson, in trace_json.cpp) is
 * behind this one function; its buffers stay in *t for the next line.
 * Time: linear in `len`.
 */
int kvpt_trace_add_line(kvpt_trace *t, const char *line, size_t len, char *err, size_t errcap);

/*
 * Read `path` exactly as kvpt_trace_load does (same reader, gzip and line
 * bound) and cut it into lines, but parse nothing: the floor of a load, for
 * `kvpool bench --workload load`.  *lines and *bytes receive the number of
 * lines and of bytes with their newlines.  Returns 0, or -1 with the error
 * printed as kvpt_trace_load prints it.
 */
int kvpt_trace_scan(const char *path, uint64_t *lines, uint64_t *bytes);

/* Release what kvpt_trace_load or kvpt_trace_add_line allocated; *t becomes
 * empty (zeroed). */
void kvpt_trace_free(kvpt_trace *t);

/* Release the parser state of a trace (NULL is ignored); kvpt_trace_free
 * calls it. */
void kvpt_trace_json_free(kvpt_json *j);

#ifdef __cplusplus
}
#endif

#endif /* KVPT_TRACE_H */
