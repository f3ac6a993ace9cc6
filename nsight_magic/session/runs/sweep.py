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
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import (
    BadArgumentError,
    CellFailedError,
    NsightMagicError,
    ProfileInterrupted,
    SweepFailedError,
)
from ...processes.progress import Progress
from ...results.sweep_run import SweepRun
from ...run_folders.run_dir import RunDir
from ...run_folders.sweep_record import (
    ConfigKey,
    ConfigRecord,
    SweepRecord,
    canonical,
    config_label,
    json_value,
)
from ...vocabulary.reserved_names import reserved_why
from ..backends import Backend
from ..run_context import now_utc
from ..spec import CellRequest, Notebook, Rerun, RunCallbacks, SweepLimits

# ``Backend`` is a Protocol the session's own backends and the tests' bare one implement
Profile = Callable[..., Any]  # SessionManager.profile


@dataclass(frozen=True)
class SweepSpec:
    """The swept variables in the order given, each with its values in the order given. A
    name that is no identifier, a name Python, IPython or the package gives meaning to
    (``__name__``, ``In``, ``_``: ``vocabulary.reserved_names``), a name swept twice, a
    variable without values or one value given twice is a ``BadArgumentError`` (a
    ``ValueError``) before anything runs; ``check`` bounds its size."""

    variables: tuple[tuple[str, tuple[Any, ...]], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.variables]
        if not names:
            raise BadArgumentError("a sweep needs at least one variable")
        for name, values in self.variables:
            if not isinstance(name, str) or not name.isidentifier():
                raise BadArgumentError(
                    f"--sweep: {name!r} is not a variable name; name each swept variable as "
                    "Python would, e.g. bs"
                )
            why = reserved_why(name)
            if why is not None:
                raise BadArgumentError(
                    f"--sweep: {name} cannot be swept: {why}; binding it would change what "
                    "later cells see. Sweep a name of your own (e.g. bs) and use it in the cell."
                )
            if not values:
                raise BadArgumentError(f"--sweep: {name} has no values")
            seen: set[Any] = set()
            for value in values:
                if canonical(value) in seen:
                    raise BadArgumentError(
                        f"--sweep: {name} gives the value {short_repr(value)} twice; each value is "
                        "one configuration"
                    )
                seen.add(canonical(value))
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise BadArgumentError(f"--sweep: {', '.join(repeated)} is swept twice")

    @classmethod
    def of(cls, values: Any) -> SweepSpec:
        """From ``{"bs": [1, 8], "seq": [512, 2048]}`` (``nsight_magic.sweep``'s values)."""
        if not isinstance(values, Mapping):
            raise BadArgumentError(
                f"sweep(): values is {short_repr(values)}; pass a dict of variable name -> list of "
                "values, e.g. {'bs': [1, 8, 32]}"
            )
        out = []
        for name, given in values.items():
            if not isinstance(name, str):
                raise BadArgumentError(
                    f"sweep(): the variable name {short_repr(name)} is not a string; name each "
                    "swept variable as Python would, e.g. {'bs': [1, 8, 32]}"
                )
            if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
                raise BadArgumentError(
                    f"sweep: {name}={short_repr(given)}; give the values as a list, e.g. "
                    f"{name}=[1, 8, 32]"
                )
            out.append((name, tuple(given)))
        return cls(tuple(out))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.variables)

    def count(self) -> int:
        """How many configurations: the product of the numbers of values (no list is built)."""
        return math.prod(len(values) for _, values in self.variables)

    def check(self, limits: SweepLimits) -> None:
        """Refuse a sweep over ``limits`` before anything is built or run: one
        ``BadArgumentError`` that says the product and which ``%config`` raises the bound."""
        values = sum(len(values) for _, values in self.variables)
        if values > limits.max_values:
            raise BadArgumentError(
                f"--sweep: {values:,} values given, over the bound of {limits.max_values:,} "
                "(%config NsightMagic.sweep_max_values); nothing ran. Sweep fewer values."
            )
        count = self.count()
        if count > limits.max_configs:
            sizes = " x ".join(f"{len(v)} {name}" for name, v in self.variables)
            raise BadArgumentError(
                f"--sweep: {sizes} are {count:,} configurations, over the bound of "
                f"{limits.max_configs:,} (%config NsightMagic.sweep_max_configs); nothing "
                "ran. Each configuration is one profiled run: sweep fewer values."
            )

    def configs(self) -> list[dict[str, Any]]:
        """Every combination, the first variable varying slowest (``itertools.product``): a
        list, so ``check`` it first (``run_sweep`` does)."""
        names = self.names
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(values for _, values in self.variables))
        ]


