"""Every process we start ends when the notebook does: the notebook's side of its watchdog.

A profiler, its script, torchrun and its ranks, an ncu attach, an ``nsys export`` run in a
session of their own (``child_signals.start_child``), so the notebook's Ctrl-C does not reach
them half-way and we can stop a whole run at once. Nothing then ends them when the kernel is
killed or restarted: no signal reaches a session when its starter dies, and a parent-death
signal (``PR_SET_PDEATHSIG``) would not do either: it fires when the *thread* that started the
child ends (the prewarm's background thread), reaches only the direct child (not ``nsys
profile``'s target, torchrun's ranks or ncu's subreaper) and needs a ``preexec_fn``, unsafe
with threads.

So each notebook process has one watchdog process (``processes/child_watchdog.py``), started with
the first child, told each child's session over a pipe; it ends them all once the notebook is gone
(the pipe's end, or the notebook's pid gone). A forked notebook (``os.fork`` in a cell) gets its
own watchdog for what it starts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

__all__ = ["WATCHDOG", "watch", "watchdog_pid"]

WATCHDOG = Path(__file__).with_name("child_watchdog.py")

_lock = threading.Lock()
_watchdog: tuple[int, subprocess.Popen[bytes]] | None = None  # (owner pid, its process)
_retired: list[subprocess.Popen[bytes]] = []  # replaced ones still watch what they were told


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: with the pid, it names one process even after reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def _running(renew: bool = False) -> subprocess.Popen[bytes] | None:
    """This process's watchdog, started now if it has none (or it died, or ``renew``: its
    pipe broke); None where there is no /proc to watch from or no Python to run it with."""
    global _watchdog
    me = os.getpid()
    if (not renew and _watchdog is not None and _watchdog[0] == me
            and _watchdog[1].poll() is None):  # fmt: skip
        return _watchdog[1]
    ticks = _start_ticks(me)
    if ticks is None or not sys.executable:
        return None
    proc = subprocess.Popen(
        # isolated and without site: it starts in ~40 ms (2 busy cores) whatever the
        # notebook's environment holds, while the notebook goes on (Popen does not wait)
        [sys.executable, "-I", "-S", str(WATCHDOG), str(me), str(ticks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the notebook's Ctrl-C to its process group must not end it
        close_fds=True,
    )
    if _watchdog is not None and _watchdog[0] == me:
        _retired.append(_watchdog[1])
    _watchdog = (me, proc)
    return proc


def watch(pid: int) -> None:
    """End the session ``pid`` leads (and what it starts) when this process is gone. Never
    raises: a child we cannot watch still runs (and the run still stops it itself)."""
    with _lock:
        for renew in (False, True):  # a cell may have closed the pipe: then a new watchdog
            with contextlib.suppress(OSError, ValueError):
                proc = _running(renew)
                if proc is None:
                    return
                pipe: IO[bytes] = proc.stdin  # type: ignore[assignment]
                pipe.write(f"+{pid}\n".encode())
                pipe.flush()
                return


def _after_fork_in_child() -> None:
    """A fork while another thread held the lock must not leave the child's lock held; the
    child starts its own watchdog with its first child (``_running`` checks the owner)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def watchdog_pid() -> int | None:
    """This process's watchdog, when it has one (for tests and ``%nsight_status``)."""
    with _lock:
        if _watchdog is None or _watchdog[0] != os.getpid() or _watchdog[1].poll() is not None:
            return None
        return _watchdog[1].pid
