"""A notebook cell made ready to run in a profiled process.

IPython syntax (``%time x = f()``, ``!nvidia-smi -L``, ``%%time`` …) is turned into Python by
IPython's own input transformation, exactly as the notebook would run it; the result is parsed
here, before anything starts, so a syntax error costs nothing. Per-statement NVTX labels keep the
cell's own text and line numbers (the transformation keeps one line per line), and the names the
cell reads are collected so a warm session can send notebook variables the worker lacks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import CellSyntaxError
from ..vocabulary.nvtx_names import statement_label
from .effects import CellEffects, cell_effects

# Magics whose argument is Python run in the user namespace: its names count as read.
_CODE_MAGICS = ("run_line_magic", "run_cell_magic")


@dataclass(frozen=True)
class PreparedCell:
    """``source`` as typed, ``code`` as Python, one ``labels`` entry per top-level statement,
    ``names_read``: names the cell loads before (or without) assigning them itself;
    ``names_bound``: names it assigns, imports or defines; ``effects``: what it changes for
    later cells (``effects.py``: which cells a new worker must replay)."""

    source: str
    code: str
    filename: str
    labels: tuple[str, ...]
    needs_ipython: bool
    names_read: frozenset[str]
    names_bound: frozenset[str]
    effects: CellEffects = field(default_factory=CellEffects)


def cell_filename(cell_name: str) -> str:
    """The pseudo filename tracebacks show for the cell (registered in linecache)."""
    return f"<nsight_magic {cell_name}>"


def to_python(source: str) -> str:
    """The cell as IPython would execute it (magics and ``!`` become ``get_ipython()`` calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def parse_cell(code: str, *, cell_name: str = "cell", source: str | None = None) -> ast.Module:
    """Parse ``code``; a SyntaxError becomes CellSyntaxError naming the cell line (from
    ``source`` when given: the text the user typed)."""
    try:
        return ast.parse(code, filename=cell_filename(cell_name))
    except SyntaxError as exc:
        lines = (source if source is not None else code).splitlines()
        lineno = exc.lineno or 0
        text = lines[lineno - 1] if 0 < lineno <= len(lines) else (exc.text or "").rstrip("\n")
        msg = f"{cell_name} does not parse: {exc.msg} (line {exc.lineno}): {text.strip()}"
        err = CellSyntaxError(msg)
        err.lineno, err.offset, err.text = exc.lineno, exc.offset, text
        err.filename = cell_filename(cell_name)
        raise err from None


def statement_labels(source: str, tree: ast.Module) -> list[str]:
    """``L{line}: {text}`` per top-level statement of ``tree`` (parsed from the transformed
    cell), the text taken from ``source`` (what the user typed) at the statement's lines: the
    transformation keeps one line per line (a ``%%magic`` cell becomes one statement on line 1).
    A compound statement shows its header line."""
    src_lines = source.splitlines()
    labels = []
    for stmt in tree.body:
        end = min(stmt.end_lineno or stmt.lineno, len(src_lines))
        text = "\n".join(src_lines[stmt.lineno - 1 : end])
        labels.append(statement_label(stmt.lineno, text))
    return labels


def _magic_code(node: ast.Call) -> Iterable[str]:
    """The Python text a ``get_ipython().run_*_magic(name, …)`` call runs (best effort)."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _CODE_MAGICS:
        for arg in node.args[1:]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value


def _name_uses(tree: ast.Module) -> list[tuple[int, int, str, bool]]:
    """(line, column, name, is_load) of every name use and binding, with the names inside
    ``%time``-style magics (counted as loads)."""
    stack: list[ast.AST] = [tree]
    nodes: list[tuple[int, int, str, bool]] = []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            nodes.append((node.lineno, node.col_offset, node.id, isinstance(node.ctx, ast.Load)))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                nodes.append((node.lineno, node.col_offset, bound, False))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            nodes.append((node.lineno, node.col_offset, node.name, False))
        elif isinstance(node, ast.Call):
            for text in _magic_code(node):
                try:
                    inner = ast.parse(text)
                except SyntaxError:
                    continue
                nodes += [(node.lineno, node.col_offset, n, True) for n in names_read(inner)]
                # ``%time y = f(x)`` binds y in the namespace, as the notebook would
                nodes += [(node.lineno, node.col_offset, n, False) for n in names_bound(inner)]
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def names_read(tree: ast.Module) -> frozenset[str]:
    """Names loaded by the cell whose first appearance is not an assignment (so ``x = 1;
    y = x`` does not read ``x``)."""
    first: dict[str, bool] = {}  # name -> first use is a load
    # an assignment's value is evaluated before its target: "x = x + 1" reads x
    for _, _, name, is_load in sorted(_name_uses(tree), key=lambda t: (t[0], t[1], not t[3])):
        first.setdefault(name, is_load)
    return frozenset(name for name, is_load in first.items() if is_load)


def names_bound(tree: ast.Module) -> frozenset[str]:
    """Names the cell assigns, imports or defines anywhere."""
    return frozenset(name for _, _, name, is_load in _name_uses(tree) if not is_load)


def _check_text(source: str, cell_name: str) -> None:
    """Text the profiled process could not be given: a NUL (no Python source may hold one) or
    a lone surrogate (not UTF-8, so cell.py could not be written)."""
    for lineno, line in enumerate(source.splitlines() or [source], 1):
        if "\x00" in line:
            raise CellSyntaxError(f"{cell_name} holds a NUL character (line {lineno}); remove it.")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CellSyntaxError(
                f"{cell_name} holds a character that is not valid Unicode ({line[exc.start]!r}, a "
                f"lone surrogate, line {lineno}); remove it."
            ) from None


def _check_compiles(tree: ast.Module, cell_name: str, source: str) -> None:
    """What parses but cannot compile (``return``/``yield`` outside a function, ``break``
    outside a loop, ``nonlocal`` at the top): a CellSyntaxError now, not a failure in the
    profiled process. Top-level ``await`` is allowed, as IPython allows it."""
    try:
        compile(tree, cell_filename(cell_name), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                dont_inherit=True)  # fmt: skip
    except SyntaxError as exc:
        lines = source.splitlines()
        lineno = exc.lineno or 0
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        err = CellSyntaxError(f"{cell_name} does not compile: {exc.msg} (line {lineno}): {text}")
        err.lineno, err.offset, err.text = exc.lineno, exc.offset, text
        err.filename = cell_filename(cell_name)
        raise err from None


def prepare_cell(source: str, *, cell_name: str = "cell") -> PreparedCell:
    """Transform, parse and label ``source``; CellSyntaxError before anything runs."""
    if not source.strip():
        raise CellSyntaxError(f"{cell_name} is empty: there is nothing to profile.")
    _check_text(source, cell_name)
    code = to_python(source)
    tree = parse_cell(code, cell_name=cell_name, source=source)
    if not tree.body:
        raise CellSyntaxError(
            f"{cell_name} holds no statement (only comments): nothing to profile."
        )
    _check_compiles(tree, cell_name, source)
    return PreparedCell(
        source=source,
        code=code,
        filename=cell_filename(cell_name),
        labels=tuple(statement_labels(source, tree)),
        needs_ipython="get_ipython" in code,
        names_read=names_read(tree),
        names_bound=names_bound(tree),
        effects=cell_effects(tree),
    )
