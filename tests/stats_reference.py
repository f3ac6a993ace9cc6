"""Compare our summary frames with an `nsys stats --format csv` table of the same report."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

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
# nvtx_gpu_proj_sum: our column -> its CSV header.
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


def nsys_round(values: np.ndarray, decimals: int = 1) -> np.ndarray:
    """Round as nsys's reports print (SQLite's ROUND): the exact binary value, halves away from
    zero. So 1151.25 (exact) prints as 1151.3 where numpy gives 1151.2, and 1001.65 (stored as
    1001.6499...) as 1001.6 where ``floor(x * 10 + 0.5)`` gives 1001.7."""
    step = Decimal(1).scaleb(-decimals)
    return np.array(
        [float(Decimal(float(v)).quantize(step, ROUND_HALF_UP)) for v in np.asarray(values)]
    )


def assert_one_decimal_equal(
    ours: pd.DataFrame, ref: pd.DataFrame, columns: dict[str, str], skip: set[str] | None = None
) -> None:
    for col, ref_col in columns.items():
        if skip and col in skip:
            continue
        np.testing.assert_array_equal(
            nsys_round(ours[col].to_numpy()), ref[ref_col].to_numpy(), err_msg=col
        )


def assert_duration_summary_equal(ours: pd.DataFrame, ref: pd.DataFrame, count: str) -> None:
    """Integers equal exactly; averages, medians, std devs and percentages equal to the one
    decimal nsys prints. ``count`` is the CSV's name for the instance count."""
    for col, ref_col in {"instances": count, **EXACT}.items():
        np.testing.assert_array_equal(ours[col].to_numpy(), ref[ref_col].to_numpy(), err_msg=col)
    assert_one_decimal_equal(ours, ref, ONE_DECIMAL)


def assert_projection_equal(
    ours: pd.DataFrame, ref: pd.DataFrame, skip: set[str] | None = None
) -> None:
    """``nvtx_gpu_projection()`` against ``nvtx_gpu_proj_sum``: same rows in the same order
    (nsys's Range column is "domain:range"), integers exactly, the rest to one decimal
    (``skip``: columns left out, for a known deviation the caller checks itself)."""
    assert (ours["domain"] + ":" + ours["range"]).tolist() == ref["Range"].tolist()
    assert ours["style"].tolist() == ref["Style"].tolist()
    for col, ref_col in PROJECTION_EXACT.items():
        np.testing.assert_array_equal(ours[col].to_numpy(), ref[ref_col].to_numpy(), err_msg=col)
    assert_one_decimal_equal(ours, ref, PROJECTION_ONE_DECIMAL, skip)
