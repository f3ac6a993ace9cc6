"""Is run b faster than run a, or is the difference noise? (pure functions)

Each row of a comparison (a kernel, an NVTX range) has a total GPU time in each run, the sum of
its launches (or of its range's openings). The change is the ratio of the totals, b / a, and
its 95% interval comes from how much those launches varied: a total of n launches whose
standard deviation is s has a variance of n * s^2 (launches taken as independent), so the log
of the ratio has a standard error of sqrt(var_a / T_a^2 + var_b / T_b^2) (the delta method) and
the interval is ratio * exp(+-1.96 se). Nothing else is assumed: a row with fewer than two
launches (or openings) in a run has no spread to read, so it gets no interval, and its change
says ``unsure`` rather than guessing.

``change``: ``faster`` (the whole interval below 1: b took less GPU time), ``slower`` (above
1), ``same`` (1 inside: within noise), ``new`` (none in a), ``gone`` (none in b), ``unsure``
(no interval). ``interval_from`` says what the spread was read from.

A change beyond noise but too small to matter is ``same`` too: under ``SAME_WITHIN`` (1%) of
the row's own time, or a delta under ``NEGLIGIBLE_SHARE`` (0.1%) of the run's kernel time.
Noise read inside one capture (a kernel's launches, the repeats of ``--repeat``) is tighter
than what differs between two captures of the same cell: the same Qwen2 prefill captured
twice with ``--repeat 10`` on an H100 (2026-12-07, tests/gpu/repeats.py) had totals equal to
0.1% but 5 of its 35 kernels "beyond noise", each by 0.4-3% or by under 130 ns of a 4.3 ms
repeat; with these two floors all 35 are ``same``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "CHANGES",
    "Z95",
    "Verdict",
    "change_of",
    "ratio_interval",
    "run_total",
    "summary_line",
    "total_variance",
    "with_verdicts",
]

Z95 = 1.959963984540054  # the standard normal's 97.5% point: a two-sided 95% interval
CHANGES = ("faster", "slower", "same", "new", "gone", "unsure")
SAME_WITHIN = 0.01  # a ratio within 1% of 1 is the same, whatever the noise
NEGLIGIBLE_SHARE = 0.001  # a delta under 0.1% of the run's kernel time is the same
LAUNCHES = "launches"  # interval_from: the spread of a kernel's launches in each run
OPENINGS = "openings"  # ... of an NVTX range's openings in each run
REPEATS = "repeats"  # ... of its total over the --repeat runs of the cell in each run
NONE = "none: fewer than 2 in a run"
RUN_SHARE = "the run's launches (its share)"  # a range opened once: see compare.nvtx_deltas


def ratio_interval(
    total_a: float, var_a: float, total_b: float, var_b: float
) -> tuple[float, float, float]:
    """``(ratio, lo, hi)`` of ``total_b / total_a`` with its 95% interval (NaN where a total
    is not > 0 or a variance is unknown)."""
    if not (total_a > 0 and total_b > 0) or not (var_a >= 0 and var_b >= 0):
        ratio = total_b / total_a if total_a > 0 else math.nan
        return ratio, math.nan, math.nan
    ratio = total_b / total_a
    se = math.sqrt(var_a / total_a**2 + var_b / total_b**2)
    return ratio, ratio * math.exp(-Z95 * se), ratio * math.exp(Z95 * se)


def change_of(instances_a: int, instances_b: int, lo: float, hi: float, ratio: float = math.nan,
              negligible: bool = False) -> str:  # fmt: skip
    """One of ``CHANGES`` for a row (see the module); ``ratio`` the change itself, ``negligible``
    its delta is under ``NEGLIGIBLE_SHARE`` of the run's kernel time."""
    if instances_a == 0:
        return "new"
    if instances_b == 0:
        return "gone"
    if math.isnan(lo) or math.isnan(hi):
        return "unsure"
    if negligible or abs(ratio - 1.0) < SAME_WITHIN:
        return "same"
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return "same"


def total_variance(instances: pd.Series, std: pd.Series) -> pd.Series:
    """Variance of a total of ``instances`` launches of standard deviation ``std``; NaN for
    fewer than two (one launch has no spread to read)."""
    n = instances.astype(float)
    return (n * std.astype(float).fillna(0.0) ** 2).where(n >= 2)


