"""Which roof bounds each launch, and how close it gets: the numbers a roofline chart shows.

From ``roofline_points`` rows (every value at the launch's own clock, ncu's section formulas):

- a launch's **precision** is the pipe with the most FLOP/s (tensor, FP16, FP32, FP64);
- at its arithmetic intensity AI the roof is ``min(precision peak, AI x DRAM peak)``: below
  the ridge point (AI < peak / DRAM peak) DRAM bounds it ("memory"), above it the pipe does
  ("compute");
- ``bound_pct`` is how much of the binding resource it used: DRAM bytes/s over the DRAM peak
  when memory-bound, the precision's FLOP/s over its peak when compute-bound.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.precisions import ROOFLINE_PRECISIONS
from .names import short_names

__all__ = ["BOUND_COLUMNS", "CEILING_COLUMNS", "roofline_bounds", "roofline_ceilings"]

BOUND_COLUMNS = [
    "launch", "name", "short_name", "duration_ns", "arithmetic_intensity", "flops_per_s",
    "precision", "ceiling_flops_per_s", "ceiling_pct", "bound", "bound_pct", "verdict",
    "plottable",
]  # fmt: skip
CEILING_COLUMNS = ["ceiling", "label", "kind", "peak", "unit", "ridge_ai"]

_DRAM = "peak_dram_bytes_per_s"


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def roofline_bounds(roofline: pd.DataFrame) -> pd.DataFrame:
    """Per launch of a ``roofline_points`` frame: ``launch, name, short_name, duration_ns,
    arithmetic_intensity, flops_per_s`` (all precisions), ``precision`` (label of the pipe
    with the most FLOP/s: "Tensor", "FP16", "FP32", "FP64"; "none" without FLOPs),
    ``ceiling_flops_per_s`` (min of that pipe's peak and AI x DRAM peak), ``ceiling_pct``
    (100 x FLOP/s / ceiling), ``bound`` ("memory", "compute", "" with neither FLOPs nor DRAM
    traffic), ``bound_pct`` (% of the binding peak, see the module doc), ``verdict`` (e.g.
    "memory-bound, 71% of DRAM peak") and ``plottable`` (FLOP/s > 0 and a finite AI > 0: the
    rows a log-log chart can place)."""
    index = roofline.index
    rates = pd.DataFrame(
        {p.label: _numbers(roofline, p.flops_column).fillna(0.0) for p in ROOFLINE_PRECISIONS},
        index=index,
    )
    peaks = pd.DataFrame(
        {p.label: _numbers(roofline, p.peak_column) for p in ROOFLINE_PRECISIONS}, index=index
    )
    flops = rates.sum(axis=1)
    has_flops = (flops > 0).to_numpy()
    precision = np.where(has_flops, rates.idxmax(axis=1), "none")
    rows = np.arange(len(roofline))
    col = rates.columns.get_indexer(np.where(has_flops, precision, rates.columns[0]))
    mine_rate = np.where(has_flops, rates.to_numpy()[rows, col], np.nan)
    mine_peak = np.where(has_flops, peaks.to_numpy()[rows, col], np.nan)

    ai = _numbers(roofline, "arithmetic_intensity").to_numpy()
    dram_peak = _numbers(roofline, _DRAM).to_numpy()
    dram_rate = _numbers(roofline, "dram_bytes_per_s").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        memory_roof = ai * dram_peak
        ceiling = np.fmin(mine_peak, memory_roof)
        memory = np.where(has_flops, memory_roof < mine_peak, dram_rate > 0)
        memory |= has_flops & np.isnan(mine_peak) & (memory_roof > 0)
        bound_pct = np.where(memory, 100.0 * dram_rate / dram_peak, 100.0 * mine_rate / mine_peak)
        pct = np.where(ceiling > 0, 100.0 * flops.to_numpy() / ceiling, np.nan)
    bound = np.where(memory, "memory", np.where(has_flops, "compute", ""))
    out = pd.DataFrame(
        {
            "launch": roofline["launch"].to_numpy(),
            "name": roofline["name"].astype(str).to_numpy(),
            "short_name": short_names(roofline["name"]).to_numpy(),
            "duration_ns": roofline["duration_ns"].to_numpy(),
            "arithmetic_intensity": ai,
            "flops_per_s": flops.to_numpy(),
            "precision": precision,
            "ceiling_flops_per_s": ceiling,
            "ceiling_pct": pct,
            "bound": bound,
            "bound_pct": np.where(bound == "", np.nan, bound_pct),
        }
    )
    out["verdict"] = [
        _verdict(b, p, prec, f) for b, p, prec, f in
        zip(out["bound"], out["bound_pct"], out["precision"], has_flops, strict=True)
    ]  # fmt: skip
    out["plottable"] = has_flops & np.isfinite(ai) & (ai > 0)
    return out[BOUND_COLUMNS]


def _verdict(bound: str, pct: float, precision: str, has_flops: bool) -> str:
    if not bound:
        return "no FLOPs or DRAM traffic"
    share = "?" if np.isnan(pct) else f"{pct:.0f}%"
    if bound == "memory":
        head = "memory-bound" if has_flops else "no FLOPs"
        return f"{head}, {share} of DRAM peak"
    return f"compute-bound, {share} of {precision} peak"


def roofline_ceilings(roofline: pd.DataFrame) -> pd.DataFrame:
    """The roofs to draw: one row per ceiling the report has, ``ceiling`` (precision key or
    "dram"), ``label`` ("Tensor", ..., "DRAM"), ``kind`` ("compute"/"memory"), ``peak``
    (FLOP/s, or bytes/s for DRAM), ``unit``, ``ridge_ai`` (peak / DRAM peak: the FLOP/byte
    where the roof turns flat; NaN for DRAM). Launches of one report can run at different
    locked clocks, so each line is the median over launches (points use their own peaks)."""
    rows = []
    dram = _numbers(roofline, _DRAM).median()
    for p in ROOFLINE_PRECISIONS:
        value = _numbers(roofline, p.peak_column).median()
        if pd.notna(value) and value > 0:
            ridge = value / dram if pd.notna(dram) and dram > 0 else np.nan
            rows.append((p.key, p.label, "compute", float(value), "FLOP/s", ridge))
    if pd.notna(dram) and dram > 0:
        rows.append(("dram", "DRAM", "memory", float(dram), "byte/s", np.nan))
    return pd.DataFrame(rows, columns=CEILING_COLUMNS)
