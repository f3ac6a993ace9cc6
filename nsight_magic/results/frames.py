"""What the views show, computed: one object per run that answers the views' questions with
frames (``views.protocols`` names them), each from analysis functions or report methods. Views
lay these frames out and compute nothing; any method may raise on a damaged report, and the view
then shows that one line in place of the table or chart.

Frames are cached per object: a run's report does not change, and the widget and the static HTML
ask for the same ones."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis.kernels import kernel_summary
from ..analysis.memory import copies_by_kind
from ..analysis.mfu import kernel_mfu, range_mfu
from . import contracts

# Bars in the first timeline view: more than a 640 px chart tells apart, few enough that the
# chart data saved inline keeps a notebook small (P2). A zoomed window gets up to ZOOM_ROWS.
TIMELINE_ROWS = 1000
ZOOM_ROWS = 2000


def nvtx_label(frame: pd.DataFrame) -> pd.Series:
    """``domain:range`` as nsys stats writes it (":range" for the default domain)."""
    return frame["domain"].fillna("").astype(str) + ":" + frame["range"].astype(str)


def _dims(frame: pd.DataFrame, prefix: str) -> pd.Series:
    cols = [f"{prefix}_{axis}" for axis in "xyz"]
    if not all(c in frame.columns for c in cols):
        return pd.Series("", index=frame.index)
    return "(" + frame[cols].astype(str).agg(", ".join, axis=1) + ")"


class NsysFrames:
    """Frames of one nsys run for its view (``views.protocols.NsysSource``)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.name: str = run.name
        self.run_dir: Path | None = run.run_dir

    def header(self) -> dict[str, Any]:
        """Raw header numbers; a missing one is None (the view leaves it out)."""
        report = self.run.report
        out: dict[str, Any] = {"run_dir": str(self.run_dir) if self.run_dir else None}
        for key, read in (
            ("gpu", lambda: report.gpu_info().get("name")),
            ("captured_ns", lambda: report.capture_window()[1] - report.capture_window()[0]),
            ("busy_pct", report.gpu_busy_pct),
            ("kernels", lambda: len(report.kernels())),
        ):
            try:
                out[key] = read()
            except Exception:
                out[key] = None
        return out

    @functools.cache  # noqa: B019 - one object per run, kept as long as its run
    def kernel_table(self) -> pd.DataFrame:
        """``kernel_summary()`` + ``short_name`` + the launch config of each name's first
        instance (``grid, block, registers``) for tooltips."""
        summary = self.run.report.kernel_summary()
        kernels = self.run.report.kernels()
        first = kernels.drop_duplicates("name").assign(
            grid=lambda k: _dims(k, "grid"), block=lambda k: _dims(k, "block")
        )
        first = first.rename(columns={"registers_per_thread": "registers"})
        config = [c for c in ("grid", "block", "registers") if c in first.columns]
        first = first[["name", *config]].assign(name=lambda k: k["name"].astype(str))
        out = summary.merge(first, on="name", how="left")
        return out.assign(short_name=contracts.short_names(out["name"]))

    @functools.cache  # noqa: B019
    def nvtx_table(self) -> pd.DataFrame:
        """NVTX GPU projection, the cell's statements first in line order, + ``label``."""
        ordered = contracts.statement_ordered(self.run.report.nvtx_gpu_projection())
        return ordered.assign(label=nvtx_label(ordered))

    def copies(self) -> pd.DataFrame:
        return copies_by_kind(self.run.report.memcpy())

    def gaps(self, min_gap_ns: int) -> pd.DataFrame:
        """Idle stretches + ``before_short, after_short`` (the neighbours' short names)."""
        gaps = self.run.report.gaps(min_gap_ns)
        return gaps.assign(
            before_short=contracts.short_names(gaps["before"].astype(str)),
            after_short=contracts.short_names(gaps["after"].astype(str)),
        )

    def origin_ns(self) -> int:
        return int(self.run.report.capture_window()[0])

    def _optional(self, method: str) -> pd.DataFrame | None:
        try:
            return getattr(self.run.report, method)()
        except Exception:  # reports omit empty tables: the timeline just has no such lane
            return None

    def timeline(
        self, window: tuple[int, int] | None = None, rows: int | None = None
    ) -> pd.DataFrame:
        """Timeline rows, binned to at most ``rows`` (default TIMELINE_ROWS, ZOOM_ROWS within
        a window)."""
        if rows is None:
            rows = TIMELINE_ROWS if window is None else ZOOM_ROWS
        return contracts.timeline_frame(
            self.run.report.kernels(),
            self._optional("memcpy"),
            self._optional("nvtx"),
            window=window,
            max_rows=rows,
        )

    @functools.cache  # noqa: B019
    def nvtx_ranges(self) -> pd.DataFrame:
        """Distinct ``domain, range, style, label`` (statement order), for the range filter
        and "profile this range"."""
        nvtx = self.run.report.nvtx()
        distinct = nvtx[["domain", "range", "style"]].drop_duplicates(["domain", "range"])
        distinct = distinct.assign(proj_total_ns=0.0)
        ordered = contracts.statement_ordered(distinct.reset_index(drop=True))
        return ordered.assign(label=nvtx_label(ordered))[["domain", "range", "style", "label"]]

    def ranked_kernels(self, nvtx_range: tuple[str, str] | None = None) -> pd.DataFrame:
        """``name, short_name, instances, total_ns`` by total GPU time, optionally only the
        kernels launched inside NVTX range ``(domain, range)``."""
        kernels = self.run.report.kernels()
        if nvtx_range is not None:
            report = self.run.report
            domain, name = nvtx_range
            kernels = contracts.kernels_in_range(
                kernels, report.cuda_api(), report.nvtx(), domain, name
            )
        ranked = kernel_summary(kernels)[["name", "instances", "total_ns"]]
        return ranked.assign(short_name=contracts.short_names(ranked["name"]))

    def instances(self, kernel: str) -> int:
        """How many times ``kernel`` ran in the whole capture (ncu counts over the run)."""
        return int((self.run.report.kernels()["name"] == kernel).sum())


