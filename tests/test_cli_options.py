# SPDX-License-Identifier: Apache-2.0
"""test_cli_options.py — the command line of every `kvpool` subcommand.

One parser reads the options of all subcommands; these tests hold each of
them to its rules: an option given twice is refused (exit 2, naming the
option) instead of the last one silently winning, and a value out of range
is refused with a message that states the range.  Every refusal prints
nothing on stdout, so nothing ran.
"""
import json
import subprocess

import pytest

from test_cli import BUNDLED, KVPOOL, TAIL_FIRST, binaries, run, write_trace

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")


def have_interop():
    return run("events-demo", "--help").returncode == 0


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.jsonl", TAIL_FIRST)


# Each command line is valid but for one option given twice (by its name, or
# once abbreviated), so the old last-one-wins parser ran it.
TWICE = [
    (["replay", "{t}", "--capacity", "4", "--capacity", "8"], "--capacity"),
    (["replay", "{t}", "--cap", "4", "--capacity", "4"], "--capacity"),
    (["replay", "{t}", "--capacity", "4", "--json", "--json"], "--json"),
    (["replay", "{t}", "--capacity", "4", "--events-wait", "0", "--events-wait", "1"],
     "--events-wait"),
    (["sweep", "{t}", "--capacities", "1,2", "--capacities", "4"], "--capacities"),
    (["sweep", "{t}", "--capacities", "1", "--csv", "{d}/a.csv", "--csv", "{d}/b.csv"],
     "--csv"),
    (["sweep", "{t}", "--capacities", "1", "--plot", "{d}/a.png", "--plot", "{d}/b.png"],
     "--plot"),
    (["bench", "--workload", "churn", "--workload", "prefix", "--quick"], "--workload"),
    (["bench", "--quick", "--quick", "--workload", "nope"], "--quick"),
    (["bench", "--json", "--json", "--workload", "nope"], "--json"),
    (["bench", "--workload", "load", "--trace", "{t}", "--trace", "{t}"], "--trace"),
    (["curve", "{t}", "--mark", "1", "--mark", "2"], "--mark"),
    (["curve", "{t}", "--target", "0.5", "--target", "0.9"], "--target"),
    (["curve", "{t}", "--optimal", "--optimal"], "--optimal"),
    (["curve", "{t}", "--csv", "{d}/a.csv", "--csv", "{d}/b.csv"], "--csv"),
]
TWICE_EVENTS = [
    (["events", "tcp://127.0.0.1:1", "--count", "1", "--count", "2", "--timeout", "0.1"],
     "--count"),
    (["events", "tcp://127.0.0.1:1", "--timeout", "0.1", "--timeout", "0.2"], "--timeout"),
    (["events", "tcp://127.0.0.1:1", "--topic", "a", "--topic", "b", "--timeout", "0.1"],
     "--topic"),
    (["events-demo", "tcp://127.0.0.1:*", "--hold", "0", "--hold", "0", "--events-wait", "0"],
     "--hold"),
    (["events-demo", "tcp://127.0.0.1:*", "--connect", "--connect", "--events-wait", "0"],
     "--connect"),
    (["events-demo", "tcp://127.0.0.1:*", "--drain-every", "1", "--drain-every", "2",
      "--events-wait", "0"], "--drain-every"),
]


def expand(args, trace):
    return [a.format(t=trace, d=trace.parent) for a in args]


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("args, option", TWICE + TWICE_EVENTS,
                         ids=lambda v: v if isinstance(v, str) else v[0])
