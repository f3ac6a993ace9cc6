"""NVTX ranges projected onto the GPU, as ``nsys stats`` reports ``nvtx_gpu_proj_trace`` and
``nvtx_gpu_proj_sum`` compute them.

nsys's rule (from its report scripts): a GPU operation (kernel, memcpy, memset) belongs to an
NVTX range when the CUDA API call that launched it (joined on correlationId + process) lies
inside the range, on the range's own thread. Ranges that end on another thread are left out.
The projected range runs from the first enclosed operation's start to the last one's end;
only ranges with at least one operation are reported. ``gpu_ops`` counts distinct launching
calls; ``children`` counts child ranges (the tightest enclosing range is the parent) that have
operations themselves.

Done with sorted arrays instead of per-row loops: API calls of one thread run one after
another, so the ops a range encloses are one contiguous slice of the thread's ops sorted by
call start, found with two binary searches (``attribution.enclosed_calls``, the one place
that rule is written); slice minima/maxima come from ``reduceat``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .attribution import Calls, enclosed_calls
from .kernels import as_text, duration_stats
from .keyjoin import first_match
from .nvtx_nesting import nesting, thread_order
from .text import join_text

__all__ = ["PROJECTION_SUMMARY_COLUMNS", "nvtx_gpu_projection", "project_nvtx_to_gpu"]

PROJECTION_SUMMARY_COLUMNS = [
    "domain",
    "range",
    "style",
    "instances",
    "proj_total_ns",
    "range_total_ns",
    "gpu_ops",
    "proj_avg_ns",
    "proj_med_ns",
    "proj_min_ns",
    "proj_max_ns",
    "proj_std_ns",
    "avg_gpu_ops",
    "avg_level",
    "avg_children",
]

_OP_COLS = ["start_ns", "end_ns", "correlation_id", "pid"]


def _gpu_ops(runtime: pd.DataFrame, *ops: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """GPU ops joined to their launching call: arrays ``start_ns, end_ns, corr, pid, tid,
    r_start, r_end``, sorted by (pid, tid, r_start, corr). Ops without a recorded call are
    dropped, as nsys's inner join does."""
    frames = [f for f in ops if f is not None and len(f)]
    cols = ["start_ns", "end_ns", "corr", "pid", "tid", "r_start", "r_end"]
    if not frames or runtime.empty:
        return {c: np.array([], dtype=np.int64) for c in cols}
    g_start = np.concatenate([f["start_ns"].to_numpy() for f in frames])
    g_end = np.concatenate([f["end_ns"].to_numpy() for f in frames])
    g_corr = np.concatenate([f["correlation_id"].to_numpy() for f in frames])
    g_pid = np.concatenate([f["pid"].to_numpy() for f in frames])
    # The launching call of each op: join on (pid, correlationId), the first call wins.
    call = first_match(
        runtime["pid"].to_numpy(), runtime["correlation_id"].to_numpy(), g_pid, g_corr
    )
    keep = np.flatnonzero((call >= 0) & (g_corr >= 0))
    row = call[keep]
    a_tid = runtime["tid"].to_numpy()
    a_start = runtime["start_ns"].to_numpy()
    order = _call_order(row, g_pid[keep], a_tid[row], a_start, g_corr[keep])
    keep, row = keep[order], row[order]  # one gather per column below
    return {
        "start_ns": g_start[keep],
        "end_ns": g_end[keep],
        "corr": g_corr[keep],
        "pid": g_pid[keep],
        "tid": a_tid[row],
        "r_start": a_start[row],
        "r_end": runtime["end_ns"].to_numpy()[row],
    }


