/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.c — error reporting, the command-line parser, the monotonic clock,
 * number parsing, printable file names and safe file replacement for the
 * command-line tool (see common.h).
 *
 * The parser is the one place that reads options: every subcommand states
 * its options as a kvpt_opt table, so each rule (ranges in messages, an
 * option given twice refused, --help) holds for all of them alike.
 */
#define _GNU_SOURCE /* getopt_long */

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <kvpool.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *kvpt_program = "kvpool";

/* Print "PROGRAM CMD: message" and the --help hint; usage errors are the
 * caller's fault, so they say how to find the right spelling. */
int kvpt_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s%s%s: ", kvpt_program, cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s%s%s --help'.\n", kvpt_program, cmd ? " " : "", cmd ? cmd : "");
    return KVPT_EXIT_USAGE;
}

/* Print "PROGRAM: message" on stderr. */
int kvpt_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", kvpt_program);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return KVPT_EXIT_ERROR;
}

/* The library names every status code; say which call failed. */
int kvpt_lib_error(const char *what, int status)
{
    kvpt_error("%s: %s", what, kvp_strerror(status));
    return -1;
}

/* CLOCK_MONOTONIC as a double: nanosecond resolution is kept for intervals
 * far longer than any run. */
double kvpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* strtoull accepts leading blanks, signs and "0x"; a count on the command line
 * should be plain digits, so check the first character ourselves. */
int kvpt_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* The length of the UTF-8 sequence at s[0..n) (its first byte >= 0x80) and
 * its code point into *cp, or 0 when it is not valid UTF-8 (overlong,
 * surrogate, above U+10FFFF, truncated). */
static size_t utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (!k || k > n || s[0] > 0xf4)
        return 0;
    uint32_t c = s[0] & (0x7f >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[k] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return k;
}

/* See common.h. */
char *kvpt_safe_copy(char *out, size_t cap, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str), len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = s[i];
        size_t k = s[i] < 0x80 ? 1 : utf8_len(s + i, n - i, &cp);
        char piece[16];
        if (k == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
            k = k ? k : 1; /* C1 controls: each byte of their two */
            size_t w = 0;
            for (size_t j = 0; j < k; j++)
                w += (size_t)snprintf(piece + w, sizeof piece - w, "\\x%02x", s[i + j]);
            piece[w] = 0;
        } else if (s[i] == '\\') {
            strcpy(piece, "\\\\");
        } else {
            memcpy(piece, s + i, k);
            piece[k] = 0;
        }
        size_t w = strlen(piece);
        if (len + w + 4 > cap && (i + k < n || len + w + 1 > cap)) {
            strcpy(out + len, "...");
            return out;
        }
        memcpy(out + len, piece, w);
        len += w;
        i += k;
    }
    out[len] = 0;
    return out;
}

/* See common.h. */
const char *kvpt_safe_text(const char *s)
{
    static char bufs[8][KVPT_SAFE_MAX];
    static unsigned next;
    return kvpt_safe_copy(bufs[next++ % 8], sizeof bufs[0], s);
}

/* ---- command lines ------------------------------------------------------ */

/* The edit distance of a and b, words of at most 63 bytes (longer: a
 * distance too large to matter), by the classic two-row table. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return SIZE_MAX;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= m; j++)
        prev[j] = j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (m + 1) * sizeof *prev);
    }
    return prev[m];
}

/* See common.h. */
const char *kvpt_closest(const char *word, const char *const *words, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX, len = strlen(word);
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, words[i]), wl = strlen(words[i]);
        size_t limit = (len > wl ? len : wl) / 3;
        int prefix = len >= 2 && strncmp(word, words[i], len) == 0;
        if ((d <= (limit ? limit : 1) || prefix) && d < best_d) {
            best = words[i];
            best_d = d;
        }
    }
    return best;
}

/* getopt_long's code for table entry i: above every character, so no entry
 * can be mistaken for 'h', '?' or ':'. */
#define OPT_VAL_BASE 256

/* Print "--name: expected one of the words of `words`" as "a, b or c". */
static int choice_error(const kvpt_cli *cli, const kvpt_opt *o, const char *arg)
{
    char list[256];
    size_t len = 0;
    const char *w = o->what;
    while (*w && len + 1 < sizeof list) {
        size_t k = strcspn(w, "|");
        const char *sep = !w[k] ? "" : strchr(w + k + 1, '|') ? ", " : " or ";
        int n = snprintf(list + len, sizeof list - len, "%.*s%s", (int)k, w, sep);
        if (n < 0 || (size_t)n >= sizeof list - len)
            break;
        len += (size_t)n;
        w += k + (w[k] != 0);
    }
    list[len] = 0;
    return kvpt_usage_error(cli->cmd, "--%s: expected %s, got '%s'", o->name, list,
                            kvpt_safe_text(arg));
}

