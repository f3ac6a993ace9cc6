"""The %%nsys view: a header (GPU, captured time, GPU busy %, kernel count, run dir) over tabs
Kernels / NVTX / Timeline / Memory / Gaps / Profile a kernel, plus the static HTML form of the
same findings. Frames come from the run; this module only lays them out."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ..analysis.memory import copies_by_kind
from . import charts, tables
from .static import chart_img_html

TOP_N = 15
MIN_GAP_NS = 10_000  # idle stretches shorter than 10 us are launch latency, not findings
STATEMENT_DOMAIN = "nsight_magic"


def _safe(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """Call ``fn``; on failure return the error as one line, so one missing table (reports omit
    empty ones) leaves the other tabs intact."""
    try:
        return fn(), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def header_items(run: Any) -> dict[str, Any]:
    info, _ = _safe(run.gpu_info)
    window, _ = _safe(run.capture_window)
    busy, _ = _safe(run.gpu_busy_pct)
    kernels, _ = _safe(run.kernels)
    return {
        "GPU": (info or {}).get("name"),
        "captured": tables.fmt_ns(window[1] - window[0]) if window else None,
        "GPU busy": tables.fmt_pct(busy) if busy is not None else None,
        "kernels": f"{len(kernels):,}" if kernels is not None else None,
        "run dir": str(run.run_dir) if run.run_dir else None,
    }


def _statement_key(row: pd.Series) -> tuple[int, int, float]:
    # Statement ranges of the cell ("cell", then "L<n>: ..." by line) before the user's ranges.
    if row["domain"] != STATEMENT_DOMAIN:
        return (1, 0, -float(row["proj_total_ns"]))
    if row["range"] == "cell":
        return (0, -1, 0.0)
    m = re.match(r"L(\d+):", str(row["range"]))
    return (0, int(m.group(1)) if m else 10**9, 0.0)


def ordered_projection(projection: pd.DataFrame) -> pd.DataFrame:
    """NVTX projection with the cell's statement ranges first, in line order, then the rest by
    GPU time: the statements read as the cell does."""
    if projection.empty:
        return projection
    keys = projection.apply(_statement_key, axis=1)
    order = sorted(range(len(projection)), key=lambda i: keys.iloc[i])
    return projection.iloc[order].reset_index(drop=True)


KERNEL_COLUMNS = {
    "name": "kernel",
    "instances": "instances",
    "total_ns": "total",
    "avg_ns": "avg",
    "med_ns": "median",
    "min_ns": "min",
    "max_ns": "max",
    "time_pct": "time %",
}
KERNEL_FORMATS = {
    "total_ns": tables.fmt_ns,
    "avg_ns": tables.fmt_ns,
    "med_ns": tables.fmt_ns,
    "min_ns": tables.fmt_ns,
    "max_ns": tables.fmt_ns,
    "time_pct": tables.fmt_pct,
}
NVTX_COLUMNS = {
    "label": "range",
    "style": "style",
    "instances": "instances",
    "proj_total_ns": "GPU time",
    "range_total_ns": "CPU range time",
    "gpu_ops": "GPU ops",
}
NVTX_FORMATS = {"proj_total_ns": tables.fmt_ns, "range_total_ns": tables.fmt_ns}
MEMORY_COLUMNS = {
    "kind": "kind",
    "count": "copies",
    "bytes": "bytes",
    "total_ns": "time",
    "bandwidth_gbps": "GB/s",
}
MEMORY_FORMATS = {
    "bytes": tables.fmt_bytes,
    "total_ns": tables.fmt_ns,
    "bandwidth_gbps": lambda v: "" if pd.isna(v) else f"{v:,.2f}",
}
GAP_COLUMNS = {
    "stream_id": "stream",
    "duration_ns": "idle",
    "before": "after kernel/copy",
    "after": "before kernel/copy",
}


def kernels_html(run: Any, max_rows: int = TOP_N) -> str:
    summary, err = _safe(run.kernel_summary)
    if err:
        return tables.note_html(err)
    return tables.frame_html(summary, KERNEL_COLUMNS, KERNEL_FORMATS, max_rows=max_rows)


def nvtx_html(run: Any, max_rows: int = 25) -> str:
    projection, err = _safe(run.nvtx_gpu_projection)
    if err:
        return tables.note_html(err)
    if projection.empty:
        return tables.note_html("No NVTX ranges with GPU work.")
    frame = ordered_projection(projection)
    frame["label"] = charts.nvtx_label(frame)
    return tables.frame_html(frame, NVTX_COLUMNS, NVTX_FORMATS, max_rows=max_rows)


def memory_html(run: Any) -> str:
    memcpy, err = _safe(run.memcpy)
    if err:
        return tables.note_html(err)
    if memcpy.empty:
        return tables.note_html("No memory copies captured.")
    return tables.frame_html(copies_by_kind(memcpy), MEMORY_COLUMNS, MEMORY_FORMATS)


def gap_summary(gaps: pd.DataFrame) -> dict[str, Any]:
    return {
        f"idle gaps >= {tables.fmt_ns(MIN_GAP_NS)}": f"{len(gaps):,}",
        "total idle": tables.fmt_ns(int(gaps["duration_ns"].sum())) if len(gaps) else "0 ns",
        "largest": tables.fmt_ns(int(gaps["duration_ns"].max())) if len(gaps) else None,
    }


def gaps_html(run: Any, max_rows: int = 10) -> str:
    gaps, err = _safe(lambda: run.gaps(MIN_GAP_NS))
    if err:
        return tables.note_html(err)
    head = tables.header_html("GPU idle", gap_summary(gaps))
    if gaps.empty:
        return head
    top = gaps.sort_values("duration_ns", ascending=False)
    return head + tables.frame_html(
        top, GAP_COLUMNS, {"duration_ns": tables.fmt_ns}, max_rows=max_rows
    )


# Bars in the timeline: more than a 640 px chart can tell apart, few enough that the inline
# chart data keeps a saved notebook small (benchmarks/weight.py: P2).
TIMELINE_ROWS = 1000


def timeline_chart(run: Any) -> Any:
    from ..analysis.timeline import timeline_frame

    memcpy, _ = _safe(run.memcpy)
    nvtx, _ = _safe(run.nvtx)
    frame = timeline_frame(run.kernels(), memcpy, nvtx, max_rows=TIMELINE_ROWS)
    window, _ = _safe(run.capture_window)
    return charts.timeline_chart(frame, origin_ns=window[0] if window else None)


def _chart_or_none(build: Callable[[], Any]) -> Any:
    chart, _ = _safe(build)
    return chart


def nsys_static_html(run: Any) -> str:
    """Everything a reader without a kernel needs: header, top kernels (table + chart), NVTX
    projection (table + chart), timeline, copies and idle gaps."""
    kernel_chart = _chart_or_none(lambda: charts.top_kernels_chart(run.kernel_summary(), TOP_N))
    nvtx_chart = _chart_or_none(lambda: charts.nvtx_ranges_chart(run.nvtx_gpu_projection()))
    parts = [
        tables.header_html(f"Nsight Systems: {run.name}", header_items(run)),
        tables.section_html("Kernels (by total GPU time)", kernels_html(run)),
        chart_img_html(kernel_chart, "top kernels"),
        tables.section_html("NVTX ranges (GPU-projected)", nvtx_html(run)),
        chart_img_html(nvtx_chart, "NVTX ranges"),
        tables.section_html(
            "Timeline", chart_img_html(_chart_or_none(lambda: timeline_chart(run)), "timeline")
        ),
        tables.section_html("Memory copies", memory_html(run)),
        tables.section_html("Gaps", gaps_html(run)),
    ]
    return '<div class="nsight-magic nsys">' + "".join(parts) + "</div>"


# --- widgets ---------------------------------------------------------------------------------
def chart_output(chart: Any) -> Any:
    """An Output widget holding the chart's own (interactive, vega-lite) display data."""
    import ipywidgets as w

    out = w.Output()
    if chart is not None:
        out.append_display_data(chart)
    return out


