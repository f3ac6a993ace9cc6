"""One live worker and what it has: the history entries it ran, the notebook's record of what it
shares with it (``mirror``), the names in its namespace. Shared by the pool that keeps workers, the
executor that runs cells in them, the state exchange and the prewarm.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ...processes.locate import ToolName
from ...shared_state.notebook_side import NotebookState
from ...worker.process import WorkerProcess
from ..backends import WarmState


@dataclass
class WarmSession:
    """One live worker and what it has: the history entries it ran, what it shares with the
    notebook, the names in its namespace."""

    tool: ToolName
    key: tuple[Any, ...]
    worker: WorkerProcess
    state: WarmState
    started_utc: str
    executed: list[int] = field(default_factory=list)  # history ids, in the order run
    # what it shares with the notebook, object by object (shared_state/notebook_side.py)
    mirror: NotebookState | None = None
    mapped_bytes: int = 0  # the notebook's GPU memory it maps (the most sent at once)
    names: frozenset[str] = frozenset()
    cells: int = 0
    broken: str = ""  # why the worker cannot be used again (a sticky CUDA error)
    ran_sources: set[str] = field(default_factory=set)  # cells captured here, failed ones too
    notes: list[str] = field(default_factory=list)  # for the user, from background work
    # a name a setup cell binds -> why this worker lacks it: that cell raised when replayed
    # here (said again by the cell that then fails reading it: notes may reach no output)
    setup_failed: dict[str, str] = field(default_factory=dict)
    prewarmed: list[str] = field(default_factory=list)  # what it replayed before any cell
    busy: str = ""  # what holds it in the background (prewarm), for a cell that waits
    lock: threading.RLock = field(default_factory=threading.RLock)

    def alive(self) -> bool:
        return not self.broken and self.worker.alive()
