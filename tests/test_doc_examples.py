# SPDX-License-Identifier: Apache-2.0
"""Every example in README.md and docs/*.md runs as written.

A fenced block marked ```c is a complete C program: it is compiled against
the built library (and libkvpool_interop when it includes its header) and
must run to exit 0.  A block marked ```python must run to exit 0 under
/usr/bin/python3 with the built package on its path.  Blocks marked ```sh
or left unmarked are commands and text for a reader, not checked here.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```\s*$", re.M | re.S)


def blocks(lang):
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                line = text.count("\n", 0, m.start()) + 1
                found.append(pytest.param(m.group(2), id=f"{doc.relative_to(ROOT)}:{line}"))
    return found


def c_libs(source):
    libs = [str(BUILD / "libkvpool.a"), "-lcrypto", "-lxxhash", "-lpthread", "-lm"]
    if "kvpool_interop.h" in source:
        interop = BUILD / "libkvpool_interop.a"
        if not interop.exists():
            pytest.skip("built without the interop part")
        libs = [str(interop), *libs, "-lzmq", "-lmsgpackc", "-lcbor", "-lhiredis"]
    return libs


@pytest.mark.parametrize("source", blocks("c"))
def test_c_example_runs(source, tmp_path):
    src = tmp_path / "example.c"
    src.write_text(source)
    exe = tmp_path / "example"
    cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'include'}",
                         f"-I{ROOT / 'interop'}", str(src), "-o", str(exe), *c_libs(source)],
                        capture_output=True, text=True, timeout=120)
    assert cc.returncode == 0, cc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)


@pytest.mark.parametrize("source", blocks("python"))
def test_python_example_runs(source, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    run = subprocess.run(["/usr/bin/python3", "-c", source], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)


def test_examples_are_found():
    """The two languages' examples exist, so the checks above cannot pass
    by finding nothing."""
    assert blocks("c") and blocks("python")
