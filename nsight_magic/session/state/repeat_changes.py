"""The shared GPU memory a repeat of a cell (a warm-up, a drill-down's re-run) may change, which
the worker saves before it and puts back after (``script/shared_objects.preserved``).

The Python state a repeat changes is put back by looking (``worker_side.kept``); GPU memory cannot
be looked at before and after for free (saving all of a 56 GB notebook around a drill-down took
99.6 s, issue 41), so this one estimate is read from the cell's text and the code of the
notebook's functions it calls: it only chooses what is saved (``["*"]``, all of it, when the text
cannot tell), never what comes back to the notebook.
"""

from __future__ import annotations

import ast
import builtins
import functools
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

from ...script import PreparedCell
from ..history import HistoryEntry


def changed_names(
    cell: PreparedCell, modules: frozenset[str], user_ns: Mapping[str, Any]
) -> list[str] | None:
    """The names whose objects a run of ``cell`` may change in place, for a re-run that must
    leave the notebook's shared GPU memory as it was (``shared_objects.preserved``): what its
    text changes (``opt.step()``), the arguments it passes to a function of the notebook's
    (``train_step(model, opt)`` steps the optimizer inside); ``["*"]`` when its effects cannot
    be read from its text; None when it changes nothing. Calling a module (``model(x)``) is
    its forward: the weights stay. A call of the notebook's own code (a function or lambda a
    cell defined, ``loss = train_step()``, or a method of a class a cell defined,
    ``trainer.step()``) may change whatever its body reaches: the notebook's names its code
    reads (``notebook_code_reaches``), else ``["*"]`` (issue 41: a warm-up and a drill-down
    trained the model again; saving all of a 56 GB notebook around a drill-down of
    ``train_step()`` took 99.6 s where the step reaches 0.1 GB)."""
    if cell.effects.opaque:
        return ["*"]
    changed = set(cell.effects.changed(modules)) - _tensors_only_read(cell, user_ns)
    for node in ast.walk(ast.parse(cell.code)):
        if not isinstance(node, ast.Call):
            continue
        code = _called_notebook_code(node.func, user_ns)
        if code is not None:
            reached = notebook_code_reaches(code, user_ns)
            if reached is None:
                return ["*"]
            changed |= reached
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                changed.add(node.func.value.id)  # the instance whose method it is
        elif not isinstance(node.func, ast.Name):
            continue
        else:
            target = user_ns.get(node.func.id, getattr(builtins, node.func.id, None))
            if target is None or _keeps_arguments(target):
                continue
        args = [*node.args, *(k.value for k in node.keywords)]
        changed |= {a.id for a in args if isinstance(a, ast.Name)}
    return sorted(changed) or None


def _called_notebook_code(func: ast.expr, user_ns: Mapping[str, Any]) -> Any:
    """The notebook's own code a call runs: ``f(...)`` of a function a cell defined, or
    ``obj.m(...)`` of a method of a class a cell defined; None for anything else."""
    if isinstance(func, ast.Name):
        target = user_ns.get(func.id)
        return target if _notebook_code(target) else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = user_ns.get(func.value.id)
        if owner is None or isinstance(owner, types.ModuleType):
            return None
        method = getattr(type(owner), func.attr, None)
        return method if _notebook_code(method) else None
    return None


# a body that calls these can touch any name: its effects cannot be read from its names
ANY_NAME = frozenset({"exec", "eval", "globals", "vars", "locals", "__import__", "compile"})
_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def notebook_code_reaches(target: Any, user_ns: Mapping[str, Any]) -> set[str] | None:
    """The notebook's names a call of ``target`` (the notebook's own function) can change: the
    global names its code reads or writes (nested functions and comprehensions included) bound
    in the notebook, through the notebook functions it calls in turn; modules, classes and
    library functions left out (a library's state is not the notebook's). None when that
    cannot be read (``_notebook_code_names``)."""
    names = _notebook_code_names([target], user_ns)
    if names is None:
        return None
    return {name for name in names if name in user_ns and _notebook_state(user_ns[name])}


def _notebook_state(value: Any) -> bool:
    """Whether a notebook name's value is state a call can change: not the notebook's own code
    (followed instead), nor a module, class or library function."""
    code = (types.ModuleType, type, types.BuiltinFunctionType, types.FunctionType)
    return not _notebook_code(value) and not isinstance(value, code)


