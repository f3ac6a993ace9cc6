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


# Our nvtx_gpu_projection column -> nsys stats' nvtx_gpu_proj_sum CSV header.
PROJECTION_EXACT = {
    "proj_total_ns": "Total Proj Time (ns)",
    "range_total_ns": "Total Range Time (ns)",
    "instances": "Range Instances",
    "proj_min_ns": "Proj Min (ns)",
    "proj_max_ns": "Proj Max (ns)",
    "gpu_ops": "Total GPU Ops",
}
PROJECTION_ONE_DECIMAL = {
    "proj_avg_ns": "Proj Avg (ns)",
    "proj_med_ns": "Proj Med (ns)",
    "proj_std_ns": "Proj StdDev (ns)",
    "avg_gpu_ops": "Avg GPU Ops",
    "avg_level": "Avg Range Lvl",
    "avg_children": "Avg Num Child",
}


def assert_projection_summary_equal(ours: pd.DataFrame, ref: pd.DataFrame) -> None:
    """Same rows in the same order as nsys's nvtx_gpu_proj_sum (its Range is "domain:range"),
    integers exact, the rest to the one decimal nsys prints."""
    assert (ours["domain"] + ":" + ours["range"]).tolist() == ref["Range"].tolist()
    assert ours["style"].tolist() == ref["Style"].tolist()
    for col, ref_col in PROJECTION_EXACT.items():
        np.testing.assert_array_equal(ours[col].to_numpy(), ref[ref_col].to_numpy())
    for col, ref_col in PROJECTION_ONE_DECIMAL.items():
        np.testing.assert_array_equal(np.round(ours[col].to_numpy(), 1), ref[ref_col].to_numpy())
