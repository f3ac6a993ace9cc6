"""Roofline chart builder (log-log). Inputs are frames analysis computed:

- points, one per launch (``roofline_bounds``): ``launch, name, short_name, duration_ns,
  arithmetic_intensity, flops_per_s, precision, ceiling_pct, verdict, plottable`` (the rows
  a log-log chart can place) (+ ``level`` for a hierarchical roofline: one point per launch and
  memory level L1/L2/DRAM; + ``grid, block, registers`` when known);
- ceilings (``roofline_ceilings``): ``label`` ("Tensor", "DRAM", ...), ``kind`` ("memory":
  bytes/s, drawn as a slope; "compute": FLOP/s, drawn flat), ``peak``, ``ridge_ai`` (where a
  compute roof meets the DRAM slope).

Every ceiling is a line in the legend; points are labelled with the short kernel name (full name,
verdict and launch config on hover) and pick their kernel on click."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from . import html
from .live import FOCUS, link_params
from .static import shown_with_png

MAX_POINTS = 5000


def _drawable(points: pd.DataFrame) -> pd.DataFrame:
    # Log axes cannot place zero: analysis marks the launches a log-log chart can place.
    return points.loc[points["plottable"].fillna(False).astype(bool)].head(MAX_POINTS)


def legend_label(ceiling: pd.Series) -> str:
    """ "Tensor 1,070.3 TFLOP/s", "DRAM 4.02 TB/s": the roof's name and its peak."""
    if ceiling["kind"] == "memory":
        return f"{ceiling['label']} {html.fmt_bandwidth(ceiling['peak'])}"
    return f"{ceiling['label']} {html.fmt_flops(ceiling['peak'])}"


def _x_range(points: pd.DataFrame, ceilings: pd.DataFrame) -> tuple[float, float]:
    ai = points["arithmetic_intensity"].astype(float)
    lo, hi = (float(ai.min()), float(ai.max())) if len(ai) else (0.1, 100.0)
    ridges = ceilings.loc[ceilings["kind"] == "compute", "ridge_ai"].astype(float).dropna()
    if len(ridges):
        lo, hi = min(lo, float(ridges.min())), max(hi, float(ridges.max()))
    # A decade of room on each side so the slope and the ridges show.
    return 10 ** math.floor(math.log10(lo) - 1), 10 ** math.ceil(math.log10(hi) + 1)


def ceiling_lines(ceilings: pd.DataFrame, x_min: float, x_max: float) -> pd.DataFrame:
    """Two points per ceiling (``ceiling`` = its legend label): a memory ceiling rises from
    ``x_min`` to the farthest ridge (where it meets the highest compute roof); a compute
    ceiling is flat from its ridge (``ridge_ai``; ``x_min`` when unknown) to ``x_max``."""
    memory = ceilings[ceilings["kind"] == "memory"]
    compute = ceilings[ceilings["kind"] == "compute"]
    ridges = compute["ridge_ai"].astype(float).dropna()
    end = float(ridges.max()) if len(ridges) else x_max
    rows = []
    for _, roof in memory.iterrows():
        label, bandwidth = legend_label(roof), float(roof["peak"])
        rows += [(label, 0, x_min, x_min * bandwidth), (label, 1, end, end * bandwidth)]
    for _, roof in compute.iterrows():
        ridge = float(roof["ridge_ai"])
        start = ridge if math.isfinite(ridge) else x_min
        label, peak = legend_label(roof), float(roof["peak"])
        rows += [(label, 0, start, peak), (label, 1, x_max, peak)]
    return pd.DataFrame(rows, columns=["ceiling", "order", "ai", "flops_per_s"])


@shown_with_png
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
        "ceiling_pct",
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
        alt.Tooltip("ceiling_pct:Q", format=".1f", title="% of its ceiling"),
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
