"""Top-N in one ncu pass (issue 44 item 3): ``NsysRun.profile_top(n)`` asks the session for ONE
re-run of the cell whose ncu filter profiles the first launch of each of the ``n`` kernels with
the most nsys time (``--kernel-id ::regex:^(a|b|c)$:1``), and ``NcuRun.top_kernels()`` puts
each kernel's share of the nsys time beside its HFU. No ncu here: what is tested is the argv the
child run gets, and the shares on the bundled real ncu run of a prefill's top GEMM."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from drill_support import Captured

from nsight_magic import examples
from nsight_magic.analysis.top_kernels import top_kernel_names
from nsight_magic.errors import BadArgumentError
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers import ncu as ncu_argv
from nsight_magic.profilers.ncu import NcuOptions, first_launches_args, kernel_id_regex
from nsight_magic.results.loading import load_run
from nsight_magic.session.backends import NcuBackend

NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*)",
]


def test_the_kernel_id_regex_matches_each_name_exactly_with_no_field_separator() -> None:
    regex = kernel_id_regex(NAMES)
    assert ":" not in regex  # ncu splits --kernel-id at ':'
    pattern = re.compile(regex)  # Python reads \x3a as ':' as ECMAScript does
    for name in NAMES:
        assert pattern.fullmatch(name)
        assert not pattern.fullmatch(name + " ") and not pattern.fullmatch(name[:-1])
    assert not pattern.fullmatch("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNTX")


def test_first_launches_args_take_the_base_every_name_reads_in() -> None:
    assert first_launches_args(NAMES)[:3] == ["--kernel-name-base", "demangled", "--kernel-id"]
    assert first_launches_args(["ampere_sgemm", "nvjet_x"])[1] == "function"
    assert first_launches_args(["_Z3fooPf", "_Z3barPf"])[1] == "mangled"
    kernel_id = first_launches_args(["a.b", "c"])[3]
    assert kernel_id == "::regex:^(a\\.b|c)$:1"  # context, stream: any; invocation 1
    with pytest.raises(ValueError, match="first_launch_of"):
        NcuOptions(first_launch_of=("a",), launch_count=3)


def test_profile_top_is_one_rerun_with_the_first_launch_of_each_top_kernel(
    drill_manager: Any, saved_parent: Path, tmp_path: Path
) -> None:
    manager, seen = drill_manager
    run = load_run(saved_parent, drill_runner=manager.drills)
    with pytest.raises(Captured):
        run.profile_top(3, set="roofline")
    assert len(seen) == 1  # one re-run of the cell, not three
    request, backend, kwargs = seen[0]
    top = top_kernel_names(run.kernel_summary(), 3)
    assert backend.options.first_launch_of == tuple(top)
    assert backend.options.set == "roofline" and backend.options.launch_count is None
    assert kwargs["rerun"].meta["top_kernels"] == top
    assert Path(kwargs["rerun"].run_dir).name.endswith("-top3")
    tool = Tool(name="ncu", path="ncu")
    for argv in (
        NcuBackend(backend.options).fresh_argv(tool, tmp_path, request),
        ncu_argv.attach_argv("ncu", 49200, tmp_path / "report", backend.options),
    ):
        assert argv.count("--kernel-id") == 1 and "--launch-count" not in argv
        kernel_id = argv[argv.index("--kernel-id") + 1]
        assert kernel_id == f"::regex:{kernel_id_regex(top)}:1"
        assert "--kernel-name" not in argv
    with pytest.raises(BadArgumentError, match="how many kernels"):
        run.profile_top(0)


def test_a_sweep_configurations_top_n_binds_its_values_again_and_keeps_the_state(
    drill_manager: Any, saved_parent: Path
) -> None:
    manager, seen = drill_manager
    run = load_run(saved_parent, drill_runner=manager.drills)
    run.bound_values = {"bs": 8}  # what session/runs/sweep.py sets on a configuration's run
    with pytest.raises(Captured):
        run.profile_top(2)
    request, _, kwargs = seen[0]
    assert request.bind == {"bs": 8} and request.keep_state
    assert (
        not request.fresh and kwargs["rerun"].script is None
    )  # the warm ncu worker, not a cold re-run


def test_each_profiled_kernels_share_of_the_nsys_time_beside_its_hfu() -> None:
    child = examples.llm_kernel()  # the prefill's top GEMM, its parent the prefill's nsys run
    shares = child.top_kernels()
    summary = child.parent.kernel_summary()
    (row,) = shares.itertuples()
    top = summary.sort_values("total_ns", ascending=False).iloc[0]
    assert row.name == top["name"] and row.nsys_rank == 1
    assert row.nsys_total_ns == top["total_ns"] and row.nsys_instances == top["instances"]
    assert row.nsys_time_pct == pytest.approx(top["time_pct"])
    hfu = child.hfu().set_index("launch")
    assert row.hfu_frac == pytest.approx(hfu.at[row.launch, "hfu_frac"], nan_ok=True)
    assert row.time_source == hfu.at[row.launch, "time_source"]


def test_shares_without_a_parent_leave_the_nsys_columns_blank() -> None:
    child = examples.llm_kernel()
    child.parent = None
    shares = child.top_kernels()
    assert shares["nsys_total_ns"].isna().all() and shares["nsys_time_pct"].isna().all()
    assert isinstance(shares, pd.DataFrame) and len(shares) == len(child.kernels())


def test_the_pickers_profile_top_n_button_makes_one_call_and_shows_its_run(
    ncu_reports: dict[str, Path], nsys_small_sqlite: Path
) -> None:
    """The button is there only when the run can profile its top N; a click calls
    ``profile_top(n, set=...)`` once and the returned (real) ncu run's view shows below."""
    from nsight_magic.reports.ncu.report import NcuReport
    from nsight_magic.reports.nsys.report import NsysReport
    from nsight_magic.results import NcuRun, NsysRun
    from nsight_magic.views.picker import KernelPicker

    nsys_run = NsysRun(NsysReport.open(nsys_small_sqlite), meta={"name": "small"})
    ncu_run = NcuRun(NcuReport.open(ncu_reports["ncu_small_roofline"]), meta={"name": "top"})
    calls: list[tuple[int, dict[str, Any]]] = []

    def profile_top(n: int, **options: Any) -> Any:
        calls.append((n, options))
        return ncu_run

    without = KernelPicker(nsys_run.frames, profile_fn=lambda *a, **k: None)
    assert without.top_button not in _descendants(without.widget)
    picker = KernelPicker(nsys_run.frames, profile_fn=lambda *a, **k: None,
                          profile_top_fn=profile_top)  # fmt: skip
    assert picker.top_button in _descendants(picker.widget)
    picker.top_n.value = 3
    picker.ncu_set.value = "basic"
    picker.top_button.click()
    assert picker.thread is not None
    picker.thread.join(60)
    ((n, options),) = calls
    assert n == 3 and options["set"] == "basic" and "cancel" in options
    assert picker.last_result is ncu_run and picker.last_error is None
    assert len(picker.result.children) == 1


