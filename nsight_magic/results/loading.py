"""``load_run``: a run object from a folder, offline (no profiler, no GPU needed): one run
(``run_loading``), a sweep (``SweepRun.open``), or a folder of runs, which lists them; and
``load_runs``: one run from the reports of a multi-rank job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import BadArgumentError, ReportNotFoundError
from ..reports.nsys import merge
from ..run_folders.ownership import expand
from ..run_folders.run_dir import RunDir
from .drill_protocols import DrillRunner
from .nsys_run import NsysRun
from .run_loading import load_one
from .sweep_run import SweepRun

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
    if folder.holds_sweep():
        return SweepRun.open(run_dir, drill_runner, trust=trust)
    if not folder.meta.exists() and not folder.holds_report():
        inside = runs_inside(run_dir)
        if len(inside) == 1:  # the one run (or sweep) of a notebook's folder: no choice to make
            return load_run(inside[0], drill_runner, trust=trust)
        raise _not_a_run(run_dir)
    return load_one(run_dir, drill_runner, trust=trust)


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
