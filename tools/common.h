/*
 * common.h — what every part of the kvpool command-line tool shares: exit
 * codes, error reporting, the monotonic clock and number parsing.
 *
 * The tool is small enough that one header of helpers beats a web of
 * cross-includes; everything here is tool-side only and uses nothing of the
 * library beyond its public header.
 */
#ifndef KVPT_COMMON_H
#define KVPT_COMMON_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes of the tool (documented in `kvpool --help`). */
enum {
    KVPT_EXIT_OK = 0,      /* success */
    KVPT_EXIT_ERROR = 1,   /* bad input file, I/O or library failure */
    KVPT_EXIT_USAGE = 2    /* bad command line */
};

/* The subcommands; each returns one of the exit codes above. */
int kvpt_cmd_replay(int argc, char **argv);
int kvpt_cmd_sweep(int argc, char **argv);
int kvpt_cmd_bench(int argc, char **argv);

/* Print the usage of `cmd` (NULL: the whole tool) to `out`. */
void kvpt_usage(FILE *out, const char *cmd);

/* Report a command-line error for `cmd` on stderr, followed by a hint to run
 * --help; returns KVPT_EXIT_USAGE so callers can `return kvpt_usage_error(..)`. */
int kvpt_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Report an error on stderr as "kvpool: message"; returns KVPT_EXIT_ERROR. */
int kvpt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Report a failed library call as "kvpool: what: message"; returns -1 so
 * internal routines can `return kvpt_lib_error(..)`. */
int kvpt_lib_error(const char *what, int status);

/* Seconds on the monotonic clock (an arbitrary origin). */
double kvpt_now(void);

/* Parse a whole decimal string as an unsigned integer no larger than `max`.
 * Returns 0 on success, -1 on anything else (empty, sign, junk, overflow). */
int kvpt_parse_u64(const char *s, uint64_t max, uint64_t *out);

#endif /* KVPT_COMMON_H */
