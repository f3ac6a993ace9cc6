"""The notebook's watchdog: one small process per notebook process that ends every process the
notebook started (``child_signals.start_child``) once the notebook is gone.

    python -I -S processes/child_watchdog.py NOTEBOOK_PID NOTEBOOK_START_TICKS

Run by path, stdlib only (nothing of the package is imported: it must start fast (~40 ms) and keep
working whatever the notebook's environment). The notebook writes one line ``+PID`` on our
stdin for each process it starts in a session of its own (its pid is the session id). We end
when the notebook is gone: its pid no longer names the process it was (killed, exited, its
kernel restarted; a zombie counts as gone), at most ``POLL_S`` later. The end of our stdin alone
is no sign (a cell may close the descriptor: the notebook then starts another watchdog). Then
every process of a watched session, and every process ever seen below one (a profiler's
helpers that left the session, as daemons do), gets SIGTERM, then SIGKILL after ``GRACE_S``.

A process that is not ours is never signalled: a pid is taken with its start time, and a session
is forgotten as soon as nothing of it is left (its id may be reused later)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

POLL_S = 0.5  # how often the notebook is looked at
SCAN_S = 1.0  # how often the watched sessions' processes are listed (a read of all /proc) ...
SCAN_SHARE = 0.02  # ... or less often on a host with many processes: at most 2% of a core
GRACE_S = 1.0  # between SIGTERM and SIGKILL once the notebook is gone
KILL_ROUNDS_S = 10.0  # how long the end keeps looking for members forking as they die

Proc = tuple[int, int]  # (pid, start ticks): one process, even after its pid is reused


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from field 3 (state) on, or [] when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()


def alive(proc: Proc) -> bool:
    fields = stat_fields(proc[0])
    return len(fields) > 19 and fields[0] not in ("Z", "X") and int(fields[19]) == proc[1]


def table() -> dict[int, tuple[int, int, int]]:
    """Every live process: pid -> (parent pid, session id, start ticks)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if len(fields) > 19 and fields[0] not in ("Z", "X"):
                out[int(entry)] = (int(fields[1]), int(fields[3]), int(fields[19]))
    return out


def scan(sessions: set[int], seen: set[Proc]) -> tuple[set[Proc], set[int]]:
    """The live processes of the watched sessions and their descendants (with those seen
    before that are still the same processes), and the watched sessions that still have a
    member."""
    procs = table()
    found = {(pid, p[2]) for pid, p in procs.items() if p[1] in sessions}
    found |= {proc for proc in seen if procs.get(proc[0], (0, 0, -1))[2] == proc[1]}
    grew = True
    while grew:  # descendants, whatever session they moved to
        pids = {pid for pid, _ in found}
        more = {(pid, p[2]) for pid, p in procs.items() if p[0] in pids} - found
        found |= more
        grew = bool(more)
    return found, {p[1] for p in procs.values() if p[1] in sessions}


def end_all(sessions: set[int], seen: set[Proc]) -> None:
    """SIGTERM to everything of ours, SIGKILL to what is left after GRACE_S, until none is."""
    give_up = time.monotonic() + KILL_ROUNDS_S
    sig, term_until = signal.SIGTERM, time.monotonic() + GRACE_S
    while time.monotonic() < give_up:
        left, _ = scan(sessions, seen)
        if not left:
            return
        seen |= left
        for pid, _ in left:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, sig)
        time.sleep(0.05)
        if time.monotonic() >= term_until:
            sig = signal.SIGKILL


def told(data: bytes, sessions: set[int]) -> bytes:
    """Add the sessions of the complete ``+PID`` lines of ``data``; returns the rest."""
    *lines, rest = data.split(b"\n")
    sessions |= {int(line[1:]) for line in lines if line[:1] == b"+" and line[1:].isdigit()}
    return rest


def main(argv: list[str]) -> int:
    notebook = (int(argv[1]), int(argv[2]))
    # the notebook's Ctrl-C and its terminal hanging up are not ours to die of
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sessions: set[int] = set()
    seen: set[Proc] = set()
    pending = b""
    next_scan = 0.0
    reading = True
    while alive(notebook):
        if not reading:
            time.sleep(POLL_S)
        elif select.select([0], [], [], POLL_S)[0]:
            data = os.read(0, 4096)
            # the end of the pipe: the notebook is exiting, or a cell closed our descriptor
            # (then the notebook starts another watchdog for what it starts next): these
            # sessions end with the notebook's pid, a moment later
            reading = bool(data)
            pending = told(pending + data, sessions)
        if (sessions or seen) and time.monotonic() >= next_scan:
            # what is gone is forgotten (its pid, or its session id, may be reused)
            t0 = time.monotonic()
            seen, sessions = scan(sessions, seen)
            took = time.monotonic() - t0
            next_scan = t0 + max(SCAN_S, took / SCAN_SHARE)
    # what the notebook wrote before it died (it may die before we first looked: we start
    # after its first child did)
    while reading and select.select([0], [], [], 0)[0]:
        data = os.read(0, 4096)
        reading = bool(data)
        pending = told(pending + data, sessions)
    end_all(sessions, seen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
