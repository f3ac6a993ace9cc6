"""HFU and MFU on the real reports: ncu hardware FLOPs vs model FLOPs, nsys (real-clock) time,
peaks derived from SMs x clock x per-SM rate (tests/test_gpu_peaks.py).

The GEMM fixtures (tests/data/README.md) ran on an H200 (132 SMs): bf16 2048x1024x512 on tensor
cores (ncu counts exactly 2*M*N*K = 2147483648 tensor FLOPs) and fp32 512x256x128 on the SIMT
pipe. Peaks used below:
    H200 bf16 = 132 SMs x 1830 MHz x 4096 FLOP/clk/SM = 989.42976 TFLOP/s
    H200 fp32 = 132 SMs x 1980 MHz x  256 FLOP/clk/SM =  66.90816 TFLOP/s
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis.mfu import (
    MODEL_MFU_COLUMNS,
    NO_GEMM_OPS,
    NO_OP_RANGE,
    kernel_utilisation,
    launch_dtype,
    launch_model_flops,
    model_mfu,
    op_mfu,
    require_flop_counts,
)
from nsight_magic.analysis.model_flops import gemm_flops, transformer_flops
from nsight_magic.analysis.range_mfu import range_utilisation
from nsight_magic.analysis.roofline import roofline_points
from nsight_magic.analysis.torch_ops import kernel_ops, op_summary
from nsight_magic.errors import EmptyResultWarning, MissingMetricsError
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport

H200_BF16 = 132 * 1830e6 * 4096  # 989.42976e12
H200_FP32 = 132 * 1980e6 * 256  # 66.90816e12
H100_BF16 = H200_BF16  # same SMs and clocks (nsys_ops ran on an H100 SXM)
GEMM_FLOPS = 2 * 2048 * 1024 * 512  # 2147483648
BF16_RANGE = "L1: C = A @ B  # bf16 2048x1024x512"
FP32_RANGE = "L2: C32 = A32 @ B32  # fp32 512x256x128"


@pytest.fixture(scope="module")
def gemm(ncu_reports: dict[str, Path]) -> NcuReport:
    return NcuReport.open(ncu_reports["ncu_gemm_metrics"])


@pytest.fixture(scope="module")
def nsys_gemm(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_gemm.sqlite")


def test_hfu_per_kernel_on_nsys_time(gemm, nsys_gemm):
    out = kernel_utilisation(
        gemm.roofline(),
        kernels=gemm.kernels(),
        nsys_kernels=nsys_gemm.kernels(),
        gpu_name=gemm.device()["name"],
    )
    assert out["time_source"].tolist() == ["nsys", "nsys"]
    assert out["dtype"].tolist() == ["bf16", "fp32"]
    bf16, fp32 = out.iloc[0], out.iloc[1]
    # bf16 GEMM: 2147483648 FLOP in 6144 ns (nsys) = 349.525 TFLOP/s; / 989.43 = 0.35326
    assert bf16["hw_flops"] == GEMM_FLOPS and bf16["time_ns"] == 6144
    assert bf16["peak_flops_per_s"] == H200_BF16
    assert bf16["peak_source"].startswith("derived: H200 bf16 dense = 132 SMs x 1830 MHz")
    assert bf16["hfu_frac"] == pytest.approx(GEMM_FLOPS / 6144e-9 / H200_BF16)
    assert bf16["hfu_frac"] == pytest.approx(0.353259, abs=1e-6)
    # fp32 SIMT GEMM: 33849344 FLOP (2*M*N*K = 33554432 + 2*M*N epilogue + 32768 half
    # FLOPs) in 5376 ns = 6.2964 TFLOP/s; / 66.908 = 0.094105
    assert fp32["hw_flops"] == 33849344 and fp32["time_ns"] == 5376
    assert fp32["hfu_frac"] == pytest.approx(33849344 / 5376e-9 / H200_FP32)
    assert fp32["hfu_frac"] == pytest.approx(0.094105, abs=1e-6)
    # no model FLOPs known (no op ranges, none given): MFU is unknown, never the HFU, and the
    # blank says why
    assert out["mfu_frac"].isna().all() and (out["model_flops_source"] == NO_OP_RANGE).all()


def test_mfu_with_given_model_flops(gemm, nsys_gemm):
    out = kernel_utilisation(
        gemm.roofline(),
        kernels=gemm.kernels(),
        nsys_kernels=nsys_gemm.kernels(),
        model_flops={0: GEMM_FLOPS},
        gpu_name="NVIDIA H200",
    )
    bf16 = out.iloc[0]
    assert bf16["model_flops_source"] == "given"
    # 2048, 1024 and 512 are multiples of the 128x128x64 tile (nvjet_..._128x128_64x6): no
    # padding, so the hardware did exactly the model's FLOPs and MFU = HFU here.
    assert bf16["mfu_frac"] == pytest.approx(GEMM_FLOPS / 6144e-9 / H200_BF16)
    assert bf16["mfu_frac"] == bf16["hfu_frac"]
    assert np.isnan(out.iloc[1]["mfu_frac"])


def test_falls_back_to_ncu_time_and_user_peak(gemm):
    out = kernel_utilisation(gemm.roofline(), peak_flops=1e15)
    assert out["time_source"].tolist() == ["ncu", "ncu"]
    assert out["peak_source"].tolist() == ["user (peak_flops=)"] * 2
    # ncu's locked-clock duration of the bf16 GEMM: 9376 ns
    assert out.at[0, "hfu_frac"] == pytest.approx(GEMM_FLOPS / 9376e-9 / 1e15)


def _with_op_ranges(gemm: NcuReport) -> pd.DataFrame:
    """The report's real NVTX stacks plus PyTorch op ranges in emit_nvtx(record_shapes=True)'s
    format (torch/csrc/profiler/util.cpp getNvtxStr). CONSTRUCTED: no ncu fixture was captured
    with emit_nvtx yet, so these two rows are written here, not read from a report."""
    ops = pd.DataFrame(
        {
            "launch": [0, 1],
            "domain": ["", ""],
            "range": [
                "aten::mm, seq = 0, op_id = 7, sizes = [[2048, 512], [512, 1024]]",
                "aten::mm, seq = 1, op_id = 9, sizes = [[512, 128], [128, 256]]",
            ],
            "style": ["PushPop", "PushPop"],
            "level": [0, 0],
        }
    )
    return pd.concat([gemm.nvtx_ranges(), ops], ignore_index=True)


def test_mfu_derived_from_the_op_range_around_the_launch(gemm, nsys_gemm):
    nvtx = _with_op_ranges(gemm)
    out = kernel_utilisation(
        gemm.roofline(), kernels=gemm.kernels(), nvtx=nvtx, nsys_kernels=nsys_gemm.kernels(),
        gpu_name="NVIDIA H200",
    )  # fmt: skip
    bf16, fp32 = out.iloc[0], out.iloc[1]
    assert bf16["model_flops"] == GEMM_FLOPS  # 2*2048*1024*512 from the recorded shapes
    assert bf16["model_flops_source"] == ("derived: 2*M*N*K of aten::mm [[2048, 512], [512, 1024]]")
    assert bf16["mfu_frac"] == pytest.approx(bf16["hfu_frac"])
    # fp32: model 2*512*256*128 = 33554432 FLOP; hardware 33849344 (the alpha/beta epilogue
    # and a few half FLOPs): MFU = 33554432 / 5376e-9 / 66.908e12 = 0.093288 < HFU 0.094105
    assert fp32["model_flops"] == 33554432
    assert fp32["mfu_frac"] == pytest.approx(33554432 / 5376e-9 / H200_FP32)
    assert fp32["mfu_frac"] < fp32["hfu_frac"]


def test_op_flops_stay_with_the_op_when_it_has_several_launches(gemm):
    # An addmm whose GEMM and split-K reduction both ran inside one op call (same range text):
    # neither launch alone did the op's math.
    text = "aten::addmm, seq = 3, sizes = [[256], [512, 128], [128, 256], [], []]"
    nvtx = pd.DataFrame(
        {"launch": [0, 1], "domain": ["", ""], "range": [text, text],
         "style": ["PushPop"] * 2, "level": [0, 0]}
    )  # fmt: skip
    per_launch = launch_model_flops(nvtx)
    assert per_launch["model_flops"].isna().all()
    assert per_launch["model_flops_source"].str.contains("an op with 2 launches").all()
    # the range holding both counts the op once: 2*512*256*128
    ranges = range_utilisation(
        gemm.roofline(), pd.concat([gemm.nvtx_ranges(), nvtx]), gpu_name="NVIDIA H200"
    ).set_index("range")
    assert ranges.at["cell", "model_flops"] == 2 * 512 * 256 * 128
    assert ranges.at["cell", "model_flops_source"] == (
        "derived: 1 GEMM op call(s) of the profiled launches"
    )
    assert text not in ranges.index  # op ranges are ops, not ranges (see op_mfu)


def test_range_utilisation(gemm):
    projection = pd.DataFrame(
        {"domain": ["nsight_magic"], "range": ["cell"], "proj_total_ns": [20000]}
    )
    points = gemm.roofline()
    out = range_utilisation(
        points,
        gemm.nvtx_ranges(),
        projection=projection,
        range_launches={"cell": 2, BF16_RANGE: 1},
        time_ns={BF16_RANGE: 6144},
        flops={f"nsight_magic:{BF16_RANGE}": GEMM_FLOPS},
        gpu_name="NVIDIA H200",
    ).set_index("range")
    ncu_ns = points.set_index("launch")["duration_ns"]
    cell = out.loc["cell"]
    assert cell["label"] == "nsight_magic:cell" and cell["coverage"] == "2/2 launches profiled"
    assert cell["launches_profiled"] == 2 and cell["launches_total"] == 2
    assert cell["hw_flops"] == GEMM_FLOPS + 33849344
    # HFU covers the profiled launches: their own time (ncu here: no nsys kernels given)
    assert cell["time_source"] == "ncu" and cell["time_ns"] == ncu_ns.sum()
    assert cell["range_time_source"] == "nsys" and cell["range_time_ns"] == 20000
    assert cell["dtype"] == "bf16" and np.isnan(cell["mfu_frac"])
    assert cell["model_flops_source"].startswith("no GEMM op range")
    assert cell["hfu_frac"] == pytest.approx(
        (GEMM_FLOPS + 33849344) / (ncu_ns.sum() * 1e-9) / H200_BF16
    )
    l1 = out.loc[BF16_RANGE]
    assert l1["range_time_source"] == "given" and l1["model_flops_source"] == "given"
    assert l1["mfu_frac"] == pytest.approx(GEMM_FLOPS / 6144e-9 / H200_BF16)
    l2 = out.loc[FP32_RANGE]
    assert l2["time_source"] == "ncu" and l2["time_ns"] == 10208
    assert l2["dtype"] == "fp32" and l2["peak_flops_per_s"] == H200_FP32
    # no count given for L2: the total is unknown, and the row says so
    assert pd.isna(l2["launches_total"]) and "needs the nsys run" in l2["coverage"]


def test_range_hfu_covers_only_the_profiled_launches(gemm, nsys_gemm):
    """1 of 32 launches profiled (a picker drill-down): HFU is that launch's FLOPs over that
    launch's nsys time, not over the whole range's; MFU given for the whole range needs the
    whole range's time and says so when it has none."""
    points = gemm.roofline()
    nvtx = gemm.nvtx_ranges()
    one = nvtx[nvtx["launch"] == 0]
    out = range_utilisation(
        points[points["launch"] == 0],
        one,
        kernels=gemm.kernels(),
        nsys_kernels=nsys_gemm.kernels(),
        range_launches={"cell": 32},
        flops={"cell": 32 * GEMM_FLOPS},
        gpu_name="NVIDIA H200",
    ).set_index("range")
    cell = out.loc["cell"]
    assert cell["coverage"] == "1/32 launches profiled" and cell["launches_total"] == 32
    assert cell["time_source"] == "nsys" and cell["time_ns"] == 6144  # the launch, real clocks
    assert cell["hfu_frac"] == pytest.approx(GEMM_FLOPS / 6144e-9 / H200_BF16)
    assert np.isnan(cell["range_time_ns"]) and np.isnan(cell["mfu_frac"])
    assert cell["model_flops_source"].startswith("given for the whole range, but only 1/32")


