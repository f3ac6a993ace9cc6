"""Hardware and model FLOPs utilisation (HFU, MFU) per kernel, NVTX range and PyTorch op.

    utilisation = FLOPs / time / dense peak FLOP/s of the data type

- HFU counts the FLOPs the hardware executed, as Nsight Compute measures them
  (``roofline_points(...)["flop_count_total"]``). Tensor cores compute whole tiles, so a GEMM whose
  sizes are not tile multiples executes more FLOPs than its math needs: HFU >= MFU.
- MFU counts model FLOPs only: given by the user (``flops=``), or derived where the math is
  known: a GEMM op's 2*M*N*K from the PyTorch op range around the launch
  (``model_flops.gemm_flops``; in ncu reports the launch's NVTX stack holds it when
  ``emit_nvtx(record_shapes=True)`` was on, in nsys reports ``--pytorch=autograd-shapes-nvtx``).
  Where no model FLOPs are known ``mfu_frac`` is NaN, never the hardware count.
- Op FLOPs belong to the op: an ``aten::addmm`` may launch a GEMM and a split-K reduction, and
  no kernel alone does the op's math. A kernel gets its op's FLOPs only when it is the op's
  only profiled launch; ranges and ops always get the FLOPs of the ops inside them.
- time: nsys kernel times / NVTX projections when given (real clocks: ncu locks clocks and
  flushes caches, so its durations run long), else ncu's own duration.
- peak: ``gpu_peaks.peak`` (derived from SMs x clock x per-SM rate) or ``peak_flops=``.

Every frame says which it used: ``time_source``, ``model_flops_source``, ``peak_flops_per_s``,
``peak_source``.
"""

from __future__ import annotations

import warnings
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import (
    BadArgumentError,
    EmptyResultWarning,
    MissingMetricsError,
    NvtxRangeNotFoundError,
    PeakUnknownError,
)
from ..vocabulary.arguments import dtype_arg, flops_arg, frame_arg, number_arg
from ..vocabulary.precisions import SIMT_PRECISIONS, TENSOR, tensor_dtype
from .gpu_peaks import Peak, peak
from .model_flops import gemm_flops, transformer_flops
from .names import short_names
from .ncu_metrics import metrics_hint, parse_tensor_path
from .phases import phase_totals
from .plausible import blank_impossible
from .text import join_text
from .torch_ops import parse_op_range, parse_shapes, range_model_flops

__all__ = [
    "KERNEL_COLUMNS",
    "MODEL_MFU_COLUMNS",
    "NO_OP_RANGE",
    "PHASE_TIME_SOURCE",
    "kernel_utilisation",
    "launch_dtype",
    "launch_model_flops",
    "launch_times",
    "model_mfu",
    "op_mfu",
    "require_flop_counts",
    "transformer_flops",
]


def launch_dtype(point: Mapping[str, Any]) -> str:
    """The peak data type that applies to one roofline point: the tensor op path's source type
    when tensor cores did most of the work, else the SIMT precision with the most FLOPs
    (``precisions.PEAK_DTYPES``; half precision on the SIMT pipe is "fp16_simt")."""
    counts = {p.key: point.get(p.count_column, 0.0) for p in (*SIMT_PRECISIONS, TENSOR)}
    counts = {k: (0.0 if pd.isna(v) else float(v)) for k, v in counts.items()}
    path = parse_tensor_path(str(point.get("tensor_op_path") or ""))
    if path is not None and counts["tensor"] >= max(counts[p.key] for p in SIMT_PRECISIONS):
        return tensor_dtype(path.src)
    simt = max(SIMT_PRECISIONS, key=lambda p: counts[p.key])
    return simt.peak_dtype or simt.key


def _peak(gpu_name: str | None, dtype: str, peak_flops: float | None) -> Peak:
    if peak_flops is not None:
        return Peak(number_arg(peak_flops, "peak_flops", "MFU"), "user (peak_flops=)")
    if not gpu_name:
        raise PeakUnknownError("No GPU name to look a peak up for; pass gpu_name= or peak_flops=.")
    return peak(gpu_name, dtype)


