"""The Ops tab (and its static section) of a run captured with PyTorch op ranges (nsys
``--pytorch=autograd-shapes-nvtx``): the ops that cost the most GPU time, with their shapes,
calls, kernels and, for GEMMs, MFU. Frames come from ``NsysSource.op_table``; this module only
lays them out."""

from __future__ import annotations

from typing import Any

import altair as alt
import ipywidgets as w
import pandas as pd

from . import html
from .charts import WIDTH, label_axis, unique_labels
from .common import chart_html, chart_widget, table_or_note
from .protocols import NsysSource

TOP_N = 15
# Shown columns; headers and formats come from nsight_magic/vocabulary/columns.py.
OP_COLUMNS = ("op", "shapes", "calls", "kernels", "gpu_time_ns", "kernel_time_ns", "model_flops",
              "mfu_frac")  # fmt: skip
OP_HEADERS = {"mfu_frac": "MFU"}
NVTX_NOTE = "PyTorch op ranges (one per op call) are in the Ops tab, not in this table."
ABOUT = (
    "GPU time is nsys's projection of each op call (it includes its callees': aten::linear"
    " holds its aten::mm); own kernel time counts each kernel once, under the innermost op that"
    " launched it. MFU: model FLOPs (2*M*N*K of a GEMM's shapes) over its GPU time, against the"
    " dense peak below (op ranges do not record the data type); blank for ops that are not"
    " GEMMs, whose FLOPs the shapes do not give."
)
SHAPES_WIDTH = 60  # shapes run long (attention ops list 13 tensors); the full text on hover


def has_ops(source: NsysSource) -> bool:
    """Whether the Ops tab is shown: op ranges with GPU work (``op_table`` built only when the
    run has op ranges at all)."""
    try:
        return source.has_op_ranges() and len(source.op_table()) > 0
    except Exception:  # the tab says why when it is shown; no op table means no tab
        return False


def ops_html(source: NsysSource, max_rows: int = 25) -> str:
    """The top ``max_rows`` ops (a long tail of small ops would only weigh the saved notebook)."""

    def build() -> str:
        ops = source.op_table()
        if ops.empty:
            return html.note_html("No PyTorch op ranges (nsys --pytorch=autograd-shapes-nvtx).")
        # a backward node's forward op (joined by seq) and why an MFU is blank, when any
        extra = [c for c in ("forward_op", "reason") if html.has_text(ops, c)]
        columns = (*OP_COLUMNS, *extra)
        table = html.frame_html(
            ops, columns, max_rows=max_rows, name_width=SHAPES_WIDTH, headers=OP_HEADERS
        )
        return html.note_html(ABOUT) + peaks_html(ops) + table

    return table_or_note(build)


def peaks_html(ops: pd.DataFrame) -> str:
    """One line per peak the MFU column is against; when no op has MFU, the one line why."""
    with_mfu = ops.dropna(subset=["mfu_frac"])
    if with_mfu.empty and len(ops):
        return html.note_html(str(ops["peak_source"].iloc[0] or "no MFU for any op"))
    pairs = with_mfu[["peak_flops_per_s", "peak_source"]].drop_duplicates()
    return "".join(
        html.note_html(f"MFU peak: {html.fmt_flops(peak)} ({source})")
        for peak, source in pairs.itertuples(index=False)
    )


def top_ops_chart(ops: pd.DataFrame, n: int = TOP_N) -> alt.Chart:
    """Bars of GPU time for the top ``n`` op calls (op + shapes), own kernel time on hover."""
    top = ops.head(n)
    # per row: column string arithmetic raises on pandas 3.0 (analysis/text.py)
    ops_shapes = zip(top["op"], top["shapes"], strict=True)
    label = pd.Series(
        [f"{op} {shapes}" for op, shapes in ops_shapes], index=top.index, dtype=object
    )
    frame = pd.DataFrame(
        {
            "bar": unique_labels(label),
            "op": label.to_numpy(),
            "calls": top["calls"].to_numpy(),
            "gpu_us": (top["gpu_time_ns"] / 1e3).to_numpy(),
            "kernel_us": (top["kernel_time_ns"] / 1e3).to_numpy(),
        }
    )
    return (
        alt.Chart(frame, title=f"Top {len(frame)} PyTorch ops by GPU time")
        .mark_bar()
        .encode(
            x=alt.X("gpu_us:Q", title="GPU time (us)"),
            y=alt.Y("bar:N", sort="-x", title=None, axis=label_axis()),
            tooltip=[
                alt.Tooltip("op:N", title="op"),
                alt.Tooltip("calls:Q"),
                alt.Tooltip("gpu_us:Q", format=",.1f", title="GPU time (us)"),
                alt.Tooltip("kernel_us:Q", format=",.1f", title="own kernel time (us)"),
            ],
        )
        .properties(width=WIDTH)
    )


def ops_static_html(source: NsysSource) -> str:
    return ops_html(source) + chart_html(lambda: top_ops_chart(source.op_table()), "top ops")


def ops_widget(source: NsysSource) -> Any:
    return w.VBox(
        [
            w.HTML(ops_html(source, max_rows=40)),
            chart_widget(lambda: top_ops_chart(source.op_table()), "top ops"),
        ]
    )
