"""Static HTML pieces (header, tables) for the ``text/html`` form of results, which must read
on GitHub/nbviewer with no kernel: plain tags, inline styles only, everything escaped."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

Formatter = Callable[[Any], str]


def fmt_ns(value: Any) -> str:
    """Nanoseconds in the unit a human reads (ns, us, ms, s)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    v = float(value)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.3f} {unit}"
    return f"{v:,.0f} ns"


def fmt_bytes(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    v = float(value)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f} B"


def fmt_pct(value: Any) -> str:
    if value is None or pd.isna(value):
        return ""
    return f"{float(value):.1f}%"


def fmt_num(value: Any) -> str:
    if value is None or pd.isna(value):
        return ""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{int(value):,}"


def fmt_flops(value: Any) -> str:
    if value is None or pd.isna(value):
        return ""
    v = float(value)
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.3g} FLOP/s"


def shorten(text: str, width: int = 80) -> str:
    """Kernel names run to hundreds of characters; keep the head, which says what it is."""
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def esc(value: Any) -> str:
    return html.escape(str(value))


_TABLE = "border-collapse:collapse;font-size:12px;font-family:monospace;margin:4px 0"
# Numbers keep value and unit on one line ("30.528 us"), even in a narrow widget.
_CELL = "border:1px solid #ddd;padding:2px 6px;text-align:{align}"
_NUM_CELL = _CELL + ";white-space:nowrap"


def frame_html(
    frame: pd.DataFrame,
    columns: Mapping[str, str] | Sequence[str] | None = None,
    formats: Mapping[str, Formatter] | None = None,
    max_rows: int = 20,
    name_width: int = 90,
) -> str:
    """A table of the first ``max_rows`` rows. ``columns`` maps frame column -> header; long
    strings are shortened with the full text in a ``title`` tooltip."""
    if columns is None:
        columns = list(frame.columns)
    if not isinstance(columns, Mapping):
        columns = {c: c for c in columns}
    columns = {c: h for c, h in columns.items() if c in frame.columns}
    formats = dict(formats or {})
    head = "".join(
        f'<th style="{_CELL.format(align="left")}">{esc(h)}</th>' for h in columns.values()
    )
    rows = []
    for _, row in frame.head(max_rows).iterrows():
        cells = []
        for col in columns:
            value = row[col]
            if col in formats:
                text, align, title = formats[col](value), "right", ""
            elif isinstance(value, str):
                text, align = shorten(value, name_width), "left"
                title = f' title="{esc(value)}"' if text != value else ""
            else:
                text, align, title = fmt_num(value), "right", ""
            style = (_NUM_CELL if align == "right" else _CELL).format(align=align)
            cells.append(f'<td style="{style}"{title}>{esc(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(frame) > max_rows:
        more = f'<div style="font-size:11px;color:#666">{len(frame) - max_rows} more rows</div>'
    return (
        f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


def header_html(title: str, items: Mapping[str, Any]) -> str:
    """A one-line summary: title plus ``key: value`` pairs (None values are left out)."""
    parts = " &nbsp;·&nbsp; ".join(
        f"<b>{esc(k)}</b>: {esc(v)}" for k, v in items.items() if v is not None and v != ""
    )
    return (
        f'<div style="font-family:sans-serif;font-size:13px;margin:4px 0">'
        f'<span style="font-size:15px;font-weight:bold">{esc(title)}</span><br>{parts}</div>'
    )


def section_html(title: str, body: str) -> str:
    return f'<h4 style="font-family:sans-serif;margin:10px 0 2px 0">{esc(title)}</h4>{body}'


def note_html(text: str) -> str:
    return f'<div style="font-size:12px;color:#666;font-family:sans-serif">{esc(text)}</div>'