/* Whether `arg` is one of the '|'-separated words of `words`. */
static int is_choice(const char *words, const char *arg)
{
    size_t n = strlen(arg);
    for (const char *w = words;;) {
        size_t k = strcspn(w, "|");
        if (k == n && strncmp(w, arg, n) == 0)
            return 1;
        if (!w[k])
            return 0;
        w += k + 1;
    }
}

/* Store the value of option `o`; returns -1 after a usage error was printed.
 * Numbers are plain digits (no sign, blank, hex or exponent), so what a
 * message says is allowed is exactly what is accepted. */
static int store_value(const kvpt_cli *cli, const kvpt_opt *o, const char *arg)
{
    switch (o->kind) {
    case KVPT_OPT_FLAG:
        *(int *)o->dest = 1;
        return 0;
    case KVPT_OPT_TEXT:
        *(const char **)o->dest = arg;
        return 0;
    case KVPT_OPT_COUNT: {
        uint64_t v;
        if (kvpt_parse_u64(arg, o->max, &v) || v < o->min) {
            kvpt_usage_error(cli->cmd, "--%s: expected %s from %llu to %llu, got '%s'", o->name,
                             o->what, (unsigned long long)o->min, (unsigned long long)o->max,
                             kvpt_safe_text(arg));
            return -1;
        }
        *(uint64_t *)o->dest = v;
        return 0;
    }
    case KVPT_OPT_SECONDS: {
        char *end;
        double v = strtod(arg, &end);
        if (!*arg || strspn(arg, "0123456789.") != strlen(arg) || *end || !isfinite(v) ||
            v > (double)o->max) {
            kvpt_usage_error(cli->cmd, "--%s: expected seconds from 0 to %llu, got '%s'",
                             o->name, (unsigned long long)o->max, kvpt_safe_text(arg));
            return -1;
        }
        *(double *)o->dest = v;
        return 0;
    }
    case KVPT_OPT_CHOICE:
        if (!is_choice(o->what, arg)) {
            choice_error(cli, o, arg);
            return -1;
        }
        *(const char **)o->dest = arg;
        return 0;
    }
    return -1;
}

/* Check the number of positional arguments against the command's rule. */
static int check_args(const kvpt_cli *cli, int n, char **args)
{
    if (cli->max_args == 0 && n > 0)
        return kvpt_usage_error(cli->cmd, "unexpected argument '%s'",
                                kvpt_safe_text(args[0]));
    if (n >= cli->min_args && (cli->max_args < 0 || n <= cli->max_args))
        return 0;
    if (cli->min_args == cli->max_args && cli->min_args == 1)
        return kvpt_usage_error(cli->cmd, "expected exactly one %s, got %d", cli->arg_name, n);
    if (cli->max_args < 0 && cli->min_args == 1)
        return kvpt_usage_error(cli->cmd, "expected at least one %s", cli->arg_name);
    return kvpt_usage_error(cli->cmd, "expected %d to %d %s arguments, got %d", cli->min_args,
                            cli->max_args, cli->arg_name, n);
}

/* Refuse the unknown option `arg` of cli (n options), naming the closest
 * option when one is close (kvpt_closest). */
static int unknown_option(const kvpt_cli *cli, size_t n, const char *arg)
{
    const char *names[KVPT_OPTS_MAX];
    for (size_t i = 0; i < n; i++)
        names[i] = cli->opts[i].name;
    char word[64];
    size_t dashes = strspn(arg, "-");
    snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + dashes, "="), arg + dashes);
    const char *near = kvpt_closest(word, names, n);
    if (near)
        return kvpt_usage_error(cli->cmd, "unknown option '%s'; did you mean --%s?",
                                kvpt_safe_text(arg), near);
    return kvpt_usage_error(cli->cmd, "unknown option '%s'", kvpt_safe_text(arg));
}

/* See common.h.  The getopt_long table is built from cli->opts, with --help
 * added; `seen` records which entries were given, whatever their spelling. */
