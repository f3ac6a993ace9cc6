"""The Memory tab: where the GPU memory went (device memory per process over time from nsys's
allocation events, the peak marked with the statement and NVTX range open then, the
per-process summary, PyTorch's own counts and the largest tensors at its peak), then the copies
(what the tab showed before). Frames come from ``results.memory_frames``; this module only lays
them out. The chart's brush zooms the Timeline tab to the dragged window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import altair as alt
import ipywidgets as w
import pandas as pd

from . import html
from .common import attempt, chart_html, chart_widget, table_or_note
from .live import BRUSH, LiveChart
from .static import shown_with_png
from .timeline_chart import WIDTH

SUMMARY_COLUMNS = ("pid", "device_id", "start_bytes", "peak_bytes", "end_bytes", "statement",
                   "nvtx_range", "allocations", "frees")  # fmt: skip
TORCH_COLUMNS = ("moment", "allocated_bytes", "reserved_bytes")
LINE_COLUMNS = ("cell_line", "count", "bytes", "largest_bytes")
LINE_HEADERS = {"cell_line": "made at", "count": "tensors", "bytes": "alive at the peak"}
GB = 1e9  # decimal, as the tables print bytes (html.fmt_bytes)
DIFFER_NOTE = (
    "Two views of the same memory. nsys counts what each process asked CUDA for (cudaMalloc): "
    "PyTorch's reserved segments plus other libraries' memory and CUDA module globals. "
    "PyTorch's allocated bytes are its tensors; reserved adds its cache of freed blocks; the "
    "tensors below are what they asked for. A warm worker maps the notebook's CUDA tensors "
    "(one copy, CUDA IPC): they are the notebook's memory, which nsys (tracing the worker) "
    "does not count and the worker's torch does not allocate."
)
NO_SNAPSHOT = (
    "No allocator snapshot: profile with %%nsys --memory to see the tensors alive at the peak "
    "and the lines that made them."
)


def _who(frame: pd.DataFrame) -> pd.Series:
    return "pid " + frame["pid"].astype(str) + " (GPU " + frame["device_id"].astype(str) + ")"


@shown_with_png
def memory_chart(
    rows: pd.DataFrame,
    summary: pd.DataFrame,
    origin_ns: int,
    window_ns: tuple[int, int] | None = None,
) -> alt.Chart:
    """Device memory in use (GB) per process over time (ms into the capture, as the timeline),
    a step line; each process's peak marked with the statement (else the NVTX range) open
    then. An x brush (``brush``): drag to zoom the timeline."""
    frame = pd.DataFrame(
        {
            "process": _who(rows).to_numpy(),
            "ms": ((rows["time_ns"] - origin_ns) / 1e6).round(6).to_numpy(),
            "gb": (rows["bytes_in_use"] / GB).round(4).to_numpy(),
            "operation": rows["operation"].astype(str).to_numpy(),
        }
    )
    peaks = pd.DataFrame(
        {
            "process": _who(summary).to_numpy(),
            "ms": ((summary["peak_time_ns"] - origin_ns) / 1e6).round(6).to_numpy(),
            "gb": (summary["peak_bytes"] / GB).round(4).to_numpy(),
            "at": [
                s or r or "-"
                for s, r in zip(summary["statement"], summary["nvtx_range"], strict=True)
            ],
        }
    )
    peaks["label"] = [f"peak {g:,.2f} GB: {html.shorten(a, 48)}"
                      for g, a in zip(peaks["gb"], peaks["at"], strict=True)]  # fmt: skip
    scale = alt.Undefined
    if window_ns is not None:
        lo, hi = ((window_ns[0] - origin_ns) / 1e6, (window_ns[1] - origin_ns) / 1e6)
        scale = alt.Scale(domain=[round(lo, 6), round(hi, 6)], nice=False)
    x = alt.X("ms:Q", title="time into the capture (ms); drag to zoom the timeline", scale=scale)
    brush = alt.selection_interval(name=BRUSH, encodings=["x"])
    line = (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", clip=True)
        .encode(
            x=x,
            y=alt.Y("gb:Q", title="device memory in use (GB)"),
            color=alt.Color("process:N", legend=alt.Legend(orient="top", title=None)),
            tooltip=[
                alt.Tooltip("process:N"),
                alt.Tooltip("ms:Q", format=",.3f", title="ms"),
                alt.Tooltip("gb:Q", format=",.3f", title="GB"),
                alt.Tooltip("operation:N"),
            ],
        )
        .add_params(brush)
    )
    marks = alt.Chart(peaks).encode(x=x, y="gb:Q", color=alt.Color("process:N", legend=None))
    points = marks.mark_point(size=70, filled=True, clip=True).encode(
        tooltip=[alt.Tooltip("label:N", title="peak"), alt.Tooltip("ms:Q", format=",.3f")]
    )
    title = alt.TitleParams("Device memory per process (nsys)",
                            subtitle=[f"{p}: {t}" for p, t in zip(peaks["process"], peaks["label"],
                                                                  strict=True)][:4])  # fmt: skip
    return alt.layer(line, points).properties(title=title, width=WIDTH, height=180)


def summary_html(source: Any) -> str:
    """The per-process summary, or why there is none."""

    def build() -> str:
        memory = source.memory()
        note = memory.note()
        if note:
            return html.note_html(note)
        summary = memory.summary()
        # the notebook's memory a worker maps: a column only where the run says what it was
        known = "mapped_bytes" in summary and summary["mapped_bytes"].notna().any()
        columns = (*SUMMARY_COLUMNS[:5], "mapped_bytes", *SUMMARY_COLUMNS[5:])
        return html.frame_html(summary, columns if known else SUMMARY_COLUMNS)

    return table_or_note(build)


def torch_html(source: Any) -> str:
    """PyTorch's counts around the cell and the largest tensors at its peak."""

    def build() -> str:
        memory = source.memory()
        counts = memory.torch_counts()
        parts = []
        if len(counts):
            parts.append(html.section_html("PyTorch in the profiled process",
                                           html.frame_html(counts, TORCH_COLUMNS)))  # fmt: skip
        lines = memory.top_lines()
        if len(lines):
            body = html.frame_html(lines, LINE_COLUMNS, headers=LINE_HEADERS)
            parts.append(html.section_html("Largest tensors at PyTorch's peak", body))
        elif len(counts):
            parts.append(html.note_html(lines.attrs.get("reason") or NO_SNAPSHOT))
        if parts:
            parts.append(html.note_html(DIFFER_NOTE))
        else:  # never a silent blank: why PyTorch's part is empty (results.memory_frames)
            reason = counts.attrs.get("reason", "")
            parts.append(html.note_html(reason) if reason else "")
        return "".join(parts)

    return table_or_note(build)


