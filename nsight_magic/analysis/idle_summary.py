"""GPU idle time summed by cause (``idle.idle_pieces``), in total, per statement range and per
rank, and the top causes in one sentence each."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import shorten_label, statement_line
from .data_loader import is_loader_frame

__all__ = ["BREAKDOWN_COLUMNS", "collective_waits", "idle_breakdown", "idle_causes"]

BREAKDOWN_COLUMNS = [
    "scope",
    "rank",
    "statement",
    "category",
    "call",
    "frame",
    "idle_ns",
    "pct",
    "gaps",
]
_KEY = ["category", "call", "frame"]


def collective_waits(coll: pd.DataFrame, skew: pd.DataFrame) -> pd.DataFrame:
    """Per NCCL kernel (``collectives.collectives`` joined with ``rank_skew``): ``rank, pid,
    start_ns, kind, last_rank, wait_ns`` (its start until the last rank's start: the kernel
    spins, waiting). Only kernels that waited."""
    cols = ["rank", "pid", "start_ns", "kind", "last_rank", "wait_ns"]
    if coll.empty or skew.empty:
        return pd.DataFrame({c: np.array([], dtype=np.int64) for c in cols})
    joined = coll.merge(
        skew[["communicator", "kind", "instance", "last_start_ns", "last_rank"]],
        on=["communicator", "kind", "instance"],
        how="left",
    )
    wait = (joined["last_start_ns"] - joined["start_ns"]).clip(lower=0).fillna(0)
    out = joined.assign(wait_ns=wait.astype(np.int64))
    out = out[(out["wait_ns"] > 0).to_numpy()]
    extra = ["report"] if "report" in out else []
    return out[[*extra, *cols]].reset_index(drop=True)


def _host_split(pieces: pd.DataFrame, samples: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Host time per group, shared out among the Python frames sampled there in proportion to
    their counts; host time with no sample stays one row with frame ""."""
    host = pieces[(pieces["category"] == "host").to_numpy()]
    time = host.groupby(by, sort=False, dropna=False).agg(
        idle_ns=("duration_ns", "sum"), gaps=("gap", "nunique")
    )
    if samples.empty:
        return time.reset_index().assign(category="host", call="", frame="")
    counts = samples.groupby([*by, "frame"], sort=False, dropna=False).size().rename("n")
    counts = counts.reset_index()
    counts["share"] = counts["n"] / counts.groupby(by, dropna=False)["n"].transform("sum")
    split = counts.merge(time.reset_index(), on=by, how="inner")
    split["idle_ns"] = split["idle_ns"] * split["share"]
    unsampled = time.reset_index()
    unsampled = unsampled[~unsampled.set_index(by).index.isin(counts.set_index(by).index)]
    split = pd.concat([split.drop(columns=["n", "share"]), unsampled.assign(frame="")])
    return split.assign(category="host", call="")


def _scope(
    pieces: pd.DataFrame, samples: pd.DataFrame, waits: pd.DataFrame, by: list[str], name: str
) -> pd.DataFrame:
    if not by:  # one group: the whole capture
        by = ["_all"]
        pieces, samples = pieces.assign(_all=0), samples.assign(_all=0)
        waits = waits.assign(_all=0) if len(waits) else waits
    calls = pieces[(pieces["category"] != "host").to_numpy()]
    grouped = calls.groupby([*by, *_KEY], sort=False, dropna=False).agg(
        idle_ns=("duration_ns", "sum"), gaps=("gap", "nunique")
    )
    parts = [grouped.reset_index(), _host_split(pieces, samples, by)]
    if len(waits):
        w = waits.assign(
            category="collective_wait",
            call=waits["kind"].astype(str),
            frame=[f"rank {r}" if pd.notna(r) else "" for r in waits["last_rank"]],
        )
        wg = w.groupby([*by, *_KEY], sort=False, dropna=False).agg(
            idle_ns=("wait_ns", "sum"), gaps=("wait_ns", "size")
        )
        parts.append(wg.reset_index())
    rows = pd.concat(parts, ignore_index=True)
    rows["idle_ns"] = rows["idle_ns"].astype(np.float64)
    totals = rows.groupby(by, dropna=False)["idle_ns"].transform("sum")
    rows["pct"] = 100.0 * rows["idle_ns"] / totals.where(totals > 0)
    rows = rows.drop(columns=["_all"], errors="ignore")
    rows["scope"] = name
    for col in ("statement", "rank"):
        if col not in rows:
            rows[col] = "" if col == "statement" else pd.NA
    return rows


