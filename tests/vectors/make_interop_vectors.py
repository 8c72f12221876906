#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""make_interop_vectors.py — known answers for libkvpool_interop.

Writes tests/vectors/interop_vectors.h, which tests/test_interop.c checks
the C code against:

1. vLLM-compatible block hashes, computed here independently of the C code
   with the Debian modules python3-cbor2 and hashlib, the way vLLM computes
   `sha256_cbor` prefix-cache hashes:
       NONE_HASH = sha256(cbor2.dumps(seed, canonical=True))
       block     = sha256(cbor2.dumps((parent, tuple(tokens), extra_keys),
                                      canonical=True))
   extra_keys: None, or a tuple in vLLM's order — LoRA name (kvpool: the
   lora_id as an integer when no name is given), one (identifier, offset)
   pair per multimodal input overlapping the block (identifier: the input's
   32-byte hash as lowercase hex; offset: input start - block start), then
   the cache salt as text (first block only).
2. The exact msgpack bytes of event batches (python3-msgpack packb of the
   structures docs/EVENTS.md specifies).

    /usr/bin/python3 tests/vectors/make_interop_vectors.py [OUT]

tests/test_interop_vectors.py regenerates into a temporary file and checks
the header in the tree is current.
"""
import hashlib
import os
import sys

import cbor2
import msgpack


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def mm_hash(k):
    """A deterministic 32-byte multimodal input hash."""
    return hashlib.sha256(b"mm-input-%d" % k).digest()


def block_extra(start, n, lora, spans, salt):
    keys = []
    if lora is not None:
        keys.append(lora)
    for h, s, e in spans:
        if e > s and s < start + n and e > start:
            keys.append((h.hex(), s - start))
    if start == 0 and salt:
        keys.append(salt.decode("utf-8"))
    return tuple(keys) if keys else None


def chain(seed, block_size, tokens, lora, spans, salt):
    parent = sha256_cbor(seed)
    out = []
    for b in range(len(tokens) // block_size):
        start = b * block_size
        blk = tuple(tokens[start:start + block_size])
        parent = sha256_cbor((parent, blk, block_extra(start, block_size, lora, spans, salt)))
        out.append(parent)
    return out


# (name, seed, block_size, tokens, has_lora, lora_id, lora_name, spans, salt)
BIG = [0, 1, 23, 24, 255, 256, 65535, 65536, 4294967295, 7, 8, 9]
HASH_CASES = [
    ("plain", "0", 4, list(range(1000, 1012)), 0, 0, None, [], b""),
    ("empty_seed", "", 4, BIG, 0, 0, None, [], b""),
    ("int_forms", "kvpool", 3, BIG, 0, 0, None, [], b""),
    ("block16", "12345", 16, [(i * 7919) % 50000 for i in range(48)], 0, 0, None, [], b""),
    ("lora_name", "0", 4, list(range(8)), 1, 42, "sql-adapter", [], b""),
    ("lora_id", "0", 4, list(range(8)), 1, 42, None, [], b""),
    ("salt", "0", 4, list(range(12)), 0, 0, None, [], b"tenant-1"),
    ("mm", "0", 4, list(range(16)),
     0, 0, None, [(mm_hash(1), 2, 6), (mm_hash(2), 6, 7), (mm_hash(3), 9, 15)], b""),
    ("all", "42", 4, list(range(500, 516)),
     1, 3, "adapter", [(mm_hash(4), 0, 10)], b"salt"),
]


def c_bytes(b):
    return ", ".join("0x%02x" % x for x in b)


def c_str(s):
    return "NULL" if s is None else '"%s"' % s


def ev_stored(hashes, parent, tokens, bs, medium, lora, mm_blocks):
    # extra_keys: nil without multimodal inputs, else per block the hex ids
    # of the inputs that block overlaps
    extra = None
    if any(mm_blocks):
        extra = [[h.hex() for h in blk] for blk in mm_blocks]
    return ["BlockStored", hashes, parent, tokens, bs, None, medium, lora, extra, 0, None, None]


# Batches: (name, ts, dp_rank or None, [event dicts]) — each event dict is
# also written as a kvp_event initializer.
MM = [mm_hash(7), mm_hash(8)]
BATCHES = [
    ("all_kinds", 1700000000.25, None, [
        dict(kind="STORED", hashes=[1, 0xFFFFFFFFFFFFFFFF], parent=None,
             tokens=[0, 127, 128, 65535, 65536, 4294967295, 5, 6], bs=4, lora="sql",
             medium="GPU", mm=[[], []]),
        dict(kind="STORED", hashes=[300], parent=1 << 40, tokens=[], bs=4, lora=None,
             medium="GPU", mm=[[MM[0]]]),
        dict(kind="REMOVED", hashes=[1, 1 << 32], medium="CPU"),
        dict(kind="CLEARED"),
    ]),
    ("dp_rank_empty", 0.0, 3, []),
    ("mm_two_blocks", 12.5, 0, [
        dict(kind="STORED", hashes=[5, 6], parent=4, tokens=[1, 2, 3, 4, 5, 6, 7, 8], bs=4,
             lora=None, medium="GPU", mm=[[MM[0]], MM]),
    ]),
]


def batch_obj(ts, dp, events):
    out = []
    for e in events:
        if e["kind"] == "STORED":
            out.append(ev_stored(e["hashes"], e["parent"], e["tokens"], e["bs"], e["medium"],
                                 e["lora"], e["mm"]))
        elif e["kind"] == "REMOVED":
            out.append(["BlockRemoved", e["hashes"], e["medium"], 0])
        else:
            out.append(["AllBlocksCleared"])
    return [ts, out, dp]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "interop_vectors.h")
    L = []
    w = L.append
    w("/* SPDX-License-Identifier: Apache-2.0 */")
    w("/*")
    w(" * interop_vectors.h — GENERATED by tests/vectors/make_interop_vectors.py")
    w(" * (python3-cbor2 + hashlib + python3-msgpack); do not edit by hand.")
    w(" * vLLM sha256_cbor block hashes and exact msgpack bytes of event batches,")
    w(" * checked by tests/test_interop.c.")
    w(" */")
    w("#ifndef KVP_INTEROP_VECTORS_H")
    w("#define KVP_INTEROP_VECTORS_H")
    w("")
    w("#include <stddef.h>")
    w("#include <stdint.h>")
    w("")
    w("#define IV_MAX_SPANS 3")
    w("typedef struct iv_span { uint8_t hash[32]; uint64_t start, end; } iv_span;")
    w("typedef struct iv_hash_case {")
    w("    const char *name, *seed;")
    w("    uint8_t none_hash[32];")
    w("    uint32_t block_size;")
    w("    size_t n_tokens;")
    w("    const uint32_t *tokens;")
    w("    int has_lora;")
    w("    uint64_t lora_id;")
    w("    const char *lora_name;")
    w("    size_t n_spans;")
    w("    iv_span spans[IV_MAX_SPANS];")
    w("    const char *salt;")
    w("    size_t n_blocks;")
    w("    const uint8_t (*blocks)[32];")
    w("} iv_hash_case;")
    w("")
    for (name, seed, bs, toks, has_lora, lora_id, lora_name, spans, salt) in HASH_CASES:
        lora = (lora_name if lora_name is not None else lora_id) if has_lora else None
        blocks = chain(seed, bs, toks, lora, spans, salt)
        w("static const uint32_t iv_tok_%s[] = {%s};" % (name, ", ".join(str(t) for t in toks)))
        w("static const uint8_t iv_blk_%s[][32] = {" % name)
        for b in blocks:
            w("    {%s}," % c_bytes(b))
        w("};")
    w("")
    w("static const iv_hash_case iv_hash_cases[] = {")
    for (name, seed, bs, toks, has_lora, lora_id, lora_name, spans, salt) in HASH_CASES:
        sp = ", ".join("{{%s}, %d, %d}" % (c_bytes(h), s, e) for h, s, e in spans) or "{{0}, 0, 0}"
        w("    {\"%s\", \"%s\", {%s}, %d, %d, iv_tok_%s, %d, %d, %s, %d, {%s}, %s, %d, iv_blk_%s},"
          % (name, seed, c_bytes(sha256_cbor(seed)), bs, len(toks), name, has_lora, lora_id,
             c_str(lora_name), len(spans), sp, '"%s"' % salt.decode() if salt else "NULL",
             len(toks) // bs, name))
    w("};")
    w("")
    w("/* ---- msgpack batches ---- */")
    w("#define IV_MAX_EVENTS 4")
    w("typedef struct iv_event {")
    w("    int kind; /* 1 stored, 2 removed, 3 all cleared (kvp_event_kind) */")
    w("    size_t n_hashes; uint64_t hashes[4];")
    w("    int has_parent; uint64_t parent;")
    w("    size_t n_tokens; uint32_t tokens[8];")
    w("    uint32_t block_size;")
    w("    const char *lora_name, *medium;")
    w("    size_t n_mm; uint8_t mm[3][32]; uint32_t mm_per_block[4];")
    w("} iv_event;")
    w("typedef struct iv_batch {")
    w("    const char *name;")
    w("    double ts;")
    w("    int has_dp; int64_t dp;")
    w("    size_t n_events; iv_event events[IV_MAX_EVENTS];")
    w("    size_t n_bytes; const uint8_t *bytes;")
    w("} iv_batch;")
    w("")
    kinds = {"STORED": 1, "REMOVED": 2, "CLEARED": 3}
    for (name, ts, dp, events) in BATCHES:
        data = msgpack.packb(batch_obj(ts, dp, events), use_bin_type=True)
        w("static const uint8_t iv_bytes_%s[] = {%s};" % (name, c_bytes(data)))
    w("")
    w("static const iv_batch iv_batches[] = {")
    for (name, ts, dp, events) in BATCHES:
        evs = []
        for e in events:
            hs = e.get("hashes", [])
            tk = e.get("tokens", [])
            mm_blocks = e.get("mm", [])
            mm = [h for blk in mm_blocks for h in blk]
            evs.append("{%d, %d, {%s}, %d, %du, %d, {%s}, %d, %s, %s, %d, {%s}, {%s}}" % (
                kinds[e["kind"]], len(hs), ", ".join("%du" % h for h in hs) or "0",
                e.get("parent") is not None, e.get("parent") or 0, len(tk),
                ", ".join("%du" % t for t in tk) or "0", e.get("bs", 0),
                c_str(e.get("lora")), c_str(e.get("medium")), len(mm),
                ", ".join("{%s}" % c_bytes(h) for h in mm) or "{0}",
                ", ".join("%du" % len(blk) for blk in mm_blocks) or "0"))
        w("    {\"%s\", %r, %d, %d, %d, {%s}, sizeof iv_bytes_%s, iv_bytes_%s},"
          % (name, ts, dp is not None, dp or 0, len(events), ", ".join(evs) or "{0}", name, name))
    w("};")
    w("")
    w("#endif")
    with open(out_path, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
