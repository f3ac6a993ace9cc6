"""The notebook's project code in every worker, as the notebook has it.

**Its folders on ``sys.path``** (``sys.path.append('..')``, ``sys.path.insert(0, 'src')``), so a
notebook that imports its project's modules that way profiles as it runs: the worker unpickles
the notebook's ``helper`` from ``mylib`` and the cell's ``import mylib`` finds it. Without them
the worker could not make the notebook's functions and classes of those modules (``NameError``
in the cell). Only the entries the notebook added travel: not its interpreter's own (the
standard library, site-packages, a user site), which a worker of another Python (``--python``)
must not take, and not ``''`` (each process's current directory, the same folder); the worker
adds the ones it lacks (``follow``), where the notebook has them: before its interpreter's
entries, or after.

**Its modules' code as the notebook loaded it**: a notebook that edits ``model.py`` and runs
``importlib.reload(model)`` (or has ``%autoreload``) runs the new code; the worker, which
imported the module before, still ran the old one, silently. Each project module (a ``.py``
file outside the interpreter's folders) goes as a print of the code it loaded; a worker whose
copy prints otherwise reloads it (``follow_modules``), as ``%autoreload`` does where the
notebook has it on (the old classes and functions take the new code: an instance made before,
a ``from model import f``). A module the notebook did not reload keeps its old code on both
sides, as Python does.

Both go with the requests before a cell (``worker/conversation.py``). Standard library only.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import site
import sys
import types
import zlib
from collections.abc import Mapping, Sequence
from typing import Any


def _interpreters_own() -> tuple[str, ...]:
    """The folders under which ``sys.path`` entries are this interpreter's, not a project's."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    with contextlib.suppress(AttributeError):  # a virtualenv's old site.py
        roots.update(site.getsitepackages())
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if isinstance(user, str):
        roots.add(user)
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


def project_paths(path: Sequence[str] | None = None) -> list[tuple[str, bool]]:
    """The entries of ``path`` (``sys.path``) the notebook added, each with whether it comes
    before the interpreter's own entries (``insert(0, ...)``) or after (``append``)."""
    path = list(sys.path if path is None else path)
    own = _interpreters_own()

    def is_own(entry: str) -> bool:
        return os.path.join(os.path.abspath(entry), "").startswith(own)

    first_own = next((i for i, entry in enumerate(path) if entry and is_own(entry)), len(path))
    # (an entry that is no file or folder, an editable install's path hook, is no project's)
    return [(entry, i < first_own) for i, entry in enumerate(path)
            if isinstance(entry, str) and entry and not is_own(entry)
            and os.path.exists(entry)]  # fmt: skip


def follow(entries: Sequence[Sequence[object]] | None) -> None:
    """Add the notebook's ``entries`` (``project_paths``) this process's ``sys.path`` lacks:
    the front ones at the front, in the notebook's order, the others at the end."""
    if not entries:
        return
    front = 0
    for item in entries:
        if len(item) != 2 or not isinstance(item[0], str):
            continue
        entry, before = item[0], bool(item[1])
        if entry in sys.path:
            if before:
                front = max(front, sys.path.index(entry) + 1)
            continue
        if before:
            sys.path.insert(front, entry)
            front += 1
        else:
            sys.path.append(entry)


def _python() -> str:
    """Code prints compare only between one Python version's compilers."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def project_modules() -> dict[str, Any]:
    """The notebook's project modules (their ``.py`` file outside the interpreter's folders;
    not this package), each as ``code_print``, and the Python version that printed them."""
    own = _interpreters_own()
    prints = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if (not isinstance(file, str) or not file.endswith(".py") or name == "__main__"
                or name.split(".")[0] == "nsight_magic"):  # fmt: skip
            continue
        if os.path.join(os.path.abspath(file), "").startswith(own) or not os.path.isfile(file):
            continue  # the interpreter's, or no file (torch.ops says '_ops.py')
        with contextlib.suppress(Exception):  # a module whose attributes cannot be read
            prints[name] = code_print(module)
    return {"python": _python(), "modules": prints, "superreload": _autoreloading()}


def _autoreloading() -> bool:
    """Whether the notebook has IPython's ``%autoreload`` on: it reloads a module's old
    functions and classes in place (``from model import GPT`` and its instances take the new
    code), which the worker then does too; ``importlib.reload`` makes new ones."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        magics = shell.magics_manager.registry.get("AutoreloadMagics") if shell else None
        return bool(magics is not None and magics._reloader.enabled)
    except Exception:  # another IPython's insides
        return False


