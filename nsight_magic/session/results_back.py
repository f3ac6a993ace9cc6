"""What a profiled cell did comes back to the notebook, as if the cell had run there (issue 41).

After the run the notebook asked for (not a warm-up, a drill-down's re-run or a replay), the
worker sends back (``script/shared_objects.send_back``):

- the names the cell bound, and the names it read that it may have changed (the notebook's
  functions it calls count as part of its text: the names they read come back too), by value;
- objects the worker received from the notebook as references to them (one identity: the
  notebook's model stays the notebook's model; its CUDA memory is shared, so what the cell
  changed in place there is the notebook's already);
- every optimizer it received with its state (``opt.step()`` made or replaced it), received CPU
  tensors changed in place with their contents;
- CUDA tensors the worker allocated by IPC handle: the notebook copies each storage into its
  own memory (device to device) and the worker then maps that copy instead of its own
  (``adopt_back``): one copy on the GPU, the notebook's.

What cannot come back (it does not pickle, or is over ``auto_vars_max_bytes``) stays in that
worker, and one line says which. The notebook's namespace is then what the cell would have left,
so a worker started later receives it and no profiled cell is ever replayed.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..script import PreparedCell
from ..script.shared_objects import in_place, set_contents, set_optimizer_state
from ..vocabulary.notebook_names import is_ipython_own
from . import shared_state
from .replay import notebook_reads

# values whose identity is their meaning, not their state: never brought back by value
_NOT_STATE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _globals_read(fn: Any, user_ns: Mapping[str, Any], seen: set[int]) -> set[str]:
    """The notebook names a notebook function reads (its code's global names, nested code
    and the notebook functions it calls included)."""
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return set()
    seen.add(id(fn))
    names: set[str] = set()
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(n for n in code.co_names if n in user_ns)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in list(names):
        names |= _globals_read(user_ns[name], user_ns, seen)
    return names


def names_to_bring_back(cell: PreparedCell, user_ns: Mapping[str, Any]) -> list[str]:
    """What a cell's run may have bound or changed among the notebook's names: what it binds,
    what it reads, and what the notebook's functions it reads read, less what cannot carry
    state (modules, functions, classes it did not define) and IPython's own names."""
    seen: set[int] = set()
    # exec("..."): what it reaches cannot be read; every notebook name may have changed
    reached = set(notebook_reads(cell.names_read, user_ns))
    for name in cell.names_read:
        if name in user_ns:
            reached |= _globals_read(user_ns[name], user_ns, seen)
    # of what it read, only what can change in place (a number or a string cannot; the
    # notebook's tensors, modules and optimizers come back through their own ways)
    mutable = {n for n in reached if n in user_ns and _mutable(user_ns[n])}
    return sorted(n for n in set(cell.names_bound) | mutable if not is_ipython_own(n))


def _mutable(value: Any) -> bool:
    """A value a cell may change in place whose change ``_bind`` can put in place: a list,
    dict, set or bytearray, or an instance of a class the notebook defined (a ``Meter``, a
    ``Trainer``). Torch objects come back by reference, their state by ``send_back``; a
    library's object (a tokenizer, a model config) is left as the notebook has it: taking a
    copy's attributes would split what the notebook shares with it."""
    if isinstance(value, list | dict | set | bytearray):
        return True
    kind = type(value)
    return kind.__module__ == "__main__" and hasattr(value, "__dict__")


@dataclass
class Brought:
    """What came back: ``names`` bound in the notebook, ``cannot`` (name -> why it stayed in
    the worker), ``adopted`` [(token, notebook tensor)]: the worker's CUDA tensors now copied
    into the notebook's memory, ``touched``: notebook objects the worker's state updated,
    ``resend``: names the cell read whose worker value the notebook could not take (sent
    again to the worker when a cell reads them)."""

    names: list[str] = field(default_factory=list)
    cannot: dict[str, str] = field(default_factory=dict)
    adopted: list[tuple[int, Any]] = field(default_factory=list)
    touched: list[Any] = field(default_factory=list)
    resend: list[str] = field(default_factory=list)

    def note(self, tool: str) -> str:
        """One line for the cell's output when something stayed in the worker ("" if not)."""
        if not self.cannot:
            return ""
        held = "; ".join(f"{n}: {why}" for n, why in sorted(self.cannot.items()))
        return (f"not brought back to the notebook (they stay in the {tool} worker, where later "
                f"cells there see them): {held}")  # fmt: skip


class _BackUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, objects: Mapping[int, Any], brought: dict[int, Any]) -> None:
        super().__init__(file)
        self.objects = objects
        self.brought = brought  # token -> the rebuilt (mapped) tensor, shared across pickles
        self.optimizers: list[tuple[Any, Any, Any]] = []

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[0]
        if kind in ("ref", "opt"):
            obj = self.objects.get(pid[1])
            if obj is None:
                raise pickle.UnpicklingError(
                    f"the worker referred to notebook object {pid[1]}, which the notebook no "
                    "longer has"
                )
            if kind == "opt":
                self.optimizers.append((obj, pid[2], pid[3]))
            return obj
        if kind == "cuda":
            token, rebuild, args = pid[1], pid[2], pid[3]
            if token not in self.brought:
                self.brought[token] = rebuild(*args)
            return self.brought[token]
        raise pickle.UnpicklingError(f"unknown reference {kind!r} from the worker")


