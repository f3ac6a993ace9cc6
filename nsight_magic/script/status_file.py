"""The status file the session reads (``run_folders/run_dir.CellStatus``): where a script run
writes it and how, whole at each step. A real module pasted into the script by
``build_script`` before ``runtime``. Standard library only."""

import json
import os
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---


class StatusFile:
    """The status file the parent reads (``runs.CellStatus``), rewritten whole at each step."""

    def __init__(self, path: str, **fields: Any) -> None:
        self.path = path
        self.status: dict[str, Any] = dict(fields)

    def write(self, **fields: Any) -> None:
        self.status.update(fields)
        tmp = self.path + ".tmp"
        # 0600 under any umask, as every file in a run folder (run_folders/ownership.py)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(self.status, f)
        os.replace(tmp, self.path)  # the parent never reads a half-written file


def status_path(argv: list[str], rank: int, here: str, name: str) -> str:
    """``argv[1]``, else ``name`` in ``here`` (the script's folder); rank 0 answers for the
    cell, the other ranks write ``status.rank<R>.json`` beside it."""
    path = argv[1] if len(argv) > 1 else os.path.join(here, name)
    if rank:
        path = path[: -len(".json")] + f".rank{rank}.json"
    return path
