"""The worker's side of the notebook's shared GPU memory: keep a re-run from changing it twice.

What the worker received from the notebook is ``shared_state/worker_side.py``'s (its table of
received objects is ``ns[TABLE]``: key -> object; the notebook's CUDA storages it maps are
recorded in ``ns[MAPPED]``).

``preserved(ns, names)`` is for a run whose effects the notebook already has: a drill-down's
re-run of a cell, its warm-up runs, a replay of an earlier profiled cell into a new worker. All
the CUDA memory this worker maps, its CPU tensors and the received objects' Python-side state
(optimizer state, modules' flags) are saved before and put back after, whatever the cell's text
hides in a call, so an optimizer step is applied to the notebook's model once, by the run that
the notebook asked for.

A real module pasted into the script by ``build_script`` before the runtime. Standard library
only at import time; torch is imported by pickle (the handles' rebuild functions) or when a
worker has shared CUDA memory to keep.
"""

import contextlib
import functools
import pickle
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# --- module only: the script pastes cuda_save.py before this module ---
from .cuda_save import _save_cuda

# --- end module only ---

TABLE = "__nsight_magic_shared__"  # the worker's received objects, by key
MAPPED = "__nsight_magic_mapped__"  # data pointers of the notebook's storages it opened
WALK_DEPTH = 4  # how deep preserved() looks through plain objects for tensors


def _cuda_storages(obj: Any, out: dict[int, Any], depth: int, seen: set[int]) -> None:
    """CUDA storages reachable from ``obj`` (tensors, modules, optimizers, containers and
    plain objects' attributes, ``depth`` levels deep), by data pointer."""
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            storage = obj.untyped_storage()
            out.setdefault(storage.data_ptr(), storage)
        return
    if isinstance(obj, torch.nn.Module):
        for t in (*obj.parameters(), *obj.buffers()):
            _cuda_storages(t, out, depth, seen)
        return
    if isinstance(obj, torch.optim.Optimizer):
        for group in obj.param_groups:
            for p in group["params"]:
                _cuda_storages(p, out, depth, seen)
        for state in obj.state.values():
            _cuda_storages(state, out, depth, seen)
        return
    items: Any = ()
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, list | tuple | set | frozenset):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, type | types.ModuleType):
        # not a module's globals: a notebook's ``import torch`` led into torch.distributed,
        # whose deprecated names warn when looked at
        items = vars(obj).values()
    for item in items:
        _cuda_storages(item, out, depth - 1, seen)


def storages_of(objects: Iterable[Any]) -> dict[int, Any]:
    """The CUDA storages reachable from ``objects`` (``_cuda_storages``), by data pointer."""
    out: dict[int, Any] = {}
    _cuda_storages(list(objects), out, WALK_DEPTH, set())
    return out


def module_buffers(objects: Iterable[Any]) -> list[Any]:
    """The buffers of the modules among ``objects``: what a re-run keeps whatever the cell's
    text names (a forward in training mode updates batch-norm statistics)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    return [b for obj in objects if isinstance(obj, torch.nn.Module) for b in obj.buffers()]


def shared_storages(ns: dict[str, Any]) -> dict[int, Any]:
    """The CUDA storages of what this worker received (the notebook's, mapped, and what its
    cells allocated into those objects since), by data pointer."""
    return storages_of(ns.get(TABLE, {}).values())


def mapped_storages(ns: dict[str, Any]) -> dict[int, Any]:
    """The notebook's CUDA memory this worker maps (opened by IPC handle), by data pointer."""
    mapped = ns.get(MAPPED, set())
    return {ptr: s for ptr, s in shared_storages(ns).items() if ptr in mapped}


def mapped_bytes(ns: dict[str, Any]) -> int:
    return sum(int(s.nbytes()) for s in mapped_storages(ns).values())


def mapped_segments(ns: dict[str, Any]) -> list[list[int]]:
    """``[device, data pointer, bytes]`` of each notebook storage this worker maps: nsys records
    a mapping as device memory of the process that opens it, so the run's memory summary
    tells the notebook's memory from the worker's own by these (a worker mapping a 43 GB
    training state showed a 63.2 GB start, issue 41)."""
    return [[int(s.device.index or 0), int(ptr), int(s.nbytes())]
            for ptr, s in sorted(mapped_storages(ns).items())]  # fmt: skip


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _tracked_tensors(torch: Any, table: dict[Any, Any]) -> list[Any]:
    """Every tensor the table's objects hold: plain tensors, modules' parameters, buffers and
    gradients, optimizers' state and tensor hyper-parameters."""
    out: list[Any] = []
    for obj in table.values():
        if isinstance(obj, torch.Tensor):
            out.append(obj)
        elif isinstance(obj, torch.nn.Module):
            out += [*obj.parameters(), *obj.buffers()]
        elif isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                out += [v for v in group.values() if isinstance(v, torch.Tensor)]
                out += group["params"]
            for state in obj.state.values():
                out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    # gradients are the worker's own memory, yet part of what a re-run changes
    out += [t.grad for t in out if t.is_leaf and t.grad is not None]
    return out


