"""The analysis frames as runs hand them to views (thin forwarding on NsysRun / NcuRun), on the
real reports: the GPU comes from the report, times from the parent nsys run."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_magic.analysis.mfu import KERNEL_COLUMNS
from nsight_magic.analysis.range_mfu import RANGE_COLUMNS
from nsight_magic.analysis.roofline_bounds import BOUND_COLUMNS
from nsight_magic.analysis.timeline import TIMELINE_COLUMNS
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results import NcuRun, NsysRun

H200_BF16 = 132 * 1830e6 * 4096


@pytest.fixture(scope="module")
def gemm_runs(ncu_reports: dict[str, Path], data_dir: Path) -> tuple[NcuRun, NsysRun]:
    parent = NsysRun(NsysReport.open(data_dir / "nsys_gemm.sqlite"))
    return NcuRun(NcuReport.open(ncu_reports["ncu_gemm_metrics"]), parent=parent), parent


def test_ncu_run_hfu_takes_the_gpu_from_the_report(gemm_runs):
    run, _ = gemm_runs
    out = run.hfu()  # no gpu_name=: "NVIDIA H200" from the report's device attributes
    assert list(out.columns) == KERNEL_COLUMNS
    assert out["time_source"].tolist() == ["nsys", "nsys"]  # the parent run's real clocks
    assert out.at[0, "hfu_frac"] == pytest.approx(2147483648 / 6144e-9 / H200_BF16)
    assert out["mfu_frac"].isna().all()
    given = run.mfu({0: 2 * 2048 * 1024 * 512})
    assert given.at[0, "mfu_frac"] == pytest.approx(given.at[0, "hfu_frac"])
    ranges = run.range_mfu()
    assert list(ranges.columns) == RANGE_COLUMNS and "cell" in set(ranges["range"])
    frames = run.mfu_frames()
    assert set(frames) == {"kernels", "ranges"} and len(frames["kernels"]) == 2


def test_ncu_run_roofline_bounds(gemm_runs):
    run, _ = gemm_runs
    bounds = run.roofline_bounds()
    assert list(bounds.columns) == BOUND_COLUMNS
    assert bounds["bound"].tolist() == ["compute", "compute"]
    assert "dram" in set(run.roofline_ceilings()["ceiling"])


def test_nsys_run_frames(data_dir: Path):
    run = NsysRun(NsysReport.open(data_dir / "nsys_ops.sqlite"))
    assert run.resolve_nvtx_range("LLM@prefill") == ("LLM", "LLM@prefill", "PushPop")
    prefill = run.kernels_in_range("LLM", "LLM@prefill")
    assert len(prefill) == 101  # nvtx_gpu_proj_sum: 103 GPU ops, of them 101 kernels
    ops = run.op_summary()
    assert ops["kernels"].sum() == len(run.kernels())
    assert (run.kernel_ops().index == run.kernels().index).all()
    top = run.op_mfu()
    assert top["peak_source"].iloc[0].startswith("derived: H100 SXM bf16")
    ordered = run.ordered_projection()
    assert ordered["range"].iloc[0] == "cell" and ordered["scope"].iloc[1] == "statement"
    step = run.nvtx().query("range == 'decode_step'").iloc[0]
    zoom = run.timeline(window=(int(step["start_ns"]), int(step["end_ns"])), max_rows=500)
    assert list(zoom.columns) == TIMELINE_COLUMNS and (zoom["count"] == 1).all()
    assert run.copies_by_kind().empty  # its 2 non-kernel GPU ops are memsets
