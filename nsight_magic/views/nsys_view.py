"""The %%nsys view: a header (GPU, captured time, GPU busy %, kernel count, processes, ranks,
run dir, and one line per report warning) over tabs Kernels / NVTX / Timeline / Memory / Gaps
/ Idle (+ Processes when several ran GPU work, Ops with PyTorch op ranges, Ranks for a
multi-rank run) / Profile a kernel, and the static HTML form of the same findings. Frames
come from an ``NsysSource``; this module only lays them out, and links the charts with the
picker: a click on a kernel picks it, the picked kernel is highlighted."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from . import charts, html
from .common import (
    attempt,
    chart_html,
    chart_widget,
    note_widget,
    report_widget,
    table_or_note,
)
from .idle_view import idle_static_html, idle_widget
from .live import PICK, LiveChart, picked_name
from .ops_view import NVTX_NOTE, has_ops, ops_static_html, ops_widget
from .picker import KernelPicker
from .protocols import NsysSource, ProfileFn, ProfileRangeFn
from .range_profiler import RangeProfiler
from .ranks_view import ranks_static_html, ranks_widget
from .timeline_chart import timeline_chart
from .timeline_view import TimelineView

TOP_N = 15
MIN_GAP_NS = 10_000  # idle stretches shorter than 10 us are launch latency, not findings
# The idle breakdown reads every CUDA (and OS) call: ~3 s at 100k kernels on 2 cores, where the
# rest of the view takes 0.4 s. The static form includes it up to this many kernels; the live
# Idle tab computes it when first opened.
IDLE_STATIC_MAX_KERNELS = 50_000

# Shown columns; headers and formats come from nsight_magic/columns.py (``*_HEADERS`` rename a
# column for one table only).
KERNEL_COLUMNS = ("short_name", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
                  "time_pct")  # fmt: skip
GRAPH_NODE_COLUMN = "graph_node_instances"
GRAPH_COLUMNS = ("name", "launches", "total_ns", "avg_ns", "min_ns", "max_ns", "time_pct")
GRAPH_HEADERS = {"name": "graph launch"}
PROCESS_COLUMNS = ("rank", "pid", "name", "kernels", "graph_launches", "memcpy_count",
                   "memcpy_bytes", "gpu_time_ns", "gpu_time_pct", "devices")  # fmt: skip
PROCESS_HEADERS = {"name": "process"}
PROCESS_OPTIONAL = ("rank",)  # a multi-rank run only
NVTX_COLUMNS = ("label", "style", "instances", "proj_total_ns", "range_total_ns", "gpu_ops")
MEMORY_COLUMNS = ("kind", "count", "bytes", "total_ns", "bandwidth_gb_per_s")
MEMORY_HEADERS = {"count": "copies", "total_ns": "time"}
GAP_COLUMNS = ("stream_id", "duration_ns", "prev_op_short", "next_op_short")
GAP_HEADERS = {"duration_ns": "idle"}
GAP_TITLES = {"prev_op_short": "prev_op", "next_op_short": "next_op"}


def _count(value: Any) -> str | None:
    return f"{value:,}" if isinstance(value, int) else None


def header_items(source: NsysSource) -> dict[str, Any]:
    info, _ = attempt(source.header)
    info = info or {}
    graphs = info.get("graph_launches")
    processes = info.get("processes") or []
    return {
        "GPU": info.get("gpu"),
        "captured": html.fmt_ns(info.get("captured_ns")) or None,
        "GPU busy": html.fmt_pct(info.get("busy_pct")) or None,
        "kernels": _count(info.get("kernels")),
        "CUDA graph launches (whole graphs)": _count(graphs) if graphs else None,
        "ranks": _count(info.get("ranks")),
        "processes": ", ".join(processes) if len(processes) > 1 else None,
        "run dir": info.get("run_dir"),
    }


def header_warnings(source: NsysSource) -> list[str]:
    warnings, err = attempt(source.warnings)
    return list(warnings) if err is None else [f"report warnings not read: {err}"]


def header_html(source: NsysSource, with_report: bool = True) -> str:
    """The header; ``with_report``: the report's link and GUI command under it (the live view
    shows them in an Output widget instead, ``common.report_widget``)."""
    info, _ = attempt(source.header)
    report = html.gui_html(info or {}) if with_report else ""
    title = f"Nsight Systems: {source.name}"
    return html.header_html(title, header_items(source), header_warnings(source)) + report


def graph_note(source: NsysSource) -> str:
    """One line when the report holds whole graph launches instead of per-kernel rows."""
    info, _ = attempt(source.header)
    launches = (info or {}).get("graph_launches")
    if not launches:
        return ""
    return html.note_html(
        f"This report holds {launches:,} CUDA graph launches instead of per-kernel rows (nsys"
        " --cuda-graph-trace=graph): the kernels they ran are not in the table above; profile"
        " with --cuda-graph-trace=node to see them one by one."
    )


def graphs_html(source: NsysSource, max_rows: int = TOP_N) -> str:
    def build() -> str:
        table = source.graph_table()
        if table.empty:
            return ""
        return graph_note(source) + html.frame_html(
            table, GRAPH_COLUMNS, max_rows=max_rows, headers=GRAPH_HEADERS
        )

    return table_or_note(build)


NO_KERNELS = "No kernels in this capture (nsys wrote no kernel table); the copies it holds:"


def kernels_html(source: NsysSource, max_rows: int = TOP_N) -> str:
    def build() -> str:
        table = source.kernel_table()
        if table.empty:  # nsys leaves the kernel table out of a capture without kernels
            return html.note_html(NO_KERNELS) + memory_html(source)
        columns: tuple[str, ...] = KERNEL_COLUMNS
        nodes = table.get(GRAPH_NODE_COLUMN)
        if nodes is not None and (nodes.fillna(0) > 0).any():
            columns += (GRAPH_NODE_COLUMN,)  # the marker of kernels run as graph nodes
        return html.frame_html(table, columns, max_rows=max_rows, titles={"short_name": "name"})

    return table_or_note(build) + graphs_html(source)


def processes_html(source: NsysSource) -> str:
    return table_or_note(
        lambda: html.frame_html(
            source.process_table(),
            PROCESS_COLUMNS,
            max_rows=50,
            headers=PROCESS_HEADERS,
            optional=PROCESS_OPTIONAL,
        )
    )


def has_processes(source: NsysSource) -> bool:
    table, err = attempt(source.process_table)
    return err is None and len(table) > 1


def nvtx_html(source: NsysSource, max_rows: int = 25) -> str:
    def build() -> str:
        frame = source.nvtx_table()
        note = html.note_html(NVTX_NOTE) if has_ops(source) else ""
        if frame.empty:
            return note + html.note_html("No NVTX ranges with GPU work.")
        return note + html.frame_html(frame, NVTX_COLUMNS, max_rows=max_rows)

    return table_or_note(build)


def memory_html(source: NsysSource) -> str:
    def build() -> str:
        copies = source.copies()
        if copies.empty:
            return html.note_html("No memory copies captured.")
        return html.frame_html(copies, MEMORY_COLUMNS, headers=MEMORY_HEADERS)

    return table_or_note(build)


def gaps_html(source: NsysSource, max_rows: int = 10) -> str:
    def build() -> str:
        gaps = source.gaps(MIN_GAP_NS)
        total = gaps["duration_ns"].sum() if len(gaps) else 0
        head = html.header_html(
            "GPU idle",
            {
                f"idle gaps >= {html.fmt_ns(MIN_GAP_NS)}": f"{len(gaps):,}",
                "total idle": html.fmt_ns(total) or "0 ns",
                "largest": html.fmt_ns(gaps["duration_ns"].max()) if len(gaps) else None,
            },
        )
        if gaps.empty:
            return head
        top = gaps.sort_values("duration_ns", ascending=False)
        return head + html.frame_html(
            top, GAP_COLUMNS, max_rows=max_rows, titles=GAP_TITLES, headers=GAP_HEADERS
        )

    return table_or_note(build)


def nsys_static_html(source: NsysSource) -> str:
    """Everything a reader without a kernel needs: header, top kernels (table + chart), NVTX
    projection (table + chart), timeline, copies and idle gaps; per-process GPU work, PyTorch
    ops and ranks when the run has them."""
    # The charts first: within ``static.rendering_together`` (results) they render in helper
    # processes while the tables below, and the live view, are built.
    kernel_chart = chart_html(
        lambda: charts.top_kernels_chart(source.kernel_table(), TOP_N), "top kernels"
    )
    timeline = chart_html(lambda: timeline_chart(source.timeline(), source.origin_ns()), "timeline")
    nvtx_chart = chart_html(lambda: charts.nvtx_ranges_chart(source.nvtx_table()), "NVTX ranges")
    parts = [
        header_html(source),
        html.section_html("Kernels (by total GPU time)", kernels_html(source)),
        kernel_chart,
        html.section_html("NVTX ranges (GPU-projected)", nvtx_html(source)),
        nvtx_chart,
        html.section_html("Timeline", timeline),
        html.section_html("Memory copies", memory_html(source)),
        html.section_html("Gaps", gaps_html(source)),
        html.section_html("Idle: why the GPU idled", _idle_static(source)),
    ]
    if has_processes(source):
        parts.append(html.section_html("GPU work per process", processes_html(source)))
    if has_ops(source):
        parts.append(html.section_html("PyTorch ops", ops_static_html(source)))
    ranks, _ = attempt(source.ranks)
    if ranks is not None:
        parts.append(ranks_static_html(ranks))
    return '<div class="nsight-magic nsys">' + "".join(parts) + "</div>"


def _idle_static(source: NsysSource) -> str:
    info, _ = attempt(source.header)
    kernels = (info or {}).get("kernels")
    if isinstance(kernels, int) and kernels > IDLE_STATIC_MAX_KERNELS:
        return html.note_html(
            f"Left out of the static form for a report of {kernels:,} kernels (it reads every "
            "CUDA call): the live Idle tab and run.idle_breakdown() compute it."
        )
    return table_or_note(lambda: idle_static_html(source.idle(), source.origin_ns()))


def _on_pick(chart: Any, callback: Any) -> None:
    """Wire a chart's click selection to ``callback(name)`` (nothing for a failed chart)."""
    if isinstance(chart, LiveChart):
        chart.on_selection(PICK, lambda value: _call_with_name(callback, value))


