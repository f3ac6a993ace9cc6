"""``%nsight_session``'s text: each worker (pid, uptime, cells, the GPU memory it holds, by
torch's allocator and by nvidia-smi) and the notebook's own GPU memory, so a model built twice
(notebook and worker) shows."""

from __future__ import annotations

import sys
from typing import Any

from ..vocabulary.magic_names import cell_magic
from .variables import human_bytes
from .workers.pool import SessionStatus


def format_status(statuses: list[SessionStatus], notebook_gpu: dict[str, Any]) -> str:
    """``%nsight_session`` as text: one paragraph per worker, then the notebook's own GPU use."""
    if not statuses:
        lines = [
            "No profiling worker is running; the next "
            f"{cell_magic('nsys')} / {cell_magic('ncu')} cell starts one."
        ]
    else:
        lines = []
    for s in statuses:
        state = "running" if s.alive else "stopped"
        lines.append(f"{s.tool} worker: {state}, pid {s.pid}, up {s.uptime_s:,.0f} s, "
                     f"{s.cells} cell(s) profiled, {s.replayed} history step(s) run")  # fmt: skip
        if s.busy:
            lines.append(f"  busy: {s.busy}")
        if s.prewarmed:
            lines.append(f"  prewarmed: replayed {', '.join(s.prewarmed)} before any cell asked")
        for device, mem in sorted(s.cuda_memory.items()):
            lines.append(f"  GPU {device}: torch holds {human_bytes(mem['reserved_bytes'])} "
                         f"({human_bytes(mem['allocated_bytes'])} in tensors)")  # fmt: skip
        if s.gpu_memory_mib is not None:
            lines.append(f"  nvidia-smi: its own GPU memory {s.gpu_memory_mib:,.0f} MiB")
            if beyond := _ncu_own_mib(s):
                lines.append(f"  beyond torch's blocks ~{beyond:,.0f} MiB: its CUDA context "
                             "and ncu's own (a kernel replay's saved copy of GPU memory, "
                             "handed back seconds after it)")  # fmt: skip
        if s.mapped_bytes or s.shared_names:
            names = ", ".join(s.shared_names[:8]) + (" ..." if len(s.shared_names) > 8 else "")
            mapped = human_bytes(s.mapped_bytes)
            lines.append(f"  maps {mapped} of the notebook's GPU memory (not a copy); "
                         f"received from the notebook: {names or 'nothing'}")  # fmt: skip
        lines.append(f"  launched as: {' '.join(s.launch_argv[:6])} ...")
    for device, mem in sorted(notebook_gpu.items()):
        lines.append(f"notebook GPU {device}: torch holds {human_bytes(mem['reserved_bytes'])} "
                     "(the one copy: workers map its tensors, they do not copy them)")  # fmt: skip
    return "\n".join(lines)


# what an ncu worker holds beyond torch's blocks and its CUDA context before it is ncu's: after
# a drill-down that kept a 34 GB state, nvidia-smi gave the worker 13,156 MiB with torch holding
# 158 MiB, and 1,044 MiB five seconds later (H200, 2026-11-28)
NCU_OWN_MIB = 2048


def _ncu_own_mib(s: SessionStatus) -> float:
    """MiB an ncu worker holds beyond torch's reserved blocks and ``NCU_OWN_MIB`` (0: none to
    tell): ncu's replay buffers."""
    if s.tool != "ncu" or s.gpu_memory_mib is None or not s.cuda_memory:
        return 0.0
    torch_mib = sum(m["reserved_bytes"] for m in s.cuda_memory.values()) / 2**20
    beyond = s.gpu_memory_mib - torch_mib
    return beyond if beyond > NCU_OWN_MIB else 0.0


def notebook_gpu_memory() -> dict[str, Any]:
    """What torch holds on each GPU in the notebook's own process ({} before CUDA is used)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    return {str(d): {"reserved_bytes": int(torch.cuda.memory_reserved(d)),
                     "allocated_bytes": int(torch.cuda.memory_allocated(d))}
            for d in range(torch.cuda.device_count())}  # fmt: skip
