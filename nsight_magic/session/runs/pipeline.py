"""One pipeline for every profiled cell, whichever profiler (``Backend``) and however it runs
(an ``Executor``: a warm worker, or a fresh process).

Order of work, so a mistake costs nothing: prepare the cell (IPython syntax, parse), find the
tool - all before the run folder exists. Then the folder and its records, the executor runs the
cell, and the outcome becomes a result or one typed error that keeps what was captured (the
partial result rides on the error as ``run``). The run folder records what happened either way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...errors import (
    CellFailedError,
    MissingVariableError,
    NsightMagicError,
    ProfileInterrupted,
    ProfileTimeout,
    WorkerDiedError,
)
from ...processes import deadline
from ...processes.deadline import run_deadline
from ...processes.gpu_state import SETTLE_S, read_gpu_state, settle
from ...processes.runner import RunResult
from ...run_folders import runs
from ...run_folders.ownership import make_private
from ...run_folders.run_dir import CellStatus
from ...run_folders.run_meta import RunMeta
from ...script import prepare_cell
from ..backends import Backend
from ..run_context import Lines, RunContext, base_meta, now_utc
from ..spec import CellRequest, Notebook, RunCallbacks
from ..variables import serialize_explicit, serialize_values


@dataclass
class Outcome:
    """How the cell's run ended: its status, and ``stopped`` ("", "interrupted", "cancelled",
    "timeout") when it was stopped from outside; ``process`` is the runner's record of a fresh
    run's process group (pgid, signals sent), None for a warm worker."""

    status: CellStatus
    stopped: str = ""
    died: WorkerDiedError | None = None
    process: RunResult | None = None


class Executor(Protocol):
    mode: str

    def execute(self, ctx: RunContext) -> Outcome: ...


ResultFactory = Callable[[Any, RunContext], Any]


@dataclass(frozen=True)
class CellJob:
    """One profiled run as the pipeline takes it, whichever executor runs it: the cell and its
    profiler, how its result is made from the report, and where it reports and writes (the
    notebook, the callbacks, the run folder, meta.json's first entries). A retry after a crash
    is the same job through another executor, into another folder (``fallback.py``)."""

    request: CellRequest
    backend: Backend
    make_result: ResultFactory
    notebook: Notebook | None = None
    callbacks: RunCallbacks | None = None
    run_dir: Path | None = None
    meta: dict[str, Any] | None = None


def profile_cell(job: CellJob, executor: Executor) -> Any:
    """Run ``job`` through ``executor`` and return the result ``job.make_result(report, ctx)``
    builds; the typed errors of ``errors.py`` otherwise (the partial result, if any, on the
    error's ``run``).

    Ctrl-C anywhere here (pickling ``--vars``, starting a worker, nsys start/export, loading
    the report, building the result) is one ``ProfileInterrupted`` naming the step and the run
    folder, never a raw KeyboardInterrupt from whatever code was running: this is the one
    place every step of every executor passes through."""
    steps = _Steps()
    try:
        return _profile_cell(job, executor, steps)
    except ProfileInterrupted:
        raise
    except KeyboardInterrupt:
        raise steps.interrupted() from None


_PHASE_WORDS = {  # processes/progress.py's phases, as the step an interrupt stopped
    "starting": "starting the profiler and its process",
    "waiting": "waiting for the worker",
    "replaying": "replaying earlier cells in the worker",
    "running": "running the cell",
    "capturing": "capturing the cell",
    "exporting": "exporting the report",
    "loading": "loading the report",
    "done": "building the result",
}


@dataclass
class _Steps:
    """Where ``profile_cell`` is, for the message of an interrupt."""

    step: str = "preparing the cell and pickling its --vars"
    run_dir: Path | None = None
    ctx: RunContext | None = None

    def interrupted(self) -> ProfileInterrupted:
        ctx = self.ctx
        if ctx is None:
            folder = f"Run folder: {self.run_dir}" if self.run_dir else "no run folder was made."
            return ProfileInterrupted(
                f"The run was interrupted while {self.step}; nothing ran; {folder}"
            )
        phase = ctx.lines.parser.state.phase
        where = _PHASE_WORDS.get(phase, phase) if self.step == "running" else self.step
        # a second Ctrl-C, or a folder gone: the message is said anyway
        with contextlib.suppress(KeyboardInterrupt, Exception):
            finish(ctx, status="interrupted", error=f"interrupted while {where}")
        return ProfileInterrupted(
            f"The run was interrupted while {where}. Run folder: {ctx.run_dir}"
        )


