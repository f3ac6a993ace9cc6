"""Join rows on a pair of integer ids, such as (pid, correlationId), with sorted arrays.

nsys links its tables through id pairs: a GPU op to the API call that launched it by
(process, correlationId), an NVTX range to its domain by (process, domainId). Joining millions
of rows through a pandas MultiIndex costs seconds; packing the pair into one int64 and
binary-searching a sorted copy costs a sort. Pure numpy, no I/O.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["first_match", "pack_pairs", "process_ids", "process_keys", "take_matched"]

_KEY_SPAN = 1 << 62  # keys stay below this, so they never overflow int64


def pack_pairs(
    a: np.ndarray, b: np.ndarray, *more: tuple[np.ndarray, np.ndarray]
) -> list[np.ndarray] | None:
    """One int64 key per (a, b) row, for the pair ``(a, b)`` and each pair in ``more``, packed
    on a common scale so equal pairs get equal keys across all of them; None when the ids span
    too wide a range for 63 bits (a damaged report with huge ids)."""
    pairs = [(np.asarray(a, np.int64), np.asarray(b, np.int64))]
    pairs += [(np.asarray(x, np.int64), np.asarray(y, np.int64)) for x, y in more]
    firsts = [x for x, _ in pairs if len(x)]
    seconds = [y for _, y in pairs if len(y)]
    if not firsts:
        return [np.zeros(0, dtype=np.int64) for _ in pairs]
    a_lo = min(int(x.min()) for x in firsts)
    a_hi = max(int(x.max()) for x in firsts)
    b_lo = min(int(y.min()) for y in seconds)
    b_hi = max(int(y.max()) for y in seconds)
    # Python ints: the span check itself cannot overflow.
    b_span = b_hi - b_lo + 1
    if (a_hi - a_lo + 1) * b_span >= _KEY_SPAN:
        return None
    return [(x - a_lo) * b_span + (y - b_lo) for x, y in pairs]


def process_keys(*frames: pd.DataFrame) -> list[str]:
    """The columns naming a process in all of ``frames`` (to group or join them on):
    ``report, pid`` in frames merged from several reports (pids repeat across nodes), else
    ``pid``."""
    return ["report", "pid"] if all("report" in f for f in frames) else ["pid"]


def process_ids(frame: pd.DataFrame) -> np.ndarray:
    """One int64 per row naming its process: the ``pid``, or in frames merged from several
    reports (``report`` column) the pair ``(report, pid)`` packed, since pids repeat across
    nodes (containers often give every rank the same pid). Use it for both sides of a join."""
    pid = frame["pid"].to_numpy(np.int64)
    if "report" not in frame:
        return pid
    return (frame["report"].to_numpy(np.int64) << 32) | pid  # pids fit in 22 bits


def first_match(
    ref_a: np.ndarray, ref_b: np.ndarray, query_a: np.ndarray, query_b: np.ndarray
) -> np.ndarray:
    """For each query pair ``(query_a[i], query_b[i])``, the index of the FIRST row ``j`` of the
    reference with ``(ref_a[j], ref_b[j])`` equal to it; -1 when none. int64, one per query.

    Stable sort + leftmost binary search, so among equal reference pairs the earliest row wins
    (nsys's reports keep the first API call per correlation id, the first domain creation)."""
    n_query = len(query_a)
    if n_query == 0 or len(ref_a) == 0:
        return np.full(n_query, -1, dtype=np.int64)
    keys = pack_pairs(ref_a, ref_b, (query_a, query_b))
    if keys is None:
        return _first_match_general(ref_a, ref_b, query_a, query_b)
    ref_key, query_key = keys
    # References usually come in key order already (API calls by correlation id): skip the sort.
    if bool(np.all(ref_key[1:] >= ref_key[:-1])):
        order = None
        ref_sorted = ref_key
    else:
        order = np.argsort(ref_key, kind="stable")
        ref_sorted = ref_key[order]
    pos = np.minimum(np.searchsorted(ref_sorted, query_key, side="left"), len(ref_sorted) - 1)
    hit = ref_sorted[pos] == query_key
    row = pos if order is None else order[pos]
    return np.where(hit, row, -1).astype(np.int64)


def take_matched(values: np.ndarray, rows: np.ndarray, missing: int = -1) -> np.ndarray:
    """``values[rows]`` where :func:`first_match` found a row, ``missing`` where it did not
    (-1 rows), as int64: e.g. the tid of the API call that launched each GPU op."""
    if len(values) == 0:
        return np.full(len(rows), missing, dtype=np.int64)
    taken = np.asarray(values)[np.maximum(rows, 0)]
    return np.where(rows >= 0, taken, missing).astype(np.int64)


def _first_match_general(
    ref_a: np.ndarray, ref_b: np.ndarray, query_a: np.ndarray, query_b: np.ndarray
) -> np.ndarray:
    """:func:`first_match` for ids too wide to pack: a MultiIndex lookup."""
    ref = pd.MultiIndex.from_arrays([np.asarray(ref_a, np.int64), np.asarray(ref_b, np.int64)])
    rows = pd.Series(np.arange(len(ref), dtype=np.int64), index=ref)[~ref.duplicated()]
    query = pd.MultiIndex.from_arrays(
        [np.asarray(query_a, np.int64), np.asarray(query_b, np.int64)]
    )
    return rows.reindex(query).fillna(-1).to_numpy(dtype=np.int64)