def code_print(module: types.ModuleType) -> int:
    """A print of the code ``module`` holds: its own functions', its classes' methods' (and
    what decorators, properties and nested classes hold) code as loaded: an edit of the file
    reloaded prints otherwise. Of the code's contents only (``marshal`` marks a constant by
    how many hold it, which changes without an edit; file names and lines are left out)."""
    crc = 0
    for key in sorted(k for k in vars(module) if isinstance(k, str)):
        value = vars(module)[key]
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported from elsewhere
        for code in _codes(value, module.__name__, 0):
            crc = zlib.crc32(_code_bytes(code), crc)
    return crc


def _codes(value: Any, module: str, depth: int) -> list[types.CodeType]:
    """The code objects ``value`` holds: a function's, through ``functools.wraps`` and
    ``lru_cache`` (``__wrapped__``), a property's, a classmethod's or staticmethod's, and a
    class's own members (a nested class's too)."""
    if depth > 4:
        return []
    if isinstance(value, type):
        if getattr(value, "__module__", None) != module:
            return []
        return [c for member in list(vars(value).values())
                for c in _codes(member, module, depth + 1)]  # fmt: skip
    found: list[types.CodeType] = []
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        found.append(code)
    for inner in ("__wrapped__", "__func__", "fget", "fset", "fdel"):
        held = getattr(value, inner, None) if not isinstance(value, types.ModuleType) else None
        if held is not None and held is not value:
            found += _codes(held, module, depth + 1)
    return found


def _code_bytes(code: types.CodeType) -> bytes:
    """A code object's contents: its bytecode, names and constants (nested code too)."""
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    parts += [_code_bytes(c) if isinstance(c, types.CodeType) else _const_bytes(c)
              for c in code.co_consts]  # fmt: skip
    return b"\x00".join(parts)


def _const_bytes(value: Any) -> bytes:
    """A constant as text the same in every process (a frozenset's order follows the
    process's string hashing)."""
    if isinstance(value, frozenset):
        return repr(sorted(repr(v) for v in value)).encode()
    if isinstance(value, tuple):
        return b"(" + b",".join(_const_bytes(v) for v in value) + b")"
    return repr(value).encode()


def _in_place(superreload: Any) -> Any:
    """IPython's ``superreload`` as the notebook's ``%autoreload`` leaves the module: its
    names bound to the old functions and classes, which took the new code (``model.f is f``
    after a ``from model import f``, as in the notebook)."""

    def reload(module: types.ModuleType) -> types.ModuleType:
        old = dict(vars(module))
        superreload(module)
        for name, new in list(vars(module).items()):
            was = old.get(name)
            # (a plain function or class only: an Enum's members are its new class's)
            if was is not None and was is not new and type(was) is type(new) \
                    and type(was) in (types.FunctionType, type):  # fmt: skip
                setattr(module, name, was)
        return module

    return reload


# module name -> the print a reload did not reach (a file changed again): not tried again
_UNREACHED: dict[str, int] = {}


def follow_modules(sent: Mapping[str, Any] | None) -> list[str]:
    """Reload each of the notebook's project modules (``project_modules``) this worker has
    imported with other code than the notebook's; returns their names."""
    if not sent or sent.get("python") != _python():
        return []
    reload: Any = importlib.reload
    if sent.get("superreload"):  # as %autoreload does: the old objects take the new code
        with contextlib.suppress(Exception):
            from IPython.extensions.autoreload import superreload

            reload = _in_place(superreload)
    reloaded = []
    for name, want in dict(sent.get("modules") or {}).items():
        module = sys.modules.get(name)
        if module is None or _UNREACHED.get(name) == want:
            continue
        try:
            if code_print(module) == want:
                continue
            reload(module)
        except Exception:  # the file gone or broken: the cell's import says so, not this
            _UNREACHED[name] = want
            continue
        reloaded.append(name)
        if code_print(module) != want:
            _UNREACHED[name] = want
    return reloaded
