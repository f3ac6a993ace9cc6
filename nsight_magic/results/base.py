"""The display every run object shares: a widget for a live kernel, and a static ``text/html``
form (tables + PNG charts) in the same output, so an executed notebook still shows real findings
on GitHub/nbviewer or in nbconvert HTML, where no kernel runs."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..processes import gui
from ..views import html, static

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_kernel() -> bool:
    """True inside a Jupyter kernel, where a widget can be shown (not in plain IPython/python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def report_for_gui(tool: str, run_dir: Path | None, report: Any) -> Path | None:
    """The file the tool's GUI opens for this run (``gui.gui_report``), or None."""
    opened = getattr(report, "rep_path", None) or getattr(report, "path", None)
    return gui.gui_report(tool, run_dir, opened)


def gui_fields(tool: str, run_dir: Path | None, report: Any) -> dict[str, Any]:
    """What a view's header shows to reach the report in the Nsight GUI: ``gui_report`` (the
    path as a link resolves it), ``gui_command``, ``gui_product``; ``gui_missing`` says why
    there is none."""
    exe, suffix, product = gui.GUIS[tool]
    path = report_for_gui(tool, run_dir, report)
    if path is None:
        return {"gui_missing": f"No {suffix} here for {exe} (it cannot open an export)."}
    return {
        "gui_report": gui.shown_path(path),
        "gui_command": shlex.join(gui.gui_command(tool, path)),
        "gui_product": product,
    }


class _Run:
    kind = "run"

    def __init__(
        self, report: Any, run_dir: str | Path | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        self.report = report
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.meta: dict[str, Any] = dict(meta or {})
        self._html: str | None = None

    @property
    def name(self) -> str:
        if self.meta.get("name"):
            return str(self.meta["name"])
        if self.run_dir is not None:
            return self.run_dir.name
        path = getattr(self.report, "path", None)
        return Path(path).name if path else self.kind

    # --- the Nsight GUIs ------------------------------------------------------------------
    @property
    def report_file(self) -> Path | None:
        """The ``.nsys-rep`` / ``.ncu-rep`` the Nsight GUI opens (None for an export alone)."""
        return report_for_gui(self.kind, self.run_dir, self.report)

    def gui_command(self) -> list[str]:
        """The argv that opens this run's report in nsys-ui / ncu-ui (run it where the GUI
        is: ``shlex.join`` gives the shell line)."""
        path = self.report_file
        if path is None:
            gui.open_in_gui(self.kind, None)  # raises the typed error that says why
        return gui.gui_command(self.kind, path)  # type: ignore[arg-type]

    def open_in_gui(self) -> subprocess.Popen[bytes]:
        """Start nsys-ui / ncu-ui on this run's report, detached (it stays open after the
        kernel ends, like a GUI started from a shell). Raises ``ToolNotFoundError`` with the
        install hint when the GUI is not installed here, or there is no display."""
        return gui.open_in_gui(self.kind, self.report_file)

    # --- display ---------------------------------------------------------------------------
    def widget(self) -> Any:
        raise NotImplementedError

    def to_html(self) -> str:
        """The static form alone: header, top tables, charts as PNG data URIs. Cached: the
        report does not change, and PNG rendering costs a tenth of a second or more a chart."""
        return self._static_page()()

    def _static_page(self) -> Callable[[], str]:
        """Start the static form: its tables now, its charts rendering in helper processes
        meanwhile (``views.static.rendering_together``); the call returned waits for them and
        gives the page (cached)."""
        if self._html is not None:
            page = self._html
            return lambda: page
        with static.rendering_together() as batch:
            draft = self._build_html()

        def finish() -> str:
            if self._html is None:
                self._html = batch.fill(draft)
            return self._html

        return finish

    def _build_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        try:
            return self._bundle(include, exclude)
        except KeyboardInterrupt:
            # Ctrl-C while the view is built (IPython builds it after the magic returned):
            # the run is complete, only its view is skipped, said in one line
            text = ("The view was interrupted (the run is complete: display it again to see it). "
                    f"Run folder: {self.run_dir}")  # fmt: skip
            data = {"text/plain": f"{self!r}\n{text}", "text/html": html.note_html(text)}
            return _filtered(data, include, exclude)

    def _bundle(self, include: Any, exclude: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        view: Any = None
        finish_page = self._static_page()  # its charts render while the widget is built
        if in_kernel():
            with contextlib.suppress(Exception):  # a broken widget must not hide the findings
                view = self.widget()
        page = finish_page()
        footer = timing_line(self.meta, time.perf_counter() - t0)
        note = html.note_html(footer) if footer else ""
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": page + note}
        if view is not None:
            # The widget is the live view; text/html stays in the same output for readers
            # without a kernel (frontends pick the richest type they can render).
            with contextlib.suppress(Exception):
                if note:
                    import ipywidgets

                    view = ipywidgets.VBox([view, ipywidgets.HTML(note)])
                data[WIDGET_MIME] = view._repr_mimebundle_()[WIDGET_MIME]
        return _filtered(data, include, exclude)

    def live_bundle(self) -> tuple[dict[str, Any], Callable[[], dict[str, Any]]]:
        """The live view now, the static form later (``results.display.static_later``: in a
        notebook editor by default): the widget with a one-line text/html saying the static
        copy follows, and a function that builds the full bundle around the same widget (its
        timing line then says what the static copy cost)."""
        import ipywidgets

        t0 = time.perf_counter()
        footer = ipywidgets.HTML("")
        view = ipywidgets.VBox([self.widget(), footer])
        mime = view._repr_mimebundle_()[WIDGET_MIME]
        widget_s = time.perf_counter() - t0
        footer.value = html.note_html(timing_line(self.meta, widget_s))
        pending = html.note_html("The static copy of this view (for readers without a kernel) "
                                 "is being built; it replaces this line.")  # fmt: skip
        first = {"text/plain": repr(self), "text/html": pending, WIDGET_MIME: mime}

        def rest() -> dict[str, Any]:
            t1 = time.perf_counter()
            page = self.to_html()
            line = timing_line(self.meta, widget_s)
            if line:
                line += f"; static copy {time.perf_counter() - t1:.2f} s, built after the view"
            footer.value = html.note_html(line) if line else ""
            return {**first, "text/html": page + footer.value}

        return first, rest


def _filtered(data: dict[str, Any], include: Any, exclude: Any) -> dict[str, Any]:
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data


def timing_line(meta: dict[str, Any], view_s: float) -> str:
    """Where a profiled cell's time went, in one line: the worker (start, replay, variables and
    warm-up), the capture (profiler start/stop around the cell; the cell body alone in
    brackets), the report's export and load, and building this view. "" for a run that was not
    profiled here (no timings)."""
    t = meta.get("timings") or {}
    if "total_s" not in t:
        return ""

    def s(*keys: str) -> float:
        return float(sum(float(t.get(k) or 0.0) for k in keys))

    capture = s("begin_capture_s", "capture_s", "end_capture_s")
    worker = s("worker_start_s", "history_s", "script_s", "vars_s")
    load = s("load_s")
    parts = []
    if "worker_start_s" in t:
        parts.append(f"worker {worker:.2f} s")
        body = (meta.get("cell_status") or {}).get("cell_s")
        body_text = f" (cell body {float(body):.3f} s)" if isinstance(body, int | float) else ""
        parts.append(f"capture {capture:.2f} s{body_text}")
    else:  # a fresh run: one profiler process, start to report
        parts.append(f"run {max(s('total_s') - load - s('prepare_s'), 0.0):.2f} s")
    parts.append(f"export + load {load:.2f} s")
    parts.append(f"view {view_s:.2f} s")
    return f"{meta.get('tool', 'run')} cell {s('total_s') + view_s:.2f} s: " + " · ".join(parts)
