"""roofline_points() against ncu's section formulas evaluated on ncu's own raw CSV export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis import ncu_metrics as M
from nsight_magic.analysis.ncu_metrics import ROOFLINE_METRICS, parse_tensor_path
from nsight_magic.analysis.roofline import ROOFLINE_COLUMNS, roofline_points
from nsight_magic.analysis.roofline_bounds import BOUND_COLUMNS, roofline_bounds, roofline_ceilings
from nsight_magic.errors import MissingMetricsError
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.vocabulary import precisions

BF16 = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off"


def raw_text(path: Path) -> pd.DataFrame:
    """ncu --page raw --csv as text, one column per field (row 0 of the frame is the units).

    ncu quotes every field but does not double a quote inside an NVTX range's text: a run of a
    cell whose code has a string in it (nsight_magic's per-line ranges hold the line, e.g.
    ``nvtx.annotate("prefill", ...)``; ncu 2025.3.1, tests/data/ncu_raw/ncu_sweep_top.raw.csv)
    gives a line a CSV reader splits into too many fields. Every field being quoted, ``","``
    alone separates them."""
    rows = []
    for line in path.read_text().splitlines():
        assert line.startswith('"') and line.endswith('"'), line[:80]
        rows.append([field.replace('""', '"') for field in line[1:-1].split('","')])
    header, *body = rows
    assert all(len(row) == len(header) for row in body), path
    return pd.DataFrame(body, columns=header)


def raw_numbers(data_dir: Path, name: str) -> pd.DataFrame:
    """ncu --page raw --csv as numbers (row 0 of the file is units; thousands separators)."""
    frame = raw_text(data_dir / "ncu_raw" / f"{name}.raw.csv")
    body = frame.iloc[1:].reset_index(drop=True)
    return body.apply(lambda col: pd.to_numeric(col.str.replace(",", ""), errors="coerce"))


def section_formulas(raw: pd.DataFrame) -> pd.DataFrame:
    """SpeedOfLight_RooflineChart / Hierarchical{Half,Tensor}RooflineChart, written out."""
    sass = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
    peak = "sm__sass_thread_inst_executed_op_{}_pred_on.sum.peak_sustained"
    smsp_hz, sm_hz = (
        raw["smsp__cycles_elapsed.avg.per_second"],
        raw["sm__cycles_elapsed.avg.per_second"],
    )
    return pd.DataFrame(
        {
            "fp32_flops_per_s": (raw[sass.format("fadd")] + raw[sass.format("fmul")]
                           + 2 * raw[sass.format("ffma")]) * smsp_hz,
            "fp64_flops_per_s": (raw[sass.format("dadd")] + raw[sass.format("dmul")]
                           + 2 * raw[sass.format("dfma")]) * smsp_hz,
            "fp16_flops_per_s": (2 * raw[sass.format("hadd")] + 2 * raw[sass.format("hmul")]
                           + 4 * raw[sass.format("hfma")]) * smsp_hz,
            "peak_fp32_flops_per_s": 2 * raw[peak.format("ffma")] * sm_hz,
            "peak_fp64_flops_per_s": 2 * raw[peak.format("dfma")] * sm_hz,
            "peak_fp16_flops_per_s": 4 * raw[peak.format("hfma")] * sm_hz,
            "dram_bytes_per_s": raw["dram__bytes.sum.per_second"],
            "peak_dram_bytes_per_s": raw["dram__bytes.sum.peak_sustained"]
            * raw["dram__cycles_elapsed.avg.per_second"],
            "sm_clock_hz": sm_hz,
            "duration_ns": raw["gpu__time_duration.sum"],
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def points(ncu_reports: dict[str, Path]) -> dict[str, pd.DataFrame]:
    return {name: NcuReport.open(path).roofline() for name, path in ncu_reports.items()}


@pytest.mark.parametrize("name", ["ncu_small_roofline", "ncu_gemm_roofline", "ncu_small_full"])
def test_equals_section_formulas_on_raw_csv(points, data_dir, name):
    ours = points[name]
    raw = raw_numbers(data_dir, name)
    expected = section_formulas(raw)
    assert len(ours) == len(raw)
    for column in expected:
        # the CSV keeps 2 decimals of a per-cycle rate: +-0.005 inst/cycle x clock x weight 4
        tolerance = 0.005 * 4 * raw["smsp__cycles_elapsed.avg.per_second"]
        np.testing.assert_allclose(ours[column], expected[column], rtol=1e-5, atol=tolerance.max(),
                                   err_msg=column)  # fmt: skip
    # tensor: the op path's per-cycle rate x SM clock, ceiling = its dense peak x SM clock
    hz = raw["sm__cycles_elapsed.avg.per_second"]
    tensor = ours["tensor_flops_per_s"].to_numpy()
    if name == "ncu_gemm_roofline":
        assert ours["tensor_op_path"].tolist() == [BF16, ""]
        np.testing.assert_allclose(
            tensor[0], raw.at[0, f"{BF16}.sum.per_cycle_elapsed"] * hz[0], rtol=1e-5
        )
        np.testing.assert_allclose(ours.at[0, "peak_tensor_flops_per_s"], 540672 * hz[0], rtol=1e-9)
        # the sparse path's ceiling is twice the dense one we use
        sparse = raw.at[0, "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained"]
        assert sparse == 2 * raw.at[0, f"{BF16}.sum.peak_sustained"] == 1081344
        assert np.isnan(
            ours.at[1, "peak_tensor_flops_per_s"]
        )  # no tensor work: ncu draws no tensor roofline
    else:
        assert (tensor == 0).all() and (ours["tensor_op_path"] == "").all()
    flops = ours[
        ["fp64_flops_per_s", "fp32_flops_per_s", "fp16_flops_per_s", "tensor_flops_per_s"]
    ].sum(axis=1)
    np.testing.assert_allclose(ours["arithmetic_intensity"], flops / expected["dram_bytes_per_s"],
                               rtol=1e-4)  # fmt: skip
    assert list(ours.columns) == ROOFLINE_COLUMNS


def test_bf16_gemm_tensor_flops(points):
    m, n, k = 2048, 1024, 512
    for name in ["ncu_gemm_metrics", "ncu_gemm_roofline"]:
        row = points[name].iloc[0]
        assert row["flop_count_tensor"] == pytest.approx(2 * m * n * k, rel=0.02)
        assert row["flop_count_total"] == pytest.approx(2 * m * n * k, rel=0.02)
    # the --metrics report stores the count itself: exact
    assert points["ncu_gemm_metrics"].at[0, "flop_count_tensor"] == 2147483648


def test_fp32_simt_gemm_flops(points):
    # 2*M*N*K FFMA FLOPs plus one FFMA per output element for the alpha/beta epilogue
    m, n, k = 512, 256, 128
    row = points["ncu_gemm_metrics"].iloc[1]
    assert row["flop_count_fp32"] == 2 * 16908288 == 2 * m * n * k + 2 * m * n
    assert row["flop_count_fp32"] == pytest.approx(2 * m * n * k, rel=0.01)
    rate_based = points["ncu_gemm_roofline"].iloc[1]["flop_count_fp32"]
    assert rate_based == pytest.approx(2 * m * n * k, rel=0.01)
    # the small workload's 256^3 sgemm (non split-k launch)
    assert points["ncu_small_roofline"].at[1, "flop_count_fp32"] == pytest.approx(
        2 * 256**3, rel=1e-4
    )


def test_metrics_report_counts_give_the_same_rates(points):
    """--metrics stores .sum counts: rate = count / duration equals ncu's own per_second."""
    row = points["ncu_gemm_metrics"].iloc[0]
    assert row["dram_bytes_per_s"] == pytest.approx(337883959044.37, rel=1e-9)
    assert row["tensor_flops_per_s"] == pytest.approx(170999.86 * 1339419148.83, rel=1e-6)


