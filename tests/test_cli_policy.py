# SPDX-License-Identifier: Apache-2.0
"""test_cli_policy.py — eviction policies and retention priorities on the
command line: `kvpool replay --policy --priority-prefix` and `kvpool sweep
--policy --priority-prefix --optimal`.

LRU must stay what `kvpool replay` always computed: `--policy lru` and the
default give the same numbers, key for key.  SLRU must run, keep its counts
consistent, never beat the optimal bound (`kvpool curve --optimal`) and
differ from LRU on the bundled trace at small capacities.  A priority prefix
must keep a request's first blocks cached ahead of others (a hand-made trace
whose answer is worked out below).  Bad values are refused with a message
naming the option, and sweep's table, CSV and plot carry one line per
(trace, policy, prefix), each equal to the replay it stands for.
"""
import csv
import json
import shutil

import pytest

from test_cli import BUNDLED, KVPOOL, TAIL_FIRST, check_consistent, run, write_trace

SYNTHETIC = BUNDLED.parent / "mooncake_fast25_synthetic_trace.jsonl.gz"
TIMING = {"seconds", "load_seconds", "blocks_per_second"}

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")


def replay(trace, capacity, *args):
    """`kvpool replay --json` with extra args, as a dict."""
    p = run("replay", trace, "--capacity", capacity, "--json", *args)
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    return json.loads(line)


def untimed(r):
    return {k: v for k, v in r.items() if k not in TIMING}


def optimal_hits(trace, caps):
    """The optimal policy's block hits at each capacity (`kvpool curve`)."""
    p = run("curve", trace, "--optimal", "--json", "--mark", ",".join(map(str, caps)))
    assert p.returncode == 0, p.stderr
    (s,) = [json.loads(line) for line in p.stdout.splitlines()]
    return {pt["capacity"]: pt["optimal"]["blocks_hit"] for pt in s["points"]
            if pt["capacity"] in caps}


# ---- replay ------------------------------------------------------------------

@pytest.mark.parametrize("trace, caps", [("tail_first", [2, 4, 0]),
                                         (BUNDLED, [1000, 5000, 20000])],
                         ids=["hand-made", "bundled"])
def test_policy_lru_is_the_default_replay(tmp_path, trace, caps):
    if trace == "tail_first":
        trace = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    for cap in caps:
        default, lru = replay(trace, cap), replay(trace, cap, "--policy", "lru")
        assert untimed(default) == untimed(lru)
        assert default["policy"] == "lru" and default["priority_prefix"] == 0
        zero = replay(trace, cap, "--priority-prefix", "0")
        assert untimed(zero) == untimed(default)


def test_replay_table_names_the_policy(tmp_path):
    t = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    p = run("replay", t, "--capacity", "4", "--policy", "slru", "--priority-prefix", "2")
    assert p.returncode == 0, p.stderr
    rows = {line[:20].strip(): line[20:].strip() for line in p.stdout.splitlines()[2:]}
    assert rows["policy"] == "slru" and rows["priority prefix"] == "2"


@pytest.mark.skipif(not BUNDLED.exists(), reason="data/ trace missing")
def test_slru_is_consistent_bounded_and_differs_from_lru():
    caps = [1000, 2000, 5000, 10000]
    best = optimal_hits(BUNDLED, caps)
    differ = []
    for cap in caps:
        lru, slru = replay(BUNDLED, cap), replay(BUNDLED, cap, "--policy", "slru")
        check_consistent(slru)
        assert slru["policy"] == "slru"
        for key in ("requests", "rejected", "blocks_requested", "tokens_requested"):
            assert slru[key] == lru[key], key
        assert slru["peak_in_use"] <= cap
        assert slru["tokens_hit"] <= slru["blocks_hit"] * 512
        # no policy hits more than the clairvoyant one
        assert lru["blocks_hit"] <= best[cap] and slru["blocks_hit"] <= best[cap], cap
        # what is not hit is allocated, and past the first `cap` allocations
        # (vacant blocks) every allocation evicts
        assert slru["rejected"] == 0
        misses = slru["blocks_requested"] - slru["blocks_hit"]
        assert slru["evictions"] == max(0, misses - cap)
        differ.append(slru["blocks_hit"] != lru["blocks_hit"])
    assert any(differ), "SLRU gave LRU's hit counts at every capacity"


