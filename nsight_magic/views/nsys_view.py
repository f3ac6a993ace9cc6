"""The %%nsys view: a header (GPU, captured time, GPU busy %, kernel count, processes, ranks,
run dir, and one line per report warning) over tabs Kernels / NVTX / Timeline / Memory / Gaps
/ Idle (+ Processes when several ran GPU work, Ops with PyTorch op ranges, Ranks for a
multi-rank run) / Profile a kernel, and the static HTML form of the same findings. Frames
come from an ``NsysSource``; this module only lays them out, and links the charts with the
picker: a click on a kernel picks it, the picked kernel is highlighted."""

from __future__ import annotations

import functools
from typing import Any

import ipywidgets as w

from ..vocabulary.columns import REPEAT_SHOWN
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
from .lazy_tabs import LazyTabs
from .live import PICK, LiveChart, picked_name
from .memory_view import memory_static_html, memory_widgets, timeline_memory
from .ops_view import NVTX_NOTE, has_ops, ops_static_html, ops_widget
from .picker import KernelPicker
from .protocols import NsysSource, ProfileFn, ProfileRangeFn, ProfileTopFn
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

# Shown columns; headers and formats come from nsight_magic/vocabulary/columns.py (``*_HEADERS``
# rename a column for one table only).
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
# where work launched from other threads makes a range's phase differ from its own thread's
NVTX_PHASE_COLUMNS = ("label", "style", "instances", "proj_total_ns", "phase_total_ns",
                      "range_total_ns", "gpu_ops", "phase_gpu_ops")  # fmt: skip
PHASE_NOTE = (
    "GPU time: the work launched from the range's own thread (as nsys stats projects it). "
    "Phase time: the work launched by any thread of its process while the range was open "
    "(autograd's backward thread included); MFU per range uses the phase time."
)
MEMORY_COLUMNS = ("kind", "count", "bytes", "total_ns", "bandwidth_gb_per_s")
MEMORY_HEADERS = {"count": "copies", "total_ns": "time"}
GAP_COLUMNS = ("stream_id", "duration_ns", "prev_op_short", "next_op_short")
GAP_HEADERS = {"duration_ns": "idle"}
GAP_TITLES = {"prev_op_short": "prev_op", "next_op_short": "next_op"}


def _count(value: Any) -> str | None:
    return f"{value:,}" if isinstance(value, int) else None


def _peak(info: dict[str, Any]) -> str | None:
    """``1.40 GB (L4: opt.step())``: the largest process peak of a ``--memory`` run."""
    peak = info.get("memory_peak_bytes")
    if not isinstance(peak, int):
        return None
    at = info.get("memory_peak_at")
    return html.fmt_bytes(peak) + (f" ({html.shorten(at, 40)})" if at else "")


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
        "peak GPU memory": _peak(info),
        "repeats": info.get("repeats"),
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
        columns: tuple[str, ...] = KERNEL_COLUMNS + REPEAT_SHOWN
        nodes = table.get(GRAPH_NODE_COLUMN)
        if nodes is not None and (nodes.fillna(0) > 0).any():
            columns += (GRAPH_NODE_COLUMN,)  # the marker of kernels run as graph nodes
        return html.frame_html(table, columns, max_rows=max_rows, titles={"short_name": "name"},
                               optional=REPEAT_SHOWN)  # fmt: skip

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
    several, err = attempt(source.several_processes)
    return err is None and bool(several)


