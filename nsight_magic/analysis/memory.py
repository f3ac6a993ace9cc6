"""GPU memory operations: ``nsys stats`` cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum, and
copies by kind with bandwidth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .kernels import duration_stats, int_or_float, sum_of
from .text import join_text

__all__ = ["copies_by_kind", "memory_ops", "memory_size_summary", "memory_time_summary"]


def memory_ops(memcpy: pd.DataFrame, memset: pd.DataFrame | None = None) -> pd.DataFrame:
    """Copies and sets in one frame: ``operation`` (nsys's label, e.g.
    "[CUDA memcpy Host-to-Device]", "[CUDA memset]"), ``start_ns, end_ns, duration_ns, bytes``."""
    cols = ["start_ns", "end_ns", "duration_ns", "bytes"]
    label = memcpy["label"] if "label" in memcpy else memcpy["kind"]
    operation = join_text("[CUDA memcpy ", label, "]", index=memcpy.index)
    parts = [memcpy[cols].assign(operation=operation.to_numpy())]
    if memset is not None and len(memset):
        parts.append(memset[cols].assign(operation="[CUDA memset]"))
    out = pd.concat(parts, ignore_index=True)
    out["operation"] = out["operation"].astype("str")
    return out[["operation", *cols]]


def memory_time_summary(memcpy: pd.DataFrame, memset: pd.DataFrame | None = None) -> pd.DataFrame:
    """Equal to ``nsys stats --report cuda_gpu_mem_time_sum``: ``operation, instances,
    total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns, time_pct``, sorted by total time."""
    stats = duration_stats(memory_ops(memcpy, memset), ["operation"])
    return stats[["operation", *[c for c in stats.columns if c != "operation"]]]


def memory_size_summary(memcpy: pd.DataFrame, memset: pd.DataFrame | None = None) -> pd.DataFrame:
    """Equal to ``nsys stats --report cuda_gpu_mem_size_sum`` in bytes (nsys prints MB =
    1e6 B): ``operation, instances, total_bytes, avg_bytes, med_bytes, min_bytes, max_bytes,
    std_bytes``, sorted by total bytes."""
    stats = duration_stats(memory_ops(memcpy, memset), ["operation"], value="bytes")
    stats = stats.drop(columns="time_pct")
    return stats.rename(columns=lambda c: c.replace("_ns", "_bytes"))


def copies_by_kind(memcpy: pd.DataFrame) -> pd.DataFrame:
    """Per copy kind: ``kind, count, bytes, total_ns, bandwidth_gb_per_s`` (total bytes over total
    copy time; bytes/ns = GB/s), sorted by total time."""
    grouped = memcpy.groupby("kind", sort=False, observed=True)
    out = grouped.agg(
        count=("bytes", "size"),
        bytes=("bytes", sum_of(memcpy["bytes"])),
        total_ns=("duration_ns", sum_of(memcpy["duration_ns"])),
    ).reset_index()
    out["count"] = out["count"].astype(np.int64)
    for col in ("bytes", "total_ns"):  # float64 only where a damaged export's total passes int64
        out[col] = int_or_float(out[col])
    with np.errstate(divide="ignore", invalid="ignore"):
        total = out["total_ns"].to_numpy(np.float64)
        out["bandwidth_gb_per_s"] = np.where(
            total > 0, out["bytes"].to_numpy(np.float64) / np.maximum(total, 1.0), np.nan
        )
    out = out.sort_values(["total_ns", "kind"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)
