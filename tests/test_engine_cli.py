# SPDX-License-Identifier: Apache-2.0
"""test_engine_cli.py — end-to-end tests of `kvpool-engine` (examples/engine/).

Runs the built binary ($KVP_BUILD_DIR/kvpool-engine) on the first requests of
the bundled Mooncake trace, scaled down, and checks what the command line
promises: the `output` of every request is the same whatever --blocks and
--no-prefix-caching say (a small pool forces preemption and still gives the
same tokens, and so do a retire mid-run, speculative decoding and two
threads); the JSON lines and summary keys; the prompt tokens served from
cache equal `kvpool replay`'s token hits on the same trace, scaled; a
llama2.c checkpoint is loaded; bad command lines exit 2 and bad inputs exit 1
with a message, never a crash.
"""
import array
import gzip
import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
ENGINE = BUILD / "kvpool-engine"
KVPOOL = BUILD / "kvpool"
BUNDLED = ROOT / "data" / "mooncake_fast25_conversation_trace.jsonl.gz"
SMALL = ["--block-tokens", "4", "--block-size", "4", "--output-tokens", "12"]
SUMMARY_KEYS = {"requests", "prefill_tokens_computed", "prefill_tokens_cached",
                "decode_tokens", "preemptions", "seconds", "kvpool_seconds", "kvpool_share"}

pytestmark = pytest.mark.skipif(not ENGINE.exists(), reason=f"{ENGINE} not built")


def run(*args, binary=ENGINE, timeout=300):
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def engine_json(*args):
    """Run with --json; returns (request lines, summary)."""
    r = run("--trace", BUNDLED, "--json", *args)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert "summary" in lines[-1]
    return lines[:-1], lines[-1]["summary"]


def outputs(reqs):
    return [(q["id"], q["prompt_tokens"], q["output"]) for q in reqs]


def test_outputs_do_not_depend_on_pool_or_caching():
    base, s_on = engine_json("--requests", 24, *SMALL)
    assert [q["id"] for q in base] == list(range(24))
    assert SUMMARY_KEYS <= set(s_on)
    assert s_on["requests"] == 24
    assert s_on["prefill_tokens_cached"] > 0
    assert s_on["preemptions"] == 0
    assert all(len(q["output"]) == 12 for q in base)
    off, s_off = engine_json("--requests", 24, "--no-prefix-caching", *SMALL)
    assert outputs(off) == outputs(base)
    assert s_off["prefill_tokens_cached"] == 0
    assert all(q["cached_tokens"] == 0 for q in off)
    assert s_off["prefill_tokens_computed"] == s_on["prefill_tokens_computed"] + \
        s_on["prefill_tokens_cached"]
    # A pool that holds the longest request alone and no more: it says how
    # many blocks that is when it is too small.
    r = run("--trace", BUNDLED, "--requests", 24, "--blocks", 1, *SMALL)
    assert r.returncode == 1
    need = int(re.search(r"needs (\d+) blocks", r.stderr).group(1))
    for extra in ([], ["--no-prefix-caching"]):
        small, s_small = engine_json("--requests", 24, "--blocks", need, *extra, *SMALL)
        assert outputs(small) == outputs(base)
        assert s_small["preemptions"] > 0
    mid, s_mid = engine_json("--requests", 24, "--blocks", 2 * need, "--retire-at", 3,
                             "--retire", need, *SMALL)
    assert outputs(mid) == outputs(base)
    spec, s_spec = engine_json("--requests", 24, "--spec-tokens", 4, *SMALL)
    assert outputs(spec) == outputs(base)
    two, _ = engine_json("--requests", 24, "--threads", 2, "--blocks", need, *SMALL)
    assert outputs(two) == outputs(base)
    assert s_spec["spec_drafted"] > 0
    other, _ = engine_json("--requests", 24, "--seed", 1, *SMALL)
    assert outputs(other) != outputs(base)


def test_cached_tokens_match_replay(tmp_path):
    """With room for everything, the prompt tokens served from cache are the
    replay's token hits on the same requests, scaled to 4 tokens per id."""
    n = 60
    with gzip.open(BUNDLED, "rt") as f:
        head = [next(f) for _ in range(n)]
    trace = tmp_path / "head.jsonl"
    trace.write_text("".join(head))
    r = run("replay", trace, "--capacity", 0, "--json", binary=KVPOOL)
    assert r.returncode == 0, r.stderr
    replay = json.loads(r.stdout)
    _, s = engine_json("--requests", n, "--blocks", 100000, "--output-tokens", 1, *SMALL[:4])
    assert s["prefill_tokens_cached"] == replay["tokens_hit"] * 4 // 512
    assert s["prefill_tokens_cached"] > 0


