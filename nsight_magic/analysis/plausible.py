"""No impossible utilisation: an HFU or MFU above 100% of the peak (or below 0) is blanked, and
the row says why and what to do.

Such a number is never a measurement: FLOPs over a time that cannot hold them at the GPU's peak
mean the FLOPs and the time describe different work. The classic case is a training step's
``train@bwd`` range: autograd launches the backward kernels from another thread, so nsys's
per-thread projection gives the range 1 us of its 6 ms, and the backward's FLOPs over that
read as 112,989% (issue 34). Every frame that carries ``hfu_frac`` or ``mfu_frac`` passes
through :func:`blank_impossible` before anyone sees it, so no table, chart or view built from
it shows one; the ``reason`` column says why a number is blank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["FRACTIONS", "blank_impossible", "impossible_reason"]

# fraction column -> the rate column computed with it (blanked with it)
FRACTIONS = {"hfu_frac": "hw_flops_per_s", "mfu_frac": "model_flops_per_s"}
_WHAT = {"hfu_frac": "the hardware FLOPs ncu counted", "mfu_frac": "the model FLOPs"}


def impossible_reason(column: str, label: str, frac: float, model_source: str = "") -> str:
    """One sentence: why ``frac`` of ``column`` for ``label`` cannot be, and what to do."""
    if not frac >= 0:  # negative (NaN never gets here)
        return (
            f"{column} of {label} is negative: a negative time or FLOP count means a damaged "
            "report or a wrong flops= value; check both"
        )
    what = _WHAT.get(column, "the FLOPs")
    if column == "mfu_frac" and model_source.startswith("given"):
        what = "the FLOPs given"
    elif column == "mfu_frac" and model_source.startswith("derived"):
        what = "the FLOPs of the GEMM ops"
    head = f"{what} for {label} need {frac:.1f}x the time measured at the peak"
    if column == "hfu_frac":
        return (
            f"{head}: the time is not the profiled launches' own, or the peak is wrong "
            "(pass peak_flops= for this GPU and data type)"
        )
    return (
        f"{head}: the FLOP scope is wrong (FLOPs of more work than the range ran), or the "
        "range's time misses work launched from another thread (use its phase time)"
    )


def blank_impossible(frame: pd.DataFrame, label: pd.Series | str) -> pd.DataFrame:
    """``frame`` with every ``hfu_frac``/``mfu_frac`` above 1 or below 0 set to NaN (and the
    rate computed with it: ``hw_flops_per_s``/``model_flops_per_s``), and a ``reason`` column
    ("" where every number stands) saying why. ``label`` names each row in the sentence: a
    column of ``frame`` or a Series on its index. Returns a copy; other rows are untouched."""
    out = frame.copy()
    names = out[label] if isinstance(label, str) else label
    names = names.astype(str).to_numpy()
    sources = (
        out["model_flops_source"].astype(str).to_numpy()
        if "model_flops_source" in out
        else np.full(len(out), "", dtype=object)
    )
    reasons = np.full(len(out), "", dtype=object)
    for col, rate in FRACTIONS.items():
        if col not in out:
            continue
        values = pd.to_numeric(out[col], errors="coerce").to_numpy(np.float64)
        bad = np.flatnonzero((values > 1.0) | (values < 0.0))
        for i in bad:
            sentence = impossible_reason(col, names[i], float(values[i]), str(sources[i]))
            reasons[i] = sentence if not reasons[i] else f"{reasons[i]}; {sentence}"
        if len(bad):
            out.iloc[bad, out.columns.get_loc(col)] = np.nan
            if rate in out:
                out.iloc[bad, out.columns.get_loc(rate)] = np.nan
    out["reason"] = pd.Series(reasons, index=out.index, dtype=str)
    return out