def test_missing_tensor_counts_raise_with_a_fix_that_yields_them(gemm):
    long = gemm.metrics()
    no_tensor = long[~long["metric"].str.startswith("sm__ops_path_tensor_")]
    points = roofline_points(no_tensor, "9.0")
    assert points["flop_count_tensor"].isna().all()  # what HFU would silently turn into NaN
    with pytest.raises(MissingMetricsError) as info:
        require_flop_counts(points, "9.0")
    message = str(info.value)
    assert "flop_count_tensor" in message
    assert "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum" in message
    require_flop_counts(gemm.roofline(), "9.0")  # the real report has them all


def test_launch_dtype(gemm):
    rows = gemm.roofline().to_dict("records")
    assert [launch_dtype(r) for r in rows] == ["bf16", "fp32"]
    assert launch_dtype({"flop_count_fp16": 10.0, "flop_count_fp32": 1.0}) == "fp16_simt"


def test_model_mfu_per_range_on_nsys_time(nsys_gemm) -> None:
    """MFU of the bf16 GEMM statement from model FLOPs (2*M*N*K) over its nsys-projected time."""
    proj = nsys_gemm.nvtx_gpu_projection().set_index("range")
    t_ns = float(proj.loc[BF16_RANGE, "proj_total_ns"])
    frame = model_mfu(
        nsys_gemm.nvtx_gpu_projection(), {BF16_RANGE: GEMM_FLOPS}, gpu_name="NVIDIA H200"
    )
    row = frame.iloc[0]
    assert row["range"] == BF16_RANGE and row["time_source"] == "nsys"
    assert row["time_ns"] == t_ns and row["peak_flops_per_s"] == H200_BF16
    assert row["mfu_frac"] == pytest.approx(GEMM_FLOPS / (t_ns * 1e-9) / H200_BF16)
    with pytest.raises(KeyError, match="no such range"):
        model_mfu(nsys_gemm.nvtx_gpu_projection(), {"no such range": 1.0}, gpu_name="NVIDIA H200")


