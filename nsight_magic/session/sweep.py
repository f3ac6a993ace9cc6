"""A sweep: one profiled cell run once per configuration (``%%nsys --sweep bs=1,8,32``,
``nsight_magic.sweep``), each an ordinary profiled run of its own, never one profile around the
whole sweep ("one report per config").

The configurations are the cartesian product of the swept values, in the order given. Each runs
through the session's ``profile`` like any cell, with its values bound before the cell by value
(``CellRequest.bind``: vars.pkl, as ``--vars``) and ``keep_state``: it starts from the notebook's
state and leaves it as it was (what a drill-down's re-run keeps), so nothing comes back to the
notebook but the ``SweepRun``. Its run folder lies inside the sweep's folder, beside
``sweep.json`` (``run_folders/sweep_record.py``), rewritten after each configuration. A
configuration that fails (the cell raised, ran out of memory, the run failed) is a row with its
error and the next one runs; a Cancel stops after the current one; Ctrl-C stops the current one
and the sweep with it.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CellFailedError, NsightMagicError, ProfileInterrupted
from ..processes.progress import Progress
from ..results.sweep_run import SweepRun
from ..run_folders.run_dir import RunDir
from ..run_folders.sweep_record import ConfigRecord, SweepRecord, config_label, json_value
from .backends import Backend
from .pipeline import now_utc
from .spec import CellRequest, Notebook, RunCallbacks

# ``Backend`` is a Protocol the session's own backends and the tests' bare one implement
Profile = Callable[..., Any]  # SessionManager.profile


@dataclass(frozen=True)
class SweepSpec:
    """The swept variables in the order given, each with its values in the order given."""

    variables: tuple[tuple[str, tuple[Any, ...]], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.variables]
        if not names:
            raise ValueError("a sweep needs at least one variable")
        for name, values in self.variables:
            if not name.isidentifier():
                raise ValueError(f"--sweep: {name!r} is not a variable name")
            if not values:
                raise ValueError(f"--sweep: {name} has no values")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"--sweep: {', '.join(repeated)} is swept twice")

    @classmethod
    def of(cls, values: Mapping[str, Iterable[Any]]) -> SweepSpec:
        """From ``{"bs": [1, 8], "seq": [512, 2048]}`` (``nsight_magic.sweep``'s keywords)."""
        out = []
        for name, given in values.items():
            if isinstance(given, str | bytes) or not isinstance(given, Iterable):
                raise ValueError(
                    f"sweep: {name}={given!r}; give the values as a list, e.g. {name}=[1, 8, 32]"
                )
            out.append((name, tuple(given)))
        return cls(tuple(out))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.variables)

    def configs(self) -> list[dict[str, Any]]:
        """Every combination, the first variable varying slowest (``itertools.product``)."""
        names = self.names
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(values for _, values in self.variables))
        ]


def parse_sweep_option(text: str) -> tuple[str, tuple[Any, ...]]:
    """``NAME=V1,V2,...`` or ``NAME=[1, 8, 32]`` (a Python literal list or tuple, read with
    ``ast.literal_eval``, never ``eval``). Each comma-separated value is a Python literal
    when it reads as one (``8``, ``0.5``, ``'a'``, ``True``), else the text itself (``relu``).
    A ValueError says what is wrong."""
    name, sep, rest = text.partition("=")
    name, rest = name.strip(), rest.strip()
    if not sep or not name:
        raise ValueError(f"--sweep {text!r}: write NAME=V1,V2,... or NAME=[V1, V2]")
    if not name.isidentifier():
        raise ValueError(f"--sweep {text!r}: {name!r} is not a variable name")
    if rest.startswith(("[", "(")):
        try:
            values = ast.literal_eval(rest)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            raise ValueError(
                f"--sweep {text!r}: {rest!r} is not a Python literal list (only literals: "
                "numbers, strings, True/False/None)"
            ) from None
        if not isinstance(values, list | tuple):
            raise ValueError(f"--sweep {text!r}: {rest!r} is not a list")
        found = tuple(values)
    else:
        found = tuple(_literal_or_text(item.strip()) for item in rest.split(",") if item.strip())
    if not found:
        raise ValueError(f"--sweep {text!r}: {name} has no values")
    return name, found


def _literal_or_text(item: str) -> Any:
    try:
        value = ast.literal_eval(item)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return item
    # a container written without brackets ("1,2" was split already) stays its text
    return value if isinstance(value, int | float | str | bool | type(None)) else item