def _descendants(widget: Any) -> list[Any]:
    out = [widget]
    for child in getattr(widget, "children", ()):
        out += _descendants(child)
    return out


def test_a_top_kernel_ncu_profiled_no_launch_of_is_a_row_that_says_so() -> None:
    """The H100's profile_top(10) of a prefill profiled 9 of the 10 names (benchmarks P16): the
    kernel left out is a row of its own, with its nsys share, no launch and the reason, never
    dropped silently. Here: the real prefill GEMM child, asked for the two kernels with the
    most nsys time, of which ncu profiled the first."""
    from nsight_magic.analysis.top_kernels import NOT_PROFILED, top_kernel_names

    child = examples.llm_kernel()
    summary = child.parent.kernel_summary()
    first, second = top_kernel_names(summary, 2)
    child.meta["top_kernels"] = [first, second]
    shares = child.top_kernels()
    assert list(shares["nsys_rank"]) == [1, 2]
    profiled, left = shares.iloc[0], shares.iloc[1]
    assert profiled["launch"] == 0 and profiled["reason"] != NOT_PROFILED
    assert pd.isna(left["launch"]) and left["name"] == second and left["reason"] == NOT_PROFILED
    by_name = summary.set_index("name")
    assert left["nsys_total_ns"] == by_name.at[second, "total_ns"]
    assert left["nsys_time_pct"] == pytest.approx(by_name.at[second, "time_pct"])
    assert np.isnan(left["hfu_frac"]) and left["short_name"]
    from nsight_magic.session.runs.drill import _not_profiled

    assert _not_profiled(child) == [(second, left["short_name"])]  # said at once, passed again
    child.meta["top_kernels"] = [first]  # all profiled: one row per launch, as before
    assert len(child.top_kernels()) == len(child.kernels())
    assert _not_profiled(child) == []


def _handing_back(monkeypatch: pytest.MonkeyPatch, handed: list[Path]) -> tuple[Any, list[Any]]:
    """A session manager whose ncu runs hand back the real reports of ``handed`` in turn (no
    ncu here), and the list of the kernels each run was asked for (``first_launch_of``)."""
    import shutil

    from nsight_magic.reports.ncu.report import NcuReport
    from nsight_magic.results import NcuRun
    from nsight_magic.run_folders.run_dir import RunDir, write_json
    from nsight_magic.session.manager import SessionManager

    seen: list[Any] = []
    manager = SessionManager()

    def profile(request: Any, backend: Any, **kwargs: Any) -> Any:
        run_dir = Path(kwargs["rerun"].run_dir)
        report = run_dir / "report.ncu-rep"
        shutil.copy(handed[len(seen)], report)
        seen.append(backend.options.first_launch_of)
        write_json(RunDir(run_dir).meta, {"tool": "ncu", **kwargs["rerun"].meta})
        return NcuRun(NcuReport.open(report), run_dir, dict(kwargs["rerun"].meta),
                      parent=kwargs["rerun"].parent)  # fmt: skip

    monkeypatch.setattr(manager, "profile", profile)
    monkeypatch.setattr(NcuBackend, "locate", lambda self: Tool(name="ncu", path="ncu"))
    return manager, seen


