"""Runs as a whole: where a run folder is made (``new_run_dir``), what produced it
(``versions``), and the runs under a root (``list_runs``). One folder's files, and every write
into it, belong to ``run_dir.RunDir``; its meta.json is ``run_meta.RunMeta``."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

from ..package_info import __version__
from .ownership import expand
from .run_dir import DEFAULT_ROOT, CellStatus, RunDir, cell_status, read_json, slug, utc_stamp
from .sweep_layout import check_config_folders, mark_missing, missing_runs


def new_run_dir(root: str | Path | None = None, name: str = "cell") -> Path:
    """A fresh, private run folder ``<root>/<UTC time>-<name>/`` (``RunDir.create``)."""
    return RunDir.create(root, name).path


def versions(tool_versions: dict[str, str] | None = None) -> dict[str, Any]:
    """Versions of what produced the run (python, torch when importable here, nsys/ncu)."""
    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:  # importing torch only to record it would cost seconds
        out["torch"] = getattr(torch, "__version__", None)
        out["torch_cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    out["nsight_magic"] = __version__
    out.update(tool_versions or {})
    return out


def list_runs(root: str | Path | None = None, *, children: bool = False) -> Any:
    """A DataFrame of the runs under ``root`` (newest first): run_dir, name, tool, status,
    started_utc, wall_s, children (count); with ``children`` also the picker runs. A ``root``
    that is no folder is a ``ReportNotFoundError`` (the default, before any run: no rows)."""
    import os

    import pandas as pd

    from ..errors import BadArgumentError, ReportNotFoundError

    text = os.fspath(root) if isinstance(root, (str, os.PathLike)) else None
    if root is not None and (not isinstance(text, str) or "\x00" in text):
        raise BadArgumentError(f"list_runs takes a folder's path (str or Path), not {root!r}.")
    if not isinstance(children, bool):
        raise BadArgumentError(f"list_runs' children is True or False, not {children!r}.")
    if root is not None and not expand(root).is_dir():
        raise ReportNotFoundError(f"{expand(root)} is no folder: no runs to list.")
    root = expand(root) if root is not None else Path.cwd() / DEFAULT_ROOT
    rows = []
    folders = [RunDir(p.parent) for p in sorted(root.glob(f"*/{RunDir.META}"))]
    if children:
        folders += [child for folder in folders for child in folder.children()]
    for folder in folders:
        meta = folder.read_meta()  # damaged or foreign: listed by its folder only
        rows.append(
            {
                "run_dir": str(folder.path),
                "name": meta.name or folder.path.name,
                "tool": meta.tool,
                "status": meta.status,
                "started_utc": meta.started_utc,
                "wall_s": meta.timings.get("total_s"),
                "children": len(meta.children),
                "parent": meta.parent_run,
            }
        )
    rows += [_sweep_row(RunDir(p.parent)) for p in sorted(root.glob(f"*/{RunDir.SWEEP}"))
             if not (p.parent / RunDir.META).exists()]  # fmt: skip
    cols = ["run_dir", "name", "tool", "status", "started_utc", "wall_s", "children", "parent"]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values("started_utc", ascending=False, na_position="last").reset_index(drop=True)


def _sweep_row(folder: RunDir) -> dict[str, Any]:
    """A sweep folder's row: its status says how its configurations ended ("ok" when all
    did, else "2 ok, 1 failed"), ``children`` counts them, ``wall_s`` is their sum. One
    recorded ok whose run is not there counts failed, and the status says "(damaged)", as
    ``load_run`` warns (``sweep_layout.missing_runs``); a record ``load_run`` refuses reads
    "damaged"."""
    from ..errors import DamagedFolderError

    record = folder.read_sweep()
    try:
        if record is not None:
            check_config_folders(folder.path, record)
    except DamagedFolderError:
        record = None
    missing = mark_missing(missing_runs(folder.path, record)) if record is not None else []
    configs = record.configs if record is not None else []
    counts = record.counts() if record is not None else {}
    status = "ok" if set(counts) == {"ok"} else ", ".join(
        f"{n} {s}" for s, n in counts.items()
    ) or "damaged"  # fmt: skip
    if missing:
        status += " (damaged)"
    walls = [c.wall_s for c in configs if c.wall_s is not None]
    return {
        "run_dir": str(folder.path),
        "name": record.name if record is not None else folder.path.name,
        "tool": f"{record.tool} sweep" if record is not None else "sweep",
        "status": status,
        "started_utc": record.started_utc if record is not None else None,
        "wall_s": sum(walls) if walls else None,
        "children": len(configs),
        "parent": None,
    }


__all__ = [
    "DEFAULT_ROOT",
    "CellStatus",
    "RunDir",
    "cell_status",
    "list_runs",
    "new_run_dir",
    "read_json",
    "slug",
    "utc_stamp",
    "versions",
]
