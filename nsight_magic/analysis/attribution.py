"""Which NVTX ranges a GPU operation belongs to: nsys's rule, written once.

A GPU op (kernel, memcpy, memset) belongs to an NVTX range when the CUDA API call that launched
it (joined on process + correlation id) lies inside the range, on the range's own thread; ranges
that end on another thread are left out. This is how ``nsys stats`` projects NVTX ranges onto
the GPU (``nvtx_gpu_proj_trace``); ``nvtx_projection`` projects with :func:`enclosed_calls`,
the picker filters with :func:`kernels_in_range`, and ``torch_ops`` finds each kernel's PyTorch
op with :func:`innermost_enclosing`, so all three agree.

API calls of one thread run one after another, so sorted by (process, thread, call start) the
calls a range encloses are one contiguous slice, found with two binary searches per range.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .nvtx_nesting import nesting, thread_order

__all__ = [
    "Calls",
    "enclosed_any_thread",
    "enclosed_calls",
    "innermost_enclosing",
    "kernels_in_phase",
    "kernels_in_range",
    "launch_calls",
]


@dataclass(frozen=True)
class Calls:
    """The launching API call of each GPU op, sorted by (pid, tid, start, correlation id):
    ``start``/``end`` are the call's times; ``row`` the op's position in the frame it came
    from."""

    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    row: np.ndarray

    def __len__(self) -> int:
        return len(self.pid)


def launch_calls(ops: pd.DataFrame, launches: pd.DataFrame) -> Calls:
    """Join GPU ops (``pid, correlation_id``) to the calls that launched them (``cuda_api()``
    rows: ``pid, correlation_id, tid, start_ns, end_ns``). Ops without a recorded call (or
    with a NULL id, -1) are dropped, as nsys's inner join drops them."""
    keys = ["pid", "correlation_id"]
    left = pd.DataFrame(
        {
            "pid": ops["pid"].to_numpy(),
            "correlation_id": ops["correlation_id"].to_numpy(),
            "row": np.arange(len(ops), dtype=np.int64),
        }
    )
    calls = launches[[*keys, "tid", "start_ns", "end_ns"]].drop_duplicates(keys)
    joined = left[left["correlation_id"] >= 0].merge(calls, on=keys, how="inner")
    joined = joined.sort_values(["pid", "tid", "start_ns", "correlation_id"], kind="stable")
    return Calls(
        joined["pid"].to_numpy(np.int64),
        joined["tid"].to_numpy(np.int64),
        joined["start_ns"].to_numpy(np.int64),
        joined["end_ns"].to_numpy(np.int64),
        joined["row"].to_numpy(np.int64),
    )


