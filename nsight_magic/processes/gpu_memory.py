"""GPU memory by process and by GPU, as nvidia-smi reports it, and the rule for starting a second
worker next to one that is alive (a second nsys worker for other launch options, the ncu worker
prewarmed while the user looks at an nsys result).

The rule: a new worker replays the same setup cells as the one that is alive, so it needs about
as much GPU memory. It is started (or the old one kept) when every GPU the live worker uses has at
least ``1.2 x`` what the worker holds there plus 1 GiB free. Without nvidia-smi nothing is known
and nothing is refused (no GPU memory to run out of).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field

from . import locate as tools
from .child_signals import run_bounded
from .clean_env import clean_env

MARGIN_FACTOR = 1.2
MARGIN_MIB = 1024.0


@dataclass(frozen=True)
class GpuMemory:
    """``used``: pid -> {GPU uuid: MiB it holds}; ``free``: GPU uuid -> free MiB."""

    used: dict[int, dict[str, float]] = field(default_factory=dict)
    free: dict[str, float] = field(default_factory=dict)

    def mib_by_pid(self) -> dict[int, float]:
        return {pid: sum(per_gpu.values()) for pid, per_gpu in self.used.items()}

    def room_for_copy_of(self, pid: int | None) -> tuple[bool, str]:
        """(room, why) for a second process the size of ``pid``'s GPU memory."""
        per_gpu = self.used.get(pid or -1, {})
        for uuid, mib in per_gpu.items():
            need = mib * MARGIN_FACTOR + MARGIN_MIB
            free = self.free.get(uuid)
            if free is not None and free < need:
                return False, (
                    f"the GPU has {free:,.0f} MiB free and a second copy of the worker's "
                    f"{mib:,.0f} MiB needs {need:,.0f}"
                )
        return True, ""


def parse(apps_csv: str, gpus_csv: str) -> GpuMemory:
    """``--query-compute-apps=pid,gpu_uuid,used_memory`` and ``--query-gpu=uuid,memory.free``
    (``--format=csv,noheader,nounits``) as a GpuMemory."""
    used: dict[int, dict[str, float]] = {}
    for line in apps_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            per_gpu = used.setdefault(int(parts[0]), {})
            per_gpu[parts[1]] = per_gpu.get(parts[1], 0.0) + float(parts[2])
    free: dict[str, float] = {}
    for line in gpus_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            free[parts[0]] = float(parts[1])
    return GpuMemory(used, free)


def read() -> GpuMemory:
    """What nvidia-smi says now (empty without nvidia-smi, or when it fails)."""
    smi = tools.find_nvidia_smi()
    if not smi:
        return GpuMemory()
    texts = []
    for query in ("--query-compute-apps=pid,gpu_uuid,used_memory", "--query-gpu=uuid,memory.free"):
        try:
            # no profiler injected into nvidia-smi (LD_PRELOAD, ...)
            argv = [smi, query, "--format=csv,noheader,nounits"]
            texts.append(run_bounded(argv, 15, clean_env()).stdout)
        except (OSError, subprocess.TimeoutExpired):
            texts.append("")
    return parse(*texts)


def notebook_allocated_bytes() -> int | None:
    """What the notebook's caching allocator holds now (None before CUDA is up: asking
    would start it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return sum(int(torch.cuda.memory_allocated(d)) for d in range(torch.cuda.device_count()))


def collect_ipc() -> None:
    """Free blocks the notebook kept for workers that have let go of them."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.ipc_collect()