def write_checkpoint(path, dim=16, hidden=32, layers=1, heads=2, kv_heads=1, vocab=40,
                     seq_len=4096):
    """A llama2.c checkpoint with a separate classifier and random weights."""
    head = dim // heads
    kv = head * kv_heads
    n = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv * dim +
         layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim +
         seq_len * head + vocab * dim)
    rng = random.Random(5)
    w = array.array("f", (rng.uniform(-0.5, 0.5) for _ in range(n)))
    hdr = array.array("i", [dim, hidden, layers, heads, kv_heads, -vocab, seq_len])
    with open(path, "wb") as f:
        hdr.tofile(f)
        w.tofile(f)


def test_checkpoint(tmp_path):
    ckpt = tmp_path / "tiny.bin"
    write_checkpoint(ckpt)
    reqs, s = engine_json("--requests", 8, "--model", ckpt, *SMALL)
    assert s["requests"] == 8
    assert all(0 <= t < 40 for q in reqs for t in q["output"])
    again, _ = engine_json("--requests", 8, "--model", ckpt, "--no-prefix-caching", *SMALL)
    assert outputs(again) == outputs(reqs)
    # One float short: refused with a reason.
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[:-4])
    r = run("--trace", BUNDLED, "--requests", 2, "--model", ckpt)
    assert r.returncode == 1
    assert "header says" in r.stderr


def test_checkpoint_size_is_checked_before_allocating(tmp_path):
    """A 28-byte header claiming about 3.6e9 weights (14 GB) is refused for its
    size, under a 1 GiB address-space limit that the weights could not fit."""
    import resource
    ckpt = tmp_path / "huge.bin"
    ckpt.write_bytes(array.array("i", [8192, 16384, 6, 64, 8, 32000, 4096]).tobytes())
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    r = subprocess.run([str(ENGINE), "--trace", str(BUNDLED), "--model", str(ckpt)],
                       capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert r.returncode == 1
    assert "28 bytes, its header says" in r.stderr
    assert "out of memory" not in r.stderr


@pytest.mark.parametrize("args, says", [
    (["--trace", BUNDLED, "--threads", "64"], "--threads: expected a thread count from 1 to 8"),
    (["--trace", BUNDLED, "--spec-tokens", "99999"],
     "--spec-tokens: expected a token count from 0 to 16"),
    (["--trace", BUNDLED, "--blocks", "0"], "--blocks: expected a block count from 1 to"),
    (["--trace", BUNDLED, "--requests", "0"], "--requests: expected a request count from 1"),
    ([], "a trace is required: kvpool-engine TRACE, or --trace FILE"),
    ([BUNDLED, "--trace", BUNDLED], "give the trace once"),
])
def test_usage_errors_name_the_option_and_its_limits(args, says):
    r = run(*args)
    assert r.returncode == 2
    first = r.stderr.splitlines()[0]
    assert first.startswith("kvpool-engine: ") and says in first, r.stderr
    assert "kvpool:" not in r.stderr


def test_errors_are_prefixed_with_the_engine_name(tmp_path):
    r = run("--trace", tmp_path / "missing.jsonl")
    assert r.returncode == 1
    assert r.stderr.startswith("kvpool-engine: ") and "kvpool:" not in r.stderr


def test_positional_trace_is_the_trace():
    a = run(BUNDLED, "--requests", 4, "--json", *SMALL)
    b = run("--trace", BUNDLED, "--requests", 4, "--json", *SMALL)
    assert a.returncode == 0, a.stderr
    strip = lambda out: [json.loads(x).get("output") for x in out.splitlines()]
    assert strip(a.stdout) == strip(b.stdout)


@pytest.mark.parametrize("args", [
    [],
    ["--trace"],
    ["--trace", BUNDLED, "--blocks", "0"],
    ["--trace", BUNDLED, "--blocks", "-3"],
    ["--trace", BUNDLED, "--bogus", "1"],
    ["--trace", BUNDLED, "--temperature", "x"],
    ["--trace", BUNDLED, "--budget", "4", "--max-running", "8"],
    ["--trace", BUNDLED, "--spec-tokens", "17"],
    ["--trace", BUNDLED, "--threads", "0"],
    ["--trace", BUNDLED, "--threads", "9"],
])
def test_usage_errors(args):
    r = run(*args)
    assert r.returncode == 2
    assert "kvpool-engine" in r.stderr


def test_input_errors(tmp_path):
    r = run("--trace", tmp_path / "missing.jsonl")
    assert r.returncode == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5}\n')
    r = run("--trace", bad)
    assert r.returncode == 1
    assert "bad.jsonl:1" in r.stderr
    r = run("--trace", BUNDLED, "--requests", 4, "--blocks", 3, *SMALL)
    assert r.returncode == 1
    assert "needs" in r.stderr
    r = run("--trace", BUNDLED, "--model", tmp_path / "none.bin")
    assert r.returncode == 1


def test_help():
    r = run("--help")
    assert r.returncode == 0
    assert "--no-prefix-caching" in r.stdout
