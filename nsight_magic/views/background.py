"""A profile that runs in a background thread with a button, Cancel, a progress bar, a one-line
status and the result's view below: what the kernel picker and "profile this range" share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from . import html
from .common import one_line


def _default_render(result: Any) -> Any:
    return result.widget()


class BackgroundProfile:
    """Widgets ``button``, ``cancel_button``, ``progress``, ``status``, ``result``; ``controls``
    is the row of button, Cancel and progress. ``start(label, call)`` runs
    ``call(progress=..., cancel=...)`` in a thread unless one is running."""

    def __init__(self, label: str, render: Callable[[Any], Any] | None = None) -> None:
        self.render = render or _default_render
        self.thread: threading.Thread | None = None
        self.cancel_event: threading.Event | None = None
        self.last_result: Any = None
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self.button = w.Button(description=label, button_style="primary", icon="play")
        self.cancel_button = w.Button(description="Cancel", disabled=True, icon="stop")
        self.progress = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="40%"))
        self.progress.layout.visibility = "hidden"
        self.status = w.HTML("")
        self.result = w.VBox([])
        self.cancel_button.on_click(lambda _: self.cancel())
        self.controls = w.HBox([self.button, self.cancel_button, self.progress])

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, what: str, call: Callable[..., Any]) -> bool:
        """Run ``call`` for ``what`` (shown in the status); False when one is running."""
        with self._lock:
            if self.running:
                return False
            self.cancel_event = threading.Event()
            self.last_result, self.last_error = None, None
            self.button.disabled = True
            self.cancel_button.disabled = False
            self.progress.value = 0.0
            self.progress.bar_style = "info"
            self.progress.layout.visibility = "visible"
            self.status.value = html.note_html(f"profiling {html.shorten(what, 100)} ...")
            self.result.children = []
            self.thread = threading.Thread(
                target=self._work, args=(what, call, self.cancel_event), daemon=True
            )
            self.thread.start()
            return True

    def cancel(self) -> None:
        if self.cancel_event is not None and self.running:
            self.cancel_event.set()
            self.status.value = html.note_html("cancelling ...")

    def on_progress(self, *args: Any, **kwargs: Any) -> None:
        """Progress callback: a ``progress.Progress`` (its ``describe()`` line), or a fraction
        in [0, 1] and/or a message."""
        for value in (*args, *kwargs.values()):
            if hasattr(value, "describe"):
                self.status.value = html.note_html(html.shorten(value.describe(), 160))
                percent = html.as_float(getattr(value, "percent", None))
                if percent is not None:
                    self.progress.value = min(max(percent / 100.0, 0.0), 1.0)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                fraction = html.as_float(value)
                if fraction is not None:
                    self.progress.value = min(max(fraction, 0.0), 1.0)
            elif isinstance(value, str) and value:
                self.status.value = html.note_html(html.shorten(value, 160))

    def _work(self, what: str, call: Callable[..., Any], cancel: threading.Event) -> None:
        try:
            result = call(progress=self.on_progress, cancel=cancel)
            view = self.render(result)
        except BaseException as exc:  # shown as one line; the thread must not die silently
            self.last_error = one_line(exc)
            cancelled = cancel.is_set()
            self.status.value = html.note_html(
                "cancelled." if cancelled else f"profile failed: {self.last_error}"
            )
            self.progress.bar_style = "warning" if cancelled else "danger"
        else:
            self.last_result = result
            self.result.children = [view]
            self.progress.value = 1.0
            self.progress.bar_style = "success"
            self.status.value = html.note_html(f"done: {html.shorten(what, 100)}")
        finally:
            self.button.disabled = False
            self.cancel_button.disabled = True
