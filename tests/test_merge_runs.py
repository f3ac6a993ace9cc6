"""``load_runs``: the two per-rank reports of one 2-rank job (tests/data/nsys_2rank_r0/r1, one
nsys per rank) merged into one run: each rank's summaries equal that file's own ``nsys stats``,
clocks line up, pids may repeat across reports, rank assignment without markers."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis.processes import process_summary
from nsight_magic.reports.nsys.merge import RankedReport, load_runs
from nsight_magic.reports.nsys.report import NsysReport
from tests.stats_reference import (
    assert_duration_summary_equal,
    assert_projection_equal,
)

RANK_FILES = ["nsys_2rank_r0.sqlite", "nsys_2rank_r1.sqlite"]


@pytest.fixture(scope="module")
def run(data_dir: Path) -> RankedReport:
    return load_runs([data_dir / f for f in RANK_FILES])


def _stats(data_dir: Path, report: str, table: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{report}_{table}.csv")


def test_ranks_and_hosts(run: RankedReport) -> None:
    table = run.ranks()
    assert table[["report", "pid", "rank", "device_id"]].values.tolist() == [
        [0, 993, 0, 0],
        [1, 990, 1, 1],
    ]
    assert set(table["source"]) == {"nvtx"}


@pytest.mark.parametrize("rank", [0, 1])
def test_each_ranks_kernel_summary_equals_its_own_nsys_stats(run, data_dir, rank) -> None:
    ref = _stats(data_dir, f"nsys_2rank_r{rank}", "cuda_gpu_kern_sum")
    summary = run.rank_kernel_summary()
    ours = summary[summary["rank"] == rank].reset_index(drop=True)
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(ours, ref, "Instances")


@pytest.mark.parametrize("rank", [0, 1])
def test_each_ranks_nvtx_projection_equals_its_own_nsys_stats(run, data_dir, rank) -> None:
    ref = _stats(data_dir, f"nsys_2rank_r{rank}", "nvtx_gpu_proj_sum")
    proj = run.rank_nvtx_gpu_projection()
    assert_projection_equal(proj[proj["rank"] == rank].reset_index(drop=True), ref)


def test_all_ranks_summary_is_the_sum_of_the_ranks(run: RankedReport) -> None:
    total = run.kernel_summary().set_index("name")
    per = run.rank_kernel_summary().groupby("name")[["instances", "total_ns"]].sum()
    pd.testing.assert_frame_equal(
        total[["instances", "total_ns"]].sort_index(), per.sort_index(), check_names=False
    )


def test_clocks_are_aligned_on_the_session_start(run: RankedReport, data_dir: Path) -> None:
    starts = run.session_starts_utc_ns
    assert run.aligned and run.offsets_ns == [s - min(starts) for s in starts]  # type: ignore
    own = NsysReport.open(data_dir / RANK_FILES[0]).kernels()
    merged = run.kernels()
    mine = merged[merged["report"] == 0].reset_index(drop=True)
    np.testing.assert_array_equal(mine["start_ns"], own["start_ns"] + run.offsets_ns[0])
    # Ranks of an all-reduce / all-gather finish together: the ends of matched kernels from
    # two reports land within microseconds once aligned (2.3 us at most here) ...
    skew = run.rank_skew()
    symmetric = skew[skew["kind"].isin(["AllReduce", "AllGather"])]
    assert len(symmetric) == 6 and symmetric["end_spread_ns"].max() < 5_000
    # ... and tens of milliseconds apart on the reports' own clocks.
    raw = load_runs([data_dir / f for f in RANK_FILES], align=False).rank_skew()
    assert raw.loc[raw["kind"] == "AllReduce", "end_spread_ns"].min() > 10_000_000


def test_skew_without_payload_matches_by_kind(run: RankedReport) -> None:
    c = run.collectives()
    assert (c["communicator"] == "").all() and c["bytes"].isna().all()  # plain export: no JSON
    skew = run.rank_skew()
    assert skew["kind"].tolist() == ["AllReduce"] * 4 + ["AllGather", "Broadcast", "AllReduce"]
    # Host-side straggler (rank 1 sleeps 5 ms before step 2's all-reduce), as in the one-report
    # capture of the same job (test_ranks.py).
    step2 = skew[(skew["kind"] == "AllReduce") & (skew["instance"] == 2)].iloc[0]
    assert step2["last_rank"] == 1 and step2["skew_ns"] > 5_000_000


def test_timeline_and_frames_keep_reports_apart(run: RankedReport) -> None:
    lanes = set(run.timeline()["lane"])
    assert {"rank 0 / GPU 0 / stream 7", "rank 1 / GPU 1 / stream 7"} <= lanes
    nvtx = run.nvtx()
    assert nvtx.groupby("report")["rank"].unique().map(list).to_dict() == {0: [0], 1: [1]}
    lo, hi = run.capture_window()
    assert lo >= 0 and hi - lo == run.summary()["window_ns"]


def _rewrite(src: Path, dst: Path, sql: list[str]) -> Path:
    """A copy of a real export with some rows changed (only to reach rules the capture did not)."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for statement in sql:
            if statement.split()[2 if statement.startswith("DELETE") else 1] not in present:
                continue  # nsys leaves empty tables out
            con.execute(statement)
        con.commit()
    finally:
        con.close()
    return dst


