"""GPU idle time: gaps between operations per device/stream, and busy % of a window. GPU
operations are kernels, copies, sets and whole CUDA graph launches (``graphs``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .graphs import graph_launch_names
from .text import join_text

__all__ = ["busy_intervals", "busy_pct", "gaps", "gpu_ops"]


def gpu_ops(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    memset: pd.DataFrame | None = None,
    graph_launches: pd.DataFrame | None = None,
    keys: Sequence[str] = (),
) -> pd.DataFrame:
    """Kernels, copies, sets and whole CUDA graph launches as ``device_id, stream_id,
    start_ns, end_ns, name`` (+ ``keys``, e.g. ``report, pid, rank`` of merged frames), sorted
    by start. Copies are named like nsys's timeline ("[CUDA memcpy HtoD]"), graph launches
    "[CUDA graph launch <graph_id>]" (``graphs.graph_launch_names``)."""
    cols = ["device_id", "stream_id", "start_ns", "end_ns", *keys]
    parts = [kernels[cols].assign(name=kernels["name"].to_numpy())]
    if memcpy is not None and len(memcpy):
        names = join_text("[CUDA memcpy ", memcpy["kind"], "]").to_numpy()
        parts.append(memcpy[cols].assign(name=names))
    if memset is not None and len(memset):
        parts.append(memset[cols].assign(name="[CUDA memset]"))
    if graph_launches is not None and len(graph_launches):
        names = graph_launch_names(graph_launches).to_numpy()
        parts.append(graph_launches[cols].assign(name=names))
    out = pd.concat(parts, ignore_index=True)
    out["name"] = out["name"].astype("str")
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def busy_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays."""
    if len(start) == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    group = np.cumsum(new) - 1
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))[: group[-1] + 1]


def busy_pct(ops: pd.DataFrame, window: tuple[int, int]) -> float:
    """Percent of ``window`` (start_ns, end_ns) during which any op in ``ops`` runs."""
    lo, hi = window
    if hi <= lo or ops.empty:
        return 0.0
    s, e = busy_intervals(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())
    if hi - lo >= 2**62:  # a damaged export's int64 extremes: int64 differences would wrap
        covered = np.clip(e, lo, hi).astype(np.float64) - np.clip(s, lo, hi).astype(np.float64)
        return float(100.0 * covered.sum() / float(hi - lo))
    covered = np.clip(e, lo, hi) - np.clip(s, lo, hi)  # disjoint: sums to at most hi - lo
    return float(100.0 * covered.sum() / (hi - lo))


def gaps(ops: pd.DataFrame, min_gap_ns: int = 0, per_stream: bool = True) -> pd.DataFrame:
    """Idle gaps longer than ``min_gap_ns`` between consecutive ops on each device/stream
    (``per_stream=False``: on each device, any stream busy counts as busy, stream_id = -1).

    ``ops`` is :func:`gpu_ops` output. Returns ``device_id, stream_id, start_ns, end_ns,
    duration_ns, prev_op, next_op`` (names of the op that ended last before the gap, at its
    ``start_ns``, and of the op that starts at its ``end_ns``), longest first."""
    cols = ["device_id", "stream_id", "start_ns", "end_ns", "duration_ns", "prev_op", "next_op"]
    if ops.empty:
        empty = {c: np.array([], dtype=np.int64) for c in cols[:5]}
        return pd.DataFrame(
            {**empty, "prev_op": pd.Series([], dtype="str"), "next_op": pd.Series([], dtype="str")}
        )
    stream = ops["stream_id"].to_numpy() if per_stream else np.full(len(ops), -1)
    dev = ops["device_id"].to_numpy()
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    order = np.lexsort((start, stream, dev))
    dev, stream, start, end = dev[order], stream[order], start[order], end[order]
    names = ops["name"].to_numpy(dtype=object)[order]
    same = np.r_[False, (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])]
    # Running max of ends within each lane: a long op can cover several short ones.
    lane = np.cumsum(~same)
    reach = pd.Series(end).groupby(lane).cummax().to_numpy()
    reach_idx = pd.Series(np.where(end == reach, np.arange(len(end)), -1)).groupby(lane).cummax()
    reach_idx = reach_idx.to_numpy()
    gap_start = np.r_[0, reach[:-1]]
    is_gap = same & (start - gap_start > min_gap_ns) & (start > gap_start)
    i = np.flatnonzero(is_gap)
    out = pd.DataFrame(
        {
            "device_id": dev[i],
            "stream_id": stream[i],
            "start_ns": gap_start[i],
            "end_ns": start[i],
            "duration_ns": start[i] - gap_start[i],
            "prev_op": names[reach_idx[i - 1]],
            "next_op": names[i],
        }
    )
    for c in ("prev_op", "next_op"):
        out[c] = out[c].astype("str")
    out = out.sort_values(["duration_ns", "start_ns"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)[cols]
