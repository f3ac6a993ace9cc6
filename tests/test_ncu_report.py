"""NcuReport on the real .ncu-rep fixtures, checked against ncu's own raw CSV export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.errors import (
    CorruptReportError,
    EmptyReportError,
    ReportError,
    ReportNotFoundError,
    UnsupportedReportError,
)
from nsight_magic.reports.ncu.report import NcuReport

NAMES = ["ncu_small_roofline", "ncu_small_full", "ncu_gemm_metrics", "ncu_gemm_roofline"]


def raw_csv(data_dir: Path, name: str) -> tuple[pd.DataFrame, pd.Series]:
    """ncu --page raw --csv: row 0 names, row 1 units, then one row per launch."""
    frame = pd.read_csv(data_dir / "ncu_raw" / f"{name}.raw.csv", dtype=str, keep_default_na=False)
    return frame.iloc[1:].reset_index(drop=True), frame.iloc[0]


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return np.nan


@pytest.fixture(scope="module")
def reports(ncu_reports: dict[str, Path]) -> dict[str, NcuReport]:
    return {name: NcuReport.open(ncu_reports[name]) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_metrics_equal_ncu_raw_csv(reports, data_dir, name):
    report = reports[name]
    raw, units = raw_csv(data_dir, name)
    long = report.metrics()
    assert list(long.columns) == ["launch", "name", "metric", "value", "unit"]
    assert long["launch"].nunique() == len(raw) == len(report)
    compared = 0
    unit_mismatch: list[str] = []
    for row in long.itertuples():
        if row.metric not in raw.columns:
            continue  # ncu's raw page leaves out breakdown:/group: helper entries
        expected = number(raw.at[row.launch, row.metric])
        if np.isnan(expected):
            continue
        # the CSV rounds to 2 decimals and prints thousands separators
        assert row.value == pytest.approx(expected, rel=1e-4, abs=0.006), row.metric
        if units[row.metric] and row.unit != units[row.metric]:
            assert row.metric.startswith("derived__"), (row.metric, row.unit)
            unit_mismatch.append(row.metric)
        compared += 1
    assert compared > 0.9 * len(long)
    # Units agree except where the CLI prints none (idc__requests.sum: ncu_report says
    # "request") and for section-defined ``derived__`` expressions, whose unit ncu_report
    # infers differently from the CLI ("byte" vs "sector", "inst/cycle" vs "inst"); values agree.
    assert len(unit_mismatch) < 0.02 * compared


def test_metric_values_that_matter(reports):
    m = reports["ncu_gemm_metrics"].metrics().set_index(["launch", "metric"])["value"]
    assert m[(0, "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum")] == 2147483648
    assert (
        m[(0, "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained")]
        == 540672
    )
    assert m[(1, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")] == 16908288
    assert m[(0, "gpu__time_duration.sum")] == 9376


def test_kernels(reports, data_dir):
    kernels = reports["ncu_gemm_roofline"].kernels()
    assert list(kernels.columns) == [
        "launch", "name", "demangled", "mangled", "duration_ns", "grid", "block",
        "registers_per_thread", "shared_mem_bytes", "sm_clock_hz", "device_id", "stream_id",
        "nvtx", "phase", "process_id",
    ]  # fmt: skip
    assert kernels["phase"].tolist() == ["", ""]  # captured before the phase mirror existed
    raw, _ = raw_csv(data_dir, "ncu_gemm_roofline")
    assert kernels["name"].tolist() == raw["Kernel Name"].tolist()
    assert kernels["grid"].tolist() == raw["Grid Size"].tolist() == ["(2, 64, 1)", "(16, 8, 1)"]
    assert kernels["block"].tolist() == raw["Block Size"].tolist()
    assert kernels["duration_ns"].tolist() == [9248, 9920]
    assert kernels["duration_ns"].dtype == np.int64
    assert kernels["registers_per_thread"].tolist() == [168, 80]
    assert kernels["stream_id"].tolist() == [7, 7]
    assert kernels["nvtx"].tolist() == [
        "nsight_magic@cell/L1: C = A @ B  # bf16 2048x1024x512",
        "nsight_magic@cell/L2: C32 = A32 @ B32  # fp32 512x256x128",
    ]
    small = reports["ncu_small_full"].kernels()
    assert small.at[0, "demangled"].startswith("void at::native::vectorized_elementwise_kernel<")
    assert small.at[0, "mangled"].startswith("_ZN2at6native29vectorized_elementwise_kernel")


def test_nvtx_ranges(reports):
    ranges = reports["ncu_small_roofline"].nvtx_ranges()
    assert ranges.to_dict("records")[:2] == [
        {"launch": 0, "domain": "nsight_magic", "range": "cell", "style": "PushPop", "level": 0},
        {"launch": 0, "domain": "nsight_magic", "range": "L1: y = x * 2.0 + x",
         "style": "PushPop", "level": 1},
    ]  # fmt: skip


def test_sol_and_device(reports, data_dir):
    sol = reports["ncu_small_full"].sol()
    raw, _ = raw_csv(data_dir, "ncu_small_full")
    expected = raw["sm__throughput.avg.pct_of_peak_sustained_elapsed"].map(number)
    np.testing.assert_allclose(sol["compute_sol_pct"], expected, atol=0.006)
    expected = raw["sm__warps_active.avg.pct_of_peak_sustained_active"].map(number)
    np.testing.assert_allclose(sol["achieved_occupancy_pct"], expected, atol=0.006)
    assert sol["theoretical_occupancy_pct"].notna().all()
    # the --metrics report has no occupancy metric: NaN, not an error
    assert reports["ncu_gemm_metrics"].sol()["achieved_occupancy_pct"].isna().all()
    assert reports["ncu_small_full"].device() == {
        "name": "NVIDIA H200",
        "compute_capability": "9.0",
        "sm_count": 132,
        "sm_clock_max_hz": 1.98e9,
    }


def test_sections(reports):
    sections = reports["ncu_small_full"].sections(1)
    sol = sections["GPU Speed Of Light Throughput"].set_index("metric")
    assert list(sections["Launch Statistics"].columns) == ["metric", "value", "unit"]
    assert (
        sol.at["gpu__time_duration.sum", "value"]
        == reports["ncu_small_full"].kernels().at[1, "duration_ns"]
    )
    assert sol.at["gpu__time_duration.sum", "unit"] == "ns"
    assert "SpeedOfLight_RooflineChart" not in sections  # keyed by display name
    assert "GPU Speed Of Light Roofline Chart" in sections
    with pytest.raises(KeyError):
        reports["ncu_small_full"].sections(3)


def test_full_set_metrics_are_all_read(reports):
    # --set full: 2243 numeric metrics x 3 launches (speed is measured in benchmarks, not here)
    assert len(reports["ncu_small_full"].metrics()) == 6657


# --- bad files ---------------------------------------------------------------------------------
def test_missing(tmp_path):
    with pytest.raises(ReportNotFoundError):
        NcuReport.open(tmp_path / "nope.ncu-rep")


def test_empty(tmp_path):
    (tmp_path / "e.ncu-rep").write_bytes(b"")
    with pytest.raises(EmptyReportError):
        NcuReport.open(tmp_path / "e.ncu-rep")


def test_garbage_and_folder(tmp_path):
    (tmp_path / "g.ncu-rep").write_bytes(b"not a report at all\n" * 100)
    with pytest.raises(CorruptReportError):
        NcuReport.open(tmp_path / "g.ncu-rep")
    with pytest.raises(UnsupportedReportError, match="is a folder"):
        NcuReport.open(tmp_path)


@pytest.mark.parametrize("keep", [4, 100, 0.5])
def test_truncated(ncu_reports, tmp_path, keep):
    data = ncu_reports["ncu_gemm_metrics"].read_bytes()
    size = int(len(data) * keep) if isinstance(keep, float) else keep
    path = tmp_path / "t.ncu-rep"
    path.write_bytes(data[:size])
    with pytest.raises(CorruptReportError) as info:
        NcuReport.open(path)
    assert isinstance(info.value, ReportError)
