"""``nsys start`` armed while the worker loads, receives and prepares (a backend that
``arms_before_prepare``), for real on the CPU: the bare worker with a backend whose capture
start is observable. The start runs beside the steps before the cell, under the run's
``--timeout``; a step that fails disarms it; a cell that may open the gate itself before its
capture (its warm-up names the profiler) waits for the prepared worker as before."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.processes import deadline
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

ARM_WAIT_S = 30.0  # how long the warm-up waits to see the capture armed (a loaded CI machine)


class ArmingBackend(BareBackend):
    """Arms before prepare, as ``NsysBackend`` does; its capture start leaves a file the
    cell's warm-up can look for, and says on which thread and under which bound it ran."""

    arms_before_prepare = True

    def __init__(self, armed: Path) -> None:
        super().__init__()
        self.armed = armed
        self.begins: list[tuple[bool, float]] = []  # (on the main thread, the bound's seconds)
        self.ended: list[Any] = []

    def begin_capture(self, tool, state, run_dir):  # type: ignore[no-untyped-def]
        on_main = threading.current_thread() is threading.main_thread()
        self.begins.append((on_main, deadline.bound(1000.0).seconds))
        self.armed.write_text("armed")
        return super().begin_capture(tool, state, run_dir)

    def end_capture(self, tool, state, handle, run_dir):  # type: ignore[no-untyped-def]
        self.ended.append(handle)


@pytest.fixture
def profile(manager: SessionManager, tmp_path: Path):
    def _profile(cell: str, backend: BareBackend, ns: dict[str, Any] | None = None,
                 **kw: Any) -> Any:  # fmt: skip
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        return manager.profile(request, backend, notebook=Notebook(user_ns=ns or {}),
                               callbacks=RunCallbacks(output=lambda line: None))  # fmt: skip

    return _profile


def _waits_for_armed(armed: Path, log: Path, wait_s: float = ARM_WAIT_S) -> str:
    """A cell whose every run (the warm-up, then the captured run) waits for the armed file
    and notes whether it saw it: a folder per run in ``log``, made by a child process (what the
    warm-up's own process writes, files and folders, is put back after it: a repeat leaves the
    files as they were), read by ``_runs``."""
    return f"""
        import os, subprocess, time
        t0 = time.monotonic()
        while not os.path.exists({str(armed)!r}) and time.monotonic() - t0 < {wait_s}:
            time.sleep(0.02)
        seen = "seen" if os.path.exists({str(armed)!r}) else "not-seen"
        run = os.path.join({str(log)!r}, f"{{time.monotonic_ns():020d}}-{{seen}}")
        subprocess.run(["mkdir", "-p", run], check=True)
        """


def _runs(log: Path) -> list[str]:
    return [p.name.split("-", 1)[1] for p in sorted(log.iterdir())]


def test_the_capture_is_armed_while_the_worker_warms_up(profile, tmp_path):
    armed, log = tmp_path / "armed", tmp_path / "runs.log"
    backend = ArmingBackend(armed)
    result = profile(_waits_for_armed(armed, log), backend, warmup=1, timeout=120.0)
    assert result.report["status"] == "ok"
    # the warm-up (a step before the capture) already saw the capture armed: it ran beside it
    assert _runs(log) == ["seen", "seen"]
    ((on_main, bound_s),) = backend.begins
    assert not on_main
    assert bound_s <= 120.0  # the run's --timeout went with it to the thread
    assert backend.ended == [["bare-capture"]] and backend.captures == 1
    assert result.meta["timings"]["capture_armed_s"] >= 0.0


def test_a_step_that_fails_disarms_the_capture(profile, tmp_path):
    backend = ArmingBackend(tmp_path / "armed")
    with pytest.raises(CellFailedError, match="ZeroDivisionError"):
        profile("x = 1 / 0", backend, warmup=1)  # the warm-up (the prepare step) raises
    assert backend.captures == 1 and backend.ended == [["bare-capture"]]
    # the worker goes on: the next cell is armed and captured again
    assert profile("y = 2", backend).report["status"] == "ok"
    assert backend.captures == 2 and len(backend.ended) == 2


def test_a_warm_up_that_names_the_profiler_waits_for_the_prepared_worker(profile, tmp_path):
    """Its warm-up may call cudaProfilerStart itself: an armed collection would begin there."""
    armed, log = tmp_path / "armed", tmp_path / "runs.log"
    backend = ArmingBackend(armed)
    cell = _waits_for_armed(armed, log, 2.0) + "# torch.cuda.profiler.start() is not called\n"
    t0 = time.monotonic()
    assert profile(cell, backend, warmup=1).report["status"] == "ok"
    assert time.monotonic() - t0 >= 2.0  # the warm-up waited out its whole bound
    assert _runs(log) == ["not-seen", "seen"]
    ((on_main, _),) = backend.begins
    assert on_main


def test_without_a_warm_up_the_cell_text_does_not_matter(profile, tmp_path):
    backend = ArmingBackend(tmp_path / "armed")
    assert profile("label = 'profiler'", backend).report["status"] == "ok"
    ((on_main, _),) = backend.begins
    assert not on_main


def test_a_warm_up_calling_a_notebook_function_that_names_the_profiler_waits(profile, tmp_path):
    """The cell's text says ``step()``; the notebook's ``step`` (through ``inner``) names
    ``torch.cuda.profiler``: its warm-up may open the gate, so the capture waits for it."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(
        "import types\n"
        "def inner():\n"
        "    return types.SimpleNamespace(profiler=1).profiler  # as torch.cuda.profiler.start()\n"
        "def step():\n"
        "    return inner() + 1\n",
        ns,
    )
    backend = ArmingBackend(tmp_path / "armed")
    assert profile("r = step()", backend, ns=ns, warmup=1).report["status"] == "ok"
    ((on_main, _),) = backend.begins
    assert on_main
    # the same call without a warm-up: nothing runs before the gated cell, armed early
    backend = ArmingBackend(tmp_path / "armed2")
    assert profile("r = step()", backend, ns=ns).report["status"] == "ok"
    ((on_main, _),) = backend.begins
    assert not on_main


def test_a_warm_up_that_runs_exec_text_waits_for_the_prepared_worker(profile, tmp_path):
    """``exec``/``eval`` run text the cell's own does not show: it may call the profiler."""
    backend = ArmingBackend(tmp_path / "armed")
    assert profile('exec("r = 1")', backend, warmup=1).report["status"] == "ok"
    ((on_main, _),) = backend.begins
    assert on_main


def test_a_warm_up_calling_a_notebook_function_that_runs_exec_waits(profile, tmp_path):
    """The function's body runs text its code does not show (as the cell's own exec)."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec("def step():\n    exec('r = 1')\n", ns)
    backend = ArmingBackend(tmp_path / "armed")
    assert profile("step()", backend, ns=ns, warmup=1).report["status"] == "ok"
    ((on_main, _),) = backend.begins
    assert on_main