def nvtx_html(source: NsysSource, max_rows: int = 25) -> str:
    def build() -> str:
        frame = source.nvtx_table()
        note = html.note_html(NVTX_NOTE) if has_ops(source) else ""
        if frame.empty:
            return note + html.note_html("No NVTX ranges with GPU work.")
        columns = NVTX_PHASE_COLUMNS if source.phases_differ() else NVTX_COLUMNS
        if columns is NVTX_PHASE_COLUMNS:
            note += html.note_html(PHASE_NOTE)
        return note + html.frame_html(frame, columns + REPEAT_SHOWN, max_rows=max_rows,
                                      optional=REPEAT_SHOWN)  # fmt: skip

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
    # The summary and the top kernels lead; every other tab waits behind its heading, and the
    # report's GUI line closes the view (a note that there is none must not open the page).
    folded = html.folded_section_html
    parts = [
        header_html(source, with_report=False),
        html.section_html("Kernels (by total GPU time)", kernels_html(source)),
        kernel_chart,
        folded("NVTX ranges (GPU-projected)", nvtx_html(source) + nvtx_chart),
        folded("Timeline", timeline),
        folded("Memory copies", memory_html(source)),
        folded("Gaps", gaps_html(source)),
        folded("Idle: why the GPU idled", _idle_static(source)),
        folded("GPU memory: where it went", memory_static_html(source)),
    ]
    if has_processes(source):
        parts.append(folded("GPU work per process", processes_html(source)))
    if has_ops(source):
        parts.append(folded("PyTorch ops", ops_static_html(source)))
    ranks, _ = attempt(source.ranks)
    if ranks is not None:
        parts.append(ranks_static_html(ranks))  # a multi-rank run's finding: left open
    info, _ = attempt(source.header)
    parts.append(html.gui_html(info or {}))
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


class _LinkedParts:
    """The parts of the live view that link to each other, each built when first wanted: the
    picker (its tab, or a click on a kernel anywhere), the range profiler (the NVTX tab), the
    timeline (its tab, or "Show in timeline" on the Idle tab). The picked kernel is the charts'
    focus; before the picker exists it is the top kernel, the picker's first choice."""

    def __init__(
        self,
        source: NsysSource,
        profile_fn: ProfileFn,
        profile_range_fn: ProfileRangeFn,
        profile_top_fn: ProfileTopFn | None = None,
    ) -> None:
        self.source = source
        self.profile_fn = profile_fn
        self.profile_range_fn = profile_range_fn
        self.profile_top_fn = profile_top_fn
        self.kernel_chart: Any = None
        table, _ = attempt(source.kernel_table)
        top = table is not None and len(table) > 0
        self.focus: str | None = str(table["name"].iloc[0]) if top else None

    @functools.cached_property
    def picker(self) -> KernelPicker:
        picker = KernelPicker(self.source, profile_fn=self.profile_fn,
                              profile_top_fn=self.profile_top_fn)  # fmt: skip
        picker.on_change(self.highlight)
        self.highlight(picker.kernel.value)
        return picker

    @functools.cached_property
    def ranges(self) -> RangeProfiler:
        return RangeProfiler(self.source, self.profile_range_fn, on_pick=self.pick)

    @functools.cached_property
    def timeline_or_error(self) -> tuple[TimelineView | None, str | None]:
        memory, _ = attempt(lambda: timeline_memory(self.source))
        timeline, err = attempt(lambda: TimelineView(self.source, on_pick=self.pick, memory=memory))
        if timeline is not None:
            timeline.set_focus(self.focus)
        return timeline, err

    def pick(self, name: str) -> None:
        """A click on a kernel: choose it in the picker."""
        self.picker.select(name)

    def highlight(self, name: str | None) -> None:
        self.focus = name
        if isinstance(self.kernel_chart, LiveChart):
            self.kernel_chart.set_focus(name)
        if "timeline_or_error" in self.__dict__:  # built: focus it too
            timeline, _ = self.timeline_or_error
            if timeline is not None:
                timeline.set_focus(name)


