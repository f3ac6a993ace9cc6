"""GPU memory admission: before a worker builds GPU state of its own (a setup cell replayed
because something it defines cannot be shared), check that it fits, and when it does not, say
so with the numbers and the fix, instead of an out-of-memory error halfway through.

What each process holds comes from nvidia-smi (``gpu_memory``): a worker's own memory only,
since memory it maps from the notebook (CUDA IPC) is counted once, in the notebook.
"""

from __future__ import annotations

import os

from ...errors import NsightMagicError
from ...processes import gpu_memory
from ..variables import human_bytes

MARGIN = 1.1  # what a rebuild needs over what the notebook's run of it took
MIB = 1 << 20


class GpuMemoryError(NsightMagicError, MemoryError):
    """A worker would need more GPU memory than is free."""


def describe_holders(mem: gpu_memory.GpuMemory, names: dict[int, str]) -> str:
    """``this notebook 33.1 GB, the nsys worker (pid 12) 0.5 GB, ...`` from nvidia-smi."""
    parts = []
    for pid, mib in sorted(mem.mib_by_pid().items(), key=lambda kv: -kv[1]):
        who = names.get(pid, f"process {pid}")
        parts.append(f"{who} {human_bytes(mib * MIB)}")
    return ", ".join(parts) or "no process"


def require(need_bytes: int, what: str, *, worker_pid: int | None = None,
            names: dict[int, str] | None = None) -> None:  # fmt: skip
    """Raise GpuMemoryError when no GPU has ``need_bytes`` x MARGIN free for ``what``
    (nothing is known, so nothing refused, without nvidia-smi)."""
    mem = gpu_memory.read()
    if not mem.free or need_bytes <= 0:
        return
    need_mib = need_bytes * MARGIN / MIB
    # the worker's GPUs when it holds memory already, else any GPU
    gpus = list(mem.used.get(worker_pid or -1, {})) or list(mem.free)
    if any(mem.free.get(g, 0.0) >= need_mib for g in gpus):
        return
    holders = {os.getpid(): "this notebook", **(names or {})}
    free = max((mem.free.get(g, 0.0) for g in gpus), default=0.0)
    raise GpuMemoryError(
        f"Not enough GPU memory for {what}: it needs about {human_bytes(need_mib * MIB)} and "
        f"the GPU has {human_bytes(free * MIB)} free (held by {describe_holders(mem, holders)}). "
        "Fix: stop a worker you do not need (%nsight_session stop nsys|ncu), free GPU memory "
        "in the notebook (del the tensors, then torch.cuda.empty_cache()), or define what "
        "cannot be shared (named above) in an ordinary cell instead of the setup cell."
    )
