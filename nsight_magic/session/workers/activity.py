"""When the notebook is profiling: the cells in flight, and since when none has been.

The ncu worker's prewarm replays the notebook's state on the GPU, and an nsys capture must not
run beside that replay (its timeline would show the replay's contention), so one waits for the
other: a replay started right after the first result held the next ``%%nsys`` cell for seconds
(benchmarks/README.md, design measurements). So the replay starts only once the notebook has
been idle a moment (``PREWARM_IDLE_S``): a user reading the result, not a Run All going from
cell to cell."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

PREWARM_IDLE_S = 1.0  # no profiled cell for this long: the user is looking at a result


class Activity:
    """Profiled cells in flight (``cell()`` around each) and when the last one ended."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._idle_since = time.monotonic()

    @contextlib.contextmanager
    def cell(self) -> Iterator[None]:
        with self._cond:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._idle_since = time.monotonic()
                self._cond.notify_all()

    def wait_idle(self, idle_s: float, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Block until no cell has been in flight for ``idle_s`` seconds (True), or until
        ``give_up()`` says so (False; checked at least every ``idle_s``)."""
        with self._cond:
            while True:
                if give_up():
                    return False
                quiet = time.monotonic() - self._idle_since
                if self._in_flight == 0 and quiet >= idle_s:
                    return True
                self._cond.wait(idle_s if self._in_flight else max(idle_s - quiet, 0.01))
