"""Per-kernel-name statistics, the same as ``nsys stats --report cuda_gpu_kern_sum``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .names import short_names

__all__ = [
    "KERNEL_SUMMARY_COLUMNS",
    "duration_stats",
    "exact_sum",
    "int_or_float",
    "kernel_summary",
    "sum_of",
]

KERNEL_SUMMARY_COLUMNS = [
    "name",
    "instances",
    "total_ns",
    "avg_ns",
    "med_ns",
    "min_ns",
    "max_ns",
    "std_ns",
    "time_pct",
    "short_name",
]


_INT64_MAX = np.iinfo(np.int64).max


def sum_of(values: pd.Series | np.ndarray) -> str | object:
    """The aggregation for a total of int ``values``: numpy's "sum" when no total of them can
    pass int64 (every real export), else :func:`exact_sum` (a damaged one: an int64 extreme
    would wrap the total to a negative number)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" or not len(arr):
        return "sum"
    biggest = float(np.abs(arr.astype(np.float64)).max())
    return "sum" if biggest * len(arr) < 2.0**62 else exact_sum


def exact_sum(values: pd.Series) -> int:
    """The sum as a Python int: never wraps."""
    return sum(int(v) for v in values)


def int_or_float(col: pd.Series) -> pd.Series:
    """Totals as int64 when every one fits, else float64 (never a wrapped int)."""
    if col.dtype.kind in "iu":
        return col.astype(np.int64)
    ints = [int(v) for v in col]
    if all(-_INT64_MAX <= v <= _INT64_MAX for v in ints):
        return pd.Series(ints, index=col.index, dtype=np.int64)
    return pd.Series([float(v) for v in ints], index=col.index, dtype=np.float64)


def duration_stats(frame: pd.DataFrame, by: list[str], value: str = "duration_ns") -> pd.DataFrame:
    """``instances, total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns, time_pct`` of ``value``
    per group, with nsys's conventions: the median of an even count is the mean of the middle
    two, the std is the sample std (n - 1) and 0 for one instance, time % is of the grand total.
    Sorted by total descending, then by the group keys (nsys's order for ties)."""
    if frame.empty:
        out = pd.DataFrame({k: as_text(frame[k].iloc[:0]) for k in by})
        for col, dtype in [
            ("instances", np.int64),
            ("total_ns", np.int64),
            ("avg_ns", np.float64),
            ("med_ns", np.float64),
            ("min_ns", np.int64),
            ("max_ns", np.int64),
            ("std_ns", np.float64),
            ("time_pct", np.float64),
        ]:
            out[col] = np.array([], dtype=dtype)
        return out
    grouped = frame.groupby(by, sort=False, observed=True)[value]
    out = grouped.agg(
        instances="size",
        total_ns=sum_of(frame[value]),
        avg_ns="mean",
        med_ns="median",
        min_ns="min",
        max_ns="max",
        std_ns="std",
    ).reset_index()
    for k in by:  # Categorical keys (codes, e.g. kernel names) leave as plain text
        out[k] = as_text(out[k])
    out["std_ns"] = out["std_ns"].fillna(0.0)
    out["med_ns"] = out["med_ns"].astype(np.float64)
    out["total_ns"] = int_or_float(out["total_ns"])
    grand = (
        exact_sum(out["total_ns"]) if out["total_ns"].dtype.kind == "i" else out["total_ns"].sum()
    )
    out["time_pct"] = 100.0 * out["total_ns"].astype(np.float64) / float(grand) if grand else 0.0
    for col in ("instances", "min_ns", "max_ns"):
        out[col] = out[col].astype(np.int64)
    out = out.sort_values(["total_ns", *by], ascending=[False] + [True] * len(by), kind="stable")
    return out.reset_index(drop=True)


def as_text(col: pd.Series) -> pd.Series:
    """A Categorical column as its categories' dtype (e.g. str); others unchanged."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.astype(col.cat.categories.dtype)
    return col


def kernel_summary(kernels: pd.DataFrame, by: str = "name") -> pd.DataFrame:
    """One row per kernel name: ``name, instances, total_ns, avg_ns, med_ns, min_ns, max_ns,
    std_ns, time_pct, short_name``, sorted by ``total_ns`` descending.

    ``name`` may be a Categorical (as ``NsysReport`` passes it, to group 1M kernels by code).
    Equal to ``nsys stats --report cuda_gpu_kern_sum`` (which groups by the demangled name;
    pass ``by="short_name"`` for its ``:base`` variant). Floats are unrounded; nsys prints
    one decimal. ``short_name`` (last column) is ``names.short_names`` of ``name``: readable
    and unique per name."""
    stats = duration_stats(kernels, [by]).rename(columns={by: "name"})
    stats["short_name"] = short_names(stats["name"])
    return stats[KERNEL_SUMMARY_COLUMNS]
