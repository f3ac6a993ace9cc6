"""``%%nsys --repeat`` on real captures (tests/data/repeat_runs/, an H100, tests/gpu/repeats.py;
tests/data/README.md): the per-repeat numbers against the report's own tables read with SQL,
a run of one repeat unchanged, compare() of the same cell captured twice (``same``) and of
naive attention against SDPA (``faster``, from the repeats), the sweep table and the command."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import nsight_magic
from nsight_magic import cli
from nsight_magic.analysis import repeats, verdict
from nsight_magic.analysis import sweep as sweep_numbers
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results.comparison import compare
from nsight_magic.results.sweep_frames import config_frames

RUNS = Path(__file__).resolve().parent / "data" / "repeat_runs"


def _run(name: str) -> nsight_magic.NsysRun:
    return nsight_magic.load_run(RUNS / name)


def _per_repeat_by_sql(path: Path) -> dict[str, list[int]]:
    """Per kernel name, its time in each opening of nsight_magic's ``cell`` range, by the
    launching runtime call's start, straight from nsys's tables."""
    sql = """
    WITH cells AS (
        SELECT e.start, e.end, ROW_NUMBER() OVER (ORDER BY e.start) - 1 AS repeat
        FROM NVTX_EVENTS e
        WHERE e.eventType = 59  -- a push/pop range
          AND COALESCE(e.text, (SELECT value FROM StringIds WHERE id = e.textId)) = 'cell'
          AND e.domainId IN (SELECT domainId FROM NVTX_EVENTS
                             WHERE eventType = 75 AND text = 'nsight_magic'))  -- its domain
    SELECT s.value, c.repeat, SUM(k.end - k.start)
    FROM CUPTI_ACTIVITY_KIND_KERNEL k
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        AND r.globalTid / 16777216 % 16777216 = k.globalPid / 16777216 % 16777216
    JOIN cells c ON r.start >= c.start AND r.start < c.end
    JOIN StringIds s ON s.id = k.demangledName
    GROUP BY s.value, c.repeat"""
    out: dict[str, list[int]] = {}
    with sqlite3.connect(path) as db:
        for name, repeat, total in db.execute(sql):
            out.setdefault(name, [0] * 5)[repeat] = total
    return out


def test_the_per_repeat_columns_equal_the_reports_own_tables() -> None:
    run = _run("small")
    summary = run.kernel_summary()
    assert summary.attrs["repeats"] == 5 and run.meta["repeat"] == 5
    by_sql = _per_repeat_by_sql(RUNS / "small" / "report.sqlite")
    assert set(by_sql) == set(summary["name"]) and len(by_sql) == 5
    for row in summary.itertuples():
        totals = np.array(by_sql[row.name], dtype=float)
        assert row.repeat_mean_ns == pytest.approx(totals.mean())
        assert row.repeat_med_ns == pytest.approx(np.median(totals))
        assert row.repeat_std_ns == pytest.approx(totals.std(ddof=1))
        half = repeats.t95(4) * totals.std(ddof=1) / np.sqrt(5)
        assert row.repeat_ci95_lo_ns == pytest.approx(totals.mean() - half)
        assert row.repeat_rsd_pct == pytest.approx(100 * totals.std(ddof=1) / totals.mean())
        assert row.instances == 5 and row.total_ns == totals.sum()  # one launch a repeat
    # the columns nsys stats gives are the report's, whole capture, untouched
    plain = NsysReport.open(RUNS / "small" / "report.sqlite").kernel_summary()
    assert summary[list(plain.columns)].equals(plain)
    table = run.repeats()
    assert table["repeat"].tolist() == [1, 2, 3, 4, 5]
    assert table["kernel_time_ns"].tolist() == [sum(v[r] for v in by_sql.values())
                                                for r in range(5)]  # fmt: skip
    walls = run.meta["cell_status"]["repeat_cell_s"]
    assert table["wall_ns"].tolist() == pytest.approx([w * 1e9 for w in walls])
    assert run.repeat_stats is not None and run.repeat_stats.n == 5
    assert run.repeat_stats.line().startswith("5 repeats: GPU time per repeat 0.021 ms")


def test_each_range_per_repeat() -> None:
    """The cell range opened once per repeat and each statement once in it: each row's five
    openings are its five repeats."""
    projection = _run("small").nvtx_gpu_projection().set_index("range")
    for label in ("cell", "L2: c = a @ b", "L3: d = torch.relu(c) + 1", "L4: s = d.sum()"):
        row = projection.loc[label]
        assert row["instances"] == 5
        assert row["repeat_mean_ns"] * 5 == pytest.approx(row["proj_total_ns"])
        assert row["repeat_med_ns"] == pytest.approx(row["proj_med_ns"])


def test_each_range_phase_per_repeat() -> None:
    """``nvtx_phases()``: a range opened once per repeat has its phase time of each opening
    (inside that repeat's window) as its five per-repeat values."""
    run = _run("small")
    phases = run.nvtx_phases().set_index("range")
    assert phases.attrs["repeats"] == 5
    trace = run.report.nvtx_phase_trace()
    windows = repeats.repeat_windows(run.nvtx())
    for label in ("cell", "L2: c = a @ b", "L3: d = torch.relu(c) + 1", "L4: s = d.sum()"):
        own = trace[trace["range"] == label].sort_values("start_ns")
        starts = own["start_ns"].to_numpy()
        assert ((windows["start_ns"].to_numpy() <= starts)
                & (starts < windows["end_ns"].to_numpy())).all()  # fmt: skip
        values = own["phase_duration_ns"].to_numpy(dtype=float)
        row = phases.loc[label]
        assert row["repeat_mean_ns"] == pytest.approx(values.mean())
        assert row["repeat_std_ns"] == pytest.approx(values.std(ddof=1))
        assert row["repeat_mean_ns"] * 5 == pytest.approx(row["phase_total_ns"])
    assert "repeat_mean_ns" not in _run("single").nvtx_phases()


def test_mfu_per_repeat_and_its_interval() -> None:
    """``mfu()`` of the prefill (given FLOPs): the phase time per repeat, and the MFU's 95%
    interval from that time's (each repeat does a tenth of the FLOPs); a bound above 1 is
    blank while the MFU of the mean stands."""
    run = _run("rep10")
    flops = 1e12
    row = run.mfu(flops={"cell": flops}).iloc[0]
    peak = row["peak_flops_per_s"]
    assert row["repeat_mean_ns"] * 10 == pytest.approx(row["time_ns"])
    assert row["mfu_ci95_lo_frac"] == pytest.approx(
        flops / 10 / (peak * row["repeat_ci95_hi_ns"] * 1e-9)
    )
    assert row["mfu_ci95_hi_frac"] == pytest.approx(
        flops / 10 / (peak * row["repeat_ci95_lo_ns"] * 1e-9)
    )
    assert row["mfu_ci95_lo_frac"] < row["mfu_frac"] < row["mfu_ci95_hi_frac"]
    near_peak = 0.95 * row["time_ns"] * 1e-9 * peak  # an MFU of 0.95 whose interval tops 1
    high = run.mfu(flops={"cell": near_peak}).iloc[0]
    assert high["mfu_frac"] == pytest.approx(0.95) and high["mfu_ci95_lo_frac"] < 0.95
    assert np.isnan(high["mfu_ci95_hi_frac"])
    plain = _run("single").mfu(flops={"cell": flops})
    assert not set(repeats.MFU_REPEAT_COLUMNS) & set(plain.columns)


def test_a_run_of_one_repeat_is_what_nsys_stats_gives() -> None:
    single = _run("single")
    assert single.meta["repeat"] == 1 and single.repeat_stats is None
    report = NsysReport.open(RUNS / "single" / "report.sqlite")
    assert single.kernel_summary().equals(report.kernel_summary())
    assert single.nvtx_gpu_projection().equals(report.nvtx_gpu_projection())
    assert single.repeats().empty
    # a cell range the user opened twice in a run without --repeat is no repeat
    assert repeats.kernel_repeats(single.kernels(), single.cuda_api(), single.nvtx(), 1) is None


def test_the_same_cell_captured_twice_is_the_same() -> None:
    """The Qwen2 prefill, --repeat 10, captured twice: within 0.1%, every kernel ``same``
    (5 of its 35 were "beyond noise" by 0.4-3% or under 130 ns of a 4.3 ms repeat before
    verdict.SAME_WITHIN and NEGLIGIBLE_SHARE)."""
    result = compare(_run("rep10"), _run("rep10b"))
    assert set(result.kernels["change"]) == {"same"}
    assert set(result.kernels["interval_from"]) == {verdict.REPEATS}
    assert result.verdict.change == "same" and result.verdict.per_repeat == (10, 10)
    assert result.summary().startswith("cell: GPU time per repeat 1.00x (1.00-1.00)")
    assert result.summary().endswith("no kernel changed beyond noise")
    # beyond noise, but by less than matters: the rows the floors turned to same
    loose = result.kernels[(result.kernels["ratio_lo"] > 1) | (result.kernels["ratio_hi"] < 1)]
    assert len(loose) >= 3


def test_naive_attention_against_sdpa_is_faster_from_the_repeats() -> None:
    result = compare(_run("naive"), _run("sdpa"))
    cell = result.nvtx.set_index("range").loc["cell"]
    assert cell["change"] == "faster" and cell["interval_from"] == verdict.REPEATS
    assert cell["ratio_hi"] < 0.1
    assert result.verdict.ratio < 0.06 and result.verdict.hi < 0.06
    assert set(result.kernels["change"]) == {"new", "gone"}
    # the total per repeat is each run's own mean per repeat
    assert result.verdict.ratio == pytest.approx(
        _run("sdpa").repeat_stats.row().repeat_mean_ns
        / _run("naive").repeat_stats.row().repeat_mean_ns
    )


def test_the_command_gates_on_repeated_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", str(RUNS / "rep10"), str(RUNS / "rep10b"),
                     "--fail-if-slower", "1%"]) == 0  # fmt: skip
    assert cli.main(["compare", str(RUNS / "naive"), str(RUNS / "sdpa")]) == 0
    assert cli.main(["compare", str(RUNS / "sdpa"), str(RUNS / "naive")]) == 1
    assert "GPU time per repeat" in capsys.readouterr().out


