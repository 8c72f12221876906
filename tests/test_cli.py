# SPDX-License-Identifier: Apache-2.0
"""test_cli.py — end-to-end tests of the `kvpool` command-line tool.

Runs the built binary ($KVP_BUILD_DIR/kvpool, default build/kvpool) on small
hand-made traces whose answers were worked out by hand, on malformed input
(every case must exit 1 with an error naming the file and line, never crash),
on the CSV / JSON / plot outputs, on `bench --quick --json`, and cross-checks
a replay of the bundled Mooncake trace against an independent Python model of
the same rules (LRU over least-recently-freed blocks, tail-first frees).

When an AddressSanitizer build exists (build-asan/kvpool), the malformed-input
cases run under it too.
"""
import collections
import csv
import gzip
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
KVPOOL = BUILD / "kvpool"
ASAN_KVPOOL = ROOT / "build-asan" / "kvpool"
BUNDLED = ROOT / "data" / "mooncake_fast25_conversation_trace.jsonl.gz"
BLOCK = 512

REPLAY_KEYS = {"requests", "rejected", "blocks_requested", "blocks_hit", "hit_rate",
               "tokens_hit_rate", "evictions", "peak_in_use", "seconds", "load_seconds"}
CSV_HEADER = ("trace,capacity,requests,rejected,blocks_requested,blocks_hit,hit_rate,"
              "tokens_hit_rate,evictions,seconds")

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")


def run(*args, binary=KVPOOL, env=None, timeout=300):
    """Run kvpool with args; returns the CompletedProcess (text mode)."""
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def write_trace(path, requests, compress=False):
    """Write requests [(input_length, hash_ids), ...] as a Mooncake trace."""
    lines = "".join(json.dumps({"timestamp": 1000 * i, "input_length": inp,
                                "output_length": 10, "hash_ids": ids}) + "\n"
                    for i, (inp, ids) in enumerate(requests))
    if compress:
        with gzip.open(path, "wt") as f:
            f.write(lines)
    else:
        path.write_text(lines)
    return path


def replay_json(trace, capacity, binary=KVPOOL):
    """`kvpool replay --json` as a dict (asserting success and a quiet stderr)."""
    p = run("replay", trace, "--capacity", capacity, "--json", binary=binary)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    # no progress bar when stderr is not a terminal; a warning only for rejections
    if r["rejected"]:
        assert p.stderr.startswith("kvpool replay: warning: ") and p.stderr.count("\n") == 1
    else:
        assert p.stderr == ""
    return r


def model(requests, capacity):
    """Independent model of `kvpool replay`: blocks are never-used until first
    taken; freed blocks keep their hash and queue least-recently-freed first;
    lookup returns the earliest-published block still holding a hash."""
    total = sum(len(ids) for _, ids in requests)
    cap = capacity or max(total, 1)
    never_used, next_block = cap, 0
    free_lru = collections.OrderedDict()  # block -> None, front = evicted first
    content, index = {}, {}              # block -> hash id; hash id -> [blocks]
    r = dict(requests=len(requests), rejected=0, blocks_requested=0, blocks_hit=0,
             tokens_requested=0, tokens_hit=0, evictions=0, peak_in_use=0)
    for inp, ids in requests:
        r["blocks_requested"] += len(ids)
        r["tokens_requested"] += inp
        if len(ids) > cap:
            r["rejected"] += 1
            continue
        held = []
        for h in ids:
            if not index.get(h):
                break
            b = index[h][0]
            free_lru.pop(b, None)
            held.append(b)
        hit = len(held)
        for h in ids[hit:]:
            if never_used:
                b, next_block, never_used = next_block, next_block + 1, never_used - 1
            else:
                b, _ = free_lru.popitem(last=False)
                old = content.pop(b)
                index[old].remove(b)
                r["evictions"] += 1
            content[b] = h
            index.setdefault(h, []).append(b)
            held.append(b)
        for b in reversed(held):
            free_lru[b] = None
        r["blocks_hit"] += hit
        r["tokens_hit"] += min(hit * BLOCK, inp)
        r["peak_in_use"] = max(r["peak_in_use"], len(ids))
    return r


