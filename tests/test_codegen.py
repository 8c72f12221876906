# SPDX-License-Identifier: Apache-2.0
"""Machine-code checks on the built binary that no behavioural test can see.

The per-block loops ask for block records ahead of use with
__builtin_prefetch (kvp__prefetch_block).  A prefetch changes no result, so
when a compiler drops one nothing fails but the speed: GCC 12 at -O2
removes every prefetch written as `if (b < top) __builtin_prefetch(...)`,
which would slow the take path and kvp_seq_destroy without any failure.  This
test disassembles build/kvpool and checks that each of those functions
still contains a prefetch instruction.  x86-64 with objdump only; elsewhere
it is skipped.
"""

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
KVPOOL = BUILD / "kvpool"

# The functions whose loops or fast paths prefetch block records.  The
# take prefetches where it writes a record: take_slow, the out of line part
# of kvp_take and kvp_take_each (take_batch).
PREFETCHING = ["take_slow", "kvp_free", "kvp_free_owner", "kvp_seq_destroy"]

pytestmark = [
    pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built"),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="checks x86-64 instructions"),
    pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump not installed"),
]


def function_bodies(binary: Path) -> dict:
    """Map each function symbol in binary to its disassembled instructions.

    A static function GCC has specialised (take_slow.isra.0, .constprop.0)
    is filed under its source name; its .cold part is not."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)],
                         check=True, capture_output=True, text=True).stdout
    bodies, name = {}, None
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if head:
            name = re.sub(r"\.(?:isra|constprop|part)\.\d+$", "", head.group(1))
            bodies[name] = []
        elif name and line.strip():
            bodies[name].append(line)
    return bodies


@pytest.mark.parametrize("fn", PREFETCHING)
def test_prefetch_survives_compilation(fn):
    bodies = function_bodies(KVPOOL)
    assert fn in bodies, f"{fn} not found in {KVPOOL}"
    prefetches = [l for l in bodies[fn] if re.search(r"\sprefetch\w*\s", l)]
    assert prefetches, f"{fn}: no prefetch instruction in {len(bodies[fn])} instructions"


# The take's fast path stores the block record's byte-wide fields (format,
# stream, state, flags at offsets 0x2a-0x2d) without reading it: at 1M blocks
# the record is cold, and a read there would be the take's costliest
# instruction.  take_slow writes the record; the public functions defer it
# or call take_slow, and must not read it either.  GCC merges those stores
# into one read-modify-write of their word when any of the four is left out,
# so the fast path must not load from there.
RECORD_WORD_READ = re.compile(
    r"\s(?:mov\w*|and\w*|or\w*|xor\w*|cmp\w*|test\w*)\s+0x2[a-d]\(%r(?!sp)\w+\)"
    r"|\s(?:and|or|xor|add|sub)\w*\s+[^,\s]+,0x2[a-d]\(%r(?!sp)\w+\)")


@pytest.mark.parametrize("fn", ["take_slow", "kvp_take", "kvp_take_each", "take_batch"])
def test_take_does_not_read_the_record_word(fn):
    bodies = function_bodies(KVPOOL)
    assert fn in bodies, f"{fn} not found in {KVPOOL}"
    reads = [l.strip() for l in bodies[fn] if RECORD_WORD_READ.search(l)]
    assert not reads, f"{fn} reads the record's flag word: {reads}"
