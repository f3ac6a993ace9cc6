"""Host-side capture (``%%nsys --host``): CUDA API and OS runtime summaries against nsys stats,
Python samples, and the idle-time breakdown, on the real idle fixtures (tests/data/README.md,
"Idle time") and the 2-rank report."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stats_reference import (
    EXACT,
    ONE_DECIMAL,
    assert_duration_summary_equal,
    assert_one_decimal_equal,
)

from nsight_magic.analysis import data_loader
from nsight_magic.analysis import gaps as gap_analysis
from nsight_magic.analysis.idle import is_sync_call
from nsight_magic.errors import EmptyResultWarning
from nsight_magic.reports.nsys.cupti import CUDA_BACKTRACE_CLASS
from nsight_magic.reports.nsys.merge import load_runs
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results.nsys_run import NsysRun

HOST = ["nsys_idle_decode", "nsys_idle_pipeline", "nsys_idle_2rank"]


def stats(data_dir: Path, name: str, report: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{name}_{report}.csv")


@pytest.fixture(scope="module")
def runs(data_dir: Path) -> dict[str, NsysRun]:
    names = [*HOST, "nsys_idle_decode_plain", "nsys_idle_warm_cell"]
    return {n: NsysRun(NsysReport.open(data_dir / f"{n}.sqlite")) for n in names}


def _as_ref(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.rename(columns={"calls": "instances"})


def test_cuda_api_summary_equals_nsys_stats(runs: dict[str, NsysRun], data_dir: Path) -> None:
    ours = runs["nsys_idle_decode_plain"].cuda_api_summary()
    ref = stats(data_dir, "nsys_idle_decode_plain", "cuda_api_sum")
    assert list(ours.columns) == [
        "name", "calls", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns", "time_pct",
    ]  # fmt: skip
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(_as_ref(ours), ref, "Num Calls")


def _backtrace_copies(db: Path) -> pd.Series:
    """Calls per name among the rows --cudabacktrace adds (eventClass 67), read straight."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "select s.value, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
            f"on s.id = r.nameId where r.eventClass = {CUDA_BACKTRACE_CLASS} group by 1"
        ).fetchall()
    return pd.Series(dict(rows), dtype="int64")


@pytest.mark.parametrize("name", HOST)
def test_cuda_api_summary_with_cuda_backtraces(
    name: str, runs: dict[str, NsysRun], data_dir: Path
) -> None:
    """--cudabacktrace writes a second row per call it took a backtrace of (same correlation
    id, name without the ABI suffix). nsys stats lists those copies as extra rows, or, for
    driver calls whose name has no suffix, counts them into the call's own row. Ours leaves
    them out: each of our rows equals nsys's row of the call itself; nsys's other rows are the
    copies."""
    ours = runs[name].cuda_api_summary().set_index("name")
    ref = stats(data_dir, name, "cuda_api_sum")
    copies = _backtrace_copies(data_dir / f"{name}.sqlite")
    matched, merged_names = [], set()
    for call, row in ours.iterrows():
        same = ref[(ref["Name"] == call).to_numpy() & (ref["Total Time (ns)"] == row["total_ns"])]
        if len(same):
            one = same.iloc[[0]].reset_index(drop=True)
            mine = _as_ref(ours.loc[[call]].reset_index())
            # time % differs: nsys's total includes the copies
            assert mine["instances"].tolist() == one["Num Calls"].tolist()
            for col, ref_col in EXACT.items():
                assert mine[col].tolist() == one[ref_col].tolist(), (call, col)
            assert_one_decimal_equal(mine, one, ONE_DECIMAL, skip={"time_pct"})
            matched.append(same.index[0])
        else:  # merged by nsys: the call's own count plus its backtrace copies
            merged = ref[(ref["Name"] == call).to_numpy()]
            assert merged["Num Calls"].tolist() == [row["calls"] + copies[call]], call
            merged_names.add(call)
    rest = ref.drop(index=matched)
    for _, row in rest[~rest["Name"].isin(merged_names)].iterrows():
        assert row["Num Calls"] == copies[row["Name"]], row["Name"]
    # the API frame holds each call once
    assert ours["calls"].sum() == len(runs[name].cuda_api())