def _call_order(
    row: np.ndarray, o_pid: np.ndarray, o_tid: np.ndarray, start: np.ndarray, o_corr: np.ndarray
) -> np.ndarray:
    """Stable order of ops by (pid, tid, call start, corr); ``row`` is each op's call in the
    ``start``-sorted calls, ``o_*`` are per op.

    Calls come sorted by start, so when no two calls of a thread share a start, sorting by
    (thread, row) is that order: one int64 key, mostly ascending already (fast for timsort)."""
    small = (
        len(row) and min(o_pid.min(), o_tid.min()) >= 0 and max(o_pid.max(), o_tid.max()) < 1 << 24
    )
    if small and len(start) and bool(np.all(start[1:] >= start[:-1])):
        thread = (o_pid.astype(np.int64) << 24) | o_tid
        inverse, codes = pd.factorize(thread, sort=True)  # hashing: no 1M-element sort
        if len(codes) * (len(start) + 1) < 1 << 62:
            key = inverse.astype(np.int64) * (len(start) + 1) + row
            order = np.argsort(key, kind="stable")
            k, s, r = key[order], start[row[order]], row[order]
            # Ties in start between different calls of one thread: order those by corr.
            tie = (k[1:] // (len(start) + 1) == k[:-1] // (len(start) + 1)) & (s[1:] == s[:-1])
            if not bool(np.any(tie & (r[1:] != r[:-1]))):
                return order
    if small:
        thread = (o_pid.astype(np.int64) << 24) | o_tid
        return np.lexsort((o_corr, start[row], thread))
    return np.lexsort((o_corr, start[row], o_tid, o_pid))


def _slice_reduce(
    ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """``ufunc.reduce(values[lo[i]:hi[i]])`` for non-empty slices, in O(len(values) + total
    slice length): slices are visited sorted by ``lo`` so the gaps between them add up to at
    most ``len(values)``."""
    if len(lo) == 0:
        return np.array([], dtype=values.dtype)
    order = np.argsort(lo, kind="stable")
    idx = np.empty(2 * len(lo), dtype=np.int64)
    idx[0::2], idx[1::2] = lo[order], hi[order]
    padded = np.r_[values, values[-1:]]  # so hi == len(values) is a valid index
    red = ufunc.reduceat(padded, idx)[0::2]
    out = np.empty(len(lo), dtype=values.dtype)
    out[order] = red
    return out


_TRACE_COLS = ["domain", "range", "style", "start_ns", "end_ns", "duration_ns", "pid", "tid"]


def project_nvtx_to_gpu(
    nvtx: pd.DataFrame,
    runtime: pd.DataFrame,
    kernels: pd.DataFrame | None,
    memcpy: pd.DataFrame | None = None,
    memset: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per-range projection (nsys's ``nvtx_gpu_proj_trace``).

    Inputs are ``NsysReport`` frames: ``nvtx()``, ``cuda_api()`` (or just the calls that
    launched GPU ops: ``start_ns, end_ns, correlation_id, pid, tid``) and the GPU op frames
    (each needs ``start_ns, end_ns, correlation_id, pid``). Returns one row per NVTX range
    with GPU work: ``domain, range, style, start_ns, end_ns, duration_ns, pid, tid, level,
    proj_start_ns, proj_end_ns, proj_duration_ns, gpu_ops, children, parent`` (``parent`` is
    the row of the enclosing range in ``nvtx``, -1 at the top; the index is nvtx's row),
    sorted by projected start, longest first."""
    # The ranges nsys considers (same-thread ones), as integer arrays; texts are taken
    # for the output rows only.
    if "end_tid" in nvtx:
        sel = np.flatnonzero((nvtx["end_tid"] == nvtx["tid"]).to_numpy())
    else:
        sel = np.arange(len(nvtx))
    ranges = pd.DataFrame(
        {c: nvtx[c].to_numpy()[sel] for c in ("pid", "tid", "start_ns", "end_ns")}
    )
    n = len(ranges)
    order = thread_order(ranges) if n else np.zeros(0, dtype=np.int64)
    nested = nesting(ranges, order)  # levels and parents among these ranges, as nsys's
    level, parent = nested.level, nested.parent

    ops = _gpu_ops(runtime, kernels, memcpy, memset)
    calls = Calls(ops["pid"], ops["tid"], ops["r_start"], ops["r_end"], np.arange(len(ops["pid"])))
    lo, hi = enclosed_calls(calls, ranges, order)
    idx = np.flatnonzero(hi > lo)
    if len(idx):
        corr, o_pid, o_tid = ops["corr"], ops["pid"], ops["tid"]
        first_call = np.r_[
            True, (o_pid[1:] != o_pid[:-1]) | (o_tid[1:] != o_tid[:-1]) | (corr[1:] != corr[:-1])
        ]
        distinct = np.r_[0, np.cumsum(first_call)]
        p_start = _slice_reduce(np.minimum, ops["start_ns"], lo[idx], hi[idx])
        p_end = _slice_reduce(np.maximum, ops["end_ns"], lo[idx], hi[idx])
        n_ops = distinct[hi[idx]] - distinct[lo[idx]]
    else:
        p_start = p_end = n_ops = np.array([], dtype=np.int64)

    # Children with GPU work, counted on their parent.
    child_parent = parent[idx]
    children = np.bincount(child_parent[child_parent >= 0], minlength=n)[idx] if n else idx

    rows = nvtx.index.to_numpy()[sel]
    out = nvtx[_TRACE_COLS].iloc[sel[idx]]
    out.insert(0, "nvtx_row", rows[idx])
    out["level"] = level[idx]
    out["proj_start_ns"] = p_start.astype(np.int64)
    out["proj_end_ns"] = p_end.astype(np.int64)
    out["proj_duration_ns"] = out["proj_end_ns"] - out["proj_start_ns"]
    out["gpu_ops"] = np.asarray(n_ops, dtype=np.int64)
    out["children"] = np.asarray(children, dtype=np.int64)
    out["parent"] = np.where(parent[idx] >= 0, rows[np.maximum(parent[idx], 0)], -1)
    out = out.sort_values(["proj_start_ns", "proj_duration_ns"], ascending=[True, False])
    return out.set_index("nvtx_row").rename_axis(None)


def nvtx_gpu_projection(trace: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (domain, range, style) summary of :func:`project_nvtx_to_gpu` (nsys's
    ``nvtx_gpu_proj_sum``; its "Range" column is ``domain:range``): ``domain, range, style,
    instances, proj_total_ns, range_total_ns, gpu_ops, proj_avg_ns, proj_med_ns, proj_min_ns,
    proj_max_ns, proj_std_ns, avg_gpu_ops, avg_level, avg_children``, sorted by
    ``proj_total_ns`` descending, then by "domain:range". ``by``: more group keys (e.g.
    ``["rank"]``: one summary per rank in one pass), leading the output columns; values must
    not be NA."""
    keys = [*by, "domain", "range", "style"]
    # Factorize the texts once for both groupbys (they come back as text).
    trace = trace.assign(**{k: pd.Categorical(trace[k]) for k in keys})
    stats = duration_stats(trace, keys, value="proj_duration_ns")
    stats = stats.drop(columns="time_pct").rename(
        columns={
            "total_ns": "proj_total_ns",
            "avg_ns": "proj_avg_ns",
            "med_ns": "proj_med_ns",
            "min_ns": "proj_min_ns",
            "max_ns": "proj_max_ns",
            "std_ns": "proj_std_ns",
        }
    )
    extra = (
        trace.groupby(keys, sort=False, observed=True)
        .agg(
            range_total_ns=("duration_ns", "sum"),
            gpu_ops=("gpu_ops", "sum"),
            avg_gpu_ops=("gpu_ops", "mean"),
            avg_level=("level", "mean"),
            avg_children=("children", "mean"),
        )
        .reset_index()
    )
    for k in keys:
        extra[k] = as_text(extra[k])
    out = stats.merge(extra, on=keys, how="left")
    for col in ("range_total_ns", "gpu_ops"):
        out[col] = out[col].astype(np.int64)
    for col in ("avg_gpu_ops", "avg_level", "avg_children"):
        out[col] = out[col].astype(np.float64)
    label = join_text(out["domain"], ":", out["range"])
    out = out.assign(_label=label).sort_values(
        ["proj_total_ns", "_label"], ascending=[False, True], kind="stable"
    )
    return out.drop(columns="_label").reset_index(drop=True)[[*by, *PROJECTION_SUMMARY_COLUMNS]]
