"""``%%ncu --nproc N --rank R`` and a drill-down into one rank of a multi-rank cell: torchrun
starts every rank through ``session/rank_exec.py``, which puts only rank R under the profiler
argv saved in the run folder's ``rank_prefix.json``; each rank writes its own status file.
On a GPU that prefix is ncu; here ncu's part (run the command it is given, as that rank) is
played by ``/usr/bin/env`` setting one variable, so the rest runs for real on the CPU: the
prefix file's name and content, rank_exec, the per-rank status files and how the cell's
status is taken from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.processes.locate import Tool
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.session.backends import NcuBackend
from nsight_magic.session.cell_command import RANK_EXEC, one_rank_command
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

ENV = shutil.which("env") or "/usr/bin/env"
MARK = "NSM_UNDER_PREFIX"


def test_ncu_one_rank_argv_saves_its_prefix_where_rank_exec_reads_it(tmp_path: Path) -> None:
    folder = RunDir(tmp_path)
    request = CellRequest(cell="pass", nproc=2, rank=1)
    argv = NcuBackend().fresh_argv(Tool(name="ncu", path="/opt/ncu/ncu"), folder.path, request)
    assert argv[argv.index("-m", 3) + 1] == RANK_EXEC
    assert argv[argv.index("--rank") + 1] == "1"
    assert argv[argv.index("--prefix") + 1] == str(folder.rank_prefix)
    assert argv[argv.index("--") + 1 :] == [str(folder.script), str(folder.status)]
    prefix = json.loads(folder.rank_prefix.read_text())
    assert prefix[0] == "/opt/ncu/ncu" and prefix[-2:] == ["-o", str(folder.report_base)]
    assert folder.report_base.with_suffix(".ncu-rep") == folder.report("ncu")


class OneRankUnderPrefix(BareBackend):
    """NcuBackend's multi-rank fresh command, with ``env MARK=1`` as the profiler prefix."""

    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]:
        folder = RunDir(run_dir)
        prefix = folder.write_rank_prefix([ENV, f"{MARK}=1"])
        return one_rank_command(request.python, folder.script, [str(folder.status)],
                                request.nproc, request.rank, prefix)  # fmt: skip


@pytest.fixture
def manager() -> Any:
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _run(manager: SessionManager, tmp_path: Path, cell: str, rank: int) -> tuple[Any, list[str]]:
    out: list[str] = []
    request = CellRequest(cell=cell, nproc=2, rank=rank, timeout=120.0, cwd=str(tmp_path),
                          runs_root=tmp_path / "runs")  # fmt: skip
    result = manager.profile(request, OneRankUnderPrefix("ncu"), notebook=Notebook(),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return result, out


@pytest.mark.torch
def test_only_the_chosen_rank_runs_under_the_prefix(manager: SessionManager, tmp_path: Path):
    cell = f"import os\nprint('rank', os.environ['RANK'], os.environ.get({MARK!r}, 'bare'))\n"
    result, out = _run(manager, tmp_path, cell, rank=1)
    assert {line for line in out if ":rank " in line} == {
        "[default0]:rank 0 bare", "[default1]:rank 1 1"}  # fmt: skip
    folder = RunDir(result.run_dir)
    assert folder.read_status(0)["status"] == folder.read_status(1)["status"] == "ok"
    assert result.meta["rank_status"] == {"0": "ok", "1": "ok"}


@pytest.mark.torch
def test_a_failure_on_the_profiled_rank_fails_the_cell_and_names_it(
    manager: SessionManager, tmp_path: Path
) -> None:
    cell = f"import os\nassert {MARK!r} not in os.environ, 'failed under the profiler'\n"
    with pytest.raises(CellFailedError, match=r"\(rank 1\) failed under the profiler") as info:
        _run(manager, tmp_path, cell, rank=1)
    run = info.value.run
    assert run is not None and run.meta["rank_status"] == {"0": "ok", "1": "error"}
