"""The notebook's project code in a worker (shared_state/project_code.py): its own sys.path
entries (not the interpreter's, each where the notebook has it) and its modules' code as the
notebook loaded it."""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

import pytest

from nsight_magic.shared_state import project_code as project_paths


def test_only_the_folders_the_notebook_added_travel_each_on_its_side(tmp_path: Path) -> None:
    front, back = tmp_path / "src", tmp_path / "lib"
    front.mkdir()
    back.mkdir()
    stdlib = str(Path(sys.base_prefix, "lib"))
    packages = site.getsitepackages()[0]
    path = [str(front), "", stdlib, packages, "__editable__.pkg.finder.__path_hook__",
            str(back), str(tmp_path / "gone")]  # fmt: skip
    assert project_paths.project_paths(path) == [(str(front), True), (str(back), False)]


def test_follow_adds_what_is_missing_in_the_notebooks_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", ["/w/own", "/w/site"])
    project_paths.follow([("/n/a", True), ("/n/b", True), ("/w/site", False), ("/n/c", False)])
    assert sys.path == ["/n/a", "/n/b", "/w/own", "/w/site", "/n/c"]
    # again: nothing twice; a malformed entry is passed over
    project_paths.follow([("/n/a", True), ("/n/b", True), (3, True), ("/n/c", False)])  # type: ignore[list-item]
    assert sys.path == ["/n/a", "/n/b", "/w/own", "/w/site", "/n/c"]
    project_paths.follow(None)
    assert len(sys.path) == 5


def test_a_module_the_notebook_reloaded_is_reloaded_where_its_code_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notebook's print of its project module's code, and this process's copy of another
    version of the file: reloaded once to the notebook's; a version no reload reaches (the
    file changed again) is not tried twice; another Python's prints are not compared."""
    import importlib
    import os

    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "proj_mod_v.py"
    source.write_text("def f():\n    return 1\n\nclass C:\n    def m(self):\n        return 1\n")
    module = importlib.import_module("proj_mod_v")
    try:
        sent = project_paths.project_modules()
        assert "proj_mod_v" in sent["modules"] and "pytest" not in sent["modules"]
        old_print = sent["modules"]["proj_mod_v"]
        # the notebook edited the file and reloaded it: its print is the new code's
        stat = source.stat()
        source.write_text(
            "def f():\n    return 2\n\nclass C:\n    def m(self):\n        return 2\n"
        )
        os.utime(source, (stat.st_mtime + 5, stat.st_mtime + 5))
        importlib.reload(module)
        new_print = project_paths.code_print(module)
        assert new_print != old_print and module.f() == 2
        # this process back on the old code (the worker's copy), then told the notebook's
        source.write_text(
            "def f():\n    return 1\n\nclass C:\n    def m(self):\n        return 1\n"
        )
        os.utime(source, (stat.st_mtime + 10, stat.st_mtime + 10))
        importlib.reload(module)
        assert project_paths.code_print(module) == old_print
        other_python = {"python": "2.7", "modules": {"proj_mod_v": new_print}}
        assert project_paths.follow_modules(other_python) == []
        # the file holds the old code: a reload does not reach the notebook's, said by the
        # print, and not tried again for the same print
        wanted = {"python": sent["python"], "modules": {"proj_mod_v": new_print}}
        assert project_paths.follow_modules(wanted) == ["proj_mod_v"]
        assert project_paths.follow_modules(wanted) == []
        # the file as the notebook has it: reloaded to its code
        source.write_text(
            "def f():\n    return 2\n\nclass C:\n    def m(self):\n        return 2\n"
        )
        os.utime(source, (stat.st_mtime + 15, stat.st_mtime + 15))
        project_paths._UNREACHED.clear()
        assert project_paths.follow_modules(wanted) == ["proj_mod_v"]
        assert module.f() == 2 and module.C().m() == 2
        assert project_paths.follow_modules(wanted) == []  # equal now: nothing to do
    finally:
        sys.modules.pop("proj_mod_v", None)
        project_paths._UNREACHED.clear()


MODULE = """
import enum, functools
def base():
    return {"a": frozenset({"x", "y", "z"})}
@functools.wraps(base)
def wrapped():
    return base()
class K:
    @property
    def p(self):
        return (3, 224, 224)
    @staticmethod
    def st():
        return {RESULT}
class Mode(enum.Enum):
    TRAIN = 1
"""


def test_a_modules_print_is_its_code_alone(tmp_path: Path) -> None:
    """The same file prints the same in every process (string hashing, how many hold a
    constant: neither is the code), and an edit only inside a staticmethod prints otherwise."""
    import subprocess

    (tmp_path / "pm_same.py").write_text(MODULE.replace("{RESULT}", "1"))
    show = ("import sys; sys.path.insert(0, sys.argv[1]); import pm_same\n"
            "from nsight_magic.shared_state.project_code import code_print\n"
            "keep = pm_same.K().p; print(code_print(pm_same))")  # fmt: skip
    prints = {
        subprocess.run(
            [sys.executable, "-c", show, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(prints) == 1
    (tmp_path / "pm_other.py").write_text(MODULE.replace("{RESULT}", "2"))
    show_other = show.replace("pm_same", "pm_other")
    other = subprocess.run([sys.executable, "-c", show_other, str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert other != prints.pop()


def test_autoreload_in_the_worker_keeps_an_enum_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """%autoreload's way (old functions take the new code, the module keeps them) leaves an
    Enum the new one, as IPython does: its members are its own class's."""
    import importlib

    pytest.importorskip("IPython")
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "pm_enum.py"
    source.write_text(MODULE.replace("{RESULT}", "1"))
    module = importlib.import_module("pm_enum")
    try:
        old_base = module.base
        stat = source.stat()
        source.write_text(MODULE.replace("{RESULT}", "2"))
        os.utime(source, (stat.st_mtime + 5, stat.st_mtime + 5))
        wanted = {"python": project_paths._python(), "superreload": True,
                  "modules": {"pm_enum": 0}}  # fmt: skip
        assert project_paths.follow_modules(wanted) == ["pm_enum"]
        assert module.K.st() == 2 and module.base is old_base  # the old function, new code
        assert isinstance(module.Mode.TRAIN, module.Mode)
    finally:
        sys.modules.pop("pm_enum", None)
        project_paths._UNREACHED.clear()
