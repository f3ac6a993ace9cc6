"""Typed errors. Each message is one plain sentence plus the fix, so the magic can show it
without a traceback (see ``magics.py``) and library users can catch by type."""

from __future__ import annotations


class NsightMagicError(Exception):
    """Base class of every error this package raises on purpose."""


# --- reports -------------------------------------------------------------------------------
class ReportError(NsightMagicError, ValueError):
    """A report file cannot be used."""


class ReportNotFoundError(ReportError, FileNotFoundError):
    """The path does not exist."""


class EmptyReportError(ReportError):
    """The file exists but holds no data (0 bytes, no ranges, no tables)."""


class CorruptReportError(ReportError):
    """The file is truncated, damaged, or not the format its name claims."""


class UnsupportedReportError(ReportError):
    """A kind of file, or a schema version, this package does not read."""


class MissingMetricsError(ReportError, KeyError):
    """An analysis needs metrics the ncu report does not hold; the message lists them."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# --- tools and runs ----------------------------------------------------------------------
class ToolNotFoundError(NsightMagicError, FileNotFoundError):
    """nsys or ncu is not installed or not where the config says."""


class ToolVersionError(NsightMagicError):
    """The installed nsys/ncu is too old for what we ask of it."""


class CounterPermissionError(NsightMagicError, PermissionError):
    """ERR_NVGPUCTRPERM: the driver does not let this user read GPU performance counters."""


class ProfilerError(NsightMagicError, RuntimeError):
    """The profiler exited non-zero; the message holds its ERROR lines, argv and log path."""


class NothingCapturedError(NsightMagicError):
    """The run finished but recorded no GPU work (no CUDA in the cell, or no kernel matched
    the filter)."""


class CellSyntaxError(NsightMagicError, SyntaxError):
    """The cell does not parse; raised before any profiler starts."""


class CellFailedError(NsightMagicError):
    """The profiled cell raised; carries the traceback in cell line numbers."""


class ProfileInterrupted(NsightMagicError, KeyboardInterrupt):
    """The user interrupted the run; the profiler's process group was stopped."""


class ProfileTimeout(NsightMagicError, TimeoutError):
    """The run exceeded --timeout; the profiler's process group was stopped."""


class UnpicklableVariableError(NsightMagicError, TypeError):
    """A --vars variable cannot be shipped to the profiled script."""


# --- NVTX range selection ----------------------------------------------------------------
class NvtxRangeError(NsightMagicError, LookupError):
    """An NVTX range spec (``RANGE`` or ``DOMAIN:RANGE``) does not name exactly one range;
    ``matches`` holds the ``domain:range (style)`` labels it matched, or the report's own."""

    def __init__(self, message: str, matches: list[str] | None = None) -> None:
        super().__init__(message)
        self.matches = list(matches or [])


class NvtxRangeNotFoundError(NvtxRangeError):
    """No range matches; the message lists the ranges the report has."""


class AmbiguousNvtxRangeError(NvtxRangeError):
    """Several ranges match (one name in several domains, or both styles); the message lists
    them as ``DOMAIN:RANGE`` so the user can pick one."""