def called_code_names(cell: PreparedCell, user_ns: Mapping[str, Any]) -> set[str] | None:
    """Every name (globals and attributes) in the code of the notebook's own functions that a
    run of ``cell`` calls, and of those they call in turn: what the text hides of what runs
    (``train_step()``'s ``torch.cuda.profiler.start()``). None when that cannot be read
    (``_notebook_code_names``)."""
    calls = [n.func for n in ast.walk(ast.parse(cell.code)) if isinstance(n, ast.Call)]
    targets = [c for c in (_called_notebook_code(f, user_ns) for f in calls) if c is not None]
    return _notebook_code_names(targets, user_ns)


def _notebook_code_names(targets: list[Any], user_ns: Mapping[str, Any]) -> set[str] | None:
    """Every name the code of ``targets`` (the notebook's own functions) looks up, and of the
    notebook functions that code calls in turn. None when what they run cannot be read: a
    closure, default or partial argument holding an object (its name is not in the code), a
    body that calls ``exec``/``eval``/``globals``, or a function whose globals are not the
    notebook's."""
    found: set[str] = set()
    todo, seen = list(targets), set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        while isinstance(fn, functools.partial):
            if not all(isinstance(v, _PLAIN) for v in (*fn.args, *fn.keywords.values())):
                return None
            fn = fn.func
        if not isinstance(fn, types.FunctionType) or fn.__globals__ is not user_ns:
            return None
        held = [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
        held += [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
        if not all(isinstance(v, _PLAIN) for v in held):
            return None
        names = _code_names(fn.__code__)
        if names & ANY_NAME:
            return None
        found |= names
        todo += [user_ns[n] for n in names if n in user_ns and _notebook_code(user_ns[n])]
    return found


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  # an empty cell (a name bound later) raises
    except ValueError:
        return False
    return True


def _code_names(code: types.CodeType) -> set[str]:
    """Every name ``code`` and the code nested in it (functions, lambdas, comprehensions) look
    up by name: globals, and attribute names (an over-count: a notebook name that is also an
    attribute's is kept, which only saves more)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _notebook_code(target: Any) -> bool:
    """A function the notebook defined (its module is the notebook's ``__main__``, or a cell
    sent by value), or a partial of one: its body's effects are not in the calling text."""
    while isinstance(target, functools.partial):
        target = target.func
    return isinstance(target, types.FunctionType) and target.__module__ in ("__main__", None)


def _keeps_arguments(target: Any) -> bool:
    """Builtins, classes and torch modules' forwards leave their arguments as they were."""
    if isinstance(target, type) or getattr(target, "__module__", None) == "builtins":
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(target, torch.nn.Module)


def module_names(entries: Sequence[HistoryEntry]) -> frozenset[str]:
    """Names bound by an import anywhere in the history (``x.append`` on a module is a call)."""
    return frozenset().union(*(e.cell.effects.modules for e in entries))


# tensor methods that return a new tensor (the text-only rule cannot count them as reads:
# ``model.float()`` changes a module in place, ``x.float()`` leaves a tensor as it was)
TENSOR_READ_METHODS = frozenset(
    {"float", "half", "bfloat16", "double", "int", "long", "bool", "to", "cpu", "cuda", "type",
     "square", "t", "cumsum", "sin", "cos", "tanh", "relu", "sigmoid", "gather", "index_select",
     "masked_fill", "where", "topk", "sort", "argsort", "eq", "ne", "float16"}
)  # fmt: skip


def _tensors_only_read(cell: PreparedCell, user_ns: Mapping[str, Any]) -> set[str]:
    """Names of the notebook's tensors the cell only calls non-in-place methods on: copying a
    31 GiB tensor to host and back around a re-run of ``w[:8].float().sum()`` costs a minute."""
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    from ...script.effects import READ_ONLY_METHODS

    calls: dict[str, set[str]] = {}
    for name, method in cell.effects.method_calls:
        calls.setdefault(name, set()).add(method)
    return {
        name
        for name, methods in calls.items()
        if isinstance(user_ns.get(name), torch.Tensor)
        and name not in cell.effects.mutated
        and methods <= (READ_ONLY_METHODS | TENSOR_READ_METHODS)
    }
