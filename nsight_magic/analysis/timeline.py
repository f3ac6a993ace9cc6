"""Rows for a timeline chart: at most ``max_rows``, over the whole capture or a zoom window.

A decode loop can launch 62,000 kernels: drawn whole, each row is a bin of many. Zooming in
re-bins only the events that overlap the window, so a narrow enough window shows the real
kernels one by one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .graphs import graph_launch_names
from .names import short_names
from .statements import nvtx_scope
from .text import join_text

__all__ = ["STATEMENT_LANE", "TIMELINE_COLUMNS", "timeline_frame"]

TIMELINE_COLUMNS = ["lane", "kind", "start_ns", "end_ns", "name", "count", "short_name", "level"]
STATEMENT_LANE = "cell statements"  # the cell's own ranges (domain nsight_magic)
_TEXT = ("lane", "kind", "name", "short_name")


def _overlapping(frame: pd.DataFrame | None, window: tuple[int, int] | None) -> pd.DataFrame:
    """Rows of ``frame`` that overlap ``[lo, hi)`` (all rows without a window)."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    if window is None:
        return frame
    lo, hi = window
    start, end = frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy()
    keep = (start < hi) & ((end > lo) | (start >= lo))  # zero-length events inside count
    return frame.loc[keep]


def _gpu_events(ops: pd.DataFrame, kind: np.ndarray | str, name: pd.Series) -> pd.DataFrame:
    lane = join_text("GPU ", ops["device_id"], " / stream ", ops["stream_id"])
    return pd.DataFrame(
        {
            "lane": lane.to_numpy(),
            "kind": kind,
            "start_ns": ops["start_ns"].to_numpy(),
            "end_ns": ops["end_ns"].to_numpy(),
            "name": name.to_numpy(),
            "short_name": name.to_numpy(),
            "level": np.int64(0),
            # GPU lanes after the NVTX ones, ordered by device and stream number
            "_order": 2_000_000 + ops["device_id"].to_numpy() * 1000 + ops["stream_id"].to_numpy(),
        }
    )


def _events(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None,
    memset: pd.DataFrame | None,
    graph_launches: pd.DataFrame | None,
    nvtx: pd.DataFrame | None,
) -> list[pd.DataFrame]:
    parts = []
    if len(kernels):
        kind = np.full(len(kernels), "kernel", dtype=object)
        if "graph_node_id" in kernels:  # a kernel node of a CUDA graph replay (-1: not one)
            kind[kernels["graph_node_id"].fillna(-1).to_numpy() >= 0] = "graph kernel"
        names = kernels["name"].astype(str)
        part = _gpu_events(kernels, kind, names)
        part["short_name"] = short_names(names).to_numpy()
        parts.append(part)
    if memcpy is not None and len(memcpy):
        parts.append(_gpu_events(memcpy, "memcpy", join_text("[CUDA memcpy ", memcpy["kind"], "]")))
    if memset is not None and len(memset):
        parts.append(_gpu_events(memset, "memset", pd.Series("[CUDA memset]", memset.index)))
    if graph_launches is not None and len(graph_launches):
        parts.append(
            _gpu_events(graph_launches, "graph launch", graph_launch_names(graph_launches))
        )
    if nvtx is not None and len(nvtx):
        ours = (nvtx_scope(nvtx) != "user").to_numpy()
        domain = nvtx["domain"].where(nvtx["domain"] != "", "(default)").astype(str)
        lane = np.where(ours, STATEMENT_LANE, "NVTX " + domain)
        # the cell's statements on top, then the user's domains in name order
        # (np.unique, not Series.rank: on pyarrow-backed strings pandas' rank warns on pyarrow 25+)
        order = np.unique(lane, return_inverse=True)[1].reshape(-1).astype(np.int64) + 2
        level = nvtx["level"].to_numpy() if "level" in nvtx else np.zeros(len(nvtx), np.int64)
        parts.append(
            pd.DataFrame(
                {
                    "lane": lane,
                    "kind": np.where(ours, "statement", "nvtx"),
                    "start_ns": nvtx["start_ns"].to_numpy(),
                    "end_ns": nvtx["end_ns"].to_numpy(),
                    "name": nvtx["range"].astype(str).to_numpy(),
                    "short_name": nvtx["range"].astype(str).to_numpy(),
                    "level": level,
                    "_order": np.where(ours, 0, order),
                }
            )
        )
    return parts


