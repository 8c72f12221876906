# SPDX-License-Identifier: Apache-2.0
"""test_interop_vectors.py — tests/vectors/interop_vectors.h is current.

The header holds the known answers tests/test_interop.c checks the interop
library against: vLLM `sha256_cbor` block hashes computed with python3-cbor2
and hashlib, and exact msgpack bytes of event batches from python3-msgpack.
Regenerating it must give the checked-in file byte for byte, so the C test
always compares against what the Python reference computes today.
"""
import os
import subprocess
import sys

import pytest

pytest.importorskip("cbor2")
pytest.importorskip("msgpack")

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "vectors", "make_interop_vectors.py")
HEADER = os.path.join(HERE, "vectors", "interop_vectors.h")


def test_interop_vectors_are_current(tmp_path):
    out = tmp_path / "interop_vectors.h"
    subprocess.run([sys.executable, GEN, str(out)], check=True, timeout=60)
    with open(HEADER, "rb") as f:
        assert out.read_bytes() == f.read(), \
            "tests/vectors/interop_vectors.h is stale: run %s" % GEN


def test_none_hash_matches_vllm_definition():
    # NONE_HASH for PYTHONHASHSEED "0": sha256 of the CBOR text string "0"
    import cbor2
    import hashlib
    assert cbor2.dumps("0", canonical=True) == b"\x610"
    digest = hashlib.sha256(b"\x610").digest()
    with open(HEADER) as f:
        text = f.read()
    first = ", ".join("0x%02x" % b for b in digest)
    assert '"plain", "0", {%s}' % first in text
