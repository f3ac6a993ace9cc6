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
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import runs, tools
from ..analysis.range_spec import resolve_nvtx_range
from ..errors import NsightMagicError
from ..nvtx_names import NVTX_DOMAIN, WARMUP_RANGE
from ..profilers import ncu as ncu_argv
from ..profilers.nsys import session_argv
from ..script import PreparedCell
from . import gpu_memory
from .backends import Backend, NcuBackend, NsysBackend, WarmState
from .fresh import FreshExecutor
from .history import REGISTRY, History, HistoryEntry, SetupRegistry
from .pipeline import RunContext, now_utc, profile_cell
from .prewarm import prewarm, prewarm_drill_down, prewarm_for_setup
from .spec import CellRequest, Notebook, RunCallbacks
from .warm import WarmExecutor, WarmSession
from .worker_process import WorkerProcess, WorkerStartError

# workers kept per profiler, one per set of launch options (nsys --trace, --env, --python)
MAX_WORKERS_PER_TOOL = 2
# ncu on one rank of a torchrun job: the peers run unprofiled; bound it anyway
MULTI_RANK_TIMEOUT_S = 600.0
# What ncu can read of an NCCL kernel in one pass (more passes replay it while its peers wait)
NCCL_SINGLE_PASS = (
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
)


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


