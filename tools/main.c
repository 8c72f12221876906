/*
 * main.c — the `kvpool` command: subcommand dispatch, usage text, exit codes.
 *
 * Each subcommand lives in its own file and parses its own options; this file
 * only routes argv and owns every help text, so that the contract (names,
 * flags, outputs) reads in one place.
 */
#include "common.h"
#include "curve.h"
#include "events.h"

#include <kvpool.h>
#include <string.h>

static const char usage_main[] =
    "usage: kvpool COMMAND [ARGS]\n"
    "\n"
    "Replay request traces through libkvpool and benchmark it.\n"
    "\n"
    "commands:\n"
    "  replay TRACE --capacity BLOCKS [--json]\n"
    "        replay a Mooncake trace through a prefix-caching pool\n"
    "  sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot FILE]\n"
    "        replay at several capacities: hit-rate table, CSV, plot\n"
    "  curve TRACE [TRACE...] [--csv FILE] [--plot FILE] [--target S] [--optimal]\n"
    "        the LRU hit rate at every capacity in one pass, and the optimal bound\n"
    "  bench [--workload churn|prefix|scale|load|all] [--quick] [--json]\n"
    "        the built-in workloads and their floors\n"
    "  events ENDPOINT [--topic T] [--json]\n"
    "        subscribe to KV-cache events (vLLM wire format) and print them\n"
    "  events-demo ENDPOINT [--replay EP] [--topic T]\n"
    "        publish a scripted scenario's KV-cache events (for tests)\n"
    "\n"
    "`kvpool COMMAND --help` describes each command; `kvpool --version` prints\n"
    "the library version.\n"
    "\n"
    "exit status: 0 success, 1 bad input or failure, 2 bad command line.\n";

static const char usage_replay[] =
    "usage: kvpool replay TRACE --capacity BLOCKS [--json]\n"
    "                     [--events ENDPOINT [--topic T] [--events-wait S]]\n"
    "\n"
    "Replay TRACE (Mooncake JSON Lines, plain or gzip: {\"timestamp\", \"input_length\",\n"
    "\"output_length\", \"hash_ids\"}) through a pool of BLOCKS blocks of 512 tokens with\n"
    "prefix caching.  Per request, in file order: claim the longest cached prefix of\n"
    "its hash_ids, allocate the rest (evicting least-recently-freed cached blocks),\n"
    "publish them, then free all of them tail first so they stay cached.  A request\n"
    "with more hash ids than BLOCKS is rejected (counted, no hits).  The pool is\n"
    "created with prefault, as a server would at start-up, so its page faults fall\n"
    "before the timed loop.\n"
    "\n"
    "TRACE '-' is standard input; pipes and FIFOs work (the input is read once).\n"
    "Each line is at most 1 MiB, its fields non-negative integers (no key twice),\n"
    "and hash_ids has exactly ceil(input_length / 512) ids.  An input with no\n"
    "request, data after the gzip stream (consecutive gzip members are one\n"
    "stream) or a line breaking a rule is refused as \"FILE:LINE: what is wrong\".\n"
    "\n"
    "  --capacity BLOCKS  pool size in blocks; 0 = large enough for the whole trace\n"
    "  --json             one JSON object: requests, rejected, blocks_requested,\n"
    "                     blocks_hit, hit_rate, tokens_requested, tokens_hit,\n"
    "                     tokens_hit_rate, evictions, peak_in_use, seconds (replay\n"
    "                     loop), load_seconds (read + parse), blocks_per_second\n"
    "  --events ENDPOINT  publish the replay's KV-cache events live (ZeroMQ, vLLM\n"
    "                     wire format, one batch per request; docs/EVENTS.md): an\n"
    "                     ENDPOINT with '*' is bound, any other is connected to\n"
    "  --topic T          topic of every message (default empty; llm-d:\n"
    "                     kv@<pod address>@<model name>)\n"
    "  --events-wait S    first wait up to S seconds for a subscriber (default 2)\n"
    "\n"
    "A progress bar is drawn on stderr when stderr is a terminal.\n";

static const char usage_sweep[] =
    "usage: kvpool sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot FILE]\n"
    "\n"
    "Replay each TRACE (as `kvpool replay` does) at each capacity and print a table.\n"
    "\n"
    "  --capacities A,B,C  block counts, comma-separated (0 = the whole trace)\n"
    "  --csv FILE          write trace,capacity,requests,blocks_requested,blocks_hit,\n"
    "                      hit_rate,tokens_hit_rate,evictions (trace = the path as\n"
    "                      given on the command line)\n"
    "  --plot FILE         draw hit rate against capacity (log scale), one line per\n"
    "                      trace (titled by its file name), with gnuplot; PNG or SVG\n"
    "                      by the extension.  Without gnuplot a hint to install it\n"
    "                      (apt-get install gnuplot-nox) is printed, and the rest of\n"
    "                      the command still succeeds.  Capacity 0 is not plotted.\n";

