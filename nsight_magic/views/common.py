"""Pieces every view shares: call a frame/chart source and turn a failure into one line, and a
chart as a live widget or as a static PNG, either way never raising."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..errors import ReportError
from . import html
from .chart_specs import STRICT_ENV as STRICT_ENV  # where tests and views have found it
from .chart_specs import strict, unvalidated
from .live import LiveChart
from .static import chart_img_html


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (what a tab shows in place of what failed)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}".rstrip(": ")


def attempt(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """``(fn(), None)``, or ``(None, one line)`` when it raised: one missing table (reports
    omit empty ones) or a damaged one leaves every other tab intact. In strict mode
    (``NSIGHT_MAGIC_STRICT=1``, the tests) only a ``ReportError`` becomes a line; anything else
    is re-raised."""
    try:
        return fn(), None
    except ReportError as exc:
        return None, one_line(exc)
    except Exception as exc:
        if strict():
            raise
        return None, one_line(exc)


def note_widget(text: str) -> Any:
    return w.HTML(html.note_html(text))


def report_widget(header: Callable[[], Any]) -> Any:
    """The report's download link and GUI command (``html.gui_html``) in the live view. An
    Output widget, not an HTML one: Jupyter renders its HTML as a notebook output, so the
    relative link resolves against the notebook's folder and downloads the file, where an
    HTML widget's link would resolve against the page's URL."""
    info, err = attempt(header)
    line = html.gui_html(info or {}) if err is None else ""
    out = w.Output()
    if line:
        out.outputs = (
            {"output_type": "display_data", "data": {"text/html": line}, "metadata": {}},
        )
    return out


def chart_widget(build: Callable[[], Any], what: str) -> Any:
    """The chart as a ``LiveChart`` widget, or one line saying why ``what`` is not shown."""
    with unvalidated():
        chart, err = attempt(build)
    if err is not None:
        return note_widget(f"{what} not shown: {err}")
    widget, err = attempt(lambda: LiveChart(chart))
    return widget if err is None else note_widget(f"{what} not shown: {err}")


def chart_html(build: Callable[[], Any], what: str) -> str:
    """The chart as a PNG ``<img>`` for the static form, or one line saying why not."""
    with unvalidated():
        chart, err = attempt(build)
    if err is not None:
        return html.note_html(f"{what} not shown: {err}")
    return chart_img_html(chart, what)


def table_or_note(fn: Callable[[], str]) -> str:
    """An HTML table builder's output, or one line when building it raised."""
    body, err = attempt(fn)
    return body if err is None else html.note_html(err)
