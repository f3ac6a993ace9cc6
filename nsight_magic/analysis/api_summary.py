"""Per-function statistics of host calls, the same as ``nsys stats --report cuda_api_sum``
(CUDA runtime and driver calls) and ``--report osrt_sum`` (OS runtime calls)."""

from __future__ import annotations

import pandas as pd

from .kernels import duration_stats

__all__ = ["API_SUMMARY_COLUMNS", "api_summary"]

API_SUMMARY_COLUMNS = [
    "name",
    "calls",
    "total_ns",
    "avg_ns",
    "med_ns",
    "min_ns",
    "max_ns",
    "std_ns",
    "time_pct",
]


def api_summary(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per function name of ``calls`` (``name, duration_ns``: ``NsysReport.cuda_api()``
    or ``osrt()``): ``name, calls, total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns, time_pct``,
    by total time descending, with nsys's conventions (``kernels.duration_stats``). Floats are
    unrounded; nsys prints one decimal."""
    stats = duration_stats(calls[["name", "duration_ns"]], ["name"])
    return stats.rename(columns={"instances": "calls"})[API_SUMMARY_COLUMNS]