def _chart(source: Any, window: tuple[int, int] | None = None) -> Any:
    memory = source.memory()
    rows = memory.chart_rows(window)
    if rows.empty:
        raise ValueError("no device-memory events in this run (profile with %%nsys --memory)")
    return memory_chart(rows, memory.summary(), source.origin_ns(), window)


def has_memory(source: Any) -> bool:
    frames, _ = attempt(lambda: source.memory())
    return frames is not None and not frames.note()


def memory_static_html(source: Any) -> str:
    """The static form: chart, per-process summary, torch's view."""
    chart = chart_html(lambda: _chart(source), "memory chart") if has_memory(source) else ""
    return summary_html(source) + chart + torch_html(source)


def memory_widgets(source: Any, show_window: Callable[[tuple[int, int]], Any] | None) -> list[Any]:
    """The live tab's GPU-memory part: its chart's brush calls ``show_window`` (ns window)."""
    page: list[Any] = [w.HTML(summary_html(source))]
    if has_memory(source):
        chart = chart_widget(lambda: _chart(source), "memory chart")
        if isinstance(chart, LiveChart) and show_window is not None:
            origin = source.origin_ns()

            def on_brush(value: Any) -> None:
                span = value.get("ms") if isinstance(value, dict) else None
                if span and len(span) == 2:
                    lo, hi = sorted(float(v) for v in span)
                    show_window((origin + round(lo * 1e6), origin + round(hi * 1e6)))

            chart.on_selection(BRUSH, on_brush)
        page.append(chart)
    torch_part = torch_html(source)
    if torch_part:
        page.append(w.HTML(torch_part))
    return page


def timeline_memory(source: Any) -> Callable[[tuple[int, int] | None], Any] | None:
    """What the Timeline tab draws under its timeline for a window (None: no memory events)."""
    if not has_memory(source):
        return None
    return lambda window: _chart(source, window)
