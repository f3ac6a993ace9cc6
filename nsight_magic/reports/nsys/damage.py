"""Damage in an export that reads without error but would give wrong numbers silently: each
becomes one line of ``NsysReport.warnings`` (shown in the view's header), as
``durations.duration_warnings`` does for negative or absurd GPU op durations.

- a CUDA API or NVTX row whose start or end is far from every other (an int64 extreme, a
  negative time): the capture window stretches with it, and the GPU busy % over that window
  reads ~0% although nothing is wrong with the GPU rows;
- NVTX rows of an event type nsys does not define: they are not ranges this package reads;
- the same kernel row twice (same start, end, device, stream and correlation id): every total
  counts it twice (``nsys stats`` would too: it is the export that is wrong);
- negative byte counts of copies or sets: sizes and bandwidths built on them are impossible;
- an event table stored as a SQLite VIEW, not a table as nsys writes it: read as it is, but the
  file was built or edited by something else.

Every check reads only columns the frames have loaded already, or one small query."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .durations import ABSURD_NS
from .source import ExportSource

__all__ = [
    "NVTX_EVENT_TYPES",
    "byte_warnings",
    "duplicate_warnings",
    "nvtx_type_warnings",
    "time_warnings",
    "view_warnings",
]

# ENUM_NSYS_EVENT_TYPE's NVTX kinds (nsys 2023-2025): marks, categories, ranges, domains, thread
# and CUDA object names. Rows of these kinds that are not ranges are skipped on purpose.
NVTX_EVENT_TYPES = frozenset({*range(32, 40), 59, 60, *range(64, 77), 97, 98, 99})
_FIX = "export the .nsys-rep again"


def _far_rows(what: str, start: np.ndarray, end: np.ndarray, centre: int) -> list[str]:
    """A line when rows of ``what`` end before they start, or lie over a day from ``centre``
    (the median start of the GPU ops)."""
    out: list[str] = []
    if not len(start):
        return out
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    valid_end = end >= 0  # an unclosed range or call has no end (-1)
    negative = int((valid_end & (end < start)).sum())
    with np.errstate(over="ignore"):
        far_start = np.abs(start.astype(np.float64) - centre) > ABSURD_NS
        far_end = valid_end & (np.abs(end.astype(np.float64) - centre) > ABSURD_NS)
    far = int((far_start | far_end).sum())
    if negative:
        out.append(
            f"{negative:,} of {len(start):,} {what} rows end before they start: the export is "
            f"damaged, so durations that include them are wrong; {_FIX}."
        )
    if far:
        out.append(
            f"{far:,} of {len(start):,} {what} rows start or end over a day away from the GPU "
            "work: the export is damaged, so the capture window and the GPU busy % over it are "
            f"wrong; {_FIX}."
        )
    return out


def time_warnings(
    api_start: np.ndarray, api_end: np.ndarray, nvtx: pd.DataFrame, gpu_starts: np.ndarray
) -> list[str]:
    """CUDA API and NVTX rows with impossible times, judged against the GPU ops' starts (or,
    without GPU ops, against the API calls' own)."""
    base = gpu_starts if len(gpu_starts) else np.asarray(api_start)
    if not len(base):
        return []
    centre = int(np.median(np.asarray(base, np.float64)))
    out = _far_rows("CUDA API", api_start, api_end, centre)
    if len(nvtx):
        out += _far_rows(
            "NVTX", nvtx["start_ns"].to_numpy(np.int64), nvtx["end_ns"].to_numpy(np.int64), centre
        )
    return out


def nvtx_type_warnings(src: ExportSource) -> list[str]:
    """NVTX_EVENTS rows of an event type nsys does not define (they are never read)."""
    types = src.distinct_ints("NVTX_EVENTS", "eventType")
    unknown = sorted(int(t) for t in types if int(t) not in NVTX_EVENT_TYPES)
    if not unknown:
        return []
    return [
        f"NVTX_EVENTS holds rows of event type {', '.join(map(str, unknown))}, which nsys does "
        "not define; they were left out, so ranges may be missing: the export is damaged or "
        f"from an nsys this package does not know; {_FIX}."
    ]


def duplicate_warnings(kernels: pd.DataFrame) -> list[str]:
    """Kernel rows that repeat another exactly (counted twice by every total)."""
    keys = ["start_ns", "end_ns", "device_id", "stream_id", "correlation_id"]
    if kernels.empty or not set(keys) <= set(kernels.columns):
        return []
    twice = int(kernels.duplicated(subset=keys).sum())
    if not twice:
        return []
    return [
        f"{twice:,} of {len(kernels):,} kernel rows repeat another row exactly (same start, end, "
        "device, stream and correlation id): the export is damaged, so instance counts and "
        f"total times count them twice; {_FIX}."
    ]


def byte_warnings(memcpy: pd.DataFrame, memset: pd.DataFrame) -> list[str]:
    out = []
    for what, frame in (("memcpy", memcpy), ("memset", memset)):
        if frame.empty or "bytes" not in frame:
            continue
        negative = int((frame["bytes"].to_numpy() < 0).sum())
        if negative:
            out.append(
                f"{negative:,} of {len(frame):,} {what} rows have a negative byte count: the "
                f"export is damaged, so sizes and bandwidths that include them are wrong; {_FIX}."
            )
    return out


def view_warnings(src: ExportSource) -> list[str]:
    if not src.views:
        return []
    return [
        f"{', '.join(sorted(src.views))}: stored as a view, not as the table nsys writes: read "
        "as it is, but the file was built or edited by something other than nsys; "
        f"{_FIX} if the numbers look wrong."
    ]
