"""PyTorch's view of the captured cell's GPU memory, in the profiled process (issue 37).

A real module pasted into the script by ``build_script`` (``script/template.py``) before the
runtime, which wraps the captured run in ``TorchMemory``. Standard library only at import time;
it looks at torch only when the cell's process already imported it and CUDA is initialised
(measuring must never be what initialises CUDA or imports torch).

- Always: torch's allocated and reserved bytes at the cell's start, their peaks during it
  (``reset_peak_memory_stats`` first) and at its end: the status field ``torch_memory``.
- With ``MEMORY_HISTORY`` (``%%nsys --memory``): the allocator's history of the cell
  (``torch.cuda.memory._record_memory_history``, Python frames only), and its snapshot saved
  beside the script as ``torch_memory.pickle`` when the cell ends (after the gate: outside the
  capture), also when it raised (an out-of-memory error's ``oom`` event is in the history).
"""

import contextlib
import os
import pickle
import sys
from typing import Any

# --- module only: build_script writes these in the script's header, with the cell's values ---
MEMORY_HISTORY = False  # %%nsys --memory: the allocator's history and snapshot of the cell
SNAPSHOT_NAME = "torch_memory.pickle"
# --- end module only ---

HISTORY_ENTRIES = 200_000  # the allocator keeps the last this many alloc/free events
_STATS = ("allocated_bytes.all.current", "reserved_bytes.all.current",
          "requested_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
          "requested_bytes.all.peak", "num_ooms", "num_alloc_retries")  # fmt: skip


def _cuda() -> Any:
    """``torch.cuda`` when this process imported torch and initialised CUDA, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_initialized() else None
    except Exception:
        return None


def _init_cuda() -> None:
    """With ``--memory``, CUDA initialised before the cell when its process imported torch and
    has a GPU: the allocator's history needs it (measured in the warm worker: a cell whose setup
    only imported torch got a snapshot without any history, every tensor unnamed)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if not torch.cuda.is_initialized() and torch.cuda.is_available():
            torch.cuda.init()


def _stats(cuda: Any) -> dict[str, int]:
    stats = cuda.memory_stats()
    return {k: int(stats.get(k, 0)) for k in _STATS}


class TorchMemory:
    """``with TorchMemory(folder): run the cell`` -> ``fields()``: ``{"torch_memory": {...}}``
    (empty when torch never touched CUDA). Leaving the block saves the snapshot, after the
    gate closed; when the cell raised, the error's traceback still holds the tensors the
    failing statement had, and the history holds the moment itself (an ``oom`` event)."""

    def __init__(self, folder: str, history: bool = MEMORY_HISTORY) -> None:
        self.folder = folder
        self.history = history
        self.start: dict[str, int] | None = None
        self.end: dict[str, int] | None = None
        self.snapshot = ""
        self.error = ""

    def __enter__(self) -> "TorchMemory":
        if self.history:
            _init_cuda()  # a history started before CUDA is would record nothing (GPU e2e run)
        cuda = _cuda()
        if cuda is None:
            self.history = False  # no torch: nothing to record; fields() says so
            return self
        with contextlib.suppress(Exception):
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
            self.start = _stats(cuda)
        if self.history:
            try:
                cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, stacks="python")
            except Exception as exc:  # an old torch: no history, say why
                self.history = False
                self.error = f"no allocator history: {type(exc).__name__}: {exc}"
        return self

    def __exit__(self, *exc: object) -> None:
        cuda = _cuda()
        if cuda is None:
            return
        if self.start is None:  # the cell itself initialised CUDA: it started from nothing
            self.start = dict.fromkeys(_STATS, 0)
        with contextlib.suppress(Exception):
            self.end = _stats(cuda)
        if self.history:
            self._save()
            with contextlib.suppress(Exception):
                cuda.memory._record_memory_history(enabled=None)

    def _save(self) -> None:
        cuda = _cuda()
        if cuda is None:
            return
        path = os.path.join(self.folder, SNAPSHOT_NAME)
        try:
            snap = cuda.memory._snapshot()
            with open(path, "wb") as f:
                pickle.dump(snap, f, protocol=4)
            self.snapshot = SNAPSHOT_NAME
        except Exception as exc:
            self.error = f"allocator snapshot not saved: {type(exc).__name__}: {exc}"

    def fields(self) -> dict[str, Any]:
        if self.start is None or self.end is None:
            return {}
        out: dict[str, Any] = {
            "allocated_start": self.start["allocated_bytes.all.current"],
            "reserved_start": self.start["reserved_bytes.all.current"],
            "allocated_peak": self.end["allocated_bytes.all.peak"],
            "reserved_peak": self.end["reserved_bytes.all.peak"],
            "allocated_end": self.end["allocated_bytes.all.current"],
            "reserved_end": self.end["reserved_bytes.all.current"],
            # what the tensors asked for (the snapshot's sizes); allocated counts whole blocks
            "requested_start": self.start["requested_bytes.all.current"],
            "requested_peak": self.end["requested_bytes.all.peak"],
            "requested_end": self.end["requested_bytes.all.current"],
            "ooms": self.end["num_ooms"] - self.start["num_ooms"],
            "alloc_retries": self.end["num_alloc_retries"] - self.start["num_alloc_retries"],
        }
        with contextlib.suppress(Exception):
            out["device"] = int(sys.modules["torch"].cuda.current_device())
        out["pid"] = os.getpid()
        out["history"] = bool(self.history)
        if self.snapshot:
            out["snapshot"] = self.snapshot
        if self.error:
            out["error"] = self.error
        return {"torch_memory": out}
