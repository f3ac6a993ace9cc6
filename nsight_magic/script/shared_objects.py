"""The worker's side of the notebook's shared state (``session/shared_state.py``): receive the
notebook's objects, and keep a re-run from changing them twice.

``receive(ns, path)`` loads the one pickle the notebook wrote for this cell: CUDA tensors come
as IPC handles (the notebook's memory, mapped), the rest by value, and objects this worker
already has as references into its table (``ns[TABLE]``: key -> object), so names shipped in
different cells keep sharing their objects (an optimizer and the model it steps).

``preserved(ns, names)`` is for a run whose effects the notebook already has: a drill-down's
re-run of a cell, its warm-up runs, a replay of an earlier profiled cell into a new worker. The
shared CUDA memory reachable from ``names`` (``["*"]``: all of it) is copied to host memory
before and written back after, so an optimizer step is applied to the notebook's model once,
by the run that the notebook asked for.

A real module pasted into the script by ``build_script`` before the runtime. Standard library
only at import time; torch is imported by pickle (the handles' rebuild functions) or when a
worker has shared CUDA memory to keep.
"""

import contextlib
import linecache
import pickle
import sys
from collections.abc import Iterator
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

TABLE = "__nsight_magic_shared__"  # the worker's received objects, by key
MAPPED = "__nsight_magic_mapped__"  # key -> bytes of notebook memory mapped (for status)
WALK_DEPTH = 4  # how deep preserved() looks through plain objects for tensors


class _SharedUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, table: dict[int, Any]) -> None:
        super().__init__(file)
        self.table = table

    def persistent_load(self, pid: Any) -> Any:
        kind, key = pid
        if kind != "ref" or key not in self.table:
            raise pickle.UnpicklingError(
                f"the notebook referred to object {key} this worker no longer has"
            )
        return self.table[key]


def receive(ns: dict[str, Any], path: str) -> dict[str, Any]:
    """Bind the notebook's names from ``path`` in ``ns``; returns what came (names, dropped).
    The lines of the cells whose functions came by value follow (file name -> text): put in
    linecache, a traceback through them shows the cell's lines."""
    table: dict[int, Any] = ns.setdefault(TABLE, {})
    with open(path, "rb") as f:
        names, new, forget, drop = _SharedUnpickler(f, table).load()
        try:
            sources = pickle.load(f)
        except EOFError:
            sources = {}
    for filename, text in sources.items():
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    for key in forget:
        table.pop(key, None)
    for name in drop:
        ns.pop(name, None)
    for key, obj in new:
        table[key] = obj
    ns.update(names)
    return {"names": sorted(names), "dropped": list(drop)}


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
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).values()
    for item in items:
        _cuda_storages(item, out, depth - 1, seen)


def shared_storages(ns: dict[str, Any]) -> dict[int, Any]:
    """The notebook's CUDA memory this worker maps (what it received), by data pointer."""
    out: dict[int, Any] = {}
    _cuda_storages(list(ns.get(TABLE, {}).values()), out, WALK_DEPTH, set())
    return out


def mapped_bytes(ns: dict[str, Any]) -> int:
    return sum(int(s.nbytes()) for s in shared_storages(ns).values())


@contextlib.contextmanager
def preserved(ns: dict[str, Any], names: list[str] | None) -> Iterator[None]:
    """Restore the shared CUDA memory reachable from ``names`` after the block (``["*"]``: all
    that this worker maps; None or empty: nothing to keep)."""
    if not names or TABLE not in ns:
        yield
        return
    shared = shared_storages(ns)
    if "*" in names:
        keep = shared
    else:
        reachable: dict[int, Any] = {}
        _cuda_storages([ns[n] for n in names if n in ns], reachable, WALK_DEPTH, set())
        keep = {ptr: s for ptr, s in reachable.items() if ptr in shared}
    if not keep:
        yield
        return
    torch = sys.modules["torch"]
    torch.cuda.synchronize()
    saved = {ptr: storage.cpu() for ptr, storage in keep.items()}
    try:
        yield
    finally:
        torch.cuda.synchronize()
        for ptr, storage in keep.items():
            storage.copy_(saved[ptr])
        torch.cuda.synchronize()
