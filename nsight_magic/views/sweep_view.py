"""The view of a sweep (``results.SweepRun``): a header, one row per configuration (failed ones
with their error), GPU time against each swept variable (log2 axis for powers of two), and the
kernel x configuration matrix; as widgets and as static HTML. Frames come from a
``SweepSource``; this module lays them out and converts units for axes, nothing more."""

from __future__ import annotations

from typing import Any

import altair as alt
import ipywidgets as w
import pandas as pd

from . import html
from .common import attempt, chart_html, chart_widget, table_or_note
from .protocols import SweepSource
from .static import shown_with_png

TABLE_COLUMNS = ("config", "status", "cell_wall_ns", "gpu_time_ns", "gpu_busy_pct",
                 "top_kernel_short", "top_kernel_pct", "peak_memory_bytes", "error")  # fmt: skip
MATRIX_KERNELS = 15  # the kernels with the most time over all configurations
MATRIX_CONFIGS = 12  # configuration columns shown in the static matrix (all in the frame)
WIDTH = 360


def _axis(values: pd.Series, variable: str, scale: str) -> alt.X:
    """The swept variable's axis: log2 for powers of two, else linear, or one tick per value
    (text)."""
    if scale == "log2":
        ticks = sorted({float(v) for v in values})
        return alt.X(f"{variable}:Q", scale=alt.Scale(type="log", base=2),
                     axis=alt.Axis(values=ticks, format="d"), title=variable)  # fmt: skip
    if scale == "linear":
        return alt.X(f"{variable}:Q", title=variable)
    return alt.X(f"{variable}:O", title=variable, sort=None)


def _others(table: pd.DataFrame, variables: list[str], variable: str) -> pd.Series:
    """The other swept variables' values as one label per row (a line per combination)."""
    rest = [v for v in variables if v != variable]
    if not rest:
        return pd.Series(["all"] * len(table), index=table.index, dtype=object)
    return pd.Series(
        [" ".join(f"{v}={row[v]}" for v in rest) for _, row in table.iterrows()],
        index=table.index,
        dtype=object,
    )


def _chart_rows(source: SweepSource, variable: str) -> pd.DataFrame:
    table = source.table()
    ok = table[table["status"] == "ok"].copy()
    rows = pd.DataFrame({variable: ok[variable].tolist()})
    rows["others"] = _others(ok, source.variables(), variable).tolist()
    rows["config"] = ok["config"].tolist()
    rows["GPU time"] = (ok["gpu_time_ns"].astype("Float64") / 1e6).astype(float).tolist()
    rows["cell wall time"] = (ok["cell_wall_ns"].astype("Float64") / 1e6).astype(float).tolist()
    return rows


@shown_with_png
def time_chart(source: SweepSource, variable: str) -> alt.Chart:
    """GPU time (sum of kernel time) and the cell's wall time, ms, against ``variable``; one
    line per combination of the other swept variables."""
    rows = _chart_rows(source, variable)
    measures = ["GPU time", "cell wall time"]
    long = rows.melt(
        id_vars=[variable, "others", "config"],
        value_vars=measures,
        var_name="time",
        value_name="ms",
    ).dropna(subset=["ms"])
    several = rows["others"].nunique() > 1
    encode: dict[str, Any] = {
        "x": _axis(long[variable], variable, source.axis_scale(variable)),
        "y": alt.Y("ms:Q", title="time (ms)"),
        "color": alt.Color("time:N", title=None),
        "tooltip": [
            alt.Tooltip("config:N", title="configuration"),
            alt.Tooltip("time:N"),
            alt.Tooltip("ms:Q", format=",.3f", title="ms"),
        ],
    }
    if several:
        encode["strokeDash"] = alt.StrokeDash("others:N", title=None)
    return (
        alt.Chart(long, title=f"Time against {variable}", width=WIDTH)
        .mark_line(point=True)
        .encode(**encode)
    )


@shown_with_png
def mfu_chart(frame: pd.DataFrame, variable: str, scale: str) -> alt.Chart:
    """MFU (%) per NVTX phase against ``variable``: ``SweepRun.mfu()``'s rows. A frame with no
    MFU (every configuration failed, no FLOPs known) is an empty chart whose title says why
    (``attrs["reason"]``)."""
    rows = frame.dropna(subset=["mfu_frac"]).copy() if "mfu_frac" in frame else frame.iloc[:0]
    if rows.empty:
        why = str(frame.attrs.get("reason") or "no configuration has an MFU row")
        return alt.Chart(pd.DataFrame({variable: [], "MFU %": []}), width=WIDTH,
                         title=alt.TitleParams(f"MFU against {variable}: blank",
                                               subtitle=[why[:200]])).mark_line()  # fmt: skip
    pairs = zip(rows["domain"], rows["range"], strict=True)
    rows = pd.DataFrame(
        {
            variable: rows[variable].tolist(),
            "phase": [f"{d}:{r}" if d else str(r) for d, r in pairs],
            "MFU %": (rows["mfu_frac"].astype(float) * 100).tolist(),
            "config": rows["config"].tolist(),
        }
    )
    return (
        alt.Chart(rows, title=f"MFU against {variable}", width=WIDTH)
        .mark_line(point=True)
        .encode(
            x=_axis(rows[variable], variable, scale),
            y=alt.Y("MFU %:Q", title="MFU (% of the dense peak)"),
            color=alt.Color("phase:N", title="NVTX phase"),
            tooltip=[
                alt.Tooltip("config:N", title="configuration"),
                alt.Tooltip("phase:N"),
                alt.Tooltip("MFU %:Q", format=".1f"),
            ],
        )
    )


