"""``%%ncu --nproc N --rank R`` and a drill-down into one rank of a multi-rank cell: torchrun
starts every rank through ``processes/rank_exec.py``, which puts only rank R under the profiler
argv saved in the run folder's ``rank_prefix.json``; each rank writes its own status file.
On a GPU that prefix is ncu; here ncu's part (run the command it is given, as that rank) is
played by ``/usr/bin/env`` setting one variable, so the rest runs for real on the CPU: the
prefix file's name and content, rank_exec, the per-rank status files and how the cell's
status is taken from them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend, BareRun, gloo_retry

from nsight_magic.errors import CellFailedError
from nsight_magic.processes.cell_command import RANK_EXEC, one_rank_command
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers.drill_request import DrillRequest
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.session.backends import NcuBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.runs import drill
from nsight_magic.session.spec import CellRequest, RunCallbacks

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

    def attempt() -> Any:
        out.clear()
        return manager.profile(request, OneRankUnderPrefix("ncu"), notebook=manager.notebook,
                               callbacks=RunCallbacks(output=out.append))  # fmt: skip

    return gloo_retry(attempt), out


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


# an ``nvtx`` module first on the ranks' PYTHONPATH: each range a process opens is a line of
# the log, with the process's rank and whether it runs under the (stand-in) profiler
LOGGING_NVTX = f"""
import contextlib, json, os

def _log(*event):
    with open(os.environ["NVTX_LOG"], "a") as f:
        f.write(json.dumps([os.environ.get("RANK"), {MARK!r} in os.environ, *event]) + "\\n")

@contextlib.contextmanager
def annotate(message=None, domain=None, **kw):
    _log("push", domain, message)
    try:
        yield
    finally:
        _log("pop", domain, message)

def start_range(message=None, domain=None, **kw):
    _log("start", domain, message)
    return (domain, message)

def end_range(handle):
    _log("end", *handle)
"""


def _start_end_filter(expression: str) -> tuple[str, str]:
    """(domain, range) of an ncu --nvtx-include for one start/end range ("DOMAIN@RANGE")."""
    assert "/" not in expression, "a push/pop filter: not what the drill-down uses here"
    domain, _, name = expression.partition("@")
    return domain, name


class NcuStandIn(NcuBackend):
    """The drill-down's own NcuBackend (its filters, its script settings, its check of what was
    captured), with ``env MARK=1`` in ncu's place and, as the report, the statement ranges the
    profiled rank opened inside the start/end range ncu's --nvtx-include names: what ncu's
    filter would hold."""

    def locate(self) -> Tool:
        return Tool(name="ncu", path=ENV)

    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]:
        folder = RunDir(run_dir)
        prefix = folder.write_rank_prefix([ENV, f"{MARK}=1"])
        return one_rank_command(request.python, folder.script, [str(folder.status)],
                                request.nproc, request.rank, prefix)  # fmt: skip

    def report_path(self, run_dir: Path) -> Path:
        return RunDir(run_dir).status  # there is no ncu report: the status file stands for it

    def load(self, tool: Tool, run_dir: Path, nproc: int = 1) -> Any:
        (expression,) = self.options.nvtx_include
        wanted = _start_end_filter(expression)
        events = [json.loads(x) for x in Path(os.environ["NVTX_LOG"]).read_text().splitlines()]
        held, open_ = [], 0
        for _rank, profiled, kind, domain, message in events:
            if not profiled:
                continue
            if (domain, message) == wanted and kind in ("start", "end"):
                open_ += 1 if kind == "start" else -1
            elif kind == "push" and open_ and message.startswith("L"):
                held.append(message)
        return held

    def result(self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any,
               drill_runner: Any) -> Any:  # fmt: skip
        return BareRun(report, run_dir, meta)


@pytest.mark.torch
def test_a_rank_drill_down_of_an_nsys_run_opens_the_range_ncu_filters_on(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%%nsys --nproc 2`` then ``profile_kernel(..., rank=1)``: the drill-down re-runs the nsys
    run's saved script as two ranks, rank 1 under ncu, whose filter is the start/end range
    ``nsight_magic@capture``. The nsys script never opened it (its gate is cudaProfilerApi), so
    ncu captured nothing: NothingCapturedError (2 x H200). The re-run now gates as ncu's."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "nvtx.py").write_text(LOGGING_NVTX)
    log = tmp_path / "nvtx.log"
    # the session's own environment: a re-run takes no --env from a folder it did not trust
    # (a multi-rank run is fresh: not in the worker's history)
    monkeypatch.setenv("NVTX_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    cell = "x = sum(range(10))\nprint('rank', x)\n"
    parent = gloo_retry(lambda: manager.profile(
        CellRequest(cell=cell, nproc=2, timeout=120.0, runs_root=tmp_path / "runs"),
        BareBackend(), notebook=manager.notebook,
    ))  # fmt: skip
    assert parent.meta["rank_status"] == {"0": "ok", "1": "ok"}
    log.unlink()
    monkeypatch.setattr(drill, "NcuBackend", NcuStandIn)
    drill_rank_1 = DrillRequest(kernel="gemm", rank=1, timeout=120.0)
    child = gloo_retry(lambda: manager.drills.profile_kernel(parent, drill_rank_1))
    assert child.report == ["L1: x = sum(range(10))", "L2: print('rank', x)"]
    events = [json.loads(x) for x in log.read_text().splitlines()]
    # rank 1 alone ran under the (stand-in) profiler; rank 0 ran bare
    assert {(rank, profiled) for rank, profiled, *_ in events} == {("0", False), ("1", True)}
    assert child.meta["rank"] == 1 and child.meta["cell_status"]["gate"] == "nvtx"