static const char usage_curve[] =
    "usage: kvpool curve TRACE [TRACE...] [--csv FILE] [--json] [--plot FILE]\n"
    "                    [--mark A,B,C] [--target S | --target-rate R] [--optimal]\n"
    "                    [--all-capacities] [--sample RATE [--sample-check]]\n"
    "\n"
    "The hit rate `kvpool replay --capacity C` would report, at every capacity C from\n"
    "the largest request to the trace's distinct block count, in one pass: the LRU\n"
    "cache of C blocks holds the C most recently freed distinct blocks, so a block\n"
    "hits at C exactly when its reuse distance (distinct blocks freed since its last\n"
    "use), and every one of its prefix's, is below C.  Exact when every hash id has\n"
    "one parent (a prefix tree, as in the Mooncake traces; checked, and said when\n"
    "not).  Below the largest request a replay rejects the longer requests, so\n"
    "those capacities need one pass per request length (--all-capacities).  Prints\n"
    "a summary and a table at 1-2-5 steps, the ends and the marks.\n"
    "\n"
    "  --csv FILE        every capacity: capacity,blocks_hit,hit_rate,tokens_hit,\n"
    "                    tokens_hit_rate (a first column trace with several TRACEs)\n"
    "  --json            one object per trace: trace, requests, blocks_requested,\n"
    "                    tokens_requested, distinct_blocks, largest_request,\n"
    "                    prefix_tree, exact, sample_rate, from_capacity,\n"
    "                    to_capacity, unlimited {blocks_hit, hit_rate, tokens_hit,\n"
    "                    tokens_hit_rate}, seconds (the passes), load_seconds, points\n"
    "                    (the table's rows: capacity, blocks_hit, hit_rate,\n"
    "                    tokens_hit, tokens_hit_rate, optimal {same four}), and\n"
    "                    optimal_seconds, sample_error, target when asked\n"
    "  --plot FILE       hit rate against capacity (log scale) with the unlimited\n"
    "                    ceiling, the marks and the optimal points; PNG or SVG\n"
    "  --mark A,B,C      capacities to show in the table and on the plot (exact at\n"
    "                    any capacity, by their own pass below the largest request)\n"
    "  --target S        the smallest capacity reaching share S of the unlimited hit\n"
    "                    rate (e.g. 0.9)\n"
    "  --target-rate R   the smallest capacity reaching block hit rate R\n"
    "  --optimal         also the clairvoyant policy (evict the block used again\n"
    "                    farthest in the future, never a prefix before its blocks)\n"
    "                    simulated at each table capacity from the largest request:\n"
    "                    on a prefix tree no eviction policy hits more blocks\n"
    "  --all-capacities  the CSV and the target search start at capacity 1\n"
    "  --sample RATE     track only the blocks whose hash falls in a RATE share\n"
    "                    (SHARDS): memory and time shrink by about RATE, figures are\n"
    "                    estimates\n"
    "  --sample-check    with --sample, also run the exact pass and report the\n"
    "                    largest and mean absolute error of the block hit rate\n";

static const char usage_bench[] =
    "usage: kvpool bench [--workload churn|prefix|scale|load|all] [--quick] [--json]\n"
    "                    [--trace FILE]\n"
    "\n"
    "Run the workloads of BENCH.md (block size 16, splitmix64 seeded with 42,\n"
    "operations generated before timing) and, right after each, its floor: the same\n"
    "operations on the simplest structure that could do the job.  Figures are the\n"
    "median of 5 timed repetitions after one warm-up, library and floor timed back\n"
    "to back in each.\n"
    "\n"
    "  churn   65,536 blocks, 256 live sequences of [128, 2048] tokens, one block\n"
    "          at a time to a random sequence, 1,000,000 allocations; the takes\n"
    "          between two completions in one kvp_take_each (as a decode step's,\n"
    "          each sequence's hint kept beside its owner id), kvp_free_owner at\n"
    "          the end of a sequence; then the same one kvp_take_hinted per block,\n"
    "          and one plain kvp_take per block (owner looked up every call)\n"
    "  prefix  16,384 blocks, 64 system prompts of 1,024 tokens (Zipf 1.1) plus a\n"
    "          unique suffix of [256, 1024] tokens, 20,000 requests, with SHA-256\n"
    "          and with XXH3-128; each through the call-level path (hash_tokens,\n"
    "          lookup, claim, alloc, publish, free: api \"calls\") and through the\n"
    "          sequence API (seq_create, seq_admit, seq_destroy: api \"seq\")\n"
    "  scale   churn at 1,024 blocks (8 sequences, [16, 256] tokens), 65,536 and\n"
    "          1,048,576 blocks (4,096 sequences): ns per block, pool creation\n"
    "          time, resident bytes per block\n"
    "  load    (only when asked) loading --trace FILE (default the bundled\n"
    "          data/mooncake_fast25_conversation_trace.jsonl.gz) against its floor,\n"
    "          reading and inflating it without parsing; beside them `zcat`,\n"
    "          Python's gzip + json.loads per line (timed in the interpreter) and\n"
    "          one replay at 10,000 blocks\n"
    "\n"
    "  --workload W  churn, prefix, scale, load or all (default all: not load)\n"
    "  --trace FILE  the trace of the load workload\n"
    "  --quick       1/50 of the operations (same pool sizes), for tests\n"
    "  --json        one JSON object per workload and configuration per line:\n"
    "                workload, ns_per_block, floor_ns_per_block, ratio_to_floor;\n"
    "                prefix adds hash, api, us_per_request, hit_rate,\n"
    "                floor_hit_rate; scale adds blocks, create_ms,\n"
    "                bytes_per_block (resident growth after the workload),\n"
    "                bytes_per_block_all_in (resident growth once every block\n"
    "                was used and published), bytes_per_block_allocated (bytes\n"
    "                held through the library's memory hook); churn adds\n"
    "                single_ns_per_block and single_ratio_to_floor\n"
    "                (kvp_take_hinted), lookup_ns_per_block and\n"
    "                lookup_ratio_to_floor (plain kvp_take), call and\n"
    "                peak_rss_kb; load adds bytes, requests, hash_ids, load_ms,\n"
    "                floor_ms, zcat_ms, python_ms, python_ratio (python_ms over\n"
    "                load_ms) and replay_10000_ms\n";

