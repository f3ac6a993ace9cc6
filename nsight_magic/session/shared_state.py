"""The notebook's state reaching a worker by reference: one copy of the model on the GPU.

The notebook owns the state. A setup cell runs there once; before a cell, the worker receives
the names it needs (what the setup cells defined, what the cell reads) in one pickle:

- CUDA tensors (parameters, buffers, optimizer state, plain tensors) go as CUDA IPC handles
  (``torch.multiprocessing.reductions.reduce_tensor``): the worker maps the notebook's memory,
  no copy. In-place changes made in the worker are the notebook's changes. torch keeps a sent
  block alive in the notebook while a worker maps it (its IPC reference counts), so a notebook
  ``del`` frees the memory only once the worker drops the name too (``torch.cuda.ipc_collect``).
- Everything else is pickled by value with cloudpickle (classes and functions defined in the
  notebook by value, modules by name), within ``auto_vars_max_bytes`` of copied bytes. The code
  of a function or class sent by value keeps its cell's name (cloudpickle would write
  ``<dynamic-code>``): ``setup 'data'`` or ``In [7]`` (``CodeFiles``), and the cell's lines go
  along, so the worker's tracebacks and the profiler's Python samples name cell and line.
- Identity is kept across cells: a tensor, module or optimizer the worker already received is
  sent as a reference to its copy there (``persistent_id``), so an optimizer shipped after the
  model updates the very parameters the model's forward uses.

What cannot be pickled (a lock, a generator, a CUDA graph, a non-leaf CUDA tensor's autograd
graph...) is not shared; ``plan`` says which and why, and the session replays the setup cell that
made it instead. Nothing here imports torch unless the notebook already did.
"""

from __future__ import annotations

import io
import itertools
import linecache
import pickle
import sys
import types
import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import NsightMagicError
from ..vocabulary.code_files import DYNAMIC_CODE, notebook_cell_file
from . import deadline

ShareKind = Literal["shared", "copied", "cannot"]


def _torch() -> Any:
    """torch when the notebook imported it (nothing to share by handle otherwise)."""
    return sys.modules.get("torch")


def is_cuda_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda


def _tracked(obj: Any) -> bool:
    """Objects whose identity matters to the worker (shared between names and cells)."""
    torch = _torch()
    if torch is None:
        return False
    return isinstance(obj, torch.Tensor | torch.nn.Module | torch.optim.Optimizer)


def _unshareable_tensor(obj: Any) -> str:
    """Why a CUDA tensor cannot go by IPC handle ("" when it can)."""
    torch = _torch()
    if type(obj) not in (torch.Tensor, torch.nn.Parameter):
        return f"a CUDA tensor of type {type(obj).__name__} (only plain tensors go by handle)"
    if obj.is_sparse or obj.is_quantized:
        return "a sparse or quantized CUDA tensor"
    return ""


def object_fingerprint(obj: Any) -> tuple[Any, ...]:
    """What must stay the same for the worker's copy of ``obj`` to still be it: the memory a
    tensor views, a module's tensors' memory, an optimizer's parameters. What may change and
    is brought up to date in place instead (``SentObjects.sync``, keeping the identity other
    objects in the worker hold): a CPU tensor's contents, an optimizer's state."""
    torch = _torch()
    if torch is None:
        return (id(obj),)
    if isinstance(obj, torch.Tensor):
        return (id(obj), obj.device.type, obj.dtype, tuple(obj.shape), obj.data_ptr())
    if isinstance(obj, torch.nn.Module):
        tensors = itertools.chain(obj.parameters(), obj.buffers())
        return (id(obj), tuple(t.data_ptr() for t in tensors))
    if isinstance(obj, torch.optim.Optimizer):
        params = tuple(id(p) for g in obj.param_groups for p in g["params"])
        return (id(obj), params)
    return (id(obj),)


