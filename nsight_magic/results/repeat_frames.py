"""A ``%%nsys --repeat N`` run's per-repeat frames (``analysis/repeats.py``), read only where the
run's meta.json says it ran N >= 2 repeats: a report alone cannot tell a repeat from a ``cell``
range the user opened twice."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from ..analysis import machine_state, repeats


class RepeatFrames:
    """The repeats of ``run`` (an ``NsysRun``: its kernels, CUDA API, NVTX and meta)."""

    def __init__(self, run: Any) -> None:
        self.run = run

    @functools.cached_property
    def found(self) -> repeats.Found | None:
        """``analysis.repeats.kernel_repeats`` of the run; None for a run of one repeat, or a
        report without the CUDA API trace the repeats are read from."""
        expected = self.run.meta.get("repeat")
        if not isinstance(expected, int) or expected < 2:
            return None
        run = self.run
        try:
            return repeats.kernel_repeats(run.kernels(), run.cuda_api(), run.nvtx(), expected)
        except (KeyError, NotImplementedError, AttributeError):  # no API trace: no repeats
            return None

    @functools.cached_property
    def windows(self) -> pd.DataFrame:
        """The repeats' openings of the cell range (``analysis.repeats.repeat_windows``), read
        once for every per-repeat frame."""
        return repeats.repeat_windows(self.run.nvtx())

    @property
    def stats(self) -> repeats.RepeatStats | None:
        return self.found[1] if self.found is not None else None

    def notes(self) -> list[str]:
        """The lines a repeated run gets: a GPU clock that moved or a GPU that warmed between
        repeats (``analysis.machine_state.repeat_notes``), a GPU time per repeat that varies
        by more than 5% (``analysis.repeats.unstable_notes``)."""
        status = self.run.meta.get("cell_status") or {}
        moved = machine_state.repeat_notes(status.get("repeat_gpu"))
        return moved + repeats.unstable_notes(self.stats)

    def table(self) -> pd.DataFrame:
        walls = (self.run.meta.get("cell_status") or {}).get("repeat_cell_s") or []
        return repeats.repeat_table(self.stats, walls)

    def projection(self, projection: pd.DataFrame, report: Any) -> pd.DataFrame:
        """``projection`` with each range's per-repeat columns (a multi-rank report, which
        has no projection trace, as it is)."""
        trace = getattr(report, "nvtx_gpu_trace", None)
        if self.stats is None or trace is None:
            return projection
        per_range = repeats.projection_repeats(trace(), self.windows, self.stats.n)
        return repeats.with_repeat_stats(projection, per_range, repeats.RANGE_KEYS, self.stats.n)

    def _phase_trace(self, report: Any) -> pd.DataFrame | None:
        """The report's phase trace (one row per opening), None for a run of one repeat or a
        multi-rank report, which keeps none."""
        trace = getattr(report, "nvtx_phase_trace", None)
        return trace() if self.stats is not None and trace is not None else None

    def phases(self, phases: pd.DataFrame, report: Any) -> pd.DataFrame:
        """``phases`` (``nvtx_phases()``) with each range's phase time per repeat."""
        trace = self._phase_trace(report)
        if trace is None or self.stats is None:
            return phases
        per_range = repeats.phase_repeats(trace, self.windows, self.stats.n)
        return repeats.with_repeat_stats(phases, per_range, repeats.RANGE_KEYS, self.stats.n)

    def mfu(self, mfu: pd.DataFrame, report: Any, phase_source: str) -> pd.DataFrame:
        """``mfu`` (``NsysRun.mfu()``) with its time per repeat and the MFU's 95% interval
        (``analysis.repeats.mfu_with_repeats``)."""
        if self.stats is None or mfu.empty:
            return mfu
        trace = self._phase_trace(report)
        projected = getattr(report, "nvtx_gpu_trace", None)
        n, windows = self.stats.n, self.windows
        phase = (repeats.phase_repeats(trace, windows, n, repeats.MFU_KEYS)
                 if trace is not None else None)  # fmt: skip
        projection = (repeats.projection_repeats(projected(), windows, n, repeats.MFU_KEYS)
                      if projected is not None else None)  # fmt: skip
        return repeats.mfu_with_repeats(mfu, phase, projection, phase_source, n)
