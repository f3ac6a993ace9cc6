"""Strings built from columns work on every pandas the package supports, empty frames included.

pandas 3.0.6 + pyarrow 25 (the GPU image) typed an empty object column as arrow ``null`` and
raised on ``"x" + column``; ``make test`` runs this file on that pandas and on the oldest one
pyproject allows (tests/deps/). The sweep below takes the first 0 rows of real frames, so the
empty frames have exactly the dtypes the report readers give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis import gaps, graphs, memory, ranks, statements, timeline
from nsight_magic.analysis.mfu import launch_model_flops
from nsight_magic.analysis.ncu_metrics import OCCUPANCY_THEORETICAL, occupancy
from nsight_magic.analysis.range_mfu import RANGE_COLUMNS, mfu_frames
from nsight_magic.analysis.text import join_text
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport


@pytest.fixture(scope="module")
def llm(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_llm.sqlite")


@pytest.mark.parametrize("dtype", [object, "str"])
def test_join_text_on_both_string_dtypes_and_empty(dtype) -> None:
    names = pd.Series(["HtoD", "DtoH"], dtype=dtype)
    assert join_text("[CUDA memcpy ", names, "]").tolist() == [
        "[CUDA memcpy HtoD]",
        "[CUDA memcpy DtoH]",
    ]
    empty = names.iloc[:0]
    out = join_text("[CUDA memcpy ", empty, "] #", pd.Series([], dtype=np.int64))
    assert out.empty and out.dtype == object
    # ints, missing values ("" rather than "nan"), the first Series' index
    mixed = join_text(pd.Series([None, "d"], index=[5, 7], dtype=dtype), ":", pd.Series([1, 2]))
    assert mixed.tolist() == [":1", "d:2"] and mixed.index.tolist() == [5, 7]
    with pytest.raises(ValueError, match="differ in length"):
        join_text(names, pd.Series(["a"]))


def test_every_string_building_analysis_takes_empty_real_frames(llm: NsysReport) -> None:
    kernels, memcpy = llm.kernels().iloc[:0], llm.memcpy().iloc[:0]
    memset, nvtx = llm.memset().iloc[:0], llm.nvtx().iloc[:0]
    launches = llm.graph_launches().iloc[:0]
    ops = gaps.gpu_ops(kernels, memcpy, memset, launches)
    assert ops.empty
    assert timeline.timeline_frame(kernels, memcpy, nvtx, memset=memset).empty
    assert memory.memory_ops(memcpy, memset).empty
    assert graphs.graph_launch_names(launches).empty
    assert ranks.rank_lane(ops.assign(pid=pd.Series([], dtype=np.int64))).empty
    projection = llm.nvtx_gpu_projection().iloc[:0]
    assert statements.ordered_projection(projection).empty
    model = launch_model_flops(pd.DataFrame(columns=["launch", "domain", "range", "level"]))
    assert model.empty and list(model.columns) == ["launch", "model_flops", "model_flops_source"]


def test_string_building_analysis_on_real_rows(llm: NsysReport) -> None:
    ops = gaps.gpu_ops(llm.kernels(), llm.memcpy(), llm.memset())
    frame = timeline.timeline_frame(llm.kernels(), llm.memcpy(), llm.nvtx())
    lanes = set(frame["lane"])
    assert any(lane.startswith("GPU 0 / stream ") for lane in lanes)
    named = memory.memory_ops(llm.memcpy(), llm.memset())["operation"]
    assert named.str.startswith("[CUDA mem").all()
    assert len(ops) == len(llm.kernels()) + len(llm.memcpy()) + len(llm.memset())


def test_mfu_frames_of_a_report_without_nvtx_ranges(ncu_reports: dict[str, Path]) -> None:
    report = NcuReport.open(ncu_reports["ncu_gemm_metrics"])
    frames = mfu_frames(
        report.roofline(), report.kernels(), nvtx=report.nvtx_ranges().iloc[:0], gpu_name="H200"
    )
    assert list(frames["ranges"].columns) == RANGE_COLUMNS and frames["ranges"].empty
    assert len(frames["kernels"]) == 2 and frames["kernels"]["hfu_frac"].notna().all()


def test_occupancy_falls_back_to_theoretical_and_says_so(ncu_reports: dict[str, Path]) -> None:
    # set=full measures the achieved occupancy: shown as measured
    full = occupancy(NcuReport.open(ncu_reports["ncu_small_full"]).sol())
    assert (full["occupancy_source"] == "achieved").all()
    assert (full["occupancy_pct"] == full["achieved_occupancy_pct"]).all()
    # the roofline set measures only the theoretical one (ncu's limit from registers, shared
    # memory and block size): shown, and labelled as theoretical (18.75% and 37.5% here)
    roofline = occupancy(NcuReport.open(ncu_reports["ncu_gemm_roofline"]).sol())
    assert roofline["achieved_occupancy_pct"].isna().all()
    assert roofline["occupancy_pct"].tolist() == [18.75, 37.5]
    assert (roofline["occupancy_source"] == OCCUPANCY_THEORETICAL).all()
    # neither value: blank, with the reason
    sol = NcuReport.open(ncu_reports["ncu_gemm_metrics"]).sol()
    none = occupancy(sol.assign(achieved_occupancy_pct=np.nan, theoretical_occupancy_pct=np.nan))
    assert none["occupancy_pct"].isna().all()
    assert none["occupancy_source"].str.startswith("not in this report").all()
