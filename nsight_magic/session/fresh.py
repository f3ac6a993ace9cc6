"""Fresh runs: the cell in a new process under ``nsys profile`` / ``ncu`` (``--fresh``, and the
cold re-run of a cell whose warm worker is gone). Clean state: the script replays the setup
cells only (or, for a re-run, the saved script's own history), then the cell."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .. import runner, runs
from ..errors import ProfileInterrupted, ProfileTimeout
from ..folders import write_private
from ..script import PreparedCell, build_script, history_entry
from .pipeline import Outcome, RunContext
from .variables import plan_shipping, write_vars


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
        request, run_dir = ctx.request, ctx.run_dir
        script = self.script or self._write_script(ctx)
        ctx.meta["first_run"] = request.warmup == 0  # a new process runs the cell once
        argv = ctx.backend.fresh_argv(ctx.tool, run_dir, request)
        if self.script is not None:  # the saved script of the parent, not one written here
            argv[argv.index(str(run_dir / "script.py"))] = str(script)
        env = ctx.backend.process_env(request)
        runs.write_json(run_dir / "argv.json", argv)
        runs.write_json(run_dir / "env.json", dict(request.env))
        runs.write_json(run_dir / runs.META, ctx.meta)
        stopped = ""
        try:
            result = runner.run(argv, log_path=run_dir / "profiler.log", env=env, cwd=request.cwd,
                                timeout=ctx.remaining(), cancel=ctx.callbacks.cancel,
                                on_line=ctx.lines)  # fmt: skip
        except (ProfileInterrupted, ProfileTimeout) as exc:
            result = exc.result
            stopped = "timeout" if isinstance(exc, ProfileTimeout) else result.outcome
        ctx.meta["runner"] = result.to_dict()
        status = self._rank_status(ctx)
        if not stopped and status.get("status") != "error":
            runner.raise_for_profiler(result, ctx.tool.name)
        return Outcome(status, stopped, process=result)

    @staticmethod
    def _rank_status(ctx: RunContext) -> runs.CellStatus:
        """Rank 0's status; with several ranks, the first rank that failed speaks for the
        cell (its message says which rank)."""
        status = runs.read_cell_status(ctx.run_dir)
        if ctx.request.nproc <= 1:
            return status
        ranks = {0: status}
        for rank in range(1, ctx.request.nproc):
            ranks[rank] = runs.cell_status(
                runs.read_json(ctx.run_dir / f"status.rank{rank}.json", {})
            )
        ctx.meta["rank_status"] = {str(r): s.get("status") for r, s in ranks.items()}
        for rank, each in ranks.items():
            if each.get("status") not in ("ok", None):
                failed = dict(each)
                failed["exc_message"] = f"(rank {rank}) {each.get('exc_message', '')}"
                return runs.cell_status(failed)
        return status

    def _write_script(self, ctx: RunContext) -> Path:
        request, run_dir = ctx.request, ctx.run_dir
        setup = self.setup if request.setup else []
        history = [history_entry("setup", name, cell) for name, cell in setup]
        text = build_script(ctx.cell, history=history, warmup=request.warmup,
                            gate=ctx.backend.gate, **ctx.backend.script_args())  # fmt: skip
        write_private(run_dir / "script.py", text)
        nb = ctx.notebook
        reads = ctx.cell.names_read if nb.auto_vars else frozenset()
        setup_names = frozenset().union(*(c.names_bound for _, c in setup))
        plan = plan_shipping(
            reads,
            nb.user_ns,
            hidden=nb.hidden,
            worker_names=setup_names,  # the setup cells define these in the fresh process
            explicit=ctx.explicit_vars,
            max_bytes=nb.auto_vars_max_bytes,
        )
        plan.check()
        blob = plan.blob()
        if blob is not None:
            write_vars(run_dir / "vars.pkl", blob)
        ctx.meta.update(setup_cells=len(setup), shipped_vars=sorted(plan.entries))
        return run_dir / "script.py"
