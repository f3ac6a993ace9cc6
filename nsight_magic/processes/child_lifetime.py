"""Every process we start ends when the notebook does: the notebook's side of its watchdogs.

A profiler, its script, torchrun and its ranks, an ncu attach, an ``nsys export`` run in a
session of their own (``child_signals.start_child``), so the notebook's Ctrl-C does not reach
them half-way and we can stop a whole run at once. Nothing then ends them when the kernel is
killed or restarted: no signal reaches a session when its starter dies, and a parent-death
signal (``PR_SET_PDEATHSIG``) would not do either: it fires when the *thread* that started the
child ends (the prewarm's background thread), reaches only the direct child (not ``nsys
profile``'s target, torchrun's ranks or ncu's subreaper) and needs a ``preexec_fn``, unsafe
with threads.

So each process starts below a watchdog of its own (``processes/child_watchdog.py``: a mirror
the ``Popen`` sees, a keeper below it), which is an ancestor of everything the process starts
and a subreaper, so that a process that double-forks or calls ``setsid`` cannot leave it; both
watch the notebook and each other. One watchdog per notebook, beside what it watched, knew only
what its scans had seen (a daemon that left between two scans stayed), and a killed or stopped
one left everything to live on. A forked notebook (``os.fork`` in a cell) watches what it
starts itself: the pid given is the one that starts it. Outside the guarantee (said in
docs/troubleshooting.md): both processes of one watchdog killed or stopped at once leave what
they held as orphans; nothing watches the pair."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WATCHDOG", "watched_argv"]

WATCHDOG = Path(__file__).with_name("child_watchdog.py")


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: with the pid, it names one process even after reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def watched_argv(argv: Sequence[str], path: str | None = None) -> list[str] | None:
    """``argv`` started below its watchdog, which runs the program by its resolved path
    (``path``: the PATH the child gets) with its argv[0] unchanged and SIGINT at its default.
    None where it cannot be watched (no /proc, no Python to run the watchdog with) or the
    program is not found (``Popen`` then raises FileNotFoundError, as without the watchdog)."""
    me = os.getpid()
    ticks = _start_ticks(me)
    program = shutil.which(argv[0], path=path) if argv else None
    if ticks is None or program is None or not sys.executable:
        return None
    # isolated and without site: it starts in ~20 ms whatever the notebook's environment holds
    return [sys.executable, "-I", "-S", str(WATCHDOG), str(me), str(ticks), program, *argv]
