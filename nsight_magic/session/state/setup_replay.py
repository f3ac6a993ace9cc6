"""Which setup cells a worker replays before a cell, decided from what the look found it cannot
send (``NotebookState.outgoing``), never from the cell's text.

A setup cell runs once, in the notebook; its names reach a worker like every other name. A
worker replays it only when a name it binds cannot be sent (a lock, a generator, a CUDA graph:
the look's ``cannot``) or it never ran in the notebook (``--worker-only``, ``record_setup``),
after ``admission`` checked the GPU has room for what the notebook's run of it took. No
profiled cell is ever replayed: its results are the notebook's.
"""

from __future__ import annotations

import pickle
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import MissingVariableError
from ...shared_state.notebook_side import Outgoing
from ...shared_state.objects import OWN_RESULTS
from ...vocabulary.code_files import notebook_cell_file
from ...vocabulary.notebook_names import is_ipython_own
from ..history import HistoryEntry
from ..workers.warm_session import WarmSession
from . import admission


@dataclass(frozen=True)
class ReplayPlan:
    """``run``: the setup cells a worker replays before a cell, in notebook order."""

    run: list[HistoryEntry] = field(default_factory=list)

    def describe(self, tool: str) -> str:
        """The progress line's detail: ``2 setup cells in the ncu worker``."""
        cells = "setup cell" if len(self.run) == 1 else "setup cells"
        return f"{len(self.run)} {cells} in the {tool} worker"


@dataclass
class CellPlan:
    """What a worker needs before a cell: ``out``, the one message of the notebook's names
    (None until looked at, or when the worker needs none); ``replay``, the setup cells it
    runs for what cannot be sent (``fallback``: setup cell name -> why); ``setup_bytes``: GPU
    bytes the notebook's run of those took; ``theirs``: the names they bind (not sent);
    ``setups``: every setup cell the cell sees (``setup_entries``), replayed or not."""

    out: Outgoing | None = None
    replay: ReplayPlan = field(default_factory=ReplayPlan)
    fallback: dict[str, str] = field(default_factory=dict)
    setup_bytes: int = 0
    theirs: frozenset[str] = frozenset()
    setups: list[HistoryEntry] = field(default_factory=list)  # the setup cells the cell sees

    def notes(self, tool: str) -> list[str]:
        return [
            f"the {tool} worker replays setup cell {name!r}: {why}"
            for name, why in self.fallback.items()
        ]

    def needs_nothing(self) -> bool:
        """The worker has every name and runs no setup cell: nothing to ask it."""
        return not self.replay.run and (self.out is None or not self.out.blob)


@dataclass(frozen=True)
class CodeFiles:
    """The worker's file names for the notebook's code: IPython's file name of a cell (a
    temporary file under ipykernel, ``<ipython-input-...>`` in a terminal) -> the name that
    says which cell it is (``vocabulary/code_files.py``)."""

    names: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, notebook_files: Mapping[str, int], setup_files: Mapping[str, str]) -> CodeFiles:
        """``notebook_files``: IPython's file name -> execution count; ``setup_files``: file
        name -> a setup cell's history file name (those win: a setup cell runs inside the
        ``%%nsight_setup`` cell, whose number IPython gives it)."""
        names = {f: notebook_cell_file(n) for f, n in dict(notebook_files).items()}
        return cls({**names, **setup_files})


def code_files(
    entries: list[HistoryEntry], notebook_files: Mapping[str, int], setup_files: Mapping[str, int]
) -> CodeFiles:
    """The worker's names for the notebook's cells: a setup cell's by its history entry
    (``setup 'data'``), any other by IPython's number (``In [7]``)."""
    by_id = {e.id: e.filename for e in entries if e.kind == "setup"}
    setups = {f: by_id[i] for f, i in setup_files.items() if i in by_id}
    return CodeFiles.of(notebook_files, setups)


def setup_entries(
    entries: list[HistoryEntry], *, before: int | None = None, setup: bool = True
) -> list[HistoryEntry]:
    """The setup cells a cell (a re-run of history id ``before``: those older than it) sees;
    none with ``--no-setup``."""
    return [e for e in entries if e.kind == "setup" and setup and (before is None or e.id < before)]


def never_in_notebook(entry: HistoryEntry, user_ns: Mapping[str, Any], in_notebook: bool) -> str:
    """Why setup ``entry`` is replayed whatever the look finds: it never ran in the notebook
    (``--worker-only``, ``record_setup``) and the notebook lacks a name it binds ("" else)."""
    if in_notebook:
        return ""
    # a name it binds only on some path (in an if / try / for) counts too: nothing else builds it
    bound = entry.cell.names_bound | entry.cell.effects.defined
    missing = sorted(bound - user_ns.keys())
    return f"{', '.join(missing[:3])} not in the notebook" if missing else ""


