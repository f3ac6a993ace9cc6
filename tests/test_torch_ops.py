"""PyTorch op ranges (nsys --pytorch=autograd-shapes-nvtx) on the real tiny-LM report: the op
summary equals nsys's own projection of those ranges (`nvtx_gpu_proj_sum`), and each kernel
gets the innermost op around its launch."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.analysis.attribution import kernels_in_range
from nsight_magic.analysis.torch_ops import (
    OP_SUMMARY_COLUMNS,
    kernel_ops,
    op_ranges,
    op_summary,
    ops_by_kernel_name,
    parse_op_range,
    parse_shapes,
)
from nsight_magic.reports.nsys.report import NsysReport


@pytest.fixture(scope="module")
def ops_report(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_ops.sqlite")


@pytest.fixture(scope="module")
def per_kernel(ops_report: NsysReport) -> pd.DataFrame:
    kernels = ops_report.kernels()
    return kernel_ops(kernels, ops_report.cuda_api(), ops_report.nvtx())


def test_parse_op_range_texts():
    text = "aten::addmm, op_id = 61, sizes = [[1024], [64, 1024], [1024, 256], [], []], "
    text += "input_op_ids = [(60,0), (3,0), (4,0), (0,-1), (0,-1)]"
    op = parse_op_range(text)
    assert (op.op, op.op_id, op.seq) == ("aten::addmm", 61, None)
    assert op.shapes == "[[1024], [64, 1024], [1024, 256], [], []]"
    assert parse_shapes(op.shapes) == [[1024], [64, 1024], [1024, 256], [], []]
    # emit_nvtx with autograd on: "seq = N" then "op_id = N"
    grad = parse_op_range("aten::mm, seq = 12, op_id = 3, sizes = [[2, 3], [3, 4]]")
    assert (grad.op, grad.seq, grad.op_id) == ("aten::mm", 12, 3)
    assert parse_op_range("aten::empty").shapes == ""  # a bare ATen name is an op
    for user in ("LLM@prefill", "cell", "L3: x = a @ b", "decode_step", "cub::DeviceScan"):
        assert parse_op_range(user) is None


def test_op_summary_equals_nsys_projection(ops_report: NsysReport, per_kernel, data_dir):
    kernels = ops_report.kernels()
    ours = op_summary(ops_report.nvtx_gpu_trace(), kernels, per_kernel)
    assert list(ours.columns) == OP_SUMMARY_COLUMNS
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_ops_nvtx_gpu_proj_sum.csv")
    # nsys's Range is ":text" (default domain); every op call's text is unique (op_id)
    parsed = [parse_op_range(r[1:]) if r.startswith(":") else None for r in ref["Range"]]
    ref["op"] = [p.op if p else None for p in parsed]
    ref["shapes"] = [p.shapes if p else None for p in parsed]
    ref = ref.dropna(subset=["op"])
    assert len(ref) == 842  # 850 ranges with GPU work, 8 of them not ops
    expected = ref.groupby(["op", "shapes"]).agg(
        gpu_time_ns=("Total Proj Time (ns)", "sum"),
        calls=("Range Instances", "sum"),
        gpu_ops=("Total GPU Ops", "sum"),
    )
    got = ours.set_index(["op", "shapes"])
    assert len(got) == len(expected) == 98
    for col in ("gpu_time_ns", "calls", "gpu_ops"):
        pd.testing.assert_series_equal(got[col].sort_index(), expected[col].sort_index())
    assert ours["gpu_time_ns"].is_monotonic_decreasing
    # Innermost-op attribution counts each kernel once: all 517 kernels ran inside some op.
    assert ours["kernels"].sum() == len(kernels) == 517
    assert ours["kernel_time_ns"].sum() == kernels["duration_ns"].sum()
    # aten::linear encloses aten::matmul encloses aten::mm: same projected time, only mm
    # launched the kernels itself, only linear is top level.
    levels = got.loc[[("aten::linear", "[[2, 1, 1024], [256, 1024], []]"),
                      ("aten::matmul", "[[2, 1, 1024], [1024, 256]]"),
                      ("aten::mm", "[[2, 1024], [1024, 256]]")]]  # fmt: skip
    assert levels["gpu_time_ns"].nunique() == 1
    assert levels["kernels"].tolist() == [0, 0, 8]
    assert levels["top_level_calls"].tolist() == [8, 0, 0]


def test_kernel_ops_innermost_op_per_kernel(ops_report: NsysReport, per_kernel):
    kernels = ops_report.kernels()
    assert per_kernel.index.equals(kernels.index)
    assert (per_kernel["op"] != "").all() and (per_kernel["op_nvtx_row"] >= 0).all()
    # every nvjet GEMM kernel was launched by an aten::mm (never by linear or matmul)
    gemm = kernels["name"].str.startswith("nvjet")
    assert set(per_kernel.loc[gemm, "op"]) == {"aten::mm"}
    # the op's range really encloses the kernel: its own kernels_in_range holds it
    nvtx = ops_report.nvtx()
    first = per_kernel.loc[gemm].iloc[0]
    text = nvtx.at[first["op_nvtx_row"], "range"]
    inside = kernels_in_range(kernels, ops_report.cuda_api(), nvtx, "", text)
    assert per_kernel.loc[gemm].index[0] in inside.index
    assert text.startswith(f"aten::mm, op_id = {first['op_id']}, sizes = {first['shapes']}")


def test_op_ranges_and_kernels_outside_ops(ops_report: NsysReport, data_dir: Path):
    ranges = op_ranges(ops_report.nvtx())
    # all 1745 ranges but 16: cell, 4 statements, generate, LLM@prefill, decode, 4 decode_step
    # and 4 sample
    assert len(ranges) == 1745 - 16 and ranges["op"].str.startswith("aten::").all()
    small = NsysReport.open(data_dir / "nsys_small.sqlite")  # no op ranges at all
    none = kernel_ops(small.kernels(), small.cuda_api(), small.nvtx())
    assert (none["op"] == "").all() and (none["op_nvtx_row"] == -1).all()
    assert none["op_id"].isna().all()


def test_ops_by_kernel_name(ops_report: NsysReport, per_kernel):
    """The picker's op per kernel name: the op under which the name ran most GPU time, and how
    many ops launched it (a generic add kernel serves several)."""
    kernels = ops_report.kernels()
    by_name = ops_by_kernel_name(kernels, per_kernel).set_index("name")
    assert set(by_name.index) == set(kernels["name"])  # every kernel ran inside some op
    nvjet = [n for n in by_name.index if n.startswith("nvjet")]
    assert nvjet and (by_name.loc[nvjet, "op"] == "aten::mm").all()
    for name, row in by_name.iterrows():
        mine = per_kernel.loc[kernels["name"] == name]
        time = kernels.loc[mine.index, "duration_ns"].groupby(mine["op"]).sum()
        assert row["ops"] == len(time) and time[row["op"]] == time.max(), name
    assert by_name["ops"].max() > 1
    outside = per_kernel.assign(op="")  # no op ranges: no rows
    assert ops_by_kernel_name(kernels, outside).empty
