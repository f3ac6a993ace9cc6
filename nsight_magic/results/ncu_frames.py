"""What the ncu view shows, computed (``views.protocols.NcuSource``): launches with speed of
light, ncu's own advice, roofline points with their verdicts and the roofs to draw, HFU and MFU.
Every number comes from the report (``NcuReport``) or analysis; any method may raise, and the
view then shows that one line in place of the table or chart."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import roofline_bounds as bounds
from ..analysis.names import short_names
from ..analysis.ncu_metrics import occupancy
from .base import gui_fields


class NcuFrames:
    """Frames of one ncu run for its view. ``run`` is an ``NcuRun`` (its ``parent`` nsys run,
    when it has one, gives HFU/MFU real-clock times)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.report = run.report
        self.name: str = run.name
        self.run_dir: Path | None = run.run_dir

    @functools.cache  # noqa: B019 - one object per run, kept as long as its run
    def launches(self) -> pd.DataFrame:
        """``kernels()`` + the SOL columns (joined on ``launch``) + ``short_name`` +
        ``occupancy_pct, occupancy_source`` (achieved, else theoretical: ``ncu_metrics
        .occupancy``) + ``phase`` (the user's NVTX range each launch ran in, any thread: ncu's
        own record of it, ``NcuReport.kernels``; else from the parent nsys run,
        ``NcuRun.launch_phases``; "" unknown)."""
        kernels = self.report.kernels()
        try:
            sol = self.report.sol()
        except Exception:  # a report without SOL metrics still lists its launches
            sol = None
        if sol is not None and len(sol):
            extra = [c for c in sol.columns if c not in kernels.columns or c == "launch"]
            kernels = kernels.merge(sol[extra], on="launch", how="left")
        out = occupancy(kernels).assign(short_name=short_names(kernels["name"]))
        own = out["phase"].astype(str) if "phase" in out else pd.Series("", index=out.index)
        launch_phases = getattr(self.run, "launch_phases", None)
        if launch_phases is not None and (own == "").any():
            parent = pd.Series(launch_phases(), index=out.index, dtype=str)
            own = own.where(own != "", parent)
        return out.assign(phase=own.to_numpy())

    def header(self) -> dict[str, Any]:
        launches = self.launches()
        clock = launches["sm_clock_hz"].median() if "sm_clock_hz" in launches else None
        return {
            "launches": len(launches),
            "kernels": launches["name"].nunique(),
            "sm_clock_hz": clock,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            **gui_fields("ncu", self.run_dir, self.report),
        }

    def warnings(self) -> list[str]:
        """What was wrong with the file, what was left out and how the launches were chosen
        (``NcuRun.warnings``)."""
        return list(self.run.warnings)

    def sol(self) -> pd.DataFrame:
        sol = self.report.sol()
        return sol.assign(short_name=short_names(sol["name"]))

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        return self.report.sections(launch)

    @functools.cache  # noqa: B019
    def advice(self) -> pd.DataFrame:
        """ncu's rule results, largest estimated speedup first (``NcuReport.advice``)."""
        return self.report.advice()

    def advice_note(self) -> str:
        """Why :meth:`advice` is empty, "" when it is not (``NcuReport.advice_note``)."""
        return self.report.advice_note()

    @functools.cache  # noqa: B019
    def roofline(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(points: ``roofline_bounds`` + the launch config ``grid, block, registers``;
        ceilings: ``roofline_ceilings``)."""
        roofline = self.report.roofline()
        points = bounds.roofline_bounds(roofline)
        launches = self.launches()
        config = launches[["launch", *[c for c in ("grid", "block") if c in launches]]]
        if "registers_per_thread" in launches:
            config = config.assign(registers=launches["registers_per_thread"])
        points = points.merge(config, on="launch", how="left")
        return points, bounds.roofline_ceilings(roofline)

    @functools.cache  # noqa: B019
    def mfu(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}``: HFU (hardware FLOPs ncu counted) and MFU (model
        FLOPs, NaN where unknown) per launch and per NVTX range (``NcuRun.mfu_frames``, times
        from the parent nsys run when there is one). Raises when the GPU has no known peak:
        the view says so."""
        return self.run.mfu_frames()