def unsendable(entry: HistoryEntry, cannot: Mapping[str, str]) -> str:
    """Why setup ``entry`` is replayed: a name it binds is one the look could not send ("" when
    all could). IPython's own names (``_``: the last result, a run the notebook showed) and the
    package's runs are none a setup cell makes: a ``for _ in`` in one of its functions would
    otherwise replay it in every new worker (the GPU acceptance of 2026-12-07)."""
    replayable = {n: why for n, why in cannot.items()
                  if not is_ipython_own(n) and OWN_RESULTS not in why}  # fmt: skip
    bad = [f"{n}: {replayable[n]}" for n in sorted(entry.cell.names_bound & replayable.keys())]
    return "; ".join(bad[:3])


def replays(
    setups: list[HistoryEntry],
    session: WarmSession,
    user_ns: Mapping[str, Any],
    in_notebook: Collection[int],
    cannot: Mapping[str, str],
) -> dict[int, str]:
    """The setup cells ``session``'s worker must replay (history id -> why): those it has not
    run whose names cannot be sent (``cannot``: the look's) or that never ran in the notebook."""
    out = {}
    for entry in setups:
        if entry.id in session.executed:
            continue
        why = never_in_notebook(entry, user_ns, entry.id in in_notebook) or unsendable(
            entry, cannot
        )
        if why:
            out[entry.id] = why
    return out


def check(cannot: Mapping[str, str], reads: frozenset[str]) -> None:
    """MissingVariableError for a name the cell reads that can neither be sent nor rebuilt
    (``cannot``: what the look found it could not carry, name -> why). ``reads`` only names
    the names this message is about: it never decides what is sent."""
    held = {n: why for n, why in cannot.items() if n in reads}
    if not held:
        return
    lines = [f"  {name}: {why}" for name, why in sorted(held.items())]
    own = sorted(n for n, why in held.items() if OWN_RESULTS in why)
    if own and len(own) == len(held):  # a run, a sweep, a view: the notebook's reading
        fix = (f"read {', '.join(own)} in an ordinary cell: the package's runs and views are "
               "the notebook's, and a profiled cell runs in the worker.")  # fmt: skip
    else:
        # --vars sends by value: it helps a name over the size limit, not one that cannot pickle
        big = sorted(n for n, why in held.items() if "cannot be pickled" not in why)
        fix = f"pass --vars {','.join(big)} to send them by value anyway, or " if big else ""
        fix += ("create them in a %%nsight_setup cell (a setup cell's names that cannot be "
                "sent are rebuilt in the worker by replaying it), or inside the cell.")  # fmt: skip
    raise MissingVariableError(
        "The cell reads notebook variables the profiling worker cannot receive:\n"
        + "\n".join(lines)
        + f"\nFix: {fix}",
        names=sorted(held),
    )


def admit(plan: CellPlan, session: WarmSession) -> None:
    """Before replaying setup cells that cannot be shared: room on the GPU for what they
    built in the notebook (``admission.GpuMemoryError`` with the numbers otherwise)."""
    if plan.setup_bytes:
        what = f"replaying setup cell(s) {', '.join(map(repr, plan.fallback))} in the " \
            f"{session.tool} worker"  # fmt: skip
        admission.require(plan.setup_bytes, what, worker_pid=session.worker.pid)


# a value a setup cell read goes with it for a replay only up to this size (a number, a
# string, a small config): larger ones and the torch objects are read as they are then
READ_VALUE_MAX_BYTES = 1 << 20


_PLAIN_SCALARS = (int, float, complex, bool, str, bytes, type(None))
PLAIN_ITEMS_MAX = 10_000  # items looked at in one value before it counts as not plain


def _plain(value: Any, budget: list[int]) -> bool:
    """A value of Python's own scalars and containers, of at most ``PLAIN_ITEMS_MAX`` items:
    cheap to copy, and nothing whose identity matters."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) in (list, tuple, set, frozenset):
        return all(_plain(v, budget) for v in value)
    if type(value) is dict:
        return all(_plain(k, budget) and _plain(v, budget) for k, v in value.items())
    return False


def values_read(names: Collection[str], user_ns: Mapping[str, Any]) -> bytes | None:
    """The values of ``names`` (what a setup cell reads) in the notebook now, pickled, for a
    replay of the cell in a worker (issue 43: ``k = 3``, a setup cell ``val = k * 2``,
    ``k = 100``: a worker that replays it must compute 6). Only plain values (numbers,
    strings, their lists, tuples and dicts: ``_plain``) up to ``READ_VALUE_MAX_BYTES``; the
    rest (a model, a tokenizer, a data set) is read as the worker has it then, and nothing is
    pickled just to learn its size."""
    out: dict[str, Any] = {}
    for name in sorted(names):
        if name in user_ns and _plain(user_ns[name], [PLAIN_ITEMS_MAX]):
            out[name] = user_ns[name]
    if not out:
        return None
    blob = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    if len(blob) <= READ_VALUE_MAX_BYTES:
        return blob
    small = {n: v for n, v in out.items() if len(pickle.dumps(v)) <= READ_VALUE_MAX_BYTES // 8}
    return pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL) if small else None
