"""Nsight Compute metric names this package relies on, and the tensor op-path name grammar.

Names and formulas follow ncu 2025.3's own section files (``SpeedOfLight_RooflineChart.section``,
``SpeedOfLight_Hierarchical{Single,Double,Half,Tensor}RooflineChart.section``) so our numbers are
the ones ncu's roofline chart draws. Pure data + small helpers; no ncu_report import here."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..vocabulary.magic_names import cell_magic
from ..vocabulary.precisions import SIMT_PRECISIONS

__all__ = [
    "DRAM_BYTES",
    "DRAM_CLOCK",
    "DURATION",
    "ROOFLINE_METRICS",
    "ROOFLINE_PREFIXES",
    "ROOFLINE_SECTIONS",
    "SMSP_CLOCK",
    "SM_CLOCK",
    "TENSOR_OP_PATHS",
    "TensorPath",
    "metrics_hint",
    "parse_tensor_path",
    "roofline_metrics",
    "tensor_metrics",
]

DURATION = "gpu__time_duration.sum"  # ns
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"  # ceilings use this clock (section PeakWork)
SMSP_CLOCK = "smsp__cycles_elapsed.avg.per_second"  # achieved SASS work uses this one
SM_CYCLES = "sm__cycles_elapsed.avg"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
DRAM_BYTES = "dram__bytes.sum"

# SASS thread-instruction counters; the FLOPs each instruction does are the precisions' weights
# (``nsight_magic.vocabulary.precisions``: FFMA/DFMA x2; half-precision HADD2/HMUL2 x2 and HFMA2
# x4).
SASS = "smsp__sass_thread_inst_executed_op_{op}_pred_on"
SASS_PEAK = "sm__sass_thread_inst_executed_op_{op}_pred_on.sum.peak_sustained"

# What a ``--metrics`` run needs for roofline_points() (counts, so no rates are required);
# tensor op paths differ per architecture: add roofline_metrics(cc) / tensor_metrics(...).
ROOFLINE_METRICS: list[str] = [
    DURATION,
    SM_CLOCK,
    SMSP_CLOCK,
    SM_CYCLES,
    DRAM_CLOCK,
    DRAM_BYTES,
    "dram__bytes.sum.peak_sustained",
    *(f"{SASS.format(op=op)}.sum" for p in SIMT_PRECISIONS for op in p.flop_weights),
    *(SASS_PEAK.format(op=p.peak_op[0]) for p in SIMT_PRECISIONS if p.peak_op),
]

# Name prefixes of every metric roofline_points() may read (lets a loader skip the rest).
ROOFLINE_PREFIXES: tuple[str, ...] = (
    "gpu__time_duration",
    "sm__cycles_elapsed",
    "smsp__cycles_elapsed",
    "dram__",
    "smsp__sass_thread_inst_executed_op_",
    "sm__sass_thread_inst_executed_op_",
    "sm__ops_path_tensor_",
)

# Sections that hold everything roofline_points() reads (``--set roofline`` has them all).
ROOFLINE_SECTIONS: list[str] = [
    "SpeedOfLight_RooflineChart",
    "SpeedOfLight_HierarchicalHalfRooflineChart",
    "SpeedOfLight_HierarchicalTensorRooflineChart",
]

# Floating-point tensor op paths ``ncu --query-metrics`` lists on sm_90 (H100/H200/GH200),
# 2025.3.1 (tests/data capture, tensor_op_paths.txt); integer paths are not FLOPs.
TENSOR_OP_PATHS: dict[str, list[str]] = {
    "9.0": [
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off",
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off",
        "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_on",
        "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off",
        "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off",
        "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_off",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_on",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off",
        "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_src_fp64",
        "sm__ops_path_tensor_src_fp8_sparsity_off",
        "sm__ops_path_tensor_src_fp8_sparsity_on",
    ],
}


def tensor_metrics(paths: list[str]) -> list[str]:
    """The ``.sum`` count, ``.sum.peak_sustained`` and ``.sum.per_cycle_elapsed`` of each path."""
    return [
        f"{p}{s}" for p in paths for s in (".sum", ".sum.peak_sustained", ".sum.per_cycle_elapsed")
    ]


def roofline_metrics(compute_capability: str | None = None) -> list[str]:
    """ROOFLINE_METRICS plus the tensor op paths known for ``compute_capability`` ("9.0").

    For an architecture not listed, add ``--section SpeedOfLight_HierarchicalTensorRooflineChart``
    instead: asking ncu for a metric the GPU lacks fails the whole run."""
    return ROOFLINE_METRICS + tensor_metrics(TENSOR_OP_PATHS.get(compute_capability or "", []))


def metrics_hint(compute_capability: str | None = None) -> str:
    """How to re-run %%ncu so the report holds every FLOP count, tensor pipe included: the
    ``--metrics`` list for an architecture whose tensor op paths are known, else the roofline
    set (a ``--metrics`` list without the tensor paths gives no tensor FLOPs at all)."""
    if (compute_capability or "") in TENSOR_OP_PATHS:
        listed = ",".join(roofline_metrics(compute_capability))
        return f"re-run {cell_magic('ncu')} with --set roofline, or with --metrics {listed}"
    known = ", ".join(sorted(TENSOR_OP_PATHS))
    arch = f"compute capability {compute_capability}" if compute_capability else "this GPU"
    return (
        f"re-run {cell_magic('ncu')} with --set roofline (the tensor op-path metrics of {arch} "
        f"are not listed here, only of {known}, and a --metrics list without them counts no tensor "
        "FLOPs)"
    )


@dataclass(frozen=True)
class TensorPath:
    """One ``sm__ops_path_tensor_*`` counter; ``None`` fields aggregate over that field."""

    name: str
    src: str
    op: str | None = None
    dst: str | None = None
    sparsity: str | None = None

    @property
    def is_float(self) -> bool:
        return not self.src.startswith("int")

    @property
    def specificity(self) -> int:
        return sum(f is not None for f in (self.op, self.dst, self.sparsity))

    def covers(self, other: TensorPath) -> bool:
        """True when this counter already includes everything ``other`` counts."""
        if self == other or self.src != other.src:
            return False
        return all(
            mine is None or mine == theirs
            for mine, theirs in (
                (self.op, other.op),
                (self.dst, other.dst),
                (self.sparsity, other.sparsity),
            )
        )

    def overlaps(self, other: TensorPath) -> bool:
        if self.src != other.src:
            return False
        return all(
            a is None or b is None or a == b
            for a, b in (
                (self.op, other.op),
                (self.dst, other.dst),
                (self.sparsity, other.sparsity),
            )
        )

    def dense(self) -> str:
        """Base name of the dense (``_sparsity_off``) variant of this path."""
        if self.sparsity == "on":
            return self.name[: -len("_on")] + "_off"
        if self.sparsity is None:
            return self.name + "_sparsity_off"
        return self.name


_TENSOR_RE = re.compile(
    r"^sm__ops_path_tensor_(?:op_(?P<op>[a-z0-9]+)_)?src_(?P<src>[a-z0-9]+(?:_(?!dst|sparsity)[a-z0-9]+)*)"
    r"(?:_dst_(?P<dst>[a-z0-9]+))?(?:_sparsity_(?P<sparsity>on|off))?$"
)


def parse_tensor_path(base: str) -> TensorPath | None:
    """``sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off`` -> TensorPath(op="hgmma",
    src="bf16", dst="fp32", sparsity="off"); None for names outside that grammar."""
    m = _TENSOR_RE.match(base)
    if not m:
        return None
    return TensorPath(name=base, **m.groupdict())


# What the occupancy column says when the report lacks the achieved value.
OCCUPANCY_THEORETICAL = "theoretical (ncu's Occupancy section did not measure the achieved value)"
OCCUPANCY_UNKNOWN = "not in this report (ncu's Occupancy section measures it)"


def occupancy(sol: pd.DataFrame) -> pd.DataFrame:
    """``sol`` (``NcuReport.sol()`` columns) + ``occupancy_pct``: the achieved occupancy, else
    the theoretical one (the report's own limit from registers, shared memory and block size),
    and ``occupancy_source`` saying which, or why there is none."""
    nan = pd.Series(np.nan, index=sol.index)
    achieved = sol.get("achieved_occupancy_pct", nan)
    theoretical = sol.get("theoretical_occupancy_pct", nan)
    source = [
        "achieved" if pd.notna(a) else OCCUPANCY_THEORETICAL if pd.notna(t) else OCCUPANCY_UNKNOWN
        for a, t in zip(achieved, theoretical, strict=True)
    ]
    return sol.assign(
        occupancy_pct=achieved.astype(float).fillna(theoretical.astype(float)),
        occupancy_source=pd.Series(source, index=sol.index, dtype=object),
    )
