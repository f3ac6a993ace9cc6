"""The command that runs a cell script: plain, or as N ranks through PyTorch's own launcher
(``python -m torch.distributed.run``, i.e. torchrun) with ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE`` set; the script initialises the process group for the cell on every rank."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

RANK_EXEC = "nsight_magic.processes.rank_exec"


def torchrun(python: str, nproc: int) -> list[str]:
    """torchrun on one host: ``--standalone`` picks a free rendezvous port itself; ``--tee 3``
    passes each rank's lines through whole, prefixed ``[default<rank>]:`` (ranks writing to
    one pipe would otherwise interleave mid-line)."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--tee", "3"]  # fmt: skip


def cell_command(python: str, script: Path, args: Sequence[str], nproc: int = 1) -> list[str]:
    """``python script.py ARGS``, or torchrun running it on ``nproc`` ranks."""
    if nproc <= 1:
        return [python, os.fspath(script), *args]
    return [*torchrun(python, nproc), os.fspath(script), *args]


def one_rank_command(
    python: str, script: Path, args: Sequence[str], nproc: int, rank: int, prefix: Path
) -> list[str]:
    """torchrun where only ``rank`` runs under the profiler argv saved in ``prefix`` (a JSON
    list); see ``rank_exec``."""
    return [*torchrun(python, nproc), "-m", RANK_EXEC, "--rank", str(rank), "--prefix",
            os.fspath(prefix), "--", os.fspath(script), *args]  # fmt: skip


def visible_gpus(env: Mapping[str, str], dev: str = "/dev") -> int:
    """The GPUs a process started with ``env`` sees: the ``/dev/nvidiaN`` nodes (a container
    has those of its GPUs), narrowed by ``CUDA_VISIBLE_DEVICES``, which CUDA reads up to its
    first invalid entry ("", "-1": none). 0 where there is none (or no node to count: WSL)."""
    try:
        count = sum(1 for name in os.listdir(dev) if re.fullmatch(r"nvidia\d+", name))
    except OSError:
        return 0
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return count
    shown = 0
    for item in listed.split(","):
        if not item.strip() or item.strip().startswith("-"):
            break
        shown += 1
    return min(shown, count)


def rank_limit(env: Mapping[str, str], dev: str = "/dev") -> tuple[int, str]:
    """The most ranks ``--nproc`` may start here, and why: one per visible GPU (each rank
    binds GPU LOCAL_RANK, so more fail with "invalid device ordinal"); with no GPU the ranks
    run on the CPU under gloo (a real use: tests, small models), one per usable CPU core."""
    gpus = visible_gpus(env, dev)
    if gpus:
        where = "CUDA_VISIBLE_DEVICES" if "CUDA_VISIBLE_DEVICES" in env else "/dev/nvidia*"
        return gpus, f"this machine shows {gpus} GPU(s) ({where}) and each rank takes one"
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus), (
        f"no GPU is visible here, so the ranks run on the CPU (gloo), at most one per CPU core "
        f"this process may use ({cpus})"
    )
