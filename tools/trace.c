/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c — loading Mooncake JSON Lines traces (see trace.h).
 *
 * The reader reads the file descriptor once, front to back, in chunks (so a
 * pipe loses nothing), inflates it (ISA-L's igzip, streaming, with the
 * gzip header and CRC checked) when its first two bytes are the gzip
 * magic, and hands out one line at a time from a window of bounded size; a
 * line longer than KVPT_TRACE_MAX_LINE is refused before it is buffered
 * further.  Reading and inflating run on a thread of their own, a few
 * fills ahead of the lines (N_FILLS buffers of FILL_CHUNK bytes), so that
 * inflating one part of the file overlaps parsing the part before; an error
 * the thread meets waits in its fill and is printed when the lines reach
 * it, exactly where a single thread would have met it.  To stop early the
 * thread is told to (it waits for input at most STOP_POLL_MS at a time
 * before looking) and joined.  Each line goes to kvpt_trace_add_line (trace_json.cpp), the
 * only place that knows the JSON library, which turns it into one request
 * on the flat arrays.
 *
 * gzip: consecutive members are one stream, as RFC 1952 and gzip -d have
 * it (`cat a.gz b.gz`); bytes after a member that do not start another one
 * are refused (zlib's gzread, for one, would drop them silently).  Every problem
 * is reported with the file name and, for content, the line number.
 */
#define _POSIX_C_SOURCE 200809L

#include "trace.h"

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes asked of read() at a time, and decompressed bytes added to the
 * window at a time. */
#define READ_CHUNK (1u << 17)
#define FILL_CHUNK (1u << 18)
/* The window holds one unfinished line of up to KVPT_TRACE_MAX_LINE bytes
 * plus a fill. */
#define WINDOW_SIZE ((size_t)KVPT_TRACE_MAX_LINE + 1 + FILL_CHUNK)
/* Fills the reading thread may be ahead of the lines. */
#define N_FILLS 4
/* Bytes igzip may hand back when a member ends (its bit buffer's read-ahead,
 * possibly read in an earlier call): read_more keeps that many used bytes
 * in front of the unused ones. */
#define HANDBACK 8
/* The longest the reading thread waits for input before it looks whether
 * it was told to stop. */
#define STOP_POLL_MS 100

/* Text the reading thread produced: len bytes, or the end of the text
 * (status 1), or an error (status -1, the message in the reader's err). */
typedef struct fill {
    char *data;             /* FILL_CHUNK bytes */
    size_t len;
    int status;
} fill;

/* One input being read.  The reading thread owns fd, z, in, eof,
 * member_done and consumed once it runs; the caller owns the window and
 * the lines; fills[head % N_FILLS .. tail % N_FILLS) are produced and not
 * yet used up, head and tail under mu.  Invariants: the avail_in bytes at
 * next_in (inside `in`) were read but not yet used, plain or gzip alike;
 * win[start .. end) is text not yet handed out; gzip: `consumed` counts the
 * input bytes inflate has used, so it is the offset of the next one. */
typedef struct reader {
    const char *name;       /* for messages: the path, or "standard input" */
    char name_buf[KVPT_SAFE_MAX]; /* the path made printable (kvpt_safe_copy) */
    int fd, own_fd;         /* own_fd: close it at the end */
    int eof;                /* read() returned 0 */
    int gzip;               /* the input starts with the gzip magic */

    int member_done;        /* gzip: the current member has ended */
    int text_done;          /* no more text will come */
    struct inflate_state *z; /* gzip: the inflater */
    unsigned char *next_in;
    unsigned avail_in;
    unsigned char *in;      /* READ_CHUNK bytes */
    uint64_t consumed;
    char *win;              /* WINDOW_SIZE bytes */
    size_t start, end;
    size_t lineno;          /* lines handed out so far */
    char err[512];          /* the reading side's error, "NAME: what" */
    fill fills[N_FILLS];
    unsigned head, tail;    /* fills used up / produced, ever */
    size_t used;            /* bytes of fills[head] already in the window */
    int threaded;           /* the thread runs: stop and join it at the end */
    atomic_int stop;        /* the lines are no longer wanted */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} reader;

/* Format the reading side's error into r->err; returns -1. */
__attribute__((format(printf, 2, 3))) static int reader_fail(reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Whether `path` ends with `suffix`. */
static int ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Append more bytes of the file after the unconsumed input (moved to the
 * front of `in`, behind the last HANDBACK bytes used); sets r->eof at the
 * end of the file.  Returns 0, or -1 with the error in r->err. */
static int read_more(reader *r)
{
    size_t used = (size_t)(r->next_in - r->in), keep = used < HANDBACK ? used : HANDBACK;
    if (used > keep)
        memmove(r->in, r->next_in - keep, keep + r->avail_in);
    r->next_in = r->in + keep;
    for (;;) {
        struct pollfd pf = {r->fd, POLLIN, 0};
        while (poll(&pf, 1, STOP_POLL_MS) == 0) /* no input yet: a pipe or FIFO */
            if (atomic_load(&r->stop))
                return reader_fail(r, "%s: stopped", r->name);
        ssize_t got = read(r->fd, r->next_in + r->avail_in, READ_CHUNK - keep - r->avail_in);
        if (got > 0) {
            r->avail_in += (unsigned)got;
            return 0;
        }
        if (got == 0) {
            r->eof = 1;
            return 0;
        }
        if (errno != EINTR)
            return reader_fail(r, "%s: %s", r->name, strerror(errno));
    }
}

/* Make at least `want` (at most READ_CHUNK) unconsumed input bytes
 * available, fewer only at the end of the file.  Returns 0 or -1 (r->err). */
static int need_input(reader *r, unsigned want)
{
    while (r->avail_in < want && !r->eof)
        if (read_more(r))
            return -1;
    return 0;
}

/* Whether the unconsumed input starts with the gzip magic (1f 8b). */
static int at_gzip_magic(const reader *r)
{
    return r->avail_in >= 2 && r->next_in[0] == 0x1f && r->next_in[1] == 0x8b;
}

/* Stop the reading thread (waiting for a free fill, or for input for at
 * most STOP_POLL_MS) and release what the reader holds. */
static void reader_close(reader *r)
{
    if (r->threaded) {
        pthread_mutex_lock(&r->mu);
        atomic_store(&r->stop, 1);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    for (int i = 0; i < N_FILLS; i++)
        free(r->fills[i].data);
    free(r->z);
    if (r->own_fd)
        close(r->fd);
    free(r->in);
    free(r->win);
}

static int reader_start(reader *r);

/* Open `path` ("-": standard input), allocate the buffers and tell gzip
 * from plain by the first two bytes.  Returns 0, or -1 with the error
 * printed and nothing left to release. */
static int reader_open(reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    int is_stdin = strcmp(path, "-") == 0;
    r->name = is_stdin ? "standard input" : kvpt_safe_copy(r->name_buf, sizeof r->name_buf, path);
    r->fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        kvpt_error("%s: %s", kvpt_safe_text(path), strerror(errno));
        return -1;
    }
    r->own_fd = !is_stdin;
    r->in = malloc(READ_CHUNK);
    r->win = malloc(WINDOW_SIZE);
    int fills_ok = 1;
    for (int i = 0; i < N_FILLS; i++)
        fills_ok &= (r->fills[i].data = malloc(FILL_CHUNK)) != NULL;
    if (!r->in || !r->win || !fills_ok) {
        kvpt_error("%s: out of memory", r->name);
        goto fail;
    }
    r->next_in = r->in;
    if (need_input(r, 2)) {
        kvpt_error("%s", r->err);
        goto fail;
    }
    r->gzip = at_gzip_magic(r);
    if (!r->gzip && ends_with(path, ".gz")) {
        kvpt_error("%s: not a gzip file (the name ends in .gz but the content does not "
                   "start with the gzip magic bytes)", r->name);
        goto fail;
    }
    if (r->gzip) {
        if (!(r->z = malloc(sizeof *r->z))) {
            kvpt_error("%s: out of memory", r->name);
            goto fail;
        }
        isal_inflate_init(r->z);
        r->z->crc_flag = ISAL_GZIP; /* parse the header, check CRC and length */
    }
    if (reader_start(r)) {
        kvpt_error("%s: cannot start the reading thread", r->name);
        goto fail;
    }
    return 0;
fail:
    reader_close(r);
    return -1;
}

/* Put up to `room` (> 0) bytes of plain text at `dst`; *got = 0 means the
 * input has ended.  Returns 0 or -1 (r->err). */
static int read_plain(reader *r, char *dst, size_t room, size_t *got)
{
    if (need_input(r, 1))
        return -1;
    size_t n = r->avail_in < room ? r->avail_in : room;
    memcpy(dst, r->next_in, n);
    r->next_in += n;
    r->avail_in -= (unsigned)n;
    *got = n;
    return 0;
}

/* What an igzip error code means. */
static const char *isal_error(int rc)
{
    switch (rc) {
    case ISAL_INVALID_BLOCK:
        return "invalid deflate block";
    case ISAL_INVALID_SYMBOL:
        return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK:
        return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER:
        return "invalid gzip header";
    case ISAL_UNSUPPORTED_METHOD:
        return "unknown compression method";
    case ISAL_INCORRECT_CHECKSUM:
        return "incorrect data check (CRC or length)";
    case ISAL_NEED_DICT:
        return "needs a preset dictionary";
    default:
        return "inflate failed";
    }
}

/* Put up to `room` (> 0) bytes of decompressed text at `dst`; *got = 0
 * means the last member ended at the end of the file.  Returns 0, or -1
 * (r->err) on corrupt or truncated data or data after the last member. */
static int read_gzip(reader *r, char *dst, size_t room, size_t *got)
{
    for (;;) {
        if (r->member_done) {
            if (need_input(r, 2))
                return -1;
            if (r->avail_in == 0) {
                *got = 0;
                return 0;
            }
            if (!at_gzip_magic(r))
                return reader_fail(r, "%s: data after the end of the gzip stream (at byte %llu)",
                                   r->name, (unsigned long long)r->consumed);
            isal_inflate_reset(r->z);
            r->z->crc_flag = ISAL_GZIP;
            r->member_done = 0;
        }
        if (need_input(r, 1))
            return -1;
        if (r->avail_in == 0)
            return reader_fail(r, "%s: corrupt gzip data: the file ends inside the gzip stream "
                                  "(truncated?)", r->name);
        struct inflate_state *z = r->z;
        z->next_in = r->next_in;
        z->avail_in = r->avail_in;
        z->next_out = (unsigned char *)dst;
        z->avail_out = (uint32_t)room;
        int rc = isal_inflate(z);
        /* a member's end may hand back up to HANDBACK bytes read before */
        r->consumed = r->consumed + r->avail_in - z->avail_in;
        int moved = z->next_in != r->next_in;
        r->next_in = z->next_in;
        r->avail_in = z->avail_in;
        *got = room - z->avail_out;
        if (rc < 0 || rc == ISAL_NEED_DICT)
            return reader_fail(r, "%s: corrupt gzip data: %s", r->name, isal_error(rc));
        if (z->block_state == ISAL_BLOCK_FINISH)
            r->member_done = 1;
        if (*got)
            return 0;
        /* nothing out and nothing taken: it needs more input than there is */
        if (!moved && !r->member_done) {
            if (r->eof)
                return reader_fail(r, "%s: corrupt gzip data: the file ends inside the gzip "
                                      "stream (truncated?)", r->name);
            if (r->avail_in + HANDBACK >= READ_CHUNK)
                return reader_fail(r, "%s: corrupt gzip data: inflate failed", r->name);
            if (read_more(r))
                return -1;
        }
    }
}

/* The reading thread: fill after fill of text, until the end of the text,
 * an error or being told to stop, never more than N_FILLS ahead. */
static void *produce(void *arg)
{
    reader *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->tail - r->head == N_FILLS && !atomic_load(&r->stop))
            pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        if (atomic_load(&r->stop))
            return NULL;
        fill *f = &r->fills[r->tail % N_FILLS];
        size_t got = 0;
        int rc = (r->gzip ? read_gzip : read_plain)(r, f->data, FILL_CHUNK, &got);
        f->len = got;
        f->status = rc < 0 ? -1 : got == 0;
        pthread_mutex_lock(&r->mu);
        r->tail++;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (f->status)
            return NULL;
    }
}

