"""A profiled cell's rich output (``display(df)``, ``display(HTML(...))``, an image) shown in
the notebook as the plain notebook shows it, not as its text.

The worker's IPython shell has no frontend: its ``display`` printed the object's ``text/plain``.
``forward_displays`` gives that shell a publisher that writes each display, every format IPython
made of it, as one line on stdout between the cell's printed lines (so it keeps its place among
them); the notebook's end (``session/run_context.Lines``) reads the line back with
``read_display`` and displays the formats there. A real module pasted into the script by
``build_script`` before ``runtime``. Standard library only (IPython when a shell is made).
"""

import base64
import json
import sys
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

DISPLAY_MARK = "\x00nsight_magic-display "
# a widget's view names a model that lives in the worker's kernel-less shell: no frontend can
# draw it, so its text goes instead
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def display_frame(
    data: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    transient: dict[str, Any] | None = None,
    update: bool = False,
) -> str:
    """One display as a line of stdout: its formats (bytes, an image, as base64 text: the
    form a notebook file keeps it in), metadata, ``transient`` (a ``display_id``) and
    ``update`` (the display of that id redrawn)."""
    if WIDGET_VIEW in data:
        data = {"text/plain": data.get("text/plain", "")}
    formats = {mime: base64.b64encode(value).decode("ascii") if isinstance(value, bytes)
               else value for mime, value in data.items()}  # fmt: skip
    body = {"data": formats, "metadata": metadata or {}, "transient": transient or {},
            "update": bool(update)}  # fmt: skip
    return f"{DISPLAY_MARK}{json.dumps(body, default=str)}\x00\n"


def read_display(line: str) -> tuple[str, dict[str, Any] | None]:
    """``(text, display)`` of an output line: the text printed before a display's frame on the
    same line and the display (``data``, ``metadata``, ``transient``, ``update``); ``(line,
    None)`` for any other line, or a frame that does not read."""
    head, sep, tail = line.partition(DISPLAY_MARK)
    tail = tail.rstrip("\r\n")
    if not sep or not tail.endswith("\x00"):
        return line, None
    try:
        body = json.loads(tail[:-1])
    except ValueError:
        return line, None
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        return line, None
    return head, body


def forward_displays(shell: Any) -> None:
    """Give ``shell`` (the worker's IPython shell) a publisher that writes each display on
    stdout as a frame (``display_frame``) for the notebook to show."""
    from IPython.core.displaypub import DisplayPublisher

    class ForwardingPublisher(DisplayPublisher):
        def publish(
            self,
            data: Any,
            metadata: Any = None,
            source: Any = None,
            *,
            transient: Any = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            sys.stdout.flush()  # what the cell printed before it comes first
            sys.stdout.write(display_frame(dict(data), metadata, transient, update))
            sys.stdout.flush()

    shell.display_pub = ForwardingPublisher(shell=shell, parent=shell)
