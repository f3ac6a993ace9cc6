"""One text per behaviour a user must be able to count on, said the same way by the magics'
help (``%%nsys?``, ``%nsight_session?``) and docs/sessions.md (a test finds each text there,
word for word): when the two said different things, users believed the wrong one."""

from __future__ import annotations

# what a profiled cell shares with the notebook (``%%nsys?``, ``%%ncu?``)
STATE = (
    "The cell runs in a warm worker process, as if it ran in the notebook: the notebook's "
    "names go to the worker (CUDA tensors by reference, the rest up to auto_vars_max_bytes; "
    "--vars forces), and what the cell binds, rebinds, deletes or changes in place comes back, "
    "with the random streams; warm-ups and re-runs change nothing (docs/sessions.md says what "
    "cannot come back). --fresh runs it in a new process with only the %%nsight_setup cells, "
    "and nothing comes back from it."
)

# what a worker started (or restarted) later runs (``%nsight_session?``)
WORKERS = (
    "A worker started later (after a restart or a crash, the ncu worker, a --host worker) "
    "receives the notebook's names on its next cell; it replays a setup cell only for a name "
    "that cannot be sent, and never replays a profiled cell: its results are in the notebook "
    "already."
)

__all__ = ["STATE", "WORKERS"]
