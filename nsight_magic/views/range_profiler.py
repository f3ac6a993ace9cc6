""" "Profile this range" in the NVTX tab: choose an NVTX range (or click its bar), press the
button, and ``profile_range_fn`` runs Nsight Compute on the kernels launched inside it (the lead's
``%%ncu --nvtx`` path); its view shows below, as the kernel picker's does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from . import html
from .background import BackgroundProfile
from .picker import NCU_SETS, render_linked
from .protocols import NsysSource, ProfileRangeFn


class RangeProfiler:
    """Widgets ``range``, ``ncu_set``, and the background profile's; ``widget`` is the whole.
    ``profile_range_fn(domain, range, style, progress=, cancel=, set=)``."""

    def __init__(
        self,
        source: NsysSource,
        profile_range_fn: ProfileRangeFn,
        on_pick: Callable[[str], Any] | None = None,
    ) -> None:
        self.profile_range_fn = profile_range_fn
        self.on_pick = on_pick
        try:
            ranges = source.nvtx_ranges()
            rows = ranges[["domain", "range", "style", "label"]].itertuples(index=False)
            self._by_label = {str(label): (d, r, s) for d, r, s, label in rows}
        except Exception:  # no NVTX in the report: nothing to choose
            self._by_label = {}
        choices = [(html.shorten(label, 80), value) for label, value in self._by_label.items()]
        self.range = w.Dropdown(
            options=choices, description="NVTX range", layout=w.Layout(width="70%")
        )
        self.ncu_set = w.Dropdown(options=list(NCU_SETS), value="roofline", description="set")
        self.background = BackgroundProfile("Profile this range", self._render)
        self.background.button.on_click(lambda _: self.start())
        self.background.button.disabled = not choices
        self.widget = w.VBox(
            [
                w.HTML(
                    html.note_html(
                        "Profile every kernel launched inside one NVTX range with Nsight Compute"
                        " (click a bar above to choose it)."
                        if choices
                        else "No NVTX ranges in this run: nothing to profile by range."
                    )
                ),
                w.HBox([self.range, self.ncu_set]),
                self.background.controls,
                self.background.status,
                self.background.result,
            ]
        )

    def _render(self, ncu_run: Any) -> Any:
        return render_linked(ncu_run, self.on_pick) if self.on_pick else ncu_run.widget()

    def select(self, label: str) -> bool:
        """Choose the range whose label ("domain:range") is ``label`` (an NVTX bar click)."""
        if label not in self._by_label:
            return False
        self.range.value = self._by_label[label]
        return True

    def start(self) -> None:
        if self.range.value is None:
            return
        domain, name, style = self.range.value
        ncu_set = self.ncu_set.value

        def work(progress: Callable[..., Any], cancel: threading.Event) -> Any:
            return self.profile_range_fn(
                domain, name, style, set=ncu_set, progress=progress, cancel=cancel
            )

        self.background.start(f"{domain}:{name}", work)
