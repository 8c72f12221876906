# SPDX-License-Identifier: Apache-2.0
"""The Python package installed the way Python users install things.

In a fresh virtual environment (made from /usr/bin/python3 with
--system-site-packages, which is where Debian's setuptools and wheel come
from; no network is used): `pip wheel --no-build-isolation .` makes a wheel
holding the built extension and the .py files, `pip install
--no-build-isolation .` installs the package, and `import kvpool` run from
an unrelated directory loads the installed copy, whose __version__ is the
one include/kvpool.h states, and whose extension has libkvpool compiled in
(no libkvpool.so needed at run time).  The wheel also installs with
`pip install --no-deps --no-index` into a plain venv (no
--system-site-packages, so no numpy), as on another Debian 12 machine.
"""
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = "/usr/bin/python3"

pytestmark = pytest.mark.skipif(
    subprocess.run([PY, "-c", "import venv, setuptools, wheel, pip"], capture_output=True).returncode != 0,
    reason="python3-venv, python3-setuptools, python3-wheel or python3-pip missing (scripts/bootstrap)")


def header_version() -> str:
    text = (ROOT / "include" / "kvpool.h").read_text()
    return ".".join(re.search(r"#define KVPOOL_VERSION_%s (\d+)" % p, text).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def run(cmd, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{cmd} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("venv")
    run([PY, "-m", "venv", "--system-site-packages", str(d)], cwd=d)
    return d


def test_pip_wheel_holds_the_extension_and_the_modules(venv, tmp_path):
    run([str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
         "--no-deps", "-w", str(tmp_path), str(ROOT)], cwd=tmp_path)
    wheels = list(tmp_path.glob("kvpool-*.whl"))
    assert len(wheels) == 1
    assert wheels[0].name.startswith(f"kvpool-{header_version()}-")
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(re.fullmatch(r"kvpool/_kvpool\..*\.so", n) for n in names)
    for mod in ("__init__", "compat/__init__", "compat/vllm", "compat/atom", "compat/vllm_mlx",
                "compat/veloxquant"):
        assert f"kvpool/{mod}.py" in names
    assert not any(n.endswith(".c") for n in names)


def test_pip_install_then_import_from_anywhere(venv, tmp_path):
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", str(ROOT)],
        cwd=tmp_path)
    out = run([py, "-c", "import kvpool, kvpool.compat.vllm as v; "
                         "p = kvpool.Pool(block_size=4, num_blocks=8); ids = p.alloc(9); "
                         "print(kvpool.__version__, kvpool.__file__, len(ids), p.free_count())"],
              cwd=tmp_path)
    version, path, n, free = out.split()
    assert version == header_version()
    assert Path(path).resolve().is_relative_to(venv.resolve())
    assert (n, free) == ("3", "5")
    so = next((Path(path).parent).glob("_kvpool.*.so"))
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True).stdout
    assert "libkvpool" not in ldd
    run([py, "-m", "pip", "uninstall", "-y", "kvpool"], cwd=tmp_path)
    r = subprocess.run([py, "-c", "import kvpool; print(kvpool.__file__)"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode != 0 or not Path(r.stdout.strip()).resolve().is_relative_to(venv.resolve())


def test_wheel_installs_in_a_plain_venv(venv, tmp_path):
    """The wheel on another Debian 12 machine: a venv without
    --system-site-packages (no numpy, no setuptools), pip install of the
    wheel alone, then the package used from an unrelated directory."""
    wheel_dir = tmp_path / "wheel"
    run([str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
         "--no-deps", "-w", str(wheel_dir), str(ROOT)], cwd=tmp_path)
    wheel = next(wheel_dir.glob("kvpool-*.whl"))
    plain = tmp_path / "plain"
    run([PY, "-m", "venv", str(plain)], cwd=tmp_path)
    py = str(plain / "bin" / "python")
    assert run([py, "-c", "import sys; print(sys.prefix != sys.base_prefix)"], cwd=tmp_path).strip() == "True"
    r = subprocess.run([py, "-c", "import numpy"], capture_output=True, cwd=tmp_path)
    assert r.returncode != 0, "the plain venv sees Debian's numpy"
    run([py, "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)
    out = run([py, "-c", "import kvpool, kvpool.compat.vllm as v\n"
                         "p = kvpool.Pool(block_size=16, num_blocks=64)\n"
                         "s = p.sequence(1); c0 = s.admit(list(range(40))); s.destroy()\n"
                         "s = p.sequence(2); c1 = s.admit(list(range(40))); s.destroy()\n"
                         "bp = v.BlockPool(32, True)\n"
                         "print(kvpool.__file__, c0, c1, bp.get_num_free_blocks())"], cwd=tmp_path)
    path, c0, c1, free = out.split()
    assert Path(path).resolve().is_relative_to(plain.resolve())
    assert (c0, c1, free) == ("0", "32", "31")


def test_the_suites_import_the_package_kvp_python_dir_names():
    """scripts/run-tests points KVP_PYTHON_DIR at the venv's site-packages: the
    Python suites then test the pip-installed package, not build/python."""
    d = os.environ.get("KVP_PYTHON_DIR")
    if not d:
        pytest.skip("KVP_PYTHON_DIR is not set: the suites use build/python")
    sys.path.insert(0, d)
    import kvpool
    assert Path(kvpool.__file__).resolve().is_relative_to(Path(d).resolve())
