"""Run a profiler argv in its own process group, stream its output, and stop it for sure.

``run`` never takes a shell string. The child gets a new session (so the notebook's SIGINT
does not hit it half-way, and so the whole group - profiler, app, its workers - can be signalled
at once). Stopping escalates SIGINT -> SIGTERM -> SIGKILL with short grace periods (nsys writes
its report on SIGINT, so that comes first), then reaps the child and checks ``/proc`` that no
member of the group is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CounterPermissionError, ProfileInterrupted, ProfilerError, ProfileTimeout
from ..run_folders.run_dir import append_private
from .child_signals import start_child

LineCallback = Callable[[str], None]

COUNTER_PERMISSION_HELP = (
    "The GPU driver does not let this user read performance counters (ERR_NVGPUCTRPERM). "
    "Fix: run as root, or allow all users with the kernel module option "
    "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` (in /etc/modprobe.d/, then reload "
    "the driver or reboot), or in a container add `--cap-add SYS_ADMIN`. "
    "See https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


@dataclass
class RunResult:
    """What happened to one profiler process. ``outcome``: exited | timeout | interrupted |
    cancelled. ``signals`` lists what was sent to the group, in order."""

    argv: list[str]
    log_path: str
    returncode: int | None = None
    outcome: str = "exited"
    wall_s: float = 0.0
    signals: list[str] = field(default_factory=list)
    leftovers_killed: list[int] = field(default_factory=list)
    pgid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``, read from /proc."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: fall back to "is anyone there"
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # comm may hold spaces/parens: the fields after the last ')' are fixed
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(proc: subprocess.Popen[bytes], pgid: int, grace_s: float) -> bool:
    """Reap the child while waiting; True once no live member of the group remains."""
    deadline = time.monotonic() + grace_s
    while True:
        proc.poll()
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def stop_group(
    proc: subprocess.Popen[bytes], pgid: int, grace_s: Sequence[float] = (5.0, 3.0)
) -> list[str]:
    """SIGINT, then SIGTERM, then SIGKILL to the whole group; returns the signals sent."""
    sent = []
    for sig, grace in ((signal.SIGINT, grace_s[0]), (signal.SIGTERM, grace_s[1])):
        if not group_members(pgid):
            break
        _signal_group(pgid, sig)
        sent.append(sig.name)
        if _wait_group_gone(proc, pgid, grace):
            break
    else:
        if group_members(pgid):
            _signal_group(pgid, signal.SIGKILL)
            sent.append("SIGKILL")
            _wait_group_gone(proc, pgid, 5.0)
    proc.wait()  # always reap
    return sent


class _Reader(threading.Thread):
    """Copy the child's output to the log file and hand complete lines to the callback."""

    def __init__(self, stream: Any, log: Any, on_line: LineCallback | None) -> None:
        super().__init__(daemon=True)
        self.stream, self.log, self.on_line = stream, log, on_line
        self.callback_errors: list[BaseException] = []
        # Set once the group is being stopped: what the processes print while dying (torchrun's
        # SignalException traceback, the script's KeyboardInterrupt line) goes to the log only;
        # the user gets one message saying the run was stopped.
        self.stopping = threading.Event()

    def run(self) -> None:
        for line in output_lines(self.stream.fileno(), self._copy_to_log):
            self._emit(line)

    def _copy_to_log(self, chunk: bytes) -> None:
        self.log.write(chunk)
        self.log.flush()

    def _emit(self, line: str) -> None:
        if self.on_line is None or self.stopping.is_set():
            return
        try:
            self.on_line(line)
        except BaseException as exc:  # a broken display must not stop the log copy
            self.callback_errors.append(exc)


def output_lines(fd: int, on_chunk: Callable[[bytes], None] | None = None) -> Iterator[str]:
    """The lines a process writes to ``fd`` until it closes, decoded, each with its end: ``\n``
    (``\r\n`` read as one), or ``\r`` (a bar redrawn in place: nsys's, a cell's tqdm), or none
    for a last line the process left open. The ends travel so that a cell's ``print()``, its
    ``print(x, end='')`` and its bars show as they do in the plain notebook. ``on_chunk`` sees
    the raw bytes first (a log copy)."""
    # the open line's chunks, joined once a line end comes (a long line, a display's frame of
    # megabytes, is read in 64 KiB chunks: joined and split at each, it cost its length squared)
    parts: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        if on_chunk is not None:
            on_chunk(chunk)
        if b"\n" not in chunk and b"\r" not in chunk and not (parts and parts[-1][-1:] == b"\r"):
            parts.append(chunk)
            continue
        data = b"".join([*parts, chunk])
        # a "\r" last may be the first half of a "\r\n" the next read brings
        held = b"\r" if data.endswith(b"\r") else b""
        *lines, rest = _LINE_END.split(data[: len(data) - len(held)].replace(b"\r\n", b"\n"))
        parts = [rest + held] if rest or held else []
        for raw in lines:
            yield raw.decode(errors="replace")
    if parts:  # the rest, a held "\r" still ending its own line
        for raw in _LINE_END.split(b"".join(parts).replace(b"\r\n", b"\n")):
            if raw:
                yield raw.decode(errors="replace")