def _tab(children: list[Any]) -> Any:
    import ipywidgets as w

    return w.VBox(children)


def nsys_widget(run: Any, profile_fn: Callable[..., Any] | None = None) -> Any:
    """The live view: header + Tab(Kernels, NVTX, Timeline, Memory, Gaps, Profile a kernel)."""
    import ipywidgets as w

    from .picker import KernelPicker

    header = w.HTML(tables.header_html(f"Nsight Systems: {run.name}", header_items(run)))
    pages = {
        "Kernels": _tab(
            [
                w.HTML(kernels_html(run, max_rows=50)),
                chart_output(
                    _chart_or_none(lambda: charts.top_kernels_chart(run.kernel_summary()))
                ),
            ]
        ),
        "NVTX": _tab(
            [
                w.HTML(nvtx_html(run, max_rows=100)),
                chart_output(
                    _chart_or_none(lambda: charts.nvtx_ranges_chart(run.nvtx_gpu_projection()))
                ),
            ]
        ),
        "Timeline": _tab([chart_output(_chart_or_none(lambda: timeline_chart(run)))]),
        "Memory": _tab(
            [
                w.HTML(memory_html(run)),
                chart_output(_chart_or_none(lambda: charts.memcpy_chart(run.memcpy()))),
            ]
        ),
        "Gaps": _tab([w.HTML(gaps_html(run, max_rows=25))]),
        "Profile a kernel": KernelPicker(run, profile_fn=profile_fn).widget,
    }
    tabs = w.Tab(children=list(pages.values()), titles=list(pages))
    return w.VBox([header, tabs])