def test_op_mfu_from_pytorch_op_ranges(data_dir: Path) -> None:
    """nsys --pytorch=autograd-shapes-nvtx on the tiny LM (H100 SXM): each aten::mm call of the
    MLP down-projection in decode, [2, 1024] x [1024, 256], launched exactly one kernel."""
    report = NsysReport.open(data_dir / "nsys_ops.sqlite")
    kernels = report.kernels()
    summary = op_summary(
        report.nvtx_gpu_trace(), kernels, kernel_ops(kernels, report.cuda_api(), report.nvtx())
    )
    out = op_mfu(summary, gpu_name=report.gpu_info()["name"]).set_index(["op", "shapes"])
    down = out.loc[("aten::mm", "[[2, 1024], [1024, 256]]")]
    # 8 calls x 2*2*1024*256 = 8388608 FLOP in 27841 ns projected = 301.3 GFLOP/s;
    # / 989.43 TFLOP/s (bf16, H100 SXM) = 0.000305: decode GEMMs of batch 2 are latency-bound.
    assert down["calls"] == 8 and down["model_flops"] == 8 * 2 * 2 * 1024 * 256
    assert down["gpu_time_ns"] == 27841
    assert down["mfu_frac"] == pytest.approx(8388608 / 27841e-9 / H100_BF16)
    assert down["peak_source"].startswith("derived: H100 SXM bf16")
    # linear -> matmul -> mm describe one multiply: same FLOPs at every level
    linear = out.loc[("aten::linear", "[[2, 1, 1024], [256, 1024], []]")]
    assert linear["model_flops"] == down["model_flops"]


