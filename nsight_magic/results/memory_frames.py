"""Where the GPU memory went, for one nsys run: the inputs ``analysis.gpu_memory`` and
``analysis.torch_memory`` need, gathered from the report (nsys's allocation events), the run's
status (torch's own counts, measured by the worker around the cell) and its folder (torch's
allocator snapshot with ``%%nsys --memory``). The numbers are the analysis modules'."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import gpu_memory, oom, torch_memory
from ..errors import NsightMagicError
from ..reports.torch_memory import TorchSnapshot, load_snapshot
from ..run_folders.run_dir import RunDir
from ..vocabulary.code_files import is_profiled_cell
from ..vocabulary.magic_names import cell_magic

__all__ = ["MemoryFrames", "no_memory_note", "oom_explanation", "report_memory_summary"]

TORCH_COLUMNS = ["moment", "allocated_bytes", "reserved_bytes"]


def report_memory_summary(
    report: Any,
    mapped: gpu_memory.MappedMemory | None = None,
    events: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``analysis.gpu_memory.memory_summary`` of a report (``NsysReport``; empty for a
    multi-rank one, which has no memory view yet); ``mapped``: the notebook's memory its
    worker mapped (the run's status), else not known; ``events``: the run's (else all the
    report has)."""
    if events is None:
        load = getattr(report, "memory_events", None)
        events = load() if load is not None else gpu_memory.empty_events()
    if events.empty:
        return gpu_memory.memory_summary(events)
    start = float(report.capture_window()[0])
    return gpu_memory.memory_summary(events, report.nvtx(), start, mapped)


def no_memory_note() -> str:
    return (
        "This run has no device-memory events: it was captured without --memory (nsys records "
        "them with --cuda-memory-usage=true). Profile the cell with "
        f"{cell_magic('nsys')} --memory to see where the GPU memory went."
    )


def with_reason(frame: pd.DataFrame, reason: str) -> pd.DataFrame:
    """``frame`` with why it is empty in ``attrs["reason"]`` (nothing when it has rows)."""
    if frame.empty and reason:
        frame.attrs["reason"] = reason
    return frame


