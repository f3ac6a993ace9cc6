"""The Memory tab and its static form (issue 37 item 4), and compare()'s peak memory change, on
run folders our own fresh-run pipeline wrote on an H100 with ``%%nsys --memory``
(tests/data/mem_run_*: status.json with torch's counts, report.sqlite, torch_memory.pickle)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
from nsight_magic.results.comparison import compare
from nsight_magic.views import memory_view
from nsight_magic.views.live import BRUSH, LiveChart

DATA = Path(__file__).parent / "data"


def pipeline_run(name: str) -> NsysRun:
    folder = DATA / f"mem_run_{name}"
    status = json.loads((folder / "status.json").read_text())
    return NsysRun(open_report(folder / "report.sqlite"), folder,
                   {"name": name, "cell_status": status})  # fmt: skip


def test_the_pipeline_wrote_what_the_memory_view_reads() -> None:
    """The argv %%nsys --memory gave nsys, torch's counts from the cell script, and the
    snapshot: its peak is torch's own requested peak, byte for byte."""
    folder = DATA / "mem_run_train"
    assert "--cuda-memory-usage=true" in (folder / "profiler.log").read_text().splitlines()[0]
    run = pipeline_run("train")
    status = run.meta["cell_status"]["torch_memory"]
    assert status["snapshot"] == "torch_memory.pickle"
    live, facts = run.memory.live()
    assert facts["bytes_in_use"] == live["bytes"].sum() == status["requested_peak"]
    summary = run.gpu_memory_summary().iloc[0]
    assert summary["pid"] == status["pid"]
    # what nsys saw the worker cudaMalloc during the cell is what torch's reserve grew by
    grew = status["reserved_peak"] - status["reserved_start"]
    in_cell = run.gpu_memory()
    assert in_cell["bytes_in_use"].max() - in_cell["bytes_in_use"].iloc[0] >= grew
    counts = run.torch_memory().set_index("moment")
    assert counts.loc["peak", "allocated_bytes"] == status["allocated_peak"]


def test_static_form_shows_chart_summary_tensors_and_the_two_views() -> None:
    page = pipeline_run("train").to_html()
    text = re.sub(r"<[^>]+>", "", page)
    assert "peak GPU memory: 1.37 GB (L1: for step in range(2): ...)" in text  # the header
    part = page[page.index("GPU memory: where it went") :]
    assert 'alt="memory chart"' in part and "data:image/png;base64," in part
    assert "L1: for step in range(2): ..." in part  # the statement open at the peak
    assert "Largest tensors at PyTorch&#x27;s peak" in part or "Largest tensors at PyTorch" in part
    assert "cell L" in part and "before the cell" in part
    assert "does not count and the worker" in part  # where the two views differ
    # a run without memory events says how to get them, folded out of the way
    plain = NsysRun(open_report(DATA / "nsys_small.sqlite"), None, {"name": "small"}).to_html()
    assert "%%nsys --memory" in plain[plain.index("GPU memory: where it went") :]


def test_chart_marks_the_peak_and_brushes_in_ms() -> None:
    run = pipeline_run("oom")
    frames = run.frames.memory()
    chart = memory_view.memory_chart(frames.chart_rows(), frames.summary(), run.frames.origin_ns())
    spec = chart.to_dict()
    assert "peak 75.16 GB: L2: while True: ..." in json.dumps(spec["title"])
    assert [p["name"] for p in spec["params"]] == [BRUSH]


def test_live_tab_and_timeline_follow_the_brush() -> None:
    run = pipeline_run("train")
    view = run.widget()
    page = view.page("Memory")
    charts = [c for c in page.children if isinstance(c, LiveChart)]
    assert len(charts) == 2  # the memory chart, then the copies chart
    timeline = view.timeline
    assert timeline is not None and timeline.memory_chart is not None
    window = (timeline.origin + 300_000_000, timeline.origin + 360_000_000)
    # a brush on the memory chart zooms the timeline, whose memory chart follows
    store = [{"unit": "", "fields": [{"field": "ms", "channel": "x", "type": "R"}],
              "values": [[300.0, 360.0]]}]  # fmt: skip
    charts[0]._vl_selections = {  # what the browser sends when the chart is brushed
        **charts[0]._vl_selections,
        BRUSH: {"value": {"ms": [300.0, 360.0]}, "store": store},
    }
    assert timeline.window == window
    domain = timeline.memory_chart.chart.to_dict()["layer"][0]["encoding"]["x"]["scale"]["domain"]
    assert domain == [300.0, 360.0]


def test_chart_rows_keep_every_peak_when_binned() -> None:
    from nsight_magic.analysis.gpu_memory import chart_rows

    timeline = NsysRun(open_report(DATA / "nsys_mem_train_ungated.sqlite"), None, {}).gpu_memory()
    rows = chart_rows(timeline, rows=50)
    assert len(rows) <= 50 and rows["bytes_in_use"].max() == timeline["bytes_in_use"].max()
    inside = chart_rows(
        timeline, (int(timeline["time_ns"].iloc[100]), int(timeline["time_ns"].iloc[200]))
    )
    assert inside["time_ns"].iloc[0] < timeline["time_ns"].iloc[100]  # the row in force at start


def test_compare_reports_peak_memory_change() -> None:
    cmp = compare(DATA / "nsys_mem_train.sqlite", DATA / "mem_run_train" / "report.sqlite")
    row = cmp.memory.iloc[0]
    a = NsysRun(open_report(DATA / "nsys_mem_train.sqlite"), None, {}).gpu_memory_summary()
    b = pipeline_run("train").gpu_memory_summary()
    assert (
        row["a_peak_bytes"] == a["peak_bytes"].max()
        and row["b_peak_bytes"] == b["peak_bytes"].max()
    )
    assert row["peak_change_bytes"] == row["b_peak_bytes"] - row["a_peak_bytes"]
    assert row["ratio"] == pytest.approx(row["b_peak_bytes"] / row["a_peak_bytes"])
    assert "GPU memory (peak per GPU" in cmp.to_html() and "peak memory change" in cmp.to_html()
    none = compare(DATA / "nsys_small.sqlite", DATA / "nsys_gemm.sqlite")
    assert none.memory.empty and "GPU memory (peak" not in none.to_html()
    assert isinstance(none.memory, pd.DataFrame)


def test_a_multi_rank_run_says_the_memory_view_is_per_report() -> None:
    import nsight_magic

    merged = nsight_magic.load_runs([DATA / "nsys_2rank_r0.sqlite", DATA / "nsys_2rank_r1.sqlite"])
    assert merged.gpu_memory().empty
    assert "one report at a time" in merged.frames.memory().note()
