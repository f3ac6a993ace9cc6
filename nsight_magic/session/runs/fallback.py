"""What happens when the warm ncu worker crashes on a cell (a SIGSEGV under ``ncu --mode attach``
was seen on the GPU: benchmarks/README.md, design measurements): the cell runs once more
in a new warm ncu worker when that leaves the notebook's state right
(``WarmExecutor.may_run_again``: it receives the notebook's names, so its results come back, and
a 56 GB setup cell is not run again), else in a fresh ncu process; one line says so. Never
silently: the line names the crash, how far the worker got, what the new run holds, and where
the log is. Never a loop: a new worker that crashes too hands the cell to a fresh process, and
a fresh run that fails raises its own typed error. The same fresh run answers a warm ``%%ncu
--nvtx`` attach that kept no launch of the range the cell opened (``empty_attach_note``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import NothingCapturedError, WorkerDiedError
from ...run_folders import runs
from ...run_folders.run_dir import RunDir
from ...script import PreparedCell
from ..workers.warm_session import WarmSession
from .fresh import FreshExecutor
from .pipeline import CellJob, profile_cell
from .warm import WarmExecutor


def crash_cause(session: WarmSession | None, died: WorkerDiedError) -> str:
    """ "SIGSEGV", "exited with status 3": how the worker ended, in a word or two."""
    text = session.worker.exit_description() if session is not None else str(died)
    for prefix in ("it was killed by ", "it "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def crash_note(died: WorkerDiedError, executor: WarmExecutor, script: Path | None) -> str:
    """The one line the user reads: what crashed, when, what the fresh run holds (the log it
    points at is added by ``_once_more``)."""
    crashed = Path(died.run_dir) if died.run_dir is not None else None
    replayed = len(executor.plan.run)
    when = ""
    if replayed:  # meta.replayed is written once the replay returned
        done = crashed is not None and RunDir(crashed).read_meta().replayed is not None
        when = f" {'after' if done else 'while'} replaying {replayed} cell(s)"
    how = "it ran the setup cells and got the notebook's names the cell reads, by value"
    if not executor.repeats_run:  # the notebook's run: its results were to come back
        how += "; what it binds stays there: run the cell again to have it"
    return (
        f"the ncu worker crashed ({crash_cause(executor.session, died)}){when}; this cell ran "
        f"in a fresh ncu process instead ({how}){may_have_changed(executor)}"
    )


def again_note(died: WorkerDiedError, executor: WarmExecutor) -> str:
    """The line of a cell run again in a new warm worker after a crash (``again_warm``)."""
    return (
        f"the ncu worker crashed ({crash_cause(executor.session, died)}); this cell ran again "
        "in a new ncu worker, which received the notebook's names as any worker does"
        f"{may_have_changed(executor)}"
    )


def may_have_changed(executor: WarmExecutor) -> str:
    """What the crashed run may have left changed in the notebook's shared GPU memory: its body
    had begun, and it may change those names in place (a drill-down's saved copy died with the
    worker); "" when nothing."""
    if not (executor.body_may_have_run and executor.notebook_changes):
        return ""
    names = executor.notebook_changes
    what = "any of the notebook's tensors" if "*" in names else ", ".join(names[:6]) + (
        " ..." if len(names) > 6 else "")  # fmt: skip
    return (f". The crashed run had begun the cell, which may change {what} in place: what it "
            "changed before it died is the notebook's now")  # fmt: skip


def again_warm(
    died: WorkerDiedError, executor: WarmExecutor, retry: WarmExecutor, job: CellJob
) -> Any:
    """Run ``job`` once more through ``retry`` (a new warm worker) after ``executor``'s
    worker crashed on it, saying so in one line; the crashed run's folder and log are named in
    meta.json's ``fallback``. Its ``WorkerDiedError`` is the caller's (a fresh run next)."""
    return _once_more(died, again_note(died, executor), job, retry, "again")


def empty_attach_note(script: Path | None) -> str:
    """``%%ncu --nvtx`` in a warm worker: the cell opened the range, but the attach kept no
    launch of it (on the first cell of a new ncu worker only: benchmarks/README.md, design
    measurements). The fresh run's ncu NVTX filter sees the process from its start."""
    return (
        "ncu's attach to the warm worker profiled no kernel in the range the cell opened; "
        "this cell ran in a fresh ncu process instead"
        + " (it ran the setup cells and got the notebook's names the cell reads, by value)"
    )


def fresh_instead(
    why: WorkerDiedError | NothingCapturedError,
    note: Callable[[Path | None], str],
    job: CellJob,
    setup: Callable[[], Sequence[tuple[str, PreparedCell]]],
) -> Any:
    """Run ``job`` once in a fresh ncu process after its warm run failed (``why``): the
    setup cells, then the cell, with the notebook's names it reads by value (the profiled
    cells' results among them), saying so in one line (``note(None)``, then where the log
    is). A drill-down's fresh run is a sibling of its warm folder; the fresh run's meta.json
    says what it replaces."""
    # not the warm run's script: it replays the profiled cells that worker ran, and their
    # results are the notebook's now (session/state/); a replayed cell whose names came from
    # an interrupted cell raised NameError there (the H200 acceptance, 2026-11-27)
    fresh = replace(job, request=replace(job.request, fresh=True))
    return _once_more(why, note(None), fresh, FreshExecutor(setup()), "fresh")


def _once_more(
    why: WorkerDiedError | NothingCapturedError,
    line: str,
    job: CellJob,
    executor: WarmExecutor | FreshExecutor,
    suffix: str,
) -> Any:
    """The cell run once more through ``executor`` after its warm run failed (``why``):
    ``line`` said (with where the failed run's log is) and added to that log, the new run a
    sibling folder (``-suffix``) whose meta.json's ``fallback`` says what it replaces."""
    warm = Path(why.run_dir) if why.run_dir is not None else None
    line += f"; see {RunDir(warm).log}" if warm is not None else ""
    if warm is not None:  # the log the line points at holds what happened
        RunDir(warm).append_log(f"[nsight_magic] {why}\n[nsight_magic] {line}")
    if job.callbacks is not None and job.callbacks.output is not None:
        job.callbacks.output(f"nsight_magic: {line}")
    run_dir = job.run_dir
    folder = runs.new_run_dir(run_dir.parent, f"{run_dir.name}-{suffix}") if run_dir else None
    fallback = {"from": str(warm) if warm else None, "why": str(why), "note": line}
    again = replace(job, run_dir=folder, meta={**(job.meta or {}), "fallback": fallback})
    return profile_cell(again, executor)
