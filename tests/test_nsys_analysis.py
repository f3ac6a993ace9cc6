"""Memory summaries against `nsys stats`, gaps and busy % on the real report, timeline caps."""

from __future__ import annotations

import html
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stats_reference import assert_duration_summary_equal

from nsight_magic.analysis.gaps import busy_intervals, busy_pct
from nsight_magic.analysis.timeline import TIMELINE_COLUMNS, timeline_frame
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results import NsysRun
from nsight_magic.views import nsys_view


@pytest.fixture(scope="module")
def small(nsys_small_sqlite: Path) -> NsysReport:
    return NsysReport.open(nsys_small_sqlite)


def test_memory_time_summary_equals_nsys_stats(small: NsysReport, data_dir: Path) -> None:
    ours = small.memory_time_summary()
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_mem_time_sum.csv")
    assert ours["operation"].tolist() == ref["Operation"].tolist()
    assert_duration_summary_equal(ours, ref, count="Count")


def test_memory_size_summary_equals_nsys_stats(small: NsysReport, data_dir: Path) -> None:
    ours = small.memory_size_summary()
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_mem_size_sum.csv")
    assert ours["operation"].tolist() == ref["Operation"].tolist()
    np.testing.assert_array_equal(ours["instances"].to_numpy(), ref["Count"].to_numpy())
    for col, ref_col in [
        ("total_bytes", "Total (MB)"),
        ("avg_bytes", "Avg (MB)"),
        ("med_bytes", "Med (MB)"),
        ("max_bytes", "Max (MB)"),
        ("std_bytes", "StdDev (MB)"),
    ]:
        # nsys prints MB = 1e6 bytes with three decimals.
        np.testing.assert_array_equal(
            np.round(ours[col].to_numpy() / 1e6, 3), ref[ref_col].to_numpy()
        )


def test_copies_by_kind(small: NsysReport) -> None:
    out = small.copies_by_kind().set_index("kind")
    assert out.loc["HtoD", "bytes"] == 4194304 and out.loc["HtoD", "total_ns"] == 104640
    # Pinned H2D runs ~15x faster than the pageable D2H copy in this capture.
    assert out.loc["HtoD", "bandwidth_gb_per_s"] == pytest.approx(40.08, abs=0.01)
    assert out.loc["DtoH", "bandwidth_gb_per_s"] == pytest.approx(2.75, abs=0.01)


def test_gaps_per_stream(small: NsysReport) -> None:
    g = small.gaps()
    ops = small.gpu_ops()
    assert (g["duration_ns"] > 0).all()
    assert (g["duration_ns"] == g["end_ns"] - g["start_ns"]).all()
    assert set(g["stream_id"]) <= set(ops["stream_id"])
    # Stream 7 has 26 ops (23 kernels, 2 copies, 3 sets - with back-to-back ones merged),
    # stream 14 has 3 kernels -> 2 gaps.
    assert (g["stream_id"] == 14).sum() == 2
    # On each stream, busy time + gaps = first start .. last end.
    for stream, sub in ops.groupby("stream_id"):
        s, e = busy_intervals(sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy())
        gap_total = g.loc[g["stream_id"] == stream, "duration_ns"].sum()
        assert (e - s).sum() + gap_total == sub["end_ns"].max() - sub["start_ns"].min()
    # The longest idle gap on the default stream is the decode/step wait, after the GEMM.
    top = g.iloc[0]
    assert top["duration_ns"] == 126352719 - 96128295
    assert top["prev_op"].startswith("sm80_xmma_gemm") and "softmax" in top["next_op"]


