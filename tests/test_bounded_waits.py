"""Every wait has a limit: ``--timeout`` (and each step's own default bound) covers the worker's
start, ``nsys start``, the ncu attach and ``nsys export`` as well as the cell, and the message
gives the bound that ended the wait and a log path that exists.

A hung profiler is a two-line shell script on PATH in a tmp folder that sleeps; it never
writes a report. The worker is the real one, run without a profiler (session_support)."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from processes import alive
from session_support import BareBackend

from nsight_magic.errors import ProfilerError, ProfileTimeout
from nsight_magic.processes import deadline
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers import commands as profiler_cli
from nsight_magic.session.backends import NsysBackend, WarmState
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest
from nsight_magic.worker import process as worker_process
from nsight_magic.worker.process import Launch, WorkerStartError


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def hung(tmp_path: Path) -> Path:
    """A "profiler" that prints its pid and hangs (exec: a signal reaches the sleep)."""
    return _script(tmp_path, "hung-profiler", f"echo $$ >> {tmp_path}/pids\nexec sleep 600")


def _pids_gone(tmp_path: Path) -> bool:
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    deadline_s = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline_s:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


@pytest.mark.parametrize("with_timeout", [True, False], ids=["--timeout", "default-bound"])
def test_hung_nsys_start(hung: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         with_timeout: bool) -> None:  # fmt: skip
    monkeypatch.setattr(deadline, "CLI_S", 1.0)
    tool = Tool(name="nsys", path=str(hung))
    t0 = time.monotonic()
    if with_timeout:
        with deadline.run_deadline(0.8), pytest.raises(ProfileTimeout) as info:
            NsysBackend().begin_capture(tool, WarmState(name="s"), tmp_path)
        assert "0.8 s timeout during `nsys start`" in str(info.value)
    else:
        with pytest.raises(ProfilerError) as info:
            NsysBackend().begin_capture(tool, WarmState(name="s"), tmp_path)
        assert "`nsys start` did not finish within 1 s" in str(info.value)
    assert time.monotonic() - t0 < 30  # the hang is 600 s; margin for a loaded machine
    assert f"Log: {tmp_path / 'profiler.log'}" in str(info.value)
    assert (tmp_path / "profiler.log").exists()
    assert _pids_gone(tmp_path)


def test_hung_export_is_bounded_and_not_retried(
    hung: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "report.nsys-rep").write_bytes(b"x")
    tool = Tool(name="nsys", path=str(hung))
    t0 = time.monotonic()
    with deadline.run_deadline(1.0), pytest.raises(ProfileTimeout, match="nsys export"):
        NsysBackend().load(tool, tmp_path)
    # one export ran (the parquet one): a hung export is not tried again as SQLite
    assert time.monotonic() - t0 < 30
    assert len((tmp_path / "pids").read_text().split()) == 1
    monkeypatch.setattr(deadline, "EXPORT_S", 0.7)
    with pytest.raises(ProfilerError, match=r"did not finish within 1 s"):
        NsysBackend().load(tool, tmp_path)


def test_ncu_attach_message_gives_the_real_bound(
    hung: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadline, "ATTACH_S", 0.5)
    log = tmp_path / "profiler.log"
    t0 = time.monotonic()
    with pytest.raises(ProfilerError) as info:
        profiler_cli.attach([str(hung), "--mode", "attach"], log, retry_s=2.0)
    waited = time.monotonic() - t0
    # the wait lasted the retry period (2 s), and the message says 2 s, not the 0.5 s default
    assert 1.9 < waited < 30 and "did not finish within 2 s" in str(info.value)
    assert f"Log: {log}" in str(info.value) and log.exists()
    with deadline.run_deadline(0.6), pytest.raises(ProfileTimeout, match=r"0\.6 s timeout"):
        profiler_cli.attach([str(hung), "--mode", "attach"], log, retry_s=2.0)
    assert _pids_gone(tmp_path)


class HungLauncher(BareBackend):
    """The bare worker behind a launcher that never starts it (a hung ``nsys launch``)."""

    def __init__(self, launcher: Path) -> None:
        super().__init__("nsys")
        self.launcher = launcher

    def launch(self, tool, request, state):  # type: ignore[no-untyped-def]
        return Launch(lambda command: [str(self.launcher), *command], self.process_env(request),
                      request.cwd, request.python)  # fmt: skip


def test_timeout_covers_the_worker_start(hung: Path, tmp_path: Path) -> None:
    manager = SessionManager(setup=SetupRegistry())
    request = CellRequest(cell="x = 1\n", runs_root=tmp_path / "runs", cwd=str(tmp_path),
                          timeout=1.5)  # fmt: skip
    t0 = time.monotonic()
    try:
        with pytest.raises(ProfileTimeout, match=r"1.5 s timeout during the nsys worker's start"):
            manager.profile(request, HungLauncher(hung), notebook=manager.notebook)
    finally:
        manager.stop()
    assert time.monotonic() - t0 < 30
    assert _pids_gone(tmp_path)
    worker_process_bound = worker_process.WorkerProcess(
        HungLauncher(hung).launch(None, request, WarmState()), startup_timeout=0.5
    )
    with pytest.raises(WorkerStartError, match=r"did not start within 0.5 s"):
        worker_process_bound.start()


def test_socket_folder_is_gone_once_the_worker_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's socket folder is removed as soon as it connected, so a notebook kernel that
    dies (kill -9: nothing of ours runs) leaves nothing in the temp dir."""
    made: list[str] = []
    real = tempfile.mkdtemp

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(worker_process.tempfile, "mkdtemp", recording)
    launch = Launch(lambda command: command, dict(os.environ), str(tmp_path), sys.executable)
    worker = worker_process.WorkerProcess(launch, startup_timeout=60)
    worker.start()
    try:
        assert made and not os.path.exists(made[0])
        assert worker.request({"op": "exit"}, timeout=30).data is not None
    finally:
        worker.kill()


def test_timeout_still_covers_the_cell(tmp_path: Path) -> None:
    manager = SessionManager(setup=SetupRegistry())
    cell = textwrap.dedent("import time\ntime.sleep(60)\n")
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path), timeout=2.0)
    try:
        # the worker started first: a loaded machine's worker start cannot use up the 2 s
        warm_up = CellRequest(cell="x = 1\n", runs_root=tmp_path / "runs", cwd=str(tmp_path))
        manager.profile(warm_up, BareBackend(), notebook=manager.notebook)
        t0 = time.monotonic()
        with pytest.raises(ProfileTimeout, match="2 s timeout; the cell was stopped"):
            manager.profile(request, BareBackend(), notebook=manager.notebook)
    finally:
        manager.stop()
    assert time.monotonic() - t0 < 30
