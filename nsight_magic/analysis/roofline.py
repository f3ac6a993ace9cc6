"""Roofline points per launch, computed with Nsight Compute's own section formulas.

From ``SpeedOfLight_RooflineChart.section`` and ``SpeedOfLight_Hierarchical*RooflineChart.section``
(ncu 2025.3), all per launch, at the clock the launch ran at (ncu locks clocks):

- achieved FP32 FLOP/s = (fadd + fmul + 2 x ffma) ``smsp__sass_thread_inst_executed_op_*_pred_on
  .sum.per_cycle_elapsed`` x ``smsp__cycles_elapsed.avg.per_second``; FP64 the same with d*;
  FP16 = (2 x hadd + 2 x hmul + 4 x hfma) per cycle x the same clock.
- peak FP32 = 2 x ``sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained`` x
  ``sm__cycles_elapsed.avg.per_second`` (FP64: 2 x dfma, FP16: 4 x hfma).
- DRAM = ``dram__bytes.sum.per_second``; peak = ``dram__bytes.sum.peak_sustained`` x
  ``dram__cycles_elapsed.avg.per_second``.
- tensor = ``sm__ops_path_tensor_*.sum.per_cycle_elapsed`` x ``sm__cycles_elapsed.avg.per_second``;
  the ceiling is the dense (``_sparsity_off``) ``.sum.peak_sustained`` of the op path the kernel
  used, x the same clock (ncu draws a tensor roofline only for a path with work, so no tensor
  work -> NaN ceiling).

``--metrics`` reports may hold ``.sum`` counts instead of rates: then rate = count / duration,
which is the same number (``X.per_cycle_elapsed x cycles.per_second = X / duration``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..errors import MissingMetricsError
from ..vocabulary.precisions import SIMT_PRECISIONS, TENSOR, Precision
from . import ncu_metrics as M

__all__ = ["ROOFLINE_COLUMNS", "roofline_points"]

# Column order of the frame: FP64, FP32, FP16, then the tensor pipe.
_PRECISIONS: tuple[Precision, ...] = (*SIMT_PRECISIONS, TENSOR)

ROOFLINE_COLUMNS = [
    "launch",
    "name",
    "duration_ns",
    *(p.flops_column for p in _PRECISIONS),
    "dram_bytes_per_s",
    "arithmetic_intensity",
    *(p.peak_column for p in _PRECISIONS),
    "peak_dram_bytes_per_s",
    "sm_clock_hz",
    "tensor_op_path",
    # hardware FLOP counts per launch (FLOP, not FLOP/s) for HFU
    *(p.count_column for p in _PRECISIONS),
    "flop_count_total",
    "dram_bytes",
]


class _Launch:
    """Metric lookups for one launch that remember what was missing."""

    def __init__(self, values: Mapping[str, float]) -> None:
        self.values = values
        self.missing: list[str] = []
        duration_ns = values.get(M.DURATION, math.nan)
        if math.isnan(duration_ns):
            self.missing.append(M.DURATION)
        self.duration_s = duration_ns * 1e-9

    def get(self, name: str) -> float:
        return self.values.get(name, math.nan)

    def clock(self, name: str, cycles: str | None = None) -> float:
        """``X.avg.per_second``, else cycles / duration."""
        value = self.get(name)
        if math.isnan(value) and cycles is not None:
            value = self.get(cycles) / self.duration_s
        return value

    def sass(self, precision: Precision, clock: float) -> tuple[float, float, list[str]]:
        """(FLOP/s, FLOP, missing) of one precision's SASS FP instructions."""
        rate = count = 0.0
        missing = []
        for op, weight in precision.flop_weights.items():
            base = M.SASS.format(op=op)
            per_cycle, total = self.get(f"{base}.sum.per_cycle_elapsed"), self.get(f"{base}.sum")
            if not math.isnan(per_cycle) and not math.isnan(clock):
                op_rate = per_cycle * clock
                op_count = total if not math.isnan(total) else op_rate * self.duration_s
            elif not math.isnan(total):
                op_count, op_rate = total, total / self.duration_s
            else:
                missing.append(f"{base}.sum")
                continue
            rate += weight * op_rate
            count += weight * op_count
        if missing:
            return math.nan, math.nan, missing
        return rate, count, []

    def peak(self, precision: Precision, sm_clock: float) -> tuple[float, list[str]]:
        if precision.peak_op is None:  # the tensor pipe: its ceiling comes from the op path
            return math.nan, []
        op, weight = precision.peak_op
        name = M.SASS_PEAK.format(op=op)
        value = self.get(name)
        return weight * value * sm_clock, [name] if math.isnan(value) else []


