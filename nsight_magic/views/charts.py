"""Altair chart builders. Each takes the frames of the column contracts in ARCHITECTURE.md and
returns an unrendered chart (never displayed here) of at most ``MAX_ROWS`` data rows: frames
are aggregated or cut to the top N first, so the spec stays small enough to embed."""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from ..analysis.memory import copies_by_kind
from .tables import shorten

MAX_ROWS = 5000
LABEL_WIDTH = 60

# Precision ceilings of the roofline: column of the report's peak -> legend label.
PEAK_COLUMNS = {
    "peak_tensor": "Tensor",
    "peak_fp16": "FP16",
    "peak_fp32": "FP32",
    "peak_fp64": "FP64",
}
FLOP_COLUMNS = {
    "flops_tensor": "peak_tensor",
    "flops_fp16": "peak_fp16",
    "flops_fp32": "peak_fp32",
    "flops_fp64": "peak_fp64",
}


def _labels(names: pd.Series, width: int = LABEL_WIDTH) -> pd.Series:
    """Short axis labels that stay unique (two long templates can share a prefix)."""
    out, seen = [], {}
    for name in names.astype(str):
        label = shorten(name, width)
        n = seen.get(label, 0)
        seen[label] = n + 1
        out.append(label if n == 0 else f"{label} #{n + 1}")
    return pd.Series(out, index=names.index)


def top_kernels_chart(summary: pd.DataFrame, n: int = 15) -> alt.Chart:
    """Horizontal bars of total GPU time for the top ``n`` kernels of ``kernel_summary()``."""
    top = summary.sort_values("total_ns", ascending=False).head(n).copy()
    top["label"] = _labels(top["name"])
    top["total_us"] = top["total_ns"] / 1e3
    top["avg_us"] = top["avg_ns"] / 1e3
    top = top[["label", "name", "instances", "total_us", "avg_us", "time_pct"]]
    return (
        alt.Chart(top, title=f"Top {len(top)} kernels by total GPU time")
        .mark_bar()
        .encode(
            x=alt.X("total_us:Q", title="total GPU time (us)"),
            y=alt.Y("label:N", sort="-x", title=None),
            tooltip=[
                alt.Tooltip("name:N", title="kernel"),
                alt.Tooltip("instances:Q"),
                alt.Tooltip("total_us:Q", format=",.1f", title="total (us)"),
                alt.Tooltip("avg_us:Q", format=",.2f", title="avg (us)"),
                alt.Tooltip("time_pct:Q", format=".1f", title="time %"),
            ],
        )
        .properties(width=420)
    )


def nvtx_label(frame: pd.DataFrame) -> pd.Series:
    """``domain:range`` as nsys stats writes it (":range" for the default domain)."""
    return frame["domain"].fillna("").astype(str) + ":" + frame["range"].astype(str)


def nvtx_ranges_chart(projection: pd.DataFrame, n: int = 20) -> alt.Chart:
    """Bars of GPU-projected time per NVTX range (``nvtx_gpu_projection()``), with the CPU
    range time in the tooltip: the gap between the two is where the GPU sat idle."""
    top = projection.sort_values("proj_total_ns", ascending=False).head(n).copy()
    top["range_label"] = _labels(nvtx_label(top))
    top["proj_ms"] = top["proj_total_ns"] / 1e6
    top["range_ms"] = top["range_total_ns"] / 1e6
    top = top[["range_label", "style", "instances", "proj_ms", "range_ms", "gpu_ops"]]
    return (
        alt.Chart(top, title="NVTX ranges: GPU-projected time")
        .mark_bar()
        .encode(
            x=alt.X("proj_ms:Q", title="GPU-projected time (ms)"),
            y=alt.Y("range_label:N", sort="-x", title=None),
            color=alt.Color("style:N", title="style"),
            tooltip=[
                alt.Tooltip("range_label:N", title="range"),
                alt.Tooltip("instances:Q"),
                alt.Tooltip("proj_ms:Q", format=",.3f", title="GPU time (ms)"),
                alt.Tooltip("range_ms:Q", format=",.3f", title="CPU range time (ms)"),
                alt.Tooltip("gpu_ops:Q", title="GPU ops"),
            ],
        )
        .properties(width=420)
    )


