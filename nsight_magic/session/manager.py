"""The profiling session of one notebook kernel: its history, one warm worker per profiler, and
the drill-downs (kernel picker, NVTX range) that results ask for.

``MANAGER`` is the session the magics use. A worker starts on the first profiled cell that
needs it and is reused while its launch options match; ``restart``/``stop`` end it (the next
cell starts a new one, which replays the history). At interpreter exit every worker is stopped;
if the kernel dies instead, each worker notices and exits by itself (``worker.watch_parent``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import tools
from ..errors import (
    NothingCapturedError,
    NsightMagicError,
    WorkerDiedError,
)
from ..run_dir import RunDir
from ..script import PreparedCell
from . import deadline, gpu_memory, shared_state
from .activity import Activity
from .backends import Backend, NcuBackend, NsysBackend, WarmState
from .drill import DrillDowns
from .fallback import crash_note, empty_attach_note, fresh_instead
from .fresh import FreshExecutor
from .history import REGISTRY, History, HistoryEntry, SetupRegistry
from .pipeline import RunContext, now_utc, profile_cell
from .prewarm import prewarm, prewarm_drill_down, prewarm_for_setup
from .profiler_cli import shutdown_session
from .spec import CellRequest, Notebook, RunCallbacks
from .warm import WarmExecutor, WarmSession
from .worker_process import WorkerProcess, WorkerStartError

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


class SessionManager(DrillDowns):
    def __init__(self, setup: SetupRegistry = REGISTRY) -> None:
        self.history = History()
        self.setup = setup
        # per tool, up to MAX_WORKERS_PER_TOOL (launch options differ), most recently used last
        self._sessions: dict[str, list[WarmSession]] = {}
        self._nsys_runs: dict[str, weakref.ref[Any]] = {}  # cell text -> its last nsys run
        self._lock = threading.Lock()  # the dict above; held briefly
        # one worker start per tool at a time (an nsys cell never waits for an ncu start)
        self._starting = {"nsys": threading.Lock(), "ncu": threading.Lock()}
        self._ids = itertools.count(1)
        # replay every cell a new worker has not run, not only those the cell needs (replay.py)
        self.replay_all = False
        # start workers before cells need them (prewarm.py); the magics turn it on by default
        self.prewarm = False
        self.prewarm_backends: dict[str, Callable[[], Backend]] = {
            "nsys": NsysBackend,
            "ncu": NcuBackend,
        }
        self._drill_prewarmed = False
        self.background: list[threading.Thread] = []  # prewarm threads (tests join them)
        self._stops = 0  # stop() calls: a worker whose start a stop() overtook is ended
        self.activity = Activity()  # profiled cells in flight: the ncu prewarm waits for a pause
        # the notebook whose names workers receive (the magics set it): what a prewarm sends
        self.notebook = Notebook()
        self._setup_done: dict[int, threading.Event] = {}  # setup entry id -> its run ended

    # --- setup cells ------------------------------------------------------------------------
    def record_setup(self, source: str, name: str, cell: PreparedCell) -> None:
        """A ``%%nsight_setup`` cell: fresh runs replay it (``setup``), workers run it once."""
        self.setup.add(source, name=name)
        self.history.add("setup", name or "setup", cell)

    def begin_setup(self, name: str, cell: PreparedCell) -> HistoryEntry:
        """A setup cell about to run in the notebook: with ``prewarm`` the nsys worker starts
        (or is found) and replays it meanwhile. ``end_setup`` says how the notebook's run
        ended."""
        entry = self.history.add("setup", name or "setup", cell)
        self._setup_done[entry.id] = threading.Event()
        if self.prewarm:
            self.background.append(prewarm_for_setup(self, entry.id))
        return entry

    def wait_setup(self, entry_id: int, timeout: float | None = None) -> bool:
        """Wait until the notebook's run of setup entry ``entry_id`` ended; True when it is
        still in the history (it succeeded)."""
        done = self._setup_done.get(entry_id)
        if done is not None:
            done.wait(timeout)
        return self.history.get(entry_id) is not None

    def run_setup(
        self, name: str, cell: PreparedCell, run: Callable[[], bool], *, in_notebook: bool = True
    ) -> bool:
        """A ``%%nsight_setup`` cell: recorded first, so that a prewarmed worker starts while
        ``run`` (the notebook's own run of it) runs and receives what it defined after; kept
        if that succeeds, else taken back."""
        entry, ok = self.begin_setup(name, cell), False
        before = shared_state.cuda_allocated_bytes() or 0
        try:
            ok = bool(run())
        finally:
            # what a worker that must rebuild it (a name that cannot be shared) will need
            after = shared_state.cuda_allocated_bytes()
            if after is not None:
                self.history.gpu_bytes[entry.id] = max(0, after - before)
            if ok and in_notebook:  # its names are the notebook's: workers receive them
                self.history.in_notebook.add(entry.id)
            self.end_setup(entry, cell.source, name, ok)
        return ok

    def end_setup(self, entry: HistoryEntry, source: str, name: str, ok: bool) -> None:
        """Keep the setup cell (fresh runs replay it too), or, when it failed in the notebook,
        take it back and end the workers that ran it (their state is not the notebook's)."""
        try:
            if ok:
                self.setup.add(source, name=name)
                return
            self.history.remove(entry.id)
            for session in self._sessions_of():
                if entry.id in session.executed:
                    session.worker.kill()
        finally:
            if (done := self._setup_done.pop(entry.id, None)) is not None:
                done.set()

    def start_worker(self, tool: str = "nsys") -> threading.Thread:
        """Start the worker of ``tool`` (default launch options) and replay the setup cells,
        in the background (``%nsight_session start``); returns the thread."""
        thread = prewarm(self, self.prewarm_backends[tool](), CellRequest(cell="pass"))
        self.background.append(thread)
        return thread

    def clear_setup(self) -> int:
        self.history.drop_setup()
        return self.setup.clear()

    # --- workers ----------------------------------------------------------------------------
    def _session(
        self, backend: Backend, ctx: RunContext, replace: str = "", stops: int | None = None
    ) -> WarmSession:
        """The live worker for this tool and launch options, started when there is none (or
        ``replace`` says why that one cannot serve; ``stops``: the stop() count when the
        caller decided to start it, a prewarm). A worker of other launch options is kept
        beside it (least recently used out, at most ``MAX_WORKERS_PER_TOOL``) when the GPU has
        room for both (``gpu_memory.py``)."""
        key = backend.launch_key(ctx.request)
        tool = backend.tool
        with self._starting.setdefault(tool, threading.Lock()):
            with self._lock:
                workers = self._sessions.setdefault(tool, [])
                match = next((s for s in workers if s.key == key), None)
                if match is not None and match.alive() and not replace:
                    workers.remove(match)
                    workers.append(match)
                    return match
                ended = [s for s in workers if s is match or not s.alive()]
                others = [s for s in workers if s not in ended]
            if match is not None and not replace and not match.alive():
                ctx.lines.note(f"starting a new {tool} worker (it was no longer running).")
            if others:
                room, why = gpu_memory.read().room_for_copy_of(others[-1].worker.pid)
                keep = others[-(MAX_WORKERS_PER_TOOL - 1) :] if room else []
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
                self._end(session)
            state = WarmState(name=f"nsight-magic-{os.getpid()}-{next(self._ids)}")
            stops = self._stops if stops is None else stops
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
                stopped = stops != self._stops
                if not stopped:
                    self._sessions.setdefault(tool, []).append(session)
            if stopped:  # %nsight_session stop (or exit) came while it started
                self._end(session)
                raise WorkerStartError(f"The {tool} worker was stopped while it started.")
            return session

    def _sessions_of(self, tool: str | None = None) -> list[WarmSession]:
        with self._lock:
            return [s for t, group in self._sessions.items() if tool in (None, t) for s in group]

    @staticmethod
    def _end(session: WarmSession) -> None:
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
        with contextlib.suppress(Exception):  # the memory it mapped is the notebook's to free
            shared_state.collect_ipc()

    def stop(self, tool: str | None = None) -> list[str]:
        """Stop the workers of ``tool`` (all when None); returns which tools had any."""
        with self._lock:
            self._stops += 1
            chosen = [t for t in list(self._sessions) if tool in (None, t)]
            sessions = [s for t in chosen for s in self._sessions.pop(t)]
        for session in sessions:
            self._end(session)
        return sorted({s.tool for s in sessions}, key=["nsys", "ncu"].index)

    def reset(self) -> list[str]:
        """Stop the workers and forget the profiled cells (setup cells stay): the next cell
        starts a worker that runs only the setup cells."""
        stopped = self.stop()
        self._drill_prewarmed = False
        self.history.drop_cells()
        return stopped

    def status(self) -> list[SessionStatus]:
        out = []
        sessions = self._sessions_of()
        smi = gpu_memory.read().mib_by_pid()  # what nvidia-smi says each process holds
        for s in sessions:
            data: dict[str, Any] = {}
            if s.alive() and s.lock.acquire(timeout=0.5):  # a busy worker is not asked
                try:
                    data = s.worker.request({"op": "status"}, timeout=10).data
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
                    shared_names=sorted(s.shipped),
                )
            )
        return out

    def shutdown(self) -> None:
        self.stop()

    # --- profiling --------------------------------------------------------------------------
    def profile(
        self,
        request: CellRequest,
        backend: Backend,
        *,
        notebook: Notebook | None = None,
        callbacks: RunCallbacks | None = None,
        parent: Any = None,
        before: int | None = None,
        run_dir: Path | None = None,
        meta: dict[str, Any] | None = None,
        script: Path | None = None,
    ) -> Any:
        """Profile ``request`` with ``backend``: in the warm worker, or fresh when
        ``request.fresh`` (or a saved ``script`` is re-run cold). Returns an ``NsysRun`` /
        ``NcuRun``; raises the typed errors of ``errors.py``."""
        if notebook is not None:
            self.notebook = notebook
        else:  # a drill-down: the worker receives the notebook's names as the cell's did
            notebook = self.notebook
        # a profiled cell in flight: the ncu prewarm waits for a pause (activity.py)
        with self.activity.cell():
            captured: dict[str, RunContext] = {}

            def make_result(report: Any, ctx: RunContext) -> Any:
                captured["ctx"] = ctx
                return self._result(report, ctx, parent)

            executor: FreshExecutor | WarmExecutor
            # ranks: torchrun each time
            if request.fresh or script is not None or request.nproc > 1:
                executor = FreshExecutor(self.setup.prepared() if script is None else (), script)
            else:
                executor = WarmExecutor(
                    lambda ctx, replace: self._session(backend, ctx, replace),
                    self.history, before, replay_all=self.replay_all,
                )  # fmt: skip
            try:
                run = profile_cell(request, backend, executor, make_result, notebook=notebook,
                                   callbacks=callbacks, run_dir=run_dir, meta=meta)  # fmt: skip
            except WorkerDiedError as died:
                if backend.tool != "ncu" or died.stopped or not isinstance(executor, WarmExecutor):
                    raise
                return self._fresh_after_crash(died, executor, request, backend, make_result,
                                               notebook=notebook, callbacks=callbacks,
                                               run_dir=run_dir, meta=meta)  # fmt: skip
            except NothingCapturedError as empty:
                if not (empty.target_opened and isinstance(executor, WarmExecutor)):
                    raise
                return fresh_instead(empty, empty_attach_note, request, backend, make_result,
                                     setup=self.setup.prepared, notebook=notebook,
                                     callbacks=callbacks, run_dir=run_dir, meta=meta)  # fmt: skip
            if backend.tool == "nsys" and hasattr(run, "nvtx"):  # its ranges answer %%ncu --nvtx
                self._nsys_runs[request.cell] = weakref.ref(run)
            if isinstance(executor, WarmExecutor) and executor.session is not None:
                entry_id = self._remember(executor.session, captured["ctx"], before, run)
                # once, after the first nsys result: the ncu worker for drill-downs into it
                if backend.tool == "nsys" and self.prewarm and not self._drill_prewarmed:
                    self._drill_prewarmed = True
                    ctx = captured["ctx"]
                    self.background += prewarm_drill_down(self, executor.session, ctx, entry_id)
            return run

    def _fresh_after_crash(self, died: WorkerDiedError, executor: WarmExecutor,
                           request: CellRequest, backend: Backend, make_result: Any,
                           **kwargs: Any) -> Any:  # fmt: skip
        """The ncu worker crashed on this cell: drop it (the next cell starts a new one) and
        run the cell once in a fresh ncu process (``fallback.fresh_instead``)."""
        dead = executor.session
        if dead is not None:
            with self._lock:
                workers = self._sessions.get("ncu", [])
                if dead in workers:
                    workers.remove(dead)
            dead.worker.kill()
        return fresh_instead(died, lambda script: crash_note(died, executor, script), request,
                             backend, make_result, setup=self.setup.prepared,
                             **kwargs)  # fmt: skip

    def _remember(self, session: WarmSession, ctx: RunContext, before: int | None, run: Any) -> int:
        """A warm cell that completed joins the history (a re-run of an earlier one does not:
        it is that entry, now run by this worker too). Returns its history id."""
        if before is not None:
            session.executed.append(before)
            return before
        vars_file = ctx.folder.vars
        entry = self.history.add("cell", ctx.request.name, ctx.cell,
                                 vars_file=vars_file if vars_file.exists() else None,
                                 run_dir=ctx.run_dir)  # fmt: skip
        session.executed.append(entry.id)
        run.meta = RunDir(ctx.run_dir).update_meta(history_id=entry.id).to_dict()
        return entry.id

    def _result(self, report: Any, ctx: RunContext, parent: Any) -> Any:
        return ctx.backend.result(report, ctx.run_dir, ctx.meta.to_dict(), parent=parent,
                                  drill_runner=self)  # fmt: skip


MANAGER = SessionManager()
atexit.register(MANAGER.shutdown)