def _optimizer_signature(opt: Any) -> tuple[Any, ...]:
    """An optimizer's state as objects and hyperparameters (what ``sync`` would send)."""
    state = tuple(
        (id(p), tuple((k, id(v) if not isinstance(v, int | float) else v) for k, v in s.items()))
        for p, s in opt.state.items()
    )
    groups = tuple(
        tuple((k, repr(v)) for k, v in g.items() if k != "params") for g in opt.param_groups
    )
    return state, groups


def tensor_bytes(tensor: Any) -> bytes:
    """A CPU tensor's contents as ``torch.save`` writes them (a copy: a tensor the worker was
    sent would otherwise go as a reference to itself)."""
    torch = _torch()
    buffer = io.BytesIO()
    torch.save(tensor.detach().clone(), buffer)
    return buffer.getvalue()


@dataclass
class SentObjects:
    """Per worker: the tracked objects it received, by key. Weak: a dead object is never
    matched again (its id may be reused), and its key is forgotten in the worker too."""

    _by_id: dict[int, tuple[weakref.ref[Any], int, tuple[Any, ...]]] = field(default_factory=dict)
    _keys: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    _versions: dict[int, int] = field(default_factory=dict)  # key -> a CPU tensor's version sent
    _states: dict[int, Any] = field(default_factory=dict)  # key -> an optimizer's state as sent

    def key_of(self, obj: Any) -> int | None:
        entry = self._by_id.get(id(obj))
        if entry is None or entry[0]() is not obj or entry[2] != object_fingerprint(obj):
            return None
        return entry[1]

    def new_key(self) -> int:
        return next(iter(self._keys))

    def commit(self, new: Iterable[tuple[int, Any]]) -> None:
        """The worker loaded these: reference them from now on."""
        for key, obj in new:
            self._by_id[id(obj)] = (weakref.ref(obj), key, object_fingerprint(obj))

    def by_key(self) -> dict[int, Any]:
        """The live notebook objects sent, by key."""
        return {key: obj for ref, key, _ in self._by_id.values() if (obj := ref()) is not None}

    def refresh(self, objects: Iterable[Any]) -> None:
        """The worker's copies of these sent objects equal the notebook's again (results
        brought back): their current fingerprints count."""
        for obj in objects:
            entry = self._by_id.get(id(obj))
            if entry is not None and entry[0]() is obj:
                self._by_id[id(obj)] = (entry[0], entry[1], object_fingerprint(obj))

    def _kept_in_place(self) -> Iterator[tuple[int, Any, bool]]:
        """(key, object, is an optimizer) of each live CPU tensor and optimizer the worker has:
        what is brought up to date in place rather than sent again."""
        torch = _torch()
        if torch is None:
            return
        for ref, key, _ in self._by_id.values():
            obj = ref()
            if isinstance(obj, torch.Tensor) and not obj.is_cuda:
                yield key, obj, False
            elif isinstance(obj, torch.optim.Optimizer):
                yield key, obj, True

    def _cpu_changed(self, key: int, tensor: Any) -> bool:
        return self._versions.get(key, tensor._version) != tensor._version

    def sync(self) -> dict[str, list[Any]]:
        """What changed in the notebook since the worker got it, to bring its copies up to
        date in place: CPU tensors changed in place (``cpu``: key, contents) and every
        optimizer's state and hyperparameters (``opt``: key, state, groups; a step run in the
        notebook or brought back from another worker made or changed them)."""
        out: dict[str, list[Any]] = {"cpu": [], "opt": []}
        for key, obj, optimizer in self._kept_in_place():
            if optimizer:
                groups = [{k: v for k, v in g.items() if k != "params"} for g in obj.param_groups]
                out["opt"].append((key, dict(obj.state), groups))
            elif self._cpu_changed(key, obj):
                out["cpu"].append((key, tensor_bytes(obj)))
        return out

    def needs_sync(self) -> bool:
        """Whether a CPU tensor or an optimizer the worker has changed in the notebook since
        (``sync`` would bring something)."""
        return any(
            self._states.get(key) != _optimizer_signature(obj)
            if optimizer
            else self._cpu_changed(key, obj)
            for key, obj, optimizer in self._kept_in_place()
        )

    def mark_current(self) -> None:
        """The worker's copies equal the notebook's objects now (it loaded a pack or sent
        them back): their CPU tensors' versions and optimizers' states are the ones it has."""
        for key, obj, optimizer in self._kept_in_place():
            if optimizer:
                self._states[key] = _optimizer_signature(obj)
            else:
                self._versions[key] = obj._version

    def stale_keys(self) -> list[int]:
        """Keys whose notebook object died or changed: the worker drops its references."""
        stale = [
            (oid, key)
            for oid, (ref, key, fp) in self._by_id.items()
            if (obj := ref()) is None or object_fingerprint(obj) != fp
        ]
        for oid, _ in stale:
            del self._by_id[oid]
        return [key for _, key in stale]

    def __len__(self) -> int:
        return len(self._by_id)


