# SPDX-License-Identifier: Apache-2.0
"""kvpool.bench (python -m kvpool.bench) runs end to end: every workload and
way, well-formed rows, the same hit rate from the two native ways.  Timings
are printed, never asserted."""
import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

from kvpool import bench  # noqa: E402


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(argv) == 0
    return out.getvalue()


def test_quick_json_rows():
    rows = [json.loads(line) for line in run(["--quick", "--json"]).splitlines()]
    churn = {r["way"]: r for r in rows if r["workload"] == "churn"}
    prefix = {(r["way"], r["hash"]): r for r in rows if r["workload"] == "prefix"}
    assert set(churn) == {"vllm", "batch", "seq"}
    assert set(prefix) == {("vllm", "xxh3"), ("batch", "xxh3"), ("seq", "xxh3"),
                           ("seq", "sha256")}
    for r in rows:
        assert r["ns_per_block"] > 0
    assert all(r["blocks"] == 100_000 for r in churn.values())
    assert churn["vllm"]["loop_floor_ns_per_block"] > 0
    assert "loop_floor_ns_per_block" not in churn["batch"]
    # One workload, one caching rule: the native ways agree exactly; vLLM's
    # call pattern (its own free queue) lands close, not equal.
    rates = {k: r["hit_rate"] for k, r in prefix.items()}
    assert rates[("batch", "xxh3")] == rates[("seq", "xxh3")] == rates[("seq", "sha256")]
    assert 0.3 < rates[("seq", "xxh3")] < 0.9
    assert abs(rates[("vllm", "xxh3")] - rates[("seq", "xxh3")]) < 0.02
    for r in prefix.values():
        assert r["requests"] == 2000 and r["us_per_request"] > 0


def test_table_output_names_every_row():
    text = run(["--quick", "--workload", "churn"])
    lines = text.splitlines()
    assert [ln.split()[1] for ln in lines] == ["vllm", "batch", "seq"]
    assert "the loop alone" in lines[0]


def test_reps_must_be_at_least_one():
    for bad in ["0", "-1", "two"]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                bench.main(["--quick", "--reps", bad])
            except SystemExit as e:
                assert e.code == 2
            else:
                raise AssertionError(f"--reps {bad} was accepted")
        assert "--reps" in err.getvalue() and bad in err.getvalue()


def test_decode_rows_leave_the_same_pool():
    rows = [json.loads(line) for line in
            run(["--quick", "--json", "--workload", "decode"]).splitlines()]
    assert [r["way"] for r in rows] == ["take", "batch"]
    for r in rows:
        assert r["workload"] == "decode" and r["ns_per_block"] > 0
        assert r["blocks"] == 99_840  # 390 steps of 256 takes
    # Pool.take per block and Pool.take_each per step: the same blocks, the
    # same owners, the same final state.
    assert rows[0]["fingerprint"] == rows[1]["fingerprint"]
