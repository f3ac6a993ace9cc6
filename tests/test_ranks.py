"""Ranks of a multi-process run on the real 2-rank report (tests/data/nsys_2rank.*: one nsys over
torchrun, both ranks in one report): the pid -> rank rule, per-rank summaries equal to nsys's own
numbers for that rank, NCCL collectives and rank skew."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis import collectives as coll
from nsight_magic.analysis import ranks
from nsight_magic.reports.nsys import process_info
from nsight_magic.reports.nsys.cupti import load_launches
from nsight_magic.reports.nsys.merge import RankedReport, load_runs
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.vocabulary.nvtx_names import label_rank, rank_label
from tests.stats_reference import assert_duration_summary_equal

# What the capture recorded (tests/data/README.md, "Two ranks"): pid -> (rank, device).
PIDS = {775: (0, 0), 776: (1, 1)}


@pytest.fixture(scope="module")
def report(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_2rank.sqlite")


@pytest.fixture(scope="module")
def run(data_dir: Path) -> RankedReport:
    return load_runs(data_dir / "nsys_2rank.sqlite")


def test_rank_labels_round_trip() -> None:
    assert rank_label(3) == "rank 3"
    assert label_rank("rank 12") == 12
    assert label_rank("rank") is None and label_rank("rank 1 of 2") is None


@pytest.mark.parametrize("export", ["nsys_2rank.sqlite", "nsys_2rank_pq"])
def test_ranks_come_from_the_marker_ranges(data_dir: Path, export: str) -> None:
    table = load_runs(data_dir / export).ranks()
    assert table["pid"].tolist() == list(PIDS)
    assert table["rank"].tolist() == [r for r, _ in PIDS.values()]
    assert table["device_id"].tolist() == [d for _, d in PIDS.values()]
    assert set(table["source"]) == {"nvtx"} and set(table["host"]) == {"vm"}


@pytest.mark.parametrize("export", ["nsys_2rank.sqlite", "nsys_2rank_pq"])
def test_nsys_keeps_the_main_thread_name(data_dir: Path, export: str) -> None:
    src = NsysReport.open(data_dir / export).source
    names = process_info.load_thread_names(src)
    main = names[names["tid"] == names["pid"]].set_index("pid")["name"]
    assert {p: main[p] for p in PIDS} == {775: "rank 0", 776: "rank 1"}


def test_fallbacks_thread_name_then_device_order(report: NsysReport) -> None:
    nvtx = report.nvtx()
    unmarked = nvtx[nvtx["range"].map(label_rank).isna()]
    names = process_info.load_thread_names(report.source)
    by_thread = ranks.rank_map(report.kernels(), unmarked, names)
    assert by_thread["rank"].tolist() == [0, 1] and set(by_thread["source"]) == {"thread"}
    by_device = ranks.rank_map(report.kernels(), unmarked, names.assign(name="python3"))
    assert by_device["rank"].tolist() == [0, 1] and set(by_device["source"]) == {"device"}


def test_conflicting_markers_give_no_rank(report: NsysReport) -> None:
    nvtx = report.nvtx()
    both_zero = nvtx.assign(range=nvtx["range"].replace("rank 1", "rank 0"))
    table = ranks.rank_map(report.kernels(), both_zero)
    assert table["rank"].isna().all() and set(table["source"]) == {"conflict"}


def test_a_single_process_run_has_no_rank(data_dir: Path) -> None:
    run = load_runs(data_dir / "nsys_small.sqlite")
    assert run.ranks()["rank"].isna().all()
    assert run.ranks()["source"].tolist() == ["none"]
    assert run.kernels()["rank"].isna().all()
    assert run.rank_skew().empty and run.collectives().empty


def test_every_frame_has_report_and_rank(run: RankedReport, report: NsysReport) -> None:
    for name in ("kernels", "nvtx", "memcpy", "memset", "cuda_api", "nvtx_gpu_trace"):
        ours = getattr(run, name)()
        theirs = getattr(report, name)()
        assert len(ours) == len(theirs), name
        assert list(ours.columns)[: len(theirs.columns)] == list(theirs.columns), name
        assert (ours["report"] == 0).all(), name
        expected = ours["pid"].map({p: r for p, (r, _) in PIDS.items()})
        assert ours["rank"].astype("float").equals(expected.astype("float")), name
    assert run.offsets_ns == [0]


def test_kernel_summary_over_all_ranks_equals_nsys_stats(run: RankedReport, data_dir: Path):
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_2rank_cuda_gpu_kern_sum.csv")
    ours = run.kernel_summary()
    assert ours["name"].tolist() == ref["Name"].tolist()
    assert_duration_summary_equal(ours, ref, "Instances")


def test_rank_kernel_summary_equals_that_ranks_gpu_trace_rows(run: RankedReport, data_dir):
    """nsys stats has no per-process filter; its cuda_gpu_trace names each kernel's device,
    and here rank r ran on device r alone."""
    trace = pd.read_csv(data_dir / "nsys_stats" / "nsys_2rank_cuda_gpu_trace.csv")
    trace = trace[~trace["Name"].str.startswith("[CUDA")]
    trace["device"] = trace["Device"].str.extract(r"\((\d+)\)$")[0].astype(int)
    summary = run.rank_kernel_summary()
    assert summary["rank"].tolist() == sorted(summary["rank"].tolist())
    for rank, device in PIDS.values():
        ours = summary[summary["rank"] == rank].reset_index(drop=True)
        rows = trace[trace["device"] == device].groupby("Name")["Duration (ns)"]
        ref = pd.DataFrame(
            {
                "Name": rows.size().index,
                "Instances": rows.size().to_numpy(),
                "Total Time (ns)": rows.sum().to_numpy(),
                "Min (ns)": rows.min().to_numpy(),
                "Max (ns)": rows.max().to_numpy(),
                "Avg (ns)": rows.mean().round(1).to_numpy(),
                "Med (ns)": rows.median().round(1).to_numpy(),
                "StdDev (ns)": rows.std().fillna(0).round(1).to_numpy(),
            }
        )
        ref["Time (%)"] = (100 * ref["Total Time (ns)"] / ref["Total Time (ns)"].sum()).round(1)
        ref = ref.sort_values(["Total Time (ns)", "Name"], ascending=[False, True])
        assert ours["name"].tolist() == ref["Name"].tolist()
        assert_duration_summary_equal(ours, ref.reset_index(drop=True), "Instances")


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            ("AllReduce", "Sum", "bf16", "RING", "LL"),
        ),
        ("ncclDevKernel_AllGather_RING_LL(x)", ("AllGather", "", "", "RING", "LL")),
        (
            "ncclDevKernel_ReduceScatter_Max_f8e4m3_NVLS_SIMPLE",
            ("ReduceScatter", "Max", "f8e4m3", "NVLS", "SIMPLE"),
        ),
        ("ncclDevKernel_SendRecv(x)", ("SendRecv", "", "", "", "")),
        ("ncclKernel_AllReduce_RING_LL128_Sum_float", ("AllReduce", "", "", "RING", "LL128")),
        ("nvjet_sm90_tst_128x64", ("", "", "", "", "")),
    ],
)
def test_parse_nccl_kernel(name: str, parts: tuple[str, ...]) -> None:
    got = coll.parse_nccl_kernel(name)
    assert tuple(got[k] for k in ("kind", "op", "dtype", "algorithm", "protocol")) == parts


def test_collectives_carry_nccls_payload(run: RankedReport) -> None:
    c = run.collectives()
    assert list(c.columns) == ["report", *coll.COLLECTIVE_COLUMNS]
    per_rank = c.groupby(["rank", "kind"]).size().unstack()
    assert per_rank.to_dict("index") == {
        0: {"AllGather": 1, "AllReduce": 5, "Broadcast": 1},
        1: {"AllGather": 1, "AllReduce": 5, "Broadcast": 1},
    }
    # NCCL's "Message size [bytes]": 4M bf16 per all-reduce, 1M bf16 per rank for the gather
    # and the broadcast, one float for the last all-reduce (ranks_workload.py).
    sizes = c.groupby(["kind", "instance"])["bytes"].unique().map(list).to_dict()
    assert sizes[("AllReduce", 0)] == [8388608] and sizes[("AllReduce", 4)] == [4]
    assert sizes[("AllGather", 0)] == [2097152] and sizes[("Broadcast", 0)] == [2097152]
    assert c["communicator"].nunique() == 1 and (c["communicator"] != "").all()
    all_reduce = c[c["kind"] == "AllReduce"]
    assert set(all_reduce["op"]) == {"Sum"}
    assert all_reduce["dtype"].tolist().count("bf16") == 8


def test_rank_skew_names_the_straggler(run: RankedReport) -> None:
    skew = run.rank_skew()
    assert list(skew.columns) == coll.SKEW_COLUMNS
    assert len(skew) == 7 and (skew["ranks"] == 2).all()
    # rank 1 was made late on purpose: extra GPU work in step 1, a 5 ms host sleep in step 2
    assert (skew["last_rank"] == 1).all()
    step1, step2 = (skew[(skew["kind"] == "AllReduce") & (skew["instance"] == i)] for i in (1, 2))
    assert step1["skew_ns"].item() > 5_000_000 and step2["skew_ns"].item() > 5_000_000
    # one clock: the ranks of an all-reduce / all-gather finish within a few microseconds
    symmetric = skew[skew["kind"].isin(["AllReduce", "AllGather"])]
    assert symmetric["end_spread_ns"].max() < 5_000


def test_collective_summary_counts_waits(run: RankedReport) -> None:
    s = run.collective_summary()
    assert s["rank"].tolist() == [0, 0, 0, 1, 1, 1]
    r0 = s[(s["rank"] == 0) & (s["kind"] == "AllReduce")].iloc[0]
    r1 = s[(s["rank"] == 1) & (s["kind"] == "AllReduce")].iloc[0]
    assert r0["instances"] == 5 and r0["bytes"] == 4 * 8388608 + 4
    assert r1["times_last"] == 5 and r1["wait_ns"] == 0
    skew = run.rank_skew()
    assert r0["wait_ns"] == skew.loc[skew["kind"] == "AllReduce", "skew_ns"].sum()
    # rank 0's all-reduce kernels spent nearly all their time waiting for rank 1
    assert r0["wait_ns"] > 0.95 * r0["total_ns"]


def test_rank_timeline_lanes(run: RankedReport) -> None:
    t = run.timeline()
    lanes = set(t["lane"])
    assert {"rank 0 / GPU 0 / stream 7", "rank 1 / GPU 1 / stream 7"} <= lanes
    assert {"rank 0 / NVTX NCCL", "rank 1 / NVTX nsight_magic"} <= lanes
    assert t.groupby("lane")["rank"].nunique().eq(1).all()
    small = run.timeline(max_rows=40)
    assert len(small) <= 40 + small["lane"].nunique()  # binning keeps one row per lane and bin
    assert small["count"].sum() == t["count"].sum()


def test_rank_lane_without_rank_names_the_process(report: NsysReport) -> None:
    k = report.kernels().head(1)
    assert ranks.rank_lane(k).item() == f"pid {k['pid'].item()} / GPU 0 / stream 7"


def test_summary_and_busy(run: RankedReport, report: NsysReport) -> None:
    s = run.summary()
    assert s["kernels"] == len(report.kernels()) and s["window_ns"] > 0
    assert s["ranks"] == 2 and s["straggler_rank"] == 1 and s["reports"] == 1
    assert s["nccl_time_ns"] < s["kernel_time_ns"]
    busy = run.rank_busy_pct()
    assert (
        busy["rank"].tolist() == [0, 1]
        and ((busy["busy_pct"] > 0) & (busy["busy_pct"] < 100)).all()
    )
    gaps = run.gaps(min_gap_ns=100_000)
    assert set(gaps["rank"].dropna()) <= {0, 1} and (gaps["duration_ns"] > 100_000).all()
    assert np.all(np.diff(gaps["duration_ns"].to_numpy()) <= 0)


def test_a_fused_generic_kernel_takes_its_kind_from_nccls_range(run: RankedReport, report):
    """NCCL launches ``ncclDevKernel_Generic*`` for fused/generic work; the kernel name then
    says nothing and the enclosing NCCL range (``ncclAllGather``) names the collective."""
    kernels = run.kernels()
    gather = kernels["name"].str.startswith("ncclDevKernel_AllGather").to_numpy()
    renamed = kernels.assign(name=np.where(gather, "ncclDevKernel_Generic_1", kernels["name"]))
    nccl = kernels[coll.is_nccl_kernel(kernels["name"])]
    launches = load_launches(report.source, nccl["correlation_id"].to_numpy())
    nvtx = run.nvtx()
    c = coll.collectives(renamed, launches.assign(report=0), nvtx[nvtx["domain"] == "NCCL"])
    assert (c.loc[gather[coll.is_nccl_kernel(kernels["name"])], "kind"] == "AllGather").all()
    same = ["name", "algorithm", "protocol"]  # what the generic name does not say
    pd.testing.assert_frame_equal(c.drop(columns=same), run.collectives().drop(columns=same))