def test_a_sweep_table_of_repeated_configurations() -> None:
    """``sw.table()``'s per-repeat columns, from configuration runs' own repeat totals."""
    rows = [sweep_numbers.ConfigRow(label=f"impl={name}", values={"impl": name}, status="ok",
                                    frames=config_frames(_run(name)))
            for name in ("naive", "sdpa")]  # fmt: skip
    table = sweep_numbers.sweep_table(rows, ["impl"])
    for name, row in zip(("naive", "sdpa"), table.itertuples(), strict=True):
        stats = _run(name).repeat_stats.row()
        assert row.repeat_mean_ns == pytest.approx(stats.repeat_mean_ns)
        assert row.repeat_rsd_pct == pytest.approx(stats.repeat_rsd_pct)
    assert set(repeats.REPEAT_COLUMNS) <= set(table.columns)


def test_the_view_shows_the_repeats_and_a_single_run_does_not() -> None:
    """The static page (what a shared notebook keeps) of a ``--repeat 5`` run: the run's one
    line in the header, the time per repeat, its 95% interval and RSD in the kernel and NVTX
    tables; a run of one repeat shows none of them."""
    import re

    from nsight_magic.views.nsys_view import nsys_static_html

    run = _run("small")
    text = re.sub(r"<[^>]+>", " ", nsys_static_html(run.frames))
    assert run.repeat_stats is not None and run.repeat_stats.line() in text
    for header in ("per repeat", "95% low/repeat", "95% high/repeat", "RSD %"):
        assert text.count(header) >= 2, header  # the kernel table and the NVTX table
    single = re.sub(r"<[^>]+>", " ", nsys_static_html(_run("single").frames))
    assert "per repeat" not in single and "repeats:" not in single


def test_the_summary_command_gives_the_repeats(capsys: pytest.CaptureFixture[str]) -> None:
    """``nsight-magic summary`` of a repeated run: its line, and per kernel and range the time
    per repeat with its interval and RSD (text and JSON); a single run's has none."""
    import json

    run = _run("small")
    assert cli.main(["summary", str(RUNS / "small")]) == 0
    out = capsys.readouterr().out
    assert run.repeat_stats is not None and run.repeat_stats.line() in out
    assert out.count("repeat_rsd_pct") == 2  # the kernels' table and the ranges'
    assert cli.main(["summary", str(RUNS / "small"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    top = run.kernel_summary().iloc[0]
    assert data["repeats"] == run.repeat_stats.line()
    assert data["kernels"][0]["repeat_ci95_hi_ns"] == pytest.approx(top["repeat_ci95_hi_ns"])
    assert "repeat_mean_ns" in data["nvtx"][0]
    assert cli.main(["summary", str(RUNS / "single"), "--format", "json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert single["repeats"] is None and "repeat_mean_ns" not in single["kernels"][0]
