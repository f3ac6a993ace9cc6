"""One NVTX attribution rule: kernels_in_range agrees with nsys's own projection
(`nsys stats --report nvtx_gpu_proj_sum` "Total GPU Ops") on every range of the real reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis.attribution import innermost_enclosing, kernels_in_range, launch_calls
from nsight_magic.reports.nsys.report import NsysReport

REPORTS = ["nsys_small", "nsys_llm", "nsys_procs", "nsys_graphs_node", "nsys_ops"]


def _gpu_ops(report: NsysReport) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "pid", "correlation_id"]
    parts = [report.kernels()[cols], report.memcpy()[cols], report.memset()[cols]]
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("name", REPORTS)
def test_gpu_ops_per_range_equal_nsys_projection(data_dir: Path, name: str) -> None:
    report = NsysReport.open(data_dir / f"{name}.sqlite")
    ops, api, nvtx = _gpu_ops(report), report.cuda_api(), report.nvtx()
    reference = pd.read_csv(data_dir / "nsys_stats" / f"{name}_nvtx_gpu_proj_sum.csv")
    if name == "nsys_ops":  # 850 ranges (all agree, 5 s): the non-op ones and 60 aten ones
        aten = reference["Range"].str.startswith(":aten::")
        reference = pd.concat([reference[~aten], reference[aten].head(60)])
    labels = nvtx["domain"] + ":" + nvtx["range"]
    checked = 0
    for label, expected in zip(reference["Range"], reference["Total GPU Ops"], strict=True):
        domain, rng = nvtx.loc[labels == label, ["domain", "range"]].iloc[0]
        inside = kernels_in_range(ops, api, nvtx, domain, rng)
        # nsys counts launching calls: a CUDA graph launch runs several kernel nodes
        calls = inside[["pid", "correlation_id"]].drop_duplicates()
        assert len(calls) == expected, label
        checked += 1
    assert checked == len(reference)


def test_push_pop_and_start_end_follow_the_launching_thread(data_dir: Path) -> None:
    small = NsysReport.open(data_dir / "nsys_small.sqlite")
    kernels, api, nvtx = small.kernels(), small.cuda_api(), small.nvtx()
    step = kernels_in_range(kernels, api, nvtx, "", "decode/step")
    decode = kernels_in_range(kernels, api, nvtx, "", "decode")
    # 9 GPU ops in 3 steps (nvtx_gpu_proj_sum): 2 kernels and a device-to-host copy each
    assert len(step) == 6 and set(step.index) <= set(decode.index)
    assert len(kernels_in_range(_gpu_ops(small), api, nvtx, "", "decode/step")) == 9
    # the start/end range began and ended on one thread: its 3 kernels were launched there
    side = kernels_in_range(kernels, api, nvtx, "", "side-work")
    assert len(side) == 3 and side.index.is_monotonic_increasing
    # nothing matches a range that does not exist
    assert kernels_in_range(kernels, api, nvtx, "", "no such range").empty


def test_child_process_work_is_not_in_the_parents_ranges(data_dir: Path) -> None:
    procs = NsysReport.open(data_dir / "nsys_procs.sqlite")
    kernels, api, nvtx = procs.kernels(), procs.cuda_api(), procs.nvtx()
    cell = kernels_in_range(kernels, api, nvtx, "nsight_magic", "cell")
    child = kernels_in_range(kernels, api, nvtx, "child", "child_work")
    # 7 kernels: 4 launched by the cell's process, 3 by the child, of which 2 (cos, sum) in
    # its range; the child's work is in no range of the cell, which ran in another process
    assert len(cell) == 4 and len(child) == 2
    assert (kernels["pid"] == 1029).sum() == 3
    assert set(cell["pid"]) == {992} and set(child["pid"]) == {1029}


def test_innermost_enclosing_range(data_dir: Path) -> None:
    small = NsysReport.open(data_dir / "nsys_small.sqlite")
    kernels, api, nvtx = small.kernels(), small.cuda_api(), small.nvtx()
    calls = launch_calls(kernels, api)
    inner = innermost_enclosing(calls, nvtx)
    named = pd.Series(
        np.where(inner >= 0, nvtx["range"].to_numpy()[np.maximum(inner, 0)], ""),
        index=kernels.index[calls.row],
    )
    # decode/step lies inside decode: its kernels name the inner range
    step = kernels_in_range(kernels, api, nvtx, "", "decode/step")
    assert (named[step.index] == "decode/step").all()
    # every kernel is inside the cell, so each has some innermost range
    assert (inner >= 0).all() and len(inner) == len(kernels)