class MemoryFrames:
    """Memory frames of one run (``NsysRun``): ``run.report``, ``run.meta``, ``run.run_dir``
    are read when asked (the session sets the meta after the run object exists)."""

    def __init__(self, run: Any) -> None:
        self.run = run

    @functools.cached_property
    def events(self) -> pd.DataFrame:
        load = getattr(self.run.report, "memory_events", None)  # one report; ranks: none yet
        if load is None or self._not_asked:
            return gpu_memory.empty_events()
        return load()

    @property
    def _not_asked(self) -> bool:
        """A warm worker records allocations for every cell (``NsysOptions.warm``): a run that
        did not ask ``--memory`` and ran to its end shows none (a failed one keeps them: an
        out-of-memory error is explained with them). A report opened alone shows what it has."""
        options = self.run.meta.get("options")
        status = self.run.meta.get("cell_status")
        return (
            isinstance(options, dict)
            and options.get("memory") is not True
            and isinstance(status, dict)
            and status.get("status") == "ok"
        )

    @property
    def torch_status(self) -> dict[str, Any]:
        """What the worker measured (``script/torch_memory.py``): bytes at start/peak/end."""
        status = self.run.meta.get("cell_status") or {}
        value = status.get("torch_memory")
        return value if isinstance(value, dict) else {}

    @property
    def mapped(self) -> gpu_memory.MappedMemory | None:
        """The notebook's memory the worker mapped, as it listed it (None: not known)."""
        return gpu_memory.MappedMemory.from_status(self.run.meta.get("cell_status"))

    def _capture_start(self) -> float | None:
        window = getattr(self.run.report, "capture_window", None)
        return float(window()[0]) if window is not None and len(self.events) else None

    @property
    def captured_with_memory(self) -> bool:
        """The run's meta says ``%%nsys --memory`` (False for a report opened alone)."""
        options = self.run.meta.get("options")
        return isinstance(options, dict) and options.get("memory") is True

    # computed once per run: the view, its static copy and the frames read each several times
    # (the memory summary three times in one display: 0.53 s of 4.7 s on the dev machine)
    @functools.cached_property
    def _timeline(self) -> pd.DataFrame:
        return gpu_memory.memory_timeline(self.events, self._capture_start(), self.mapped)

    @functools.cached_property
    def _summary(self) -> pd.DataFrame:
        return report_memory_summary(self.run.report, self.mapped, self.events)

    def timeline(self) -> pd.DataFrame:
        """``analysis.gpu_memory.memory_timeline``; empty with ``attrs["reason"]`` (``note``)."""
        return with_reason(self._timeline.copy(), self.note())

    def chart_rows(self, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """The timeline as the chart draws it (``analysis.gpu_memory.chart_rows``)."""
        return gpu_memory.chart_rows(self.timeline(), window)

    def summary(self) -> pd.DataFrame:
        return with_reason(self._summary.copy(), self.note())

    def torch_counts(self) -> pd.DataFrame:
        """``moment`` (start / peak / end), ``allocated_bytes, reserved_bytes``: torch's own
        counts around the cell; empty when the worker had no CUDA torch."""
        t = self.torch_status
        rows = [
            (m, t.get(f"allocated_{m}"), t.get(f"reserved_{m}")) for m in ("start", "peak", "end")
        ]
        rows = [r for r in rows if isinstance(r[1], int) and isinstance(r[2], int)]
        frame = pd.DataFrame(rows, columns=TORCH_COLUMNS)
        frame = frame.astype(
            {"moment": "str", "allocated_bytes": "int64", "reserved_bytes": "int64"}
        )
        return with_reason(frame, self.torch_note())

    def torch_note(self) -> str:
        """Why PyTorch's counts are empty ("" when they are not)."""
        if self.torch_status:
            return ""
        if not isinstance(self.run.meta.get("cell_status"), dict):
            return (
                "This run has no PyTorch memory counts: the worker measures them around the "
                "profiled cell and keeps them in the run folder's status.json, and this report "
                "was opened without it (a bundled example or open_report). Load the run folder "
                "with nsight_magic.load_run(path), or profile the cell with "
                f"{cell_magic('nsys')} --memory."
            )
        return (
            "This run has no PyTorch memory counts: the profiled process had not started CUDA "
            "through torch when the cell ran (the worker never starts CUDA just to measure)."
        )

    def snapshot_note(self, live: pd.DataFrame | None = None) -> str:
        """Why there are no tensors at the peak ("" when there are)."""
        if live is not None and not live.empty:
            return ""
        snap = self.snapshot
        if snap is None:
            if self.captured_with_memory:
                return (
                    "No allocator snapshot in the run folder: the worker saves one when the "
                    "cell's process used CUDA through torch."
                )
            return (
                "No allocator snapshot: this run was captured without --memory. Profile the "
                f"cell with {cell_magic('nsys')} --memory to see the tensors alive at the peak "
                "and the lines that made them."
            )
        if not snap.devices:
            return (
                "The allocator snapshot has no history: torch had not started CUDA when the "
                "cell began, so its allocations were not recorded; start it before the cell "
                "(a CUDA tensor in a setup cell)."
            )
        return "No tensor was alive at that moment in the allocator's history."

    def note(self) -> str:
        """Why the device-memory view is empty ("" when it is not)."""
        if len(self.events):
            return ""
        if not hasattr(self.run.report, "memory_events"):  # RankedReport: several reports
            return (
                "The memory view reads one report at a time; this run merges several (ranks): "
                "open a rank's own report with nsight_magic.open_report(path) to see its memory."
            )
        if self.captured_with_memory:
            return (
                "nsys recorded no device-memory event in this capture: the profiled process "
                "allocated nothing through CUDA while it was captured."
            )
        return no_memory_note()

    def top_lines(self, top: int = 10) -> pd.DataFrame:
        """The tensors alive at torch's peak grouped by the line that made them
        (``analysis.torch_memory.by_line``); empty without a snapshot."""
        live = self.live()[0]
        return with_reason(torch_memory.by_line(live, top), live.attrs.get("reason", ""))

    def snapshot_path(self) -> Path | None:
        if self.run.run_dir is None:
            return None
        path = Path(self.run.run_dir) / RunDir.TORCH_MEMORY
        return path if path.is_file() else None

    @functools.cached_property
    def snapshot(self) -> TorchSnapshot | None:
        path = self.snapshot_path()
        return None if path is None else load_snapshot(path)

    def live(self, at: str = "peak") -> tuple[pd.DataFrame, dict[str, object]]:
        """``analysis.torch_memory.live_at`` on the snapshot's device (the worker's), or an
        empty frame without a snapshot."""
        snap = self.snapshot
        if snap is None or not snap.devices:  # no snapshot, or one without any history
            return with_reason(torch_memory.empty_live(), self.snapshot_note()), {}
        device = self.torch_status.get("device")
        device = device if device in snap.devices else snap.devices[0]
        live, facts = torch_memory.live_at(snap.events(), snap.blocks(), int(device), at)
        return with_reason(live, self.snapshot_note(live)), facts


# a notebook cell's frames in a traceback; only the profiled cell's (<nsight_magic cell>, or
# <nsight_magic NAME> with --name) count, not a setup, replayed or ordinary cell's
# (vocabulary/code_files.py)
_CELL_LINE = re.compile(r'File "(<nsight_magic [^"]*>)", line (\d+)')


def oom_explanation(
    status: Mapping[str, Any],
    run_dir: Path | None,
    cell_source: str,
    names: Mapping[int, str],
) -> str:
    """What a failed cell's message adds when the cell ran out of GPU memory (""
    otherwise): ``analysis.oom.explain_oom`` on torch's message, the allocator's snapshot in
    the run folder (``%%nsys --memory``) and the cell line the traceback ends in. ``names``:
    pid -> who (the notebook, this worker)."""
    message = str(status.get("exc_message") or "")
    if not oom.is_oom(str(status.get("exc_type") or ""), message):
        return ""
    traceback = str(status.get("traceback") or "")
    lines = [n for file, n in _CELL_LINE.findall(traceback) if is_profiled_cell(file)]
    statement = ""
    if lines:
        n = int(lines[-1])
        source = cell_source.splitlines()
        text = source[n - 1].strip() if 0 < n <= len(source) else ""
        statement = f"cell L{n}" + (f" `{text}`" if text else "")
    torch_status = status.get("torch_memory")
    worker = torch_status.get("pid") if isinstance(torch_status, dict) else None
    by_line = None
    empty_history = False
    path = Path(run_dir) / RunDir.TORCH_MEMORY if run_dir is not None else None
    if path is not None and path.is_file():
        try:
            snap = load_snapshot(path)
            if snap.devices:  # without any history every tensor would read "before the cell"
                device = snap.devices[0]
                live, _ = torch_memory.live_at(snap.events(), snap.blocks(), device, at="oom")
                by_line = torch_memory.by_line(live)
            else:
                empty_history = True
        except NsightMagicError:  # a damaged snapshot must not hide the error itself
            by_line = None
    flag = f"{cell_magic('nsys')} --memory"
    mapped = gpu_memory.MappedMemory.from_status(status)
    return oom.explain_oom(
        message,
        worker_pid=worker,
        names=names,
        lines=by_line,
        statement=statement,
        memory_flag=flag,
        snapshot_without_history=empty_history,
        mapped_bytes=mapped.total_bytes if mapped is not None else 0,
    )
