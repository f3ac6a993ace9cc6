"""Launch-bound stretches: runs of kernels the GPU finished faster than the CPU launched them.

HTA's "kernel launch" view asks the same: a kernel whose run time is shorter than the time
between its launch call and the previous one, and which found the GPU idle when it was launched
(nothing queued ahead of it), waited for the CPU, not the other way round. ``min_kernels`` such
kernels in a row on one device make a stretch: there the CPU launch rate, not the GPU, sets the
pace (a decode loop of small kernels, Python overhead between ops). Each stretch gives both
rates: kernels launched per ms of CPU time against kernels the GPU could run per ms of busy
time. Pure functions on ``NsysReport`` frames.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .keyjoin import first_match, process_ids, take_matched

__all__ = ["LAUNCH_BOUND_COLUMNS", "launch_bound", "launch_times"]

LAUNCH_BOUND_COLUMNS = [
    "device_id",
    "pid",
    "start_ns",
    "end_ns",
    "kernels",
    "gpu_busy_ns",
    "busy_pct",
    "median_kernel_ns",
    "median_launch_interval_ns",
    "cpu_launches_per_ms",
    "gpu_kernels_per_ms",
]
# medians and rates are floats (vocabulary/columns.py), also in an empty frame
_FLOATS = {"busy_pct", "median_kernel_ns", "median_launch_interval_ns", "cpu_launches_per_ms",
           "gpu_kernels_per_ms"}  # fmt: skip


def launch_times(kernels: pd.DataFrame, cuda_api: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` + ``launch_start_ns, launch_end_ns`` (the API call that launched each, joined
    on ``pid, correlation_id``, + ``report`` in merged frames; -1 when none was recorded)."""
    row = first_match(
        process_ids(cuda_api),
        cuda_api["correlation_id"].to_numpy(np.int64),
        process_ids(kernels),
        kernels["correlation_id"].to_numpy(np.int64),
    )
    return kernels.assign(
        launch_start_ns=take_matched(cuda_api["start_ns"].to_numpy(np.int64), row),
        launch_end_ns=take_matched(cuda_api["end_ns"].to_numpy(np.int64), row),
    )


def _runs(flag: np.ndarray, min_len: int) -> list[tuple[int, int]]:
    """[first, last] index pairs of runs of True at least ``min_len`` long."""
    edges = np.diff(np.r_[0, flag.astype(np.int8), 0])
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(a), int(b) - 1) for a, b in zip(starts, stops, strict=True) if b - a >= min_len]


def launch_bound(kernels: pd.DataFrame, min_kernels: int = 8) -> pd.DataFrame:
    """Stretches of at least ``min_kernels`` launch-bound kernels in a row per device and
    process: ``LAUNCH_BOUND_COLUMNS``, longest first. ``kernels``: ``launch_times`` output.
    A kernel is launch-bound when it started after every earlier kernel of its device had
    ended (the queue was empty) and ran for less time than passed between its launch call and
    the previous one."""
    keys = [k for k in ("report", "device_id", "pid") if k in kernels]
    rows = []
    known = kernels[(kernels["launch_start_ns"] >= 0).to_numpy()]
    for key, k in known.sort_values("start_ns", kind="stable").groupby(keys, sort=True):
        start, end = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
        launch = k["launch_start_ns"].to_numpy(np.int64)
        if len(start) < min_kernels:
            continue
        reach = np.maximum.accumulate(end)
        idle_before = np.r_[False, start[1:] >= reach[:-1]]
        interval = np.r_[0, np.diff(launch)]
        bound = idle_before & (end - start < interval)
        for a, b in _runs(bound, min_kernels):
            dur = end[a : b + 1] - start[a : b + 1]
            span = int(end[b] - start[a])
            cpu_span = int(launch[b] - launch[a - 1 if a > 0 else a])
            n = b - a + 1
            rows.append(
                {
                    **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                    "start_ns": int(start[a]),
                    "end_ns": int(end[b]),
                    "kernels": n,
                    "gpu_busy_ns": int(dur.sum()),
                    "busy_pct": 100.0 * dur.sum() / span if span else np.nan,
                    "median_kernel_ns": float(np.median(dur)),
                    "median_launch_interval_ns": float(np.median(interval[a : b + 1])),
                    "cpu_launches_per_ms": 1e6 * n / cpu_span if cpu_span else np.nan,
                    "gpu_kernels_per_ms": 1e6 * n / dur.sum() if dur.sum() else np.nan,
                }
            )
    extra = ["report"] if "report" in kernels else []
    cols = [*extra, *LAUNCH_BOUND_COLUMNS]
    if not rows:
        return pd.DataFrame({c: np.array([], dtype=np.float64 if c in _FLOATS else np.int64)
                             for c in cols})  # fmt: skip
    out = pd.DataFrame(rows)[cols]
    out = out.assign(_span=out["end_ns"] - out["start_ns"])
    out = out.sort_values(["_span", "start_ns"], ascending=[False, True], kind="stable")
    return out.drop(columns="_span").reset_index(drop=True)
