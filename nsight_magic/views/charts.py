"""Altair bar-chart builders. Each takes a frame whose columns results hand over (names below),
returns an unrendered chart (never displayed here) of at most ``MAX_ROWS`` rows and derives no
numbers: only units for axes (ns -> us) and labels. Bars carry the full ``name`` for the tooltip
and, where a mark stands for a kernel or range, the ``pick``/``focus`` link params (``live``)."""

from __future__ import annotations

from collections.abc import Iterable

import altair as alt
import pandas as pd

from .html import shorten
from .live import focus_opacity, link_params
from .static import shown_with_png

MAX_ROWS = 5000
# Bar labels are cut here to about what vega's default label limit (180 px) shows, and the axis
# draws them whole (``LABEL_AXIS``): vega fits a longer label by measuring it again and again,
# the slowest step of a static PNG in vl-convert (0.35 s for 15 kernel names at 60 characters,
# 0.09 s cut to 32; issue 22). The full name is in each bar's tooltip.
LABEL_WIDTH = 32
WIDTH = 420


def label_axis() -> alt.Axis:
    """A bar chart's label axis: labels drawn as ``unique_labels`` cut them."""
    return alt.Axis(labelLimit=0)


def unique_labels(names: Iterable[object], width: int = LABEL_WIDTH) -> list[str]:
    """Axis labels cut to ``width`` that stay unique ("#2" on a repeat): several kernels can
    share a short name, and a categorical axis would merge their bars."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for name in names:
        label = shorten(name, width)
        n = seen.get(label, 0)
        seen[label] = n + 1
        out.append(label if n == 0 else f"{label} #{n + 1}")
    return out


def _short(frame: pd.DataFrame) -> pd.Series:
    return frame["short_name"] if "short_name" in frame.columns else frame["name"]


def _launch_config_tooltips(frame: pd.DataFrame) -> list[alt.Tooltip]:
    """grid / block / registers when the frame has them (how the kernel was launched)."""
    tips = []
    for col, title in (("grid", "grid"), ("block", "block"), ("registers", "registers")):
        if col in frame.columns:
            tips.append(alt.Tooltip(f"{col}:N", title=title))
    return tips


@shown_with_png
def top_kernels_chart(summary: pd.DataFrame, n: int = 15) -> alt.Chart:
    """Bars of total GPU time for the top ``n`` kernels: ``name, short_name, instances,
    total_ns, avg_ns, time_pct`` (+ ``grid, block, registers``). Click picks the kernel."""
    top = summary.sort_values("total_ns", ascending=False).head(n).copy()
    top["label"] = unique_labels(_short(top))
    top["total_us"] = (top["total_ns"] / 1e3).round(3)
    top["avg_us"] = (top["avg_ns"] / 1e3).round(3)
    keep = ["label", "name", "instances", "total_us", "avg_us", "time_pct"]
    keep += [c for c in ("grid", "block", "registers") if c in top.columns]
    pick, focus = link_params()
    return (
        alt.Chart(top[keep], title=f"Top {len(top)} kernels by total GPU time")
        .mark_bar(cursor="pointer")
        .encode(
            x=alt.X("total_us:Q", title="total GPU time (us)"),
            y=alt.Y("label:N", sort="-x", title=None, axis=label_axis()),
            opacity=focus_opacity(),
            tooltip=[
                alt.Tooltip("name:N", title="kernel"),
                alt.Tooltip("instances:Q"),
                alt.Tooltip("total_us:Q", format=",.1f", title="total (us)"),
                alt.Tooltip("avg_us:Q", format=",.2f", title="avg (us)"),
                alt.Tooltip("time_pct:Q", format=".1f", title="time %"),
                *_launch_config_tooltips(top),
            ],
        )
        .add_params(pick, focus)
        .properties(width=WIDTH)
    )


@shown_with_png
def nvtx_ranges_chart(projection: pd.DataFrame, n: int = 20) -> alt.Chart:
    """Bars of GPU-projected time per NVTX range: ``label`` ("domain:range"), ``style,
    instances, proj_total_ns, range_total_ns, gpu_ops``; the CPU range time is in the tooltip
    (the gap between the two is GPU idle). Click picks the range (``name`` = its label).
    With ``phase_total_ns`` (``NsysSource.nvtx_table``) differing from the projection for
    some range (work launched from another thread while it was open: a backward pass), the
    bars show the phase time and the tooltip both."""
    phased = "phase_total_ns" in projection and bool(
        (projection["phase_total_ns"] != projection["proj_total_ns"]).any()
    )
    measure = "phase_total_ns" if phased else "proj_total_ns"
    top = projection.sort_values(measure, ascending=False).head(n).copy()
    top["name"] = top["label"].astype(str)
    top["bar"] = unique_labels(top["name"])
    top["proj_ms"] = (top["proj_total_ns"] / 1e6).round(6)
    top["range_ms"] = (top["range_total_ns"] / 1e6).round(6)
    cols = ["bar", "name", "style", "instances", "proj_ms", "range_ms", "gpu_ops"]
    tooltip = [
        alt.Tooltip("name:N", title="range"),
        alt.Tooltip("instances:Q"),
        alt.Tooltip("proj_ms:Q", format=",.3f", title="GPU time (ms)"),
        alt.Tooltip("range_ms:Q", format=",.3f", title="CPU range time (ms)"),
        alt.Tooltip("gpu_ops:Q", title="GPU ops"),
    ]
    x = alt.X("proj_ms:Q", title="GPU-projected time (ms)")
    title = "NVTX ranges: GPU-projected time"
    if phased:
        top["phase_ms"] = (top["phase_total_ns"] / 1e6).round(6)
        cols.append("phase_ms")
        tooltip.insert(3, alt.Tooltip("phase_ms:Q", format=",.3f", title="phase time (ms)"))
        x = alt.X("phase_ms:Q", title="phase time: GPU work launched by any thread (ms)")
        title = "NVTX ranges: phase time (any thread)"
    pick, focus = link_params()
    return (
        alt.Chart(top[cols], title=title)
        .mark_bar(cursor="pointer")
        .encode(
            x=x,
            y=alt.Y("bar:N", sort="-x", title=None, axis=label_axis()),
            color=alt.Color("style:N", title="style"),
            opacity=focus_opacity(),
            tooltip=tooltip,
        )
        .add_params(pick, focus)
        .properties(width=WIDTH)
    )


@shown_with_png
def memcpy_chart(by_kind: pd.DataFrame) -> alt.Chart:
    """Bytes copied per kind: ``kind, count, bytes, total_ns, bandwidth_gb_per_s``."""
    frame = by_kind.copy()
    frame["mb"] = frame["bytes"] / 1e6
    frame["time_us"] = frame["total_ns"] / 1e3
    frame = frame[["kind", "count", "mb", "time_us", "bandwidth_gb_per_s"]]
    return (
        alt.Chart(frame, title="Memory copies by kind")
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
                alt.Tooltip("bandwidth_gb_per_s:Q", format=",.2f", title="GB/s"),
            ],
        )
        .properties(width=WIDTH)
    )


def launch_labels(frame: pd.DataFrame) -> list[str]:
    """ "<launch>: <short name>": one bar per launch keeps repeated kernels apart."""
    return [
        f"{launch}: {shorten(s, LABEL_WIDTH)}"
        for launch, s in zip(frame["launch"], _short(frame), strict=True)
    ]


@shown_with_png
def sol_chart(sol: pd.DataFrame) -> alt.Chart:
    """Compute vs memory speed of light (% of peak) per launch: ``launch, name, short_name,
    duration_ns, compute_sol_pct, memory_sol_pct``."""
    frame = sol.head(MAX_ROWS // 2).copy()
    frame["kernel"] = launch_labels(frame)
    long = frame.melt(
        id_vars=["kernel", "name", "duration_ns"],
        value_vars=["compute_sol_pct", "memory_sol_pct"],
        var_name="throughput",
        value_name="pct",
    )
    long["throughput"] = long["throughput"].map(
        {"compute_sol_pct": "Compute (SM)", "memory_sol_pct": "Memory"}
    )
    long["duration_us"] = pd.to_numeric(long["duration_ns"], errors="coerce") / 1e3
    long = long.drop(columns="duration_ns")
    return (
        alt.Chart(long, title="Speed of light (% of peak)")
        .mark_bar()
        .encode(
            x=alt.X("pct:Q", title="% of peak", scale=alt.Scale(domain=[0, 100])),
            y=alt.Y("kernel:N", title=None, axis=label_axis()),
            yOffset=alt.YOffset("throughput:N"),
            color=alt.Color("throughput:N", title=None),
            tooltip=[
                alt.Tooltip("name:N", title="kernel"),
                alt.Tooltip("throughput:N"),
                alt.Tooltip("pct:Q", format=".1f", title="%"),
                alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
            ],
        )
        .properties(width=WIDTH)
    )


MEASURES = {"hfu_frac": "HFU", "mfu_frac": "MFU"}


@shown_with_png
def utilisation_chart(frame: pd.DataFrame, label: str = "name", n: int = 20) -> alt.Chart:
    """Bars of HFU (hardware FLOPs ncu counted) and MFU (model FLOPs; left out where unknown)
    in percent of the peak, per kernel, NVTX range or op: ``<label>, hfu_frac and/or
    mfu_frac, peak_flops_per_s, peak_source`` (``kernel_utilisation``, ``range_utilisation``,
    ``model_mfu`` frames); the peaks used are in the subtitle and tooltip (a utilisation means
    nothing without its peak)."""
    measures = {c: name for c, name in MEASURES.items() if c in frame}
    if not measures:
        raise KeyError("no hfu_frac or mfu_frac column to chart")
    top = frame.sort_values(next(iter(measures)), ascending=False, na_position="last").head(n)
    shown = top["short_name"] if label == "name" and "short_name" in top else top[label]
    rows = pd.DataFrame(
        {
            "bar": unique_labels(shown),
            "full_name": top[label].astype(str).to_numpy(),
            "peak_tflops": (top["peak_flops_per_s"] / 1e12).to_numpy(),
            "peak_source": top["peak_source"].astype(str).to_numpy(),
            **{name: (100.0 * top[c]).to_numpy() for c, name in measures.items()},
        }
    )
    long = rows.melt(
        id_vars=["bar", "full_name", "peak_tflops", "peak_source"],
        value_vars=list(measures.values()),
        var_name="measure",
        value_name="pct",
    ).dropna(subset=["pct"])
    # analysis blanks an impossible fraction (analysis/plausible.py); a frame made by hand is
    # held to the same rule: no bar above 100% of the peak or below 0
    long = long[(long["pct"] >= 0) & (long["pct"] <= 100)]
    pairs = zip(rows["peak_tflops"], rows["peak_source"], strict=True)
    peaks = sorted({f"{p:,.0f} TFLOP/s ({s})" for p, s in pairs if pd.notna(p)})
    named = " and ".join(
        f"{name} ({'hardware' if c == 'hfu_frac' else 'model'} FLOPs)"
        for c, name in measures.items()
    )
    title = alt.Title(named, subtitle=("peak: " + "; ".join(peaks)) if peaks else "")
    return (
        alt.Chart(long, title=title)
        .mark_bar()
        .encode(
            x=alt.X("pct:Q", title="% of peak"),
            y=alt.Y("bar:N", sort=list(rows["bar"]), title=None, axis=label_axis()),
            yOffset=alt.YOffset("measure:N"),
            color=alt.Color("measure:N", title=None),
            tooltip=[
                alt.Tooltip("full_name:N", title=label),
                alt.Tooltip("measure:N"),
                alt.Tooltip("pct:Q", format=".2f", title="% of peak"),
                alt.Tooltip("peak_tflops:Q", format=",.1f", title="peak TFLOP/s"),
                alt.Tooltip("peak_source:N", title="peak source"),
            ],
        )
        .properties(width=WIDTH)
    )


@shown_with_png
def delta_chart(deltas: pd.DataFrame, label: str = "name", n: int = 20) -> alt.Chart:
    """Bars of total-time change (b - a) for the ``n`` largest changes: ``<label>, delta_ns,
    ratio`` (+ ``short_name`` for kernels); green faster, red slower."""
    frame = deltas.reindex(deltas["delta_ns"].abs().sort_values(ascending=False).index).head(n)
    frame = frame.copy()
    shown = frame["short_name"] if label == "name" and "short_name" in frame else frame[label]
    frame["bar"] = unique_labels(shown)
    frame["delta_us"] = frame["delta_ns"] / 1e3
    frame["direction"] = [
        "slower (b > a)" if d > 0 else "faster (b < a)" for d in frame["delta_ns"]
    ]
    frame = frame.assign(full_name=frame[label].astype(str))
    frame = frame[["bar", "full_name", "delta_us", "ratio", "direction"]]
    return (
        alt.Chart(frame, title="Change in total GPU time (b - a)")
        .mark_bar()
        .encode(
            x=alt.X("delta_us:Q", title="delta (us)"),
            y=alt.Y("bar:N", sort="-x", title=None, axis=label_axis()),
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
        .properties(width=WIDTH)
    )
