"""Which process is which rank, and per-rank views of a multi-process run.

The pid -> rank rule, per process, first that applies:

1. ``"nvtx"``: the process emitted the empty marker range ``rank <r>`` in domain ``nsight_magic``
   (what the cell script of a multi-rank ``%%nsys`` run emits right after the gate opens);
2. ``"thread"``: its main thread (tid == pid) is named ``rank <r>`` (nsys keeps thread names);
3. ``"device"``: two or more processes do GPU work, each on exactly one device and no two on the
   same one: rank = position of its device among those devices. That is torchrun's habit
   (``LOCAL_RANK`` -> ``cuda:LOCAL_RANK``, one process per GPU); on one node it is the rank;
4. otherwise NA: a single-process run has no rank, nor does a launcher without GPU work.

A rank claimed by two processes of one report is NA for both (source ``"conflict"``).
Frames with a ``report`` column (several reports merged) are keyed on ``(report, pid)``: pids
repeat across nodes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import NVTX_DOMAIN, label_rank
from .kernels import KERNEL_SUMMARY_COLUMNS, duration_stats
from .keyjoin import process_keys
from .names import short_names
from .nvtx_projection import nvtx_gpu_projection
from .text import join_text
from .timeline import TIMELINE_COLUMNS, timeline_frame

__all__ = [
    "RANK_MAP_COLUMNS",
    "add_rank",
    "process_keys",
    "rank_blocks",
    "rank_kernel_summary",
    "rank_lane",
    "rank_map",
    "rank_nvtx_projection",
    "rank_timeline",
]

RANK_MAP_COLUMNS = ["pid", "rank", "device_id", "source"]


def _labelled_ranks(pid: np.ndarray, labels: np.ndarray) -> dict[int, int]:
    """pid -> rank from ``rank <r>`` labels (the first label of a pid wins)."""
    out: dict[int, int] = {}
    for p, text in zip(pid.tolist(), labels.tolist(), strict=True):
        r = label_rank(str(text))
        if r is not None and p not in out:
            out[p] = r
    return out


def _devices(gpu_ops: pd.DataFrame) -> pd.Series:
    """pid -> its one device id (pids on several devices get -1)."""
    if gpu_ops.empty:
        return pd.Series([], dtype=np.int64)
    per_pid = gpu_ops.groupby("pid")["device_id"].agg(["min", "max"])
    return pd.Series(
        np.where(per_pid["min"] == per_pid["max"], per_pid["min"], -1), index=per_pid.index
    )


def rank_map(
    gpu_ops: pd.DataFrame,
    nvtx: pd.DataFrame | None = None,
    thread_names: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``pid, rank, device_id, source`` for one report: one row per process that did GPU work
    or emitted a rank marker, sorted by pid (rule in the module docstring).

    ``gpu_ops``: ``pid, device_id`` of its kernels (and copies/sets, if wanted); ``nvtx``:
    ``domain, range, pid``; ``thread_names``: ``pid, tid, name``. ``rank`` and ``device_id``
    are nullable ``Int64`` (NA: unknown, or several devices)."""
    devices = _devices(gpu_ops[["pid", "device_id"]])
    marked: dict[int, int] = {}
    if nvtx is not None and len(nvtx):
        sel = (nvtx["domain"] == NVTX_DOMAIN).to_numpy()
        marked = _labelled_ranks(nvtx["pid"].to_numpy()[sel], nvtx["range"].to_numpy()[sel])
    named: dict[int, int] = {}
    if thread_names is not None and len(thread_names):
        main = (thread_names["tid"] == thread_names["pid"]).to_numpy()
        named = _labelled_ranks(
            thread_names["pid"].to_numpy()[main], thread_names["name"].to_numpy()[main]
        )
    pids = sorted(set(devices.index.tolist()) | set(marked))
    on_one = {p: int(d) for p, d in devices.items() if d >= 0}
    by_device: dict[int, int] = {}
    if len(devices) >= 2 and len(on_one) == len(devices):
        order = sorted(set(on_one.values()))
        if len(order) == len(on_one):  # one process per device
            by_device = {p: order.index(d) for p, d in on_one.items()}
    rank: list[int | None] = []
    source: list[str] = []
    for p in pids:
        for table, name in ((marked, "nvtx"), (named, "thread"), (by_device, "device")):
            if p in table:
                rank.append(table[p])
                source.append(name)
                break
        else:
            rank.append(None)
            source.append("none")
    out = pd.DataFrame(
        {
            "pid": np.asarray(pids, dtype=np.int64),
            "rank": pd.array(rank, dtype="Int64"),
            "device_id": pd.array([on_one.get(p) for p in pids], dtype="Int64"),
            "source": pd.array(source, dtype="str"),
        }
    )
    taken = out["rank"].dropna()
    clash = out["rank"].isin(taken[taken.duplicated()].unique()).to_numpy(dtype=bool)
    if clash.any():
        out.loc[clash, "rank"] = pd.NA
        out.loc[clash, "source"] = "conflict"
    return out[RANK_MAP_COLUMNS]


