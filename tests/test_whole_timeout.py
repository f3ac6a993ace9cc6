"""``--timeout S`` bounds everything the cell waits for, and each step has a default bound
without it (issue 35 item 4): the profiler's version check, ``ncu --list-sets`` /
``--list-sections``, pickling the notebook's variables (a slow ``__reduce__``), ``nsys
shutdown`` when a session stops, and a fresh run whose profiler hangs before or after the cell.

A hung profiler is a small shell script on PATH that sleeps (it simulates the hang only: it
writes no report); the cell runs for real. Bounds are made small so that the tests stay fast."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from session_support import BareBackend
from test_bounded_waits import _pids_gone, _script

from nsight_magic.errors import ProfilerError, ProfileTimeout
from nsight_magic.processes import deadline
from nsight_magic.processes import locate as tools
from nsight_magic.profilers import commands as profiler_cli
from nsight_magic.session.backends import NcuBackend, NsysBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook

# how long past its small bound a stopped hang may take on a loaded 2-core machine: far below
# the hangs' 600 s, so an unbounded wait still fails
MARGIN_S = 30.0
VERSION = 'case "$1" in --version) echo "NVIDIA Nsight Systems version 2025.3.1.0"; exit 0;; esac'


def _fake(tmp_path: Path, name: str, body: str) -> Path:
    """``name`` on PATH (a folder of its own, so each test's fake is a new path)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    return _script(folder, name, body)


@pytest.fixture
def path_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)


def _profile(tmp_path: Path, backend, cell: str = "x = 1\n", warm_up: str | None = None, **kw):  # type: ignore[no-untyped-def]
    """Profile ``cell`` in a new session (after ``warm_up``, run first without a timeout)."""
    manager = SessionManager(setup=SetupRegistry())
    notebook = kw.pop("notebook", Notebook())
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path), **kw)
    try:
        if warm_up is not None:
            first = CellRequest(cell=warm_up, runs_root=tmp_path / "runs", cwd=str(tmp_path))
            manager.profile(first, backend, notebook=manager.notebook)
        return manager.profile(request, backend, notebook=notebook)
    finally:
        manager.stop()


@pytest.mark.parametrize("with_timeout", [True, False], ids=["--timeout", "default-bound"])
def test_a_hung_version_check_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         path_with, with_timeout: bool) -> None:  # fmt: skip
    _fake(tmp_path, "nsys", f"echo $$ >> {tmp_path}/pids\nexec sleep 600")
    monkeypatch.setattr(tools, "VERSION_TIMEOUT_S", 600.0 if with_timeout else 1.0)
    t0 = time.monotonic()
    if with_timeout:
        with pytest.raises(ProfileTimeout, match=r"1 s timeout during `.*nsys --version`"):
            _profile(tmp_path, NsysBackend(), fresh=True, timeout=1.0)
    else:
        with pytest.raises(ProfilerError, match=r"--version` did not answer within 1 s"):
            _profile(tmp_path, NsysBackend(), fresh=True)
    assert time.monotonic() - t0 < MARGIN_S
    assert _pids_gone(tmp_path)


def test_hung_ncu_listings_are_bounded_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_with
) -> None:
    ncu = _fake(tmp_path, "ncu", f"{VERSION}\necho $$ >> {tmp_path}/pids\nexec sleep 600")
    profiler_cli.ncu_catalog.cache_clear()
    monkeypatch.setattr(deadline, "CATALOG_S", 600.0)
    t0 = time.monotonic()
    # --timeout: both listings share what is left of it, and the message says so
    with pytest.raises(ProfileTimeout, match=r"1 s timeout during `.*ncu --list-sets`"):
        _profile(tmp_path, NcuBackend(), fresh=True, timeout=1.0)
    assert time.monotonic() - t0 < MARGIN_S
    # without: one default bound for both (not one each), then nothing is refused
    monkeypatch.setattr(deadline, "CATALOG_S", 1.0)
    profiler_cli.ncu_catalog.cache_clear()
    t0 = time.monotonic()
    assert profiler_cli.ncu_catalog(str(ncu)) == {"set": frozenset(), "section": frozenset()}
    assert time.monotonic() - t0 < MARGIN_S
    assert _pids_gone(tmp_path)
    profiler_cli.ncu_catalog.cache_clear()


