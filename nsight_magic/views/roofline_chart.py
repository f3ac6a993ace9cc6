"""Roofline chart builder (log-log). Inputs are frames analysis computed:

- points, one per launch (``roofline_bounds``): ``launch, name, short_name, duration_ns,
  arithmetic_intensity, flops_per_s, precision, pct_of_ceiling, verdict`` (+ ``level`` for a
  hierarchical roofline: one point per launch and memory level L1/L2/DRAM; + ``grid, block,
  registers`` when known);
- ceilings (``roofline_ceilings``): ``ceiling`` (legend label), ``kind`` ("memory": bytes/s,
  drawn as a slope; "compute": FLOP/s, drawn flat), ``value``.

Every ceiling is a line in the legend; points are labelled with the short kernel name (full name,
verdict and launch config on hover) and pick their kernel on click."""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from .live import FOCUS, link_params

MAX_POINTS = 5000


def _drawable(points: pd.DataFrame) -> pd.DataFrame:
    # Log axes cannot place zero: launches without FLOPs or DRAM traffic are left out.
    ai = pd.to_numeric(points["arithmetic_intensity"], errors="coerce")
    flops = pd.to_numeric(points["flops_per_s"], errors="coerce")
    ok = (ai > 0) & (flops > 0) & np.isfinite(ai) & np.isfinite(flops)
    return points.loc[ok].head(MAX_POINTS)


def _x_range(points: pd.DataFrame, ceilings: pd.DataFrame) -> tuple[float, float]:
    ai = points["arithmetic_intensity"].astype(float)
    lo, hi = (float(ai.min()), float(ai.max())) if len(ai) else (0.1, 100.0)
    memory = ceilings.loc[ceilings["kind"] == "memory", "value"].astype(float)
    compute = ceilings.loc[ceilings["kind"] == "compute", "value"].astype(float)
    if len(memory) and len(compute):
        ridges = [c / m for c in compute for m in memory if m > 0]
        lo, hi = min([lo, *ridges]), max([hi, *ridges])
    # A decade of room on each side so the slope and the ridges show.
    return 10 ** math.floor(math.log10(lo) - 1), 10 ** math.ceil(math.log10(hi) + 1)


def ceiling_lines(ceilings: pd.DataFrame, x_min: float, x_max: float) -> pd.DataFrame:
    """Two points per ceiling: a memory ceiling rises from ``x_min`` until it meets the highest
    compute ceiling; a compute ceiling is flat from its ridge with the fastest memory level."""
    memory = ceilings[ceilings["kind"] == "memory"]
    compute = ceilings[ceilings["kind"] == "compute"]
    top = float(compute["value"].max()) if len(compute) else float("nan")
    fastest = float(memory["value"].max()) if len(memory) else float("nan")
    rows = []
    for label, bandwidth in zip(memory["ceiling"], memory["value"].astype(float), strict=True):
        end = top / bandwidth if math.isfinite(top) else x_max
        rows += [(label, 0, x_min, x_min * bandwidth), (label, 1, end, end * bandwidth)]
    for label, peak in zip(compute["ceiling"], compute["value"].astype(float), strict=True):
        start = peak / fastest if math.isfinite(fastest) else x_min
        rows += [(label, 0, start, peak), (label, 1, x_max, peak)]
    return pd.DataFrame(rows, columns=["ceiling", "order", "ai", "flops_per_s"])


def roofline_chart(points: pd.DataFrame, ceilings: pd.DataFrame) -> alt.LayerChart:
    """Ceilings (legend: every memory slope and compute roof) and one labelled point per launch
    (or per launch and memory level)."""
    drawn = _drawable(points)
    left_out = len(points) - len(drawn)
    x_min, x_max = _x_range(drawn, ceilings)
    lines = ceiling_lines(ceilings, x_min, x_max)
    x = alt.X(
        "ai:Q",
        title="arithmetic intensity (FLOP/byte)",
        scale=alt.Scale(type="log", domain=[x_min, x_max]),
        axis=alt.Axis(format="~g"),
    )
    y = alt.Y(
        "flops_per_s:Q",
        title="FLOP/s",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format="~s", tickCount=8),
    )
    roof = (
        alt.Chart(lines)
        .mark_line(strokeDash=[4, 2])
        .encode(
            x=x,
            y=y,
            order="order:Q",
            color=alt.Color("ceiling:N", title="ceilings", legend=alt.Legend(orient="right")),
            tooltip=[alt.Tooltip("ceiling:N")],
        )
    )
    data = drawn.rename(columns={"arithmetic_intensity": "ai"}).copy()
    data["duration_us"] = pd.to_numeric(data["duration_ns"], errors="coerce") / 1e3
    keep = [
        "launch",
        "name",
        "short_name",
        "duration_us",
        "ai",
        "flops_per_s",
        "precision",
        "pct_of_ceiling",
        "verdict",
    ]
    extra = [c for c in ("level", "grid", "block", "registers") if c in data.columns]
    data = data[[c for c in keep if c in data.columns] + extra]
    pick, focus = link_params(("name", "launch"))
    emphasis = f"{FOCUS} == '' || datum.name == {FOCUS}"
    shape_field = "level:N" if "level" in data.columns else "precision:N"
    tips = [
        alt.Tooltip("short_name:N", title="kernel"),
        alt.Tooltip("name:N", title="full name"),
        alt.Tooltip("verdict:N", title="bound"),
        alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
        alt.Tooltip("ai:Q", format=".3g", title="AI (FLOP/byte)"),
        alt.Tooltip("flops_per_s:Q", format=".3s", title="FLOP/s"),
        alt.Tooltip("pct_of_ceiling:Q", format=".1f", title="% of its ceiling"),
        *[alt.Tooltip(f"{c}:N") for c in extra],
    ]
    dots = (
        alt.Chart(data)
        .mark_point(filled=True, size=80, color="black", cursor="pointer")
        .encode(
            x=x,
            y=y,
            shape=alt.Shape(shape_field, title=shape_field.split(":")[0]),
            opacity=alt.condition(emphasis, alt.value(1.0), alt.value(0.25)),
            tooltip=tips,
        )
        .add_params(pick, focus)
    )
    labels = (
        alt.Chart(data)
        .mark_text(align="left", dx=7, dy=-7, fontSize=10, limit=160)  # long names: cut, hover
        .encode(
            x=x,
            y=y,
            text="short_name:N",
            opacity=alt.condition(emphasis, alt.value(1.0), alt.value(0.25)),
        )
    )
    subtitle = f"{left_out} launches not drawn: no FLOPs or no DRAM traffic" if left_out else ""
    title = alt.Title("Roofline (the report's own peaks and clock)", subtitle=subtitle)
    return alt.layer(roof, dots, labels, title=title).properties(width=480, height=330)
