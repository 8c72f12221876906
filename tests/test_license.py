# SPDX-License-Identifier: Apache-2.0
"""kvpool's license where a user or a tool looks for it.

- LICENSE is the Apache License, Version 2.0;
- every tracked source file (git ls-files: .c .h .cpp .py, scripts/,
  CMakeLists.txt, Makefile, the .in templates) names it with an SPDX line
  in its first two lines (the second after a shebang);
- the installed Python package's metadata (the dist-info METADATA that
  `pip show` reads) says License: Apache-2.0;
- the installed pkg-config files say License: Apache-2.0, and
  find_package(kvpool) sets kvpool_LICENSE to Apache-2.0.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
PY = "/usr/bin/python3"
SPDX = "SPDX-License-Identifier: Apache-2.0"


def run(cmd, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)
    assert p.returncode == 0, f"{cmd}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def test_license_file_is_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert re.search(r"^\s*Apache License\s*\n\s*Version 2\.0, January 2004", text, re.M)
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def source_files():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = run(["git", "-C", str(ROOT), "ls-files"]).splitlines()
    picked = [n for n in names
              if n.endswith((".c", ".h", ".cpp", ".py", ".in"))
              or n.startswith("scripts/") or Path(n).name in ("CMakeLists.txt", "Makefile")]
    assert len(picked) > 100 and "src/stats.c" in picked and "Makefile" in picked
    return picked


def test_every_tracked_source_file_has_the_spdx_line():
    missing = []
    for name in source_files():
        head = (ROOT / name).read_text(errors="replace").splitlines()[:2]
        if not head:
            missing.append(name)
            continue
        lines = head[1:] if head[0].startswith("#!") else head[:1]
        if not any(SPDX in line for line in lines):
            missing.append(name)
    assert not missing, "no SPDX line at the top of: " + ", ".join(missing)


def test_installed_python_metadata_says_apache_2(tmp_path):
    if subprocess.run([PY, "-c", "import venv, setuptools, wheel, pip"],
                      capture_output=True).returncode != 0:
        pytest.skip("python3-venv, -setuptools, -wheel or -pip missing (scripts/bootstrap)")
    venv = tmp_path / "venv"
    run([PY, "-m", "venv", "--system-site-packages", str(venv)])
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", str(ROOT)],
        cwd=tmp_path)
    shown = run([py, "-m", "pip", "show", "kvpool"], cwd=tmp_path)
    assert re.search(r"^License: Apache-2\.0$", shown, re.M), shown
    meta = run([py, "-c", "import importlib.metadata as m; d = m.distribution('kvpool'); "
                          "print(d._path); print(d.metadata['License']); "
                          "print('\\n'.join(d.metadata.get_all('Classifier')))"], cwd=tmp_path)
    path, license_, *classifiers = meta.splitlines()
    assert Path(path).resolve().is_relative_to(venv.resolve())
    assert Path(path, "METADATA").is_file()
    assert license_ == "Apache-2.0"
    assert "License :: OSI Approved :: Apache Software License" in classifiers


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not (BUILD / "CMakeCache.txt").exists():
        pytest.skip(f"{BUILD} not configured")
    dest = tmp_path_factory.mktemp("prefix")
    run(["cmake", "--install", str(BUILD), "--prefix", str(dest)])
    return dest


def test_installed_pkg_config_files_say_apache_2(prefix):
    pcs = sorted((prefix / "lib" / "pkgconfig").glob("*.pc"))
    assert {p.name for p in pcs} >= {"kvpool.pc", "kvpool-static.pc"}
    for pc in pcs:
        assert re.search(r"^License: Apache-2\.0$", pc.read_text(), re.M), pc.name


def test_cmake_package_sets_kvpool_license(prefix, tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(consumer C)\n"
        "find_package(kvpool REQUIRED)\nmessage(STATUS \"license=[${kvpool_LICENSE}]\")\n")
    out = run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "out"),
               f"-DCMAKE_PREFIX_PATH={prefix}"])
    assert "license=[Apache-2.0]" in out
