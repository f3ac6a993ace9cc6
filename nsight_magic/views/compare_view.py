"""Display of a ``compare()`` result: delta tables (kernels, NVTX) and delta charts, as widgets
and as static HTML. The comparison hands over its frames (``protocols.ComparisonSource``)."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from . import charts, html
from .common import chart_html, chart_widget, table_or_note
from .protocols import ComparisonSource


def _columns(label: str, key: str, a: str, b: str) -> dict[str, str]:
    return {
        key: label,
        "change": "change",
        "instances_a": f"n ({a})",
        "instances_b": f"n ({b})",
        "total_ns_a": f"total ({a})",
        "total_ns_b": f"total ({b})",
        "delta_ns": "delta",
        "ratio": "b / a",
        "ratio_lo": "95% from",
        "ratio_hi": "95% to",
    }


def _fmt_ratio(value: Any) -> str:
    v = html.as_float(value)
    return "new" if v is None else f"{v:.3f}x"


def _fmt_bound(value: Any) -> str:
    v = html.as_float(value)
    return "" if v is None else f"{v:.3f}x"  # no interval: the change column says why


# a kernel only in b has no ratio: it is "new" here
FORMATS = {"ratio": _fmt_ratio, "ratio_lo": _fmt_bound, "ratio_hi": _fmt_bound}


def kernels_table(cmp: ComparisonSource, max_rows: int = 20) -> str:
    key = "short_name" if "short_name" in cmp.kernels.columns else "name"
    cols = _columns("kernel", key, cmp.label_a, cmp.label_b)
    return table_or_note(
        lambda: html.frame_html(cmp.kernels, cols, FORMATS, max_rows, titles={key: "name"})
    )


def nvtx_table(cmp: ComparisonSource, max_rows: int = 20) -> str:
    cols = _columns("range", "label", cmp.label_a, cmp.label_b)
    return table_or_note(lambda: html.frame_html(cmp.nvtx, cols, FORMATS, max_rows))


def _header(cmp: ComparisonSource) -> str:
    a = html.as_float(cmp.kernels["total_ns_a"].sum()) if len(cmp.kernels) else 0.0
    b = html.as_float(cmp.kernels["total_ns_b"].sum()) if len(cmp.kernels) else 0.0
    return html.header_html(
        f"Compare: {cmp.label_a} -> {cmp.label_b}",
        {
            "verdict": cmp.summary(),
            "kernel time a": html.fmt_ns(a),
            "kernel time b": html.fmt_ns(b),
            "b / a": f"{b / a:.3f}x" if a and b is not None else None,
            "kernel names": f"{len(cmp.kernels):,}",
            "peak memory change": html.fmt_bytes(int(cmp.memory["peak_change_bytes"].iloc[0]))
            if len(cmp.memory)
            else None,
        },
    )


MEMORY_COLUMNS = ("device_id", "a_peak_bytes", "b_peak_bytes", "peak_change_bytes", "ratio",
                  "statement_a", "statement_b")  # fmt: skip


def memory_table(cmp: ComparisonSource) -> str:
    """Peak device memory per GPU, a vs b ("" when neither run has memory events)."""
    if not len(cmp.memory):
        return ""
    cols = {"device_id": "GPU", "a_peak_bytes": f"peak ({cmp.label_a})",
            "b_peak_bytes": f"peak ({cmp.label_b})", "peak_change_bytes": "change",
            "ratio": "b / a", "statement_a": f"at ({cmp.label_a})",
            "statement_b": f"at ({cmp.label_b})"}  # fmt: skip
    body = table_or_note(lambda: html.frame_html(cmp.memory, cols, FORMATS))
    return html.section_html("GPU memory (peak per GPU, nsys --memory)", body)


def _kernel_chart(cmp: ComparisonSource) -> Any:
    return charts.delta_chart(cmp.kernels, "name")


def _nvtx_chart(cmp: ComparisonSource) -> Any:
    return charts.delta_chart(cmp.nvtx, "label")


def compare_static_html(cmp: ComparisonSource) -> str:
    parts = [
        _header(cmp),
        html.section_html("Kernels (largest change first)", kernels_table(cmp)),
        chart_html(lambda: _kernel_chart(cmp), "kernel deltas"),
    ]
    parts.append(memory_table(cmp))
    if len(cmp.nvtx):
        parts += [
            html.section_html("NVTX ranges (GPU-projected)", nvtx_table(cmp)),
            chart_html(lambda: _nvtx_chart(cmp), "NVTX deltas"),
        ]
    return '<div class="nsight-magic compare">' + "".join(parts) + "</div>"


def compare_widget(cmp: ComparisonSource) -> Any:
    pages = {
        "Kernels": w.VBox(
            [w.HTML(kernels_table(cmp, 100)), chart_widget(lambda: _kernel_chart(cmp), "chart")]
        ),
        "NVTX": w.VBox(
            [w.HTML(nvtx_table(cmp, 100)), chart_widget(lambda: _nvtx_chart(cmp), "chart")]
        ),
    }
    if len(cmp.memory):
        pages["Memory"] = w.VBox([w.HTML(memory_table(cmp))])
    return w.VBox([w.HTML(_header(cmp)), w.Tab(children=list(pages.values()), titles=list(pages))])
