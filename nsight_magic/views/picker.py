"""The kernel picker of the %%nsys view: kernels ranked by total GPU time (optionally only those
launched inside one NVTX range), ncu options, and a Profile button that runs ``profile_fn`` in a
background thread with progress and Cancel, then shows the ncu view right below."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from . import charts, tables

NCU_SETS = ("roofline", "basic", "full")


def kernels_in_range(
    kernels: pd.DataFrame, cuda_api: pd.DataFrame, nvtx: pd.DataFrame, domain: str, name: str
) -> pd.DataFrame:
    """Kernels whose launch call (joined on correlation id) started inside an instance of NVTX
    range ``domain:name`` — the same attribution ``nsys stats`` projection uses. Push/pop
    ranges only hold launches of their own thread; start/end ranges any thread's."""
    launches = cuda_api[["correlation_id", "pid", "start_ns", "tid"]].rename(
        columns={"start_ns": "launch_ns", "tid": "launch_tid"}
    )
    k = kernels.merge(launches, on=["correlation_id", "pid"], how="inner")
    ranges = nvtx[(nvtx["domain"] == domain) & (nvtx["range"] == name)]
    inside = np.zeros(len(k), dtype=bool)
    t = k["launch_ns"].to_numpy()
    tid = k["launch_tid"].to_numpy()
    for r in ranges.itertuples(index=False):
        hit = (t >= r.start_ns) & (t <= r.end_ns)
        if r.style == "PushPop":
            hit &= tid == r.tid
        inside |= hit
    return kernels.loc[kernels["correlation_id"].isin(k.loc[inside, "correlation_id"])]


def rank_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """name, instances, total_ns: sorted by total GPU time (what is worth profiling first)."""
    ranked = kernels.groupby("name", as_index=False).agg(
        instances=("duration_ns", "size"), total_ns=("duration_ns", "sum")
    )
    return ranked.sort_values(["total_ns", "name"], ascending=[False, True], ignore_index=True)


def _default_render(ncu_run: Any) -> Any:
    return ncu_run.widget()


# The "no filter" choice. Not None: ipywidgets reads a None value as "nothing selected" and
# shows a blank dropdown (seen in the JupyterLab browser test).
ALL_KERNELS = "(all kernels)"


