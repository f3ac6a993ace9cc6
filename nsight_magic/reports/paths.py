"""What a report path points at, checked before anything opens it.

Opening a named pipe for reading blocks until a writer comes, forever in a notebook; a socket
or a device is no report either. ``os.stat`` tells them apart without opening anything."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ReportNotFoundError, UnsupportedReportError

__all__ = ["is_parquet_export", "require_regular_file"]

_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def require_regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (links followed); otherwise ``ReportNotFoundError``
    (missing) or ``UnsupportedReportError`` naming what it is. Never opens the path."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as exc:
        raise ReportNotFoundError(f"{path} does not exist; check the path.") from exc
    except OSError as exc:
        raise UnsupportedReportError(f"{path} cannot be examined ({exc}).") from exc
    if stat.S_ISREG(mode):
        return path
    what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise UnsupportedReportError(
        f"{path} is {what}, not a report file; pass a .nsys-rep, .sqlite, parquet dir or "
        ".ncu-rep saved on disk."
    )


def is_parquet_export(path: Path) -> bool:
    """``path`` is an nsys parquet export: a folder with ``.parquet`` tables in it (a run
    folder holds its export one level down, in ``report_pq/``)."""
    return path.is_dir() and any(path.glob("*.parquet"))
