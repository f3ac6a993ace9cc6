"""GPU work per process: a cell can start child processes (subprocess, DataLoader workers,
torchrun ranks) and nsys records their CUDA work in the same report."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .keyjoin import process_keys

__all__ = ["PROCESS_COLUMNS", "process_count", "process_summary"]

PROCESS_COLUMNS = [
    "pid", "name", "kernels", "kernel_time_ns", "graph_launches", "graph_time_ns",
    "memcpy_count", "memcpy_bytes", "memcpy_time_ns", "memset_count", "memset_time_ns",
    "gpu_time_ns", "gpu_time_pct", "devices", "first_start_ns", "last_end_ns",
]  # fmt: skip


def _per_process(
    frame: pd.DataFrame | None, keys: list[str], prefix: str, count: str, with_bytes: bool
) -> pd.DataFrame:
    cols = {count: ("duration_ns", "size"), f"{prefix}_time_ns": ("duration_ns", "sum"),
            "_first": ("start_ns", "min"), "_last": ("end_ns", "max")}  # fmt: skip
    if with_bytes:
        cols[f"{prefix}_bytes"] = ("bytes", "sum")
    if frame is None or frame.empty:
        empty = {k: pd.Series([], dtype=np.int64) for k in [*keys, *cols]}
        return pd.DataFrame(empty).set_index(keys)
    return frame.groupby(keys).agg(**cols)


def process_count(kernels: pd.DataFrame, *others: pd.DataFrame | None, stop_at: int = 2) -> int:
    """How many processes ran GPU work in ``kernels`` and ``others`` (copies, sets, graph
    launches), counted up to ``stop_at`` (whether there is more than one is what the header and
    the view ask, and one process is the common case: no per-process table is needed for it)."""
    keys = process_keys(kernels)
    seen: set[tuple[Any, ...]] = set()
    for frame in (kernels, *others):
        if frame is None or frame.empty:
            continue
        seen.update(frame[keys].drop_duplicates().itertuples(index=False, name=None))
        if len(seen) >= stop_at:
            break
    return len(seen)


def process_summary(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    processes: pd.DataFrame | None = None,
    memset: pd.DataFrame | None = None,
    graph_launches: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per process that ran GPU work, most GPU time first: ``pid, name`` (from
    ``processes``: ``pid, name``; "" when not given or unknown), ``kernels, kernel_time_ns,
    graph_launches, graph_time_ns`` (whole CUDA graph launches of a graph-level trace),
    ``memcpy_count, memcpy_bytes, memcpy_time_ns, memset_count, memset_time_ns``,
    ``gpu_time_ns`` (kernel + graph + copy + set durations summed, as nsys's summaries sum
    them: overlaps count twice), ``gpu_time_pct`` (of all processes' ``gpu_time_ns``),
    ``devices`` (device ids used, e.g. "0" or "0,1"), ``first_start_ns, last_end_ns`` (its
    first and last GPU op). Frames of several merged reports (a ``report`` column) are keyed
    on ``(report, pid)`` and keep ``report`` (and ``rank`` when the kernels have it) first."""
    keys = process_keys(kernels)
    parts = [
        _per_process(kernels, keys, "kernel", "kernels", False),
        _per_process(graph_launches, keys, "graph", "graph_launches", False),
        _per_process(memcpy, keys, "memcpy", "memcpy_count", True),
        _per_process(memset, keys, "memset", "memset_count", False),
    ]
    firsts = pd.concat([p["_first"] for p in parts], axis=1).min(axis=1)
    lasts = pd.concat([p["_last"] for p in parts], axis=1).max(axis=1)
    out = pd.concat([p.drop(columns=["_first", "_last"]) for p in parts], axis=1)
    out = out.fillna(0).astype(np.int64)
    out["first_start_ns"] = firsts.reindex(out.index).astype(np.int64)
    out["last_end_ns"] = lasts.reindex(out.index).astype(np.int64)
    out["gpu_time_ns"] = (
        out["kernel_time_ns"] + out["graph_time_ns"] + out["memcpy_time_ns"] + out["memset_time_ns"]
    )
    total = out["gpu_time_ns"].sum()
    out["gpu_time_pct"] = 100.0 * out["gpu_time_ns"] / total if total else 0.0
    frames = [f for f in (kernels, graph_launches, memcpy, memset) if f is not None and len(f)]
    used = pd.concat([f[[*keys, "device_id"]] for f in frames]) if frames else None
    if used is None or used.empty:
        out["devices"] = ""
    else:
        devices = used.drop_duplicates().sort_values("device_id").groupby(keys)["device_id"]
        listed = devices.agg(lambda d: ",".join(str(int(x)) for x in d))
        out["devices"] = listed.reindex(out.index).fillna("").astype(str)
    out = out.reset_index()
    out["name"] = _names(out, processes, keys)
    extra = [k for k in keys if k != "pid"]
    if "rank" in kernels and len(out):
        ranks = kernels[[*keys, "rank"]].drop_duplicates(keys)
        out = out.merge(ranks, on=keys, how="left")
        extra.append("rank")
    out = out.sort_values(["gpu_time_ns", *keys], ascending=[False] + [True] * len(keys))
    return out.reset_index(drop=True)[[*extra, *PROCESS_COLUMNS]]


def _names(out: pd.DataFrame, processes: pd.DataFrame | None, keys: list[str]) -> pd.Series:
    """Each row's process name from ``processes`` (same keys), "" when unknown."""
    if processes is None or processes.empty or out.empty or not set(keys) <= set(processes):
        return pd.Series("", index=out.index, dtype=str)
    first = processes.drop_duplicates(keys)
    lookup = dict(zip(first[keys].itertuples(index=False, name=None), first["name"], strict=True))
    rows = out[keys].itertuples(index=False, name=None)
    return pd.Series([str(lookup.get(k, "")) for k in rows], index=out.index, dtype=str)