class KernelPicker:
    """Widgets: ``range_filter``, ``kernel``, ``ncu_set``, ``instance``, ``count``,
    ``profile_button``, ``cancel_button``, ``status``, ``result``; ``widget`` is the whole.
    ``profile_fn(name, set=, instance=, count=, progress=, cancel=)`` defaults to
    ``run.profile_kernel``; ``cancel`` is a ``threading.Event`` the Cancel button sets."""

    def __init__(
        self,
        run: Any,
        profile_fn: Callable[..., Any] | None = None,
        render: Callable[[Any], Any] | None = None,
    ) -> None:
        import ipywidgets as w

        self.run = run
        self.profile_fn = profile_fn if profile_fn is not None else run.profile_kernel
        self.render = render or _default_render
        self.cancel_event: threading.Event | None = None
        self.thread: threading.Thread | None = None
        self.last_result: Any = None
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._kernels = run.kernels()

        self.range_filter = w.Dropdown(
            options=self._range_options(), value=ALL_KERNELS, description="NVTX range"
        )
        self.kernel = w.Select(options=[], rows=10, description="kernel",
                               layout=w.Layout(width="95%"))  # fmt: skip
        self.ncu_set = w.Dropdown(options=list(NCU_SETS), value="roofline", description="set")
        self.instance = w.BoundedIntText(value=0, min=0, max=0, description="instance")
        self.count = w.BoundedIntText(value=1, min=1, max=1000, description="count")
        self.profile_button = w.Button(description="Profile with ncu", button_style="primary",
                                       icon="play")  # fmt: skip
        self.cancel_button = w.Button(description="Cancel", disabled=True, icon="stop")
        self.progress = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="40%"))
        self.progress.layout.visibility = "hidden"
        self.status = w.HTML("")
        self.result = w.VBox([])

        self.range_filter.observe(lambda _: self._fill_kernels(), names="value")
        self.kernel.observe(lambda _: self._on_kernel(), names="value")
        self.profile_button.on_click(lambda _: self.start())
        self.cancel_button.on_click(lambda _: self.cancel())
        self._fill_kernels()

        self.widget = w.VBox(
            [
                w.HTML(
                    tables.note_html(
                        "Kernels ranked by total GPU time; pick one to profile "
                        "it with Nsight Compute (same script, exact name)."
                    )
                ),
                self.range_filter,
                self.kernel,
                w.HBox([self.ncu_set, self.instance, self.count]),
                w.HBox([self.profile_button, self.cancel_button, self.progress]),
                self.status,
                self.result,
            ]
        )

    # --- choices -----------------------------------------------------------------------------
    def _range_options(self) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = [("(all kernels)", ALL_KERNELS)]
        try:
            nvtx = self.run.nvtx()
        except Exception:
            return options
        pairs = nvtx[["domain", "range"]].drop_duplicates()
        labels = charts.nvtx_label(pairs)
        for (domain, name), label in zip(pairs.itertuples(index=False), labels, strict=True):
            options.append((tables.shorten(label, 80), (domain, name)))
        return options

    def ranked(self) -> pd.DataFrame:
        """The kernels listed now: ranked, within the chosen NVTX range if any."""
        kernels = self._kernels
        if self.range_filter.value != ALL_KERNELS:
            domain, name = self.range_filter.value
            kernels = kernels_in_range(kernels, self.run.cuda_api(), self.run.nvtx(), domain, name)
        return rank_kernels(kernels)

    def _fill_kernels(self) -> None:
        ranked = self.ranked()
        self.kernel.options = [
            (f"{tables.fmt_ns(t):>12}  x{n:<4} {tables.shorten(name, 100)}", name)
            for name, n, t in ranked[["name", "instances", "total_ns"]].itertuples(index=False)
        ]
        self.kernel.value = ranked["name"].iloc[0] if len(ranked) else None

    def _on_kernel(self) -> None:
        # ncu counts instances over the whole run, not within the NVTX filter.
        name = self.kernel.value
        total = int((self._kernels["name"] == name).sum()) if name is not None else 1
        self.instance.max = max(total - 1, 0)
        self.instance.value = min(self.instance.value, self.instance.max)

    # --- running -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def options(self) -> dict[str, Any]:
        return {
            "set": self.ncu_set.value,
            "instance": int(self.instance.value),
            "count": int(self.count.value),
        }

    def start(self) -> None:
        """The Profile button: ignored while a profile runs or with no kernel chosen."""
        with self._lock:
            if self.running or self.kernel.value is None:
                return
            name = self.kernel.value
            self.cancel_event = threading.Event()
            self.last_result, self.last_error = None, None
            self.profile_button.disabled = True
            self.cancel_button.disabled = False
            self.progress.value = 0.0
            self.progress.bar_style = "info"
            self.progress.layout.visibility = "visible"
            self.status.value = tables.note_html(f"profiling {tables.shorten(name, 100)} ...")
            self.result.children = []
            self.thread = threading.Thread(
                target=self._work, args=(name, self.options(), self.cancel_event), daemon=True
            )
            self.thread.start()

    def cancel(self) -> None:
        if self.cancel_event is not None and self.running:
            self.cancel_event.set()
            self.status.value = tables.note_html("cancelling ...")

    def _on_progress(self, *args: Any, **kwargs: Any) -> None:
        """Progress callback: a ``progress.Progress`` (its ``describe()`` line), or a fraction
        in [0, 1] and/or a message."""
        for value in (*args, *kwargs.values()):
            if hasattr(value, "describe"):
                self.status.value = tables.note_html(tables.shorten(value.describe(), 160))
                if getattr(value, "percent", None) is not None:
                    self.progress.value = min(max(float(value.percent) / 100.0, 0.0), 1.0)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                self.progress.value = float(min(max(value, 0.0), 1.0))
            elif isinstance(value, str) and value:
                self.status.value = tables.note_html(tables.shorten(value, 160))

    def _work(self, name: str, options: dict[str, Any], cancel: threading.Event) -> None:
        try:
            ncu_run = self.profile_fn(name, progress=self._on_progress, cancel=cancel, **options)
            view = self.render(ncu_run)
        except BaseException as exc:  # shown as one line; the thread must not die silently
            self.last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.last_error = f"{type(exc).__name__}: {self.last_error}".rstrip(": ")
            cancelled = cancel.is_set()
            self.status.value = tables.note_html(
                "cancelled." if cancelled else f"profile failed: {self.last_error}"
            )
            self.progress.bar_style = "warning" if cancelled else "danger"
        else:
            self.last_result = ncu_run
            self.result.children = [view]
            self.progress.value = 1.0
            self.progress.bar_style = "success"
            self.status.value = tables.note_html(f"done: {tables.shorten(name, 100)}")
        finally:
            self.profile_button.disabled = False
            self.cancel_button.disabled = True
