"""The Timeline tab: an overview of the whole capture with a brush, and the timeline of the
brushed window below it. Each brush asks the run for that window's rows again (binned from the
run's own frames, so zooming in shows single kernels, never a stretched picture of the bins),
so the chart never holds more than the run's row budget. "Show all" returns to the capture."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd

from . import html
from .common import attempt, one_line
from .live import BRUSH, PICK, LiveChart, picked_name
from .protocols import TimelineSource
from .timeline_chart import OVERVIEW_ROWS, timeline_chart, timeline_overview


def _describe(frame: pd.DataFrame, window: tuple[int, int] | None) -> str:
    events = int(frame["count"].sum()) if len(frame) else 0
    span = "whole capture" if window is None else f"window {html.fmt_ns(window[1] - window[0])}"
    binned = " (busy stretches binned: zoom in for single events)" if events > len(frame) else ""
    return f"{span}: {len(frame):,} bars for {events:,} events{binned}"


class TimelineView:
    """``widget``: overview (brush) + detail (click picks a kernel). ``zoom(window)`` is what a
    brush does; ``on_pick(name)`` is called with the kernel name a click picked."""

    def __init__(
        self,
        source: TimelineSource,
        on_pick: Callable[[str], object] | None = None,
        memory: Callable[[tuple[int, int] | None], Any] | None = None,
    ) -> None:
        """``memory``: the device-memory chart of a window (``memory_view``), drawn under the
        timeline and zoomed with it; None for none."""
        self.source = source
        self.memory = memory
        self.on_pick = on_pick
        self.origin = source.origin_ns()
        self.window: tuple[int, int] | None = None
        frame = source.timeline()
        overview = source.timeline(None, rows=OVERVIEW_ROWS)
        # The brush reports once the drag ends (a re-read per pixel of the drag would queue up).
        self.overview = LiveChart(
            timeline_overview(overview, self.origin), debounce_wait=250, max_wait=False
        )
        self.detail = LiveChart(timeline_chart(frame, self.origin))
        self.status = w.HTML(html.note_html(_describe(frame, None)))
        self.reset = w.Button(description="Show all", icon="expand", disabled=True)
        self.reset.on_click(lambda _: self.zoom(None))
        self.overview.on_selection(BRUSH, self._on_brush)
        self.detail.on_selection(PICK, self._on_click)
        parts = [w.HBox([self.reset, self.status]), self.overview, self.detail]
        self.memory_chart: LiveChart | None = None
        if memory is not None:
            chart, _ = attempt(lambda: memory(None))
            if chart is not None:
                self.memory_chart = LiveChart(chart)
                parts.append(self.memory_chart)
        self.widget = w.VBox(parts)

    def zoom(self, window: tuple[int, int] | None) -> None:
        """Show ``window`` (ns on the report's clock), or the whole capture for None."""
        frame, err = attempt(lambda: self.source.timeline(window))
        if err is not None:
            self.status.value = html.note_html(f"could not show that window: {err}")
            return
        try:
            chart = timeline_chart(frame, self.origin, window)
            focus = self.detail.focus
            self.detail.chart = chart
            self.detail.set_focus(focus)  # a new chart starts unfocused
        except Exception as exc:
            self.status.value = html.note_html(f"could not show that window: {one_line(exc)}")
            return
        if self.memory is not None and self.memory_chart is not None:
            chart, _ = attempt(lambda: self.memory(window))  # type: ignore[misc]
            if chart is not None:
                self.memory_chart.chart = chart
        self.window = window
        self.reset.disabled = window is None
        self.status.value = html.note_html(_describe(frame, window))

    def _on_brush(self, value: Any) -> None:
        span = value.get("start_ms") if isinstance(value, dict) else None
        if not span or len(span) != 2:
            return  # brush cleared: keep the window; "Show all" goes back
        lo, hi = sorted(float(v) for v in span)
        self.zoom((self.origin + round(lo * 1e6), self.origin + round(hi * 1e6)))

    def _on_click(self, value: Any) -> None:
        name = picked_name(value)
        if name is not None and self.on_pick is not None:
            self.on_pick(name)

    def set_focus(self, name: str | None) -> None:
        self.detail.set_focus(name)
