"""Display of a ``compare()`` result: delta tables (kernels, NVTX) and delta charts, as widgets
and as static HTML."""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import tables
from .nsys_view import _safe, chart_output
from .static import chart_img_html


def _columns(label: str, key: str, a: str, b: str) -> dict[str, str]:
    return {
        key: label,
        "instances_a": f"n ({a})",
        "instances_b": f"n ({b})",
        "total_ns_a": f"total ({a})",
        "total_ns_b": f"total ({b})",
        "delta_ns": "delta",
        "ratio": "b / a",
    }


FORMATS = {
    "total_ns_a": tables.fmt_ns,
    "total_ns_b": tables.fmt_ns,
    "delta_ns": lambda v: ("+" if v > 0 else "") + tables.fmt_ns(v),
    "ratio": lambda v: "new" if pd.isna(v) else f"{v:.3f}x",
}


def _nvtx_frame(cmp: Any) -> pd.DataFrame:
    from .charts import nvtx_label

    return cmp.nvtx.assign(range_label=nvtx_label(cmp.nvtx))


def kernels_table(cmp: Any, max_rows: int = 20) -> str:
    cols = _columns("kernel", "name", cmp.label_a, cmp.label_b)
    return tables.frame_html(cmp.kernels, cols, FORMATS, max_rows)


def nvtx_table(cmp: Any, max_rows: int = 20) -> str:
    cols = _columns("range", "range_label", cmp.label_a, cmp.label_b)
    return tables.frame_html(_nvtx_frame(cmp), cols, FORMATS, max_rows)


def _header(cmp: Any) -> str:
    a = int(cmp.kernels["total_ns_a"].sum())
    b = int(cmp.kernels["total_ns_b"].sum())
    return tables.header_html(
        f"Compare: {cmp.label_a} -> {cmp.label_b}",
        {
            "kernel time a": tables.fmt_ns(a),
            "kernel time b": tables.fmt_ns(b),
            "b / a": f"{b / a:.3f}x" if a else None,
            "kernel names": f"{len(cmp.kernels):,}",
        },
    )


def compare_static_html(cmp: Any) -> str:
    chart, _ = _safe(cmp.chart)
    parts = [
        _header(cmp),
        tables.section_html("Kernels (largest change first)", kernels_table(cmp)),
        chart_img_html(chart, "kernel deltas"),
    ]
    if len(cmp.nvtx):
        parts.append(tables.section_html("NVTX ranges (GPU-projected)", nvtx_table(cmp)))
    return '<div class="nsight-magic compare">' + "".join(parts) + "</div>"


def compare_widget(cmp: Any) -> Any:
    import ipywidgets as w

    pages = {
        "Kernels": w.VBox([w.HTML(kernels_table(cmp, 100)), chart_output(_safe(cmp.chart)[0])]),
        "NVTX": w.VBox([w.HTML(nvtx_table(cmp, 100)), chart_output(_safe(cmp.nvtx_chart)[0])]),
    }
    return w.VBox([w.HTML(_header(cmp)), w.Tab(children=list(pages.values()), titles=list(pages))])
