"""Regroup nsight_magic's root modules into folders by the data path (issue 36 item 9).

Run once, from a clean checkout's root, on the tree to regroup::

    python tools/regroup.py --check     # the plan: what moves where; changes nothing
    python tools/regroup.py             # git mv the modules, rewrite every reference, lint
    python tools/regroup.py --layers    # list imports that point up the layer order

What it does (the map is the table MOVES below; its text for ARCHITECTURE.md is
tools/regroup_map.md):

- ``git mv`` each root module to its folder (a new folder gets an ``__init__.py`` whose docstring
  names its job) and ``tools/probes`` to ``tools/fixtures/probes``;
- rewrites every import by parsing it (``ast``): a relative import is resolved against the
  importing module's OLD name, mapped old -> new, and written back relative to the importing
  module's NEW place; ``from . import x`` where ``x`` moved becomes ``from .folder import x``
  (``import new as x`` where the file was renamed, so the name the code uses stays bound);
- rewrites the module's other mentions by their exact spelling, never a bare word: dotted names
  (``"nsight_magic.tools.find_tool"`` in ``monkeypatch.setattr`` / ``mock.patch``, ``python -m``
  targets, attribute chains after ``import nsight_magic.x``), paths (``nsight_magic/run_dir.py``,
  ``tools/probes/``) and, in strings, comments and Markdown, a package-relative file name
  (``"runner.py"`` -> ``"processes/runner.py"``; not in the package's own code strings, where
  ``"x.py"`` is a sibling's file, which moves with it). Python is read with ``tokenize`` so code
  is only touched through its imports and ``nsight_magic.<module>`` chains; one-line imports
  inside triple-quoted strings (a test's child script) are parsed too; notebooks' code cells
  and Markdown's python blocks the same way; CHANGELOG.md (history) and data are left alone;
  BY_HAND holds the one reference no rule can read (a relative import written as data);
- writes the map paragraph at the top of ARCHITECTURE.md and its layer block;
- sorts and formats the changed Python files with ruff (``--no-ruff`` skips it), re-wraps the
  comment and docstring lines a longer path pushed past 100 columns, and lists any line that is
  still too long (code under ``# fmt: skip``) for a person to wrap;
- ends with the layer check (``--layers``): every import inside the package that points up
  LAYERS.

A second run changes nothing. A root module the table does not know (one added after the table
was written) is placed by RULES (its name's prefix); one no rule places stops the run with a
list, before anything changes: place it with ``--place NAME=FOLDER`` (or ``FOLDER.NEWNAME``).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "nsight_magic"

# Each new folder's job: the one-line docstring of its __init__.py.
FOLDERS = {
    "magic": "The IPython front: the cell magics, their options and their help.",
    "run_folders": "Run folders on disk: one per cell, its meta.json, who may read it, sharing.",
    "processes": "The profiler processes: find nsys/ncu, run and stop them, their output, GUIs.",
    "vocabulary": "Words every layer shares: columns, precisions, NVTX and magic names, checks.",
}

# Root modules that stay: the public face and what the outside world imports by path
# (``from nsight_magic.errors import ReportError`` in docs; pyproject reads the version from
# package_info; ``nsight_magic.examples.llm()``; the ``nsight-magic`` command and ``python -m
# nsight_magic``, which pyproject names).
KEEP = frozenset({"__init__", "__main__", "cli", "examples", "errors", "package_info"})

# The map: root module -> its new place under nsight_magic (a new file name drops a prefix that
# the folder now says, or names what the module does).
MOVES = {
    # the IPython front
    "magics": "magic.magics",
    "magic_options": "magic.options",
    "magic_help": "magic.help",
    # run folders on disk
    "run_dir": "run_folders.run_dir",
    "run_meta": "run_folders.run_meta",
    "runs": "run_folders.runs",
    "folders": "run_folders.ownership",
    "regular_files": "run_folders.regular_files",
    "sharing": "run_folders.sharing",
    "shared_env": "run_folders.shared_env",
    # the profiler processes
    "runner": "processes.runner",
    "child_signals": "processes.child_signals",
    # issue 35 item 3 (on main since 15:00): every process we start ends with the notebook
    "child_lifetime": "processes.child_lifetime",
    "child_watchdog": "processes.child_watchdog",
    "tools": "processes.locate",
    "gui": "processes.gui",
    # the console lines the session reads from a profiler; a front module would sit above the
    # session that imports it
    "progress": "processes.progress",
    # the shared vocabulary; magic_names too: reports, analysis and the session name the magic
    # in their messages, so it is a leaf, not part of the front
    "columns": "vocabulary.columns",
    "precisions": "vocabulary.precisions",
    "nvtx_names": "vocabulary.nvtx_names",
    "magic_names": "vocabulary.magic_names",
    "arguments": "vocabulary.arguments",
}

# A root module MOVES does not name, by the prefix of its name (same file name in the folder).
RULES = (("child_", "processes"), ("magic_", "magic"), ("run_", "run_folders"))

# Folders of the repository that move (provenance of the fixtures goes with their capture scripts).
PATH_MOVES = {"tools/probes": "tools/fixtures/probes"}

# The layers, top to bottom (ARCHITECTURE.md): a module imports only from its own rank or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("nsight_magic", "nsight_magic.examples"),
    ("nsight_magic.magic",),
    ("nsight_magic.session",),
    # a profiling worker (both ends of its socket) and the state model its two sides share
    ("nsight_magic.worker",),
    ("nsight_magic.shared_state",),
    ("nsight_magic.script",),
    ("nsight_magic.results",),
    ("nsight_magic.reports",),
    ("nsight_magic.analysis",),
    ("nsight_magic.views",),
    # the profiler processes and the declarations of their command lines, one rank: each uses
    # the other (processes/locate.py runs nsys -v with profilers/env.py's environment, which
    # starts children with processes/child_signals.py's SIGINT); reports export with that
    # environment, results hold a DrillRequest
    ("nsight_magic.processes", "nsight_magic.profilers"),
    ("nsight_magic.run_folders",),
    ("nsight_magic.vocabulary",),
    ("nsight_magic.errors", "nsight_magic.package_info"),
)

# References no rule can read as a module (a relative import written as data), fixed by exact text.
BY_HAND = {
    # the (module, relative level) a script module imports in its module-only block
    "tests/test_runtime.py": (('("run_dir", 2)', '("run_folders.run_dir", 2)'),),
}

MAP_TEXT = Path(__file__).with_name("regroup_map.md")
ARCHITECTURE = "ARCHITECTURE.md"
# Left as written: history, this tool and its test (they spell the old names on purpose), data.
NOT_REWRITTEN = (
    "CHANGELOG.md",
    "tools/regroup.py",
    "tools/regroup_map.md",
    "tests/test_regroup.py",
)
NOT_REWRITTEN_DIRS = (
    "tests/data/",
    "nsight_magic/example_data/",
    "notebooks/runs/",
    "docs/images/",
)
TEXT_SUFFIXES = (".py", ".md", ".ipynb", ".toml", ".sh", ".cfg", ".ini", ".txt", ".yml", ".yaml")
TEXT_NAMES = ("Makefile", ".ci/run", ".gitignore")


class RegroupError(Exception):
    """The checkout cannot be regrouped as it is; the message says what to do."""


# --- the plan ------------------------------------------------------------------------------


@dataclass
class Plan:
    """What a run does: file moves (old path -> new path, relative to the root), and the module
    map every reference is rewritten with (old dotted name -> new)."""

    moves: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    new_folders: list[str] = field(default_factory=list)
    by_rule: dict[str, str] = field(default_factory=dict)
    # each moved module's top-level names: Markdown's ``run_dir.RunDir`` follows the module
    attrs: dict[str, set[str]] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"{len(self.moves)} moves:"]
        lines += [f"  git mv {old} {new}" for old, new in self.moves.items()]
        if self.new_folders:
            lines.append("new folders: " + ", ".join(self.new_folders))
        for name, place in self.by_rule.items():
            lines.append(f"placed by rule (not in MOVES): {name} -> {place}")
        return "\n".join(lines)


def _module_path(dotted: str) -> str:
    return dotted.replace(".", "/") + ".py"


def make_plan(root: Path, places: dict[str, str] | None = None) -> Plan:
    """The moves for the checkout at ``root``; raises RegroupError naming every root module
    that neither MOVES, RULES, ``places`` nor KEEP place."""
    places = {**MOVES, **(places or {})}
    package = root / PACKAGE
    if not (package / "__init__.py").is_file():
        raise RegroupError(f"{root} has no {PACKAGE}/__init__.py: run from the repository root")
    plan = Plan()
    unknown = []
    for path in sorted(package.glob("*.py")):
        name = path.stem
        if name in KEEP:
            continue
        place = places.get(name)
        if place is None:
            folder = next((f for prefix, f in RULES if name.startswith(prefix)), None)
            if folder is None:
                unknown.append(name)
                continue
            place = plan.by_rule[name] = f"{folder}.{name}"
        plan.moves[f"{PACKAGE}/{name}.py"] = f"{PACKAGE}/{_module_path(place)}"
    if unknown:
        raise RegroupError(
            "no place for these root modules of nsight_magic/: "
            + ", ".join(f"{n}.py" for n in unknown)
            + ". Add each to MOVES in tools/regroup.py, or pass --place NAME=FOLDER "
            f"(folders: {', '.join(FOLDERS)}), or add it to KEEP to leave it at the root."
        )
    for name, place in places.items():  # also the ones already moved: a rerun maps the same
        plan.modules[f"{PACKAGE}.{name}"] = f"{PACKAGE}.{place}"
    for name, place in plan.by_rule.items():
        plan.modules[f"{PACKAGE}.{name}"] = f"{PACKAGE}.{place}"
    for old, new in plan.modules.items():
        for where in (old, new):
            path = root / _module_path(where)
            if path.is_file():
                plan.attrs[old] = _top_level_names(path.read_text())
    for old, new in PATH_MOVES.items():
        if (root / old).exists() and not (root / new).exists():
            plan.moves[old] = new
    targets = {Path(new).parent.as_posix() for new in plan.moves.values()}
    plan.new_folders = sorted(
        t
        for t in targets
        if t.startswith(PACKAGE + "/") and not (root / t / "__init__.py").is_file()
    )
    return plan


def _top_level_names(text: str) -> set[str]:
    names = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


# --- rewriting Python ----------------------------------------------------------------------


def map_module(name: str, modules: dict[str, str]) -> str:
    """``name`` (a dotted module or a name inside one) after the move."""
    for old, new in modules.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return name


def module_name(relpath: str) -> str:
    """``nsight_magic/session/x.py`` -> ``nsight_magic.session.x`` (a package: its own name)."""
    parts = relpath[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _relative(target: str, package: str) -> str:
    """``target`` written relative to ``package`` (``from <this> import ...``)."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    return "." * (len(p) - common + 1) + ".".join(t[common:])