def test_missing_metrics_raise_with_the_fix(ncu_reports):
    long = NcuReport.open(ncu_reports["ncu_gemm_metrics"]).metrics()
    lacking = long[~long["metric"].str.startswith("dram__bytes")]
    with pytest.raises(MissingMetricsError) as info:
        roofline_points(lacking)
    message = str(info.value)
    assert "dram__bytes.sum" in message and "--set roofline" in message
    assert "dram__bytes.sum.peak_sustained" in message
    # only SOL-style metrics (a --section SpeedOfLight run would look like this)
    sol_only = long[
        long["metric"].isin(["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second"])
    ]
    with pytest.raises(MissingMetricsError, match="smsp__sass_thread_inst_executed_op_ffma"):
        roofline_points(sol_only)


def test_missing_metrics_fix_yields_tensor_flops():
    """Following the hint must give tensor FLOPs: on sm_90 it lists the tensor op paths (the
    --metrics list without them leaves tensor_flops_per_s NaN); elsewhere it says --set roofline."""
    lacking = pd.DataFrame(
        {"launch": [0], "name": ["k"], "metric": [M.DURATION], "value": [1000.0], "unit": ["ns"]}
    )
    with pytest.raises(MissingMetricsError) as info:
        roofline_points(lacking, "9.0")
    listed = str(info.value).split("--metrics ", 1)[1].rstrip(".").split(",")
    assert f"{BF16}.sum" in listed and f"{BF16}.sum.peak_sustained" in listed
    assert set(ROOFLINE_METRICS) <= set(listed)
    with pytest.raises(MissingMetricsError) as info:
        roofline_points(lacking, "12.0")
    assert "with --metrics" not in str(info.value) and "with --set roofline" in str(info.value)
    assert "compute capability 12.0" in str(info.value)


