"""``.nsys-rep`` -> ``.sqlite`` / parquet dir, through ``nsys export`` (argv lists only)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Literal

from ...errors import CorruptReportError, ReportTimeoutError, ToolNotFoundError
from ...processes.clean_env import run_quiet
from ...run_folders.regular_files import read_regular
from ..paths import is_parquet_export

__all__ = ["ExportKind", "export_argv", "export_origin", "export_report", "find_nsys",
           "sibling_export", "stamp_path", "write_stamp"]  # fmt: skip

ExportKind = Literal["sqlite", "parquetdir"]


def export_argv(nsys: str | Path, rep: str | Path, out: str | Path, kind: ExportKind) -> list[str]:
    """``nsys export --type KIND --force-overwrite=true [--include-json=true] -o OUT REP`` as an
    argv list. A SQLite export carries the NVTX payloads as JSON (NCCL's message size,
    communicator and reduction: ``analysis.collectives``); a parquet dir has no JSON column
    filled, so it gets no such flag (tests/data/README.md: ``nsys_2rank``)."""
    json = ["--include-json=true"] if kind == "sqlite" else []
    return [str(nsys), "export", "--type", kind, "--force-overwrite=true", *json, "-o", str(out),
            str(rep)]  # fmt: skip


def _is_export(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".sqlite" and path.stat().st_size > 0
    return is_parquet_export(path)


def stamp_path(export: Path) -> Path:
    """Where ``export_report`` records which .nsys-rep an export came from."""
    return export.with_name(f".{export.name}.source.json")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_stamp(rep: Path, export: Path) -> None:
    """Record ``rep``'s size, mtime and SHA-256 beside ``export``: a later open of ``rep``
    knows the export is its own, and an unrelated or older file of the same name is not."""
    info = rep.stat()
    stamp = {"rep": rep.name, "size": info.st_size, "mtime_ns": info.st_mtime_ns,
             "sha256": _digest(rep)}  # fmt: skip
    with contextlib.suppress(OSError):  # a read-only folder: the export is still usable now
        fd = os.open(stamp_path(export), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:  # 0600 whatever the umask, like every file we write
            fh.write(json.dumps(stamp))


Origin = Literal["same", "other", "unknown"]


def export_origin(rep: Path, export: Path) -> Origin:
    """Whether ``export`` was exported from ``rep`` as it is now: "same" (its stamp matches
    the size and the mtime, or the SHA-256 after a copy), "other" (stamped from another file
    or an older version of it), "unknown" (no stamp: exported by hand or by nsys itself)."""
    try:
        stamp = json.loads(read_regular(stamp_path(export)))  # a pipe there never blocks
        info = rep.stat()
    except (OSError, ValueError):
        return "unknown"
    if not isinstance(stamp, dict) or stamp.get("size") != info.st_size:
        return "other"
    if stamp.get("mtime_ns") == info.st_mtime_ns:
        return "same"
    return "same" if stamp.get("sha256") == _digest(rep) else "other"


def sibling_export(rep: str | Path) -> Path | None:
    """An export already next to ``rep`` (``X.sqlite``, or a parquet dir ``X_pq`` /
    ``X_parquet`` / ``X``), whatever its age: whether it is ``rep``'s own is
    :func:`export_origin`'s to say."""
    stem = Path(rep).with_suffix("")
    candidates = [stem.with_suffix(".sqlite"), Path(f"{stem}_pq"), Path(f"{stem}_parquet"), stem]
    return next((cand for cand in candidates if _is_export(cand)), None)


def find_nsys() -> Path:
    """nsys as ``tools.find_tool`` finds it (``%config`` path, $NSIGHT_MAGIC_NSYS, PATH, the
    usual install folders); ToolNotFoundError saying what to do with the .nsys-rep otherwise."""
    from ...processes.locate import find_tool

    try:
        return Path(find_tool("nsys"))
    except ToolNotFoundError as exc:
        raise ToolNotFoundError(
            f"{exc} Without nsys a .nsys-rep cannot be read: run `nsys export --type sqlite` "
            "where it is installed and open the .sqlite."
        ) from None


def export_report(
    rep: str | Path,
    kind: ExportKind = "sqlite",
    out: str | Path | None = None,
    nsys: str | Path | None = None,
    timeout_s: float = 900.0,
) -> Path:
    """Export ``rep`` with nsys and return the output path (default: next to ``rep``)."""
    rep = Path(rep)
    if out is None:
        out = rep.with_suffix(".sqlite") if kind == "sqlite" else Path(f"{rep.with_suffix('')}_pq")
    out = Path(out)
    argv = export_argv(nsys if nsys is not None else find_nsys(), rep, out, kind)
    try:
        proc = run_quiet(argv, timeout_s)
    except subprocess.TimeoutExpired:
        raise ReportTimeoutError(
            f"`nsys export` of {rep} ran past {timeout_s:.0f} s and was stopped; export it by "
            f"hand with {' '.join(argv)}"
        ) from None
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise CorruptReportError(
            f"`nsys export` could not read {rep} (exit {proc.returncode}: {' | '.join(tail)}); "
            "check that the file is a complete .nsys-rep from this nsys version or newer."
        )
    _private(out)
    write_stamp(rep, out)
    return out


def _private(out: Path) -> None:
    """The export holds the profiled process's environment (nsys records it): this user's
    only, as the run folders are, whatever umask nsys ran under."""
    paths = [out, *out.iterdir()] if out.is_dir() else [out]
    for path in paths:
        with contextlib.suppress(OSError):  # not ours to change: left as nsys wrote it
            path.chmod(0o700 if path.is_dir() else 0o600)