int kvpt_parse_args(const kvpt_cli *cli, int argc, char **argv, int *first)
{
    struct option longopts[KVPT_OPTS_MAX + 2];
    unsigned char seen[KVPT_OPTS_MAX] = {0};
    size_t n = 0;
    for (; cli->opts[n].name; n++) {
        if (n == KVPT_OPTS_MAX)
            return kvpt_error("more than %d options", KVPT_OPTS_MAX);
        int has_arg = cli->opts[n].kind == KVPT_OPT_FLAG ? no_argument : required_argument;
        longopts[n] = (struct option){cli->opts[n].name, has_arg, NULL, OPT_VAL_BASE + (int)n};
    }
    longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n + 1] = (struct option){NULL, 0, NULL, 0};

    opterr = 0; /* every message is ours */
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(cli->usage, stdout);
            return KVPT_EXIT_OK;
        }
        if (c == ':')
            return kvpt_usage_error(cli->cmd, "option '%s' needs a value", argv[optind - 1]);
        if (c < OPT_VAL_BASE || c >= OPT_VAL_BASE + (int)n)
            return unknown_option(cli, n, argv[optind - 1]);
        size_t i = (size_t)(c - OPT_VAL_BASE);
        if (seen[i])
            return kvpt_usage_error(cli->cmd, "--%s given twice; give each option once",
                                    cli->opts[i].name);
        seen[i] = 1;
        if (store_value(cli, &cli->opts[i], optarg))
            return KVPT_EXIT_USAGE;
    }
    if (check_args(cli, argc - optind, argv + optind))
        return KVPT_EXIT_USAGE;
    for (size_t i = 0; i < n; i++)
        if (cli->opts[i].required && !seen[i])
            return kvpt_usage_error(cli->cmd, "--%s is required (%s)", cli->opts[i].name,
                                    cli->opts[i].required);
    *first = optind;
    return -1;
}

/* ---- files -------------------------------------------------------------- */

/* mkstemp "DIR/.BASE.XXXXXX" into tmp[cap]: beside `path` for a file that
 * is renamed over it (one file system, so the rename is atomic), or under
 * $TMPDIR when `dir` is given.  Returns the descriptor, or -1 with errno
 * set (ENAMETOOLONG when the name does not fit). */
static int temp_file(const char *path, const char *dir, char *tmp, size_t cap)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int n = dir ? snprintf(tmp, cap, "%s/.%s.XXXXXX", dir, base)
                : snprintf(tmp, cap, "%.*s.%s.XXXXXX", slash ? (int)(slash - path + 1) : 0,
                           path, base);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkstemp(tmp);
}

/* The directory for the contents of a device or FIFO while they are
 * collected. */
static const char *spool_dir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

/* Whether `in` (a trace path, "-" for standard input) is the file `st`. */
static int same_file(const char *in, const struct stat *st)
{
    struct stat is;
    int ok = strcmp(in, "-") == 0 ? fstat(STDIN_FILENO, &is) : stat(in, &is);
    return ok == 0 && is.st_dev == st->st_dev && is.st_ino == st->st_ino;
}

/* See common.h.  Creating a file beside `path` is the one test that answers
 * for a missing directory, permissions, a read-only file system and quota
 * alike. */
int kvpt_output_check(kvpt_output *o, const char *what, const char *path,
                      char *const *inputs, size_t n_inputs)
{
    struct stat st;
    *o = (kvpt_output){.what = what, .path = path};
    if (!*path) {
        kvpt_error("%s: the file name is empty", what);
        return -1;
    }
    if (strlen(path) >= sizeof o->dest) {
        kvpt_error("%s: %s", what, strerror(ENAMETOOLONG));
        return -1;
    }
    strcpy(o->dest, path);
    struct stat link;
    int exists = stat(path, &st) == 0;
    if (lstat(path, &link) == 0 && S_ISLNK(link.st_mode)) {
        /* a regular file is replaced where the link points; a device or
         * FIFO (also /dev/stdout's links into /proc) is opened through it */
        char *real = exists && S_ISREG(st.st_mode) ? realpath(path, NULL) : NULL;
        if (!exists || (S_ISREG(st.st_mode) && (!real || strlen(real) >= sizeof o->dest))) {
            kvpt_error("%s %s: a symbolic link to a file that cannot be reached: %s", what,
                       kvpt_safe_text(path), strerror(!exists || !real ? errno : ENAMETOOLONG));
            free(real);
            return -1;
        }
        if (real)
            strcpy(o->dest, real);
        free(real);
    }
    const char *why = !exists ? NULL
                      : S_ISDIR(st.st_mode) ? "is a directory"
                      : S_ISBLK(st.st_mode) ? "is a block device"
                      : S_ISSOCK(st.st_mode) ? "is a socket"
                                             : NULL;
    for (size_t i = 0; exists && !why && i < n_inputs; i++)
        if (same_file(inputs[i], &st))
            why = "is also a trace read by this command; write to another file";
    if (why) {
        kvpt_error("%s %s: %s", what, kvpt_safe_text(path), why);
        return -1;
    }
    struct stat out;
    o->in_place = exists && fstat(STDOUT_FILENO, &out) == 0 && out.st_dev == st.st_dev &&
                          out.st_ino == st.st_ino
                      ? KVPT_OUT_STDOUT
                  : exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) ? KVPT_OUT_DEVICE
                                                                           : KVPT_OUT_REPLACE;
    if (o->in_place == KVPT_OUT_DEVICE) {
        if (access(o->dest, W_OK) != 0) {
            kvpt_error("%s %s: %s", what, kvpt_safe_text(path), strerror(errno));
            return -1;
        }
        return 0;
    }
    int fd = temp_file(o->dest, NULL, o->tmp, sizeof o->tmp);
    if (fd < 0) {
        int err = errno;
        const char *slash = strrchr(o->dest, '/');
        char dir[sizeof o->dest];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o->dest + 1) : 2,
                 slash ? o->dest : "./");
        kvpt_error("%s %s: cannot create a file in %s: %s", what, kvpt_safe_text(path),
                   kvpt_safe_text(dir), strerror(err));
        return -1;
    }
    close(fd);
    unlink(o->tmp);
    o->tmp[0] = 0;
    return 0;
}

