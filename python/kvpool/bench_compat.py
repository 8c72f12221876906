# SPDX-License-Identifier: Apache-2.0
"""kvpool.bench_compat — each drop-in against its original, side by side.

Run: ``PYTHONPATH=<dir with the originals> /usr/bin/python3 -m kvpool.bench_compat
[--system vllm|atom|vllm_mlx|veloxquant|all] [--churn N] [--steps N] [--requests N] [--reps N]
[--memory N]``, or with ``--originals DIR`` instead of the PYTHONPATH entry.

The originals are imported under their own module paths
(``vllm.v1.core.block_pool``, ``atom.model_engine.block_pool``,
``vllm_mlx.paged_cache``, ``veloxquant_mlx.memory.block_pool``); a system whose
original is not importable is skipped.  Both sides run the same operation
sequence through the original's public API, the way its engine calls it.
Without ``--originals`` both run in one process, alternating original and
drop-in per repetition after a warm-up.  With ``--originals DIR`` each
system's original comes from its checkout, ``DIR/vllm``, ``DIR/atom``,
``DIR/vllm-mlx`` or ``DIR/veloxquant``, and every timing is one run in a
fresh interpreter (the fastest of ``--inner`` runs in it), the original
and the drop-in interleaved (the one that goes first alternates per
round), ``--reps`` rounds.  Each row prints the
ratio of the medians (``speedup``) and each round's ratio (``rounds``).
Rows:

- ``churn`` (docs/PERFORMANCE.md's churn: 65,536 blocks, 256 live sequences of
  [128, 2048] tokens at 16 per block): vLLM ``get_new_blocks(1)`` per block
  and ``free_blocks`` of a finished sequence's blocks, last first (no prefix
  caching); ATOM ``pop()`` + ``allocate(id)`` per
  block, ``free(id)`` for each block of a finished sequence, last first;
  vllm-mlx ``allocate_block()`` per block and ``free_block(id)`` for each
  block at the end (its ``free_blocks`` method is shadowed by the
  ``free_blocks`` count property in the original, so ``free_block`` is how
  blocks are given back).  Result: ns per allocated block.
- ``request churn`` (the engines' own pattern, 65,536 blocks, 256 live
  requests, ``--steps`` steps): each step the drawn request asks for 1 to 16
  blocks and then finishes with probability 1/16; VeloxQuant
  ``allocate("kv", 16 * k, owner)`` and ``free_all(owner)``; vllm-mlx as its
  BlockAwarePrefixCache: ``create_block_table(rid)``, per block
  ``allocate_block()`` and ``add_block_to_table(table, block, 16)``,
  ``delete_block_table(rid)``.  What is live at the end is freed inside the
  timing.  Result: ns per allocated block.
- ``prefix`` (docs/PERFORMANCE.md's prefix: 16,384 blocks, Zipf-chosen 1,024-token
  system prompts plus a unique suffix): vLLM's admission per request as its
  ``KVCacheManager`` drives the pool — ``get_cached_block(hash, [0])`` per
  full block while it hits, ``touch`` the hits, ``get_new_blocks`` the rest,
  ``cache_full_blocks`` with the request's hashes, ``free_blocks`` of every
  block last first; the 32-byte chained hashes are computed before timing,
  so this is the pool part.  ATOM's admission per request —
  ``lookup(h)`` and a token compare on ``block(id).token_ids`` per full block
  while it hits, ``claim`` the hits, ``pop`` + ``allocate`` the rest,
  ``publish`` the new full blocks, then ``free`` every block; the chained
  integer hashes are computed before timing, so this is the pool part.
  vllm-mlx: ``get_computed_blocks(tokens)``, ``touch``, ``get_new_blocks``,
  ``cache_full_blocks``, ``free_block`` per block — its own SHA-256 hashing included
  (end to end, as its manager hashes inside these calls).  Result: µs per
  request.
- ``prefix end to end`` for vLLM and ATOM: the pool part with the engine's
  own hashing of each request's blocks inside the timing, each side through
  its module's public API.  vLLM: the request block hasher's
  ``hash_block_tokens(sha256, parent, block tokens, None)`` per full block
  (vLLM's default ``sha256``, SHA-256 of the pickle), the original's as vLLM
  writes it, the drop-in's ``kvpool.compat.vllm.hash_block_tokens`` (which
  ``install()`` puts in vLLM's ``kv_cache_utils``); then the pool part's
  calls.  ATOM: its ``BlockManager`` admission — the tokens an
  ``array('i')``, each full block's chained ``compute_hash(block, parent)``
  (ATOM's: XXH64 of the parent's 8 bytes and the tokens as int64, with
  python3-xxhash and numpy; the drop-in's: ``kvpool.compat.atom.compute_hash``,
  same values), ``lookup`` and a token compare while it hits, ``claim`` the
  hits, ``pop`` + ``allocate`` + ``publish`` the rest, ``free`` them all.
  Without python3-xxhash the ATOM row is reported as skipped.
- ``memory``: resident bytes per block of a pool of ``--memory`` blocks
  (default 1,048,576) once every block has been handed out and given back
  through the public API (so pages a pool allocates but has not touched yet
  count too), each measured in a fresh child process.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from .bench import BS, SplitMix64, churn_ops, prefix_requests, vllm_blocks_for

ORIGINALS = {"vllm": "vllm.v1.core.block_pool", "atom": "atom.model_engine.block_pool", "vllm_mlx": "vllm_mlx.paged_cache",
             "veloxquant": "veloxquant_mlx.memory.block_pool"}
DROPINS = {"vllm": "kvpool.compat.vllm", "atom": "kvpool.compat.atom", "vllm_mlx": "kvpool.compat.vllm_mlx",
           "veloxquant": "kvpool.compat.veloxquant"}


def _loop(ops, get, done_fn) -> float:
    picks, _inst, done, _sizes = ops
    live = [[] for _ in range(256)]
    p, d = picks.tolist(), done.tolist()
    t0 = time.perf_counter()
    for k in range(len(p)):
        blocks = live[p[k]]
        blocks.append(get())
        if d[k]:
            done_fn(blocks)
            live[p[k]] = []
    return time.perf_counter() - t0


def churn_vllm(mod, ops) -> float:
    bp = mod.BlockPool(65536 + 1, False, BS)
    get_new, free_blocks = bp.get_new_blocks, bp.free_blocks

    def get():
        return get_new(1)[0]

    def release(blocks):
        blocks.reverse()
        free_blocks(blocks)
    return _loop(ops, get, release)


def churn_atom(mod, ops) -> float:
    pool = mod.BlockPool(65536)
    pop, allocate, free = pool.pop, pool.allocate, pool.free

    def get():
        b = pop()
        allocate(b)
        return b

    def release(blocks):
        for b in reversed(blocks):
            free(b)
    return _loop(ops, get, release)


def churn_mlx_free_block(mod, ops) -> float:
    mgr = mod.PagedCacheManager(block_size=BS, max_blocks=65536 + 1)
    free = mgr.free_block

    def release(blocks):
        for b in reversed(blocks):
            free(b.block_id)
    return _loop(ops, mgr.allocate_block, release)


def churn_veloxquant(mod, ops) -> float:
    """A small pool's churn, 1,024 blocks and 8 live sequences:
    allocate(BS tokens) per block to the sequence's owner, free_all(owner)
    when it is done."""
    pool = mod.BlockPoolAllocator(mod.PoolConfig(block_size=BS, n_blocks=1024, separate_kv=False))
    allocate, free_all = pool.allocate, pool.free_all
    picks, inst, done, _sizes = ops
    p, o, d = picks.tolist(), inst.tolist(), done.tolist()
    t0 = time.perf_counter()
    for k in range(len(p)):
        allocate("kv", BS, o[k])
        if d[k]:
            free_all(o[k])
    return time.perf_counter() - t0


LIVE_REQUESTS = 256  # the request churn's live requests


def request_churn_ops(steps: int, live: int = LIVE_REQUESTS):
    """The engines' request churn: per step (the live request drawn, the
    blocks it asks for, 1 to 16, whether it then finishes, probability 1/16)."""
    rng = SplitMix64(7)
    return (rng.range(steps, 0, live - 1).tolist(), rng.range(steps, 1, 16).tolist(),
            (rng.unit(steps) < 1 / 16).tolist())


def churn_veloxquant_requests(mod, ops) -> float:
    """VeloxQuant's engine churn on a 65,536-block shared pool: the drawn
    request calls ``allocate("kv", 16 * k, owner)``, a finishing request
    ``free_all(owner)`` and its slot gets a new owner; the requests still
    live at the end are freed inside the timing too."""
    pool = mod.BlockPoolAllocator(mod.PoolConfig(block_size=BS, n_blocks=65536, separate_kv=False))
    allocate, free_all = pool.allocate, pool.free_all
    picks, ks, done = ops
    owners = list(range(LIVE_REQUESTS))
    nxt = len(owners)
    t0 = time.perf_counter()
    for p, k, d in zip(picks, ks, done):
        owner = owners[p]
        allocate("kv", BS * k, owner)
        if d:
            free_all(owner)
            owners[p] = nxt
            nxt += 1
    for owner in owners:
        free_all(owner)
    return time.perf_counter() - t0


def churn_mlx_tables(mod, ops) -> float:
    """vllm-mlx's churn as its BlockAwarePrefixCache drives the manager
    (65,536 blocks): ``create_block_table(rid)`` when a request starts,
    ``allocate_block()`` and ``add_block_to_table(table, block, 16)`` per
    block, ``delete_block_table(rid)`` when it finishes; the tables still
    live at the end are deleted inside the timing too."""
    mgr = mod.PagedCacheManager(block_size=BS, max_blocks=65536)
    create, delete = mgr.create_block_table, mgr.delete_block_table
    alloc, add = mgr.allocate_block, mgr.add_block_to_table
    picks, ks, done = ops
    t0 = time.perf_counter()
    tables = [create(str(i)) for i in range(LIVE_REQUESTS)]
    nxt = len(tables)
    for p, k, d in zip(picks, ks, done):
        table = tables[p]
        for _ in range(k):
            add(table, alloc(), BS)
        if d:
            delete(table.request_id)
            tables[p] = create(str(nxt))
            nxt += 1
    for table in tables:
        delete(table.request_id)
    return time.perf_counter() - t0


class _Request:
    """The two fields of a vLLM Request that BlockPool.cache_full_blocks reads."""
    __slots__ = ("block_hashes", "all_token_ids")


def vllm_prefix_inputs(reqs):
    """Per request: (its 32-byte chained block hashes, its token list)."""
    import hashlib
    out = []
    for toks in reqs:
        hashes, parent = [], b""
        for i in range(len(toks) // BS):
            parent = hashlib.blake2b(parent + toks[i * BS:(i + 1) * BS].tobytes(),
                                     digest_size=32).digest()
            hashes.append(parent)
        out.append((hashes, toks.tolist()))
    return out


def prefix_vllm(mod, inputs) -> float:
    """vLLM's prefix-caching call pattern for each (hashes, tokens) that
    inputs yields; the time from the first draw to the last free."""
    bp = mod.BlockPool(16384, True, BS)
    get_cached, touch, get_new = bp.get_cached_block, bp.touch, bp.get_new_blocks
    cache, free_blocks = bp.cache_full_blocks, bp.free_blocks
    gids = [0]
    t0 = time.perf_counter()
    for hashes, toks in inputs:
        blocks, nhit = vllm_blocks_for(get_cached, touch, get_new, len(toks), hashes, gids)
        req = _Request()
        req.block_hashes, req.all_token_ids = hashes, toks
        cache(req, blocks, nhit, len(hashes), BS, 0)
        blocks.reverse()
        free_blocks(blocks)
    return time.perf_counter() - t0


def atom_prefix_inputs(reqs):
    """Per request: (per full block (hash int, token list), number of blocks)."""
    import hashlib
    out = []
    for toks in reqs:
        n = len(toks)
        full = []
        parent = b""
        for i in range(n // BS):
            blk = toks[i * BS:(i + 1) * BS]
            d = hashlib.blake2b(parent + blk.tobytes(), digest_size=8).digest()
            full.append((int.from_bytes(d, "little"), blk.tolist()))
            parent = d
        out.append((full, (n + BS - 1) // BS, (n - 1) // BS))
    return out


def prefix_atom(mod, inputs) -> float:
    pool = mod.BlockPool(16384)
    lookup, block, claim, pop = pool.lookup, pool.block, pool.claim, pool.pop
    allocate, publish, free = pool.allocate, pool.publish, pool.free
    t0 = time.perf_counter()
    for full, nblocks, cap in inputs:
        table = []
        for i in range(cap):
            h, toks = full[i]
            bid = lookup(h)
            if bid < 0 or block(bid).token_ids != toks:
                break
            claim(bid)
            table.append(bid)
        for i in range(len(table), nblocks):
            bid = pop()
            allocate(bid)
            if i < len(full):
                h, toks = full[i]
                publish(bid, h, toks)
            table.append(bid)
        for bid in reversed(table):
            free(bid)
    return time.perf_counter() - t0


def vllm_engine_hashing():
    """vLLM's engine-side block hashing, restated for the measurement:
    ``(sha256, hash_block_tokens)`` — its default hash function (SHA-256 of
    the pickle at the highest protocol) and its ``hash_block_tokens`` (the
    hash of (parent hash, the block's tokens as a tuple, extra keys), the
    first block's parent being NONE_HASH)."""
    import hashlib
    import pickle
    none_hash = hashlib.sha256(b"kvpool bench NONE_HASH").digest()
    digest, dumps, proto = hashlib.sha256, pickle.dumps, pickle.HIGHEST_PROTOCOL

    def sha256(obj):
        return digest(dumps(obj, protocol=proto)).digest()

    def hash_block_tokens(hash_function, parent_block_hash, curr_block_token_ids, extra_keys=None):
        if not parent_block_hash:
            parent_block_hash = none_hash
        return hash_function((parent_block_hash, tuple(curr_block_token_ids), extra_keys))
    return sha256, hash_block_tokens


def request_block_hasher(sha256, hash_block_tokens):
    """tokens -> their full blocks' hashes, as vLLM's request block hasher
    makes them (one hash_block_tokens call per block, no extra keys)."""
    def block_hashes(toks):
        out, parent = [], None
        for i in range(len(toks) // BS):
            parent = hash_block_tokens(sha256, parent, toks[i * BS:(i + 1) * BS], None)
            out.append(parent)
        return out
    return block_hashes


def prefix_vllm_e2e(mod, reqs, block_hashes) -> float:
    """prefix_vllm with the engine's hashing of each request's blocks
    (``block_hashes``, as its Request computes them) inside the timing: the
    hashes are made as the loop draws each request."""
    lists = [t.tolist() for t in reqs]
    return prefix_vllm(mod, ((block_hashes(toks), toks) for toks in lists))


def atom_engine_hash():
    """ATOM's ``BlockManager.compute_hash``, restated for the measurement:
    XXH64 of the parent hash's 8 little-endian bytes (none for the first
    block) and the block's tokens as int64; None without python3-xxhash."""
    try:
        import xxhash
    except ImportError:
        return None
    xxh64, asarray, int64 = xxhash.xxh64, np.asarray, np.int64

    def compute_hash(token_ids, prefix=-1):
        h = xxh64()
        if prefix != -1:
            h.update(prefix.to_bytes(8, "little"))
        h.update(asarray(token_ids, dtype=int64).tobytes())
        return h.intdigest()
    return compute_hash


def prefix_atom_e2e(mod, reqs, compute_hash) -> float:
    """prefix_atom with ATOM's engine-side hashing inside the timing, as its
    BlockManager admits a request: the tokens an ``array('i')`` (ATOM's
    Sequence keeps them so), each full block's chained hash computed with
    ``compute_hash`` as the admission walks the blocks, then the same pool
    calls as prefix_atom."""
    from array import array
    pool = mod.BlockPool(16384)
    lookup, block, claim, pop = pool.lookup, pool.block, pool.claim, pool.pop
    allocate, publish, free = pool.allocate, pool.publish, pool.free
    seqs = [array("i", t.tolist()) for t in reqs]
    t0 = time.perf_counter()
    for toks in seqs:
        n = len(toks)
        nfull, cap = n // BS, (n - 1) // BS
        table, h, miss = [], -1, False
        for i in range((n + BS - 1) // BS):
            blk = toks[i * BS:(i + 1) * BS]
            if i < nfull:
                h = compute_hash(blk, h)
            if not miss and i < cap:
                bid = lookup(h)
                if bid >= 0 and block(bid).token_ids == blk:
                    claim(bid)
                    table.append(bid)
                    continue
                miss = True
            bid = pop()
            allocate(bid)
            if i < nfull:
                publish(bid, h, blk)
            table.append(bid)
        for bid in reversed(table):
            free(bid)
    return time.perf_counter() - t0


def prefix_mlx(mod, reqs) -> float:
    mgr = mod.PagedCacheManager(block_size=BS, max_blocks=16384)
    lists = [t.tolist() for t in reqs]
    free = mgr.free_block
    t0 = time.perf_counter()
    for toks in lists:
        n = len(toks)
        hit, _ = mgr.get_computed_blocks(toks[:((n - 1) // BS) * BS])
        mgr.touch(hit)
        blocks = hit + mgr.get_new_blocks((n + BS - 1) // BS - len(hit))
        mgr.cache_full_blocks(blocks, toks, len(hit), n // BS)
        for b in reversed(blocks):
            free(b.block_id)
    return time.perf_counter() - t0


MEMORY_CHILD = r"""
import importlib, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
mod = importlib.import_module(sys.argv[1]); system = sys.argv[2]; n = int(sys.argv[3])
before = rss()
if system == "atom":
    p = mod.BlockPool(n)
    ids = [p.pop() for _ in range(n)]
    for i in ids:
        p.allocate(i)
    for i in ids:
        p.free(i)
    del ids
elif system == "vllm":
    p = mod.BlockPool(n, True, 16)
    blocks = p.get_new_blocks(n - 1)
    p.free_blocks(blocks)
    del blocks
elif system == "veloxquant":
    p = mod.BlockPoolAllocator(mod.PoolConfig(block_size=16, n_blocks=n, separate_kv=False))
    p.allocate("kv", 16 * n, owner=1)
    p.free_all(1)
else:
    p = mod.PagedCacheManager(block_size=16, max_blocks=n)
    blocks = p.get_new_blocks(n - 1)
    for b in blocks:
        p.free_block(b.block_id)
    del blocks
print((rss() - before) / n)
"""


def bytes_per_block(module: str, system: str, n: int, env) -> float:
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, module, system, str(n)],
                         capture_output=True, text=True, check=True, env=env)
    return float(out.stdout)


#: The checkout under --originals DIR that holds each system's original.
CHECKOUTS = {"vllm": "vllm", "atom": "atom", "vllm_mlx": "vllm-mlx", "veloxquant": "veloxquant"}


def workloads(system, args, orig):
    """The rows of one system: (name, unit, count, fn(module) -> seconds);
    ``orig`` is the original's module (the end-to-end rows time its engine
    hashing on its side).  A row that cannot run is printed as skipped."""
    rows = []
    if system in ("vllm", "atom"):  # churn, then the prefix pool part
        ops, reqs = churn_ops(args.churn), prefix_requests(args.requests)
        churn, prefix, inputs = ((churn_vllm, prefix_vllm, vllm_prefix_inputs) if system == "vllm"
                                 else (churn_atom, prefix_atom, atom_prefix_inputs))
        pinputs = inputs(reqs)
        rows.append(("churn", "ns/block", args.churn, lambda m: churn(m, ops)))
        rows.append(("prefix pool part", "us/request", args.requests,
                     lambda m: prefix(m, pinputs)))
    if system == "vllm":
        sha256, own_hbt = vllm_engine_hashing()
        rows.append(("prefix end to end", "us/request", args.requests,
                     lambda m: prefix_vllm_e2e(m, reqs, request_block_hasher(
                         sha256, own_hbt if m is orig else getattr(m, "hash_block_tokens",
                                                                   own_hbt)))))
    elif system == "atom":
        own = atom_engine_hash()
        if own is None:
            print(json.dumps({"system": system, "workload": "prefix end to end",
                              "skipped": "python3-xxhash (ATOM's hashing) not importable"}))
        else:  # the original's engine hashing, against the drop-in's compute_hash
            rows.append(("prefix end to end", "us/request", args.requests,
                         lambda m: prefix_atom_e2e(
                             m, reqs, own if m is orig else getattr(m, "compute_hash", own))))
    elif system == "veloxquant":
        small_ops = churn_ops(args.churn // 10, live=8, lo=16, hi=256)
        req_ops = request_churn_ops(args.steps)
        rows.append(("churn 1,024 blocks", "ns/block", args.churn // 10,
                     lambda m: churn_veloxquant(m, small_ops)))
        rows.append(("request churn", "ns/block", sum(req_ops[1]),
                     lambda m: churn_veloxquant_requests(m, req_ops)))
    else:
        ops, reqs = churn_ops(args.churn), prefix_requests(args.requests)
        req_ops = request_churn_ops(args.steps)
        rows.append(("churn free_block", "ns/block", args.churn,
                     lambda m: churn_mlx_free_block(m, ops)))
        rows.append(("request churn, block tables", "ns/block", sum(req_ops[1]),
                     lambda m: churn_mlx_tables(m, req_ops)))
        rows.append(("prefix end to end", "us/request", args.requests,
                     lambda m: prefix_mlx(m, reqs)))
    return rows


def _child(args, argv) -> int:
    """One row on one side in this fresh process: prints the seconds of its
    fastest of --inner runs."""
    orig = importlib.import_module(ORIGINALS[args.system])
    mod = orig if args.child_side == "original" else importlib.import_module(DROPINS[args.system])
    for name, _unit, _count, fn in workloads(args.system, args, orig):
        if name == args.child_row:  # the fastest of --inner runs: a burst of load elsewhere
            print(repr(min(fn(mod) for _ in range(args.inner))))  # lands in one run, not all
            return 0
    raise SystemExit(f"no row {args.child_row!r} for {args.system}")


def _fresh(system, name, side, argv, env) -> float:
    """The seconds of one row on one side, timed in a new interpreter."""
    cmd = [sys.executable, "-m", "kvpool.bench_compat", *argv, "--system", system,
           "--child-row", name, "--child-side", side]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kvpool.bench_compat", description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=["vllm", "atom", "vllm_mlx", "veloxquant", "all"],
                    default="all")
    ap.add_argument("--churn", type=int, default=200_000, help="block allocations (default 200,000)")
    ap.add_argument("--steps", type=int, default=20_000,
                    help="request churn steps (default 20,000; 8.5 blocks a step on average)")
    ap.add_argument("--requests", type=int, default=2_000, help="prefix requests (default 2,000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--memory", type=int, default=1 << 20, help="blocks for bytes/block (0: skip)")
    ap.add_argument("--originals", metavar="DIR",
                    help="checkouts of the originals (DIR/vllm, DIR/atom, DIR/vllm-mlx, "
                         "DIR/veloxquant): each row is timed in fresh processes, original "
                         "and drop-in interleaved, --reps rounds")
    ap.add_argument("--inner", type=int, default=3,
                    help="with --originals: runs per fresh process, the fastest kept (default 3)")
    ap.add_argument("--child-row", help=argparse.SUPPRESS)
    ap.add_argument("--child-side", choices=["original", "kvpool"], help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.child_row:
        return _child(args, argv)
    passed = [a for a in argv if not a.startswith("--system") and a not in ORIGINALS]
    systems = list(ORIGINALS) if args.system == "all" else [args.system]
    for system in systems:
        env = dict(os.environ)
        if args.originals:
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.join(os.path.abspath(args.originals), CHECKOUTS[system])]
                + [p for p in [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               os.environ.get("PYTHONPATH")] if p])
            sys.path.insert(0, env["PYTHONPATH"].split(os.pathsep)[0])
        try:
            orig = importlib.import_module(ORIGINALS[system])
        except ImportError as e:
            print(json.dumps({"system": system, "skipped": f"original not importable: {e}"}))
            continue
        mine = importlib.import_module(DROPINS[system])
        for name, unit, count, fn in workloads(system, args, orig):
            scale = (1e9 if unit == "ns/block" else 1e6) / count
            t_o, t_m = [], []
            if args.originals:  # fresh processes, the first side alternating per round
                for r in range(args.reps):
                    sides = ["original", "kvpool"] if r % 2 == 0 else ["kvpool", "original"]
                    got = {side: _fresh(system, name, side, passed, env) for side in sides}
                    t_o.append(got["original"])
                    t_m.append(got["kvpool"])
            else:  # one process, alternating per repetition after a warm-up
                fn(orig), fn(mine)
                for _ in range(args.reps):
                    t_o.append(fn(orig))
                    t_m.append(fn(mine))
            o, m = statistics.median(t_o) * scale, statistics.median(t_m) * scale
            print(json.dumps({"system": system, "workload": name, "unit": unit,
                              "original": round(o, 1), "kvpool": round(m, 1),
                              "speedup": round(o / m, 2),
                              "rounds": [round(a / b, 2) for a, b in zip(t_o, t_m)]}), flush=True)
        if args.memory:
            o = bytes_per_block(ORIGINALS[system], system, args.memory, env)
            m = bytes_per_block(DROPINS[system], system, args.memory, env)
            print(json.dumps({"system": system, "workload": "memory", "unit": "bytes/block",
                              "blocks": args.memory, "original": round(o, 1), "kvpool": round(m, 1),
                              "ratio": round(m / o, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