class SlowToPickle:
    """A notebook object whose pickling hangs (a ``__reduce__`` that waits on a lock, a
    server, a huge computation)."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        time.sleep(60)
        return (SlowToPickle, ())


@pytest.mark.parametrize("how", ["--vars", "warm", "fresh"])
def test_slow_pickling_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  how: str) -> None:  # fmt: skip
    notebook = Notebook(user_ns={"slow": SlowToPickle()})
    kw = {"vars": ("slow",)} if how == "--vars" else {"fresh": how == "fresh"}
    # a warm run pickles after the worker's start: the worker is up first, so that a loaded
    # machine's start cannot use up the 1 s (it ran out "during the nsys worker's start")
    warm_up = "x = 1\n" if how == "warm" else None
    t0 = time.monotonic()
    # a warm worker looks at every notebook name at once (session/state/): it cannot name one
    during = ("describing the notebook's variables for the worker" if how == "warm"
              else "pickling 'slow'")  # fmt: skip
    with pytest.raises(ProfileTimeout, match=rf"1 s timeout during {during}"):
        _profile(tmp_path, BareBackend(), "print(slow)\n", notebook=notebook, timeout=1.0,
                 warm_up=warm_up, **kw)  # fmt: skip
    assert time.monotonic() - t0 < MARGIN_S
    if how == "warm":  # its own bound: %config NsightMagic.state_timeout, said in the fix
        notebook = Notebook(user_ns={"slow": SlowToPickle()}, state_timeout_s=1.0)
        fix = rf"{during} did not finish within 1 s.*state_timeout"
    else:
        monkeypatch.setattr(deadline, "PICKLE_S", 1.0)
        fix = r"pickling 'slow' did not finish within 1 s.*setup"
    with pytest.raises(ProfilerError, match=fix):
        _profile(tmp_path, BareBackend(), "print(slow)\n", notebook=notebook, warm_up=warm_up, **kw)


def test_the_pickling_bound_keeps_the_notebooks_own_timer() -> None:
    import signal

    fired: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        with deadline.bounded_here("pickling 'x'", 5.0):
            time.sleep(0.1)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        # the notebook's timer runs on, less the time spent (however long a loaded machine took)
        assert fired == [] and 0 < left <= 2.0 - 0.1
        give_up = time.monotonic() + MARGIN_S
        while not fired and time.monotonic() < give_up:
            time.sleep(0.05)
        assert fired == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_hung_nsys_shutdown_is_let_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys = _fake(tmp_path, "nsys", f"echo $$ >> {tmp_path}/pids\nsleep 600 & exec sleep 600")
    monkeypatch.setattr(deadline, "SHUTDOWN_S", 0.5)
    t0 = time.monotonic()
    profiler_cli.shutdown_session(str(nsys), "s")  # nothing raised: the session is ending
    assert time.monotonic() - t0 < MARGIN_S
    assert _pids_gone(tmp_path)
    with deadline.run_deadline(0.2):  # inside a cell: what is left of its --timeout
        t0 = time.monotonic()
        monkeypatch.setattr(deadline, "SHUTDOWN_S", 600.0)
        profiler_cli.shutdown_session(str(nsys), "s")
        assert time.monotonic() - t0 < MARGIN_S


def test_a_fresh_run_whose_profiler_never_starts_the_script_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_with
) -> None:
    _fake(tmp_path, "nsys", f"{VERSION}\necho $$ >> {tmp_path}/pids\nexec sleep 600")
    monkeypatch.setattr(deadline, "PROFILER_START_S", 1.0)
    t0 = time.monotonic()
    with pytest.raises(ProfilerError, match=r"nsys starting the cell's script did not finish "
                                             r"within 1 s.*Log: "):  # fmt: skip
        _profile(tmp_path, NsysBackend(), fresh=True)
    assert time.monotonic() - t0 < MARGIN_S
    assert _pids_gone(tmp_path)


def test_a_fresh_run_whose_profiler_hangs_after_the_cell_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_with
) -> None:
    # the hung "nsys" runs the cell's command (from the Python on), then never ends
    body = (f"{VERSION}\necho $$ >> {tmp_path}/pids\n"
            f'while [ "$#" -gt 0 ] && [ "$1" != "{sys.executable}" ]; do shift; done\n'
            '"$@"\nexec sleep 600')  # fmt: skip
    _fake(tmp_path, "nsys", body)
    monkeypatch.setattr(deadline, "PROFILER_END_S", 1.0)
    t0 = time.monotonic()
    ended = r"nsys ending after the cell's script did \(writing its report\) did not finish"
    with pytest.raises(ProfilerError, match=ended + " within 1 s"):
        _profile(tmp_path, NsysBackend(), "print('ran')\n", fresh=True)
    assert time.monotonic() - t0 < MARGIN_S
    assert _pids_gone(tmp_path)
    (run,) = (tmp_path / "runs").iterdir()
    assert "ran" in (run / "profiler.log").read_text()


def test_stopping_a_session_with_a_hung_nsys_shutdown_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_with
) -> None:
    """``%nsight_stop`` (and the kernel's shutdown) ends an nsys worker, then asks ``nsys
    shutdown`` to forget its session: a hung nsys there is let go after SHUTDOWN_S."""
    _fake(tmp_path, "nsys", f"echo $$ >> {tmp_path}/pids\nexec sleep 600")
    monkeypatch.setattr(deadline, "SHUTDOWN_S", 1.0)
    manager = SessionManager(setup=SetupRegistry())
    request = CellRequest(cell="x = 1\n", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    manager.profile(request, BareBackend("nsys"), notebook=manager.notebook)
    t0 = time.monotonic()
    assert manager.stop() == ["nsys"]
    assert time.monotonic() - t0 < MARGIN_S
    assert (tmp_path / "pids").exists() and _pids_gone(tmp_path)
