"""The notebook's own copy of the GPU memory a drill-down's ncu worker maps (issue 41 item 5).

A drill-down re-runs a cell the notebook has run already, so the re-run must leave the
notebook's state as it was: the GPU memory of what the cell may change (``loss = train_step()``:
the model, its EMA copy and the optimizer the function reaches; every tensor the worker received
where that cannot be read: ``["*"]``). The worker used to copy it aside itself
(``shared_objects.preserved``), but under ncu's kernel replay a device-side copy in the worker
is memory ncu backs up too, so beside a large training state the worker's copy went to host
memory through staging buffers, most of a drill-down's time (benchmarks/README.md, design
measurements). The notebook is no process ncu profiles: its device-to-device copy costs what the
GPU's bandwidth does and nothing of ncu's replay. A crash of the worker half-way through the
re-run then leaves nothing changed either: the notebook writes its copy back whatever became of
the worker.

Taken only when every device has room for the copy, for ncu's backup of what the worker maps
beside it, and a margin; else the worker keeps everything as before. The worker keeps its own
memory (gradients it allocated, the optimizer state a cell made there) and the Python-side state.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...script.cuda_save import SNAPSHOT_MARGIN_BYTES, SNAPSHOT_MARGIN_SHARE, bytes_by_device
from ...script.shared_objects import module_buffers, storages_of

# what the ncu worker allocates of its own beside what it maps (its cached blocks, the re-run's
# activations and gradients), left free on each device with the copy
WORKER_ROOM_BYTES = 2 << 30


def fits(need: int, free: int, total: int) -> bool:
    """Whether a device with ``free`` of ``total`` bytes free takes a ``need``-byte copy, ncu's
    backup of the ``need`` bytes the worker maps, the worker's own room and the snapshot
    margin (``cuda_save.snapshot_place``'s)."""
    margin = max(SNAPSHOT_MARGIN_BYTES, int(total * SNAPSHOT_MARGIN_SHARE))
    return free >= 2 * need + WORKER_ROOM_BYTES + margin


def kept_objects(changes: list[str], user_ns: Mapping[str, Any], sent: list[Any]) -> list[Any]:
    """What of the notebook's the worker's re-run would keep (``shared_objects.preserved``):
    with ``changes`` ``["*"]``, everything the worker received (``sent``); else the objects of
    the names the cell may change (``repeat_changes.changed_names``: ``loss = train_step()`` reaches
    the model, its EMA copy, the optimizer and the counter) and the buffers of every module
    the worker received (a forward in training mode updates batch-norm statistics)."""
    if "*" in changes:
        return sent
    return [*(user_ns[name] for name in changes if name in user_ns), *module_buffers(sent)]


@dataclass
class NotebookSnapshot:
    """The copies (one buffer per device) of the notebook's storages, and what they cost (the
    run's status ``kept``: bytes, place, save_s, restore_s)."""

    torch: Any
    pairs: list[tuple[Any, Any]] = field(default_factory=list)  # (storage's bytes, its copy)
    buffers: list[Any] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)

    def put_back(self) -> float:
        """Every storage back as it was (the copy kept: a warm-up's effects undone before the
        captured run); returns the seconds it took."""
        torch = self.torch
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        streams: dict[Any, Any] = {}
        for dst, src in self.pairs:
            stream = streams.setdefault(dst.device, torch.cuda.Stream(dst.device))
            with torch.cuda.device(dst.device), torch.cuda.stream(stream):
                dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def restore(self) -> dict[str, Any]:
        """``put_back``, then the copy's memory back to the GPU (not to the notebook's cache:
        the workers share the GPU). Once; returns the record."""
        if not self.pairs:
            return self.record
        self.record["restore_s"] = round(self.put_back(), 4)
        self.free()
        return self.record

    def free(self) -> None:
        """The copy's memory back to the GPU, nothing written back."""
        self.pairs.clear()
        self.buffers.clear()
        self.torch.cuda.empty_cache()


def take(objects: Iterable[Any], note: Callable[[str], None]) -> NotebookSnapshot | None:
    """A copy, on their devices, of the CUDA storages of ``objects`` (what a worker received:
    tensors, modules, optimizers), or None when there are none or a device lacks room
    (``fits``), or the copy could not be made (out of memory: nothing is kept then); ``note``
    is told why not (the run's log)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    storages = [s for s in storages_of(objects).values() if s.nbytes()]
    by_device = bytes_by_device(torch, storages)
    if not by_device:
        return None
    needs = {device: sum(int(s.numel()) for s in sources) for device, sources in by_device.items()}
    # the notebook's cached blocks count as its own: ncu's backup needs them free (the first
    # drill-down after a 34 GB training step found 2 x 34 GB free only once they were)
    torch.cuda.empty_cache()
    for device, need in needs.items():
        free, total = torch.cuda.mem_get_info(device)
        if not fits(need, free, total):
            note(f"the worker keeps the re-run's state: {device} has {free / 2**30:.1f} GiB free, "
                 f"and the notebook's copy of {need / 2**30:.1f} GiB needs room for itself, "
                 "for ncu's backup of what the worker maps, and a margin")  # fmt: skip
            return None
    snapshot = NotebookSnapshot(torch, record={"bytes": sum(needs.values()), "place": "notebook"})
    torch.cuda.synchronize()  # the notebook's own work on them done
    t0 = time.perf_counter()
    try:
        for device, sources in by_device.items():
            buffer = torch.empty(needs[device], dtype=torch.uint8, device=device)
            snapshot.buffers.append(buffer)
            stream = torch.cuda.Stream(device)
            at = 0
            with torch.cuda.device(device), torch.cuda.stream(stream):
                for src in sources:
                    copy = buffer[at : at + src.numel()]
                    copy.copy_(src, non_blocking=True)
                    snapshot.pairs.append((src, copy))
                    at += src.numel()
        torch.cuda.synchronize()
    except RuntimeError as exc:  # out of memory after all: the worker keeps it, as before
        note(f"the worker keeps the re-run's state: the notebook's copy failed ({exc})")
        snapshot.free()
        return None
    snapshot.record["save_s"] = round(time.perf_counter() - t0, 4)
    return snapshot
