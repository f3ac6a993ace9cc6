"""A real training step (tests/data/README.md, "Training steps": a small GPT, push/pop phases
``train@fwd/bwd/opt`` in domain ``train``, autograd's backward on its own thread, two steps):
the per-thread projection stays equal to ``nsys stats``; each range's phase (any thread of its
process while it was open) holds the backward; MFU uses the phase time; no impossible number."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stats_reference import assert_duration_summary_equal, assert_projection_equal

from nsight_magic.analysis import mfu
from nsight_magic.analysis.phases import project_phases, with_phases
from nsight_magic.analysis.plausible import blank_impossible
from nsight_magic.reports import open_report
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results.frames import NsysFrames
from nsight_magic.results.nsys_run import NsysRun
from nsight_magic.views import nsys_view

STEP = "nsys_train_step"
BWD = ("train", "train@bwd")


@pytest.fixture(scope="module")
def step(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / f"{STEP}.sqlite")


def _stats(data_dir: Path, report: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{STEP}_{report}.csv")


def test_per_thread_projection_still_equals_nsys_stats(step: NsysReport, data_dir: Path) -> None:
    assert_projection_equal(step.nvtx_gpu_projection(), _stats(data_dir, "nvtx_gpu_proj_sum"))
    # two kernels tie on total time (22656 ns): nsys lists them in its own order, so compare
    # by name
    ref = _stats(data_dir, "cuda_gpu_kern_sum").sort_values(["Total Time (ns)", "Name"])
    ours = step.kernel_summary().sort_values(["total_ns", "name"])
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(ours, ref, count="Instances")


def test_backward_phase_holds_autograds_work(step: NsysReport, data_dir: Path) -> None:
    """nsys gives train@bwd the 1 op its own thread launched per step; its phase holds the
    192 launched by autograd's thread (2 steps), and its time is at least the forward's."""
    ref = _stats(data_dir, "nvtx_gpu_proj_sum").set_index("Range")
    phases = step.nvtx_phases().set_index(["domain", "range"])
    assert ref.loc["train:train@bwd", "Total GPU Ops"] == 2
    assert ref.loc["train:train@bwd", "Total Proj Time (ns)"] < 2_000
    assert phases.loc[BWD, "phase_gpu_ops"] == 192
    assert (
        phases.loc[BWD, "phase_total_ns"]
        >= 0.9 * phases.loc[("train", "train@fwd"), "phase_total_ns"]
    )
    assert (
        phases.loc[BWD, "phase_total_ns"]
        > 1_000 * ref.loc["train:train@bwd", "Total Proj Time (ns)"]
    )


def test_phase_equals_projection_where_one_thread_launched_everything(
    step: NsysReport, data_dir: Path
) -> None:
    """Forward, optimizer and the blocks launch from the main thread only: their phase time
    and ops are nsys stats' own numbers."""
    ref = _stats(data_dir, "nvtx_gpu_proj_sum").set_index("Range")
    phases = step.nvtx_phases().set_index(["domain", "range"])
    for name in ("train@fwd", "train@opt", "train@block0", "train@block1"):
        row, theirs = phases.loc[("train", name)], ref.loc[f"train:{name}"]
        assert row["phase_total_ns"] == theirs["Total Proj Time (ns)"], name
        assert row["phase_gpu_ops"] == theirs["Total GPU Ops"], name