def test_precision_table_drives_the_columns():
    """One precision table: the roofline's columns and SASS weights come from it."""
    for p in precisions.ROOFLINE_PRECISIONS:
        assert {p.flops_column, p.peak_column, p.count_column} <= set(ROOFLINE_COLUMNS)
    assert dict(precisions.FP16.flop_weights) == {"hadd": 2, "hmul": 2, "hfma": 4}
    assert precisions.PEAK_COLUMNS["peak_tensor_flops_per_s"] == "Tensor"
    assert precisions.FLOP_COLUMNS["fp32_flops_per_s"] == "peak_fp32_flops_per_s"
    assert precisions.tensor_dtype(parse_tensor_path(BF16).src) == "bf16"
    assert precisions.tensor_dtype("fp64") == "fp64_tensor"


def test_roofline_metrics_list_is_what_the_metrics_report_had(ncu_reports):
    # every counter ROOFLINE_METRICS asks for exists on H200 (the metrics fixture used them)
    names = set(NcuReport.open(ncu_reports["ncu_gemm_metrics"]).metrics()["metric"])
    assert set(ROOFLINE_METRICS) <= names


def test_tensor_path_grammar():
    p = parse_tensor_path(BF16)
    assert (p.op, p.src, p.dst, p.sparsity) == ("hgmma", "bf16", "fp32", "off")
    agg = parse_tensor_path("sm__ops_path_tensor_src_bf16_dst_fp32")
    assert agg.covers(p) and not p.covers(agg)
    assert parse_tensor_path("sm__ops_path_tensor_src_fp8_sparsity_on").dense() == (
        "sm__ops_path_tensor_src_fp8_sparsity_off"
    )
    assert not parse_tensor_path("sm__ops_path_tensor_src_int8").is_float


