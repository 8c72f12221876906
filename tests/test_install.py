# SPDX-License-Identifier: Apache-2.0
"""The installed package, used the way README tells a user to use it.

`cmake --install` of the build into a temporary prefix (not a system
directory, so nothing is found by accident), then the README quick start
(examples/quickstart.c), a small interop program and the C example of
docs/EVENTS.md are built against it:

- with pkg-config: `kvpool` (shared, with the run-time search path README
  gives), `kvpool-static`, `kvpool_interop` (shared, with the search path)
  and `kvpool_interop-static` (no search path, no libkvpool.so needed);
- with CMake: `find_package(kvpool)` and the targets kvpool::kvpool,
  kvpool::kvpool_static, kvpool::kvpool_interop and
  kvpool::kvpool_interop_static.

Each program must build and run to exit 0.  The shared one built without
the search path must fail to start with the loader's message, which is
what README warns about.  The Python package lands in
P/lib/python3.X/dist-packages (3.X: /usr/bin/python3's version), and with
that directory on PYTHONPATH, as README says for a prefix other than
/usr/local, /usr/bin/python3 imports and uses the installed copy.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KVP_BUILD_DIR", ROOT / "build"))
QUICKSTART = ROOT / "examples" / "quickstart.c"


def events_example():
    """The C program of docs/EVENTS.md's "Using it from C"."""
    text = (ROOT / "docs" / "EVENTS.md").read_text()
    section = text[text.index("## Using it from C"):]
    return re.search(r"^```c\n(.*?)^```", section, re.M | re.S).group(1)

INTEROP_PROGRAM = r"""
#include <kvpool.h>
#include <kvpool_interop.h>
#include <stdio.h>

int main(void)
{
    kvp_config cfg;
    kvp_config_default(&cfg);
    cfg.block_size = 16;
    cfg.num_blocks = 64;
    if (kvpi_vllm_hash_configure(&cfg, "seed") != KVP_OK)
        return 1;
    kvp_pool *pool;
    if (kvp_pool_create(&cfg, &pool) != KVP_OK)
        return 2;
    uint32_t tokens[32];
    for (int i = 0; i < 32; i++)
        tokens[i] = (uint32_t)i;
    kvp_hash h[2];
    size_t n = 0;
    kvp_status rc = kvp_hash_tokens(pool, tokens, 32, NULL, h, 2, 0, &n);
    kvp_pool_destroy(pool);
    if (rc != KVP_OK || n != 2)
        return 3;
    puts("interop ok");
    return 0;
}
"""

pytestmark = [
    pytest.mark.skipif(not (BUILD / "CMakeCache.txt").exists(), reason=f"{BUILD} not configured"),
    pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config not installed"),
]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{cmd}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    dest = tmp_path_factory.mktemp("prefix")
    run(["cmake", "--install", str(BUILD), "--prefix", str(dest)])
    return dest


@pytest.fixture(scope="module")
def has_interop(prefix):
    return (prefix / "include" / "kvpool_interop.h").exists()


