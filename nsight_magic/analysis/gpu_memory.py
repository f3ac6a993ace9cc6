"""Device memory in use over time, from nsys's allocation and free events
(``--cuda-memory-usage=true``; ``reports.nsys.memory_usage.load_memory_events``).

What nsys sees is what each process asked the driver for (cudaMalloc, cuMemCreate, ...), per
process and device. PyTorch's caching allocator asks for large segments and hands tensors out of
them, so this is torch's *reserved* memory plus what other libraries (cuBLAS workspaces, NCCL)
allocate, never the bytes its tensors hold (``torch.cuda.memory_allocated``). A worker that maps
the notebook's tensors through CUDA IPC (issue 33) allocates nothing for them, but nsys records
each mapping as an allocation of the worker (measured on the H200, Nsight Systems 2025.3.1: a
worker mapping a 4 GiB and a 64 MiB tensor started its capture at exactly 4 GiB + 64 MiB, while
nvidia-smi gave it 530 MiB). With the storages the worker listed as mapped (``MappedMemory``,
the run's status), those events are the notebook's memory: the timeline leaves them out and the
summary gives them as ``mapped_bytes``, so a process's numbers are its own.

What was in use before the capture started is in the events too (measured, Nsight Systems
2025.3.1, tests/data/README.md "GPU memory"): nsys writes the allocations and frees the process
made before the gate with time 0, in call order (their correlation ids). The timeline folds
them into one row per process at the capture's start (operation "before capture", its
``bytes_in_use`` the start value); a free of an address never seen allocated counts as in use
at the start as well (nothing is lost when a report lacks part of that history).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import NVTX_DOMAIN, statement_line
from .torch_ops import op_range_mask

__all__ = [
    "BEFORE_CAPTURE",
    "DEVICE_KINDS",
    "MEMORY_SUMMARY_COLUMNS",
    "MEMORY_TIMELINE_COLUMNS",
    "MappedMemory",
    "chart_rows",
    "empty_events",
    "memory_summary",
    "memory_timeline",
    "open_ranges_at",
]

# Device memory: what counts against the GPU's memory. Pinned host memory (cudaHostAlloc) and
# managed memory (resident where it was touched last) are left out.
DEVICE_KINDS = ("device", "array", "device_static", "unknown")
BEFORE_CAPTURE = "before capture"  # the timeline's first row per process: what it held then
MEMORY_TIMELINE_COLUMNS = [
    "time_ns", "device_id", "pid", "bytes_in_use", "delta_bytes", "operation", "address",
]  # fmt: skip
MEMORY_SUMMARY_COLUMNS = [
    "device_id", "pid", "start_bytes", "peak_bytes", "end_bytes", "peak_time_ns",
    "allocated_bytes", "freed_bytes", "allocations", "frees", "mapped_bytes", "statement",
    "nvtx_range",
]  # fmt: skip


@dataclass(frozen=True)
class MappedMemory:
    """The notebook's storages a warm worker maps, as the worker listed them at the capture:
    ``pid`` (the worker) and ``segments`` ((device, data pointer, bytes) each). nsys records a
    mapping as an allocation of the process that opened it, whose address range holds the
    storage's pointer."""

    pid: int
    segments: tuple[tuple[int, int, int], ...]

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> MappedMemory | None:
        """From a run's status field ``mapped``; None when the run did not say (a report opened
        alone, a run captured before it was recorded: what is mapped is not known)."""
        value = (status or {}).get("mapped")
        if not isinstance(value, Mapping) or not isinstance(value.get("pid"), int):
            return None
        segments = tuple(
            (int(s[0]), int(s[1]), int(s[2]))
            for s in value.get("segments") or ()
            if isinstance(s, (list, tuple)) and len(s) == 3 and all(isinstance(v, int) for v in s)
        )
        return cls(int(value["pid"]), segments)

    @property
    def total_bytes(self) -> int:
        """The bytes of every segment the worker maps."""
        return sum(size for _, _, size in self.segments)

    def flags(self, frame: pd.DataFrame) -> np.ndarray:
        """Per row of a device-events frame: the event is a mapping of the notebook's memory
        (an allocation of this pid whose range holds a mapped pointer, or a free of one)."""
        out = np.zeros(len(frame), dtype=bool)
        if not self.segments or frame.empty:
            return out
        ours = (frame["pid"] == self.pid).to_numpy()
        alloc = (frame["operation"] == "alloc").to_numpy()
        address = frame["address"].to_numpy(np.int64)
        end = address + frame["bytes"].to_numpy(np.int64)
        device = frame["device_id"].to_numpy(np.int64)
        for dev in np.unique(device):
            ptrs = np.sort([p for d, p, _ in self.segments if d == dev])
            if not len(ptrs):
                continue
            rows = ours & alloc & (device == dev)
            at = np.searchsorted(ptrs, address[rows], side="left")
            inside = at < len(ptrs)
            hit = np.zeros(int(rows.sum()), dtype=bool)
            hit[inside] = ptrs[at[inside]] < end[rows][inside]
            out[np.flatnonzero(rows)[hit]] = True
        mapped_at = set(zip(device[out], address[out], strict=True))
        frees = ours & ~alloc
        for i in np.flatnonzero(frees):
            out[i] = (device[i], address[i]) in mapped_at
        return out


