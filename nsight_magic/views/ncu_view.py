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
MFU_COLUMNS = {
    "name": "kernel",
    "label": "NVTX range",
    "dtype": "dtype",
    "time_ns": "time",
    "time_source": "time from",
    "peak_flops": "peak",
    "peak_source": "peak source",
    "mfu": "MFU",
}
MFU_FORMATS = {
    "mfu": lambda v: tables.fmt_pct(100 * v),
    "peak_flops": tables.fmt_flops,
    "time_ns": tables.fmt_ns,
}


def launches_frame(run: Any) -> pd.DataFrame:
    """kernels() with the SOL columns joined on ``launch``."""
    kernels = run.kernels()
    sol, _ = _safe(run.sol)
    if sol is None or sol.empty:
        return kernels
    extra = [c for c in sol.columns if c not in kernels.columns or c == "launch"]
    return kernels.merge(sol[extra], on="launch", how="left")


def mfu_frames(run: Any) -> dict[str, pd.DataFrame]:
    """Per-kernel and per-NVTX-range MFU (``analysis.mfu``) against the datasheet dense peak.
    With a parent nsys run, times are its real-clock ones (ncu locks clocks). Empty frames
    when the report lacks FLOP metrics or the GPU has no known peak."""
    from ..analysis.mfu import kernel_mfu, range_mfu

    parent = getattr(run, "parent", None)
    out: dict[str, pd.DataFrame] = {"kernels": pd.DataFrame(), "ranges": pd.DataFrame()}
    points, err = _safe(run.roofline)
    if err:
        return out
    gpu = (_safe(run.report.device)[0] or {}).get("name")
    nsys_kernels = _safe(parent.kernels)[0] if parent is not None else None
    kernels, _ = _safe(
        lambda: kernel_mfu(points, kernels=run.kernels(), nsys_kernels=nsys_kernels, gpu_name=gpu)
    )
    projection = _safe(parent.nvtx_gpu_projection)[0] if parent is not None else None
    ranges, _ = _safe(
        lambda: range_mfu(points, run.report.nvtx_ranges(), projection=projection, gpu_name=gpu)
    )
    if kernels is not None:
        out["kernels"] = kernels
    if ranges is not None and len(ranges):
        out["ranges"] = ranges.assign(label=charts.nvtx_label(ranges))
    return out


def ncu_charts(run: Any, mfu: dict[str, pd.DataFrame] | None = None) -> dict[str, Any]:
    """name -> chart (or None when the report lacks what the chart needs)."""
    sol, _ = _safe(run.sol)
    roofline, roof_err = _safe(run.roofline)
    mfu = mfu if mfu is not None else mfu_frames(run)
    k, r = mfu["kernels"], mfu["ranges"]
    return {
        "sol": _safe(lambda: charts.sol_chart(sol))[0] if sol is not None else None,
        "roofline": _safe(lambda: charts.roofline_chart(roofline))[0] if roof_err is None else None,
        "mfu": _safe(lambda: charts.mfu_chart(k, "name"))[0] if len(k) else None,
        "mfu_ranges": _safe(lambda: charts.mfu_chart(r, "label"))[0] if len(r) else None,
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
    mfu = mfu_frames(run)
    built = ncu_charts(run, mfu)
    parts = [
        tables.header_html(f"Nsight Compute: {run.name}", header_items(run, launches)),
        tables.section_html(
            "Profiled launches", tables.frame_html(launches, LAUNCH_COLUMNS, LAUNCH_FORMATS, 30)
        ),
        chart_img_html(built["sol"], "speed of light") if built["sol"] is not None else "",
    ]
    if built["roofline"] is not None:
        parts.append(tables.section_html("Roofline", chart_img_html(built["roofline"], "roofline")))
    if len(mfu["kernels"]):
        body = tables.frame_html(mfu["kernels"], MFU_COLUMNS, MFU_FORMATS)
        parts += [tables.section_html("MFU per kernel", body), chart_img_html(built["mfu"], "MFU")]
    if len(mfu["ranges"]):
        body = tables.frame_html(mfu["ranges"], MFU_COLUMNS, MFU_FORMATS)
        parts.append(tables.section_html("MFU per NVTX range", body))
    return '<div class="nsight-magic ncu">' + "".join(parts) + "</div>"


def ncu_widget(run: Any) -> Any:
    """Header + Tab(Launches, Sections, Roofline, MFU)."""
    import ipywidgets as w

    launches = launches_frame(run)
    mfu = mfu_frames(run)
    built = ncu_charts(run, mfu)
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

    mfu_parts = [
        w.HTML(tables.frame_html(mfu[key], MFU_COLUMNS, MFU_FORMATS, 100))
        for key in ("kernels", "ranges")
        if len(mfu[key])
    ]
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
                chart_page("mfu", "No FLOP metrics or no known peak for MFU in this report."),
                *mfu_parts,
                *([chart_output(built["mfu_ranges"])] if built["mfu_ranges"] is not None else []),
            ]
        ),
    }
    return w.VBox([header, w.Tab(children=list(pages.values()), titles=list(pages))])
