"""``nsight_magic.sweep(cell, values)``: ``%%nsys --sweep`` from Python, in this notebook's
session: beside the magics, which it mirrors. It checks its arguments, describes the notebook as
the magics do, and hands the sweep to the session manager (``session/runs/sweep.py`` runs it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import BadArgumentError
from ..processes.progress import Progress
from ..profilers.nsys import NsysOptions
from ..results.sweep_run import SweepRun
from ..session.backends import NsysBackend
from ..session.manager import MANAGER
from ..session.runs.sweep import SweepSpec, short_repr
from ..session.spec import MAX_REPEAT, MAX_WARMUP, CellRequest, Notebook, RunCallbacks, SweepLimits
from ..vocabulary import arguments


def sweep(
    cell: str,
    values: Mapping[str, Iterable[Any]],
    *,
    name: str = "sweep",
    warmup: int = 0,
    repeat: int = 1,
    timeout: float | None = None,
    fresh: bool = False,
    runs_root: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    output: Callable[[str], None] | None = None,
    cancel: Any = None,
    **nsys: Any,
) -> SweepRun:
    """``%%nsys --sweep`` from Python: profile ``cell`` (its text) once per combination of
    ``values`` (``{"bs": [1, 8, 32], "seq": [512, 2048]}``), each name bound to its value
    before the cell, in this notebook's session (its warm nsys worker, its notebook state,
    left as it was). ``nsys`` are ``NsysOptions`` fields (``memory=True``, ``pytorch="shapes"``,
    ``nvtx_capture="LLM:prefill"``); ``cancel`` (a ``threading.Event``) stops the sweep after
    the configuration that runs; ``repeat`` runs each configuration that many times in its
    capture (``%%nsys --repeat``: ``sw.table()`` gains its per-repeat statistics). Returns the
    ``SweepRun``."""
    where = "nsight_magic.sweep()"
    arguments.text_arg(cell, "cell", where)
    arguments.text_arg(name, "name", where)
    if arguments.count_arg(warmup, "warmup", where) > MAX_WARMUP:
        raise BadArgumentError(f"{where}: warmup is {warmup}; pass 0..{MAX_WARMUP}.")
    if not 1 <= arguments.count_arg(repeat, "repeat", where) <= MAX_REPEAT:
        raise BadArgumentError(f"{where}: repeat is {repeat}; pass 1..{MAX_REPEAT}.")
    if timeout is not None:
        arguments.number_arg(timeout, "timeout", where)
    if not isinstance(fresh, bool):
        raise BadArgumentError(f"{where}: fresh is {short_repr(fresh)}; pass True or False.")
    if runs_root is not None and not isinstance(runs_root, str | os.PathLike):
        raise BadArgumentError(
            f"{where}: runs_root is {short_repr(runs_root)}; pass a folder's path."
        )
    for what, given in (("progress", progress), ("output", output)):
        if given is not None and not callable(given):
            raise BadArgumentError(
                f"{where}: {what} is {short_repr(given)}; pass a function or None."
            )
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise BadArgumentError(
            f"{where}: cancel is {short_repr(cancel)}; pass a threading.Event (or None)."
        )
    spec = SweepSpec.of(values)
    try:
        options = NsysOptions(**nsys)
    except (TypeError, ValueError) as exc:
        raise BadArgumentError(f"sweep(): {exc}") from None
    notebook = Notebook()
    limits = SweepLimits()
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and MANAGER.notebook.user_ns is shell.user_ns:
        # the notebook as the magics last described it: its %config (auto_vars_max_bytes)
        # and how its cells' code is named in tracebacks
        notebook = MANAGER.notebook
    elif shell is not None:
        hidden = frozenset(getattr(shell, "user_ns_hidden", {}) or {})
        notebook = Notebook(user_ns=shell.user_ns, hidden=hidden)
    if shell is not None:
        limits = _configured_limits(shell)
    spec.check(limits)  # before anything is made
    request = CellRequest(cell=cell, name=name, warmup=int(warmup), repeat=int(repeat),
                          timeout=timeout,
                          fresh=fresh,
                          runs_root=Path(runs_root) if runs_root else None)  # fmt: skip
    callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
    return MANAGER.sweep(request, NsysBackend(options), spec, notebook=notebook,
                         callbacks=callbacks, limits=limits)  # fmt: skip


def _configured_limits(shell: Any) -> SweepLimits:
    """The sweep's bounds as ``%config NsightMagic.sweep_max_configs`` / ``sweep_max_values``
    set them in this shell (the defaults where the extension is not loaded)."""
    registry = getattr(getattr(shell, "magics_manager", None), "registry", None) or {}
    magics = registry.get("NsightMagic")
    if magics is None:
        return SweepLimits()
    return SweepLimits(
        max_configs=int(getattr(magics, "sweep_max_configs", SweepLimits.max_configs)),
        max_values=int(getattr(magics, "sweep_max_values", SweepLimits.max_values)),
    )
