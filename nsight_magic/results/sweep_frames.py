"""What a sweep's view shows (``views.protocols.SweepSource``), computed from its runs by
``analysis/sweep.py``: which frames each configuration's run gives, and the sweep's numbers."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from ..analysis import sweep as numbers
from ..run_folders.sweep_record import SweepRecord, canonical


def config_frames(run: Any) -> numbers.ConfigFrames:
    """One configuration's run as the sweep's numbers read it (``analysis.sweep``)."""
    status = run.meta.get("cell_status") or {}
    cell_s = status.get("cell_s") if isinstance(status, dict) else None
    torch_counts = memory_summary = None
    # a run with no memory events or no torch counts has empty frames; a report that cannot
    # say at all still has its kernel numbers
    with contextlib.suppress(Exception):
        torch_counts = run.memory.torch_counts()
    with contextlib.suppress(Exception):
        memory_summary = run.memory.summary()
    busy = None
    with contextlib.suppress(Exception):
        busy = float(run.gpu_busy_pct())
    stats = getattr(run, "repeat_stats", None)
    return numbers.ConfigFrames(
        kernel_summary=run.kernel_summary(),
        gpu_busy_pct=busy,
        cell_s=float(cell_s) if isinstance(cell_s, int | float) else None,
        torch_counts=torch_counts,
        memory_summary=memory_summary,
        repeat_totals_ns=stats.totals_ns if stats is not None else (),
    )


class SweepFrames:
    """The sweep's frames: its record (values, status, error per configuration) and the runs of
    the configurations that have a report, keyed as ``record.configs`` are (``keys``)."""

    def __init__(
        self,
        record: SweepRecord,
        keys: Sequence[tuple[Any, ...]],
        runs: Mapping[Any, Any],
        folder: str | None = None,
    ) -> None:
        self.record = record
        self.keys = list(keys)
        self.runs = runs
        self.folder = folder

    @functools.cached_property
    def rows(self) -> list[numbers.ConfigRow]:
        out = []
        for key, config in zip(self.keys, self.record.configs, strict=True):
            run = self.runs.get(key)
            out.append(
                numbers.ConfigRow(
                    label=config.label,
                    values=dict(zip(self.record.variables, key, strict=True)),
                    status=config.status,
                    error=config.error,
                    run_s=config.wall_s,
                    frames=config_frames(run) if run is not None else None,
                )
            )
        return out

    def variables(self) -> list[str]:
        return list(self.record.variables)

    def table(self) -> pd.DataFrame:
        return numbers.sweep_table(self.rows, self.record.variables)

    def kernels(self) -> pd.DataFrame:
        return numbers.kernel_matrix(self.rows)

    def top_kernels(self, top: int = 5) -> pd.DataFrame:
        return numbers.config_top_kernels(self.rows, top)

    def axis_scale(self, variable: str) -> str:
        index = self.record.variables.index(variable)
        # distinct by written form: 1, 1.0 and True are three values, a list value is one
        distinct = {canonical(key[index]): key[index] for key in self.keys}
        return numbers.axis_scale(list(distinct.values()))

    def mfu(self, mfu_of: Callable[[numbers.ConfigRow], pd.DataFrame | None]) -> pd.DataFrame:
        return numbers.sweep_mfu(self.rows, self.record.variables, mfu_of)

    def header(self) -> dict[str, Any]:
        counts = self.record.counts()
        return {
            "name": self.record.name,
            "folder": self.folder,
            "variables": list(self.record.variables),
            "configs": len(self.record.configs),
            "ok": counts.get("ok", 0),
            "failed": counts.get("failed", 0),
            "cancelled": counts.get("cancelled", 0) + counts.get("pending", 0),
        }