def timeline_chart(frame: pd.DataFrame, origin_ns: int | None = None) -> alt.Chart:
    """Gantt of ``timeline_frame()`` rows (lanes: GPU streams and NVTX ranges). Times are ms
    from ``origin_ns`` (default: the first event) so the axis reads as time into the cell."""
    frame = frame.head(MAX_ROWS).copy()
    if origin_ns is None:
        origin_ns = int(frame["start_ns"].min()) if len(frame) else 0
    frame["start_ms"] = (frame["start_ns"] - origin_ns) / 1e6
    frame["end_ms"] = (frame["end_ns"] - origin_ns) / 1e6
    frame["duration_us"] = (frame["end_ns"] - frame["start_ns"]) / 1e3
    # The chart's data is saved inline with the notebook: short names and rounded floats keep a
    # 5000-bar timeline to a few hundred kB (the full names stay in the Kernels table).
    frame["name"] = frame["name"].astype(str).map(lambda n: shorten(n, 80))
    frame[["start_ms", "end_ms"]] = frame[["start_ms", "end_ms"]].round(6)
    frame["duration_us"] = frame["duration_us"].round(3)
    lanes = list(dict.fromkeys(frame["lane"].astype(str)))
    frame = frame[["lane", "name", "count", "start_ms", "end_ms", "duration_us"]]
    return (
        alt.Chart(frame, title="Timeline")
        .mark_bar(strokeWidth=1)  # the stroke keeps sub-pixel kernels visible
        .encode(
            x=alt.X("start_ms:Q", title="time (ms)"),
            x2="end_ms:Q",
            y=alt.Y("lane:N", sort=lanes, title=None),
            color=alt.Color("lane:N", legend=None),
            stroke=alt.Stroke("lane:N", legend=None),
            tooltip=[
                alt.Tooltip("lane:N"),
                alt.Tooltip("name:N"),
                alt.Tooltip("count:Q", title="events"),
                alt.Tooltip("start_ms:Q", format=",.3f", title="start (ms)"),
                alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
            ],
        )
        .properties(width=640, height=max(60, 22 * len(lanes)))
    )


def memcpy_chart(memcpy: pd.DataFrame) -> alt.Chart:
    """Bytes copied per kind (HtoD, DtoH, ...), bandwidth in the tooltip."""
    by_kind = copies_by_kind(memcpy)
    by_kind["mb"] = by_kind["bytes"] / 1e6
    by_kind["time_us"] = by_kind["total_ns"] / 1e3
    return (
        alt.Chart(by_kind, title="Memory copies by kind")
        .mark_bar()
        .encode(
            x=alt.X("mb:Q", title="MB copied"),
            y=alt.Y("kind:N", sort="-x", title=None),
            color=alt.Color("kind:N", legend=None),
            tooltip=[
                alt.Tooltip("kind:N"),
                alt.Tooltip("count:Q", title="copies"),
                alt.Tooltip("mb:Q", format=",.3f", title="MB"),
                alt.Tooltip("time_us:Q", format=",.1f", title="time (us)"),
                alt.Tooltip("bandwidth_gbps:Q", format=",.2f", title="GB/s"),
            ],
        )
        .properties(width=420)
    )


def _launch_labels(frame: pd.DataFrame) -> pd.Series:
    # One bar per launch: the launch index keeps repeated kernels apart.
    return (
        frame["launch"].astype(str)
        + ": "
        + frame["name"].astype(str).map(lambda s: shorten(s, LABEL_WIDTH))
    )