def test_gemm_flops_of_each_op() -> None:
    assert gemm_flops("aten::mm", [[64, 256], [256, 768]]) == 2 * 64 * 256 * 768
    assert gemm_flops("aten::addmm", [[768], [64, 256], [256, 768], [], []]) == 2 * 64 * 256 * 768
    assert gemm_flops("aten::bmm", [[8, 32, 64], [8, 64, 16]]) == 2 * 8 * 32 * 64 * 16
    assert gemm_flops("aten::baddbmm", [[8, 32, 16], [8, 32, 64], [8, 64, 16], [], []]) == (
        2 * 8 * 32 * 64 * 16
    )
    assert gemm_flops("aten::matmul", [[2, 32, 256], [256, 768]]) == 2 * 64 * 256 * 768
    assert gemm_flops("aten::matmul", [[2, 4, 32, 64], [1, 4, 64, 32]]) == 2 * 8 * 32 * 64 * 32
    assert gemm_flops("aten::matmul", [[256], [256, 768]]) == 2 * 256 * 768
    assert gemm_flops("aten::linear", [[2, 32, 256], [768, 256], []]) == 2 * 64 * 256 * 768
    assert gemm_flops("aten::mm", [[64, 256], [128, 768]]) is None  # K does not match
    assert gemm_flops("aten::add", [[64, 256], [64, 256]]) is None