@pytest.mark.parametrize("name", HOST)
def test_osrt_summary_equals_nsys_stats(
    name: str, runs: dict[str, NsysRun], data_dir: Path
) -> None:
    ours = runs[name].osrt_summary()
    ref = stats(data_dir, name, "osrt_sum")
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(_as_ref(ours), ref, "Num Calls")


def test_osrt_is_empty_without_osrt_trace(runs: dict[str, NsysRun]) -> None:
    run = runs["nsys_idle_decode_plain"]
    with pytest.warns(EmptyResultWarning):
        assert run.osrt().empty and run.osrt_summary().empty and run.python_samples().empty
    assert not run.idle.has_host_capture()


def test_empty_host_frames_say_why_as_the_memory_frames_do(runs: dict[str, NsysRun]) -> None:
    """osrt_summary() and python_samples() of a run without --host came back empty with no
    word (no attrs["reason"], no warning), where the memory frames say why and what to do."""
    import nsight_magic

    saved = Path(__file__).resolve().parents[1] / "notebooks" / "runs" / "02_llm_drilldown"
    folder = nsight_magic.load_run(next(saved.glob("*-prefill")))  # --host not asked
    assert folder.meta["options"]["host"] is False
    report_only = runs["nsys_idle_decode_plain"]  # no run folder: how it was captured unknown
    for run, said in ((folder, "captured without --host"), (report_only, "holds no")):
        for method, what in (("osrt_summary", "OS runtime calls"),
                             ("python_samples", "Python samples")):  # fmt: skip
            with pytest.warns(EmptyResultWarning, match=f"{method}\\(\\) is empty") as warned:
                frame = getattr(run, method)()
            reason = frame.attrs["reason"]
            assert frame.empty and said in reason and what in reason and "--host" in reason
            assert reason in str(warned[-1].message)
    with warnings.catch_warnings():  # a --host run's frames have rows: nothing to say
        warnings.simplefilter("error", EmptyResultWarning)
        host = runs["nsys_idle_decode"]
        assert "reason" not in host.osrt_summary().attrs and len(host.python_samples())


def test_kernels_are_not_doubled_by_cuda_backtraces(runs: dict[str, NsysRun]) -> None:
    host, plain = runs["nsys_idle_decode"], runs["nsys_idle_decode_plain"]
    assert len(host.kernels()) == len(plain.kernels()) == 313
    assert (host.cuda_api()["name"] == "cudaLaunchKernel").sum() == 313
    assert not host.cuda_api()["correlation_id"].duplicated().any()


def test_python_samples(runs: dict[str, NsysRun]) -> None:
    samples = runs["nsys_idle_decode"].python_samples()
    assert set(samples["kind"]) == {"periodic", "cuda"}
    counts = samples.value_counts(["kind", "frame"])
    # line 53 of idle_workloads.py is ``h = h + block(h)`` in TinyDecoder.forward
    assert counts[("cuda", "idle_workloads.py:53 forward")] == 240
    assert all(" < " in b for b in samples["backtrace"] if b.count(":") > 1)
    cell = runs["nsys_idle_warm_cell"].python_samples()
    # the warm worker's cell code reads as cell lines; line 5 is the model call
    assert {"cell L5", "cell L6"} <= set(cell.loc[cell["kind"] == "cuda", "frame"])


def test_python_sample_domains_are_per_process(data_dir: Path, tmp_path: Path) -> None:
    """nsys numbers NVTX domains per process, in creation order. Renumber one rank's two Python
    domains (periodic 1 <-> CUDA-backtrace 2), as the other creation order would number them:
    every sample keeps its kind, although id 2 now names another kind in each process."""
    original = NsysReport.open(data_dir / "nsys_idle_2rank.sqlite").python_samples()
    copy = tmp_path / "renumbered.sqlite"
    copy.write_bytes((data_dir / "nsys_idle_2rank.sqlite").read_bytes())
    rank_pid = 1111
    with sqlite3.connect(copy) as db:
        db.execute(
            "UPDATE NVTX_EVENTS SET domainId = 3 - domainId"
            " WHERE (globalTid >> 24) & 16777215 = ? AND domainId IN (1, 2)",
            (rank_pid,),
        )
    renumbered = NsysReport.open(copy).python_samples()
    assert set(original["pid"]) >= {rank_pid} and len(original) == 411
    pd.testing.assert_frame_equal(renumbered, original)


