"""Typed errors. Each message is one plain sentence plus the fix, so the magic can show it
without a traceback (see ``magic/magics.py``) and library users can catch by type."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class NsightMagicError(Exception):
    """Base class of every error this package raises on purpose."""

    def one_line(self) -> str:
        """``TypeName: message`` as the magics print it."""
        return f"{type(self).__name__}: {self}"

    def _render_traceback_(self) -> list[str]:
        """What IPython shows when a magic raises this: the message, no traceback of our
        internals (the cell still fails, so Run All and nbclient stop there)."""
        return f"nsight_magic: {self.one_line()}".splitlines()


# --- reports -------------------------------------------------------------------------------
class ReportError(NsightMagicError, ValueError):
    """A report file cannot be used."""


class ReportTimeoutError(ReportError, TimeoutError):
    """Exporting the report (``nsys export``) ran past its time limit."""


class StaleExportError(ReportError):
    """The export beside a .nsys-rep was made from another report (its stamp does not match),
    and there is no nsys here to export the .nsys-rep again."""


class ReportNotFoundError(ReportError, FileNotFoundError):
    """The path does not exist."""


class EmptyReportError(ReportError):
    """The file exists but holds no data (0 bytes, no ranges, no tables)."""


class CorruptReportError(ReportError):
    """The file is truncated, damaged, or not the format its name claims."""


class UnsupportedReportError(ReportError):
    """A kind of file, or a schema version, this package does not read."""


class LaunchNotFoundError(NsightMagicError, KeyError):
    """An ncu launch number the report does not hold; the message gives the range it has."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class PeakUnknownError(NsightMagicError, LookupError):
    """No peak FLOP/s is known for the GPU and data type (an unlisted or unnamed GPU); the
    message names the fix: ``peak_flops=`` or ``set_peak``."""


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


class ProfilerOptionError(NsightMagicError, ValueError):
    """An option the profiler would refuse (e.g. an ncu set it does not have); raised before
    anything starts."""


class NothingCapturedError(NsightMagicError):
    """The run finished but recorded no GPU work (no CUDA in the cell, or no kernel matched
    the filter). ``target_opened``: ``%%ncu --nvtx`` named a range the cell did open;
    ``run_dir``: the run's folder (both set by the ncu backend)."""

    target_opened: bool = False
    run_dir: Path | None = None


class CellSyntaxError(NsightMagicError, SyntaxError):
    """The cell does not parse; raised before any profiler starts."""


class CellFailedError(NsightMagicError):
    """The profiled cell raised. ``traceback`` is the user's traceback in cell line numbers,
    ``exc_type`` the exception's class name, ``run`` the partial result when a report exists."""

    def __init__(
        self, message: str, *, traceback: str = "", exc_type: str = "", run: Any = None
    ) -> None:
        super().__init__(message)
        self.traceback = traceback
        self.exc_type = exc_type
        self.run = run


class SweepFailedError(NsightMagicError):
    """Every configuration of a sweep that ran failed (none has a report): the cell fails, as
    a failed profile's does. ``run`` is the ``SweepRun`` (its ``table()`` has each
    configuration's error; its folder keeps what each run wrote)."""

    def __init__(self, message: str, *, run: Any = None) -> None:
        super().__init__(message)
        self.run = run


class _Stopped(NsightMagicError):
    """A run that was stopped from outside; ``result`` is the runner's record of the process
    (``runner.RunResult``) or None when a warm worker was stopped, ``run`` the partial result."""

    def __init__(self, message: str, *, result: Any = None, run: Any = None) -> None:
        super().__init__(message)
        self.result = result
        self.run = run


class ProfileInterrupted(_Stopped, KeyboardInterrupt):
    """The user interrupted the run; the profiled processes were stopped."""


class ProfileTimeout(_Stopped, TimeoutError):
    """The run exceeded --timeout; the profiled processes were stopped."""


class WorkerDiedError(NsightMagicError):
    """The warm profiling worker exited while running a cell (crash, kill, broken CUDA context).
    ``run`` is the partial result when the profiler still wrote a report; ``run_dir`` the run's
    folder; ``stopped`` is "" for a crash, else how we stopped it ("interrupted", "timeout",
    "cancelled"). The next cell starts a new worker."""

    def __init__(self, message: str, *, run: Any = None, stopped: str = "") -> None:
        super().__init__(message)
        self.run = run
        self.stopped = stopped
        self.run_dir: Any = None


class RunFolderError(NsightMagicError, OSError):
    """A run folder (or the runs root) cannot be created or written: read-only, full, or a
    file in the way; or its saved ``meta.json`` holds fields of the wrong type."""


class BadArgumentError(NsightMagicError, ValueError, TypeError):
    """A public function got an argument it cannot use (the wrong type, empty, out of range,
    given twice); the message says what to pass. A ``ValueError`` and a ``TypeError`` both, so
    code that caught either before still does."""


class FolderExistsError(RunFolderError, FileExistsError):
    """A folder that must be new (``share()``'s destination) exists already."""


class UntrustedFolderError(NsightMagicError, PermissionError):
    """A run folder this user does not own, or that others can write: nothing in it is
    unpickled or replayed (``load_run(path, trust=True)`` opts in)."""


class DamagedFolderError(ReportError):
    """A folder's own record names what cannot be in it: a ``sweep.json`` whose configuration
    folder is not one name inside the sweep folder (``..``, an absolute path, a path with a
    separator, a link out of it) or whose two configurations name one folder (a damaged or
    edited bundle). ``load_run`` and ``share()`` raise it before they read or write anything."""


class FolderSettingsIgnored(UserWarning):
    """A saved run folder asked for an interpreter, working directory or environment variables
    that a re-run does not take from a folder (shown, not obeyed; ``trust=True`` opts in)."""


class DamagedFolderWarning(UserWarning):
    """A run folder's own file (``meta.json``) is damaged: cut short, not JSON, nested too
    deep; or a sweep folder's configuration recorded ok has no run that loads (its folder
    deleted, its report gone or damaged). What can still be read is loaded (the report, with
    default settings; the sweep's other configurations)."""


class UnpicklableVariableError(NsightMagicError, TypeError):
    """A --vars variable cannot be shipped to the profiled script."""


class MissingVariableError(NsightMagicError, NameError):
    """The cell reads notebook variables the profiling process cannot get (too large for
    automatic shipping, or unpicklable); ``names`` lists them and the message gives the fix."""

    def __init__(self, message: str, *, names: list[str] | None = None) -> None:
        super().__init__(message)
        self.names = list(names or [])


# --- NVTX range selection ----------------------------------------------------------------
class NvtxRangeError(NsightMagicError, LookupError):
    """An NVTX range spec (``RANGE`` or ``DOMAIN:RANGE``) does not name exactly one range;
    ``matches`` holds the ``domain:range (style)`` labels it matched, or the report's own."""

    def __init__(self, message: str, matches: list[str] | None = None) -> None:
        super().__init__(message)
        self.matches = list(matches or [])


class NvtxRangeNotFoundError(NvtxRangeError, KeyError):
    """No range matches; the message lists the ranges the report has. A ``KeyError`` too: a
    range named as a key (``mfu(flops={range: ...})``) that the report lacks."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class AmbiguousNvtxRangeError(NvtxRangeError):
    """Several ranges match (one name in several domains, or both styles); the message lists
    them as ``DOMAIN:RANGE`` so the user can pick one."""


class EmptyResultWarning(UserWarning):
    """A frame came back empty for a reason the user can fix (the reason is the message, and
    ``frame.attrs["reason"]``): e.g. ``NsysRun.mfu()`` on a run without PyTorch op ranges."""
