# SPDX-License-Identifier: Apache-2.0
"""test_cli_demo.py — `make demo` (scripts/demo) reads as a report.

Runs the demo's own commands (the build skipped, the built binaries used)
on the first requests of the bundled trace with the quick benchmark, and
checks the report's shape: every line at most 100 columns, the trace named
once, a one-line conclusion ("-> ...") under each of its three tables, and
no benchmark targets beside a --quick run, which cannot show them.
"""
import gzip
import os
import subprocess

import pytest

from test_cli import BUILD, BUNDLED, KVPOOL, ROOT

ENGINE = BUILD / "kvpool-engine"
pytestmark = pytest.mark.skipif(not (KVPOOL.exists() and ENGINE.exists()),
                                reason="kvpool or kvpool-engine not built")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    trace = d / "head.jsonl"
    with gzip.open(BUNDLED, "rt") as f:
        trace.write_text("".join(next(f) for _ in range(300)))
    env = dict(os.environ, DEMO_SKIP_BUILD="1", DEMO_TRACE=str(trace), DEMO_BENCH="quick",
               DEMO_CAPACITIES="100,1000", DEMO_ENGINE_REQUESTS="40")
    p = subprocess.run([str(ROOT / "scripts" / "demo"), str(BUILD)], capture_output=True,
                       text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return trace, p.stdout


def test_lines_fit_in_100_columns(report):
    _, out = report
    too_wide = [line for line in out.splitlines() if len(line) > 100]
    assert not too_wide, too_wide
    assert not [line for line in out.splitlines() if line != line.rstrip()]


def test_the_trace_is_named_once(report):
    trace, out = report
    assert out.count(trace.name) == 1


def test_each_table_has_a_conclusion(report):
    _, out = report
    parts = out.split("\n== ")[1:]
    assert [p.split()[0] for p in parts] == ["2/4", "3/4", "4/4"]
    for part in parts:
        assert sum(line.startswith("   -> ") for line in part.splitlines()) == 1, part


def test_a_quick_bench_shows_no_targets(report):
    _, out = report
    bench = out.split("\n== 4/4")[1]
    assert "met" not in bench and "target" not in bench.split("->")[0].lower()
    assert "too little to hold to the targets" in bench
