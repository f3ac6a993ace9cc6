"""Peaks derived as SMs x boost clock x per-SM rate, checked against NVIDIA's published totals.

The datasheet figures below are dense TFLOP/s as NVIDIA's product datasheets print them (where
a sheet prints tensor figures "with sparsity" only, the dense figure is half: that is how NVIDIA
derives the sparse one). Datasheets round to 2-4 significant figures (H100 SXM FP64: 34 for
132 x 1980 MHz x 128 = 33.45), so derived peaks must match within 2%.
"""

from __future__ import annotations

import pytest

from nsight_magic.analysis import gpu_peaks
from nsight_magic.analysis.gpu_peaks import GPUS, gpu_key, lookup_peak, peak, set_peak
from nsight_magic.vocabulary.precisions import PEAK_DTYPES

T = 1e12
DATASHEETS: dict[str, tuple[str, dict[str, float]]] = {
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (sparse tensor figures / 2).
    "NVIDIA H100 80GB HBM3": ("H100 datasheet, SXM", {
        "fp64": 34, "fp64_tensor": 67, "fp32": 67, "tf32": 989 / 2, "bf16": 1979 / 2,
        "fp16": 1979 / 2, "fp8": 3958 / 2,
    }),
    # The same datasheet, H100 PCIe column.
    "NVIDIA H100 PCIe": ("H100 datasheet, PCIe", {
        "fp64": 26, "fp64_tensor": 51, "fp32": 51, "tf32": 756 / 2, "bf16": 1513 / 2,
        "fp16": 1513 / 2, "fp8": 3026 / 2,
    }),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column.
    "NVIDIA H200": ("H200 datasheet, SXM", {
        "fp64": 34, "fp64_tensor": 67, "fp32": 67, "tf32": 989 / 2, "bf16": 1979 / 2,
        "fp16": 1979 / 2, "fp8": 3958 / 2,
    }),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe columns agree); A100 whitepaper
    # Table 1 for FP16 non-tensor (78).
    "NVIDIA A100-SXM4-80GB": ("A100 datasheet", {
        "fp64": 9.7, "fp64_tensor": 19.5, "fp32": 19.5, "fp16_simt": 78, "tf32": 156,
        "bf16": 312, "fp16": 312,
    }),
    "NVIDIA A100 80GB PCIe": ("A100 datasheet", {"fp32": 19.5, "tf32": 156, "bf16": 312}),
    # NVIDIA A10 datasheet (tensor figures dense; sparse doubles them).
    "NVIDIA A10": ("A10 datasheet", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}),
    # NVIDIA L4 datasheet (sparse figures / 2).
    "NVIDIA L4": ("L4 datasheet", {"fp32": 30.3, "tf32": 120 / 2, "bf16": 242 / 2,
                                   "fp16": 242 / 2, "fp8": 485 / 2}),
    # NVIDIA L40S datasheet. Its dense BF16/FP16 figure (362.05) is NOT half its sparse one
    # (733): 362.05 = 142 SMs x 2490 MHz x 1024 uses the L40's clock; see the test below.
    "NVIDIA L40S": ("L40S datasheet", {"fp32": 91.6, "tf32": 183, "fp8": 733}),
    # Ada whitepaper v2.01 Appendix A tables (FP16/BF16/FP8 with FP32 accumulate, dense).
    "NVIDIA GeForce RTX 4090": ("Ada whitepaper", {"fp32": 82.6, "tf32": 82.6,
                                                   "bf16": 165.2, "fp16": 165.2, "fp8": 330.3}),
    "NVIDIA RTX 6000 Ada Generation": ("Ada whitepaper", {
        "fp32": 91.1, "tf32": 182.1, "bf16": 364.2, "fp16": 364.2, "fp8": 728.5,
    }),
}  # fmt: skip


@pytest.mark.parametrize("gpu", sorted(DATASHEETS))
def test_derived_peaks_match_datasheets(gpu: str) -> None:
    source, figures = DATASHEETS[gpu]
    for dtype, tflops in figures.items():
        found = peak(gpu, dtype)
        assert found.source.startswith("derived: "), (gpu, dtype)
        assert found.flops_per_s == pytest.approx(tflops * T, rel=0.02), (gpu, dtype, source)


