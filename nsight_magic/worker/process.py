"""The notebook's side of one session worker: start it (under a launcher such as ``nsys launch``),
talk to it, stop it for sure.

The launcher and the worker run in a new process group (the notebook's Ctrl-C does not hit them
half-way, and the whole group can be stopped at once). The worker connects back over a Unix
socket in a private temporary folder; its output (and the launcher's) is pumped by a thread to
whoever listens for the current request, and kept in a tail for error messages.

Interrupts: Ctrl-C in the notebook, a ``cancel`` event or a timeout send SIGINT to the worker
alone; the running cell raises KeyboardInterrupt there and the worker answers and keeps serving.
If it does not answer within the grace period, or a second Ctrl-C comes, the whole group is
stopped (SIGINT, SIGTERM, SIGKILL) and the worker is gone: the next cell starts a new one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import NsightMagicError, WorkerDiedError
from ..package_info import pythonpath_with_package
from ..processes import runner
from ..processes.child_signals import start_child
from ..script.display_frames import readable
from . import messages
from .serve import EXIT_CHANNEL_DAMAGED, EXIT_PARENT_GONE, process_start_ticks

LineSink = Callable[[str], None]
WORKER_MODULE = "nsight_magic.worker.serve"
INTERRUPT_GRACE_S = 5.0
# How long a reply waits for the output mark behind it (the pipe is read by a thread; what a
# cell printed last is usually there within milliseconds). A worker that could not write the
# mark says so and is not waited for. 15 s: on the 2-core dev machine under make test's full load
# (two suites and a browser side by side) a cell's 3,000 lines took longer than 2 s to drain and
# its last lines were lost, and with two make tests at once longer than 5 s; only a launcher that
# keeps the worker's stdout waits this long, once (the H100 runs never did: marks arrive there).
OUTPUT_MARK_WAIT_S = 15.0


class WorkerStartError(NsightMagicError):
    """The worker (or its launcher) did not come up; the message holds the output tail.
    ``timed_out``: it ran out of its start bound (rather than exiting or being cancelled)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def _pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[:1] != ["Z"]


@dataclass(frozen=True)
class Launch:
    """How to start a worker: ``wrap`` turns the worker's own command into the full argv (e.g.
    ``nsys launch … <command>``); ``env`` is its whole environment, ``cwd`` its folder."""

    wrap: Callable[[list[str]], list[str]]
    env: dict[str, str]
    cwd: str
    python: str = sys.executable


@dataclass
class Reply:
    """A worker's answer, and how the request ended: ``stopped`` is "" (answered normally),
    "interrupted", "cancelled" or "timeout" (answered after SIGINT)."""

    data: dict[str, Any]
    stopped: str = ""
    wall_s: float = 0.0
    output: list[str] = field(default_factory=list)


@dataclass
class _Stop:
    """When a request's wait stops the worker: its ``deadline``, its ``cancel`` event, the grace
    an interrupted worker gets; once stopped, ``why`` (timeout, cancelled, interrupted) and
    ``until`` when it must have answered."""

    deadline: float | None
    cancel: threading.Event | None
    grace_s: float
    why: str = ""
    until: float = 0.0