def check_consistent(r):
    """The documented keys are present and the rates follow from the counts."""
    assert REPLAY_KEYS <= r.keys()
    assert r["hit_rate"] == pytest.approx(r["blocks_hit"] / r["blocks_requested"])
    assert r["tokens_hit_rate"] == pytest.approx(r["tokens_hit"] / r["tokens_requested"])
    assert 0 <= r["blocks_hit"] <= r["blocks_requested"]
    assert 0 <= r["rejected"] <= r["requests"]
    assert r["seconds"] >= 0 and r["load_seconds"] >= 0


# ---- replay on hand-made traces -------------------------------------------

# Capacity 4.  r0 frees its blocks tail first, so id 2 is the least recently
# freed and r2 evicts it (not id 0); r3 then hits ids 0 and 1 and evicts id 5;
# r4 misses id 5 and evicts id 6; r5 hits all three blocks of 0,1,2.
TAIL_FIRST = [(1536, [0, 1, 2]), (100, [5]), (512, [6]), (1500, [0, 1, 2]), (100, [5]),
              (1536, [0, 1, 2])]


def test_replay_tail_first_eviction(tmp_path):
    r = replay_json(write_trace(tmp_path / "t.jsonl", TAIL_FIRST), 4)
    check_consistent(r)
    assert (r["requests"], r["rejected"], r["blocks_requested"], r["blocks_hit"],
            r["evictions"], r["peak_in_use"]) == (6, 0, 12, 5, 3, 3)
    assert r["tokens_hit_rate"] == pytest.approx((1024 + 1536) / (3748 + 1536))
    assert r["hit_rate"] == pytest.approx(5 / 12)
    expected = model(TAIL_FIRST, 4)
    assert (r["blocks_hit"], r["evictions"]) == (expected["blocks_hit"], expected["evictions"])


def test_replay_rejects_requests_larger_than_pool(tmp_path):
    reqs = [(1024, [0, 1]), (1536, [0, 1, 2]), (1024, [0, 1])]
    r = replay_json(write_trace(tmp_path / "t.jsonl", reqs), 2)
    check_consistent(r)
    assert (r["requests"], r["rejected"], r["blocks_requested"], r["blocks_hit"],
            r["evictions"]) == (3, 1, 7, 2, 0)
    assert r["tokens_hit_rate"] == pytest.approx(1024 / 3584)


