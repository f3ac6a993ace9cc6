"""Timeline chart builders: a Gantt of ``timeline_frame`` rows (``lane, kind, start_ns, end_ns,
name, short_name, count``) and a small overview of the whole capture with a brush (``brush``,
an interval on x) that the timeline view answers by re-binning the brushed window.

The chart data is saved inline with the notebook, so each row carries a small integer key and
the full names ride once each in a lookup table (a few dozen distinct kernels, thousands of bars):
tooltips show the full name, clicks pick it, the file stays small (P2)."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from .live import BRUSH, focus_opacity, link_params
from .static import shown_with_png

MAX_ROWS = 5000
OVERVIEW_ROWS = 300  # the overview only shows where the work is; the detail shows what it is
WIDTH = 640
# Every kind analysis.timeline gives a row; kernels of a CUDA graph (node-level trace) and whole
# graph launches (graph-level trace) are marked apart from plain kernels.
KIND_COLORS = {
    "kernel": "#4c78a8",
    "graph kernel": "#b279a2",
    "graph launch": "#9d755d",
    "memcpy": "#f58518",
    "memset": "#e45756",
    "statement": "#72b7b2",
    "nvtx": "#54a24b",
}


def _decimals(frame: pd.DataFrame) -> int:
    """Decimals of ms that tell apart a tenth of a pixel of a WIDTH-px axis over this span: the
    saved notebook holds these numbers as text, and digits below that resolution draw nothing."""
    span_ms = (frame["end_ns"].max() - frame["start_ns"].min()) / 1e6 if len(frame) else 1.0
    step = max(float(span_ms), 1e-6) / (WIDTH * 10)
    return min(max(3, math.ceil(-math.log10(step))), 9)


def _rows(frame: pd.DataFrame, origin_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(bars with ms times and a name key, key -> full name lookup table)."""
    frame = frame.head(MAX_ROWS)
    names = pd.Series(pd.unique(frame["name"].astype(str)))
    keys = {name: i for i, name in enumerate(names)}
    digits = _decimals(frame)
    bars = pd.DataFrame(
        {
            "lane": frame["lane"].astype(str).to_numpy(),
            "kind": frame["kind"].astype(str).to_numpy(),
            "key": frame["name"].astype(str).map(keys).to_numpy(),
            "count": frame["count"].to_numpy(),
            "start_ms": ((frame["start_ns"] - origin_ns) / 1e6).round(digits).to_numpy(),
            "end_ms": ((frame["end_ns"] - origin_ns) / 1e6).round(digits).to_numpy(),
        }
    )
    lookup = pd.DataFrame({"key": range(len(names)), "name": names})
    return bars, lookup


def _base(frame: pd.DataFrame, origin_ns: int, legend: bool) -> tuple[alt.Chart, list[str]]:
    """Bars with lanes and colours; the detail (``legend``) also looks its names up."""
    bars, lookup = _rows(frame, origin_ns)
    lanes = list(dict.fromkeys(bars["lane"]))
    kinds = [k for k in KIND_COLORS if k in set(bars["kind"])] or list(KIND_COLORS)
    if legend:
        chart = alt.Chart(bars).transform_lookup(
            lookup="key", from_=alt.LookupData(data=lookup, key="key", fields=["name"])
        )
    else:  # the overview: where the work is, not what it is
        chart = alt.Chart(bars[["lane", "kind", "start_ms", "end_ms"]])
    scale = alt.Scale(domain=kinds, range=[KIND_COLORS[k] for k in kinds])
    key = alt.Legend(title=None, orient="top") if legend else None
    return chart.encode(
        y=alt.Y("lane:N", sort=lanes, title=None),
        color=alt.Color("kind:N", scale=scale, legend=key),
        # The outline keeps sub-pixel bars visible, in the bar's own colour.
        stroke=alt.Stroke("kind:N", scale=scale, legend=None),
    ), lanes


@shown_with_png
def timeline_chart(
    frame: pd.DataFrame,
    origin_ns: int | None = None,
    window_ns: tuple[int, int] | None = None,
) -> alt.Chart:
    """Gantt of the rows; times are ms from ``origin_ns`` (default: the first event) so the axis
    reads as time into the cell; ``window_ns`` fixes the x range (the zoomed window). Kernel
    bars pick their kernel on click; the ``focus`` name is highlighted."""
    if origin_ns is None:
        origin_ns = int(frame["start_ns"].min()) if len(frame) else 0
    base, lanes = _base(frame, origin_ns, legend=True)
    scale = alt.Undefined
    if window_ns is not None:
        lo, hi = ((window_ns[0] - origin_ns) / 1e6, (window_ns[1] - origin_ns) / 1e6)
        scale = alt.Scale(domain=[round(lo, 6), round(hi, 6)], nice=False)
    pick, focus = link_params()
    return (
        base.transform_calculate(duration_us="(datum.end_ms - datum.start_ms) * 1000")
        .mark_bar(strokeWidth=1, cursor="pointer", clip=True)
        .encode(
            x=alt.X("start_ms:Q", title="time into the capture (ms)", scale=scale),
            x2=alt.X2("end_ms"),
            opacity=focus_opacity(0.25),
            tooltip=[
                alt.Tooltip("name:N", title="name"),
                alt.Tooltip("lane:N"),
                alt.Tooltip("count:Q", title="events"),
                alt.Tooltip("start_ms:Q", format=",.3f", title="start (ms)"),
                alt.Tooltip("duration_us:Q", format=",.2f", title="duration (us)"),
            ],
        )
        .add_params(pick, focus)
        .properties(title="Timeline", width=WIDTH, height=max(60, 22 * len(lanes)))
    )


@shown_with_png
def timeline_overview(frame: pd.DataFrame, origin_ns: int | None = None) -> alt.Chart:
    """The whole capture, small, with an x brush: drag to zoom the timeline to a window. Give it
    a coarse frame (``OVERVIEW_ROWS``): it only shows where the work is."""
    if origin_ns is None:
        origin_ns = int(frame["start_ns"].min()) if len(frame) else 0
    base, lanes = _base(frame, origin_ns, legend=False)
    brush = alt.selection_interval(name=BRUSH, encodings=["x"])
    return (
        base.mark_bar(strokeWidth=1)
        .encode(
            x=alt.X("start_ms:Q", title="drag to zoom (ms)"),
            x2=alt.X2("end_ms"),
        )
        .add_params(brush)
        .properties(width=WIDTH, height=max(30, 9 * len(lanes)))
    )
