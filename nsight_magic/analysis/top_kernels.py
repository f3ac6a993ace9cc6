"""Top-N (``NsysRun.profile_top``): which kernels matter (the N with the most total time in the
nsys run), and, once ncu profiled the first launch of each, every profiled kernel's share of the
nsys kernel time beside its HFU: where the time goes and how well each of those kernels uses
the GPU, in one table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import BadArgumentError
from .names import short_names

TOP_KERNEL_COLUMNS = [
    "launch", "name", "short_name", "nsys_rank", "nsys_instances", "nsys_total_ns",
    "nsys_time_pct", "hfu_frac", "hw_flops_per_s", "peak_flops_per_s", "time_ns",
    "time_source", "reason",
]  # fmt: skip


def top_kernel_names(summary: pd.DataFrame, n: int) -> list[str]:
    """The full names of the ``n`` kernels with the most total time in an nsys
    ``kernel_summary`` (``name, total_ns``), most first (ties: the summary's order)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadArgumentError(
            f"n is {n!r}; pass how many kernels to profile (a whole number >= 1)."
        )
    return [str(name) for name in _ranked(summary)["name"].head(n)]


def _ranked(summary: pd.DataFrame) -> pd.DataFrame:
    """A ``kernel_summary``, most total time first (ties: its order), indexed 0.. by rank."""
    return summary.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _nsys_row_of(ranked: pd.DataFrame) -> dict[str, int]:
    """Kernel name -> its row in ``ranked`` (``_ranked``), by the full (demangled) name and,
    where unambiguous, by its short name (ncu's function name)."""
    by_name = {str(name): i for i, name in enumerate(ranked["name"])}
    shorts = ranked["short_name"]
    counts = shorts.value_counts()
    by_short = {str(s): i for i, s in enumerate(shorts) if counts[s] == 1}
    return {**by_short, **by_name}


# the row of a kernel the top-N run asked for that ncu profiled no launch of
NOT_PROFILED = (
    "not profiled: ncu profiled no launch of it in the re-run of the cell, neither in the top-N "
    "pass nor in the passes that follow it (meta merged_runs); its folder's "
    "profiler.log says what ncu did"
)


def kernel_shares(
    launches: pd.DataFrame,
    hfu: pd.DataFrame | None,
    summary: pd.DataFrame | None,
    asked: Sequence[str] = (),
) -> pd.DataFrame:
    """One row per ncu launch: ``launch, name, short_name``; its kernel's place in the nsys run
    (``summary``: the parent's ``kernel_summary``; NA without one): ``nsys_rank`` (1 = the most
    total time), ``nsys_instances, nsys_total_ns, nsys_time_pct`` (share of all nsys kernel
    time, percent); and its ``hfu_frac, hw_flops_per_s, peak_flops_per_s, time_ns, time_source,
    reason`` from ``hfu`` (``analysis.mfu.kernel_utilisation``; NaN where the report lacks FLOP
    counts). ``launches``: ncu ``kernels()`` (``launch, name, demangled``). ``asked``: the nsys
    names the top-N run asked ncu for; one of them no launch covers gets a row of its own, its
    ``launch`` NA and its ``reason`` saying so (the LM head's GEMM of a prefill was one, H100,
    benchmarks P16), so that a top-N table never drops a kernel silently."""
    out = _launch_rows(launches, asked)
    out["short_name"] = short_names(out["name"]).to_numpy()
    rank = pd.array([pd.NA] * len(out), dtype="Int64")
    instances = pd.array([pd.NA] * len(out), dtype="Int64")
    total = pd.array([pd.NA] * len(out), dtype="Int64")
    pct = np.full(len(out), np.nan)
    if summary is not None and len(summary):
        ranked = _ranked(summary)
        row_of = _nsys_row_of(ranked)
        for i, (name, full) in enumerate(zip(out["name"], out["demangled"], strict=True)):
            row = row_of.get(str(full), row_of.get(str(name)))
            if row is None:
                continue
            rank[i] = row + 1
            instances[i] = int(ranked.at[row, "instances"])
            total[i] = int(ranked.at[row, "total_ns"])
            pct[i] = float(ranked.at[row, "time_pct"])  # the summary's own share
    out["nsys_rank"] = rank
    out["nsys_instances"] = instances
    out["nsys_total_ns"] = total
    out["nsys_time_pct"] = pct
    taken = ["hfu_frac", "hw_flops_per_s", "peak_flops_per_s", "time_ns", "time_source", "reason"]
    if hfu is not None and len(hfu):
        per_launch = hfu.set_index("launch")
        for column in taken:
            if column in per_launch:
                out[column] = [per_launch[column].get(x) for x in out["launch"]]
            else:
                out[column] = None
    else:
        for column in taken:
            out[column] = None
    for column in ("hfu_frac", "hw_flops_per_s", "peak_flops_per_s", "time_ns"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    for column in ("time_source", "reason"):
        out[column] = out[column].fillna("").astype(object)
    out.loc[out["launch"].isna(), "reason"] = NOT_PROFILED
    return out[TOP_KERNEL_COLUMNS].sort_values(["nsys_rank", "launch"], na_position="last",
                                                kind="stable").reset_index(drop=True)  # fmt: skip


def _launch_rows(launches: pd.DataFrame, asked: Sequence[str]) -> pd.DataFrame:
    """``launch, name, demangled`` of each launch (``demangled`` is ``name`` where the report
    has none), then a row (launch NA) for each name of ``asked`` that no launch's demangled or
    short name is."""
    full = launches["demangled"] if "demangled" in launches else launches["name"]
    out = pd.DataFrame(
        {"launch": launches["launch"].to_numpy(), "name": launches["name"].to_numpy(),
         "demangled": full.to_numpy()}
    )  # fmt: skip
    seen = {str(x) for x in full} | {str(x) for x in launches["name"]}
    missing = [name for name in asked if name not in seen]
    if not missing:
        return out
    extra = pd.DataFrame({"launch": pd.array([pd.NA] * len(missing), dtype="Int64"),
                          "name": missing, "demangled": missing})  # fmt: skip
    return pd.concat([out.astype({"launch": "Int64"}), extra], ignore_index=True)


__all__ = ["NOT_PROFILED", "TOP_KERNEL_COLUMNS", "kernel_shares", "top_kernel_names"]