@pytest.mark.parametrize(
    "name",
    [*HOST, "nsys_idle_decode_plain", "nsys_idle_warm_cell", "nsys_graphs_graph", "nsys_procs"],
)
def test_idle_time_is_split_without_loss(
    name: str, runs: dict[str, NsysRun], data_dir: Path
) -> None:
    run = runs.get(name) or NsysRun(NsysReport.open(data_dir / f"{name}.sqlite"))
    idle = run.idle
    # the gaps are analysis.gaps' device-level gaps of the same ops
    ops = gap_analysis.gpu_ops(run.kernels(), run.memcpy(), run.memset(), run.graph_launches())
    ref = gap_analysis.gaps(ops, per_stream=False)
    assert sorted(idle.gaps["duration_ns"]) == sorted(ref["duration_ns"])
    pieces = idle.pieces()
    assert pieces["duration_ns"].sum() == idle.gaps["duration_ns"].sum()
    assert (pieces["duration_ns"] > 0).all()
    breakdown = run.idle_breakdown()
    total = breakdown[breakdown["scope"] == "total"]
    assert total["idle_ns"].sum() == pytest.approx(idle.gaps["duration_ns"].sum())
    assert total["pct"].sum() == pytest.approx(100.0)
    for _, rows in breakdown[breakdown["scope"] == "statement"].groupby("statement"):
        assert rows["pct"].sum() == pytest.approx(100.0)
    per_gap = run.idle_gaps()
    cats = ["cuda_sync_ns", "cuda_api_ns", "os_wait_ns", "host_ns"]
    assert (per_gap[cats].sum(axis=1) == per_gap["duration_ns"]).all()


def test_one_thread_driving_two_gpus_keeps_every_gap(runs: dict[str, NsysRun]) -> None:
    """One thread launching on two GPUs (pipeline stages in one process) gives two lanes of
    gaps that overlap in time; each gap is still split whole. The second lane is the real
    decode loop's ops again on device 1, 1 us later, launched by the same thread."""
    from nsight_magic.analysis import idle as idle_analysis

    run = runs["nsys_idle_decode"]
    ops = run.idle._ops
    second = ops.assign(device_id=ops["device_id"] + 1, start_ns=ops["start_ns"] + 1_000,
                        end_ns=ops["end_ns"] + 1_000)  # fmt: skip
    gaps = idle_analysis.gpu_idle_gaps(pd.concat([ops, second], ignore_index=True))
    assert gaps["device_id"].nunique() == 2 and gaps[["pid", "tid"]].drop_duplicates().shape[0] == 1
    calls = idle_analysis.host_calls(run.report.cuda_api(), run.report.osrt())
    pieces, _ = idle_analysis.idle_pieces(gaps, calls, run.idle._statements)
    per_gap = pieces.groupby("gap")["duration_ns"].sum()
    assert per_gap.reindex(gaps["gap"]).to_numpy().tolist() == gaps["duration_ns"].tolist()
    by_device = pieces.groupby("device_id")["duration_ns"].sum()
    assert by_device[0] == by_device[1] == run.idle.gaps["duration_ns"].sum()


def test_decode_loop_causes(runs: dict[str, NsysRun]) -> None:
    causes = runs["nsys_idle_decode"].idle_causes()
    top = causes.iloc[0]
    assert (top["category"], top["frame"]) == ("host", "idle_workloads.py:53 forward")
    assert top["sentence"].startswith(f"{top['pct']:.0f}% of idle time: running Python at ")
    assert "in L2 `for _ in range(24): ...`" in top["sentence"]
    # without --host the same loop's host time has no lines, and says so
    plain = runs["nsys_idle_decode_plain"].idle_causes().iloc[0]
    assert plain["category"] == "host" and plain["frame"] == ""
    assert "no Python sample" in plain["sentence"]


def test_data_loader_wait_is_an_os_wait(runs: dict[str, NsysRun]) -> None:
    top = runs["nsys_idle_pipeline"].idle_causes().iloc[0]
    assert (top["category"], top["call"]) == ("os_wait", "poll")
    # the Python samples in that poll run through torch's dataloader.py: named as such
    assert top["frame"] == data_loader.WAITING
    assert "waiting for the DataLoader's next batch" in top["sentence"]
    assert top["statement"].startswith("L2: for step, (x, y) in enumerate(loader)")
    assert 40 < top["pct"] < 60