def test_replay_warns_when_it_rejects_requests(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    p = run("replay", trace, "--capacity", 1)
    assert p.returncode == 0
    assert p.stderr == ("kvpool replay: warning: 3 of 6 requests rejected (more blocks than "
                        "--capacity 1); capacity 3, the longest request, admits them all\n")
    assert run("replay", trace, "--capacity", 3).stderr == ""


def test_replay_capacity_zero_holds_everything(tmp_path):
    reqs = [(1536, [0, 1, 2]), (1536, [0, 1, 3]), (1024, [0, 4]), (512, [7])]
    r = replay_json(write_trace(tmp_path / "t.jsonl", reqs), 0)
    check_consistent(r)
    assert (r["blocks_requested"], r["blocks_hit"], r["evictions"], r["rejected"]) == (9, 3, 0, 0)
    assert r["capacity"] == 9


def limited_memory():
    """For preexec_fn: at most 1 GiB of address space, so a pool sized to an
    unreachable capacity (2^31 blocks: over 8 GB) cannot be created."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_pool_is_no_larger_than_the_trace(tmp_path, command):
    reqs = [(1536, [0, 1, 2]), (1536, [0, 1, 3]), (1024, [0, 4]), (512, [7])]
    trace = write_trace(tmp_path / "t.jsonl", reqs)
    flag = "--capacity" if command == "replay" else "--capacities"
    extra = ("--json",) if command == "replay" else ("--csv", tmp_path / "s.csv")
    p = subprocess.run([str(KVPOOL), command, str(trace), flag, "2147483647", *map(str, extra)],
                       capture_output=True, text=True, timeout=300,
                       preexec_fn=limited_memory)
    assert p.returncode == 0, p.stderr
    if command == "replay":
        r = json.loads(p.stdout)
        assert r["capacity"] == 2147483647
        whole = replay_json(trace, 0)
        for key in ("blocks_hit", "evictions", "rejected", "peak_in_use", "tokens_hit"):
            assert r[key] == whole[key]
    else:
        row = next(csv.DictReader((tmp_path / "s.csv").read_text().splitlines()))
        assert (row["capacity"], row["blocks_hit"], row["evictions"]) == ("2147483647", "3", "0")


def test_tokens_hit_capped_at_input_length(tmp_path):
    reqs = [(700, [0, 1]), (700, [0, 1])]
    r = replay_json(write_trace(tmp_path / "t.jsonl", reqs), 10)
    assert r["blocks_hit"] == 2
    assert r["tokens_hit_rate"] == pytest.approx(700 / 1400)


def test_gzip_and_plain_give_the_same_answer(tmp_path):
    plain = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    packed = write_trace(tmp_path / "t.jsonl.gz", TAIL_FIRST, compress=True)
    # gzip content under a name without .gz is detected by its magic bytes
    odd = write_trace(tmp_path / "t.data", TAIL_FIRST, compress=True)
    drop = ("seconds", "load_seconds", "blocks_per_second", "trace")
    results = [{k: v for k, v in replay_json(p, 4).items() if k not in drop}
               for p in (plain, packed, odd)]
    assert results[0] == results[1] == results[2]


def test_replay_human_output_is_a_table(tmp_path):
    p = run("replay", write_trace(tmp_path / "t.jsonl", TAIL_FIRST), "--capacity", "4")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["metric", "value"]
    assert set(lines[1]) <= {"-", " "}
    rows = {line[:20].strip(): line[20:].strip() for line in lines[2:]}
    assert rows["blocks hit"] == "5" and rows["evictions"] == "3"


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, TAIL_FIRST)
    path.write_text("\n" + path.read_text().replace("\n", "\n\n"))
    assert replay_json(path, 4)["blocks_hit"] == 5


# ---- malformed input -------------------------------------------------------

GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'
BAD_LINES = {
    "bad_json": ('{"timestamp": 0, "input_length": 600,', "bad JSON"),
    "not_object": ("[1, 2, 3]", "not a JSON object"),
    "missing_timestamp": ('{"input_length": 600, "output_length": 5, "hash_ids": [0]}',
                          "timestamp"),
    "missing_input_length": ('{"timestamp": 0, "output_length": 5, "hash_ids": [0]}',
                             "input_length"),
    "missing_output_length": ('{"timestamp": 0, "input_length": 600, "hash_ids": [0]}',
                              "output_length"),
    "missing_hash_ids": ('{"timestamp": 0, "input_length": 600, "output_length": 5}',
                         "hash_ids"),
    "string_length": ('{"timestamp": 0, "input_length": "600", "output_length": 5, '
                      '"hash_ids": [0]}', "input_length"),
    "negative_input_length": ('{"timestamp": 0, "input_length": -1, "output_length": 5, '
                              '"hash_ids": [0]}', "negative input_length"),
    "negative_output_length": ('{"timestamp": 0, "input_length": 1, "output_length": -5, '
                               '"hash_ids": [0]}', "negative output_length"),
    "empty_hash_ids": ('{"timestamp": 0, "input_length": 600, "output_length": 5, '
                       '"hash_ids": []}', "empty hash_ids"),
    "hash_ids_not_array": ('{"timestamp": 0, "input_length": 600, "output_length": 5, '
                           '"hash_ids": 7}', "hash_ids"),
    "hash_id_negative": ('{"timestamp": 0, "input_length": 600, "output_length": 5, '
                         '"hash_ids": [0, -3]}', "hash_ids[1]"),
    "hash_id_float": ('{"timestamp": 0, "input_length": 600, "output_length": 5, '
                      '"hash_ids": [0.5]}', "hash_ids[0]"),
    "nul_byte": ('{"timestamp": 0, "input_length": 600,\0 "output_length": 5, '
                 '"hash_ids": [0]}', "bad JSON"),
    # the two GOOD lines before it hold 1200 tokens: one more than INT64_MAX in all
    "input_length_far_past_its_blocks": ('{"timestamp": 0, "input_length": %d, "output_length": 5, '
                                         '"hash_ids": [0]}' % (2**63 - 1200), "input_length"),
}


def binaries():
    """The normal binary, plus the ASan one when it was built."""
    found = [KVPOOL]
    if ASAN_KVPOOL.exists():
        found.append(ASAN_KVPOOL)
    return found


def assert_clean_failure(p, must_mention):
    """Exit status 1 (not a signal, not a sanitizer abort), one error line."""
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr
    assert p.stdout == ""
    assert must_mention in p.stderr, p.stderr


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("case", sorted(BAD_LINES))
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_malformed_line_names_file_and_line(tmp_path, binary, case, compress):
    bad, why = BAD_LINES[case]
    text = f"{GOOD}\n{GOOD}\n{bad}\n{GOOD}\n"
    path = tmp_path / ("t.jsonl.gz" if compress else "t.jsonl")
    if compress:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    p = run("replay", path, "--capacity", "100", binary=binary)
    assert_clean_failure(p, f"{path}:3: ")
    assert why in p.stderr


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_gz_name_without_gzip_content(tmp_path, binary):
    path = tmp_path / "t.jsonl.gz"
    path.write_text(GOOD + "\n")
    p = run("replay", path, "--capacity", "10", binary=binary)
    assert_clean_failure(p, str(path))
    assert "not a gzip file" in p.stderr


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_truncated_gzip(tmp_path, binary):
    path = tmp_path / "t.jsonl.gz"
    data = gzip.compress((GOOD + "\n").encode() * 2000)
    path.write_bytes(data[: len(data) // 2])
    p = run("replay", path, "--capacity", "10", binary=binary)
    assert_clean_failure(p, str(path))


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_nonexistent_file(tmp_path, binary):
    path = tmp_path / "missing.jsonl"
    p = run("replay", path, "--capacity", "10", binary=binary)
    assert_clean_failure(p, str(path))
    p = run("sweep", path, "--capacities", "10")
    assert_clean_failure(p, str(path))


@pytest.mark.parametrize("args", [
    ["replay"],
    ["replay", "x.jsonl"],                        # --capacity is required
    ["replay", "x.jsonl", "--capacity", "-1"],
    ["replay", "x.jsonl", "--capacity", "12abc"],
    ["replay", "x.jsonl", "--capacity", "99999999999"],
    ["replay", "a", "b", "--capacity", "1"],
    ["sweep", "x.jsonl"],
    ["sweep", "x.jsonl", "--capacities", "1,,2"],
    ["sweep", "x.jsonl", "--capacities", "1,2", "--plot", "out.pdf"],
    ["bench", "--workload", "nope"],
    ["frobnicate"],
    [],
])
def test_usage_errors_exit_2(args):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr


def test_help():
    for cmd in ("replay", "sweep", "bench"):
        p = run(cmd, "--help")
        assert p.returncode == 0 and p.stdout.startswith(f"usage: kvpool {cmd}")
    assert run("--help").returncode == 0


# ---- KV-cache events: endpoints ---------------------------------------------

def have_interop(binary=KVPOOL):
    return run("events-demo", "--help", binary=binary).returncode == 0


def test_events_help_binds_loopback():
    # examples bind loopback, never every interface
    if not have_interop():
        pytest.skip("kvpool built without the interop part")
    for cmd in ("events", "events-demo", "replay"):
        p = run(cmd, "--help")
        assert p.returncode == 0
        assert "tcp://*" not in p.stdout and "127.0.0.1" in p.stdout, cmd


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("args, why, status", [
    (["events", "tcp://127.0.0.1:99999"], "port '99999' is not in 1..65535", 2),
    (["events", "tcp://127.0.0.1:*"], "can only be bound", 2),
    (["events", "tcp://no-such-host.invalid:5557"], "cannot resolve host", 2),
    (["events", "tcp://127.0.0.1:0", "--bind"], "port '0' is not in 1..65535", 2),
    (["events-demo", "tcp://*:99999"], "port '99999' is not in 1..65535", 2),
    (["events-demo", "tcp://127.0.0.1:70000", "--replay", "tcp://127.0.0.1:*"],
     "port '70000'", 2),
    (["events-demo", "tcp://127.0.0.1:*", "--replay", "tcp://127.0.0.1:99999"],
     "port '99999'", 2),
    (["events-demo", "tcp://no-such-host.invalid:5557", "--connect"],
     "cannot resolve host 'no-such-host.invalid'", 2),
], ids=lambda v: v if isinstance(v, int) else None)
def test_events_refuse_bad_endpoints(binary, args, why, status):
    # refused up front with the reason, within a bounded time, nothing sent
    if not have_interop(binary):
        pytest.skip("kvpool built without the interop part")
    extra = ["--timeout", "1"] if args[0] == "events" else ["--events-wait", "0"]
    p = run(*args, *extra, binary=binary, timeout=60)
    assert p.returncode == status, (p.returncode, p.stderr)
    assert why in p.stderr, p.stderr
    assert p.stdout == ""


# ---- sweep, CSV, plot ------------------------------------------------------

def test_sweep_csv(tmp_path):
    a = write_trace(tmp_path / "a.jsonl", TAIL_FIRST)
    b = write_trace(tmp_path / "b.jsonl.gz", [(1024, [0, 1]), (1536, [0, 1, 2])], compress=True)
    out = tmp_path / "sweep.csv"
    p = run("sweep", a, b, "--capacities", "2,4,0", "--csv", out)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    text = out.read_text()
    assert text.splitlines()[0] == CSV_HEADER
    rows = list(csv.DictReader(text.splitlines()))
    assert [(r["trace"], r["capacity"]) for r in rows] == [
        (str(t), c) for t in (a, b) for c in ("2", "4", "0")]
    for row in rows:
        single = replay_json(Path(row["trace"]), int(row["capacity"]))
        for key in ("requests", "rejected", "blocks_requested", "blocks_hit", "evictions"):
            assert int(row[key]) == single[key]
        for key in ("hit_rate", "tokens_hit_rate"):
            assert float(row[key]) == pytest.approx(single[key], abs=1e-6)
    assert {r["rejected"] for r in rows} == {"3", "1", "0"}  # capacity 2 rejects 3-block requests
    # the table on stdout: a header, a rule, one line per row, the CSV's columns
    lines = p.stdout.splitlines()
    assert lines[0].split() == CSV_HEADER.split(",")
    assert len(lines) == 2 + len(rows)
    for line, row in zip(lines[2:], rows):
        cells = line.split()
        assert cells[1:4] == [row["capacity"], row["requests"], row["rejected"]]
        assert float(cells[-1]) == pytest.approx(float(row["seconds"]), abs=6e-4)


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot not installed")
def test_sweep_plot_png(tmp_path):
    a = write_trace(tmp_path / "a_trace.jsonl", TAIL_FIRST)
    b = write_trace(tmp_path / "b'trace.jsonl", [(1024, [0, 1]), (1536, [0, 1, 2])])
    png = tmp_path / "curve.png"
    p = run("sweep", a, b, "--capacities", "1,2,4,8", "--plot", png)
    assert p.returncode == 0, p.stderr
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "curve.svg"
    assert run("sweep", a, "--capacities", "1,4", "--plot", svg).returncode == 0
    assert "<svg" in svg.read_text()


# ---- bench -----------------------------------------------------------------

def test_bench_quick_json():
    p = run("bench", "--quick", "--json", timeout=600)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    objs = [json.loads(line) for line in lines]
    for o in objs:
        assert {"workload", "ns_per_block", "floor_ns_per_block", "ratio_to_floor"} <= o.keys()
        assert o["ns_per_block"] > 0 and o["floor_ns_per_block"] > 0
        assert o["ratio_to_floor"] == pytest.approx(o["ns_per_block"] / o["floor_ns_per_block"])
    by = collections.defaultdict(list)
    for o in objs:
        by[o["workload"]].append(o)
    assert set(by) == {"churn", "prefix", "publish", "scale"}
    (churn,) = by["churn"]
    assert churn["call"] == "kvp_take_each"
    for kind in ("single", "lookup"):  # kvp_take_hinted, kvp_take: one call per block
        ns, ratio = churn[f"{kind}_ns_per_block"], churn[f"{kind}_ratio_to_floor"]
        assert ns > 0 and ratio > 0
    assert {o["hash"] for o in by["prefix"]} == {"sha256", "xxh3"}
    for o in by["prefix"]:
        assert {"us_per_request", "hit_rate", "floor_hit_rate"} <= o.keys()
        assert 0 < o["hit_rate"] <= 1 and 0 < o["floor_hit_rate"] <= 1
    assert [(o["keys"], o["blocks"]) for o in by["publish"]] == [
        ("duplicates", 1000), ("crafted", 1000), ("duplicates", 8000), ("crafted", 8000)]
    assert [o["blocks"] for o in by["scale"]] == [1024, 65536, 1048576]
    for o in by["scale"]:
        assert {"bytes_per_block", "create_ms"} <= o.keys()
        assert o["create_ms"] >= 0 and o["bytes_per_block"] >= 0


def test_bench_load_row():
    """`bench --workload load`: one row, the load and its floors side by side
    (figures only; speed is not asserted)."""
    p = run("bench", "--workload", "load", "--trace", BUNDLED, "--json", timeout=600)
    assert p.returncode == 0, p.stderr
    (o,) = [json.loads(line) for line in p.stdout.strip().splitlines()]
    assert o["workload"] == "load" and o["trace"] == str(BUNDLED)
    assert (o["requests"], o["hash_ids"], o["bytes"]) == (12031, 288500, 3029533)
    for k in ("load_ms", "floor_ms", "zcat_ms", "python_ms", "replay_10000_ms"):
        assert o[k] > 0, k
    assert o["ratio_to_floor"] == pytest.approx(o["load_ms"] / o["floor_ms"])
    assert o["python_ratio"] == pytest.approx(o["python_ms"] / o["load_ms"])


def test_bench_load_refuses_a_bad_trace(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text("{}\n")
    p = run("bench", "--workload", "load", "--trace", bad)
    assert p.returncode == 1 and f"{bad}:1: missing field" in p.stderr


# ---- the bundled trace against the Python model -----------------------------

@pytest.fixture(scope="module")
def bundled_head(tmp_path_factory):
    """The first 2,000 requests of the bundled trace, as a file and as data."""
    with gzip.open(BUNDLED, "rt") as f:
        lines = [next(f) for _ in range(2000)]
    path = tmp_path_factory.mktemp("bundled") / "head.jsonl"
    path.write_text("".join(lines))
    reqs = [(o["input_length"], o["hash_ids"]) for o in map(json.loads, lines)]
    return path, reqs


@pytest.mark.skipif(not BUNDLED.exists(), reason="data/ trace missing")
@pytest.mark.parametrize("capacity", [0, 3000])
def test_bundled_trace_matches_python_model(bundled_head, capacity):
    path, reqs = bundled_head
    r = replay_json(path, capacity)
    check_consistent(r)
    m = model(reqs, capacity)
    for key in ("requests", "rejected", "blocks_requested", "blocks_hit", "evictions",
                "peak_in_use"):
        assert r[key] == m[key], key
    assert r["hit_rate"] == pytest.approx(m["blocks_hit"] / m["blocks_requested"])
    assert r["tokens_hit_rate"] == pytest.approx(m["tokens_hit"] / m["tokens_requested"])
    if capacity == 0:
        assert r["evictions"] == 0
    assert not math.isnan(r["hit_rate"])


CONTROL_NAME = b"e\x1b[31mred\tx\xc2\x85y\xff\x7f.jsonl"
CONTROL_SHOWN = b"e\\x1b[31mred\\x09x\\xc2\\x85y\\xff\\x7f.jsonl"


def no_controls(out):
    """No control byte (but line ends), no C1 control, nothing invalid as UTF-8."""
    text = out.decode("utf-8")  # raises on invalid UTF-8
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f for c in text)


@pytest.mark.parametrize("args", [
    ("replay", "--capacity", "2"),
    ("sweep", "--capacities", "2"),
    ("curve",),
])
def test_control_characters_in_trace_names_are_escaped(tmp_path, args):
    name = os.fsencode(tmp_path) + b"/" + CONTROL_NAME
    write_trace(Path(os.fsdecode(name)), TAIL_FIRST)
    p = subprocess.run([os.fsencode(KVPOOL), args[0].encode(), name, *map(str.encode, args[1:])],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    no_controls(p.stdout)
    assert CONTROL_SHOWN in p.stdout
    bad = name[:-6] + b".missing"
    p = subprocess.run([os.fsencode(KVPOOL), args[0].encode(), bad, *map(str.encode, args[1:])],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 1
    no_controls(p.stderr)
    assert CONTROL_SHOWN[:-6] + b".missing" in p.stderr
