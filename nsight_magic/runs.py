"""Run directories: one fresh folder per profiled cell, holding everything needed to redo or
re-read the run offline::

    nsight-runs/20261122T023048.123456Z-mycell/
        cell.py  script.py  vars.pkl  argv.json  env.json  meta.json  status.json
        profiler.log  report.nsys-rep  report.sqlite          (or report.ncu-rep)
        ncu/20261122T023112.004211Z-<kernel>/ ...             (picker child runs)
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypedDict

from .errors import RunFolderError
from .folders import expand, private_mkdir, private_root, write_private
from .package_info import __version__

DEFAULT_ROOT = "nsight-runs"
META = "meta.json"


def utc_stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def slug(name: str, limit: int = 40) -> str:
    """A file-name-safe version of a run or kernel name."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
    return s[:limit] or "run"


def new_run_dir(root: str | Path | None = None, name: str = "cell") -> Path:
    """Create ``<root>/<UTC time>-<name>/`` atomically (``mkdir`` without exist_ok), adding
    ``-2``, ``-3``... on a clash, so two runs never share a folder. The root and the folder
    are 0700; a root another user owns or may write is refused (``folders.private_root``)."""
    root = private_root(root if root is not None else Path.cwd() / DEFAULT_ROOT)
    base = f"{utc_stamp()}-{slug(name)}"
    for i in range(1, 10_000):
        path = root / (base if i == 1 else f"{base}-{i}")
        try:
            private_mkdir(path)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run folder under {root}")


def child_run_dir(parent: str | Path, kernel_name: str) -> Path:
    """A picker run's folder inside its parent: ``<parent>/ncu/<time>-<kernel>/``."""
    ncu = Path(parent) / "ncu"
    with contextlib.suppress(FileExistsError):
        private_mkdir(ncu)
    return new_run_dir(ncu, kernel_name)


class CellStatus(TypedDict, total=False):
    """What the profiled process says about the cell (``status.json``, or a warm worker's
    reply). Written by the generated script (``script.template.STATUS_KEYS``), read here."""

    status: Literal["running", "ok", "error", "interrupted"]
    phase: str  # setup | vars | warmup | cell | done
    gate: str  # how the cell was gated: cudaProfilerApi (nsys) or nvtx (ncu)
    gate_kind: str  # torch | cudart | none | nvtx
    warmup: int
    nvtx: bool  # the nvtx module was importable (ranges exist)
    exc_type: str
    exc_message: str
    traceback: str  # the user's traceback in cell line numbers
    cell_s: float  # the cell's own run inside the capture (its last kernels may still run)
    gate_stop_s: float  # stopping the capture: waiting for the kernels, writing the report
    total_s: float
    ranges: list[list[str]]  # NVTX ranges the cell opened: [domain, name, style]
    history_errors: list[dict[str, str]]  # earlier cells that raised when replayed
    worker_broken: str | None  # a sticky CUDA error left the worker unusable
    target: dict[str, Any]  # %%ncu --nvtx: {spec, matched [[domain, name, style]], opened}


_STATUS_TYPES: dict[str, type | tuple[type, ...]] = {
    "status": str, "phase": str, "gate": str, "gate_kind": str, "warmup": int, "nvtx": bool,
    "exc_type": str, "exc_message": str, "traceback": str, "cell_s": (int, float),
    "gate_stop_s": (int, float),
    "total_s": (int, float), "ranges": list, "history_errors": list,
    "worker_broken": (str, type(None)), "target": dict,
}  # fmt: skip


def cell_status(data: Mapping[str, Any] | None) -> CellStatus:
    """The known status fields of ``data`` with the right types (others dropped): a
    half-written or foreign file never becomes a KeyError further on."""
    out: dict[str, Any] = {}
    for key, types in _STATUS_TYPES.items():
        value = (data or {}).get(key)
        if value is not None and isinstance(value, types):
            out[key] = value
    return out  # type: ignore[return-value]


def read_cell_status(run_dir: str | Path) -> CellStatus:
    return cell_status(read_json(Path(run_dir) / "status.json", {}))


def write_json(path: str | Path, obj: Any) -> None:
    """Write atomically (a reader never sees half a file), 0600."""
    write_private(path, json.dumps(obj, indent=2, default=str))


def read_json(path: str | Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path.lock`` (two picker runs updating one parent meta)."""
    import fcntl

    try:
        f = open(path.with_name(path.name + ".lock"), "w")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise RunFolderError(
            f"cannot update {path} ({exc.strerror or exc}); check that its folder is writable."
        ) from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def update_meta(run_dir: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into meta.json (under a lock) and return the new meta."""
    path = Path(run_dir) / META
    with _locked(path):
        meta = read_json(path, {}) or {}
        meta.update(fields)
        write_json(path, meta)
    return meta


def add_child(parent_dir: str | Path, child: dict[str, Any]) -> None:
    path = Path(parent_dir) / META
    with _locked(path):
        meta = read_json(path, {}) or {}
        meta.setdefault("children", []).append(child)
        write_json(path, meta)


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
    started_utc, wall_s, children (count); with ``children`` also the picker runs."""
    import pandas as pd

    root = expand(root) if root is not None else Path.cwd() / DEFAULT_ROOT
    rows = []
    metas = sorted(root.glob(f"*/{META}"))
    if children:
        metas += sorted(root.glob(f"*/ncu/*/{META}"))
    for meta_path in metas:
        meta = read_json(meta_path, {}) or {}
        if not isinstance(meta, dict):  # damaged or foreign: listed by its folder only
            meta = {}
        timings = meta.get("timings")
        rows.append(
            {
                "run_dir": str(meta_path.parent),
                "name": meta.get("name", meta_path.parent.name),
                "tool": meta.get("tool"),
                "status": meta.get("status"),
                "started_utc": meta.get("started_utc"),
                "wall_s": timings.get("total_s") if isinstance(timings, dict) else None,
                "children": len(meta["children"]) if isinstance(meta.get("children"), list) else 0,
                "parent": meta.get("parent_run"),
            }
        )
    cols = ["run_dir", "name", "tool", "status", "started_utc", "wall_s", "children", "parent"]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values("started_utc", ascending=False, na_position="last").reset_index(drop=True)