def test_phase_by_a_plain_join(step: NsysReport) -> None:
    """The phase of each train@bwd instance, recomputed with a merge instead of the sorted
    search: every GPU op whose launching call (any thread, same process) lies in the range."""
    nvtx = step.nvtx()
    api = step.cuda_api()
    ops = pd.concat([f[["pid", "correlation_id", "start_ns", "end_ns"]]
                     for f in (step.kernels(), step.memcpy(), step.memset())])  # fmt: skip
    calls = api[["pid", "correlation_id", "start_ns", "end_ns"]].drop_duplicates(
        ["pid", "correlation_id"]
    )
    joined = ops.merge(calls, on=["pid", "correlation_id"], suffixes=("", "_call"))
    trace = project_phases(nvtx, api, step.kernels(), step.memcpy(), step.memset())
    bwd = nvtx[(nvtx["domain"] == "train") & (nvtx["range"] == "train@bwd")]
    assert len(bwd) == 2
    for row, r in bwd.iterrows():
        inside = joined[(joined["pid"] == r["pid"]) & (joined["start_ns_call"] >= r["start_ns"])
                        & (joined["end_ns_call"] <= r["end_ns"])]  # fmt: skip
        got = trace.loc[row]
        assert got["phase_start_ns"] == inside["start_ns"].min()
        assert got["phase_end_ns"] == inside["end_ns"].max()
        assert got["phase_gpu_ops"] == inside["correlation_id"].nunique()


def test_nested_phases_add_up(step: NsysReport) -> None:
    """The blocks nest in the forward, the phases in the cell, the cell in the start/end
    ``train@step``: a phase never holds more ops than the one around it, and forward +
    backward + optimizer hold every op of the step."""
    ph = step.nvtx_phases().set_index(["domain", "range"])["phase_gpu_ops"]
    fwd, bwd, opt = (ph[("train", n)] for n in ("train@fwd", "train@bwd", "train@opt"))
    assert ph[("train", "train@block0")] + ph[("train", "train@block1")] <= fwd
    assert fwd + bwd + opt == ph[("nsight_magic", "cell")] == ph[("train", "train@step")]


def test_processes_stay_apart(data_dir: Path) -> None:
    """Two ranks run at the same time in one report: a range of one rank counts only its own
    process's work, so with one launching thread per rank every phase is its projection."""
    report = open_report(data_dir / "nsys_2rank.sqlite")
    table = with_phases(report.nvtx_gpu_projection(), report.nvtx_phases())
    assert len(table) > 5
    assert (table["phase_total_ns"] == table["proj_total_ns"]).all()
    assert (table["phase_gpu_ops"] == table["gpu_ops"]).all()


def test_ranked_reports_phase_per_report(data_dir: Path) -> None:
    """Per-rank reports merged: each rank's phases, none larger than its own projection."""
    from nsight_magic.reports.nsys.merge import RankedReport

    paths = [data_dir / "nsys_2rank_r0.sqlite", data_dir / "nsys_2rank_r1.sqlite"]
    ranked = RankedReport([NsysReport.open(p) for p in paths])
    trace = ranked.nvtx_phase_trace()
    assert set(trace["rank"]) == {0, 1}
    table = with_phases(ranked.nvtx_gpu_projection(), ranked.nvtx_phases())
    assert (table["phase_gpu_ops"] == table["gpu_ops"]).all()
    per_rank = ranked.rank_nvtx_phases()
    proj = ranked.rank_nvtx_gpu_projection()
    keys = ["rank", "domain", "range", "style"]
    both = per_rank.merge(proj, on=keys, suffixes=("", "_proj"))
    assert len(both) == len(proj) and set(both["rank"]) == {0, 1}
    assert (both["phase_total_ns"] == both["proj_total_ns"]).all()


def test_mfu_per_phase_uses_phase_time(step: NsysReport) -> None:
    """Op-derived MFU per phase: the backward's GEMMs (on autograd's thread) count, twice the
    forward's FLOPs (a linear's backward is two GEMMs); times are phase times; all in (0, 1]."""
    out = mfu.model_mfu(
        step.nvtx_gpu_projection(),
        nvtx=step.nvtx(),
        phases=step.nvtx_phases(),
        gpu_name=step.gpu_info()["name"],
    ).set_index(["domain", "range"])
    fwd, bwd = out.loc[("train", "train@fwd")], out.loc[BWD]
    assert bwd["model_flops"] == 2 * fwd["model_flops"]
    assert bwd["model_flops_source"] == "derived: 36 GEMM op calls"
    assert out.loc[("train", "train@step"), "model_flops"] == 3 * fwd["model_flops"]
    assert (out["time_source"] == mfu.PHASE_TIME_SOURCE).all()
    phases = step.nvtx_phases().set_index(["domain", "range"])
    assert bwd["time_ns"] == phases.loc[BWD, "phase_total_ns"]
    assert ((out["mfu_frac"] > 0) & (out["mfu_frac"] <= 1)).all()
    assert (out["reason"] == "").all()


