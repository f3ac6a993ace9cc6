"""Rebuild a run object from its run folder, offline (no profiler, no GPU needed); one run from
the reports of a multi-rank job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ReportNotFoundError
from ..reports import open_report
from ..reports.nsys import merge
from ..runs import META, read_json
from .protocols import KernelProfiler
from .runs import NcuRun, NsysRun


def _report_in(run_dir: Path, meta: dict[str, Any]) -> Path:
    """The saved report to open: nsys export (.sqlite, parquet dir) before the .nsys-rep."""
    tool = meta.get("tool")
    names = []
    if meta.get("report"):
        names.append(meta["report"])
    if tool == "ncu":
        names += ["report.ncu-rep"]
    else:
        names += ["report.sqlite", "report_pq", "report.nsys-rep"]
    for name in names:
        path = run_dir / name
        if path.exists():
            return path
    raise ReportNotFoundError(
        f"{run_dir} holds no report ({', '.join(names)}); status: {meta.get('status', '?')}."
    )


def load_run(path: str | Path, profiler: KernelProfiler | None = None) -> Any:
    """Rebuild ``NsysRun``/``NcuRun`` from a run folder, offline (no profiler needed)."""
    run_dir = Path(path)
    if run_dir.is_file() and run_dir.name == META:
        run_dir = run_dir.parent
    if not run_dir.is_dir():
        raise ReportNotFoundError(f"{run_dir} is not a run folder.")
    meta = read_json(run_dir / META, {}) or {}
    report_path = _report_in(run_dir, meta)
    report = open_report(report_path)
    tool = meta.get("tool") or ("ncu" if report_path.suffix == ".ncu-rep" else "nsys")
    if tool == "ncu":
        return NcuRun(report, run_dir, meta)
    return nsys_run(report, run_dir, meta, profiler=profiler)


def nsys_run(
    report: Any, run_dir: Path | None, meta: dict[str, Any], profiler: KernelProfiler | None = None
) -> NsysRun:
    """The run of a captured or reloaded nsys report: a cell that ran as several ranks
    (``meta["nproc"]`` > 1, one report holding every rank) gets per-rank frames and a Ranks tab,
    live and reloaded alike."""
    if int(meta.get("nproc") or 1) > 1:
        report = merge.load_runs([report])
    return NsysRun(report, run_dir, meta, profiler=profiler)


def load_runs(sources: Any, align: bool = True, name: str | None = None) -> NsysRun:
    """One displayable run of a multi-rank job: the reports of its ranks (paths, a glob such as
    ``"run/rank*.sqlite"``, ``NsysReport``s or runs) merged by ``reports.nsys.merge.load_runs``
    into a ``RankedReport`` (frames with ``report`` and ``rank`` columns, clocks aligned unless
    ``align=False``), wrapped in an ``NsysRun`` so it shows with a Ranks tab. ``name`` defaults
    to the reports' names."""
    ranked = merge.load_runs(sources, align=align)
    if name is None:
        stems = [Path(r.rep_path or r.path).stem for r in ranked.reports]
        name = " + ".join(stems) if len(stems) <= 3 else f"{stems[0]} + {len(stems) - 1} more"
    return NsysRun(ranked, meta={"name": name, "reports": [str(r.path) for r in ranked.reports]})
