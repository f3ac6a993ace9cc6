"""Ctrl-C outside the cell body (issue 35 item 7): while ``--vars`` are pickled, the worker
starts, the report loads, the result or its view is built. Each is one ``ProfileInterrupted``
naming the step and the run folder, never a raw KeyboardInterrupt from whatever code ran. For
real on the CPU: the session worker without a profiler (``BareBackend``), and a real nsys
report from tests/data for the view."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import ProfileInterrupted
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks
from nsight_magic.worker import process as worker_process


@pytest.fixture
def run(manager: SessionManager, tmp_path: Path):
    def _run(cell: str, *, backend=None, ns=None, **kw):
        out: list[str] = []
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        result = manager.profile(request, backend or BareBackend(),
                                 notebook=Notebook(user_ns=ns or {}),
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        return result, out

    return _run


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt here, as in a kernel (pytest may run us without)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


class SlowToPickle:
    """A notebook object whose ``__reduce__`` takes a while (the user's code, not ours)."""

    pickling = threading.Event()  # set once a pickling has begun

    def __reduce__(self) -> Any:
        SlowToPickle.pickling.set()
        time.sleep(120)
        return (SlowToPickle, ())


def _ctrl_c_once(ready: Callable[[], bool], give_up_s: float = 60.0) -> None:
    """SIGINT to this process as soon as ``ready()`` (the code under test has got that far),
    whatever the machine's load: an order, not a delay."""

    def wait_then_interrupt() -> None:
        give_up = time.monotonic() + give_up_s
        while not ready() and time.monotonic() < give_up:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=wait_then_interrupt, daemon=True).start()


def _only_folder(tmp_path: Path) -> RunDir:
    (folder,) = (tmp_path / "runs").iterdir()
    return RunDir(folder)


def test_ctrl_c_while_vars_are_pickled(run, tmp_path: Path, sigint_raises: None) -> None:
    """A real SIGINT while the user's ``__reduce__`` runs: no traceback from pickle."""
    SlowToPickle.pickling.clear()
    _ctrl_c_once(SlowToPickle.pickling.is_set)
    t0 = time.monotonic()
    with pytest.raises(ProfileInterrupted, match="pickling its --vars; nothing ran") as info:
        run("print(slow)", ns={"slow": SlowToPickle()}, vars=("slow",))
    assert time.monotonic() - t0 < 60  # well before the 120 s pickle: margin for a loaded CI
    assert info.value.__suppress_context__ and info.value.__traceback__ is not None
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_ctrl_c_while_the_worker_starts(run, manager, tmp_path: Path, monkeypatch) -> None:
    def interrupted_accept(self: Any, listener: Any, cancel: Any) -> Any:
        raise KeyboardInterrupt  # what Ctrl-C in selectors/select while waiting looks like

    monkeypatch.setattr(worker_process.WorkerProcess, "_accept", interrupted_accept)
    with pytest.raises(ProfileInterrupted, match="while starting the profiler") as info:
        run("x = 1")
    folder = _only_folder(tmp_path)
    assert str(folder.path) in str(info.value)
    meta = folder.read_meta_json()
    assert meta["status"] == "interrupted" and "starting" in meta["error"]
    assert manager.status() == [] or all(s.pid is None for s in manager.status())
    monkeypatch.undo()
    _, out = run("print('after', 1)")
    assert out == ["after 1"]


def test_ctrl_c_while_the_report_loads(run, tmp_path: Path, monkeypatch) -> None:
    """nsys's phase after the cell is the export (pyarrow, sqlite in a real run)."""

    def interrupted_load(self: Any, tool: Any, run_dir: Path, nproc: int = 1) -> Any:
        raise KeyboardInterrupt

    backend = BareBackend()
    monkeypatch.setattr(BareBackend, "load", interrupted_load)
    with pytest.raises(ProfileInterrupted, match="while exporting the report") as info:
        run("x = 1", backend=backend)
    folder = _only_folder(tmp_path)
    assert str(folder.path) in str(info.value)
    assert folder.read_meta_json()["status"] == "interrupted"
    assert folder.read_status()["status"] == "ok"  # the cell itself ran to its end