def test_kernels_the_one_pass_filter_left_out_get_a_pass_each_merged_into_one_run(
    monkeypatch: pytest.MonkeyPatch, saved_parent: Path, ncu_reports: dict[str, Path]
) -> None:
    """On the H100 the one-pass filter with 10 names never selected a prefill's LM-head GEMM nor
    cuDNN's SDPA kernel; a filter naming one alone does. So the kernels left out are asked for
    together in one more pass, then each still left out in a pass of its own, and the passes'
    launches join the first one's in the run profile_top returns and in its folder, which
    load_run opens as one. The passes here hand back real ncu reports of other cells: none
    holds the small run's kernels, so each of them is asked for again, together, then alone,
    and still said not profiled at the end."""

    from nsight_magic.reports.ncu.report import NcuReport

    handed = [ncu_reports["ncu_sweep_top"], ncu_reports["ncu_gemm_roofline"],
              ncu_reports["ncu_gemm_metrics"], ncu_reports["ncu_gemm_roofline"]]  # fmt: skip
    manager, seen = _handing_back(monkeypatch, handed)
    run = load_run(saved_parent, drill_runner=manager.drills)
    out: list[str] = []
    top = run.profile_top(2, output=out.append)
    names = top_kernel_names(run.kernel_summary(), 2)
    # one pass, the two it left out together, then each alone
    assert seen == [tuple(names), tuple(names), (names[0],), (names[1],)]
    sizes = [len(NcuReport.open(p)) for p in handed]
    assert len(top.kernels()) == sum(sizes)
    assert list(top.kernels()["launch"]) == list(range(sum(sizes)))
    assert top.meta["top_kernels"] == names and len(top.meta["merged_runs"]) == 3
    assert any("left out 2 of the top kernels; profiling them in more" in line for line in out)
    assert any(line.startswith("nsight_magic: ncu profiled 0 of the 2 kernels") for line in out)
    again = load_run(top.run_dir)  # the folder alone: the passes beside it are merged again
    assert len(again.kernels()) == sum(sizes)
    assert list(again.kernels()["demangled"]) == list(top.kernels()["demangled"])


def test_a_merged_run_names_only_folders_beside_it(
    tmp_path: Path, ncu_reports: dict[str, Path]
) -> None:
    """A shared folder is data: ``merged_runs`` must name plain folders beside the run."""
    import shutil

    from nsight_magic.errors import ReportError
    from nsight_magic.run_folders.run_dir import RunDir, write_json

    run = tmp_path / "top2"
    run.mkdir()
    shutil.copy(ncu_reports["ncu_gemm_metrics"], run / "report.ncu-rep")
    for bad in (["../../etc"], ["a/b"], [".."], "x"):
        write_json(RunDir(run).meta, {"tool": "ncu", "merged_runs": bad})
        with pytest.raises(ReportError, match="merged_runs"):
            load_run(run)


# the fixture's folder names the capture machine's interpreter: a saved folder never chooses it
@pytest.mark.filterwarnings("ignore::nsight_magic.errors.FolderSettingsIgnored")
def test_kernels_left_out_that_one_more_pass_profiles_together_need_no_pass_each(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ncu_reports: dict[str, Path]
) -> None:
    """On the H100 (2026-11-28 06:37 UTC, benchmarks/README.md P16) the two kernels the
    one-pass filter left out were both profiled by one more pass naming the two: 10 of 10 in
    12.5 s where a pass each had taken 14.8-15.2 s. Here the first pass hands back a report of
    another cell (none of the 5 kernels), the second the real top-5 report of this sweep's
    bs=4 run: every kernel is profiled after two re-runs, none is asked for alone."""
    import shutil

    from nsight_magic.run_folders.run_dir import RunDir, write_private
    from nsight_magic.session.runs.drill import _not_profiled

    sweep_dir = Path(__file__).parent / "data" / "sweep_prefill"
    if not (sweep_dir.exists() and "ncu_sweep_top" in ncu_reports):
        pytest.skip("waits for the GPU capture (tools/fixtures/capture_sweep.sh)")
    parent_dir = tmp_path / "02-bs_4"
    shutil.copytree(sweep_dir / "02-bs_4", parent_dir, ignore=shutil.ignore_patterns("ncu"))
    # the fixture keeps no cell (a shared folder's privacy); a re-run needs one, never run here
    write_private(RunDir(parent_dir).cell, "logits = model(ids[:bs])\n")
    write_private(RunDir(parent_dir).script, "print('saved script')\n")
    handed = [ncu_reports["ncu_gemm_metrics"], ncu_reports["ncu_sweep_top"]]
    manager, seen = _handing_back(monkeypatch, handed)
    run = load_run(parent_dir, drill_runner=manager.drills)
    out: list[str] = []
    top = run.profile_top(5, output=out.append)
    names = top_kernel_names(run.kernel_summary(), 5)
    assert seen == [tuple(names), tuple(names)]  # the first pass, then the five together
    assert len(top.meta["merged_runs"]) == 1
    assert set(names) <= set(top.kernels()["demangled"])  # the second pass's launches joined
    assert _not_profiled(top) == [] and not any("not profiled" in line for line in out)
