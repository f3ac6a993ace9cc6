"""Warm runs: the cell in a long-lived worker that keeps its namespace between cells.

For one cell the worker is asked, in order: load the run's script; receive the notebook's names
it lacks and replay the setup cells whose names cannot be sent (``state/exchange.py``); take the
``--vars`` and warm up; then, with the capture begun (``nsys start`` / ``ncu --mode attach``),
run the gated cell; then send what the cell bound and changed back to the notebook. Each step
is a request the notebook can interrupt (see ``worker/process.py``). ``nsys start`` only arms a
collection that the gated cell's cudaProfilerStart opens, so it runs in a thread beside the
steps before the cell instead of after them.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from ...errors import NsightMagicError, WorkerDiedError
from ...profilers.commands import log_line
from ...run_folders.run_dir import cell_status
from ...script import build_script
from ...worker.conversation import Conversation
from ...worker.process import Reply
from ..history import History
from ..run_context import RunContext
from ..spec import CellRequest
from ..state import notebook_snapshot
from ..state.exchange import StateExchange, StepFailed
from ..state.repeat_changes import called_code_names
from ..state.setup_replay import CellPlan, ReplayPlan
from ..workers.warm_session import WarmSession
from .pipeline import Outcome

# after a failed capture start: how long to wait for the worker to be seen dead (a crash)
ATTACH_DEATH_GRACE_S = 1.0
# a request's wall time in meta.timings: "load" and "prepare" would collide with the
# pipeline's own load_s (the report) and prepare_s (the cell parsed)
_TIMING_KEYS = {"load": "script_s", "prepare": "vars_s"}


class _EarlyCapture:
    """A capture begun in a thread while the worker loads, receives and prepares (a backend
    that ``arms_before_prepare``): ``nsys start`` no longer waits in line. The run's deadline
    (a context variable) goes with it."""

    def __init__(self, begin: Callable[[], Any]) -> None:
        self.wall_s = 0.0
        self._handle: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._begin, begin),
                                        name="nsight-magic-capture-start", daemon=True)  # fmt: skip
        self._thread.start()

    def _begin(self, begin: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        try:
            self._handle = begin()
        except BaseException as exc:  # handed to the run's own thread by handle()
            self._error = exc
        finally:
            self.wall_s = time.perf_counter() - t0

    def handle(self) -> Any:
        """The capture's handle once begun; its error when it could not begin."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._handle


# what code that may call cudaProfilerStart names: torch.cuda.profiler.start(), cudart's own
GATE_WORDS = ("profiler", "cudaProfilerStart")


def _opens_gate_early(texts: list[str], names: set[str] | None) -> bool:
    """Whether code that runs before the gated cell (its warm-up, replayed setup cells, the
    notebook functions the warm-up calls, whose ``names`` are given; None: unknown) may call
    cudaProfilerStart itself: an armed collection would then begin there."""
    if names is None:
        return True
    return any(w in text for text in texts for w in GATE_WORDS) or bool(names & set(GATE_WORDS))


def _wait_for(s: WarmSession, ctx: RunContext) -> None:
    """Say so in the progress line when the worker is busy in the background (prewarm)."""
    if s.lock.acquire(timeout=0.05):
        s.lock.release()
        return
    ctx.lines.phase("waiting", s.busy or f"for the {s.tool} worker")
    with s.lock:
        pass


