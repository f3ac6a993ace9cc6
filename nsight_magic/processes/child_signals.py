"""The processes we start take SIGINT at its default action, whatever the notebook does with it.

ipykernel ignores SIGINT between cells (``SIG_IGN``; it installs its handler only while a cell
runs), and an ignored signal stays ignored across fork and exec. A process started between cells,
from a background thread (the ncu worker's prewarm, the attach that releases it), would ignore
the SIGINT we stop it with: the worker could not be interrupted (it is killed instead, and its
state lost), and an ncu attach would hold its detach for the whole grace period. The same holds
for a notebook or pytest started in the background by a shell (``cmd &``).

``subprocess`` can reset no signal (only ``preexec_fn``, which is unsafe with threads), so while
SIGINT is ignored here a child starts through a short exec trampoline: the Python we run on,
without site or environment (``-I -S``, ~10 ms), resets SIGINT and ``execv``s the real argv, so
the pid, process group and session are the child's own, as without it.

Every process we start goes through ``start_child`` (a run to completion through
``run_bounded``): a session of its own, below a watchdog of its own (``child_lifetime``; it
resets SIGINT too, so the trampoline serves only where there is none), so it ends when the
notebook does, and a bounded run that runs out ends
its whole session, not only the direct child (a hung ``nsys`` CLI's helpers stayed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .child_lifetime import watched_argv

__all__ = ["TRAMPOLINE", "default_sigint_argv", "end_session", "run_bounded", "sigint_ignored",
           "start_child"]  # fmt: skip

TRAMPOLINE = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[2:])"
)


def sigint_ignored() -> bool:
    """Whether a child started now would inherit SIGINT ignored."""
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def default_sigint_argv(argv: Sequence[str], path: str | None = None) -> list[str]:
    """``argv`` as it should be started now: unchanged while SIGINT is handled here, else
    behind the trampoline. The program is resolved first (``path``: the PATH the child gets),
    so a missing one still fails in ``Popen`` with FileNotFoundError, as without the
    trampoline."""
    argv = [os.fspath(a) for a in argv]
    if not argv or not sigint_ignored():
        return argv
    program = shutil.which(argv[0], path=path)
    if program is None or not sys.executable:
        return argv
    # the program by its resolved path, then the argv it sees (its argv[0] unchanged)
    return [sys.executable, "-I", "-S", "-c", TRAMPOLINE, program, *argv]


def start_child(
    argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start one of the processes we stop ourselves (a profiler, the worker, an attach): a
    session of its own (the notebook's Ctrl-C to the kernel's group does not reach it: we
    stop it), no stdin (the kernel's is a pipe that never closes), SIGINT at its default,
    below its watchdog (``child_lifetime``), which ends it and all it started when the
    notebook is gone. The ``Popen`` is the watchdog's: it leads the session and the process
    group the program is in, and exits as the program does, with its status; signal the
    group (``os.killpg(proc.pid, ...)``), as everything here does, not ``proc.pid`` alone."""
    argv = [os.fspath(a) for a in argv]
    path = None if env is None else env.get("PATH")
    watched = watched_argv(argv, path)
    return subprocess.Popen(watched or default_sigint_argv(argv, path),
                            stdin=subprocess.DEVNULL, env=None if env is None else dict(env),
                            start_new_session=True, **popen)  # fmt: skip


def end_session(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to the session ``proc`` leads (its pid is the session's and group's id: every
    process of it that did not make a group of its own), then reap ``proc``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    text: bool = True,
    stdout: int | None = subprocess.PIPE,
) -> subprocess.CompletedProcess[Any]:
    """``argv`` run to completion, as ``subprocess.run(..., timeout=timeout)`` but started by
    ``start_child``: output captured (``text``: decoded, bad bytes replaced), and past
    ``timeout`` its whole session is killed (what it started too) before
    ``subprocess.TimeoutExpired`` is raised. ``OSError`` when it cannot start."""
    proc = start_child(argv, env, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, or the notebook's Ctrl-C: nothing of it stays
        end_session(proc)
        with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
            proc.communicate(timeout=1.0)  # close the pipes (a process that left could hold them)
        raise
    if not text:
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
    decoded = [(b or b"").decode(errors="replace") for b in (out, err)]
    return subprocess.CompletedProcess(list(argv), proc.returncode, *decoded)
