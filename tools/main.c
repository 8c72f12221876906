/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — the `kvpool` command: the table of subcommands, the tool's own
 * usage text, dispatch, exit codes.
 *
 * Each subcommand lives in its own file with its own --help text and option
 * table (read by kvpt_parse_args in common.c); this file only routes argv,
 * so adding a command is one line of `commands` below.
 */
#include "bench.h"
#include "common.h"
#include "curve.h"
#include "events.h"
#include "replay.h"
#include "sweep.h"

#include <kvpool.h>
#include <string.h>

/* One subcommand: its name, its synopsis and summary for `kvpool --help`,
 * and its entry point (argv[0] is the command's name). */
typedef struct command {
    const char *name;
    const char *synopsis;
    const char *summary;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"replay", "TRACE --capacity BLOCKS [--policy lru|slru|lfu] [--priority-prefix N] [--json]",
     "replay a Mooncake trace through a prefix-caching pool", kvpt_cmd_replay},
    {"sweep", "TRACE [TRACE...] --capacities A,B,C [--policy P,Q] [--csv FILE] [--plot FILE]",
     "replay at several capacities and policies: hit-rate table, CSV, plot", kvpt_cmd_sweep},
    {"curve", "TRACE [TRACE...] [--csv FILE] [--plot FILE] [--target S] [--optimal]",
     "the LRU hit rate at every capacity in one pass, and the optimal bound", kvpt_cmd_curve},
    {"bench", "[--workload churn|prefix|scale|load|all] [--quick] [--json]",
     "the built-in workloads and their floors", kvpt_cmd_bench},
    {"events", "ENDPOINT [--bind] [--topic T] [--json]",
     "subscribe to KV-cache events (vLLM wire format) and print them", kvpt_cmd_events},
    {"events-demo", "ENDPOINT [--connect] [--replay EP] [--topic T]",
     "publish a scripted scenario's KV-cache events (for tests)", kvpt_cmd_events_demo},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* Print the tool's usage: every command's synopsis and summary. */
static void usage(FILE *out)
{
    fputs("usage: kvpool COMMAND [ARGS]\n"
          "\n"
          "Replay request traces through libkvpool and benchmark it.\n"
          "\n"
          "commands:\n", out);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %s %s\n        %s\n", commands[i].name, commands[i].synopsis,
                commands[i].summary);
    fputs("\n"
          "`kvpool COMMAND --help` describes each command; `kvpool --version` prints\n"
          "the library version.  An option may be given once.\n"
          "\n"
          "exit status: 0 success, 1 bad input or failure, 2 bad command line.\n", out);
}

/* The command named `name`, or NULL. */
static const command *find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* Route argv[1] to its command; the command sees argv[1..] as its argv.
 * `kvpool help CMD` is `kvpool CMD --help`. */
int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return KVPT_EXIT_USAGE;
    }
    const char *name = argv[1];
    const command *cmd = find(name);
    if (cmd)
        return cmd->run(argc - 1, argv + 1);
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        if (argc > 2 && (cmd = find(argv[2]))) {
            char *help_argv[] = {argv[2], "--help", NULL};
            return cmd->run(2, help_argv);
        }
        usage(stdout);
        return KVPT_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("kvpool %d.%d.%d\n", KVPOOL_VERSION_MAJOR, KVPOOL_VERSION_MINOR,
               KVPOOL_VERSION_PATCH);
        return KVPT_EXIT_OK;
    }
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    const char *near = kvpt_closest(name, names, N_COMMANDS);
    if (near)
        fprintf(stderr, "kvpool: unknown command '%s'; did you mean '%s'?\n"
                        "Try 'kvpool %s --help', or 'kvpool --help' for every command.\n",
                kvpt_safe_text(name), near, near);
    else
        fprintf(stderr, "kvpool: unknown command '%s'; the commands are:", kvpt_safe_text(name));
    for (size_t i = 0; !near && i < N_COMMANDS; i++)
        fprintf(stderr, " %s%s", names[i], i + 1 < N_COMMANDS ? "," : "\n");
    if (!near)
        fputs("Try 'kvpool --help'.\n", stderr);
    return KVPT_EXIT_USAGE;
}
