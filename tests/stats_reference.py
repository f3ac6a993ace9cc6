"""Compare our summary frames with an `nsys stats --format csv` table of the same report."""

from __future__ import annotations

import numpy as np
import pandas as pd

# Our column -> nsys stats' CSV header, for the duration summaries nsys prints.
EXACT = {"total_ns": "Total Time (ns)", "min_ns": "Min (ns)", "max_ns": "Max (ns)"}
ONE_DECIMAL = {
    "avg_ns": "Avg (ns)",
    "med_ns": "Med (ns)",
    "std_ns": "StdDev (ns)",
    "time_pct": "Time (%)",
}


def assert_duration_summary_equal(ours: pd.DataFrame, ref: pd.DataFrame, count: str) -> None:
    """Integers equal exactly; averages, medians, std devs and percentages equal to the one
    decimal nsys prints. ``count`` is the CSV's name for the instance count."""
    for col, ref_col in {"instances": count, **EXACT}.items():
        np.testing.assert_array_equal(ours[col].to_numpy(), ref[ref_col].to_numpy())
    for col, ref_col in ONE_DECIMAL.items():
        np.testing.assert_array_equal(np.round(ours[col].to_numpy(), 1), ref[ref_col].to_numpy())
