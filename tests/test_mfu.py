"""MFU/HFU on the real gemm reports: ncu FLOPs, nsys (real-clock) time, datasheet dense peak."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.analysis import gpu_peaks
from nsight_magic.analysis.gpu_peaks import gpu_key, lookup_peak, set_peak
from nsight_magic.analysis.mfu import kernel_mfu, launch_dtype, range_mfu, transformer_flops
from nsight_magic.reports.ncu.report import NcuReport

H200_BF16 = 989.5e12  # H200 datasheet: BF16 1,979 TFLOPS with sparsity -> 989.5 dense
H200_FP32 = 67e12


def nsys_kernels(path: Path) -> pd.DataFrame:
    """The nsys kernels() columns MFU uses, read straight from the real export."""
    query = """SELECT k.start AS start_ns, k."end" AS end_ns, k."end" - k.start AS duration_ns,
                      d.value AS name, s.value AS short_name, m.value AS mangled_name
               FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
               JOIN StringIds s ON s.id = k.shortName JOIN StringIds m ON m.id = k.mangledName"""
    with sqlite3.connect(path) as db:
        return pd.read_sql_query(query, db)


@pytest.fixture(scope="module")
def gemm(ncu_reports: dict[str, Path]) -> NcuReport:
    return NcuReport.open(ncu_reports["ncu_gemm_metrics"])


def test_kernel_mfu_with_nsys_time(gemm, data_dir):
    out = kernel_mfu(
        gemm.roofline(),
        kernels=gemm.kernels(),
        nsys_kernels=nsys_kernels(data_dir / "nsys_gemm.sqlite"),
        gpu_name=gemm.device()["name"],
    )
    assert out["time_source"].tolist() == ["nsys", "nsys"]
    assert out["dtype"].tolist() == ["bf16", "fp32"]
    # bf16 GEMM: 2*2048*1024*512 FLOP in 6144 ns (nsys) against 989.5 TFLOP/s
    assert out.at[0, "flops"] == 2147483648
    assert out.at[0, "time_ns"] == 6144
    assert out.at[0, "peak_flops"] == H200_BF16
    assert out.at[0, "peak_source"] == "datasheet H200 bf16 dense"
    assert out.at[0, "mfu"] == pytest.approx(2147483648 / 6144e-9 / 989.5e12)  # = 0.35324
    assert out.at[0, "mfu"] == pytest.approx(0.35324, abs=1e-5)
    # fp32 SIMT GEMM: 33849344 FLOP (FFMA x2 + 32768 half FLOPs) in 5376 ns against 67 TFLOP/s
    assert out.at[1, "time_ns"] == 5376
    assert out.at[1, "mfu"] == pytest.approx(33849344 / 5376e-9 / 67e12)  # = 0.09398


def test_kernel_mfu_falls_back_to_ncu_time(gemm):
    out = kernel_mfu(gemm.roofline(), peak_flops=1e15)
    assert out["time_source"].tolist() == ["ncu", "ncu"]
    assert out["peak_source"].tolist() == ["user", "user"]
    # ncu's locked-clock duration of the bf16 GEMM: 9376 ns
    assert out.at[0, "mfu"] == pytest.approx(2147483648 / 9376e-9 / 1e15)


def test_range_mfu(gemm, data_dir):
    points, nvtx = gemm.roofline(), gemm.nvtx_ranges()
    projection = pd.DataFrame(
        {"domain": ["nsight_magic"], "range": ["cell"], "proj_total_ns": [20000]}
    )
    bf16_range = "L1: C = A @ B  # bf16 2048x1024x512"
    out = range_mfu(
        points,
        nvtx,
        projection=projection,
        time_ns={bf16_range: 6144},
        flops={bf16_range: 2 * 2048 * 1024 * 512},
        gpu_name="NVIDIA H200",
    ).set_index("range")
    cell = out.loc["cell"]
    assert cell["launches"] == 2
    assert cell["hw_flops"] == 2147483648 + 33849344
    assert cell["time_source"] == "nsys" and cell["time_ns"] == 20000
    assert cell["dtype"] == "bf16" and cell["flops_source"] == "hardware"
    assert cell["mfu"] == pytest.approx((2147483648 + 33849344) / 20000e-9 / H200_BF16)
    l1 = out.loc[bf16_range]
    assert l1["time_source"] == "given" and l1["flops_source"] == "model"
    assert l1["mfu"] == pytest.approx(2147483648 / 6144e-9 / H200_BF16)
    l2 = out.loc["L2: C32 = A32 @ B32  # fp32 512x256x128"]
    assert l2["time_source"] == "ncu" and l2["time_ns"] == 10208
    assert l2["dtype"] == "fp32" and l2["peak_flops"] == H200_FP32


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


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A10G", None),
        ("Tesla T4", None),
    ],
)
def test_gpu_names(name, key):
    assert gpu_key(name) == key


def test_peaks_and_override(monkeypatch):
    assert lookup_peak("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert lookup_peak("NVIDIA A100-SXM4-40GB", "tf32") == 156e12
    for peaks in gpu_peaks.PEAKS.values():  # dense tensor >= fp32 wherever both are listed
        if "fp32" in peaks and "bf16" in peaks:
            assert peaks["bf16"] >= peaks["fp32"]
    with pytest.raises(LookupError, match="peak_flops="):
        lookup_peak("Tesla T4", "fp16")
    monkeypatch.setattr(gpu_peaks, "_USER", {})
    set_peak("NVIDIA H200", "bf16", 800e12)  # e.g. a power-capped part
    assert lookup_peak("NVIDIA H200", "bf16") == 800e12
    set_peak("Tesla T4", "fp16", 65e12)
    assert lookup_peak("Tesla T4", "fp16") == 65e12


def test_launch_dtype(gemm):
    rows = gemm.roofline().to_dict("records")
    assert [launch_dtype(r) for r in rows] == ["bf16", "fp32"]


def test_model_mfu_per_range_on_nsys_time(data_dir) -> None:
    """MFU of the bf16 GEMM statement from model FLOPs (2*M*N*K) over its nsys-projected time,
    checked by hand against the H200 dense bf16 datasheet peak (989.4 TFLOP/s)."""
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun

    run = NsysRun(open_report(data_dir / "nsys_gemm.sqlite"))
    name = "L1: C = A @ B  # bf16 2048x1024x512"
    proj = run.nvtx_gpu_projection().set_index("range")
    t_ns = float(proj.loc[name, "proj_total_ns"])
    frame = run.mfu({name: 2 * 2048 * 1024 * 512}, dtype="bf16")
    row = frame.iloc[0]
    assert row["range"] == name and row["time_source"] == "nsys"
    assert row["time_ns"] == t_ns
    assert row["peak_flops"] == pytest.approx(989.4e12, rel=1e-3)
    assert row["mfu"] == pytest.approx(2147483648 / (t_ns * 1e-9) / 989.4e12, rel=1e-3)
    with pytest.raises(KeyError, match="no such range"):
        run.mfu({"no such range": 1.0})