def test_flops_over_a_per_thread_backward_are_blanked(step: NsysReport) -> None:
    """The issue's case: FLOPs given for train@bwd over its per-thread projection (1 op) would
    read thousands of percent: the row has no number and says why and what to do."""
    flops = {"train:train@fwd": 2e10, "train:train@bwd": 4e10}
    out = mfu.model_mfu(step.nvtx_gpu_projection(), flops, gpu_name="NVIDIA H200")
    bwd = out.set_index("range").loc["train@bwd"]
    assert np.isnan(bwd["mfu_frac"]) and np.isnan(bwd["model_flops_per_s"])
    assert bwd["reason"].startswith("the FLOPs given for train:train@bwd need ")
    assert "another thread" in bwd["reason"] and "FLOP scope" in bwd["reason"]
    fwd = out.set_index("range").loc["train@fwd"]
    assert 0 < fwd["mfu_frac"] < 1 and fwd["reason"] == ""
    # the same FLOPs over the phase time stand
    fixed = mfu.model_mfu(step.nvtx_gpu_projection(), flops, phases=step.nvtx_phases(),
                          gpu_name="NVIDIA H200").set_index("range")  # fmt: skip
    assert 0 < fixed.loc["train@bwd", "mfu_frac"] < 1


def test_blank_impossible_negative_and_hfu() -> None:
    frame = pd.DataFrame(
        {
            "label": ["a", "b", "c"],
            "hfu_frac": [0.5, 1.7, -0.1],
            "hw_flops_per_s": [1.0, 2.0, 3.0],
            "mfu_frac": [0.4, 0.3, np.nan],
        }
    )
    out = blank_impossible(frame, "label")
    assert out["hfu_frac"].isna().tolist() == [False, True, True]
    assert out["hw_flops_per_s"].isna().tolist() == [False, True, True]
    assert out["reason"][0] == "" and "peak_flops=" in out["reason"][1]
    assert "negative" in out["reason"][2]
    assert frame["hfu_frac"][1] == 1.7  # the input is not changed


def test_nvtx_tab_shows_phase_time_where_it_differs(data_dir: Path) -> None:
    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    frames = NsysFrames(run)
    table = frames.nvtx_table().set_index("label")
    assert table.loc["train:train@bwd", "phase_gpu_ops"] == 192
    assert table.loc["train:train@bwd", "gpu_ops"] == 2
    assert frames.phases_differ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = nsys_view.nvtx_html(frames)
    assert nsys_view.PHASE_NOTE.split(":")[0] in page and "phase time (any thread)" in page
    # a run without other threads' work keeps today's table
    small = NsysFrames(NsysRun(open_report(data_dir / "nsys_small.sqlite"), meta={"name": "s"}))
    assert not small.phases_differ()
    assert "phase time" not in nsys_view.nvtx_html(small)


def test_training_step_flops_match_the_gemm_ops(step: NsysReport) -> None:
    """The fixture's GPT: matmul parameters per block 256x768 + 256x256 + 256x1024 + 1024x256,
    2 blocks, LM head 256x4096; 2 steps of 8 x 256 tokens. Without the attention term the
    helper's forward and backward are exactly the FLOPs of the GEMM ops nsys recorded in each
    phase (attention runs in cuDNN's SDPA kernel, which is no GEMM op)."""
    from nsight_magic import training_step_flops

    n_params = 2 * (256 * 768 + 256 * 256 + 256 * 1024 + 1024 * 256) + 256 * 4096
    flops = training_step_flops(n_params, 2 * 8 * 256)
    derived = mfu.model_mfu(
        step.nvtx_gpu_projection(), nvtx=step.nvtx(), phases=step.nvtx_phases(), peak_flops=1e15
    ).set_index("range")
    assert flops.forward == derived.loc["train@fwd", "model_flops"]
    assert flops.backward == derived.loc["train@bwd", "model_flops"]
    assert flops.step == derived.loc["train@step", "model_flops"] == 6 * n_params * 2 * 8 * 256
    keyed = flops.by_range(step="train@step")
    assert keyed == {
        "train:train@fwd": flops.forward,
        "train:train@bwd": flops.backward,
        "train:train@step": flops.step,
    }
    given = mfu.model_mfu(
        step.nvtx_gpu_projection(), keyed, phases=step.nvtx_phases(), gpu_name="NVIDIA H200"
    )
    assert len(given) == 3 and ((given["mfu_frac"] > 0) & (given["mfu_frac"] < 1)).all()


