"""An out-of-memory cell explains itself: what held the GPU's memory when a profiled cell raised
CUDA out-of-memory, per process on that GPU, the largest tensors and the lines that made them,
and the fix that applies.

The per-process numbers are the ones PyTorch measured at the failure and put in its message
(NVML's per-process usage: "Process 3972 has 6.51 GiB memory in use", "this process has
70.53 GiB memory in use"; measured on torch 2.11, tests/data/torch_mem_oom.json); a message
without them (another library, an older torch) gives what it has. The tensors come from the
allocator snapshot that ``%%nsys --memory`` saves (``analysis.torch_memory``). A warm worker
maps the notebook's CUDA tensors (CUDA IPC, one copy): they are the notebook's memory, in the
notebook's line, never the worker's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

__all__ = ["OomFacts", "explain_oom", "is_oom", "parse_oom_message"]

_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = r"([0-9.]+) ?(bytes|B|KiB|MiB|GiB|TiB)"
_TRIED = re.compile(rf"Tried to allocate {_SIZE}")
_GPU = re.compile(rf"GPU (\d+) has a total capacity of {_SIZE} of which {_SIZE} is free")
_OTHER = re.compile(rf"Process (\d+) has {_SIZE} memory in use")
_THIS = re.compile(rf"this process has {_SIZE} memory in use")
_TORCH = re.compile(rf"{_SIZE} is allocated by PyTorch, and {_SIZE} is reserved by PyTorch but "
                    "unallocated")  # fmt: skip
FRAGMENTED = 0.2  # reserved-but-unallocated over this share of the process: fragmentation


def _bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNITS[unit])


def is_oom(exc_type: str | None, message: str | None) -> bool:
    """A CUDA out-of-memory error (torch's OutOfMemoryError, or any "CUDA out of memory" /
    cudaErrorMemoryAllocation message)."""
    text = (message or "").lower()
    return (exc_type or "") in ("OutOfMemoryError", "torch.OutOfMemoryError") or (
        "out of memory" in text and ("cuda" in text or "gpu" in text)
    )


@dataclass
class OomFacts:
    """What an out-of-memory message says (None: it does not say)."""

    tried_bytes: int | None = None
    device: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    this_process_bytes: int | None = None
    torch_allocated_bytes: int | None = None
    torch_cached_bytes: int | None = None  # reserved by torch but unallocated
    others: dict[int, int] = field(default_factory=dict)  # pid -> bytes in use


def parse_oom_message(message: str) -> OomFacts:
    """The numbers of torch's out-of-memory message."""
    facts = OomFacts()
    if m := _TRIED.search(message):
        facts.tried_bytes = _bytes(m[1], m[2])
    if m := _GPU.search(message):
        facts.device = int(m[1])
        facts.total_bytes, facts.free_bytes = _bytes(m[2], m[3]), _bytes(m[4], m[5])
    if m := _THIS.search(message):
        facts.this_process_bytes = _bytes(m[1], m[2])
    if m := _TORCH.search(message):
        facts.torch_allocated_bytes = _bytes(m[1], m[2])
        facts.torch_cached_bytes = _bytes(m[3], m[4])
    facts.others = {int(m[1]): _bytes(m[2], m[3]) for m in _OTHER.finditer(message)}
    return facts


def gib(n: int | float) -> str:
    """``70.53 GiB`` / ``512.0 MiB``: the units torch's message uses."""
    if abs(n) >= 1 << 30:
        return f"{n / (1 << 30):,.2f} GiB"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):,.1f} MiB"
    return f"{int(n):,} B"


