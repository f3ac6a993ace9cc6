"""Static HTML pieces (header, tables, notes) and the number formatters every view uses. The
``text/html`` form of results must read on GitHub/nbviewer with no kernel: plain tags, inline
styles only, everything escaped. Formatters never raise: NA (``pd.NA``, NaN, None, NaT) and
values that are not numbers come out as "" (views never raise on a damaged report)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pandas as pd

from ..vocabulary.columns import Column, column

Formatter = Callable[[Any], str]


def as_float(value: Any) -> float | None:
    """``value`` as a finite float, or None for NA, NaN, inf and anything not a number."""
    if value is None or isinstance(value, (str, bytes, bool)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):  # pd.NA, NaT, objects
        return None
    return number if math.isfinite(number) else None


def _scaled(value: Any, units: Sequence[tuple[str, float, int]], small: str) -> str:
    v = as_float(value)
    if v is None:
        return ""
    for unit, scale, digits in units:
        if abs(v) >= scale:
            return f"{v / scale:,.{digits}f} {unit}"
    return small.format(v)


def fmt_ns(value: Any) -> str:
    """Nanoseconds in the unit a human reads (ns, us, ms, s)."""
    return _scaled(value, (("s", 1e9, 3), ("ms", 1e6, 3), ("us", 1e3, 3)), "{:,.0f} ns")


def fmt_bytes(value: Any) -> str:
    return _scaled(value, (("GB", 1e9, 2), ("MB", 1e6, 2), ("kB", 1e3, 2)), "{:,.0f} B")


def fmt_flops(value: Any) -> str:
    units = (("PFLOP/s", 1e15, 2), ("TFLOP/s", 1e12, 2), ("GFLOP/s", 1e9, 2))
    return _scaled(value, units, "{:,.3g} FLOP/s")


def fmt_bandwidth(value: Any) -> str:
    """Bytes per second ("4.02 TB/s")."""
    units = (("TB/s", 1e12, 2), ("GB/s", 1e9, 2), ("MB/s", 1e6, 2))
    return _scaled(value, units, "{:,.3g} B/s")


def fmt_pct(value: Any) -> str:
    v = as_float(value)
    return "" if v is None else f"{v:.1f}%"


def fmt_ratio(value: Any) -> str:
    """A fraction (0.42) as a percent ("42.0%"); below 1%, two significant digits ("0.042%"),
    so a small utilisation does not read as zero."""
    v = as_float(value)
    if v is None:
        return ""
    if v != 0 and abs(v) < 0.01:
        return f"{100.0 * v:.2g}%"
    return f"{100.0 * v:.1f}%"


def fmt_num(value: Any) -> str:
    v = as_float(value)
    if v is None:
        return ""
    if not v.is_integer():
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{int(v):,}"


def fmt_id(value: Any) -> str:
    """An identifier (pid, rank, graph id) as its digits, no thousands separator."""
    v = as_float(value)
    return "" if v is None or not v.is_integer() else str(int(v))


def fmt_signed_ns(value: Any) -> str:
    v = as_float(value)
    return "" if v is None else ("+" if v > 0 else "") + fmt_ns(v)


def fmt_hz(value: Any) -> str:
    v = as_float(value)
    return "" if v is None else f"{v / 1e9:.2f} GHz"


def fmt_gbps(value: Any) -> str:
    v = as_float(value)
    return "" if v is None else f"{v:,.2f}"


def shorten(text: Any, width: int = 80) -> str:
    """Cut text to ``width`` characters (a trailing "…" says it was cut). For kernel names,
    prefer the ``short_name`` column that analysis derives; this only bounds what is left."""
    text = "" if text is None or (not isinstance(text, str) and pd.isna(text)) else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def esc(value: Any) -> str:
    return html.escape(str(value))


_TABLE = "border-collapse:collapse;font-size:12px;font-family:monospace;margin:4px 0"
# Numbers keep value and unit on one line ("30.528 us"), even in a narrow widget.
_CELL = "border:1px solid #ddd;padding:2px 6px;text-align:{align}"
_NUM_CELL = _CELL + ";white-space:nowrap"
# Names may break anywhere, so a table of long kernel names fits its output's width (a static
# page at 1280 px cut the kernel table's last column) instead of running off to the right.
_TEXT_CELL = _CELL + ";overflow-wrap:anywhere;min-width:12ch"


def _formatted(formatter: Formatter, value: Any) -> str:
    # A formatter handed in by a caller may not know every odd value; a cell stays blank then.
    try:
        return formatter(value)
    except Exception:
        return ""


def fmt_times(value: Any) -> str:
    """A ratio as a multiple ("1.250x")."""
    v = as_float(value)
    return "" if v is None else f"{v:.3f}x"


# columns.Format -> formatter; "text" is not here: strings are shortened, their full text on hover.
FORMATTERS: dict[str, Formatter] = {
    "num": fmt_num,
    "id": fmt_id,
    "ns": fmt_ns,
    "signed_ns": fmt_signed_ns,
    "pct": fmt_pct,
    "fraction": fmt_ratio,
    "bytes": fmt_bytes,
    "bytes_per_s": fmt_bandwidth,
    "flops_per_s": fmt_flops,
    "hz": fmt_hz,
    "gb_per_s": fmt_gbps,
    "times": fmt_times,
}


class MissingColumnError(KeyError):
    """A table asked for a column its frame does not have (and did not call it optional)."""


def table_columns(
    frame: pd.DataFrame,
    columns: Sequence[str] | Mapping[str, str] | None,
    headers: Mapping[str, str] | None = None,
    optional: Collection[str] = (),
) -> dict[str, Column]:
    """The registered ``Column`` of each shown column (``headers`` override its title), in
    order. A name not in ``nsight_magic/vocabulary/columns.py`` raises ``UnknownColumnError``; one
    the frame lacks raises ``MissingColumnError`` unless it is ``optional``: a renamed column fails
    loudly instead of leaving the table silently."""
    names = list(frame.columns) if columns is None else list(columns)
    headers = {**(columns if isinstance(columns, Mapping) else {}), **(headers or {})}
    shown: dict[str, Column] = {}
    for name in names:
        spec = column(name)
        if name not in frame.columns:
            if name in optional:
                continue
            raise MissingColumnError(f"the table needs column {name!r}; the frame has none")
        shown[name] = replace(spec, title=headers[name]) if name in headers else spec
    return shown


def has_text(frame: pd.DataFrame, column: str) -> bool:
    """Whether ``frame`` has ``column`` with some non-empty text (e.g. a ``reason`` why a
    number is blank: the column is shown only then)."""
    return column in frame and bool(frame[column].fillna("").astype(str).ne("").any())


def frame_html(
    frame: pd.DataFrame,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    formats: Mapping[str, Formatter] | None = None,
    max_rows: int = 20,
    name_width: int = 90,
    titles: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    optional: Collection[str] = (),
) -> str:
    """A table of the first ``max_rows`` rows of ``columns`` (all the frame's when None), with
    the header and formatter each has in ``nsight_magic/vocabulary/columns.py``. ``headers`` (or
    ``columns`` given as a mapping: column -> header) renames a column for this table only;
    ``formats`` overrides a formatter. Strings are shortened with the full text in a ``title``
    tooltip; ``titles`` maps a shown column to the column whose text the tooltip shows instead
    (``{"short_name": "name"}``: the short kernel name, the full one on hover). See
    ``table_columns`` for what raises."""
    shown = table_columns(frame, columns, headers, optional)
    formats = {
        name: (formats or {}).get(name) or FORMATTERS[spec.format]
        for name, spec in shown.items()
        if spec.format != "text" or name in (formats or {})
    }
    titles = {c: t for c, t in (titles or {}).items() if t in frame.columns}
    head = "".join(
        f'<th style="{_CELL.format(align="left")}">{esc(spec.title)}</th>'
        for spec in shown.values()
    )
    rows = []
    for _, row in frame.head(max_rows).iterrows():
        cells = []
        for col in shown:
            value = row[col]
            if col in formats:
                text, align, title = _formatted(formats[col], value), "right", ""
            elif isinstance(value, str):
                text, align = shorten(value, name_width), "left"
                full = str(row[titles[col]]) if col in titles else value
                title = f' title="{esc(full)}"' if text != full else ""
            else:
                text, align, title = fmt_num(value), "right", ""
            style = (_NUM_CELL if align == "right" else _TEXT_CELL).format(align=align)
            cells.append(f'<td style="{style}"{title}>{esc(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(frame) > max_rows:
        more = f'<div style="font-size:11px;color:#666">{len(frame) - max_rows} more rows</div>'
    return (
        f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


def header_html(title: str, items: Mapping[str, Any], warnings: Sequence[str] = ()) -> str:
    """A one-line summary: title plus ``key: value`` pairs (None values are left out), then
    one line per warning (what the report says to know before trusting it)."""
    parts = " &nbsp;·&nbsp; ".join(
        f"<b>{esc(k)}</b>: {esc(v)}" for k, v in items.items() if v is not None and v != ""
    )
    return (
        f'<div style="font-family:sans-serif;font-size:13px;margin:4px 0">'
        f'<span style="font-size:15px;font-weight:bold">{esc(title)}</span><br>{parts}'
        f"{warnings_html(warnings)}</div>"
    )


_WARNING = "font-size:12px;color:#8a5300;background:#fff4e0;padding:1px 4px;margin:2px 0"


def gui_html(info: Mapping[str, Any]) -> str:
    """One line under a header: the report as a download link (a relative link: JupyterLab and
    Notebook 7 serve it from the notebook's folder, and so does an HTML copy saved beside the
    notebook, nbconvert's default) and the exact command that opens it in the Nsight GUI.
    ``info``: ``gui_report`` (path as shown), ``gui_command``, ``gui_product``; "" without a
    report (an export alone) beyond a note of why."""
    path, command = info.get("gui_report"), info.get("gui_command")
    product = esc(info.get("gui_product") or "the Nsight GUI")
    style = "font-size:12px;font-family:sans-serif;margin:2px 0;color:#444"
    if not path or not command:
        why = info.get("gui_missing")
        return f'<div style="{style}">{esc(why)}</div>' if why else ""
    name = esc(str(path).rsplit("/", 1)[-1])
    if str(path).startswith("/"):  # outside the notebook's folder: no URL reaches it
        link = f"<code>{esc(path)}</code>"
    else:
        link = f'<a href="{esc(quote(str(path)))}" download="{name}">{name}</a>'
    return (
        f'<div class="nsight-magic-report" style="{style}">Report: {link} &nbsp;·&nbsp; '
        f"open it in {product}: <code>{esc(command)}</code></div>"
    )


def warnings_html(warnings: Sequence[str]) -> str:
    """One line per warning, marked, in the order given ("" for none)."""
    return "".join(f'<div style="{_WARNING}">&#9888; {esc(w)}</div>' for w in warnings)


def section_html(title: str, body: str) -> str:
    return f'<h4 style="font-family:sans-serif;margin:10px 0 2px 0">{esc(title)}</h4>{body}'


def folded_section_html(title: str, body: str) -> str:
    """A section a reader opens by its heading (``<details>``: no JavaScript), so a static page
    leads with the summary and the top kernels and the rest waits behind headings."""
    heading = (
        f'<h4 style="font-family:sans-serif;margin:10px 0 2px 0;display:inline">{esc(title)}</h4>'
    )
    return (
        f'<details class="nsight-magic-section"><summary style="cursor:pointer">{heading}'
        f"</summary>{body}</details>"
    )


def note_html(text: str) -> str:
    return f'<div style="font-size:12px;color:#666;font-family:sans-serif">{esc(text)}</div>'
