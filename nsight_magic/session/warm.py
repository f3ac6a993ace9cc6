"""Warm runs: the cell in a long-lived worker that keeps its namespace between cells.

For one cell the worker is asked, in order: load the run's script; replay the history entries it
has not run that the cell needs (setup cells, cells whose effects it reads: ``replay.py``);
take the shipped variables and warm up; then, with the capture begun (``nsys start`` /
``ncu --mode attach``), run the gated cell. Each step is a request the notebook can
interrupt (see ``worker_process``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any

from ..errors import NsightMagicError, WorkerDiedError
from ..run_folders.run_dir import cell_status
from ..script import build_script
from . import catch_up, results_back, shared_state
from .history import History
from .pipeline import Outcome, RunContext
from .replay import ReplayPlan, changed_names, module_names
from .variables import plan_shipping
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


def replay_errors(tool: str, reply: Reply) -> list[str]:
    """One line per history entry that raised when the worker replayed it (a ``history``
    request's reply): for the cell's output, or kept on the worker after a prewarm."""
    return [
        f"replaying {error['name']!r} in the {tool} worker raised "
        f"{error['exc_type']}: {error['exc_message']}"
        for error in reply.data.get("errors", [])
    ]


def setup_failure(
    tool: str, name: str, error: Mapping[str, Any], why: str, worker_only: bool
) -> str:
    """Why a worker lacks what setup cell ``name`` binds: its replay there raised ``error``
    (a ``history`` reply's), with the fix."""
    said = f"{error.get('exc_type')}: {str(error.get('exc_message', '')).strip()[:300]}"
    text = (
        f"setup cell {name!r}, which defines it, raised {said} when the {tool} worker replayed it"
    )
    if worker_only:
        text += " (a --worker-only setup cell runs in each worker, each building its own copy)"
    elif why:
        text += f" ({why})"
    fix = "fix the setup cell"
    if "memory" in said.lower():
        fix = "free GPU memory (a worker you do not need: %nsight_session stop nsys|ncu)"
    if worker_only:
        fix += (", or run it in the notebook without --worker-only (the workers then share its "
                "GPU tensors)")  # fmt: skip
    return f"{text}. Fix: {fix}, then %nsight_session restart {tool}"


def note_setup_failures(
    session: WarmSession, plan: catch_up.CatchUpPlan, reply: Reply, in_notebook: Collection[int]
) -> None:
    """The setup cells of ``plan`` whose replay in ``session`` raised (a ``history`` reply):
    each name they bind, with why the worker may lack it (``explain_name_error``); a setup
    replayed without an error clears its names."""
    raised = {e.get("filename"): e for e in reply.data.get("errors", [])}
    for entry in plan.replay.run:
        if entry.kind != "setup":
            continue
        error = raised.get(entry.filename)
        for name in entry.cell.names_bound:
            session.setup_failed.pop(name, None)
        if error is None:
            continue
        text = setup_failure(session.tool, entry.name, error, plan.fallback.get(entry.name, ""),
                             worker_only=entry.id not in in_notebook)  # fmt: skip
        session.setup_failed.update(dict.fromkeys(entry.cell.names_bound, text))


NAME_ERROR = re.compile(r"name '([^']+)' is not defined")


def explain_name_error(
    session: WarmSession, status: dict[str, Any], held: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A cell's NameError for a name a setup cell binds that raised when this worker replayed
    it, or one a profiled cell bound in another worker that could not come back (``held``):
    the message says so, with the fix (else the status as it is)."""
    found = NAME_ERROR.search(str(status.get("exc_message") or ""))
    if status.get("exc_type") != "NameError" or found is None:
        return status
    why = session.setup_failed.get(found.group(1)) or (held or {}).get(found.group(1))
    if not why:
        return status
    return {**status, "exc_message": f"{status['exc_message']} in the {session.tool} worker: "
            f"{why}."}  # fmt: skip


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
            plan = self.catch_up = self._plan(ctx, s)
            catch_up.check(plan, ctx.cell.names_read)
            for note in s.notes:  # what happened in the background (prewarm) since
                ctx.lines.note(note)
            s.notes.clear()
            ran = {*s.executed, *(e.id for e in self.plan.run)}
            # the script alone reproduces this state (a fresh re-run after a crash, a shared
            # folder): the setup cells, which the worker received instead of running, and what
            # it has run, then the cell
            entries = self.history.entries()
            setups = catch_up.setup_entries(entries, before=self.before, setup=request.setup)
            ran |= {e.id for e in setups}
            replayed = [e for e in entries if e.id in ran]
            modules = module_names(entries)
            changes = changed_names(ctx.cell, modules, ctx.notebook.user_ns)
            script = build_script(ctx.cell, history=[e.payload() for e in replayed],
                                  warmup=request.warmup, gate=ctx.backend.gate,
                                  torch_nvtx=ctx.backend.torch_nvtx(), changes=changes,
                                  rerun=self.before is not None,
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
                return self._run(ctx)
            except WorkerDiedError as died:
                return Outcome(folder.read_status(), died=died)

    def _plan(self, ctx: RunContext, s: WarmSession) -> catch_up.CatchUpPlan:
        return catch_up.plan_catch_up(
            self.history.entries(), s, ctx.notebook, ctx.cell.names_read, before=self.before,
            setup=ctx.request.setup,
            explicit=frozenset(ctx.explicit_vars or {}), setup_gpu_bytes=self.history.gpu_bytes,
            in_notebook=self.history.in_notebook, setup_files=self.history.setup_files,
        )  # fmt: skip

    def _run(self, ctx: RunContext) -> Outcome:
        s, run_dir = self.session, ctx.run_dir
        assert s is not None
        # the notebook's directory now (a %cd since the worker started moves the cell too)
        reply = self._ask(ctx, {"op": "load", "script": str(ctx.folder.script),
                                "cwd": ctx.request.cwd})  # fmt: skip
        if reply.stopped or not reply.data.get("ok"):
            return self._not_run(ctx, reply, "load")
        outcome = self._catch_up(ctx)
        if outcome is not None:
            return outcome
        self._ship_explicit(ctx)
        ctx.lines.phase("running")
        reply = self._ask(ctx, {"op": "prepare"})
        if reply.stopped or reply.data.get("status") != "ok":
            return self._not_run(ctx, reply, reply.data.get("phase", "vars"))
        s.names = frozenset(reply.data.get("names", ()))
        t0 = time.perf_counter()
        try:
            handle = ctx.backend.begin_capture(ctx.tool, s.state, run_dir)
        except NsightMagicError as exc:
            deadline = time.monotonic() + ATTACH_DEATH_GRACE_S  # a crash takes a moment to reap
            while s.worker.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if s.worker.alive():
                raise
            # the attach took the worker down with it: a crash, not a profiler mistake
            raise WorkerDiedError(
                f"The profiling worker died while {ctx.backend.tool} attached "
                f"({s.worker.exit_description()}): {exc}"
            ) from exc
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
        catch_up.own_names(s, ctx.cell.names_bound)
        status = cell_status(explain_name_error(s, reply.data, self.history.held))
        ctx.folder.write_status(status)
        if self.before is None and not reply.stopped and s.worker.alive() and not s.broken:
            self._bring_back(ctx, s)
        if not reply.stopped and s.worker.alive() and not s.broken:  # idle: no cached blocks
            self._ask(ctx, {"op": "release"})
        return Outcome(status, reply.stopped)

    def _bring_back(self, ctx: RunContext, s: WarmSession) -> None:
        """The notebook's run of the cell: what it bound and changed comes back to the
        notebook (``results_back``), as if the cell had run there; a cell that raised keeps
        what it did before the error, as in the notebook."""
        user_ns = ctx.notebook.user_ns
        if not isinstance(user_ns, MutableMapping):  # a read-only view: nothing to bind in
            return
        names = [n for n in results_back.names_to_bring_back(ctx.cell, user_ns) if n in s.names]
        path = ctx.folder.results
        try:
            reply = self._ask(ctx, {"op": "send_back", "names": names, "path": str(path),
                                    "max_bytes": ctx.notebook.auto_vars_max_bytes})  # fmt: skip
            if reply.stopped or not reply.data.get("ok"):
                why = reply.data.get("exc_message") or reply.data.get("error") or "interrupted"
                ctx.lines.note(f"the cell's results stay in the {s.tool} worker: sending them "
                               f"back failed ({why})")  # fmt: skip
                return
            brought = results_back.bring_back(path.read_bytes(), user_ns, s.sent,
                                              reply.data.get("cannot", {}),
                                              bound=ctx.cell.names_bound)  # fmt: skip
            packed = None
            if brought.adopted:
                packed = results_back.adoption_blob(brought, s.sent)
                ctx.folder.write_adopted(packed.blob)
                adopted = self._ask(ctx, {"op": "adopt", "path": str(ctx.folder.adopted)})
                if not adopted.data.get("ok"):  # the worker keeps its own copy too
                    packed = None
            results_back.settle(brought, s.sent, s.shipped, user_ns, packed)
        finally:
            path.unlink(missing_ok=True)
            ctx.folder.adopted.unlink(missing_ok=True)
        ctx.meta.brought_back = {"names": brought.names, "cannot": brought.cannot,
                                 "adopted": len(brought.adopted)}  # fmt: skip
        for name in brought.names:
            self.history.held.pop(name, None)
        for name, why in brought.cannot.items():  # what a cell in another worker is told
            self.history.held[name] = (
                f"a profiled cell bound it in the {s.tool} worker, where it stays: it could not "
                f"come back to the notebook ({why}). Fix: bind it in the notebook, or in a "
                "%%nsight_setup cell (what cannot be sent is rebuilt there)"
            )
        if note := brought.note(s.tool):
            ctx.lines.note(note)

    def _catch_up(self, ctx: RunContext) -> Outcome | None:
        """Send the notebook's names, then replay what cannot be sent (``catch_up.py``);
        an Outcome when a step failed or was stopped."""
        s, plan, user_ns = self.session, self.catch_up, ctx.notebook.user_ns
        assert s is not None
        catch_up.write_share(plan, s, ctx.folder)
        reply = catch_up.ask_receive(s, ctx.folder, lambda m: self._ask(ctx, m))
        if reply is not None:
            if reply.stopped or reply.data.get("status") != "ok":
                return self._not_run(ctx, reply, "vars")
            catch_up.received(plan, s, user_ns)
            s.names = frozenset(reply.data.get("names", s.names))
        ctx.meta.shared_vars = plan.share.summary()
        if plan.replay.run:
            for note in plan.notes(s.tool):
                ctx.lines.note(note)
            catch_up.admit(plan, s)
            ctx.lines.phase("replaying", plan.replay.describe(s.tool))
            payload = catch_up.history_payload(plan, self.history.entries(), user_ns)
            reply = self._ask(ctx, {"op": "history", "entries": payload})
            if reply.stopped or not reply.data.get("ok"):
                return self._not_run(ctx, reply, "setup")
            s.executed += [e.id for e in plan.replay.run]
            for entry in plan.replay.run:
                catch_up.own_names(s, entry.cell.names_bound)
            s.names = frozenset(reply.data.get("names", ()))
            note_setup_failures(s, plan, reply, self.history.in_notebook)
            for note in replay_errors(s.tool, reply):
                ctx.lines.note(note)
            ctx.meta.replayed = [e.name for e in plan.replay.run]
        return None

    def _ship_explicit(self, ctx: RunContext) -> None:
        """``--vars``: sent by value, whatever their size (vars.pkl, loaded by ``prepare``)."""
        s, nb = self.session, ctx.notebook
        assert s is not None
        shared = ctx.meta.shared_vars or {}
        sent = [*shared.get("shared", []), *shared.get("copied", [])]
        if not ctx.explicit_vars:
            ctx.meta.shipped_vars = sorted(sent)
            return
        plan = plan_shipping((), nb.user_ns, explicit=ctx.explicit_vars,
                             max_bytes=nb.auto_vars_max_bytes)  # fmt: skip
        blob = plan.blob()
        if blob is not None:
            ctx.folder.write_vars(blob)
        for name in plan.entries:
            s.shipped[name] = shared_state.object_fingerprint(nb.user_ns[name])
        ctx.meta.shipped_vars = sorted({*plan.entries, *sent})

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
