"""What happens when the warm ncu worker crashes on a cell (a SIGSEGV under ``ncu --mode attach``
was seen on the GPU right after a history replay): the user's cell runs once more in a fresh
ncu process, and one line says so. Never silently: the line names the crash, how far the
worker got, what state the fresh run has, and where the log is. Never a loop: a fresh run that
fails too raises its own typed error. The same fresh run answers a warm ``%%ncu --nvtx`` attach
that kept no launch of the range the cell opened (``empty_attach_note``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import NothingCapturedError, WorkerDiedError
from ..run_folders import runs
from ..run_folders.run_dir import RunDir
from ..script import PreparedCell, prepare_cell
from .backends import Backend
from .fresh import FreshExecutor
from .pipeline import profile_cell
from .spec import CellRequest, Notebook, RunCallbacks
from .variables import plan_by_value, serialize_explicit
from .warm import WarmExecutor
from .warm_session import WarmSession


def crash_cause(session: WarmSession | None, died: WorkerDiedError) -> str:
    """ "SIGSEGV", "exited with status 3": how the worker ended, in a word or two."""
    text = session.worker.exit_description() if session is not None else str(died)
    for prefix in ("it was killed by ", "it "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def crash_note(died: WorkerDiedError, executor: WarmExecutor, script: Path | None) -> str:
    """The one line the user reads: what crashed, when, what the fresh run holds (the log it
    points at is added by ``fresh_instead``)."""
    crashed = Path(died.run_dir) if died.run_dir is not None else None
    replayed = len(executor.plan.run)
    when = ""
    if replayed:  # meta.replayed is written once the replay returned
        done = crashed is not None and RunDir(crashed).read_meta().replayed is not None
        when = f" {'after' if done else 'while'} replaying {replayed} cell(s)"
    how = (
        "it replayed the cells the worker had run first, so their state is there"
        if script is not None
        else "only the setup cells ran first: state from profiled cells is not in it"
    )
    return (
        f"the ncu worker crashed ({crash_cause(executor.session, died)}){when}; this cell ran "
        f"in a fresh ncu process instead ({how})"
    )


def empty_attach_note(script: Path | None) -> str:
    """``%%ncu --nvtx`` in a warm worker: the cell opened the range, but the attach kept no
    launch of it (seen on the H100, 2026-11-23, on the first cell of a new ncu worker only; the
    same cell later in that worker was profiled). The fresh run's ncu NVTX filter sees the
    process from its start."""
    return (
        "ncu's attach to the warm worker profiled no kernel in the range the cell opened; "
        "this cell ran in a fresh ncu process instead"
        + (" (it replayed the cells the worker had run first)" if script is not None else "")
    )


def fresh_instead(
    why: WorkerDiedError | NothingCapturedError,
    note: Callable[[Path | None], str],
    request: CellRequest,
    backend: Backend,
    make_result: Callable[[Any, Any], Any],
    *,
    setup: Callable[[], Sequence[tuple[str, PreparedCell]]],
    notebook: Notebook | None = None,
    callbacks: RunCallbacks | None = None,
    run_dir: Path | None = None,
    meta: dict[str, Any] | None = None,
    replayed: Sequence[PreparedCell] = (),
) -> Any:
    """Run ``request`` once in a fresh ncu process after its warm run failed (``why``): from
    the script the warm run wrote (the history that worker had run, ``replayed``, then the cell:
    the same state, built from scratch, with the notebook's names those cells read beside it),
    or with the setup cells only when there is none, saying so in
    one line (``note(script)``, then where the log is). A drill-down's fresh run is a sibling
    of its warm folder; the fresh run's meta.json says what it replaces."""
    warm = Path(why.run_dir) if why.run_dir is not None else None
    script = RunDir(warm).script if warm is not None else None
    if script is not None and not script.exists():
        script = None
    if script is not None and warm is not None and notebook is not None:
        _ship_for_replay(RunDir(warm), request, replayed, notebook)
    line = note(script) + (f"; see {RunDir(warm).log}" if warm is not None else "")
    if warm is not None:  # the log the line points at holds what happened
        RunDir(warm).append_log(f"[nsight_magic] {why}\n[nsight_magic] {line}")
    if callbacks is not None and callbacks.output is not None:
        callbacks.output(f"nsight_magic: {line}")
    fresh_dir = runs.new_run_dir(run_dir.parent, f"{run_dir.name}-fresh") if run_dir else None
    fallback = {"from": str(warm) if warm else None, "why": str(why), "note": line}
    return profile_cell(
        replace(request, fresh=True),
        backend,
        FreshExecutor(setup() if script is None else (), script),
        make_result,
        notebook=notebook,
        callbacks=callbacks,
        run_dir=fresh_dir,
        meta={**(meta or {}), "fallback": fallback},
    )


def _ship_for_replay(
    folder: RunDir, request: CellRequest, replayed: Sequence[PreparedCell], notebook: Notebook
) -> None:
    """The warm worker got the notebook's names by reference (shared.pkl) and the fresh run
    cannot: the names its script's history and cell read and no cell of it binds go by value
    in vars.pkl beside the script, as a fresh run's would (an auto-shipped ``prompt2`` read by
    a replayed cell raised NameError in the H100 acceptance). Too big ones stay out (the cell
    then says which name is missing)."""
    cell = prepare_cell(request.cell, cell_name=request.name)
    reads = frozenset().union(cell.names_read, *(c.names_read for c in replayed))
    bound = frozenset().union(*(c.names_bound for c in replayed))
    explicit = serialize_explicit(request.vars, notebook.user_ns)
    plan = plan_by_value(notebook, reads, worker_names=bound, explicit=explicit)
    blob = plan.blob()
    if blob is not None:
        folder.write_vars(blob)
