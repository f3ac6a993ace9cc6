"""The package's shape stays one a newcomer can live in (issue 58): no import circle between its
modules (imports inside functions and for type checking counted: a circle hidden there is still
a circle), no module over 600 lines, and in the session wing no function above complexity 12 or
7 parameters (ruff's C901 and PLR0913, on session/ only)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nsight_magic"
MAX_LINES = 600


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str], root: Path = PACKAGE) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != here and not here.startswith(name + "."):
                found.add(name)
    return found


def import_circles(root: Path = PACKAGE) -> list[list[str]]:
    """Each strongly connected group of two or more modules (Tarjan's algorithm)."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    modules = set(files)
    edges = {m: imports_of(p, modules, root) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(modules):
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle() -> None:
    assert import_circles() == []


def test_the_circle_check_finds_one_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "nsight_magic"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from .sub import a\n")
    assert import_circles(pkg) == [["nsight_magic.sub.a", "nsight_magic.sub.b"]]


def test_no_module_over_600_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}  # fmt: skip
    assert long == {}


def test_the_session_wing_has_no_function_above_complexity_12_or_7_parameters() -> None:
    """The wing: the session, the worker it talks to and the state they share."""
    pytest.importorskip("ruff")  # the lint tier's tool (the oldest-dependency tier has none)
    wing = [str(PACKAGE / folder) for folder in ("session", "worker", "shared_state")]
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *wing, "--select",
         "C901,PLR0913", "--config", "lint.mccabe.max-complexity=12", "--config",
         "lint.pylint.max-args=7", "--output-format", "concise", "--no-cache"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


SESSION_MAX_LINES = 6_000
# the session's folders, each above the next; the modules beside them (spec, history, backends,
# run_context, variables) are their ground, and the face (manager, status, bounds) stands on all
SESSION_FLOORS = ("runs", "state", "workers")
SESSION_FACE = ("manager", "status", "bounds")


def session_floor(module: str) -> int | None:
    """How high ``module`` stands in the session: the face 4, runs 3, state 2, workers 1, the
    ground 0; None outside the session."""
    prefix = "nsight_magic.session."
    if not module.startswith(prefix):
        return None
    first = module[len(prefix) :].split(".")[0]
    if first in SESSION_FACE:
        return len(SESSION_FLOORS) + 1
    if first in SESSION_FLOORS:
        return len(SESSION_FLOORS) - SESSION_FLOORS.index(first)
    return 0


def test_the_session_is_at_most_6000_lines_in_folders_that_import_one_way() -> None:
    """Issue 58: runs -> state -> workers -> ground, never back; nothing below the session
    (the worker, the shared state, processes, profilers, ...) imports it or the magics."""
    session = PACKAGE / "session"
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in session.rglob("*.py"))
    assert lines <= SESSION_MAX_LINES
    assert {p.name for p in session.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        SESSION_FLOORS
    )
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    upward = []
    for module, path in files.items():
        # the package's face (its __init__, cli, __main__) and the magics stand above it
        below_session = module.split(".")[1:2] not in (
            [],
            ["session"],
            ["magic"],
            ["cli"],
            ["__main__"],
        )
        here = session_floor(module)
        for target in imports_of(path, set(files)):
            there = session_floor(target)
            if there is not None and here is not None and there > here:
                upward.append(f"{module} -> {target}")
            if below_session and target.split(".")[1:2] in (["session"], ["magic"]):
                upward.append(f"{module} -> {target}")
    assert upward == []
