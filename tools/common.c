/*
 * common.c — error reporting, the monotonic clock and number parsing for the
 * command-line tool (see common.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <errno.h>
#include <kvpool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

/* Print "kvpool <cmd>: message" and the --help hint; usage errors are the
 * caller's fault, so they say how to find the right spelling. */
int kvpt_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kvpool %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'kvpool %s --help'.\n", cmd);
    return KVPT_EXIT_USAGE;
}

/* Print "kvpool: message" on stderr. */
int kvpt_error(const char *fmt, ...)
{
    va_list ap;
    fputs("kvpool: ", stderr);
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
