"""Notebook variables into the profiled process: ``--vars a,b``, and automatically the names a
cell reads that the worker lacks but the notebook has.

One pickle file (``vars.pkl`` in the run folder) maps name -> (kind, blob). Torch tensors and
modules go through ``torch.save`` (dtype and device kept: a cuda tensor loads back on cuda);
everything else through cloudpickle, which also carries classes and functions defined in the
notebook, and modules by name (an ``import`` in the notebook reaches the worker as an import).
The script's loader needs only pickle, plus torch for torch entries.

Automatic shipping is bounded by a size limit (``%config NsightMagic.auto_vars_max_bytes``): a
large model belongs in a ``%%nsight_setup`` cell that the worker runs itself. A name the worker
defined itself (a setup cell, an earlier profiled cell) is never overwritten from the notebook.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MissingVariableError, NsightMagicError, UnpicklableVariableError
from ..processes import deadline
from ..vocabulary.notebook_names import is_ipython_own
from .spec import Notebook

DEFAULT_AUTO_MAX_BYTES = 256 << 20
# a cell that calls these runs text its own does not show: what it reads cannot be read from
# it (a fresh process then gets every notebook name that goes); ``'x' in globals()`` only looks
HIDDEN_TEXT = frozenset({"exec", "eval"})


def notebook_reads(reads: frozenset[str], user_ns: Mapping[str, Any]) -> frozenset[str]:
    """The notebook names a fresh process's cell may read (a fresh run gets by value only what
    it reads: it is a fallback whose results stay there): ``reads``, and every name but
    Python's own ``__``-names when the cell runs text its own does not show (``HIDDEN_TEXT``)."""
    if not reads & HIDDEN_TEXT:
        return reads
    return reads | {n for n in user_ns if not n.startswith("__")}


def parse_names(spec: str | Iterable[str]) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (order kept, duplicates dropped)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (s.strip() for s in items):
        if item and item not in names:
            if not item.isidentifier():
                raise NsightMagicError(f"--vars: {item!r} is not a variable name.")
            names.append(item)
    return names


def _is_torch(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    if not (mod.startswith("torch") or _is_module(obj)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.Tensor | torch.nn.Module)


def _is_module(obj: Any) -> bool:
    # a notebook-defined nn.Module subclass lives in __main__, not torch.*
    return any(
        c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module"
        for c in type(obj).__mro__
    )


def serialize(name: str, obj: Any) -> tuple[str, bytes]:
    """(kind, blob) for one variable; UnpicklableVariableError naming it when it cannot go,
    the bound's error when its pickling takes longer than ``deadline.PICKLE_S`` or what is
    left of --timeout."""
    import cloudpickle

    with deadline.bounded_here(f"pickling {name!r}", deadline.PICKLE_S, deadline.SLOW_PICKLE):
        try:
            if _is_torch(obj):
                import torch

                buf = io.BytesIO()
                # cloudpickle as the pickler: notebook-defined module classes go by value
                torch.save(obj, buf, pickle_module=cloudpickle)
                return "torch", buf.getvalue()
            return "pickle", cloudpickle.dumps(obj)
        except Exception as exc:
            raise UnpicklableVariableError(
                f"--vars: variable {name!r} ({type(obj).__name__}) cannot be pickled ({exc}). "
                f"Create it in a %%nsight_setup cell instead, so the profiled script builds "
                f"it itself."
            ) from exc


def serialize_explicit(
    names: Iterable[str], user_ns: Mapping[str, Any]
) -> dict[str, tuple[str, bytes]]:
    """``--vars``: each named variable serialized, or the error naming it (before anything
    starts, so a mistake leaves nothing behind)."""
    entries: dict[str, tuple[str, bytes]] = {}
    for name in names:
        if name not in user_ns:
            raise NsightMagicError(f"--vars: {name!r} is not defined in the notebook.")
        entries[name] = serialize(name, user_ns[name])
    return entries


def serialize_values(values: Mapping[str, Any]) -> dict[str, tuple[str, bytes]]:
    """Values bound for one run (a sweep's configuration), serialized as ``--vars`` are: the
    error naming the one that cannot go, before anything starts."""
    entries: dict[str, tuple[str, bytes]] = {}
    for name, value in values.items():
        if not name.isidentifier():
            raise NsightMagicError(f"--sweep: {name!r} is not a variable name.")
        entries[name] = serialize(name, value)
    return entries


def pack_vars(names: Iterable[str], user_ns: Mapping[str, Any]) -> bytes:
    """Serialize the named variables of ``user_ns`` into one blob (nothing written yet, so a
    failure leaves no run folder behind)."""
    entries: dict[str, tuple[str, bytes]] = {}
    for name in names:
        if name not in user_ns:
            raise NsightMagicError(f"--vars: {name!r} is not defined in the notebook.")
        entries[name] = serialize(name, user_ns[name])
    return pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)