def _storages(tensors: list[Any], cuda: bool) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for t in tensors:
        if t.is_cuda == cuda and (cuda or t.device.type == "cpu"):
            storage = t.untyped_storage()
            if storage.nbytes():
                out.setdefault(storage.data_ptr(), storage)
    return out


def _saved_python_state(
    torch: Any, table: dict[Any, Any], tensors: list[Any]
) -> Callable[[], None]:
    """Snapshot what a re-run changes in the table's objects besides their tensors' bytes;
    returns what puts it back. Optimizers: their state mapping (entries a re-run adds are
    dropped, each entry's dict as it was) and ``param_groups``' values but the parameters;
    modules and their submodules: plain attribute values (``training``) and which tensors and
    submodules they hold; every tensor: its ``grad`` (shallow copies, nothing deep-copied)."""
    undo: list[Callable[[], None]] = []

    def keep_dict(d: dict[Any, Any], owner: Any = None, attr: str = "") -> None:
        """``d``'s items as they are now, back in the same dict (and that dict back in
        ``owner.attr``: a re-run may rebind it, as ``load_state_dict`` does)."""
        items = dict(d)

        def back() -> None:
            d.clear()
            d.update(items)
            if owner is not None:
                owner.__dict__[attr] = d

        undo.append(back)

    def keep_plain(obj: Any) -> None:
        plain = {k: v for k, v in vars(obj).items() if type(v) in _PLAIN}
        undo.append(lambda: obj.__dict__.update(plain))

    for obj in table.values():
        if isinstance(obj, torch.nn.Module):
            for m in obj.modules():
                keep_plain(m)
                for attr in ("_parameters", "_buffers", "_modules"):
                    keep_dict(getattr(m, attr), m, attr)
        elif isinstance(obj, torch.optim.Optimizer):
            keep_plain(obj)
            for inner in obj.state.values():
                keep_dict(inner)
            keep_dict(obj.state, obj, "state")
            groups = obj.param_groups
            listed = list(groups)
            for group in listed:
                values = dict(group)  # in its order; its "params" stay what they are then

                def back(group: dict[str, Any] = group, values: dict[str, Any] = values) -> None:
                    params = group["params"]
                    group.clear()
                    group.update(values)
                    group["params"] = params

                undo.append(back)

            def back_groups(
                opt: Any = obj, groups: list[Any] = groups, listed: list[Any] = listed
            ) -> None:
                groups[:] = listed
                opt.__dict__["param_groups"] = groups

            undo.append(back_groups)
    grads = [(t, t.grad) for t in tensors if t.is_leaf and t.requires_grad]

    def back_grads() -> None:
        for t, grad in grads:
            t.grad = grad

    undo.append(back_grads)

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore


def named_objects(ns: dict[str, Any], names: Iterable[str]) -> list[Any]:
    """The objects the notebook's ``names`` are in this worker: bound in ``ns``, else in the
    globals of a function it received (cloudpickle sends a notebook function with the globals
    its code reads in a dict of its own: ``train_step()``'s optimizer need not be bound here),
    through the functions and classes those globals hold in turn. A name found nowhere is not
    in this worker: no run here can change it."""
    found, missing = [], set()
    for name in names:
        if name in ns:
            found.append(ns[name])
        else:
            missing.add(name)
    todo = [v for v in (*ns.values(), *ns.get(TABLE, {}).values()) if _has_code(v)]
    seen: set[int] = set()
    while todo and missing:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        functions = list(vars(item).values()) if isinstance(item, type) else [item]
        for fn in functions:
            scope = getattr(getattr(fn, "func", fn), "__globals__", None)
            if not isinstance(scope, dict):
                continue
            for name in [n for n in missing if n in scope]:
                found.append(scope[name])
                missing.discard(name)
            todo += [v for v in scope.values() if _has_code(v) and id(v) not in seen]
    return found


def _has_code(value: Any) -> bool:
    """A function, a partial of one or a class the notebook defined (sent by value): what
    carries globals of its own (a library's code is not walked: its globals are its own)."""
    while isinstance(value, functools.partial):
        value = value.func
    module = getattr(value, "__module__", None)
    return isinstance(value, (types.FunctionType, type)) and module in ("__main__", None)