def _profile_cell(job: CellJob, executor: Executor, steps: _Steps) -> Any:
    request, backend, run_dir = job.request, job.backend, job.run_dir
    t0, started = time.perf_counter(), time.monotonic()
    # --timeout bounds every step (the version check, --vars pickling, ncu's set list, the
    # worker's start, nsys start, ncu attach, the cell, the profiler's end, export)
    with run_deadline(request.timeout, started):
        cell = prepare_cell(request.cell, cell_name=request.name)
        notebook = job.notebook or Notebook()
        explicit_vars = serialize_explicit(request.vars, notebook.user_ns)
        explicit_vars.update(serialize_values(request.bind))  # a sweep's values win
        steps.step = f"looking for {backend.tool}"
        tool = backend.locate()
        backend.validate(tool)
        steps.step = "creating the run folder"
        run_dir = steps.run_dir = run_dir or runs.new_run_dir(request.runs_root, request.name)
        steps.step = "writing the run folder's records"
        callbacks = job.callbacks or RunCallbacks()
        ctx = RunContext(
            request=request,
            backend=backend,
            tool=tool,
            cell=cell,
            run_dir=run_dir,
            notebook=notebook,
            callbacks=callbacks,
            lines=Lines(backend.tool, callbacks, None),
            meta=base_meta(request, tool, executor.mode).update(job.meta),
            t0=t0,
            explicit_vars=explicit_vars,
        )
        ctx.meta.options = backend.options_meta()
        ctx.folder.write_cell(request.cell)
        ctx.folder.write_meta(ctx.meta)
        steps.ctx = ctx
        ctx.meta.timings["prepare_s"] = time.perf_counter() - t0
        ctx.lines.phase("starting")
        _settle(ctx)
        start = read_gpu_state()  # what the times depend on (analysis/machine_state.py)
        try:
            steps.step = "running"  # from here the progress phase says where
            outcome = executor.execute(ctx)
            ctx.meta.gpu_state = {"start": start, "end": read_gpu_state()}
        except MissingVariableError:
            shutil.rmtree(run_dir, ignore_errors=True)  # the cell never ran: no folder is left
            raise
        except NsightMagicError as exc:
            finish(ctx, status="failed", error=exc.one_line())
            raise
        return conclude(ctx, outcome, job.make_result)


def _settle(ctx: RunContext) -> None:
    """``--settle C``: wait for the GPUs to cool to C °C before the capture (within the run's
    ``--timeout``, at most ``gpu_state.SETTLE_S``); what it found goes in meta.json's
    ``settle``, and a capture that began warmer says why in one line."""
    below = ctx.request.settle_c
    if below is None:
        return
    ctx.lines.phase("starting", f"--settle: until the GPUs are at {below:g} °C or below")
    settled = settle(below, deadline.bound(SETTLE_S).seconds, cancel=ctx.callbacks.cancel)
    ctx.meta.settle = settled.record()
    ctx.meta.timings["settle_s"] = settled.waited_s
    if settled.line():
        ctx.lines.note(settled.line())


def finish(ctx: RunContext, **fields: Any) -> RunMeta:
    # what the profiler and the script wrote under the notebook's umask: owner-only, as ours
    make_private(ctx.run_dir)
    ctx.meta.update(fields)
    ctx.meta.finished_utc = now_utc()
    ctx.meta.timings["total_s"] = time.perf_counter() - ctx.t0
    ctx.meta = ctx.folder.update_meta(ctx.meta)
    return ctx.meta


def _load(ctx: RunContext, make_result: ResultFactory, *, quiet: bool) -> Any:
    """The result over the run's report, or None when there is none (``quiet``: nor when it
    cannot be read - a half-written report must not hide the user's error)."""
    if not ctx.backend.report_path(ctx.run_dir).exists():
        return None
    t = time.perf_counter()
    ctx.lines.phase("exporting" if ctx.backend.tool == "nsys" else "loading")
    try:
        report = ctx.backend.load(ctx.tool, ctx.run_dir, ctx.request.nproc)
    except Exception:
        if quiet:
            return None
        raise
    ctx.meta.timings["load_s"] = time.perf_counter() - t
    ctx.meta.report = Path(getattr(report, "path", "") or "").name or None
    return make_result(report, ctx)