def _alias(name: str, asname: str | None) -> str:
    return f"{name} as {asname}" if asname else name


@dataclass
class _Source:
    """Text with (line, column) -> offset; ast columns are UTF-8 byte offsets."""

    text: str

    def __post_init__(self) -> None:
        self.lines = self.text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + col

    def byte_offset(self, lineno: int, byte_col: int) -> int:
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self.offset(lineno, len(line.encode()[:byte_col].decode(errors="ignore")))


Edit = tuple[int, int, str]


def _import_edits(
    tree: ast.AST, src: _Source, old: str, new: str, is_package: bool, modules: dict[str, str]
) -> list[Edit]:
    old_package, new_package = _package_of(old, is_package), _package_of(new, is_package)
    moved = set(modules)
    edits: list[Edit] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(map_module(a.name, modules), a.asname) for a in node.names]
            if names == [(a.name, a.asname) for a in node.names]:
                continue
            text = "import " + ", ".join(_alias(n, a) for n, a in names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = old_package.split(".")
                base_parts = base_parts[: len(base_parts) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if node.level == 0 and not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
            groups: dict[str, list[str]] = {}
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in moved:  # ``from . import runner``: the module itself moved
                    parent, _, last = modules[full].rpartition(".")
                    keep_name = a.asname or (a.name if last != a.name else None)
                    groups.setdefault(parent, []).append(_alias(last, keep_name))
                else:
                    groups.setdefault(map_module(base, modules), []).append(
                        _alias(a.name, a.asname)
                    )

            def spell(target: str, level: int = node.level) -> str:
                return _relative(target, new_package) if level else target

            original = "." * node.level + (node.module or "")
            only = next(iter(groups)) if len(groups) == 1 else None
            spelled = [_alias(a.name, a.asname) for a in node.names]
            if only is not None and groups[only] == spelled:
                if spell(only) == original:
                    continue
                # only the module moved: replace it and keep the rest as written (comments,
                # parentheses)
                start = src.byte_offset(node.lineno, node.col_offset)
                end = src.byte_offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
                statement = src.text[start:end]
                head = re.match(r"from\s+[.\w]+", statement)
                if head is None:
                    continue
                edits.append((start, start + head.end(), f"from {spell(only)}"))
                continue
            indent = " " * node.col_offset
            text = f"\n{indent}".join(
                f"from {spell(target)} import {', '.join(items)}"
                for target, items in groups.items()
            )
        else:
            continue
        start = src.byte_offset(node.lineno, node.col_offset)
        end = src.byte_offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
        edits.append((start, end, text))
    return edits


def text_rules(
    modules: dict[str, str], *, bare_files: bool, attrs: dict[str, set[str]] | None = None
) -> list[tuple[re.Pattern[str], str]]:
    """The exact spellings a mention of a moved module has in text: dotted, as a path, and (in
    strings, comments, Markdown) as a package-relative file name; with ``attrs`` (Markdown), a
    module-qualified name (``magic_help.renamed`` -> ``magic/help.renamed``)."""
    rules: list[tuple[re.Pattern[str], str]] = []
    for old, new in sorted(modules.items(), key=lambda kv: -len(kv[0])):
        rules.append((re.compile(rf"(?<![\w.]){re.escape(old)}(?!\w)"), new))
        old_path, new_path = _module_path(old), _module_path(new)
        rules.append((re.compile(rf"(?<![\w.-]){re.escape(old_path)}\b"), new_path))
        if bare_files:
            short_old = old_path.split("/", 1)[1]
            short_new = new_path.split("/", 1)[1]
            rules.append((re.compile(rf"(?<![\w./-]){re.escape(short_old)}\b"), short_new))
        if attrs and attrs.get(old):
            names = "|".join(sorted(map(re.escape, attrs[old])))
            short_old, short_new = old.split(".", 1)[1], new.split(".", 1)[1].replace(".", "/")
            rules.append(
                (re.compile(rf"(?<![\w./-]){re.escape(short_old)}\.(?=(?:{names})\b)"),
                 short_new + ".")
            )  # fmt: skip
    for old, new in PATH_MOVES.items():
        rules.append((re.compile(rf"(?<![\w./-]){re.escape(old)}(?![\w-])"), new))
    return rules


def apply_rules(text: str, rules: Sequence[tuple[re.Pattern[str], str]]) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement.replace("\\", "\\\\"), text)  # the text, literally
    return text


_EMBEDDED_IMPORT = re.compile(
    rf"(?m)^([ \t]*)((?:from[ \t]+{PACKAGE}(?:\.\w+)*[ \t]+import[ \t]+[\w, \t]+"
    rf"|import[ \t]+{PACKAGE}\.[\w.]+(?:[ \t]+as[ \t]+\w+)?))[ \t]*$"
)


def _embedded_imports(text: str, modules: dict[str, str]) -> str:
    """The one-line imports of the package inside a triple-quoted string (a child's script
    in a test, an example in a docstring), each parsed and rewritten as the code's are."""

    def one(match: re.Match[str]) -> str:
        indent, statement = match.group(1), match.group(2)
        try:
            tree = ast.parse(statement)
        except SyntaxError:
            return match.group(0)
        edits = _import_edits(tree, _Source(statement), "__main__", "__main__", False, modules)
        return indent + _apply(statement, edits).replace("\n", "\n" + indent)

    return _EMBEDDED_IMPORT.sub(one, text)


def _token_edits(
    src: _Source,
    spans: list[tuple[int, int]],
    modules: dict[str, str],
    original: str,
    *,
    bare_in_code_strings: bool = True,
) -> list[Edit]:
    """Strings and comments through the text rules; in code, ``nsight_magic.<old>`` chains.
    ``original``: the text as written (``src`` may have IPython lines masked as comments).
    ``bare_in_code_strings``: a string literal that is not a docstring may spell a module's
    package-relative file (``"runner.py"`` in a test); in the package's own code such a name is
    a sibling's (``Path(__file__).with_name("child_watchdog.py")``), which moves with it."""
    rules = text_rules(modules, bare_files=True)
    code_string_rules = rules if bare_in_code_strings else text_rules(modules, bare_files=False)
    layout = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    moved_last = {old.split(".", 1)[1]: new.split(".", 1)[1] for old, new in modules.items()}
    edits: list[Edit] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(src.text).readline))
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    i = 0

    def inside_import(offset: int) -> bool:
        return any(a <= offset < b for a, b in spans)

    while i < len(tokens):
        tok = tokens[i]
        start = src.offset(*tok.start)
        if tok.type == fstring_start:  # Python 3.12+: one edit over the whole f-string
            depth, j = 1, i + 1
            while j < len(tokens) and depth:
                depth += {fstring_start: 1, fstring_end: -1}.get(tokens[j].type, 0)
                j += 1
            end = src.offset(*tokens[j - 1].end)
            text = original[start:end]
            if (new := apply_rules(text, rules)) != text:
                edits.append((start, end, new))
            i = j
            continue
        if tok.type in (tokenize.STRING, tokenize.COMMENT) and not inside_import(start):
            end = src.offset(*tok.end)
            written = original[start:end]
            before = next(
                (
                    t.type
                    for t in reversed(tokens[:i])
                    if t.type not in (tokenize.NL, tokenize.COMMENT)
                ),
                tokenize.ENCODING,
            )
            docstring = tok.type == tokenize.STRING and before in layout
            chosen = rules if tok.type == tokenize.COMMENT or docstring else code_string_rules
            new = apply_rules(written, chosen)
            if tok.type == tokenize.STRING and written.lstrip("rRuU")[:3] in ('"""', "'''"):
                new = _embedded_imports(new, modules)
            if new != written:
                edits.append((start, end, new))
        elif (
            tok.type == tokenize.NAME
            and tok.string == PACKAGE
            and i + 2 < len(tokens)
            and tokens[i + 1].string == "."
            and tokens[i + 2].type == tokenize.NAME
            and tokens[i + 2].string in moved_last
            and not inside_import(start)
            and (i == 0 or tokens[i - 1].string != ".")
        ):
            name_tok = tokens[i + 2]
            edits.append(
                (
                    src.offset(*name_tok.start),
                    src.offset(*name_tok.end),
                    moved_last[name_tok.string],
                )
            )
            i += 3
            continue
        i += 1
    return edits


