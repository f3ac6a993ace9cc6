"""The live workers of one notebook: at most ``MAX_WORKERS_PER_TOOL`` per profiler (one per set of
launch options), how one is found or started for a cell, stopped, and reported.

A worker is started only once a cell needs it (or a prewarm asks), under a per-tool lock so an nsys
cell never waits for an ncu start; a ``stop()`` that overtakes a start ends the new worker. What a
worker holds and how it is brought up to date is ``state/exchange.py``'s business, not this
module's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import NsightMagicError
from ...processes import deadline, gpu_memory
from ...processes import locate as tools
from ...profilers.commands import shutdown_session
from ...worker.conversation import Conversation
from ...worker.process import WorkerProcess, WorkerStartError
from ..backends import Backend, WarmState
from ..run_context import RunContext, now_utc
from .warm_session import WarmSession

# workers kept per profiler, one per set of launch options (nsys --trace, --env, --python)
MAX_WORKERS_PER_TOOL = 2


@dataclass
class SessionStatus:
    """What ``%nsight_session`` shows for one worker."""

    tool: str
    alive: bool
    pid: int | None
    uptime_s: float
    cells: int
    replayed: int
    launch_argv: list[str] = field(default_factory=list)
    cuda_memory: dict[str, Any] = field(default_factory=dict)
    gpu_memory_mib: float | None = None  # what nvidia-smi says the worker process holds
    prewarmed: list[str] = field(default_factory=list)  # replayed before any cell asked
    busy: str = ""  # what it does in the background now
    mapped_bytes: int = 0  # the notebook's GPU memory it maps (CUDA IPC), not its own
    shared_names: list[str] = field(default_factory=list)  # names it got from the notebook


class WorkerPool:
    """The workers by tool, most recently used last; ``stop_count`` counts ``stop()`` calls
    (a start decided before a stop is ended when it completes)."""

    def __init__(self) -> None:
        self._sessions: dict[str, list[WarmSession]] = {}
        self._lock = threading.Lock()  # the dict above; held briefly
        # one worker start per tool at a time (an nsys cell never waits for an ncu start)
        self._starting = {"nsys": threading.Lock(), "ncu": threading.Lock()}
        self._ids = itertools.count(1)
        self.stop_count = 0

    def session_for(
        self,
        backend: Backend,
        ctx: RunContext,
        replace: str = "",
        stops: int | None = None,
        *,
        beside_only: bool = False,
    ) -> WarmSession:
        """The live worker for this tool and launch options, started when there is none (or
        ``replace`` says why that one cannot serve; ``stops``: the stop() count when the
        caller decided to start it, a prewarm). A worker of other launch options is kept
        beside it (least recently used out, at most ``MAX_WORKERS_PER_TOOL``) when the GPU has
        room for both (``gpu_memory.py``). ``beside_only``: a standby no cell asked for yet,
        started only where it ends no other worker (``WorkerStartError`` otherwise), and the
        least recently used of its tool from its start: a third launch option ends it first."""
        key = backend.launch_key(ctx.request)
        tool = backend.tool
        if not replace and (live := self._use(tool, key)) is not None:
            return live  # not held by another worker's start (a standby's: prewarm.py)
        with self._starting.setdefault(tool, threading.Lock()):
            if not replace and (live := self._use(tool, key)) is not None:
                return live  # the start this one waited for was of the same options
            with self._lock:
                workers = self._sessions.setdefault(tool, [])
                match = next((s for s in workers if s.key == key), None)
                ended = [s for s in workers if s is match or not s.alive()]
                others = [s for s in workers if s not in ended]
            if match is not None and not replace and not match.alive():
                ctx.lines.note(f"starting a new {tool} worker (it was no longer running).")
            if others:
                room, why = gpu_memory.read().room_for_copy_of(others[-1].worker.pid)
                keep = others[-(MAX_WORKERS_PER_TOOL - 1) :] if room else []
                if beside_only and len(keep) < len(others):
                    raise WorkerStartError(f"no room for another {tool} worker beside the others")
                ended += [s for s in others if s not in keep]
                ctx.lines.note(
                    f"starting a second {tool} worker for these launch options; the other one "
                    "stays for its own cells." if keep else
                    f"starting a new {tool} worker (its launch options changed"
                    f"{'; ' + why if why else ''})."
                )  # fmt: skip
            with self._lock:
                self._sessions[tool] = [s for s in self._sessions[tool] if s not in ended]
            for session in ended:
                self.end(session)
            state = WarmState(name=f"nsight-magic-{os.getpid()}-{next(self._ids)}")
            stops = self.stop_count if stops is None else stops
            state.extra["log"] = str(ctx.folder.log)  # start-up messages point here
            limit = deadline.bound(deadline.WORKER_START_S)  # or what --timeout left
            worker = WorkerProcess(backend.launch(ctx.tool, ctx.request, state), limit.seconds)
            ctx.lines.phase("starting", f"the {tool} worker")
            try:
                worker.start(on_line=ctx.lines, cancel=ctx.callbacks.cancel)
            except WorkerStartError as exc:
                if limit.timeout is not None and exc.timed_out:  # --timeout ran out
                    raise limit.expired(f"the {tool} worker's start",
                                        ctx.folder.log) from None  # fmt: skip
                raise
            try:
                backend.after_start(ctx.tool, state, worker)
            except BaseException:
                worker.kill()
                raise
            session = WarmSession(tool, key, worker, state, now_utc())
            with self._lock:
                stopped = stops != self.stop_count
                if not stopped:
                    group = self._sessions.setdefault(tool, [])
                    group.insert(0 if beside_only else len(group), session)
            if stopped:  # %nsight_session stop (or exit) came while it started
                self.end(session)
                raise WorkerStartError(f"The {tool} worker was stopped while it started.")
            return session

    def _use(self, tool: str, key: tuple[Any, ...]) -> WarmSession | None:
        """The live worker of ``tool`` and launch key ``key``, now the most recently used."""
        with self._lock:
            workers = self._sessions.get(tool, [])
            match = next((s for s in workers if s.key == key and s.alive()), None)
            if match is not None:
                workers.remove(match)
                workers.append(match)
            return match

    def sessions_of(self, tool: str | None = None) -> list[WarmSession]:
        with self._lock:
            return [s for t, group in self._sessions.items() if tool in (None, t) for s in group]

    @staticmethod
    def end(session: WarmSession, collect: bool = True) -> None:
        if session.lock.acquire(timeout=1.0):  # idle: asked to exit
            try:
                with contextlib.suppress(Exception):
                    session.worker.stop()
            finally:
                session.lock.release()
        else:  # busy in the background (prewarm) or in a picker thread: stopped for sure
            session.worker.kill()
        if session.tool == "nsys":  # the session name must not linger in nsys's daemon
            with contextlib.suppress(Exception):
                shutdown_session(tools.find_tool("nsys"), session.state.name)
        if collect:
            with contextlib.suppress(Exception):  # the memory it mapped is the notebook's
                gpu_memory.collect_ipc()

    def stop(self, tool: str | None = None) -> list[str]:
        """Stop the workers of ``tool`` (all when None); returns which tools had any."""
        with self._lock:
            self.stop_count += 1
            chosen = [t for t in list(self._sessions) if tool in (None, t)]
            sessions = [s for t in chosen for s in self._sessions.pop(t)]
        # at once, not one after the other: each may wait its whole bound on a hung exit or
        # `nsys shutdown` (two workers took 2 x 30 s)
        threads = []
        for session in sessions:
            thread = threading.Thread(target=self.end, args=(session, False), daemon=True,
                                      name=f"nsight_magic stop {session.tool}")  # fmt: skip
            try:
                thread.start()
            except RuntimeError:  # at interpreter exit (atexit) no thread starts: in turn
                self.end(session, False)
            else:
                threads.append(thread)
        for thread in threads:
            thread.join()
        if sessions:
            with contextlib.suppress(Exception):  # the memory they mapped, freed once
                gpu_memory.collect_ipc()
        return sorted({s.tool for s in sessions}, key=["nsys", "ncu"].index)

    def status(self) -> list[SessionStatus]:
        out = []
        sessions = self.sessions_of()
        smi = gpu_memory.read().mib_by_pid()  # what nvidia-smi says each process holds
        for s in sessions:
            data: dict[str, Any] = {}
            if s.alive() and s.lock.acquire(timeout=0.5):  # a busy worker is not asked
                try:
                    data = Conversation(s.worker).status().data
                except NsightMagicError:
                    pass
                finally:
                    s.lock.release()
            memory = data.get("cuda_memory", {})
            out.append(
                SessionStatus(
                    tool=s.tool,
                    alive=s.alive(),
                    pid=s.worker.pid,
                    uptime_s=time.monotonic() - s.worker.started_at,
                    cells=s.cells,
                    replayed=len(s.executed),
                    launch_argv=list(s.worker.argv),
                    cuda_memory=memory,
                    gpu_memory_mib=smi.get(s.worker.pid or -1),
                    prewarmed=list(s.prewarmed),
                    busy=s.busy,
                    mapped_bytes=int(data.get("mapped_bytes", s.mapped_bytes) or 0),
                    shared_names=sorted(s.mirror.graph.bindings) if s.mirror else [],
                )
            )
        return out

    def forget(self, session: WarmSession) -> None:
        """Drop ``session`` from the pool (it is killed by the caller: a crash)."""
        with self._lock:
            for workers in self._sessions.values():
                if session in workers:
                    workers.remove(session)
