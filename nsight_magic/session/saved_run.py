"""What a re-run (the picker's ncu drill-down of a saved run) may take from the run folder.

A run folder is data, never code that chooses what runs: it is shared with notebooks, and a
folder from elsewhere could name any interpreter or inject a library. So unless the folder was
profiled in this session or the user passed ``trust=True``, the re-run uses this session's
interpreter and working directory, the saved ``--env`` only through an allow-list
(``profilers.env.allowed_from_folder``), and the folder must be this user's and not writable by
others (``folders.check_owned``). What was asked and not obeyed is returned, to be shown."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import runs
from ..errors import RunFolderError
from ..folders import check_tree_owned
from ..profilers.env import allowed_from_folder

# every file of a run folder that a re-run reads, unpickles or executes
REPLAYED_FILES = ("cell.py", "script.py", "vars.pkl", "env.json", runs.META)


@dataclass(frozen=True)
class RerunSettings:
    name: str
    warmup: int
    nproc: int
    python: str
    cwd: str
    env: dict[str, str]
    ignored: dict[str, Any] = field(default_factory=dict)  # asked by the folder, not obeyed

    def notice(self, folder: Path) -> str:
        """One line saying what the folder asked for and what runs instead ("" if nothing)."""
        if not self.ignored:
            return ""
        asked = "; ".join(f"{k}={v!r}" for k, v in self.ignored.items())
        return (f"{folder} asked for {asked}: not used (a saved folder never chooses what runs); "
                "this session's interpreter and environment run the cell. Pass trust=True to "
                "load_run to use them.")  # fmt: skip


def _int_field(meta: dict[str, Any], key: str, default: int, folder: Path) -> int:
    value = meta.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RunFolderError(
            f"{folder / runs.META}: {key!r} is {value!r}, not a whole number >= 0; the file is "
            "damaged or edited by hand."
        )
    return value


def saved_meta(folder: Path) -> dict[str, Any]:
    """meta.json as a dict (a damaged file or a non-object is a one-line ``RunFolderError``)."""
    meta = runs.read_json(folder / runs.META, {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise RunFolderError(
            f"{folder / runs.META} holds a {type(meta).__name__}, not an object; the file is "
            "damaged or edited by hand."
        )
    return meta


def rerun_settings(folder: Path, meta: dict[str, Any], *, trusted: bool) -> RerunSettings:
    """The interpreter, working directory, environment and counts a re-run of ``folder`` uses."""
    if not trusted:
        check_tree_owned(folder, REPLAYED_FILES)
    env_saved = runs.read_json(folder / "env.json", {}) or {}
    if not isinstance(env_saved, dict):
        raise RunFolderError(f"{folder / 'env.json'} is not an object of KEY: VALUE strings.")
    env = {str(k): v for k, v in env_saved.items() if isinstance(v, str) and "\x00" not in v}
    name = meta.get("name")
    base = RerunSettings(
        name=name if isinstance(name, str) and name else "cell",
        warmup=_int_field(meta, "warmup", 0, folder),
        nproc=max(1, _int_field(meta, "nproc", 1, folder)),
        python=sys.executable,
        cwd=os.getcwd(),
        env=env,
    )
    saved_python, saved_cwd = meta.get("python"), meta.get("cwd")
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