# splits after each line end, keeping it with its line: [line + end, ..., the open rest]
_LINE_END = re.compile(rb"(?<=[\r\n])")


def run(
    argv: Sequence[str],
    *,
    log_path: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    on_line: LineCallback | None = None,
    grace_s: Sequence[float] = (5.0, 3.0),
    stalled: Callable[[], BaseException | None] | None = None,
) -> RunResult:
    """Run ``argv`` to completion. Returns the RunResult when it exits on its own (any exit
    code); raises ProfileTimeout / ProfileInterrupted (``.result`` attached) after stopping the
    whole group on timeout, ``cancel.set()`` or KeyboardInterrupt. ``stalled`` is asked while
    it runs: the error it returns (a hung profiler) is raised once the group is stopped."""
    if isinstance(argv, str | bytes):
        raise TypeError("argv must be a list of strings, not a shell string")
    argv = [os.fspath(a) for a in argv]
    result = RunResult(argv=argv, log_path=str(log_path))
    t0 = time.monotonic()
    with append_private(log_path) as log:  # 0600, as every file of a run folder
        proc = start_child(argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
        pgid = result.pgid = proc.pid  # new session: the child leads its own group
        reader = _Reader(proc.stdout, log, on_line)
        reader.start()
        deadline = None if timeout is None else t0 + timeout
        stall: BaseException | None = None
        try:
            while proc.poll() is None:
                if cancel is not None and cancel.is_set():
                    result.outcome = "cancelled"
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    result.outcome = "timeout"
                    break
                if stalled is not None and (stall := stalled()) is not None:
                    result.outcome = "stalled"
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.05)
        except KeyboardInterrupt:
            result.outcome = "interrupted"
        finally:
            if result.outcome != "exited":
                reader.stopping.set()
                result.signals = stop_group(proc, pgid, grace_s)
            else:
                # the profiler is gone; workers it left behind must not outlive the run
                result.leftovers_killed = group_members(pgid)
                if result.leftovers_killed:
                    result.signals = stop_group(proc, pgid, (0.5, 0.5))
            proc.wait()
            reader.join(timeout=5.0)
            with contextlib.suppress(OSError):
                proc.stdout.close()  # type: ignore[union-attr]
            result.returncode = proc.returncode
            result.wall_s = time.monotonic() - t0
    stopped = " -> ".join(result.signals) or "already exited"
    if stall is not None:
        raise stall
    if result.outcome == "timeout":
        raise ProfileTimeout(
            f"The run exceeded its {timeout:g} s timeout and was stopped ({stopped}); "
            f"log: {log_path}",
            result=result,
        )
    if result.outcome in ("interrupted", "cancelled"):
        raise ProfileInterrupted(
            f"The run was {result.outcome} and its processes were stopped ({stopped}); "
            f"log: {log_path}",
            result=result,
        )
    return result


def error_lines(log_text: str, limit: int = 20) -> list[str]:
    """The profiler's ERROR lines (ncu ``==ERROR==``, nsys ``Error:``/``ERROR``)."""
    out = []
    for line in log_text.replace("\r", "\n").splitlines():
        s = line.strip()
        if "==ERROR==" in s or s.startswith(("ERROR", "Error:", "error:", "FATAL")):
            out.append(s)
    return out[:limit]


def read_log(path: str | Path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def readable_log(path: str | Path) -> str:
    """A run's log as a person reads it: what the cell wrote to stderr as its text, a display
    as a mark (the script writes both as frames on its stdout: script/display_frames.py)."""
    text = read_log(path)
    if FRAME_START not in text:
        return text
    text = _STDERR_FRAME.sub(lambda m: _json_text(m[1]), text)
    return _DISPLAY_FRAME.sub("[a display]\n", text)


# the frames' marks (script/display_frames.py's, which the script pastes: tests say they agree)
FRAME_START = "\x00nsight_magic-"
STDERR_MARK = "\x00nsight_magic-stderr "
DISPLAY_MARK = "\x00nsight_magic-display "
_STDERR_FRAME = re.compile(re.escape(STDERR_MARK) + r'("(?:[^"\\\n]|\\.)*")\x00\n?')
_DISPLAY_FRAME = re.compile(re.escape(DISPLAY_MARK) + r"[^\n]*\x00\n?")


def _json_text(quoted: str) -> str:
    try:
        text = json.loads(quoted)
    except ValueError:
        return quoted
    return text if isinstance(text, str) else quoted


def raise_for_profiler(result: RunResult, tool: str = "profiler") -> None:
    """Raise CounterPermissionError when the log shows ERR_NVGPUCTRPERM, ProfilerError on a
    non-zero exit; otherwise return."""
    text = readable_log(result.log_path)
    if "ERR_NVGPUCTRPERM" in text:
        raise CounterPermissionError(f"{COUNTER_PERMISSION_HELP} Log: {result.log_path}")
    if result.returncode not in (0, None):
        errors = error_lines(text)
        tail = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip()][-10:]
        shown = "\n  ".join(errors or tail) or "(no output)"
        raise ProfilerError(
            f"{tool} exited with code {result.returncode}.\n  {shown}\n"
            f"argv: {result.argv}\nlog: {result.log_path}"
        )