def test_ctrl_c_while_the_result_is_built(run, tmp_path: Path, monkeypatch) -> None:
    def interrupted_result(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(BareBackend, "result", interrupted_result)
    with pytest.raises(ProfileInterrupted, match="Run folder: ") as info:
        run("x = 1")
    assert str(_only_folder(tmp_path).path) in str(info.value)


def test_ctrl_c_while_a_view_is_built_says_so(
    nsys_small_sqlite: Path, tmp_path: Path, monkeypatch
) -> None:
    """IPython builds the view after the magic returned: the bundle says the view was
    interrupted (the run is complete) instead of a traceback from altair or ipywidgets."""
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun
    from nsight_magic.results.base import _Run

    run = NsysRun(open_report(nsys_small_sqlite), tmp_path, {"name": "small"})

    def interrupted(self: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(_Run, "_static_page", interrupted)
    bundle = run._repr_mimebundle_()
    assert "view was interrupted" in bundle["text/plain"] and str(tmp_path) in bundle["text/html"]


def test_ctrl_c_while_the_magic_shows_the_live_view(tmp_path: Path) -> None:
    from nsight_magic.magic.magics import _showing

    class Run:
        run_dir = tmp_path

    with pytest.raises(ProfileInterrupted, match="complete and kept") as info, _showing(Run()):
        raise KeyboardInterrupt
    assert str(tmp_path) in str(info.value)


class _SlowStartBackend(BareBackend):
    """The bare worker behind a launcher that takes seconds to start it (as ``nsys launch`` or
    ``ncu --mode launch`` can), so a real Ctrl-C lands while the notebook waits for it. The
    launcher writes its pid to ``pids``: the test looks at the launcher it started, never at
    the machine's other processes (another test run's launcher looks the same)."""

    def __init__(self, pids: Path) -> None:
        super().__init__()
        self.pids = pids

    def launch(self, tool: Any, request: Any, state: Any) -> Any:
        plain = super().launch(tool, request, state)
        script = 'echo $$ >> "$0"; sleep 120; exec "$@"'
        return worker_process.Launch(
            lambda command: ["sh", "-c", script, str(self.pids), *command],
            plain.env, plain.cwd, plain.python,
        )  # fmt: skip


def test_a_real_ctrl_c_while_the_worker_starts_leaves_nothing(
    run, manager, tmp_path: Path, sigint_raises: None
) -> None:
    from processes import alive

    from nsight_magic.processes import runner

    pids = tmp_path / "launcher-pids"
    _ctrl_c_once(pids.exists)  # once the launcher runs: the notebook is waiting for the worker
    t0 = time.monotonic()
    with pytest.raises(ProfileInterrupted, match="while starting the profiler") as info:
        run("x = 1", backend=_SlowStartBackend(pids))
    assert time.monotonic() - t0 < 60  # well before the launcher's 120 s sleep ends
    assert str(_only_folder(tmp_path).path) in str(info.value)
    (launcher,) = [int(p) for p in pids.read_text().split()]
    # the launcher leads its own process group (its sleep is in it): the whole group stopped
    assert not alive(launcher) and runner.group_members(launcher) == []


def test_a_ctrl_c_as_the_output_pump_starts_stops_the_launcher(
    run, manager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt lands right after the launcher began, while the thread that reads its
    output starts (the window a loaded machine widens: the launcher had written its pid, and
    the start left it running): the launcher is stopped before the cell says it was
    interrupted."""
    from processes import alive

    from nsight_magic.processes import runner
    from nsight_magic.worker.process import WorkerProcess

    pids = tmp_path / "launcher-pids"
    real = WorkerProcess._start_pump

    def start_then_interrupted(self: WorkerProcess) -> None:
        real(self)
        deadline = time.monotonic() + 60  # the launcher runs: its pid is written
        # written, not only made: ``echo $$ >> file`` creates the file before it writes the
        # pid, a window a loaded machine widens (CI read it empty, 2026-12-07)
        while not (pids.exists() and pids.read_text().split()) and time.monotonic() < deadline:
            time.sleep(0.02)
        raise KeyboardInterrupt

    monkeypatch.setattr(WorkerProcess, "_start_pump", start_then_interrupted)
    with pytest.raises(ProfileInterrupted, match="while starting the profiler"):
        run("x = 1", backend=_SlowStartBackend(pids))
    (launcher,) = [int(p) for p in pids.read_text().split()]
    assert not alive(launcher) and runner.group_members(launcher) == []