def test_training_step_flops_attention_term() -> None:
    from nsight_magic.analysis.model_flops import training_step_flops, transformer_flops

    f = training_step_flops(1e6, 1024, n_layers=2, seq_len=512, d_model=256)
    assert f.forward == transformer_flops(1e6, 1024, n_layers=2, seq_len=512, d_model=256,
                                          causal=True)  # fmt: skip
    assert f.forward == (2e6 + 4 * 2 * 512 * 256 / 2) * 1024
    assert f.backward == 2 * f.forward and f.step == 3 * f.forward


def test_backward_ops_parse_and_join_their_forward_op(step: NsysReport) -> None:
    """Autograd's ranges are op ranges (so they leave the NVTX table for the Ops tab), and each
    backward node joins its forward op by seq: the GEMM nodes get two GEMMs' worth of FLOPs."""
    from nsight_magic.analysis import torch_ops

    node = torch_ops.parse_op_range("MmBackward0, seq = 378, op_id = 4106, sizes = [[2048, 4096]]")
    assert node is not None and node.op == "MmBackward0" and node.seq == 378
    assert node.shapes == "[[2048, 4096]]" and torch_ops.is_backward_op(node.op)
    engine = torch_ops.parse_op_range("autograd::engine::evaluate_function: MmBackward0, op_id = 5")
    assert engine is not None and torch_ops.is_backward_op(engine.op)
    assert torch_ops.parse_op_range("train@bwd") is None

    nvtx = step.nvtx()
    links = torch_ops.backward_links(nvtx)
    ops = torch_ops.op_ranges(nvtx)
    mm = ops.index[ops["op"] == "MmBackward0"]
    assert len(mm) == 2 and set(links.loc[mm, "forward_op"]) == {"aten::mm"}
    forward = ops.loc[links.loc[mm, "forward_nvtx_row"]]
    assert (forward["shapes"] == "[[2048, 256], [256, 4096]]").all()  # the LM head's GEMM
    assert (forward["seq"].to_numpy() == ops.loc[mm, "seq"].to_numpy()).all()
    assert (links.loc[mm, "forward_flops"] == 2 * 2048 * 256 * 4096).all()
    # a cast's node shares its linear's seq but differentiates the cast: no FLOPs
    casts = ops.index[ops["op"] == "ToCopyBackward0"]
    assert set(links.loc[casts, "forward_op"]) == {"aten::_to_copy"}
    assert links.loc[casts, "forward_flops"].isna().all()

    run = NsysRun(open_report(step.path), meta={"name": STEP})
    summary = run.op_summary().set_index(["op", "shapes"])
    head = summary.loc[("MmBackward0", "[[2048, 4096]]")]
    assert head["forward_op"] == "aten::mm" and head["calls"] == 2
    assert head["model_flops"] == 2 * (2 * 2048 * 256 * 4096) * 2
    table = NsysFrames(run).nvtx_table()
    assert not table["range"].str.contains("Backward|evaluate_function").any()


