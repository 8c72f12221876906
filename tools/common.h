/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.h — what every part of the kvpool command-line tool shares: exit
 * codes, error reporting, the command-line parser every subcommand uses, the
 * monotonic clock, number parsing and safe file replacement.
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

/* The program's name in messages: "kvpool" unless a program sets it (the
 * engine example: "kvpool-engine"). */
extern const char *kvpt_program;

/* Report a command-line error for `cmd` ("replay"; NULL: the program has no
 * subcommands) on stderr as "PROGRAM CMD: message", followed by a hint to
 * run --help; returns KVPT_EXIT_USAGE so callers can
 * `return kvpt_usage_error(..)`. */
int kvpt_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Report an error on stderr as "PROGRAM: message"; returns KVPT_EXIT_ERROR. */
int kvpt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Report a failed library call as "PROGRAM: what: message"; returns -1 so
 * internal routines can `return kvpt_lib_error(..)`. */
int kvpt_lib_error(const char *what, int status);

/* Seconds on the monotonic clock (an arbitrary origin). */
double kvpt_now(void);

/* Parse a whole decimal string as an unsigned integer no larger than `max`.
 * Returns 0 on success, -1 on anything else (empty, sign, junk, overflow). */
int kvpt_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* The longest text kvpt_safe_copy writes, with its NUL: four bytes out for
 * each of 4095 bytes in ("\\xNN"), then "..." when cut. */
#define KVPT_SAFE_MAX (4 * 4095 + 4)

/* Copy `s` into out[cap] (cap >= 5) for a terminal: every control
 * character (C0, DEL, C1) and every byte of invalid UTF-8 as \xNN, a
 * backslash doubled, the rest as it is; cut at a character boundary with
 * "..." when it does not fit.  Returns out. */
char *kvpt_safe_copy(char *out, size_t cap, const char *s);

/* kvpt_safe_copy into one of eight static buffers of KVPT_SAFE_MAX bytes,
 * used in turn: for a file name in a message or a table, valid until eight
 * more calls.  Main thread only. */
const char *kvpt_safe_text(const char *s);

/* ---- command lines ------------------------------------------------------ */

/* The word of words[0..n) closest to `word` by edit distance (insertions,
 * deletions, substitutions of bytes), when it is close enough to be a
 * misspelling (at most a third of the longer word, at least 1) or `word`
 * is a prefix of it; else NULL.  Ties go to the earlier word.  For "did
 * you mean" hints.  O(n x length^2). */
const char *kvpt_closest(const char *word, const char *const *words, size_t n);


/* How an option's value is read into kvpt_opt.dest. */
typedef enum kvpt_opt_kind {
    KVPT_OPT_FLAG,    /* no value; int *dest becomes 1 */
    KVPT_OPT_TEXT,    /* any text; const char **dest points into argv */
    KVPT_OPT_COUNT,   /* plain decimal digits in [min, max]; uint64_t *dest */
    KVPT_OPT_SECONDS, /* a decimal number of seconds in [0, max]; double *dest */
    KVPT_OPT_CHOICE   /* one of the words of `what` ("a|b|c"); const char **dest */
} kvpt_opt_kind;

/* One option of a subcommand: --name, what it holds, where it goes. */
typedef struct kvpt_opt {
    const char *name;       /* long name without "--"; NULL ends a table */
    kvpt_opt_kind kind;
    void *dest;             /* written only when the option is given */
    uint64_t min, max;      /* COUNT: the allowed range; SECONDS: max only */
    const char *what;       /* COUNT: the noun for messages ("a block count");
                               CHOICE: the allowed words, '|'-separated */
    const char *required;   /* non-NULL: the option must be given, and this
                               hint follows "--name is required" */
} kvpt_opt;

/* A subcommand's command line: its options and its positional arguments. */
typedef struct kvpt_cli {
    const char *cmd;        /* "replay": names the command in messages (NULL:
                               the program has no subcommands) */
    const char *usage;      /* the whole --help text */
    const kvpt_opt *opts;   /* ended by an entry whose name is NULL */
    const char *arg_name;   /* positional arguments, e.g. "TRACE" */
    int min_args, max_args; /* how many (max_args < 0: no limit) */
} kvpt_cli;

/* The longest wait any option accepts, in seconds (over eleven days). */
#define KVPT_SECONDS_MAX 1000000

