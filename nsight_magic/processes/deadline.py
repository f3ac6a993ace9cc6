"""The run's ``--timeout`` as one deadline every step waits under, and a default bound per step.

A profiled cell waits on several things besides the cell: the profiler's version check,
``ncu --list-sets``/``--list-sections``, pickling the notebook's variables, the worker's start,
``nsys start``, the ncu attach, a fresh run's profiler, ``nsys export``, ``nsys shutdown``.
Each has its own default bound (so nothing waits forever even
without ``--timeout``); with ``--timeout`` each waits at most what is left of it. A step that
runs out says which bound ended it, in seconds, as ``ProfileTimeout`` (``--timeout``) or
``ProfilerError`` (the step's own bound). The deadline is a context variable: the pipeline sets
it around one run, the steps read it without a new parameter on every Backend method."""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ..errors import NsightMagicError, ProfilerError, ProfileTimeout

# nsys/ncu --version: tools.VERSION_TIMEOUT_S (30 s), once per path
CATALOG_S = 30.0  # ncu --list-sets and --list-sections together; nsys profile --help
PICKLE_S = 300.0  # pickling the notebook's variables for the run (a slow __reduce__)
WORKER_START_S = 300.0
CLI_S = 120.0  # nsys start / cancel / stop
ATTACH_S = 60.0  # ncu attach connecting to the worker
PROFILER_START_S = 300.0  # a fresh run: the profiler starting the cell's script
PROFILER_END_S = 900.0  # a fresh run: the profiler ending after the script did (its report)
EXPORT_S = 900.0  # nsys export of one report
SHUTDOWN_S = 30.0  # nsys shutdown of a warm session when it stops
MIN_STEP_S = 0.5  # a step still gets this much when --timeout is nearly used up

HUNG_PROFILER = "the profiler may be hung (try it in a terminal), or pass a larger --timeout."
SLOW_PICKLE = (
    "its pickling (a __reduce__ or __getstate__) is too slow: create it in a %%nsight_setup "
    "cell instead, so the profiled process builds it, or pass a larger --timeout."
)

# (monotonic deadline, the --timeout it came from)
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "nsight_magic_deadline", default=None
)


@contextlib.contextmanager
def run_deadline(timeout: float | None, started: float | None = None) -> Iterator[None]:
    """Steps inside the block wait at most what is left of ``timeout`` seconds from
    ``started`` (``time.monotonic()``, default now); no deadline when ``timeout`` is None."""
    if timeout is None:
        yield
        return
    token = _DEADLINE.set(((started or time.monotonic()) + timeout, timeout))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@dataclass(frozen=True)
class Bound:
    """How long one step may wait: ``seconds``, and whether ``--timeout`` set it."""

    seconds: float
    timeout: float | None = None  # the --timeout when it (not the step's default) is the bound

    def expired(
        self, what: str, log: Path | str | None = None, hint: str = HUNG_PROFILER
    ) -> NsightMagicError:
        """The error for ``what`` having run past this bound (its log named when it exists;
        ``hint``: what to do about it, for the step's own bound)."""
        where = f" Log: {log}" if log is not None and Path(log).exists() else ""
        if self.timeout is not None:
            return ProfileTimeout(
                f"The run exceeded its {self.timeout:g} s timeout during {what}; it was "
                f"stopped.{where}"
            )
        return ProfilerError(
            f"{what} did not finish within {self.seconds:.0f} s and was stopped; {hint}{where}"
        )


def bound(default: float) -> Bound:
    """The bound of a step whose own limit is ``default`` seconds."""
    current = _DEADLINE.get()
    if current is None:
        return Bound(default)
    deadline, timeout = current
    left = max(MIN_STEP_S, deadline - time.monotonic())
    return Bound(left, timeout) if left < default else Bound(default)


class _Alarm(BaseException):
    """Raised by the timer inside the user's code; a BaseException, so that the ``except
    Exception`` around a pickling (which files a failure as "cannot be pickled") lets it by."""


@contextlib.contextmanager
def bounded_here(what: str, default: float, hint: str = HUNG_PROFILER) -> Iterator[None]:
    """Bound code that runs in this process (the user's ``__reduce__`` while a variable is
    pickled) by ``bound(default)``: a timer interrupts it and the bound's error is raised.
    Only the main thread can take the signal: elsewhere (a prewarm thread), and inside another
    such block, the code runs unbounded; a timer the notebook had set is put back after."""
    if threading.current_thread() is not threading.main_thread() or _ALARM.get():
        yield
        return
    limit = bound(default)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise _Alarm

    started = time.monotonic()
    token = _ALARM.set(True)
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, limit.seconds)
    try:
        yield
    except _Alarm:
        raise limit.expired(what, hint=hint) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        _ALARM.reset(token)
        if old_delay:
            left = max(old_delay - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


_ALARM: contextvars.ContextVar[bool] = contextvars.ContextVar("nsight_magic_alarm", default=False)