EVENT_COLUMNS = {"time_ns": "float64", "device_id": "int64", "pid": "int64", "operation": "str",
                 "bytes": "int64", "address": "int64", "memory_kind": "str",
                 "correlation_id": "int64"}  # fmt: skip


def empty_events() -> pd.DataFrame:
    """The events frame (``reports.nsys.memory_usage``) with no rows: a report without them."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})


def memory_timeline(
    events: pd.DataFrame,
    capture_start_ns: float | None = None,
    mapped: MappedMemory | None = None,
) -> pd.DataFrame:
    """Device memory in use per process over time: ``time_ns, device_id, pid, bytes_in_use``
    (after the event: the bytes that process holds on that device), ``delta_bytes`` (+
    allocated, - freed), ``operation`` ("alloc" | "free"; the first row of each process is
    "before capture": at ``capture_start_ns``, what it held when the capture started, all its
    earlier events folded in), ``address`` (-1 for that row), in time order. ``mapped``: the
    notebook's memory a worker maps is left out (it is the notebook's, not the worker's)."""
    frame = _device_events(events)
    if mapped is not None:
        frame = frame[~mapped.flags(frame)]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in MEMORY_TIMELINE_COLUMNS})
    inside = frame["time_ns"].to_numpy(np.float64) > 0
    if capture_start_ns is None:
        capture_start_ns = float(frame["time_ns"][inside].min()) if inside.any() else 0.0
    before_mask = frame["time_ns"].to_numpy(np.float64) < capture_start_ns
    parts = []
    for (device, pid), group in frame.groupby(["device_id", "pid"], sort=True):
        delta, unseen = _deltas(group)
        early = before_mask[frame.index.get_indexer(group.index)]
        start = unseen + int(delta[early].sum())
        later = group[~early]
        use = start + np.cumsum(delta[~early])
        parts.append(
            pd.DataFrame(
                {
                    "time_ns": np.concatenate([[capture_start_ns], later["time_ns"]]),
                    "device_id": np.int64(device),
                    "pid": np.int64(pid),
                    "bytes_in_use": np.concatenate([[start], use]).astype(np.int64),
                    "delta_bytes": np.concatenate([[start], delta[~early]]).astype(np.int64),
                    "operation": [BEFORE_CAPTURE, *later["operation"].astype(str)],
                    "address": np.concatenate([[-1], later["address"]]).astype(np.int64),
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["time_ns", "device_id", "pid"], kind="stable").reset_index(drop=True)
    out["operation"] = out["operation"].astype(str)
    out["time_ns"] = out["time_ns"].astype(np.float64)
    return out[MEMORY_TIMELINE_COLUMNS]


def memory_summary(
    events: pd.DataFrame,
    nvtx: pd.DataFrame | None = None,
    capture_start_ns: float | None = None,
    mapped: MappedMemory | None = None,
) -> pd.DataFrame:
    """One row per (device, process) of :func:`memory_timeline`: ``device_id, pid,
    start_bytes`` (in use when the capture started), ``peak_bytes, end_bytes, peak_time_ns``
    (ns: when the peak was first reached; the capture's start when it never rose above the
    start), ``allocated_bytes, freed_bytes, allocations, frees`` (inside the capture),
    ``mapped_bytes`` (the notebook's memory the process maps, most at once, left out of the
    others; <NA> when the run does not say: a report opened alone), ``statement`` (the cell's
    ``L<n>: ...`` range open at the peak, "" none) and ``nvtx_range`` (``domain:range`` of the
    innermost of the user's NVTX ranges open at the peak in that process, any thread; ""
    none). Largest peak first."""
    frame = _device_events(events)
    flags = mapped.flags(frame) if mapped is not None else np.zeros(len(frame), dtype=bool)
    timeline = memory_timeline(frame[~flags], capture_start_ns)  # the processes' own memory
    most_mapped = _most_in_use(frame[flags], capture_start_ns)
    rows = []
    for (device, pid), group in timeline.groupby(["device_id", "pid"], sort=True):
        use = group["bytes_in_use"].to_numpy(np.int64)
        delta = group["delta_bytes"].to_numpy(np.int64)[1:]  # the first row is the start
        at = int(np.argmax(use))  # the first maximum: the start row wins a tie
        peak_time = int(group["time_ns"].iloc[at])
        statement, phase = open_ranges_at(nvtx, int(pid), peak_time) if at else ("", "")
        rows.append(
            {
                "device_id": int(device),
                "pid": int(pid),
                "start_bytes": int(use[0]),
                "peak_bytes": int(use[at]),
                "end_bytes": int(use[-1]),
                "peak_time_ns": peak_time,
                "allocated_bytes": int(delta[delta > 0].sum()),
                "freed_bytes": int(-delta[delta < 0].sum()),
                "allocations": int((delta > 0).sum()),
                "frees": int((delta < 0).sum()),
                "mapped_bytes": most_mapped.get((int(device), int(pid)), 0) if mapped else pd.NA,
                "statement": statement,
                "nvtx_range": phase,
            }
        )
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in MEMORY_SUMMARY_COLUMNS})
    out = pd.DataFrame(rows)[MEMORY_SUMMARY_COLUMNS]
    out["mapped_bytes"] = out["mapped_bytes"].astype("Int64")
    return out.sort_values(["peak_bytes", "pid"], ascending=[False, True]).reset_index(drop=True)


