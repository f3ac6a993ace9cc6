"""Rebuild a run object from its run folder, offline (no profiler, no GPU needed); one run from
the reports of a multi-rank job."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from ..errors import BadArgumentError, DamagedFolderWarning, ReportError, ReportNotFoundError
from ..reports import open_report
from ..reports.nsys import merge
from ..run_folders.ownership import expand
from ..run_folders.regular_files import NotRegularFile, entries, read_regular
from ..run_folders.run_dir import RunDir
from ..run_folders.run_meta import RunMeta
from ..run_folders.sweep_layout import check_config_folders
from ..run_folders.sweep_record import ConfigKey
from .drill_protocols import DrillRunner
from .nsys_run import NcuRun, NsysRun
from .sweep_run import SweepRun


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


LISTED_RUNS = 10  # a folder of runs names this many, newest first


def runs_inside(folder: Path, depth: int = 2) -> list[Path]:
    """The run folders (a ``meta.json`` inside) and sweep folders (a ``sweep.json``: one entry,
    its configurations are not listed) under ``folder``, at most ``depth`` levels down
    (``nsight-runs/<run>``, ``notebooks/runs/<notebook>/<run>``), newest first: by the start
    time meta.json records, else the folder's time stamp name, else its modification time."""
    found: list[Path] = []
    level = [folder]
    for _ in range(depth):
        level = sorted(p for d in level for p in _subfolders(d))
        found += [p for p in level if _a_run(p)]
        level = [p for p in level if not _a_run(p)]

    def started(run: Path) -> tuple[str, float]:
        raw = RunDir(run).read_meta_json()
        stamp = raw.get("started_utc") if isinstance(raw, dict) else None
        record = run / (RunDir.META if (run / RunDir.META).is_file() else RunDir.SWEEP)
        return (stamp if isinstance(stamp, str) else run.name, record.stat().st_mtime)

    return sorted(found, key=started, reverse=True)


def _a_run(folder: Path) -> bool:
    """A run folder or a sweep folder: what ``load_run`` opens."""
    return (folder / RunDir.META).is_file() or (folder / RunDir.SWEEP).is_file()


def _subfolders(folder: Path) -> list[Path]:
    """Real subfolders (no links out), none where the folder cannot be read."""
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _not_a_run(folder: Path) -> ReportNotFoundError:
    """What ``load_run`` says for a folder that is not a run: the runs inside it, newest
    first, and how to open one; or what a run folder holds."""
    runs = runs_inside(folder)
    if not runs:
        return ReportNotFoundError(
            f"{folder} is not a run folder: it has no {RunDir.META} and no run folder inside. "
            "A run folder is what %%nsys / %%ncu wrote (nsight-runs/<time>-<name>/); "
            "open_report(path) opens a report file itself."
        )
    listed = "\n".join(f"  {run.relative_to(folder)}" for run in runs[:LISTED_RUNS])
    more = f"\n  ... and {len(runs) - LISTED_RUNS} older" if len(runs) > LISTED_RUNS else ""
    example = (folder / runs[0].relative_to(folder)).as_posix()
    return ReportNotFoundError(
        f"{folder} is a folder of {len(runs)} run{'s' if len(runs) > 1 else ''}, not a run; "
        f"newest first:\n{listed}{more}\n"
        f"Open one: nsight_magic.load_run({example!r})"
    )


def load_run(
    path: str | Path, drill_runner: DrillRunner | None = None, *, trust: bool = False
) -> Any:
    """Rebuild ``NsysRun``/``NcuRun`` from a run folder, offline (no profiler needed). A
    re-profile of it (``profile_kernel``) runs under this session's interpreter and environment;
    ``trust=True`` lets the folder's saved interpreter, working directory and ``--env`` apply and
    skips the ownership check (only for folders you trust: they choose what runs)."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise BadArgumentError(
            f"load_run takes a run folder's path (str or Path), not {type(path).__name__}."
        )
    # absolute once, here: a re-profile's child folder (which the run makes absolute) must lie
    # inside it, and a later chdir must not move it (load_run("nsight-runs/<run>"))
    run_dir = expand(path).absolute()
    if run_dir.is_file() and run_dir.name == RunDir.META:
        run_dir = run_dir.parent
    if not run_dir.is_dir():
        raise ReportNotFoundError(f"{run_dir} is not a run folder.")
    folder = RunDir(run_dir)
    if folder.sweep.exists() and not folder.meta.exists():  # a sweep: one run per configuration
        return load_sweep(run_dir, drill_runner, trust=trust)
    reports = [*folder.report_names("nsys"), *folder.report_names("ncu")]
    if not folder.meta.exists() and not any((run_dir / name).exists() for name in reports):
        inside = runs_inside(run_dir)
        if len(inside) == 1:  # the one run (or sweep) of a notebook's folder: no choice to make
            return load_run(inside[0], drill_runner, trust=trust)
        raise _not_a_run(run_dir)
    meta = _meta(run_dir)
    report_path = _report_in(run_dir, meta)
    report = open_report(report_path)
    tool = meta.tool or ("ncu" if report_path.suffix == ".ncu-rep" else "nsys")
    if tool == "ncu":
        return NcuRun(_with_more_passes(report, run_dir, meta), run_dir, meta.to_dict())
    run = nsys_run(report, run_dir, meta.to_dict(), drill_runner=drill_runner)
    run.trust_folder = trust
    return run


def load_sweep(
    path: str | Path, drill_runner: DrillRunner | None = None, *, trust: bool = False
) -> SweepRun:
    """A sweep folder (``sweep.json`` and one run folder per configuration) as a
    ``SweepRun``: each configuration that ran ``ok`` loaded with ``load_run``; a record that
    names a configuration folder outside the sweep folder, or one folder twice, is refused
    before any is read (``DamagedFolderError``: the check ``share()`` makes too)."""
    run_dir = expand(path).absolute()
    record = RunDir(run_dir).read_sweep()
    if record is None:
        raise ReportError(f"{RunDir(run_dir).sweep} is no sweep record (damaged or foreign).")
    check_config_folders(run_dir, record)
    runs = {}
    # keyed by the values' written form: a list value in sweep.json has no hash
    keys = [ConfigKey(c.values.get(n) for n in record.variables) for c in record.configs]
    for key, config in zip(keys, record.configs, strict=True):
        if config.status != "ok" or not config.folder:
            continue
        runs[key] = load_run(run_dir / config.folder, drill_runner, trust=trust)
    return SweepRun(record, run_dir, runs, keys=keys)


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
