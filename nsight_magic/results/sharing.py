"""``nsight_magic.share(run_dir, dest)``: a share-safe copy of a run folder
(``run_folders/sharing.py`` rewrites it), and for a sweep folder its one-page summary beside its
configurations' folders (``index.html``: the table, the charts as images, each configuration's
top kernels), built from the copy, so it names nothing the copy does not."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..run_folders import sharing
from ..run_folders.run_dir import RunDir
from .sweep_run import share_page_into


def share(
    run_dir: str | Path,
    dest: str | Path,
    *,
    redact: Iterable[str] = (),
    keep_nsys_rep: bool = False,
) -> Path:
    """Write a share-safe copy of ``run_dir`` (a run folder with its picker runs, or a sweep
    folder with its configurations and a one-page ``index.html``) to ``dest`` (a new folder)
    and return it; ``nsight_magic.load_run(dest)`` opens it. ``redact``, ``keep_nsys_rep``:
    see ``run_folders.sharing.share``."""
    return sharing.share(run_dir, dest, redact=redact, keep_nsys_rep=keep_nsys_rep,
                         finish=_sweep_page)  # fmt: skip


def _sweep_page(copy: Path) -> None:
    """A sweep's copy gets its page before it is renamed into place (a failure leaves
    nothing behind); a run's copy needs none."""
    if RunDir(copy).sweep.exists() and not RunDir(copy).meta.exists():
        share_page_into(copy)
