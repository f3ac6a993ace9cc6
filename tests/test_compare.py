"""compare() on the two real nsys exports: deltas checked against NVIDIA's own kernel sums."""

from __future__ import annotations

import pandas as pd
import pytest

from nsight_magic.analysis.compare import kernel_deltas
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results.comparison import Comparison, compare


@pytest.fixture(scope="module")
def reports(data_dir):
    return (
        NsysReport.open(data_dir / "nsys_small.sqlite"),
        NsysReport.open(data_dir / "nsys_gemm.sqlite"),
    )


def _stats(data_dir, name: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{name}_cuda_gpu_kern_sum.csv")


def test_compare_reports_against_nsys_stats(reports, data_dir):
    cmp = compare(*reports)
    assert isinstance(cmp, Comparison)
    a, b = _stats(data_dir, "nsys_small"), _stats(data_dir, "nsys_gemm")
    k = cmp.kernels.set_index("name")
    assert set(k.index) == set(a["Name"]) | set(b["Name"])
    assert k["total_ns_a"].sum() == a["Total Time (ns)"].sum()
    assert k["total_ns_b"].sum() == b["Total Time (ns)"].sum()
    assert (k["delta_ns"] == k["total_ns_b"] - k["total_ns_a"]).all()
    # Largest absolute change first; kernels only in b have no ratio.
    assert cmp.kernels["delta_ns"].abs().is_monotonic_decreasing
    only_b = k[k["instances_a"] == 0]
    assert len(only_b) and only_b["ratio"].isna().all()
    assert cmp.label_a == "nsys_small.sqlite"


def test_compare_same_run_is_zero(reports):
    from nsight_magic.results import NsysRun

    cmp = compare(NsysRun(reports[0], meta={"name": "a"}), reports[0])
    assert (cmp.kernels["delta_ns"] == 0).all()
    assert (cmp.kernels["ratio"] == 1.0).all()
    assert (cmp.nvtx["delta_ns"] == 0).all()
    assert len(cmp.nvtx) == len(reports[0].nvtx_gpu_projection())
    assert cmp.label_a == "a"


def test_compare_paths_and_static_html(data_dir):
    cmp = compare(data_dir / "nsys_small.sqlite", data_dir / "nsys_gemm.sqlite")
    top = cmp.kernels.iloc[0]
    page = cmp.to_html()
    assert "Compare: nsys_small.sqlite -&gt; nsys_gemm.sqlite" in page
    assert "data:image/png;base64," in page
    assert top["name"][:40] in page
    spec = cmp.chart().to_dict()
    assert spec["mark"]["type"] == "bar"


def test_kernel_deltas_rejects_nothing_and_keeps_ints(reports):
    a = reports[0].kernel_summary()
    half = a.iloc[: len(a) // 2]
    d = kernel_deltas(half, a)
    assert d["instances_a"].dtype == "int64"
    dropped = set(a["name"]) - set(half["name"])
    assert set(d.loc[d["instances_a"] == 0, "name"]) == dropped


def test_compare_rejects_other_types():
    with pytest.raises(TypeError, match="NsysRun, NsysReport or a report path"):
        compare(1, 2)
