"""The %%ncu view (also what the picker shows after a profile): per-launch table with speed of
light, SOL chart, section details per launch (dropdown), roofline and MFU charts; plus the
static HTML form. Frames come from the run; nothing is measured or derived here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from . import charts, tables
from .nsys_view import _safe, chart_output
from .static import chart_img_html

LAUNCH_COLUMNS = {
    "launch": "launch",
    "name": "kernel",
    "duration_ns": "duration",
    "compute_sol_pct": "compute SOL",
    "memory_sol_pct": "memory SOL",
    "achieved_occupancy_pct": "occupancy",
    "grid": "grid",
    "block": "block",
    "registers_per_thread": "regs",
    "sm_clock_hz": "SM clock",
    "nvtx": "NVTX",
}
LAUNCH_FORMATS: dict[str, Callable[[Any], str]] = {
    "duration_ns": tables.fmt_ns,
    "compute_sol_pct": tables.fmt_pct,
    "memory_sol_pct": tables.fmt_pct,
    "achieved_occupancy_pct": tables.fmt_pct,
    "sm_clock_hz": lambda v: "" if pd.isna(v) else f"{float(v) / 1e9:.2f} GHz",
}
MFU_COLUMNS = {"name": "kernel", "mfu": "MFU", "peak_flops": "peak", "peak_source": "peak source"}
MFU_FORMATS = {"mfu": lambda v: tables.fmt_pct(100 * v), "peak_flops": tables.fmt_flops}


def launches_frame(run: Any) -> pd.DataFrame:
    """kernels() with the SOL columns joined on ``launch``."""
    kernels = run.kernels()
    sol, _ = _safe(run.sol)
    if sol is None or sol.empty:
        return kernels
    extra = [c for c in sol.columns if c not in kernels.columns or c == "launch"]
    return kernels.merge(sol[extra], on="launch", how="left")


def mfu_frame(run: Any) -> pd.DataFrame | None:
    """Per-kernel MFU from ``analysis.mfu`` (None when the report lacks the FLOP metrics)."""
    from ..analysis import mfu

    frame, _ = _safe(lambda: mfu.ncu_kernel_mfu(run.report))
    return frame if frame is not None and len(frame) else None


def ncu_charts(run: Any) -> dict[str, Any]:
    """name -> chart (or None when the report lacks what the chart needs)."""
    sol, _ = _safe(run.sol)
    roofline, roof_err = _safe(run.roofline)
    mfu, _ = _safe(lambda: mfu_frame(run))
    return {
        "sol": _safe(lambda: charts.sol_chart(sol))[0] if sol is not None else None,
        "roofline": _safe(lambda: charts.roofline_chart(roofline))[0] if roof_err is None else None,
        "mfu": _safe(lambda: charts.mfu_chart(mfu))[0] if mfu is not None else None,
    }


def sections_html(run: Any, launch: int) -> str:
    sections, err = _safe(lambda: run.sections(launch))
    if err:
        return tables.note_html(err)
    if not sections:
        return tables.note_html("No sections in this launch.")
    fmt = {"value": tables.fmt_num}
    return "".join(
        tables.section_html(name, tables.frame_html(frame, ["metric", "value", "unit"], fmt, 200))
        for name, frame in sections.items()
    )


def header_items(run: Any, launches: pd.DataFrame) -> dict[str, Any]:
    clock = launches["sm_clock_hz"].median() if "sm_clock_hz" in launches else None
    return {
        "profiled launches": f"{len(launches):,}",
        "kernels": f"{launches['name'].nunique():,}" if len(launches) else "0",
        "SM clock (ncu locks it)": f"{clock / 1e9:.2f} GHz" if clock and pd.notna(clock) else None,
        "run dir": str(run.run_dir) if run.run_dir else None,
    }


def ncu_static_html(run: Any) -> str:
    launches, err = _safe(lambda: launches_frame(run))
    if err:
        return tables.header_html(f"Nsight Compute: {run.name}", {}) + tables.note_html(err)
    built = ncu_charts(run)
    parts = [
        tables.header_html(f"Nsight Compute: {run.name}", header_items(run, launches)),
        tables.section_html(
            "Profiled launches", tables.frame_html(launches, LAUNCH_COLUMNS, LAUNCH_FORMATS, 30)
        ),
        chart_img_html(built["sol"], "speed of light") if built["sol"] is not None else "",
    ]
    if built["roofline"] is not None:
        parts.append(tables.section_html("Roofline", chart_img_html(built["roofline"], "roofline")))
    mfu, _ = _safe(lambda: mfu_frame(run))
    if mfu is not None:
        parts.append(tables.section_html("MFU", tables.frame_html(mfu, MFU_COLUMNS, MFU_FORMATS)))
        parts.append(chart_img_html(built["mfu"], "MFU"))
    return '<div class="nsight-magic ncu">' + "".join(parts) + "</div>"


def ncu_widget(run: Any) -> Any:
    """Header + Tab(Launches, Sections, Roofline, MFU)."""
    import ipywidgets as w

    launches = launches_frame(run)
    built = ncu_charts(run)
    header = w.HTML(tables.header_html(f"Nsight Compute: {run.name}", header_items(run, launches)))

    choices = [
        (f"{launch}: {tables.shorten(name, 90)}", int(launch))
        for launch, name in launches[["launch", "name"]].itertuples(index=False)
    ]
    picker = w.Dropdown(options=choices, description="launch", layout=w.Layout(width="95%"))
    details = w.HTML(sections_html(run, choices[0][1]) if choices else "")
    picker.observe(lambda change: setattr(details, "value", sections_html(run, change["new"])),
                   names="value")  # fmt: skip

    def chart_page(name: str, missing: str) -> Any:
        if built[name] is None:
            return w.HTML(tables.note_html(missing))
        return chart_output(built[name])

    mfu, _ = _safe(lambda: mfu_frame(run))
    pages = {
        "Launches": w.VBox(
            [
                w.HTML(tables.frame_html(launches, LAUNCH_COLUMNS, LAUNCH_FORMATS, 200)),
                chart_page("sol", "No speed-of-light metrics in this report."),
            ]
        ),
        "Sections": w.VBox([picker, details]),
        "Roofline": chart_page(
            "roofline", "No roofline metrics: profile with --set roofline (or full)."
        ),
        "MFU": w.VBox(
            [
                w.HTML(tables.frame_html(mfu, MFU_COLUMNS, MFU_FORMATS) if mfu is not None else ""),
                chart_page("mfu", "No FLOP metrics for MFU in this report."),
            ]
        ),
    }
    return w.VBox([header, w.Tab(children=list(pages.values()), titles=list(pages))])
