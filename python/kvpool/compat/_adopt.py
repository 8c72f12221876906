# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat._adopt — switch a system to its drop-in with one call at start-up.

Owns ``Adoption``: what each drop-in module's ``install()`` /
``uninstall()`` do.  Two cases:

- the original package is importable: each drop-in class replaces the
  original one as an attribute of the module that defines it, and of every
  already imported module of that package that imported it by name
  (``from ... import BlockPool``), so the package's own code constructs the
  drop-in from then on; modules imported later see the replaced attribute.
- the original package is absent (its top-level package cannot be found):
  the drop-in is registered in ``sys.modules`` under the original's module
  paths, creating the package modules on the way, so code written against
  the original (``from veloxquant_mlx.memory.block_pool import
  BlockPoolAllocator``) imports the drop-in.  Each module created has a
  ``ModuleSpec`` (no loader; a package's with empty search locations), so
  ``importlib.util.find_spec`` finds it as an imported module.

``uninstall()`` puts back every attribute it replaced and removes every
module it registered.  Both are idempotent; neither touches anything else.
An original package that is present but fails to import for another reason
(a missing dependency) makes ``install()`` raise that ImportError: masking
a broken installation with a stand-in would hide the error.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any, Dict, List, Optional, Tuple

_MISSING = object()


class Adoption:
    """Install / uninstall one system's drop-ins (see the module docstring).

    ``patch``: module path -> {name: drop-in object} replaced when the
    original is importable.  ``optional``: the same, for modules of the
    original package that may be missing from it (skipped when they cannot
    be imported).  ``register``: module path -> {name: object} registered
    when the original package is absent.
    """

    def __init__(self, package: str, patch: Dict[str, Dict[str, Any]],
                 register: Dict[str, Dict[str, Any]],
                 optional: Optional[Dict[str, Dict[str, Any]]] = None):
        self.package = package
        self.patch = patch
        self.optional = optional or {}
        self.register = register
        self._lock = threading.Lock()
        self._replaced: List[Tuple[types.ModuleType, str, Any]] = []
        self._created: List[str] = []
        self._installed = False
        self._original_present = False

    def install(self) -> bool:
        """Switch to the drop-ins; True when the original package was found and
        patched, False when the drop-ins were registered under its module paths."""
        with self._lock:
            if self._installed:
                return self._original_present
            try:
                importlib.import_module(self.package)
            except ModuleNotFoundError as e:
                if e.name != self.package:
                    raise
                self._register()
                self._original_present = False
            else:
                self._patch()
                self._original_present = True
            self._installed = True
            return self._original_present

    def uninstall(self) -> None:
        """Restore every attribute replaced and remove every module registered."""
        with self._lock:
            for module, name, old in reversed(self._replaced):
                if old is _MISSING:
                    module.__dict__.pop(name, None)
                else:
                    setattr(module, name, old)
            for path in reversed(self._created):
                sys.modules.pop(path, None)
                parent, _, leaf = path.rpartition(".")
                if parent and parent in sys.modules:
                    sys.modules[parent].__dict__.pop(leaf, None)
            self._replaced.clear()
            self._created.clear()
            self._installed = False

    @property
    def installed(self) -> bool:
        return self._installed

    def _patch(self) -> None:
        swaps: List[Tuple[str, Any, Any]] = []
        targets = list(self.patch.items())
        for path, names in self.optional.items():
            try:
                importlib.import_module(path)
            except ImportError:
                continue
            targets.append((path, names))
        for path, names in targets:
            module = importlib.import_module(path)
            for name, new in names.items():
                old = getattr(module, name, _MISSING)
                self._replaced.append((module, name, old))
                setattr(module, name, new)
                if old is not _MISSING:
                    swaps.append((name, old, new))
        prefix = self.package + "."
        for mod_name, module in list(sys.modules.items()):
            if module is None or not (mod_name == self.package or mod_name.startswith(prefix)):
                continue
            for name, old, new in swaps:
                if module.__dict__.get(name, _MISSING) is old:
                    self._replaced.append((module, name, old))
                    setattr(module, name, new)

    def _register(self) -> None:
        for path, names in self.register.items():
            parts = path.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in sys.modules:
                    continue
                # a package's submodules resolve through sys.modules
                spec = importlib.machinery.ModuleSpec(name, None, is_package=i < len(parts))
                module = importlib.util.module_from_spec(spec)
                module.__doc__ = f"kvpool drop-in stand-in for {name}"
                sys.modules[name] = module
                self._created.append(name)
                if i > 1:
                    setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], module)
            module = sys.modules[path]
            for name, obj in names.items():
                setattr(module, name, obj)
