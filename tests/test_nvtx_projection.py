"""NVTX GPU projection equals `nsys stats --report nvtx_gpu_proj_sum` on the real report, and
scales exactly when the report is tiled in time (the vectorised path used for big reports)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stats_reference import assert_projection_equal

from nsight_magic.analysis.nvtx_nesting import nesting
from nsight_magic.analysis.nvtx_projection import (
    PROJECTION_SUMMARY_COLUMNS,
    nvtx_gpu_projection,
    project_nvtx_to_gpu,
)
from nsight_magic.reports.nsys.report import NsysReport


@pytest.fixture(scope="module")
def reference(data_dir: Path) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / "nsys_small_nvtx_gpu_proj_sum.csv")


@pytest.mark.parametrize("export", ["nsys_small.sqlite", "nsys_small_pq"])
def test_projection_equals_nsys_stats(data_dir: Path, export: str, reference: pd.DataFrame) -> None:
    ours = NsysReport.open(data_dir / export).nvtx_gpu_projection()
    assert list(ours.columns) == PROJECTION_SUMMARY_COLUMNS
    assert_projection_equal(ours, reference)


def test_trace_rows(nsys_small_sqlite: Path) -> None:
    rep = NsysReport.open(nsys_small_sqlite)
    trace = rep.nvtx_gpu_trace()
    nvtx = rep.nvtx()
    # L1 (pin_memory on the host) launched nothing, so it has no projected row.
    assert "L1: h = torch.randn(1 << 20).pin_memory()" not in set(trace["range"])
    cell = trace[trace["range"] == "cell"].iloc[0]
    # The cell spans the first copy (H2D) to the last kernel.
    assert cell["proj_start_ns"] == rep.memcpy()["start_ns"].min() == 55639953
    assert cell["proj_end_ns"] == rep.kernels()["end_ns"].max() == 199208809
    assert cell["gpu_ops"] == 26 + 2 + 3 and cell["parent"] == -1
    # Parents point at nvtx() rows: side-work's parent is "L4: side stream".
    side = trace[trace["range"] == "side-work"].iloc[0]
    assert nvtx.loc[side["parent"], "range"] == "L4: side stream"
    assert trace["proj_start_ns"].is_monotonic_increasing
    assert (trace["proj_start_ns"] >= trace["start_ns"]).all()


def test_cross_thread_start_end_ranges_are_left_out(nsys_small_sqlite: Path) -> None:
    rep = NsysReport.open(nsys_small_sqlite)
    nvtx = rep.nvtx().copy()
    nvtx.loc[nvtx["range"] == "side-work", "end_tid"] = 9999  # ended on another thread
    trace = project_nvtx_to_gpu(nvtx, rep.cuda_api(), rep.kernels(), rep.memcpy(), rep.memset())
    assert "side-work" not in set(trace["range"])
    # The CCCL range moves up one level, under "L4: side stream" directly.
    assert trace.loc[trace["range"] == "cub::DeviceScan::InclusiveScan", "level"].item() == 2


def _tile(frame: pd.DataFrame, n: int, span: int, corr_span: int) -> pd.DataFrame:
    """``n`` copies of ``frame``, copy i shifted by i*span ns and i*corr_span correlation ids."""
    copy = np.repeat(np.arange(n, dtype=np.int64), len(frame))
    out = pd.DataFrame({c: np.tile(frame[c].to_numpy(), n) for c in frame.columns})
    for c in ("start_ns", "end_ns"):
        out[c] = out[c].to_numpy() + copy * span
    if "correlation_id" in out:
        out["correlation_id"] = out["correlation_id"].to_numpy() + copy * corr_span
    return out


def test_tiled_report_scales_exactly(nsys_small_sqlite: Path) -> None:
    rep = NsysReport.open(nsys_small_sqlite)
    n = 2000  # 52k kernels, 34k ranges, 428k API calls
    span = rep.capture_window()[1] + 1
    corr_span = int(rep.cuda_api()["correlation_id"].max()) + 1
    tiled = {
        name: _tile(getattr(rep, name)(), n, span, corr_span)
        for name in ("nvtx", "cuda_api", "kernels", "memcpy", "memset")
    }
    big = nvtx_gpu_projection(
        project_nvtx_to_gpu(
            tiled["nvtx"], tiled["cuda_api"], tiled["kernels"], tiled["memcpy"], tiled["memset"]
        )
    )
    one = rep.nvtx_gpu_projection()
    assert big[["domain", "range", "style"]].equals(one[["domain", "range", "style"]])
    for col in ("instances", "proj_total_ns", "range_total_ns", "gpu_ops"):
        np.testing.assert_array_equal(big[col].to_numpy(), one[col].to_numpy() * n)
    for col in ("proj_min_ns", "proj_max_ns", "proj_med_ns"):
        np.testing.assert_array_equal(big[col].to_numpy(), one[col].to_numpy())
    for col in ("proj_avg_ns", "avg_gpu_ops", "avg_level", "avg_children"):
        np.testing.assert_allclose(big[col].to_numpy(), one[col].to_numpy(), rtol=1e-12)


def _gpu_ops_reference(runtime: pd.DataFrame, *ops: pd.DataFrame) -> dict[str, np.ndarray]:
    """The plain version of the join: first call per (pid, corr) in runtime order, then a
    stable lexsort by (pid, tid, call start, corr)."""
    frames = [f for f in ops if len(f)]
    cat = {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in frames[0].columns}
    first = runtime.drop_duplicates(["pid", "correlation_id"])
    calls = {
        (p, c): i
        for i, p, c in zip(first.index, first["pid"], first["correlation_id"], strict=True)
    }
    keep = [
        i
        for i, (p, c) in enumerate(zip(cat["pid"], cat["correlation_id"], strict=True))
        if (p, c) in calls
    ]
    keep = np.array([i for i in keep if cat["correlation_id"][i] >= 0], dtype=np.int64)
    row = np.array([calls[(cat["pid"][i], cat["correlation_id"][i])] for i in keep], np.int64)
    tid, r_start = runtime["tid"].to_numpy()[row], runtime["start_ns"].to_numpy()[row]
    corr, pid = cat["correlation_id"][keep], cat["pid"][keep]
    order = np.lexsort((corr, r_start, tid, pid))
    return {
        "start_ns": cat["start_ns"][keep][order],
        "corr": corr[order],
        "pid": pid[order],
        "tid": tid[order],
        "r_start": r_start[order],
        "r_end": runtime["end_ns"].to_numpy()[row][order],
    }


@pytest.mark.parametrize("seed", range(40))
def test_gpu_ops_join_and_order_match_the_plain_version(seed: int) -> None:
    from nsight_magic.analysis.nvtx_projection import _gpu_ops

    rng = np.random.default_rng(seed)
    n_calls = int(rng.integers(1, 60))
    big_ids = seed % 5 == 0  # pids/tids beyond 24 bits: the general path
    start = np.sort(rng.integers(0, 40 if seed % 3 == 0 else 10_000, n_calls))  # ties or not
    if seed % 4 == 0:
        start = rng.permutation(start)  # not sorted by start
    runtime = pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": start + rng.integers(0, 50, n_calls),
            "correlation_id": rng.integers(-1, 30, n_calls),  # duplicates, NULLs
            "pid": rng.integers(1, 3, n_calls) + (1 << 30 if big_ids else 0),
            "tid": rng.integers(1, 4, n_calls),
        }
    )
    ops = []
    for _ in range(2):
        n = int(rng.integers(0, 40))
        s = rng.integers(0, 10_000, n)
        ops.append(
            pd.DataFrame(
                {
                    "start_ns": s,
                    "end_ns": s + 5,
                    "correlation_id": rng.integers(-1, 35, n),
                    "pid": rng.integers(1, 3, n) + (1 << 30 if big_ids else 0),
                }
            )
        )
    if not any(len(o) for o in ops):
        return
    got = _gpu_ops(runtime, *ops)
    want = _gpu_ops_reference(runtime, *ops)
    for col, values in want.items():
        np.testing.assert_array_equal(got[col], values, err_msg=col)


def _nesting_of(spans: list[tuple[int, int]], tid: list[int] | None = None) -> tuple[list, list]:
    frame = pd.DataFrame(
        {
            "pid": 1,
            "tid": tid or [1] * len(spans),
            "start_ns": [s for s, _ in spans],
            "end_ns": [e for _, e in spans],
        }
    )
    nested = nesting(frame)
    return nested.level.tolist(), nested.parent.tolist()


def test_nesting_follows_nsys_rule_on_partial_overlaps() -> None:
    """nsys's rule (nvtx_gpu_proj_trace): the parent is the shortest same-thread range that
    encloses a range; the level is the depth in that tree. The decoder's pattern: a start/end
    range (row 2) that starts inside a statement (row 1) and outlives it."""
    spans = [(0, 100), (1, 5), (3, 90), (10, 20), (30, 80), (88, 95)]
    level, parent = _nesting_of(spans)
    assert level == [0, 1, 1, 2, 2, 1]
    assert parent == [-1, 0, 0, 2, 2, 0]
    # nested ranges (the fast path) and ranges of other threads
    level, parent = _nesting_of([(0, 10), (1, 9), (2, 3), (0, 10)], tid=[1, 1, 1, 2])
    assert (level, parent) == ([0, 1, 2, 0], [-1, 0, 1, -1])
    # a zero-length range at the instant one range ends and another starts lies inside both
    # (start <= start, end >= end): the shorter is its parent; the one that starts there and
    # goes on is not inside the one that ended
    level, parent = _nesting_of([(0, 10), (10, 10), (10, 25)])
    assert (level, parent) == ([0, 1, 0], [-1, 0, -1])
    # equal ranges: the first in row order is the other's parent
    assert _nesting_of([(5, 9), (5, 9)]) == ([0, 1], [-1, 0])
