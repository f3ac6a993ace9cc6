"""Cold runs: first-call costs read from real reports' CUDA API tables (module loads and slow
first launches, checked against `nsys stats --report cuda_api_sum`), the warning a run shows,
and the session's `first_run` fact from a real worker (tests/session_support.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest
from session_support import BareBackend

from nsight_magic.analysis.cold_run import (
    MODULE_LOAD_PREFIXES,
    FirstCallEffects,
    cold_run_warnings,
    first_call_effects,
)
from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest

WITH_STATS = ["nsys_small", "nsys_llm", "nsys_ops", "nsys_compiled", "nsys_graphs_node",
              "nsys_graphs_graph", "nsys_procs"]  # fmt: skip


def effects_of(data_dir: Path, name: str) -> FirstCallEffects:
    report = open_report(data_dir / f"{name}.sqlite")
    return first_call_effects(report.cuda_api(), report.capture_window())


@pytest.mark.parametrize("name", WITH_STATS)
def test_module_loads_equal_nsys_stats_and_mark_these_first_runs_cold(data_dir, name):
    """Each of these fixtures was captured on the first run of its workload: lazy loading's
    module loads are inside the capture, as nsys's own cuda_api_sum counts them."""
    stats = pd.read_csv(data_dir / "nsys_stats" / f"{name}_cuda_api_sum.csv")
    loads = stats[stats["Name"].map(lambda n: str(n).startswith(MODULE_LOAD_PREFIXES))]
    effects = effects_of(data_dir, name)
    assert effects.module_loads == int(loads["Num Calls"].sum()) > 0
    assert effects.load_ns == int(loads["Total Time (ns)"].sum())
    # the union of loads and slow launches: a lazy load runs inside the launch that needs it
    assert max(effects.load_ns, effects.slow_launch_ns) <= effects.effect_ns
    assert effects.effect_ns <= effects.load_ns + effects.slow_launch_ns <= effects.window_ns
    assert effects.cold


def test_the_warm_rank_shows_no_first_call_cost_and_the_late_rank_does(data_dir):
    """The 2-rank fixture: rank 0's kernels all ran before the gate; rank 1 ran GEMMs of a new
    shape inside it."""
    warm = effects_of(data_dir, "nsys_2rank_r0")
    assert (warm.module_loads, warm.slow_launches, warm.effect_ns, warm.cold) == (0, 0, 0, False)
    late = effects_of(data_dir, "nsys_2rank_r1")
    assert late.module_loads == 2 and late.cold
    assert cold_run_warnings(warm, first_run=False) == []


def test_the_warning_names_the_cost_and_the_fix(data_dir):
    small = effects_of(data_dir, "nsys_small")
    (line,) = cold_run_warnings(small, first_run=None)
    assert line == (
        "Cold run: 6 CUDA module load(s) (94.2 ms) and 5 slow first launch(es) (26.8 ms) take "
        "121.0 ms, 64% of the capture: one-time costs, not the workload; re-run with --warmup 1 "
        "(runs the cell once outside the capture first)."
    )
    (first,) = cold_run_warnings(small, first_run=True)
    assert first.startswith("Cold run (the first run of this cell's code in its worker): 6 ")
    # no first-call cost in the trace: the session's fact alone still says so, unless warmed up
    warm = effects_of(data_dir, "nsys_2rank_r0")
    (soft,) = cold_run_warnings(warm, first_run=True)
    assert soft.startswith("First run of this cell's code in its worker, with no warm-up")
    assert "--warmup 1" in soft
    assert cold_run_warnings(warm, first_run=True, warmup=1) == []
    assert cold_run_warnings(None, first_run=None) == []


def test_run_warnings_and_view_carry_it(data_dir):
    run = NsysRun(open_report(data_dir / "nsys_small.sqlite"), meta={"first_run": True})
    (line,) = run.warnings
    assert line.startswith("Cold run (the first run of this cell's code in its worker)")
    assert run.frames.warnings() == run.warnings
    warm = NsysRun(open_report(data_dir / "nsys_2rank_r0.sqlite"), meta={"first_run": False})
    assert warm.warnings == []


def test_the_session_says_whether_the_cells_code_ran_before_in_its_worker(tmp_path):
    manager = SessionManager(setup=SetupRegistry())

    def first_run(cell: str, tool: str = "nsys", **kw) -> bool:  # type: ignore[no-untyped-def]
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        run = manager.profile(request, BareBackend(tool), notebook=manager.notebook)
        return run.meta["first_run"]

    try:
        assert first_run("x = 1") is True
        assert first_run("x = 1") is False  # the same code, captured before in this worker
        assert first_run("y = 2", warmup=1) is False  # warmed up outside the capture
        assert first_run("z = 3") is True
        # a new ncu worker ran none of the cells (no profiled cell is ever replayed): "x = 1"
        # never ran there; the second time it has
        assert first_run("x = 1", tool="ncu") is True
        assert first_run("x = 1", tool="ncu") is False
        assert first_run("w = 4", tool="ncu") is True
        assert first_run("x = 1", fresh=True) is True  # a new process
    finally:
        manager.stop()
