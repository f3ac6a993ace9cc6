"""A run folder and its one owner, ``RunDir``: one fresh folder per profiled cell, holding
everything needed to redo or re-read the run offline::

    nsight-runs/20261122T023048.123456Z-mycell/
        cell.py          the cell as typed                      (RunDir.cell)
        script.py        the generated script that ran it       (RunDir.script)
        vars.pkl         the notebook variables shipped to it   (RunDir.vars)
        argv.json        a fresh run's profiler command line    (RunDir.argv)
        env.json         the --env the cell ran with            (RunDir.env)
        meta.json        what happened (run_meta.RunMeta)       (RunDir.meta)
        status.json      what the profiled process said         (RunDir.status, status_of)
        profiler.log     the profiler's and worker's output     (RunDir.log)
        rank_prefix.json a multi-rank ncu run's ncu prefix      (RunDir.rank_prefix)
        report.nsys-rep  report.sqlite  report_pq/  (or report.ncu-rep): the report
        ncu/20261122T023112.004211Z-<kernel>/ ...   picker child runs (RunDir.new_child)

Every file name is spelled here, and every file of ours is written here: 0600, atomically
(``write_private``), appended logs created 0600 too (``append_private``), meta.json merged
under a lock. Written elsewhere, by design: the report files (by nsys/ncu, and their exports
and caches beside any report, ``reports/``), and ``status.json`` from inside the profiled
process (``script/template.py``, at the path ``RunDir.status`` gives its argv).
A folder is private (``run_folders/ownership.py``): created 0700 under a root this user owns."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, TypedDict

from ..errors import RunFolderError
from .ownership import PRIVATE_FILE, private_mkdir, private_root
from .regular_files import read_regular
from .run_meta import RunMeta
from .sweep_record import SweepRecord, is_sweep_record

DEFAULT_ROOT = "nsight-runs"


def write_private(path: str | Path, data: str | bytes | BinaryIO) -> None:
    """Write ``data`` (text, bytes, or a file to stream from) to ``path`` created 0600
    (replacing it atomically: a reader never sees half a file); a full or read-only disk is
    one ``RunFolderError`` line."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, (str, bytes)):
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                shutil.copyfileobj(data, f, 1 << 20)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise RunFolderError(
            f"cannot write {path} ({exc.strerror or exc}); check that its disk is writable "
            "and not full."
        ) from None


def append_private(path: str | Path) -> IO[bytes]:
    """``path`` opened for appending bytes, created 0600 when missing (a log the runner and
    the profiler's attach write into as it runs)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    except OSError as exc:
        raise RunFolderError(
            f"cannot write {path} ({exc.strerror or exc}); check that its disk is writable "
            "and not full."
        ) from None
    return os.fdopen(fd, "ab")


def write_json(path: str | Path, obj: Any) -> None:
    """Write atomically (a reader never sees half a file), 0600."""
    write_private(path, json.dumps(obj, indent=2, default=str))


def read_json(path: str | Path, default: Any = None) -> Any:
    """``path`` parsed, or ``default`` when it is missing, not JSON (nested past Python's
    recursion limit included), or no regular file: a link is not followed and a named pipe
    never blocks the read (``regular_files.read_regular``)."""
    try:
        return json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):
        return default


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
    # %%nsys --nvtx RANGE#K: {instance, state "waiting"/"open"/"closed", start, stop, stopped}
    # (perf_counter seconds when the gate opened, began and finished closing)
    window: dict[str, Any]
    torch_memory: dict[str, Any]  # torch's allocated/reserved bytes at start/peak/end (bytes)
    # %%nsys --memory: {"pid": the cell's process, "segments": [[device, data pointer, bytes]]}
    # of the notebook's storages it maps (nsys counts a mapping as that process's memory)
    mapped: dict[str, Any]
    # the CUDA snapshots of the warm-up and of a re-run: place, bytes, save_s, restore_s, pool_s
    kept: list[dict[str, Any]]
    repeat_cell_s: list[float]  # each captured repeat's own wall time (s), in order
    # the GPUs after each repeat: [[index, sm_clock_mhz, mem_clock_mhz, temperature_c, idle]]
    # per GPU (script/gpu_readings.py), None where NVML could not be read
    repeat_gpu: list[Any]


_STATUS_TYPES: dict[str, type | tuple[type, ...]] = {
    "status": str, "phase": str, "gate": str, "gate_kind": str, "warmup": int, "nvtx": bool,
    "exc_type": str, "exc_message": str, "traceback": str, "cell_s": (int, float),
    "gate_stop_s": (int, float),
    "total_s": (int, float), "ranges": list, "history_errors": list,
    "worker_broken": (str, type(None)), "target": dict, "window": dict,
    "torch_memory": dict, "mapped": dict, "kept": list, "repeat_cell_s": list,
    "repeat_gpu": list,
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


def utc_stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def slug(name: str, limit: int = 40) -> str:
    """A file-name-safe version of a run or kernel name."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
    return s[:limit] or "run"


