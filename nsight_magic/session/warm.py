"""Warm runs: the cell in a long-lived worker that keeps its namespace between cells.

For one cell the worker is asked, in order: load the run's script; receive the notebook's names
it lacks and replay the setup cells whose names cannot be sent (``state_exchange``); take the
``--vars`` and warm up; then, with the capture begun (``nsys start`` / ``ncu --mode attach``),
run the gated cell; then send what the cell bound and changed back to the notebook. Each step
is a request the notebook can interrupt (see ``worker_process``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import NsightMagicError, WorkerDiedError
from ..run_folders.run_dir import cell_status
from ..script import build_script
from . import catch_up, shared_state
from .history import History
from .pipeline import Outcome, RunContext
from .replay import ReplayPlan
from .spec import CellRequest
from .state_exchange import StateExchange, StepFailed
from .warm_session import WarmSession
from .worker_process import Reply

# after a failed capture start: how long to wait for the worker to be seen dead (a crash)
ATTACH_DEATH_GRACE_S = 1.0
# a request's wall time in meta.timings: "load" and "prepare" would collide with the
# pipeline's own load_s (the report) and prepare_s (the cell parsed)
_TIMING_KEYS = {"load": "script_s", "prepare": "vars_s"}


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
        self.catch_up: catch_up.CatchUpPlan = catch_up.CatchUpPlan(
            ReplayPlan(), shared_state.SharePlan()
        )
        self.session: WarmSession | None = None

    @property
    def plan(self) -> ReplayPlan:
        """The replay of this cell's catch-up (what the crash note counts)."""
        return self.catch_up.replay

    def _ask(self, ctx: RunContext, message: dict[str, Any]) -> Reply:
        assert self.session is not None
        reply = self.session.worker.request(
            message, timeout=ctx.remaining(), cancel=ctx.callbacks.cancel, on_line=ctx.lines
        )
        timings = ctx.meta.timings
        key = _TIMING_KEYS.get(message["op"], f"{message['op']}_s")
        timings[key] = timings.get(key, 0.0) + reply.wall_s
        if reply.data.get("worker_broken"):
            self.session.broken = str(reply.data["worker_broken"])
            ctx.lines.note(
                f"the {self.session.tool} worker's CUDA context is broken "
                f"({reply.data['worker_broken']}); it exits and the next cell starts a new one."
            )
        return reply

    def execute(self, ctx: RunContext) -> Outcome:
        request, folder = ctx.request, ctx.folder
        ctx.lines.log = folder
        t0 = time.perf_counter()
        s = self.session = self.get_session(ctx, "")
        _wait_for(s, ctx)  # a prewarm may hold the worker (its imports, its receive)
        with s.lock:
            # the cell's whole wait, up to now that it holds the worker for good
            ctx.meta.timings["worker_start_s"] = time.perf_counter() - t0
            state = StateExchange(s, self.history, ctx.notebook, lambda m: self._ask(ctx, m),
                                  ctx.lines.note, ctx.meta.timings)  # fmt: skip
            plan = self.catch_up = state.plan(
                ctx.cell.names_read, before=self.before, setup=request.setup,
                explicit=frozenset(ctx.explicit_vars or {}), required=True,
            )  # fmt: skip
            for note in s.notes:  # what happened in the background (prewarm) since
                ctx.lines.note(note)
            s.notes.clear()
            ran = {*s.executed, *(e.id for e in plan.replay.run)}
            # the script alone reproduces this state (a fresh re-run after a crash, a shared
            # folder): the setup cells, which the worker received instead of running, and what
            # it has run, then the cell
            entries = self.history.entries()
            setups = catch_up.setup_entries(entries, before=self.before, setup=request.setup)
            ran |= {e.id for e in setups}
            replayed = [e for e in entries if e.id in ran]
            script = build_script(ctx.cell, history=[e.payload() for e in replayed],
                                  warmup=request.warmup, gate=ctx.backend.gate,
                                  torch_nvtx=ctx.backend.torch_nvtx(),
                                  changes=state.keep(ctx.cell), rerun=self.repeats(request),
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

    def _step(self, ctx: RunContext, message: dict[str, Any], phase: str) -> Reply:
        """A request before the capture; ``StepFailed`` when it failed or was stopped."""
        reply = self._ask(ctx, message)
        # "load" answers ok: true; "prepare" the status of the cell's warm-up (its reply's
        # ok says only that the request was handled)
        done = (
            reply.data.get("status") == "ok" if message["op"] == "prepare" else reply.data.get("ok")
        )
        if reply.stopped or not done:
            raise StepFailed(reply, phase)
        return reply

    def _run(self, ctx: RunContext, state: StateExchange) -> Outcome:
        s, run_dir, plan = self.session, ctx.run_dir, self.catch_up
        assert s is not None
        # the notebook's directory now (a %cd since the worker started moves the cell too)
        self._step(ctx, {"op": "load", "script": str(ctx.folder.script),
                         "cwd": ctx.request.cwd}, "load")  # fmt: skip
        state.send(plan, ctx.folder)
        ctx.meta.shared_vars = plan.share.summary()
        if state.imported_modules:  # a worker that had not imported what the objects need
            ctx.meta.shared_vars["imported"] = state.imported
            ctx.meta.shared_vars["imported_modules"] = state.imported_modules
        if plan.replay.run:
            ctx.lines.phase("replaying", plan.replay.describe(s.tool))
            state.replay(plan)
            ctx.meta.replayed = [e.name for e in plan.replay.run]
        shared = ctx.meta.shared_vars or {}
        ctx.meta.shipped_vars = state.ship_by_value(
            ctx.folder,
            ctx.explicit_vars,
            [*shared.get("shared", []), *shared.get("copied", [])],
            one_run=frozenset(ctx.request.bind),
        )
        ctx.lines.phase("running")
        reply = self._step(ctx, {"op": "prepare"}, "vars")
        s.names = before = frozenset(reply.data.get("names", ()))
        t0 = time.perf_counter()
        handle = self._begin_capture(ctx, s)
        ctx.meta.timings["begin_capture_s"] = time.perf_counter() - t0
        ctx.meta.capture_argv = (
            handle if isinstance(handle, list) else getattr(handle, "args", None)
        )
        s.ran_sources.add(ctx.cell.source)
        try:
            ctx.lines.phase("capturing")
            reply = self._ask(ctx, {"op": "capture"})
        finally:
            t0 = time.perf_counter()
            ctx.backend.end_capture(ctx.tool, s.state, handle, run_dir)
            ctx.meta.timings["end_capture_s"] = time.perf_counter() - t0
        s.cells += 1
        s.names = frozenset(reply.data.get("names", s.names))
        if not ctx.request.keep_state:  # else the script put its names back as they were
            state.own(ctx.cell.names_bound)
        status = cell_status(state.explain(reply.data))
        ctx.folder.write_status(status)
        usable = not reply.stopped and s.worker.alive() and not s.broken
        if not self.repeats(ctx.request) and usable:  # the notebook's run: its results are its
            # names new in the worker were bound by code the text hides (exec, globals())
            ctx.meta.brought_back = state.bring_back(ctx.cell, ctx.folder, s.names - before)
        if usable:  # idle: no cached blocks (once idle when the next configuration follows)
            self._ask(ctx, {"op": "release", "when_idle": ctx.request.more_follow})
        return Outcome(status, reply.stopped)

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