def table_html(source: SweepSource, max_rows: int = 50) -> str:
    return table_or_note(
        lambda: html.frame_html(
            source.table(),
            TABLE_COLUMNS,
            max_rows=max_rows,
            titles={"top_kernel_short": "top_kernel"},
        )
    )


def matrix_html(source: SweepSource) -> str:
    """The kernels with the most time (rows) x the configurations (columns): total time each."""

    def build() -> str:
        frame = source.kernels()
        configs = list(frame.attrs.get("named_by_user", []))[:MATRIX_CONFIGS]
        if frame.empty or not configs:
            return html.note_html("No configuration has kernels.")
        head = "".join(f"<th>{html.esc(c)}</th>" for c in ["kernel", *configs])
        rows = []
        for _, row in frame.head(MATRIX_KERNELS).iterrows():
            name = html.esc(html.shorten(row["short_name"], 48))
            cells = "".join(f'<td style="text-align:right">{html.esc(html.fmt_ns(row[c]))}</td>'
                            for c in configs)  # fmt: skip
            rows.append(f'<tr><td title="{html.esc(row["name"])}">{name}</td>{cells}</tr>')
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"

    return table_or_note(build)


def header_html(source: SweepSource) -> str:
    info, err = attempt(source.header)
    if info is None:
        return html.note_html(f"sweep header not shown: {err}")
    return html.header_html(
        f"Sweep: {info['name']}",
        {
            "swept": ", ".join(info["variables"]),
            "configurations": f"{info['configs']}",
            "ok": f"{info['ok']}",
            "failed": f"{info['failed']}" if info["failed"] else None,
            "not run": f"{info['cancelled']}" if info["cancelled"] else None,
            "folder": info["folder"],
        },
    )


def _time_chart_html(source: SweepSource, variable: str) -> str:
    return chart_html(lambda: time_chart(source, variable), f"time against {variable}")


def _time_chart_widget(source: SweepSource, variable: str) -> Any:
    return chart_widget(lambda: time_chart(source, variable), f"time against {variable}")


def sweep_static_html(source: SweepSource) -> str:
    """The static form: header, the table, time against each swept variable, the kernel
    matrix."""
    charts = [_time_chart_html(source, v) for v in source.variables()]
    parts = [
        header_html(source),
        html.section_html("Configurations", table_html(source)),
        *charts,
        html.section_html("Kernels x configurations (total GPU time)", matrix_html(source)),
    ]
    return '<div class="nsight-magic sweep">' + "".join(parts) + "</div>"


def top_kernels_html(source: SweepSource, top: int = 5) -> str:
    """Each configuration's ``top`` kernels, one table per configuration."""

    def build() -> str:
        frame = source.top_kernels(top)
        if frame.empty:
            return html.note_html("No configuration has kernels.")
        columns = ["short_name", "instances", "total_ns", "time_pct"]
        parts = []
        for label, rows in frame.groupby("config", sort=False):
            table = html.frame_html(rows, columns, max_rows=top, titles={"short_name": "name"},
                                    headers={"short_name": "kernel"})  # fmt: skip
            parts.append(f"<h4>{html.esc(label)}</h4>{table}")
        return "".join(parts)

    return table_or_note(build)


def share_page_html(source: SweepSource) -> str:
    """The one page a shared sweep folder opens with (``index.html``): the static form, then
    each configuration's top kernels; no script, the charts as images."""
    name = html.esc(source.header().get("name", "sweep"))
    body = sweep_static_html(source) + html.section_html(
        "Each configuration's top kernels", top_kernels_html(source)
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>Sweep {name}</title></head>'
        f'<body style="font-family:sans-serif;margin:1.5em">{body}'
        '<p style="font-size:11px;color:#666">Written by nsight_magic.share(): each '
        "configuration's run folder is beside this page; nsight_magic.load_run(this folder) "
        "opens the sweep.</p></body></html>"
    )


def sweep_widget(source: SweepSource) -> Any:
    charts = [_time_chart_widget(source, v) for v in source.variables()]
    pages = {
        "Configurations": w.VBox([w.HTML(table_html(source, 200)), *charts]),
        "Kernels": w.VBox([w.HTML(matrix_html(source))]),
    }
    tabs = w.Tab(children=list(pages.values()), titles=list(pages))
    return w.VBox([w.HTML(header_html(source)), tabs])
