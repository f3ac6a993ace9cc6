"""The notebook's own sys.path entries travel to a worker (shared_state/project_paths.py): the
project's folders, not the interpreter's, each where the notebook has it."""

from __future__ import annotations

import site
import sys
from pathlib import Path

import pytest

from nsight_magic.shared_state import project_paths


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
