# SPDX-License-Identifier: Apache-2.0
"""test_curve.py — `kvpool curve`: the one-pass LRU curve against replays, the
optimal policy against an exhaustive search, sampling, targets and outputs.

The curve claims to be what `kvpool replay --capacity C` reports at every
capacity, block for block and token for token.  These tests hold it to that
on both bundled Mooncake traces (at many capacities, through `sweep` and
`replay --json`) and on random prefix-tree traces generated here (at every
capacity from 1 to past the distinct block count, with --all-capacities
covering the capacities below the largest request, where replays reject
requests).  The optimal column is checked to be at least LRU everywhere and
equal to the best of every possible eviction choice on small random traces.
When an AddressSanitizer build exists (build-asan/kvpool), the curve side of
the random-trace, optimal and bad-input cases runs under it too.
"""
import csv
import functools
import itertools
import json
import random
import shutil
import subprocess

import pytest

from test_cli import BLOCK, BUNDLED, KVPOOL, binaries  # the builds test_cli runs

CSV_HEADER = "capacity,blocks_hit,hit_rate,tokens_hit,tokens_hit_rate"
SYNTHETIC = BUNDLED.parent / "mooncake_fast25_synthetic_trace.jsonl.gz"

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")


def run(*args, binary=KVPOOL, timeout=120):
    """Run kvpool; returns the CompletedProcess (text mode)."""
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def ok(*args, binary=KVPOOL):
    """Run kvpool and insist on success (no sanitizer report); returns stdout."""
    p = run(*args, binary=binary)
    assert p.returncode == 0 and "Sanitizer" not in p.stderr, p.stderr
    return p.stdout


def write_trace(path, requests):
    """Write [(input_length, hash_ids), ...] as a Mooncake trace."""
    path.write_text("".join(
        json.dumps({"timestamp": i, "input_length": inp, "output_length": 1, "hash_ids": ids})
        + "\n" for i, (inp, ids) in enumerate(requests)))
    return path