def _same_pid(src: Path, dst: Path, old: int, new: int) -> Path:
    """``src`` with process ``old`` renumbered ``new`` (pid and main-thread id bits), as if the
    rank had run on another node that reused the pid."""
    d = (new - old) << 24
    sql = []
    for table, col in [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
        ("NVTX_EVENTS", "globalTid"),
        ("ThreadNames", "globalTid"),
    ]:
        sql.append(f"UPDATE {table} SET {col} = {col} + {d} WHERE ({col} >> 24) & 16777215 = {old}")
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "ThreadNames"):
        sql.append(
            f"UPDATE {table} SET globalTid = globalTid + {new - old} "
            f"WHERE globalTid & 16777215 = {old}"
        )
    return _rewrite(src, dst, sql)


def test_pids_may_repeat_across_reports(run: RankedReport, data_dir: Path, tmp_path: Path) -> None:
    twin = _same_pid(data_dir / RANK_FILES[1], tmp_path / "r1_pid993.sqlite", 990, 993)
    again = load_runs([data_dir / RANK_FILES[0], twin])
    assert again.ranks()["pid"].tolist() == [993, 993]
    assert again.ranks()["rank"].tolist() == [0, 1]
    for name in ("rank_kernel_summary", "rank_skew", "collective_summary"):
        pd.testing.assert_frame_equal(getattr(again, name)(), getattr(run, name)(), obj=name)


def test_the_same_rank_twice_is_refused(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"report 1 .* is report 0 again"):
        load_runs([data_dir / RANK_FILES[0], data_dir / RANK_FILES[0]])
    copy = tmp_path / "copy.sqlite"  # the same process under another name: its rank twice
    copy.write_bytes((data_dir / RANK_FILES[0]).read_bytes())
    with pytest.raises(ValueError, match="rank 0: report 0 pid 993; rank 0: report 1 pid 993"):
        load_runs([data_dir / RANK_FILES[0], copy])


def test_without_markers_ranks_follow_the_reports_order(data_dir: Path, tmp_path: Path) -> None:
    strip = [
        "DELETE FROM ThreadNames",
        "DELETE FROM NVTX_EVENTS WHERE textId IN "
        "(SELECT id FROM StringIds WHERE value LIKE 'rank %')",
    ]
    plain = [_rewrite(data_dir / f, tmp_path / f, strip) for f in RANK_FILES]
    table = load_runs(plain).ranks()
    assert table["rank"].tolist() == [0, 1] and set(table["source"]) == {"order"}
    swapped = load_runs(plain[::-1]).ranks()
    assert swapped[["pid", "rank"]].values.tolist() == [[990, 0], [993, 1]]