def test_op_derived_mfu_has_forward_and_backward_shares(step: NsysReport) -> None:
    out = mfu.model_mfu(
        step.nvtx_gpu_projection(), nvtx=step.nvtx(), phases=step.nvtx_phases(), peak_flops=1e15
    ).set_index("range")
    assert out.loc["train@fwd", "backward_flops"] == 0
    assert out.loc["train@bwd", "backward_flops"] == out.loc["train@bwd", "model_flops"]
    step_row = out.loc["train@step"]
    assert step_row["backward_flops"] / step_row["model_flops"] == pytest.approx(2 / 3)


def test_loader_bound_loop_names_the_data_loader(data_dir: Path) -> None:
    """The DataLoader-fed training loop (2 worker processes): the main thread's poll on the
    loader's queue is named as the wait for the loader's next batch, and so are the host
    pieces whose Python samples ran inside dataloader.py."""
    from nsight_magic.analysis import data_loader

    run = NsysRun(open_report(data_dir / "nsys_train_loader.sqlite"), meta={"name": "loader"})
    causes = run.idle_causes(10)
    top = causes.iloc[0]
    assert (top["category"], top["call"], top["frame"]) == ("os_wait", "poll", data_loader.WAITING)
    assert top["sentence"].startswith(f"{top['pct']:.0f}% of idle time: waiting for the DataLoader")
    assert 40 < top["pct"] < 70
    host = causes[(causes["category"] == "host") & (causes["frame"] == data_loader.WAITING)]
    assert len(host) and "running Python" not in host.iloc[0]["sentence"]


def test_loader_activity_from_real_backtraces(data_dir: Path) -> None:
    from nsight_magic.analysis.data_loader import STARTING, STOPPING, WAITING, loader_activity

    samples = open_report(data_dir / "nsys_train_loader.sqlite").python_samples()
    found = {loader_activity(b) for b in samples["backtrace"]}
    assert {WAITING, STARTING, STOPPING, ""} <= found
    backward = samples[samples["backtrace"].str.contains("_engine_run_backward")]
    assert len(backward) and (backward["backtrace"].map(loader_activity) == "").all()


def test_setup_cell_frames_name_their_cell(data_dir: Path) -> None:
    """A frame in a replayed setup cell reads as that cell's line, never the profiled cell's;
    the profiled cell's own frames keep ``cell L<n>`` (the loader fixture's loop)."""
    from nsight_magic.reports.nsys.host import _frame_text

    assert (
        _frame_text("<nsight_magic setup 1: data>", 5, "__getitem__")
        == "setup 'data' L5 __getitem__"
    )
    assert _frame_text("<nsight_magic cell 4: train>", 2, "<module>") == "cell 'train' L2"
    assert _frame_text("<nsight_magic cell>", 3, "<module>") == "cell L3"
    assert _frame_text("<nsight_magic setup 7: >", 1, "<module>") == "setup #7 L1"
    frames = open_report(data_dir / "nsys_train_loader.sqlite").python_samples()["frame"]
    assert frames.str.fullmatch(r"cell L\d+").any()


def test_picker_lists_a_backward_ranges_kernels(data_dir: Path, step: NsysReport) -> None:
    """The range filter of the kernel list (and picker): train@bwd lists the 172 kernels
    autograd launched (192 GPU ops with its memsets), where nsys's own per-thread rule finds 2
    ops."""
    from nsight_magic.analysis.attribution import kernels_in_phase, kernels_in_range

    kernels, api, nvtx = step.kernels(), step.cuda_api(), step.nvtx()
    assert len(kernels_in_range(kernels, api, nvtx, *BWD)) == 2
    phase = kernels_in_phase(kernels, api, nvtx, *BWD)
    sets = kernels_in_phase(step.memset(), api, nvtx, *BWD)
    copies = kernels_in_phase(step.memcpy(), api, nvtx, *BWD)
    ops = step.nvtx_phases().set_index(["domain", "range"]).loc[BWD, "phase_gpu_ops"]
    assert len(phase) == 172 and len(phase) + len(sets) + len(copies) == ops
    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    ranked = NsysFrames(run).ranked_kernels(BWD)
    assert ranked["instances"].sum() == len(phase)
    assert ranked["op"].str.contains("mm|Backward|addmm").any()


