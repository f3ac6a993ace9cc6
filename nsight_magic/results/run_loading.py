"""One run folder (a ``meta.json`` and its report) as an ``NsysRun`` or ``NcuRun``, offline: its
meta.json read with every value a reader would trip on checked, the report opened only from
inside the folder (no link, no ``..``), a top-N run's other ncu passes merged. A sweep folder,
and a folder of runs, are ``loading.py``'s: this module knows no sweep."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from ..errors import DamagedFolderWarning, ReportError, ReportNotFoundError
from ..reports import open_report
from ..reports.nsys import merge
from ..run_folders.regular_files import NotRegularFile, entries, read_regular
from ..run_folders.run_dir import RunDir
from ..run_folders.run_meta import RunMeta
from .drill_protocols import DrillRunner
from .nsys_run import NcuRun, NsysRun


def load_one(run_dir: Path, drill_runner: DrillRunner | None = None, *, trust: bool = False) -> Any:
    """The ``NsysRun``/``NcuRun`` of the run folder ``run_dir`` (absolute)."""
    meta = _meta(run_dir)
    report_path = _report_in(run_dir, meta)
    report = open_report(report_path)
    tool = meta.tool or ("ncu" if report_path.suffix == ".ncu-rep" else "nsys")
    if tool == "ncu":
        return NcuRun(_with_more_passes(report, run_dir, meta), run_dir, meta.to_dict())
    run = nsys_run(report, run_dir, meta.to_dict(), drill_runner=drill_runner)
    run.trust_folder = trust
    return run


def _inside(run_dir: Path, name: Any) -> str:
    """``meta["report"]`` as a name inside ``run_dir``: an absolute path, a ``..`` step or a
    link out of the folder would make a shared folder open any file on this machine."""
    if not isinstance(name, str) or "\x00" in name:
        raise ReportError(f"{RunDir(run_dir).meta}: 'report' is {name!r}, not a file name.")
    inside = run_dir.resolve()
    target = (run_dir / name).resolve()
    if Path(name).is_absolute() or ".." in Path(name).parts or not target.is_relative_to(inside):
        raise ReportError(
            f"{RunDir(run_dir).meta} names the report {name!r}, outside the run folder; load_run "
            "opens only files inside it (open_report(path) opens any file you choose)."
        )
    return name


def _not_linked(path: Path) -> Path:
    """``path`` unless it, or a table of a parquet folder, is a symbolic link: a link in a
    shared folder may point at any file of this machine (``open_report`` opens links you
    choose yourself)."""
    linked = [path] if path.is_symlink() else []
    if not linked and path.is_dir():
        linked = [e.path for e in entries(path) if e.skipped == "a symbolic link"]
    if linked:
        raise ReportError(
            f"{linked[0]} is a symbolic link; load_run opens only the files inside the run "
            f"folder. Replace the link with the report itself, or open it with "
            f"open_report({str(linked[0])!r})."
        )
    return path


def _meta(run_dir: Path) -> RunMeta:
    """meta.json, any version; a value a reader would trip on is one ``ReportError`` line, a
    file that is no JSON (cut short, nested too deep) a ``DamagedFolderWarning``."""
    where = RunDir(run_dir).meta
    try:
        data = read_regular(where)
    except FileNotFoundError:
        data = None
    except NotRegularFile as exc:
        raise ReportError(
            f"{where} is {exc.what}, not a regular file; load_run reads only regular files "
            "inside the run folder."
        ) from None
    except OSError as exc:
        raise ReportError(f"{where} cannot be read ({exc.strerror or exc}).") from None
    raw = None
    if data is not None:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            why = "nested too deep" if isinstance(exc, RecursionError) else "not valid JSON"
            warnings.warn(
                f"{where} is damaged ({why}: cut short or edited); the run is loaded from its "
                "report with default settings (no name, options or timings).",
                DamagedFolderWarning,
                stacklevel=3,
            )
    if raw is not None and not isinstance(raw, dict):
        raise ReportError(f"{where} holds a {type(raw).__name__}, not an object.")
    meta = RunMeta.from_dict(raw)
    wrong = meta.mistyped()
    for key in ("tool", "name", "status", "report"):
        if key in wrong:
            what = "not a file name" if key == "report" else "not a string"
            raise ReportError(f"{where}: {key!r} is {wrong[key]!r}, {what}.")
    nproc = wrong.get("nproc", meta.nproc)
    if nproc is not None and (not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1):
        raise ReportError(f"{where}: 'nproc' is {nproc!r}, not a whole number >= 1.")
    return meta


def _report_in(run_dir: Path, meta: RunMeta) -> Path:
    """The saved report to open: nsys export (.sqlite, parquet dir) before the .nsys-rep."""
    names = []
    if meta.report:
        names.append(_inside(run_dir, meta.report))
    names += RunDir(run_dir).report_names(meta.tool)
    names = list(dict.fromkeys(names))  # meta.json's own name is one of them, said once
    for name in names:
        path = run_dir / name
        if path.exists() or path.is_symlink():
            return _not_linked(path)
    # meta.json's status is how the profile ended (ok, failed, cell_failed, worker_died, ...)
    ended = f" The profile ended {meta.status!r}" if meta.status else ""
    why = f": {meta.error}" if meta.error else ""
    raise ReportNotFoundError(
        f"{run_dir} holds no report (looked for {', '.join(names)}).{ended}{why}"
        + ("." if ended else "")
    )


def _with_more_passes(report: Any, run_dir: Path, meta: RunMeta) -> Any:
    """A top-N run whose kernels ncu profiled in more than one pass (``merged_runs``: the
    other passes' folders, siblings of this one) as one report, as ``profile_top`` returned
    it. Each must be a plain folder name beside this one (a shared folder is data)."""
    more = meta.extra.get("merged_runs")
    if not more:
        return report
    if not isinstance(more, list) or not all(isinstance(n, str) for n in more):
        raise ReportError(f"{RunDir(run_dir).meta}: 'merged_runs' is {more!r}, not folder names.")
    reports = [report]
    for name in more:
        if "\x00" in name or Path(name).name != name or name in ("", ".", ".."):
            raise ReportError(f"{RunDir(run_dir).meta}: 'merged_runs' names {name!r}, which is "
                              "not a folder beside this run.")  # fmt: skip
        sibling = run_dir.parent / name
        if sibling.is_symlink():
            raise ReportError(f"{sibling} is a link; load_run opens only the folders beside "
                              "this run.")  # fmt: skip
        reports.append(open_report(_report_in(sibling, _meta(sibling))))
    return type(report).merged(reports)


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
