"""Kernels profiled with ncu know their phase (issue 34 item 4), on real reports of a Qwen2
training step captured through %%ncu on an H100 (tests/data/README.md, "Training steps: ncu"):
the user's innermost NVTX range open in the process when each kernel was launched, whatever
thread launched it, read from the cell script's phase mirror (``nvtx_names.PHASE_DOMAIN``).
ncu's own ``nvtx`` column is the launching thread's only: empty for autograd's launches."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.reports import open_report
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.results.ncu_frames import NcuFrames
from nsight_magic.vocabulary.nvtx_names import PHASE_DOMAIN

BWD = "train:train@bwd"


@pytest.fixture(scope="module")
def bwd(ncu_reports: dict[str, Path]) -> NcuReport:
    return NcuReport.open(ncu_reports["ncu_train_bwd"])


@pytest.fixture(scope="module")
def nsys_step(data_dir: Path) -> NsysRun:
    return NsysRun(open_report(data_dir / "nsys_train_qwen2.sqlite"))


def test_every_backward_kernel_has_its_phase_where_ncus_own_column_is_empty(bwd: NcuReport):
    """The reported case: ``%%ncu --nvtx train@bwd`` profiled 4 backward kernels and 3 of them
    showed an empty ``nvtx`` (autograd's thread launched them)."""
    k = bwd.kernels()
    assert len(k) == 4
    assert (k["phase"] == BWD).all()
    empty = k["nvtx"] == ""
    assert empty.sum() == 3
    assert k.loc[~empty, "nvtx"].iloc[0].startswith("train@train@bwd")
    # the mirror is carried by ``phase``, not listed among the ranges around each launch
    ranges = bwd.nvtx_ranges()
    assert PHASE_DOMAIN not in set(ranges["domain"])
    # around autograd's launch ncu saw only the process-wide (start/end) ranges: train@step and
    # ours, none of the main thread's push/pop ranges
    around = ranges[ranges["launch"] == k.index[empty][0]]
    assert set(around["style"]) == {"StartEnd"}
    assert "train@step" in set(around["range"])


def test_the_ncu_view_shows_the_reports_own_phase_without_a_parent_run(bwd: NcuReport) -> None:
    run = NcuRun(bwd, None, {})
    assert run.launch_phases() == [""] * 4  # no parent nsys run to ask
    launches = NcuFrames(run).launches()
    assert launches["phase"].tolist() == [BWD] * 4


def test_the_same_cell_under_nsys_launched_the_three_from_autograds_thread(
    bwd: NcuReport, nsys_step: NsysRun
) -> None:
    """The same cell under nsys: its first 4 kernels of the backward phase (any thread, by
    launch time) are ncu's 4, name for name; the first came from the thread that opened
    ``train@bwd``, the other 3 from autograd's: exactly those whose ncu ``nvtx`` is empty."""
    k = nsys_step.kernels().assign(phase=nsys_step.kernel_phases())
    k = k.sort_values("start_ns", kind="stable")
    first = k[k["phase"] == BWD].head(4)
    ncu = bwd.kernels()
    assert first["name"].tolist() == ncu["demangled"].tolist()
    v = nsys_step.nvtx()
    main_tid = int(v.loc[v["range"] == "train@bwd", "tid"].iloc[0])
    other_thread = (first["tid"].astype(int) != main_tid).tolist()
    assert other_thread == [False, True, True, True]
    assert other_thread == (ncu["nvtx"] == "").tolist()
    # nsys's own projection holds the one launch on the range's thread; the phase all of them
    proj = nsys_step.nvtx_gpu_projection().set_index("range")
    phases = nsys_step.nvtx_phases().set_index("range")
    assert proj.loc["train@bwd", "gpu_ops"] == 1
    assert phases.loc["train@bwd", "phase_gpu_ops"] > 400


def test_a_report_without_the_mirror_has_a_blank_phase(ncu_reports: dict[str, Path]) -> None:
    old = NcuReport.open(ncu_reports["ncu_gemm_roofline"]).kernels()
    assert old["phase"].tolist() == [""] * len(old)
    assert pd.api.types.is_string_dtype(old["phase"]) or old["phase"].dtype == object
