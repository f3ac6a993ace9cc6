"""Processes we start take SIGINT at its default action even while this process ignores it, as
ipykernel does between cells (``child_signals``): the worker can still be interrupted with its
state kept, and an ncu attach still detaches on SIGINT.

Each test sets SIGINT to SIG_IGN here (main thread) for the start, as the ncu prewarm's
background thread finds it after a cell, and restores it. Likewise the kernel's stdin (a pipe that
never closes) is not handed to the commands we run to completion."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_support import BareBackend
from test_bounded_waits import _pids_gone, _script

from nsight_magic.errors import ProfilerError, ProfileTimeout
from nsight_magic.processes import deadline, runner
from nsight_magic.processes.child_signals import default_sigint_argv, sigint_ignored
from nsight_magic.profilers import commands as profiler_cli
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks

SIGINT_BIT = 1 << (signal.SIGINT - 1)


@contextlib.contextmanager
def sigint_ignored_here() -> Iterator[None]:
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _ignored_mask(argv: list[str]) -> int:
    """The SigIgn mask a child started with ``argv`` reports from /proc."""
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    (line,) = [x for x in out.splitlines() if x.startswith("SigIgn:")]
    return int(line.split()[1], 16)


def test_a_child_started_while_sigint_is_ignored_gets_the_default() -> None:
    argv = ["grep", "SigIgn", "/proc/self/status"]
    with sigint_ignored_here():
        assert sigint_ignored()
        # the premise: an ignored signal stays ignored across fork and exec
        assert _ignored_mask(argv) & SIGINT_BIT
        wrapped = default_sigint_argv(argv)
        assert not _ignored_mask(wrapped) & SIGINT_BIT
        # a missing program is left to Popen, which raises as it always did
        assert default_sigint_argv(["no-such-program-xyz"]) == ["no-such-program-xyz"]
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # as while a cell runs
    try:
        assert not sigint_ignored() and default_sigint_argv(argv) == argv
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_run_started_while_sigint_is_ignored_stops_on_sigint(tmp_path: Path) -> None:
    """runner.run stops a timed-out child with SIGINT first (nsys writes its report then): the
    child ends there, not at the SIGTERM 5 s later."""
    sleeper = _script(tmp_path, "sleeper", "exec sleep 600")
    t0 = time.monotonic()
    with sigint_ignored_here(), pytest.raises(ProfileTimeout):
        # a SIGTERM only after 60 s: an end well before that was the SIGINT's
        runner.run([str(sleeper)], log_path=tmp_path / "log", timeout=0.5, grace_s=(60.0, 3.0))
    assert time.monotonic() - t0 < 30


def test_an_attach_started_while_sigint_is_ignored_detaches_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prewarm's releasing attach runs between cells: its detach (SIGINT) is immediate,
    not the 10 s grace before SIGTERM it took when the attach inherited SIGINT ignored."""
    hung = _script(tmp_path, "hung-ncu", f"echo $$ >> {tmp_path}/pids\nexec sleep 600")
    monkeypatch.setattr(deadline, "ATTACH_S", 0.5)
    monkeypatch.setattr(profiler_cli, "DETACH_GRACE_S", 60.0)  # an end before it: the SIGINT's
    t0 = time.monotonic()
    with sigint_ignored_here(), pytest.raises(ProfilerError, match="within 1 s"):
        profiler_cli.attach([str(hung), "--mode", "attach"], tmp_path / "log", retry_s=1.0)
    assert time.monotonic() - t0 < 30 and _pids_gone(tmp_path)


def test_a_worker_started_while_sigint_is_ignored_can_be_interrupted(tmp_path: Path) -> None:
    """A worker started between cells (the prewarm) still takes the interrupt of a timed-out
    cell as KeyboardInterrupt: the same worker, with its state, runs the next cell."""
    manager = SessionManager(setup=SetupRegistry())

    def cell(code: str, **kw: object) -> list[str]:
        out: list[str] = []
        request = CellRequest(cell=code, runs_root=tmp_path / "runs", cwd=str(tmp_path), **kw)
        manager.profile(request, BareBackend(), notebook=manager.notebook,
                        callbacks=RunCallbacks(output=out.append))  # fmt: skip
        return out

    def worker_pid() -> int | None:
        (status,) = manager.status()
        return status.pid

    try:
        with sigint_ignored_here():
            cell("x = 41")
        pid = worker_pid()
        with pytest.raises(ProfileTimeout):
            # 5 s: the cell must be running when it runs out (1 s could end during the catch-up)
            cell("import time\ntime.sleep(60)\n", timeout=5.0)
        assert "x is 42" in cell("x += 1\nprint('x is', x)")
        assert worker_pid() == pid is not None
    finally:
        manager.stop()


def test_a_tool_that_reads_stdin_gets_eof_not_the_kernels_pipe(tmp_path: Path) -> None:
    """The kernel's stdin is a pipe from jupyter_client that never closes: a command we run to
    completion must not inherit it (one that read stdin would wait out its whole time limit)."""
    from nsight_magic.processes.locate import tool_version

    asks = _script(tmp_path, "asks", 'read answer\necho "NVIDIA Nsight Systems version 2025.3.1"')
    read_end, write_end = os.pipe()  # our stdin as the kernel's: open, nothing ever written
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        t0 = time.monotonic()
        assert tool_version(str(asks), timeout=60) == (2025, 3, 1)
        assert time.monotonic() - t0 < 30  # it read EOF, not the pipe until the 60 s bound
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
