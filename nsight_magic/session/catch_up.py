"""What a worker needs from the notebook before a cell (or ahead of time, ``prewarm``): the plan
that ``state_exchange.StateExchange`` carries out.

1. the notebook's names the worker needs, in one pickle (``shared_state``): what the setup
   cells defined and what the cell (and a setup cell replayed for it) reads, less what the
   worker has up to date. CUDA memory goes by IPC handle (one copy on the GPU), the rest by
   value;
2. what cannot be sent is rebuilt: a setup cell is replayed only when a name it defines cannot
   be pickled (or it never ran in the notebook), with the GPU memory it needs checked first
   (``admission``). No profiled cell is ever replayed: its results are the notebook's.

A setup cell otherwise runs once, in the notebook.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingVariableError
from ..vocabulary.notebook_names import is_ipython_own
from . import admission, shared_state
from .history import HistoryEntry
from .replay import ReplayPlan, notebook_reads
from .spec import Notebook
from .state import definitions
from .warm_session import WarmSession


@dataclass
class CatchUpPlan:
    """``replay``: the setup cells to run (those whose names cannot be sent); ``share``: the
    names to send; ``fallback``: setup cell name -> why it is
    replayed; ``setup_bytes``: GPU bytes the notebook's run of those setup cells took."""

    replay: ReplayPlan
    share: shared_state.SharePlan
    fallback: dict[str, str] = field(default_factory=dict)
    setup_bytes: int = 0
    packed: shared_state.Packed | None = None
    # how the code of the notebook's functions and classes is named in the worker
    files: shared_state.CodeFiles = field(default_factory=shared_state.CodeFiles)

    def notes(self, tool: str) -> list[str]:
        return [
            f"the {tool} worker replays setup cell {name!r}: {why}"
            for name, why in self.fallback.items()
        ]


def _up_to_date(session: WarmSession, user_ns: Mapping[str, Any]) -> set[str]:
    """Names the worker has that need not be sent: its own, and those we sent that the
    notebook has not rebound or changed since."""
    fingerprint = shared_state.object_fingerprint
    return {
        name
        for name in session.names
        if name not in session.shipped
        or (name in user_ns and session.shipped[name] == fingerprint(user_ns[name]))
    }


def _unsendable(
    entry: HistoryEntry, cannot: Mapping[str, str], user_ns: Mapping[str, Any], in_notebook: bool
) -> str:
    """Why the worker must replay setup ``entry`` ("" when its names can all be sent): a name
    it defines cannot be pickled, or the cell never ran in the notebook (``--worker-only``,
    ``record_setup``) and the notebook lacks a name it defines. A name the notebook deleted
    after running the cell is gone from the workers too."""
    bad = [f"{n}: {cannot[n]}" for n in sorted(entry.cell.names_bound & cannot.keys())]
    # a name it binds only on some path (in an if / try / for) counts too: nothing else builds it
    bound = entry.cell.names_bound | entry.cell.effects.defined
    missing = [] if in_notebook else sorted(bound - user_ns.keys())
    if missing:
        bad.append(f"{', '.join(missing[:3])} not in the notebook")
    return "; ".join(bad[:3])


def setup_entries(
    entries: list[HistoryEntry], *, before: int | None = None, setup: bool = True
) -> list[HistoryEntry]:
    """The setup cells a cell (a re-run of history id ``before``: those older than it) sees;
    none with ``--no-setup``."""
    return [e for e in entries if e.kind == "setup" and setup and (before is None or e.id < before)]