def _error_line(exc: NsightMagicError) -> str:
    """A failed configuration's row: the cell's own exception when it raised (its first
    line: ``The profiled cell raised RuntimeError: CUDA out of memory ...``), else the run's
    typed error in one line."""
    if isinstance(exc, CellFailedError):
        return str(exc).splitlines()[0] if str(exc) else f"the cell raised {exc.exc_type}"
    return exc.one_line().splitlines()[0]


def _progress_for(
    progress: Callable[[Progress], None] | None, place: str
) -> Callable[[Progress], None] | None:
    """The run's progress line prefixed with ``config 3 of 9: bs=8 seq=2048``."""
    if progress is None:
        return None

    def say(state: Progress) -> None:
        detail = f"{place} - {state.detail}" if state.detail else place
        progress(dataclasses.replace(state, detail=detail))

    return say


def run_sweep(
    profile: Profile,
    request: CellRequest,
    backend: Backend,
    spec: SweepSpec,
    *,
    notebook: Notebook | None = None,
    callbacks: RunCallbacks | None = None,
) -> SweepRun:
    """Profile ``request``'s cell once per configuration of ``spec`` with ``backend`` (its
    options apply to each), through ``profile`` (``SessionManager.profile``); returns the
    ``SweepRun``. ``callbacks.cancel``, once set, stops the sweep after the configuration
    that is running (the configurations left are "cancelled")."""
    callbacks = callbacks or RunCallbacks()
    name = request.name if request.name != "cell" else "sweep"
    folder = RunDir.create(request.runs_root, name)
    configs = spec.configs()
    record = SweepRecord(
        name=name,
        variables=list(spec.names),
        tool=backend.tool,
        configs=[
            ConfigRecord(index=i, values={k: json_value(v) for k, v in values.items()})
            for i, values in enumerate(configs)
        ],
        started_utc=now_utc(),
    )
    folder.write_sweep(record)
    runs: dict[tuple[Any, ...], Any] = {}
    stopped = False
    for i, values in enumerate(configs):
        entry = record.configs[i]
        if stopped or (callbacks.cancel is not None and callbacks.cancel.is_set()):
            stopped = True
            entry.status, entry.error = "cancelled", "the sweep was stopped before it ran"
            continue
        label = config_label(values)
        place = f"config {i + 1} of {len(configs)}: {label}"
        if callbacks.output is not None:
            callbacks.output(f"nsight_magic: {place}")
        run_dir = folder.new_config(i + 1, label)
        entry.folder = run_dir.path.name
        folder.write_sweep(record)
        one = dataclasses.replace(request, name=f"{name}[{label}]", bind=dict(values),
                                  keep_state=True, more_follow=i < len(configs) - 1)  # fmt: skip
        # no cancel of its own: a Cancel lets the configuration that runs finish
        each = RunCallbacks(progress=_progress_for(callbacks.progress, place),
                            output=callbacks.output)  # fmt: skip
        t0 = time.perf_counter()
        try:
            run = profile(one, backend, notebook=notebook, callbacks=each, run_dir=run_dir.path,
                          meta={"sweep": {"index": i, "values": entry.values,
                                          "label": label}})  # fmt: skip
        except ProfileInterrupted as exc:  # Ctrl-C: this configuration, and the sweep, stop
            entry.status, entry.error = "failed", _error_line(exc)
            stopped = True
        except NsightMagicError as exc:  # this configuration failed; the next one runs
            entry.status, entry.error = "failed", _error_line(exc)
        else:
            entry.status = "ok"
            run.bound_values = dict(values)  # what a drill-down into it binds again
            runs[tuple(values.values())] = run
        entry.wall_s = time.perf_counter() - t0
        folder.write_sweep(record)
    record.finished_utc = now_utc()
    folder.write_sweep(record)
    keys = [tuple(values.values()) for values in configs]
    return SweepRun(record, folder.path, runs, keys=keys)


def sweep(
    cell: str,
    values: Mapping[str, Iterable[Any]],
    *,
    name: str = "sweep",
    warmup: int = 0,
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
    the configuration that runs. Returns the ``SweepRun``."""
    from pathlib import Path

    from ..errors import BadArgumentError
    from ..profilers.nsys import NsysOptions
    from .backends import NsysBackend
    from .manager import MANAGER

    try:
        spec = SweepSpec.of(values)
        options = NsysOptions(**nsys)
    except (TypeError, ValueError) as exc:
        raise BadArgumentError(f"sweep(): {exc}") from None
    notebook = Notebook()
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
    request = CellRequest(cell=cell, name=name, warmup=warmup, timeout=timeout, fresh=fresh,
                          runs_root=Path(runs_root) if runs_root else None)  # fmt: skip
    callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
    return MANAGER.sweep(request, NsysBackend(options), spec, notebook=notebook,
                         callbacks=callbacks)  # fmt: skip