def test_kernels_know_their_phase(data_dir: Path, step: NsysReport) -> None:
    """Each kernel carries the user's range it was launched in, from any thread: autograd's
    172 backward kernels read train:train@bwd (nsys's per-thread rule puts them in no range
    of the main thread); the blocks' kernels their block, the innermost range."""
    phases = step.kernel_phases()
    counts = phases.value_counts()
    assert counts["train:train@bwd"] == 172
    assert counts["train:train@block0"] == counts["train:train@block1"] == 40
    assert (phases != "").all()  # every kernel of the step ran in some phase
    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    from nsight_magic.views.picker import kernel_options

    ranked = NsysFrames(run).ranked_kernels(BWD)
    assert (ranked["phase"] == "train:train@bwd").sum() >= len(ranked) // 2
    labels = [label for label, _ in kernel_options(ranked)]
    assert any(label.endswith("in train:train@bwd") for label in labels)


def test_ncu_range_mfu_uses_the_parent_phase_time_and_blanks_the_impossible(
    ncu_reports: dict[str, Path],
) -> None:
    """The ncu GEMM report (bf16 2048x1024x512 + fp32 512x256x128 in the cell range): the
    range's time comes from the parent run's phase (any thread) before its per-thread
    projection, and FLOPs that cannot fit that time at the peak leave the MFU blank with the
    reason."""
    from nsight_magic.analysis.range_mfu import range_utilisation
    from nsight_magic.reports.ncu.report import NcuReport

    gemm = NcuReport.open(ncu_reports["ncu_gemm_metrics"])
    cell = {"domain": ["nsight_magic"], "range": ["cell"]}
    out = range_utilisation(
        gemm.roofline(),
        gemm.nvtx_ranges(),
        projection=pd.DataFrame({**cell, "proj_total_ns": [20_000]}),
        phases=pd.DataFrame({**cell, "phase_total_ns": [30_000]}),
        flops={"cell": 2 * 2048 * 1024 * 512},
        gpu_name="NVIDIA H200",
    ).set_index("range")
    row = out.loc["cell"]
    assert row["range_time_ns"] == 30_000 and row["range_time_source"] == mfu.PHASE_TIME_SOURCE
    assert 0 < row["mfu_frac"] < 1 and row["reason"] == ""
    wrong = range_utilisation(
        gemm.roofline(),
        gemm.nvtx_ranges(),
        projection=pd.DataFrame({**cell, "proj_total_ns": [20_000]}),
        flops={"cell": 1e15},
        gpu_name="NVIDIA H200",
    ).set_index("range")
    assert np.isnan(wrong.loc["cell", "mfu_frac"])
    assert wrong.loc["cell", "reason"].startswith("the FLOPs given for nsight_magic:cell need ")


def test_nvtx_chart_shows_phase_time_where_it_differs(data_dir: Path) -> None:
    from nsight_magic.views import charts

    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    spec = charts.nvtx_ranges_chart.__wrapped__(NsysFrames(run).nvtx_table()).to_dict()
    assert spec["encoding"]["x"]["field"] == "phase_ms"
    rows = next(iter(spec["datasets"].values()))
    bwd = next(r for r in rows if r["name"] == "train:train@bwd")
    assert bwd["phase_ms"] > 10 and bwd["proj_ms"] < 0.01
    small = NsysFrames(NsysRun(open_report(data_dir / "nsys_small.sqlite"), meta={"name": "s"}))
    plain = charts.nvtx_ranges_chart.__wrapped__(small.nvtx_table()).to_dict()
    assert plain["encoding"]["x"]["field"] == "proj_ms"