def _own_copies(mapped: Mapping[int, Any]) -> list[tuple[int, Any]]:
    """The worker's tensors (mapped) copied into the notebook's memory, storage by storage
    (views of one storage stay views of one copy), device to device."""
    torch = sys.modules["torch"]
    copies: dict[int, Any] = {}
    out = []
    with torch.no_grad():
        for token, tensor in mapped.items():
            storage = tensor.untyped_storage()
            own = copies.get(storage.data_ptr())
            if own is None:
                own = torch.empty(storage.nbytes(), dtype=torch.uint8,
                                  device=tensor.device).untyped_storage()  # fmt: skip
                own.copy_(storage)
                copies[storage.data_ptr()] = own
            tensor.set_(own, tensor.storage_offset(), tensor.size(), tensor.stride())
            out.append((token, tensor))
    if copies:
        torch.cuda.synchronize()
    return out


def _bind(user_ns: MutableMapping[str, Any], name: str, value: Any, bound: bool) -> bool:
    """What came back under ``name``: the notebook's object under that name takes its
    contents in place when it can (a list, a dict, a set, a plain object: other references
    to it see the change, as they would had the cell run there); else the cell's own binding
    (``bound``) rebinds the name, and a name it only read keeps its object. Whether the
    notebook now holds what the worker has."""
    if name in user_ns:
        old = user_ns[name]
        if old is value or (_mutable(old) and in_place(old, value) is old):
            return True
    if bound:
        user_ns[name] = value
    return bound


def bring_back(
    blob: bytes,
    user_ns: MutableMapping[str, Any],
    sent: shared_state.SentObjects,
    cannot: Mapping[str, str],
    bound: Collection[str] = (),
) -> Brought:
    """Apply what the worker sent back (``send_back``'s file) to the notebook; ``bound``: the
    names the cell binds (the others it only read: never rebound)."""
    outer = pickle.loads(blob)
    objects = sent.by_key()
    mapped: dict[int, Any] = {}
    out = Brought(cannot=dict(cannot))
    values: dict[str, Any] = {}
    optimizers: list[tuple[Any, Any, Any]] = []
    for name, data in outer["names"].items():
        loader = _BackUnpickler(io.BytesIO(data), objects, mapped)
        try:
            values[name] = loader.load()
        except Exception as exc:  # a class the notebook cannot import, a dead reference
            out.cannot[name] = f"could not be loaded in the notebook ({exc})"
            continue
        optimizers += loader.optimizers
    extra = _BackUnpickler(io.BytesIO(outer["extra"]), objects, mapped)
    changed, _all_optimizers = extra.load()
    optimizers += extra.optimizers
    if mapped:
        out.adopted = _own_copies(mapped)
    torch = sys.modules.get("torch")
    for key, contents in changed:
        target = objects.get(key)
        if target is not None and torch is not None:
            set_contents(target, contents)
            out.touched.append(target)
    for opt, state, groups in optimizers:
        set_optimizer_state(opt, state, groups)
        out.touched.append(opt)
    for name, value in values.items():
        if _bind(user_ns, name, value, name in bound):
            out.names.append(name)
        else:  # read, and not the type the notebook holds: the notebook's value is sent again
            out.resend.append(name)
    return out


def adoption_blob(brought: Brought, sent: shared_state.SentObjects) -> shared_state.Packed:
    """What ``adopt_back`` loads: [(token, the notebook's copy)] by IPC handle (the copies
    join what the worker was sent, by key)."""
    buf = io.BytesIO()
    pickler = shared_state.make_pickler(buf, sent)
    pickler.dump((brought.adopted, pickler.new, [], []))
    return shared_state.Packed(buf.getvalue(), list(pickler.new))


def settle(
    brought: Brought, sent: shared_state.SentObjects, shipped: dict[str, Any],
    user_ns: Mapping[str, Any], packed: shared_state.Packed | None,
) -> None:  # fmt: skip
    """The worker's values equal the notebook's now: the names brought back count as sent
    (a later change in the notebook sends them again), the objects whose state came back are
    current, and the adopted copies are the worker's by key."""
    if packed is not None:
        sent.commit(packed.new)
    sent.refresh(_unique(brought.touched))
    sent.mark_current()
    for name in brought.names:
        shipped[name] = shared_state.object_fingerprint(user_ns[name])
    for name in brought.resend:  # no fingerprint matches: the next cell that reads it sends it
        shipped[name] = ()


def _unique(objects: Iterable[Any]) -> list[Any]:
    return list({id(o): o for o in objects}.values())
