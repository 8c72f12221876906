/*
 * trace.h — Mooncake request traces (JSON Lines, plain or gzip) loaded whole
 * into flat arrays.
 *
 * A replay must time the cache, not the parser, so a trace is read and
 * checked completely before anything runs: per request its input length and
 * its hash ids, all requests' ids in one array indexed by an offset table.
 */
#ifndef KVPT_TRACE_H
#define KVPT_TRACE_H

#include <stddef.h>
#include <stdint.h>

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
} kvpt_trace;

/*
 * Read and validate the trace at `path` into *t.  On error prints one line
 * "kvpool: PATH[:LINE]: what is wrong" on stderr, leaves *t empty, and returns
 * -1; returns 0 on success.  Errors: the file cannot be opened or read; a name
 * ending in ".gz" that is not gzip; corrupt gzip data; per line (numbered from
 * 1): bad JSON, not an object, a missing field, a field of the wrong type, a
 * negative length, an empty hash_ids, a negative hash id.  Blank lines are
 * skipped.
 */
int kvpt_trace_load(const char *path, kvpt_trace *t);

/* Release what kvpt_trace_load allocated; *t becomes empty. */
void kvpt_trace_free(kvpt_trace *t);

#endif /* KVPT_TRACE_H */