def sol_chart(sol: pd.DataFrame) -> alt.Chart:
    """Compute vs memory speed of light (% of peak) per launch, from ``NcuReport.sol()``."""
    frame = sol.head(MAX_ROWS // 2).copy()
    frame["kernel"] = _launch_labels(frame)
    long = frame.melt(
        id_vars=["kernel", "name", "duration_ns"],
        value_vars=["compute_sol_pct", "memory_sol_pct"],
        var_name="throughput",
        value_name="pct",
    )
    long["throughput"] = long["throughput"].map(
        {"compute_sol_pct": "Compute (SM)", "memory_sol_pct": "Memory"}
    )
    long["duration_us"] = long["duration_ns"] / 1e3
    long = long.drop(columns="duration_ns")
    return (
        alt.Chart(long, title="Speed of light (% of peak)")
        .mark_bar()
        .encode(
            x=alt.X("pct:Q", title="% of peak", scale=alt.Scale(domain=[0, 100])),
            y=alt.Y("kernel:N", title=None),
            yOffset="throughput:N",
            color=alt.Color("throughput:N", title=None),
            tooltip=[
                alt.Tooltip("name:N", title="kernel"),
                alt.Tooltip("throughput:N"),
                alt.Tooltip("pct:Q", format=".1f", title="%"),
                alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
            ],
        )
        .properties(width=420)
    )


def roofline_ceilings(roofline: pd.DataFrame) -> dict[str, float]:
    """Ceilings from the report's own peaks (peak_sustained x the report's clock, already in
    the frame): label -> FLOP/s, plus "DRAM" -> bytes/s. Launches can run at different locked
    clocks, so the drawn lines use the median over launches; points use their own peaks."""
    ceilings: dict[str, float] = {}
    for col, label in PEAK_COLUMNS.items():
        if col in roofline.columns:
            value = pd.to_numeric(roofline[col], errors="coerce").median()
            if pd.notna(value) and value > 0:
                ceilings[label] = float(value)
    dram = pd.to_numeric(roofline.get("peak_dram_bytes_per_s"), errors="coerce")
    if dram is not None and pd.notna(dram.median()) and dram.median() > 0:
        ceilings["DRAM"] = float(dram.median())
    return ceilings


def roofline_points(roofline: pd.DataFrame) -> pd.DataFrame:
    """One point per launch: achieved FLOP/s (sum over precisions), arithmetic intensity, the
    dominant precision, and the % of the ceiling that applies at that intensity
    (min(that precision's peak, AI x DRAM peak), both from the launch's own row)."""
    frame = roofline.copy()
    flop_cols = [c for c in FLOP_COLUMNS if c in frame.columns]
    rates = frame[flop_cols].apply(pd.to_numeric, errors="coerce").fillna(0.0)
    frame["flops_per_s"] = rates.sum(axis=1)
    dominant = rates.idxmax(axis=1).where(rates.max(axis=1) > 0)
    frame["precision"] = dominant.map(lambda c: PEAK_COLUMNS.get(FLOP_COLUMNS.get(c, ""), "none"))
    # Each launch against its own peaks: launches of one report can run at different clocks.
    peak_of = {label: col for col, label in PEAK_COLUMNS.items()}
    compute = pd.Series(np.nan, index=frame.index)
    for label, col in peak_of.items():
        if col in frame.columns:
            mine = frame["precision"] == label
            compute[mine] = pd.to_numeric(frame.loc[mine, col], errors="coerce")
    ai = pd.to_numeric(frame["arithmetic_intensity"], errors="coerce")
    dram = frame.get("peak_dram_bytes_per_s", pd.Series(np.nan, index=frame.index))
    memory = ai * pd.to_numeric(dram, errors="coerce")
    bound = np.fmin(compute, memory)
    frame["ceiling_flops_per_s"] = bound
    frame["pct_of_ceiling"] = 100.0 * frame["flops_per_s"] / bound.where(bound > 0)
    frame["arithmetic_intensity"] = ai
    frame["duration_us"] = frame["duration_ns"] / 1e3
    frame["kernel"] = _launch_labels(frame)
    keep = ["launch", "kernel", "name", "duration_us", "arithmetic_intensity", "flops_per_s",
            "precision", "ceiling_flops_per_s", "pct_of_ceiling"]  # fmt: skip
    # Log axes cannot place zero: kernels with no FLOPs or no DRAM traffic are left out.
    ok = (frame["flops_per_s"] > 0) & (ai > 0) & np.isfinite(ai)
    return frame.loc[ok, keep].head(MAX_ROWS).reset_index(drop=True)


def _ceiling_lines(ceilings: dict[str, float], x_min: float, x_max: float) -> pd.DataFrame:
    """Each compute ceiling as a polyline: the DRAM slope up to its ridge point, then flat."""
    dram = ceilings.get("DRAM")
    rows = []
    for label, peak in ceilings.items():
        if label == "DRAM":
            continue
        if dram:
            ridge = peak / dram
            lo = min(x_min, ridge)
            rows += [
                {"ceiling": label, "order": 0, "ai": lo, "flops_per_s": lo * dram},
                {"ceiling": label, "order": 1, "ai": ridge, "flops_per_s": peak},
            ]
        hi = max(x_max, (peak / dram) if dram else x_max)
        rows.append({"ceiling": label, "order": 2, "ai": hi, "flops_per_s": peak})
        if not dram:
            rows.append({"ceiling": label, "order": 0, "ai": x_min, "flops_per_s": peak})
    frame = pd.DataFrame(rows, columns=["ceiling", "order", "ai", "flops_per_s"])
    frame["peak"] = frame["ceiling"].map(ceilings)
    frame["dram_bytes_per_s"] = dram if dram else np.nan
    return frame.sort_values(["ceiling", "order"], ignore_index=True)


def roofline_chart(roofline: pd.DataFrame) -> alt.LayerChart:
    """Log-log roofline: ceilings from the report's own peaks (DRAM slope, one flat line per
    precision) and one point per profiled launch; tooltips give name, time, AI, FLOP/s and %
    of the ceiling that bounds it."""
    points = roofline_points(roofline)
    ceilings = roofline_ceilings(roofline)
    if len(points):
        x_min = 10 ** math.floor(math.log10(points["arithmetic_intensity"].min()) - 0.5)
        x_max = 10 ** math.ceil(math.log10(points["arithmetic_intensity"].max()) + 0.5)
    else:
        x_min, x_max = 0.01, 1000.0
    if ceilings.get("DRAM"):
        # Start a decade left of the lowest ridge so the DRAM slope shows.
        ridges = [p / ceilings["DRAM"] for k, p in ceilings.items() if k != "DRAM"]
        x_min = min([x_min, *(10 ** math.floor(math.log10(r) - 1) for r in ridges)])
    lines = _ceiling_lines(ceilings, x_min, x_max)
    x = alt.X("ai:Q", title="arithmetic intensity (FLOP/byte)", scale=alt.Scale(type="log"),
              axis=alt.Axis(format="~g"))  # fmt: skip
    y = alt.Y("flops_per_s:Q", title="FLOP/s", scale=alt.Scale(type="log"),
              axis=alt.Axis(format="~s", tickCount=8))  # fmt: skip
    roof = (
        alt.Chart(lines)
        .mark_line(strokeDash=[4, 2])
        .encode(
            x=x,
            y=y,
            order="order:Q",
            color=alt.Color("ceiling:N", title="ceiling"),
            tooltip=[
                alt.Tooltip("ceiling:N"),
                alt.Tooltip("peak:Q", format=".3s", title="peak FLOP/s"),
                alt.Tooltip("dram_bytes_per_s:Q", format=".3s", title="DRAM B/s"),
            ],
        )
    )
    dots = (
        alt.Chart(points.rename(columns={"arithmetic_intensity": "ai"}))
        .mark_point(filled=True, size=70, color="black")
        .encode(
            x=x,
            y=y,
            shape=alt.Shape("precision:N", title="kernel precision"),
            tooltip=[
                alt.Tooltip("kernel:N"),
                alt.Tooltip("name:N", title="full name"),
                alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
                alt.Tooltip("ai:Q", format=".3g", title="AI (FLOP/byte)"),
                alt.Tooltip("flops_per_s:Q", format=".3s", title="FLOP/s"),
                alt.Tooltip("pct_of_ceiling:Q", format=".1f", title="% of ceiling"),
            ],
        )
    )
    return alt.layer(roof, dots, title="Roofline (report's own peaks and clock)").properties(
        width=460, height=320
    )


def mfu_chart(mfu: pd.DataFrame, label: str = "name", n: int = 20) -> alt.Chart:
    """Bars of MFU (percent) per kernel or NVTX range, from ``analysis.mfu``; the peak used
    and where it came from are in the title and the tooltip, since MFU means nothing without."""
    frame = mfu.dropna(subset=["mfu"]).sort_values("mfu", ascending=False).head(n).copy()
    frame["bar"] = _labels(frame[label].astype(str))
    frame["mfu_pct"] = 100.0 * frame["mfu"]
    frame["peak_tflops"] = frame["peak_flops"] / 1e12
    pairs = zip(frame["peak_tflops"], frame["peak_source"], strict=True)
    peaks = sorted({f"{p:,.0f} TFLOP/s ({s})" for p, s in pairs})
    title = alt.Title("MFU", subtitle=("peak: " + "; ".join(peaks)) if peaks else "")
    frame = frame.assign(full_name=frame[label].astype(str))
    frame = frame[["bar", "full_name", "mfu_pct", "peak_tflops", "peak_source"]]
    return (
        alt.Chart(frame, title=title)
        .mark_bar()
        .encode(
            x=alt.X("mfu_pct:Q", title="MFU (% of peak)"),
            y=alt.Y("bar:N", sort="-x", title=None),
            tooltip=[
                alt.Tooltip("full_name:N", title=label),
                alt.Tooltip("mfu_pct:Q", format=".2f", title="MFU %"),
                alt.Tooltip("peak_tflops:Q", format=",.1f", title="peak TFLOP/s"),
                alt.Tooltip("peak_source:N", title="peak source"),
            ],
        )
        .properties(width=420)
    )


def delta_chart(deltas: pd.DataFrame, label: str = "name", n: int = 20) -> alt.Chart:
    """Bars of total-time change (b - a) for the ``n`` largest absolute changes (``compare``)."""
    frame = deltas.reindex(deltas["delta_ns"].abs().sort_values(ascending=False).index).head(n)
    frame = frame.copy()
    frame["bar"] = _labels(frame[label].astype(str))
    frame["delta_us"] = frame["delta_ns"] / 1e3
    frame["direction"] = np.where(frame["delta_ns"] > 0, "slower (b > a)", "faster (b < a)")
    frame = frame.assign(full_name=frame[label].astype(str))
    frame = frame[["bar", "full_name", "delta_us", "ratio", "direction"]]
    return (
        alt.Chart(frame, title="Change in total GPU time (b - a)")
        .mark_bar()
        .encode(
            x=alt.X("delta_us:Q", title="delta (us)"),
            y=alt.Y("bar:N", sort="-x", title=None),
            color=alt.Color(
                "direction:N",
                scale=alt.Scale(
                    domain=["faster (b < a)", "slower (b > a)"], range=["#2ca02c", "#d62728"]
                ),
                title=None,
            ),
            tooltip=[
                alt.Tooltip("full_name:N", title=label),
                alt.Tooltip("delta_us:Q", format=",.2f", title="delta (us)"),
                alt.Tooltip("ratio:Q", format=".3f", title="b / a"),
            ],
        )
        .properties(width=420)
    )
