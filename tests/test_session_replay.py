"""A new worker replays only what the cell needs, for real on the CPU (the worker without a
profiler): setup cells and the cells whose effects it reads; measuring cells and shell commands
are skipped, in-place changes are replayed, and a skipped cell needed out of order gets a new
worker that replays in notebook order."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.script import prepare_cell
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks


@pytest.fixture
def run(manager: SessionManager, tmp_path: Path):
    def _run(cell: str, tool: str = "nsys", **kw):
        out: list[str] = []
        phases: list[str] = []
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        callbacks = RunCallbacks(output=out.append, progress=lambda p: phases.append(p.describe()))
        result = manager.profile(request, BareBackend(tool), notebook=Notebook(),
                                 callbacks=callbacks)  # fmt: skip
        return result, out, phases

    return _run


def test_a_new_worker_replays_setup_and_the_cells_the_cell_needs(run, manager) -> None:
    manager.record_setup("calls = []", "calls", prepare_cell("calls = []"))
    run("!echo from-a-shell")
    run("calls.append('measured')\nx = 2", name="builds x")
    run("y = x * 10\nprint('measuring', y)", name="measures")
    run("%time z = x + 1", name="times")
    run("calls.append('in place')", name="in place")
    result, out, phases = run("print(sorted(calls), x)", tool="ncu")
    assert out[-1] == "['in place', 'measured'] 2"
    assert result.meta["replayed"] == ["calls", "builds x", "in place"]
    assert result.meta["replay_skipped"] == ["cell", "measures", "times"]
    assert "ncu: replaying - 3 of 6 earlier cells in the ncu worker" in phases
    # a later cell that reads what a skipped cell bound gets it then (in order: nothing after
    # it wrote z or x)
    result, out, _ = run("print(z)", tool="ncu")
    assert out[-1] == "3" and result.meta["replayed"] == ["times"]


def test_the_replay_all_switch_replays_every_cell(run, manager) -> None:
    run("a = 1", name="a")
    run("print('measuring')", name="m")
    manager.replay_all = True
    result, _, _ = run("print(a)", tool="ncu")
    assert result.meta["replayed"] == ["a", "m"]


def test_a_skipped_cell_needed_out_of_order_gets_a_new_worker(run, manager) -> None:
    run("a = [1]; k = 5", name="first")
    run("a = [7]", name="rebind")
    run("a.append(2)", name="append")
    run("print(a)", tool="ncu")  # replays "rebind" and "append" only
    pid = [s.pid for s in manager.status() if s.tool == "ncu"]
    # k needs "first", which would rebind a after "append" ran: a new worker, in order
    result, out, _ = run("print(k, a)", tool="ncu")
    assert out[-1] == "5 [7, 2]"
    assert any("starting a new ncu worker: cell 'first' is needed now" in line for line in out)
    assert result.meta["replayed"] == ["first", "rebind", "append"]
    assert [s.pid for s in manager.status() if s.tool == "ncu"] != pid