def plan_catch_up(
    entries: list[HistoryEntry],
    session: WarmSession,
    notebook: Notebook,
    reads: frozenset[str],
    *,
    before: int | None = None,
    setup: bool = True,
    explicit: frozenset[str] = frozenset(),
    setup_gpu_bytes: Mapping[int, int] | None = None,
    in_notebook: Collection[int] = (),
    setup_files: Mapping[str, int] | None = None,
) -> CatchUpPlan:
    """What ``session`` needs before a cell that reads ``reads`` (``before``: a re-run of an
    earlier cell sees only what came before it; ``explicit``: ``--vars`` names, sent by value;
    ``setup_files``: IPython's file names of the setup cells' notebook runs -> entry id)."""
    user_ns = notebook.user_ns
    # only setup cells are ever replayed: a profiled cell's results are the notebook's
    # (session/state/; what could not come back stayed in its worker, which said so; a replay
    # ran the cell's side effects again: a training step, a shell command under ncu)
    setups = setup_entries(entries, before=before, setup=setup)
    # exec("loss = train_step()"): any name
    wanted = set(notebook_reads(reads, user_ns) if notebook.auto_vars else ())
    wanted |= {n for e in setups for n in e.cell.names_bound}
    wanted -= set(notebook.hidden) | set(explicit)
    wanted = {n for n in wanted if not is_ipython_own(n)}
    gone = sorted(n for n in session.shipped if n not in user_ns)
    up_to_date = _up_to_date(session, user_ns)
    share = shared_state.plan(wanted, user_ns, max_bytes=notebook.auto_vars_max_bytes,
                              skip=up_to_date, gone=gone)  # fmt: skip
    # a definition that does not pickle goes as its source (state/definitions.py)
    by_source = {n for n in share.cannot() if n in user_ns
                 and definitions.find_bound(user_ns[n], user_ns) is not None}  # fmt: skip
    cannot = {n: why for n, why in share.cannot().items() if n not in by_source}
    fallback: dict[str, str] = {}
    replayed_setups = []
    for entry in setups:
        why = (
            ""
            if entry.id in session.executed
            else _unsendable(entry, cannot, user_ns, entry.id in in_notebook)
        )
        if not why:
            continue
        replayed_setups.append(entry)
        fallback[entry.name] = why
        for name in entry.cell.names_bound:  # the replay binds them: the worker's own
            share.names.pop(name, None)
            share.shares.pop(name, None)
    # what a replayed setup cell reads from ordinary cells (``time``, imported in the first
    # one) is sent as a profiled cell's reads are
    extra = {n for e in replayed_setups for n in e.cell.names_read} - set(share.shares)
    extra -= {n for e in replayed_setups for n in e.cell.names_bound} | set(notebook.hidden)
    more = shared_state.plan(extra, user_ns, max_bytes=notebook.auto_vars_max_bytes,
                             skip=up_to_date)  # fmt: skip
    share.names.update(more.names)
    share.shares.update(more.shares)
    replay = ReplayPlan(sorted(replayed_setups, key=lambda e: e.id))
    gpu = setup_gpu_bytes or {}
    return CatchUpPlan(replay, share, fallback, sum(gpu.get(e.id, 0) for e in replayed_setups),
                       files=code_files(entries, notebook, setup_files or {}))  # fmt: skip


def code_files(
    entries: list[HistoryEntry], notebook: Notebook, setup_files: Mapping[str, int]
) -> shared_state.CodeFiles:
    """The worker's names for the notebook's cells: a setup cell's by its history entry
    (``setup 'data'``), any other by IPython's number (``In [7]``)."""
    by_id = {e.id: e.filename for e in entries if e.kind == "setup"}
    setups = {f: by_id[i] for f, i in setup_files.items() if i in by_id}
    return shared_state.CodeFiles.of(notebook.code_files, setups)


def check(cannot: Mapping[str, str], reads: frozenset[str]) -> None:
    """MissingVariableError for a name the cell reads that can neither be sent nor rebuilt
    (``cannot``: what the send found it could not carry, name -> why)."""
    held = {n: why for n, why in cannot.items() if n in reads}
    if not held:
        return
    lines = [f"  {name}: {why}" for name, why in sorted(held.items())]
    # --vars sends by value: it helps a name over the size limit, not one that cannot pickle
    big = sorted(n for n, why in held.items() if "cannot be pickled" not in why)
    fix = f"pass --vars {','.join(big)} to send them by value anyway, or " if big else ""
    raise MissingVariableError(
        "The cell reads notebook variables the profiling worker cannot receive:\n"
        + "\n".join(lines)
        + f"\nFix: {fix}create them in a %%nsight_setup cell (a setup cell's names that "
        "cannot be sent are rebuilt in the worker by replaying it), or inside the cell.",
        names=sorted(held),
    )


def admit(plan: CatchUpPlan, session: WarmSession) -> None:
    """Before replaying setup cells that cannot be shared: room on the GPU for what they
    built in the notebook (``admission.GpuMemoryError`` with the numbers otherwise)."""
    if plan.setup_bytes:
        what = f"replaying setup cell(s) {', '.join(map(repr, plan.fallback))} in the " \
            f"{session.tool} worker"  # fmt: skip
        admission.require(plan.setup_bytes, what, worker_pid=session.worker.pid)