# Capacity 6.  r0 frees 1 then 0, r1 frees 8, 7, 6, 5: six blocks cached,
# least recently freed first 1, 0, 8, 7, 6, 5.  r2 needs three: LRU evicts
# 1, 0 and 8, so r3 misses id 0 and evicts a fourth block.  With a priority
# prefix of 1, ids 0 and 5 are high and r2 evicts the normal 1, 8 and 7
# instead: r3 hits id 0.  SLRU agrees: nothing is claimed twice before r3.
PRIORITY = [(1024, [0, 1]), (2048, [5, 6, 7, 8]), (1536, [9, 10, 11]), (512, [0])]


@pytest.mark.parametrize("policy", ["lru", "slru"])
def test_priority_prefix_keeps_the_first_blocks(tmp_path, policy):
    t = write_trace(tmp_path / "t.jsonl", PRIORITY)
    plain = replay(t, 6, "--policy", policy)
    high = replay(t, 6, "--policy", policy, "--priority-prefix", "1")
    assert plain["blocks_hit"] == 0 and plain["evictions"] == 4
    assert high["blocks_hit"] == 1 and high["evictions"] == 3
    assert high["priority_prefix"] == 1 and high["policy"] == policy


def test_protected_share(tmp_path):
    """slru:PERCENT sets the protected share: slru is slru:50, and the share
    changes the hits on the bundled trace; slru:0 protects nothing."""
    runs = {p: replay(BUNDLED, 5000, "--policy", p) for p in ("lru", "slru", "slru:50", "slru:0",
                                                              "slru:20", "slru:80")}
    assert runs["slru"]["policy"] == "slru" and runs["slru:20"]["policy"] == "slru:20"
    assert runs["slru:50"]["policy"] == "slru"
    assert runs["slru"]["blocks_hit"] == runs["slru:50"]["blocks_hit"]
    assert len({runs[p]["blocks_hit"] for p in ("slru:0", "slru:20", "slru", "slru:80")}) == 4
    for r in runs.values():
        check_consistent(r)


# ---- refusals ------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["replay", "{t}", "--capacity", "4", "--policy", "arc"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'arc'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "LRU"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'LRU'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "slru:101"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'slru:101'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "slru:"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'slru:'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "slru:-5"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'slru:-5'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "lru:50"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), got 'lru:50'"),
    (["replay", "{t}", "--capacity", "4", "--policy", "lru", "--policy", "slru"],
     "--policy given twice"),
    (["replay", "{t}", "--capacity", "4", "--priority-prefix", "-1"],
     "--priority-prefix: expected a block count from 0 to 2147483647, got '-1'"),
    (["sweep", "{t}", "--capacities", "4", "--policy", "lru,arc"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), several separated by commas, got 'lru,arc'"),
    (["sweep", "{t}", "--capacities", "4", "--policy", "lru,"],
     "--policy: expected lru, slru, lfu, or NAME:PERCENT for all but lru (the protected share, 0-100; NAME is NAME:50), several separated by commas, got 'lru,'"),
    (["sweep", "{t}", "--capacities", "4", "--policy", "lru", "--policy", "slru"],
     "--policy given twice"),
    (["sweep", "{t}", "--capacities", "4", "--policy", "slru,slru"],
     "--policy: slru given twice"),
    (["sweep", "{t}", "--capacities", "4", "--policy", "slru,slru:50"],
     "--policy: slru:50 given twice"),
    (["sweep", "{t}", "--capacities", "4", "--priority-prefix", "1,x"],
     "--priority-prefix: expected block counts from 0 to 2147483647 separated by commas"),
    (["sweep", "{t}", "--capacities", "4", "--priority-prefix", "2,0,2"],
     "--priority-prefix: 2 given twice"),
])
def test_bad_policy_and_prefix_are_refused(tmp_path, args, message):
    t = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    p = run(*[a.format(t=t) for a in args])
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert message in p.stderr, p.stderr
    assert p.stdout == ""


# ---- sweep ---------------------------------------------------------------------

