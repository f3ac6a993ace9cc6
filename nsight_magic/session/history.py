"""What a profiling worker must have run before a cell: the ``%%nsight_setup`` cells and the
profiled cells that completed, in notebook order.

A warm worker runs each entry once; a worker started later (the ncu worker on the first
drill-down, a new worker after a crash) replays the entries it has not run, so its state follows
the notebook's. Fresh runs (``--fresh``) replay the setup cells only: ``SetupRegistry`` keeps
those, replacing a named setup cell when it is re-run.
"""

from __future__ import annotations

import base64
import itertools
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..run_folders.ownership import check_tree_owned
from ..script import PreparedCell, history_entry, prepare_cell
from ..vocabulary.code_files import history_file

EntryKind = Literal["setup", "cell"]


@dataclass(frozen=True)
class HistoryEntry:
    """One replayable step. ``id`` orders entries; ``run_dir`` is the cell's run folder."""

    id: int
    kind: EntryKind
    name: str
    cell: PreparedCell
    vars_file: Path | None = None
    run_dir: Path | None = None
    # a setup cell: the notebook values it read when it ran there (pickled), which its replay
    # in a worker reads instead of later ones (``runtime.values_read``)
    read_values: bytes | None = None

    @property
    def filename(self) -> str:
        """Its code's file name in a worker (replayed, or its functions sent by value); a
        replay's error names the entry by it (``runtime.run_history``)."""
        return history_file(self.kind, self.id, self.name)

    def payload(self) -> dict[str, Any]:
        """What the worker (or a standalone script) needs to replay it. Its vars file is
        unpickled there, so it must still be this user's and not writable by others."""
        if self.vars_file is not None:
            check_tree_owned(self.vars_file.parent, (self.vars_file.name,))
        entry = history_entry(self.kind, self.name, self.cell, str(self.vars_file or "") or None)
        # a unique file name: tracebacks of a replayed cell show that cell's lines
        entry["filename"] = self.filename
        if self.read_values:  # text: the entries travel as JSON to a worker
            entry["read_values"] = base64.b64encode(self.read_values).decode("ascii")
        return entry


@dataclass
class History:
    """Append-only, thread-safe (the picker runs in a thread)."""

    _entries: list[HistoryEntry] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # setup entry id -> GPU bytes the notebook's run of it allocated (what a replay needs)
    gpu_bytes: dict[int, int] = field(default_factory=dict)
    # setup entry ids that ran in the notebook (not --worker-only): a name of theirs the
    # notebook no longer has was deleted there, not left to the workers to build
    in_notebook: set[int] = field(default_factory=set)
    # names a profiled cell bound that could not come back to the notebook -> why, for the
    # NameError of a cell in another worker (state/exchange.py, bring_back)
    held: dict[str, str] = field(default_factory=dict)
    # the file names IPython compiled a setup cell's notebook run under -> its entry id: the
    # functions and classes it defined reach a worker by value named by that cell
    # (state/setup_replay.CodeFiles)
    setup_files: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        kind: EntryKind,
        name: str,
        cell: PreparedCell,
        *,
        vars_file: Path | None = None,
        run_dir: Path | None = None,
        read_values: bytes | None = None,
    ) -> HistoryEntry:
        with self._lock:
            entry = HistoryEntry(next(self._ids), kind, name, cell, vars_file, run_dir,
                                 read_values)  # fmt: skip
            self._entries.append(entry)
        return entry

    def entries(self) -> list[HistoryEntry]:
        with self._lock:
            return list(self._entries)

    def pending(
        self, done: Collection[int], *, before: int | None = None, setup: bool = True
    ) -> list[HistoryEntry]:
        """Entries not in ``done``, in order, up to (not including) id ``before``; without
        setup cells when ``setup`` is False (``--no-setup``)."""
        return [
            e
            for e in self.entries()
            if e.id not in done
            and (before is None or e.id < before)
            and (setup or e.kind != "setup")
        ]

    def get(self, entry_id: int) -> HistoryEntry | None:
        return next((e for e in self.entries() if e.id == entry_id), None)

    def remove(self, entry_id: int) -> None:
        """Take back an entry added before its cell ran in the notebook (a setup cell the
        workers were prewarmed with) when that run failed."""
        with self._lock:
            self._entries = [e for e in self._entries if e.id != entry_id]
            self.setup_files = {f: i for f, i in self.setup_files.items() if i != entry_id}

    def drop_setup(self) -> int:
        """Forget the setup cells (``%nsight_setup --clear``): workers started later do not run
        them; workers that ran them keep what they built."""
        with self._lock:
            before = len(self._entries)
            self._entries = [e for e in self._entries if e.kind != "setup"]
            self.setup_files = {}
            return before - len(self._entries)

    def drop_cells(self) -> int:
        """Forget the profiled cells (``%nsight_session reset``); setup cells stay."""
        with self._lock:
            before = len(self._entries)
            self._entries = [e for e in self._entries if e.kind == "setup"]
            return before - len(self._entries)

    def find_run(self, run_dir: Path) -> HistoryEntry | None:
        """The entry of the cell that ran in ``run_dir``, if this notebook ran it."""
        resolved = Path(run_dir).resolve()
        for entry in self.entries():
            if entry.run_dir is not None and entry.run_dir.resolve() == resolved:
                return entry
        return None

    def __len__(self) -> int:
        return len(self.entries())


@dataclass(frozen=True)
class SetupCell:
    source: str
    name: str = ""


class SetupRegistry:
    """Ordered, thread-safe list of setup cells for fresh runs. Recording a cell with a name
    that is already there replaces it in place (re-running a setup cell must not duplicate
    it); an unnamed cell with the same source likewise."""

    def __init__(self) -> None:
        self._cells: list[SetupCell] = []
        self._lock = threading.Lock()

    def add(self, source: str, name: str = "") -> SetupCell:
        cell = SetupCell(source=source, name=name)
        with self._lock:
            for i, old in enumerate(self._cells):
                if (name and old.name == name) or (not name and old.source == source):
                    self._cells[i] = cell
                    return cell
            self._cells.append(cell)
        return cell

    def cells(self) -> list[SetupCell]:
        with self._lock:
            return list(self._cells)

    def sources(self) -> list[str]:
        return [c.source for c in self.cells()]

    def prepared(self) -> list[tuple[str, PreparedCell]]:
        """(name, prepared cell) of each setup cell, for a fresh script's history."""
        return [
            (c.name or f"setup {i}", prepare_cell(c.source, cell_name=f"setup cell {i}"))
            for i, c in enumerate(self.cells(), 1)
        ]

    def clear(self) -> int:
        with self._lock:
            n = len(self._cells)
            self._cells.clear()
        return n

    def __len__(self) -> int:
        return len(self._cells)

    def describe(self) -> str:
        cells = self.cells()
        if not cells:
            return "No setup cells recorded. Use %%nsight_setup to add one."
        out = []
        for i, c in enumerate(cells, 1):
            first = c.source.strip().splitlines()[0] if c.source.strip() else ""
            title = f" ({c.name})" if c.name else ""
            lines = len(c.source.splitlines())
            out.append(f"[{i}]{title} {lines} line(s): {first[:70]}")
        return "\n".join(out)


REGISTRY = SetupRegistry()
