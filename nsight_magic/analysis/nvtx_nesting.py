"""Nesting of NVTX ranges per thread: row order, depth and parents.

Pure functions over an ``nvtx()`` frame (``pid, tid, start_ns, end_ns``); the loaders use them to
fill ``level`` and the projection to find parents, the way nsys's own reports nest ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["nesting_levels", "parent_rows", "thread_order"]


def thread_order(nvtx: pd.DataFrame) -> np.ndarray:
    """Row order of NVTX ranges by (pid, tid, start, longest first)."""
    pid, tid = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
    start, end = nvtx["start_ns"].to_numpy(), nvtx["end_ns"].to_numpy()
    if len(pid) and min(pid.min(), tid.min()) >= 0 and max(pid.max(), tid.max()) < 1 << 24:
        return np.lexsort((-end, start, (pid.astype(np.int64) << 24) | tid))  # 24-bit ids
    return np.lexsort((-end, start, tid, pid))


def nesting_levels(nvtx: pd.DataFrame, order: np.ndarray | None = None) -> np.ndarray:
    """Depth of each range among the ranges of its (pid, tid): how many enclose it.

    Ranges of one thread nest (push/pop always; start/end in practice), so after sorting by
    (thread, start, longest first) the ranges enclosing one are those started before it that
    have not ended by its start: depth = rank in thread - ranges of the thread ended by then.
    ``order`` is :func:`thread_order` of ``nvtx`` when the caller has it already."""
    n = len(nvtx)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pid, tid = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
    start, end = nvtx["start_ns"].to_numpy(), nvtx["end_ns"].to_numpy()
    order = thread_order(nvtx) if order is None else order
    thread = _group_ids(pid[order], tid[order])
    first = np.r_[0, np.flatnonzero(np.diff(thread)) + 1]
    sizes = np.diff(np.r_[first, n])
    rank = np.arange(n) - np.repeat(first, sizes)
    # Count, per thread, ends <= this start: search the thread's sorted ends.
    s_start, s_end = start[order], end[order]
    done = np.empty(n, dtype=np.int64)
    for lo, size in zip(first, sizes, strict=True):  # one pass per thread, not per row
        seg = np.sort(s_end[lo : lo + size])
        done[lo : lo + size] = np.searchsorted(seg, s_start[lo : lo + size], side="right")
    # A zero-length range ending at its own start counts itself; never below 0.
    depth = np.maximum(rank - done, 0)
    out = np.empty(n, dtype=np.int64)
    out[order] = depth
    return out


def parent_rows(
    nvtx: pd.DataFrame, level: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """Position of each range's parent (-1 at level 0): the last range before it, in (thread,
    start, longest first) order (``order``, computed when not given), one level up
    (``level`` = :func:`nesting_levels`). Ranges nest, so that one encloses it."""
    n = len(nvtx)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    if order is None:
        order = thread_order(nvtx)
    lvl = level[order]
    for d in range(1, int(lvl.max()) + 1 if n else 0):  # one pass per nesting level
        up = np.flatnonzero(lvl == d - 1)
        here = np.flatnonzero(lvl == d)
        if len(up) == 0 or len(here) == 0:
            continue
        k = np.searchsorted(up, here, side="right") - 1
        ok = k >= 0
        parent[order[here[ok]]] = order[up[k[ok]]]
    return parent


def _group_ids(*keys: np.ndarray) -> np.ndarray:
    """Dense ids of consecutive equal key tuples (keys already sorted)."""
    change = np.zeros(len(keys[0]), dtype=bool)
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.cumsum(change)