def test_warm_cell_names_cell_lines(runs: dict[str, NsysRun]) -> None:
    causes = runs["nsys_idle_warm_cell"].idle_causes()
    assert causes.iloc[0]["frame"] == "cell L5"
    api = causes[causes["category"] == "cuda_api"]
    assert "(from cell L5)" in api.iloc[0]["sentence"]


def test_sync_calls() -> None:
    assert is_sync_call("cudaStreamSynchronize") and is_sync_call("cuCtxSynchronize")
    assert is_sync_call("cudaMemcpy") and not is_sync_call("cudaMemcpyAsync")
    assert is_sync_call("cudaFree") and not is_sync_call("cudaLaunchKernel")


def test_launch_bound_decode(runs: dict[str, NsysRun]) -> None:
    plain = runs["nsys_idle_decode_plain"]
    stretches = plain.launch_bound()
    assert len(stretches) == 1
    s = stretches.iloc[0]
    # every kernel after the first found the GPU idle and ran shorter than its launch interval
    assert s["kernels"] == len(plain.kernels()) - 1
    assert s["cpu_launches_per_ms"] < s["gpu_kernels_per_ms"]
    assert s["busy_pct"] < 20
    busy = plain.kernels()["duration_ns"].iloc[1:].sum()
    assert s["gpu_busy_ns"] == busy


def test_two_ranks_collective_wait(data_dir: Path) -> None:
    run = NsysRun(load_runs([data_dir / "nsys_2rank.sqlite"]))
    breakdown = run.idle_breakdown()
    waits = breakdown[(breakdown["scope"] == "rank") & (breakdown["category"] == "collective_wait")]
    summary = run.report.collective_summary()
    for rank, rows in waits.groupby("rank"):
        assert rows["idle_ns"].sum() == summary.loc[summary["rank"] == rank, "wait_ns"].sum()
    assert set(waits["frame"]) == {"rank 1"}, "rank 1 is the straggler the workload made"
    top = run.idle_causes().iloc[0]
    assert top["category"] == "collective_wait" and top["call"] == "AllReduce"
    assert "waiting for rank 1 in L1" in top["sentence"]
    assert set(breakdown["scope"]) == {"total", "statement", "rank"}


def test_two_ranks_with_the_host_side(runs: dict[str, NsysRun]) -> None:
    """The 2-rank step captured with the host options (nvidia-h200-x2): both ranks' Python
    samples are read, every idle nanosecond of each rank gets one cause, and the collective
    waits are there."""
    run = NsysRun(load_runs([runs["nsys_idle_2rank"].report.path]))
    # (samples of torchrun's own launcher process belong to no rank)
    assert set(run.report.python_samples()["rank"].dropna()) == {0, 1}
    breakdown = run.idle_breakdown()
    ranks = breakdown[breakdown["scope"] == "rank"]
    assert set(ranks["rank"]) == {0, 1}
    assert "collective_wait" in set(ranks["category"])
    sentences = run.idle_causes()["sentence"].tolist()
    assert any("AllReduce waiting for rank 1" in t for t in sentences), sentences
    assert any("running Python at ranks_workload.py:" in t for t in sentences), sentences


def test_idle_view_static_and_timeline_link(runs: dict[str, NsysRun]) -> None:
    from nsight_magic.views.nsys_view import nsys_static_html, nsys_widget

    run = runs["nsys_idle_pipeline"]
    page = nsys_static_html(run.frames)
    assert "Why the GPU idled" in page and "in poll (OS call)" in page
    assert "waiting for the DataLoader" in page and "next batch" in page
    assert "Launch-bound stretches" in page
    view = nsys_widget(run.frames, lambda *a, **k: None, lambda *a, **k: None)
    tabs = view.children[1]
    assert "Idle" in tabs.titles
    tabs.selected_index = list(tabs.titles).index("Idle")  # opening the tab computes it
    idle = view.load_idle()
    assert "Why the GPU idled" in idle.children[0].value
    idle.gap_choice.value = 0
    idle.show_button.click()
    gap = run.idle_gaps().iloc[0]
    assert tabs.titles[tabs.selected_index] == "Timeline"
    lo, hi = view.timeline.window
    assert lo < gap["start_ns"] and hi > gap["end_ns"]
    plain = nsys_static_html(runs["nsys_idle_decode_plain"].frames)
    assert "%%nsys --host" in plain
    assert np.isfinite(run.idle.summary()["idle_ns"])


