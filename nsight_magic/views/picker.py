"""The kernel picker of the %%nsys view: kernels ranked by total GPU time (optionally only those
launched inside one NVTX range), ncu options, and a Profile button that runs ``profile_fn`` in a
background thread with progress and Cancel, then shows the ncu view right below.

Charts link to it: a click on a kernel (bar, timeline bar, roofline point) calls ``select``;
``on_change`` callbacks hear every selection (the charts highlight it)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd

from . import html
from .background import BackgroundProfile
from .protocols import NsysSource, ProfileFn, ProfileTopFn

NCU_SETS = ("roofline", "basic", "full")
# Short names of cuBLAS/cuDNN kernels run past 120 characters and differ near the end
# ("..._execute_kernel__5x_cublas" / "..._execute_split_k_kernel__5x_cublas"): keep them whole.
SHORT_WIDTH = 140

# The "no filter" choice. Not None: ipywidgets reads a None value as "nothing selected" and
# shows a blank dropdown (seen in the JupyterLab browser test).
ALL_KERNELS = "(all kernels)"


def kernel_options(ranked: pd.DataFrame) -> list[tuple[str, str]]:
    """(label, full name) per kernel: time, count, short name, the PyTorch op that launched
    it when the run has op ranges (``op``), the user's NVTX range it ran in (``phase``); a
    short name that several kernels share also shows the head of the full name, so the
    entries stay distinguishable."""
    short = ranked["short_name"].astype(str)
    repeated = set(short[short.duplicated(keep=False)])
    ops = ranked["op"].astype(str) if "op" in ranked else pd.Series("", index=ranked.index)
    phases = ranked["phase"].astype(str) if "phase" in ranked else pd.Series("", index=ranked.index)
    options = []
    for name, s, n, t, op, phase in zip(
        ranked["name"], short, ranked["instances"], ranked["total_ns"], ops, phases, strict=True
    ):
        label = f"{html.fmt_ns(t):>12}  x{n:<4} {html.shorten(s, SHORT_WIDTH)}"
        if op:
            label += f"  <- {op}"
        if phase:  # the user's range it was launched in, from any thread (analysis.phases)
            label += f"  in {phase}"
        if s in repeated:
            label += f"  [{html.shorten(name, 90)}]"
        options.append((label, str(name)))
    return options


def render_linked(ncu_run: Any, on_pick: Callable[[str], Any]) -> Any:
    """The profiled run's view, its roofline clicks calling ``on_pick`` when it takes one."""
    if "on_pick" in inspect.signature(ncu_run.widget).parameters:
        return ncu_run.widget(on_pick=on_pick)
    return ncu_run.widget()


