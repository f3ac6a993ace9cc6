"""Reader of PyTorch's CUDA allocator snapshot (``torch.cuda.memory._snapshot()``, pickled by
the worker as ``torch_memory.pickle`` for ``%%nsys --memory``: ``script/torch_memory.py``).

The snapshot is a dict of plain values: ``segments`` (what the caching allocator holds now, each
with its ``blocks``: ``address, size, requested_size, state``, and the ``frames`` that allocated
a block when history was on) and ``device_traces`` (per device, the history of ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``, ``oom``, ...
events, each with ``addr, size, frames, time_us``). It is read with an unpickler that builds
plain values only: a snapshot is data, and a file that asks for anything else is refused.

Frames are Python only (the worker records ``stacks="python"``), innermost first; the frame
that names where a tensor came from is the innermost outside libraries, and a notebook cell's
code reads ``cell L<line>`` (``setup 'name' L<line>`` for a replayed setup cell), as the Idle
tab's samples do (``reports.nsys.host``)."""

from __future__ import annotations

import functools
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import CorruptReportError, ReportNotFoundError
from .nsys.host import _CELL_FILE, _LIBRARY, _frame_text

__all__ = ["SNAPSHOT_BLOCK_COLUMNS", "SNAPSHOT_EVENT_COLUMNS", "TorchSnapshot", "load_snapshot"]

SNAPSHOT_EVENT_COLUMNS = ["device_id", "seq", "action", "address", "bytes", "time_ns", "frame",
                          "cell_line", "backtrace"]  # fmt: skip
SNAPSHOT_BLOCK_COLUMNS = ["device_id", "address", "bytes", "requested_bytes", "state", "frame",
                          "cell_line", "backtrace"]  # fmt: skip
_PLAIN = {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "int",
                                      "float", "bool", "bytes", "complex")}  # fmt: skip


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the snapshot asks for {module}.{name}, not plain data")


def frame_texts(frames: object) -> tuple[str, str, str]:
    """(the frame that made it, the notebook line that led to it, the whole stack as
    ``a < b < c``) of a snapshot ``frames`` list (innermost first): the innermost frame outside
    libraries (else the innermost), and the innermost frame of a notebook cell (``cell L2``,
    ``setup 'model' L5``; "" when the stack has none)."""
    texts, user, cell = [], "", ""
    for f in frames if isinstance(frames, list) else []:
        if not isinstance(f, dict):
            continue
        line = f.get("line", "")
        if not isinstance(line, (int, str)):  # a key of the cache below must hash
            line = str(line)
        text, is_user, is_cell = _frame_facts(str(f.get("filename", "")), line,
                                              str(f.get("name", "")))  # fmt: skip
        texts.append(text)
        if not user and is_user:
            user = text
        if not cell and is_cell:
            cell = text
    return (user or (texts[0] if texts else "")), cell, " < ".join(texts)


@functools.lru_cache(maxsize=65536)
def _frame_facts(file: str, line: int | str, name: str) -> tuple[str, bool, bool]:
    """(its text, outside libraries, a notebook cell's) of one frame: a training step's history
    names the same few hundred frames in tens of thousands of events (benchmarks P17)."""
    user = not any(m in file for m in _LIBRARY) and not file.startswith(_LIBRARY)
    return _frame_text(file, line, name), user, bool(_CELL_FILE.match(file))


class TorchSnapshot:
    """One snapshot: ``events()`` (the history) and ``blocks()`` (what was alive when it was
    taken), as frames; ``devices`` the CUDA devices it has a history of."""

    def __init__(self, data: dict[str, Any], path: Path | None = None) -> None:
        self.data = data
        self.path = path

    @property
    def devices(self) -> list[int]:
        traces = self.data.get("device_traces") or []
        return [i for i, t in enumerate(traces) if t]

    def events(self) -> pd.DataFrame:
        """The allocator's history: ``device_id, seq`` (order within the device), ``action``
        ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
        ...), ``address, bytes`` (for ``oom``: the size asked for), ``time_ns`` (float ns on
        the host's clock; NaN when torch did not record it), ``frame`` (where it was made, see
        the module), ``cell_line`` (the notebook line that led there), ``backtrace``. ``bytes``
        of an alloc is the size asked for (torch's *requested* bytes), not the block's."""
        rows: list[tuple[Any, ...]] = []
        for device, trace in enumerate(self.data.get("device_traces") or []):
            for seq, e in enumerate(trace or []):
                if not isinstance(e, dict):
                    continue
                frame, cell, back = frame_texts(e.get("frames"))
                t = e.get("time_us")
                rows.append((device, seq, str(e.get("action", "")), int(e.get("addr") or 0),
                             int(e.get("size") or 0),
                             float(t) * 1e3 if isinstance(t, (int, float)) else np.nan,
                             frame, cell, back))  # fmt: skip
        return _frame(rows, SNAPSHOT_EVENT_COLUMNS, {"time_ns": "float64"})

    def blocks(self) -> pd.DataFrame:
        """The allocator's blocks when the snapshot was taken: ``device_id, address, bytes,
        requested_bytes, state`` ("active_allocated", "active_pending_free", "inactive"),
        ``frame, cell_line, backtrace`` (empty for a block allocated before history was on)."""
        rows: list[tuple[Any, ...]] = []
        for seg in self.data.get("segments") or []:
            if not isinstance(seg, dict):
                continue
            device = int(seg.get("device") or 0)
            for b in seg.get("blocks") or []:
                frame, cell, back = frame_texts(b.get("frames"))
                rows.append((device, int(b.get("address") or 0), int(b.get("size") or 0),
                             int(b.get("requested_size") or 0), str(b.get("state", "")),
                             frame, cell, back))  # fmt: skip
        return _frame(rows, SNAPSHOT_BLOCK_COLUMNS, {})


def _frame(rows: list[tuple[Any, ...]], columns: list[str], floats: dict[str, str]) -> pd.DataFrame:
    texts = {"action", "state", "frame", "cell_line", "backtrace"}
    frame = pd.DataFrame.from_records(rows, columns=columns)
    for c in columns:
        frame[c] = frame[c].astype(floats.get(c, "str" if c in texts else "int64"))
    return frame


def load_snapshot(path: str | Path) -> TorchSnapshot:
    """The snapshot pickled at ``path``; ReportNotFoundError / CorruptReportError name the
    file and what to do."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ReportNotFoundError(
            f"No allocator snapshot at {path}: profile the cell with %%nsys --memory (the "
            "worker saves torch_memory.pickle in the run folder)."
        ) from None
    try:
        data = _PlainUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:
        raise CorruptReportError(
            f"{path} is not a PyTorch allocator snapshot ({type(exc).__name__}: {exc}); "
            "profile the cell again with %%nsys --memory."
        ) from exc
    if not isinstance(data, dict) or "segments" not in data:
        raise CorruptReportError(
            f"{path} holds no allocator snapshot (no 'segments'); profile the cell again with "
            "%%nsys --memory."
        )
    return TorchSnapshot(data, path)
