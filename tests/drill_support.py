"""Fixtures for drill-down tests that need no ncu: a session manager whose ``profile`` keeps
what it is handed and stops there (``Captured``), and a saved nsys run folder to drill into.
A test module imports the fixtures by name (pytest finds them in its namespace)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from nsight_magic.processes.locate import Tool
from nsight_magic.run_folders import runs
from nsight_magic.run_folders.run_dir import RunDir, write_json, write_private
from nsight_magic.session.backends import NcuBackend
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest


class Captured(Exception):
    """Raised by the fake ``profile`` once it kept the request: nothing runs."""


@pytest.fixture
def drill_manager(monkeypatch: pytest.MonkeyPatch) -> tuple[SessionManager, list[Any]]:
    """A session manager whose ``profile`` keeps the request and backend it is handed (there
    is no ncu here: what is tested is what reaches the child run's ncu options and argv)."""
    seen: list[Any] = []
    manager = SessionManager()

    def profile(request: CellRequest, backend: Any, **kwargs: Any) -> Any:
        seen.append((request, backend, kwargs))
        raise Captured

    monkeypatch.setattr(manager, "profile", profile)
    monkeypatch.setattr(NcuBackend, "locate", lambda self: Tool(name="ncu", path="ncu"))
    return manager, seen


@pytest.fixture
def saved_parent(tmp_path: Path, nsys_small_sqlite: Path) -> Path:
    """A saved nsys run folder (the small real report, its cell and script)."""
    run = runs.new_run_dir(tmp_path / "runs", "saved")
    shutil.copy(nsys_small_sqlite, run / "report.sqlite")
    folder = RunDir(run)
    write_private(folder.cell, "x = 1\n")
    write_private(folder.script, "print('saved script')\n")
    write_json(folder.meta, {"tool": "nsys", "name": "saved"})
    return run
