"""What changed between two nsys runs: per kernel name, per NVTX range and peak device memory
per GPU, a vs b."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import NVTX_DOMAIN, statement_line, statement_texts
from . import verdict
from .names import short_names

__all__ = [
    "DELTA_COLUMNS",
    "VERDICT_COLUMNS",
    "duration_deltas",
    "kernel_deltas",
    "memory_deltas",
    "nvtx_deltas",
]

DELTA_COLUMNS = ["instances_a", "instances_b", "total_ns_a", "total_ns_b", "delta_ns", "ratio"]
# each row's change within noise (analysis/verdict.py): its 95% interval and the word for it
VERDICT_COLUMNS = ["ratio_lo", "ratio_hi", "interval_from", "change"]


def duration_deltas(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Outer join of two summaries on ``keys``: ``instances_a/b`` and ``total_ns_a/b`` (the
    ``value`` column of each side; 0 where a side lacks the key), ``delta_ns`` = b - a and
    ``ratio`` = b / a (NaN when a is 0: new work has no ratio); largest absolute change first."""
    cols = [*keys, "instances", value]
    merged = a[cols].merge(b[cols], on=keys, how="outer", suffixes=("_a", "_b"))
    for col in ("instances_a", "instances_b", f"{value}_a", f"{value}_b"):
        merged[col] = merged[col].fillna(0).astype("int64")
    merged = merged.rename(columns={f"{value}_a": "total_ns_a", f"{value}_b": "total_ns_b"})
    merged["delta_ns"] = merged["total_ns_b"] - merged["total_ns_a"]
    a_total = merged["total_ns_a"].astype(float)
    merged["ratio"] = merged["total_ns_b"] / a_total.where(a_total > 0, np.nan)
    order = merged["delta_ns"].abs().sort_values(ascending=False, kind="stable").index
    return merged.loc[order].reset_index(drop=True)[[*keys, *DELTA_COLUMNS]]