def test_statement_that_ran_backward_holds_its_kernels(data_dir: Path) -> None:
    """Per statement: L3 (``loss.backward()``) holds the backward's work in its phase time,
    where nsys's own-thread projection gives it one op per step."""
    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    table = run.ordered_projection()
    statements = table[table["scope"] == "statement"].set_index("line")
    assert list(statements.index) == [1, 3, 5]  # L8 (synchronize) launches nothing
    assert statements.loc[3, "gpu_ops"] == 2 and statements.loc[3, "phase_gpu_ops"] == 192
    assert statements.loc[3, "phase_total_ns"] > 10_000_000
    assert (statements.loc[[1, 5], "phase_gpu_ops"] == statements.loc[[1, 5], "gpu_ops"]).all()
    ops = table[table["range"].str.startswith("aten::mm,")]
    assert len(ops) and (ops["phase_total_ns"] == ops["proj_total_ns"]).all()


def test_a_drill_down_of_a_backward_kernel_knows_its_phase(step: NsysReport) -> None:
    """The picker profiles instances k.. of one kernel; ncu's own nvtx column is per thread
    (empty for autograd's launches), the parent nsys run gives each its phase."""
    from nsight_magic.analysis.phases import drill_phases

    kernels, phases = step.kernels(), step.kernel_phases()
    # a kernel that runs in the forward and in the backward
    by_name = pd.DataFrame({"name": kernels["name"].astype(str), "phase": phases})
    bwd = set(by_name.loc[by_name["phase"] == "train:train@bwd", "name"])
    fwd = set(by_name.loc[by_name["phase"].str.startswith("train:train@block"), "name"])
    name = sorted(bwd & fwd)[0]
    mine = kernels[kernels["name"] == name].sort_values("start_ns")
    expected = phases[mine.index].tolist()
    assert drill_phases(kernels, phases, name, 0, len(mine)) == expected
    assert drill_phases(kernels, phases, name, 1, 2) == expected[1:3]
    assert "train:train@bwd" in expected and len(set(expected)) > 1
    assert expected.index("train:train@bwd") > 0  # forward instances come first
    assert drill_phases(kernels, phases, name, len(mine), 1) == [""]  # no such instance


def test_ncu_launches_have_a_phase_column(ncu_reports: dict[str, Path]) -> None:
    from nsight_magic.results.ncu_frames import NcuFrames
    from nsight_magic.results.ncu_run import NcuRun

    run = NcuRun(open_report(ncu_reports["ncu_gemm_metrics"]), meta={"name": "g"})
    assert run.launch_phases() == ["", ""]  # no parent nsys run: unknown
    assert NcuFrames(run).launches()["phase"].tolist() == ["", ""]


def test_ops_tab_lists_backward_ops_with_their_forward_op(data_dir: Path) -> None:
    from nsight_magic.views import ops_view

    run = NsysRun(open_report(data_dir / f"{STEP}.sqlite"), meta={"name": STEP})
    frames = NsysFrames(run)
    table = frames.op_table().set_index(["op", "shapes"])
    node = table.loc[("AddmmBackward0", "[[2048, 768]]")]
    assert node["forward_op"] == "aten::addmm" and 0 < node["mfu_frac"] < 1
    page = ops_view.ops_html(frames, max_rows=200)
    assert "forward op" in page and "AddmmBackward0" in page


@pytest.mark.parametrize("report", ["cuda_api_sum", "osrt_sum", "cuda_gpu_kern_sum"])
def test_loader_loop_summaries_equal_nsys_stats(data_dir: Path, report: str) -> None:
    """The loader fixture's host and kernel summaries are nsys stats' own (no --cudabacktrace
    copies here: plain equality; ties on total time compared by name)."""
    run = NsysRun(open_report(data_dir / "nsys_train_loader.sqlite"), meta={"name": "loader"})
    ref = pd.read_csv(data_dir / "nsys_stats" / f"nsys_train_loader_{report}.csv")
    if report == "cuda_gpu_kern_sum":
        ours, count = run.kernel_summary(), "Instances"
    else:
        ours = run.cuda_api_summary() if report == "cuda_api_sum" else run.osrt_summary()
        ours, count = ours.rename(columns={"calls": "instances"}), "Num Calls"
    ref = ref.sort_values(["Total Time (ns)", "Name"]).reset_index(drop=True)
    ours = ours.sort_values(["total_ns", "name"]).reset_index(drop=True)
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(ours, ref, count=count)