class WorkerProcess:
    """One worker. ``start()``, then ``request()`` as often as needed, then ``stop()``."""

    def __init__(self, launch: Launch, startup_timeout: float = 300.0) -> None:
        self.launch = launch
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: socket.socket | None = None
        self.channel: messages.Channel | None = None  # the signed frames over ``conn``
        self.pid: int | None = None  # the worker's own pid (the launcher's child)
        self.hello: dict[str, Any] = {}
        self.argv: list[str] = []
        self.started_at = 0.0
        self.tail: collections.deque[str] = collections.deque(maxlen=200)
        self._sinks: list[LineSink] = []
        self._sinks_lock = threading.Lock()
        self._marks: set[int] = set()  # reply marks the output pump has seen
        self._marks_seen = threading.Condition()
        self._pump_done = False
        self._marks_lost = False  # a mark never came: do not wait for marks again
        self._lock = threading.Lock()  # one request at a time
        self._requests = 0  # the number of the last request sent (its reply carries it)
        self._dir: str | None = None
        self._pump: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self, on_line: LineSink | None = None, cancel: threading.Event | None = None) -> None:
        """Start launcher + worker and wait for the worker's hello (``startup_timeout``)."""
        self._dir = tempfile.mkdtemp(prefix="nsm-")  # private (0700); a short socket path
        path = os.path.join(self._dir, "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        command = [self.launch.python, "-m", WORKER_MODULE, "--socket", path, "--parent",
                   str(os.getpid())]  # fmt: skip
        ticks = process_start_ticks(os.getpid())
        if ticks is not None:
            command += ["--parent-start", str(ticks)]
        self.argv = self.launch.wrap(command)
        env = dict(self.launch.env)
        env["PYTHONPATH"] = pythonpath_with_package(env)
        env["PYTHONUNBUFFERED"] = "1"
        self.started_at = time.monotonic()
        self.proc = start_child(self.argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=self.launch.cwd)  # fmt: skip
        try:
            # inside the try: a Ctrl-C while the pump's thread starts (the launcher runs
            # already) stops the launcher too, as one later would
            self._start_pump()
            with self.listening(on_line, settle_s=0.05):
                self.conn = self._accept(listener, cancel)
                self._remove_socket_dir()  # connected: nothing is left in the temp dir, even
                # when this kernel is killed and kill() never runs
                key = messages.new_key()  # before any cell runs: the cell never sees it sent
                self.conn.sendall(key)
                self.channel = messages.Channel(self.conn, key, notebook_side=True)
                hello = self.channel.poll(self._left())
                if hello is None:
                    raise WorkerStartError(
                        f"The profiling worker connected but did not say hello within "
                        f"{self.startup_timeout:.3g} s.{self.output_tail()}\nargv: {self.argv}",
                        timed_out=True,
                    )
                self.hello = hello
            self.pid = int(self.hello["pid"])
        except (messages.ChannelError, messages.ConnectionClosed, OSError, KeyError,
                ValueError) as exc:  # fmt: skip
            self.kill()  # an exit before the hello, or a hello that is not the worker's
            raise WorkerStartError(
                f"The profiling worker did not start ({exc or type(exc).__name__}; "
                f"{self.exit_description()}).{self.output_tail()}\nargv: {self.argv}"
            ) from None
        except BaseException:
            self.kill()
            raise
        finally:
            listener.close()

    def _not_python(self) -> str:
        """A worker never exits 0 before its hello: a command that did (``--python /bin/true``)
        is no Python interpreter running the worker; say so, with the fix."""
        if self.proc is None or self.proc.returncode != 0:
            return ""
        return (
            f": {self.launch.python!r} exited at once with code 0 before the worker answered; "
            "--python must name a Python interpreter that can import nsight_magic (the "
            f"notebook's is {sys.executable!r})"
        )

    def _left(self) -> float:
        return max(0.1, self.started_at + self.startup_timeout - time.monotonic())

    def _remove_socket_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _accept(self, listener: socket.socket, cancel: threading.Event | None) -> socket.socket:
        deadline = self.started_at + self.startup_timeout
        while not messages.readable(listener, 0.1):
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise WorkerStartError(
                    f"The profiling worker exited before it started (exit status "
                    f"{self.proc.returncode}){self._not_python()}.{self.output_tail()}"
                    f"\nargv: {self.argv}"
                )
            if cancel is not None and cancel.is_set():
                raise WorkerStartError("Starting the profiling worker was cancelled.")
            if time.monotonic() > deadline:
                raise WorkerStartError(
                    f"The profiling worker did not start within {self.startup_timeout:.3g} s."
                    f"{self.output_tail()}\nargv: {self.argv}",
                    timed_out=True,
                )
        conn, _ = listener.accept()
        return conn

    def alive(self) -> bool:
        """The launcher runs, the socket is open and the worker process itself is there (a
        worker can exit while nsys launch still writes its report)."""
        if self.proc is None or self.proc.poll() is not None or self.conn is None:
            return False
        return self.pid is None or _pid_alive(self.pid)

    def stop(self, timeout: float = 20.0) -> None:
        """Ask the worker to exit (its launcher then writes nothing and exits), wait, and make
        sure no process of the group is left."""
        if self.alive():
            with contextlib.suppress(Exception):
                self.request({"op": "exit"}, timeout=timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self.proc is not None
                self.proc.wait(timeout)
        self.kill()

    def kill(self) -> None:
        """Stop every process of the group (SIGINT, SIGTERM, SIGKILL) and clean up."""
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None
            self.channel = None
        if self.proc is not None:
            if runner.group_members(self.proc.pid) or self.proc.poll() is None:
                runner.stop_group(self.proc, self.proc.pid, (2.0, 2.0))
            with contextlib.suppress(Exception):
                self.proc.wait(5)
        if self.pid is not None and _pid_alive(self.pid):
            # a launcher may run its child in a group of its own: end the worker by pid too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)
        if self._pump is not None:
            with contextlib.suppress(RuntimeError):  # interrupted before it began: no join
                self._pump.join(timeout=5.0)
        pumped = self._pump is None or not self._pump.is_alive()  # no read of its pipe is left
        if pumped and self.proc is not None and self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
        self._remove_socket_dir()

    def exit_description(self) -> str:
        """How the worker ended, in words (for the message after a crash)."""
        if self.proc is None or self.proc.returncode is None:
            return "it stopped answering"
        code = self.proc.returncode
        if code == EXIT_PARENT_GONE:
            return "it saw the notebook process gone"
        if code == EXIT_CHANNEL_DAMAGED:
            return "the cell read from or wrote to its channel to the notebook"
        if code < 0 or code > 128:
            number = -code if code < 0 else code - 128
            try:
                return f"it was killed by {signal.Signals(number).name}"
            except ValueError:
                return f"it exited with status {code}"
        return f"it exited with status {code}"

    # --- output -------------------------------------------------------------------------------
    def _start_pump(self) -> None:
        """The thread that hands the launcher's and worker's output on (``_read_output``)."""
        self._pump = threading.Thread(target=self._read_output, daemon=True)
        self._pump.start()

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            if self.proc.stdout.closed:  # kill() came first (a Ctrl-C as this thread started)
                return
            for line in runner.output_lines(self.proc.stdout.fileno()):
                text, mark = messages.split_mark(line)
                if mark is not None:
                    with self._marks_seen:
                        self._marks.add(mark)
                        self._marks_seen.notify_all()
                    if not text:
                        continue
                self._emit(text)
        finally:
            with self._marks_seen:
                self._pump_done = True
                self._marks_seen.notify_all()

    def _await_output(self, mark: Any) -> None:
        """Return once the pump has handed on every line printed before reply ``mark``."""
        if not isinstance(mark, int):
            return
        if self._marks_lost:  # a launcher that keeps the worker's stdout: the old short wait
            time.sleep(0.05)
            return
        with self._marks_seen:
            seen = self._marks_seen.wait_for(lambda: mark in self._marks or self._pump_done,
                                             OUTPUT_MARK_WAIT_S)  # fmt: skip
            self._marks.discard(mark)
        self._marks_lost = not seen

    def _emit(self, line: str) -> None:
        self.tail.append(readable(line))
        with self._sinks_lock:
            sinks = list(self._sinks)
        for sink in sinks:
            with contextlib.suppress(Exception):  # a broken display must not stop the pump
                sink(line)

    @contextlib.contextmanager
    def listening(self, sink: LineSink | None, settle_s: float = 0.0) -> Iterator[None]:
        """Hand the output lines to ``sink`` while the block runs (and ``settle_s`` after it:
        the start, whose hello has no output mark)."""
        if sink is None:
            yield
            return
        with self._sinks_lock:
            self._sinks.append(sink)
        try:
            yield
        finally:
            time.sleep(settle_s)
            with self._sinks_lock:
                self._sinks.remove(sink)

    def output_tail(self, n: int = 15) -> str:
        lines = [ln.rstrip("\r\n") for ln in list(self.tail)[-n:] if ln.strip()]
        return ("\nLast output:\n  " + "\n  ".join(lines)) if lines else ""

    # --- requests -----------------------------------------------------------------------------
    def request(
        self,
        message: dict[str, Any],
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_line: LineSink | None = None,
        grace_s: float = INTERRUPT_GRACE_S,
    ) -> Reply:
        """Send ``message`` and wait for the answer. Ctrl-C, ``cancel`` or ``timeout`` interrupt
        the worker (see the module docstring); WorkerDiedError when it is gone."""
        with self._lock, self.listening(on_line):
            if not self.alive():
                raise WorkerDiedError(
                    f"The profiling worker is not running ({self.exit_description()})."
                )
            t0 = time.monotonic()
            number = self._send_numbered(message)
            stop = _Stop(None if timeout is None else t0 + timeout, cancel, grace_s)
            return self._await_reply(number, t0, stop)

    def _send_numbered(self, message: dict[str, Any]) -> int:
        """Send ``message`` with the next request number, which its reply must carry: a frame
        the cell sent on the worker's own channel (taken out of ``gc``) is signed like a reply
        and would otherwise answer this request, and every later reply the one before it."""
        assert self.channel is not None
        self._requests += 1
        try:
            self.channel.send({**message, "request": self._requests})
        except messages.ChannelError as exc:
            raise self._damaged(exc) from None
        except OSError:  # it exited between two requests
            description = self.exit_description()
            self.kill()
            raise WorkerDiedError(
                f"The profiling worker is gone ({description}).{self.output_tail()}"
            ) from None
        return self._requests

    def _await_reply(self, number: int, t0: float, stop: _Stop) -> Reply:
        assert self.channel is not None
        while True:
            try:
                data = self.channel.poll(0.05)
                if data is not None:
                    if data.pop("request", None) != number:
                        raise messages.ChannelError(
                            f"a reply that does not answer request {number}: the cell "
                            "sent on the worker's own channel"
                        )
                    self._await_output(data.pop("mark", None))
                    return Reply(data, stop.why, time.monotonic() - t0)
                if self.proc is not None and self.proc.poll() is not None:
                    raise messages.ConnectionClosed("the worker's launcher exited")
                self._check_stop(stop)
            except KeyboardInterrupt:
                if stop.why:  # a second Ctrl-C: stop everything now
                    self.kill()
                    raise WorkerDiedError(
                        "Interrupted twice: the worker was stopped; the next cell starts a "
                        "new worker.",
                        stopped="interrupted",
                    ) from None
                stop.why, stop.until = "interrupted", self._interrupt(stop.grace_s)
            except messages.ChannelError as exc:
                raise self._damaged(exc) from None
            except (messages.ConnectionClosed, OSError):
                with contextlib.suppress(Exception):
                    assert self.proc is not None
                    self.proc.wait(5)
                description = self.exit_description()
                self.kill()
                raise WorkerDiedError(
                    f"The profiling worker died ({description}).{self.output_tail()}"
                ) from None

    def _check_stop(self, stop: _Stop) -> None:
        """Interrupt the worker past the deadline or on cancel; kill it when it did not stop
        within its grace."""
        now = time.monotonic()
        if stop.why and now > stop.until:
            self.kill()
            raise WorkerDiedError(
                f"The worker did not stop within {stop.grace_s:g} s after being "
                f"{stop.why} and was killed; the next cell starts a new worker.",
                stopped=stop.why,
            )
        if not stop.why and stop.deadline is not None and now > stop.deadline:
            stop.why, stop.until = "timeout", self._interrupt(stop.grace_s)
        elif not stop.why and stop.cancel is not None and stop.cancel.is_set():
            stop.why, stop.until = "cancelled", self._interrupt(stop.grace_s)

    def _damaged(self, exc: messages.ChannelError) -> WorkerDiedError:
        """The channel got a frame the worker did not send (the cell wrote to the worker's
        socket, or sent on its channel): nothing more from it can be trusted. The worker is
        stopped, the next cell starts a new one."""
        self.kill()
        return WorkerDiedError(
            f"The channel to the profiling worker was damaged ({exc}): the cell wrote to a "
            "file descriptor or channel it does not own. The worker was stopped; the next cell "
            "starts a new one (it receives the notebook's variables)."
        )

    def _interrupt(self, grace_s: float) -> float:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGINT)
        return time.monotonic() + grace_s
