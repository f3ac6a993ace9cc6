"""What a re-run (the picker's ncu drill-down of a saved run) may take from the run folder.

A run folder is data, never code that chooses what runs: it is shared with notebooks, and a
folder from elsewhere could name any interpreter or inject a library. So unless the folder was
profiled in this session or the user passed ``trust=True``, the re-run uses this session's
interpreter and working directory, the saved ``--env`` only through an allow-list
(``profilers.env.allowed_from_folder``), and the folder must be this user's and not writable by
others (``run_folders.ownership.check_owned``). What was asked and not obeyed is returned, to
be shown."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import RunFolderError
from ...profilers.env import allowed_from_folder
from ...run_folders.ownership import check_tree_owned
from ...run_folders.run_dir import RunDir
from ...run_folders.run_meta import RunMeta
from ..spec import MAX_REPEAT, MAX_WARMUP

# every file of a run folder that a re-run reads, unpickles or executes
REPLAYED_FILES = RunDir.REPLAYED


@dataclass(frozen=True)
class RerunSettings:
    name: str
    warmup: int
    nproc: int
    python: str
    cwd: str
    env: dict[str, str]
    ignored: dict[str, Any] = field(default_factory=dict)  # asked by the folder, not obeyed
    # the run's --repeat: a drill-down runs the same repeats, so its launch numbers are the run's
    repeat: int = 1

    def notice(self, folder: Path) -> str:
        """One line saying what the folder asked for and what runs instead ("" if nothing)."""
        if not self.ignored:
            return ""
        asked = "; ".join(f"{k}={v!r}" for k, v in self.ignored.items())
        return (f"{folder} asked for {asked}: not used (a saved folder never chooses what runs); "
                "this session's interpreter and environment run the cell. Pass trust=True to "
                "load_run to use them.")  # fmt: skip


def _int_field(
    meta: RunMeta, key: str, default: int, folder: Path, maximum: int | None = None
) -> int:
    value = meta.mistyped().get(key, getattr(meta, key))
    if value is None:
        return default
    bad = isinstance(value, bool) or not isinstance(value, int) or value < 0
    if bad or (maximum is not None and value > maximum):
        limit = f"0..{maximum}" if maximum is not None else ">= 0"
        raise RunFolderError(
            f"{RunDir(folder).meta}: {key!r} is {value!r}, not a whole number {limit}; the file "
            "is damaged or edited by hand."
        )
    return value


def saved_meta(folder: Path) -> RunMeta:
    """meta.json, typed (a damaged file or a non-object is a one-line ``RunFolderError``)."""
    raw = RunDir(folder).read_meta_json()
    if raw is not None and not isinstance(raw, dict):
        raise RunFolderError(
            f"{RunDir(folder).meta} holds a {type(raw).__name__}, not an object; the file is "
            "damaged or edited by hand."
        )
    return RunMeta.from_dict(raw)


def rerun_settings(folder: Path, meta: RunMeta, *, trusted: bool) -> RerunSettings:
    """The interpreter, working directory, environment and counts a re-run of ``folder`` uses."""
    if not trusted:
        check_tree_owned(folder, REPLAYED_FILES)
    env_saved = RunDir(folder).read_env() or {}
    if not isinstance(env_saved, dict):
        raise RunFolderError(f"{RunDir(folder).env} is not an object of KEY: VALUE strings.")
    env = {str(k): v for k, v in env_saved.items() if isinstance(v, str) and "\x00" not in v}
    base = RerunSettings(
        name=meta.name or "cell",
        warmup=_int_field(meta, "warmup", 0, folder, maximum=MAX_WARMUP),
        nproc=max(1, _int_field(meta, "nproc", 1, folder)),
        repeat=max(1, _int_field(meta, "repeat", 1, folder, maximum=MAX_REPEAT)),
        python=sys.executable,
        cwd=os.getcwd(),
        env=env,
    )
    asked = meta.mistyped()  # a damaged value is still what the folder asked for
    saved_python, saved_cwd = asked.get("python", meta.python), asked.get("cwd", meta.cwd)
    if trusted:
        python = saved_python if isinstance(saved_python, str) and saved_python else sys.executable
        cwd = saved_cwd if isinstance(saved_cwd, str) and os.path.isdir(saved_cwd) else os.getcwd()
        return replace(base, python=python, cwd=cwd)
    ignored: dict[str, Any] = {}
    if saved_python not in (None, "", sys.executable):
        ignored["python"] = saved_python
    if saved_cwd not in (None, "", os.getcwd()):
        ignored["cwd"] = saved_cwd
    kept, refused = allowed_from_folder(env)
    if refused:
        ignored["env"] = sorted(refused)
    return replace(base, env=kept, ignored=ignored)
