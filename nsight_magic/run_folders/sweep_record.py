"""``sweep.json``, typed: what one sweep ran (``SweepRecord``), written by ``run_dir.RunDir``.

A sweep folder holds one ordinary run folder per configuration (``<sweep>/<NN>-<label>/``, each
with its own meta.json and report) and this record: the swept variables in the order given,
and per configuration its values, its folder (relative to the sweep folder, never a path
outside it), its status and its error. It is rewritten after each configuration, so a sweep
that was stopped still says what ran. Values are kept as JSON literals (int, float, str, bool,
None); any other value (a ``torch.dtype`` passed to ``nsight_magic.sweep``) is kept as its
``repr``, which is what its label shows too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..errors import DamagedFolderError

SWEEP_SCHEMA_VERSION = 1
# pending: not run yet; ok: profiled; failed: the cell raised, ran out of memory or the run
# failed (``error`` says how); cancelled: not run, the sweep was stopped before it
ConfigStatus = Literal["pending", "ok", "failed", "cancelled"]
CONFIG_STATUSES: tuple[str, ...] = get_args(ConfigStatus)
_JSON_LITERALS = (bool, int, float, str, type(None))


def json_value(value: Any) -> Any:
    """``value`` as sweep.json keeps it: itself when JSON holds it as it is (a literal, or a
    list or a string-keyed dict of such), so that a loaded sweep finds a configuration by its
    value (``run(v=[1, 2])``); else its ``repr`` (a tuple, which JSON would make a list)."""
    return value if _json_as_is(value) else repr(value)


def _json_as_is(value: Any, depth: int = 0) -> bool:
    if type(value) in _JSON_LITERALS:
        return True
    if depth > 20:
        return False
    if type(value) is list:
        return all(_json_as_is(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(type(k) is str and _json_as_is(v, depth + 1) for k, v in value.items())
    return False


def canonical(value: Any) -> Any:
    """What tells two swept values apart: the value's type and its ``repr``, containers item by
    item, a dict whatever the order of its keys. Never the value's hash, nor ``==``: ``1``,
    ``1.0`` and ``True`` are equal (and hash alike) in Python yet three configurations of
    ``--sweep "x=[1, 1.0, True]"``; a list or dict (``--sweep "v=[[1, 2], [3]]"``) has no hash.
    The result is a tuple of strings: hashable, and equal only for values written alike."""
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, list | tuple):
        return (kind, *(canonical(item) for item in value))
    if isinstance(value, dict):
        items = sorted((canonical(k), canonical(v)) for k, v in value.items())
        return (kind, *items)
    try:
        shown = repr(value)
    except Exception:  # a value whose repr raises is known by its identity
        shown = f"<{kind} at {id(value):#x}>"
    return (kind, shown)


class ConfigKey(tuple[Any, ...]):
    """One configuration's key: its values in the order of the swept variables (a tuple, as
    ``sweep.runs`` and ``sweep.configs`` show it), compared and hashed by the values'
    ``canonical`` form, not by their own ``==`` and hash. So ``(1,)``, ``(1.0,)`` and ``(True,)``
    are three keys, and a key of lists (``([1, 2],)``) is one too. A plain tuple of hashable
    values finds its configuration in ``sweep.runs`` (``sweep.runs[(8, 2048)]``): the hash is
    the plain tuple's whenever it has one."""

    __slots__ = ()

    def __new__(cls, values: Iterable[Any] = ()) -> ConfigKey:
        return super().__new__(cls, values)

    @property
    def canonical(self) -> tuple[Any, ...]:
        return tuple(canonical(value) for value in self)

    def __hash__(self) -> int:
        try:
            return hash(tuple(self))
        except TypeError:  # a list or dict among the values: its written form's hash
            return hash(self.canonical)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple) or len(other) != len(self):
            return False
        return self.canonical == tuple(canonical(value) for value in other)

    def __ne__(self, other: object) -> bool:
        return not self == other


def config_label(values: Mapping[str, Any]) -> str:
    """``"bs=8 seq=2048"``: how a configuration is named in tables, progress and folders."""
    return " ".join(f"{name}={_shown(value)}" for name, value in values.items())


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


@dataclass
class ConfigRecord:
    """One configuration: its ``values`` (variable -> JSON literal), ``folder`` (its run
    folder's name inside the sweep folder, "" before it ran), ``status`` and ``error`` (the
    run's one line, or the cell's exception, when it failed)."""

    index: int
    values: dict[str, Any]
    folder: str = ""
    status: str = "pending"
    error: str | None = None
    wall_s: float | None = None  # the configuration's whole run: worker, capture, export, load

    @property
    def label(self) -> str:
        return config_label(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "values": dict(self.values), "folder": self.folder,
                "status": self.status, "error": self.error, "wall_s": self.wall_s}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigRecord:
        """One configuration of a sweep.json; an ``index`` that is no whole number >= 0 is a
        ``DamagedFolderError`` (it orders the configurations: nothing is guessed)."""
        values = data.get("values")
        status = data.get("status")
        wall = data.get("wall_s")
        index = data.get("index")
        if index is None:
            index = 0
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise DamagedFolderError(
                f"sweep.json: a configuration's index is {str(index)[:40]!r}, not a whole number "
                ">= 0; the sweep folder is damaged or was edited. Restore its sweep.json, or open "
                "a configuration's run folder itself with load_run."
            )
        return cls(
            index=index,
            values=dict(values) if isinstance(values, dict) else {},
            folder=str(data.get("folder") or ""),
            status=status if status in CONFIG_STATUSES else "failed",
            error=None if data.get("error") is None else str(data.get("error")),
            wall_s=float(wall) if isinstance(wall, int | float) else None,
        )


@dataclass
class SweepRecord:
    """A sweep: its ``name``, the swept ``variables`` (in the order given; the configurations
    are their cartesian product in that order), the profiler that ran each configuration and
    one ``ConfigRecord`` per configuration."""

    name: str
    variables: list[str]
    tool: str = "nsys"
    configs: list[ConfigRecord] = field(default_factory=list)
    started_utc: str | None = None
    finished_utc: str | None = None
    schema_version: int = SWEEP_SCHEMA_VERSION

    def counts(self) -> dict[str, int]:
        """How many configurations ended each way (status -> count, in the order first met)."""
        statuses = [c.status for c in self.configs]
        return {status: statuses.count(status) for status in dict.fromkeys(statuses)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "name": self.name,
            "tool": self.tool,
            "variables": list(self.variables),
            "started_utc": self.started_utc,
            "finished_utc": self.finished_utc,
            "configs": [c.to_dict() for c in self.configs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRecord:
        """The record of a sweep.json (what a reader that must refuse it checks first:
        ``is_sweep_record``)."""
        variables = data.get("variables")
        configs = data.get("configs")
        version = data.get("schema_version")
        return cls(
            name=str(data.get("name") or "sweep"),
            variables=[str(v) for v in variables] if isinstance(variables, list) else [],
            tool=str(data.get("tool") or "nsys"),
            configs=[ConfigRecord.from_dict(c) for c in configs or [] if isinstance(c, dict)],
            started_utc=data.get("started_utc") if isinstance(data.get("started_utc"), str)
            else None,
            finished_utc=data.get("finished_utc") if isinstance(data.get("finished_utc"), str)
            else None,
            schema_version=version if isinstance(version, int) else SWEEP_SCHEMA_VERSION,
        )  # fmt: skip


def is_sweep_record(data: Any) -> bool:
    """Whether ``data`` (sweep.json parsed) has the shape of a ``SweepRecord``."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("variables"), list)
        and isinstance(data.get("configs"), list)
    )