def _segments(pid: np.ndarray, tid: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> [lo, hi) of a (pid, tid)-sorted array."""
    if len(pid) == 0:
        return {}
    change = np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]
    starts = np.flatnonzero(change)
    ends = np.r_[starts[1:], len(pid)]
    return {(int(pid[s]), int(tid[s])): (int(s), int(e)) for s, e in zip(starts, ends, strict=True)}


def enclosed_calls(
    calls: Calls, ranges: pd.DataFrame, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per range (``pid, tid, start_ns, end_ns``): ``[lo, hi)`` positions in ``calls`` of the
    calls on the range's thread that start at or after its start and end by its end (empty,
    lo == hi, when none). ``order`` is :func:`thread_order` of ``ranges`` if the caller has it."""
    n = len(ranges)
    lo = np.zeros(n, dtype=np.int64)
    hi = np.zeros(n, dtype=np.int64)
    if not len(calls) or not n:
        return lo, hi
    order = thread_order(ranges) if order is None else order
    segs = _segments(calls.pid, calls.tid)
    pid, tid = ranges["pid"].to_numpy(), ranges["tid"].to_numpy()
    r_lo, r_hi = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    for key, (a, b) in _segments(pid[order], tid[order]).items():  # one pass per thread
        if key not in segs:
            continue
        mine = order[a:b]
        s, e = segs[key]
        # Calls of one thread are sequential; the running max guards odd overlaps.
        ends = np.maximum.accumulate(calls.end[s:e])
        lo[mine] = s + np.searchsorted(calls.start[s:e], r_lo[mine], side="left")
        hi[mine] = s + np.searchsorted(ends, r_hi[mine], side="right")
    return lo, hi


def enclosed_any_thread(
    pid: np.ndarray, start: np.ndarray, end: np.ndarray, ranges: pd.DataFrame
) -> Iterator[tuple[int, np.ndarray]]:
    """The phase rule (``analysis.phases``): per range (``pid, start_ns, end_ns``; position i),
    the positions of the calls (``pid, start, end``, sorted by (pid, start)) of the range's
    process, on ANY thread, that start at or after its start and end by its end. Yields
    ``(i, positions)`` for ranges that enclose some call. One binary search per range, then a
    check of the calls that started inside it (calls of other threads may outlive it)."""
    if not len(pid) or not len(ranges):
        return
    pids, first = np.unique(pid, return_index=True)
    last = np.r_[first[1:], len(pid)]
    bounds = {int(p): (int(a), int(b)) for p, a, b in zip(pids, first, last, strict=True)}
    r_pid, r_lo, r_hi = (ranges[c].to_numpy(np.int64) for c in ("pid", "start_ns", "end_ns"))
    for i in range(len(ranges)):
        seg = bounds.get(int(r_pid[i]))
        if seg is None:
            continue
        a, b = seg
        lo = a + int(np.searchsorted(start[a:b], r_lo[i], side="left"))
        hi = a + int(np.searchsorted(start[a:b], r_hi[i], side="right"))
        inside = np.flatnonzero(end[lo:hi] <= r_hi[i]) + lo
        if len(inside):
            yield i, inside


def _same_thread(nvtx: pd.DataFrame) -> np.ndarray:
    """Mask of the ranges nsys attributes work to: those that end on the thread they began."""
    if "end_tid" not in nvtx:
        return np.ones(len(nvtx), dtype=bool)
    return (nvtx["end_tid"] == nvtx["tid"]).to_numpy()


def kernels_in_range(
    kernels: pd.DataFrame, launches: pd.DataFrame, nvtx: pd.DataFrame, domain: str, range: str
) -> pd.DataFrame:
    """The rows of ``kernels`` (or any GPU-op frame with ``pid, correlation_id``) launched
    inside an instance of NVTX range ``domain``/``range`` (``domain`` "" for the default one),
    by nsys's rule: the launching call lies inside the range on the range's own thread.

    ``launches``: ``cuda_api()``; ``nvtx``: ``nvtx()``. Returns the matching rows in their
    original order and index. Over kernels + memcpy + memset rows, the number of distinct
    launching calls (``pid, correlation_id``; one CUDA graph launch runs several kernel nodes)
    is ``nvtx_gpu_projection()``'s ``gpu_ops`` for the range."""
    match = (nvtx["domain"] == domain).to_numpy() & (nvtx["range"] == range).to_numpy()
    ranges = nvtx.loc[match & _same_thread(nvtx), ["pid", "tid", "start_ns", "end_ns"]]
    calls = launch_calls(kernels, launches)
    lo, hi = enclosed_calls(calls, ranges)
    # Mark every call inside any instance: +1 at each slice start, -1 at its end.
    cover = np.zeros(len(calls) + 1, dtype=np.int64)
    np.add.at(cover, lo, 1)
    np.add.at(cover, hi, -1)
    inside = np.cumsum(cover[:-1]) > 0
    return kernels.iloc[np.sort(calls.row[inside])]


def kernels_in_phase(
    kernels: pd.DataFrame, launches: pd.DataFrame, nvtx: pd.DataFrame, domain: str, range: str
) -> pd.DataFrame:
    """The rows of ``kernels`` launched by ANY thread of the range's process while an instance
    of NVTX range ``domain``/``range`` was open (the phase rule, :func:`enclosed_any_thread`;
    a backward pass's kernels come from autograd's thread). Same inputs and output as
    :func:`kernels_in_range`."""
    match = (nvtx["domain"] == domain).to_numpy() & (nvtx["range"] == range).to_numpy()
    ranges = nvtx.loc[match, ["pid", "start_ns", "end_ns"]]
    calls = launch_calls(kernels, launches)
    order = np.lexsort((calls.start, calls.pid))
    inside = np.zeros(len(calls), dtype=bool)
    for _, hit in enclosed_any_thread(calls.pid[order], calls.start[order], calls.end[order],
                                      ranges):  # fmt: skip
        inside[order[hit]] = True
    return kernels.iloc[np.sort(calls.row[inside])]


def innermost_enclosing(calls: Calls, ranges: pd.DataFrame) -> np.ndarray:
    """For each call, the position (``iloc``) in ``ranges`` of the innermost range on its
    thread that encloses it (call start >= range start, call end <= range end), -1 when none.
    Ranges that end on another thread are ignored; the others must nest per thread, as
    push/pop ranges (PyTorch's op ranges among them) do."""
    out = np.full(len(calls), -1, dtype=np.int64)
    keep = np.flatnonzero(_same_thread(ranges))
    if not len(calls) or not len(keep):
        return out
    mine = ranges.iloc[keep]
    order = thread_order(mine)
    parent = nesting(mine, order).parent
    start = mine["start_ns"].to_numpy()[order]
    end = mine["end_ns"].to_numpy()
    segs = _segments(mine["pid"].to_numpy()[order], mine["tid"].to_numpy()[order])
    for key, (a, b) in _segments(calls.pid, calls.tid).items():
        if key not in segs:
            continue
        s, e = segs[key]
        # The last range to start by the call's start; its ancestors are the other candidates.
        k = np.searchsorted(start[s:e], calls.start[a:b], side="right") - 1
        out[a:b] = np.where(k >= 0, order[s + np.maximum(k, 0)], -1)
    for _ in range(len(mine)):  # climb out of ranges that ended before the call did
        bad = np.flatnonzero(out >= 0)
        bad = bad[end[out[bad]] < calls.end[bad]]
        if not len(bad):
            break
        out[bad] = parent[out[bad]]
    return np.where(out >= 0, keep[np.maximum(out, 0)], -1)