def test_sweep_prints_every_policy_and_prefix(tmp_path):
    a = write_trace(tmp_path / "a.jsonl", TAIL_FIRST)
    b = write_trace(tmp_path / "b.jsonl", PRIORITY)
    out = tmp_path / "s.csv"
    p = run("sweep", a, b, "--capacities", "6,4", "--policy", "slru,lru",
            "--priority-prefix", "1,0", "--csv", out)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert out.read_text().splitlines()[0] == (
        "trace,policy,priority_prefix,capacity,requests,rejected,blocks_requested,blocks_hit,"
        "hit_rate,tokens_hit_rate,evictions,seconds")
    # traces as given, policies as given, prefixes and capacities ascending
    assert [(r["trace"], r["policy"], r["priority_prefix"], r["capacity"]) for r in rows] == [
        (str(t), pol, pre, cap) for t in (a, b) for pol in ("slru", "lru")
        for pre in ("0", "1") for cap in ("4", "6")]
    for row in rows:
        single = replay(row["trace"], row["capacity"], "--policy", row["policy"],
                        "--priority-prefix", row["priority_prefix"])
        for key in ("requests", "blocks_requested", "blocks_hit", "evictions"):
            assert int(row[key]) == single[key], key
    # the table: a header with both new columns, a rule, one line per row
    lines = p.stdout.splitlines()
    assert lines[0].split()[:4] == ["trace", "policy", "priority_prefix", "capacity"]
    assert len(lines) == 2 + len(rows)
    assert {line.split()[1] for line in lines[2:]} == {"lru", "slru"}


@pytest.mark.skipif(not BUNDLED.exists(), reason="data/ trace missing")
def test_sweep_two_policies_on_the_bundled_trace(tmp_path):
    out = tmp_path / "s.csv"
    p = run("sweep", BUNDLED, "--capacities", "2000,1000", "--policy", "lru,slru",
            "--csv", out)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert "priority_prefix" not in rows[0]
    assert [(r["policy"], r["capacity"]) for r in rows] == [
        ("lru", "1000"), ("lru", "2000"), ("slru", "1000"), ("slru", "2000")]
    for row in rows:
        single = replay(BUNDLED, row["capacity"], "--policy", row["policy"])
        assert int(row["blocks_hit"]) == single["blocks_hit"]
    table = [line.split() for line in p.stdout.splitlines()[2:]]
    assert [(r[1], r[2]) for r in table] == [(r["policy"], r["capacity"]) for r in rows]


@pytest.mark.skipif(not SYNTHETIC.exists(), reason="data/ trace missing")
def test_sweep_optimal_equals_curve(tmp_path):
    out = tmp_path / "s.csv"
    p = run("sweep", SYNTHETIC, "--capacities", "100,1000,5000,0", "--optimal", "--csv", out)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(out.read_text().splitlines()))
    best = optimal_hits(SYNTHETIC, [1000, 5000])
    requested = int(rows[0]["blocks_requested"])
    by_cap = {r["capacity"]: r for r in rows}
    assert by_cap["100"]["optimal_hit_rate"] == ""  # below the largest request (374)
    for cap in (1000, 5000):
        row = by_cap[str(cap)]
        assert float(row["optimal_hit_rate"]) == pytest.approx(best[cap] / requested, abs=1e-6)
        assert float(row["optimal_hit_rate"]) >= float(row["hit_rate"])
    # unlimited capacity: nothing is evicted, every policy reaches the same
    assert float(by_cap["0"]["optimal_hit_rate"]) == pytest.approx(
        float(by_cap["0"]["hit_rate"]), abs=1e-6)
    head = p.stdout.splitlines()[0].split()
    assert head[-2:] == ["optimal_hit_rate", "seconds"] and "policy" not in head


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot not installed")
def test_sweep_plot_draws_policies_and_optimal(tmp_path):
    a = write_trace(tmp_path / "a.jsonl", TAIL_FIRST)
    b = write_trace(tmp_path / "b.jsonl", PRIORITY)
    svg = tmp_path / "p.svg"
    p = run("sweep", a, b, "--capacities", "4,6,8", "--policy", "lru,slru",
            "--priority-prefix", "0,1", "--optimal", "--plot", svg)
    assert p.returncode == 0, p.stderr
    text = svg.read_text()
    # the traces are named by what their file names do not share
    for title in ("a: LRU", "a: SLRU, priority prefix 1", "b: optimal (Belady)",
                  "b, unlimited capacity", "Prefix-cache hit rate by capacity: *.jsonl"):
        assert title in text, title