class _CountingSink:
    """A file that keeps only the byte count (the dry run's size)."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def _pickler_base() -> type:
    import cloudpickle

    return cloudpickle.Pickler


@dataclass(frozen=True)
class CodeFiles:
    """The worker's file names for the notebook's code: IPython's file name of a cell (a
    temporary file under ipykernel, ``<ipython-input-...>`` in a terminal) -> the name that
    says which cell it is (``vocabulary/code_files.py``)."""

    names: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, notebook_files: Mapping[str, int], setup_files: Mapping[str, str]) -> CodeFiles:
        """``notebook_files``: IPython's file name -> execution count; ``setup_files``: file
        name -> a setup cell's history file name (those win: a setup cell runs inside the
        ``%%nsight_setup`` cell, whose number IPython gives it)."""
        names = {f: notebook_cell_file(n) for f, n in dict(notebook_files).items()}
        return cls({**names, **setup_files})


def make_pickler(
    file: Any, sent: SentObjects | None, *, dry_run: bool = False, files: CodeFiles | None = None
) -> Any:
    """A cloudpickle pickler that sends CUDA tensors by IPC handle and objects the worker has
    (``sent``) by reference. ``dry_run``: no handle is made (a CUDA tensor stands in by its
    size, counted in ``cuda_bytes``), to learn what would be copied and what cannot go.
    ``files``: code sent by value is named by its cell; ``sources`` collects those cells' lines
    (by the worker's file name)."""
    base = _pickler_base()
    # cloudpickle's reducer of code objects (it names every file <dynamic-code>)
    code_reduce = getattr(base, "dispatch_table", {}).get(types.CodeType)

    class SharingPickler(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
            self.sources: dict[str, str] = {}
            self.new: list[tuple[int, Any]] = []
            self._seen: set[int] = set()
            self.cuda_bytes = 0
            self._storages: set[int] = set()

        def persistent_id(self, obj: Any) -> Any:
            if not _tracked(obj):
                return None
            if is_cuda_tensor(obj):
                why = _unshareable_tensor(obj)
                if why:
                    raise pickle.PicklingError(why)
                storage = obj.untyped_storage()
                if storage.data_ptr() not in self._storages:
                    self._storages.add(storage.data_ptr())
                    self.cuda_bytes += int(storage.nbytes())
                if dry_run:
                    return ("cuda", id(obj))
            if dry_run or sent is None:
                return None
            key = sent.key_of(obj)
            if key is not None:
                return ("ref", key)
            if id(obj) not in self._seen:  # pickled below; the worker files it under key
                self._seen.add(id(obj))
                self.new.append((sent.new_key(), obj))
            return None

        def reducer_override(self, obj: Any) -> Any:
            if not dry_run and is_cuda_tensor(obj):
                from torch.multiprocessing.reductions import reduce_tensor

                # a tensor inside an autograd graph goes as its data: the worker cannot
                # backpropagate into the notebook's graph anyway
                leaf = obj if obj.is_leaf or not obj.requires_grad else obj.detach()
                return reduce_tensor(leaf)
            if files is not None and code_reduce is not None and isinstance(obj, types.CodeType):
                return self._named_code(obj)
            return super().reducer_override(obj)

        def _named_code(self, code: types.CodeType) -> Any:
            """cloudpickle's reduction of ``code`` with the file name of its cell (cloudpickle
            writes ``<dynamic-code>``; a file that is no cell keeps its own name)."""
            assert files is not None and code_reduce is not None
            name = files.names.get(code.co_filename, code.co_filename)
            if name != code.co_filename and name not in self.sources:
                cached: tuple[Any, ...] = linecache.cache.get(code.co_filename, ())
                if len(cached) > 2 and cached[2]:  # IPython put the cell's lines there
                    self.sources[name] = "".join(cached[2])
            rebuild, args = code_reduce(code)
            # the file name: the constructor's string argument that is cloudpickle's stand-in
            # (or the file name itself, should cloudpickle keep it one day)
            args = tuple(
                name if isinstance(a, str) and a in (DYNAMIC_CODE, code.co_filename) else a
                for a in args
            )
            return rebuild, args

    return SharingPickler()


@dataclass(frozen=True)
class NameShare:
    """How one name reaches the worker: ``shared`` (CUDA memory by handle, maybe some bytes
    copied beside), ``copied`` (by value), ``cannot`` (``why``)."""

    name: str
    kind: ShareKind
    copied_bytes: int = 0
    cuda_bytes: int = 0
    why: str = ""


def classify(name: str, obj: Any, max_bytes: int) -> NameShare:
    """A dry run of one name: what would be copied, what mapped, or why it cannot go."""
    from .variables import _too_big, estimated_bytes

    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor) and not obj.is_cuda:
        size = estimated_bytes(obj)
        if size is not None and size > max_bytes:
            return NameShare(name, "cannot", why=_too_big(obj, size, max_bytes))
    sink = _CountingSink()
    pickler = make_pickler(sink, None, dry_run=True)
    with deadline.bounded_here(f"pickling {name!r}", deadline.PICKLE_S, deadline.SLOW_PICKLE):
        try:
            pickler.dump(obj)
        except Exception as exc:  # any pickling failure: the object cannot leave the notebook
            why = f"{type(obj).__name__} cannot be pickled ({exc})"
            return NameShare(name, "cannot", why=why)
    if sink.size > max_bytes:
        return NameShare(name, "cannot", why=_too_big(obj, sink.size, max_bytes))
    kind: ShareKind = "shared" if pickler.cuda_bytes else "copied"
    return NameShare(name, kind, sink.size, pickler.cuda_bytes)


@dataclass
class SharePlan:
    """``names``: what goes, in one pickle; ``shares``: how each name goes; ``drop``: names the
    worker got from the notebook that the notebook no longer has."""

    names: dict[str, Any] = field(default_factory=dict)
    shares: dict[str, NameShare] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)

    def cannot(self) -> dict[str, str]:
        return {n: s.why for n, s in self.shares.items() if s.kind == "cannot"}

    def summary(self) -> dict[str, Any]:
        """For meta.json and ``%nsight_session``: names by how they went, bytes."""
        going = [s for s in self.shares.values() if s.kind != "cannot"]
        return {
            "shared": sorted(s.name for s in going if s.kind == "shared"),
            "copied": sorted(s.name for s in going if s.kind == "copied"),
            "cannot": self.cannot(),
            "mapped_bytes": sum(s.cuda_bytes for s in going),
            "copied_bytes": sum(s.copied_bytes for s in going),
            "dropped": list(self.drop),
        }


