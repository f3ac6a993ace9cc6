"""What changed between two nsys runs: per kernel name, per NVTX range and peak device memory
per GPU, a vs b."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import NVTX_DOMAIN, statement_label, statement_line, statement_texts
from . import verdict
from .names import short_names

__all__ = [
    "DELTA_COLUMNS",
    "VERDICT_COLUMNS",
    "duration_deltas",
    "kernel_deltas",
    "memory_deltas",
    "nvtx_deltas",
    "nvtx_row_names",
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


def repeats_of(frame: pd.DataFrame) -> int:
    """How many ``--repeat`` runs of the cell a summary or projection holds (1 when it was not
    repeated: ``analysis.repeats`` sets ``attrs["repeats"]``)."""
    return max(1, int(frame.attrs.get("repeats", 1) or 1))


def per_repeat(frame: pd.DataFrame, total: str, std: str) -> tuple[pd.DataFrame, pd.Series]:
    """``frame`` with ``total`` made a total per repeat (rounded ns) and each row's variance of
    it: from its repeats (``repeat_std_ns``^2 / n) where the frame has them, else from its
    launches or openings (n * s^2 / repeats^2); unchanged totals for a frame of one repeat."""
    n = repeats_of(frame)
    if "repeat_std_ns" in frame.columns and n >= 2:
        var = frame["repeat_std_ns"].astype(float) ** 2 / n
    else:
        spread = frame[std] if std in frame.columns else pd.Series(np.nan, index=frame.index)
        var = verdict.total_variance(frame["instances"], spread) / n**2
    if n == 1:
        return frame, var
    scaled = frame.assign(**{total: (frame[total].astype(float) / n).round().astype("int64")})
    scaled.attrs = dict(frame.attrs)
    return scaled, var


def _interval_source(a: pd.DataFrame, b: pd.DataFrame, otherwise: str) -> str:
    both = all("repeat_std_ns" in f.columns and repeats_of(f) >= 2 for f in (a, b))
    return verdict.REPEATS if both else otherwise


def kernel_deltas(summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> pd.DataFrame:
    """``name, short_name, instances_a, instances_b, total_ns_a, total_ns_b, delta_ns, ratio``
    from two ``kernel_summary()`` frames, largest absolute change first (``short_name``: see
    ``analysis.names.short_names``, made unique over both runs' names), then
    ``VERDICT_COLUMNS``: the change's 95% interval and ``change`` (faster, slower, same, new,
    gone, unsure: ``analysis.verdict``). The interval comes from the spread of each kernel's
    total over the repeats when both runs were taken with ``--repeat`` (``interval_from``
    "repeats"), else from the spread of its launches in each run. When either run was
    repeated, totals and deltas are per repeat (``attrs["per_repeat"]``: the two counts), so
    a run of 10 repeats compares with a run of one."""
    per = repeats_of(summary_a) > 1 or repeats_of(summary_b) > 1
    (a, var_a), (b, var_b) = (per_repeat(s, "total_ns", "std_ns") for s in (summary_a, summary_b))
    out = duration_deltas(a, b, ["name"], "total_ns")
    out.insert(1, "short_name", short_names(out["name"]))
    var_a, var_b = (_aligned(f, var, out["name"], "name")
                    for f, var in ((a, var_a), (b, var_b)))  # fmt: skip
    out = verdict.with_verdicts(out, var_a, var_b, _interval_source(a, b, verdict.LAUNCHES))
    if per:
        out.attrs["per_repeat"] = (repeats_of(summary_a), repeats_of(summary_b))
    return out


def _aligned(frame: pd.DataFrame, var: pd.Series, keys: pd.Series, key: str) -> pd.Series:
    """``var`` (a row of ``frame`` each) in ``keys``' order; NaN where ``frame`` lacks it."""
    if frame.empty:
        return pd.Series(np.nan, index=keys.index)
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
    says the line changed; ``range`` is run b's label (a's for a statement b lacks). Runs taken
    with ``--repeat`` compare per repeat, with the interval from the repeats when both were
    (as ``kernel_deltas``)."""
    per = repeats_of(projection_a) > 1 or repeats_of(projection_b) > 1
    scaled = [per_repeat(p, "proj_total_ns", "proj_std_ns") for p in (projection_a, projection_b)]
    a, b = (_keyed(p, var) for p, var in scaled)
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
    source = _interval_source(scaled[0][0], scaled[1][0], verdict.OPENINGS)
    out = verdict.with_verdicts(out, var["a"], var["b"], source)
    if kernels is not None:
        shared = ~own & out["ratio_lo"].notna()
        out.loc[shared, "interval_from"] = verdict.RUN_SHARE
    out = out.drop(columns="key")
    if per:
        out.attrs["per_repeat"] = (repeats_of(projection_a), repeats_of(projection_b))
    return out


def nvtx_row_names(nvtx: pd.DataFrame) -> list[set[str]]:
    """Every name each row of ``nvtx_deltas`` goes by, bare and as ``domain:range``: its
    ``range`` (run b's label) and, for a statement, its label in each run's own table (one
    that moved is ``L1: ...`` in a and ``L2: ...`` in b: a name ``summary`` shows for either
    run), plus the comparison's own ``label`` column where there is one."""
    texts = statement_texts(nvtx["range"].astype(str))
    out = []
    for i, (domain, name) in enumerate(zip(nvtx["domain"], nvtx["range"], strict=True)):
        own = {str(name)}
        for side in ("line_a", "line_b"):
            line = nvtx[side].iloc[i] if side in nvtx.columns else pd.NA
            if not pd.isna(line):
                own.add(statement_label(int(line), texts.iloc[i]))
        names = own | {f"{domain}:{n}" for n in own}
        if "label" in nvtx.columns:
            names.add(str(nvtx["label"].iloc[i]))
        out.append(names)
    return out


def _keyed(projection: pd.DataFrame, var: pd.Series) -> pd.DataFrame:
    """Per ``domain, range``: ``instances, proj_total_ns``, the statement's ``line`` (<NA> for
    other ranges) and the ``key`` a match uses: a statement's text and its number among the
    statements of that text, in line order; any other range's own name. ``var``: each row's
    variance of its total (``per_repeat``: NaN where no spread is known), summed over styles."""
    keys = ["domain", "range"]
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