def short_repr(value: Any) -> str:
    try:
        shown = repr(value)
    except Exception:
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= 60 else shown[:57] + "..."


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
    limits: SweepLimits | None = None,
) -> SweepRun:
    """Profile ``request``'s cell once per configuration of ``spec`` with ``backend`` (its
    options apply to each), through ``profile`` (``SessionManager.profile``); returns the
    ``SweepRun``. ``callbacks.cancel``, once set, stops the sweep after the configuration
    that is running (the configurations left are "cancelled"). ``limits`` bound its size,
    checked before the folder is made. A sweep whose every configuration that ran failed
    raises ``SweepFailedError`` holding the ``SweepRun`` (the cell fails, as a failed profile's
    does); sweep.json never stays "pending": an error of ours or Python's while a
    configuration runs marks it failed and the rest cancelled before it goes on up."""
    spec.check(limits or SweepLimits())
    callbacks = callbacks or RunCallbacks()
    name = request.name if request.name != "cell" else "sweep"
    configs = spec.configs()
    folder = RunDir.create(request.runs_root, name)
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
    runs: dict[ConfigKey, Any] = {}
    stopped = interrupted = False
    try:
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
                                      keep_state=True,
                                      more_follow=i < len(configs) - 1)  # fmt: skip
            # no cancel of its own: a Cancel lets the configuration that runs finish
            each = RunCallbacks(progress=_progress_for(callbacks.progress, place),
                                output=callbacks.output)  # fmt: skip
            t0 = time.perf_counter()
            try:
                sweep_entry = {"index": i, "values": entry.values, "label": label}
                rerun = Rerun(run_dir=run_dir.path, meta={"sweep": sweep_entry})
                run = profile(one, backend, notebook=notebook, callbacks=each, rerun=rerun)
            except ProfileInterrupted as exc:  # Ctrl-C: this configuration, and the sweep, stop
                entry.status, entry.error = "failed", _error_line(exc)
                stopped = interrupted = True
            except NsightMagicError as exc:  # this configuration failed; the next one runs
                entry.status, entry.error = "failed", _error_line(exc)
            else:
                entry.status = "ok"
                run.bound_values = dict(values)  # what a drill-down into it binds again
                runs[ConfigKey(values.values())] = run
            entry.wall_s = time.perf_counter() - t0
            folder.write_sweep(record)
    except BaseException as exc:  # not ours to turn into a row: said in the record, raised on
        for entry in record.configs:
            if entry.status == "pending" and entry.folder:
                entry.status, entry.error = "failed", _unexpected_line(exc)
            elif entry.status == "pending":
                entry.status, entry.error = "cancelled", "the sweep stopped before it ran"
        raise
    finally:
        record.finished_utc = now_utc()
        folder.write_sweep(record)
    keys = [ConfigKey(values.values()) for values in configs]
    result = SweepRun(record, folder.path, runs, keys=keys)
    _fail_when_none_ran(result, interrupted)
    return result


def _unexpected_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"the sweep stopped: {type(exc).__name__}" + (f": {text[:200]}" if text else "")


def _fail_when_none_ran(result: SweepRun, interrupted: bool) -> None:
    """A sweep whose every configuration that ran failed fails its cell
    (``SweepFailedError``; Ctrl-C: ``ProfileInterrupted``), the ``SweepRun`` in ``run``: the
    magic shows it and keeps it in ``-o NAME`` and ``nsight_magic.last_run()``."""
    counts = result.record.counts()
    if counts.get("ok", 0) or not counts.get("failed", 0):
        return
    first = next(c for c in result.record.configs if c.status == "failed")
    where = f" Sweep folder: {result.run_dir}" if result.run_dir is not None else ""
    if interrupted:
        raise ProfileInterrupted(
            f"The sweep was interrupted (in {first.label}) before any configuration was "
            f"profiled.{where}",
            run=result,
        )
    raise SweepFailedError(
        f"Every configuration of the sweep failed ({counts['failed']} of "
        f"{len(result.record.configs)}); the first, {first.label}: {first.error}. Each one's "
        f"error is in its table(); its run folder keeps what it wrote.{where}",
        run=result,
    )
