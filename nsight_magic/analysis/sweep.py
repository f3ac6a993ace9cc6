"""The numbers of a sweep (``results.SweepRun``): one row per configuration, the kernel x
configuration time matrix, MFU per (configuration, NVTX phase), and which swept variables
take powers of two (their charts get a log axis).

Each configuration's numbers come from its own run's frames, handed in as a ``ConfigFrames``
(None for a configuration that failed or did not run: its row keeps its values, status and
error, its numbers are blank). Columns named by the user (the swept variables, the
configuration labels of the matrix) are listed in ``frame.attrs["named_by_user"]``: the
column registry cannot know them (``vocabulary/columns.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import repeats
from .names import short_names

# the table's columns after the swept variables (vocabulary/columns.py registers each)
TABLE_COLUMNS = [
    "config", "status", "error", "cell_wall_ns", "run_wall_ns", "gpu_time_ns", "gpu_busy_pct",
    "top_kernel", "top_kernel_short", "top_kernel_pct", "peak_memory_bytes",
]  # fmt: skip
NAMED_BY_USER = "named_by_user"


@dataclass(frozen=True)
class ConfigFrames:
    """What one configuration's run gives the sweep's numbers: its ``kernel_summary``
    (``name, instances, total_ns, ...``), its GPU busy percent, the cell body's wall time
    (seconds, as its status says; None when unknown), and for peak memory torch's own counts
    (``moment, allocated_bytes, reserved_bytes``: ``--memory`` in a worker) and the device
    memory summary (``device_id, peak_bytes, ...``: nsys's events), either may be empty."""

    kernel_summary: pd.DataFrame
    gpu_busy_pct: float | None = None
    cell_s: float | None = None
    torch_counts: pd.DataFrame | None = None
    memory_summary: pd.DataFrame | None = None
    # sweep(repeat=N): the kernel time each repeat launched (analysis.repeats.RepeatStats)
    repeat_totals_ns: tuple[float, ...] = ()


@dataclass(frozen=True)
class ConfigRow:
    """One configuration as the sweep recorded it: its ``label``, swept ``values``, ``status``
    ("ok", "failed", "cancelled", "pending"), ``error``, the whole run's wall time
    (``run_s``) and its ``frames`` (None when it has no report)."""

    label: str
    values: Mapping[str, Any]
    status: str
    error: str | None = None
    run_s: float | None = None
    frames: ConfigFrames | None = None


def _ns(seconds: float | None) -> Any:
    return pd.NA if seconds is None else round(float(seconds) * 1e9)


def peak_memory_bytes(frames: ConfigFrames) -> Any:
    """The cell's peak GPU memory: torch's allocated bytes at its peak when the worker
    counted them (what the cell's tensors held), else the largest device peak nsys's memory
    events show (reserved memory: the caching allocator's blocks); NA without ``--memory``."""
    counts = frames.torch_counts
    if counts is not None and len(counts) and "allocated_bytes" in counts:
        peak = counts.loc[counts["moment"] == "peak", "allocated_bytes"]
        values = pd.to_numeric(peak if len(peak) else counts["allocated_bytes"], errors="coerce")
        if values.notna().any():
            return int(values.max())
    summary = frames.memory_summary
    if summary is not None and len(summary) and "peak_bytes" in summary:
        values = pd.to_numeric(summary["peak_bytes"], errors="coerce")
        if values.notna().any():
            return int(values.max())
    return pd.NA


def _numbers(frames: ConfigFrames | None) -> dict[str, Any]:
    blank = {"cell_wall_ns": pd.NA, "gpu_time_ns": pd.NA, "gpu_busy_pct": np.nan,
             "top_kernel": "", "top_kernel_short": "", "top_kernel_pct": np.nan,
             "peak_memory_bytes": pd.NA}  # fmt: skip
    if frames is None:
        return blank
    summary = frames.kernel_summary
    total = int(summary["total_ns"].astype("int64").sum()) if len(summary) else 0
    out = {**blank, "cell_wall_ns": _ns(frames.cell_s), "gpu_time_ns": total,
           "peak_memory_bytes": peak_memory_bytes(frames)}  # fmt: skip
    if frames.gpu_busy_pct is not None:
        out["gpu_busy_pct"] = float(frames.gpu_busy_pct)
    if total > 0:
        top = summary.iloc[0]  # a kernel_summary comes most total time first
        out["top_kernel"] = str(top["name"])
        out["top_kernel_short"] = str(top["short_name"])
        out["top_kernel_pct"] = float(top["time_pct"])
    return out


def _with_variables(rows: list[dict[str, Any]], variables: Sequence[str]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame.attrs[NAMED_BY_USER] = list(variables)
    return frame


def sweep_table(configs: Sequence[ConfigRow], variables: Sequence[str]) -> pd.DataFrame:
    """One row per configuration, in the sweep's order: ``config`` (its label, "bs=8
    seq=2048"), one column per swept variable (its value), ``status, error``, ``cell_wall_ns``
    (the cell body's wall time under the profiler), ``run_wall_ns`` (the configuration's whole
    run: worker, capture, export, load), ``gpu_time_ns`` (the sum of its kernels' time),
    ``gpu_busy_pct``, ``top_kernel`` (the kernel with the most total time) and
    ``top_kernel_short``, ``top_kernel_pct`` (its share of the kernel time), and
    ``peak_memory_bytes`` (``peak_memory_bytes``: NA without ``--memory``). A configuration
    without a report keeps its values, status and error; its numbers are blank. A sweep with
    ``repeat`` >= 2 adds its GPU time's statistics over the repeats, ``REPEAT_COLUMNS``
    (``repeat_mean_ns`` ... ``repeat_rsd_pct``, ``analysis.repeats``)."""
    rows = []
    for config in configs:
        row: dict[str, Any] = {"config": config.label}
        row.update({name: config.values.get(name) for name in variables})
        row.update(status=config.status, error=config.error or "",
                   run_wall_ns=_ns(config.run_s))  # fmt: skip
        row.update(_numbers(config.frames))
        rows.append(row)
    columns = ["config", *variables, *TABLE_COLUMNS[1:]]
    frame = _with_variables(rows, variables).reindex(columns=columns)
    for name in ("cell_wall_ns", "run_wall_ns", "gpu_time_ns", "peak_memory_bytes"):
        frame[name] = pd.array(frame[name].tolist(), dtype="Int64")
    for name in ("gpu_busy_pct", "top_kernel_pct"):
        frame[name] = frame[name].astype(float)
    repeated = [c.frames.repeat_totals_ns if c.frames else () for c in configs]
    if any(len(t) >= 2 for t in repeated):
        n = max(len(t) for t in repeated)
        totals = pd.DataFrame([list(t) if len(t) == n else [np.nan] * n for t in repeated])
        stats = repeats.repeat_stats(totals)
        for name in repeats.REPEAT_COLUMNS:
            frame[name] = stats[name].to_numpy(dtype=float)
    return frame


def kernel_matrix(configs: Sequence[ConfigRow]) -> pd.DataFrame:
    """Kernel x configuration: ``name, short_name``, then one column per configuration with a
    report (its label) holding that kernel's total time there (ns; 0 where it did not run),
    ``total_ns`` over them all; the kernels with the most total time first."""
    totals: dict[str, pd.Series] = {}
    for config in configs:
        if config.frames is None:
            continue
        summary = config.frames.kernel_summary
        totals[config.label] = summary.groupby("name", sort=False)["total_ns"].sum()
    labels = list(totals)
    if not labels:
        frame = pd.DataFrame(columns=["name", "short_name", "total_ns"])
        frame.attrs[NAMED_BY_USER] = []
        return frame
    wide = pd.concat(totals, axis=1).fillna(0).astype("int64")
    wide.columns = labels
    wide["total_ns"] = wide[labels].sum(axis=1)
    wide = wide.sort_values("total_ns", ascending=False, kind="stable")
    wide.index.name = "name"
    frame = wide.reset_index()
    frame.insert(1, "short_name", short_names(frame["name"]).to_numpy())
    frame.attrs[NAMED_BY_USER] = labels
    return frame


# what ``sweep_mfu`` adds before the per-range MFU columns (``analysis.mfu.MODEL_MFU_COLUMNS``)
MFU_KEY_COLUMNS = ["config"]


def sweep_mfu(
    configs: Sequence[ConfigRow],
    variables: Sequence[str],
    mfu_of: Callable[[ConfigRow], pd.DataFrame | None],
) -> pd.DataFrame:
    """MFU per (configuration, NVTX phase): ``config``, the swept variables, then the columns
    of ``analysis.mfu.model_mfu`` for that configuration (``mfu_of`` computes them from its
    run; None for a configuration without a report: it has no row)."""
    parts = []
    for config in configs:
        frame = mfu_of(config) if config.frames is not None else None
        if frame is None or frame.empty:
            continue
        keys = {"config": config.label, **{name: config.values.get(name) for name in variables}}
        parts.append(frame.assign(**{k: [v] * len(frame) for k, v in keys.items()}))
    if not parts:
        out = pd.DataFrame(columns=["config", *variables])
    else:
        out = pd.concat(parts, ignore_index=True)
        first = ["config", *variables]
        out = out[first + [c for c in out.columns if c not in first]]
    out.attrs[NAMED_BY_USER] = list(variables)
    return out


def is_power_of_two_series(values: Sequence[Any]) -> bool:
    """Whether a swept variable's values are at least two distinct positive powers of two
    (1, 8, 32): its chart axis is then log2."""
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) != len(values) or len(set(numbers)) < 2:
        return False
    return all(v > 0 and float(v).is_integer() and math.log2(v).is_integer() for v in numbers)


def axis_scale(values: Sequence[Any]) -> str:
    """How a swept variable's chart axis reads: "log2" (powers of two), "linear" (other
    numbers) or "ordinal" (text, or a mix)."""
    if is_power_of_two_series(values):
        return "log2"
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return "linear" if numeric and values else "ordinal"


TOP_COLUMNS = ["config", "name", "short_name", "instances", "total_ns", "time_pct"]


def config_top_kernels(configs: Sequence[ConfigRow], top: int = 5) -> pd.DataFrame:
    """Each configuration's ``top`` kernels by total time (its own ``kernel_summary`` rows,
    ``time_pct`` its share of that configuration's kernel time), in the sweep's order; the
    configurations without a report have none."""
    parts = []
    for config in configs:
        if config.frames is None or config.frames.kernel_summary.empty:
            continue
        head = config.frames.kernel_summary.head(top).copy()
        head.insert(0, "config", config.label)
        parts.append(head.reindex(columns=TOP_COLUMNS))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=_TOP_DTYPES[c]) for c in TOP_COLUMNS})
    return pd.concat(parts, ignore_index=True).astype(_TOP_DTYPES)


_TOP_DTYPES = {"config": "str", "name": "str", "short_name": "str", "instances": "int64",
               "total_ns": "int64", "time_pct": "float64"}  # fmt: skip


__all__ = [
    "MFU_KEY_COLUMNS",
    "NAMED_BY_USER",
    "TABLE_COLUMNS",
    "TOP_COLUMNS",
    "ConfigFrames",
    "ConfigRow",
    "axis_scale",
    "config_top_kernels",
    "is_power_of_two_series",
    "kernel_matrix",
    "peak_memory_bytes",
    "sweep_mfu",
    "sweep_table",
]