def same_range(keys: list[Any], domain: str, name: str, arg: str, where: str) -> str:
    """The message for two spellings of one range in ``arg`` (``{"cell": 1, ":cell": 2}``):
    which value was meant cannot be guessed, and neither key is unknown."""
    label = f"{domain}:{name}"
    shown = " and ".join(repr(k) for k in keys)
    return f"{where}: {arg} keys {shown} name the same range {label!r}; keep one of them."


def require_flop_counts(points: pd.DataFrame, compute_capability: str | None = None) -> None:
    """Raise MissingMetricsError, with a fix that yields them, when a launch lacks the FLOP
    counts HFU needs (a ``--metrics`` run without the tensor op paths leaves them NaN)."""
    lacking = [
        p.count_column for p in (*SIMT_PRECISIONS, TENSOR) if points[p.count_column].isna().any()
    ]
    if lacking:
        raise MissingMetricsError(
            f"The report has no FLOP counts for {', '.join(lacking)} (the tensor pipe needs "
            f"the sm__ops_path_tensor_* metrics); {metrics_hint(compute_capability)}."
        )


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


def launch_times(
    points: pd.DataFrame, kernels: pd.DataFrame | None, nsys_kernels: pd.DataFrame | None
) -> pd.DataFrame:
    """Per ncu launch (rows of ``points``): ``launch, time_ns, time_source``: the nsys duration
    of the same launch when an nsys kernels frame is given and has it ("nsys": real clocks),
    else ncu's own duration ("ncu": locked clocks, flushed caches)."""
    ncu_ns = points["duration_ns"].astype(float).reset_index(drop=True)
    out = pd.DataFrame({"launch": points["launch"].to_numpy(), "time_ns": ncu_ns.to_numpy()})
    out["time_source"] = pd.Series(["ncu"] * len(out), dtype=object)
    if nsys_kernels is not None and len(points):
        nsys_ns = pd.Series(_nsys_times(points, kernels, nsys_kernels))
        out["time_ns"] = nsys_ns.fillna(ncu_ns).to_numpy()
        out["time_source"] = ["nsys" if ok else "ncu" for ok in nsys_ns.notna()]
    return out


