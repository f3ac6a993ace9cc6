"""What a cell does to the state later cells see: what a re-run of it (a warm-up, a drill-down)
may change, which the worker saves and puts back (``session/state/repeat_changes.changed_names``,
``script/shared_objects.preserved``).

Read from the cell as IPython transformed it (``%time x = f()`` is a ``run_line_magic`` call
whose text is Python, ``!cmd`` a ``system`` call). A cell *writes* a name when it binds it, or
changes its object in place:

- an attribute or subscript store or delete on it (``model.config.x = 1``, ``d[k] = v``);
- a method call on it that is not known to be read-only (``model.half()``, ``x.add_(1)``,
  ``items.append(3)``; ``x.sum()``, ``model.generate(...)`` are read-only); on an imported
  module only a call that sets process state (``torch.manual_seed``, ``torch.set_*``);
- passing it to a function with PyTorch's in-place spelling (``torch.nn.init.zeros_(w)``), to
  ``setattr``/``delattr``/``shuffle``, or as ``out=`` / a cache keyword
  (``model(x, past_key_values=cache)``).

Calling an object directly (``y = model(x)``) is not counted as changing it or its arguments: a
forward pass is taken to leave the state as it was (a module in training mode updating
BatchNorm statistics is the exception; the worker puts modules' buffers back whatever the text
says). A cell whose effects cannot be read from its text (``from m import *``, ``exec``,
``globals()``, a magic other than the timing and shell ones) is *opaque*: a re-run of it puts
back everything the worker received. Shell commands and ``%pip`` change nothing a cell reads.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# get_ipython().<method>(...) that run Python text in the user namespace (its text is analysed)
_CODE_MAGICS = frozenset({"time", "timeit", "prun"})
# magics and shell calls that change nothing a later cell reads (their effects are on disk)
_STATELESS_MAGICS = frozenset(
    {"pip", "conda", "mamba", "uv", "system", "sx", "sh", "bash", "script", "writefile", "who",
     "whos", "lsmagic", "nvidia_smi", "ls", "pwd", "env_list"}
)  # fmt: skip
_SHELL_CALLS = frozenset({"system", "getoutput"})
# a call to one of these binds or changes names the text does not show
_OPAQUE_CALLS = frozenset({"exec", "eval", "globals", "locals", "vars", "__import__"})
_MUTATING_FUNCTIONS = frozenset({"setattr", "delattr", "shuffle"})
_MUTATED_KEYWORDS = re.compile(r"^(out|.*cache.*|past_key_values|state|memory)$")
# calls on an imported module that change process state later cells depend on
_MODULE_SETTERS = re.compile(r"^(set_|manual_seed|seed|use_deterministic|enable|disable)")
# methods that return a value and leave their object as it was (tensors, modules, containers,
# strings, tokenizers); anything else called on a name counts as changing it
READ_ONLY_METHODS = frozenset(
    {
        # containers and strings
        "get", "keys", "values", "items", "copy", "count", "index", "format", "join",
        "split", "rsplit", "strip", "lstrip", "rstrip", "startswith", "endswith", "lower",
        "upper", "replace", "encode", "decode", "find", "splitlines",
        # tensors and arrays: each returns a new object or a number
        "item", "tolist", "numpy", "size", "dim", "numel", "nelement", "element_size",
        "sum", "mean", "std", "var", "max", "min", "amax", "amin", "argmax", "argmin", "abs",
        "norm", "all", "any", "clone", "detach", "contiguous", "view", "view_as", "reshape",
        "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose",
        "expand", "expand_as", "repeat", "narrow", "chunk", "unbind", "matmul", "mm", "bmm",
        "softmax", "log_softmax", "exp", "log", "sqrt", "pow", "mul", "add", "sub", "div",
        "is_contiguous", "data_ptr", "stride", "storage_offset", "type_as", "equal",
        "allclose", "isclose", "eq", "ne", "lt", "le", "gt", "ge", "astype", "tobytes",
        # modules (nn.Module, transformers): generate and forward leave the weights as they are
        "forward", "generate", "parameters", "named_parameters", "buffers", "named_buffers",
        "modules", "named_modules", "children", "named_children", "state_dict",
        "get_submodule", "get_parameter", "num_parameters", "get_input_embeddings",
        # tokenizers
        "batch_decode", "apply_chat_template", "convert_ids_to_tokens",
        "convert_tokens_to_ids", "tokenize",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CellEffects:
    """``defined``: names every run of the cell binds (top-level assignments, imports, defs);
    ``mutated``: names whose object it changes in place for sure; ``method_calls``: (name,
    method) pairs, judged once the imported modules are known (``changed``); ``modules``: names
    it binds by import; ``opaque``: why its effects cannot be read from the text ("" when they
    can)."""

    defined: frozenset[str] = frozenset()
    mutated: frozenset[str] = frozenset()
    method_calls: frozenset[tuple[str, str]] = frozenset()
    modules: frozenset[str] = frozenset()
    opaque: str = ""

    def changed(self, modules: frozenset[str]) -> frozenset[str]:
        """Names whose object the cell changes in place (bound in the cell or not)."""
        by_call = {
            name
            for name, method in self.method_calls
            if (
                _MODULE_SETTERS.match(method)
                if name in modules
                else method not in READ_ONLY_METHODS
            )
        }
        return self.mutated | by_call


def _base_name(node: ast.AST) -> str | None:
    """``x`` of ``x``, ``x.a.b``, ``x[i].a``; None when the chain starts with a call etc."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _ipython_call(node: ast.Call) -> tuple[str, list[str]] | None:
    """``(method, string args)`` of ``get_ipython().method(...)``; None for other calls."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)):
        return None
    inner = func.value.func
    if not (isinstance(inner, ast.Name) and inner.id == "get_ipython"):
        return None
    texts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return func.attr, texts


def _definitely_bound(body: Iterable[ast.stmt]) -> Iterator[str]:
    """Names bound by statements that always run when the block runs to its end."""
    for stmt in body:
        targets: list[ast.AST] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and getattr(stmt, "value", None):
            targets = [stmt.target]
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                if alias.name != "*":
                    yield alias.asname or alias.name.split(".")[0]
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield stmt.name
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            targets = [item.optional_vars for item in stmt.items if item.optional_vars]
            yield from _definitely_bound(stmt.body)
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    yield node.id


class _Collector:
    def __init__(self) -> None:
        self.defined: set[str] = set()
        self.mutated: set[str] = set()
        self.calls: set[tuple[str, str]] = set()
        self.modules: set[str] = set()
        self.opaque = ""
        self._top_level: set[int] = set()  # ids of calls that are a whole top-level statement

    def module(self, tree: ast.Module, *, top: bool = True) -> None:
        """``top``: the block always runs (the cell itself, or a ``%time`` line of it)."""
        if top:
            self.defined.update(_definitely_bound(tree.body))
            self._top_level.update(id(s.value) for s in tree.body if isinstance(s, ast.Expr))
        for node in ast.walk(tree):
            self.node(node)

    def node(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            base = _base_name(node)
            if base:
                self.mutated.add(base)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    self.opaque = self.opaque or "it imports with *"
                elif isinstance(node, ast.Import):
                    self.modules.add(alias.asname or alias.name.split(".")[0])
                else:  # from a import b: b may be a module (torch.nn as nn) or a function
                    self.modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Call):
            self.call(node)

    def call(self, node: ast.Call) -> None:
        ipython = _ipython_call(node)
        if ipython is not None:
            self.magic(*ipython, top=id(node) in self._top_level)
            return
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if isinstance(func, ast.Name) and func.id in _OPAQUE_CALLS:
            self.opaque = self.opaque or f"it calls {func.id}()"
        if isinstance(func, ast.Attribute):
            base = _base_name(func.value)
            if base:
                self.calls.add((base, func.attr))
        in_place = (name.endswith("_") and not name.endswith("__")) or name in _MUTATING_FUNCTIONS
        if in_place:
            self.mutated.update(b for b in map(_base_name, node.args) if b)
        for keyword in node.keywords:
            base = _base_name(keyword.value)
            if base and keyword.arg and _MUTATED_KEYWORDS.match(keyword.arg):
                self.mutated.add(base)

    def magic(self, method: str, texts: list[str], *, top: bool) -> None:
        if method in _SHELL_CALLS:
            return
        magic = texts[0] if method in ("run_line_magic", "run_cell_magic") and texts else method
        if magic in _STATELESS_MAGICS:
            return
        if magic not in _CODE_MAGICS:
            self.opaque = self.opaque or f"it runs %{magic}"
            return
        for text in texts[1:]:  # the magic's line and (cell magics) body: Python
            try:
                inner = ast.parse(text)
            except SyntaxError:
                continue
            self.module(inner, top=top)


def cell_effects(tree: ast.Module) -> CellEffects:
    """What the parsed (IPython-transformed) cell writes; see the module docstring."""
    found = _Collector()
    found.module(tree)
    return CellEffects(
        defined=frozenset(found.defined),
        mutated=frozenset(found.mutated),
        method_calls=frozenset(found.calls),
        modules=frozenset(found.modules),
        opaque=found.opaque,
    )
