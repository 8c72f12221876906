# SPDX-License-Identifier: Apache-2.0
"""Build of the `kvpool` Python package (pip / setuptools; see pyproject.toml).

Owns how a pip install compiles the extension `kvpool._kvpool`: every
python/kvpool/*.c of the extension plus the library itself, linked
statically.  The library (src/*.c) is compiled as one translation unit with
the flags CMakeLists.txt gives it (-O3, hidden visibility, KVP_DEBUG=0,
KVP_BUILDING_LIBRARY, src/ and include/ on the include path), so its hot
paths inline across files as in the CMake build; the extension's own files
get KVPY_HAVE_NUMPY and numpy's include directory when numpy is importable
at build time, as CMake does when it finds python3-numpy.  The version is
read from the KVPOOL_VERSION_* macros of include/kvpool.h.
"""
import os
import re
import sys
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def header_version() -> str:
    """MAJOR.MINOR.PATCH from the KVPOOL_VERSION_* defines of include/kvpool.h."""
    with open(os.path.join(ROOT, "include", "kvpool.h"), encoding="utf-8") as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define\s+KVPOOL_VERSION_%s\s+(\d+)\s*$" % part, text, re.M)
        if m is None:
            sys.exit("setup.py: KVPOOL_VERSION_%s not found in include/kvpool.h" % part)
        parts.append(m.group(1))
    return ".".join(parts)


def rel(paths):
    """Paths relative to the checkout (setuptools refuses absolute sources in a wheel build)."""
    return sorted(os.path.relpath(p, ROOT) for p in paths)


LIB_SOURCES = rel(glob(os.path.join(ROOT, "src", "*.c")))
EXT_SOURCES = rel(glob(os.path.join(ROOT, "python", "kvpool", "*.c")))
WARNINGS = ["-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes", "-Wmissing-prototypes"]


class BuildExt(build_ext):
    """build_ext that first compiles the library as one unity translation
    unit with the library's own flags and links its object into the extension."""

    def build_extension(self, ext):
        unity = os.path.join(self.build_temp, "kvpool_unity.c")
        os.makedirs(self.build_temp, exist_ok=True)
        text = "".join('#include "%s"\n' % os.path.join(ROOT, s) for s in LIB_SOURCES)
        old = open(unity, encoding="utf-8").read() if os.path.exists(unity) else None
        if old != text:  # keep the object's timestamp when the source set is unchanged
            with open(unity, "w", encoding="utf-8") as f:
                f.write(text)
        deps = ([unity] + [os.path.join(ROOT, p) for p in LIB_SOURCES]
                + glob(os.path.join(ROOT, "src", "*.h")) + [os.path.join(ROOT, "include", "kvpool.h")])
        obj = self.compiler.object_filenames([unity])[0]
        if not self.force and os.path.exists(obj) and \
                os.path.getmtime(obj) >= max(os.path.getmtime(d) for d in deps):
            objects = [obj]  # the library is unchanged since it was last compiled
        else:
            objects = self.compiler.compile(
                [unity],  # the object lands beside the generated source, in build_temp
                macros=[("KVP_DEBUG", "0"), ("KVP_BUILDING_LIBRARY", None)],
                include_dirs=[os.path.join(ROOT, "src"), os.path.join(ROOT, "include")],
                extra_postargs=["-std=c11", "-O3", "-fvisibility=hidden", "-pthread"] + WARNINGS,
                depends=deps)
        ext.extra_objects = list(objects) + list(ext.extra_objects or [])
        ext.depends = list(ext.depends or []) + list(objects)  # a new library object relinks
        super().build_extension(ext)


def numpy_options():
    """KVPY_HAVE_NUMPY and numpy's headers when numpy is importable here."""
    try:
        import numpy
    except ImportError:
        return [], []
    return [("KVPY_HAVE_NUMPY", None)], [numpy.get_include()]


_np_macros, _np_includes = numpy_options()
# setuptools' scratch files go under build/setuptools, beside (not into) the
# CMake build tree, and never into python/.
SCRATCH = os.path.join("build", "setuptools")
os.makedirs(os.path.join(ROOT, SCRATCH), exist_ok=True)

setup(
    version=header_version(),
    package_dir={"": "python"},
    packages=["kvpool", "kvpool.compat"],
    include_package_data=False,  # the wheel holds the .py files and the built extension only
    ext_modules=[Extension(
        "kvpool._kvpool",
        sources=EXT_SOURCES,
        include_dirs=[os.path.join(ROOT, "include")] + _np_includes,
        define_macros=_np_macros,
        depends=glob(os.path.join(ROOT, "python", "kvpool", "*.h")) + [os.path.join(ROOT, "include", "kvpool.h")],
        extra_compile_args=["-std=c11", "-fvisibility=hidden"] + WARNINGS,
        libraries=["crypto", "xxhash"],
        extra_link_args=["-pthread"],
    )],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH},
             "bdist_wheel": {"bdist_dir": os.path.join(SCRATCH, "bdist")}},
)