def test_host_options_split_between_launch_and_start() -> None:
    """Measured on the H100 (tests/data/capture_idle_versions.txt): ``nsys launch`` refuses
    --sample/--cpuctxsw and ``nsys start`` refuses the trace and Python options."""
    from nsight_magic.profilers import nsys as argv

    host = argv.NsysOptions(host=True)
    launch = argv.launch_argv("nsys", "S", ["python3", "w.py"], host)
    assert "--trace=cuda,nvtx,osrt" in launch
    assert {"--python-sampling=true", "--python-backtrace=cuda"} <= set(launch)
    assert not [a for a in launch if a.startswith(("--sample", "--cpuctxsw", "--cudabacktrace"))]
    start = argv.start_argv("nsys", "S", "out/report", sampling=host.sampling_args())
    assert {"--sample=process-tree", "--cpuctxsw=process-tree"} <= set(start)
    assert not [a for a in start if a.startswith(("--trace", "--python"))]
    profile = argv.profile_argv("nsys", "out/report", ["python3", "s.py"], options=host)
    assert "--sample=process-tree" in profile and "--python-sampling=true" in profile
    assert "--sample=none" not in profile
    # osrt named by the user too: once
    both = argv.NsysOptions(trace=("cuda", "nvtx", "osrt"), host=True).collect_args()
    assert both[0] == "--trace=cuda,nvtx,osrt"
    plain = argv.profile_argv("nsys", "r", ["python3", "s.py"])
    assert "--sample=none" in plain and not [a for a in plain if a.startswith("--python")]


def test_nsys_magic_offers_host() -> None:
    from nsight_magic.magic.magics import NsightMagic

    doc = NsightMagic.nsys.__doc__ or ""
    assert "--host" in doc and "host side" in doc


OSRT, RUNTIME, NVTX = "OSRT_API", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
HOST_DAMAGES = [
    f"DROP TABLE {OSRT}",
    f"DELETE FROM {OSRT} WHERE rowid % 2 = 0",
    f"UPDATE {OSRT} SET nameId = NULL",
    f"UPDATE {OSRT} SET end = start - 1000",
    f"UPDATE {NVTX} SET jsonText = 'not json' WHERE rowid % 2 = 0",
    f'UPDATE {NVTX} SET jsonText = \'{{"Frames": [{{"File": 999999, "Line": null}}]}}\'',
    f"UPDATE {NVTX} SET domainId = NULL WHERE eventType = 34",
    f"UPDATE {RUNTIME} SET eventClass = NULL",
    f"UPDATE {RUNTIME} SET end = start - 5 WHERE rowid % 3 = 0",
    "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0",
    "UPDATE StringIds SET value = '<b>&amp;</b>' WHERE id % 3 = 0",
]


@settings(derandomize=True, deadline=None, database=None, max_examples=8,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(damages=st.lists(st.sampled_from(HOST_DAMAGES), min_size=1, max_size=3))
def test_idle_views_survive_damaged_host_reports(
    damages: list[str], data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from test_fuzz_views import damaged_copy

    from nsight_magic.errors import ReportError
    from nsight_magic.views.nsys_view import nsys_static_html, nsys_widget

    dst = tmp_path_factory.mktemp("idle_fuzz") / "damaged.sqlite"
    path = damaged_copy(data_dir / "nsys_idle_decode.sqlite", dst, damages)
    try:
        run = NsysRun(NsysReport.open(path))
    except ReportError:
        return
    assert "Idle: why the GPU idled" in nsys_static_html(run.frames)
    view = nsys_widget(run.frames, lambda *a, **k: None, lambda *a, **k: None)
    assert view.load_idle() is not None


def test_host_options_checked_against_the_installed_nsys(data_dir: Path) -> None:
    """nsys 2025.3.1's own ``nsys profile --help`` (captured on the GPU) lists every --host
    option; a help without them (an older nsys) names what is missing."""
    from nsight_magic.profilers.nsys import missing_host_options

    text = (data_dir / "nsys_help" / "nsys_profile_help_2025.3.1.txt").read_text()
    assert missing_host_options(text) == []
    older = "\n".join(ln for ln in text.splitlines() if "python-" not in ln)
    assert missing_host_options(older) == ["--python-sampling", "--python-backtrace"]
