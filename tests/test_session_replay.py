"""No profiled cell is ever replayed (issue 41), for real on the CPU (the worker without a
profiler): a profiled cell's results come back to the notebook, so a new worker receives the
notebook's state; shell commands and in-place changes of earlier cells do not run again."""

from __future__ import annotations

from pathlib import Path

from session_support import BareBackend

from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks


def test_a_new_worker_replays_no_profiled_cell_and_sees_the_notebooks_state(
    manager: SessionManager, tmp_path: Path
) -> None:
    ns: dict = {"calls": []}  # type: ignore[type-arg]

    def run(cell: str, tool: str = "nsys"):  # type: ignore[no-untyped-def]
        out: list[str] = []
        request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
        result = manager.profile(request, BareBackend(tool), notebook=Notebook(user_ns=ns),
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        return result, out

    run("!echo from-a-shell")
    run("calls.append('measured')\nx = 2")
    run("y = x * 10\nprint('measuring', y)")
    run("%time z = x + 1")
    run("calls.append('in place')")
    assert ns["calls"] == ["measured", "in place"] and (ns["x"], ns["y"], ns["z"]) == (2, 20, 3)
    result, out = run("print(sorted(calls), x, y, z)", tool="ncu")
    assert out[-1] == "['in place', 'measured'] 2 20 3"
    assert not result.meta.get("replayed")
    assert not any("from-a-shell" in line for line in out)  # no shell command ran again
