"""Fresh runs: the cell in a new process under ``nsys profile`` / ``ncu`` (``--fresh``, and the
cold re-run of a cell whose warm worker is gone). Clean state: the script replays the setup
cells only (or, for a re-run, the saved script's own history), then the cell."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ...errors import NsightMagicError, ProfileInterrupted, ProfileTimeout
from ...processes import deadline, runner
from ...run_folders.run_dir import CellStatus, cell_status
from ...script import PROFILER_ENV, PreparedCell, build_script, history_entry, profiler_constants
from ...worker.process import WorkerStartError
from ..run_context import RunContext
from ..variables import plan_by_value
from .pipeline import Outcome


class ProfilerWatch:
    """Whether a fresh run's profiler hangs, by the script's status file (``runner.run``'s
    ``stalled``): the script must have started within ``deadline.PROFILER_START_S`` of the
    launch, and the profiler must end within ``deadline.PROFILER_END_S`` of the script's end
    (writing its report). The cell itself runs as long as it needs without --timeout."""

    CHECK_S = 0.5  # how often the status file is read

    def __init__(self, ctx: RunContext) -> None:
        self.folder, self.log = ctx.folder, ctx.folder.log
        self.tool = ctx.tool.name
        self.started = self.checked = time.monotonic()
        self.script_ended: float | None = None

    def __call__(self) -> NsightMagicError | None:
        now = time.monotonic()
        if now - self.checked < self.CHECK_S:
            return None
        self.checked = now
        if self.script_ended is not None:
            if now - self.script_ended < deadline.PROFILER_END_S:
                return None
            what = f"{self.tool} ending after the cell's script did (writing its report)"
            return deadline.Bound(deadline.PROFILER_END_S).expired(what, self.log)
        status = self.folder.read_status() if self.folder.status.exists() else None
        if status is None:
            if now - self.started < deadline.PROFILER_START_S:
                return None
            what = f"{self.tool} starting the cell's script"
            return deadline.Bound(deadline.PROFILER_START_S).expired(what, self.log)
        if "total_s" in status:  # the script wrote its last status: it is done
            self.script_ended = now
        return None


class FreshExecutor:
    """``setup``: (name, prepared cell) of the setup cells to replay. ``script``: run this saved
    script instead of writing one (the cold re-run of a parent run: its history, variables and
    cell exactly as they were)."""

    mode = "fresh"

    def __init__(
        self, setup: Sequence[tuple[str, PreparedCell]] = (), script: Path | None = None
    ) -> None:
        self.setup = list(setup)
        self.script = script

    def execute(self, ctx: RunContext) -> Outcome:
        request, folder = ctx.request, ctx.folder
        script = self.script or self._write_script(ctx)
        ctx.meta.first_run = request.warmup == 0  # a new process runs the cell once
        argv = ctx.backend.fresh_argv(ctx.tool, ctx.run_dir, request)
        if self.script is not None:  # the saved script of the parent, not one written here
            argv[argv.index(str(folder.script))] = str(script)
        env = ctx.backend.process_env(request)
        if self.script is not None:
            # the saved script may be another profiler's (a drill-down's ncu re-running a cell
            # nsys ran): it gates and marks ranges as this backend needs (runtime.py)
            constants = profiler_constants(ctx.backend.gate, **ctx.backend.script_args())
            env[PROFILER_ENV] = json.dumps(constants)
        folder.write_argv(argv)
        folder.write_env(request.env)
        folder.write_meta(ctx.meta)
        stopped = ""
        try:
            result = runner.run(argv, log_path=folder.log, env=env, cwd=request.cwd,
                                timeout=ctx.remaining(), cancel=ctx.callbacks.cancel,
                                on_line=ctx.lines, stalled=ProfilerWatch(ctx))  # fmt: skip
        except (ProfileInterrupted, ProfileTimeout) as exc:
            result = exc.result
            stopped = "timeout" if isinstance(exc, ProfileTimeout) else result.outcome
        ctx.meta.runner = result.to_dict()
        if not stopped and result.returncode in (0, None) and not folder.status.exists():
            raise self._never_started(ctx, result.returncode or 0, argv)
        status = self._rank_status(ctx)
        if not stopped and status.get("status") != "error":
            runner.raise_for_profiler(result, ctx.tool.name)
        return Outcome(status, stopped, process=result)

    @staticmethod
    def _never_started(ctx: RunContext, code: int, argv: list[str]) -> WorkerStartError:
        """The run ended without error and the script wrote no status: it never ran (not "a
        setup step raised"), most likely because --python named no Python interpreter."""
        python = ctx.request.python
        fix = (
            f"--python must name a Python interpreter (the notebook's is {sys.executable!r})"
            if python != sys.executable
            else "its output is in the log"
        )
        return WorkerStartError(
            f"The cell's script never started: the run ended at once with code {code} before "
            f"{python!r} ran it (no status written); {fix}.\nargv: {argv}\nlog: {ctx.folder.log}"
        )

    @staticmethod
    def _rank_status(ctx: RunContext) -> CellStatus:
        """Rank 0's status; with several ranks, the first rank that failed speaks for the
        cell (its message says which rank)."""
        ranks = {rank: ctx.folder.read_status(rank) for rank in range(ctx.request.nproc)}
        status = ranks[0]
        if ctx.request.nproc <= 1:
            return status
        ctx.meta.rank_status = {str(r): s.get("status") for r, s in ranks.items()}
        for rank, each in ranks.items():
            if each.get("status") not in ("ok", None):
                failed = dict(each)
                failed["exc_message"] = f"(rank {rank}) {each.get('exc_message', '')}"
                return cell_status(failed)
        return status

    def _write_script(self, ctx: RunContext) -> Path:
        request, folder = ctx.request, ctx.folder
        setup = self.setup if request.setup else []
        history = [history_entry("setup", name, cell) for name, cell in setup]
        text = build_script(ctx.cell, history=history, warmup=request.warmup,
                            repeat=request.repeat, gate=ctx.backend.gate,
                            **ctx.backend.script_args())  # fmt: skip
        folder.write_script(text)
        setup_names = frozenset().union(*(c.names_bound for _, c in setup))
        plan = plan_by_value(ctx.notebook, ctx.cell.names_read, explicit=ctx.explicit_vars,
                             worker_names=setup_names)  # the setup cells define these  # fmt: skip
        plan.check()
        blob = plan.blob()
        if blob is not None:
            folder.write_vars(blob)
        ctx.meta.setup_cells, ctx.meta.shipped_vars = len(setup), sorted(plan.entries)
        return folder.script
