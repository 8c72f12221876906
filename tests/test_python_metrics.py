# SPDX-License-Identifier: Apache-2.0
"""kvpool.metrics.PoolCollector and examples/metrics_server.py: the
families and values are the pool's statistics (vLLM's names counted in
prompt tokens at admission), every sample carries its pool's labels, bad
registrations are refused and change nothing, promtool accepts the output,
and the example serves /metrics over HTTP on a loopback port.  Run by
scripts/run-tests with PYTHONPATH=build/python (see docs/PYTHON.md)."""
import os
import shutil
import socket
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

import pytest  # noqa: E402

prometheus_client = pytest.importorskip("prometheus_client")

import kvpool  # noqa: E402
from kvpool.metrics import PoolCollector  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SYSTEM = list(range(1000, 1064))  # four full blocks of 16
COLON_LINT = "metric names should not contain ':'"


def busy_pool(requests):
    """A pool where `requests` prompts of SYSTEM + 3 tokens were admitted
    and finished: 67 prompt tokens each, 64 of them cached after the first."""
    pool = kvpool.Pool(block_size=16, num_blocks=256, prefix_caching=True)
    for r in range(requests):
        with pool.sequence(r) as seq:
            seq.admit(SYSTEM + [r, r + 1, r + 2])
    return pool


def registry_of(collector):
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)
    return registry


def promtool(text, colon_names):
    """promtool check metrics: only the ':' naming lint is allowed, and only
    when the names carry a ':' prefix.  Skips without promtool."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool (Debian prometheus) not installed")
    res = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True)
    complaints = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    bad = [ln for ln in complaints if not (colon_names and COLON_LINT in ln)]
    assert not bad, "\n".join(bad)
    assert res.returncode == 0 or complaints


def test_values_are_the_pools_stats_with_labels():
    a, b = busy_pool(3), busy_pool(1)
    collector = PoolCollector(a, prefix="vllm:", model_name="m", pool="a")
    collector.add(b, model_name="m", pool="b")
    reg = registry_of(collector)
    la, lb = {"model_name": "m", "pool": "a"}, {"model_name": "m", "pool": "b"}
    assert reg.get_sample_value("vllm:prefix_cache_queries_total", la) == 3 * 67
    assert reg.get_sample_value("vllm:prefix_cache_hits_total", la) == 2 * 64
    assert reg.get_sample_value("vllm:prefix_cache_queries_total", lb) == 67
    assert reg.get_sample_value("vllm:prefix_cache_hits_total", lb) == 0
    st = a.stats()
    assert reg.get_sample_value("vllm:kv_cache_usage_perc", la) == pytest.approx(st["usage"])
    for key in ("blocks", "cached", "indexed"):
        assert reg.get_sample_value(f"vllm:{key}", la) == st[key]
    assert reg.get_sample_value("vllm:evictions_total", la) == st["evictions"]
    # Every sample of every family carries exactly one pool's labels.
    fams = list(collector.collect())
    assert len(fams) == len(st) + 3  # kvp_stats fields plus vLLM's three names
    for fam in fams:
        assert sorted(tuple(sorted(s.labels.items())) for s in fam.samples) == sorted(
            [tuple(sorted(la.items())), tuple(sorted(lb.items()))]), fam.name
    # A live pool's later traffic shows at the next scrape.
    with a.sequence(99) as seq:
        seq.admit(SYSTEM + [7])
    assert reg.get_sample_value("vllm:prefix_cache_hits_total", la) == 3 * 64


def test_drop_in_and_default_prefix():
    from kvpool.compat import vllm
    bp = vllm.BlockPool(64, True)
    collector = PoolCollector(bp, model_name="m")
    reg = registry_of(collector)
    assert reg.get_sample_value("kvpool_blocks", {"model_name": "m"}) == bp.pool.stats()["blocks"]
    text = prometheus_client.generate_latest(reg).decode()
    assert "# TYPE kvpool_prefix_cache_hits_total counter" in text
    promtool(text, colon_names=False)


def test_refused_registrations_change_nothing():
    a, b = busy_pool(1), busy_pool(1)
    collector = PoolCollector(a, model_name="m", pool="a")
    before = prometheus_client.generate_latest(registry_of(collector))
    bad = [
        ((b,), {"model_name": "m"}, ValueError),               # other label names
        ((b,), {"model_name": "m", "pool": "a"}, ValueError),  # same series twice
        ((a,), {"model_name": "m", "pool": "z"}, ValueError),  # pool already there
        ((b,), {"model_name": "m", "tier": "x"}, ValueError),  # reserved
        ((b,), {"model_name": "m", "group": "x"}, ValueError),
        ((b,), {"model_name": "m", "__x": "x"}, ValueError),
        ((b,), {"model_name": "m", "9x": "x"}, ValueError),
        (("not a pool",), {"model_name": "m", "pool": "c"}, TypeError),
    ]
    for args, labels, exc in bad:
        with pytest.raises(exc):
            collector.add(*args, **labels)
    assert prometheus_client.generate_latest(registry_of(collector)) == before
    with pytest.raises(ValueError):
        PoolCollector(a, prefix="9bad", model_name="m")
    with pytest.raises(ValueError):
        collector.remove(b)
    collector.remove(a)
    assert list(collector.collect()) == []


def test_closed_pool_is_skipped():
    a, b = busy_pool(1), busy_pool(2)
    collector = PoolCollector(a, pool="a")
    collector.add(b, pool="b")
    a.close()
    reg = registry_of(collector)
    assert reg.get_sample_value("kvpool_blocks", {"pool": "a"}) is None
    assert reg.get_sample_value("kvpool_prefix_cache_hits_total", {"pool": "b"}) == 64


def test_c_exposition_and_collector_pass_promtool():
    pool = busy_pool(2)
    promtool(pool.prometheus(), colon_names=False)
    promtool(pool.prometheus("vllm:"), colon_names=True)
    text = prometheus_client.generate_latest(registry_of(PoolCollector(pool, model_name="m"))).decode()
    promtool(text, colon_names=False)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_example_serves_metrics_over_http():
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "metrics_server.py"),
                             "--port", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"serving http://127.0.0.1:{port}/metrics", line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    llama = '{model_name="llama-3-8b",pool="gpu0"}'
    qwen = '{model_name="qwen-2-7b",pool="gpu0"}'
    lines = set(text.splitlines())
    assert f"vllm:prefix_cache_queries_total{llama} {4 * 67:.1f}" in lines
    assert f"vllm:prefix_cache_hits_total{llama} {3 * 64:.1f}" in lines
    assert f"vllm:prefix_cache_hits_total{qwen} {64:.1f}" in lines
    assert f"vllm:kv_cache_usage_perc{llama} 0.0" in lines
    promtool(text, colon_names=True)