CHART_ROWS = 2000  # steps per process the memory chart draws (the saved notebook holds them)


def chart_rows(
    timeline: pd.DataFrame, window: tuple[int, int] | None = None, rows: int = CHART_ROWS
) -> pd.DataFrame:
    """The timeline rows a chart draws: inside ``window`` (ns; the row in force at its start
    included), and at most ``rows`` per process: where there are more, the highest
    ``bytes_in_use`` of each of ``rows`` equal time bins (a peak is never binned away)."""
    frame = timeline
    if window is not None and len(frame):
        keep = frame["time_ns"].between(window[0], window[1])
        last_before = frame[frame["time_ns"] < window[0]].groupby(["device_id", "pid"]).tail(1)
        frame = pd.concat([last_before, frame[keep]]).sort_values("time_ns", kind="stable")
    parts = []
    for _, group in frame.groupby(["device_id", "pid"], sort=True):
        if len(group) > rows:
            edges = np.linspace(group["time_ns"].min(), group["time_ns"].max(), rows + 1)
            bins = np.clip(np.searchsorted(edges, group["time_ns"], side="right") - 1, 0, rows - 1)
            top = group.assign(_bin=bins).sort_values("bytes_in_use", ascending=False)
            group = top.drop_duplicates("_bin").sort_values("time_ns").drop(columns="_bin")
        parts.append(group)
    if not parts:
        return frame.iloc[0:0]
    return pd.concat(parts).sort_values("time_ns", kind="stable").reset_index(drop=True)