def _call_with_name(callback: Any, value: Any) -> None:
    name = picked_name(value)
    if name is not None:
        callback(name)


def nsys_widget(source: NsysSource, profile_fn: ProfileFn, profile_range_fn: ProfileRangeFn) -> Any:
    """The live view: header + Tab(Kernels, NVTX, Timeline, Memory, Gaps, Idle, [Processes],
    [Ops], [Ranks], Profile a kernel)."""
    picker = KernelPicker(source, profile_fn=profile_fn)
    ranges = RangeProfiler(source, profile_range_fn, on_pick=picker.select)

    kernel_chart = chart_widget(lambda: charts.top_kernels_chart(source.kernel_table()), "chart")
    nvtx_chart = chart_widget(lambda: charts.nvtx_ranges_chart(source.nvtx_table()), "chart")
    timeline, err = attempt(lambda: TimelineView(source, on_pick=picker.select))
    _on_pick(kernel_chart, picker.select)
    _on_pick(nvtx_chart, ranges.select)

    def highlight(name: str | None) -> None:
        if isinstance(kernel_chart, LiveChart):
            kernel_chart.set_focus(name)
        if timeline is not None:
            timeline.set_focus(name)

    copies, _ = attempt(source.copies)
    has_copies = copies is not None and len(copies) > 0
    picker.on_change(highlight)
    highlight(picker.kernel.value)

    pages = {
        "Kernels": w.VBox([w.HTML(kernels_html(source, max_rows=50)), kernel_chart]),
        "NVTX": w.VBox([w.HTML(nvtx_html(source, max_rows=100)), nvtx_chart, ranges.widget]),
        "Timeline": timeline.widget if timeline is not None else note_widget(f"no timeline: {err}"),
        "Memory": w.VBox(
            [w.HTML(memory_html(source))]
            + ([chart_widget(lambda: charts.memcpy_chart(copies), "chart")] if has_copies else [])
        ),
        "Gaps": w.VBox([w.HTML(gaps_html(source, max_rows=25))]),
    }
    tabs = w.Tab()

    def show_window(window: tuple[int, int]) -> None:  # the Idle tab's "Show in timeline"
        if timeline is not None:
            timeline.zoom(window)
            tabs.selected_index = list(pages).index("Timeline")

    idle_page = w.VBox([note_widget("Why the GPU idled: computed when this tab is opened.")])
    pages["Idle"] = idle_page

    def load_idle() -> Any:
        """Build the Idle tab (once): it reads every CUDA call, so only when it is wanted."""
        if not getattr(idle_page, "loaded", False):
            link = show_window if timeline is not None else None
            idle, err = attempt(lambda: idle_widget(source.idle(), source.origin_ns(), link))
            failed = note_widget(f"idle time not computed: {err}")
            idle_page.children = [idle if idle is not None else failed]
            idle_page.loaded = True
        return idle_page.children[0]

    def on_tab(change: Any) -> None:
        index = change.get("new")
        if index is not None and index < len(tabs.titles) and tabs.titles[index] == "Idle":
            load_idle()

    tabs.observe(on_tab, names="selected_index")
    if has_processes(source):
        pages["Processes"] = w.HTML(processes_html(source))
    if has_ops(source):
        pages["Ops"] = ops_widget(source)
    ranks, _ = attempt(source.ranks)
    if ranks is not None:
        pages["Ranks"] = ranks_widget(ranks)
    pages["Profile a kernel"] = picker.widget
    tabs.children, tabs.titles = list(pages.values()), list(pages)
    view = w.VBox(
        [
            w.HTML(header_html(source, with_report=False)),
            tabs,
            report_widget(source.header),  # last: the children before it keep their places
        ]
    )
    # Kept on the view so tests and users can reach the parts (the picker, the timeline).
    view.picker, view.ranges, view.timeline, view.load_idle = picker, ranges, timeline, load_idle
    return view
