"""The %%ncu view (also what the picker shows after a profile): a header with one line per
report warning (a cut or damaged file), ncu's own advice first (its rules, ranked by estimated
speedup), then the launches with speed of light, section details per launch, the roofline with a
verdict per kernel, and HFU/MFU; plus the static HTML form in the same order. Frames come from
an ``NcuSource``; nothing is measured or derived here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd

from . import charts, html
from .common import (
    attempt,
    chart_html,
    chart_widget,
    note_widget,
    report_widget,
    table_or_note,
)
from .live import PICK, LiveChart, picked
from .protocols import NcuSource
from .roofline_chart import roofline_chart

# Shown columns; headers and formats come from nsight_magic/vocabulary/columns.py.
LAUNCH_COLUMNS = ("launch", "short_name", "duration_ns", "compute_sol_pct", "memory_sol_pct",
                  "occupancy_pct", "occupancy_source", "grid", "block", "registers_per_thread",
                  "sm_clock_hz", "nvtx")  # fmt: skip
VERDICT_COLUMNS = ("launch", "short_name", "verdict", "flops_per_s", "arithmetic_intensity",
                   "ceiling_pct")  # fmt: skip
_MFU_NUMBERS = ("dtype", "time_ns", "time_source", "hfu_frac", "mfu_frac", "model_flops_source",
                "peak_flops_per_s", "peak_source")  # fmt: skip
# per kernel, per NVTX range (``NcuSource.mfu()``'s keys)
MFU_COLUMNS = {
    "kernels": ("short_name", *_MFU_NUMBERS),
    "ranges": ("label", "coverage", *_MFU_NUMBERS),
}
MFU_HEADERS = {"label": "NVTX range", "coverage": "launches profiled"}
LAUNCH_HEADERS = {"occupancy_source": "occupancy is"}
SECTION_COLUMNS = ("metric", "value", "unit")
NO_SOL = (
    "No speed of light: this report has no SpeedOfLight section (a --metrics run; "
    "--set basic or larger measures it)."
)
NO_ROOFLINE = "No roofline: {}"
NO_MFU = "No HFU/MFU: {}"
NO_MFU_ROWS = "No HFU/MFU: no launch in this report has FLOP counts."


def header_html(source: NcuSource, with_report: bool = True) -> str:
    """The header; ``with_report``: the report's link and GUI command under it (the live view
    shows them in an Output widget instead, ``common.report_widget``)."""
    warnings, warn_err = attempt(source.warnings)
    warnings = list(warnings) if warn_err is None else [f"report warnings not read: {warn_err}"]
    title = f"Nsight Compute: {source.name}"
    info, err = attempt(source.header)
    if err is not None:
        return html.header_html(title, {}, warnings) + html.note_html(err)
    clock = html.fmt_hz(info.get("sm_clock_hz"))
    report = html.gui_html(info) if with_report else ""
    return (
        html.header_html(
            title,
            {
                "profiled launches": f"{info.get('launches', 0):,}",
                "kernels": f"{info.get('kernels', 0):,}",
                "SM clock (ncu locks it)": clock or None,
                "run dir": info.get("run_dir"),
            },
            warnings,
        )
        + report
    )


def advice_html(source: NcuSource, max_rows: int = 12) -> str:
    """ncu's rule results, largest estimated speedup first: title, speedup, kernel, message."""

    def build() -> str:
        advice = source.advice()
        if advice.empty:
            note, err = attempt(source.advice_note)
            return html.note_html(note or err or "No ncu rule results in this report.")
        items = []
        for row in advice.head(max_rows).itertuples(index=False):
            speedup = html.fmt_pct(getattr(row, "speedup_pct", None))
            kind = getattr(row, "speedup_type", "") or ""
            gain = f"est. speedup {speedup} ({kind})" if speedup else "no speedup estimate"
            where = f"launch {getattr(row, 'launch', '')}: {html.shorten(row.name, 70)}"
            items.append(
                f'<li style="margin:3px 0"><b>{html.esc(row.title)}</b> '
                f'<span style="color:#b35900">{html.esc(gain)}</span> '
                f'<span style="color:#666" title="{html.esc(row.name)}">{html.esc(where)}'
                f"</span><br>{html.esc(html.shorten(row.message, 600))}</li>"
            )
        more = len(advice) - max_rows
        tail = html.note_html(f"{more} more rules") if more > 0 else ""
        return (
            '<ol style="font-family:sans-serif;font-size:12px;margin:2px 0;padding-left:20px">'
            + "".join(items)
            + "</ol>"
            + tail
        )

    return table_or_note(build)


def launches_html(source: NcuSource, max_rows: int = 30) -> str:
    def build() -> str:
        launches = source.launches()
        sol = [c for c in ("compute_sol_pct", "memory_sol_pct") if c in launches]
        blank = len(launches) and (not sol or launches[sol].isna().all().all())
        note = html.note_html(NO_SOL) if blank else ""
        # the phase from the parent nsys run, where known (autograd's kernels: ncu's nvtx is "")
        columns = (*LAUNCH_COLUMNS, "phase") if html.has_text(launches, "phase") else LAUNCH_COLUMNS
        return note + html.frame_html(
            launches,
            columns,
            max_rows=max_rows,
            headers=LAUNCH_HEADERS,
            titles={"short_name": "demangled"},
        )

    return table_or_note(build)


def verdicts_html(source: NcuSource) -> str:
    def build() -> str:
        points, _ = source.roofline()
        return html.frame_html(points, VERDICT_COLUMNS, max_rows=50, titles={"short_name": "name"})

    return table_or_note(build)