/* The most options one command may have. */
#define KVPT_OPTS_MAX 24

/*
 * Parse a subcommand's argv (argv[0] is the command's name) against `cli`
 * with getopt_long (options and arguments in any order, unique prefixes of
 * option names accepted, "--" ends the options).  --help / -h prints
 * cli->usage on stdout.  Refused, each with one line naming the option and
 * what it allows, then a --help hint on stderr: an unknown option (with the
 * closest option's name when one is close, kvpt_closest), a missing
 * value, a value out of its range or not among its choices, an option given
 * twice (by any spelling), a required option missing, too few or too many
 * positional arguments.
 *
 * Returns -1 when the command should run, the positional arguments being
 * argv[*first..argc); otherwise the exit code to return: KVPT_EXIT_OK after
 * --help, KVPT_EXIT_USAGE after a refusal.  Destinations are written as
 * options are read, so a refused command line may have set some; callers
 * return at once.  O(argc x options).  Uses getopt's globals: one parse at
 * a time.
 */
int kvpt_parse_args(const kvpt_cli *cli, int argc, char **argv, int *first);

/* ---- files -------------------------------------------------------------- */

/* A file the tool writes (--csv, --plot), checked before any work and
 * written only when complete.  A regular file (or a new one) is written as
 * a temporary file beside it, renamed over it in one step, so it is never
 * seen empty or partial; a character device or a FIFO (/dev/null,
 * /dev/stdout, a named pipe) is written in place, its contents first
 * collected in a temporary file under $TMPDIR (default /tmp), and so is
 * the file standard output goes to (/dev/stdout), after what the command
 * prints there.  A symbolic link is followed: the file it names is
 * written, the link stays; a link to nothing is refused. */
enum { KVPT_OUT_REPLACE, KVPT_OUT_DEVICE, KVPT_OUT_STDOUT };

typedef struct kvpt_output {
    const char *what;  /* the option, "--csv": names it in messages */
    const char *path;  /* as given */
    char dest[4096];   /* the file written: path, or what its link names */
    int in_place;      /* KVPT_OUT_REPLACE, _DEVICE (device or FIFO) or _STDOUT */
    char tmp[4096];    /* the temporary file, once made */
} kvpt_output;

/* Check before any work that `path` can be written as option `what`:
 * the name is not empty; a link resolves; what it names is not a
 * directory, a block device or a socket; it is not one of the n `inputs`
 * (the same file by device and inode; "-" is standard input); a file can
 * be created beside a regular one, a device or FIFO is writable.  Fills
 * *o.  Returns 0, or prints "kvpool: what PATH: reason" and returns -1.
 * Leaves nothing behind. */
int kvpt_output_check(kvpt_output *o, const char *what, const char *path,
                      char *const *inputs, size_t n_inputs);

/* Create o's temporary file (mode 0600; its name in o->tmp).  Returns its
 * open descriptor, or -1 with errno set. */
int kvpt_output_temp(kvpt_output *o);

/* Move o's temporary file, written and closed, to o->dest: renamed over a
 * regular file with the mode a new file would have (0666 less the umask),
 * or copied into a device, a FIFO (opening it waits for its reader) or
 * standard output (flushed first).
 * Removes the temporary file in every case.  Returns 0, or -1 with errno
 * set. */
int kvpt_output_commit(kvpt_output *o);

/* Open o's temporary file as a stream.  Returns it, or NULL with
 * "kvpool: PATH: reason" printed and nothing left behind. */
FILE *kvpt_output_open(kvpt_output *o);

/* Close `f` (from kvpt_output_open) and, when every write and the close
 * succeeded, commit it.  Returns KVPT_EXIT_OK, or KVPT_EXIT_ERROR with
 * "kvpool: PATH: reason" printed and the temporary file removed. */
int kvpt_output_close(kvpt_output *o, FILE *f);

/* Check before any work that each of the n trace paths can be read: it
 * exists, is readable and is not a directory; "-" (standard input) at most
 * once, and no pipe, FIFO or device twice under two names ("-" and
 * /dev/stdin).  Returns -1 when all can, else the exit code to return with the
 * refusal printed (KVPT_EXIT_USAGE for "-" twice, KVPT_EXIT_ERROR
 * otherwise). */
int kvpt_check_traces(const char *cmd, char *const *paths, size_t n);

#endif /* KVPT_COMMON_H */
