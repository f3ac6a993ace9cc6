"""The session worker: one long-lived Python process per profiler that runs notebook cells in a
single persistent namespace, so a profiled cell costs its own time plus the profiler's.

    python -m nsight_magic.worker.serve --socket PATH --parent PID [--parent-start TICKS]

It runs under ``nsys launch`` or ``ncu --mode launch`` (or bare, for tests), connects back to the
notebook over a Unix socket and serves one request at a time (``messages.py``). Each cell comes
as the run folder's generated ``script.py``: the worker imports it and calls its hooks
(``run_history``, ``prepare``, ``warmup``, ``capture``), so a warm run executes the very code a
fresh run would. Stdlib only; nothing from the notebook side is imported here.

Lifetime: the worker exits when the notebook process is gone (a watchdog thread polls its pid and
start time: a killed kernel leaves no orphan), when asked, or after a cell leaves the CUDA
context broken (a sticky CUDA error): the next cell then starts a new worker. SIGINT interrupts
the running cell; the worker itself keeps serving.

The channel (``messages.Channel``) is out of the cell's reach as far as a process can keep it:
the socket sits on a random high descriptor (not the 3 a cell would guess), close-on-exec (no
program the cell starts inherits it), closed in any child the cell forks (a forked child that
returns from the cell exits instead of serving: one process answers), and every frame is signed
with a key the notebook sent first, so bytes the cell writes to it anyway give one clear error
and a new worker, never a reply the worker did not send.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import ctypes
import fcntl
import gc
import importlib
import os
import resource
import runpy
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from nsight_magic.processes.child_watchdog import stat_fields as _stat_fields  # stdlib only
from nsight_magic.shared_state import project_code
from nsight_magic.shared_state.worker_side import WorkerState
from nsight_magic.worker import messages

EXIT_PARENT_GONE = 70
EXIT_CHANNEL_DAMAGED = 71  # a request frame that was not the notebook's (the cell read or wrote)
KEY_WAIT_S = 60.0  # the notebook sends the key as soon as it accepted the connection
WATCH_INTERVAL_S = 0.5
CLOSED_GRACE_S = 2.0  # after the socket closed: how long the notebook may take to be seen dead
# after a "release" that says more of the same cell follows at once (a sweep's configurations):
# how long the worker must sit idle before it hands torch's cached blocks back. The next
# configuration comes within ~0.2 s and reuses them; releasing at once (a gc.collect of a
# process with torch and transformers) delayed its first request by 0.10-0.16 s on the H100
# (benchmarks P16). Any other cell's release is done at once: another worker's run may need the
# GPU memory (a drill-down's snapshot goes to the device only when it has room)
RELEASE_IDLE_S = 0.5


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): a pid plus this names one
    process, even after the pid is reused."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def parent_alive(pid: int, start_ticks: int | None) -> bool:
    if os.path.isdir("/proc"):
        fields = _stat_fields(pid)  # one read: its state (field 3) and start time (field 22)
        if len(fields) <= 19 or fields[0] in ("Z", "X"):
            return False  # gone, or a killed kernel its server has not reaped yet
        return start_ticks is None or int(fields[19]) == start_ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def own_session_group(parent_sid: int | None) -> int | None:
    """The process group to end with this worker when the notebook dies: the group of the
    session the notebook started it in (its launcher: ``ncu --mode launch``, ``nsys launch``,
    their helpers), never the notebook's own session. None when it cannot be told apart."""
    try:
        sid, group = os.getsid(0), os.getpgrp()
    except OSError:
        return None
    return None if parent_sid is None or sid == parent_sid else group


def launcher_group(parent: int) -> int | None:
    """Read while the notebook lives: the group ``own_session_group`` names."""
    try:
        return own_session_group(os.getsid(parent))
    except OSError:
        return None


def exit_with_notebook(group: int | None) -> None:
    """The notebook is gone: end this process and the launcher's process group with it
    (``ncu --mode launch`` and its subreaper do not watch the notebook: they outlived it)."""
    # the notebook read our output: with it gone the pipe is broken and writing raises, which
    # must not stop the exit (a busy worker would be left running)
    with contextlib.suppress(Exception):
        sys.stderr.write("[nsight_magic worker] the notebook process is gone; exiting\n")
        sys.stderr.flush()
    if group is not None:  # SIGKILL to the group ends this process too
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    os._exit(EXIT_PARENT_GONE)


