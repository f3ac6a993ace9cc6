"""Phase time: the GPU work launched by ANY thread of a range's process while the range was open.

nsys projects an NVTX range onto the GPU through the ops launched on the range's own thread
(``nvtx_projection``, equal to ``nsys stats --report nvtx_gpu_proj_sum``). A training step
breaks that rule's assumption: autograd launches the backward kernels from its own thread, so
a push/pop ``train@bwd`` around ``loss.backward()`` on the main thread holds one op of its
hundreds (measured: 960 ns of 6.18 ms). A *phase* counts every op whose launching CUDA call,
on any thread of the range's process, starts at or after the range's start and ends by its end
(nsys's containment test, without the same-thread condition). Its time is projected as nsys
projects a range: from the first such op's start to the last one's end. Ranges that end on
another thread (start/end ranges) get a phase too; nsys leaves them out.

Processes stay apart: a range of rank 0 counts only rank 0's work (ops are joined to their call
by process, and a range only sees calls of its own process; several reports are phased one by
one, ``RankedReport``). PyTorch's op ranges get no phase: one op call runs on one thread, and
its own-thread projection is already its whole work; thousands of them would only cost time.

``phase_total_ns`` can differ from ``proj_total_ns`` only when work was launched from another
thread while the range was open: the views show it where it does, and MFU uses it. Any thread
means any: a thread that prefetches data or runs a second model while the range is open counts
too (the range's process did that work while the range was open).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import NVTX_DOMAIN
from .attribution import enclosed_any_thread, launch_calls
from .kernels import as_text
from .text import join_text
from .torch_ops import op_range_mask

__all__ = [
    "PHASE_COLUMNS",
    "drill_phases",
    "kernel_phases",
    "phase_summary",
    "phase_totals",
    "phases_by_kernel_name",
    "project_phases",
    "with_phases",
]

PHASE_COLUMNS = [
    "domain", "range", "style", "instances", "range_total_ns", "phase_total_ns", "phase_gpu_ops",
]  # fmt: skip
_TRACE_COLUMNS = ["domain", "range", "style", "start_ns", "end_ns", "duration_ns", "pid"]


def _ops(runtime: pd.DataFrame, *frames: pd.DataFrame | None) -> pd.DataFrame:
    """GPU ops (kernels, copies, sets) with their launching call: ``pid, start_ns, end_ns``
    (the op's), ``c_start, c_end, corr`` (the call's), sorted by (pid, call start, corr).
    Ops without a recorded call are dropped, as nsys's inner join does."""
    parts = [f for f in frames if f is not None and len(f)]
    cols = ["pid", "start_ns", "end_ns", "c_start", "c_end", "corr"]
    if not parts or runtime.empty:
        return pd.DataFrame({c: np.array([], dtype=np.int64) for c in cols})
    ops = pd.concat(
        [f[["pid", "correlation_id", "start_ns", "end_ns"]] for f in parts], ignore_index=True
    )
    calls = launch_calls(ops, runtime)
    row = calls.row
    out = pd.DataFrame(
        {
            "pid": calls.pid,
            "start_ns": ops["start_ns"].to_numpy(np.int64)[row],
            "end_ns": ops["end_ns"].to_numpy(np.int64)[row],
            "c_start": calls.start,
            "c_end": calls.end,
            "corr": ops["correlation_id"].to_numpy(np.int64)[row],
        }
    )
    return out.sort_values(["pid", "c_start", "corr"], kind="stable").reset_index(drop=True)