def idle_breakdown(
    pieces: pd.DataFrame, host_samples: pd.DataFrame, waits: pd.DataFrame | None = None
) -> pd.DataFrame:
    """``BREAKDOWN_COLUMNS``: GPU idle time (and collective wait) by ``category, call, frame``
    for ``scope`` "total", per "statement" (the cell's statement ranges in line order, ""
    = outside them) and per "rank" (multi-rank runs); ``pct`` is of the scope's (or the
    statement's, the rank's) total; ``gaps``: how many idle gaps (or waiting kernels) the row
    covers. ``waits``: ``collective_waits`` (with ``statement``) or None."""
    waits = waits if waits is not None else pd.DataFrame()
    scopes = [
        _scope(pieces, host_samples, waits, [], "total"),
        _scope(pieces, host_samples, waits, ["statement"], "statement"),
    ]
    if "rank" in pieces and pieces["rank"].notna().any():
        scopes.append(_scope(pieces, host_samples, waits, ["rank"], "rank"))
    out = pd.concat(scopes, ignore_index=True)
    out["rank"] = pd.array(out["rank"], dtype="Int64")
    for col in ("statement", "category", "call", "frame", "scope"):
        out[col] = out[col].fillna("").astype(str)
    out["gaps"] = out["gaps"].fillna(0).astype(np.int64)
    line = out["statement"].map(lambda s: statement_line(s) or 10**9)
    out = out.assign(_scope=out["scope"].map({"total": 0, "statement": 1, "rank": 2}), _line=line)
    out = out.sort_values(
        ["_scope", "_line", "statement", "rank", "idle_ns"],
        ascending=[True, True, True, True, False],
        kind="stable",
    )
    return out[BREAKDOWN_COLUMNS].reset_index(drop=True)


def _where(statement: str) -> str:
    line = statement_line(statement)
    if line is None:
        return "outside the cell's statements"
    return f"in L{line} `{shorten_label(statement.split(': ', 1)[1], 50)}`"


def _sentence(row: pd.Series, total_ns: float) -> str:
    share = 100.0 * row["idle_ns"] / total_ns if total_ns else float("nan")
    pct = f"{share:.0f}% of idle time" if share >= 0.5 else "<1% of idle time"
    where, call, frame = _where(row["statement"]), row["call"], row["frame"]
    at = f" (from {frame})" if frame else ""
    match row["category"]:
        case "cuda_sync":
            return f"{pct}: {call} {where}{at}"
        case "cuda_api":
            return f"{pct}: in {call} {where}{at}"
        case "os_wait" if is_loader_frame(frame):
            return f"{pct}: {frame}, in {call} (OS call) {where}"
        case "os_wait":
            return f"{pct}: waiting in {call} (OS call) {where}"
        case "collective_wait":
            return f"{pct}: {call} waiting for {frame or 'another rank'} {where}"
    if is_loader_frame(frame):
        return f"{pct}: {frame} {where}"
    if frame:
        return f"{pct}: running Python at {frame} {where}"
    return f"{pct}: host code between CUDA calls {where} (no Python sample there)"


def idle_causes(breakdown: pd.DataFrame, top: int = 5) -> pd.DataFrame:
    """The ``top`` causes of idle time over the whole capture, by ``category, call, frame,
    statement`` (the "statement" scope of ``breakdown``, an ``idle_breakdown`` frame): those
    columns + ``idle_ns, pct, sentence`` (e.g. "61% of idle time: cudaStreamSynchronize in L3
    `tok = out.logits.argmax(-1)`")."""
    rows = breakdown[(breakdown["scope"] == "statement").to_numpy()]
    total = float(rows["idle_ns"].sum())
    rows = rows.sort_values("idle_ns", ascending=False, kind="stable").head(top)
    rows = rows.assign(pct=100.0 * rows["idle_ns"] / total if total else np.nan)
    # dtype str also with no rows (a capture without idle time: pandas would make it float64)
    sentences = [_sentence(r, total) for _, r in rows.iterrows()]
    rows["sentence"] = pd.Series(sentences, index=rows.index, dtype="str")
    cols = ["category", "call", "frame", "statement", "idle_ns", "pct", "sentence"]
    return rows[cols].reset_index(drop=True)


def gap_causes(gaps: pd.DataFrame, pieces: pd.DataFrame) -> pd.DataFrame:
    """One row per idle gap: ``gaps`` (``idle.gpu_idle_gaps``) + the ns of each category
    (``cuda_sync_ns, cuda_api_ns, os_wait_ns, host_ns``), ``cause`` (the category with the
    most time), ``call`` (the longest call in it, "" for host), ``statement`` (where the
    thread was at the gap's start); longest gap first."""
    cats = ["cuda_sync", "cuda_api", "os_wait", "host"]
    table = pieces.pivot_table(
        index="gap", columns="category", values="duration_ns", aggfunc="sum", fill_value=0
    )
    table = table.reindex(columns=cats, fill_value=0).add_suffix("_ns")
    out = gaps.merge(table, left_on="gap", right_index=True, how="left")
    for c in cats:
        out[f"{c}_ns"] = out[f"{c}_ns"].fillna(0).astype(np.int64)
    out["cause"] = (
        np.array(cats, dtype=object)[np.argmax(out[[f"{c}_ns" for c in cats]].to_numpy(), axis=1)]
        if len(out)
        else []
    )
    calls = pieces[(pieces["category"] != "host").to_numpy()]
    longest = calls.sort_values("duration_ns", ascending=False, kind="stable").drop_duplicates(
        "gap"
    )
    # object first: with no call at all the mapped column is float NaN, and filling a float
    # column with "" is deprecated in pandas 3 (an error in 4)
    out["call"] = out["gap"].map(longest.set_index("gap")["call"]).astype(object).fillna("")
    out["call"] = out["call"].astype(str)
    first = pieces.sort_values("start_ns", kind="stable").drop_duplicates("gap")
    out["statement"] = out["gap"].map(first.set_index("gap")["statement"]).astype(object)
    out["statement"] = out["statement"].fillna("").astype(str)
    out["cause"] = out["cause"].astype(str)
    return out.sort_values(
        ["duration_ns", "start_ns"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)