def with_verdicts(deltas: pd.DataFrame, var_a: pd.Series, var_b: pd.Series, source: str
                  ) -> pd.DataFrame:  # fmt: skip
    """``deltas`` (``analysis.compare`` frame: ``instances_a/b``, ``total_ns_a/b``, ``ratio``)
    with ``ratio_lo``, ``ratio_hi``, ``interval_from`` and ``change``, given each row's total's
    variance in a and in b (``total_variance``; NaN: no spread known), aligned with its rows."""
    rows = [
        ratio_interval(float(ta), float(va), float(tb), float(vb))
        for ta, va, tb, vb in zip(
            deltas["total_ns_a"], var_a, deltas["total_ns_b"], var_b, strict=True
        )
    ]
    lo = pd.Series([r[1] for r in rows], index=deltas.index, dtype="float64")
    hi = pd.Series([r[2] for r in rows], index=deltas.index, dtype="float64")
    out = deltas.assign(ratio_lo=lo, ratio_hi=hi)
    out["interval_from"] = np.where(lo.notna(), source, NONE)
    run = max(float(deltas["total_ns_a"].sum()), float(deltas["total_ns_b"].sum()))
    small = deltas["delta_ns"].abs().astype(float) < NEGLIGIBLE_SHARE * run
    out["change"] = [
        change_of(int(a), int(b), float(low), float(high), float(r), bool(n))
        for a, b, low, high, r, n in zip(
            out["instances_a"], out["instances_b"], lo, hi, out["ratio"], small, strict=True
        )
    ]
    return out


def run_total(summary: pd.DataFrame) -> tuple[float, float]:
    """A run's total kernel time and its variance (the sum over kernels of n * s^2; kernels
    with one launch add none). A summary made per repeat (``attrs["repeat_totals_ns"]``: the
    kernel time of each of two or more repeats) gives the mean per repeat and the variance of
    that mean, s^2 / n, from the repeats themselves."""
    totals = summary.attrs.get("repeat_totals_ns")
    if totals is not None and len(totals) >= 2:
        values = np.asarray(totals, dtype=np.float64)
        return float(values.mean()), float(values.var(ddof=1) / len(values))
    if summary.empty:
        return 0.0, 0.0
    var = total_variance(summary["instances"], summary["std_ns"]).fillna(0.0)
    return float(summary["total_ns"].sum()), float(var.sum())


@dataclass(frozen=True)
class Verdict:
    """The comparison in one line: the total kernel time's ratio b / a with its interval, and
    how many kernels changed beyond noise each way."""

    ratio: float
    lo: float
    hi: float
    change: str
    slower: int
    faster: int
    new: int
    gone: int
    # (repeats of a, of b) when either run was taken with --repeat: the ratio is per repeat
    per_repeat: tuple[int, int] | None = None

    def line(self, label_b: str = "b") -> str:
        """``b: GPU time 0.76x (0.74-0.78), 3 kernels slower beyond noise`` ("GPU time per
        repeat ... (10 and 10 repeats)" for repeated runs)."""
        what = "GPU time per repeat" if self.per_repeat else "GPU time"
        if math.isnan(self.ratio):
            head = f"{label_b}: {what} has no ratio (a run without kernels)"
        elif math.isnan(self.lo):
            head = f"{label_b}: {what} {self.ratio:.2f}x (no interval: too few launches)"
        else:
            head = f"{label_b}: {what} {self.ratio:.2f}x ({self.lo:.2f}-{self.hi:.2f})"
        if self.per_repeat:
            head += f" ({self.per_repeat[0]} and {self.per_repeat[1]} repeats)"
        parts = [f"{n} kernel{'s' if n != 1 else ''} {what}" for n, what in (
            (self.slower, "slower beyond noise"), (self.faster, "faster beyond noise"),
            (self.new, "new"), (self.gone, "gone")) if n]  # fmt: skip
        return head + (", " + ", ".join(parts) if parts else ", no kernel changed beyond noise")


def summary_line(kernels: pd.DataFrame, summary_a: pd.DataFrame, summary_b: pd.DataFrame
                 ) -> Verdict:  # fmt: skip
    """The ``Verdict`` of two runs from their kernel summaries and the kernels' verdicts."""
    total_a, var_a = run_total(summary_a)
    total_b, var_b = run_total(summary_b)
    ratio, lo, hi = ratio_interval(total_a, var_a, total_b, var_b)
    counts = kernels["change"].value_counts() if "change" in kernels else pd.Series(dtype=int)
    slower, faster, new, gone = (int(counts.get(c, 0)) for c in ("slower", "faster", "new", "gone"))
    return Verdict(
        ratio,
        lo,
        hi,
        change_of(int(total_a > 0), int(total_b > 0), lo, hi, ratio),
        slower=slower,
        faster=faster,
        new=new,
        gone=gone,
        per_repeat=kernels.attrs.get("per_repeat"),
    )