def watch_parent(pid: int, start_ticks: int | None, group: int | None = None) -> None:
    """Exit the whole process as soon as the notebook is gone (no cleanup can run there)."""
    while parent_alive(pid, start_ticks):
        time.sleep(WATCH_INTERVAL_S)
    exit_with_notebook(group)


def cuda_broken() -> str | None:
    """A sticky CUDA error (device-side assert, illegal address) leaves the context unusable:
    every later call fails. Out-of-memory does not. None when the context is fine or unused."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        torch.cuda.synchronize()
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None if "out of memory" in text.lower() else f"{type(exc).__name__}: {text}"
    return None


def cuda_memory() -> dict[str, Any]:
    """What torch's caching allocator holds on each device (no CUDA call when torch never
    initialised CUDA: asking would create a context)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    out = {}
    for device in range(torch.cuda.device_count()):
        out[str(device)] = {
            "allocated_bytes": int(torch.cuda.memory_allocated(device)),
            "reserved_bytes": int(torch.cuda.memory_reserved(device)),
        }
    return out


def release_cached_memory() -> None:
    """torch's cached, unused GPU blocks handed back to CUDA: an idle worker keeps its context
    and its live tensors, not the cache of the cell it ran (each idle worker kept 11 GB beside
    a 43 GB training state in the notebook, issue 41). No CUDA call when CUDA was never used."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):  # a broken context says so at the next cell
        if torch.cuda.is_initialized():
            gc.collect()  # the cell's cycles hold blocks too
            torch.cuda.empty_cache()


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or "<unprintable X object>" when its ``__str__`` raises (as the script's
    ``runtime.message_of``: the worker imports nothing of the script's)."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__} object>"


def _failed(exc: BaseException, phase: str, tb: str) -> dict[str, Any]:
    """The reply of a step whose code raised (the request itself was served)."""
    return {
        "ok": True,
        "status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "error",
        "phase": phase,
        "exc_type": type(exc).__name__,
        "exc_message": message_of(exc),
        "traceback": tb,
    }


class Worker:
    """The namespace and the current cell's script module, and the request handlers."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.state = WorkerState(self.ns)  # what it shares with the notebook
        self.module: dict[str, Any] | None = None
        self.started = time.time()
        self.cells = 0

    def names(self) -> list[str]:
        return sorted(k for k in self.ns if not (k.startswith("__") and k.endswith("__")))

    def handle(self, op: str, msg: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"ok": False, "error": f"unknown op {op!r}"}
        with contextlib.suppress(Exception):  # a path it cannot take is the import's to say
            project_code.follow(msg.get("sys_path"))
            project_code.follow_modules(msg.get("project_modules"))
        return handler(msg)

    def _notebook_keeps(self, msg: dict[str, Any]) -> None:
        """The script's ``NOTEBOOK_KEEPS`` for this request, in its hooks' own globals
        (``run_path`` hands back a copy of them)."""
        if self.module is not None:
            hook = self.module["capture"]
            hook.__globals__["NOTEBOOK_KEEPS"] = bool(msg.get("notebook_keeps"))
            # a repeat (warm-up, re-run) puts the namespace and its objects back by looking
            hook.__globals__["KEEP_STATE"] = self.state.kept
            hook.__globals__["RERUN_SHOWN"] = bool(msg.get("shown"))

    def _hook(self, name: str) -> Any:
        if self.module is None:
            raise RuntimeError("no cell script loaded")
        return self.module[name]

    def _user_traceback(self, exc: BaseException) -> str:
        """The traceback of an exception a script hook raised, as the notebook would show it:
        from the user's first frame on. This handler's frames are cut here, the script's own
        (``prepare``, ``run_statements``, ``load_vars``) by the script's ``user_traceback``."""
        tb = exc.__traceback__
        here = os.path.abspath(__file__)
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
            tb = tb.tb_next
        exc = exc.with_traceback(tb)
        try:
            return str(self._hook("user_traceback")(exc))
        except Exception:  # no script loaded: the exception as it is
            return "".join(traceback.format_exception(type(exc), exc, tb))

    def op_load(self, msg: dict[str, Any]) -> dict[str, Any]:
        if msg.get("cwd"):  # the cell runs where the notebook is now, as a fresh run would
            os.chdir(msg["cwd"])
        # the cell's sys.argv: the script alone, as in a fresh run, not this worker's options
        # (an argparse in the cell said "unrecognized arguments: --socket /tmp/nsm-…")
        sys.argv[:] = [msg["script"]]
        # run_name keeps the script's ``main()`` from running: we call its hooks instead
        self.module = runpy.run_path(msg["script"], run_name="nsight_magic_cell")
        return {"ok": True}

    def op_history(self, msg: dict[str, Any]) -> dict[str, Any]:
        errors = self._hook("run_history")(self.ns, msg.get("entries", []))
        return {"ok": True, "errors": errors, "names": self.names()}

    def op_receive(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The notebook's names this cell needs (CUDA memory by IPC handle: one copy)."""
        try:
            got = self.state.receive(msg["path"], frozenset(msg.get("theirs") or ()))
        except BaseException as exc:  # a class the worker cannot import, a handle it cannot map
            failed = _failed(exc, "vars", self._user_traceback(exc))
            failed["exc_message"] = f"receiving the notebook's variables failed: {exc}"
            return failed
        return {"ok": True, "status": "ok", "received": got, "names": self.names()}

    def op_prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Shipped variables, then warm-up runs (outside any capture); ``notebook_keeps`` as
        for ``capture``."""
        phase = "vars"
        self._notebook_keeps(msg)
        try:
            self._hook("prepare")(self.ns)
            # the process as the cell starts (the notebook's names and --vars in, their
            # modules imported): send_back says what the cell changed of it
            self.state.mark_process(os.getcwd())
            phase = "warmup"
            self._hook("warmup")(self.ns)
        except BaseException as exc:  # the user's code: report it in cell coordinates
            failed = _failed(exc, phase, self._user_traceback(exc))
            failed["worker_broken"] = cuda_broken()
            return failed
        return {"ok": True, "status": "ok", "names": self.names()}

    def op_capture(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The gated run of the cell; ``notebook_keeps``: the notebook keeps the memory this
        worker maps around a re-run (the script's ``NOTEBOOK_KEEPS``, for this request)."""
        self._notebook_keeps(msg)
        with self.state.one_look():  # its repeats (and a re-run around them) look once
            status = self._hook("capture")(self.ns)
        self.cells += 1
        if status.get("status") != "ok":
            status["worker_broken"] = cuda_broken()
        return {"ok": True, **status, "phase": "cell", "names": self.names()}

    def op_send_back(self, msg: dict[str, Any]) -> dict[str, Any]:
        """What the cell changed, to the notebook (``state.worker_side.WorkerState.send_back``)."""
        try:
            got = self.state.send_back(msg["path"], int(msg.get("max_bytes", 0)),
                                       float(msg.get("bound_s") or 0))  # fmt: skip
        except BaseException as exc:  # nothing goes back: the names stay in this worker
            return {"ok": False, "exc_type": type(exc).__name__, "exc_message": str(exc)}
        return {"ok": True, **got}

    def op_agreed(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The notebook applied what the cell changed; map its copies of this worker's CUDA
        tensors when it made some (``WorkerState.agreed``)."""
        try:
            got = self.state.agreed(msg.get("path"))
        except BaseException as exc:  # the worker keeps its own memory for them
            return {"ok": False, "exc_type": type(exc).__name__, "exc_message": str(exc)}
        return {"ok": True, **got}

    def op_imports(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Import what a setup cell imports while the notebook runs it (a worker that receives
        its names then only maps them); torch also starts CUDA. Failures are the cell's to
        report, later: nothing is bound in the namespace here."""
        done = []
        attributes = msg.get("attributes", {})
        for name in msg.get("modules", []):
            with contextlib.suppress(Exception):
                module = importlib.import_module(name)
                done.append(name)
                # ``from transformers import Qwen2ForCausalLM``: a lazy package imports the
                # model's module on first access, else the receive would (after the setup)
                for attribute in attributes.get(name, []):
                    with contextlib.suppress(Exception):
                        getattr(module, attribute)
        torch = sys.modules.get("torch")
        if torch is not None:
            with contextlib.suppress(Exception):
                if torch.cuda.is_available():
                    torch.cuda.init()
        return {"ok": True, "imported": done}

    def release_idle(self) -> None:
        """What an idle worker hands back: the cell script's host buffers (a whole-state save's
        pool and its staging buffers, ``release_host_buffers``) and torch's cached GPU blocks."""
        hook = (self.module or {}).get("release_host_buffers")
        if hook is not None:
            with contextlib.suppress(Exception):  # a status must still answer
                hook()
        release_cached_memory()

    def op_release(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The cell is over: what an idle worker holds goes back (``release_idle``) once this
        reply is sent, so the cell waits for none of it; with ``when_idle`` (a sweep's next
        configuration follows) once the worker has sat idle for ``RELEASE_IDLE_S``
        (``serve``)."""
        return {"ok": True}

    def op_cuda_init(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The first CUDA driver call. Under ``ncu --mode launch`` the process stops there until
        a tool attaches, so the notebook makes it happen while its release-attach waits."""
        try:
            rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
        except OSError as exc:
            return {"ok": True, "cuda": False, "detail": str(exc)}
        return {"ok": True, "cuda": rc == 0, "detail": f"cuInit returned {rc}"}

    def op_status(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started,
            "cells": self.cells,
            "cuda_memory": cuda_memory(),
            "mapped_bytes": self._mapped_bytes(),
            "names": len(self.names()),
        }

    def _mapped_bytes(self) -> int:
        """The notebook's GPU memory this worker maps (0 before any cell's script)."""
        if self.module is None or "mapped_bytes" not in self.module:
            return 0
        try:
            return int(self.module["mapped_bytes"](self.ns))
        except Exception:  # a status must answer whatever the cell left behind
            return 0

    def op_exit(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "exit": True}


def _send(channel: messages.Channel, reply: dict[str, Any], number: int) -> None:
    """The reply to request ``number``, after the cell's output and its mark. A SIGINT in the
    middle of a reply would leave half a message on the socket (it waits, blocked, and is
    dropped: the cell it was for has finished); a reply over the message limit (an exception
    with a huge message) is cut, not fatal."""
    try:
        with _sigint_blocked():
            reply["mark"] = _mark_output(number)
            channel.send(reply, cut=True)
    except KeyboardInterrupt:
        # raised as the mask is restored. When the notebook stopped this worker meanwhile (the
        # send failed: a broken pipe), the next poll finds the channel closed; raised from
        # here, it printed a traceback into the cell's output on a loaded machine
        pass


def hide(sock: socket.socket) -> socket.socket:
    """``sock`` moved to a random descriptor high in the allowed range, close-on-exec: a cell
    writing to the low numbers it would guess (3, 4, ...) does not hit the channel."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = 1 << 16 if soft == resource.RLIM_INFINITY or soft <= 0 else min(soft, 1 << 16)
    low = max(64, top // 4)
    if top <= low + 1:
        return sock
    try:
        fd = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, low + secrets.randbelow(top - low))
    except OSError:  # every high descriptor taken: the signature still guards the channel
        return sock
    moved = socket.socket(fileno=fd)
    sock.close()
    return moved


def disown_in_children(channel: messages.Channel) -> int:
    """A process the cell forks gets no channel: its copy of the socket is closed right after
    the fork (``os.fork``, multiprocessing's fork, a DataLoader's workers). Returns the pid that
    owns the channel (``serve`` ends a forked child that comes back from the cell)."""
    owner = os.getpid()

    def after_in_child() -> None:
        if os.getpid() == owner:
            return
        channel.broken = "this is a process the cell forked; only the worker answers"
        with contextlib.suppress(OSError):
            os.close(channel.sock.detach())

    os.register_at_fork(after_in_child=after_in_child)
    return owner


def _end_forked_child(reply: dict[str, Any]) -> None:
    """A child the cell forked came back here (the cell ended in it): it exits as a script's
    child would at the script's end, and never speaks on the notebook's channel."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0 if reply.get("status", "ok") == "ok" and reply.get("ok", True) else 1)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _mark_output(number: int) -> int | None:
    """Flush the cell's output and write the reply's mark after it on the real stdout (fd 1,
    which is the notebook's pipe whatever the cell did to ``sys.stdout``); None when it cannot
    be written (the notebook then does not wait for it)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a cell may have replaced or closed them
            stream.flush()
    try:
        os.write(1, messages.output_mark(number))
    except OSError:
        return None
    return number


def serve(channel: messages.Channel, worker: Worker, owner: int | None = None) -> bool:
    """Answer requests until asked to exit (False) or the notebook's end closed (True).
    ``owner``: the worker's pid (a child the cell forked that gets back here exits)."""
    number = 0
    owner = os.getpid() if owner is None else owner
    release_pending = False  # a cell asked for it; done once the worker is idle (op_release)
    while True:
        kind, msg = _receive(channel, RELEASE_IDLE_S if release_pending else None)
        if kind == "closed":
            return True
        if kind == "idle":  # nothing came within RELEASE_IDLE_S
            with contextlib.suppress(KeyboardInterrupt):  # a late interrupt: the next poll
                worker.release_idle()
            release_pending = False
        if kind != "message":
            continue
        op = str(msg.get("op", ""))
        if op == "load":  # a cell begins: it reuses the cache; its own release follows it
            release_pending = False
        elif op == "status" and release_pending:  # the idle worker's memory, as it will be
            worker.release_idle()
            release_pending = False
        reply = _answer(worker, op, msg, owner)
        try:
            _send(channel, reply, number := number + 1)
        except (OSError, messages.ChannelError):
            return True
        if reply.get("exit") or reply.get("worker_broken"):
            return False
        if op == "release":
            release_pending = bool(msg.get("when_idle"))
            if not release_pending:
                worker.release_idle()


def _receive(channel: messages.Channel, timeout: float | None) -> tuple[str, dict[str, Any]]:
    """``("message", msg)``; ``("idle", {})`` when nothing came within ``timeout``;
    ``("closed", {})`` when the notebook's end closed; ``("again", {})`` after an interrupt
    that arrived once the cell had finished. A damaged channel ends the worker."""
    try:
        msg = channel.poll(timeout)
    except (messages.ConnectionClosed, OSError):
        # closed, or reset (the notebook closed its end with a reply unread: it stopped this
        # worker): a traceback here would land in the cell's output
        return "closed", {}
    except messages.ChannelError as exc:  # the cell read from (or wrote to) the socket
        with contextlib.suppress(Exception):
            sys.stderr.write(f"[nsight_magic worker] the channel to the notebook was "
                             f"damaged ({exc}); exiting\n")  # fmt: skip
            sys.stderr.flush()
        os._exit(EXIT_CHANNEL_DAMAGED)
    except KeyboardInterrupt:  # (the channel keeps a frame it was reading: nothing is lost)
        return "again", {}
    return ("idle", {}) if msg is None else ("message", msg)


def _answer(worker: Worker, op: str, msg: dict[str, Any], owner: int) -> dict[str, Any]:
    """The worker's reply to ``msg``, an interrupt or an error a reply too; a child the cell
    forked that got back here exits instead."""
    try:
        reply = worker.handle(op, msg)
    except KeyboardInterrupt:
        reply = {"ok": False, "interrupted": True, "error": "interrupted"}
    except Exception:
        reply = {"ok": False, "error": traceback.format_exc()}
    if os.getpid() != owner:
        _end_forked_child(reply)
    reply["request"] = msg.get("request")  # the notebook checks it answers its request
    return reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nsight_magic.worker.serve")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--parent-start", type=int, default=None)
    args = parser.parse_args(argv)
    group = launcher_group(args.parent)
    threading.Thread(
        target=watch_parent, args=(args.parent, args.parent_start, group), daemon=True
    ).start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    key = messages.read_key(sock, KEY_WAIT_S)
    sock = hide(sock)
    channel = messages.Channel(sock, key, notebook_side=False)
    del key
    owner = disown_in_children(channel)
    worker = Worker()
    channel.send(
        {
            "op": "hello",
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "cwd": os.getcwd(),
        },
    )
    closed = True
    try:
        closed = serve(channel, worker, owner)
    finally:
        with contextlib.suppress(OSError):
            channel.sock.close()
        sys.stdout.flush()
    if closed:  # the notebook's end closed: a killed kernel closes it a moment before it dies
        deadline = time.monotonic() + CLOSED_GRACE_S
        try:
            while parent_alive(args.parent, args.parent_start) and time.monotonic() < deadline:
                time.sleep(0.05)
        except KeyboardInterrupt:  # the notebook stopping us: no traceback in the cell's output
            return 1
    if not parent_alive(args.parent, args.parent_start):
        exit_with_notebook(group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