def plan(
    wanted: Collection[str],
    user_ns: Mapping[str, Any],
    *,
    max_bytes: int,
    skip: Collection[str] = (),
    gone: Collection[str] = (),
) -> SharePlan:
    """What to send of ``wanted`` (names the notebook has; ``skip``: the worker has them
    already). ``gone``: names sent earlier that the notebook no longer has (dropped there)."""
    out = SharePlan(drop=sorted(gone))
    for name in sorted(set(wanted) - set(skip)):
        if name not in user_ns:
            continue
        share = classify(name, user_ns[name], max_bytes)
        out.shares[name] = share
        if share.kind != "cannot":
            out.names[name] = user_ns[name]
    return out


@dataclass
class Packed:
    blob: bytes
    new: list[tuple[int, Any]]


def pack(plan: SharePlan, sent: SentObjects, files: CodeFiles | None = None) -> Packed:
    """What the worker loads (``shared_objects.receive``): one pickle of ((names, sync: what
    changed of the objects it has, ``SentObjects.sync``), [(key, obj) first sent], keys to
    forget, names to drop), then a plain one of the lines of the cells
    whose code went by value (worker file name -> text, for its tracebacks). Nothing is
    committed to ``sent`` until the worker has it."""
    buf = io.BytesIO()
    pickler = make_pickler(buf, sent, files=files or CodeFiles())
    new: list[tuple[int, Any]] = pickler.new
    forget = sent.stale_keys()
    sync = sent.sync()
    what = f"pickling {', '.join(sorted(plan.names)) or 'nothing'} for the worker"
    try:
        with deadline.bounded_here(what, deadline.PICKLE_S, deadline.SLOW_PICKLE):
            # (names, sync) first: what they hold that the worker lacks joins ``new``
            pickler.dump(((plan.names, sync), new, forget, plan.drop))
    except NsightMagicError:
        raise
    except Exception as exc:
        raise NsightMagicError(
            f"Sharing {', '.join(sorted(plan.names))} with the worker failed ({exc})."
        ) from exc
    pickle.dump(dict(pickler.sources), buf, protocol=pickle.HIGHEST_PROTOCOL)
    return Packed(buf.getvalue(), list(new))