def explain_oom(
    message: str,
    *,
    worker_pid: int | None,
    names: Mapping[int, str],
    lines: pd.DataFrame | None = None,
    statement: str = "",
    stop_hint: str = "%nsight_session stop nsys|ncu",
    memory_flag: str = "%%nsys --memory",
    snapshot_without_history: bool = False,
    mapped_bytes: int = 0,
) -> str:
    """The text under a failed cell's traceback. ``names``: pid -> who it is ("the notebook",
    "the ncu worker (pid 12)"); ``worker_pid``: the process that raised; ``lines``:
    ``torch_memory.by_line`` of the tensors alive at the error (None without a snapshot);
    ``statement``: the cell line that raised; ``snapshot_without_history``: a snapshot was saved
    but holds no history (no lines to name); ``mapped_bytes``: the notebook's memory the
    process that raised maps (its own count leaves it out: it is the notebook's)."""
    f = parse_oom_message(message)
    out = []
    where = f" in {statement}" if statement else ""
    ask = f"asked for {gib(f.tried_bytes)}" if f.tried_bytes is not None else "an allocation failed"
    if f.free_bytes is not None and f.total_bytes is not None:
        ask += f" with {gib(f.free_bytes)} free of {gib(f.total_bytes)} (GPU {f.device})"
    out.append(f"Out of GPU memory{where}: {ask}.")
    holders = []
    if f.this_process_bytes is not None:
        who = names.get(worker_pid or -1, "the profiled process")
        torch_part = ""
        if f.torch_allocated_bytes is not None:
            torch_part = f" (PyTorch: {gib(f.torch_allocated_bytes)} in tensors, "
            torch_part += f"{gib(f.torch_cached_bytes or 0)} cached)"
        maps = ""
        if mapped_bytes > 0:
            maps = (f"; it also maps {gib(mapped_bytes)} of the notebook's tensors, counted in "
                    "the notebook's process")  # fmt: skip
        own = f"{who}: {gib(f.this_process_bytes)} of its own{torch_part}{maps}"
        holders.append((f.this_process_bytes, own))
    for pid, n in f.others.items():
        who = names.get(pid, f"process {pid} (another worker or program: %nsight_session "
                             "lists this notebook's workers)")  # fmt: skip
        holders.append((n, f"{who}: {gib(n)}"))
    if holders:
        out.append("What held the GPU's memory at that moment (PyTorch's count, per process):")
        out += [f"  {text}" for _, text in sorted(holders, key=lambda h: -h[0])]
    if lines is not None and len(lines):
        out.append("The largest tensors alive then (the allocator's snapshot), by the line that "
                   "made them:")  # fmt: skip
        for r in lines.head(5).itertuples(index=False):
            many = f" in {r.count} tensors" if r.count > 1 else ""
            out.append(f"  {gib(r.bytes)}{many}: {r.cell_line}")
    out.append("What to do:")
    fixes = _fixes(f, worker_pid, names, lines, stop_hint, memory_flag, snapshot_without_history)
    out += [f"  - {fix}" for fix in fixes]
    return "\n".join(out)


def _fixes(
    f: OomFacts,
    worker_pid: int | None,
    names: Mapping[int, str],
    lines: pd.DataFrame | None,
    stop_hint: str,
    memory_flag: str,
    without_history: bool = False,
) -> list[str]:
    fixes = []
    tried = f.tried_bytes or 0
    ours = {pid: n for pid, n in f.others.items() if pid in names and pid != worker_pid}
    workers = {pid: n for pid, n in ours.items() if "worker" in names[pid]}
    notebook = {pid: n for pid, n in ours.items() if pid not in workers}
    if workers and max(workers.values()) >= tried:
        who = names[max(workers, key=workers.__getitem__)]
        fixes.append(f"stop {who}, which holds {gib(max(workers.values()))} ({stop_hint}).")
    if notebook and max(notebook.values()) >= tried:
        fixes.append("free GPU memory in the notebook (del the tensors it no longer needs, "
                     "then torch.cuda.empty_cache()): a worker maps the notebook's tensors "
                     "rather than copying them, so they count once, in the notebook.")  # fmt: skip
    this = f.this_process_bytes or 0
    if f.torch_cached_bytes and this and f.torch_cached_bytes >= max(tried, FRAGMENTED * this):
        fixes.append(f"{gib(f.torch_cached_bytes)} is cached by PyTorch but unused "
                     "(fragmentation): set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                     "before torch starts, or call torch.cuda.empty_cache().")  # fmt: skip
    if lines is not None and len(lines):
        top = lines.iloc[0]
        fixes.append(f"the most is {gib(int(top['bytes']))} made at {top['cell_line']}: free it "
                     "(del) before this point, or make it smaller (batch, sequence length, "
                     "dtype).")  # fmt: skip
    elif without_history:
        fixes.append("the allocator's history of this cell is empty (CUDA was not in use when "
                     "the cell started), so no line is named: run it again, CUDA is in use "
                     "now.")  # fmt: skip
    else:
        fixes.append(f"profile the cell with {memory_flag} to see which lines made the tensors "
                     "alive at the error.")  # fmt: skip
    return fixes