def test_hand_derived_peaks() -> None:
    # H200 bf16: 132 SMs x 1830 MHz (Hopper's tensor clock) x 4096 FLOP/clk/SM = 989.43 TFLOP/s,
    # not the 989.5 the old table had typed in.
    h200 = peak("NVIDIA H200", "bf16")
    assert h200.flops_per_s == 132 * 1830e6 * 4096 == 989_429_760_000_000
    assert "132 SMs x 1830 MHz x 4096 FLOP/clk/SM" in h200.source
    # H200 fp32 runs at the SIMT boost clock: 132 x 1980 MHz x 256 = 66.908 TFLOP/s.
    assert lookup_peak("NVIDIA H200", "fp32") == 132 * 1980e6 * 256
    # FP64 on tensor cores also runs at 1980 MHz: 132 x 1980 MHz x 256 = 66.9 (the datasheet's 67).
    assert lookup_peak("NVIDIA H200", "fp64_tensor") == 132 * 1980e6 * 256
    # A100: 108 x 1410 MHz x 2048 = 311.87 TFLOP/s (datasheet 312).
    assert lookup_peak("NVIDIA A100-SXM4-40GB", "bf16") == 108 * 1410e6 * 2048
    # GeForce: FP32-accumulate tensor math at half the rate of the pro boards.
    assert lookup_peak("NVIDIA GeForce RTX 4090", "bf16") == 128 * 2520e6 * 512


def test_l40s_datasheet_dense_figure_disagrees_with_its_sparse_one() -> None:
    # Derived 142 x 2520 MHz x 1024 = 366.4 = the datasheet's sparse 733 / 2 (366.5), while the
    # datasheet's dense column says 362.05: we keep the derivation and record the difference.
    derived = lookup_peak("NVIDIA L40S", "bf16")
    assert derived == pytest.approx(733 / 2 * T, rel=1e-3)
    assert derived / (362.05 * T) == pytest.approx(1.012, abs=1e-3)


def test_underivable_gpus_say_datasheet() -> None:
    # B200: HGX B200 datasheet, per GPU: FP16/BF16 4.5 PFLOPS and FP8 9 PFLOPS with sparsity,
    # FP32 75 TFLOPS, FP64 37 TFLOPS; NVIDIA publishes no per-SM rate or boost clock.
    b200 = peak("NVIDIA B200", "bf16")
    assert b200.flops_per_s == 2250 * T and b200.source.startswith("datasheet: ")
    assert lookup_peak("NVIDIA B200", "fp32") == 75 * T
    assert peak("NVIDIA H100 NVL", "bf16").source.startswith("datasheet: ")
    with pytest.raises(LookupError, match="peak_flops="):
        peak("NVIDIA A100-SXM4-80GB", "fp8")  # Ampere has no FP8 tensor cores


def test_every_listed_gpu_has_a_peak_for_what_it_lists() -> None:
    for key, gpu in GPUS.items():
        dtypes = (
            gpu.architecture.flop_per_clock_per_sm if gpu.architecture else gpu.datasheet
        ).keys()
        assert set(dtypes) <= set(PEAK_DTYPES)
        for dtype in dtypes:
            assert lookup_peak(key, dtype) > 0
        if "bf16" in dtypes and "fp32" in dtypes:  # dense tensor >= SIMT fp32 everywhere
            assert lookup_peak(key, "bf16") >= lookup_peak(key, "fp32")


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
def test_gpu_names(name: str, key: str | None) -> None:
    assert gpu_key(name) == key


def test_user_override(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LookupError, match="set_peak"):
        lookup_peak("Tesla T4", "fp16")
    monkeypatch.setattr(gpu_peaks, "_USER", {})
    set_peak("NVIDIA H200", "bf16", 800e12)  # e.g. a power-capped part
    found = peak("NVIDIA H200", "bf16")
    assert found.flops_per_s == 800e12 and found.source == "set_peak('H200', 'bf16')"
    set_peak("Tesla T4", "fp16", 65e12)
    assert lookup_peak("Tesla T4", "fp16") == 65e12