class SessionManager:
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
        if self.prewarm:
            self.background.append(prewarm_for_setup(self))
        return entry

    def run_setup(self, name: str, cell: PreparedCell, run: Callable[[], bool]) -> bool:
        """A ``%%nsight_setup`` cell: recorded first, so that a prewarmed worker replays it while
        ``run`` (the notebook's own run of it) runs; kept if that succeeds, else taken back."""
        entry, ok = self.begin_setup(name, cell), False
        try:
            ok = bool(run())
        finally:
            self.end_setup(entry, cell.source, name, ok)
        return ok

    def end_setup(self, entry: HistoryEntry, source: str, name: str, ok: bool) -> None:
        """Keep the setup cell (fresh runs replay it too), or, when it failed in the notebook,
        take it back and end the workers that ran it (their state is not the notebook's)."""
        if ok:
            self.setup.add(source, name=name)
            return
        self.history.remove(entry.id)
        for session in self._sessions_of():
            if entry.id in session.executed:
                session.worker.kill()

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
            worker = WorkerProcess(backend.launch(ctx.tool, ctx.request, state))
            ctx.lines.phase("starting", f"the {tool} worker")
            worker.start(on_line=ctx.lines, cancel=ctx.callbacks.cancel)
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
                argv = session_argv(tools.find_tool("nsys"), "shutdown", session.state.name)
                subprocess.run(argv, capture_output=True, timeout=30, check=False)

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
            memory: dict[str, Any] = {}
            if s.alive() and s.lock.acquire(timeout=0.5):  # a busy worker is not asked
                try:
                    memory = s.worker.request({"op": "status"}, timeout=10).data.get(
                        "cuda_memory", {}
                    )
                except NsightMagicError:
                    pass
                finally:
                    s.lock.release()
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
        captured: dict[str, RunContext] = {}

        def make_result(report: Any, ctx: RunContext) -> Any:
            captured["ctx"] = ctx
            return self._result(report, ctx, parent)

        executor: FreshExecutor | WarmExecutor
        if request.fresh or script is not None or request.nproc > 1:  # ranks: torchrun each time
            executor = FreshExecutor(self.setup.prepared() if script is None else (), script)
        else:
            executor = WarmExecutor(lambda ctx, replace: self._session(backend, ctx, replace),
                                    self.history, before, replay_all=self.replay_all)  # fmt: skip
        run = profile_cell(request, backend, executor, make_result, notebook=notebook,
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

    def _remember(self, session: WarmSession, ctx: RunContext, before: int | None, run: Any) -> int:
        """A warm cell that completed joins the history (a re-run of an earlier one does not:
        it is that entry, now run by this worker too). Returns its history id."""
        if before is not None:
            session.executed.append(before)
            return before
        vars_file = ctx.run_dir / "vars.pkl"
        entry = self.history.add("cell", ctx.request.name, ctx.cell,
                                 vars_file=vars_file if vars_file.exists() else None,
                                 run_dir=ctx.run_dir)  # fmt: skip
        session.executed.append(entry.id)
        run.meta = runs.update_meta(ctx.run_dir, history_id=entry.id)
        return entry.id

    def _result(self, report: Any, ctx: RunContext, parent: Any) -> Any:
        return ctx.backend.result(report, ctx.run_dir, ctx.meta, parent=parent, profiler=self)

    def ncu_range_filter(self, spec: str, cell: str) -> str:
        """``%%ncu --nvtx SPEC`` spelled for ncu. When this notebook profiled the same cell with
        nsys, SPEC is resolved against that run's ranges (any domain, push/pop or start/end;
        an ambiguous or unknown name is a typed error listing the choices). Otherwise the domain
        comes from SPEC ("DOMAIN:RANGE", a bare RANGE is the default domain's) and a push/pop
        range (``nvtx.annotate``) is assumed: if nothing matches, the run's message lists the
        ranges the cell opened."""
        known = self._nsys_runs.get(cell)
        run = known() if known is not None else None
        domain: str | None
        if run is not None:
            found = resolve_nvtx_range(run.nvtx(), spec)
            domain, name, push_pop = found.domain, found.range, found.style == "PushPop"
        else:
            domain, name = ncu_argv.parse_range_spec(spec)
            push_pop = True
        return ncu_argv.nvtx_filter(name, domain=domain or None, push_pop=push_pop)

    # --- drill-downs (results.KernelProfiler) -----------------------------------------------
    def profile_kernel(self, parent: Any, kernel: str, *, instance: int = 0, count: int = 1,
                       **kwargs: Any) -> Any:  # fmt: skip
        """ncu on launch ``instance`` (0-based, within the cell) of ``kernel`` (exact name) of
        the cell ``parent`` ran: in the warm ncu worker when this notebook ran that cell, else
        a cold re-run of the parent's saved script. The child run lives in the parent's
        folder (``ncu/<time>-<kernel>/``) and is listed in its meta.json. For a cell that ran
        as several ranks, ``rank=R`` names the rank ncu profiles (the others run unprofiled);
        an NCCL kernel gets single-pass metrics only: replaying a collective on one rank while
        its peers wait hangs (measured on nvidia-h200-x2, tests/data/README.md)."""
        options = dict(kernel_exact=kernel, launch_skip=instance, launch_count=count)
        record = {"kernel": kernel, "instance": instance, "count": count}
        if "nccl" in kernel.lower():
            options.update(set=None, sections=(), metrics=NCCL_SINGLE_PASS)
            record["note"] = "NCCL kernel: single-pass metrics only"
            kwargs.update(set=None, sections=(), metrics=NCCL_SINGLE_PASS)
        return self._drill(parent, kernel, options, record, **kwargs)

    def profile_range(self, parent: Any, domain: str, name: str, style: str = "PushPop",
                      **kwargs: Any) -> Any:  # fmt: skip
        """ncu on every kernel launched inside the NVTX range ``domain:name`` of the cell
        ``parent`` ran (warm-up runs excluded)."""
        expression = ncu_argv.nvtx_filter(name, domain=domain or None, push_pop=style == "PushPop")
        options = dict(nvtx_include=(expression,),
                       nvtx_exclude=(f"{NVTX_DOMAIN}@{WARMUP_RANGE}/",))  # fmt: skip
        label = f"{domain}:{name}"
        return self._drill(parent, label, options, {"nvtx_range": label, "style": style}, **kwargs)

    def _drill(
        self,
        parent: Any,
        label: str,
        filters: dict[str, Any],
        record: dict[str, Any],
        *,
        set: str | None = "roofline",
        sections: tuple[str, ...] = (),
        metrics: tuple[str, ...] = (),
        fresh: bool = False,
        timeout: float | None = None,
        rank: int = 0,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        parent_dir = getattr(parent, "run_dir", None)
        if parent_dir is None:
            raise NsightMagicError(
                "This run was opened from a report file, not profiled here, so there is no saved "
                "cell to re-run under ncu; profile the cell with %%nsys first, or use %%ncu."
            )
        parent_dir = Path(parent_dir)
        if not (parent_dir / "script.py").exists() or not (parent_dir / "cell.py").exists():
            raise NsightMagicError(
                f"{parent_dir} has no saved cell (script.py, cell.py), so it cannot be re-run; "
                "profile the cell again."
            )
        parent_meta = runs.read_json(parent_dir / runs.META, {}) or {}
        entry = self.history.find_run(parent_dir)
        nproc = int(parent_meta.get("nproc") or 1)
        before = None if fresh or entry is None or nproc > 1 else entry.id
        cold = before is None
        if nproc > 1 and timeout is None:
            timeout = MULTI_RANK_TIMEOUT_S  # a stuck collective must never hang the notebook
        request = CellRequest(
            cell=(parent_dir / "cell.py").read_text(),
            name=str(parent_meta.get("name") or "cell"),
            warmup=int(parent_meta.get("warmup") or 0),
            python=str(parent_meta.get("python") or sys.executable),
            cwd=str(parent_meta.get("cwd") or os.getcwd()),
            env=runs.read_json(parent_dir / "env.json", {}) or {},
            timeout=timeout,
            fresh=cold,
            nproc=nproc,
            rank=rank,
        )
        filters = {k: v for k, v in filters.items() if k not in ("set", "sections", "metrics")}
        backend = NcuBackend(ncu_argv.NcuOptions(set=set, sections=tuple(sections),
                                                 metrics=tuple(metrics), **filters))  # fmt: skip
        backend.locate()  # a missing ncu is reported before a child folder exists
        run_dir = runs.child_run_dir(parent_dir, label)
        meta = {"name": f"{request.name}:{label}", "parent_run": str(parent_dir), **record}
        if nproc > 1:
            meta["rank"] = rank
        callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
        t0 = time.perf_counter()
        try:
            return self.profile(request, backend, callbacks=callbacks, parent=parent,
                                before=before, run_dir=run_dir, meta=meta,
                                script=parent_dir / "script.py" if cold else None)  # fmt: skip
        finally:
            runs.add_child(parent_dir, {"run_dir": str(run_dir.relative_to(parent_dir)),
                                        **record, "set": set, "mode": "fresh" if cold else "warm",
                                        "wall_s": time.perf_counter() - t0,
                                        "started_utc": now_utc()})  # fmt: skip


MANAGER = SessionManager()
atexit.register(MANAGER.shutdown)
