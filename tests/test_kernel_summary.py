"""kernel_summary equals `nsys stats --report cuda_gpu_kern_sum` (CSV captured with the
fixtures): integers exactly, floats to the one decimal nsys prints."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from stats_reference import assert_duration_summary_equal

from nsight_magic.analysis.kernels import KERNEL_SUMMARY_COLUMNS, kernel_summary
from nsight_magic.reports.nsys.report import NsysReport

CASES = [
    ("nsys_small.sqlite", "nsys_small_cuda_gpu_kern_sum.csv"),
    ("nsys_small_pq", "nsys_small_cuda_gpu_kern_sum.csv"),
    ("nsys_gemm.sqlite", "nsys_gemm_cuda_gpu_kern_sum.csv"),
]


@pytest.mark.parametrize(("export", "csv"), CASES)
def test_kernel_summary_equals_nsys_stats(data_dir: Path, export: str, csv: str) -> None:
    ours = NsysReport.open(data_dir / export).kernel_summary()
    ref = pd.read_csv(data_dir / "nsys_stats" / csv)
    assert list(ours.columns) == KERNEL_SUMMARY_COLUMNS
    assert ours["name"].tolist() == ref["Name"].tolist()  # same names, same order
    assert_duration_summary_equal(ours, ref, count="Instances")
    assert (
        ours["short_name"].is_unique
        and (ours["short_name"].str.len() <= ours["name"].str.len()).all()
    )


def test_kernel_summary_by_short_name(nsys_small_sqlite: Path) -> None:
    k = NsysReport.open(nsys_small_sqlite).kernels()
    by_short = kernel_summary(k, by="short_name")
    assert by_short["instances"].sum() == len(k) == 26
    assert by_short["total_ns"].sum() == k["duration_ns"].sum()
    # Five different vectorized_elementwise_kernel instantiations fold into one row.
    row = by_short.set_index("name").loc["vectorized_elementwise_kernel"]
    assert row["instances"] == 12


def test_empty_kernels_give_empty_summary(nsys_small_sqlite: Path) -> None:
    k = NsysReport.open(nsys_small_sqlite).kernels().iloc[:0]
    out = kernel_summary(k)
    assert out.empty and list(out.columns) == KERNEL_SUMMARY_COLUMNS
