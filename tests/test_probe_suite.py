"""A probe of bad inputs and misbehaving profilers, tried as a new user would, through the real
magics in a real IPython shell. Outcome wanted for every probe: the cell fails with a typed
error (no traceback of our internals), nothing waits past its bound, no process is left, and
nothing runs from a folder someone else controls.

The "profilers" are small shell scripts put on PATH in a tmp folder that misbehave the way a
broken install does (exit 1, print garbage, hang, capture nothing, leave an empty report); the
one that "launches" simply runs the worker without any profiler. None writes report data: an
empty file is the most any of them leaves, and it must be refused."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from processes import alive

from nsight_magic.errors import (
    EmptyReportError,
    NothingCapturedError,
    NsightMagicError,
    ProfilerError,
    ProfileTimeout,
    ReportError,
    UntrustedFolderError,
)
from nsight_magic.processes import locate as tools
from nsight_magic.session.manager import MANAGER

# how each fake answers: `--version`, `launch ...` (then the worker command), `start`,
# `export`, anything else (cancel, shutdown)
LAUNCH_WORKER = (
    'shift; while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done; exec "$@"'
)
EMPTY_REPORT_ON_START = (
    'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then : > "$2.nsys-rep"; fi; shift; done; exit 0'
)
FAKES = {
    "exits-1": {"*": "echo 'nsys: fatal: something broke' >&2; exit 1"},
    "garbage": {"--version": "printf '\\001\\377 garbage\\n'; exit 0",
                "*": "printf '\\001\\377 %s\\n' \"$*\"; exit 3"},
    "launch-dies": {"--version": "exit 0", "launch": "echo 'Error: cannot launch'; exit 1"},
    "captures-nothing": {"--version": "exit 0", "launch": LAUNCH_WORKER, "*": "exit 0"},
    "empty-report": {"--version": "exit 0", "launch": LAUNCH_WORKER,
                     "start": EMPTY_REPORT_ON_START, "*": "exit 0"},
    "start-fails": {"--version": "exit 0", "launch": LAUNCH_WORKER,
                    "start": "echo 'Error: session busy' >&2; exit 1", "*": "exit 0"},
}  # fmt: skip
HANGS = {
    "version-hangs": {"--version": "exec sleep 600"},
    "launch-hangs": {"--version": "exit 0", "launch": "exec sleep 600", "*": "exit 0"},
    "start-hangs": {"--version": "exit 0", "launch": LAUNCH_WORKER, "start": "exec sleep 600",
                    "*": "exit 0"},
    "export-hangs": {"--version": "exit 0", "launch": LAUNCH_WORKER,
                     "start": EMPTY_REPORT_ON_START, "export": "exec sleep 600", "*": "exit 0"},
}  # fmt: skip
# The --timeout each hang runs under. It bounds every step from the cell's start, so a hang
# after the worker's start gets a --timeout that a loaded 2-core machine's worker start (seconds)
# cannot use up: 3 s ran out one step early there. The version check's own 2 s bound (the
# probe's) ends it before a --timeout of 30 s could.
HANG_TIMEOUT_S = {"version-hangs": 30, "launch-hangs": 3, "start-hangs": 20, "export-hangs": 20}
STOP_MARGIN_S = 30  # stopping the group, on top of the bound, on a loaded machine (hangs: 600 s)


def _fake_nsys(folder: Path, behaviour: dict[str, str]) -> Path:
    """``folder/nsys``: records its pid, then does what ``behaviour`` says per subcommand."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = "\n".join(f"  {verb}) {body};;" for verb, body in behaviour.items() if verb != "*")
    fallback = behaviour.get("*", "exit 0")
    path = folder / "nsys"
    path.write_text(f'#!/bin/sh\necho $$ >> {folder}/pids\ncase "$1" in\n{cases}\n'
                    f'  *) {fallback};;\nesac\n')  # fmt: skip
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def probe(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]  # fmt: skip
    """probe(behaviour, cell, line="") -> (error, shown text, seconds, fake's folder)."""
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{tmp_path / "runs"}"')
    ip.run_line_magic("config", 'NsightMagic.nsys_path = ""')
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    monkeypatch.setattr(tools, "VERSION_TIMEOUT_S", 2.0)

    def run(behaviour: dict[str, str], cell: str = "x = 1\n", line: str = ""):  # type: ignore[no-untyped-def]
        folder = tmp_path / "bin"
        _fake_nsys(folder, behaviour)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
        capsys.readouterr()
        t0 = time.monotonic()
        try:
            result = ip.run_cell(f"%%nsys {line}\n{cell}")
        finally:
            MANAGER.stop()
        seconds = time.monotonic() - t0
        shown = capsys.readouterr()
        assert not result.success, "a failed profile must fail the cell"
        return result.error_in_exec, (shown.out + shown.err).strip(), seconds, folder

    yield run
    MANAGER.stop()


def _no_process_left(folder: Path) -> bool:
    pids = (
        [int(p) for p in (folder / "pids").read_text().split()]
        if (folder / "pids").exists()
        else []
    )
    give_up = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < give_up:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def _typed(error: BaseException | None, shown: str) -> None:
    assert isinstance(error, NsightMagicError | UsageError), (type(error), shown)
    # progress lines may come first; then the error, as the typed line (its detail may follow)
    assert "Traceback" not in shown, shown
    assert any(ln.startswith(("nsight_magic: ", "UsageError: ")) for ln in shown.splitlines())


