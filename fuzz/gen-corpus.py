#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gen-corpus.py — write the checked-in seed corpus of fuzz_pool (fuzz/corpus/).

Why a script: the seeds are reproducible and reviewable.  Each seed is a
4-byte configuration header (see LLVMFuzzerTestOneInput: reuse order,
separate K/V, null block, growth, prefix caching, block size, pool size,
cap, locking, history, hash, eviction callback, KV events) followed by
operation bytes from a fixed-seed PRNG.  The 48 seeds cover every reuse
order x shared/separate lists x null block x growth, with block sizes 1..16
and a few op mixes (general, sequence-heavy, owner/free-heavy), so libFuzzer
starts from inputs that already reach every call.  The 12 seed-ev-NN seeds
turn KV events on (bit 5 of the fourth byte), shared and separate lists,
with sequence-heavy and general mixes, for the subscriber check.
Run: python3 fuzz/gen-corpus.py [DIR]   (default fuzz/corpus)
"""
import os
import random
import sys

NOPS = 26          # opcode count in fuzz_pool.c (op = (byte & 0x7f) % NOPS)
QUIET = 0x80       # opcode bit: run a take or an owner free quietly
SEQ_OPS = [19, 20, 21, 22, 23, 24]   # create, admit, append, append2, fork, destroy
OWNER_OPS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 18]
EVENTS = 0x20      # fourth byte: KV events on


def seed(rng, b0, b1, b2, b3, mix, n_ops):
    out = bytearray([b0, b1, b2, b3])
    # Without the eviction callback (bit 4), a run of takes and owner frees
    # with 8 owner frees or new owners in it makes the next takes defer
    # (pool.c, take_to_owner): such seeds end with a burst of quiet ones
    # (mostly takes), long enough for kvp_free_owner to meet pending
    # references.
    quiet = b3 & 0x10
    burst = rng.randrange(110, 150) if quiet else 0
    if quiet:
        n_ops //= 2
    for i in range(n_ops + burst):
        if i >= n_ops:  # owner frees often enough that most takes succeed
            op = (1 if rng.random() < 0.7 else 5) | QUIET
        elif mix == "seq" and rng.random() < 0.6:
            op = rng.choice(SEQ_OPS)
        elif mix == "owner" and rng.random() < 0.6:
            op = rng.choice(OWNER_OPS)
        else:
            op = rng.randrange(NOPS)
        out.append(op)
        out.extend(rng.randrange(256) for _ in range(rng.randrange(2, 6)))
    return bytes(out)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(d, exist_ok=True)
    rng = random.Random(20240601)
    i = 0
    for reuse in range(3):
        for sep in (0, 1):
            for null in (0, 1):
                for grow in (0, 1):
                    prefix = 0 if (reuse + null) % 4 == 3 else 1 + rng.randrange(3)
                    b0 = reuse | sep << 2 | null << 3 | grow << 4 | prefix << 5 | (i & 1) << 7
                    for mix in ("seq" if not sep else "owner", "any"):
                        b1 = rng.randrange(4) | rng.randrange(4, 48) << 2
                        b2 = rng.randrange(256)
                        # bit 4 (no eviction callback, so nothing hooked
                        # and takes run the fast path) on half the seeds
                        b3 = rng.randrange(16) | (i & 2) << 3
                        data = seed(rng, b0, b1, b2, b3, mix, rng.randrange(30, 90))
                        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
                            f.write(data)
                        i += 1
    rng = random.Random(20261201)  # a stream of its own: the seeds above stay as they are
    for k in range(12):
        sep = k & 1
        b0 = k % 3 | sep << 2 | (k >> 2 & 1) << 4 | (1 + k % 3) << 5
        b1 = rng.randrange(4) | rng.randrange(8, 48) << 2
        b3 = EVENTS | rng.randrange(16) & 0x0e | 0x10 * (k >> 3 & 1)
        data = seed(rng, b0, b1, rng.randrange(256), b3, "any" if sep else "seq",
                    rng.randrange(60, 120))
        with open(os.path.join(d, "seed-ev-%02d" % k), "wb") as f:
            f.write(data)
        i += 1
    print("wrote %d seeds to %s" % (i, d))


if __name__ == "__main__":
    main()
