"""Damage in an export that reads without error but would give wrong numbers silently: each
becomes one line of ``NsysReport.warnings`` (shown in the view's header), as
``durations.duration_warnings`` does for negative or absurd GPU op durations.

- a row of any table whose time lies outside the capture window nsys recorded
  (``ANALYSIS_DETAILS.duration``: event times run from 0 to it), ``window_warnings``: an int64
  extreme, a kernel moved days later or lasting hours in a one-second capture, an API call at
  t = -1: the capture window (the span of the rows) stretches with it, and the GPU busy % and
  the totals read wrong although each row alone looks fine. An export without that table is
  judged as before: API and NVTX rows over a day from the GPU work (``time_warnings``);
- NVTX rows of an event type nsys does not define: they are not ranges this package reads;
- the same row twice in an activity table (kernels, copies, sets, graph launches, CUDA API
  calls, NVTX ranges): every total counts it twice (``nsys stats`` would too: it is the
  export that is wrong);
- negative or impossibly large byte counts of copies or sets (over 1 PiB in one op, or over
  100 TB/s; an int64 extreme would overflow every int64 total): sizes and bandwidths built on
  them are wrong;
- an event table stored as a SQLite VIEW, not a table as nsys writes it: read as it is, but the
  file was built or edited by something else.

Every check reads only columns the frames have loaded already, or one small query."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...errors import ReportError
from .durations import ABSURD_NS
from .source import ExportSource

__all__ = [
    "CAPTURED_TABLES",
    "MAX_OP_BYTES",
    "NVTX_EVENT_TYPES",
    "SLACK_NS",
    "byte_warnings",
    "duplicate_rows",
    "duplicate_warnings",
    "nvtx_type_warnings",
    "recorded_window",
    "time_warnings",
    "view_warnings",
    "window_warnings",
]

# ENUM_NSYS_EVENT_TYPE's NVTX kinds (nsys 2023-2025): marks, categories, ranges, domains, thread
# and CUDA object names. Rows of these kinds that are not ranges are skipped on purpose.
NVTX_EVENT_TYPES = frozenset({*range(32, 40), 59, 60, *range(64, 77), 97, 98, 99})
_FIX = "export the .nsys-rep again"

# Tables whose rows nsys records only while it captures: in every real export (tests/data) their
# times lie in [0, duration] but for the last API call, which may end just after the stop.
CAPTURED_TABLES = frozenset({
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUDA_GPU_MEMORY_USAGE_EVENTS",
})  # fmt: skip
# past the recorded stop: the real exports overshoot by < 1 ms (API), 0.5 s (an OS call)
SLACK_NS = 10**9
# what one copy or set can move: no GPU has 1 PiB of memory
MAX_OP_BYTES = 2**50
# bytes per ns (GB/s) no copy or set reaches: HBM3e gives ~5,000; the real exports peak at 1,455
MAX_GB_PER_S = 100_000
_TIME_COLUMNS = ("start", "end", "timestamp")


def recorded_window(src: ExportSource) -> tuple[tuple[int, int] | None, list[str]]:
    """The capture window nsys recorded, (0, ANALYSIS_DETAILS.duration) in the events' own
    time base, and a warning when that table is there but holds no single positive duration
    (then None: the rows are judged against the GPU work instead)."""
    if not src.has("ANALYSIS_DETAILS") or "duration" not in src.columns_of("ANALYSIS_DETAILS"):
        return None, []
    durations = {int(d) for d in src.read_columns("ANALYSIS_DETAILS", {"duration": "i"}).ints[
        "duration"]}  # fmt: skip
    if not durations:
        return None, []
    if len(durations) == 1 and (d := durations.pop()) > 0:
        return (0, d), []
    return None, [
        "ANALYSIS_DETAILS does not hold one positive capture duration, so the capture window "
        "nsys recorded is unknown and times are checked against the GPU work only: the "
        f"export is damaged or was edited; {_FIX}."
    ]


def _bounds(table: str, duration: int) -> tuple[int, int, str]:
    """(lowest, highest) time a real row of ``table`` holds, and the rule in words."""
    if table in CAPTURED_TABLES:
        return 0, duration + SLACK_NS, "1 s of slack after its end"
    if table == "NVTX_EVENTS":  # a range may open long before the capture (a warm worker's)
        return -ABSURD_NS, duration + SLACK_NS, "ranges opening up to a day before it"
    return -ABSURD_NS, duration + ABSURD_NS, "a day of slack either side"


def window_warnings(src: ExportSource, window: tuple[int, int]) -> list[str]:
    """One line per table whose start/end/timestamp values lie outside ``window`` (more than
    the table's slack, ``_bounds``), naming the table, the row count and the first rows."""
    out: list[str] = []
    duration = window[1] - window[0]
    for table in sorted(src.tables):
        try:
            columns = tuple(c for c in _TIME_COLUMNS if c in src.columns_of(table))
            if not columns:
                continue
            lo, hi, rule = _bounds(table, duration)
            count, first = src.rows_outside(table, columns, window[0] + lo, window[0] + hi)
            total = src.num_rows(table) if count else 0
        except ReportError as exc:  # a table no frame reads may be beyond reading: say so
            out.append(f"{table}: its times could not be checked ({exc})")
            continue
        if not count:
            continue
        rows = "; ".join(
            f"row {row}: " + ", ".join(f"{c} {v}" for c, v in values.items() if v is not None)
            for row, values in first
        )
        out.append(
            f"{count:,} of {total:,} {table} rows lie outside the capture window nsys recorded "
            f"(0 to {duration / 1e9:,.3f} s, with {rule}) ({rows}): the export is "
            "damaged or was edited, so the capture window, the GPU busy % and the totals that "
            f"include them are wrong; {_FIX}."
        )
    return out


def _far_rows(what: str, start: np.ndarray, end: np.ndarray, centre: int | None) -> list[str]:
    """A line when rows of ``what`` end before they start, or lie over a day from ``centre``
    (the median start of the GPU ops; None: not judged so)."""
    out: list[str] = []
    if not len(start):
        return out
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    valid_end = end >= 0  # an unclosed range or call has no end (-1)
    negative = int((valid_end & (end < start)).sum())
    with np.errstate(over="ignore"):
        far_start = np.abs(start.astype(np.float64) - (centre or 0)) > ABSURD_NS
        far_end = valid_end & (np.abs(end.astype(np.float64) - (centre or 0)) > ABSURD_NS)
    far = int((far_start | far_end).sum()) if centre is not None else 0
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
    api_start: np.ndarray,
    api_end: np.ndarray,
    nvtx: pd.DataFrame,
    gpu_starts: np.ndarray,
    far: bool = True,
) -> list[str]:
    """CUDA API and NVTX rows that end before they start and (``far``: when the export has no
    recorded window to judge them by) rows far from the GPU ops' starts (or, without GPU ops,
    from the API calls' own)."""
    base = gpu_starts if len(gpu_starts) else np.asarray(api_start)
    if not len(base):
        return []
    centre = int(np.median(np.asarray(base, np.float64))) if far else None
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