/* See common.h. */
int kvpt_output_temp(kvpt_output *o)
{
    return temp_file(o->dest, o->in_place != KVPT_OUT_REPLACE ? spool_dir() : NULL, o->tmp, sizeof o->tmp);
}

/* Copy the file `from` into the device or FIFO `to`, opened for writing
 * only (never truncated, never created), or into standard output when `to`
 * is NULL.  Returns 0, or -1 with errno set. */
static int copy_into(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = in < 0 ? -1 : to ? open(to, O_WRONLY | O_CLOEXEC | O_NOCTTY) : STDOUT_FILENO;
    int err = 0;
    char buf[65536];
    while (out >= 0 && !err) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? errno : 0;
            break;
        }
        for (ssize_t done = 0; done < n && !err;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno != EINTR)
                err = errno;
            done += w > 0 ? w : 0;
        }
    }
    if (in < 0 || out < 0)
        err = errno;
    if (to && out >= 0 && close(out) != 0 && !err)
        err = errno;
    if (in >= 0)
        close(in);
    errno = err;
    return err ? -1 : 0;
}

/* See common.h.  SIGPIPE is ignored while a FIFO or a pipe is written, so
 * a reader that goes away is an error to report (EPIPE), not the end of
 * the tool. */
int kvpt_output_commit(kvpt_output *o)
{
    int rc;
    if (o->in_place != KVPT_OUT_REPLACE) {
        struct sigaction ign = {.sa_handler = SIG_IGN}, old;
        sigaction(SIGPIPE, &ign, &old);
        fflush(stdout); /* what the command printed comes first */
        rc = copy_into(o->tmp, o->in_place == KVPT_OUT_DEVICE ? o->dest : NULL);
        sigaction(SIGPIPE, &old, NULL);
    } else {
        mode_t mask = umask(0);
        umask(mask);
        rc = chmod(o->tmp, 0666 & ~mask) != 0 || rename(o->tmp, o->dest) != 0 ? -1 : 0;
    }
    int err = errno;
    unlink(o->tmp);
    o->tmp[0] = 0;
    errno = err;
    return rc;
}

/* See common.h. */
FILE *kvpt_output_open(kvpt_output *o)
{
    int fd = kvpt_output_temp(o);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        int err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        kvpt_error("%s: %s", kvpt_safe_text(o->path), strerror(err));
    }
    return f;
}

/* See common.h. */
int kvpt_output_close(kvpt_output *o, FILE *f)
{
    int failed = ferror(f);
    if (fclose(f) != 0 || failed) {
        int err = failed ? EIO : errno;
        unlink(o->tmp);
        return kvpt_error("%s: %s", kvpt_safe_text(o->path), strerror(err));
    }
    if (kvpt_output_commit(o) != 0)
        return kvpt_error("%s: %s", kvpt_safe_text(o->path), strerror(errno));
    return KVPT_EXIT_OK;
}

/* See common.h. */
int kvpt_check_traces(const char *cmd, char *const *paths, size_t n)
{
    int stdin_seen = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (strcmp(paths[i], "-") == 0) {
            if (stdin_seen++)
                return kvpt_usage_error(cmd, "'-' (standard input) can be read only once");
            continue;
        }
        if (stat(paths[i], &st) != 0 || access(paths[i], R_OK) != 0)
            return kvpt_error("%s: %s", kvpt_safe_text(paths[i]), strerror(errno));
        if (S_ISDIR(st.st_mode))
            return kvpt_error("%s: %s", kvpt_safe_text(paths[i]), strerror(EISDIR));
        /* a pipe or FIFO read once cannot be read again under another name */
        for (size_t j = 0; j < i && !S_ISREG(st.st_mode); j++)
            if (same_file(paths[j], &st))
                return kvpt_usage_error(cmd, "'%s' and '%s' are the same %s, which can be read "
                                        "only once", kvpt_safe_text(paths[j]),
                                        kvpt_safe_text(paths[i]),
                                        strcmp(paths[j], "-") == 0 ? "input (standard input)"
                                                                   : "pipe or device");
    }
    return -1;
}