def conclude(ctx: RunContext, outcome: Outcome, make_result: ResultFactory) -> Any:
    """The outcome as a result, or as the typed error carrying what was captured."""
    status = outcome.status
    ctx.meta.cell_status = dict(status)
    failed = outcome.died is not None or outcome.stopped or status.get("status") != "ok"
    partial = _load(ctx, make_result, quiet=True) if failed else None
    if outcome.died is not None:
        finish(ctx, status="worker_died", error=str(outcome.died))
        outcome.died.run = _with_meta(partial, ctx)
        outcome.died.run_dir = ctx.run_dir
        raise outcome.died
    if outcome.stopped:
        state = "timeout" if outcome.stopped == "timeout" else outcome.stopped
        finish(ctx, status=state)
        cls = ProfileTimeout if outcome.stopped == "timeout" else ProfileInterrupted
        timeout = ctx.request.timeout or 0
        what = f"exceeded its {timeout:g} s timeout" if state == "timeout" else f"was {state}"
        raise cls(
            f"The run {what}; the cell was stopped. Run folder: {ctx.run_dir}",
            result=outcome.process,
            run=_with_meta(partial, ctx),
        )
    if status.get("status") != "ok":
        finish(ctx, status="cell_failed")
        raise cell_failed(status, ctx.run_dir, _with_meta(partial, ctx), _oom_text(ctx, status))
    try:
        run = _load(ctx, make_result, quiet=False)
        ctx.backend.check_captured(None if run is None else run.report, dict(status), ctx.run_dir)
    except NsightMagicError as exc:
        finish(ctx, status="failed", error=exc.one_line())
        raise
    ctx.lines.phase("done")
    return _with_meta(run, ctx, status="ok")


def _with_meta(run: Any, ctx: RunContext, **fields: Any) -> Any:
    if fields:
        finish(ctx, **fields)
    if run is not None:
        run.meta = ctx.meta.to_dict()  # results keep the dict view
    return run


def _oom_text(ctx: RunContext, status: CellStatus) -> str:
    """An out-of-memory cell's explanation (``results.memory_frames.oom_explanation``): who
    held the GPU's memory then and the fix; "" for any other error."""
    from ...results.memory_frames import oom_explanation

    names = {os.getpid(): f"the notebook (pid {os.getpid()})"}
    try:  # the session's other workers (%nsight_session): one of them may hold the memory
        if ctx.callbacks.workers is not None:
            names.update(ctx.callbacks.workers())
    except Exception:  # naming them is a courtesy; the explanation stands without it
        pass
    worker = (ctx.meta.worker or {}).get("pid")
    memory = status.get("torch_memory") or {}
    for pid in (worker, memory.get("pid")):
        if isinstance(pid, int) and pid != os.getpid():
            names[pid] = f"this {ctx.backend.tool} worker (pid {pid})"
    try:
        return oom_explanation(status, ctx.run_dir, ctx.cell.source, names)
    except Exception as exc:  # explaining must never hide the user's own error
        return f"(what held the GPU memory could not be read: {type(exc).__name__}: {exc})"


def cell_failed(
    status: CellStatus, run_dir: Path, partial: Any, explanation: str = ""
) -> CellFailedError:
    phase = status.get("phase", "")
    where = {"cell": "The profiled cell", "warmup": "The cell (during warm-up)"}.get(
        phase, f"A {phase or 'setup'} step"
    )
    # no type: the process ended while the step ran (os._exit() in it) without a word; say
    # that, not "None: None" (a script that never started is fresh.py's WorkerStartError)
    exc_type = status.get("exc_type")
    message = status.get("exc_message")
    if exc_type:
        what = f"raised {exc_type}: {message}" if message else f"raised {exc_type}"
    elif status.get("status") == "running":
        what = "ended its process without reporting an error (os._exit() in it?)"
    else:
        what = "raised an error it did not report"
    more = f"\n{explanation}" if explanation else ""
    return CellFailedError(
        f"{where} {what}\n{status.get('traceback', '').rstrip()}{more}\n(run folder: {run_dir})",
        traceback=status.get("traceback", ""),
        exc_type=status.get("exc_type", ""),
        run=partial,
    )
