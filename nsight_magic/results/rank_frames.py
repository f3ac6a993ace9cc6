"""What the Ranks tab shows, computed: the frames of a multi-rank run (``views.protocols
.RankSource``), all from ``reports.nsys.merge.RankedReport`` (which calls ``analysis.ranks`` and
``analysis.collectives``). A run is multi-rank when two or more of its processes have a rank:
a ``RankedReport`` from ``load_runs``, or one report of a ``torchrun`` job holding every rank."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from ..reports.nsys.merge import RankedReport
from ..reports.nsys.report import NsysReport

# Bars of the per-rank timeline (shared out between the ranks' lanes), as the run's timeline.
RANK_TIMELINE_ROWS = 1000


class RankFrames:
    """Frames of a multi-rank run for the Ranks tab. Use :meth:`of`."""

    def __init__(self, ranked: RankedReport) -> None:
        self.ranked = ranked

    @classmethod
    def of(cls, report: Any) -> RankFrames | None:
        """The rank frames of ``report`` (a ``RankedReport``, or an ``NsysReport`` holding
        several ranks), None when it has fewer than two ranks or they cannot be told apart
        (a report whose rank table cannot be built has no Ranks tab, not a broken view)."""
        try:
            if isinstance(report, RankedReport):
                ranked = report
            elif isinstance(report, NsysReport):
                ranked = RankedReport([report])
            else:
                return None
            frames = cls(ranked)
            return frames if frames.count() >= 2 else None
        except Exception:
            return None

    @functools.cache  # noqa: B019 - one object per run
    def count(self) -> int:
        """How many processes have a rank."""
        return int(self.ranked.ranks()["rank"].notna().sum())

    def summary(self) -> dict[str, Any]:
        """``RankedReport.summary()``: ranks, NCCL time, worst skew, the straggler rank."""
        return self.ranked.summary()

    def ranks(self) -> pd.DataFrame:
        """``report, host, pid, rank, device_id, source``: which process is which rank."""
        return self.ranked.ranks()

    def kernels(self) -> pd.DataFrame:
        """``rank`` + ``kernel_summary`` columns, each rank's own (``rank_kernel_summary``)."""
        return self.ranked.rank_kernel_summary()

    def collectives(self) -> pd.DataFrame:
        """Per (rank, kind) NCCL time, bytes, wait and times last (``collective_summary``)."""
        return self.ranked.collective_summary()

    def collective_kernels(self) -> pd.DataFrame:
        """One row per NCCL kernel (``collectives``)."""
        return self.ranked.collectives()

    def skew(self) -> pd.DataFrame:
        """Per collective instance: start spread and the straggler (``rank_skew``)."""
        return self.ranked.rank_skew()

    def busy(self) -> pd.DataFrame:
        """``report, pid, rank, busy_pct`` (``rank_busy_pct``)."""
        return self.ranked.rank_busy_pct()

    def origin_ns(self) -> int:
        return int(self.ranked.capture_window()[0])

    def timeline(
        self, window: tuple[int, int] | None = None, rows: int | None = None
    ) -> pd.DataFrame:
        """Timeline rows with lanes ``rank r / GPU d / stream s`` (``RankedReport.timeline``)."""
        return self.ranked.timeline(max_rows=rows or RANK_TIMELINE_ROWS, window=window)
