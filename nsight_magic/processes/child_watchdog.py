"""The watchdog of one process we start: nothing below it outlives the notebook.

    python -I -S processes/child_watchdog.py NOTEBOOK_PID NOTEBOOK_START_TICKS PROGRAM ARGV...

Run by path, stdlib only (nothing of the package is imported: it must start fast and keep
working whatever the notebook's environment). ``child_signals.start_child`` starts every
process through it; it runs the real ``PROGRAM`` (with ``ARGV``, its argv[0] unchanged) two
levels down::

    notebook ── mirror (the Popen's process: session and group leader, a subreaper)
                  └─ keeper (a subreaper, a group of its own)
                       └─ PROGRAM (in the mirror's group) ── what it starts, whatever it does

Why this shape. A process that double-forks or calls ``setsid`` (a profiler's helper
daemonizing, a cell's ``setsid cmd &``) leaves its session and its parent: a watchdog that
only *scans* for it loses it between two scans. A subreaper (``PR_SET_CHILD_SUBREAPER``)
catches it instead: an orphan is handed to its nearest subreaper *ancestor*, so the keeper,
an ancestor of everything PROGRAM starts, holds every one of them. Two of us, not one, because
a guard must itself survive what it guards against:

- The mirror is what the notebook's ``Popen`` sees: it exits as PROGRAM exits, with PROGRAM's
  status (the same code, or killed by the same signal), so ``returncode``, ``wait`` and
  ``os.killpg(proc.pid, ...)`` keep their meaning (PROGRAM sits in the mirror's group; the
  mirror ignores SIGINT/SIGTERM/SIGHUP, which the group's signals reach PROGRAM with).
- The keeper outlives PROGRAM while what PROGRAM left runs (a profiler's daemon may be needed
  by the next command), reaps it, and ends it all when the notebook is gone. It has a group of
  its own so that the SIGKILL a stopped run's group gets does not end it.

Each watches the notebook (a pidfd where the kernel has them, else its pid and start time
every ``POLL_S``; a zombie counts as gone) and the other: the mirror killed before PROGRAM
exited (the run stopped by SIGKILL to its group) makes the keeper end everything below it; the
keeper killed makes the mirror, a subreaper too, the parent of what the keeper held: it waits
for PROGRAM itself and ends the rest when PROGRAM exits (there is no keeper left to hold it).
When the notebook is gone each ends every process below it (SIGTERM, SIGKILL after
``GRACE_S``) and the keeper also SIGKILLs the mirror: one of the two that is stopped
(SIGSTOP) or killed cannot keep anything alive, as long as the other runs.

A process that is not ours is never signalled: only processes below us (by parent pid) are,
and the mirror by its pid and start time.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

POLL_S = 0.5  # how often the notebook is looked at where no pidfd tells us at once
GRACE_S = 1.0  # between SIGTERM and SIGKILL when ending what is below us
KILL_ROUNDS_S = 10.0  # how long an end keeps looking for processes forking as they die
PR_SET_CHILD_SUBREAPER = 36

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


def below(root: int) -> list[int]:
    """Every live process below ``root`` (by parent pid; orphans were handed to us)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if len(fields) > 1 and fields[0] not in ("Z", "X"):
                parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def reap() -> tuple[dict[int, int], bool]:
    """{pid: wait status} of every child that ended, without waiting, and whether a child is
    left. To a subreaper that says whether anything is left below it: an orphan is ours."""
    out: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out, False
        if pid == 0:
            return out, True
        out[pid] = status


def end_below(on_reaped: dict[int, int] | None = None) -> None:
    """SIGTERM to every process below us, SIGKILL to what is left after GRACE_S, until none
    is. Children that end are reaped (their statuses put in ``on_reaped``)."""
    me = os.getpid()
    give_up = time.monotonic() + KILL_ROUNDS_S
    sig, term_until = signal.SIGTERM, time.monotonic() + GRACE_S
    while time.monotonic() < give_up:
        if on_reaped is not None:
            on_reaped.update(reap()[0])
        else:
            reap()
        left = below(me)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, sig)
        time.sleep(0.05)
        if time.monotonic() >= term_until:
            sig = signal.SIGKILL


def subreaper() -> None:
    """Orphans below us become our children instead of init's (Linux 3.4+); without it (no
    ctypes, another libc) the watch still ends what stays below us."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class Notebook:
    """The notebook's process, watched by a pidfd (readable once it ended) where there is one."""

    def __init__(self, pid: int, ticks: int) -> None:
        self.proc = (pid, ticks)
        self.fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.fd = os.pidfd_open(pid)
        if self.fd is not None and not alive(self.proc):  # the pid named another process
            os.close(self.fd)
            self.fd = None

    def gone(self) -> bool:
        return not alive(self.proc)


