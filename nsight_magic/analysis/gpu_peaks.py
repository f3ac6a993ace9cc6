"""Datasheet DENSE peak FLOP/s per GPU and data type, for MFU.

Numbers are NVIDIA's datasheet figures; where a datasheet quotes tensor throughput "with
sparsity" only, the dense figure is half of it (that is how NVIDIA derives the sparse one).
Sources: H100 datasheet (SXM5 / PCIe / NVL columns), H200 datasheet (SXM), GH200 datasheet,
A100 datasheet (SXM and PCIe share the peaks), A10, L4, L40S datasheets, the Ada Lovelace
architecture whitepaper appendix (RTX 4090 and RTX 6000 Ada; FP16/BF16/FP8 with FP32 accumulate,
which is half rate on GeForce), HGX B200 datasheet (per GPU). Dense datasheet peaks assume the
boost clock (e.g. H100/H200 bf16 989.4 TFLOP/s = 132 SMs x 4096 FLOP/cycle x 1.83 GHz).

``fp64`` is the FP64 (SIMT) figure and ``fp64_tensor`` the FP64 tensor-core one; ``fp32`` is
non-tensor FP32; ``tf32``/``bf16``/``fp16``/``fp8`` are tensor-core figures.
"""

from __future__ import annotations

import re

__all__ = ["DTYPES", "PEAKS", "gpu_key", "lookup_peak", "set_peak"]

T = 1e12
DTYPES = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8")

PEAKS: dict[str, dict[str, float]] = {
    # Hopper
    "H100 SXM": {"fp64": 34 * T, "fp64_tensor": 67 * T, "fp32": 67 * T, "tf32": 494.7 * T,
                 "bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T},
    "H100 PCIe": {"fp64": 25.6 * T, "fp64_tensor": 51.2 * T, "fp32": 51.2 * T, "tf32": 378 * T,
                  "bf16": 756.5 * T, "fp16": 756.5 * T, "fp8": 1513 * T},
    "H100 NVL": {"fp64": 30 * T, "fp64_tensor": 60 * T, "fp32": 60 * T, "tf32": 417.5 * T,
                 "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T},
    "H200": {"fp64": 34 * T, "fp64_tensor": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T,
             "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
    "H200 NVL": {"fp64": 30 * T, "fp64_tensor": 60 * T, "fp32": 60 * T, "tf32": 417.5 * T,
                 "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T},
    "GH200": {"fp64": 34 * T, "fp64_tensor": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T,
              "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
    # Ampere
    "A100 SXM": {"fp64": 9.7 * T, "fp64_tensor": 19.5 * T, "fp32": 19.5 * T, "tf32": 156 * T,
                 "bf16": 312 * T, "fp16": 312 * T},
    "A100 PCIe": {"fp64": 9.7 * T, "fp64_tensor": 19.5 * T, "fp32": 19.5 * T, "tf32": 156 * T,
                  "bf16": 312 * T, "fp16": 312 * T},
    "A10": {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T},
    # Ada
    "L4": {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T, "fp8": 242.5 * T},
    "L40S": {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T,
             "fp8": 733 * T},
    "RTX 4090": {"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T,
                 "fp8": 330.3 * T},
    "RTX 6000 Ada": {"fp32": 91.1 * T, "tf32": 182.1 * T, "bf16": 364.2 * T, "fp16": 364.2 * T,
                     "fp8": 728.5 * T},
    # Blackwell (HGX B200, per GPU)
    "B200": {"fp64": 37 * T, "fp64_tensor": 37 * T, "tf32": 1100 * T, "bf16": 2250 * T,
             "fp16": 2250 * T, "fp8": 4500 * T},
}  # fmt: skip

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
    _USER[(gpu_key(gpu_name) or gpu_name, dtype)] = float(flops_per_s)


def lookup_peak(gpu_name: str, dtype: str) -> float:
    """Dense peak FLOP/s of ``gpu_name`` for ``dtype`` (one of DTYPES); user overrides first.
    Raises LookupError naming the fix (``set_peak`` or ``peak_flops=``) when unknown."""
    key = gpu_key(gpu_name) or gpu_name
    if (key, dtype) in _USER:
        return _USER[(key, dtype)]
    peak = PEAKS.get(key, {}).get(dtype)
    if peak is None:
        raise LookupError(
            f"No datasheet {dtype} peak for {gpu_name!r}; pass peak_flops= or call "
            f"nsight_magic.analysis.gpu_peaks.set_peak({gpu_name!r}, {dtype!r}, FLOP_PER_S)."
        )
    return peak