class WarmExecutor:
    """Run a cell in the session ``get_session`` gives (it starts a worker when none is alive:
    only once the cell parsed and the run folder exists; given a reason, it replaces the
    worker). ``before``: only history entries older than this id count (a re-run of an
    earlier cell, e.g. the picker's)."""

    mode = "warm"

    def __init__(
        self,
        get_session: Callable[[RunContext, str], WarmSession],
        history: History,
        before: int | None = None,
    ) -> None:
        self.get_session = get_session
        self.history = history
        self.before = before
        self.cell_plan = CellPlan()
        self.session: WarmSession | None = None
        self.conversation: Conversation | None = None  # the cell's, once it holds the worker
        # what a crash of the worker may have left in the notebook's shared GPU memory: the
        # notebook names the cell may change in place, and whether its body may have begun
        self.notebook_changes: list[str] = []
        self.body_may_have_run = False
        # the notebook's copy of what a re-run under ncu may change (notebook_snapshot.py)
        self.kept: notebook_snapshot.NotebookSnapshot | None = None
        self.repeats_run = before is not None  # and a keep_state request (execute)

    @property
    def plan(self) -> ReplayPlan:
        """The replay of this cell's catch-up (what the crash note counts)."""
        return self.cell_plan.replay

    def _conversation(self, ctx: RunContext, s: WarmSession) -> Conversation:
        """The cell's conversation with the worker: under the cell's deadline and cancel, each
        request's time in meta.json, a broken CUDA context said."""

        def answered(op: str, reply: Reply) -> None:
            timings = ctx.meta.timings
            key = _TIMING_KEYS.get(op, f"{op}_s")
            timings[key] = timings.get(key, 0.0) + reply.wall_s
            if reply.data.get("worker_broken"):
                s.broken = str(reply.data["worker_broken"])
                ctx.lines.note(
                    f"the {s.tool} worker's CUDA context is broken "
                    f"({reply.data['worker_broken']}); it exits and the next cell starts a "
                    "new one."
                )

        return Conversation(s.worker, timeout=ctx.remaining, cancel=ctx.callbacks.cancel,
                            on_line=ctx.lines, on_reply=answered)  # fmt: skip

    def execute(self, ctx: RunContext) -> Outcome:
        request, folder = ctx.request, ctx.folder
        ctx.lines.log = folder
        self.repeats_run = self.repeats(request)
        t0 = time.perf_counter()
        s = self.session = self.get_session(ctx, "")
        _wait_for(s, ctx)  # a prewarm may hold the worker (its imports, its receive)
        with s.lock:
            # the cell's whole wait, up to now that it holds the worker for good
            ctx.meta.timings["worker_start_s"] = time.perf_counter() - t0
            self.conversation = self._conversation(ctx, s)
            state = StateExchange(s, self.history, ctx.notebook, self.conversation,
                                  ctx.lines.note, ctx.meta.timings)  # fmt: skip
            plan = self.cell_plan = state.plan(
                ctx.cell.names_read, before=self.before, setup=request.setup,
                explicit=frozenset(ctx.explicit_vars or {}), required=True,
            )  # fmt: skip
            for note in s.notes:  # what happened in the background (prewarm) since
                ctx.lines.note(note)
            s.notes.clear()
            # the script alone reproduces this state (a fresh re-run after a crash, a shared
            # folder): the setup cells, which the worker received instead of running, and what
            # it has run, then the cell
            ran = {*s.executed, *(e.id for e in plan.replay.run), *(e.id for e in plan.setups)}
            replayed = [e for e in self.history.entries() if e.id in ran]
            changes = state.keep(ctx.cell)
            user_ns = ctx.notebook.user_ns  # of those, the notebook's own objects (not ``os``)
            self.notebook_changes = [n for n in changes or () if n == "*" or (
                n in user_ns and not isinstance(user_ns[n], types.ModuleType))]  # fmt: skip
            script = build_script(ctx.cell, history=[e.payload() for e in replayed],
                                  warmup=request.warmup, repeat=request.repeat,
                                  gate=ctx.backend.gate,
                                  torch_nvtx=ctx.backend.torch_nvtx(),
                                  changes=changes, rerun=self.repeats_run,
                                  **ctx.backend.script_args())  # fmt: skip
            folder.write_script(script)
            # the trace cannot tell a first execution from a warm one by itself (cold_run.py)
            sources = {e.cell.source for e in replayed} | s.ran_sources
            ctx.meta.first_run = request.warmup == 0 and ctx.cell.source not in sources
            ctx.meta.worker = {
                "pid": s.worker.pid,
                "started_utc": s.started_utc,
                "cells_before": s.cells,
                "launch_argv": s.worker.argv,
            }
            folder.write_env(request.env)
            folder.write_meta(ctx.meta)
            try:
                return self._run(ctx, state)
            except StepFailed as failed:  # a step before the capture: the cell never ran gated
                return self._not_run(ctx, failed.reply, failed.phase)
            except WorkerDiedError as died:
                return Outcome(folder.read_status(), died=died)

    def repeats(self, request: CellRequest) -> bool:
        """Whether this run repeats the notebook's state rather than being the notebook's run
        of the cell: a drill-down's re-run of an earlier cell, or a run that must leave the
        notebook as it was (a sweep's configuration). It then keeps everything the worker
        received (the script's ``RERUN``) and nothing comes back."""
        return self.before is not None or request.keep_state

    def may_run_again(self, request: CellRequest) -> bool:
        """Whether the cell may run again in a new warm worker after this one crashed on it:
        a run that leaves the notebook's state as it was anyway (a drill-down's re-run, a
        sweep's configuration: the new worker saves and restores what it may change, as a
        fresh process would leave it), or the notebook's run of a cell whose body had not begun
        or changes no shared GPU memory (run again, it applies its effects once: what the
        crashed worker changed in its own memory died with it)."""
        return self.repeats(request) or not self.body_may_have_run or not self.notebook_changes

    def _talk(self) -> Conversation:
        assert self.conversation is not None, "the cell holds no worker yet"
        return self.conversation

    @staticmethod
    def _step(reply: Reply, phase: str, done: bool) -> Reply:
        """A request's answer before the capture; ``StepFailed`` when it failed or stopped."""
        if reply.stopped or not done:
            raise StepFailed(reply, phase)
        return reply

    def _run(self, ctx: RunContext, state: StateExchange) -> Outcome:
        s = self.session
        assert s is not None
        early = self._arm_early(ctx, s)
        try:
            try:
                before = self._prepare(ctx, state)
            except BaseException as exc:
                if early is not None:
                    self._disarm(ctx, s, early)
                if self._warmup_raised(ctx, exc):  # that run was the cell's: it comes back
                    self._bring_back(ctx, state, stopped=False)
                raise
            return self._capture(ctx, state, early, before)
        finally:
            if self.kept is not None:  # the worker answered or is gone: the re-run is over
                self.kept.restore()

    def _warmup_raised(self, ctx: RunContext, exc: BaseException) -> bool:
        """Whether the notebook's run of a cell ended in its warm-up, raising in the cell's
        own code (the worker alive and answering): the notebook has what that run did."""
        s = self.session
        return (
            isinstance(exc, StepFailed)
            and exc.phase == "vars"
            and bool(ctx.request.warmup)
            and not self.repeats_run
            and bool(exc.reply.data.get("exc_type"))
            and not exc.reply.stopped
            and s is not None
            and s.worker.alive()
        )

    def _keep_in_notebook(self, ctx: RunContext) -> notebook_snapshot.NotebookSnapshot | None:
        """The notebook's copy of what a re-run under ncu may change of the memory the worker
        maps (after the receive: a first drill-down's objects included), or None (the worker
        keeps it: no room, or not such a run)."""
        s = self.session
        under_ncu = ctx.backend.gate == "nvtx"
        if s is None or not (self.repeats_run and under_ncu and self.notebook_changes):
            return None
        mirrored = list(s.mirror.graph.table.values()) if s.mirror is not None else []
        objects = notebook_snapshot.kept_objects(self.notebook_changes, ctx.notebook.user_ns,
                                                 mirrored)  # fmt: skip
        return notebook_snapshot.take(objects, lambda line: log_line(ctx.run_dir, line))

    def _capture(
        self, ctx: RunContext, state: StateExchange, early: _EarlyCapture | None,
        before: frozenset[str],
    ) -> Outcome:  # fmt: skip
        """The gated run, from the capture's begin to the cell's status (the notebook's copy,
        ``kept``, put back once the worker answered)."""
        s, run_dir, kept = self.session, ctx.run_dir, self.kept
        assert s is not None
        t0 = time.perf_counter()
        handle = early.handle() if early is not None else self._begin_capture(ctx, s)
        ctx.meta.timings["begin_capture_s"] = time.perf_counter() - t0
        if early is not None:  # nsys start's own time, hidden behind the steps before
            ctx.meta.timings["capture_armed_s"] = early.wall_s
        ctx.meta.capture_argv = (
            handle if isinstance(handle, list) else getattr(handle, "args", None)
        )
        s.ran_sources.add(ctx.cell.source)
        self.body_may_have_run = True
        try:
            ctx.lines.phase("capturing")
            # a sweep's configuration is a run the user asked for: its output is shown (a
            # drill-down's re-run repeats one already shown: it is not)
            shown = ctx.request.keep_state and self.before is None
            reply = self._talk().capture(notebook_keeps=kept is not None, shown=shown)
        finally:
            t0 = time.perf_counter()
            ctx.backend.end_capture(ctx.tool, s.state, handle, run_dir)
            ctx.meta.timings["end_capture_s"] = time.perf_counter() - t0
        if kept is not None:  # the status says what keeping it cost, as the worker's own do
            reply.data["kept"] = [*(reply.data.get("kept") or []), kept.restore()]
        s.cells += 1
        s.names = frozenset(reply.data.get("names", s.names))
        status = cell_status(state.explain(reply.data))
        ctx.folder.write_status(status)
        usable = not reply.stopped and s.worker.alive() and not s.broken
        # the notebook's run: what it changed comes back, also when it was interrupted (Ctrl-C,
        # --timeout) and the worker answered: as a plain run leaves what it did before the stop
        answered = s.worker.alive() and not s.broken and bool(reply.data)
        if not self.repeats_run and answered:
            self._bring_back(ctx, state, stopped=bool(reply.stopped))
        if usable:  # idle: no cached blocks (once idle when the next configuration follows)
            self._talk().release(when_idle=ctx.request.more_follow)
        return Outcome(status, reply.stopped)

    def _bring_back(self, ctx: RunContext, state: StateExchange, *, stopped: bool) -> None:
        """What the notebook's run of the cell changed, applied to the notebook (meta.json's
        ``brought_back`` says what)."""
        if stopped:
            # the stop asked for is done: this is not another to cancel, nor bound by the
            # cell's --timeout, spent already (an interrupt during the worker's send_back
            # left the two sides' agreement unknown: issue 56's GPU acceptance, 2026-12-07)
            state.conversation = self._talk().after_stop(ctx.notebook.state_timeout_s)
        ctx.meta.brought_back = state.bring_back(ctx.folder, stopped=stopped)

    def _prepare(self, ctx: RunContext, state: StateExchange) -> frozenset[str]:
        """The steps before the capture: the script loaded, the notebook's names received (and
        setup cells replayed for what cannot be sent), the ``--vars`` and the warm-up; returns
        the worker's names before the cell. ``StepFailed`` when one failed."""
        s, plan = self.session, self.cell_plan
        assert s is not None
        # the notebook's directory now (a %cd since the worker started moves the cell too)
        loaded = self._talk().load(str(ctx.folder.script), cwd=ctx.request.cwd)
        self._step(loaded, "load", bool(loaded.data.get("ok")))
        delivered = state.deliver(plan, ctx.folder, ctx.explicit_vars, ctx.lines.phase)
        ctx.meta.shared_vars, ctx.meta.shipped_vars = delivered.shared_vars, delivered.shipped_vars
        ctx.meta.replayed = delivered.replayed
        ctx.lines.phase("running")
        self.body_may_have_run = bool(ctx.request.warmup)  # the warm-up runs it
        self.kept = self._keep_in_notebook(ctx)
        # its reply's ok says only that the request was handled: the warm-up's status counts
        reply = self._talk().prepare(notebook_keeps=self.kept is not None)
        self._step(reply, "vars", reply.data.get("status") == "ok")
        if self.kept is not None and ctx.request.warmup:  # the capture starts from the notebook's
            self.kept.record["warmup_restore_s"] = round(self.kept.put_back(), 4)
        s.names = frozenset(reply.data.get("names", ()))
        return s.names

    def _arm_early(self, ctx: RunContext, s: WarmSession) -> _EarlyCapture | None:
        """Begin the capture in a thread now, where the backend only arms a collection the
        gated cell opens and nothing run before the cell may open it."""
        if not ctx.backend.arms_before_prepare:
            return None
        texts = [e.cell.source for e in self.cell_plan.replay.run]
        names: set[str] | None = set()
        if ctx.request.warmup:
            texts.append(ctx.cell.source)
            # exec/eval: what it runs cannot be read
            opaque = bool(ctx.cell.effects.opaque)
            names = None if opaque else called_code_names(ctx.cell, ctx.notebook.user_ns)
        if _opens_gate_early(texts, names):
            return None
        return _EarlyCapture(lambda: self._begin_capture(ctx, s))

    def _disarm(self, ctx: RunContext, s: WarmSession, early: _EarlyCapture) -> None:
        """A step before the cell failed: end the capture armed meanwhile (a collection left
        armed would refuse the next cell's ``nsys start``)."""
        with contextlib.suppress(NsightMagicError):
            handle = early.handle()
            ctx.backend.end_capture(ctx.tool, s.state, handle, ctx.run_dir)

    def _begin_capture(self, ctx: RunContext, s: WarmSession) -> Any:
        """Begin the profiler's capture; an attach that took the worker down with it is a
        crash (``WorkerDiedError``), not a profiler mistake."""
        try:
            return ctx.backend.begin_capture(ctx.tool, s.state, ctx.run_dir)
        except NsightMagicError as exc:
            deadline = time.monotonic() + ATTACH_DEATH_GRACE_S  # a crash takes a moment to reap
            while s.worker.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if s.worker.alive():
                raise
            raise WorkerDiedError(
                f"The profiling worker died while {ctx.backend.tool} attached "
                f"({s.worker.exit_description()}): {exc}"
            ) from exc

    def _not_run(self, ctx: RunContext, reply: Reply, phase: str) -> Outcome:
        """A step before the capture failed or was stopped: the cell never ran gated."""
        data = dict(reply.data)
        if not data.get("status"):
            data.update(status="interrupted" if reply.stopped else "error",
                        exc_type="WorkerError", exc_message=str(data.get("error", "")).strip(),
                        traceback=str(data.get("error", "")))  # fmt: skip
        data.setdefault("phase", phase)
        status = cell_status(data)
        ctx.folder.write_status(status)
        return Outcome(status, reply.stopped)