def pkg(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    return run(["pkg-config", *args], env=env).split()


def test_pkg_config_shared_with_rpath_runs(prefix, tmp_path):
    exe = tmp_path / "quickstart"
    libdir = pkg(prefix, "--variable=libdir", "kvpool")[0]
    run(["cc", "-std=c11", str(QUICKSTART), "-o", str(exe), *pkg(prefix, "--cflags", "--libs", "kvpool"),
         f"-Wl,-rpath,{libdir}"])
    run([str(exe)])


def test_pkg_config_shared_without_rpath_needs_the_loader_told(prefix, tmp_path):
    exe = tmp_path / "quickstart"
    run(["cc", "-std=c11", str(QUICKSTART), "-o", str(exe), *pkg(prefix, "--cflags", "--libs", "kvpool")])
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    p = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0 and "libkvpool.so" in p.stderr, (p.returncode, p.stderr)
    env["LD_LIBRARY_PATH"] = pkg(prefix, "--variable=libdir", "kvpool")[0]
    assert subprocess.run([str(exe)], capture_output=True, env=env, timeout=60).returncode == 0


def test_pkg_config_static_runs_without_search_path(prefix, tmp_path):
    exe = tmp_path / "quickstart"
    run(["cc", "-std=c11", str(QUICKSTART), "-o", str(exe),
         *pkg(prefix, "--cflags", "--libs", "kvpool-static")])
    needed = run(["readelf", "-d", str(exe)])
    assert "libkvpool" not in needed
    run([str(exe)])


def test_pkg_config_interop_runs(prefix, has_interop, tmp_path):
    if not has_interop:
        pytest.skip("kvpool was built without its interop part")
    (tmp_path / "interop.c").write_text(INTEROP_PROGRAM)
    (tmp_path / "events.c").write_text(events_example())
    libdir = pkg(prefix, "--variable=libdir", "kvpool")[0]
    for name in ("interop", "events"):
        shared, static = tmp_path / f"{name}_shared", tmp_path / f"{name}_static"
        run(["cc", "-std=c11", str(tmp_path / f"{name}.c"), "-o", str(shared),
             *pkg(prefix, "--cflags", "--libs", "kvpool_interop"), f"-Wl,-rpath,{libdir}"])
        run(["cc", "-std=c11", str(tmp_path / f"{name}.c"), "-o", str(static),
             *pkg(prefix, "--cflags", "--libs", "kvpool_interop-static")])
        assert "libkvpool" in run(["readelf", "-d", str(shared)])
        assert "libkvpool" not in run(["readelf", "-d", str(static)])
        want = "interop ok" if name == "interop" else "publishing on tcp://127.0.0.1:"
        for exe in (shared, static):
            assert run([str(exe)]).startswith(want)


def test_python_package_imports_with_the_documented_pythonpath(prefix, tmp_path):
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "dist-packages"
    if not (site / "kvpool").is_dir():
        pytest.skip("built without the Python binding")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(site)
    out = run(["/usr/bin/python3", "-c", "import kvpool, kvpool.compat.vllm\n"
               "p = kvpool.Pool(block_size=16, num_blocks=8); ids = p.alloc(20, owner=1)\n"
               "print(kvpool.__file__, len(ids), p.free_count())"], env=env, cwd=tmp_path)
    path, n, free = out.split()
    assert Path(path).resolve().is_relative_to(site.resolve())
    assert (n, free) == ("2", "6")


CMAKE_PROJECT = """
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(kvpool REQUIRED)
add_executable(quick_shared "{quickstart}")
target_link_libraries(quick_shared PRIVATE kvpool::kvpool)
add_executable(quick_static "{quickstart}")
target_link_libraries(quick_static PRIVATE kvpool::kvpool_static)
if(TARGET kvpool::kvpool_interop)
  add_executable(interop interop.c)
  target_link_libraries(interop PRIVATE kvpool::kvpool_interop)
  add_executable(events_shared events.c)
  target_link_libraries(events_shared PRIVATE kvpool::kvpool_interop)
  add_executable(events_static events.c)
  target_link_libraries(events_static PRIVATE kvpool::kvpool_interop_static)
endif()
"""


def test_cmake_find_package_targets_run(prefix, has_interop, tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(CMAKE_PROJECT.format(quickstart=QUICKSTART))
    (tmp_path / "interop.c").write_text(INTEROP_PROGRAM)
    (tmp_path / "events.c").write_text(events_example())
    out = tmp_path / "out"
    run(["cmake", "-S", str(tmp_path), "-B", str(out), f"-DCMAKE_PREFIX_PATH={prefix}"])
    run(["cmake", "--build", str(out)])
    run([str(out / "quick_shared")])
    run([str(out / "quick_static")])
    assert "libkvpool" not in run(["readelf", "-d", str(out / "quick_static")])
    if has_interop:
        assert run([str(out / "interop")]).strip() == "interop ok"
        for variant in ("shared", "static"):
            exe = str(out / f"events_{variant}")
            assert run([exe]).startswith("publishing on tcp://127.0.0.1:")
            assert ("libkvpool" in run(["readelf", "-d", exe])) == (variant == "shared")
