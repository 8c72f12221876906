# SPDX-License-Identifier: Apache-2.0
"""kvpool.bench_compat runs its workloads through each original's public API.

No original is installed here, so a stand-in package re-exporting the
drop-in plays the original (its module paths are the original's): every
row must come out with both timings, and a system whose original cannot be
imported must be reported as skipped, not fail.  Timings are not asserted.
"""
import json
import os
import subprocess
import sys

PYDIR = os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python")

STAND_INS = {
    "vllm/v1/core/block_pool.py": "from kvpool.compat.vllm import *  # noqa\n",
    "atom/model_engine/block_pool.py": "from kvpool.compat.atom import *  # noqa\n",
    "vllm_mlx/paged_cache.py": "from kvpool.compat.vllm_mlx import *  # noqa\n",
    "veloxquant_mlx/memory/block_pool.py": "from kvpool.compat.veloxquant import *  # noqa\n",
}
# The checkout of each original under --originals DIR, by its package.
CHECKOUTS = {"vllm": "vllm", "atom": "atom", "vllm_mlx": "vllm-mlx", "veloxquant_mlx": "veloxquant"}


def stand_ins(root, rels, checkouts=False):
    """The stand-in originals rels under root (each in its checkout directory
    when checkouts), with the packages' __init__.py files."""
    for rel in rels:
        base = root / CHECKOUTS[rel.split("/")[0]] if checkouts else root
        f = base / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(STAND_INS[rel])
        for parent in f.relative_to(base).parents:
            if str(parent) != ".":
                (base / parent / "__init__.py").touch()


def run(cwd, *args, path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, path), os.path.abspath(PYDIR)]))
    out = subprocess.run([sys.executable, "-m", "kvpool.bench_compat", "--churn", "2000",
                          "--steps", "200", "--requests", "20", "--reps", "1", "--memory", "4096",
                          *args], env=env, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_rows_for_each_importable_original_and_a_skip_for_the_rest(tmp_path):
    stand_ins(tmp_path, [r for r in STAND_INS if not r.startswith("veloxquant")])
    rows = run(tmp_path, path=[tmp_path])
    timed = {(r["system"], r["workload"]) for r in rows if "original" in r}
    skipped = [(r["system"], r.get("workload")) for r in rows if "skipped" in r]
    try:  # ATOM's engine-side hashing needs python3-xxhash; without it that row is a skip
        import xxhash  # noqa: F401
        atom_e2e = {("atom", "prefix end to end")}
    except ImportError:
        atom_e2e = set()
        assert ("atom", "prefix end to end") in skipped
    assert timed == {("vllm", "churn"), ("vllm", "prefix pool part"), ("vllm", "prefix end to end"),
                     ("vllm", "memory"), ("atom", "churn"), ("atom", "prefix pool part"),
                     ("atom", "memory"), ("vllm_mlx", "churn free_block"),
                     ("vllm_mlx", "request churn, block tables"),
                     ("vllm_mlx", "prefix end to end"), ("vllm_mlx", "memory")} | atom_e2e
    assert all(r["original"] > 0 and r["kvpool"] > 0 for r in rows if "original" in r)
    assert [s for s in skipped if s[1] is None] == [("veloxquant", None)]


def test_originals_dir_times_fresh_processes_and_reports_every_round(tmp_path):
    """--originals DIR finds each original in its checkout under DIR (not on
    PYTHONPATH) and gives one ratio per round."""
    stand_ins(tmp_path, ["veloxquant_mlx/memory/block_pool.py", "vllm_mlx/paged_cache.py"],
              checkouts=True)
    rows = run(tmp_path, "--originals", str(tmp_path), "--reps", "2", "--memory", "0",
               "--system", "veloxquant")
    assert [r["workload"] for r in rows] == ["churn 1,024 blocks", "request churn"]
    for r in rows:
        assert len(r["rounds"]) == 2 and all(x > 0 for x in r["rounds"])
        assert r["original"] > 0 and r["kvpool"] > 0
    rows = run(tmp_path, "--originals", str(tmp_path / "none"), "--system", "vllm_mlx")
    assert rows == [{"system": "vllm_mlx", "skipped": rows[0]["skipped"]}]
