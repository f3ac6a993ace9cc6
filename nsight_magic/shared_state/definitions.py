"""Notebook definitions that do not pickle, sent as their source: a Triton kernel
(``@triton.jit``, ``@triton.autotune``), a numba function, a ``torch.compile``d function, a
class holding a lock. The other side runs the definition's own ``def``/``class`` statement,
decorators included (not the whole cell), in its namespace, under the cell's file name with
the cell's text in ``linecache``: ``inspect.getsource`` works there (Triton reads it).

Standard library only: imported by the worker.
"""

from __future__ import annotations

import ast
import linecache
import types
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# where a decorator keeps the function it wraps: functools.wraps, Triton's JITFunction and
# Autotuner, numba's Dispatcher, a partial
WRAPPED = ("__wrapped__", "fn", "base_fn", "py_func", "func")
MAX_DEPTH = 6


@dataclass(frozen=True)
class Definition:
    """One top-level ``def``/``class`` statement of a notebook cell: ``text`` from its first
    decorator to its end, at ``line`` of the cell whose file name is ``filename``."""

    filename: str
    line: int
    name: str
    text: str

    def print(self) -> int:
        """What stays the same while the definition does (its object has no other state)."""
        return zlib.crc32(f"{self.filename}:{self.line}:{self.name}\n{self.text}".encode())


def innermost_function(obj: Any) -> types.FunctionType | None:
    """The notebook function a decorated object wraps (itself when it is one)."""
    seen = 0
    while seen < MAX_DEPTH:
        if isinstance(obj, types.FunctionType) and not hasattr(obj, "__wrapped__"):
            return obj
        inner = next((getattr(obj, a) for a in WRAPPED if _has(obj, a)), None)
        if inner is None:
            return obj if isinstance(obj, types.FunctionType) else None
        obj, seen = inner, seen + 1
    return None


def _has(obj: Any, attribute: str) -> bool:
    try:
        return callable(getattr(obj, attribute, None))
    except Exception:  # a property that raises: not a wrapper we know
        return False


def _first_function_of(cls: type) -> types.FunctionType | None:
    for value in vars(cls).values():
        inner = innermost_function(value.__func__ if isinstance(value, classmethod | staticmethod)
                                   else value)  # fmt: skip
        if inner is not None and inner.__qualname__.startswith(f"{cls.__qualname__}."):
            return inner
    return None


def find(obj: Any) -> Definition | None:
    """The statement that defined ``obj`` in a notebook cell whose text ``linecache`` holds,
    or None (made otherwise: ``k = triton.jit(f)``, a library's, a cell no longer known)."""
    if isinstance(obj, type):
        if obj.__module__ != "__main__":
            return None
        method = _first_function_of(obj)
        if method is None:
            return None
        return _statement(method.__code__.co_filename, obj.__name__, None, ast.ClassDef)
    func = innermost_function(obj)
    if func is None or func.__module__ != "__main__" or "<locals>" in func.__qualname__:
        return None
    code = func.__code__
    return _statement(code.co_filename, func.__name__, code.co_firstlineno,
                      ast.FunctionDef | ast.AsyncFunctionDef)  # fmt: skip


def find_bound(obj: Any, namespace: Mapping[str, Any]) -> Definition | None:
    """``find``, when ``obj`` is what the statement's name holds in ``namespace`` (the
    statement makes it; ``k = jit(f)`` is not made by ``def f``)."""
    found = find(obj)
    if found is None or namespace.get(found.name) is not obj:
        return None
    return found


def _statement(filename: str, name: str, line: int | None, kind: Any) -> Definition | None:
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return None
    found = None
    for node in tree.body:  # the last one wins, as in the cell's run
        if not isinstance(node, kind) or node.name != name or node.end_lineno is None:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if line is None or first == line:
            found = Definition(filename, first, name, "".join(lines[first - 1 : node.end_lineno]))
    return found


def define(
    filename: str, line: int, name: str, text: str, namespace: dict[str, Any], cell: str
) -> Any:
    """Run the statement in ``namespace`` (its globals; the object it makes is returned, not
    bound: the names come with the rest of the state) with the cell's text in linecache
    (plain values as arguments: nothing in them is an object the two sides key)."""
    definition = Definition(filename, line, name, text)
    if cell and definition.filename not in linecache.cache:
        linecache.cache[definition.filename] = (len(cell), None, cell.splitlines(True),
                                                definition.filename)  # fmt: skip
    padded = "\n" * (definition.line - 1) + definition.text
    local: dict[str, Any] = {}
    exec(compile(padded, definition.filename, "exec"), namespace, local)
    return local[definition.name]


def cell_text(filename: str) -> str:
    return "".join(linecache.getlines(filename))


def renamed(definition: Definition, files: Mapping[str, str]) -> Definition:
    """The definition under the other side's file name for its cell (``CodeFiles``)."""
    name = files.get(definition.filename, definition.filename)
    return Definition(name, definition.line, definition.name, definition.text)