@contextlib.contextmanager
def preserved(
    ns: dict[str, Any],
    names: list[str] | None,
    active: bool = True,
    replayed: bool = False,
    skip_mapped: bool = False,
) -> Iterator[None]:
    """Around a run whose effects the notebook already has: put back, after the block, every
    tensor's bytes of the objects this worker received (all the CUDA memory it maps from the
    notebook; its own copies of CPU tensors) and their Python-side state (optimizer state
    entries and hyper-parameters, modules' flags, gradients), whatever the block's text hides
    (``loss = train_step()``). ``names``: the names whose CUDA memory the block may change
    (``session/state/repeat_changes.changed_names``: ``["*"]``, all of it, when the text calls the
    notebook's own code; None: none, a block that only reads, say ``y = model(x)``); the
    Python-side state, CPU tensors and modules' buffers (a forward in training mode updates
    batch-norm statistics) are kept whatever ``names`` says. ``active`` False keeps nothing
    (the run the notebook asked for). ``replayed``: the block runs under ncu, whose kernel
    replay needs device memory of its own (``snapshot_place``). ``skip_mapped``: the notebook
    keeps the memory this worker maps itself (its own copy, outside ncu's replay: issue 41 item
    5); the CUDA memory kept here is then the worker's own only."""
    torch = sys.modules.get("torch")
    table = ns.get(TABLE)
    if not active or not table or torch is None:
        yield
        return
    tensors = _tracked_tensors(torch, table)
    restore_python = _saved_python_state(torch, table, tensors)
    cpu = {ptr: (s, s.clone()) for ptr, s in _storages(tensors, cuda=False).items()}
    if names and "*" in names:
        cuda = {**shared_storages(ns), **_storages(tensors, cuda=True)}
    else:
        buffers = module_buffers(table.values())
        reachable = storages_of(named_objects(ns, names or ()))
        grads = [t.grad for t in tensors if t.is_leaf and t.grad is not None]
        cuda = {**reachable, **_storages([*buffers, *grads], cuda=True)}
    if skip_mapped:
        for ptr in mapped_storages(ns):
            cuda.pop(ptr, None)
    restore_cuda = _save_cuda(torch, cuda, replayed) if cuda else None
    try:
        yield
    finally:
        if restore_cuda is not None:
            restore_cuda()
        elif skip_mapped and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the notebook writes its copy back once this reply is sent
        for storage, saved in cpu.values():
            storage.copy_(saved)
        restore_python()


# --- the received objects kept current (a saved script's receive; a warm worker's state goes
# both ways through session/state/, issue 56) ---


def _keeps_identity(obj: Any) -> bool:
    """Objects a snapshot of the namespace keeps by identity: the torch objects (their
    contents are ``preserved``'s to keep), modules, functions and classes."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(
        obj, torch.Tensor | torch.nn.Module | torch.optim.Optimizer
    ):
        return True
    return isinstance(obj, type | type(sys) | type(_keeps_identity))


class _SnapshotPickler(pickle.Pickler):
    def __init__(self, file: Any, kept: list[Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.kept = kept

    def persistent_id(self, obj: Any) -> Any:
        if _keeps_identity(obj):
            self.kept.append(obj)
            return len(self.kept) - 1
        return None


class _SnapshotUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, kept: list[Any]) -> None:
        super().__init__(file)
        self.kept = kept

    def persistent_load(self, pid: Any) -> Any:
        return self.kept[pid]


@contextlib.contextmanager
def names_kept(ns: dict[str, Any], active: bool) -> Iterator[None]:
    """A run that repeats work the notebook has (warm-ups, a re-run) leaves the namespace's
    plain values as they were: each name's value (lists, dicts, numbers, the user's objects,
    torch objects inside them by identity) is pickled before and put back after, and names
    the run bound are removed. A value that does not pickle is left as the run leaves it."""
    if not active:
        yield
        return
    import io

    saved: dict[str, tuple[bytes, list[Any]] | Any] = {}
    before = dict(ns)
    for name, value in ns.items():
        if name.startswith("__") or _keeps_identity(value):
            saved[name] = value
            continue
        kept: list[Any] = []
        buffer = io.BytesIO()
        try:
            _SnapshotPickler(buffer, kept).dump(value)
        except Exception:  # a lock, a generator: kept by identity, as the run leaves it
            saved[name] = value
            continue
        saved[name] = (buffer.getvalue(), kept)
    try:
        yield
    finally:
        for name in [n for n in ns if n not in saved and not n.startswith("__")]:
            del ns[name]
        for name, entry in saved.items():
            if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], bytes):
                value = _SnapshotUnpickler(io.BytesIO(entry[0]), entry[1]).load()
                ns[name] = in_place(before[name], value)
            else:
                ns[name] = entry


def in_place(old: Any, value: Any) -> Any:
    """``old`` given ``value``'s contents when it can take them in place (a function's globals
    and other objects hold it by identity), else ``value``."""
    if type(old) is not type(value):
        return value
    if isinstance(old, list):
        old[:] = value
    elif isinstance(old, dict | set):
        old.clear()
        old.update(value)
    elif hasattr(old, "__dict__") and not isinstance(old, type):
        try:
            vars(old).clear()
            vars(old).update(vars(value))
        except TypeError:  # a read-only __dict__ (a mappingproxy)
            return value
    else:
        return value
    return old
