"""The Idle tab: why the GPU idled. The top causes in one sentence each, idle time by cause in
total / per statement / per rank, the longest gaps with what the launching thread did (each
can be shown in the Timeline tab), and launch-bound stretches; plus its static HTML form.
Frames come from an ``IdleSource``; this module only lays them out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from . import html
from .common import attempt, table_or_note
from .protocols import IdleSource

CATEGORY_TITLES = {
    "cuda_sync": "in a CUDA sync call",
    "cuda_api": "in another CUDA call",
    "os_wait": "in an OS call (wait)",
    "host": "running host code (Python)",
    "collective_wait": "waiting in a collective",
}


def category_title(category: object) -> str:
    """What the launching thread was doing, in words (the category's own name if unknown)."""
    return CATEGORY_TITLES.get(str(category), str(category))


def at_ms(value: float) -> str:
    """An offset into the capture, in ms ("12.345 ms")."""
    return f"{value:,.3f} ms"


# Shown columns; headers and formats come from nsight_magic/vocabulary/columns.py (``*_HEADERS``
# rename a column for one table only, ``*_FORMATS`` are the formats this tab writes its own way).
BREAKDOWN_COLUMNS = ("statement", "rank", "category", "call", "frame", "idle_ns", "pct", "gaps")
BREAKDOWN_HEADERS = {"category": "the thread was", "frame": "Python line", "pct": "share"}
BREAKDOWN_FORMATS = {"category": category_title}
GAP_COLUMNS = ("start_ms", "duration_ns", "cause", "call", "statement", "next_op_short")
GAP_HEADERS = {"duration_ns": "idle", "cause": "mostly", "call": "longest call"}
GAP_FORMATS = {"cause": category_title, "start_ms": at_ms}
LAUNCH_COLUMNS = ("kernels", "start_ms", "span_ns", "busy_pct", "median_kernel_ns",
                  "median_launch_interval_ns", "cpu_launches_per_ms",
                  "gpu_kernels_per_ms")  # fmt: skip
LAUNCH_HEADERS = {
    "start_ms": "from",
    "span_ns": "lasting",
    "cpu_launches_per_ms": "CPU launches / ms",
    "gpu_kernels_per_ms": "GPU could run / ms",
}
LAUNCH_FORMATS = {"start_ms": at_ms}
NO_HOST = (
    "This run has no host capture: the time outside CUDA calls shows as host code without "
    "its Python lines, and OS waits (a data loader, a lock) are not told apart. "
    "Profile with %%nsys --host to see them."
)


def summary_html(idle: IdleSource) -> str:
    info, err = attempt(idle.summary)
    if err is not None:
        return html.note_html(f"idle time not computed: {err}")
    items = {
        "GPU idle (between ops)": html.fmt_ns(info["idle_ns"]) or "0 ns",
        "gaps": f"{info['gaps']:,}",
        "waiting in collectives": html.fmt_ns(info.get("collective_wait_ns")) or None,
        "host capture": "yes" if info["host_capture"] else "no (%%nsys --host adds it)",
    }
    note = "" if info["host_capture"] else html.note_html(NO_HOST)
    return html.header_html("Why the GPU idled", items) + note


def causes_html(idle: IdleSource) -> str:
    def build() -> str:
        causes = idle.causes(5)
        if causes.empty:
            return html.note_html("No idle time between GPU ops.")
        items = "".join(f"<li>{html.esc(s)}</li>" for s in causes["sentence"])
        return f'<ol class="nsight-magic-causes">{items}</ol>'

    return table_or_note(build)


def breakdown_html(idle: IdleSource, max_rows: int = 12) -> str:
    def build() -> str:
        frame = idle.breakdown()
        parts = []
        for scope, title in (
            ("total", "Whole capture"),
            ("statement", "Per statement"),
            ("rank", "Per rank"),
        ):
            rows = frame[(frame["scope"] == scope).to_numpy()]
            if rows.empty:
                continue
            # the statement and rank columns only in their own scope's table
            columns = [c for c in BREAKDOWN_COLUMNS if c not in ("statement", "rank") or c == scope]
            if not (rows["frame"] != "").any():
                columns.remove("frame")
            parts.append(f"<h4>{title}</h4>")
            parts.append(
                html.frame_html(
                    rows, columns, BREAKDOWN_FORMATS, max_rows, headers=BREAKDOWN_HEADERS
                )
            )
        return "".join(parts)

    return table_or_note(build)


def _gaps(idle: IdleSource, origin_ns: int) -> Any:
    gaps = idle.gap_causes()
    return gaps.assign(
        start_ms=(gaps["start_ns"] - origin_ns) / 1e6,
        next_op_short=[html.shorten(a, 40) for a in gaps["next_op"].astype(str)],
    )


def gaps_html(idle: IdleSource, origin_ns: int, max_rows: int = 10) -> str:
    return table_or_note(
        lambda: html.frame_html(
            _gaps(idle, origin_ns), GAP_COLUMNS, GAP_FORMATS, max_rows, headers=GAP_HEADERS
        )
    )


def launch_bound_html(idle: IdleSource, origin_ns: int, max_rows: int = 10) -> str:
    def build() -> str:
        rows = idle.launch_bound()
        if rows.empty:
            return html.note_html(
                "No launch-bound stretch (8+ kernels in a row that each "
                "waited for the CPU to launch them)."
            )
        rows = rows.assign(
            start_ms=(rows["start_ns"] - origin_ns) / 1e6, span_ns=rows["end_ns"] - rows["start_ns"]
        )
        note = html.note_html(
            "Kernels that ran shorter than the time between their launches and found the GPU "
            "idle: here the CPU's launch rate, not the GPU, set the pace."
        )
        return note + html.frame_html(
            rows, LAUNCH_COLUMNS, LAUNCH_FORMATS, max_rows, headers=LAUNCH_HEADERS
        )

    return table_or_note(build)


def idle_static_html(
    idle: IdleSource, origin_ns: int, breakdown_rows: int = 12, gap_rows: int = 10
) -> str:
    """The tab's sections; the live tab shows more rows of the breakdown and the gaps."""
    return (
        summary_html(idle)
        + html.section_html("Top causes", causes_html(idle))
        + html.section_html("Idle time by cause", breakdown_html(idle, breakdown_rows))
        + html.section_html("Longest idle gaps", gaps_html(idle, origin_ns, gap_rows))
        + html.section_html("Launch-bound stretches", launch_bound_html(idle, origin_ns))
    )


def idle_widget(
    idle: IdleSource, origin_ns: int, show_window: Callable[[tuple[int, int]], None] | None
) -> Any:
    """The tab: the static content plus, when ``show_window`` is given (it zooms the Timeline
    tab and switches to it), a picker of the longest gaps with "Show in timeline"."""
    body = w.HTML(idle_static_html(idle, origin_ns, breakdown_rows=30, gap_rows=25))
    gaps, err = attempt(lambda: _gaps(idle, origin_ns).head(50))
    if show_window is None or err is not None or gaps.empty:
        return w.VBox([body])
    options = [
        (
            f"{html.fmt_ns(g.duration_ns)} at {at_ms(g.start_ms)}: "
            f"{category_title(g.cause)} {g.call}".rstrip(),
            i,
        )
        for i, g in enumerate(gaps.itertuples())
    ]
    choice = w.Dropdown(options=options, description="gap", layout=w.Layout(width="60%"))
    button = w.Button(description="Show in timeline", icon="search")

    def show(_: Any) -> None:
        g = gaps.iloc[int(choice.value)]
        pad = max(int(g["duration_ns"]) // 2, 20_000)
        show_window((int(g["start_ns"]) - pad, int(g["end_ns"]) + pad))

    button.on_click(show)
    view = w.VBox([body, w.HBox([choice, button])])
    view.gap_choice, view.show_button = choice, button
    return view