def test_bounds_memory_pct_is_ncus_own_dram_throughput(points, data_dir):
    """Memory-bound launches: bound_pct = DRAM bytes/s / (peak_sustained x DRAM clock), which is
    ncu's own gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed (20.10 and 4.15 here)."""
    bounds = roofline_bounds(points["ncu_small_roofline"])
    raw = raw_numbers(data_dir, "ncu_small_roofline")
    assert list(bounds.columns) == BOUND_COLUMNS
    assert bounds["bound"].tolist() == ["memory", "compute", "memory"]
    ncu_pct = raw["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    for launch in (0, 2):
        assert bounds.at[launch, "bound_pct"] == pytest.approx(ncu_pct[launch], abs=0.005)
    # launch 0, x + 2x over 1M floats: AI 0.4993 FLOP/byte, far left of the FP32 ridge
    # (50.05 TFLOP/s / 4.787 TB/s = 10.46 FLOP/byte): the DRAM roof binds
    assert bounds.at[0, "verdict"] == "memory-bound, 20% of DRAM peak"
    assert bounds.at[0, "ceiling_pct"] == pytest.approx(bounds.at[0, "bound_pct"])
    assert bounds["plottable"].all() and (bounds["precision"] == "FP32").all()


def test_bounds_compute_pct_is_the_precisions_own_peak(points):
    """The bf16 GEMM: AI 677.9 FLOP/byte is right of the tensor ridge (151.2), so the tensor
    roof binds; bound_pct = tensor FLOP/s / tensor peak at the launch's clock."""
    roof = points["ncu_gemm_roofline"]
    bounds = roofline_bounds(roof)
    gemm = bounds.iloc[0]
    assert gemm["precision"] == "Tensor" and gemm["bound"] == "compute"
    expected = 100 * roof.at[0, "tensor_flops_per_s"] / roof.at[0, "peak_tensor_flops_per_s"]
    assert gemm["bound_pct"] == pytest.approx(expected)  # 32.06%
    assert gemm["verdict"] == "compute-bound, 32% of Tensor peak"
    assert gemm["ceiling_flops_per_s"] == roof.at[0, "peak_tensor_flops_per_s"]
    assert gemm["short_name"] == "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
    # fp32 SIMT GEMM: compute-bound on FP32; bound_pct counts FP32 FLOPs only, while
    # ceiling_pct counts all (it also ran a few half-precision FLOPs)
    simt = bounds.iloc[1]
    assert simt["precision"] == "FP32" and simt["bound"] == "compute"
    assert simt["bound_pct"] == pytest.approx(
        100 * roof.at[1, "fp32_flops_per_s"] / roof.at[1, "peak_fp32_flops_per_s"]
    )
    assert simt["ceiling_pct"] > simt["bound_pct"]


def test_bounds_without_flops_or_traffic():
    rows = pd.DataFrame(
        {
            "launch": [0, 1],
            "name": ["copy", "idle"],
            "duration_ns": [1000, 1000],
            "fp32_flops_per_s": [0.0, 0.0],
            "peak_fp32_flops_per_s": [50e12, 50e12],
            "arithmetic_intensity": [0.0, np.nan],
            "dram_bytes_per_s": [2e12, 0.0],
            "peak_dram_bytes_per_s": [4e12, 4e12],
        }
    )
    bounds = roofline_bounds(rows)
    assert bounds["verdict"].tolist() == ["no FLOPs, 50% of DRAM peak", "no FLOPs or DRAM traffic"]
    assert bounds["bound"].tolist() == ["memory", ""]
    assert not bounds["plottable"].any() and (bounds["precision"] == "none").all()


def test_ceilings_with_ridge_points(points):
    ceilings = roofline_ceilings(points["ncu_gemm_roofline"]).set_index("ceiling")
    assert list(ceilings.index) == ["tensor", "fp16", "fp32", "fp64", "dram"]
    assert ceilings.at["dram", "kind"] == "memory" and ceilings.at["dram", "unit"] == "byte/s"
    tensor = ceilings.loc["tensor"]
    # the tensor ceiling of the only tensor launch: 540672 FLOP/cycle x its SM clock
    assert tensor["peak"] == points["ncu_gemm_roofline"].at[0, "peak_tensor_flops_per_s"]
    assert tensor["ridge_ai"] == pytest.approx(tensor["peak"] / ceilings.at["dram", "peak"])
    assert roofline_ceilings(points["ncu_small_roofline"])["label"].tolist() == [
        "FP16", "FP32", "FP64", "DRAM",
    ]  # fmt: skip
