"""Rows whose times cannot be right: an end before its start, or a GPU op lasting longer than
any capture could. A damaged or hand-edited export gives them; every total built on them is
wrong, so the report says so (``NsysReport.warnings``, shown in the view's header)."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["ABSURD_NS", "duration_warnings"]

ABSURD_NS = 86_400 * 10**9  # one GPU op of over a day: no capture holds that


def duration_warnings(
    kernels: pd.DataFrame, memcpy: pd.DataFrame, memset: pd.DataFrame
) -> list[str]:
    """One line per frame with negative or absurd ``duration_ns`` rows (none when clean)."""
    out = []
    for what, frame in (("kernel", kernels), ("memcpy", memcpy), ("memset", memset)):
        if frame.empty or "duration_ns" not in frame:
            continue
        dur = frame["duration_ns"].to_numpy(dtype=np.int64)
        negative, absurd = int((dur < 0).sum()), int((dur > ABSURD_NS).sum())
        if negative:
            out.append(
                f"{negative:,} of {len(dur):,} {what} rows end before they start (negative "
                "durations): the export is damaged, so totals, averages and busy % that include "
                "them are wrong; export the .nsys-rep again."
            )
        if absurd:
            out.append(
                f"{absurd:,} of {len(dur):,} {what} rows last over a day (up to "
                f"{int(dur.max()) / 1e9:,.0f} s): the export is damaged, so totals that include "
                "them are wrong; export the .nsys-rep again."
            )
    return out
