"""CUDA graph launches as GPU work.

With nsys's default ``--cuda-graph-trace=graph`` a replayed CUDA graph is one row of
``graph_launches()`` (start to end of the whole graph on its stream) and its kernels have no
kernel rows. nsys stats leave those launches out of every kernel and NVTX summary (so do we, to
stay equal to them), but they are GPU work all the same: busy time, idle gaps and the timeline
count them, under the name :func:`graph_launch_names` gives them. With
``--cuda-graph-trace=node`` the graph's kernels are ordinary kernel rows whose
``graph_node_id`` is >= 0."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .kernels import duration_stats
from .text import join_text

__all__ = ["GRAPH_SUMMARY_COLUMNS", "graph_launch_names", "graph_launch_summary", "graph_nodes"]

GRAPH_SUMMARY_COLUMNS = [
    "graph_id", "name", "launches", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
    "std_ns", "time_pct",
]  # fmt: skip


def graph_launch_names(graph_launches: pd.DataFrame) -> pd.Series:
    """``[CUDA graph launch <graph_id>]`` per row, in the bracketed style nsys names copies
    and sets with (``[CUDA memcpy HtoD]``)."""
    return join_text("[CUDA graph launch ", graph_launches["graph_id"], "]")


def graph_launch_summary(graph_launches: pd.DataFrame) -> pd.DataFrame:
    """One row per graph: ``graph_id, name, launches, total_ns, avg_ns, med_ns, min_ns,
    max_ns, std_ns, time_pct`` (of all graph launches' time), most time first; the statistics
    are ``kernels.duration_stats``'s, as for kernels."""
    stats = duration_stats(graph_launches, ["graph_id"]).rename(columns={"instances": "launches"})
    stats["graph_id"] = stats["graph_id"].astype(np.int64)
    stats["name"] = graph_launch_names(stats).astype(str)
    return stats[GRAPH_SUMMARY_COLUMNS]


def graph_nodes(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name, how many of its instances ran as a node of a CUDA graph
    (``graph_node_id`` >= 0): ``name, graph_node_instances`` (0 for names never in a graph;
    all 0 when the frame has no ``graph_node_id``)."""
    names = kernels["name"].astype(str)
    if "graph_node_id" in kernels:
        node = (kernels["graph_node_id"].fillna(-1).to_numpy() >= 0).astype(np.int64)
    else:
        node = np.zeros(len(kernels), dtype=np.int64)
    counts = pd.Series(node, index=names.to_numpy()).groupby(level=0, sort=False).sum()
    return pd.DataFrame(
        {"name": counts.index.astype(str), "graph_node_instances": counts.to_numpy(np.int64)}
    )
