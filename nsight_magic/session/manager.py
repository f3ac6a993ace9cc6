"""The profiling session of one notebook kernel: its history, one warm worker per profiler, and
the drill-downs (kernel picker, NVTX range) that results ask for.

``MANAGER`` is the session the magics use. A worker starts on the first profiled cell that
needs it and is reused while its launch options match; ``restart``/``stop`` end it (the next
cell starts a new one, which replays the history). At interpreter exit every worker is stopped;
if the kernel dies instead, each worker notices and exits by itself (``worker.watch_parent``).
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import (
    NothingCapturedError,
    WorkerDiedError,
)
from ..processes import gpu_memory
from ..profilers.nsys import NsysOptions
from ..run_folders.run_dir import RunDir
from ..script import PreparedCell
from .backends import Backend, NcuBackend, NsysBackend
from .history import REGISTRY, History, HistoryEntry, SetupRegistry
from .run_context import RunContext
from .runs.drill import DrillDowns
from .runs.fallback import again_warm, crash_note, empty_attach_note, fresh_instead
from .runs.fresh import FreshExecutor
from .runs.pipeline import CellJob, profile_cell
from .runs.prewarm import (
    Imports,
    follow_imports,
    imports_of,
    prewarm,
    prewarm_drill_down,
    prewarm_for_setup,
    start_at_load,
    start_for_drill_downs,
    start_for_host_cells,
    submodules_to_follow,
)
from .runs.warm import WarmExecutor
from .spec import CellRequest, Notebook, Rerun, RunCallbacks, SweepLimits
from .state import setup_replay
from .workers.activity import Activity
from .workers.pool import SessionStatus, WorkerPool
from .workers.warm_session import WarmSession


class SessionManager:
    """The notebook's profiling session: its workers, setup cells and history, ``profile``
    (one cell), ``sweep``; ``drills`` (``drill.DrillDowns``) re-runs a profiled cell under ncu."""

    def __init__(self, setup: SetupRegistry = REGISTRY) -> None:
        self.history = History()
        self.setup = setup
        self.workers = WorkerPool()  # the live workers (workers/pool.py)
        self._nsys_runs: dict[str, weakref.ref[Any]] = {}  # cell text -> its last nsys run
        # ``profile`` looked up at each drill-down (a test may replace it on this object)
        self.drills = DrillDowns(lambda *a, **k: self.profile(*a, **k), self.history,
                                 self._nsys_runs)  # fmt: skip
        # start workers before cells need them (prewarm.py); the magics turn it on by default
        self.prewarm = False
        self.prewarm_backends: dict[str, Callable[[], Backend]] = {
            "nsys": NsysBackend,
            "ncu": NcuBackend,
            # the worker of a first %%nsys --host cell, started beside the first nsys cell
            "host": lambda: NsysBackend(NsysOptions(host=True)),
        }
        self._drill_prewarmed = False
        # the first nsys cell began: the ncu and the --host worker started beside it
        self._standbys_started = False
        self.background: list[threading.Thread] = []  # prewarm threads (tests join them)
        # what the workers were told to import: (module, "") and (module, name looked up)
        self._imported: set[tuple[str, str]] = set()
        self._load_start: threading.Event | None = None  # set once %load_ext's worker is up
        self._ncu_at_load: list[threading.Thread] = []  # the ncu worker's start %load_ext began
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
        """A setup cell about to run in the notebook: with ``prewarm`` the nsys and ncu workers
        start (or are found) and receive what it defined once it ran (``prewarm.py``).
        ``end_setup`` says how the notebook's run ended."""
        read = setup_replay.values_read(cell.names_read, self.notebook.user_ns)
        entry = self.history.add("setup", name or "setup", cell, read_values=read)
        self._setup_done[entry.id] = threading.Event()
        if self.prewarm:
            self.background += prewarm_for_setup(self, entry.id)
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
        before = gpu_memory.notebook_allocated_bytes() or 0
        files = dict(self.notebook.code_files)
        try:
            ok = bool(run())
        finally:
            # the file names IPython compiled this cell under: what it defines is sent named
            # by this setup cell, not by the notebook cell number IPython gave it
            for file, number in list(self.notebook.code_files.items()):
                if files.get(file) != number:
                    self.history.setup_files[file] = entry.id
            # what a worker that must rebuild it (a name that cannot be shared) will need
            after = gpu_memory.notebook_allocated_bytes()
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
            for session in self.workers.sessions_of():
                if entry.id in session.executed:
                    session.worker.kill()
        finally:
            if (done := self._setup_done.pop(entry.id, None)) is not None:
                done.set()

    def start_worker(self, tool: str = "nsys", backend: Backend | None = None) -> threading.Thread:
        """Start the worker of ``tool`` (default launch options, or ``backend``'s: a ``--host``
        worker) and bring it up to date with the setup cells, in the background
        (``%nsight_session start``); returns the thread."""
        backend = backend or self.prewarm_backends[tool]()
        thread = prewarm(self, backend, CellRequest(cell="pass"))
        self.background.append(thread)
        return thread

    def start_at_load(self, cells: list[str], *, torch: bool) -> None:
        """``%load_ext`` in a kernel (``prewarm`` on): the nsys worker starts now and imports
        what ``cells`` (those run before, as IPython transformed them) import, and torch first
        when ``torch`` (the notebook's Python has it): the first profiled cell of a Run All,
        right after a short setup cell, then waits for no import (``prewarm.py``)."""
        if not self.prewarm:
            return
        modules: dict[str, None] = dict.fromkeys(("torch",) if torch else ())
        attributes: dict[str, list[str]] = {}
        for code in cells:
            found = imports_of(code)
            modules.update(dict.fromkeys(found.modules))
            for module, names in found.attributes.items():
                attributes.setdefault(module, []).extend(names)
        imports = Imports(tuple(modules), attributes)
        self._imported |= imports.told()
        self._load_start = threading.Event()
        load = start_at_load(self, imports, self._load_start)
        self.background.append(load)
        # the ncu worker of a first drill-down, once that one is up and has imported
        self._ncu_at_load = start_for_drill_downs(self, CellRequest(cell="pass"),
                                                  self._imports_so_far, after=[load])  # fmt: skip
        self.background += self._ncu_at_load

    def follow_imports(self, code: str) -> None:
        """A cell the notebook starts (``code``, as IPython transformed it): what it imports
        that no worker was told of, imported by the live workers in the background (the one
        ``%load_ext`` starts once it is up)."""
        if not self.prewarm:
            return
        self._tell(imports_of(code).without(self._imported))

    def follow_modules(self, new: list[str]) -> None:
        """A cell the notebook ran imported the modules ``new`` (its ``sys.modules`` grew): those
        of packages the cells imported, imported by the live workers in the background
        (``submodules_to_follow``)."""
        if self.prewarm:
            self._tell(submodules_to_follow(new, self._imported))

    def _imports_so_far(self) -> Imports:
        """What the workers were told to import, torch first: for a worker started now."""
        return Imports.of_told(self._imported, first="torch")

    def _tell(self, imports: Imports) -> None:
        starting = self._load_start
        if imports.modules and (self.workers.sessions_of() or starting is not None):
            self._imported |= imports.told()  # a worker started later imports them itself
            self.background.append(follow_imports(self, imports, starting))

    def clear_setup(self) -> int:
        self.history.drop_setup()
        return self.setup.clear()

    # --- workers ----------------------------------------------------------------------------
    def stop(self, tool: str | None = None) -> list[str]:
        """Stop the workers of ``tool`` (all when None); returns which tools had any."""
        self._imported.clear()  # a worker started later is told again
        self._load_start = None
        return self.workers.stop(tool)

    def reset(self) -> list[str]:
        """Stop the workers and forget the profiled cells (setup cells stay): the next cell
        starts a worker that runs only the setup cells."""
        stopped = self.stop()
        self._drill_prewarmed = self._standbys_started = False
        self.history.drop_cells()
        return stopped

    def status(self) -> list[SessionStatus]:
        return self.workers.status()

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
        rerun: Rerun | None = None,
    ) -> Any:
        """Profile ``request`` with ``backend``: in the warm worker, or fresh when
        ``request.fresh`` (or a drill-down's ``rerun`` re-runs a saved script cold). Returns an
        ``NsysRun`` / ``NcuRun``; raises the typed errors of ``errors.py``."""
        rerun = rerun or Rerun()
        if notebook is not None:
            self.notebook = notebook
        else:  # a drill-down: the worker receives the notebook's names as the cell's did
            notebook = self.notebook
        # an out-of-memory message names the session's workers (pipeline._oom_text)
        callbacks = dataclasses.replace(callbacks or RunCallbacks(), workers=self._worker_names)
        # a profiled cell in flight: the ncu prewarm waits for a pause (activity.py)
        with self.activity.cell():
            captured: dict[str, RunContext] = {}

            def make_result(report: Any, ctx: RunContext) -> Any:
                captured["ctx"] = ctx
                return self._result(report, ctx, rerun.parent)

            executor = self._executor_for(request, backend, rerun)
            self._start_standbys(request, backend, executor)
            job = CellJob(request, backend, make_result, notebook, callbacks, rerun.run_dir,
                          rerun.meta)  # fmt: skip
            try:
                run = profile_cell(job, executor)
            except WorkerDiedError as died:
                if backend.tool != "ncu" or died.stopped or not isinstance(executor, WarmExecutor):
                    raise
                run, again = self._after_crash(died, executor, job)
                if again is None:  # a fresh process: no worker's history
                    return run
                executor = again
            except NothingCapturedError as empty:
                if not (empty.target_opened and isinstance(executor, WarmExecutor)):
                    raise
                return fresh_instead(empty, empty_attach_note, job, self.setup.prepared)
            self._ran(request, backend, executor, captured.get("ctx"), rerun.before, run)
            return run

    def _executor_for(self, request: CellRequest, backend: Backend,
                      rerun: Rerun) -> FreshExecutor | WarmExecutor:  # fmt: skip
        """A fresh process for ``--fresh``, a saved script and ranks (torchrun each time); the
        warm worker otherwise."""
        if request.fresh or rerun.script is not None or request.nproc > 1:
            setup = self.setup.prepared() if rerun.script is None else ()
            return FreshExecutor(setup, rerun.script)
        return WarmExecutor(
            lambda ctx, replace: self.workers.session_for(backend, ctx, replace),
            self.history, rerun.before,
        )  # fmt: skip

    def _start_standbys(self, request: CellRequest, backend: Backend,
                        executor: FreshExecutor | WarmExecutor) -> None:  # fmt: skip
        """Once, on the first warm nsys cell: the ncu worker for drill-downs and the --host
        worker start beside it (prewarm.py)."""
        if (backend.tool != "nsys" or not self.prewarm or not isinstance(executor, WarmExecutor)
                or self._standbys_started):  # fmt: skip
            return
        self._standbys_started = True
        # the ncu worker %load_ext started may still be importing: the --host one starts after
        # it, as after one started now
        ncu = [t for t in self._ncu_at_load if t.is_alive()]
        if not ncu:
            ncu = start_for_drill_downs(self, request, self._imports_so_far)
            self.background += ncu
        self.background += start_for_host_cells(
            self, request, self._imports_so_far, backend.launch_key(request), after=ncu
        )

    def _ran(self, request: CellRequest, backend: Backend, executor: FreshExecutor | WarmExecutor,
             ctx: RunContext | None, before: int | None, run: Any) -> None:  # fmt: skip
        """After a run: an nsys run's ranges answer ``%%ncu --nvtx``; a warm cell that is the
        notebook's joins the history, and the first nsys result prewarms the ncu worker."""
        if backend.tool == "nsys" and hasattr(run, "nvtx"):
            self._nsys_runs[request.cell] = weakref.ref(run)
        # a run that left the notebook's state as it was (a sweep's configuration) is no cell
        # of the notebook's history: nothing of it is the notebook's
        if (not isinstance(executor, WarmExecutor) or executor.session is None
                or request.keep_state or ctx is None):  # fmt: skip
            return
        entry_id = self._remember(executor.session, ctx, before, run)
        # once, after the first nsys result: the ncu worker for drill-downs into it
        if backend.tool == "nsys" and self.prewarm and not self._drill_prewarmed:
            self._drill_prewarmed = True
            self.background += prewarm_drill_down(self, executor.session, ctx, entry_id)

    def sweep(
        self,
        request: CellRequest,
        backend: Backend,
        spec: Any,
        *,
        notebook: Notebook | None = None,
        callbacks: RunCallbacks | None = None,
        limits: SweepLimits | None = None,
    ) -> Any:
        """Profile ``request``'s cell once per configuration of ``spec`` (a
        ``sweep.SweepSpec``), each an ordinary ``profile`` run that leaves the notebook's
        state as it was; returns a ``SweepRun`` (``session/runs/sweep.py``). ``limits`` bound its
        size (``%config NsightMagic.sweep_max_configs``), checked before anything runs."""
        from .runs.sweep import run_sweep  # results and views load with the first sweep only

        return run_sweep(self.profile, request, backend, spec, notebook=notebook,
                         callbacks=callbacks, limits=limits)  # fmt: skip

    def _worker_names(self) -> dict[int, str]:
        return {s.pid: f"the {s.tool} worker (pid {s.pid})"
                for s in self.status() if s.alive and s.pid}  # fmt: skip

    def _after_crash(self, died: WorkerDiedError, executor: WarmExecutor,
                     job: CellJob) -> tuple[Any, WarmExecutor | None]:  # fmt: skip
        """The ncu worker crashed on this cell: drop it, and run the cell once more in a new
        warm worker when that leaves the notebook's state right (``fallback.again_warm``),
        else, or when that one crashes too, in a fresh ncu process
        (``fallback.fresh_instead``). Returns the run and the warm executor that made it
        (None: the fresh process)."""
        self._drop(executor.session)
        if executor.may_run_again(job.request):
            retry = WarmExecutor(
                lambda ctx, replace: self.workers.session_for(job.backend, ctx, replace),
                self.history, executor.before,
            )  # fmt: skip
            try:
                return again_warm(died, executor, retry, job), retry
            except WorkerDiedError as again:
                if again.stopped:
                    raise
                self._drop(retry.session)
                died, executor = again, retry
        crashed, last = died, executor

        def note(script: Path | None) -> str:
            return crash_note(crashed, last, script)

        return fresh_instead(died, note, job, self.setup.prepared), None

    def _drop(self, dead: WarmSession | None) -> None:
        """A crashed worker is no longer used: the next cell starts a new one."""
        if dead is not None:
            self.workers.forget(dead)
            dead.worker.kill()

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
                                  drill_runner=self.drills)  # fmt: skip


MANAGER = SessionManager()
atexit.register(MANAGER.shutdown)
