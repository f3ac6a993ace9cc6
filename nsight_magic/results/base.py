"""The display every run object shares: a widget for a live kernel, and a static ``text/html``
form (tables + PNG charts) in the same output, so an executed notebook still shows real findings
on GitHub/nbviewer or in nbconvert HTML, where no kernel runs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_kernel() -> bool:
    """True inside a Jupyter kernel, where a widget can be shown (not in plain IPython/python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


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