def config_folder_name(index: int, label: str) -> str:
    """A sweep configuration's run folder name: ``<NN>-<label>`` (``03-bs_8``), the label cut
    to ``slug``'s 40 characters (so a value in it may be cut too)."""
    return f"{index:02d}-{slug(label)}"


class RunDir:
    """One run folder: the names of its files, and the only code that writes them."""

    CELL = "cell.py"
    SCRIPT = "script.py"
    VARS = "vars.pkl"
    SHARED = "shared.pkl"  # a warm cell's share of the notebook's state (IPC handles: live only)
    # what a warm cell sends back to the notebook, and the notebook's copies of its CUDA
    # tensors the worker then maps (session/state/; removed once read)
    RESULTS = "results.pkl"
    ADOPTED = "adopted.pkl"
    TORCH_MEMORY = "torch_memory.pickle"  # %%nsys --memory: torch's allocator snapshot
    ARGV = "argv.json"
    ENV = "env.json"
    META = "meta.json"
    STATUS = "status.json"
    LOG = "profiler.log"
    RANK_PREFIX = "rank_prefix.json"
    REPORT = "report"  # the profilers' -o: they add .nsys-rep / .ncu-rep
    NSYS_REPORT = "report.nsys-rep"
    NCU_REPORT = "report.ncu-rep"
    SQLITE_EXPORT = "report.sqlite"
    PARQUET_EXPORT = "report_pq"
    CHILDREN = "ncu"  # picker runs: <folder>/ncu/<time>-<kernel>/
    # a sweep folder's record (run_folders/sweep_record.py); its configurations' run folders
    # are its subfolders: <sweep>/<NN>-<label>/
    SWEEP = "sweep.json"
    SWEEP_PAGE = "index.html"  # a shared sweep folder's one-page summary (share())
    # every file a re-run reads, unpickles or executes (session/runs/saved_run.py checks them)
    REPLAYED = (CELL, SCRIPT, VARS, ENV, META)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    # -- creating ------------------------------------------------------------------------

    @classmethod
    def create(cls, root: str | Path | None = None, name: str = "cell") -> RunDir:
        """Create ``<root>/<UTC time>-<name>/`` atomically (``mkdir`` without exist_ok), adding
        ``-2``, ``-3``... on a clash, so two runs never share a folder. The root and the folder
        are 0700; a root another user owns or may write is refused (``folders.private_root``)."""
        root = private_root(root if root is not None else Path.cwd() / DEFAULT_ROOT)
        base = f"{utc_stamp()}-{slug(name)}"
        for i in range(1, 10_000):
            path = root / (base if i == 1 else f"{base}-{i}")
            try:
                private_mkdir(path)
                return cls(path)
            except FileExistsError:
                continue
        raise RuntimeError(f"could not create a fresh run folder under {root}")

    def new_child(self, kernel_name: str) -> RunDir:
        """A picker run's folder inside this one: ``<folder>/ncu/<time>-<kernel>/``."""
        with contextlib.suppress(FileExistsError):
            private_mkdir(self.path / self.CHILDREN)
        return RunDir.create(self.path / self.CHILDREN, kernel_name)

    def new_config(self, index: int, label: str) -> RunDir:
        """A sweep configuration's run folder inside this sweep folder: ``<NN>-<label>/``
        (``-2``... on a clash), 0700."""
        base = config_folder_name(index, label)
        for i in range(1, 10_000):
            path = self.path / (base if i == 1 else f"{base}-{i}")
            try:
                private_mkdir(path)
                return RunDir(path)
            except FileExistsError:
                continue
        raise RuntimeError(f"could not create a configuration folder under {self.path}")

    def children(self) -> list[RunDir]:
        """The picker runs inside this folder (those with a meta.json), oldest first."""
        return [RunDir(p.parent) for p in sorted(self.path.glob(f"{self.CHILDREN}/*/{self.META}"))]

    # -- names -----------------------------------------------------------------------------

    @property
    def cell(self) -> Path:
        return self.path / self.CELL

    @property
    def script(self) -> Path:
        return self.path / self.SCRIPT

    @property
    def vars(self) -> Path:
        return self.path / self.VARS

    @property
    def shared(self) -> Path:
        return self.path / self.SHARED

    @property
    def results(self) -> Path:
        return self.path / self.RESULTS

    @property
    def adopted(self) -> Path:
        return self.path / self.ADOPTED

    @property
    def argv(self) -> Path:
        return self.path / self.ARGV

    @property
    def env(self) -> Path:
        return self.path / self.ENV

    @property
    def meta(self) -> Path:
        return self.path / self.META

    @property
    def status(self) -> Path:
        """Rank 0's status.json (the argv of the profiled script names it)."""
        return self.path / self.STATUS

    def status_of(self, rank: int) -> Path:
        """A rank's status file: rank 0's is ``status.json``, rank N's ``status.rankN.json``
        (the profiled script derives the latter from the path its argv names)."""
        return self.status if rank == 0 else self.path / f"status.rank{rank}.json"

    @property
    def log(self) -> Path:
        return self.path / self.LOG

    @property
    def rank_prefix(self) -> Path:
        return self.path / self.RANK_PREFIX

    @property
    def report_base(self) -> Path:
        """The ``-o`` the profilers get (they add the suffix)."""
        return self.path / self.REPORT

    def report(self, tool: str) -> Path:
        """The report the profiler ``tool`` (nsys | ncu) writes here."""
        return self.path / (self.NCU_REPORT if tool == "ncu" else self.NSYS_REPORT)

    def report_names(self, tool: str | None) -> list[str]:
        """The saved reports to open, best first: an nsys export before the .nsys-rep."""
        if tool == "ncu":
            return [self.NCU_REPORT]
        return [self.SQLITE_EXPORT, self.PARQUET_EXPORT, self.NSYS_REPORT]

    def holds_report(self) -> bool:
        """Whether a report of either profiler is here (one ``load_run`` can open)."""
        names = dict.fromkeys([*self.report_names("nsys"), *self.report_names("ncu")])
        return any(os.path.lexists(self.path / name) for name in names)

    def holds_sweep(self) -> bool:
        """A sweep's folder: its record and no run of its own (one run per configuration)."""
        return self.sweep.exists() and not self.meta.exists()

    @property
    def parquet_export(self) -> Path:
        return self.path / self.PARQUET_EXPORT

    @property
    def sweep(self) -> Path:
        return self.path / self.SWEEP

    # -- writing ---------------------------------------------------------------------------

    def write_cell(self, source: str) -> Path:
        write_private(self.cell, source)
        return self.cell

    def write_script(self, text: str) -> Path:
        write_private(self.script, text)
        return self.script

    def write_vars(self, blob: bytes) -> Path:
        write_private(self.vars, blob)  # 0600: a pickle is code to whoever loads it
        return self.vars

    def write_shared(self, blob: bytes) -> Path:
        write_private(self.shared, blob)
        return self.shared

    def write_adopted(self, blob: bytes) -> Path:
        write_private(self.adopted, blob)
        return self.adopted

    def write_argv(self, argv: list[str]) -> None:
        write_json(self.argv, argv)

    def write_env(self, env: Mapping[str, str]) -> None:
        write_json(self.env, dict(env))

    def write_status(self, status: Mapping[str, Any]) -> None:
        """A warm run's status (the worker's reply); a fresh run's process writes its own."""
        write_json(self.status, dict(status))

    def write_rank_prefix(self, argv: list[str]) -> Path:
        write_json(self.rank_prefix, argv)
        return self.rank_prefix

    def write_meta(self, meta: RunMeta) -> None:
        write_json(self.meta, meta.to_dict())

    def update_meta(self, meta: RunMeta | None = None, **fields: Any) -> RunMeta:
        """Merge ``meta``'s fields and ``fields`` into meta.json (under a lock: two picker
        runs may update one parent) and return what the file now holds."""
        with self._locked():
            merged = self.read_meta()
            merged.update(meta.to_dict() if meta is not None else {}, **fields)
            self.write_meta(merged)
        return merged

    def write_sweep(self, record: SweepRecord) -> None:
        """A sweep folder's record, rewritten after each configuration."""
        write_json(self.sweep, record.to_dict())

    def add_child(self, child: dict[str, Any]) -> None:
        """Record a picker run in this (its parent's) meta.json, under the lock."""
        with self._locked():
            meta = self.read_meta()
            meta.children.append(child)
            self.write_meta(meta)

    def append_log(self, text: str) -> None:
        """A line (or lines) of ours, or of the worker, at the end of profiler.log."""
        with append_private(self.log) as f:
            f.write((text if text.endswith("\n") else text + "\n").encode("utf-8", "replace"))

    def write_copy(self, name: str, data: str | bytes | BinaryIO) -> Path:
        """A file of a share-safe copy of a run folder, as ``run_folders/sharing.py`` rewrote it."""
        write_private(self.path / name, data)
        return self.path / name

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on ``meta.json.lock``."""
        import fcntl

        lock = self.meta.with_name(self.META + ".lock")
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE)
        except OSError as exc:
            raise RunFolderError(
                f"cannot update {self.meta} ({exc.strerror or exc}); check that its folder is "
                "writable."
            ) from None
        with os.fdopen(fd, "wb") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- reading ---------------------------------------------------------------------------

    def read_meta_json(self) -> Any:
        """meta.json as it is (None when missing or not JSON): for a reader that must say
        what is wrong with it in its own words."""
        return read_json(self.meta, None)

    def read_meta(self) -> RunMeta:
        """meta.json typed, any version (a missing, damaged or non-object file: empty)."""
        data = self.read_meta_json()
        return RunMeta.from_dict(data if isinstance(data, dict) else {})

    def read_sweep(self) -> SweepRecord | None:
        """sweep.json typed; None when this is no sweep folder (missing, or not its shape)."""
        data = read_json(self.sweep, None)
        return SweepRecord.from_dict(data) if is_sweep_record(data) else None

    def read_status(self, rank: int = 0) -> CellStatus:
        return cell_status(read_json(self.status_of(rank), {}))

    def read_env(self) -> Any:
        return read_json(self.env, {})

    def read_cell(self) -> str:
        return read_regular(self.cell).decode(errors="replace")  # never blocks on a pipe

    def has_saved_cell(self) -> bool:
        """A re-run needs the cell and the script that ran it."""
        return self.script.exists() and self.cell.exists()


__all__ = [
    "DEFAULT_ROOT",
    "CellStatus",
    "RunDir",
    "append_private",
    "cell_status",
    "config_folder_name",
    "read_json",
    "slug",
    "utc_stamp",
    "write_json",
    "write_private",
]
