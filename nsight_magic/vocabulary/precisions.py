"""The floating-point precisions nsight_magic measures, named in one place.

Two vocabularies meet here and this module is where they are mapped onto each other:

- **Roofline precisions** (``fp64``, ``fp32``, ``fp16``, ``tensor``): the pipes Nsight Compute's
  roofline sections count. The SIMT ones are SASS thread instructions weighted by the FLOPs each
  does (``SpeedOfLight_Hierarchical{Double,Single,Half}RooflineChart.section``: FADD/FMUL = 1,
  FFMA = 2; HADD2/HMUL2 = 2, HFMA2 = 4); ``tensor`` is the tensor-core op paths
  (``sm__ops_path_tensor_*``), whose data type is in the path's name.
- **Peak data types** (``fp64``, ``fp64_tensor``, ``fp32``, ``fp16_simt``, ``tf32``, ``bf16``,
  ``fp16``, ``fp8``): what a GPU's peak FLOP/s is quoted for (``analysis.gpu_peaks``). ``bf16``,
  ``fp16``, ``tf32`` and ``fp8`` are tensor-core figures, as datasheets use the names;
  ``fp16_simt`` is half precision on the SIMT pipe (HFMA2), a different, much lower peak.

Stdlib only: a leaf module every layer may import (analysis computes with it, views label with
it). Roofline frames name their columns after the key: ``flops_<key>`` (achieved FLOP/s),
``flop_count_<key>`` (FLOPs), ``peak_<key>`` (the ceiling in FLOP/s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "FLOP_COLUMNS",
    "FP16",
    "FP32",
    "FP64",
    "PEAK_COLUMNS",
    "PEAK_DTYPES",
    "ROOFLINE_PRECISIONS",
    "SIMT_PRECISIONS",
    "TENSOR",
    "TENSOR_DTYPES",
    "Precision",
    "by_key",
    "by_label",
    "tensor_dtype",
]


@dataclass(frozen=True)
class Precision:
    """One roofline precision.

    ``flop_weights``: SASS op -> FLOPs per thread instruction (empty for ``tensor``, whose op
    paths count FLOPs directly). ``peak_op``: (SASS op, FLOPs per instruction) whose
    ``peak_sustained`` instruction rate makes the ceiling. ``peak_dtype``: the peak data type
    its FLOPs are measured against for HFU/MFU (``None`` for ``tensor``: the op path says it,
    see :func:`tensor_dtype`)."""

    key: str
    label: str
    flop_weights: Mapping[str, int] = field(default_factory=dict)
    peak_op: tuple[str, int] | None = None
    peak_dtype: str | None = None

    @property
    def flops_column(self) -> str:
        """Achieved FLOP/s column of a roofline frame."""
        return f"{self.key}_flops_per_s"

    @property
    def count_column(self) -> str:
        """FLOP count column of a roofline frame."""
        return f"flop_count_{self.key}"

    @property
    def peak_column(self) -> str:
        """Ceiling (FLOP/s at the launch's clock) column of a roofline frame."""
        return f"peak_{self.key}_flops_per_s"


FP64 = Precision(
    "fp64", "FP64", MappingProxyType({"dadd": 1, "dmul": 1, "dfma": 2}), ("dfma", 2), "fp64"
)
FP32 = Precision(
    "fp32", "FP32", MappingProxyType({"fadd": 1, "fmul": 1, "ffma": 2}), ("ffma", 2), "fp32"
)
FP16 = Precision(
    "fp16", "FP16", MappingProxyType({"hadd": 2, "hmul": 2, "hfma": 4}), ("hfma", 4), "fp16_simt"
)
TENSOR = Precision("tensor", "Tensor")

SIMT_PRECISIONS: tuple[Precision, ...] = (FP64, FP32, FP16)
# Highest ceiling first: the order a roofline legend lists them.
ROOFLINE_PRECISIONS: tuple[Precision, ...] = (TENSOR, FP16, FP32, FP64)

# Peak data types (analysis.gpu_peaks quotes a peak per GPU for each it knows).
PEAK_DTYPES: tuple[str, ...] = (
    "fp64",
    "fp64_tensor",
    "fp32",
    "fp16_simt",
    "tf32",
    "bf16",
    "fp16",
    "fp8",
)

# Source type of a tensor op path (``ncu_metrics.parse_tensor_path(name).src``) -> peak dtype.
# FP64 on tensor cores (DMMA) has its own peak; the others share the names datasheets use.
TENSOR_DTYPES: Mapping[str, str] = MappingProxyType(
    {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8": "fp8", "fp64": "fp64_tensor"}
)

# For charts: ceiling column -> legend label, and achieved column -> its ceiling column.
PEAK_COLUMNS: Mapping[str, str] = MappingProxyType(
    {p.peak_column: p.label for p in ROOFLINE_PRECISIONS}
)
FLOP_COLUMNS: Mapping[str, str] = MappingProxyType(
    {p.flops_column: p.peak_column for p in ROOFLINE_PRECISIONS}
)


def by_key(key: str) -> Precision:
    """The precision named ``key`` ("fp32", "tensor", ...); KeyError when unknown."""
    for precision in ROOFLINE_PRECISIONS:
        if precision.key == key:
            return precision
    raise KeyError(f"unknown precision {key!r}; one of {[p.key for p in ROOFLINE_PRECISIONS]}")


def by_label(label: str) -> Precision:
    """The precision labelled ``label`` ("FP32", "Tensor", ...); KeyError when unknown."""
    for precision in ROOFLINE_PRECISIONS:
        if precision.label == label:
            return precision
    raise KeyError(f"unknown precision label {label!r}")


def tensor_dtype(source_type: str) -> str:
    """Peak dtype of a tensor op path's source type ("bf16" -> "bf16", "fp64" ->
    "fp64_tensor"); the source type itself when it has no listed peak (e.g. "int8")."""
    return TENSOR_DTYPES.get(source_type, source_type)