# FP16 SIMT counters are optional: ``--set detailed`` has FP32/FP64 but no half-precision ones.
_REQUIRED = {"fp64", "fp32"}


def _tensor(launch: _Launch, sm_clock: float) -> dict[str, float | str]:
    """Tensor FLOP/s, FLOP count, op path used and its dense ceiling for one launch."""
    paths: dict[str, M.TensorPath] = {}
    for name in launch.values:
        if name.startswith("sm__ops_path_tensor_") and name.endswith(
            (".sum", ".sum.per_cycle_elapsed", ".sum.per_second")
        ):
            base = name.split(".", 1)[0]
            parsed = M.parse_tensor_path(base)
            if parsed is not None and parsed.is_float:
                paths[base] = parsed
    if not paths:
        nan = math.nan
        return {"rate": nan, "count": nan, "path": "", "peak": nan}

    def rate_count(path: str) -> tuple[float, float]:
        per_cycle = launch.get(f"{path}.sum.per_cycle_elapsed")
        per_second = launch.get(f"{path}.sum.per_second")
        total = launch.get(f"{path}.sum")
        if not math.isnan(per_cycle) and not math.isnan(sm_clock):
            rate = per_cycle * sm_clock
        elif not math.isnan(per_second):
            rate = per_second
        else:
            rate = total / launch.duration_s
        count = total if not math.isnan(total) else rate * launch.duration_s
        return rate, count

    measured = {base: rate_count(base) for base in paths}
    # Counters nest (src_bf16_dst_fp32 >= op_hgmma_src_bf16_dst_fp32_sparsity_off): add only the
    # coarsest, non-overlapping ones so no FLOP is counted twice.
    chosen: list[M.TensorPath] = []
    maximal = [p for p in paths.values() if not any(q.covers(p) for q in paths.values())]
    for path in sorted(maximal, key=lambda p: (p.specificity, p.name)):
        if not any(path.overlaps(c) for c in chosen):
            chosen.append(path)
    rate = sum(measured[p.name][0] for p in chosen)
    count = sum(measured[p.name][1] for p in chosen)

    # The op path used: the most specific counter with work, in the busiest data type.
    used = [p for p in paths.values() if measured[p.name][1] > 0]
    if not used:
        return {"rate": rate, "count": count, "path": "", "peak": math.nan}
    by_src: dict[str, float] = {}
    for p in chosen:
        by_src[p.src] = by_src.get(p.src, 0.0) + measured[p.name][1]
    src = max(by_src, key=lambda s: by_src[s])
    path = max(
        (p for p in used if p.src == src), key=lambda p: (p.specificity, measured[p.name][1])
    )
    dense = path.dense()
    per_cycle_peak = launch.get(f"{dense}.sum.peak_sustained")
    if math.isnan(per_cycle_peak):  # e.g. src_fp64 has no sparsity variants
        per_cycle_peak = launch.get(f"{path.name}.sum.peak_sustained")
    return {"rate": rate, "count": count, "path": path.name, "peak": per_cycle_peak * sm_clock}


