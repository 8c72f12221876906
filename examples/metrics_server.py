#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""examples/metrics_server.py — serve a pool's statistics at /metrics.

Two pools (one per model, as an engine serving two models has) admit a few
requests that share a system prompt, then prometheus_client serves their
statistics on a loopback port under vLLM's names (prefix "vllm:"), each
sample labelled with the model and the pool:

    PYTHONPATH=build/python /usr/bin/python3 examples/metrics_server.py --port 8000
    curl -s http://127.0.0.1:8000/metrics | grep prefix_cache

It prints the address once it serves, then keeps serving until stdin
closes or it is interrupted (tests/test_python_metrics.py scrapes it).
Needs Debian's python3-prometheus-client.
"""
import argparse
import sys

import prometheus_client

import kvpool
from kvpool.metrics import PoolCollector


def serve_traffic(pool: kvpool.Pool, requests: int) -> None:
    """Admit `requests` prompts of a 64-token system prompt plus a distinct
    question each, and finish them: every admission after the first finds
    the system prompt's four blocks cached."""
    system = list(range(1000, 1064))
    for r in range(requests):
        with pool.sequence(r) as seq:
            seq.admit(system + [r, r + 1, r + 2])


def main() -> int:
    """Build the pools, register the collector, serve until stdin closes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000, help="loopback port to serve on")
    args = ap.parse_args()

    collector = PoolCollector(prefix="vllm:")
    for model, requests in (("llama-3-8b", 4), ("qwen-2-7b", 2)):
        pool = kvpool.Pool(block_size=16, num_blocks=1024, prefix_caching=True)
        serve_traffic(pool, requests)
        collector.add(pool, model_name=model, pool="gpu0")
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)
    prometheus_client.start_http_server(args.port, addr="127.0.0.1", registry=registry)
    print(f"serving http://127.0.0.1:{args.port}/metrics", flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