def _apply(text: str, edits: Iterable[Edit]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite_python(
    text: str,
    modules: dict[str, str],
    old: str = "__main__",
    new: str | None = None,
    *,
    is_package: bool = False,
    bare_in_code_strings: bool = True,
    mask_magics: bool = False,
) -> str:
    """``text``, the source of module ``old`` that now lives at ``new``, with every reference to
    a moved module rewritten. ``mask_magics``: IPython lines (``%``, ``!``) are read as comments
    (a notebook cell, a Markdown block); they keep their offsets."""
    new = new or old
    parsed_text = text
    if mask_magics:
        parsed_text = re.sub(r"(?m)^(\s*)[%!]", r"\1#", text)
    src = _Source(parsed_text)
    try:
        tree = ast.parse(parsed_text)
    except SyntaxError:
        # not Python (a shell block, a fragment): only the exact spellings
        return apply_rules(text, text_rules(modules, bare_files=True))
    edits = _import_edits(tree, src, old, new, is_package, modules)
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            spans.append(
                (
                    src.byte_offset(node.lineno, node.col_offset),
                    src.byte_offset(node.end_lineno or node.lineno, node.end_col_offset or 0),
                )
            )
    edits += _token_edits(src, spans, modules, text, bare_in_code_strings=bare_in_code_strings)
    return _apply(text, edits)


LINE_LIMIT = 100  # pyproject's ruff line-length


def _move_into_next_string(lines: list[str], i: int, limit: int) -> bool:
    """A code line ending in one part of an implicitly joined string (``"... (device "`` over
    ``"choice, ..."``): its last words move to the start of the next part."""
    line, following = lines[i].rstrip("\n"), lines[i + 1].rstrip("\n")
    opening = re.match(r"\s*f?\"", following)
    if not line.endswith('"') or opening is None:
        return False
    cut = line.rfind(" ", 0, limit - 1)  # the closing quote needs a column
    moved = line[cut + 1 : -1]
    if cut < 0 or not moved or any(c in moved for c in '"\\{}'):
        return False
    lines[i] = line[: cut + 1] + '"\n'
    lines[i + 1] = following[: opening.end()] + moved + following[opening.end() :] + "\n"
    return True


def wrap_long_lines(text: str, limit: int = LINE_LIMIT) -> str:
    """A comment or docstring line that a longer name pushed past ``limit``: its last words go
    to the start of the next line of the same comment or string (or a new one), as a person
    would re-wrap it. Code lines are left (the lead wraps those by hand: the run lists them)."""
    lines = text.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    in_string: set[int] = set()  # 0-based lines inside a triple-quoted string
    for tok in tokens:
        if tok.type == tokenize.STRING and tok.string.lstrip("rRbBuU")[:3] in ('"""', "'''"):
            in_string.update(range(tok.start[0] - 1, tok.end[0]))
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        stripped = line.lstrip()
        kind = "#" if stripped.startswith("#") else ("s" if i in in_string else None)
        if len(line) <= limit or "noqa" in line or "http" in line:
            i += 1
            continue
        if kind is None:
            if i + 1 < len(lines) and _move_into_next_string(lines, i, limit):
                continue  # look at the shortened line again
            i += 1
            continue
        cut = line.rfind(" ", 0, limit + 1)
        indent = line[: len(line) - len(stripped)]
        prefix = indent + ("# " if kind == "#" else "")
        if cut <= len(prefix):
            i += 1
            continue
        head, tail = line[:cut].rstrip(), line[cut + 1 :]
        lines[i] = head + "\n"
        following = lines[i + 1].rstrip("\n") if i + 1 < len(lines) else ""
        continues = following.startswith(prefix) and bool(following[len(prefix) :].strip())
        if kind == "#":
            same = continues and following.lstrip().startswith("# ")
        else:
            closing = following.strip().startswith(('"""', "'''"))
            indented = following[len(prefix) : len(prefix) + 1] == " "
            same = continues and i + 1 in in_string and not closing and not indented
        if same:
            lines[i + 1] = prefix + tail + " " + following[len(prefix) :] + "\n"
        else:
            lines.insert(i + 1, prefix + tail + "\n")
            in_string = {n + 1 if n > i else n for n in in_string}
        i += 1
    return "".join(lines)


# --- notebooks, Markdown, other text -------------------------------------------------------


def rewrite_notebook(text: str, modules: dict[str, str]) -> str:
    """The code cells' sources rewritten; outputs (what a run printed) are left as they were."""
    notebook = json.loads(text)
    changed = False
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"]
        joined = "".join(source) if isinstance(source, list) else source
        new = rewrite_python(joined, modules, mask_magics=True)
        if new != joined:
            changed = True
            cell["source"] = new.splitlines(keepends=True) if isinstance(source, list) else new
    if not changed:
        return text
    # nbformat's own layout (indent 1, non-ASCII kept), which the notebooks are written in
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


_FENCE = re.compile(r"(?ms)^(```+|~~~+)([^\n]*)\n(.*?)^\1[ \t]*$")


def rewrite_markdown(
    text: str, modules: dict[str, str], attrs: dict[str, set[str]] | None = None
) -> str:
    """Python blocks as Python (imports parsed); the prose and other blocks by the text rules."""
    rules = text_rules(modules, bare_files=True, attrs=attrs)
    out, last = [], 0
    for match in _FENCE.finditer(text):
        out.append(apply_rules(text[last : match.start(3)], rules))
        language = match.group(2).strip().lower()
        body = match.group(3)
        if language in ("python", "py", "ipython", "python3", "pycon"):
            out.append(rewrite_python(body, modules, mask_magics=True))
        else:
            out.append(apply_rules(body, rules))
        last = match.end(3)
    out.append(apply_rules(text[last:], rules))
    return "".join(out)


def rewrite_text(text: str, modules: dict[str, str]) -> str:
    return apply_rules(text, text_rules(modules, bare_files=False))


# --- ARCHITECTURE.md -----------------------------------------------------------------------


def _map_parts(map_text: str) -> tuple[str, str]:
    """tools/regroup_map.md: the paragraph, and the layer block (a fenced block)."""
    body = map_text.split("<!-- paragraph -->", 1)[1]
    paragraph, _, rest = body.partition("<!-- layers -->")
    block = _FENCE.search(rest)
    if block is None:
        raise RegroupError(f"{MAP_TEXT} has no fenced layer block after <!-- layers -->")
    return paragraph.strip() + "\n", block.group(0)


def update_architecture(text: str, map_text: str) -> str:
    """The map paragraph after the title; the first code block under "## The layers" replaced
    by the map's layer block."""
    paragraph, block = _map_parts(map_text)
    if paragraph not in text:
        title_end = text.index("\n") + 1 if text.startswith("# ") else 0
        text = text[:title_end] + "\n" + paragraph + text[title_end:]
    heading = text.find("## The layers")
    if heading >= 0:
        old = _FENCE.search(text, heading)
        if old is not None and old.group(0) != block:
            text = text[: old.start()] + block + text[old.end() :]
    return text


# --- the layer check -----------------------------------------------------------------------


def _rank(module: str, modules: dict[str, str]) -> int | None:
    module = map_module(module, modules)
    best: tuple[int, int] | None = None  # (length of the prefix, rank): the longest prefix wins
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def _imported(root: Path, base: str, name: str, modules: dict[str, str]) -> str:
    """What ``from base import name`` imports: the module ``base.name`` when it is one (a moved
    module by its old name, or a file or folder there now), else ``base``."""
    full = f"{base}.{name}"
    where = root / full.replace(".", "/")
    if full in modules or where.with_suffix(".py").is_file() or where.is_dir():
        return full
    return base


def upward_imports(root: Path, modules: dict[str, str] | None = None) -> list[str]:
    """Imports inside the package that point up LAYERS (on either layout: old names are mapped
    first), each as ``importer -> imported`` (``lazy``: inside a function)."""
    modules = dict(modules if modules is not None else make_plan(root).modules)
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        relpath = path.relative_to(root).as_posix()
        me = module_name(relpath)
        package = _package_of(me, path.name == "__init__.py")
        my_rank = _rank(me, modules)
        tree = ast.parse(path.read_text())
        lazy_nodes = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [_imported(root, base, a.name, modules) for a in node.names]
            line = getattr(node, "lineno", 0)
            for target in targets:
                rank = _rank(target, modules)
                if my_rank is None or rank is None or rank >= my_rank:
                    continue
                lazy = " (lazy)" if id(node) in lazy_nodes else ""
                found.append(f"{relpath}:{line} {me} -> {target}{lazy}")
    return sorted(set(found))


# --- running it ----------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def _rewritable(relpath: str) -> bool:
    if relpath in NOT_REWRITTEN or relpath.startswith(NOT_REWRITTEN_DIRS):
        return relpath.startswith("tests/data/") and relpath.endswith(".md")
    return relpath.endswith(TEXT_SUFFIXES) or relpath in TEXT_NAMES


def rewrite_file(
    relpath: str,
    text: str,
    old_module: str | None,
    modules: dict[str, str],
    attrs: dict[str, set[str]] | None = None,
) -> str:
    if relpath.endswith(".py"):
        new_module = module_name(relpath)
        return rewrite_python(
            text,
            modules,
            old_module or new_module,
            new_module,
            is_package=relpath.endswith("__init__.py"),
            bare_in_code_strings=not relpath.startswith(PACKAGE + "/"),
        )
    if relpath.endswith(".ipynb"):
        return rewrite_notebook(text, modules)
    if relpath.endswith(".md"):
        return rewrite_markdown(text, modules, attrs)
    return rewrite_text(text, modules)


def regroup(root: Path, plan: Plan, *, ruff: bool = True, log=print) -> list[str]:
    """Apply ``plan`` to the checkout at ``root``; returns the files it changed."""
    # where each file of the package lived before, so relative imports resolve as they were
    old_name = {}
    for relpath in _git(root, "ls-files", PACKAGE).split():
        if relpath.endswith(".py"):
            new = plan.moves.get(relpath, relpath)
            old_name[new] = module_name(relpath)
    for folder in plan.new_folders:
        folder_name = folder.split("/", 1)[1]
        (root / folder).mkdir(parents=True, exist_ok=True)
        job = FOLDERS.get(folder_name, f"The {folder_name} modules.")
        (root / folder / "__init__.py").write_text(f'"""{job}"""\n')
        _git(root, "add", f"{folder}/__init__.py")
    for old, new in plan.moves.items():
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        _git(root, "mv", old, new)
        log(f"moved {old} -> {new}")
    changed = []
    for relpath in _git(root, "ls-files").splitlines():
        path = root / relpath
        if not _rewritable(relpath) or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = rewrite_file(relpath, text, old_name.get(relpath), plan.modules, plan.attrs)
        if relpath == ARCHITECTURE and MAP_TEXT.is_file():
            new_text = update_architecture(new_text, MAP_TEXT.read_text())
        for before, after in BY_HAND.get(relpath, ()):
            new_text = new_text.replace(before, after)
        if relpath.endswith(".py") and new_text != text:
            new_text = wrap_long_lines(new_text)
        if new_text != text:
            path.write_text(new_text)
            changed.append(relpath)
    log(f"rewrote {len(changed)} files")
    python = [p for p in changed if p.endswith(".py")]
    if ruff and python and importlib.util.find_spec("ruff") is None:
        log(f"ruff is not installed for {sys.executable}: imports left unsorted (run make lint)")
        ruff = False
    if ruff and python:
        # the moved imports sort differently now; --force-exclude keeps ruff's own excludes
        for args in (["check", "--select", "I", "--fix", "--quiet"], ["format", "--quiet"]):
            subprocess.run(
                [sys.executable, "-m", "ruff", *args, "--force-exclude", *python],
                cwd=root,
                check=False,
            )
    if ruff and python:  # what re-wrapping could not reach (code), for a person
        report = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "E501", "--force-exclude",
             "--output-format", "concise", "--quiet", *python],
            cwd=root, capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        long = re.findall(r"(?m)^(\S+?:\d+):\d+: E501", report)
        if long:
            log("lines over the limit to wrap by hand: " + ", ".join(long))
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: .)")
    parser.add_argument("--check", action="store_true", help="print the plan, change nothing")
    parser.add_argument("--layers", action="store_true", help="list imports pointing up")
    parser.add_argument("--no-ruff", action="store_true", help="do not sort/format with ruff")
    parser.add_argument(
        "--place", action="append", default=[], metavar="NAME=FOLDER[.NEWNAME]",
        help="place a root module the map does not know",
    )  # fmt: skip
    args = parser.parse_args(argv)
    root = args.root.resolve()
    places = {}
    for item in args.place:
        name, _, place = item.partition("=")
        if not place:
            parser.error(f"--place {item!r}: write NAME=FOLDER, e.g. child_watchdog=processes")
        places[name] = place if "." in place else f"{place}.{name}"
    try:
        plan = make_plan(root, places)
    except RegroupError as error:
        print(f"regroup: {error}", file=sys.stderr)
        return 2
    if args.layers:
        up = upward_imports(root, plan.modules)
        print("\n".join(up) if up else "no import points up the layers")
        return 1 if any(not line.endswith("(lazy)") for line in up) else 0
    print(plan.describe())
    if args.check:
        return 0
    regroup(root, plan, ruff=not args.no_ruff)
    up = upward_imports(root, plan.modules)
    print("imports pointing up the layers:" if up else "no import points up the layers")
    print("\n".join(f"  {line}" for line in up))
    return 0


if __name__ == "__main__":
    sys.exit(main())
