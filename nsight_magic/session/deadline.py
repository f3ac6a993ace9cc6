"""The run's ``--timeout`` as one deadline every step waits under, and a default bound per step.

A profiled cell waits on several things besides the cell: the worker's start, ``nsys start``,
the ncu attach, ``nsys export``. Each has its own default bound (so nothing waits forever even
without ``--timeout``); with ``--timeout`` each waits at most what is left of it. A step that
runs out says which bound ended it, in seconds, as ``ProfileTimeout`` (``--timeout``) or
``ProfilerError`` (the step's own bound). The deadline is a context variable: the pipeline sets
it around one run, the steps read it without a new parameter on every Backend method."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import NsightMagicError, ProfilerError, ProfileTimeout

WORKER_START_S = 300.0
CLI_S = 120.0  # nsys start / cancel / stop
ATTACH_S = 60.0  # ncu attach connecting to the worker
EXPORT_S = 900.0  # nsys export of one report
MIN_STEP_S = 0.5  # a step still gets this much when --timeout is nearly used up

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

    def expired(self, what: str, log: Path | str | None = None) -> NsightMagicError:
        """The error for ``what`` having run past this bound (its log named when it exists)."""
        where = f" Log: {log}" if log is not None and Path(log).exists() else ""
        if self.timeout is not None:
            return ProfileTimeout(
                f"The run exceeded its {self.timeout:g} s timeout during {what}; it was "
                f"stopped.{where}"
            )
        return ProfilerError(
            f"{what} did not finish within {self.seconds:.0f} s and was stopped; the profiler "
            f"may be hung (try it in a terminal), or pass a larger --timeout.{where}"
        )


def bound(default: float) -> Bound:
    """The bound of a step whose own limit is ``default`` seconds."""
    current = _DEADLINE.get()
    if current is None:
        return Bound(default)
    deadline, timeout = current
    left = max(MIN_STEP_S, deadline - time.monotonic())
    return Bound(left, timeout) if left < default else Bound(default)
