"""``NcuRun``: an Nsight Compute run (its report, run folder and metadata), the frames the ncu
view shows, HFU/MFU, and its display."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import mfu as utilisation
from ..analysis import roofline_bounds as bounds
from ..views.ncu_view import ncu_static_html, ncu_widget
from ..views.roofline_chart import roofline_chart
from .base import _Run
from .ncu_frames import NcuFrames
from .protocols import ParentRun


class NcuRun(_Run):
    """An Nsight Compute run: ``report`` is an ``NcuReport``; frame methods are forwarded."""

    kind = "ncu"

    def __init__(
        self,
        report: Any,
        run_dir: str | Path | None = None,
        meta: dict[str, Any] | None = None,
        parent: ParentRun | None = None,
    ) -> None:
        super().__init__(report, run_dir, meta)
        # The nsys run this kernel was picked from: its real-clock times feed MFU.
        self.parent = parent

    def kernels(self) -> pd.DataFrame:
        return self.report.kernels()

    def metrics(self) -> pd.DataFrame:
        return self.report.metrics()

    def sol(self) -> pd.DataFrame:
        return self.report.sol()

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        return self.report.sections(launch)

    def roofline(self) -> pd.DataFrame:
        return self.report.roofline()

    def nvtx_ranges(self) -> pd.DataFrame:
        return self.report.nvtx_ranges()

    def device(self) -> dict[str, Any]:
        return self.report.device()

    def roofline_bounds(self) -> pd.DataFrame:
        """Which roof binds each launch (``analysis.roofline_bounds.roofline_bounds``)."""
        return bounds.roofline_bounds(self.roofline())

    def roofline_ceilings(self) -> pd.DataFrame:
        """The roofs to draw (``analysis.roofline_bounds.roofline_ceilings``)."""
        return bounds.roofline_ceilings(self.roofline())

    def _parent_frames(self) -> dict[str, pd.DataFrame | None]:
        """The parent nsys run's kernels and projection: real-clock times for HFU/MFU."""
        if self.parent is None:
            return {"nsys_kernels": None, "projection": None}
        return {
            "nsys_kernels": self.parent.kernels(),
            "projection": self.parent.nvtx_gpu_projection(),
        }

    def mfu(
        self,
        flops: Mapping[int, float] | None = None,
        *,
        dtype: str | None = None,
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """HFU and MFU per profiled launch (``analysis.mfu.kernel_utilisation``) against the
        derived peak of this report's GPU: hardware FLOPs from the report (MissingMetricsError
        with the fix when it lacks FLOP counts), model FLOPs from ``flops`` (launch -> FLOPs)
        or the PyTorch op ranges around the launches, times from the parent nsys run if any."""
        points = self.roofline()
        device = self.device()
        utilisation.require_flop_counts(points, device["compute_capability"])
        return utilisation.kernel_utilisation(
            points,
            kernels=self.kernels(),
            nvtx=self.nvtx_ranges(),
            nsys_kernels=self._parent_frames()["nsys_kernels"],
            model_flops=flops,
            gpu_name=device["name"],
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def hfu(self, *, dtype: str | None = None, peak_flops: float | None = None) -> pd.DataFrame:
        """:meth:`mfu` without user model FLOPs: the ``hfu`` column is the point."""
        return self.mfu(dtype=dtype, peak_flops=peak_flops)

    def range_mfu(
        self,
        flops: Mapping[Any, float] | None = None,
        *,
        time_ns: Mapping[Any, float] | None = None,
        dtype: str | None = None,
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """HFU and MFU per NVTX range (``analysis.mfu.range_utilisation``): ``flops`` / ``time_ns``
        keyed by range name, ``(domain, range)`` or ``"domain:range"``."""
        points = self.roofline()
        device = self.device()
        utilisation.require_flop_counts(points, device["compute_capability"])
        return utilisation.range_utilisation(
            points,
            self.nvtx_ranges(),
            projection=self._parent_frames()["projection"],
            time_ns=time_ns,
            flops=flops,
            gpu_name=device["name"],
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def mfu_frames(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}`` for the ncu view (``analysis.mfu.mfu_frames``);
        FLOP counts NaN rather than an error when the report lacks them."""
        return utilisation.mfu_frames(
            self.roofline(),
            self.kernels(),
            nvtx=self.nvtx_ranges(),
            gpu_name=self.device()["name"],
            **self._parent_frames(),
        )

    def advice(self) -> pd.DataFrame:
        """ncu's rule results (``NcuReport.advice``): ``launch, name, rule, section, title,
        message, speedup_pct, speedup_type, severity, section_name, focus_metrics``, largest
        estimated speedup first; empty when ncu ran no rules (:meth:`advice_note` says why)."""
        return self.report.advice()

    def advice_note(self) -> str:
        """Why :meth:`advice` is empty ("" when it is not)."""
        return self.report.advice_note()

    @property
    def warnings(self) -> list[str]:
        """What was wrong with the file and what was left out (empty when it is whole)."""
        return list(self.report.warnings)

    @functools.cached_property
    def frames(self) -> NcuFrames:
        return NcuFrames(self)

    def roofline_chart(self) -> Any:
        """The roofline as an altair chart (ceilings, labelled points, verdicts on hover)."""
        return roofline_chart(*self.frames.roofline())

    def widget(self, on_pick: Callable[[str], Any] | None = None) -> Any:
        """The live view; a click on a roofline point calls ``on_pick(kernel name)``."""
        return ncu_widget(self.frames, on_pick=on_pick)

    def _build_html(self) -> str:
        return ncu_static_html(self.frames)

    def __repr__(self) -> str:
        try:
            n: int | str = len(self.kernels())
        except Exception:
            n = "?"
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return f"<NcuRun {self.name!r}: {n} profiled launches{where}>"