def add_rank(frame: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (any frame with a ``pid``) with a ``rank`` column (``Int64``, NA for processes
    ``ranks`` does not name), joined on :func:`process_keys`. Row order and index are kept."""
    keys = process_keys(frame)
    if "report" in keys and "report" not in ranks:
        keys = ["pid"]
    lookup = pd.MultiIndex.from_frame(ranks[keys])
    pos = lookup.get_indexer(pd.MultiIndex.from_frame(frame[keys]))
    values = ranks["rank"].array.take(pos, allow_fill=True)
    return frame.assign(rank=pd.array(values, dtype="Int64"))


def rank_kernel_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """``rank`` + the ``kernel_summary`` columns, one block per rank (ascending, NA last):
    each block equals ``nsys stats --report cuda_gpu_kern_sum`` on that rank's kernels alone
    (``time_pct`` is of the rank's own total); ``short_name`` labels a name alike in every
    rank (``names.short_names`` over all ranks' names)."""
    rank = kernels["rank"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    stats = duration_stats(kernels.assign(rank=rank), ["rank", "name"])
    per_rank = stats.groupby("rank")["total_ns"].transform("sum").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        stats["time_pct"] = np.where(per_rank > 0, 100.0 * stats["total_ns"] / per_rank, 0.0)
    stats["short_name"] = short_names(stats["name"]).to_numpy()
    return rank_blocks(stats)[["rank", *KERNEL_SUMMARY_COLUMNS]]


def rank_nvtx_projection(trace: pd.DataFrame) -> pd.DataFrame:
    """``rank`` + the ``nvtx_gpu_projection`` columns, one block per rank (ascending, NA last),
    each equal to ``nsys stats --report nvtx_gpu_proj_sum`` on that rank's ranges alone.
    ``trace`` is ``project_nvtx_to_gpu`` output with a ``rank`` column."""
    rank = trace["rank"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    out = nvtx_gpu_projection(trace.assign(rank=rank), by=["rank"])
    return rank_blocks(out)


def rank_blocks(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows grouped by an int ``rank`` column, ascending, -1 (no rank) last and shown as NA
    (``Int64``); the order inside a rank is kept."""
    rank = summary["rank"].to_numpy(dtype=np.int64)
    order = np.argsort(np.where(rank < 0, np.iinfo(np.int64).max, rank), kind="stable")
    out = summary.iloc[order].reset_index(drop=True)
    out["rank"] = pd.array(np.where(out["rank"] < 0, None, out["rank"]), dtype="Int64")
    return out


def rank_lane(frame: pd.DataFrame) -> pd.Series:
    """``rank r / GPU d / stream s`` per row of a GPU-op frame (``pid p / ...`` without a rank);
    with a ``report`` column and no rank, ``report i pid p / ...``."""
    who = _who(frame)
    return join_text(who, " / GPU ", frame["device_id"], " / stream ", frame["stream_id"])


def _who(frame: pd.DataFrame) -> pd.Series:
    pid = join_text("pid ", frame["pid"])
    if "report" in frame:
        pid = join_text("report ", frame["report"], " ", pid)
    if "rank" not in frame:
        return pid
    rank = frame["rank"].astype("Int64")
    return join_text("rank ", rank).where(rank.notna().to_numpy(), pid)


def rank_timeline(
    kernels: pd.DataFrame,
    memcpy: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
    max_rows: int = 5000,
    window: tuple[int, int] | None = None,
    memset: pd.DataFrame | None = None,
    graph_launches: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``timeline_frame`` per process, lanes prefixed with the process
    (``rank r / GPU d / stream s``, ``rank r / NVTX <domain>``), plus a ``rank`` column;
    ``max_rows`` is shared out evenly between processes, ``window`` as ``timeline_frame``'s.
    Frames need ``rank`` (and ``report`` when merged) as :func:`add_rank` gives them."""
    keys = process_keys(kernels)
    given = (kernels, memcpy, nvtx, memset, graph_launches)
    frames = [f for f in given if f is not None]
    procs = pd.concat([f[[*keys, "rank"]] for f in frames]).drop_duplicates(keys)
    procs = procs.sort_values(["rank", *keys], na_position="last", kind="stable")
    budget = max(1, max_rows // max(1, len(procs)))

    def by_process(f: pd.DataFrame | None) -> dict[tuple, pd.DataFrame]:
        return {} if f is None else dict(iter(f.groupby(keys, sort=False)))

    groups = [by_process(f) for f in given]
    empty = [None if f is None else f.iloc[:0] for f in given]
    who = _who(procs).to_numpy()
    parts = []
    for i, key in enumerate(procs[keys].itertuples(index=False, name=None)):
        k, copies, ranges, sets, graphs = (
            g.get(key, e) for g, e in zip(groups, empty, strict=True)
        )
        part = timeline_frame(
            k,
            copies,
            ranges,
            window,
            budget,
            memset=sets,
            graph_launches=graphs,
        )
        part["lane"] = join_text(f"{who[i]} / ", part["lane"])
        part["rank"] = pd.array([procs["rank"].iloc[i]] * len(part), dtype="Int64")
        parts.append(part)
    if not parts:
        return timeline_frame(kernels.iloc[:0]).assign(rank=pd.array([], dtype="Int64"))
    return pd.concat(parts, ignore_index=True)[[*TIMELINE_COLUMNS, "rank"]]