def duplicate_rows(what: str, table: str, frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """A line when rows of ``frame`` (read from ``table``) repeat another in every ``keys``
    column, naming the table, the count and the first repeat's start."""
    keys = [k for k in keys if k in frame.columns]
    if frame.empty or not keys:
        return []
    again = frame.duplicated(subset=keys).to_numpy()
    twice = int(again.sum())
    if not twice:
        return []
    where = ""
    if "start_ns" in frame:
        where = f"; the first at start {int(frame['start_ns'].to_numpy()[again][0]):,} ns"
    return [
        f"{twice:,} of {len(frame):,} {what} rows repeat another row exactly ({table}{where}): "
        f"the export is damaged, so instance counts and totals count them twice; {_FIX}."
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
    """Copies and sets of a negative or impossible (over ``MAX_OP_BYTES``) byte count."""
    out = []
    for what, frame in (("memcpy", memcpy), ("memset", memset)):
        if frame.empty or "bytes" not in frame:
            continue
        nbytes = frame["bytes"].to_numpy()
        negative, huge = int((nbytes < 0).sum()), int((nbytes > MAX_OP_BYTES).sum())
        dur = frame["duration_ns"].to_numpy(np.float64) if "duration_ns" in frame else None
        fast = 0
        if dur is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                fast = int(((dur > 0) & (nbytes.astype(np.float64) / dur > MAX_GB_PER_S)).sum())
        if negative:
            out.append(
                f"{negative:,} of {len(frame):,} {what} rows have a negative byte count: the "
                f"export is damaged, so sizes and bandwidths that include them are wrong; {_FIX}."
            )
        if huge:
            out.append(
                f"{huge:,} of {len(frame):,} {what} rows move over 1 PiB in one op (up to "
                f"{int(nbytes.max()):,} bytes): the export is damaged, so sizes and bandwidths "
                f"that include them are wrong; {_FIX}."
            )
        if fast and not huge:
            out.append(
                f"{fast:,} of {len(frame):,} {what} rows move over {MAX_GB_PER_S:,} GB/s (bytes "
                "over duration), faster than any GPU memory: the export is damaged, so sizes and "
                f"bandwidths that include them are wrong; {_FIX}."
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
