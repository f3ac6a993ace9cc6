"""The display every run object shares: a widget for a live kernel, and a static ``text/html``
form (tables + PNG charts) in the same output, so an executed notebook still shows real findings
on GitHub/nbviewer or in nbconvert HTML, where no kernel runs."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from pathlib import Path
from typing import Any

from .. import gui

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
        report does not change, and PNG rendering costs about a second per chart."""
        if self._html is None:
            self._html = self._build_html()
        return self._html

    def _build_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        if in_kernel():
            # The widget is the live view; text/html stays in the same output for readers
            # without a kernel (frontends pick the richest type they can render).
            with contextlib.suppress(Exception):  # a broken widget must not hide the findings
                data[WIDGET_MIME] = self.widget()._repr_mimebundle_()[WIDGET_MIME]
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data