/* ---- KV-cache events (tools/events.c; docs/EVENTS.md) ---- */
static const char usage_events[] =
    "usage: kvpool events ENDPOINT [--topic T] [--json] [--count N] [--timeout S]\n"
    "\n"
    "Subscribe to a KV-cache events publisher (kvpool or vLLM: ZeroMQ PUB, frames\n"
    "topic / sequence / msgpack batch) and print every batch as it arrives.  An\n"
    "ENDPOINT containing '*' is bound (the publisher then connects), any other is\n"
    "connected to; vLLM and llm-d engines bind tcp://*:5557.\n"
    "\n"
    "  --topic T     subscribe to topics starting with T (default: all); llm-d\n"
    "                names them kv@<pod address>@<model name>\n"
    "  --json        one JSON object per batch: topic, seq, ts, dp_rank, events\n"
    "                (each with \"type\" and its named fields)\n"
    "  --count N     stop after N batches\n"
    "  --timeout S   stop after S seconds without a message\n";

static const char usage_events_demo[] =
    "usage: kvpool events-demo ENDPOINT [--replay EP] [--topic T] [--events-wait S]\n"
    "                          [--event-capacity N] [--drain-every N] [--hold S]\n"
    "\n"
    "Run a scripted scenario through sequences on a pool with events on (admit, hit,\n"
    "append, evict, reuse, reset, LoRA + multimodal) and publish its events on\n"
    "ENDPOINT (bound if it contains '*', else connected to).  Prints one JSON line\n"
    "with the endpoints, and at the end one with kvpool's own view: batches,\n"
    "events_sent, events_dropped, indexed (external hashes), view (the events of\n"
    "each batch).\n"
    "\n"
    "  --replay EP          bind a replay ROUTER socket at EP\n"
    "  --topic T            topic (default kv@127.0.0.1@kvpool-demo)\n"
    "  --events-wait S      wait up to S seconds for a subscriber first (default 2)\n"
    "  --event-capacity N   the pool's event queue, in hashes (default 4096)\n"
    "  --drain-every N      publish after every N scenario steps (default 1)\n"
    "  --hold S             afterwards keep answering replay requests for up to S\n"
    "                       seconds, or until standard input closes\n";

/* Print the usage of one command, or of the tool. */
void kvpt_usage(FILE *out, const char *cmd)
{
    const char *text = usage_main;
    if (cmd && strcmp(cmd, "replay") == 0)
        text = usage_replay;
    else if (cmd && strcmp(cmd, "sweep") == 0)
        text = usage_sweep;
    else if (cmd && strcmp(cmd, "curve") == 0)
        text = usage_curve;
    else if (cmd && strcmp(cmd, "bench") == 0)
        text = usage_bench;
    else if (cmd && strcmp(cmd, "events") == 0)
        text = usage_events;
    else if (cmd && strcmp(cmd, "events-demo") == 0)
        text = usage_events_demo;
    fputs(text, out);
}

/* Route argv[1] to its command; the command sees argv[1..] as its argv. */
int main(int argc, char **argv)
{
    if (argc < 2) {
        kvpt_usage(stderr, NULL);
        return KVPT_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "replay") == 0)
        return kvpt_cmd_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "sweep") == 0)
        return kvpt_cmd_sweep(argc - 1, argv + 1);
    if (strcmp(cmd, "curve") == 0)
        return kvpt_cmd_curve(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return kvpt_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "events") == 0)
        return kvpt_cmd_events(argc - 1, argv + 1);
    if (strcmp(cmd, "events-demo") == 0)
        return kvpt_cmd_events_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        kvpt_usage(stdout, argc > 2 ? argv[2] : NULL);
        return KVPT_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("kvpool %d.%d.%d\n", KVPOOL_VERSION_MAJOR, KVPOOL_VERSION_MINOR,
               KVPOOL_VERSION_PATCH);
        return KVPT_EXIT_OK;
    }
    fprintf(stderr, "kvpool: unknown command '%s'\n\n", cmd);
    kvpt_usage(stderr, NULL);
    return KVPT_EXIT_USAGE;
}
