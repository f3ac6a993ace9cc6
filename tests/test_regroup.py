"""tools/regroup.py (issue 36 item 9): the map is complete for this checkout, imports are
rewritten by parsing them (relative ones resolved at the old place, written from the new),
mentions by their exact spelling, and a run on a small git checkout moves, rewrites, imports,
and changes nothing the second time."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regroup", REPO / "tools" / "regroup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["regroup"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


regroup = _load()
MODULES = {f"nsight_magic.{old}": f"nsight_magic.{new}" for old, new in regroup.MOVES.items()}


def py(text: str, old: str = "__main__", new: str | None = None, **kw: bool) -> str:
    return regroup.rewrite_python(textwrap.dedent(text), MODULES, old, new, **kw)


def test_every_root_module_of_this_checkout_has_a_place() -> None:
    plan = regroup.make_plan(REPO)
    roots = {p.stem for p in (REPO / "nsight_magic").glob("*.py")} - regroup.KEEP
    assert roots <= set(regroup.MOVES) | set(plan.by_rule)
    assert len(regroup.KEEP) <= 10  # "at most 10 modules at the root"
    # every folder a module moves into says its job in one line of its __init__.py
    for new in regroup.MOVES.values():
        assert new.split(".")[0] in regroup.FOLDERS
    for job in regroup.FOLDERS.values():
        assert len(f'"""{job}"""') <= regroup.LINE_LIMIT and "\n" not in job


def test_a_root_module_no_rule_places_stops_the_run_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "nsight_magic").mkdir()
    (tmp_path / "nsight_magic" / "__init__.py").write_text("")
    (tmp_path / "nsight_magic" / "watchdog.py").write_text("")
    (tmp_path / "nsight_magic" / "child_reaper.py").write_text("")
    with pytest.raises(regroup.RegroupError, match=r"watchdog\.py.*--place"):
        regroup.make_plan(tmp_path)
    plan = regroup.make_plan(tmp_path, {"watchdog": "processes.watchdog"})
    assert plan.moves == {
        "nsight_magic/child_reaper.py": "nsight_magic/processes/child_reaper.py",  # by rule
        "nsight_magic/watchdog.py": "nsight_magic/processes/watchdog.py",
    }
    assert plan.by_rule == {"child_reaper": "processes.child_reaper"}


def test_relative_imports_resolve_at_the_old_place_and_are_written_from_the_new() -> None:
    source = """\
        from . import magic_names, tools
        from .errors import CellSyntaxError
        from .magic_options import (
            check_flags,  # why: kept as written
        )
        from .profilers.ncu import NcuOptions
        """
    assert py(source, "nsight_magic.magics", "nsight_magic.magic.magics") == textwrap.dedent("""\
        from ..vocabulary import magic_names
        from ..processes import locate as tools
        from ..errors import CellSyntaxError
        from .options import (
            check_flags,  # why: kept as written
        )
        from ..profilers.ncu import NcuOptions
        """)
    # a module that stays, importing one that moved; a function-level (lazy) import too
    assert py(
        "from ... import runs, tools\n\ndef f():\n    from ...tools import find_tool\n",
        "nsight_magic.reports.nsys.export",
    ) == (
        "from ...run_folders import runs\nfrom ...processes import locate as tools\n\n"
        "def f():\n    from ...processes.locate import find_tool\n"
    )
    # the package's own __init__: ``from .x`` is relative to itself
    assert py("from .magics import register\n", "nsight_magic", is_package=True) == (
        "from .magic.magics import register\n"
    )


def test_absolute_imports_and_dotted_mentions() -> None:
    source = """\
        import nsight_magic.magics
        from nsight_magic import folders, load_run, runs
        from nsight_magic.tools import find_tool as ft
        import pandas.core  # not ours

        nsight_magic.magics.register(ip)  # nsight_magic.magics: %load_ext's
        monkeypatch.setattr("nsight_magic.tools.find_tool", fake)
        PATH = PACKAGE / "run_dir.py"  # the file, package-relative
        message = f"column {name!r} is not in nsight_magic/columns.py"
        run_dir = info["run_dir"]  # a key, not the module
        """
    assert py(source) == textwrap.dedent("""\
        import nsight_magic.magic.magics
        from nsight_magic.run_folders import ownership as folders, runs
        from nsight_magic import load_run
        from nsight_magic.processes.locate import find_tool as ft
        import pandas.core  # not ours

        nsight_magic.magic.magics.register(ip)  # nsight_magic.magic.magics: %load_ext's
        monkeypatch.setattr("nsight_magic.processes.locate.find_tool", fake)
        PATH = PACKAGE / "run_folders/run_dir.py"  # the file, package-relative
        message = f"column {name!r} is not in nsight_magic/vocabulary/columns.py"
        run_dir = info["run_dir"]  # a key, not the module
        """)


def test_a_child_script_in_a_string_and_a_sibling_s_file_name() -> None:
    # a test's child process source: its imports are parsed like the code's
    source = 'CHILD = r"""\nimport os\n    from nsight_magic import gui, runner\n"""\n'
    assert py(source) == (
        'CHILD = r"""\nimport os\n    from nsight_magic.processes import gui, runner\n"""\n'
    )
    # in the package's own code "x.py" is a sibling's file, which moved along with it
    sibling = 'WATCHDOG = Path(__file__).with_name("child_signals.py")  # child_signals.py\n'
    old, new = "nsight_magic.child_lifetime", "nsight_magic.processes.child_lifetime"
    assert py(sibling, old, new, bare_in_code_strings=False) == (
        'WATCHDOG = Path(__file__).with_name("child_signals.py")  # processes/child_signals.py\n'
    )


def test_a_rewrite_of_rewritten_text_changes_nothing() -> None:
    once = py(
        "from .. import runner, gui\nfrom ..run_dir import RunDir\n", "nsight_magic.session.x"
    )
    assert py(once, "nsight_magic.session.x") == once
    moved = py(
        "from .run_dir import RunDir\n", "nsight_magic.runner", "nsight_magic.processes.runner"
    )
    assert moved == "from ..run_folders.run_dir import RunDir\n"
    # the second run: the module already lives at its new name
    same = "nsight_magic.processes.runner"
    assert py(moved, same, same) == moved


def test_notebook_cells_markdown_and_other_text() -> None:
    cell = "%%nsys --vars x\nfrom nsight_magic.runs import list_runs\n!ls nsight_magic/tools.py\n"
    notebook = {
        "cells": [
            {"cell_type": "code", "source": cell.splitlines(keepends=True), "outputs": []},
            {"cell_type": "markdown", "source": ["nsight_magic.runs stays in prose cells"]},
        ]
    }
    out = json.loads(regroup.rewrite_notebook(json.dumps(notebook, indent=1), MODULES))
    assert "".join(out["cells"][0]["source"]) == (
        "%%nsys --vars x\nfrom nsight_magic.run_folders.runs import list_runs\n"
        "!ls nsight_magic/processes/locate.py\n"
    )
    assert out["cells"][1] == notebook["cells"][1]

    attrs = {"nsight_magic.magic_help": {"renamed"}, "nsight_magic.run_dir": {"RunDir"}}
    markdown = (
        "`magic_help.renamed` and `run_dir.RunDir` (`runner.py`, `session/runner.py` untouched)\n"
        "```python\nfrom nsight_magic.errors import ReportError\n"
        "from nsight_magic import runs\n```\n"
        "see tools/probes/session_probe.py\n"
    )
    assert regroup.rewrite_markdown(markdown, MODULES, attrs) == (
        "`magic/help.renamed` and `run_folders/run_dir.RunDir` (`processes/runner.py`, "
        "`session/runner.py` untouched)\n"
        "```python\nfrom nsight_magic.errors import ReportError\n"
        "from nsight_magic.run_folders import runs\n```\n"
        "see tools/fixtures/probes/session_probe.py\n"
    )
    toml = 'extend-exclude = ["tools/probes"]\nversion = "nsight_magic.package_info.__version__"\n'
    assert regroup.rewrite_text(toml, MODULES) == toml.replace(
        "tools/probes", "tools/fixtures/probes"
    )


def test_long_comment_docstring_and_joined_string_lines_are_rewrapped() -> None:
    long = "x" * 60
    source = (
        f"# {long} nsight_magic/vocabulary/columns.py says\n# the rest\n"
        f'def f():\n    """{long} nsight_magic/vocabulary/columns.py says\n    more."""\n'
        f'RULE = ("{long} nsight_magic.run_folders.shared_env allow "\n    "list")\n'
    )
    wrapped = regroup.wrap_long_lines(source, limit=80)
    assert all(len(line) <= 80 for line in wrapped.splitlines())
    assert wrapped != source
    # the same words, only moved between lines of the same comment, docstring or string
    assert re.sub(r'[#"\s]', "", wrapped) == re.sub(r'[#"\s]', "", source)
    compile(wrapped, "wrapped", "exec")


def test_architecture_gets_the_map_once() -> None:
    text = "# Architecture\n\n## The layers\n\nintro\n\n```\nold block\n```\n\nmore\n"
    map_text = regroup.MAP_TEXT.read_text()
    once = regroup.update_architecture(text, map_text)
    assert once.startswith("# Architecture\n\n**The package as a map.**")
    assert "old block" not in once and "vocabulary/" in once and once.endswith("more\n")
    assert regroup.update_architecture(once, map_text) == once


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_a_run_on_a_checkout_moves_rewrites_imports_and_is_idempotent(tmp_path: Path) -> None:
    files = {
        "nsight_magic/__init__.py": '_LAZY = {"share": ("nsight_magic.sharing", "share")}\n',
        "nsight_magic/errors.py": "class RunFolderError(Exception):\n    pass\n",
        "nsight_magic/run_dir.py": "from .errors import RunFolderError\nNAME = 'run'\n",
        "nsight_magic/sharing.py": "from .run_dir import NAME\n\ndef share():\n    return NAME\n",
        "nsight_magic/tools.py": "from .errors import RunFolderError\nWHICH = 'nsys'\n",
        "nsight_magic/session/__init__.py": "",
        "nsight_magic/session/pipeline.py": "from .. import tools\nfrom ..run_dir import NAME\n",
        "tests/test_x.py": (
            "from nsight_magic import tools\n\ndef test_x(monkeypatch):\n"
            "    monkeypatch.setattr('nsight_magic.tools.WHICH', 'ncu')\n"
        ),
        "tools/probes/probe.py": "# python3 tools/probes/probe.py OUT\n",
        "ARCHITECTURE.md": "# Architecture\n\n## The layers\n\n```\nrunner.py\n```\n",
        "CHANGELOG.md": "- moved nsight_magic/tools.py\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    run = [sys.executable, str(REPO / "tools" / "regroup.py"), "--root", str(tmp_path)]

    check = subprocess.run([*run, "--check"], capture_output=True, text=True, check=True)
    assert "git mv nsight_magic/tools.py nsight_magic/processes/locate.py" in check.stdout
    assert subprocess.run(["git", "status", "--short"], cwd=tmp_path, capture_output=True,
                          text=True).stdout == ""  # fmt: skip

    subprocess.run([*run, "--no-ruff"], capture_output=True, text=True, check=True)
    read = lambda rel: (tmp_path / rel).read_text()  # noqa: E731
    assert read("nsight_magic/processes/__init__.py") == f'"""{regroup.FOLDERS["processes"]}"""\n'
    assert read("nsight_magic/run_folders/sharing.py").startswith("from .run_dir import NAME")
    assert read("nsight_magic/processes/locate.py").startswith("from ..errors import")
    assert read("nsight_magic/session/pipeline.py") == (
        "from ..processes import locate as tools\nfrom ..run_folders.run_dir import NAME\n"
    )
    assert "nsight_magic.processes.locate.WHICH" in read("tests/test_x.py")
    assert (
        read("tools/fixtures/probes/probe.py") == "# python3 tools/fixtures/probes/probe.py OUT\n"
    )
    assert read("CHANGELOG.md") == files["CHANGELOG.md"]  # history is left as it was
    assert read("ARCHITECTURE.md").startswith("# Architecture\n\n**The package as a map.**")
    # the regrouped package imports, and its public name still answers
    probe = (
        "import nsight_magic, nsight_magic.session.pipeline as p;"
        "assert p.tools.WHICH == 'nsys';"
        "assert nsight_magic._LAZY['share'][0] == 'nsight_magic.run_folders.sharing'"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True)

    _git(tmp_path, "add", "-A")
    again = subprocess.run([*run, "--no-ruff"], capture_output=True, text=True, check=True)
    assert "0 moves" in again.stdout and "rewrote 0 files" in again.stdout
    assert subprocess.run(["git", "diff", "--stat"], cwd=tmp_path, capture_output=True,
                          text=True).stdout == ""  # fmt: skip


def test_this_checkout_s_imports_point_down_the_layers_once_mapped() -> None:
    """Item 5: on this (not yet moved) tree, read through the map, no import points up the
    layers but the one lazy import the report names for the lead."""
    up = regroup.upward_imports(REPO)
    assert [line for line in up if not line.endswith("(lazy)")] == []
    assert len(up) <= 1
