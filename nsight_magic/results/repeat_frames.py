"""A ``%%nsys --repeat N`` run's per-repeat frames (``analysis/repeats.py``), read only where the
run's meta.json says it ran N >= 2 repeats: a report alone cannot tell a repeat from a ``cell``
range the user opened twice."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from ..analysis import repeats


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

    @property
    def stats(self) -> repeats.RepeatStats | None:
        return self.found[1] if self.found is not None else None

    def table(self) -> pd.DataFrame:
        walls = (self.run.meta.get("cell_status") or {}).get("repeat_cell_s") or []
        return repeats.repeat_table(self.stats, walls)

    def projection(self, projection: pd.DataFrame, report: Any) -> pd.DataFrame:
        """``projection`` with each range's per-repeat columns (a multi-rank report, which
        has no projection trace, as it is)."""
        trace = getattr(report, "nvtx_gpu_trace", None)
        if self.stats is None or trace is None:
            return projection
        per_range = repeats.projection_repeats(trace(), self.run.nvtx(), self.stats.n)
        return repeats.with_repeat_stats(projection, per_range, repeats.RANGE_KEYS, self.stats.n)
