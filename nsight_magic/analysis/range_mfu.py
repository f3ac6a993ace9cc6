"""HFU and MFU per NVTX range of an ncu run, and the frames the ncu view shows.

A range's numbers cover only what ncu profiled. A drill-down usually profiles 1 launch of the
32 in a range: its hardware FLOPs over the whole range's time would read as a utilisation 32
times too low. So ``hfu_frac`` (and MFU from the GEMM ops around the profiled launches) is
FLOPs over the time of the profiled launches, and every row says ``launches_profiled`` of
``launches_total`` (``coverage``). Model FLOPs the user gives for a range are the whole range's:
their MFU is over the whole range's time (``range_time_ns``), never over a part of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import BadArgumentError
from ..vocabulary.arguments import dtype_arg, flops_arg, frame_arg
from ..vocabulary.nvtx_names import CAPTURE_RANGE, NVTX_DOMAIN, TARGET_RANGE
from .mfu import (
    PHASE_TIME_SOURCE,
    _launch_ops,
    _peak,
    kernel_utilisation,
    launch_dtype,
    launch_times,
    same_range,
)
from .phases import phase_totals
from .plausible import blank_impossible
from .torch_ops import parse_op_range

__all__ = ["RANGE_COLUMNS", "mfu_frames", "range_utilisation"]

RANGE_COLUMNS = [
    "domain", "range", "label", "launches_profiled", "launches_total", "coverage", "dtype",
    "hw_flops", "model_flops", "model_flops_source", "time_ns", "time_source",
    "range_time_ns", "range_time_source", "peak_flops_per_s", "peak_source", "hfu_frac", "mfu_frac",
    "reason",
]  # fmt: skip

NO_TOTAL = "the range's launch count needs the nsys run this was picked from"
NO_RANGE_TIME = (
    "given for the whole range, but only {coverage} and no time of the whole range is known: "
    "pass time_ns= for it, or profile from an %%nsys run"
)


def _lookup(
    mapping: Mapping[Any, float] | None, domain: str, name: str, arg: str = "flops"
) -> float | None:
    """A value keyed by range name, ``(domain, range)``, ``"domain:range"`` (as nsys stats
    prints it) or ``"domain@range"`` (as ncu's filters write it); two of them at once is a
    ``BadArgumentError`` (which one was meant cannot be known)."""
    if not mapping:
        return None
    spellings = ((domain, name), name, f"{domain}:{name}", f"{domain}@{name}" if domain else name)
    keys = list(dict.fromkeys(k for k in spellings if k in mapping))
    if len(keys) > 1:
        raise BadArgumentError(same_range(keys, domain, name, arg, "range_utilisation()"))
    return float(mapping[keys[0]]) if keys else None


def _coverage(profiled: int, total: int | None) -> str:
    if total is None:
        return f"{profiled} launch(es) profiled; {NO_TOTAL}"
    return f"{profiled}/{total} launches profiled"


def _time_source(sources: pd.Series) -> str:
    """Where the launches' times came from: "nsys", "ncu", or "ncu and nsys" for both."""
    return " and ".join(sorted(set(sources)))


def range_utilisation(
    points: pd.DataFrame,
    nvtx: pd.DataFrame,
    *,
    kernels: pd.DataFrame | None = None,
    nsys_kernels: pd.DataFrame | None = None,
    projection: pd.DataFrame | None = None,
    phases: pd.DataFrame | None = None,
    range_launches: Mapping[Any, int] | None = None,
    time_ns: Mapping[Any, float] | None = None,
    flops: Mapping[Any, float] | None = None,
    gpu_name: str | None = None,
    dtype: str | None = None,
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """Per NVTX range of the ncu launches (PyTorch op ranges left out: see ``mfu.op_mfu``):
    the columns of :data:`RANGE_COLUMNS`.

    ``nvtx``: ``NcuReport.nvtx_ranges()``. Coverage: ``launches_profiled`` (ncu launches in
    the range), ``launches_total`` (``range_launches``, keyed like ``flops``: the kernels nsys
    saw in the range; NA when not given), ``coverage`` ("k/n launches profiled").
    HFU: the summed ``flop_count_total`` of the profiled launches over their summed time
    (``time_ns``: nsys real-clock durations of the same launches from ``nsys_kernels`` +
    ``kernels``, ``mfu.launch_times``, else ncu's). Model FLOPs: ``flops`` (keyed by range
    name, ``(domain, range)``, ``"domain:range"`` or ``"domain@range"``) -> "given", over
    ``range_time_ns``: ``time_ns`` given (same keys) -> "given", else the nsys phase time
    (``nvtx_phases()``'s ``phase_total_ns``: work launched by any thread while the range was
    open; a backward pass runs on autograd's thread) -> ``mfu.PHASE_TIME_SOURCE``, else the
    nsys ``nvtx_gpu_projection()``'s ``proj_total_ns`` -> "nsys", else the profiled launches' time
    when they are all of the range's launches; else the GEMM op calls around the profiled
    launches, each counted once -> "derived", over the profiled launches' time; else NaN, and
    ``model_flops_source`` says why."""
    frame_arg(points, "points", "range_utilisation()", made_by="NcuRun.roofline()")
    frame_arg(nvtx, "nvtx", "range_utilisation()", made_by="NcuReport.nvtx_ranges()")
    flops = flops_arg(flops, "flops", "range_utilisation()")
    time_ns = flops_arg(time_ns, "time_ns", "range_utilisation()", unit="nanoseconds")
    launch_counts = flops_arg(range_launches, "range_launches", "range_utilisation()", "launches")
    dtype = dtype_arg(dtype, "range_utilisation()")
    ranges = nvtx[["launch", "domain", "range"]].drop_duplicates()
    ranges = ranges[[parse_op_range(str(t)) is None for t in ranges["range"]]]
    # the mark %%ncu --nvtx puts around the user's range is ours, not a range of the workload
    ours = ranges["range"].isin([TARGET_RANGE, CAPTURE_RANGE])
    ranges = ranges[~((ranges["domain"] == NVTX_DOMAIN) & ours)]
    timed = points.merge(launch_times(points, kernels, nsys_kernels), on="launch")
    merged = ranges.merge(timed, on="launch")
    ops = _launch_ops(nvtx) if len(nvtx) else pd.DataFrame(columns=["launch", "op_key", "flops"])
    proj: dict[tuple[str, str], float] = {}
    if projection is not None and len(projection):
        totals = projection.groupby(["domain", "range"], sort=False)["proj_total_ns"].sum()
        proj = {(str(d), str(r)): float(v) for (d, r), v in totals.items()}
    phase = phase_totals(phases)
    rows = []
    for (domain, name), group in merged.groupby(["domain", "range"], sort=False):
        profiled = int(group["launch"].nunique())
        total_given = _lookup(launch_counts, domain, name, "range_launches")
        total = None if total_given is None else int(total_given)
        coverage = _coverage(profiled, total)
        hw = float(group["flop_count_total"].sum(skipna=False))
        t = float(group["time_ns"].sum())
        t_source = _time_source(group["time_source"])
        given_time = _lookup(time_ns, domain, name, "time_ns")
        if given_time is not None:
            range_t, range_source = given_time, "given"
        elif (domain, name) in phase:
            range_t, range_source = phase[(domain, name)], PHASE_TIME_SOURCE
        elif (domain, name) in proj:
            range_t, range_source = proj[(domain, name)], "nsys"
        elif total is not None and profiled >= total:
            range_t, range_source = t, t_source
        else:
            range_t, range_source = np.nan, ""
        model = _lookup(flops, domain, name)
        if model is not None:
            m_source, m_time = "given", range_t
            if np.isnan(range_t):
                m_source = NO_RANGE_TIME.format(coverage=coverage)
        else:
            inside = ops[ops["launch"].isin(group["launch"])].drop_duplicates("op_key")
            gemms = inside["flops"].dropna()
            model, m_time = (float(gemms.sum()) if len(gemms) else np.nan), t
            m_source = (
                f"derived: {len(gemms)} GEMM op call(s) of the profiled launches"
                if len(gemms)
                else "no GEMM op range around the profiled launches: pass flops= for the range"
            )
        top = group.loc[group["flop_count_total"].fillna(0).idxmax()]
        range_dtype = dtype or launch_dtype(top.to_dict())
        pk = _peak(gpu_name, range_dtype, peak_flops)
        rows.append(
            {
                "domain": domain,
                "range": name,
                "label": f"{domain}:{name}",
                "launches_profiled": profiled,
                "launches_total": total,
                "coverage": coverage,
                "dtype": range_dtype,
                "hw_flops": hw,
                "model_flops": model,
                "model_flops_source": m_source,
                "time_ns": t,
                "time_source": t_source,
                "range_time_ns": range_t,
                "range_time_source": range_source,
                "peak_flops_per_s": pk.flops_per_s,
                "peak_source": pk.source,
                # utilisation = FLOPs / seconds / peak
                "hfu_frac": hw / (t * 1e-9) / pk.flops_per_s if t > 0 else np.nan,
                "mfu_frac": model / (m_time * 1e-9) / pk.flops_per_s if m_time > 0 else np.nan,
            }
        )
    out = blank_impossible(pd.DataFrame(rows, columns=RANGE_COLUMNS[:-1]), "label")
    out["launches_total"] = pd.array(out["launches_total"].tolist(), dtype="Int64")
    return out


def mfu_frames(
    points: pd.DataFrame,
    ncu_kernels: pd.DataFrame,
    *,
    nvtx: pd.DataFrame | None = None,
    nsys_kernels: pd.DataFrame | None = None,
    projection: pd.DataFrame | None = None,
    phases: pd.DataFrame | None = None,
    range_launches: Mapping[Any, int] | None = None,
    gpu_name: str | None = None,
) -> dict[str, pd.DataFrame]:
    """What the ncu view shows: ``{"kernels": kernel_utilisation(...), "ranges":
    range_utilisation(...)}`` with a parent nsys run's kernels/projection/launch counts when
    given ("ranges" is empty without NVTX ranges)."""
    kernels = kernel_utilisation(
        points, kernels=ncu_kernels, nvtx=nvtx, nsys_kernels=nsys_kernels, gpu_name=gpu_name
    )
    ranges = pd.DataFrame(columns=RANGE_COLUMNS)
    if nvtx is not None and len(nvtx):
        ranges = range_utilisation(
            points,
            nvtx,
            kernels=ncu_kernels,
            nsys_kernels=nsys_kernels,
            projection=projection,
            phases=phases,
            range_launches=range_launches,
            gpu_name=gpu_name,
        )
    return {"kernels": kernels, "ranges": ranges}