def open_ranges_at(nvtx: pd.DataFrame | None, pid: int, time_ns: int) -> tuple[str, str]:
    """(statement, nvtx range) open at ``time_ns`` in process ``pid`` on any thread: the cell's
    innermost ``L<n>: ...`` range of the nsight_magic domain, and ``domain:range`` of the
    innermost user range (PyTorch op ranges and nsight_magic's own left out); "" where none."""
    if nvtx is None or nvtx.empty:
        return "", ""
    open_ = nvtx[(nvtx["pid"] == pid) & (nvtx["start_ns"] <= time_ns) & (nvtx["end_ns"] >= time_ns)]
    if open_.empty:
        return "", ""
    open_ = open_.assign(_d=open_["end_ns"] - open_["start_ns"]).sort_values("_d", kind="stable")
    ours = open_["domain"].astype(str) == NVTX_DOMAIN
    statements = open_[
        ours & open_["range"].astype(str).map(lambda r: statement_line(r) is not None)
    ]
    user = open_[~ours.to_numpy() & ~op_range_mask(open_)]
    statement = str(statements["range"].iloc[0]) if len(statements) else ""
    phase = f"{user['domain'].iloc[0]}:{user['range'].iloc[0]}" if len(user) else ""
    return statement, phase


def _device_events(events: pd.DataFrame) -> pd.DataFrame:
    """Allocation and free events of device memory, in time order, then call order (the events
    before the capture all have time 0), allocs before frees at one call."""
    keep = events["memory_kind"].isin(DEVICE_KINDS) & events["operation"].isin(("alloc", "free"))
    frame = events.loc[keep]
    order = np.lexsort(
        (
            (frame["operation"] == "free").to_numpy(),
            frame["correlation_id"].to_numpy(),
            frame["time_ns"].to_numpy(),
        )
    )
    return frame.iloc[order]


def _most_in_use(frame: pd.DataFrame, capture_start_ns: float | None) -> dict[tuple[int, int], int]:
    """(device, pid) -> the most of ``frame``'s memory in use at once (its timeline's peak):
    for the mapping events alone, the most of the notebook's memory a process mapped."""
    if frame.empty:
        return {}
    timeline = memory_timeline(frame, capture_start_ns)
    peaks = timeline.groupby(["device_id", "pid"])["bytes_in_use"].max()
    return {(int(d), int(p)): int(v) for (d, p), v in peaks.items()}


def _deltas(group: pd.DataFrame) -> tuple[np.ndarray, int]:
    """(signed bytes per event of one process and device, bytes freed that the capture never saw
    allocated: those were in use when it started). A free takes the size its alloc had when the
    capture saw the alloc, else the size nsys gives the free."""
    live: dict[int, int] = {}
    before = 0
    out = np.zeros(len(group), dtype=np.int64)
    ops = group["operation"].to_numpy(dtype=object)
    sizes = group["bytes"].to_numpy(np.int64)
    addrs = group["address"].to_numpy(np.int64)
    for i in range(len(group)):
        if ops[i] == "alloc":
            live[int(addrs[i])] = int(sizes[i])
            out[i] = sizes[i]
        else:
            size = live.pop(int(addrs[i]), None)
            if size is None:
                size = int(sizes[i])
                before += size
            out[i] = -size
    return out, before


def _dtype(column: str) -> str:
    if column == "time_ns":
        return "float64"
    if column == "mapped_bytes":
        return "Int64"
    return "str" if column in ("operation", "statement", "nvtx_range") else "int64"
