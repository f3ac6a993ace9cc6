"""A crashed ncu worker never costs the user their cell or their state silently: the cell runs
once more in a new worker when that leaves the notebook's state right, else (or when that one
crashes too) in a fresh process, one line says so, and the next cell starts a new worker. Real
workers that really die (SIGSEGV), no profiler (tests/session_support.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from processes import alive
from session_support import BareBackend

from nsight_magic.errors import NothingCapturedError, NsightMagicError, WorkerDiedError
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks
from nsight_magic.worker import process as worker_process

# State the notebook built in the nsys worker; replaying it in a *worker* (not in a fresh
# script) segfaults once while the flag file exists: the GPU report's crash, on the CPU
CRASH_ON_REPLAY = """\
import os, signal, sys
state = 42
if getattr(sys.modules["__main__"].__spec__, "name", "") == "nsight_magic.worker.serve":
    if os.path.exists({flag!r}):
        os.remove({flag!r})
        os.kill(os.getpid(), signal.SIGSEGV)
"""


@pytest.fixture
def run(manager: SessionManager, tmp_path: Path):
    notebook_ns: dict = {}  # type: ignore[type-arg]  # one namespace: results come back to it

    def _run(cell: str, tool: str = "nsys", **kw):  # type: ignore[no-untyped-def]
        out: list[str] = []
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        result = manager.profile(request, BareBackend(tool), notebook=Notebook(user_ns=notebook_ns),
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        return result, out

    return _run


def _ncu_pid(manager: SessionManager) -> int | None:
    pids = [s.pid for s in manager.status() if s.tool == "ncu" and s.alive]
    return pids[0] if pids else None


def test_a_cell_that_crashes_every_process_fails_once_with_a_typed_error(run, manager, tmp_path):
    ns: dict = {}  # type: ignore[type-arg]
    request = CellRequest(cell="x = 1", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    manager.profile(request, BareBackend(), notebook=Notebook(user_ns=ns))
    assert ns["x"] == 1  # the profiled cell's result came back to the notebook
    # reads x: the new ncu worker receives it (no replay), then dies in the cell
    segfault = "import os, signal\ny = x\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    out: list[str] = []
    with pytest.raises(NsightMagicError) as info:
        request = CellRequest(cell=segfault, runs_root=tmp_path / "runs", cwd=str(tmp_path))
        manager.profile(request, BareBackend("ncu"), notebook=Notebook(user_ns=ns),
                        callbacks=RunCallbacks(output=out.append))  # fmt: skip
    assert not isinstance(info.value, WorkerDiedError), info.value  # the fresh run's own
    print(f"{type(info.value).__name__}: {info.value}")
    again, fresh = [line for line in out if "crashed (SIGSEGV)" in line]
    assert "ran again in a new ncu worker" in again and "fresh ncu process" in fresh
    assert "while replaying" not in fresh  # it died in the cell: nothing is replayed
    folders = sorted((tmp_path / "runs").iterdir())
    # the nsys cell, the crashed warm run, its run in a new worker, one fresh run: no loop
    assert len(folders) == 4


def _crash_once(flag: Path) -> str:
    """A line that kills the worker it runs in (SIGSEGV) the first time only."""
    flag.write_text("")
    path = str(flag)
    return (f"import os, signal\nif os.path.exists({path!r}):\n"
            f"    os.remove({path!r})\n    os.kill(os.getpid(), signal.SIGSEGV)\n")  # fmt: skip


def test_a_cell_whose_ncu_worker_crashed_runs_again_in_a_new_worker_and_its_results_come_back(
    manager, tmp_path
):
    """The cell changes no shared memory of the notebook's: run again in a new warm worker
    (the notebook's names received, no setup cell re-run), what it binds comes back, and it
    joins the new worker's history as any cell (2 of ~10 ncu runs of the H200 matrix crashed;
    the fresh fallback lost a ``%%ncu`` cell's ``y15`` and re-ran a 56 GB setup cell)."""
    ns: dict = {"x": 41}  # type: ignore[type-arg]
    manager.profile(CellRequest(cell="w = 1\n", runs_root=tmp_path / "runs", cwd=str(tmp_path)),
                    BareBackend("ncu"), notebook=Notebook(user_ns=ns))  # fmt: skip
    (first,) = [s.pid for s in manager.status() if s.tool == "ncu" and s.alive]
    out: list[str] = []
    cell = _crash_once(tmp_path / "flag") + "y = x + 1\nprint('ran', y)\n"
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, BareBackend("ncu"), notebook=Notebook(user_ns=ns),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    (note,) = [line for line in out if "crashed" in line]
    assert note.startswith("nsight_magic: the ncu worker crashed (SIGSEGV); this cell ran "
                           "again in a new ncu worker")  # fmt: skip
    assert result.meta["mode"] == "warm" and result.meta["fallback"]["from"]
    assert "may change" not in note  # it changes none of the notebook's objects
    assert ns["y"] == 42 and "ran 42" in out  # its result is the notebook's
    (second,) = [s.pid for s in manager.status() if s.tool == "ncu" and s.alive]
    assert second != first and not alive(first)
    assert result.meta["worker"]["pid"] == second and result.meta.get("history_id")


def test_a_cell_that_changes_shared_memory_and_crashed_in_its_body_runs_fresh(manager, tmp_path):
    """Its body may have changed the notebook's shared memory before the crash: run again in
    a worker, it would apply that twice. The fresh process runs on copies, and its line says
    that what the cell binds stays there."""
    ns: dict = {"hits": [0]}  # type: ignore[type-arg]
    out: list[str] = []
    cell = "hits.append(1)\n" + _crash_once(tmp_path / "flag") + "y = 2\n"
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, BareBackend("ncu"), notebook=Notebook(user_ns=ns),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    (note,) = [line for line in out if "crashed" in line]
    assert "fresh ncu process" in note and "run the cell again to have it" in note
    # never silently: what the crashed run may have changed in the notebook before it died
    assert "The crashed run had begun the cell, which may change hits in place" in note
    assert result.meta["mode"] == "fresh" and "y" not in ns


def test_a_worker_we_stopped_is_not_rerun(run, manager, monkeypatch):
    """A timeout the worker ignored is the user's stop, not a crash: no fresh re-run."""
    monkeypatch.setattr(worker_process, "INTERRUPT_GRACE_S", 1.0)
    run("x = 1", tool="ncu")
    pid = _ncu_pid(manager)
    cell = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    with pytest.raises(WorkerDiedError, match="did not stop") as info:
        run(cell, tool="ncu", timeout=5.0)  # the cell must ignore SIGINT before it runs out
    assert info.value.stopped == "timeout" and pid is not None and not alive(pid)


class AttachKillsTheWorker(BareBackend):
    """The ncu slot whose capture start takes the worker down with it and then fails, as an
    attach that crashes the profiled process would (the worker really dies: SIGSEGV)."""

    def __init__(self) -> None:
        super().__init__("ncu")

    def after_start(self, tool, state, worker) -> None:  # type: ignore[no-untyped-def]
        state.extra["pid"] = worker.pid

    def begin_capture(self, tool, state, run_dir):  # type: ignore[no-untyped-def]
        import os
        import signal
        import time

        from nsight_magic.errors import ProfilerError

        os.kill(state.extra["pid"], signal.SIGSEGV)
        while alive(state.extra["pid"]):
            time.sleep(0.05)
        raise ProfilerError("ncu could not attach to the profiling worker")


def test_an_attach_that_kills_the_worker_is_a_crash_and_the_cell_runs_fresh(manager, tmp_path):
    out: list[str] = []
    request = CellRequest(cell="print('ran')", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, AttachKillsTheWorker(), notebook=manager.notebook,
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    # it died before the cell began: a new worker first, which dies the same way, then fresh
    again, note = [line for line in out if "crashed" in line]
    assert "ran again in a new ncu worker" in again
    assert note.startswith(
        "nsight_magic: the ncu worker crashed (SIGSEGV); this cell ran in a fresh"
    )
    assert result.meta["mode"] == "fresh" and "ran" in out
    assert "while ncu attached" in result.meta["fallback"]["why"]


class EmptyWarmAttach(BareBackend):
    """ncu's attach to a warm worker kept no launch of a range the cell did open (the first
    ``%%ncu --nvtx`` cell of a new ncu worker, H100 2026-11-23): the backend's own check fails
    the first run, which is the warm one; the fresh run after it is profiled as usual."""

    def check_captured(self, report: object, status: dict, run_dir: Path) -> None:  # type: ignore[type-arg]
        self.checks = getattr(self, "checks", 0) + 1
        if self.checks == 1:
            error = NothingCapturedError("Nothing was captured: no kernel launch matched ...")
            error.target_opened, error.run_dir = True, run_dir
            raise error


def test_an_empty_attach_on_an_opened_range_runs_the_cell_fresh_once(manager, tmp_path):
    out: list[str] = []
    request = CellRequest(cell="y = 1 + 1\n", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, EmptyWarmAttach("ncu"), notebook=manager.notebook,
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    (note,) = [line for line in out if "profiled no kernel in the range" in line]
    assert "fresh ncu process" in note
    assert result.meta["mode"] == "fresh" and result.meta["fallback"]["note"] in note
    # a range that was never opened is the user's spelling: no re-run, the error itself
    plain = BareBackend("ncu")
    ok = manager.profile(CellRequest(cell="z = 2\n", runs_root=tmp_path / "runs",
                                     cwd=str(tmp_path)), plain,
                         notebook=manager.notebook)  # fmt: skip
    assert ok.meta["mode"] == "warm"
