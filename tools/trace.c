/*
 * trace.c — loading Mooncake JSON Lines traces (see trace.h).
 *
 * The file is read whole through zlib (gzread passes plain files through
 * unchanged, so one reader serves both; the gzip magic is checked up front so
 * that a ".gz" name on a plain file is caught instead of silently accepted),
 * then split into lines and each line parsed with jansson.  Every problem is
 * reported with the file name and, for content, the line number.
 */
#define _POSIX_C_SOURCE 200809L

#include "trace.h"

#include "common.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Growable arrays being filled while parsing. */
typedef struct builder {
    kvpt_trace *t;
    size_t req_cap;  /* capacity of offset (minus one) and input_length */
    size_t ids_cap;
} builder;

/* Whether `path` ends with `suffix`. */
static int ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Read the first two bytes of `path` and tell whether they are the gzip
 * magic (1f 8b).  Returns 1 or 0, or -1 (error printed) when the file cannot
 * be opened. */
static int is_gzip(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        kvpt_error("%s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    fclose(f);
    return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

/* Read the whole (decompressed) content of `path` into a NUL-terminated
 * malloc'd buffer; *len receives its length without the NUL.  Returns NULL
 * with the error printed. */
static char *read_all(const char *path, size_t *len)
{
    int gz = is_gzip(path);
    if (gz < 0)
        return NULL;
    if (!gz && ends_with(path, ".gz")) {
        kvpt_error("%s: not a gzip file (the name ends in .gz but the content does not "
                   "start with the gzip magic bytes)", path);
        return NULL;
    }
    gzFile f = gzopen(path, "rb");
    if (!f) {
        kvpt_error("%s: %s", path, errno ? strerror(errno) : "cannot open");
        return NULL;
    }
    gzbuffer(f, 1u << 17);
    size_t cap = 1u << 20, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (buf && n == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
        if (!buf) {
            gzclose(f);
            kvpt_error("%s: out of memory", path);
            return NULL;
        }
        size_t want = cap - n < (1u << 30) ? cap - n : (1u << 30);
        int got = gzread(f, buf + n, (unsigned)want);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    int errnum = Z_OK;
    const char *msg = gzerror(f, &errnum);
    if (errnum != Z_OK) {
        kvpt_error("%s: %s: %s", path, gz ? "corrupt gzip data" : "read error",
                   errnum == Z_ERRNO ? strerror(errno) : msg);
        gzclose(f);
        free(buf);
        return NULL;
    }
    gzclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Make room for one more request and `n_ids` more ids.  Returns -1 when
 * memory runs out. */
static int reserve(builder *b, size_t n_ids)
{
    kvpt_trace *t = b->t;
    if (t->n_requests == b->req_cap) {
        size_t cap = b->req_cap ? 2 * b->req_cap : 1024;
        uint64_t *off = realloc(t->offset, (cap + 1) * sizeof *off);
        if (!off)
            return -1;
        t->offset = off;
        uint64_t *inl = realloc(t->input_length, cap * sizeof *inl);
        if (!inl)
            return -1;
        t->input_length = inl;
        uint64_t *outl = realloc(t->output_length, cap * sizeof *outl);
        if (!outl)
            return -1;
        t->output_length = outl;
        b->req_cap = cap;
    }
    size_t need = (size_t)t->total_blocks + n_ids;
    if (need > b->ids_cap) {
        size_t cap = b->ids_cap ? b->ids_cap : 16384;
        while (cap < need)
            cap *= 2;
        uint64_t *ids = realloc(t->ids, cap * sizeof *ids);
        if (!ids)
            return -1;
        t->ids = ids;
        b->ids_cap = cap;
    }
    return 0;
}

/* Fetch the non-negative integer field `name` of `obj` into *out, or describe
 * what is wrong with it in `err` (returns -1). */
static int get_length(json_t *obj, const char *name, uint64_t *out, char *err, size_t cap)
{
    json_t *v = json_object_get(obj, name);
    if (!v) {
        snprintf(err, cap, "missing field \"%s\"", name);
        return -1;
    }
    if (!json_is_integer(v)) {
        snprintf(err, cap, "field \"%s\" must be an integer", name);
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < 0) {
        snprintf(err, cap, "negative %s (%lld)", name, (long long)x);
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

/* Parse one line (`len` bytes at `line`) into the next request of b->t.
 * Returns 0, or -1 with the reason in `err`. */
static int parse_line(builder *b, const char *line, size_t len, char *err, size_t cap)
{
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, 0, &jerr);
    if (!obj) {
        snprintf(err, cap, "bad JSON: %s (column %d)", jerr.text, jerr.column);
        return -1;
    }
    int rc = -1;
    uint64_t input_length, output_length;
    json_t *ts, *hashes;
    if (!json_is_object(obj)) {
        snprintf(err, cap, "not a JSON object");
        goto out;
    }
    if (!(ts = json_object_get(obj, "timestamp"))) {
        snprintf(err, cap, "missing field \"timestamp\"");
        goto out;
    }
    if (!json_is_number(ts)) {
        snprintf(err, cap, "field \"timestamp\" must be a number");
        goto out;
    }
    if (get_length(obj, "input_length", &input_length, err, cap) ||
        get_length(obj, "output_length", &output_length, err, cap))
        goto out;
    if (!(hashes = json_object_get(obj, "hash_ids"))) {
        snprintf(err, cap, "missing field \"hash_ids\"");
        goto out;
    }
    if (!json_is_array(hashes)) {
        snprintf(err, cap, "field \"hash_ids\" must be an array");
        goto out;
    }
    size_t n = json_array_size(hashes);
    if (n == 0) {
        snprintf(err, cap, "empty hash_ids");
        goto out;
    }
    if (reserve(b, n)) {
        snprintf(err, cap, "out of memory");
        goto out;
    }
    kvpt_trace *t = b->t;
    uint64_t *dst = t->ids + t->total_blocks;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(hashes, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(err, cap, "hash_ids[%zu] must be a non-negative integer", i);
            goto out;
        }
        dst[i] = (uint64_t)json_integer_value(v);
    }
    t->input_length[t->n_requests] = input_length;
    t->output_length[t->n_requests] = output_length;
    t->total_input += input_length;
    t->total_blocks += n;
    if (n > t->max_blocks)
        t->max_blocks = n;
    t->n_requests++;
    t->offset[t->n_requests] = t->total_blocks;
    rc = 0;
out:
    json_decref(obj);
    return rc;
}

/* Read, split into lines, parse each; see trace.h. */
int kvpt_trace_load(const char *path, kvpt_trace *t)
{
    double t0 = kvpt_now();
    memset(t, 0, sizeof *t);
    size_t len;
    char *buf = read_all(path, &len);
    if (!buf)
        return -1;
    builder b = {t, 0, 0};
    t->path = path;
    if (reserve(&b, 0)) {
        free(buf);
        kvpt_trace_free(t);
        kvpt_error("%s: out of memory", path);
        return -1;
    }
    t->offset[0] = 0;
    size_t lineno = 0;
    for (char *line = buf; line < buf + len;) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        char *end = nl ? nl : buf + len;
        lineno++;
        size_t n = (size_t)(end - line);
        if (strspn(line, " \t\r") < n) {
            char err[256];
            if (parse_line(&b, line, n, err, sizeof err)) {
                kvpt_error("%s:%zu: %s", path, lineno, err);
                free(buf);
                kvpt_trace_free(t);
                return -1;
            }
        }
        line = end + 1;
    }
    free(buf);
    t->load_seconds = kvpt_now() - t0;
    return 0;
}

/* Free the arrays and zero the struct. */
void kvpt_trace_free(kvpt_trace *t)
{
    free(t->offset);
    free(t->ids);
    free(t->input_length);
    free(t->output_length);
    memset(t, 0, sizeof *t);
}
