"""Where a sweep folder's configurations lie, checked once for every reader: ``load_run``
(``results/loading.py``) and ``share()`` (``sharing.py``) call ``check_config_folders`` before
they open or write anything.

A sweep folder is data (a received bundle, an edited ``sweep.json``), so its record may name any
path. Each configuration's folder must be one name of an entry directly inside the sweep folder
(a link among them leads back inside it), and no two configurations may name one folder. Before
this check, ``share()`` followed ``..`` out: it copied the folder around the sweep over the
files of the folder around its destination; and it copied a folder named twice into itself.

A configuration the record says ran ``ok`` whose run is not there (its folder deleted, no
meta.json or no report in it: a damaged or edited bundle) is found by ``missing_runs`` and
marked failed with that error (``mark_missing``) by every reader alike: ``list_runs`` counts it
failed (and says the folder is damaged), ``load_run`` opens the rest with a
``DamagedFolderWarning``, and ``share()``'s copy records it failed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import DamagedFolderError
from .run_dir import RunDir
from .sweep_record import ConfigRecord, SweepRecord


def check_config_folders(sweep_dir: Path, record: SweepRecord) -> None:
    """Raise ``DamagedFolderError`` unless every configuration's folder (those that ran) is one
    name inside ``sweep_dir`` and no two name one folder."""
    inside = _resolved(sweep_dir)
    named: dict[Path, ConfigRecord] = {}
    for config in record.configs:
        if not config.folder:
            continue  # not run yet: no folder
        where = _folder_of(sweep_dir, inside, config)
        first = named.setdefault(where, config)
        if first is not config:
            names = {first.folder: None, config.folder: None}  # one name, or a link's and its own
            raise _damaged(
                sweep_dir,
                f"the configurations {first.label!r} and {config.label!r} name one folder "
                f"({' and '.join(map(repr, names))})",
            )


def _folder_of(sweep_dir: Path, inside: Path, config: ConfigRecord) -> Path:
    """The folder ``config`` names, resolved (a link inside the sweep folder to another of its
    entries is that entry: two configurations must not share it through a link)."""
    name = config.folder
    if not _one_name(name):
        raise _damaged(sweep_dir, f"it names the configuration folder {name!r}, outside the "
                       "sweep folder or not directly in it")  # fmt: skip
    where = _resolved(sweep_dir / name)
    if where == inside or not where.is_relative_to(inside):
        raise _damaged(sweep_dir, f"the configuration folder {name!r} is a link outside the "
                       "sweep folder")  # fmt: skip
    return where


def _one_name(name: str) -> bool:
    """``name`` is one entry's name: no separator, no ``.``/``..``, no NUL, not absolute."""
    separator = any(sep and sep in name for sep in (os.sep, os.altsep))
    return name not in (".", "..") and "\x00" not in name and not separator


def _resolved(path: Path) -> Path:
    """``path`` with every link followed; a link loop reads as itself, never inside."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop: RuntimeError before Python 3.13
        return Path("/")


def _damaged(sweep_dir: Path, why: str) -> DamagedFolderError:
    return DamagedFolderError(
        f"{RunDir(sweep_dir).sweep}: {why}; a configuration's folder is one name inside the "
        "sweep folder, one per configuration. The folder is damaged or was edited: nothing was "
        "read or written. Restore its sweep.json, or open a configuration's run folder itself "
        "with load_run."
    )


def has_run(sweep_dir: Path, folder: str) -> bool:
    """``folder`` (a configuration's, inside ``sweep_dir``) holds a run: a folder with a
    regular meta.json of its own and a report (any of the names ``load_run`` looks for)."""
    if not folder:
        return False
    run = RunDir(sweep_dir / folder)
    try:
        if not run.path.is_dir() or not stat.S_ISREG(run.meta.lstat().st_mode):
            return False
    except OSError:
        return False
    return run.holds_report()


def missing_runs(sweep_dir: Path, record: SweepRecord) -> list[ConfigRecord]:
    """The configurations ``record`` says ran ``ok`` whose run is not in ``sweep_dir``."""
    return [c for c in record.configs if c.status == "ok" and not has_run(sweep_dir, c.folder)]


def mark_missing(configs: Iterable[ConfigRecord]) -> list[ConfigRecord]:
    """Each of ``configs`` (recorded ``ok``, its run not there) marked ``failed``, its error
    saying why; returned as a list."""
    marked = list(configs)
    for config in marked:
        where = f"its run folder {config.folder!r}" if config.folder else "no run folder"
        config.status = "failed"
        config.error = (
            f"recorded ok, but {where} is missing or holds no meta.json or no report: the sweep "
            "folder is damaged or was edited. Restore that folder, or profile this "
            "configuration again."
        )
    return marked


__all__ = ["check_config_folders", "has_run", "mark_missing", "missing_runs"]
