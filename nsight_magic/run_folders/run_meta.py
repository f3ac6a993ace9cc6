"""``meta.json``, typed: what one profiled cell did (``RunMeta``), written by ``run_dir.RunDir``.

Versions: a file without ``schema_version`` is version 1 (every folder written before 0.3,
including the saved runs under notebooks/runs/); version 2 adds ``schema_version`` and
nothing else, so both read the same way. Reading never fails and never drops anything: a key
this version does not know, or a known key holding a value of the wrong type (a damaged or
hand-edited file), is kept verbatim in ``extra`` and written back as it was; its typed field
stays None (``mistyped()`` names those, for a reader that must refuse them with its own
error). Fields left None are not written: a key absent from the file stays absent.

``to_dict()`` is the plain-dict view results keep as ``run.meta`` (``timings`` stays a dict of
seconds)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 2


@dataclass
class RunMeta:
    schema_version: int = SCHEMA_VERSION
    # what ran
    name: str | None = None
    tool: str | None = None  # nsys | ncu
    mode: str | None = None  # warm | fresh | prewarm
    # running | ok | failed | cell_failed | worker_died | timeout | interrupted | cancelled
    status: str | None = None
    error: str | None = None  # the typed error's one line when the run failed
    started_utc: str | None = None
    finished_utc: str | None = None
    # where and how (a re-run of the folder reads these: session/runs/saved_run.py)
    cwd: str | None = None
    python: str | None = None
    warmup: int | None = None
    repeat: int | None = None  # %%nsys --repeat: captured runs of the cell (None: one)
    # --settle: {below_c, reached, hottest_c, waited_s, why} (processes/gpu_state.Settled)
    settle: dict[str, Any] | None = None
    nproc: int | None = None
    rank: int | None = None  # the rank ncu profiled, of a multi-rank drill-down
    vars: list[str] = field(default_factory=list)  # --vars
    options: dict[str, Any] | None = None  # the backend's options (Backend.options_meta)
    versions: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds, by step
    # the executor's record
    worker: dict[str, Any] | None = None  # a warm run's worker: pid, started_utc, cells_before
    runner: dict[str, Any] | None = None  # a fresh run's process (runner.RunResult.to_dict)
    capture_argv: list[str] | None = None  # a warm run's `nsys start` / `ncu --mode attach`
    first_run: bool | None = None  # the cell's first execution in its process (cold_run.py)
    replayed: list[str] | None = None  # history cells the worker replayed for this cell
    replay_skipped: list[str] | None = None  # history cells left pending (not needed)
    setup_cells: int | None = None  # a fresh run's replayed setup cells
    shipped_vars: list[str] | None = None
    # how the notebook's names reached a warm worker: shared (GPU memory by IPC handle),
    # copied (by value), cannot (name -> why), mapped_bytes, copied_bytes, dropped
    shared_vars: dict[str, Any] | None = None
    # what the warm cell's run sent back to the notebook: names, cannot (name -> why it stayed
    # in the worker), adopted (CUDA tensors copied into the notebook's memory)
    brought_back: dict[str, Any] | None = None
    cell_status: dict[str, Any] | None = None  # runs.CellStatus, as the profiled process said
    rank_status: dict[str, str | None] | None = None  # a fresh multi-rank run: rank -> status
    report: str | None = None  # the report's file name inside the folder
    history_id: int | None = None  # the session history entry a warm cell became
    fallback: dict[str, Any] | None = None  # a fresh run instead of a warm one: from, why, note
    # a picker (ncu drill-down) run and its parent
    parent_run: str | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    kernel: str | None = None
    instance: int | None = None
    count: int | None = None
    note: str | None = None
    nvtx_range: str | None = None
    style: str | None = None
    ignored_from_folder: dict[str, Any] | None = None  # what a saved folder asked, not obeyed
    # a sweep's configuration (session/runs/sweep.py): index, values (sweep.json's), label
    sweep: dict[str, Any] | None = None
    # profile_top's ncu run: the kernels it profiled the first launch of, most nsys time first
    top_kernels: list[str] | None = None
    # the GPUs' clocks, temperature and power at the run's start and end (processes/gpu_state)
    gpu_state: dict[str, Any] | None = None
    # unknown keys, and known keys whose value had the wrong type: kept verbatim
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RunMeta:
        """Any version's meta.json object (version 1: no ``schema_version``)."""
        meta = cls(schema_version=1)
        meta.update(dict(data or {}))
        return meta

    def update(self, fields: Mapping[str, Any] | None = None, /, **more: Any) -> RunMeta:
        """Set each known field whose value has its type; keep everything else in ``extra``."""
        for key, value in {**(fields or {}), **more}.items():
            expected = _TYPES.get(key)
            if expected is None or not _fits(value, expected):
                self.extra[key] = value
                continue
            self.extra.pop(key, None)
            setattr(self, key, _copy(value))
        return self

    def mistyped(self) -> dict[str, Any]:
        """Known keys whose value in the file had the wrong type (kept in ``extra``)."""
        return {k: v for k, v in self.extra.items() if k in _TYPES}

    def to_dict(self) -> dict[str, Any]:
        """The meta.json object (version ``SCHEMA_VERSION``); the dict view ``run.meta`` keeps."""
        # a newer version's file keeps its number (its extra keys are kept too)
        out: dict[str, Any] = {"schema_version": max(self.schema_version, SCHEMA_VERSION)}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if value is not None and f.name not in ("schema_version", "extra"):
                out[f.name] = _copy(value)
        out.update(_copy(self.extra))
        return out


_FIELDS = [f for f in dataclasses.fields(RunMeta) if f.name != "extra"]
_INT = (int,)
# the JSON type each field must have to be taken as typed (bool is not an int here)
_TYPES: dict[str, tuple[type, ...]] = {
    f.name: (
        _INT if f.type in ("int", "int | None")
        else (bool,) if f.type == "bool | None"
        else (list,) if f.type.startswith("list")
        else (dict,) if f.type.startswith("dict")
        else (str,)
    )
    for f in _FIELDS
    if isinstance(f.type, str)
}  # fmt: skip


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) and bool not in types:
        return False
    if types == (dict,) and isinstance(value, dict):
        return all(isinstance(k, str) for k in value)
    return isinstance(value, types)


def _copy(value: Any) -> Any:
    """Containers copied (two metas never share a list); JSON values are plain."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


__all__ = ["SCHEMA_VERSION", "RunMeta"]