class NcuFrames:
    """Frames of one ncu run for its view (``views.protocols.NcuSource``)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.name: str = run.name
        self.run_dir: Path | None = run.run_dir

    @functools.cache  # noqa: B019
    def launches(self) -> pd.DataFrame:
        """``kernels()`` + the SOL columns (joined on ``launch``) + ``short_name``."""
        kernels = self.run.report.kernels()
        try:
            sol = self.run.report.sol()
        except Exception:
            sol = None
        if sol is not None and len(sol):
            extra = [c for c in sol.columns if c not in kernels.columns or c == "launch"]
            kernels = kernels.merge(sol[extra], on="launch", how="left")
        return kernels.assign(short_name=contracts.short_names(kernels["name"]))

    def header(self) -> dict[str, Any]:
        launches = self.launches()
        clock = launches["sm_clock_hz"].median() if "sm_clock_hz" in launches else None
        return {
            "launches": len(launches),
            "kernels": launches["name"].nunique(),
            "sm_clock_hz": clock,
            "run_dir": str(self.run_dir) if self.run_dir else None,
        }

    def sol(self) -> pd.DataFrame:
        sol = self.run.report.sol()
        return sol.assign(short_name=contracts.short_names(sol["name"]))

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        return self.run.report.sections(launch)

    @functools.cache  # noqa: B019
    def advice(self) -> pd.DataFrame:
        return contracts.advice(self.run.report)

    @functools.cache  # noqa: B019
    def roofline(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(points with verdicts + launch config, ceilings)."""
        roofline = self.run.report.roofline()
        points = contracts.roofline_bounds(roofline)
        launches = self.launches()
        config = launches[["launch", *[c for c in ("grid", "block") if c in launches]]]
        if "registers_per_thread" in launches:
            config = config.assign(registers=launches["registers_per_thread"].astype(str))
        points = points.merge(config, on="launch", how="left")
        return points, contracts.roofline_ceilings(roofline)

    @functools.cache  # noqa: B019
    def mfu(self) -> dict[str, pd.DataFrame]:
        """Per-kernel and per-NVTX-range MFU against the datasheet dense peak; with a parent
        nsys run, times are its real-clock ones (ncu locks clocks). Empty frames when the
        report lacks FLOP metrics or the GPU has no known peak."""
        out: dict[str, pd.DataFrame] = {"kernels": pd.DataFrame(), "ranges": pd.DataFrame()}
        report, parent = self.run.report, getattr(self.run, "parent", None)
        try:
            points = report.roofline()
            gpu = (report.device() or {}).get("name")
        except Exception:
            return out
        nsys_kernels = projection = None
        if parent is not None:
            nsys_kernels = _or_none(parent.kernels)
            projection = _or_none(parent.nvtx_gpu_projection)
        kernels = _or_none(
            lambda: kernel_mfu(
                points, kernels=report.kernels(), nsys_kernels=nsys_kernels, gpu_name=gpu
            )
        )
        ranges = _or_none(
            lambda: range_mfu(points, report.nvtx_ranges(), projection=projection, gpu_name=gpu)
        )
        if kernels is not None and len(kernels):
            out["kernels"] = kernels.assign(short_name=contracts.short_names(kernels["name"]))
        if ranges is not None and len(ranges):
            out["ranges"] = ranges.assign(label=nvtx_label(ranges))
        return out


def _or_none(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None
