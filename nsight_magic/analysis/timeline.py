"""Rows for a timeline chart, aggregated so that any report gives at most ``max_rows`` rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .gaps import gpu_ops

__all__ = ["TIMELINE_COLUMNS", "timeline_frame"]

TIMELINE_COLUMNS = ["lane", "kind", "start_ns", "end_ns", "name", "count"]


def _events(
    kernels: pd.DataFrame, memcpy: pd.DataFrame | None, nvtx: pd.DataFrame | None
) -> pd.DataFrame:
    parts = []
    ops = gpu_ops(kernels, memcpy)
    if len(ops):
        lane = "GPU " + ops["device_id"].astype(str) + " / stream " + ops["stream_id"].astype(str)
        kind = np.where(ops["name"].str.startswith("[CUDA memcpy"), "memcpy", "kernel")
        parts.append(
            pd.DataFrame(
                {
                    "lane": lane.to_numpy(),
                    "kind": kind,
                    "start_ns": ops["start_ns"].to_numpy(),
                    "end_ns": ops["end_ns"].to_numpy(),
                    "name": ops["name"].to_numpy(),
                }
            )
        )
    if nvtx is not None and len(nvtx):
        domain = nvtx["domain"].where(nvtx["domain"] != "", "(default)")
        parts.append(
            pd.DataFrame(
                {
                    "lane": ("NVTX " + domain).to_numpy(),
                    "kind": "nvtx",
                    "start_ns": nvtx["start_ns"].to_numpy(),
                    "end_ns": nvtx["end_ns"].to_numpy(),
                    "name": nvtx["range"].to_numpy(),
                }
            )
        )
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype="str") for c in ("lane", "kind", "name")})
    return pd.concat(parts, ignore_index=True)


def timeline_frame(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
    max_rows: int = 5000,
) -> pd.DataFrame:
    """``lane, kind, start_ns, end_ns, name, count``: one row per event when they fit in
    ``max_rows``; otherwise the time span is cut into equal bins and each lane's events in one
    bin become one row (start of the first, end of the last, ``name`` of the longest, ``count``
    events). Lanes: "GPU d / stream s" (kernels, copies) and "NVTX <domain>"."""
    ev = _events(kernels, memcpy, nvtx)
    if ev.empty:
        out = pd.DataFrame({c: pd.Series([], dtype="int64") for c in TIMELINE_COLUMNS})
        for c in ("lane", "kind", "name"):
            out[c] = out[c].astype("str")
        return out
    ev["count"] = np.int64(1)
    if len(ev) > max_rows:
        ev = _bin(ev, max_rows)
    for c in ("lane", "kind", "name"):
        ev[c] = ev[c].astype("str")
    ev = ev.sort_values(["lane", "start_ns"], kind="stable").reset_index(drop=True)
    return ev[TIMELINE_COLUMNS]


def _bin(ev: pd.DataFrame, max_rows: int) -> pd.DataFrame:
    lanes = ev["lane"].nunique()
    # Too many lanes for the budget: keep the busiest lanes.
    if lanes > max_rows:
        busy = (ev["end_ns"] - ev["start_ns"]).groupby(ev["lane"]).sum()
        keep = busy.nlargest(max_rows).index
        ev = ev[ev["lane"].isin(keep)]
        lanes = max_rows
    bins = max(1, max_rows // lanes)
    lo, hi = int(ev["start_ns"].min()), int(ev["end_ns"].max())
    width = max(1, -(-(hi - lo + 1) // bins))  # ceil, so bin ids stay < bins
    ev = ev.assign(
        _bin=(ev["start_ns"].to_numpy() - lo) // width,
        _dur=ev["end_ns"].to_numpy() - ev["start_ns"].to_numpy(),
    )
    longest = ev.sort_values("_dur", ascending=False, kind="stable").drop_duplicates(
        ["lane", "_bin"]
    )[["lane", "_bin", "name", "kind"]]
    agg = (
        ev.groupby(["lane", "_bin"], sort=False)
        .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), count=("count", "sum"))
        .reset_index()
    )
    out = agg.merge(longest, on=["lane", "_bin"], how="left")
    return out.drop(columns="_bin")