class KernelPicker:
    """Widgets: ``range_filter``, ``kernel``, ``ncu_set``, ``instance``, ``count``,
    ``profile_button``, ``cancel_button``, ``progress``, ``status``, ``result``; ``widget`` is
    the whole. ``profile_fn(name, progress=, cancel=, set=, instance=, count=)`` returns a run
    whose view is shown below (``render``, default ``result.widget(on_pick=self.select)``)."""

    def __init__(
        self,
        source: NsysSource,
        profile_fn: ProfileFn,
        render: Callable[[Any], Any] | None = None,
        profile_top_fn: ProfileTopFn | None = None,
    ) -> None:
        self.source = source
        self.profile_fn = profile_fn
        # "Profile top N": one ncu re-run for the N kernels with the most time (when given)
        self.profile_top_fn = profile_top_fn
        self._listeners: list[Callable[[str | None], None]] = []
        self.background = BackgroundProfile("Profile with ncu", render or self._render)

        self.range_filter = w.Dropdown(
            options=self._range_options(), value=ALL_KERNELS, description="NVTX range"
        )
        self.kernel = w.Select(
            options=[], rows=10, description="kernel", layout=w.Layout(width="95%")
        )
        self.full_name = w.HTML("")
        self.ncu_set = w.Dropdown(options=list(NCU_SETS), value="roofline", description="set")
        self.instance = w.BoundedIntText(value=0, min=0, max=0, description="instance")
        self.count = w.BoundedIntText(value=1, min=1, max=1000, description="count")

        self.range_filter.observe(lambda _: self._fill_kernels(), names="value")
        self.kernel.observe(lambda _: self._on_kernel(), names="value")
        self.profile_button.on_click(lambda _: self.start())
        self.top_n = w.BoundedIntText(value=10, min=1, max=200, description="top N")
        self.top_button = w.Button(description="Profile top N", icon="play",
                                   tooltip="ncu on the first launch of each of the N kernels "
                                   "with the most time, in one re-run of the cell")  # fmt: skip
        self.top_button.on_click(lambda _: self.start_top())
        self._fill_kernels()
        top_row = [w.HBox([self.top_n, self.top_button])] if profile_top_fn is not None else []

        self.widget = w.VBox(
            [
                w.HTML(
                    html.note_html(
                        "Kernels ranked by total GPU time; pick one here or click it in a chart,"
                        " then profile it with Nsight Compute (same script, exact name)."
                    )
                ),
                self.range_filter,
                self.kernel,
                self.full_name,
                w.HBox([self.ncu_set, self.instance, self.count]),
                self.background.controls,
                *top_row,
                self.status,
                self.result,
            ]
        )

    # The background profile's widgets and state, under the names the picker always had.
    profile_button = property(lambda self: self.background.button)
    cancel_button = property(lambda self: self.background.cancel_button)
    progress = property(lambda self: self.background.progress)
    status = property(lambda self: self.background.status)
    result = property(lambda self: self.background.result)
    thread = property(lambda self: self.background.thread)
    cancel_event = property(lambda self: self.background.cancel_event)
    last_result = property(lambda self: self.background.last_result)
    last_error = property(lambda self: self.background.last_error)
    running = property(lambda self: self.background.running)

    # --- choices -----------------------------------------------------------------------------
    def _range_options(self) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = [(ALL_KERNELS, ALL_KERNELS)]
        try:
            ranges = self.source.nvtx_ranges()
        except Exception:  # no NVTX in the report: the filter offers all kernels only
            return options
        for domain, name, label in ranges[["domain", "range", "label"]].itertuples(index=False):
            options.append((html.shorten(label, 80), (domain, name)))
        return options

    def ranked(self) -> pd.DataFrame:
        """The kernels listed now: ranked, within the chosen NVTX range if any."""
        chosen = self.range_filter.value
        return self.source.ranked_kernels(None if chosen == ALL_KERNELS else chosen)

    def _fill_kernels(self) -> None:
        try:
            ranked = self.ranked()
        except Exception as exc:
            self.kernel.options = []
            self.full_name.value = html.note_html(f"kernels not listed: {exc}")
            return
        self.kernel.options = kernel_options(ranked)
        self.kernel.value = str(ranked["name"].iloc[0]) if len(ranked) else None

    def _on_kernel(self) -> None:
        # ncu counts instances over the whole run, not within the NVTX filter.
        name = self.kernel.value
        try:
            total = self.source.instances(name) if name is not None else 1
        except Exception:
            total = 1
        self.instance.max = max(total - 1, 0)
        self.instance.value = min(self.instance.value, self.instance.max)
        self.full_name.value = html.note_html(name) if name else ""
        for listener in self._listeners:
            listener(name)

    # --- linking -------------------------------------------------------------------------------
    def on_change(self, listener: Callable[[str | None], None]) -> None:
        """Call ``listener(name)`` whenever the chosen kernel changes."""
        self._listeners.append(listener)

    def select(self, name: str) -> bool:
        """Choose kernel ``name`` (a chart click): its full name, or a short name that only one
        kernel has. Clears the NVTX filter when the kernel is not in the chosen range."""
        values = [v for _, v in self.kernel.options]
        if name not in values and self.range_filter.value != ALL_KERNELS:
            self.range_filter.value = ALL_KERNELS
            values = [v for _, v in self.kernel.options]
        if name not in values:
            try:
                ranked = self.source.ranked_kernels(None)
            except Exception:
                return False
            same = ranked.loc[ranked["short_name"] == name, "name"].astype(str).tolist()
            if len(same) != 1 or same[0] not in values:
                return False
            name = same[0]
        self.kernel.value = name
        return True

    # --- running -----------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """The chosen ncu options, as the Profile button passes them."""
        return {
            "set": self.ncu_set.value,
            "instance": int(self.instance.value),
            "count": int(self.count.value),
        }

    def _render(self, ncu_run: Any) -> Any:
        return render_linked(ncu_run, self.select)

    def start(self) -> None:
        """The Profile button: ignored while a profile runs or with no kernel chosen."""
        name = self.kernel.value
        if name is None:
            return
        options = self.options()

        def work(progress: Callable[..., Any], cancel: threading.Event) -> Any:
            return self.profile_fn(
                name,
                set=options["set"],
                instance=options["instance"],
                count=options["count"],
                progress=progress,
                cancel=cancel,
            )

        self.background.start(name, work)

    def start_top(self) -> None:
        """The Profile top N button: ignored while a profile runs or without ``profile_top_fn``;
        its result shows where a kernel's would (with the same Cancel and progress)."""
        top_fn = self.profile_top_fn
        if top_fn is None:
            return
        n, set_ = int(self.top_n.value), self.ncu_set.value

        def work(progress: Callable[..., Any], cancel: threading.Event) -> Any:
            return top_fn(n, set=set_, progress=progress, cancel=cancel)

        self.background.start(f"the top {n} kernels", work)

    def cancel(self) -> None:
        self.background.cancel()
