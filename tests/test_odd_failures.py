"""Failures of an odd kind, for real on the CPU (the session worker and fresh scripts, no
profiler): a cell's exception whose message cannot be printed, an interpreter that is not one,
and stopping workers whose ``nsys shutdown`` hangs (issue 43)."""

from __future__ import annotations

import contextlib
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks
from nsight_magic.session.workers import pool as worker_pool
from nsight_magic.worker.process import WorkerStartError

UNPRINTABLE = """
class Odd(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")

raise Odd()
"""


def _profile(manager: SessionManager, tmp_path: Path, cell: str, **kw) -> object:
    backend = kw.pop("backend", None) or BareBackend()
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), timeout=120, **kw)  # fmt: skip
    return manager.profile(request, backend, notebook=manager.notebook, callbacks=RunCallbacks())


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "warm"])
def test_an_exception_whose_str_raises_is_reported_by_its_type(
    manager: SessionManager, tmp_path: Path, fresh: bool
) -> None:
    """Was: the script's own error handler crashed on ``str(exc)`` (fresh: "nsys exited with
    code 1" and two tracebacks through script.py; warm: "an error it did not report")."""
    with pytest.raises(CellFailedError) as info:
        _profile(manager, tmp_path, UNPRINTABLE, fresh=fresh)
    text = str(info.value)
    assert text.startswith("The profiled cell raised Odd: <unprintable Odd object>"), text
    assert info.value.exc_type == "Odd"
    assert "script.py" not in text and "did not report" not in text


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "warm"])
def test_a_python_that_is_no_interpreter_is_named_with_the_fix(
    manager: SessionManager, tmp_path: Path, fresh: bool
) -> None:
    """``--python /bin/true``: was "A setup step raised an error it did not report" (fresh)
    and a bare "exited before it started (exit status 0)" (warm)."""
    with pytest.raises(WorkerStartError) as info:
        _profile(manager, tmp_path, "x = 1", fresh=fresh, python="/bin/true")
    text = str(info.value)
    assert "'/bin/true'" in text and "code 0" in text, text
    assert "--python must name a Python interpreter" in text and "setup step" not in text


def test_a_cell_that_ends_its_process_says_so(manager: SessionManager, tmp_path: Path) -> None:
    """os._exit(0) in the cell of a fresh run: the script wrote "running" and no error."""
    with pytest.raises(CellFailedError) as info:
        _profile(manager, tmp_path, "import os\nos._exit(0)", fresh=True)
    text = str(info.value)
    assert text.startswith("The profiled cell ended its process without reporting an error")


def test_workers_whose_shutdown_hangs_are_stopped_at_once(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nsys-slot workers whose ``nsys shutdown`` hangs (a real ``sleep``, bounded as
    ``shutdown_session`` bounds nsys): stopped together, one bound, not two in turn."""
    hang_s = 6.0
    calls: list[tuple[float, float]] = []

    def hung_shutdown(nsys: str, name: str, timeout: float | None = None) -> None:
        start = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(["sleep", "60"], timeout=hang_s, check=False)
        calls.append((start, time.monotonic()))

    for value in ("1", "2"):  # two launch keys: two workers in the nsys slot
        _profile(manager, tmp_path, "x = 1", env={"ODD_FAILURES": value})
    assert len(manager.status()) == 2
    monkeypatch.setattr(worker_pool, "shutdown_session", hung_shutdown)
    monkeypatch.setattr(worker_pool.tools, "find_tool", lambda name: f"/nowhere/{name}")
    t0 = time.monotonic()
    assert manager.stop() == ["nsys"]
    took = time.monotonic() - t0
    assert len(calls) == 2 and manager.status() == []
    (a_start, a_end), (b_start, b_end) = calls
    assert max(a_start, b_start) < min(a_end, b_end), "the two shutdowns ran in turn"
    assert took < 2 * hang_s - 1, took
