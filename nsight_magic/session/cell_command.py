"""The command that runs a cell script: plain, or as N ranks through PyTorch's own launcher
(``python -m torch.distributed.run``, i.e. torchrun) with ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE`` set; the script initialises the process group for the cell on every rank."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

RANK_EXEC = "nsight_magic.session.rank_exec"


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
