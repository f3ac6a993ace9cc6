"""CUDA graph launches, graph kernel nodes and processes in the nsys frames, on the real graph and
child-process fixtures, checked against nsys stats of the same reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.reports.nsys.cupti import GRAPH_LAUNCH_COLUMNS
from nsight_magic.reports.nsys.report import GpuWork, NsysReport

EVENT_FRAMES = ("kernels", "memcpy", "memset", "nvtx", "cuda_api", "graph_launches")


def stats(data_dir: Path, name: str, report: str) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / f"{name}_{report}.csv")


def open_fixture(data_dir: Path, name: str) -> NsysReport:
    return NsysReport.open(data_dir / f"{name}.sqlite")


def test_graph_node_kernels_match_cuda_gpu_trace(data_dir: Path) -> None:
    """--cuda-graph-trace=node: every kernel row (graph node or not) is nsys's trace row, and
    the 15 node kernels (3 nodes x 5 replays) carry their graph node id."""
    k = open_fixture(data_dir, "nsys_graphs_node").kernels()
    ref = stats(data_dir, "nsys_graphs_node", "cuda_gpu_trace")
    np.testing.assert_array_equal(k["start_ns"], ref["Start (ns)"])
    np.testing.assert_array_equal(k["duration_ns"], ref["Duration (ns)"])
    np.testing.assert_array_equal(k["correlation_id"], ref["CorrId"])
    assert k["name"].tolist() == ref["Name"].tolist()
    assert k["graph_node_id"].dtype == np.int64
    nodes = k[k["graph_node_id"] >= 0]
    assert len(nodes) == 15 and nodes["graph_node_id"].nunique() == 3
    # The nodes of one replay share the cudaGraphLaunch's correlation id: 5 launches.
    assert nodes.groupby("correlation_id")["graph_node_id"].nunique().tolist() == [3] * 5
    assert (k.loc[k["graph_node_id"] < 0, "short_name"] != "").all() and len(k) - len(nodes) == 2


def test_plain_kernels_have_no_graph_node(nsys_small_sqlite: Path) -> None:
    k = NsysReport.open(nsys_small_sqlite).kernels()
    assert (k["graph_node_id"] == -1).all()


def test_graph_launches_frame(data_dir: Path) -> None:
    """--cuda-graph-trace=graph: the 5 replays are graph launches, each launched by one of the
    5 cudaGraphLaunch calls nsys's cuda_api_sum counts; the kernel table keeps only the two
    kernels outside the graph (cuda_gpu_kern_sum / cuda_gpu_trace list those two only)."""
    rep = open_fixture(data_dir, "nsys_graphs_graph")
    g = rep.graph_launches()
    assert list(g.columns) == GRAPH_LAUNCH_COLUMNS
    assert (g.dtypes == np.int64).all()
    api_sum = stats(data_dir, "nsys_graphs_graph", "cuda_api_sum").set_index("Name")
    assert len(g) == api_sum.loc["cudaGraphLaunch_v10000", "Num Calls"] == 5
    api = rep.cuda_api()
    launching = api.set_index(["pid", "correlation_id"]).loc[
        list(zip(g["pid"], g["correlation_id"], strict=True)), "name"
    ]
    assert set(launching) == {"cudaGraphLaunch_v10000"}
    assert (g["duration_ns"] == g["end_ns"] - g["start_ns"]).all() and (g["duration_ns"] > 0).all()
    assert g["start_ns"].is_monotonic_increasing
    assert set(g["graph_id"]) == {1} and set(g["graph_exec_id"]) == {2}
    trace = stats(data_dir, "nsys_graphs_graph", "cuda_gpu_trace")
    assert len(rep.kernels()) == len(trace) == 2


def test_graph_launches_empty_without_graph_trace(nsys_small_sqlite: Path) -> None:
    g = NsysReport.open(nsys_small_sqlite).graph_launches()
    assert g.empty and list(g.columns) == GRAPH_LAUNCH_COLUMNS


@pytest.mark.parametrize(
    ("name", "work"),
    [
        ("nsys_graphs_graph", GpuWork(kernels=2, graph_launches=5, memcpy=0, memset=0)),
        ("nsys_graphs_node", GpuWork(kernels=17, graph_launches=0, memcpy=0, memset=0)),
        ("nsys_procs", GpuWork(kernels=7, graph_launches=0, memcpy=1, memset=2)),
        ("nsys_small", GpuWork(kernels=26, graph_launches=0, memcpy=2, memset=3)),
    ],
)
def test_gpu_work_counts(data_dir: Path, name: str, work: GpuWork) -> None:
    rep = open_fixture(data_dir, name)
    assert rep.gpu_work() == work and work.has_gpu_work
    # The counts are the frames' lengths, without loading the frames.
    assert work.kernels == stats(data_dir, name, "cuda_gpu_kern_sum")["Instances"].sum()
    assert "kernels" not in rep._cache
    lengths = (len(rep.kernels()), len(rep.graph_launches()), len(rep.memcpy()), len(rep.memset()))
    assert lengths == (work.kernels, work.graph_launches, work.memcpy, work.memset)


def test_gpu_work_of_graph_launches_only() -> None:
    assert GpuWork(kernels=0, graph_launches=3, memcpy=0, memset=0).has_gpu_work
    assert not GpuWork(kernels=0, graph_launches=0, memcpy=0, memset=0).has_gpu_work


def test_graph_level_trace_warns(data_dir: Path) -> None:
    rep = open_fixture(data_dir, "nsys_graphs_graph")
    (warning,) = rep.warnings
    assert "5 CUDA graph launches" in warning and "--cuda-graph-trace=node" in warning
    assert open_fixture(data_dir, "nsys_graphs_node").warnings == []


def test_processes_of_a_cell_and_its_child(data_dir: Path) -> None:
    """The cell (pid 992) and the Python child it started (pid 1029): both in processes(), and
    every event frame's pids are among them."""
    rep = open_fixture(data_dir, "nsys_procs")
    procs = rep.processes()
    assert procs.to_dict("list") == {"pid": [992, 1029], "name": ["python3", "python3"]}
    for frame in EVENT_FRAMES:
        assert set(getattr(rep, frame)()["pid"]) <= set(procs["pid"]), frame
    k = rep.kernels()
    assert set(k["pid"]) == {992, 1029}
    child = rep.nvtx().query("domain == 'child'")
    assert set(child["pid"]) == {1029}
    # The child's range projects its own process's ops only (nsys: 3 GPU ops).
    trace = rep.nvtx_gpu_trace()
    assert trace.loc[trace["domain"] == "child", ["pid", "gpu_ops"]].values.tolist() == [[1029, 3]]


def test_processes_leave_out_idle_system_processes(data_dir: Path) -> None:
    procs = open_fixture(data_dir, "nsys_graphs_graph").processes()
    assert procs.to_dict("list") == {"pid": [652], "name": ["python3"]}
