"""The Ranks tab of a multi-rank run (and its static section): which rank waited for which in
the NCCL collectives (the straggler), each rank's GPU busy %, kernels and collectives, and the
timeline with one set of lanes per rank. Frames come from a ``RankSource``; this module only
lays them out."""

from __future__ import annotations

from typing import Any

import altair as alt
import ipywidgets as w
import pandas as pd

from . import html
from .common import attempt, chart_html, chart_widget, table_or_note
from .protocols import RankSource
from .timeline_chart import timeline_chart

TOP_KERNELS = 5  # per rank
TOP_SKEW = 10
TOP_NCCL_KERNELS = 10

# Shown columns (header overrides after each); headers and formats come from
# nsight_magic/vocabulary/columns.py.
BUSY_COLUMNS = ("rank", "pid", "busy_pct")
KERNEL_COLUMNS = ("rank", "short_name", "instances", "total_ns", "avg_ns", "time_pct")
KERNEL_HEADERS = {"time_pct": "% of the rank's time"}
COLLECTIVE_COLUMNS = ("rank", "kind", "instances", "total_ns", "avg_ns", "max_ns", "bytes",
                      "wait_ns", "times_last")  # fmt: skip
COLLECTIVE_HEADERS = {"kind": "collective", "instances": "calls"}
NCCL_KERNEL_COLUMNS = ("rank", "kind", "instance", "duration_ns", "bytes", "dtype", "algorithm",
                       "protocol", "stream_id")  # fmt: skip
SKEW_COLUMNS = ("kind", "instance", "ranks", "bytes", "first_rank", "last_rank", "skew_ns",
                "end_spread_ns")  # fmt: skip
KIND_HEADERS = {"kind": "collective"}


def summary_html(ranks: RankSource) -> str:
    """One line: ranks, NCCL time, the worst skew and the straggler."""
    info, err = attempt(ranks.summary)
    if err is not None:
        return html.note_html(f"rank summary not shown: {err}")
    straggler = info.get("straggler_rank")
    return html.header_html(
        "Ranks",
        {
            "ranks": info.get("ranks"),
            "NCCL kernel time": html.fmt_ns(info.get("nccl_time_ns")) or None,
            "worst skew": html.fmt_ns(info.get("max_skew_ns")) or None,
            "straggler (most often last into a collective)": (
                f"rank {straggler}" if straggler is not None else None
            ),
        },
    )


def _table(
    build: Any,
    columns: tuple[str, ...],
    empty: str,
    max_rows: int = 30,
    headers: dict[str, str] | None = None,
) -> str:
    def render() -> str:
        frame = build()
        if frame.empty:
            return html.note_html(empty)
        return html.frame_html(
            frame, columns, max_rows=max_rows, titles={"short_name": "name"}, headers=headers
        )

    return table_or_note(render)


def _top_per_rank(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first ``n`` rows of each rank's block (blocks come sorted, most time first)."""
    return frame.groupby("rank", sort=False, dropna=False).head(n)


def _largest_skews(skew: pd.DataFrame) -> pd.DataFrame:
    return skew.sort_values("skew_ns", ascending=False, kind="stable").head(TOP_SKEW)


def _longest(kernels: pd.DataFrame) -> pd.DataFrame:
    return kernels.sort_values("duration_ns", ascending=False, kind="stable").head(TOP_NCCL_KERNELS)


def tables_html(ranks: RankSource) -> str:
    """Busy %, collectives, the largest skews and each rank's top kernels, as tables."""
    return "".join(
        [
            html.section_html(
                "GPU busy per rank", _table(ranks.busy, BUSY_COLUMNS, "No GPU work per rank.")
            ),
            html.section_html(
                "NCCL collectives per rank",
                _table(
                    ranks.collectives,
                    COLLECTIVE_COLUMNS,
                    "No NCCL kernels in this run.",
                    headers=COLLECTIVE_HEADERS,
                ),
            ),
            html.section_html(
                f"Rank skew: the {TOP_SKEW} largest (last into a collective = straggler)",
                _table(
                    lambda: _largest_skews(ranks.skew()),
                    SKEW_COLUMNS,
                    "No collective seen on two or more ranks.",
                    headers=KIND_HEADERS,
                ),
            ),
            html.section_html(
                f"The {TOP_NCCL_KERNELS} longest NCCL kernels (a long one waited for a peer)",
                _table(
                    lambda: _longest(ranks.collective_kernels()),
                    NCCL_KERNEL_COLUMNS,
                    "No NCCL kernels in this run.",
                    headers=KIND_HEADERS,
                ),
            ),
            html.section_html(
                f"Top {TOP_KERNELS} kernels per rank",
                _table(
                    lambda: _top_per_rank(ranks.kernels(), TOP_KERNELS),
                    KERNEL_COLUMNS,
                    "No kernels.",
                    max_rows=200,
                    headers=KERNEL_HEADERS,
                ),
            ),
        ]
    )


def skew_chart(skew: pd.DataFrame) -> alt.Chart:
    """Skew of each collective instance in start order, coloured by the rank that came last."""
    frame = skew.head(2000).reset_index(drop=True)
    frame = pd.DataFrame(
        {
            "order": frame.index.to_numpy(),
            # strings per row: column string arithmetic raises on pandas 3.0 (analysis/text.py)
            "collective": [
                f"{k} #{i}" for k, i in zip(frame["kind"], frame["instance"], strict=True)
            ],
            "skew_us": (frame["skew_ns"] / 1e3).to_numpy(),
            "last": [f"rank {r}" for r in frame["last_rank"]],
        }
    )
    return (
        alt.Chart(frame, title="Rank skew per collective (start spread; colour: last rank in)")
        .mark_bar()
        .encode(
            x=alt.X("order:O", title="collective, in start order", axis=alt.Axis(labels=False)),
            y=alt.Y("skew_us:Q", title="skew (us)"),
            color=alt.Color("last:N", title="last in"),
            tooltip=[
                alt.Tooltip("collective:N"),
                alt.Tooltip("skew_us:Q", format=",.1f", title="skew (us)"),
                alt.Tooltip("last:N", title="last in"),
            ],
        )
        .properties(width=480, height=160)
    )


def _timeline(ranks: RankSource) -> Any:
    return timeline_chart(ranks.timeline(), ranks.origin_ns())


def ranks_static_html(ranks: RankSource) -> str:
    return "".join(
        [
            summary_html(ranks),
            tables_html(ranks),
            chart_html(lambda: skew_chart(ranks.skew()), "rank skew"),
            chart_html(lambda: _timeline(ranks), "per-rank timeline"),
        ]
    )


def ranks_widget(ranks: RankSource) -> Any:
    return w.VBox(
        [
            w.HTML(summary_html(ranks)),
            chart_widget(lambda: _timeline(ranks), "per-rank timeline"),
            chart_widget(lambda: skew_chart(ranks.skew()), "rank skew"),
            w.HTML(tables_html(ranks)),
        ]
    )