def _point(launch_id: int, name: str, values: Mapping[str, float]) -> tuple[dict, list[str]]:
    launch = _Launch(values)
    missing = list(launch.missing)
    sm_clock = launch.clock(M.SM_CLOCK, M.SM_CYCLES)
    if math.isnan(sm_clock):
        missing.append(M.SM_CLOCK)
    smsp_clock = launch.clock(M.SMSP_CLOCK, "smsp__cycles_elapsed.avg")
    if math.isnan(smsp_clock):
        smsp_clock = sm_clock  # the same SM clock domain; the section just names it per SMSP
    row: dict[str, float | int | str] = {"launch": launch_id, "name": name}
    row["duration_ns"] = values.get(M.DURATION, math.nan)
    row["sm_clock_hz"] = sm_clock

    for precision in SIMT_PRECISIONS:
        rate, count, lacking = launch.sass(precision, smsp_clock)
        peak, lacking_peak = launch.peak(precision, sm_clock)
        if precision.key in _REQUIRED:
            missing += lacking + lacking_peak
        row[precision.flops_column], row[precision.count_column] = rate, count
        row[precision.peak_column] = peak

    tensor = _tensor(launch, sm_clock)
    row[TENSOR.flops_column], row[TENSOR.count_column] = tensor["rate"], tensor["count"]
    row[TENSOR.peak_column], row["tensor_op_path"] = tensor["peak"], tensor["path"]

    dram_rate, dram_bytes = launch.get("dram__bytes.sum.per_second"), launch.get(M.DRAM_BYTES)
    if math.isnan(dram_rate):
        dram_rate = dram_bytes / launch.duration_s
    if math.isnan(dram_bytes):
        dram_bytes = dram_rate * launch.duration_s
    if math.isnan(dram_rate):
        missing.append(M.DRAM_BYTES)
    dram_peak = launch.get("dram__bytes.sum.peak_sustained")
    dram_clock = launch.clock(M.DRAM_CLOCK, "dram__cycles_elapsed.avg")
    for metric, value in (
        ("dram__bytes.sum.peak_sustained", dram_peak),
        (M.DRAM_CLOCK, dram_clock),
    ):
        if math.isnan(value):
            missing.append(metric)
    row["dram_bytes_per_s"], row["dram_bytes"] = dram_rate, dram_bytes
    row["peak_dram_bytes_per_s"] = dram_peak * dram_clock
    return row, missing


def roofline_points(
    metrics_long: pd.DataFrame, compute_capability: str | None = None
) -> pd.DataFrame:
    """One row per launch of a long ``launch, name, metric, value, unit`` frame (``NcuReport
    .metrics()``): achieved FLOP/s per precision (``<key>_flops_per_s``, key fp64, fp32, fp16,
    tensor), ``dram_bytes_per_s``, ``arithmetic_intensity`` (all FLOP/s over DRAM bytes/s; NaN
    without DRAM traffic), the ceilings ``peak_<key>_flops_per_s`` and ``peak_dram_bytes_per_s``
    at the launch's own clock, ``sm_clock_hz``, ``tensor_op_path``, and the FLOP counts
    ``flop_count_<key>`` / ``flop_count_total`` (FLOP, not FLOP/s) and ``dram_bytes``.

    FP16 and tensor columns are NaN when the report has no such metrics (``--set detailed``);
    ``flop_count_total`` is then NaN too rather than an undercount. Raises MissingMetricsError
    when the FP32/FP64/DRAM/clock metrics the roofline needs are absent; its fix names the metrics
    of ``compute_capability`` ("9.0", from ``NcuReport.device()``) when known."""
    if metrics_long.empty:
        return pd.DataFrame({c: [] for c in ROOFLINE_COLUMNS})
    rows, missing = [], set()
    names = metrics_long.groupby("launch", sort=True)["name"].first()
    for launch, group in metrics_long.groupby("launch", sort=True):
        values = dict(zip(group["metric"], group["value"].astype(float), strict=False))
        row, lacking = _point(int(launch), str(names[launch]), values)
        rows.append(row)
        missing.update(lacking)
    if missing:
        listed = ", ".join(sorted(missing))
        raise MissingMetricsError(
            f"The report lacks metrics the roofline needs: {listed}; "
            f"{M.metrics_hint(compute_capability)}."
        )
    frame = pd.DataFrame(rows)
    flops = frame[[p.flops_column for p in _PRECISIONS]].sum(axis=1, skipna=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["arithmetic_intensity"] = np.where(
            frame["dram_bytes_per_s"] > 0, flops / frame["dram_bytes_per_s"], np.nan
        )
    frame["flop_count_total"] = frame[[p.count_column for p in _PRECISIONS]].sum(
        axis=1, skipna=False
    )
    frame["duration_ns"] = frame["duration_ns"].round().astype(np.int64)
    return frame[ROOFLINE_COLUMNS]