@pytest.mark.parametrize("per_stream", [True, False])
def test_a_gaps_prev_op_ends_at_its_start_and_next_op_starts_at_its_end(
    small: NsysReport, per_stream: bool
) -> None:
    """``prev_op`` is the op the gap follows (it ended at the gap's start; nothing of its lane
    runs inside the gap), ``next_op`` the op it precedes (it starts at the gap's end)."""
    ops = small.gpu_ops()
    gaps = small.gaps(per_stream=per_stream)
    assert len(gaps) > 10
    for gap in gaps.itertuples(index=False):
        lane = ops[ops["device_id"] == gap.device_id]
        if per_stream:
            lane = lane[lane["stream_id"] == gap.stream_id]
        ended = lane[lane["end_ns"] == gap.start_ns]
        assert gap.prev_op in set(ended["name"]), gap
        assert gap.next_op in set(lane.loc[lane["start_ns"] == gap.end_ns, "name"]), gap
        inside = (lane["start_ns"] < gap.end_ns) & (lane["end_ns"] > gap.start_ns)
        assert not inside.any(), gap


def test_the_gaps_table_shows_the_previous_op_first(small: NsysReport, tmp_path: Path) -> None:
    run = NsysRun(small, tmp_path, {"name": "small"})
    page = nsys_view.gaps_html(run.frames)
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    assert headers == ["stream", "idle", "previous GPU op", "next GPU op"]
    top = run.frames.gaps(nsys_view.MIN_GAP_NS).iloc[0]
    row = page.split("<tbody>")[1].split("</tr>")[0]
    assert row.index(html.escape(top["prev_op_short"])) < row.index(
        html.escape(top["next_op_short"])
    )


def test_gaps_min_gap_and_device_level(small: NsysReport) -> None:
    assert (small.gaps(min_gap_ns=1_000_000)["duration_ns"] > 1_000_000).all()
    dev = small.gaps(per_stream=False)
    assert (dev["stream_id"] == -1).all()
    # Device-wide idle is never more than one stream's idle.
    assert dev["duration_ns"].sum() <= small.gaps()["duration_ns"].sum()


def test_busy_pct(small: NsysReport) -> None:
    lo, hi = small.capture_window()
    assert (lo, hi) == (10317341, 199339614)  # cuProfilerStart .. end of the cell range
    ops = small.gpu_ops()
    s, e = busy_intervals(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())
    assert small.gpu_busy_pct() == pytest.approx(100 * (e - s).sum() / (hi - lo))
    assert 0.9 < small.gpu_busy_pct() < 1.0  # a tiny workload: the GPU idles >99% of the cell
    # Over the GPU's own active span it is much busier.
    assert busy_pct(ops, (int(s[0]), int(e[-1]))) > small.gpu_busy_pct()


def test_timeline_small_report_is_one_row_per_event(small: NsysReport) -> None:
    t = small.timeline()
    assert list(t.columns) == TIMELINE_COLUMNS
    ops = len(small.kernels()) + len(small.memcpy()) + len(small.memset())
    assert len(t) == ops + len(small.nvtx())
    assert (t["count"] == 1).all()
    # the cell's statements on top, then the user's NVTX domains, then the GPU streams
    assert list(dict.fromkeys(t["lane"])) == [
        "cell statements", "NVTX (default)", "NVTX CCCL", "GPU 0 / stream 7", "GPU 0 / stream 14",
    ]  # fmt: skip
    assert set(t.loc[t["lane"] == "cell statements", "kind"]) == {"statement"}
    assert t.groupby("kind").size().to_dict() == {
        "kernel": 26, "memcpy": 2, "memset": 3, "nvtx": 11, "statement": 6,
    }  # fmt: skip
    # nested NVTX ranges keep their depth; kernels get short names
    assert t.loc[t["name"] == "decode/step", "level"].min() > 0
    softmax = t[t["name"].str.contains("softmax_warp_forward")]
    assert (softmax["short_name"] == "softmax_warp_forward<9, 0, 0>").all()