def kernel_deltas(summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> pd.DataFrame:
    """``name, short_name, instances_a, instances_b, total_ns_a, total_ns_b, delta_ns, ratio``
    from two ``kernel_summary()`` frames, largest absolute change first (``short_name``: see
    ``analysis.names.short_names``, made unique over both runs' names), then
    ``VERDICT_COLUMNS``: the change's 95% interval from the spread of each kernel's launches
    in each run, and ``change`` (faster, slower, same, new, gone, unsure: ``analysis.verdict``)."""
    out = duration_deltas(summary_a, summary_b, ["name"], "total_ns")
    out.insert(1, "short_name", short_names(out["name"]))
    var_a, var_b = (_variance_by(s, out["name"], "name", "std_ns") for s in (summary_a, summary_b))
    return verdict.with_verdicts(out, var_a, var_b, verdict.LAUNCHES)


def _variance_by(frame: pd.DataFrame, keys: pd.Series, key: str, std: str) -> pd.Series:
    """Each key's total's variance (``verdict.total_variance``) in ``frame``, in ``keys``'
    order (NaN where ``frame`` lacks it, or has no spread for it)."""
    if frame.empty or std not in frame.columns:
        return pd.Series(np.nan, index=keys.index)
    var = verdict.total_variance(frame["instances"], frame[std])
    by_key = pd.Series(var.to_numpy(), index=frame[key].to_numpy())
    by_key = by_key[~by_key.index.duplicated()]
    return pd.Series(by_key.reindex(keys.to_numpy()).to_numpy(), index=keys.index)


def nvtx_deltas(
    projection_a: pd.DataFrame,
    projection_b: pd.DataFrame,
    kernels: tuple[pd.DataFrame, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """``domain, range, instances_a, ...`` from two ``nvtx_gpu_projection()`` frames
    (GPU-projected time; instances summed over styles), then ``line_a, line_b, moved`` and
    ``VERDICT_COLUMNS``: the interval from the spread of the range's openings; for a range
    opened once in a run (a cell, a statement) from the spread of that run's kernel launches
    (``kernels``: its two ``kernel_summary()`` frames), the range taken to hold its share of
    it (its GPU time over the run's kernel time).

    The cell's statement ranges (``L<line>: <source>``, domain nsight_magic) are matched by
    their text, not their line: the same loop one line lower is the same statement (the k-th
    statement of one text in a run matches the k-th of the other). ``line_a``/``line_b`` are
    its cell line in each run (<NA> for other ranges and on the side that lacks it), ``moved``
    says the line changed; ``range`` is run b's label (a's for a statement b lacks)."""
    a, b = (_keyed(p) for p in (projection_a, projection_b))
    out = duration_deltas(a, b, ["domain", "key"], "proj_total_ns")
    sides = {side: f.set_index(["domain", "key"]) for side, f in (("a", a), ("b", b))}
    at = pd.MultiIndex.from_frame(out[["domain", "key"]])
    ranges = {side: f["range"].reindex(at).to_numpy() for side, f in sides.items()}
    out.insert(1, "range", pd.Series(ranges["b"]).fillna(pd.Series(ranges["a"])).to_numpy())
    for side, frame in sides.items():
        out[f"line_{side}"] = pd.array(frame["line"].reindex(at), dtype="Int64")
    out["moved"] = (out["line_a"] != out["line_b"]).fillna(False).astype(bool)
    var = {side: pd.Series(f["var"].reindex(at).to_numpy(), index=out.index)
           for side, f in sides.items()}  # fmt: skip
    own = var["a"].notna() & var["b"].notna()
    if kernels is not None:  # one opening: its share of the run's launch spread
        for side, summary in zip("ab", kernels, strict=True):
            total, spread = verdict.run_total(summary)
            share = out[f"total_ns_{side}"].astype(float) / total if total > 0 else np.nan
            var[side] = var[side].where(own, spread * share)
    out = verdict.with_verdicts(out, var["a"], var["b"], verdict.OPENINGS)
    if kernels is not None:
        shared = ~own & out["ratio_lo"].notna()
        out.loc[shared, "interval_from"] = verdict.RUN_SHARE
    return out.drop(columns="key")


def _keyed(projection: pd.DataFrame) -> pd.DataFrame:
    """Per ``domain, range``: ``instances, proj_total_ns``, the statement's ``line`` (<NA> for
    other ranges) and the ``key`` a match uses: a statement's text and its number among the
    statements of that text, in line order; any other range's own name."""
    keys = ["domain", "range"]
    std = projection.get("proj_std_ns", np.nan)
    # each style's openings' variance (NaN below two openings), summed over styles
    var = verdict.total_variance(projection["instances"], pd.Series(std, index=projection.index))
    summed = (projection.assign(var=var)
              .groupby(keys, as_index=False, sort=False)
              .agg(instances=("instances", "sum"), proj_total_ns=("proj_total_ns", "sum"),
                   var=("var", lambda v: v.sum(min_count=len(v)))))  # fmt: skip
    statement = summed["domain"].eq(NVTX_DOMAIN)
    lines = summed["range"].map(statement_line).where(statement)
    summed["line"] = pd.array(lines, dtype="Int64")
    text = statement_texts(summed["range"])
    in_order = summed[statement].assign(text=text).sort_values("line", kind="stable")
    nth = in_order.groupby("text", sort=False).cumcount()
    summed["key"] = summed["range"]
    # a newline joins them (no statement label holds one); not NUL: pandas 3's Arrow-backed
    # strings matched two keys cut at it as one
    summed.loc[nth.index, "key"] = text[nth.index] + "\n#" + nth.astype(str)
    return summed


MEMORY_DELTA_COLUMNS = ["device_id", "a_peak_bytes", "b_peak_bytes", "peak_change_bytes", "ratio",
                        "statement_a", "statement_b"]  # fmt: skip


def memory_deltas(summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> pd.DataFrame:
    """Peak device memory per GPU, a vs b, from two ``gpu_memory.memory_summary`` frames: the
    largest process peak on each device (the profiled process; pids differ between runs):
    ``device_id, a_peak_bytes, b_peak_bytes, peak_change_bytes`` (b - a), ``ratio`` (b / a, NaN
    where a has none), ``statement_a, statement_b`` (open at each peak). Devices only one run
    has get 0 bytes on the other side; empty when neither has memory events."""

    def top(summary: pd.DataFrame) -> pd.DataFrame:
        best = summary.sort_values("peak_bytes", ascending=False).drop_duplicates("device_id")
        return best.set_index("device_id")[["peak_bytes", "statement"]]

    a, b = top(summary_a), top(summary_b)
    out = a.rename(columns=lambda c: f"{c}_a").join(
        b.rename(columns=lambda c: f"{c}_b"), how="outer"
    )
    out = out.reset_index()
    if out.empty:
        return pd.DataFrame({c: pd.Series(dtype="str" if c.startswith("statement") else
                                          "float64" if c == "ratio" else "int64")
                             for c in MEMORY_DELTA_COLUMNS})  # fmt: skip
    peak_a = out["peak_bytes_a"].fillna(0).astype("int64")
    peak_b = out["peak_bytes_b"].fillna(0).astype("int64")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(peak_a > 0, peak_b / peak_a.clip(lower=1), np.nan)
    return pd.DataFrame(
        {
            "device_id": out["device_id"].astype("int64"),
            "a_peak_bytes": peak_a,
            "b_peak_bytes": peak_b,
            "peak_change_bytes": peak_b - peak_a,
            "ratio": ratio.astype("float64"),
            "statement_a": out["statement_a"].fillna("").astype(str),
            "statement_b": out["statement_b"].fillna("").astype(str),
        }
    )