def mfu_html(source: NcuSource, key: str, max_rows: int = 20) -> str:
    def build() -> str:
        frame = source.mfu()[key]
        if frame.empty:
            return ""
        return html.frame_html(
            frame,
            (*MFU_COLUMNS[key], "reason") if html.has_text(frame, "reason") else MFU_COLUMNS[key],
            max_rows=max_rows,
            titles={"short_name": "name"},
            headers=MFU_HEADERS,
        )

    return table_or_note(build)


def mfu_note(source: NcuSource) -> str:
    """One line when there is no HFU/MFU to show ("" when there is)."""
    frames, err = attempt(source.mfu)
    if err is not None:
        return NO_MFU.format(err)
    if not len(frames["kernels"]) or frames["kernels"]["hfu_frac"].isna().all():
        return NO_MFU_ROWS
    return ""


def _mfu_chart(source: NcuSource) -> Any:
    return charts.utilisation_chart(source.mfu()["kernels"], "name")


def sections_html(source: NcuSource, launch: int) -> str:
    def build() -> str:
        sections = source.sections(launch)
        if not sections:
            return html.note_html("No sections in this launch.")
        return "".join(
            html.section_html(name, html.frame_html(frame, SECTION_COLUMNS, max_rows=200))
            for name, frame in sections.items()
        )

    return table_or_note(build)


def _roofline_chart(source: NcuSource) -> Any:
    return roofline_chart(*source.roofline())


def _has_mfu(source: NcuSource, key: str) -> bool:
    frames, err = attempt(source.mfu)
    return err is None and len(frames[key]) > 0


def ncu_static_html(source: NcuSource) -> str:
    parts = [
        header_html(source, with_report=False),  # the GUI line closes the view (below)
        html.section_html(
            "Advice (ncu rules, largest estimated speedup first)", advice_html(source)
        ),
        html.section_html("Profiled launches", launches_html(source)),
        chart_html(lambda: charts.sol_chart(source.sol()), "speed of light"),
    ]
    roofline_err = attempt(source.roofline)[1]
    if roofline_err is None:
        parts.append(
            html.section_html(
                "Roofline",
                chart_html(lambda: _roofline_chart(source), "roofline") + verdicts_html(source),
            )
        )
    else:
        parts.append(
            html.section_html("Roofline", html.note_html(NO_ROOFLINE.format(roofline_err)))
        )
    note = mfu_note(source)
    if note:
        parts.append(html.section_html("HFU / MFU", html.note_html(note)))
    else:
        parts += [
            html.section_html("HFU / MFU per kernel", mfu_html(source, "kernels")),
            chart_html(lambda: _mfu_chart(source), "HFU/MFU"),
        ]
        if _has_mfu(source, "ranges"):
            parts.append(html.section_html("HFU / MFU per NVTX range", mfu_html(source, "ranges")))
    info, err = attempt(source.header)
    parts.append(html.gui_html(info) if err is None else "")
    return '<div class="nsight-magic ncu">' + "".join(parts) + "</div>"


def ncu_widget(source: NcuSource, on_pick: Callable[[str], Any] | None = None) -> Any:
    """Header + Tab(Advice, Launches, Sections, Roofline, MFU). A click on a roofline point
    shows that launch's sections and calls ``on_pick(full kernel name)`` (the picker)."""
    launches, err = attempt(source.launches)
    launches = launches if launches is not None else pd.DataFrame(columns=["launch", "name"])
    choices = [
        (f"{launch}: {html.shorten(name, 90)}", int(launch))
        for launch, name in launches[["launch", "name"]].itertuples(index=False)
    ]
    launch_picker = w.Dropdown(options=choices, description="launch", layout=w.Layout(width="95%"))
    details = w.HTML(
        sections_html(source, choices[0][1])
        if choices
        else html.note_html(f"No launches: {err}" if err else "No launches in this report.")
    )
    launch_picker.observe(
        lambda change: setattr(details, "value", sections_html(source, change["new"])),
        names="value",
    )
    full_names = dict(
        zip(launches["launch"], launches.get("demangled", launches["name"]), strict=True)
    )

    roofline_err = attempt(source.roofline)[1]
    roofline_page: Any = note_widget(NO_ROOFLINE.format(roofline_err))
    if roofline_err is None:
        roofline = chart_widget(lambda: _roofline_chart(source), "roofline")

        def on_point(value: Any) -> None:
            point = picked(value)
            if point.get("launch") in full_names:
                launch_picker.value = int(point["launch"])
                if on_pick is not None:
                    on_pick(str(full_names[point["launch"]]))

        if isinstance(roofline, LiveChart):
            roofline.on_selection(PICK, on_point)
        roofline_page = w.VBox([roofline, w.HTML(verdicts_html(source))])

    note = mfu_note(source)
    mfu_parts: list[Any] = [note_widget(note)] if note else []
    if not note:
        mfu_parts.append(chart_widget(lambda: _mfu_chart(source), "HFU/MFU"))
        mfu_parts += [
            w.HTML(mfu_html(source, key, 100))
            for key in ("kernels", "ranges")
            if _has_mfu(source, key)
        ]
    pages = {
        "Advice": w.HTML(advice_html(source)),
        "Launches": w.VBox(
            [
                w.HTML(launches_html(source, 200)),
                chart_widget(lambda: charts.sol_chart(source.sol()), "speed of light"),
            ]
        ),
        "Sections": w.VBox([launch_picker, details]),
        "Roofline": roofline_page,
        "MFU": w.VBox(mfu_parts),
    }
    return w.VBox(
        [
            w.HTML(header_html(source, with_report=False)),
            w.Tab(children=list(pages.values()), titles=list(pages)),
            report_widget(source.header),  # last: the children before it keep their places
        ]
    )