def tree_trace(rng, nodes, requests, max_depth):
    """Random requests that are root paths of one random prefix tree (so
    every id has one parent), with a partial last block now and then."""
    parent, depth = [], []
    for i in range(nodes):
        p = rng.randrange(-1, i) if i else -1
        while p >= 0 and depth[p] >= max_depth:
            p = parent[p]
        parent.append(p)
        depth.append(depth[p] + 1 if p >= 0 else 1)
    hot = [rng.randrange(nodes) for _ in range(max(2, nodes // 8))]
    out = []
    for _ in range(requests):
        leaf = rng.choice(hot) if rng.random() < 0.5 else rng.randrange(nodes)
        path = []
        while leaf >= 0:
            path.append(leaf)
            leaf = parent[leaf]
        path.reverse()
        out.append(((len(path) - 1) * BLOCK + rng.randint(1, BLOCK), path))
    return out


def read_csv(path):
    """capacity -> (blocks_hit, tokens_hit) of a curve CSV (header checked)."""
    lines = path.read_text().splitlines()
    assert lines[0] == CSV_HEADER
    return {int(r["capacity"]): (int(r["blocks_hit"]), int(r["tokens_hit"]))
            for r in csv.DictReader(lines)}


def sweep_hits(trace, caps, tmp_path):
    """capacity -> blocks_hit of `kvpool sweep` (one load, many replays)."""
    out = tmp_path / "sweep.csv"
    ok("sweep", trace, "--capacities", ",".join(map(str, caps)), "--csv", out)
    with out.open() as f:
        return {int(r["capacity"]): int(r["blocks_hit"]) for r in csv.DictReader(f)}


def replay(trace, cap):
    """`kvpool replay --json` at one capacity."""
    return json.loads(ok("replay", trace, "--capacity", cap, "--json"))


def curve_json(*args, binary=KVPOOL):
    """The JSON objects `kvpool curve --json` prints, one per trace."""
    return [json.loads(line) for line in ok("curve", *args, "--json", binary=binary).splitlines()]


@pytest.fixture(scope="module")
def bundled_curve(tmp_path_factory):
    """The bundled trace's curve CSV and JSON summary."""
    out = tmp_path_factory.mktemp("curve") / "c.csv"
    (summary,) = curve_json(BUNDLED, "--csv", out, "--target", "0.9")
    return read_csv(out), summary


def test_bundled_curve_equals_replays(bundled_curve, tmp_path):
    rows, s = bundled_curve
    assert s["exact"] and s["prefix_tree"]
    lo, hi = s["largest_request"], s["distinct_blocks"]
    assert (lo, hi) == (247, 182790)
    assert min(rows) == lo and max(rows) == hi and len(rows) == hi - lo + 1
    rng = random.Random(7)
    caps = sorted({lo, lo + 1, 300, 1000, 4096, 10000, 31435, 65536, 100000, hi - 1, hi}
                  | {rng.randint(lo, hi) for _ in range(10)})
    swept = sweep_hits(BUNDLED, caps + [hi + 1000], tmp_path)
    for c in caps:
        assert rows[c][0] == swept[c], c
    assert swept[hi + 1000] == s["unlimited"]["blocks_hit"] == rows[hi][0]
    for c in (lo, 10000, 100000):
        r = replay(BUNDLED, c)
        assert (r["blocks_hit"], r["tokens_hit"]) == rows[c], c


def test_synthetic_curve_equals_replays(tmp_path):
    """The second bundled trace (many first blocks, longer requests)."""
    out = tmp_path / "s.csv"
    (s,) = curve_json(SYNTHETIC, "--csv", out)
    rows = read_csv(out)
    assert s["exact"] and s["prefix_tree"]
    lo, hi = s["largest_request"], s["distinct_blocks"]
    assert (lo, hi) == (374, 43924)
    caps = [lo, 500, 1000, 5000, 10000, 20000, hi - 1, hi]
    swept = sweep_hits(SYNTHETIC, caps + [hi + 1000], tmp_path)
    for c in caps:
        assert rows[c][0] == swept[c], c
    assert swept[hi + 1000] == s["unlimited"]["blocks_hit"] == rows[hi][0]
    for c in (lo, 5000):
        r = replay(SYNTHETIC, c)
        assert (r["blocks_hit"], r["tokens_hit"]) == rows[c], c


def test_bundled_target_is_the_smallest_capacity(bundled_curve):
    rows, s = bundled_curve
    need = 0.9 * s["unlimited"]["blocks_hit"]
    c = s["target"]["capacity"]
    assert rows[c][0] >= need and rows[c - 1][0] < need


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("seed", range(6))
def test_random_tree_traces_equal_replays_at_every_capacity(tmp_path, seed, binary):
    rng = random.Random(seed)
    reqs = tree_trace(rng, nodes=rng.randint(60, 200), requests=rng.randint(80, 200),
                      max_depth=rng.randint(3, 25))
    trace = write_trace(tmp_path / "t.jsonl", reqs)
    out = tmp_path / "c.csv"
    (s,) = curve_json(trace, "--csv", out, "--all-capacities", binary=binary)
    rows = read_csv(out)
    distinct = len({i for _, ids in reqs for i in ids})
    assert s["exact"] and s["distinct_blocks"] == distinct
    assert min(rows) == 1 and max(rows) == max(distinct, s["largest_request"])
    caps = list(range(1, distinct + 3))
    swept = sweep_hits(trace, caps, tmp_path)
    for c in caps:
        assert rows.get(c, rows[max(rows)])[0] == swept[c], c
    for c in rng.sample(caps, 4) + [s["largest_request"] - 1, s["largest_request"]]:
        if c >= 1:
            r = replay(trace, c)
            assert (r["blocks_hit"], r["tokens_hit"]) == rows.get(c, rows[max(rows)]), c


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_sparse_ids_equal_replays(tmp_path, binary):
    """Ids spread over 63 bits take the hashed map instead of the direct
    table, and more than 65,536 of them make it grow."""
    rng = random.Random(21)
    paths, fresh = [], iter(range(10, 10 ** 9))
    for _ in range(25000):  # conversations: a prompt root, then turns of fresh ids
        base = rng.choice(paths) if paths and rng.random() < 0.5 else [rng.randrange(10)]
        path = (base if len(base) < 40 else base[:1]) + [next(fresh) for _ in range(rng.randint(1, 6))]
        paths.append(path)
    reqs = [((len(p) - 1) * BLOCK + rng.randint(1, BLOCK), p) for p in paths]
    spread = {}
    for _, ids in reqs:
        for i in ids:
            spread.setdefault(i, rng.getrandbits(63))
    reqs = [(inp, [spread[i] for i in ids]) for inp, ids in reqs]
    trace = write_trace(tmp_path / "t.jsonl", reqs)
    out = tmp_path / "c.csv"
    (s,) = curve_json(trace, "--csv", out, binary=binary)
    rows = read_csv(out)
    assert s["exact"] and s["distinct_blocks"] == len(spread) > 65536
    caps = sorted({s["largest_request"], 100, 1000, 5000, 20000, 50000, s["distinct_blocks"]}
                  | {rng.randint(s["largest_request"], s["distinct_blocks"]) for _ in range(5)})
    swept = sweep_hits(trace, caps, tmp_path)
    for c in caps:
        if c in rows:
            assert rows[c][0] == swept[c], c


def test_target_rate_is_the_smallest_capacity_reaching_it(tmp_path):
    rng = random.Random(5)
    trace = write_trace(tmp_path / "t.jsonl", tree_trace(rng, 150, 300, 12))
    out = tmp_path / "c.csv"
    (s,) = curve_json(trace, "--csv", out, "--target-rate", "0.2")
    rows = read_csv(out)
    need = 0.2 * s["blocks_requested"]
    c = s["target"]["capacity"]
    assert c is not None and rows[c][0] >= need
    assert all(rows[k][0] < need for k in rows if k < c)
    (s,) = curve_json(trace, "--target-rate", "1")  # nothing hits the first use of a block
    assert s["target"]["capacity"] is None


def test_marks_below_the_largest_request_are_exact(tmp_path):
    rng = random.Random(11)
    trace = write_trace(tmp_path / "t.jsonl", tree_trace(rng, 120, 150, 20))
    (s,) = curve_json(trace, "--mark", "1,2,3,5,8")
    got = {p["capacity"]: p["blocks_hit"] for p in s["points"]}
    for c in (1, 2, 3, 5, 8):
        assert got[c] == replay(trace, c)["blocks_hit"], c


def test_not_a_prefix_tree_is_said(tmp_path):
    # id 3 follows 1 in one request and 2 in another: two parents
    trace = write_trace(tmp_path / "t.jsonl", [(1024, [1, 3]), (1024, [2, 3]), (512, [1])])
    p = run("curve", trace)
    assert p.returncode == 0, p.stderr
    assert "NOT exact" in p.stdout and "request 2 gives a hash id a second parent" in p.stdout
    (s,) = curve_json(trace)
    assert not s["prefix_tree"] and not s["exact"]


def best_of_every_policy(reqs, cap):
    """The most prefix hits any eviction choice gets at `cap` blocks: after
    each request the cache may keep any of its blocks and of the cached
    blocks that fit beside it (a superset of what a pool policy can do)."""
    paths = [tuple(ids) for _, ids in reqs]

    @functools.lru_cache(maxsize=None)
    def best(t, cache):
        if t == len(paths):
            return 0
        p = paths[t]
        if len(p) > cap:
            return best(t + 1, cache)
        h = 0
        while h < len(p) and p[h] in cache:
            h += 1
        others = sorted(cache - set(p))
        top = 0
        for keep_others in range(0, min(len(others), cap - len(p)) + 1):
            for kept in itertools.combinations(others, keep_others):
                for drop in range(0, len(p) + 1):
                    for dropped in itertools.combinations(p, drop):
                        nxt = frozenset(kept) | (frozenset(p) - frozenset(dropped))
                        top = max(top, best(t + 1, nxt))
        return h + top

    return best(0, frozenset())


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("seed", range(12))
def test_optimal_equals_exhaustive_search_on_small_traces(tmp_path, seed, binary):
    rng = random.Random(100 + seed)
    reqs = tree_trace(rng, nodes=rng.randint(5, 7), requests=rng.randint(6, 9), max_depth=3)
    trace = write_trace(tmp_path / "t.jsonl", reqs)
    largest = max(len(ids) for _, ids in reqs)
    caps = list(range(largest, largest + 3))
    (s,) = curve_json(trace, "--optimal", "--mark", ",".join(map(str, caps)), binary=binary)
    got = {p["capacity"]: p for p in s["points"]}
    for c in caps:
        assert got[c]["optimal"]["blocks_hit"] == best_of_every_policy(reqs, c), c
        assert got[c]["optimal"]["blocks_hit"] >= got[c]["blocks_hit"]


def test_optimal_is_at_least_lru_and_reaches_unlimited(bundled_curve):
    _, s0 = bundled_curve
    (s,) = curve_json(BUNDLED, "--optimal", "--mark", "300,3000,30000")
    assert s["points"] and s["optimal_seconds"] >= 0
    prev = 0
    for p in s["points"]:
        o = p["optimal"]["blocks_hit"]
        assert p["blocks_hit"] <= o <= s0["unlimited"]["blocks_hit"]
        assert o >= prev  # more room never hurts the clairvoyant policy
        prev = o
    assert s["points"][-1]["optimal"]["blocks_hit"] == s0["unlimited"]["blocks_hit"]


def test_sampling_estimates_the_curve(bundled_curve):
    _, exact = bundled_curve
    (s,) = curve_json(BUNDLED, "--sample", "0.1", "--sample-check")
    assert not s["exact"] and s["sample_rate"] == pytest.approx(0.1, abs=1e-6)
    err = s["sample_error"]
    # hash-based and deterministic: these bounds hold on every run
    assert 0 <= err["mean_abs"] < 0.005 and err["mean_abs"] <= err["max_abs"] < 0.03
    assert s["unlimited"]["hit_rate"] == pytest.approx(exact["unlimited"]["hit_rate"], abs=0.02)


@pytest.mark.parametrize("rate", ["0.3", "0.1", "0.02"])
def test_sampled_results_hold_within_their_stated_bound(bundled_curve, tmp_path, rate):
    exact, _ = bundled_curve
    out = tmp_path / "s.csv"
    (s,) = curve_json(BUNDLED, "--sample", rate, "--csv", out)
    sample = s["sample"]
    assert sample["distinct_blocks"] >= 1000
    assert sample["resolved_from"] == pytest.approx(400 / float(rate), rel=1e-3)
    est = read_csv(out)
    top = est[max(est)][0]
    total = s["blocks_requested"]
    checked = 0
    for c, (hits, _) in exact.items():
        if c >= sample["resolved_from"]:
            assert abs(est.get(c, (top,))[0] - hits) / total <= sample["hit_rate_bound"]
            checked += 1
    assert checked > 1000
    text = ok("curve", BUNDLED, "--sample", rate, "--target-rate", "0.3")
    line = next(x for x in text.splitlines() if x.startswith("sample: "))
    assert f"{sample['distinct_blocks']} distinct blocks" in line
    assert f"+-{sample['hit_rate_bound']:.4f}" in line
    assert "estimated: hit rate +-" in text


@pytest.mark.parametrize("rate", ["1e-7", "1e-4"])
def test_too_small_a_sample_is_refused(rate):
    p = run("curve", BUNDLED, "--sample", rate, "--target-rate", "0.3")
    assert p.returncode == 1 and p.stdout == ""
    assert "fewer than the 1000" in p.stderr and "--sample" in p.stderr


def test_several_traces_get_a_trace_column(tmp_path):
    rng = random.Random(3)
    a = write_trace(tmp_path / "a.jsonl", tree_trace(rng, 30, 40, 6))
    b = write_trace(tmp_path / 'b,"x".jsonl', tree_trace(rng, 30, 40, 6))  # quoted in CSV
    out = tmp_path / "c.csv"
    assert len(curve_json(a, b, "--csv", out)) == 2
    lines = out.read_text().splitlines()
    assert lines[0] == "trace," + CSV_HEADER
    rows = list(csv.reader(lines[1:]))
    assert {r[0] for r in rows} == {str(a), str(b)} and {len(r) for r in rows} == {6}


@pytest.mark.skipif(not shutil.which("gnuplot"), reason="gnuplot not installed")
def test_plot_is_drawn(tmp_path):
    out = tmp_path / "c.png"
    ok("curve", BUNDLED, "--plot", out, "--mark", "1000,10000", "--optimal")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    ((), "expected at least one TRACE"),
    (("--target", "0"), "--target"),
    (("--target", "1.5"), "--target"),
    (("--target-rate", "x"), "--target-rate"),
    (("--target", "0.5", "--target-rate", "0.1"), "exclude each other"),
    (("--mark", "10,,20"), "--mark"),
    (("--mark", "0"), "--mark"),
    (("--sample", "0"), "--sample"),
    (("--plot", "x.pdf"), ".png or .svg"),
    (("--bogus",), "unknown"),
])
def test_bad_command_lines_exit_2(args, message):
    p = run("curve", *args, *([BUNDLED] if args else []))
    assert p.returncode == 2 and message in p.stderr and p.stdout == ""


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_bad_trace_names_file_and_line(tmp_path, binary):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1,
                               "hash_ids": [1]}) + "\n{\n")
    p = run("curve", bad, binary=binary)
    assert p.returncode == 1 and f"{bad}:2: bad JSON" in p.stderr
    assert "Sanitizer" not in p.stderr and p.stdout == ""
