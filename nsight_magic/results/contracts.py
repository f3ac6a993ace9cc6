"""Frames the views need whose analysis/report functions are still being written on other
branches (the frame contracts of the "Views people explore" issue). Each name below is the
contract's; when the analysis or report side provides it, that one is used, otherwise a small
local stand-in computes the same columns. The stand-ins go away once those branches land:
nothing here is meant to stay, and no view imports this module (results hand frames over).

Assumed contracts (what the stand-ins produce):

- ``short_names(names)``: ``analysis.names.short_names`` -> a Series of short kernel names
  (no return type, template arguments or parameter list).
- ``roofline_bounds(roofline)``: ``analysis.roofline.roofline_bounds`` -> per launch
  ``launch, name, short_name, duration_ns, arithmetic_intensity, flops_per_s, precision,
  ceiling_flops_per_s, pct_of_ceiling, bound, bound_pct, verdict``.
- ``roofline_ceilings(roofline)``: ``analysis.roofline.roofline_ceilings`` -> ``ceiling`` (legend
  label), ``kind`` ("memory" B/s or "compute" FLOP/s), ``value``.
- ``timeline_frame(kernels, memcpy, nvtx, window=None, max_rows=5000)``:
  ``analysis.timeline.timeline_frame`` with ``window`` -> ``lane, kind, start_ns, end_ns, name,
  short_name, count``.
- ``kernels_in_range(kernels, cuda_api, nvtx, domain, range)``:
  ``analysis.attribution.kernels_in_range``.
- ``statement_ordered(projection)``: ``analysis.nvtx_projection.statement_ordered``.
- ``advice(report)``: ``NcuReport.advice()`` -> ``launch, name, rule, section, title, message,
  speedup_pct, speedup_type``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .. import nvtx_names
from ..analysis import timeline as _timeline

ADVICE_COLUMNS = [
    "launch", "name", "rule", "section", "title", "message", "speedup_pct", "speedup_type",
]  # fmt: skip


def _provided(module: str, name: str) -> Callable[..., Any] | None:
    """``module.name`` when the analysis side has it, else None (its branch has not landed)."""
    try:
        return getattr(importlib.import_module(f"nsight_magic.analysis.{module}"), name, None)
    except ImportError:
        return None


# --- names -----------------------------------------------------------------------------------
def _strip_groups(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _short_name(name: Any) -> str:
    text = "" if name is None or (not isinstance(name, str) and pd.isna(name)) else str(name)
    if text.startswith("["):  # nsys's own labels: "[CUDA memcpy Host-to-Device]", "[CUDA memset]"
        return text
    bare = _strip_groups(_strip_groups(text, "<", ">"), "(", ")").strip()
    bare = re.sub(r"^(void|const|unsigned|int|float)\s+", "", bare)
    last = re.split(r"::|\s", bare)[-1] if bare else ""
    return last or text


def short_names(names: pd.Series) -> pd.Series:
    provided = _provided("names", "short_names")
    if provided is not None:
        return provided(names)
    uniques = {n: _short_name(n) for n in pd.unique(names.astype(object))}
    return names.astype(object).map(uniques).astype(str)


# --- roofline --------------------------------------------------------------------------------
# Precision -> (achieved FLOP/s column, ceiling column, legend label).
_PRECISIONS = {
    "tensor": ("flops_tensor", "peak_tensor", "Tensor"),
    "fp16": ("flops_fp16", "peak_fp16", "FP16"),
    "fp32": ("flops_fp32", "peak_fp32", "FP32"),
    "fp64": ("flops_fp64", "peak_fp64", "FP64"),
}


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def _local_bounds(roofline: pd.DataFrame) -> pd.DataFrame:
    rates = pd.DataFrame({k: _numeric(roofline, c) for k, (c, _, _) in _PRECISIONS.items()})
    rates = rates.fillna(0.0)
    flops = rates.sum(axis=1)
    dominant = rates.idxmax(axis=1).where(rates.max(axis=1) > 0)
    compute = pd.Series(np.nan, index=roofline.index, dtype=float)
    for key, (_, peak, _) in _PRECISIONS.items():
        mine = dominant == key
        compute[mine] = _numeric(roofline, peak)[mine]
    ai = _numeric(roofline, "arithmetic_intensity")
    dram_peak = _numeric(roofline, "peak_dram_bytes_per_s")
    memory = ai * dram_peak
    ceiling = np.fmin(compute, memory)
    memory_bound = memory < compute
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = 100.0 * flops / ceiling.where(ceiling > 0)
        dram_pct = 100.0 * _numeric(roofline, "dram_bytes_per_s") / dram_peak.where(dram_peak > 0)
        compute_pct = 100.0 * flops / compute.where(compute > 0)
    labels = dominant.map(lambda k: _PRECISIONS[k][2] if k in _PRECISIONS else "")
    bound = np.where(ceiling.isna(), "unknown", np.where(memory_bound, "memory", "compute"))
    bound_pct = np.where(memory_bound, dram_pct, compute_pct)
    verdict = [
        "no FLOPs or no DRAM traffic measured"
        if b == "unknown"
        else f"memory-bound, {p:.0f}% of DRAM peak"
        if b == "memory"
        else f"compute-bound, {p:.0f}% of {label} peak"
        for b, p, label in zip(bound, bound_pct, labels, strict=True)
    ]
    names = roofline["name"].astype(str)
    return pd.DataFrame(
        {
            "launch": roofline["launch"],
            "name": names,
            "short_name": short_names(names),
            "duration_ns": _numeric(roofline, "duration_ns"),
            "arithmetic_intensity": ai,
            "flops_per_s": flops,
            "precision": labels.where(labels != "", "none"),
            "ceiling_flops_per_s": ceiling,
            "pct_of_ceiling": pct,
            "bound": bound,
            "bound_pct": bound_pct,
            "verdict": verdict,
        }
    ).reset_index(drop=True)


def roofline_bounds(roofline: pd.DataFrame) -> pd.DataFrame:
    provided = _provided("roofline", "roofline_bounds")
    return provided(roofline) if provided is not None else _local_bounds(roofline)


def _local_ceilings(roofline: pd.DataFrame) -> pd.DataFrame:
    # Launches can run at different locked clocks: the drawn lines use the median over launches
    # (each point's own verdict uses its own row's peaks).
    rows = []
    dram = _numeric(roofline, "peak_dram_bytes_per_s").median()
    if pd.notna(dram) and dram > 0:
        rows.append({"ceiling": f"DRAM {dram / 1e12:.2f} TB/s", "kind": "memory", "value": dram})
    for _, peak, label in _PRECISIONS.values():
        value = _numeric(roofline, peak).median()
        if pd.notna(value) and value > 0:
            text = f"{label} {value / 1e12:,.1f} TFLOP/s"
            rows.append({"ceiling": text, "kind": "compute", "value": float(value)})
    return pd.DataFrame(rows, columns=["ceiling", "kind", "value"])


def roofline_ceilings(roofline: pd.DataFrame) -> pd.DataFrame:
    provided = _provided("roofline", "roofline_ceilings")
    return provided(roofline) if provided is not None else _local_ceilings(roofline)


# --- timeline --------------------------------------------------------------------------------
def _overlapping(frame: pd.DataFrame | None, lo: int, hi: int) -> pd.DataFrame | None:
    if frame is None or frame.empty:
        return frame
    return frame[(frame["end_ns"] >= lo) & (frame["start_ns"] <= hi)]


def timeline_frame(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None,
    nvtx: pd.DataFrame | None,
    window: tuple[int, int] | None = None,
    max_rows: int = 5000,
) -> pd.DataFrame:
    if "window" in inspect.signature(_timeline.timeline_frame).parameters:
        frame = _timeline.timeline_frame(kernels, memcpy, nvtx, window=window, max_rows=max_rows)
    else:
        if window is not None:
            lo, hi = int(window[0]), int(window[1])
            kernels = _overlapping(kernels, lo, hi)
            memcpy, nvtx = _overlapping(memcpy, lo, hi), _overlapping(nvtx, lo, hi)
        frame = _timeline.timeline_frame(kernels, memcpy, nvtx, max_rows=max_rows)
    if "short_name" not in frame.columns:
        frame = frame.assign(short_name=short_names(frame["name"]))
    return frame


# --- NVTX --------------------------------------------------------------------------------------
def _local_kernels_in_range(
    kernels: pd.DataFrame, cuda_api: pd.DataFrame, nvtx: pd.DataFrame, domain: str, name: str
) -> pd.DataFrame:
    """Kernels whose launch call started inside an instance of the range (nsys's projection
    rule: push/pop ranges hold their own thread's launches, start/end ranges any thread's)."""
    launches = cuda_api[["correlation_id", "pid", "start_ns", "tid"]].rename(
        columns={"start_ns": "launch_ns", "tid": "launch_tid"}
    )
    k = kernels.merge(launches, on=["correlation_id", "pid"], how="inner")
    ranges = nvtx[(nvtx["domain"] == domain) & (nvtx["range"] == name)]
    inside = np.zeros(len(k), dtype=bool)
    t, tid = k["launch_ns"].to_numpy(), k["launch_tid"].to_numpy()
    for r in ranges.itertuples(index=False):
        hit = (t >= r.start_ns) & (t <= r.end_ns)
        if r.style == "PushPop":
            hit &= tid == r.tid
        inside |= hit
    return kernels.loc[kernels["correlation_id"].isin(k.loc[inside, "correlation_id"])]


def kernels_in_range(
    kernels: pd.DataFrame, cuda_api: pd.DataFrame, nvtx: pd.DataFrame, domain: str, name: str
) -> pd.DataFrame:
    provided = _provided("attribution", "kernels_in_range")
    if provided is not None:
        return provided(kernels, cuda_api, nvtx, domain, name)
    return _local_kernels_in_range(kernels, cuda_api, nvtx, domain, name)


def _statement_key(domain: str, name: str, proj_ns: float) -> tuple[int, int, float]:
    # The cell's range, then its statements "L<n>: ..." by line, then the user's by GPU time.
    if domain != nvtx_names.NVTX_DOMAIN:
        return (1, 0, -proj_ns)
    if name == nvtx_names.CELL_RANGE:
        return (0, -1, 0.0)
    line = nvtx_names.statement_line(name)
    return (0, line if line is not None else 10**9, 0.0)


def statement_ordered(projection: pd.DataFrame) -> pd.DataFrame:
    provided = _provided("nvtx_projection", "statement_ordered")
    if provided is not None:
        return provided(projection)
    if projection.empty:
        return projection
    keys = [
        _statement_key(str(d), str(r), float(p) if pd.notna(p) else 0.0)
        for d, r, p in zip(
            projection["domain"], projection["range"], projection["proj_total_ns"], strict=True
        )
    ]
    order = sorted(range(len(projection)), key=lambda i: keys[i])
    return projection.iloc[order].reset_index(drop=True)


# --- ncu advice ------------------------------------------------------------------------------
def advice(report: Any) -> pd.DataFrame:
    """ncu's rule results ranked by estimated speedup; an empty frame (same columns) when the
    report reader does not provide them yet."""
    method = getattr(report, "advice", None)
    if method is None:
        return pd.DataFrame({c: [] for c in ADVICE_COLUMNS})
    frame = method()
    if "speedup_pct" in frame.columns:
        frame = frame.sort_values("speedup_pct", ascending=False, na_position="last")
    return frame.reset_index(drop=True)
