"""The setup cells recorded by ``%%nsight_setup``; every profiled script replays them, in
order, before the cell and outside the capture (imports, model construction, data)."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class SetupCell:
    source: str
    name: str = ""


class SetupRegistry:
    """Ordered, thread-safe list of setup cells. Recording a cell with a name that is already
    there replaces it in place (re-running a setup cell must not duplicate it)."""

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

    def list(self) -> list[SetupCell]:
        with self._lock:
            return list(self._cells)

    def sources(self) -> list[str]:
        return [c.source for c in self.list()]

    def clear(self) -> int:
        with self._lock:
            n = len(self._cells)
            self._cells.clear()
        return n

    def __len__(self) -> int:
        return len(self._cells)

    def describe(self) -> str:
        cells = self.list()
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