def project_phases(
    nvtx: pd.DataFrame,
    runtime: pd.DataFrame,
    kernels: pd.DataFrame | None,
    memcpy: pd.DataFrame | None = None,
    memset: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per NVTX range (PyTorch op ranges left out) with GPU work in its phase: ``domain, range,
    style, start_ns, end_ns, duration_ns, pid`` + ``phase_start_ns, phase_end_ns, phase_duration_ns,
    phase_gpu_ops`` (distinct launching calls), indexed by the range's row in ``nvtx``.

    Inputs as for ``nvtx_projection.project_nvtx_to_gpu``: ``nvtx()``, ``cuda_api()`` (calls
    need ``pid, tid, correlation_id, start_ns, end_ns``) and the GPU op frames."""
    ranges = nvtx.loc[~op_range_mask(nvtx)]
    ops = _ops(runtime, kernels, memcpy, memset)
    g_start, g_end, corr = (ops[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "corr"))
    n = len(ranges)
    p_start = np.zeros(n, dtype=np.int64)
    p_end = np.zeros(n, dtype=np.int64)
    n_ops = np.zeros(n, dtype=np.int64)
    pid, start, end = (ops[c].to_numpy(np.int64) for c in ("pid", "c_start", "c_end"))
    for i, inside in enclosed_any_thread(pid, start, end, ranges):
        p_start[i] = g_start[inside].min()
        p_end[i] = g_end[inside].max()
        n_ops[i] = len(np.unique(corr[inside]))  # a graph launch's nodes share one call
    keep = n_ops > 0
    out = ranges.loc[keep, _TRACE_COLUMNS].copy()
    out["phase_start_ns"] = p_start[keep]
    out["phase_end_ns"] = p_end[keep]
    out["phase_duration_ns"] = p_end[keep] - p_start[keep]
    out["phase_gpu_ops"] = n_ops[keep]
    return out


def phase_summary(trace: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (``by``..., domain, range, style) of :func:`project_phases`: ``instances`` (ranges
    with phase work), ``range_total_ns`` (their CPU durations), ``phase_total_ns``,
    ``phase_gpu_ops``, longest first."""
    keys = [*by, "domain", "range", "style"]
    if trace.empty:
        texts = {"domain", "range", "style"}
        return pd.DataFrame(
            {c: pd.Series([], dtype=str if c in texts else np.int64) for c in [*by, *PHASE_COLUMNS]}
        )
    out = (
        trace.groupby(keys, sort=False, observed=True)
        .agg(
            instances=("phase_duration_ns", "size"),
            range_total_ns=("duration_ns", "sum"),
            phase_total_ns=("phase_duration_ns", "sum"),
            phase_gpu_ops=("phase_gpu_ops", "sum"),
        )
        .reset_index()
    )
    for k in keys:
        out[k] = as_text(out[k]) if k in ("domain", "range", "style") else out[k]
    for c in ("instances", "range_total_ns", "phase_total_ns", "phase_gpu_ops"):
        out[c] = out[c].astype(np.int64)
    out = out.sort_values("phase_total_ns", ascending=False, kind="stable")
    return out.reset_index(drop=True)[[*by, *PHASE_COLUMNS]]


def phase_totals(phases: pd.DataFrame | None) -> dict[tuple[str, str], float]:
    """``{(domain, range): phase_total_ns}`` over styles, for MFU lookups ({} when None)."""
    if phases is None or phases.empty:
        return {}
    totals = phases.groupby(["domain", "range"], sort=False)["phase_total_ns"].sum()
    return {(str(d), str(r)): float(v) for (d, r), v in totals.items()}


def with_phases(projection: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """``projection`` (``nvtx_gpu_projection()``) + ``phase_total_ns, phase_gpu_ops`` per
    (domain, range, style). Ranges with phase work but no same-thread work (a push/pop range
    whose work all came from other threads, a start/end range ending on another thread) are
    added with 0 GPU time; ranges with neither are not listed. PyTorch op ranges, which get
    no phase (one op call runs on one thread), keep their projection as their phase.
    Existing columns keep their values and types."""
    keys = ["domain", "range", "style"]
    ph = phases[[*keys, "instances", "range_total_ns", "phase_total_ns", "phase_gpu_ops"]]
    ph = ph.rename(columns={"instances": "_instances", "range_total_ns": "_range_total_ns"})
    out = projection.merge(ph, on=keys, how="outer", indicator=True, sort=False)
    merged = out.pop("_merge")
    only = (merged == "right_only").to_numpy()
    own = (merged == "left_only").to_numpy()  # op ranges: their own thread is all they hold
    out.loc[own, "phase_total_ns"] = out.loc[own, "proj_total_ns"]
    out.loc[own, "phase_gpu_ops"] = out.loc[own, "gpu_ops"]
    known = {"instances": out.pop("_instances"), "range_total_ns": out.pop("_range_total_ns")}
    if only.any():
        for col in projection.columns:
            if col not in keys:
                out.loc[only, col] = known[col][only] if col in known else 0
    for col in projection.columns:
        if col not in keys:
            out[col] = out[col].astype(projection[col].dtype)
    out["phase_total_ns"] = out["phase_total_ns"].fillna(0).astype(np.int64)
    out["phase_gpu_ops"] = out["phase_gpu_ops"].fillna(0).astype(np.int64)
    return out


def kernel_phases(kernels: pd.DataFrame, launches: pd.DataFrame, nvtx: pd.DataFrame) -> pd.Series:
    """The phase each kernel (any GPU-op frame with ``pid, correlation_id``) was launched in:
    ``"domain:range"`` of the shortest of the user's NVTX ranges (not PyTorch op ranges, not
    nsight_magic's cell and statement ranges) open in its process, on any thread, around its
    launching call; "" when none. A backward kernel launched by autograd's thread reads
    ``train:train@bwd``, as the phase the user marked on the main thread. Index of
    ``kernels``."""
    out = pd.Series("", index=kernels.index, dtype=str)
    mine = ~op_range_mask(nvtx) & (nvtx["domain"] != NVTX_DOMAIN).to_numpy()
    ranges = nvtx.loc[mine]
    if ranges.empty or kernels.empty:
        return out
    # longest first: a shorter (inner) range that also holds the call overwrites its label
    ranges = ranges.assign(_d=ranges["end_ns"] - ranges["start_ns"])
    ranges = ranges.sort_values("_d", ascending=False, kind="stable")
    labels = join_text(ranges["domain"], ":", ranges["range"]).to_numpy(dtype=object)
    calls = launch_calls(kernels, launches)
    order = np.lexsort((calls.start, calls.pid))
    pid, start, end = calls.pid[order], calls.start[order], calls.end[order]
    phase = np.full(len(calls), "", dtype=object)
    for i, inside in enclosed_any_thread(pid, start, end, ranges):
        phase[order[inside]] = labels[i]
    values = np.full(len(kernels), "", dtype=object)
    values[calls.row] = phase
    return pd.Series(values, index=kernels.index, dtype=object).astype(str)


def phases_by_kernel_name(kernels: pd.DataFrame, phases: pd.Series) -> pd.DataFrame:
    """Per kernel name, the phase (:func:`kernel_phases`) it spent the most GPU time in:
    ``name, phase``; names launched in no phase are left out."""
    frame = pd.DataFrame(
        {
            "name": kernels["name"].astype(str).to_numpy(),
            "phase": phases.astype(str).to_numpy(),
            "duration_ns": kernels["duration_ns"].to_numpy(np.int64),
        }
    )
    frame = frame[frame["phase"] != ""]
    time = frame.groupby(["name", "phase"], sort=False)["duration_ns"].sum().reset_index()
    time = time.sort_values(["name", "duration_ns", "phase"], ascending=[True, False, True])
    return time.drop_duplicates("name")[["name", "phase"]].reset_index(drop=True)


def drill_phases(
    kernels: pd.DataFrame, phases: pd.Series, name: str, instance: int, count: int
) -> list[str]:
    """The phases (:func:`kernel_phases` of an nsys run: ``kernels`` and its ``phases``) of
    the launches an ncu drill-down of kernel ``name`` profiled: instances ``instance`` ..
    ``instance + count - 1`` of that name in start order (the picker's ``--launch-skip`` /
    ``--launch-count``, counted within the cell as nsys saw it). ncu's own NVTX column is
    per thread and stays empty for a kernel autograd launched; the nsys run knows the phase.
    "" for an instance the nsys run does not have."""
    mine = kernels["name"].astype(str).to_numpy() == name
    order = np.argsort(kernels["start_ns"].to_numpy()[mine], kind="stable")
    labels = phases.to_numpy(dtype=object)[mine][order]
    return [
        str(labels[i]) if 0 <= i < len(labels) else "" for i in range(instance, instance + count)
    ]