def timeline_frame(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
    window: tuple[int, int] | None = None,
    max_rows: int = 5000,
    memset: pd.DataFrame | None = None,
    graph_launches: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``lane, kind, start_ns, end_ns, name, count, short_name, level``, sorted by lane (the
    cell's statements, the user's NVTX domains, then GPU streams) and start.

    Only events overlapping ``window`` = ``(lo, hi)`` ns (everything when None) are kept, with
    their real start and end. When they fit in ``max_rows`` each is a row (``count`` 1);
    otherwise the window is cut into equal bins and each lane's events starting in one bin
    become one row (start of the first, end of the last, ``name``/``short_name``/``kind``/
    ``level`` of the longest, ``count`` events).

    Lanes: "GPU d / stream s" (kinds "kernel", "graph kernel" when ``graph_node_id`` >= 0,
    "memcpy", "memset", "graph launch" for a whole CUDA graph launch of a graph-level trace,
    named ``graphs.graph_launch_names``), "cell statements" (kind "statement": the
    ``nsight_magic`` domain's cell, statement and warm-up ranges) and "NVTX <domain>" (kind
    "nvtx", "(default)" for the default domain). ``level``: NVTX nesting depth (0 for GPU
    rows), so nested ranges in one lane can be stacked. ``short_name``: ``names.short_names``
    for kernels, else ``name``."""
    frames = [_overlapping(f, window) for f in (kernels, memcpy, memset, graph_launches, nvtx)]
    parts = _events(*frames)
    if not parts:
        out = pd.DataFrame({c: pd.Series([], dtype="int64") for c in TIMELINE_COLUMNS})
        for c in _TEXT:
            out[c] = out[c].astype("str")
        return out
    ev = pd.concat(parts, ignore_index=True)
    ev["count"] = np.int64(1)
    if len(ev) > max_rows:
        ev = _bin(ev, max_rows, window)
    for c in _TEXT:
        ev[c] = ev[c].astype("str")
    ev["level"] = ev["level"].astype(np.int64)
    ev = ev.sort_values(["_order", "lane", "start_ns"], kind="stable").reset_index(drop=True)
    return ev[TIMELINE_COLUMNS]


def _bin(ev: pd.DataFrame, max_rows: int, window: tuple[int, int] | None) -> pd.DataFrame:
    lanes = ev["lane"].nunique()
    # Too many lanes for the budget: keep the busiest lanes.
    if lanes > max_rows:
        busy = (ev["end_ns"] - ev["start_ns"]).groupby(ev["lane"]).sum()
        keep = busy.nlargest(max_rows).index
        ev = ev[ev["lane"].isin(keep)]
        lanes = max_rows
    bins = max(1, max_rows // lanes)
    if window is None:
        lo, hi = int(ev["start_ns"].min()), int(ev["end_ns"].max())
    else:
        lo, hi = window
    width = max(1, -(-(hi - lo + 1) // bins))  # ceil, so bin ids stay < bins
    # events that began before the window sit in its first bin
    first = np.maximum(ev["start_ns"].to_numpy(), lo)
    ev = ev.assign(
        _bin=np.minimum((first - lo) // width, bins - 1),
        _dur=ev["end_ns"].to_numpy() - ev["start_ns"].to_numpy(),
    )
    longest = ev.sort_values("_dur", ascending=False, kind="stable").drop_duplicates(
        ["lane", "_bin"]
    )[["lane", "_bin", "name", "short_name", "kind", "level", "_order"]]
    agg = (
        ev.groupby(["lane", "_bin"], sort=False)
        .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), count=("count", "sum"))
        .reset_index()
    )
    out = agg.merge(longest, on=["lane", "_bin"], how="left")
    return out.drop(columns="_bin")
