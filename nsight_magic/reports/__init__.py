"""``open_report(path)``: look at what the path is and open it as the right report."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import (
    BadArgumentError,
    CorruptReportError,
    EmptyReportError,
    ReportError,
    ReportNotFoundError,
    UnsupportedReportError,
)
from .paths import is_parquet_export, require_regular_file

__all__ = ["open_report", "report_kind"]

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # how nsys .nsys-rep files begin (2025.3)
NCU_REP_MAGIC = b"NVR\x00"


def report_kind(path: str | Path) -> str:
    """ "nsys-sqlite", "nsys-parquet", "nsys-rep" or "ncu-rep", from the content (magic bytes,
    dir contents), the suffix only breaking ties. Raises the ReportError for what is wrong."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise BadArgumentError(
            f"a report path is a str or Path, not {type(path).__name__}; pass the path of a "
            ".nsys-rep, .sqlite, parquet dir or .ncu-rep."
        )
    path = Path(path)
    if "\x00" in str(path):
        raise ReportNotFoundError(f"{str(path)!r} holds a NUL byte; pass a report path.")
    if not path.exists():
        raise ReportNotFoundError(f"{path} does not exist; check the path or the run folder.")
    if path.is_dir():
        if is_parquet_export(path):
            return "nsys-parquet"
        if not any(path.iterdir()):
            raise EmptyReportError(f"{path} is an empty folder; point at a report file instead.")
        raise UnsupportedReportError(
            f"{path} is a folder without .parquet tables; pass a .nsys-rep, .sqlite, "
            "parquet dir or .ncu-rep."
        )
    require_regular_file(path)  # a named pipe would block the read below forever
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise CorruptReportError(f"{path} cannot be read ({exc}); check its permissions.") from exc
    if size == 0:
        raise EmptyReportError(
            f"{path} is empty (0 bytes); the profiler probably stopped before writing it, so "
            "profile again."
        )
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(NCU_REP_MAGIC):
        return "ncu-rep"
    if head.startswith(NSYS_REP_MAGIC):
        return "nsys-rep"
    suffix = path.suffix.lower()
    if suffix in (".sqlite", ".nsys-rep", ".qdrep", ".ncu-rep"):
        raise CorruptReportError(
            f"{path} does not look like a {suffix} file inside (it is damaged or truncated); "
            "profile again or re-export it."
        )
    raise UnsupportedReportError(
        f"{path} is not a report this package reads; pass a .nsys-rep, .sqlite, parquet dir "
        "or .ncu-rep."
    )


def open_report(path: str | Path) -> Any:
    """Open ``path`` as an ``NsysReport`` (.sqlite, parquet dir, .nsys-rep) or an ``NcuReport``
    (.ncu-rep). Only ``ReportError`` subclasses (and ``ToolNotFoundError`` when a .nsys-rep
    needs nsys) come out for bad input."""
    kind = report_kind(path)
    opener: Callable[[str | Path], object]
    if kind == "ncu-rep":
        from .ncu.report import NcuReport  # lazy: report_kind() needs no pandas

        opener = NcuReport.open
    else:
        from .nsys.report import NsysReport

        opener = NsysReport.open
    try:
        return opener(path)
    except ReportError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, IndexError, TypeError) as exc:
        if isinstance(exc, FileNotFoundError) and not Path(path).exists():
            raise ReportNotFoundError(f"{path} disappeared while opening it.") from exc
        if type(exc).__name__ == "ToolNotFoundError":
            raise
        raise CorruptReportError(
            f"{path} could not be read ({type(exc).__name__}: {exc}); it is damaged or "
            "truncated: profile again or re-export it."
        ) from exc
