# SPDX-License-Identifier: Apache-2.0
"""kvpool.bench — the churn and prefix workloads of docs/PERFORMANCE.md, from Python.

Run: ``PYTHONPATH=build/python /usr/bin/python3 -m kvpool.bench [--quick]
[--workload churn|prefix|decode|all] [--reps N]``.

Each workload runs three ways, to show what crossing into C costs:

- ``vllm``   one call per block through the vLLM drop-in
             (kvpool.compat.vllm.BlockPool: get_new_blocks(1) per block;
             for prefix, vLLM's own call pattern: get_cached_block per block,
             touch, get_new_blocks, cache_full_blocks, free_blocks);
- ``batch``  batch calls on the native Pool with caller-provided numpy
             buffers (churn: one alloc call per sequence for all its blocks
             and one free call; prefix: hash_tokens, lookup_many, claim_many,
             alloc_blocks, publish_many, free);
- ``seq``    request-level Sequence calls (churn: append one block's tokens
             per step, destroy at the end; prefix: admit + destroy).

The ``decode`` workload is a decode loop: 256 requests, each step one new
block for every request (a request's length drawn from 8 to 128 blocks;
when it is reached the request's blocks go with ``free_owner`` and a new
request takes its row).  Two ways: ``take``, one ``Pool.take(owner)`` call
per block, and ``batch``, one ``Pool.take_each`` call per step with numpy
owners, output and hint buffers.  Both rows report the pool's
``fingerprint`` at the end: the two ways must leave the same state.

The churn ``vllm`` row also reports ``loop_floor_ns_per_block``: the same
Python loop with two C builtins in place of the pool's calls, i.e. what the
interpreter costs before the pool does anything.

The operation sequences come from splitmix64 seeded with 42 (vectorised
with numpy: draw i is mix(42 + (i + 1) * gamma)) and are generated before
timing.  Each figure is the median of ``--reps`` timed repetitions after one
warm-up.  Results are printed as ns per block (allocated block for churn,
full prompt block for prefix) and µs per request.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from . import HINT_NONE, Pool, Sequence
from .compat.vllm import BlockPool

BS = 16
GAMMA = np.uint64(0x9E3779B97F4A7C15)


class SplitMix64:
    """splitmix64 (seed 42) drawn in vectorised chunks."""

    def __init__(self, seed: int = 42):
        self.i = 0
        self.seed = np.uint64(seed)

    def draw(self, n: int) -> np.ndarray:
        idx = np.arange(self.i + 1, self.i + 1 + n, dtype=np.uint64)
        self.i += n
        with np.errstate(over="ignore"):
            z = self.seed + idx * GAMMA
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def range(self, n: int, lo: int, hi: int) -> np.ndarray:
        return (np.uint64(lo) + self.draw(n) % np.uint64(hi - lo + 1)).astype(np.int64)

    def unit(self, n: int) -> np.ndarray:
        return (self.draw(n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def median_time(fn, reps: int) -> float:
    fn()  # warm-up
    return statistics.median(fn() for _ in range(reps))


# ---- churn ------------------------------------------------------------------

def churn_ops(total: int, live: int = 256, lo: int = 128, hi: int = 2048):
    """(picks, instance ids, blocks per instance, completes-flags) for `total` allocations."""
    rng = SplitMix64()
    picks = rng.range(total, 0, live - 1)
    targets = list((rng.range(total // 64 + live + 16, lo, hi) + BS - 1) // BS)
    ti = 0
    need = [0] * live
    inst = [0] * live
    have = [0] * live
    next_inst = 0
    for s in range(live):
        need[s] = int(targets[ti]); ti += 1
        inst[s] = next_inst; next_inst += 1
    op_inst = np.empty(total, dtype=np.int64)
    done = np.zeros(total, dtype=bool)
    sizes = {}
    for k, s in enumerate(picks.tolist()):
        op_inst[k] = inst[s]
        have[s] += 1
        if have[s] == need[s]:
            done[k] = True
            sizes[inst[s]] = need[s]
            if ti >= len(targets):
                targets.extend(list((rng.range(1024, lo, hi) + BS - 1) // BS))
            need[s] = int(targets[ti]); ti += 1
            have[s] = 0
            inst[s] = next_inst; next_inst += 1
    for s in range(live):
        sizes.setdefault(inst[s], need[s])
    return picks, op_inst, done, sizes


def churn_vllm(ops) -> float:
    bp = BlockPool(65536 + 1, False, BS)
    return churn_loop(ops, bp.get_new_blocks, bp.free_blocks)


def churn_loop_floor(ops) -> float:
    """The vllm way's Python loop with C builtins in place of the pool calls
    (a dict lookup returning a one-block list, and len): what the
    interpreter alone costs per block, for reading the vllm row."""
    one = [object()]
    return churn_loop(ops, {1: one}.get, len)


def churn_loop(ops, get, free) -> float:
    picks, _op_inst, done, _sizes = ops
    live = [[] for _ in range(256)]
    p, d = picks.tolist(), done.tolist()
    t0 = time.perf_counter()
    for k in range(len(p)):
        blocks = live[p[k]]
        blocks.append(get(1)[0])
        if d[k]:
            blocks.reverse()
            free(blocks)
            live[p[k]] = []
    t1 = time.perf_counter()
    return t1 - t0


def churn_batch(ops) -> float:
    """One alloc call per sequence instance (all its blocks), one free call at its end."""
    _picks, op_inst, done, sizes = ops
    pool = Pool(block_size=BS, num_blocks=65536)
    bufs = {}
    inst_l, d = op_inst.tolist(), done.tolist()
    started = set()
    alloc, free = pool.alloc_blocks, pool.free
    # The calls in op order: 'a' at an instance's first op, 'f' at its last.
    calls = []
    for k in range(len(inst_l)):
        i = inst_l[k]
        if i not in started:
            started.add(i)
            calls.append((0, i, sizes[i]))
        if d[k]:
            calls.append((1, i, 0))
    for _, i, n in calls:
        if _ == 0:
            bufs[i] = np.zeros(n, dtype=np.uint32)
            bufs[i].fill(1)  # touched now: no page faults inside the timing
    total_blocks = sum(n for c, _, n in calls if c == 0)
    # Each call bound up front, so the timed loop is the calls themselves.
    bound = [(alloc, (n, None, 0, 0, bufs[i])) if c == 0 else (free, (bufs[i],))
             for c, i, n in calls]
    t0 = time.perf_counter()
    for fn, args in bound:
        fn(*args)
    t1 = time.perf_counter()
    # Sequences still live at the end were allocated whole but never freed:
    # scale to the op count, which is what the other two ways are divided by.
    return (t1 - t0) * len(inst_l) / total_blocks


def churn_seq(ops) -> float:
    picks, op_inst, done, _sizes = ops
    pool = Pool(block_size=BS, num_blocks=65536, prefix_caching=False)
    toks = np.arange(BS, dtype=np.uint32)
    seqs = [None] * 256
    p, inst_l, d = picks.tolist(), op_inst.tolist(), done.tolist()
    t0 = time.perf_counter()
    for k in range(len(p)):
        s = seqs[p[k]]
        if s is None:
            s = seqs[p[k]] = Sequence(pool, inst_l[k])
        s.append(toks)
        if d[k]:
            s.destroy()
            seqs[p[k]] = None
    t1 = time.perf_counter()
    return t1 - t0


# ---- prefix -----------------------------------------------------------------

def prefix_requests(n_req: int):
    rng = SplitMix64()
    system = (rng.draw(64 * 1024) % np.uint64(32000)).astype(np.uint32).reshape(64, 1024)
    w = 1.0 / np.arange(1, 65, dtype=np.float64) ** 1.1
    cdf = np.cumsum(w / w.sum())
    choice = np.minimum(np.searchsorted(cdf, rng.unit(n_req), side="right"), 63)
    lens = rng.range(n_req, 256, 1024)
    reqs = []
    for r in range(n_req):
        suffix = (rng.draw(int(lens[r])) % np.uint64(32000)).astype(np.uint32)
        reqs.append(np.concatenate([system[choice[r]], suffix]))
    return reqs


def full_blocks(reqs) -> int:
    return sum(len(t) // BS for t in reqs)


class _Req:
    __slots__ = ("block_hashes", "all_token_ids", "request_id", "lora_request")


def vllm_blocks_for(get_cached, touch, get_new, n, hashes, gids):
    """A request of n tokens admitted as vLLM's KVCacheManager does it, given
    a BlockPool's get_cached_block, touch and get_new_blocks: the cached
    prefix (at most (n - 1) // BS full blocks, as vLLM leaves the last token
    to compute) touched, then new blocks for the rest.  Returns (blocks,
    number of cached blocks)."""
    computed = []
    for i in range((n - 1) // BS):
        b = get_cached(hashes[i], gids)
        if b is None:
            break
        computed.append(b[0])
    touch(computed)
    return computed + get_new((n + BS - 1) // BS - len(computed)), len(computed)


def prefix_vllm(reqs, alg="xxh3"):
    bp = BlockPool(16384, True, BS)
    hasher = Pool(block_size=BS, num_blocks=0, hash_alg=alg)
    get_cached, touch, get_new = bp.get_cached_block, bp.touch, bp.get_new_blocks
    cache, free, hash_tokens = bp.cache_full_blocks, bp.free_blocks, hasher.hash_tokens
    gids = [0]
    hits = queried = 0
    t0 = time.perf_counter()
    for rid, toks in enumerate(reqs):
        n = len(toks)
        h = hash_tokens(toks)
        nfull = n // BS
        hashes = [h[i * 32:(i + 1) * 32] for i in range(nfull)]
        cap = (n - 1) // BS
        blocks, nhit = vllm_blocks_for(get_cached, touch, get_new, n, hashes, gids)
        req = _Req()
        req.block_hashes = hashes
        req.all_token_ids = toks
        req.request_id = rid
        req.lora_request = None
        cache(req, blocks, nhit, nfull, BS, 0)
        blocks.reverse()
        free(blocks)
        hits += nhit
        queried += cap
    t1 = time.perf_counter()
    return t1 - t0, hits / max(queried, 1)


def prefix_batch(reqs, alg="xxh3"):
    pool = Pool(block_size=BS, num_blocks=16384, hash_alg=alg)
    ids = np.empty(1024, dtype=np.uint32)
    hashes = bytearray(32 * 1024)
    hv = memoryview(hashes)
    hash_tokens, lookup_many, claim_many = pool.hash_tokens, pool.lookup_many, pool.claim_many
    alloc, publish_many, free = pool.alloc_blocks, pool.publish_many, pool.free
    hits = queried = 0
    t0 = time.perf_counter()
    for toks in reqs:
        n = len(toks)
        nfull = hash_tokens(toks, None, hv)
        cap = (n - 1) // BS
        nhit = lookup_many(hv[:cap * 32], ids)
        claim_many(ids[:nhit])
        nb = (n + BS - 1) // BS
        alloc(nb - nhit, None, 0, 0, ids[nhit:])
        publish_many(ids[nhit:nfull], hv[nhit * 32:nfull * 32])
        free(ids[nb - 1::-1].copy() if nb else ids[:0])
        hits += nhit
        queried += cap
    t1 = time.perf_counter()
    return t1 - t0, hits / max(queried, 1)


def prefix_seq(reqs, alg="xxh3"):
    pool = Pool(block_size=BS, num_blocks=16384, hash_alg=alg)
    t0 = time.perf_counter()
    for rid, toks in enumerate(reqs):
        s = Sequence(pool, rid)
        s.admit(toks)
        s.destroy()
    t1 = time.perf_counter()
    st = pool.stats()
    return t1 - t0, st["prefix_hits"] / max(st["prefix_queries"], 1)


def positive_int(text):
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# ---- decode -----------------------------------------------------------------

def decode_ops(total: int, live: int = 256, lo: int = 8, hi: int = 128):
    """(steps, initial owners, per step the (row, new owner) pairs whose
    request ends after that step) for about `total` takes."""
    rng = SplitMix64()
    steps = total // live
    lens = iter(rng.range(total // lo + live, lo, hi).tolist())  # every request ends by then
    left = [next(lens) for _ in range(live)]
    next_owner = live + 1
    ends = []
    for _ in range(steps):
        done = []
        for row in range(live):
            left[row] -= 1
            if left[row] == 0:
                done.append((row, next_owner))
                next_owner += 1
                left[row] = next(lens)
        ends.append(done)
    return steps, list(range(1, live + 1)), ends


def decode_take(ops):
    steps, initial, ends = ops
    pool = Pool(block_size=BS, num_blocks=65536)
    owners = list(initial)
    take, free_owner = pool.take, pool.free_owner
    t0 = time.perf_counter()
    for step in range(steps):
        for o in owners:
            take(o)
        for row, new in ends[step]:
            free_owner(owners[row])
            owners[row] = new
    t1 = time.perf_counter()
    return t1 - t0, pool.fingerprint()


def decode_batch(ops):
    steps, initial, ends = ops
    pool = Pool(block_size=BS, num_blocks=65536)
    owners = list(initial)
    own = np.array(initial, dtype=np.uint64)
    hints = np.full(len(initial), HINT_NONE, dtype=np.uint32)
    out = np.empty(len(initial), dtype=np.uint32)
    take_each, free_owner = pool.take_each, pool.free_owner
    t0 = time.perf_counter()
    for step in range(steps):
        take_each(own, out, hints)
        for row, new in ends[step]:
            free_owner(owners[row])
            owners[row] = new
            own[row] = new
    t1 = time.perf_counter()
    return t1 - t0, pool.fingerprint()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvpool.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["churn", "prefix", "decode", "all"], default="all")
    ap.add_argument("--quick", action="store_true", help="shrink every workload (for tests)")
    ap.add_argument("--reps", type=positive_int, default=5,
                    help="timed repetitions after one warm-up, 1 or more (default 5)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args(argv)
    reps = 1 if a.quick else a.reps
    rows = []

    def emit(row):
        rows.append(row)
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            extra = ""
            if "loop_floor_ns_per_block" in row:
                extra = f"  (the loop alone: {row['loop_floor_ns_per_block']:.1f} ns/block)"
            if "us_per_request" in row:
                extra = f"  {row['us_per_request']:8.2f} us/request  hit_rate {row['hit_rate']:.3f}"
            print(f"{row['workload']:7s} {row['way']:6s} {row.get('hash', ''):7s}"
                  f" {row['ns_per_block']:9.1f} ns/block{extra}", flush=True)

    if a.workload in ("churn", "all"):
        total = 100_000 if a.quick else 1_000_000
        ops = churn_ops(total)
        for way, fn in (("vllm", churn_vllm), ("batch", churn_batch), ("seq", churn_seq)):
            t = median_time(lambda: fn(ops), reps)
            row = {"workload": "churn", "way": way, "ns_per_block": t / total * 1e9,
                   "blocks": total}
            if way == "vllm":
                row["loop_floor_ns_per_block"] = median_time(
                    lambda: churn_loop_floor(ops), reps) / total * 1e9
            emit(row)
    if a.workload in ("prefix", "all"):
        n_req = 2000 if a.quick else 20000
        reqs = prefix_requests(n_req)
        nfb = full_blocks(reqs)
        for way, fn, alg in (("vllm", prefix_vllm, "xxh3"), ("batch", prefix_batch, "xxh3"),
                             ("seq", prefix_seq, "xxh3"), ("seq", prefix_seq, "sha256")):
            res = []
            fn(reqs, alg)
            for _ in range(reps):
                res.append(fn(reqs, alg))
            t = statistics.median(r[0] for r in res)
            emit({"workload": "prefix", "way": way, "hash": alg, "ns_per_block": t / nfb * 1e9,
                  "us_per_request": t / n_req * 1e6, "hit_rate": res[0][1], "requests": n_req})
    if a.workload in ("decode", "all"):
        ops = decode_ops(100_000 if a.quick else 1_000_000)
        takes = ops[0] * len(ops[1])
        for way, fn in (("take", decode_take), ("batch", decode_batch)):
            res = []
            fn(ops)
            for _ in range(reps):
                res.append(fn(ops))
            t = statistics.median(r[0] for r in res)
            emit({"workload": "decode", "way": way, "ns_per_block": t / takes * 1e9,
                  "blocks": takes, "fingerprint": res[0][1]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