def test_transformer_flops():
    # PaLM appendix B: 6N + 12*L*H*Q*T per token when training (H*Q = d_model)
    n, layers, seq, d = 7e9, 32, 4096, 4096
    assert transformer_flops(n, 1000) == 2 * 7e9 * 1000
    assert transformer_flops(n, 1000, training=True) == 6 * 7e9 * 1000
    train = transformer_flops(n, 10, n_layers=layers, seq_len=seq, d_model=d, training=True)
    assert train == (6 * 7e9 + 12 * 32 * 4096 * 4096) * 10
    causal = transformer_flops(n, 1, n_layers=layers, seq_len=seq, d_model=d, causal=True)
    assert causal == 2 * 7e9 + 2 * 32 * 4096 * 4096
    with pytest.raises(ValueError):
        transformer_flops(n, 1, n_layers=32)


def test_range_mfu_from_the_gemm_ops_inside(data_dir: Path) -> None:
    """nsys alone: the GEMM op calls inside each NVTX range give its model FLOPs.

    The tiny LM (tools/fixtures/llm_workloads.py): 2 layers, d=256, bias-free linears qkv
    256->768, out 256->256, up 256->1024, down 1024->256, head 256->1024 on the last token.
    Prefill: 2x32 = 64 tokens, per layer 2*64*(256*768 + 256*256 + 256*1024 + 1024*256)
    = 2*64*786432 = 100663296, two layers 201326592, head 2*2*256*1024 = 1048576:
    202375168 FLOPs in 9 GEMM calls. Decode: 4 steps of 2 tokens, per step
    2 * 2*2*786432 + 1048576 = 7340032: 29360128 in 36 calls. (Attention runs in cuDNN's
    fused kernel, not an aten GEMM op, so it adds nothing.)"""
    run_report = NsysReport.open(data_dir / "nsys_ops.sqlite")
    out = model_mfu(
        run_report.nvtx_gpu_projection(), nvtx=run_report.nvtx(), gpu_name="NVIDIA H100 80GB HBM3"
    ).set_index(["domain", "range"])
    prefill = out.loc[("LLM", "LLM@prefill")]
    assert prefill["model_flops"] == 202375168
    assert prefill["model_flops_source"] == "derived: 9 GEMM op calls"
    decode = out.loc[("LLM", "decode")]
    assert decode["model_flops"] == 29360128 == 4 * 7340032
    assert out.loc[("nsight_magic", "cell"), "model_flops"] == 202375168 + 29360128
    # MFU = FLOPs / projected time / 989.43 TFLOP/s (H100 SXM bf16)
    proj = run_report.nvtx_gpu_projection().set_index(["domain", "range"])
    t_ns = proj.loc[("LLM", "LLM@prefill"), "proj_total_ns"]  # 7214218 ns
    assert prefill["time_ns"] == t_ns == 7214218
    assert prefill["mfu_frac"] == pytest.approx(202375168 / 7214218e-9 / H100_BF16)
    with pytest.raises(ValueError, match="flops="):
        model_mfu(run_report.nvtx_gpu_projection(), gpu_name="NVIDIA H100 80GB HBM3")