def test_sources_glob_reports_and_runs(data_dir: Path, run: RankedReport) -> None:
    by_glob = load_runs(str(data_dir / "nsys_2rank_r*.sqlite"))
    assert [r.path.name for r in by_glob.reports] == RANK_FILES

    class Run:  # what NsysRun looks like to load_runs: an object with .report
        def __init__(self, report: NsysReport) -> None:
            self.report = report

    mixed = load_runs([Run(NsysReport.open(data_dir / RANK_FILES[0])), data_dir / RANK_FILES[1]])
    pd.testing.assert_frame_equal(mixed.ranks(), run.ranks())
    with pytest.raises(FileNotFoundError):
        load_runs(str(data_dir / "no_such_rank*.sqlite"))
    with pytest.raises(ValueError):
        load_runs([])


def test_frames_the_run_view_asks_for(run: RankedReport, data_dir: Path) -> None:
    """What NsysRun forwards, over per-rank reports: graph launches, processes, GPU work
    counts, warnings, and the per-report attribution (correlation ids repeat across reports)."""
    reports = [NsysReport.open(data_dir / f) for f in RANK_FILES]
    assert run.gpu_work().kernels == sum(r.gpu_work().kernels for r in reports)
    assert run.graph_launches().empty and run.warnings == []
    procs = run.processes()
    assert procs[["report", "pid", "rank"]].values.tolist() == [[0, 993, 0], [1, 990, 1]]
    for i, r in enumerate(reports):
        own = r.kernels_in_range("", "step 1")
        merged = run.kernels_in_range("", "step 1")
        mine = merged[merged["report"] == i]
        assert len(own) > 0 and mine["correlation_id"].tolist() == own["correlation_id"].tolist()
    assert run.kernel_ops().index.equals(run.kernels().index)
    # a window of the merged clock: only events overlapping it, lanes per rank
    lo, hi = run.capture_window()
    window = (lo, lo + (hi - lo) // 10)
    timeline = run.timeline(max_rows=500, window=window)
    assert len(timeline) and (timeline["end_ns"] >= window[0]).all()
    assert (timeline["start_ns"] < window[1]).all()
    assert timeline["lane"].str.match(r"^rank [01] / ").all()


def test_process_summary_keys_on_report_and_pid(run: RankedReport, data_dir: Path, tmp_path: Path):
    """Two ranks with the same pid on two hosts stay two rows (keyed on report + pid)."""
    twin = _same_pid(data_dir / RANK_FILES[1], tmp_path / "r1_pid993.sqlite", 990, 993)
    again = load_runs([data_dir / RANK_FILES[0], twin])
    out = process_summary(
        again.kernels(), again.memcpy(), again.processes(), again.memset(), again.graph_launches()
    )
    assert sorted(out[["report", "pid", "rank"]].values.tolist()) == [[0, 993, 0], [1, 993, 1]]
    per_rank = again.kernels().groupby("report")["duration_ns"].sum()
    assert out.set_index("report")["kernel_time_ns"].sort_index().tolist() == per_rank.tolist()


def test_launch_joins_key_on_report_and_pid(run: RankedReport, data_dir: Path, tmp_path: Path):
    """The idle split and the launch-bound stretches join each GPU op to the call that launched
    it; with the same pid (and main-thread id) on two hosts, each rank still finds its own."""
    from nsight_magic.results.nsys_run import NsysRun

    twin = _same_pid(data_dir / RANK_FILES[1], tmp_path / "r1_pid993.sqlite", 990, 993)
    again, ref = NsysRun(load_runs([data_dir / RANK_FILES[0], twin])), NsysRun(run)
    assert again.report.ranks()["pid"].tolist() == [993, 993]
    ids = ["pid", "tid"]
    pd.testing.assert_frame_equal(again.idle_gaps().drop(columns=ids),
                                  ref.idle_gaps().drop(columns=ids))  # fmt: skip
    pd.testing.assert_frame_equal(again.idle_breakdown(), ref.idle_breakdown())
    assert (again.idle.pieces()["category"] != "host").any()
    pd.testing.assert_frame_equal(again.launch_bound().drop(columns="pid"),
                                  ref.launch_bound().drop(columns="pid"))  # fmt: skip
