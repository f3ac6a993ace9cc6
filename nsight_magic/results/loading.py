"""Rebuild a run object from its run folder, offline (no profiler, no GPU needed); one run from
the reports of a multi-rank job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ReportError, ReportNotFoundError
from ..folders import expand
from ..reports import open_report
from ..reports.nsys import merge
from ..runs import META, read_json
from .drill_protocols import DrillRunner
from .nsys_run import NcuRun, NsysRun


def _inside(run_dir: Path, name: Any) -> str:
    """``meta["report"]`` as a name inside ``run_dir``: an absolute path, a ``..`` step or a
    link out of the folder would make a shared folder open any file on this machine."""
    if not isinstance(name, str):
        raise ReportError(f"{run_dir / META}: 'report' is {name!r}, not a file name.")
    inside = run_dir.resolve()
    target = (run_dir / name).resolve()
    if Path(name).is_absolute() or ".." in Path(name).parts or not target.is_relative_to(inside):
        raise ReportError(
            f"{run_dir / META} names the report {name!r}, outside the run folder; load_run "
            "opens only files inside it (open_report(path) opens any file you choose)."
        )
    return name


def _meta(run_dir: Path) -> dict[str, Any]:
    meta = read_json(run_dir / META, {})
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ReportError(f"{run_dir / META} holds a {type(meta).__name__}, not an object.")
    for key in ("tool", "name", "status"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise ReportError(f"{run_dir / META}: {key!r} is {meta[key]!r}, not a string.")
    nproc = meta.get("nproc")
    if nproc is not None and (isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1):
        raise ReportError(f"{run_dir / META}: 'nproc' is {nproc!r}, not a whole number >= 1.")
    return meta


def _report_in(run_dir: Path, meta: dict[str, Any]) -> Path:
    """The saved report to open: nsys export (.sqlite, parquet dir) before the .nsys-rep."""
    tool = meta.get("tool")
    names = []
    if meta.get("report"):
        names.append(_inside(run_dir, meta["report"]))
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


def load_run(
    path: str | Path, drill_runner: DrillRunner | None = None, *, trust: bool = False
) -> Any:
    """Rebuild ``NsysRun``/``NcuRun`` from a run folder, offline (no profiler needed). A
    re-profile of it (``profile_kernel``) runs under this session's interpreter and environment;
    ``trust=True`` lets the folder's saved interpreter, working directory and ``--env`` apply and
    skips the ownership check (only for folders you trust: they choose what runs)."""
    run_dir = expand(path)
    if run_dir.is_file() and run_dir.name == META:
        run_dir = run_dir.parent
    if not run_dir.is_dir():
        raise ReportNotFoundError(f"{run_dir} is not a run folder.")
    meta = _meta(run_dir)
    report_path = _report_in(run_dir, meta)
    report = open_report(report_path)
    tool = meta.get("tool") or ("ncu" if report_path.suffix == ".ncu-rep" else "nsys")
    if tool == "ncu":
        return NcuRun(report, run_dir, meta)
    run = nsys_run(report, run_dir, meta, drill_runner=drill_runner)
    run.trust_folder = trust
    return run


def nsys_run(
    report: Any,
    run_dir: Path | None,
    meta: dict[str, Any],
    drill_runner: DrillRunner | None = None,
) -> NsysRun:
    """The run of a captured or reloaded nsys report: a cell that ran as several ranks
    (``meta["nproc"]`` > 1, one report holding every rank) gets per-rank frames and a Ranks tab,
    live and reloaded alike."""
    if int(meta.get("nproc") or 1) > 1:
        report = merge.load_runs([report])
    return NsysRun(report, run_dir, meta, drill_runner=drill_runner)


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