def load_vars(path: str | Path) -> dict[str, Any]:
    """What the script does, for checking a vars file from Python."""
    with open(path, "rb") as f:
        entries = pickle.load(f)
    out: dict[str, Any] = {}
    for name, (kind, blob) in entries.items():
        if kind == "torch":
            import torch

            out[name] = torch.load(io.BytesIO(blob), weights_only=False)
        else:
            out[name] = pickle.loads(blob)
    return out


def estimated_bytes(obj: Any) -> int | None:
    """Size without serializing when it is cheap to know (tensors, modules, arrays, and lists,
    tuples, sets and dicts of them: the sizes found, each tensor's memory once, a lower bound
    when some items have none). A list of a large model's tensors was pickled whole before
    its size was known: a fresh run sat in it until its timeout (benchmarks/README.md, design
    measurements)."""
    if isinstance(obj, list | tuple | set | frozenset | dict):
        return _container_bytes(obj)
    if _is_torch(obj):
        import torch

        if isinstance(obj, torch.Tensor):
            return int(obj.numel() * obj.element_size())
        return sum(int(t.numel() * t.element_size()) for t in (*obj.parameters(), *obj.buffers()))
    nbytes = getattr(obj, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else None


CONTAINER_ITEMS = 100_000  # items of a container (and of those inside it) looked at, at most
CONTAINER_DEPTH = 3


def _container_bytes(obj: Any) -> int | None:
    """The bytes of the tensors, modules and arrays a container holds (``estimated_bytes``),
    a tensor's memory counted once however many items show it (a model's parameters listed
    twice, views); None when it holds none of them."""
    seen: set[tuple[str, int]] = set()
    total, found, budget = 0, False, CONTAINER_ITEMS

    def tensor_bytes(t: Any) -> int:
        try:
            storage = t.untyped_storage()
            key = (str(t.device), int(storage.data_ptr()))
            size = int(storage.nbytes())
        except Exception:  # no storage to tell (a meta or sparse tensor): its own size
            return int(t.numel() * t.element_size())
        if key in seen:
            return 0
        seen.add(key)
        return size

    def visit(item: Any, depth: int) -> None:
        nonlocal total, found, budget
        if budget <= 0:
            return
        budget -= 1
        if isinstance(item, list | tuple | set | frozenset | dict):
            if depth < CONTAINER_DEPTH:
                for inner in item.values() if isinstance(item, dict) else item:
                    visit(inner, depth + 1)
            return
        if _is_torch(item):
            import torch

            tensors = [item] if isinstance(item, torch.Tensor) else [*item.parameters(),
                                                                      *item.buffers()]  # fmt: skip
            total += sum(tensor_bytes(t) for t in tensors)
            found = True
            return
        size = estimated_bytes(item)  # an array's nbytes (neither a container nor torch here)
        if size is not None:
            total += size
            found = True

    visit(obj, 0)
    return total if found else None


def human_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


@dataclass
class ShippingPlan:
    """``entries``: name -> (kind, blob) to send; ``held_back``: name -> why it was not sent."""

    entries: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    held_back: dict[str, str] = field(default_factory=dict)

    def blob(self) -> bytes | None:
        if not self.entries:
            return None
        return pickle.dumps(self.entries, protocol=pickle.HIGHEST_PROTOCOL)

    def check(self) -> None:
        """MissingVariableError naming every variable the cell reads but cannot get."""
        if not self.held_back:
            return
        lines = [f"  {name}: {why}" for name, why in sorted(self.held_back.items())]
        names = ",".join(sorted(self.held_back))
        raise MissingVariableError(
            "The cell reads notebook variables the profiling worker does not have:\n"
            + "\n".join(lines)
            + f"\nFix: pass --vars {names} to send them anyway, or create them in a "
            "%%nsight_setup cell so the worker builds them itself.",
            names=sorted(self.held_back),
        )


def plan_by_value(
    notebook: Notebook,
    reads: Collection[str],
    *,
    worker_names: Collection[str] = (),
    explicit: Mapping[str, tuple[str, bytes]] | None = None,
) -> ShippingPlan:
    """``plan_shipping`` for a fresh process, which gets the notebook's names by value only
    (vars.pkl): ``reads`` when the notebook ships names automatically, under its size limit;
    ``worker_names``: what the process's own history defines. A cell whose text hides what it
    reads (``exec("loss = train_step()")``) gets every notebook name that goes; one it does
    not name and that cannot go is left out, not an error."""
    reads = frozenset(reads)
    wanted = notebook_reads(reads, notebook.user_ns) if notebook.auto_vars else frozenset()
    plan = plan_shipping(wanted, notebook.user_ns, hidden=notebook.hidden,
                         worker_names=worker_names, explicit=explicit,
                         max_bytes=notebook.auto_vars_max_bytes)  # fmt: skip
    if wanted != reads:  # the text hides what it reads: what it names must go, the rest may
        plan.held_back = {n: why for n, why in plan.held_back.items() if n in reads}
    return plan


def plan_shipping(
    reads: Collection[str],
    user_ns: Mapping[str, Any],
    *,
    hidden: Collection[str] = (),
    worker_names: Collection[str] = (),
    explicit: Mapping[str, tuple[str, bytes]] | None = None,
    max_bytes: int = DEFAULT_AUTO_MAX_BYTES,
) -> ShippingPlan:
    """What to send by value for one cell (a fresh process's ``vars.pkl``, a warm worker's
    ``--vars``; a warm worker's other names go by ``state/exchange.py``, which keeps what it sent).
    ``explicit`` (``--vars``, already serialized by ``serialize_explicit`` before anything
    started) always goes, whatever its size; other names the cell ``reads`` go when the
    notebook has them (not IPython's own ``hidden`` names), the process's own history does not
    define them (``worker_names``), and they serialize to at most ``max_bytes``."""
    plan = ShippingPlan()
    explicit = dict(explicit or {})
    plan.entries.update(explicit)
    for name in sorted(set(reads) - set(explicit)):
        if name not in user_ns or name in hidden or is_ipython_own(name):
            continue
        obj = user_ns[name]
        if name in worker_names:
            continue  # the process builds its own value
        size = estimated_bytes(obj)
        if size is not None and size > max_bytes:
            plan.held_back[name] = _too_big(obj, size, max_bytes)
            continue
        try:
            kind, blob = serialize(name, obj)
        except UnpicklableVariableError as exc:
            plan.held_back[name] = f"{type(obj).__name__} cannot be pickled ({exc.__cause__})"
            continue
        if len(blob) > max_bytes:
            plan.held_back[name] = _too_big(obj, len(blob), max_bytes)
            continue
        plan.entries[name] = (kind, blob)
    return plan


def _too_big(obj: Any, size: int, limit: int) -> str:
    return (
        f"{type(obj).__name__} of {human_bytes(size)}, over auto_vars_max_bytes "
        f"({human_bytes(limit)})"
    )