def test_timeline_window_shows_real_kernels(data_dir: Path) -> None:
    """The LLM report has 517 kernels: capped at 200 rows they are binned; a window around one
    decode step holds fewer than 200 events, so each is its own row with its real times."""
    llm = NsysReport.open(data_dir / "nsys_llm.sqlite")
    kernels, nvtx = llm.kernels(), llm.nvtx()
    whole = timeline_frame(kernels, llm.memcpy(), nvtx, max_rows=200, memset=llm.memset())
    assert len(whole) <= 200 and (whole["count"] > 1).any()
    step = nvtx[nvtx["range"] == "decode_step"].iloc[1]
    window = (int(step["start_ns"]), int(step["end_ns"]))
    zoom = timeline_frame(kernels, llm.memcpy(), nvtx, window=window, max_rows=200)
    assert (zoom["count"] == 1).all()
    gpu = zoom[zoom["kind"] == "kernel"]
    inside = kernels[(kernels["start_ns"] < window[1]) & (kernels["end_ns"] > window[0])]
    assert len(gpu) == len(inside) > 50
    assert sorted(gpu["start_ns"]) == sorted(inside["start_ns"])
    # ranges that began before the window (cell, decode, generate) are kept whole
    cell = zoom[zoom["name"] == "cell"]
    assert len(cell) == 1 and cell["start_ns"].item() < window[0]
    assert set(zoom["lane"]) >= {"cell statements", "NVTX LLM", "NVTX (default)"}
    empty = timeline_frame(kernels, window=(0, 1))
    assert empty.empty and list(empty.columns) == TIMELINE_COLUMNS


def test_timeline_marks_cuda_graph_kernels(data_dir: Path) -> None:
    path = data_dir / "nsys_graphs_node.sqlite"
    kernels = NsysReport.open(path).kernels()
    # graphNodeId straight from the export (NULL for kernels launched outside a graph)
    with sqlite3.connect(path) as db:
        nodes = pd.read_sql_query(
            "SELECT correlationId AS correlation_id, start AS start_ns, graphNodeId "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL",
            db,
        )
    kernels = kernels.merge(nodes, on=["correlation_id", "start_ns"])
    kernels["graph_node_id"] = kernels["graphNodeId"].fillna(-1).astype("int64")
    t = timeline_frame(kernels)
    # 5 replays x 3 MLP kernels as graph nodes, then 2 ordinary kernels (nsys_stats trace)
    assert t["kind"].value_counts().to_dict() == {"graph kernel": 15, "kernel": 2}


def test_timeline_caps_rows_on_a_big_report(small: NsysReport) -> None:
    n = 400
    span = small.capture_window()[1] + 1
    big = {}
    for name in ("kernels", "memcpy", "nvtx"):
        f = getattr(small, name)()
        copy = np.repeat(np.arange(n, dtype=np.int64), len(f))
        tiled = pd.DataFrame({c: np.tile(f[c].to_numpy(), n) for c in f.columns})
        for c in ("start_ns", "end_ns"):
            tiled[c] = tiled[c].to_numpy() + copy * span
        big[name] = tiled
    events = sum(len(f) for f in big.values())
    assert events == 400 * (26 + 2 + 17)
    for cap in (5000, 300):
        t = timeline_frame(big["kernels"], big["memcpy"], big["nvtx"], max_rows=cap)
        assert len(t) <= cap
        assert t["count"].sum() == events  # every event is in exactly one row
        assert t["start_ns"].min() == min(f["start_ns"].min() for f in big.values())
        assert t["end_ns"].max() == max(f["end_ns"].max() for f in big.values())
        assert (t["end_ns"] >= t["start_ns"]).all()
    # zoomed into copies 200-201: only what overlaps is re-binned, and it fits one per row
    window = (200 * span, 202 * span)
    zoom = timeline_frame(big["kernels"], big["memcpy"], big["nvtx"], window, max_rows=300)
    assert (zoom["count"] == 1).all() and len(zoom) == 2 * (26 + 2 + 17)
    assert zoom["start_ns"].min() >= window[0] and zoom["end_ns"].max() <= window[1]
