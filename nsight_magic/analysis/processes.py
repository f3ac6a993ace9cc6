"""GPU work per process: a cell can start child processes (subprocess, DataLoader workers,
torchrun ranks) and nsys records their CUDA work in the same report."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["PROCESS_COLUMNS", "process_summary"]

PROCESS_COLUMNS = [
    "pid", "name", "kernels", "kernel_time_ns", "memcpy_count", "memcpy_bytes",
    "memcpy_time_ns", "memset_count", "memset_time_ns", "gpu_time_ns", "gpu_time_pct",
    "devices", "first_start_ns", "last_end_ns",
]  # fmt: skip


def _per_pid(frame: pd.DataFrame | None, prefix: str, count: str, with_bytes: bool) -> pd.DataFrame:
    cols = {count: ("duration_ns", "size"), f"{prefix}_time_ns": ("duration_ns", "sum"),
            "_first": ("start_ns", "min"), "_last": ("end_ns", "max")}  # fmt: skip
    if with_bytes:
        cols[f"{prefix}_bytes"] = ("bytes", "sum")
    if frame is None or frame.empty:
        return pd.DataFrame(columns=list(cols)).rename_axis("pid")
    return frame.groupby("pid").agg(**cols)


def process_summary(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    processes: pd.DataFrame | None = None,
    memset: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per process that ran GPU work, most GPU time first: ``pid, name`` (from
    ``processes``: ``pid, name``; "" when not given or unknown), ``kernels, kernel_time_ns,
    memcpy_count, memcpy_bytes, memcpy_time_ns, memset_count, memset_time_ns``, ``gpu_time_ns``
    (kernel + copy + set durations summed, as nsys's summaries sum them: overlaps count twice),
    ``gpu_time_pct`` (of all processes' ``gpu_time_ns``), ``devices`` (device ids used, e.g.
    "0" or "0,1"), ``first_start_ns, last_end_ns`` (its first and last GPU op)."""
    parts = [
        _per_pid(kernels, "kernel", "kernels", False),
        _per_pid(memcpy, "memcpy", "memcpy_count", True),
        _per_pid(memset, "memset", "memset_count", False),
    ]
    firsts = pd.concat([p["_first"] for p in parts], axis=1).min(axis=1)
    lasts = pd.concat([p["_last"] for p in parts], axis=1).max(axis=1)
    out = pd.concat([p.drop(columns=["_first", "_last"]) for p in parts], axis=1)
    out = out.fillna(0).astype(np.int64)
    out["first_start_ns"] = firsts.reindex(out.index).astype(np.int64)
    out["last_end_ns"] = lasts.reindex(out.index).astype(np.int64)
    out["gpu_time_ns"] = out["kernel_time_ns"] + out["memcpy_time_ns"] + out["memset_time_ns"]
    total = out["gpu_time_ns"].sum()
    out["gpu_time_pct"] = 100.0 * out["gpu_time_ns"] / total if total else 0.0
    used = pd.concat([f[["pid", "device_id"]] for f in (kernels, memcpy, memset) if f is not None])
    devices = used.drop_duplicates().sort_values("device_id").groupby("pid")["device_id"]
    listed = devices.agg(lambda d: ",".join(str(int(x)) for x in d))
    out["devices"] = listed.reindex(out.index).fillna("").astype(str)
    out = out.reset_index()
    names: dict[int, str] = {}
    if processes is not None and len(processes):
        first = processes.drop_duplicates("pid")
        names = dict(zip(first["pid"].astype(np.int64), first["name"].astype(str), strict=True))
    out["name"] = [names.get(int(pid), "") for pid in out["pid"]]
    out["name"] = out["name"].astype(str)
    out = out.sort_values(["gpu_time_ns", "pid"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)[PROCESS_COLUMNS]