def wakeup_pipe() -> int:
    """A pipe SIGCHLD writes to, so a poll wakes as soon as a child ends."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    return r


def wait_for(fds: list[int], timeout: float) -> list[int]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(int(timeout * 1000))]


def drain(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b"-"  # nothing (not the end)
    except OSError:
        return b""


def run_program(mirror: int, program: str, argv: list[str], restore: dict[int, object]) -> None:
    """In the keeper's forked child: join the mirror's group, take the notebook's signal
    dispositions back (SIGINT at its default: ``child_signals``), become PROGRAM."""
    try:
        os.setpgid(0, mirror)
        for sig, disposition in restore.items():
            signal.signal(sig, disposition)  # type: ignore[arg-type]
        signal.set_wakeup_fd(-1)
        os.execv(program, argv)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"{program}: {exc}\n".encode())
    os._exit(127)


def keeper(notebook: Notebook, mirror: Proc, status_w: int, life_r: int, program: str,
           argv: list[str], restore: dict[int, object]) -> None:  # fmt: skip
    os.setpgid(0, 0)
    subreaper()
    wake = wakeup_pipe()
    child = os.fork()
    if child == 0:
        run_program(mirror[0], program, argv, restore)
    with contextlib.suppress(OSError):  # both sides, so no signal to the group can miss it
        os.setpgid(child, mirror[0])
    # we hold none of the notebook's pipes: its reader sees their end when PROGRAM's ends
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with contextlib.suppress(OSError):
        os.write(status_w, f"pid {child}\n".encode())
    done = False  # PROGRAM ended (its status told)
    kept = False  # the mirror exited after it: what is left is ours to keep
    watch = [fd for fd in (wake, life_r, notebook.fd) if fd is not None]
    while True:
        ended, left = reap()
        if child in ended:
            done = True
            with contextlib.suppress(OSError):
                os.write(status_w, f"exit {ended[child]}\n".encode())
                os.close(status_w)
        if done and not left:
            return
        if notebook.gone():
            end_below()
            if alive(mirror):  # it may be stopped: then it could end nothing
                with contextlib.suppress(OSError):
                    os.kill(mirror[0], signal.SIGKILL)
            return
        ready = wait_for(watch, POLL_S)
        if life_r in ready:
            data = drain(life_r)
            kept = kept or b"k" in data
            if not data or data == b"k":
                watch.remove(life_r)
                if not kept:  # the mirror was killed: the run was stopped, all of it
                    end_below()
                    return
        if wake in ready:
            drain(wake)


def mirror_exit(status: int) -> None:
    """Exit as PROGRAM did: its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(Exception):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
            time.sleep(1.0)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> int:
    notebook = Notebook(int(argv[1]), int(argv[2]))
    program, program_argv = argv[3], argv[4:]
    # what PROGRAM gets back: SIGINT at its default (see child_signals), the rest as they came
    # (Python itself ignores SIGPIPE and SIGXFSZ: back to their defaults, as Popen does)
    restore: dict[int, object] = {signal.SIGINT: signal.SIG_DFL}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        restore[sig] = signal.getsignal(sig)
    for name in ("SIGPIPE", "SIGXFSZ", "SIGCHLD"):
        if hasattr(signal, name):
            restore[getattr(signal, name)] = signal.SIG_DFL
    # the group's signals are PROGRAM's to act on; we end as it does
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(Exception):  # mirroring a crash must not write a core of ours
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if notebook.gone():
        return 1
    subreaper()
    me = (os.getpid(), int(stat_fields(os.getpid())[19]))
    status_r, status_w = os.pipe()  # keeper -> mirror: PROGRAM's pid, then its status
    life_r, life_w = os.pipe()  # mirror -> keeper: "k" once PROGRAM ended; its end: killed
    keeper_pid = os.fork()
    if keeper_pid == 0:
        os.close(status_r)
        os.close(life_w)
        with contextlib.suppress(BaseException):
            keeper(notebook, me, status_w, life_r, program, program_argv, restore)
        os._exit(0)
    os.close(status_w)
    os.close(life_r)
    wake = wakeup_pipe()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    child: int | None = None
    pending = b""
    watch = [fd for fd in (status_r, wake, notebook.fd) if fd is not None]
    while status_r in watch:
        if notebook.gone():
            end_below()
            return 1
        ready = wait_for(watch, POLL_S)
        if wake in ready:
            drain(wake)
        if status_r in ready:
            data = drain(status_r)
            if not data:
                watch.remove(status_r)  # the keeper is gone
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                word, _, number = line.decode().partition(" ")
                if word == "pid":
                    child = int(number)
                elif word == "exit":
                    with contextlib.suppress(OSError):
                        os.write(life_w, b"k")
                    mirror_exit(int(number))
    # The keeper died with PROGRAM running: PROGRAM and what the keeper held are our
    # children now (once its exit is complete: its pipe closes a moment before it hands its
    # children on, its zombie appears after). Wait for PROGRAM ourselves; what is left when it
    # ends cannot be kept.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(keeper_pid, 0)
    statuses: dict[int, int] = {}
    while child is not None and child not in statuses:
        if notebook.gone():
            end_below()
            return 1
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break  # not ours: the keeper had reaped it, and its status is lost
        if pid:
            statuses[child] = status
            break
        statuses.update(reap()[0])  # what the keeper held, as it ends
        wait_for(watch, POLL_S)
        drain(wake)
    end_below(statuses)
    if child is not None and child in statuses:
        mirror_exit(statuses[child])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
