"""What a cell may change of its process that does not travel (docs/sessions.md): environment
variables, the current directory, ``sys.path``, the recursion limit, logging's levels and
handlers, NumPy's and pandas' print options, torch's process-wide
settings (default dtype, grad mode, matmul precision, print options), the globals of a module
the notebook imported from its own folder, and the entries of a ``functools`` cache (``lru_cache``
keeps them where Python cannot read them). The worker takes a snapshot before each cell and
compares after the notebook's run of it, so the notebook is told in one line what stayed in the
worker, instead of finding its state different without a word.

Standard library only (the worker imports it); numpy and pandas only when the cell has.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import reprlib
import sys
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProcessState:
    environ: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, int] = field(default_factory=dict)
    caches: dict[str, Any] = field(default_factory=dict)
    interpreter: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def now(cls, folder: str, ns: Mapping[str, Any] | None = None) -> ProcessState:
        caches = {name: f.cache_info() for name, f in function_caches(ns or {}).items()}
        return cls(dict(os.environ), os.getcwd(), _options(), _module_prints(folder), caches,
                   _interpreter())  # fmt: skip

    def changes(self, folder: str, ns: Mapping[str, Any] | None = None) -> list[str]:
        """What differs now from this snapshot, each as the user would name it."""
        now = ProcessState.now(folder, ns)
        out = []
        keys = sorted(k for k in {*self.environ, *now.environ}
                      if self.environ.get(k) != now.environ.get(k))  # fmt: skip
        if keys:
            out.append(
                "os.environ (" + ", ".join(keys[:5]) + (" ..." if len(keys) > 5 else "") + ")"
            )
        if now.cwd != self.cwd:
            out.append(f"the current directory ({now.cwd})")
        out += [what for what, value in now.interpreter.items()
                if not _same(self.interpreter.get(what, value), value)]  # fmt: skip
        out += [f"{lib}'s options" for lib in sorted(now.options)
                if now.options[lib] != self.options.get(lib, now.options[lib])]  # fmt: skip
        out += [f"module {name}'s globals" for name in sorted(now.modules)
                if name in self.modules and now.modules[name] != self.modules[name]]  # fmt: skip
        out += [f"{name}'s functools cache" for name in sorted(now.caches)
                if now.caches[name] != self.caches.get(name, now.caches[name])]  # fmt: skip
        return out


def function_caches(ns: Mapping[str, Any]) -> dict[str, Any]:
    """Each ``functools.lru_cache``/``cache`` function bound in ``ns`` (its entries cannot be
    read or sent: only its ``cache_info()`` says whether they changed)."""
    return {name: value for name, value in list(ns.items())
            if isinstance(value, functools._lru_cache_wrapper)}  # fmt: skip


def _interpreter() -> dict[str, Any]:
    """Python's own process-wide settings a cell may change, by the name the user knows."""
    out: dict[str, Any] = {"sys.path": tuple(sys.path),
                           "the recursion limit": sys.getrecursionlimit()}  # fmt: skip
    with contextlib.suppress(Exception):  # (not the warnings filters: imports change them)
        loggers = [logging.root, *(v for v in list(logging.root.manager.loggerDict.values())
                                   if isinstance(v, logging.Logger))]  # fmt: skip
        out["logging's levels and handlers"] = {
            lg.name: (lg.level, len(lg.handlers), lg.disabled) for lg in loggers}  # fmt: skip
    return out


def _same(before: Any, now: Any) -> bool:
    """Whether a setting is as it was; of loggers, those there before (an import makes new
    ones, with nothing set)."""
    if isinstance(before, dict) and isinstance(now, dict):
        return all(now.get(name, value) == value for name, value in before.items())
    return bool(before == now)


def _options() -> dict[str, Any]:
    out: dict[str, Any] = {}
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            out["NumPy"] = dict(np.get_printoptions())
    pd = sys.modules.get("pandas")
    if pd is not None:
        with contextlib.suppress(Exception):
            out["pandas"] = repr(copy.deepcopy(pd._config.config._global_config))
    torch = sys.modules.get("torch")
    if torch is not None:  # its process-wide switches: the default dtype, grad mode, ...
        with contextlib.suppress(Exception):
            out["torch"] = (
                str(torch.get_default_dtype()), torch.is_grad_enabled(),
                torch.get_float32_matmul_precision(),
                torch.are_deterministic_algorithms_enabled(),
                repr(vars(torch._tensor_str.PRINT_OPTS)), torch.get_num_threads(),
                torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
            )  # fmt: skip
    return out


def _module_prints(folder: str) -> dict[str, int]:
    """A checksum of the plain globals of each module loaded from ``folder`` (the notebook's
    own ``helpers.py``), not of a library's."""
    out: dict[str, int] = {}
    if not folder:
        return out
    root = os.path.abspath(folder) + os.sep
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        # a relative __file__ was never imported from a folder (torch.ops says '_ops.py')
        if (not os.path.isabs(path) or not os.path.abspath(path).startswith(root)
                or "site-packages" in path
                or name.split(".")[0] == "nsight_magic"):  # fmt: skip
            continue
        values = []
        for key, value in sorted(vars(module).items()):
            if key.startswith("__") or callable(value) or type(value).__name__ == "module":
                continue
            with contextlib.suppress(Exception):
                values.append(f"{key}={_short(value)}")
        out[name] = zlib.crc32("\n".join(values).encode())
    return out


def _short(value: Any) -> str:
    """A bounded print of a module global: a counter's value, a list's length and ends (a
    huge one is not printed whole)."""
    if isinstance(value, int | float | complex | bool | str | bytes | type(None)):
        return repr(value)[:500]
    size = len(value) if hasattr(value, "__len__") else -1
    return f"{type(value).__name__}[{size}]{reprlib.repr(value)}"
