"""Dense peak FLOP/s per GPU and data type, for HFU/MFU: derived, not typed.

    peak = SMs x boost clock x dense FLOP per clock per SM (of the data type)

The per-SM rates are properties of an architecture and come from NVIDIA's architecture
whitepapers (each cited where it is defined below); SM counts and boost clocks are properties of
a product. Hopper runs tensor-core math at a lower boost clock than the SIMT pipes: the H100
whitepaper's Table 3 quotes the tensor peaks at 1830 MHz (SXM5) / 1620 MHz (PCIe) and the
FP32/FP64 ones at 1980 / 1755 MHz, so a product may list a second, tensor clock.

Where NVIDIA publishes neither the per-SM rate nor the clock (Blackwell B200, the H100/H200 NVL
boards) the peak is the datasheet's dense figure (half the "with sparsity" one), and its source
says so rather than pretending to a derivation. ``tests/test_gpu_peaks.py`` checks every derived
peak against the datasheet totals.

Data types are ``precisions.PEAK_DTYPES``: ``fp64``, ``fp32`` and ``fp16_simt`` are the SIMT
pipes; ``fp64_tensor``, ``tf32``, ``bf16``, ``fp16`` and ``fp8`` are tensor-core figures (FP16/BF16
with FP32 accumulate, the rate training uses).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..errors import PeakUnknownError
from ..vocabulary.arguments import number_arg, text_arg
from ..vocabulary.precisions import PEAK_DTYPES

__all__ = [
    "ARCHITECTURES",
    "DTYPES",
    "GPUS",
    "Architecture",
    "Gpu",
    "Peak",
    "gpu_key",
    "lookup_peak",
    "peak",
    "set_peak",
]

DTYPES = PEAK_DTYPES
_TENSOR_DTYPES = frozenset({"tf32", "bf16", "fp16", "fp8"})  # run at a product's tensor clock


@dataclass(frozen=True)
class Architecture:
    """Dense FLOP per clock per SM of each data type, and where the figures come from."""

    name: str
    flop_per_clock_per_sm: Mapping[str, int]
    source: str


@dataclass(frozen=True)
class Gpu:
    """A product: its architecture, SM count and boost clocks (``tensor_clock_hz`` when its
    tensor-core peaks are quoted at a lower clock than the SIMT ones); ``tensor_scale`` 0.5 for
    GeForce boards, which run FP16/BF16/TF32/FP8 with FP32 accumulate at half the rate.
    ``datasheet`` holds the dense peaks of a product whose peaks cannot be derived."""

    key: str
    architecture: Architecture | None
    sm_count: int = 0
    boost_clock_hz: float = 0.0
    tensor_clock_hz: float | None = None
    tensor_scale: float = 1.0
    source: str = ""
    datasheet: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Peak:
    """A peak FLOP/s and a sentence saying where it came from (``peak_source`` in frames)."""

    flops_per_s: float
    source: str


def _rates(**rates: int) -> Mapping[str, int]:
    unknown = set(rates) - set(PEAK_DTYPES)
    if unknown:
        raise ValueError(f"not peak dtypes: {sorted(unknown)}")
    return MappingProxyType(rates)


# NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): an SM has 64 FP32 and 32 FP64
# cores (FMA = 2 FLOP) and four 3rd-generation Tensor Cores of 256 FP16/BF16 FMA per clock each
# (1024 FMA = 2048 FLOP/clk/SM); its Table 1 puts TF32 at half, FP64 Tensor Core at twice FP64
# and FP16 non-tensor at four times FP32 (78 TFLOPS).
GA100 = Architecture(
    "Ampere GA100",
    _rates(fp64=64, fp64_tensor=128, fp32=128, fp16_simt=512, tf32=1024, bf16=2048, fp16=2048),
    "A100 whitepaper",
)
# NVIDIA Ampere GA102 GPU Architecture whitepaper: an SM has 128 FP32 lanes (two datapaths)
# and 2 FP64 units; four 3rd-generation Tensor Cores of 128 dense FP16 FMA per clock each
# (1024 FLOP/clk/SM); TF32 at half that; FP16 non-tensor at the FP32 rate.
GA102 = Architecture(
    "Ampere GA10x",
    _rates(fp64=4, fp32=256, fp16_simt=256, tf32=512, bf16=1024, fp16=1024),
    "GA102 whitepaper",
)
# NVIDIA Ada GPU Architecture whitepaper (v2.01), Appendix A: an SM has 128 FP32 lanes and four
# 4th-generation Tensor Cores; its per-board tables (RTX 6000 Ada, L40, L4) give FP16/BF16 with
# FP32 accumulate = 1024 FLOP/clk/SM, FP8 = 2048, TF32 = 512 (GeForce RTX 4090: half, see
# tensor_scale); FP16 non-tensor at the FP32 rate, FP64 at 1/64 of it.
AD10X = Architecture(
    "Ada",
    _rates(fp64=4, fp32=256, fp16_simt=256, tf32=512, bf16=1024, fp16=1024, fp8=2048),
    "Ada whitepaper",
)
# NVIDIA H100 Tensor Core GPU Architecture whitepaper: an SM has 128 FP32 and 64 FP64 cores;
# its four 4th-generation Tensor Cores do twice the A100 SM's MMA rate clock for clock on the
# same data types (FP16/BF16 4096, TF32 2048, FP64 256 FLOP/clk/SM) and FP8 at twice FP16;
# FP16 non-tensor at four times FP32. Table 3 gives the clocks (see H100 SXM / PCIe below).
GH100 = Architecture(
    "Hopper",
    _rates(
        fp64=128, fp64_tensor=256, fp32=256, fp16_simt=512, tf32=2048, bf16=4096, fp16=4096,
        fp8=8192,
    ),
    "H100 whitepaper",
)  # fmt: skip

ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType(
    {"8.0": GA100, "8.6": GA102, "8.9": AD10X, "9.0": GH100}
)

MHZ = 1e6
T = 1e12

_GPU_LIST = [
    # Hopper. H100 whitepaper Table 3: 132 SMs (SXM5) / 114 (PCIe); boost 1980 / 1755 MHz for
    # FP32/FP64, 1830 / 1620 MHz for the tensor-core peaks.
    Gpu("H100 SXM", GH100, 132, 1980 * MHZ, 1830 * MHZ, source="H100 whitepaper Table 3"),
    Gpu("H100 PCIe", GH100, 114, 1755 * MHZ, 1620 * MHZ, source="H100 whitepaper Table 3"),
    # H200 and GH200 are the same 132-SM GH100 at the same clocks: their datasheets' totals are
    # H100 SXM5's (FP32 67, BF16 1979 with sparsity).
    Gpu("H200", GH100, 132, 1980 * MHZ, 1830 * MHZ, source="H100 SXM5 configuration"),
    Gpu("GH200", GH100, 132, 1980 * MHZ, 1830 * MHZ, source="H100 SXM5 configuration"),
    # Ampere. A100 whitepaper: 108 SMs, boost 1410 MHz (SXM4 and PCIe alike).
    Gpu("A100 SXM", GA100, 108, 1410 * MHZ, source="A100 whitepaper"),
    Gpu("A100 PCIe", GA100, 108, 1410 * MHZ, source="A100 whitepaper"),
    # A10 product brief: 72 SMs (9216 CUDA cores), boost 1695 MHz.
    Gpu("A10", GA102, 72, 1695 * MHZ, source="A10 product brief"),
    # Ada. Whitepaper Appendix A: RTX 4090 128 SMs at 2520 MHz; RTX 6000 Ada 142 at 2505;
    # L4 58 at 2040. L40S (not in the whitepaper): 142 SMs (18176 CUDA cores) at 2520 MHz,
    # the clock its datasheet's FP32 91.6 TFLOPS implies.
    Gpu("RTX 4090", AD10X, 128, 2520 * MHZ, tensor_scale=0.5, source="Ada whitepaper App. A"),
    Gpu("RTX 6000 Ada", AD10X, 142, 2505 * MHZ, source="Ada whitepaper App. A"),
    Gpu("L4", AD10X, 58, 2040 * MHZ, source="Ada whitepaper App. A"),
    Gpu("L40S", AD10X, 142, 2520 * MHZ, source="L40S datasheet"),
    # Not derivable: NVIDIA publishes no tensor boost clock for the NVL boards and no per-SM
    # rates or clocks for B200; dense = the datasheets' "with sparsity" figures / 2.
    Gpu(
        "H100 NVL", None, source="H100 datasheet (NVL column)",
        datasheet=MappingProxyType({
            "fp64": 30 * T, "fp64_tensor": 60 * T, "fp32": 60 * T, "tf32": 417.5 * T,
            "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T,
        }),
    ),
    Gpu(
        "H200 NVL", None, source="H200 datasheet (NVL column)",
        datasheet=MappingProxyType({
            "fp64": 30 * T, "fp64_tensor": 60 * T, "fp32": 60 * T, "tf32": 417.5 * T,
            "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T,
        }),
    ),
    Gpu(
        "B200", None, source="HGX B200 datasheet (per GPU)",
        datasheet=MappingProxyType({
            "fp64": 37 * T, "fp64_tensor": 37 * T, "fp32": 75 * T, "tf32": 1100 * T,
            "bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T,
        }),
    ),
]  # fmt: skip
GPUS: Mapping[str, Gpu] = MappingProxyType({g.key: g for g in _GPU_LIST})

# Most specific first: "H100 NVL" before "H100", "L40S" before "L40"/"L4", "GH200" before "H200".
_PATTERNS: list[tuple[str, str]] = [
    (r"\bgh200\b", "GH200"),
    (r"\bh200\b.*\bnvl\b", "H200 NVL"),
    (r"\bh200\b", "H200"),
    (r"\bh100\b.*\bnvl\b", "H100 NVL"),
    (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
    (r"\bh100\b", "H100 SXM"),  # "NVIDIA H100 80GB HBM3" is the SXM part
    (r"\ba100\b.*\bpcie\b", "A100 PCIe"),
    (r"\ba100\b", "A100 SXM"),
    (r"\ba10\b", "A10"),
    (r"\bl40s\b", "L40S"),
    (r"\bl4\b", "L4"),
    (r"\brtx\s*4090\b", "RTX 4090"),
    (r"\brtx\s*6000\b.*\bada\b", "RTX 6000 Ada"),
    (r"\bb200\b", "B200"),
]

_USER: dict[tuple[str, str], float] = {}


def gpu_key(gpu_name: str) -> str | None:
    """Table key for a name as nvidia-smi/nsys/ncu print it ("NVIDIA H100 80GB HBM3" ->
    "H100 SXM", "NVIDIA A100-SXM4-80GB" -> "A100 SXM"), or None when unknown."""
    norm = re.sub(r"[-_/]", " ", gpu_name.lower())
    for pattern, key in _PATTERNS:
        if re.search(pattern, norm):
            return key
    return None


def set_peak(gpu_name: str, dtype: str, flops_per_s: float) -> None:
    """Override (or add) the peak used for ``gpu_name`` and ``dtype``, e.g. for a power-capped
    or unlisted GPU. Matched on the exact name given or on its table key."""
    text_arg(gpu_name, "gpu_name", "set_peak()")
    text_arg(dtype, "dtype", "set_peak()", choices=DTYPES)
    flops = number_arg(flops_per_s, "flops_per_s", "set_peak()")
    _USER[(gpu_key(gpu_name) or gpu_name, dtype)] = flops


def _derived(gpu: Gpu, dtype: str) -> Peak | None:
    arch = gpu.architecture
    if arch is None or dtype not in arch.flop_per_clock_per_sm:
        return None
    per_sm = arch.flop_per_clock_per_sm[dtype]
    clock = gpu.boost_clock_hz
    if dtype in _TENSOR_DTYPES:
        per_sm = int(per_sm * gpu.tensor_scale)
        clock = gpu.tensor_clock_hz or clock
    return Peak(
        gpu.sm_count * clock * per_sm,
        f"derived: {gpu.key} {dtype} dense = {gpu.sm_count} SMs x {clock / 1e6:.0f} MHz x "
        f"{per_sm} FLOP/clk/SM ({arch.source}; clock: {gpu.source})",
    )


def peak(gpu_name: str, dtype: str) -> Peak:
    """Dense peak of ``gpu_name`` for ``dtype`` (one of DTYPES) with its source; user
    overrides (:func:`set_peak`) first. Raises LookupError naming the fix (``set_peak`` or
    ``peak_flops=``) when the GPU or the data type is unknown."""
    text_arg(gpu_name, "gpu_name", "lookup_peak()")
    text_arg(dtype, "dtype", "lookup_peak()")
    key = gpu_key(gpu_name) or gpu_name
    if (key, dtype) in _USER:
        return Peak(_USER[(key, dtype)], f"set_peak({key!r}, {dtype!r})")
    gpu = GPUS.get(key)
    if gpu is not None:
        found = _derived(gpu, dtype)
        if found is not None:
            return found
        if dtype in gpu.datasheet:
            return Peak(
                gpu.datasheet[dtype],
                f"datasheet: {gpu.key} {dtype} dense ({gpu.source}; not derivable: no "
                "published per-SM rate and clock)",
            )
    raise PeakUnknownError(
        f"No {dtype} peak for {gpu_name!r}; pass peak_flops= or call "
        f"nsight_magic.analysis.gpu_peaks.set_peak({gpu_name!r}, {dtype!r}, FLOP_PER_S)."
    )


def lookup_peak(gpu_name: str, dtype: str) -> float:
    """The FLOP/s of :func:`peak` alone."""
    return peak(gpu_name, dtype).flops_per_s