def test_option_given_twice_is_refused(binary, trace, args, option):
    if args[0].startswith("events") and not have_interop():
        pytest.skip("kvpool built without the interop part")
    p = run(*expand(args, trace), binary=binary, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert f"{option} given twice" in p.stderr, p.stderr
    assert p.stdout == ""
    assert not (trace.parent / "a.csv").exists() and not (trace.parent / "a.png").exists()


RANGES = [
    (["replay", "{t}", "--capacity", "2147483648"],
     "--capacity: expected a block count from 0 to 2147483647, got '2147483648'"),
    (["replay", "{t}", "--capacity", "-1"], "from 0 to 2147483647, got '-1'"),
    (["replay", "{t}", "--capacity", "4", "--events-wait", ""],
     "--events-wait: expected seconds from 0 to 1000000, got ''"),
    (["replay", "{t}", "--capacity", "4", "--events-wait", "0x10"],
     "--events-wait: expected seconds from 0 to 1000000"),
    (["sweep", "{t}", "--capacities", "1,2147483648"],
     "--capacities: expected block counts from 0 to 2147483647 separated by commas"),
    (["sweep", "{t}", "--capacities", "4,1,4"], "--capacities: 4 given twice"),
    (["bench", "--workload", "nope"], "--workload: expected churn, prefix, scale, load or "
                                      "all, got 'nope'"),
    (["curve", "{t}", "--target", "1.5"], "--target: expected a share of the unlimited hit "
                                          "rate in (0, 1], got '1.5'"),
    (["curve", "{t}", "--sample", "0"], "--sample: expected a rate in [2^-24, 1], got '0'"),
]
RANGES_EVENTS = [
    (["events", "tcp://127.0.0.1:1", "--max-bytes", "8"],
     "--max-bytes: expected a size in bytes from 16 to 9223372036854775807, got '8'"),
    (["events", "tcp://127.0.0.1:1", "--timeout", "1e9"],
     "--timeout: expected seconds from 0 to 1000000, got '1e9'"),
    (["events", "tcp://127.0.0.1:1", "--count", "x"], "--count: expected a number of batches"),
    (["events-demo", "tcp://127.0.0.1:*", "--drain-every", "0"],
     "--drain-every: expected a number of steps from 1 to 1000, got '0'"),
    (["events-demo", "tcp://127.0.0.1:*", "--event-capacity", "4294967296"],
     "--event-capacity: expected a number of hashes from 1 to 4294967295"),
    (["events-demo", "tcp://127.0.0.1:*", "--hold", "nan"],
     "--hold: expected seconds from 0 to 1000000, got 'nan'"),
]


@pytest.mark.parametrize("args, message", RANGES + RANGES_EVENTS,
                         ids=lambda v: v if isinstance(v, str) else v[0])
def test_out_of_range_states_the_range(trace, args, message):
    if args[0].startswith("events") and not have_interop():
        pytest.skip("kvpool built without the interop part")
    p = run(*expand(args, trace), timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert message in p.stderr, p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["replay", "{t}", "--capacity"], "option '--capacity' needs a value"),
    (["replay", "{t}", "--capacity", "4", "--nope"], "unknown option '--nope'"),
    (["replay", "{t}"], "--capacity is required (0: the whole trace)"),
    (["sweep", "{t}"], "--capacities is required"),
    (["sweep", "-", "-", "--capacities", "4"], "'-' (standard input) can be read only once"),
    (["bench", "extra"], "unexpected argument 'extra'"),
])
def test_command_line_errors_name_the_problem(trace, args, message):
    p = run(*expand(args, trace))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert message in p.stderr, p.stderr
    assert p.stdout == ""


def test_help_for_each_command_comes_from_the_command():
    for cmd in ("replay", "sweep", "bench"):
        direct, via_help = run(cmd, "--help"), run("help", cmd)
        assert direct.returncode == via_help.returncode == 0
        assert direct.stdout == via_help.stdout
        assert direct.stdout.startswith(f"usage: kvpool {cmd}")
        assert "may be given once" in direct.stdout


@pytest.mark.parametrize("spelled, plain", [("slru:050", "slru:50"), ("slru:0100", "slru:100"),
                                            ("slru:000", "slru:0")])
def test_policy_percent_takes_leading_zeros_like_every_count(spelled, plain):
    a = run("replay", BUNDLED, "--capacity", "2000", "--policy", spelled, "--json")
    b = run("replay", BUNDLED, "--capacity", "2000", "--policy", plain, "--json")
    assert a.returncode == 0 and b.returncode == 0, a.stderr
    keep = lambda out: {k: v for k, v in json.loads(out).items() if "second" not in k}
    assert keep(a.stdout) == keep(b.stdout)


def test_a_byte_order_mark_is_named(tmp_path):
    trace = tmp_path / "bom.jsonl"
    trace.write_bytes(b"\xef\xbb\xbf" + write_trace(tmp_path / "t.jsonl", TAIL_FIRST).read_bytes())
    p = run("replay", trace, "--capacity", "4")
    assert p.returncode == 1 and p.stdout == ""
    assert f"{trace}:1: starts with a UTF-8 byte-order mark" in p.stderr


def test_standard_input_twice_by_two_names_is_refused(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    p = subprocess.run(f"cat '{trace}' | '{KVPOOL}' sweep - /dev/stdin --capacities 4",
                       shell=True, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert "'-' and '/dev/stdin' are the same input (standard input)" in p.stderr


@pytest.mark.parametrize("content, says", [
    ("timestamp,input_length,output_length,hash_ids\n0,600,5,0 1\n", "is not a JSON object"),
    ('[{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}]\n',
     "is a JSON array"),
])
def test_a_file_that_is_not_json_lines_says_what_a_trace_is(tmp_path, content, says):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    p = run("replay", trace, "--capacity", "4")
    assert p.returncode == 1 and p.stdout == ""
    assert f"{trace}:1: not a trace: the line {says}" in p.stderr
    for word in ("JSON Lines", "timestamp", "input_length", "output_length", "hash_ids",
                 "kvpool replay --help"):
        assert word in p.stderr
    assert "Problem while parsing" not in p.stderr


@pytest.mark.parametrize("args, says", [
    (["sweep", "t", "--capacity", "4"], "unknown option '--capacity'; did you mean --capacities?"),
    (["replay", "t", "--capcity", "4"], "did you mean --capacity?"),
    (["swep", "t"], "unknown command 'swep'; did you mean 'sweep'?"),
    (["bench", "--trace", "t"], "--trace is the trace of the load workload"),
])
def test_misspellings_get_the_closest_name(args, says):
    p = run(*args)
    assert p.returncode == 2 and p.stdout == ""
    assert says in p.stderr.splitlines()[0], p.stderr


def test_an_unknown_command_far_from_every_name_lists_them():
    p = run("zzz")
    assert p.returncode == 2
    assert "replay, sweep, curve, bench" in p.stderr and len(p.stderr.splitlines()) == 2