/* Start the reading thread.  Returns 0 or -1. */
static int reader_start(reader *r)
{
    if (pthread_mutex_init(&r->mu, NULL))
        return -1;
    if (pthread_cond_init(&r->cv, NULL)) {
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    if (pthread_create(&r->thread, NULL, produce, r)) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    r->threaded = 1;
    return 0;
}

/* Put up to `room` (> 0) bytes of the produced text at `dst`; *got = 0
 * means the text has ended.  Returns 0, or -1 with the reading side's
 * error printed. */
static int take_text(reader *r, char *dst, size_t room, size_t *got)
{
    pthread_mutex_lock(&r->mu);
    while (r->tail == r->head)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    fill *f = &r->fills[r->head % N_FILLS];
    if (f->status < 0) {
        kvpt_error("%s", r->err);
        return -1;
    }
    size_t n = f->len - r->used < room ? f->len - r->used : room;
    memcpy(dst, f->data + r->used, n);
    r->used += n;
    *got = n;
    if (f->status == 0 && r->used == f->len) { /* used up: hand it back */
        r->used = 0;
        pthread_mutex_lock(&r->mu);
        r->head++;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    return 0;
}

/* Hand out the next line (without its newline) in *line / *len, valid until
 * the next call.  Returns 1, 0 at the end of the input, or -1 with the error
 * printed (a read or gzip error, or a line longer than KVPT_TRACE_MAX_LINE). */
static int next_line(reader *r, const char **line, size_t *len)
{
    size_t scanned = r->start; /* no newline in win[start .. scanned) */
    for (;;) {
        char *nl = memchr(r->win + scanned, '\n', r->end - scanned);
        size_t stop = nl ? (size_t)(nl - r->win) : r->end;
        if (stop - r->start > KVPT_TRACE_MAX_LINE) {
            kvpt_error("%s:%zu: line longer than %u bytes", r->name, r->lineno + 1,
                       KVPT_TRACE_MAX_LINE);
            return -1;
        }
        if (nl || (r->text_done && r->end > r->start)) {
            *line = r->win + r->start;
            *len = stop - r->start;
            r->start = nl ? stop + 1 : stop;
            r->lineno++;
            return 1;
        }
        if (r->text_done)
            return 0;
        size_t keep = r->end - r->start;
        memmove(r->win, r->win + r->start, keep);
        r->start = 0;
        r->end = scanned = keep;
        size_t got;
        if (take_text(r, r->win + r->end, WINDOW_SIZE - r->end, &got))
            return -1;
        r->end += got;
        r->text_done = got == 0;
    }
}

/* Whether the line holds nothing but spaces, tabs and CRs. */
static int is_blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return 0;
    return 1;
}

/* What a trace is, for a first line that is not one: whoever gave a CSV
 * file or a JSON array needs the format, not the parser's complaint. */
#define TRACE_FORMAT                                                                    \
    "a trace is JSON Lines, one JSON object per line with the Mooncake fields "         \
    "timestamp, input_length, output_length and hash_ids (see `kvpool replay --help` " \
    "and data/README.md)"

/* Report line r->lineno (len bytes at `line`) that kvpt_trace_add_line
 * refused with `err`: a leading UTF-8 byte-order mark by name; a first
 * request line that does not even start as a JSON object with what a trace
 * is; anything else as the parser said. */
static void report_line(const reader *r, const kvpt_trace *t, const char *line, size_t len,
                        const char *err)
{
    if (len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
        kvpt_error("%s:%zu: starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON "
                   "Lines does not allow: remove it (sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)",
                   r->name, r->lineno);
        return;
    }
    size_t skip = strspn(line, " \t");
    if (t->n_requests == 0 && line[skip] != '{' &&
        (strncmp(err, "bad JSON", 8) == 0 || strcmp(err, "not a JSON object") == 0)) {
        char head[41];
        snprintf(head, sizeof head, "%.*s", (int)(len - skip < 40 ? len - skip : 40),
                 line + skip);
        kvpt_error("%s:%zu: not a trace: the line is %s ('%s'); " TRACE_FORMAT, r->name,
                   r->lineno, line[skip] == '[' ? "a JSON array" : "not a JSON object",
                   kvpt_safe_text(head));
        return;
    }
    kvpt_error("%s:%zu: %s", r->name, r->lineno, err);
}

/* Read `path` line by line: with `t`, parse each into *t (which ends empty
 * on error); without, only count the lines and their bytes (newlines
 * included) into *lines and *bytes.  Returns 0, or -1 with the error
 * printed. */
static int read_lines(const char *path, kvpt_trace *t, uint64_t *lines, uint64_t *bytes)
{
    reader r;
    if (reader_open(&r, path))
        return -1;
    const char *line;
    size_t len;
    int got;
    while ((got = next_line(&r, &line, &len)) > 0) {
        char err[256];
        if (!t)
            *bytes += len + 1;
        else if (!is_blank(line, len) && kvpt_trace_add_line(t, line, len, err, sizeof err)) {
            report_line(&r, t, line, len, err);
            got = -1;
            break;
        }
    }
    if (got == 0 && t && t->n_requests == 0) {
        kvpt_error("%s: not a trace: no request lines (the input is empty or blank)",
                   r.name);
        got = -1;
    }
    if (lines)
        *lines = r.lineno;
    reader_close(&r);
    if (got < 0 && t)
        kvpt_trace_free(t);
    return got < 0 ? -1 : 0;
}

/* See trace.h. */
int kvpt_trace_load(const char *path, kvpt_trace *t)
{
    double t0 = kvpt_now();
    memset(t, 0, sizeof *t);
    if (read_lines(path, t, NULL, NULL))
        return -1;
    t->path = path;
    t->load_seconds = kvpt_now() - t0;
    return 0;
}

/* See trace.h. */
int kvpt_trace_scan(const char *path, uint64_t *lines, uint64_t *bytes)
{
    *lines = *bytes = 0;
    return read_lines(path, NULL, lines, bytes);
}

/* Free the arrays and zero the struct. */
void kvpt_trace_free(kvpt_trace *t)
{
    kvpt_trace_json_free(t->json);
    free(t->offset);
    free(t->ids);
    free(t->input_length);
    free(t->output_length);
    memset(t, 0, sizeof *t);
}
