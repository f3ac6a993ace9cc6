"""Nesting of NVTX ranges per thread: row order, depth and parents, by nsys's rule.

nsys's projection reports (``nvtx_gpu_proj_trace``, whose ``Lvl`` and ``NumChild`` the summary
averages) give each range a parent: the shortest range of the same thread that encloses it
(starts at or before it and ends at or after it), and a level: its depth in that parent tree
(0 = no parent). Push/pop ranges nest, so there the parent is simply the innermost range open
at its start. A start/end range need not nest: ``generate`` below starts inside the push/pop
statement ``L1`` and outlives it, so ``L1`` does not enclose it, and its parent is ``cell``::

    cell   [--------------------------------------------]
    L1      [---]
    generate  [--------------------------------]
    L2           [------]   L3 [-------]       L4 [----]

Levels: cell 0; L1, generate and L4 1; L2 and L3 2 (their parent is ``generate``). Ranges of
identical extent: the one first in row order is the other's parent (nsys leaves that pair
without a defined order).

Pure functions over an ``nvtx()`` frame (``pid, tid, start_ns, end_ns``); the loader fills
``level`` with them and the projection and the op attribution take parents from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Nesting", "nesting", "nesting_levels", "thread_order"]


@dataclass(frozen=True)
class Nesting:
    """Per range (positions as in the frame given): ``level`` (0 = outermost) and ``parent``
    (position of the enclosing range, -1 at level 0)."""

    level: np.ndarray
    parent: np.ndarray


def thread_order(nvtx: pd.DataFrame) -> np.ndarray:
    """Row order of NVTX ranges by (pid, tid, start, longest first); stable for equal ranges."""
    pid, tid = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
    start, end = nvtx["start_ns"].to_numpy(), nvtx["end_ns"].to_numpy()
    if len(pid) and min(pid.min(), tid.min()) >= 0 and max(pid.max(), tid.max()) < 1 << 24:
        return np.lexsort((-end, start, (pid.astype(np.int64) << 24) | tid))  # 24-bit ids
    return np.lexsort((-end, start, tid, pid))


def nesting(nvtx: pd.DataFrame, order: np.ndarray | None = None) -> Nesting:
    """Level and parent of every range (the rule in the module docstring). ``order`` is
    :func:`thread_order` of ``nvtx`` when the caller has it already.

    Fast path, vectorised: in (thread, start, longest first) order, the ranges open at a
    range's start (started before it, not ended before its start) are its enclosers when the
    thread's ranges nest, so depth = rank in thread - ranges ended before its start, and the
    parent is the last range before it one level up. When some range's parent so found ends
    before the range does (or lies on another thread), that thread's ranges overlap partly:
    the first such range in a thread always shows it. Those threads (only) are walked range
    by range (:func:`_walk`)."""
    n = len(nvtx)
    if n == 0:
        return Nesting(np.zeros(0, dtype=np.int64), np.full(0, -1, dtype=np.int64))
    pid, tid = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
    start = nvtx["start_ns"].to_numpy().astype(np.int64)
    end = nvtx["end_ns"].to_numpy().astype(np.int64)
    order = thread_order(nvtx) if order is None else order
    thread = _group_ids(pid[order], tid[order])
    first = np.r_[0, np.flatnonzero(np.diff(thread)) + 1]
    sizes = np.diff(np.r_[first, n])
    rank = np.arange(n) - np.repeat(first, sizes)
    s_start, s_end = start[order], end[order]
    done = np.empty(n, dtype=np.int64)
    for lo, size in zip(first, sizes, strict=True):  # one pass per thread, not per row
        seg = np.sort(s_end[lo : lo + size])
        # ended strictly before the start: a range ending where another starts encloses a
        # zero-length range there (nsys's rule), so it stays open for the check below
        done[lo : lo + size] = np.searchsorted(seg, s_start[lo : lo + size], side="left")
    lvl = rank - done
    parent = _last_one_level_up(lvl)
    mine = parent >= 0
    bad = np.zeros(n, dtype=bool)
    # a parent on another thread, or one that ends first: this thread's ranges overlap partly
    bad[mine] = (s_end[parent[mine]] < s_end[mine]) | (thread[parent[mine]] != thread[mine])
    if bad.any():
        for t in np.unique(thread[bad]):
            a = int(first[t])
            b = a + int(sizes[t])
            lvl[a:b], parent[a:b] = _walk(s_start[a:b], s_end[a:b])
            parent[a:b] = np.where(parent[a:b] >= 0, parent[a:b] + a, -1)
    level = np.empty(n, dtype=np.int64)
    level[order] = lvl
    out_parent = np.empty(n, dtype=np.int64)
    out_parent[order] = np.where(parent >= 0, order[np.maximum(parent, 0)], -1)
    return Nesting(level, out_parent)


def nesting_levels(nvtx: pd.DataFrame, order: np.ndarray | None = None) -> np.ndarray:
    """:func:`nesting`'s ``level`` alone (the ``level`` column of ``nvtx()``)."""
    return nesting(nvtx, order).level


def _last_one_level_up(lvl: np.ndarray) -> np.ndarray:
    """Per position of a thread-ordered array of levels: the last earlier position one level
    up (-1 at level 0). Positions of other threads never match: a thread starts at level 0."""
    parent = np.full(len(lvl), -1, dtype=np.int64)
    for d in range(1, int(lvl.max()) + 1 if len(lvl) else 0):  # one pass per nesting level
        up = np.flatnonzero(lvl == d - 1)
        here = np.flatnonzero(lvl == d)
        if len(up) == 0 or len(here) == 0:
            continue
        k = np.searchsorted(up, here, side="right") - 1
        ok = k >= 0
        parent[here[ok]] = up[k[ok]]
    return parent


def _walk(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Levels and parents (positions) of one thread's ranges in thread order, by the rule
    itself: the parent is the shortest range still open at the start that ends at or after
    the end (the latest such on equal lengths). Costs one step per range and open range."""
    n = len(start)
    level = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    open_: list[int] = []
    for i in range(n):
        s, e = int(start[i]), int(end[i])
        open_ = [j for j in open_ if end[j] >= s]
        best = -1
        for j in open_:
            if end[j] >= e and (best < 0 or end[j] - start[j] <= end[best] - start[best]):
                best = j
        if best >= 0:
            parent[i] = best
            level[i] = level[best] + 1
        open_.append(i)
    return level, parent


def _group_ids(*keys: np.ndarray) -> np.ndarray:
    """Dense ids of consecutive equal key tuples (keys already sorted)."""
    change = np.zeros(len(keys[0]), dtype=bool)
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.cumsum(change)