# a value a setup cell read goes with it for a replay only up to this size (a number, a
# string, a small config): larger ones and the torch objects are read as they are then
READ_VALUE_MAX_BYTES = 1 << 20


_PLAIN_SCALARS = (int, float, complex, bool, str, bytes, type(None))
PLAIN_ITEMS_MAX = 10_000  # items looked at in one value before it counts as not plain


def _plain(value: Any, budget: list[int]) -> bool:
    """A value of Python's own scalars and containers, of at most ``PLAIN_ITEMS_MAX`` items:
    cheap to copy, and nothing whose identity matters."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) in (list, tuple, set, frozenset):
        return all(_plain(v, budget) for v in value)
    if type(value) is dict:
        return all(_plain(k, budget) and _plain(v, budget) for k, v in value.items())
    return False


def values_read(names: Collection[str], user_ns: Mapping[str, Any]) -> bytes | None:
    """The values of ``names`` (what a setup cell reads) in the notebook now, pickled, for a
    replay of the cell in a worker (issue 43: ``k = 3``, a setup cell ``val = k * 2``,
    ``k = 100``: a worker that replays it must compute 6). Only plain values (numbers,
    strings, their lists, tuples and dicts: ``_plain``) up to ``READ_VALUE_MAX_BYTES``; the
    rest (a model, a tokenizer, a data set) is read as the worker has it then, and nothing is
    pickled just to learn its size."""
    out: dict[str, Any] = {}
    for name in sorted(names):
        if name in user_ns and _plain(user_ns[name], [PLAIN_ITEMS_MAX]):
            out[name] = user_ns[name]
    if not out:
        return None
    blob = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    if len(blob) <= READ_VALUE_MAX_BYTES:
        return blob
    small = {n: v for n, v in out.items() if len(pickle.dumps(v)) <= READ_VALUE_MAX_BYTES // 8}
    return pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL) if small else None


def cuda_allocated_bytes() -> int | None:
    """What the notebook's caching allocator holds now (None before CUDA is up: asking
    would start it)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_initialized():
        return None
    return sum(int(torch.cuda.memory_allocated(d)) for d in range(torch.cuda.device_count()))


def collect_ipc() -> None:
    """Free blocks the notebook kept for workers that have let go of them."""
    torch = _torch()
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.ipc_collect()