class NsysView(w.VBox):
    """The live view: header + Tab(Kernels, NVTX, Timeline, Memory, Gaps, Idle, [Processes],
    [Ops], [Ranks], Profile a kernel) + the report's link. Only the Kernels page is built at
    display; each other page when first opened (``LazyTabs``). ``picker``, ``ranges`` and
    ``timeline`` reach the parts (built on first use), ``page(title)`` builds a page."""

    def __init__(
        self,
        source: NsysSource,
        profile_fn: ProfileFn,
        profile_range_fn: ProfileRangeFn,
        profile_top_fn: ProfileTopFn | None = None,
    ) -> None:
        parts = _LinkedParts(source, profile_fn, profile_range_fn, profile_top_fn)
        builders = {
            "Kernels": lambda: _kernels_page(source, parts),
            "NVTX": lambda: _nvtx_page(source, parts),
            "Timeline": lambda: _timeline_page(parts),
            "Memory": lambda: _memory_page(source, self._show_window),
            "Gaps": lambda: [w.HTML(gaps_html(source, max_rows=25))],
            "Idle": lambda: _idle_page(source, parts, self._show_window),
        }
        if has_processes(source):
            builders["Processes"] = lambda: [w.HTML(processes_html(source))]
        if has_ops(source):
            builders["Ops"] = lambda: _children(ops_widget(source))
        ranks, _ = attempt(source.ranks)
        if ranks is not None:
            builders["Ranks"] = lambda: _children(ranks_widget(ranks))
        builders["Profile a kernel"] = lambda: _children(parts.picker.widget)
        self._parts = parts
        self.tabs = LazyTabs(builders, waiting={"Idle": IDLE_WAITING})
        super().__init__(
            [
                w.HTML(header_html(source, with_report=False)),
                self.tabs.tab,
                report_widget(source.header),  # last: the children before it keep their places
            ]
        )

    @property
    def picker(self) -> KernelPicker:
        return self._parts.picker

    @property
    def ranges(self) -> RangeProfiler:
        return self._parts.ranges

    @property
    def timeline(self) -> TimelineView | None:
        return self._parts.timeline_or_error[0]

    def page(self, title: str) -> Any:
        """Page ``title``, built if it was not (``open`` is the widget's own: its comm)."""
        return self.tabs.page(title)

    def load_idle(self) -> Any:
        """The Idle tab's content (computed once: it reads every CUDA call)."""
        return self.tabs.page("Idle").children[0]

    def _show_window(self, window: tuple[int, int]) -> None:
        """The Idle tab's "Show in timeline": zoom the timeline and switch to it."""
        timeline = self.timeline
        if timeline is not None:
            timeline.zoom(window)
            self.tabs.show("Timeline")


IDLE_WAITING = "Why the GPU idled: computed when this tab is opened."


def _children(widget: Any) -> list[Any]:
    """A page's widgets: a box's children (the page is a box already), else the widget."""
    return list(widget.children) if isinstance(widget, w.Box) else [widget]


def _kernels_page(source: NsysSource, parts: _LinkedParts) -> list[Any]:
    chart = chart_widget(lambda: charts.top_kernels_chart(source.kernel_table()), "chart")
    parts.kernel_chart = chart
    if isinstance(chart, LiveChart):
        chart.set_focus(parts.focus)
    _on_pick(chart, parts.pick)
    return [w.HTML(kernels_html(source, max_rows=50)), chart]


def _nvtx_page(source: NsysSource, parts: _LinkedParts) -> list[Any]:
    chart = chart_widget(lambda: charts.nvtx_ranges_chart(source.nvtx_table()), "chart")
    _on_pick(chart, parts.ranges.select)
    return [w.HTML(nvtx_html(source, max_rows=100)), chart, parts.ranges.widget]


def _timeline_page(parts: _LinkedParts) -> list[Any]:
    timeline, err = parts.timeline_or_error
    return (
        _children(timeline.widget) if timeline is not None else [note_widget(f"no timeline: {err}")]
    )


def _memory_page(source: NsysSource, show_window: Any) -> list[Any]:
    """Where the GPU memory went (``memory_view``), then the copies."""
    copies, _ = attempt(source.copies)
    page = [w.HTML(memory_html(source))]
    page = [*memory_widgets(source, show_window), w.HTML(html.section_html("Copies", "")), *page]
    if copies is not None and len(copies) > 0:
        page.append(chart_widget(lambda: charts.memcpy_chart(copies), "chart"))
    return page


def _idle_page(source: NsysSource, parts: _LinkedParts, show_window: Any) -> list[Any]:
    timeline, _ = parts.timeline_or_error  # built here: the link needs one that works
    link = show_window if timeline is not None else None
    idle, err = attempt(lambda: idle_widget(source.idle(), source.origin_ns(), link))
    return [idle if idle is not None else note_widget(f"idle time not computed: {err}")]


def nsys_widget(
    source: NsysSource,
    profile_fn: ProfileFn,
    profile_range_fn: ProfileRangeFn,
    profile_top_fn: ProfileTopFn | None = None,
) -> Any:
    """The live view (``NsysView``); the picker has "Profile top N" when ``profile_top_fn``."""
    return NsysView(source, profile_fn, profile_range_fn, profile_top_fn)
