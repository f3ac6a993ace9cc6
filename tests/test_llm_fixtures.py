"""The real-workload nsys fixtures (CUDA graphs, torch.compile, a tiny decoder with NVTX domains,
PyTorch op ranges, a child process; tests/data/README.md): our summaries equal `nsys stats` on
each, integers exactly and the rest to the one decimal nsys prints."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from stats_reference import assert_duration_summary_equal, assert_projection_equal

from nsight_magic.analysis.kernels import KERNEL_SUMMARY_COLUMNS
from nsight_magic.analysis.nvtx_projection import PROJECTION_SUMMARY_COLUMNS
from nsight_magic.reports.nsys.report import NsysReport

LLM_FIXTURES = [
    "nsys_graphs_node",
    "nsys_graphs_graph",
    "nsys_llm",
    "nsys_ops",
    "nsys_procs",
    "nsys_compiled",
]


def stats(data_dir: Path, name: str, report: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{name}_{report}.csv")


@pytest.mark.parametrize("name", LLM_FIXTURES)
def test_kernel_summary_equals_nsys_stats(data_dir: Path, name: str) -> None:
    ours = NsysReport.open(data_dir / f"{name}.sqlite").kernel_summary()
    ref = stats(data_dir, name, "cuda_gpu_kern_sum")
    assert len(ref) > 0
    assert list(ours.columns) == KERNEL_SUMMARY_COLUMNS
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(ours, ref, count="Instances")


@pytest.mark.parametrize("name", LLM_FIXTURES)
def test_nvtx_projection_equals_nsys_stats(data_dir: Path, name: str) -> None:
    ours = NsysReport.open(data_dir / f"{name}.sqlite").nvtx_gpu_projection()
    ref = stats(data_dir, name, "nvtx_gpu_proj_sum")
    assert len(ref) > 0
    assert list(ours.columns) == PROJECTION_SUMMARY_COLUMNS
    assert_projection_equal(ours, ref)


def test_start_end_range_outliving_its_opener_has_nsys_level(data_dir: Path) -> None:
    """The decoder's start/end range ``generate`` starts inside the push/pop statement range
    L1 and outlives it: nsys's parent is the shortest range that encloses it (``cell``), so
    it is at level 1 with the statements L2 and L3 as its children."""
    proj = NsysReport.open(data_dir / "nsys_llm.sqlite").nvtx_gpu_projection()
    ref = stats(data_dir, "nsys_llm", "nvtx_gpu_proj_sum").set_index("Range")
    rows = proj.set_index("range")
    assert rows.loc["generate", "avg_level"] == ref.loc["LLM:generate", "Avg Range Lvl"] == 1.0
    assert rows.loc["generate", "avg_children"] == ref.loc["LLM:generate", "Avg Num Child"] == 2
    assert rows.loc["cell", "avg_children"] == ref.loc["nsight_magic:cell", "Avg Num Child"] == 1


def test_decoder_ranges_keep_domains_and_at_signs(data_dir: Path) -> None:
    """A range *named* ``LLM@prefill`` in domain ``LLM``, a start/end range in ``LLM`` and a
    default-domain ``sample`` keep their domain, text and style (nvtx_gpu_proj_sum's rows)."""
    proj = NsysReport.open(data_dir / "nsys_llm.sqlite").nvtx_gpu_projection()
    rows = proj.set_index(["domain", "range"])
    assert rows.loc[("LLM", "LLM@prefill"), "gpu_ops"] == 103
    assert rows.loc[("LLM", "generate"), "style"] == "StartEnd"
    assert rows.loc[("", "sample"), "instances"] == 4


def test_op_ranges_are_projected(data_dir: Path) -> None:
    """--pytorch=autograd-shapes-nvtx: one range per aten op with its shapes, 850 projected
    (domain, range) rows in nsys's own summary."""
    proj = NsysReport.open(data_dir / "nsys_ops.sqlite").nvtx_gpu_projection()
    ops = proj[(proj["domain"] == "") & proj["range"].str.startswith("aten::")]
    assert len(proj) == 850 and len(ops) > 800
    assert ops["range"].str.contains("sizes = ").all()