def test_nsys_mfu_without_op_ranges_is_empty_and_says_why(data_dir: Path) -> None:
    """nsys_gemm was captured without --pytorch: no GEMM op ranges to derive FLOPs from."""
    report = NsysReport.open(data_dir / "nsys_gemm.sqlite")
    with pytest.warns(EmptyResultWarning, match="--pytorch shapes"):
        out = model_mfu(report.nvtx_gpu_projection(), nvtx=report.nvtx(), gpu_name="NVIDIA H200")
    assert out.empty and list(out.columns) == MODEL_MFU_COLUMNS
    assert out.attrs["reason"] == NO_GEMM_OPS and "flops=" in NO_GEMM_OPS
    # with flops= the same run has its MFU
    given = model_mfu(
        report.nvtx_gpu_projection(), {BF16_RANGE: GEMM_FLOPS}, gpu_name="NVIDIA H200"
    )
    assert given["range"].tolist() == [BF16_RANGE] and given["mfu_frac"].notna().all()


def test_bundled_example_kernel_mfu_hfu_and_ranges() -> None:
    """What raised 'radd not supported for dtype str' on the GPU image (pandas 3.0.6): the
    bundled drill-down of the LLM's top GEMM (1 of its run's 86 kernel launches profiled)."""
    from nsight_magic import examples

    run = examples.llm_kernel()
    kernels = run.mfu()
    assert len(kernels) == 1 and kernels["hfu_frac"].between(0, 1).all()
    assert kernels.at[0, "model_flops_source"] == NO_OP_RANGE
    assert run.hfu()["hfu_frac"].tolist() == kernels["hfu_frac"].tolist()
    ranges = run.range_mfu().set_index("range")
    cell = ranges.loc["cell"]
    assert cell["launches_profiled"] == 1 and cell["launches_total"] == 86
    assert cell["coverage"] == "1/86 launches profiled"
    # HFU over the profiled launch's own (nsys) time: the kernel's HFU, not 1/86 of it
    assert cell["time_source"] == "nsys" and cell["hfu_frac"] == pytest.approx(
        kernels.at[0, "hfu_frac"]
    )
    assert cell["range_time_ns"] > 100 * cell["time_ns"]


BAD_FLOPS = ["lots", None, 1 + 1j, 10**400, True, float("nan"), -5]


@pytest.mark.parametrize(
    "bad", BAD_FLOPS, ids=["str", "None", "complex", "10**400", "True", "nan", "-5"]
)
def test_a_bad_flop_count_is_one_bad_argument_naming_its_key(bad: object) -> None:
    """Was: float()'s ValueError / TypeError / OverflowError from inside the analysis, or a
    silent result (True counted as 1 FLOP, NaN and -5 as blanks)."""
    from nsight_magic import examples
    from nsight_magic.errors import BadArgumentError

    kernel, run = examples.llm_kernel(), examples.llm("prefill")
    for method, key in ((kernel.mfu, 0), (kernel.range_mfu, "cell"), (run.mfu, "cell")):
        with pytest.raises(
            BadArgumentError, match=r"\]\ is .*; pass a finite number of FLOPs >= 0"
        ):
            method({key: bad})
    with pytest.raises(BadArgumentError, match=r"NsysRun.mfu\(\): flops\['cell'\] is"):
        run.mfu({"cell": bad})


def test_one_range_keyed_twice_says_so_and_a_foreign_launch_is_refused() -> None:
    from nsight_magic import examples
    from nsight_magic.errors import BadArgumentError

    kernel, run = examples.llm_kernel(), examples.llm("prefill")
    twice = {"cell": 1e12, "nsight_magic:cell": 2e12}
    for method in (run.mfu, kernel.range_mfu):
        with pytest.raises(BadArgumentError, match="name the same range 'nsight_magic:cell'"):
            method(twice)
    with pytest.raises(BadArgumentError, match=r"\['cell'\] are no launch of this report"):
        kernel.mfu({"cell": 1e12})  # launches are numbers: this key was silently ignored
    assert kernel.mfu({0: 1e9})["model_flops_source"].tolist() == ["given"]
