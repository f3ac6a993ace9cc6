"""compare() on the two real nsys exports: deltas checked against NVIDIA's own kernel sums."""

from __future__ import annotations

from pathlib import Path

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


def test_statements_are_matched_by_their_text_not_their_line():
    """Notebook 03's real before/after pair: the after cell gained a first line, so its loop is
    line 2 where it was line 1. By line it read as the loop -100% plus a new loop; by text it is
    one statement that moved, its change the loop's own."""
    import nsight_magic

    runs = sorted((Path(__file__).resolve().parents[1] / "notebooks/runs/03_compare").iterdir())
    before, after = (nsight_magic.load_run(r) for r in runs[:2])
    cmp = compare(before, after)
    loop = cmp.nvtx[cmp.nvtx["range"].str.endswith("for _ in range(10): ...")]
    assert len(loop) == 1
    row = loop.iloc[0]
    assert (row["line_a"], row["line_b"], bool(row["moved"])) == (1, 2, True)
    assert row["instances_a"] == row["instances_b"] == 1
    a_proj = before.nvtx_gpu_projection().set_index("range")["proj_total_ns"]
    b_proj = after.nvtx_gpu_projection().set_index("range")["proj_total_ns"]
    assert row["total_ns_a"] == a_proj["L1: for _ in range(10): ..."]
    assert row["total_ns_b"] == b_proj["L2: for _ in range(10): ..."]
    assert row["label"] == "nsight_magic:L1->L2: for _ in range(10): ..."
    assert "L1-&gt;L2: for _ in range(10): ..." in cmp.to_html()
    new = cmp.nvtx[cmp.nvtx["line_a"].isna() & cmp.nvtx["line_b"].notna()]
    assert list(new["range"]) == ["L1: qh, kh, vh = q.bfloat16(), k.bfloat16(), v.bfloat16()"]
    assert not new["moved"].any()


def test_a_statement_twice_in_a_cell_matches_in_order():
    from nsight_magic.analysis.compare import nvtx_deltas

    def projection(lines: dict[int, int]) -> pd.DataFrame:
        return pd.DataFrame({"domain": "nsight_magic", "range": [f"L{n}: y = f(x)" for n in lines],
                             "style": "PushPop", "instances": 1,
                             "proj_total_ns": list(lines.values())})  # fmt: skip

    out = nvtx_deltas(projection({2: 10, 5: 20}), projection({3: 11, 6: 22})).set_index("range")
    assert out.loc["L3: y = f(x)", ["total_ns_a", "line_a"]].tolist() == [10, 2]
    assert out.loc["L6: y = f(x)", ["total_ns_a", "line_a"]].tolist() == [20, 5]


def test_compare_takes_run_folders_as_load_run_opens_them(tmp_path: Path) -> None:
    """``nm.compare(P, P)`` with a run folder said 'a folder without .parquet tables' though
    P holds report_pq/: a run folder is opened as load_run opens it (the command did), a
    parquet export folder as open_report opens it, and a sweep folder says what to do."""
    import shutil

    import nsight_magic
    from nsight_magic.errors import BadArgumentError

    runs = Path(__file__).resolve().parents[1] / "notebooks" / "runs"
    before, after = sorted((runs / "03_compare").iterdir())[:2]
    by_path = nsight_magic.compare(before, str(after))
    by_run = nsight_magic.compare(nsight_magic.load_run(before), nsight_magic.load_run(after))
    pd.testing.assert_frame_equal(by_path.kernels, by_run.kernels)
    pd.testing.assert_frame_equal(by_path.nvtx, by_run.nvtx)
    assert (by_path.label_a, by_path.label_b) == ("before", "after")
    same = nsight_magic.compare(before, before)
    assert same.verdict.change == "same"
    parquet = Path(__file__).resolve().parent / "data" / "nsys_small_pq"
    assert nsight_magic.compare(parquet, parquet).verdict.change == "same"
    sweep = tmp_path / "sw"
    shutil.copytree(Path(__file__).resolve().parent / "data" / "sweep_prefill", sweep,
                    ignore=shutil.ignore_patterns("ncu"))  # fmt: skip
    with pytest.raises(BadArgumentError, match=r"sweep folder.*\.compare\(a, b\)"):
        nsight_magic.compare(sweep, before)