def _launch_ops(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Per launch, the innermost PyTorch op range around it: ``launch, op_key, op, flops,
    label`` (``op_key`` = domain + text: one op call; ``flops`` NaN unless a GEMM)."""
    rows = []
    for launch, domain, text, level in nvtx[["launch", "domain", "range", "level"]].itertuples(
        index=False
    ):
        parsed = parse_op_range(str(text))
        if parsed is not None:
            # "\x1f" between domain and text, not NUL: pandas 2.0 groups strings with a NUL wrongly
            rows.append((launch, level, f"{domain}\x1f{text}", parsed.op, parsed.shapes))
    frame = pd.DataFrame(rows, columns=["launch", "level", "op_key", "op", "shapes"])
    frame = frame.sort_values(["launch", "level"]).drop_duplicates("launch", keep="last")
    pairs = zip(frame["op"], frame["shapes"], strict=True)
    flops = [gemm_flops(op, parse_shapes(shapes)) for op, shapes in pairs]
    frame["flops"] = [np.nan if f is None else f for f in flops]
    frame["label"] = join_text(frame["op"], " ", frame["shapes"])
    return frame.drop(columns="level").reset_index(drop=True)


def launch_model_flops(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Model FLOPs of each ncu launch from the PyTorch op range around it (``NcuReport
    .nvtx_ranges()``): ``launch, model_flops, model_flops_source``. A GEMM op's 2*M*N*K goes
    to its launch when that launch is the op call's only profiled one; otherwise (a split-K
    reduction beside the GEMM, or a non-GEMM op) the launch gets NaN and the reason."""
    ops = _launch_ops(nvtx)
    shared = ops.groupby("op_key")["launch"].transform("size").to_numpy()
    # per row in Python: string arithmetic on columns breaks on pandas 3.0 (see analysis.text)
    source = [
        f"no model FLOPs known for {op}"
        if pd.isna(flops)
        else f"{label}: FLOPs of an op with {n} launches"
        if n > 1
        else f"derived: 2*M*N*K of {label}"
        for op, label, flops, n in zip(ops["op"], ops["label"], ops["flops"], shared, strict=True)
    ]
    return pd.DataFrame(
        {
            "launch": ops["launch"].to_numpy(),
            "model_flops": np.where(shared > 1, np.nan, ops["flops"].astype(float)),
            "model_flops_source": pd.Series(source, dtype=object),
        }
    )


# Why a launch has no model FLOPs: what the MFU column's blank says.
NO_OP_RANGE = (
    "no PyTorch op range around this launch: run the cell under "
    "torch.autograd.profiler.emit_nvtx(record_shapes=True), or pass flops={launch: FLOPs}"
)

KERNEL_COLUMNS = [
    "launch", "name", "short_name", "dtype", "hw_flops", "model_flops", "model_flops_source",
    "time_ns", "time_source", "hw_flops_per_s", "model_flops_per_s", "peak_flops_per_s",
    "peak_source", "hfu_frac", "mfu_frac", "reason",
]  # fmt: skip


def kernel_utilisation(
    points: pd.DataFrame,
    *,
    kernels: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
    nsys_kernels: pd.DataFrame | None = None,
    model_flops: Mapping[int, float] | None = None,
    gpu_name: str | None = None,
    dtype: str | None = None,
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """Per ncu launch: ``launch, name, short_name, dtype, hw_flops, model_flops,
    model_flops_source, time_ns, time_source, hw_flops_per_s, model_flops_per_s,
    peak_flops_per_s, peak_source, hfu_frac, mfu_frac`` (fractions of the peak), ``reason``
    (why a fraction is blank: above 100% or negative, ``plausible.blank_impossible``).

    ``points``: ``roofline_points``; ``kernels``: ncu ``kernels()`` (its mangled names match
    nsys's); ``nvtx``: ncu ``nvtx_ranges()`` (PyTorch op ranges give model FLOPs, see
    :func:`launch_model_flops`); ``nsys_kernels``: an nsys ``kernels()`` frame of the same
    workload for real-clock times; ``model_flops``: launch -> FLOPs given by the user (source
    "given", wins over derived). ``dtype``/``peak_flops`` override the inferred data type /
    the derived peak."""
    frame_arg(points, "points", "kernel_utilisation()", made_by="NcuRun.roofline()")
    model_flops = flops_arg(model_flops, "model_flops", "kernel_utilisation()")
    launches = points["launch"].tolist()
    unknown = [k for k in model_flops or {} if k not in set(launches)]
    if unknown:  # ignored, its MFU would silently stay blank
        raise BadArgumentError(
            f"kernel_utilisation(): model_flops keys {unknown[:5]!r} are no launch of this "
            f"report; key flops= by the launch numbers of kernels() ({launches[:10]})."
        )
    dtype = dtype_arg(dtype, "kernel_utilisation()")
    out = points[["launch", "name"]].copy().reset_index(drop=True)
    out["short_name"] = short_names(out["name"]).to_numpy()
    out["dtype"] = [dtype or launch_dtype(row) for row in points.to_dict("records")]
    out["hw_flops"] = points["flop_count_total"].astype(float).to_numpy()
    out["model_flops"] = np.nan
    out["model_flops_source"] = NO_OP_RANGE
    if nvtx is not None and len(nvtx):
        derived = launch_model_flops(nvtx)
        flops_of = dict(zip(derived["launch"], derived["model_flops"], strict=True))
        source_of = dict(zip(derived["launch"], derived["model_flops_source"], strict=True))
        out["model_flops"] = [flops_of.get(launch, np.nan) for launch in out["launch"]]
        out["model_flops_source"] = [source_of.get(x, NO_OP_RANGE) for x in out["launch"]]
    for launch, flops in (model_flops or {}).items():
        at = out["launch"] == launch
        out.loc[at, "model_flops"] = float(flops)
        out.loc[at, "model_flops_source"] = "given"
    times = launch_times(points, kernels, nsys_kernels)
    out["time_ns"] = times["time_ns"].to_numpy()
    out["time_source"] = times["time_source"].to_numpy()
    seconds = out["time_ns"] * 1e-9
    out["hw_flops_per_s"] = out["hw_flops"] / seconds
    out["model_flops_per_s"] = out["model_flops"] / seconds
    peaks = [_peak(gpu_name, d, peak_flops) for d in out["dtype"]]
    out["peak_flops_per_s"] = [p.flops_per_s for p in peaks]
    out["peak_source"] = [p.source for p in peaks]
    out["hfu_frac"] = out["hw_flops_per_s"] / out["peak_flops_per_s"]
    out["mfu_frac"] = out["model_flops_per_s"] / out["peak_flops_per_s"]
    out = blank_impossible(
        out, join_text("launch ", out["launch"].astype(str), " ", out["short_name"])
    )
    return out[KERNEL_COLUMNS]


MODEL_MFU_COLUMNS = [
    "domain", "range", "model_flops", "model_flops_source", "backward_flops", "time_ns",
    "time_source", "dtype", "peak_flops_per_s", "peak_source", "model_flops_per_s", "mfu_frac",
    "reason",
]  # fmt: skip
# Where a range's time comes from when its phase is known (analysis.phases).
PHASE_TIME_SOURCE = "nsys phase: GPU work launched by any thread while the range was open"
# Why ``model_mfu`` found no range to report: no flops= and no GEMM op range to derive them from.
NO_GEMM_OPS = (
    "no PyTorch GEMM op ranges in this run to derive model FLOPs from: profile with "
    "%%nsys --pytorch shapes, or pass flops={range: FLOPs} "
    "(e.g. nsight_magic.transformer_flops(...))"
)


def model_mfu(
    projection: pd.DataFrame,
    flops: Mapping[Any, float] | None = None,
    *,
    nvtx: pd.DataFrame | None = None,
    phases: pd.DataFrame | None = None,
    gpu_name: str | None = None,
    dtype: str = "bf16",
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """MFU per NVTX range from model FLOPs alone (no ncu run needed), over the range's
    time on the GPU from nsys (real clocks): its phase time when ``phases`` is given
    (``nvtx_phases()``: the work launched by any thread of its process while it was open,
    ``time_source`` says so; a backward pass runs on autograd's thread), else its per-thread
    projection (``nvtx_gpu_projection()``, ``time_source`` "nsys"). A row whose FLOPs cannot
    fit its time at the peak gets no number and a ``reason`` (``plausible.blank_impossible``).

    Model FLOPs: ``flops`` maps a range (its name, ``(domain, range)``, ``"domain:range"`` or
    ``"domain@range"``) to the FLOPs the model does in it -> "given"; without ``flops``, the
    GEMM op calls inside each range of ``nvtx`` (``torch_ops.range_model_flops``, nsys
    ``--pytorch=autograd-shapes-nvtx``) -> "derived: N GEMM op calls", for every range that
    holds some. Columns: ``domain, range, model_flops, model_flops_source,
    backward_flops`` (of the derived FLOPs, those of GEMM calls inside autograd's backward
    nodes: the backward's share; NaN for given FLOPs), ``time_ns, time_source, dtype,
    peak_flops_per_s, peak_source, model_flops_per_s, mfu_frac, reason``
    (``model_flops_per_s`` is the same quantity as ``NcuRun.mfu()``'s: model FLOPs over time).
    A range named in ``flops`` that nsys did not see raises ``KeyError`` naming it, rather
    than silently dropping a phase the user asked about. An empty result carries the reason in
    ``frame.attrs["reason"]`` and warns it (``EmptyResultWarning``)."""
    frame_arg(projection, "projection", "model_mfu()", made_by="nvtx_gpu_projection()")
    dtype = dtype_arg(dtype, "model_mfu()") or "bf16"
    if flops is not None and not isinstance(flops, Mapping):
        raise BadArgumentError(
            f"model_mfu(): flops is {type(flops).__name__}; pass a mapping "
            "{range: FLOPs} (e.g. from nsight_magic.transformer_flops(...)) or None."
        )
    flops = flops_arg(flops, "flops", "model_mfu()")
    pk = _peak(gpu_name, dtype, peak_flops)
    sources: dict[Any, str] = {}
    backward: dict[Any, float] = {}
    if flops is None:
        if nvtx is None:
            raise BadArgumentError(
                "model_mfu needs flops= or the nvtx() frame to derive them from."
            )
        derived = range_model_flops(nvtx)
        keys = list(zip(derived["domain"], derived["range"], strict=True))
        flops = dict(zip(keys, derived["model_flops"], strict=True))
        calls = derived["gemm_calls"]
        sources = {k: f"derived: {n} GEMM op calls" for k, n in zip(keys, calls, strict=True)}
        backward = dict(zip(keys, derived["backward_flops"], strict=True))
    totals = projection.groupby(["domain", "range"], sort=False)["proj_total_ns"].sum()
    times = {(str(d), str(r)): (float(t), "nsys") for (d, r), t in totals.items()}
    times.update({k: (t, PHASE_TIME_SOURCE) for k, t in phase_totals(phases).items()})
    rows = []
    found: set[Any] = set()
    for (domain, name), (t, t_source) in times.items():
        # the spellings a user may key flops= by: (domain, range), the bare range, nsys stats'
        # "domain:range", and the domain@range form of nvtx.annotate
        spellings: list[Any] = [
            (domain, name),
            name,
            f"{domain}:{name}",
            f"{domain}@{name}" if domain else name,
        ]
        keys = list(dict.fromkeys(k for k in spellings if k in flops))
        if not keys:
            continue
        if len(keys) > 1:
            raise BadArgumentError(same_range(keys, domain, name, "flops", "model_mfu()"))
        key = keys[0]
        found.add(key)
        model = float(flops[key])
        per_s = model / (float(t) * 1e-9) if t > 0 else np.nan
        rows.append(
            {
                "domain": domain,
                "range": name,
                "model_flops": model,
                "model_flops_source": sources.get(key, "given"),
                "backward_flops": float(backward.get(key, np.nan)),
                "time_ns": float(t),
                "time_source": t_source,
                "dtype": dtype,
                "peak_flops_per_s": pk.flops_per_s,
                "peak_source": pk.source,
                "model_flops_per_s": per_s,
                "mfu_frac": per_s / pk.flops_per_s,
            }
        )
    missing = [k for k in flops if k not in found]
    if missing and not sources:
        raise NvtxRangeNotFoundError(
            f"No NVTX range in the nsys report matches {missing!r}; key flops= by the "
            "ranges of nvtx_gpu_projection() (name, (domain, range) or 'domain:range')."
        )
    out = pd.DataFrame(rows, columns=MODEL_MFU_COLUMNS[:-1])
    out = blank_impossible(out, join_text(out["domain"], ":", out["range"]))
    if out.empty:
        reason = NO_GEMM_OPS if sources or not flops else "no NVTX range with model FLOPs"
        out.attrs["reason"] = reason
        warnings.warn(f"MFU per range is empty: {reason}", EmptyResultWarning, stacklevel=2)
    return out


def op_mfu(
    summary: pd.DataFrame,
    *,
    gpu_name: str | None = None,
    dtype: str = "bf16",
    peak_flops: float | None = None,
) -> pd.DataFrame:
    """MFU per PyTorch GEMM op (nsys, real clocks): the rows of ``torch_ops.op_summary`` with
    model FLOPs, ``op, shapes, calls, model_flops, gpu_time_ns, time_source, dtype,
    peak_flops_per_s, peak_source, model_flops_per_s, mfu_frac, reason``, best first. The op ranges
    do not record the data type, so ``dtype`` (default bf16) names the peak to use."""
    frame_arg(summary, "summary", "op_mfu()", made_by="NsysRun.op_summary()")
    dtype = dtype_arg(dtype, "op_mfu()") or "bf16"
    pk = _peak(gpu_name, dtype, peak_flops)
    rows = summary[summary["model_flops"].notna()]
    out = rows[["op", "shapes", "calls", "model_flops", "gpu_time_ns"]].copy()
    out["time_source"] = "nsys"
    out["dtype"] = dtype
    out["peak_flops_per_s"] = pk.flops_per_s
    out["peak_source"] = pk.source
    seconds = out["gpu_time_ns"].where(out["gpu_time_ns"] > 0) * 1e-9
    out["model_flops_per_s"] = out["model_flops"] / seconds
    out["mfu_frac"] = out["model_flops_per_s"] / pk.flops_per_s
    out = blank_impossible(out, join_text(out["op"], " ", out["shapes"]))
    return out.sort_values("mfu_frac", ascending=False, kind="stable").reset_index(drop=True)