@pytest.mark.parametrize("name", list(FAKES))
def test_misbehaving_profiler_is_one_typed_error(probe, name: str) -> None:  # type: ignore[no-untyped-def]
    error, shown, seconds, folder = probe(FAKES[name], line="--timeout 30")
    _typed(error, shown)
    if name == "captures-nothing":
        assert isinstance(error, NothingCapturedError)
    if name == "empty-report":
        assert isinstance(error, ReportError)  # the empty file is refused, never read as data
    if name == "start-fails":
        assert isinstance(error, ProfilerError) and "session busy" in shown
    assert seconds < 30 + STOP_MARGIN_S and _no_process_left(folder)


@pytest.mark.parametrize("name", list(HANGS))
def test_hung_profiler_stops_within_the_bound(probe, name: str) -> None:  # type: ignore[no-untyped-def]
    timeout = HANG_TIMEOUT_S[name]
    error, shown, seconds, folder = probe(HANGS[name], line=f"--timeout {timeout}")
    _typed(error, shown)
    if name == "version-hangs":
        assert isinstance(error, ProfilerError) and "within 2 s" in shown
    else:
        assert isinstance(error, ProfileTimeout) and f"{timeout} s timeout" in shown
    if name == "start-hangs":
        assert "during `nsys start" in shown, shown
    if name == "export-hangs":
        assert "during `nsys export" in shown  # not retried as SQLite for another bound
    assert seconds < timeout + STOP_MARGIN_S  # the bound, plus stopping the process group
    assert _no_process_left(folder)


def test_empty_report_file_is_an_empty_report_error(tmp_path: Path) -> None:
    from nsight_magic.reports import open_report

    (tmp_path / "r.nsys-rep").write_bytes(b"")
    with pytest.raises(EmptyReportError):
        open_report(tmp_path / "r.nsys-rep")


def test_worker_runs_without_injection_from_the_notebook(probe, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The notebook's own LD_PRELOAD never reaches the profiler commands (a path that does not
    exist: the loader would print an error line into the output if it did)."""
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    error, shown, _, _ = probe(FAKES["captures-nothing"])
    assert isinstance(error, NothingCapturedError) and "evil.so" not in shown


def test_foreign_folder_is_never_replayed(tmp_path: Path, data_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import shutil

    from nsight_magic import load_run
    from nsight_magic.run_folders import ownership as folders
    from nsight_magic.run_folders import runs
    from nsight_magic.run_folders.run_dir import RunDir, write_json, write_private

    run_dir = runs.new_run_dir(tmp_path / "runs", "theirs")
    shutil.copy(data_dir / "nsys_small.sqlite", run_dir / "report.sqlite")
    for name in ("cell.py", "script.py"):
        write_private(run_dir / name, "import os; os.system('touch /tmp/pwned')\n")
    write_json(RunDir(run_dir).meta, {"tool": "nsys", "python": sys.executable})
    run = load_run(run_dir)
    monkeypatch.setattr(folders.os, "geteuid", lambda: os.getuid() + 1)  # another user's now
    with pytest.raises(UntrustedFolderError, match="another user"):
        run.profile_kernel(str(run.kernels()["name"].iloc[0]))


def test_unusable_runs_dir_is_one_typed_line(probe, ip, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A runs_dir that is a file (or cannot be created) is one RunFolderError line; the
    profiler has been found by then, so only the folder is at fault."""
    from nsight_magic.errors import RunFolderError

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for runs_dir in (blocker, blocker / "sub"):
        ip.run_line_magic("config", f'NsightMagic.runs_dir = "{runs_dir}"')
        folder = tmp_path / "bin"
        _fake_nsys(folder, FAKES["captures-nothing"])
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
        result = ip.run_cell("%%nsys\nx = 1\n")
        assert isinstance(result.error_in_exec, RunFolderError)
        assert str(runs_dir) in str(result.error_in_exec)


def _fake_ncu(folder: Path, attach: str) -> Path:
    """``folder/ncu``: ``--mode launch`` runs the worker without a profiler, ``--mode attach``
    does ``attach``, anything else (--version, --list-sets) prints nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    skip_to_python = f'while [ $# -gt 0 ] && [ "$1" != "{sys.executable}" ]; do shift; done'
    path = folder / "ncu"
    path.write_text(
        f'#!/bin/sh\necho $$ >> {folder}/pids\ncase "$*" in\n'
        f'  *"--mode launch"*) {skip_to_python}; exec "$@";;\n'
        f'  *"--mode attach"*) {attach};;\n  *) exit 0;;\nesac\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("attach", ["exec sleep 600", "echo '==ERROR== refused'; exit 1"],
                         ids=["attach-hangs", "attach-fails"])  # fmt: skip
def test_ncu_attach_is_bounded_and_typed(
    ip, tmp_path: Path, monkeypatch, capsys, attach: str
) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "bin"
    _fake_ncu(folder, attach)
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{tmp_path / "runs"}"')
    ip.run_line_magic("config", 'NsightMagic.ncu_path = ""')
    monkeypatch.delenv("NSIGHT_MAGIC_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
    capsys.readouterr()
    t0 = time.monotonic()
    try:
        # the --timeout counts from the cell's start: 4 s ran out during a loaded machine's
        # worker start, before the attach; 20 s leaves the attach the rest
        result = ip.run_cell("%%ncu --timeout 20\nx = 1\n")
    finally:
        MANAGER.stop()
    seconds = time.monotonic() - t0
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert not result.success
    _typed(result.error_in_exec, text.strip())
    if attach.startswith("exec sleep"):
        assert isinstance(result.error_in_exec, ProfileTimeout) and "ncu attach" in text
    assert seconds < 20 + STOP_MARGIN_S and _no_process_left(folder)
