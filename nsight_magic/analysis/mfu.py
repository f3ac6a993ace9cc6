"""Model/hardware FLOPs utilisation per kernel and per NVTX range.

    utilisation = FLOPs / time / dense peak FLOP/s

- FLOPs: hardware FLOPs counted by ncu (``roofline_points(...)["flops_total"]``) -> HFU, or model
  FLOPs the user gives (``flops=``, e.g. from :func:`transformer_flops`) -> MFU.
- time: from an nsys kernel table / NVTX GPU projection when given (real clocks: ncu locks
  clocks and flushes caches, so its durations run long), else ncu's own duration.
- peak: the datasheet dense figure for the GPU and data type (:mod:`.gpu_peaks`) or ``peak_flops=``.
Every output row says which it used: ``time_source``, ``flops_source``, ``peak_source``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .gpu_peaks import gpu_key, lookup_peak

__all__ = ["kernel_mfu", "launch_dtype", "model_mfu", "range_mfu", "transformer_flops"]

# tensor op-path source type -> gpu_peaks dtype
_TENSOR_DTYPES = {
    "bf16": "bf16",
    "fp16": "fp16",
    "tf32": "tf32",
    "fp8": "fp8",
    "fp64": "fp64_tensor",
}


def launch_dtype(point: Mapping[str, Any]) -> str:
    """The data type whose peak applies to one roofline point: the tensor op path's source type
    when tensor cores did the work, else the SIMT precision with the most FLOPs."""
    path = str(point.get("tensor_op_path") or "")
    counts = {p: point.get(f"flop_count_{p}", 0.0) for p in ("fp32", "fp64", "fp16", "tensor")}
    counts = {p: (0.0 if pd.isna(v) else float(v)) for p, v in counts.items()}
    if path and counts["tensor"] >= max(counts["fp32"], counts["fp64"], counts["fp16"]):
        src = path.split("src_", 1)[1].split("_dst", 1)[0].split("_sparsity", 1)[0]
        return _TENSOR_DTYPES.get(src, src)
    simt = max(("fp32", "fp64", "fp16"), key=lambda p: counts[p])
    return simt


def _peak(gpu_name: str | None, dtype: str, peak_flops: float | None) -> tuple[float, str]:
    if peak_flops is not None:
        return float(peak_flops), "user"
    if not gpu_name:
        raise LookupError("No GPU name to look a peak up for; pass gpu_name= or peak_flops=.")
    return lookup_peak(gpu_name, dtype), f"datasheet {gpu_key(gpu_name) or gpu_name} {dtype} dense"


def _nsys_times(
    points: pd.DataFrame, kernels: pd.DataFrame | None, nsys_kernels: pd.DataFrame
) -> list[float]:
    """nsys duration of each ncu launch: same kernel (mangled name, else demangled, else short
    name), the k-th ncu launch of a kernel taking the k-th nsys instance in start order."""
    nsys = nsys_kernels.sort_values("start_ns", kind="stable")
    queues: dict[tuple[str, str], deque[float]] = defaultdict(deque)
    for column in ("mangled_name", "name", "short_name"):
        if column in nsys:
            for key, duration in zip(nsys[column], nsys["duration_ns"], strict=False):
                queues[(column, str(key))].append(float(duration))
    names = points.set_index("launch")["name"]
    info = kernels.set_index("launch") if kernels is not None else None
    times = []
    for launch in points["launch"]:
        candidates = [("short_name", str(names[launch]))]
        if info is not None and launch in info.index:
            candidates = [
                ("mangled_name", str(info.at[launch, "mangled"])),
                ("name", str(info.at[launch, "demangled"])),
                *candidates,
            ]
        time = np.nan
        for key in candidates:
            if queues.get(key):
                time = queues[key].popleft()
                break
        times.append(time)
    return times


def kernel_mfu(
    points: pd.DataFrame,
    *,
    kernels: pd.DataFrame | None = None,
    nsys_kernels: pd.DataFrame | None = None,
    gpu_name: str | None = None,
    dtype: str | None = None,
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """Per launch: ``launch, name, dtype, flops, time_ns, time_source, achieved_flops_per_s,
    peak_flops, peak_source, mfu`` (a fraction; hardware FLOPs, so this is also the HFU).

    ``points``: :func:`~nsight_magic.analysis.roofline.roofline_points`; ``kernels``: the ncu
    ``kernels()`` frame (its mangled names match nsys exactly); ``nsys_kernels``: an nsys
    ``kernels()`` frame of the same workload for real-clock times. ``dtype``/``peak_flops``
    override the inferred data type / the datasheet peak."""
    out = points[["launch", "name"]].copy()
    out["dtype"] = [dtype or launch_dtype(row) for row in points.to_dict("records")]
    out["flops"] = points["flops_total"].astype(float)
    ncu_ns = points["duration_ns"].astype(float)
    if nsys_kernels is not None:
        nsys_ns = pd.Series(_nsys_times(points, kernels, nsys_kernels), index=points.index)
        out["time_ns"] = nsys_ns.fillna(ncu_ns)
        out["time_source"] = np.where(nsys_ns.notna(), "nsys", "ncu")
    else:
        out["time_ns"] = ncu_ns
        out["time_source"] = "ncu"
    out["achieved_flops_per_s"] = out["flops"] / (out["time_ns"] * 1e-9)
    peaks = [_peak(gpu_name, d, peak_flops) for d in out["dtype"]]
    out["peak_flops"] = [p for p, _ in peaks]
    out["peak_source"] = [s for _, s in peaks]
    out["mfu"] = out["achieved_flops_per_s"] / out["peak_flops"]
    return out.reset_index(drop=True)


def _lookup(mapping: Mapping[Any, float] | None, domain: str, name: str) -> float | None:
    if not mapping:
        return None
    for key in ((domain, name), name, f"{domain}@{name}" if domain else name):
        if key in mapping:
            return float(mapping[key])
    return None


def range_mfu(
    points: pd.DataFrame,
    nvtx: pd.DataFrame,
    *,
    projection: pd.DataFrame | None = None,
    time_ns: Mapping[Any, float] | None = None,
    flops: Mapping[Any, float] | None = None,
    gpu_name: str | None = None,
    dtype: str | None = None,
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """Per NVTX range: ``domain, range, launches, hw_flops, model_flops, flops_source, time_ns,
    time_source, dtype, peak_flops, peak_source, hfu, mfu``.

    ``nvtx``: ``NcuReport.nvtx_ranges()`` (launch, domain, range); hardware FLOPs of a range are
    the summed ``flops_total`` of the profiled launches inside it. Time: ``time_ns`` (keyed by
    range name, ``(domain, range)`` or ``"domain@range"``) -> "given", else the nsys
    ``nvtx_gpu_projection()`` frame's ``proj_total_ns`` -> "nsys", else the launches' summed ncu
    durations -> "ncu". ``flops`` gives model FLOPs per range (same keys): ``mfu`` uses them,
    else the hardware FLOPs (``flops_source`` says which); ``hfu`` always uses hardware FLOPs."""
    merged = nvtx[["launch", "domain", "range"]].drop_duplicates().merge(points, on="launch")
    proj: dict[tuple[str, str], float] = {}
    if projection is not None:
        totals = projection.groupby(["domain", "range"], sort=False)["proj_total_ns"].sum()
        proj = {(str(d), str(r)): float(v) for (d, r), v in totals.items()}
    rows = []
    for (domain, name), group in merged.groupby(["domain", "range"], sort=False):
        hw = float(group["flops_total"].sum(skipna=False))
        given = _lookup(time_ns, domain, name)
        if given is not None:
            t, source = given, "given"
        elif (domain, name) in proj:
            t, source = proj[(domain, name)], "nsys"
        else:
            t, source = float(group["duration_ns"].sum()), "ncu"
        model = _lookup(flops, domain, name)
        top = group.loc[group["flops_total"].fillna(0).idxmax()]
        range_dtype = dtype or launch_dtype(top.to_dict())
        peak, peak_source = _peak(gpu_name, range_dtype, peak_flops)
        used = model if model is not None else hw
        rows.append(
            {
                "domain": domain,
                "range": name,
                "launches": int(group["launch"].nunique()),
                "hw_flops": hw,
                "model_flops": np.nan if model is None else model,
                "flops_source": "model" if model is not None else "hardware",
                "time_ns": t,
                "time_source": source,
                "dtype": range_dtype,
                "peak_flops": peak,
                "peak_source": peak_source,
                "hfu": hw / (t * 1e-9) / peak,
                "mfu": used / (t * 1e-9) / peak,
            }
        )
    return pd.DataFrame(rows)


def model_mfu(
    projection: pd.DataFrame,
    flops: Mapping[Any, float],
    *,
    gpu_name: str | None = None,
    dtype: str = "bf16",
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """MFU per NVTX range from model FLOPs alone (no ncu run needed): ``flops`` maps a range
    (its name, ``(domain, range)`` or ``"domain@range"``) to the FLOPs the model does in it; the
    time is the range's GPU-projected time from nsys (``nvtx_gpu_projection()``: real clocks).

    Columns: ``domain, range, model_flops, time_ns, time_source, dtype, peak_flops, peak_source,
    achieved_flops_per_s, mfu``. A range named in ``flops`` that nsys did not see raises
    ``KeyError`` naming it, rather than silently dropping a phase the user asked about."""
    peak, peak_source = _peak(gpu_name, dtype, peak_flops)
    totals = projection.groupby(["domain", "range"], sort=False)["proj_total_ns"].sum()
    rows = []
    found: set[Any] = set()
    for (domain, name), t in totals.items():
        for key in ((domain, name), name, f"{domain}@{name}" if domain else name):
            if key in flops:
                found.add(key)
                model = float(flops[key])
                per_s = model / (float(t) * 1e-9) if t > 0 else np.nan
                rows.append(
                    {
                        "domain": domain,
                        "range": name,
                        "model_flops": model,
                        "time_ns": float(t),
                        "time_source": "nsys",
                        "dtype": dtype,
                        "peak_flops": peak,
                        "peak_source": peak_source,
                        "achieved_flops_per_s": per_s,
                        "mfu": per_s / peak,
                    }
                )
                break
    missing = [k for k in flops if k not in found]
    if missing:
        raise KeyError(f"No NVTX range in the nsys report matches {missing!r}.")
    return pd.DataFrame(rows)


def transformer_flops(
    n_params: float,
    tokens: float,
    *,
    n_layers: int | None = None,
    seq_len: int | None = None,
    d_model: int | None = None,
    training: bool = False,
    causal: bool = False,
) -> float:
    """Model FLOPs of a dense transformer over ``tokens`` tokens (PaLM, Chowdhery et al. 2022,
    appendix B): per token 2N forward (6N with backward), plus self-attention 4·L·T·d forward
    (12·L·H·Q·T with backward) when ``n_layers``, ``seq_len`` and ``d_model`` are given.
    ``causal=True`` halves the attention term (only half the score matrix is computed)."""
    per_token = 2.0 * n_params
    if n_layers is not None and seq_len is not None and d_model is not None:
        attention = 4.0 * n_layers * seq_len * d_model
        per_token += attention / 2 if causal else attention
    elif any(v is not None for v in (n_layers, seq_len, d_model)):
        raise ValueError("The attention term needs all of n_layers, seq_len and d_model.")
    return per_token * (3.0 if training else 1.0) * tokens
