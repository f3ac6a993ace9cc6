"""CUDA graph launches are GPU work: with a graph-level trace (nsys --cuda-graph-trace=graph)
the replays are rows of graph_launches() only, and busy time, idle gaps, per-process work and
the timeline count them; with a node-level trace the graph's kernels are kernel rows marked as
graph nodes. Real fixtures of one workload traced both ways (tests/data/nsys_graphs_*)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis.graphs import graph_launch_summary, graph_nodes
from nsight_magic.analysis.processes import process_summary
from nsight_magic.reports.nsys.report import NsysReport


@pytest.fixture(scope="module")
def graph_level(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_graphs_graph.sqlite")


@pytest.fixture(scope="module")
def node_level(data_dir: Path) -> NsysReport:
    return NsysReport.open(data_dir / "nsys_graphs_node.sqlite")


def _trace(data_dir: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{name}_cuda_gpu_trace.csv")


def test_graph_launches_are_gpu_ops(graph_level: NsysReport, data_dir: Path) -> None:
    ops = graph_level.gpu_ops()
    graphs = ops[ops["name"] == "[CUDA graph launch 1]"]
    assert len(graphs) == 5 and len(ops) == 5 + 2
    # the other two are exactly nsys's cuda_gpu_trace rows (which leave graph launches out)
    trace = _trace(data_dir, "nsys_graphs_graph")
    rest = ops[ops["name"] != "[CUDA graph launch 1]"]
    assert sorted(rest["end_ns"] - rest["start_ns"]) == sorted(trace["Duration (ns)"])
    pd.testing.assert_frame_equal(
        graphs[["start_ns", "end_ns"]].reset_index(drop=True),
        graph_level.graph_launches()[["start_ns", "end_ns"]],
    )


def test_busy_pct_counts_graph_launches(graph_level: NsysReport) -> None:
    ops = graph_level.gpu_ops().sort_values("start_ns")
    # no two ops of this capture overlap, so busy time is the sum of their durations
    assert (ops["start_ns"].to_numpy()[1:] >= ops["end_ns"].to_numpy()[:-1]).all()
    lo, hi = graph_level.capture_window()
    busy = (ops["end_ns"] - ops["start_ns"]).sum()
    assert graph_level.gpu_busy_pct() == pytest.approx(100 * busy / (hi - lo))
    kernels_only = graph_level.kernels()["duration_ns"].sum()
    assert busy > 5 * kernels_only  # the replays are most of the GPU's work


def test_gaps_name_graph_launches_as_neighbours(graph_level: NsysReport) -> None:
    gaps = graph_level.gaps(0)
    assert len(gaps) == len(graph_level.gpu_ops()) - 1  # one stream, no overlaps
    assert (gaps["prev_op"] == "[CUDA graph launch 1]").sum() == 5
    assert (gaps["next_op"] == "[CUDA graph launch 1]").sum() == 4


def test_timeline_has_graph_launch_rows(graph_level: NsysReport) -> None:
    timeline = graph_level.timeline()
    launches = timeline[timeline["kind"] == "graph launch"]
    assert len(launches) == 5 and set(launches["lane"]) == {"GPU 0 / stream 7"}
    assert set(launches["name"]) == {"[CUDA graph launch 1]"}
    lo = int(launches["start_ns"].iloc[1])
    zoomed = graph_level.timeline(window=(lo, lo + 1))  # inside the second replay only
    assert zoomed.loc[zoomed["kind"] == "graph launch", "start_ns"].tolist() == [lo]


def test_graph_launch_summary(graph_level: NsysReport) -> None:
    summary = graph_launch_summary(graph_level.graph_launches())
    (row,) = summary.to_dict("records")
    durations = graph_level.graph_launches()["duration_ns"]
    assert row["graph_id"] == 1 and row["name"] == "[CUDA graph launch 1]"
    assert row["launches"] == 5 and row["total_ns"] == durations.sum()
    assert row["med_ns"] == np.median(durations) and row["time_pct"] == 100.0
    assert graph_launch_summary(graph_level.graph_launches().iloc[:0]).empty


def test_process_summary_counts_graph_launches(graph_level: NsysReport) -> None:
    out = process_summary(
        graph_level.kernels(),
        graph_level.memcpy(),
        graph_level.processes(),
        graph_level.memset(),
        graph_level.graph_launches(),
    )
    (row,) = out.to_dict("records")
    assert (row["pid"], row["name"], row["kernels"], row["graph_launches"]) == (
        652,
        "python3",
        2,
        5,
    )
    total = graph_level.kernels()["duration_ns"].sum()
    total += graph_level.graph_launches()["duration_ns"].sum()
    assert row["gpu_time_ns"] == total


def test_node_level_kernels_are_marked(node_level: NsysReport, data_dir: Path) -> None:
    nodes = graph_nodes(node_level.kernels()).set_index("name")["graph_node_instances"]
    # 3 kernel nodes x 5 replays; the 2 kernels outside the graph ran as no node
    assert sorted(nodes.tolist()) == [0, 0, 5, 5, 5]
    assert nodes.sum() == 15
    kinds = node_level.timeline()["kind"].value_counts()
    assert kinds["graph kernel"] == 15 and kinds["kernel"] == 2
    assert node_level.gpu_work().graph_launches == 0
    # every op of the node-level trace is a row of nsys's own GPU trace
    assert len(node_level.gpu_ops()) == len(_trace(data_dir, "nsys_graphs_node"))
