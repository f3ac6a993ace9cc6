"""The cell's own NVTX ranges versus the user's, and statement order.

A profiled cell runs inside ranges nsight_magic writes (``nvtx_names``): ``cell`` around it,
``L<line>: <source>`` around each top-level statement, ``warmup`` around warm-up runs, all in
the domain ``nsight_magic``. Everything else is the user's (or a library's). Views list the
cell's ranges first, in line order, so the statements read as the cell does."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import CELL_RANGE, NVTX_DOMAIN, WARMUP_RANGE, statement_line
from .text import join_text

__all__ = ["SCOPES", "nvtx_scope", "ordered_projection", "statement_lines"]

# scope of a range: the cell range, a statement range, the warm-up range, or the user's.
SCOPES = ("cell", "statement", "warmup", "user")


def statement_lines(frame: pd.DataFrame) -> pd.Series:
    """Cell line of each statement range (``L12: ...`` in domain nsight_magic) as Int64, <NA>
    for every other range. ``frame`` needs ``domain, range``."""
    ours = (frame["domain"] == NVTX_DOMAIN).to_numpy()
    labels = frame["range"].astype(str)
    lines = {label: statement_line(label) for label in pd.unique(labels[ours])}
    out = labels.map(lines).where(ours)
    return out.astype("Int64")


def nvtx_scope(frame: pd.DataFrame) -> pd.Series:
    """ "cell", "statement", "warmup" or "user" per row of a frame with ``domain, range``
    (ranges of domain nsight_magic that are none of the three count as the user's)."""
    ours = (frame["domain"] == NVTX_DOMAIN).to_numpy()
    names = frame["range"].astype(str).to_numpy()
    lines = statement_lines(frame).notna().to_numpy()
    scope = np.select(
        [ours & (names == CELL_RANGE), ours & lines, ours & (names == WARMUP_RANGE)],
        ["cell", "statement", "warmup"],
        default="user",
    )
    return pd.Series(scope, index=frame.index, name="scope")


def ordered_projection(projection: pd.DataFrame) -> pd.DataFrame:
    """``nvtx_gpu_projection()`` rows in reading order: the ``cell`` range, its statements by
    line, the warm-up range, then the user's ranges by GPU time (``proj_total_ns`` descending,
    then ``domain:range``). Same columns plus ``scope`` (see :data:`SCOPES`) and ``line`` (the
    statement's cell line, <NA> otherwise); a fresh index."""
    out = projection.copy()
    out["scope"] = nvtx_scope(out)
    out["line"] = statement_lines(out)
    if out.empty:
        return out.reset_index(drop=True)
    rank = out["scope"].map({s: i for i, s in enumerate(SCOPES)})
    # User ranges sort by GPU time (largest first); the cell's by line.
    time = np.where(out["scope"] == "user", -out["proj_total_ns"].astype(float), 0.0)
    label = join_text(out["domain"], ":", out["range"])
    keys = pd.DataFrame(
        {"rank": rank, "line": out["line"].fillna(-1).astype(np.int64), "time": time}
    ).assign(label=label)
    order = keys.sort_values(["rank", "line", "time", "label"], kind="stable").index
    return out.loc[order].reset_index(drop=True)
