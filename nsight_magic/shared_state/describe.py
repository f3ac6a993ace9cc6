"""Describing objects for the shared-state graph (``graph.py``): an object's create part (what
pickle's ``__reduce_ex__(5)`` gives) and fill part, each pickled with its children as keys
(``dumps_keyed``), and its print, a checksum of the fill."""

from __future__ import annotations

import contextlib
import functools
import io
import pickle
import sys
import types
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import definitions
from .kinds import container_parts, reduced_parts, special_parts
from .objects import (
    _PLAIN,
    _PLAIN_RUN,
    NS,
    OWN_RESULTS,
    Key,
    KeyedTable,
    _base_pickler,
    _cloudpickle,
    _cp,
    _immutable_library_value,
    _is_tensor,
    _library_owned,
    _numpy,
    _range_index,
    _received_ptrs,
    _torch,
    array_view,
    cloudpickle,
    cuda_contents,
    empty_array,
    empty_tensor,
    keyable,
    make_function,
    set_array,
    set_function_state,
    set_tensor,
    view_of,
)

# --- describing ---


@dataclass
class Record:
    """One object's description: ``create`` (pickled, only for an object the other side
    lacks), ``fill`` (pickled) and its ``print``."""

    create: bytes | None
    fill: bytes
    print: Any


@dataclass
class Walk:
    """What one look at a side's objects found: each reached key's record (new ones with a
    create part), the keys each refers to, what could not be described, by key, with why."""

    records: dict[Key, Record] = field(default_factory=dict)
    children: dict[Key, set[Key]] = field(default_factory=dict)
    failed: dict[Key, str] = field(default_factory=dict)
    bindings: dict[str, bytes] = field(default_factory=dict)
    binding_keys: dict[str, set[Key]] = field(default_factory=dict)
    cannot: dict[str, str] = field(default_factory=dict)


class Describer:
    """Describes objects of one side: ``graph`` names its keys, ``files`` renames the code of
    cells (the notebook's file names -> the worker's), ``sources`` collects those cells'
    lines."""

    def __init__(self, graph: KeyedTable, files: Mapping[str, str] | None = None) -> None:
        self.graph = graph
        self.files = dict(files or {})
        self.sources: dict[str, str] = {}
        self._owners: dict[int, Any] | None = None  # CPU storages both sides know, by pointer

    def by_source(self, obj: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]] | None:
        """A notebook definition that does not pickle (a Triton kernel), made on the other
        side by its own statement (``definitions``); None when it has none."""
        found = definitions.find_bound(obj, self.graph.namespace)
        if found is None:
            return None
        there = definitions.renamed(found, self.files)
        cell = definitions.cell_text(found.filename)
        args = (there.filename, there.line, there.name, there.text, _Namespace.MARK, cell)
        create = (definitions.define, args)
        return create, (None, None, None, None, None)

    # the create and fill parts of one object
    def parts(self, obj: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
        if type(obj).__module__.startswith("nsight_magic."):
            # a run, a sweep, a view: the notebook's reading of a report, not the cell's data
            raise pickle.PicklingError(OWN_RESULTS)
        torch, np = _torch(), _numpy()
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        made = special_parts(obj)
        if made is not None:
            return made
        if np is not None and isinstance(obj, np.ndarray):
            # an object array's bytes are pointers: its elements go instead (pandas' object
            # columns and indexes)
            data = list(obj.ravel()) if obj.dtype.hasobject else (
                obj.tobytes() if obj.size else b"")  # fmt: skip
            base, view = obj.base, None
            # (a named view only: pandas' arrays are views its copy-on-write tracks)
            if type(base) is np.ndarray and not obj.dtype.hasobject and base.flags.c_contiguous \
                    and self._shared(base) and self._named(obj):  # fmt: skip
                offset = obj.__array_interface__["data"][0] - base.__array_interface__["data"][0]
                view = (base, offset, obj.shape, obj.strides, obj.dtype, type(obj))
            create: tuple[Any, Any] = (array_view, view) if view is not None else (
                empty_array, (type(obj), obj.dtype))  # fmt: skip
            return create, (
                (obj.shape, obj.dtype, data), None, None, None, set_array
            )  # fmt: skip
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, type):
            if _cp is None:
                raise pickle.PicklingError(f"class {obj.__qualname__} needs cloudpickle")
            rv = _cloudpickle("_dynamic_class_reduce")(obj)
            args = rv[1]
            if "__slots__" in obj.__dict__:  # made with them (cloudpickle sets them after)
                args = (*args[:3], {**args[3], "__slots__": obj.__dict__["__slots__"]}, *args[4:])
            return (rv[0], args), (rv[2], None, None, None, rv[5])
        if isinstance(obj, (types.CellType, bytearray, set)):
            return container_parts(obj)
        return reduced_parts(obj)

    def _function(self, func: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
        """A notebook function: created with the side's namespace as its globals (a ``global
        step`` in it is the namespace's ``step``) and its own cells (keyed: a closure's
        ``nonlocal`` change is the cell's), filled with its defaults and attributes."""
        if func.__globals__ is not self.graph.namespace:
            raise pickle.PicklingError(
                f"function {func.__qualname__} of another namespace cannot be kept as one object"
            )
        state: dict[str, Any] = {
            "__defaults__": func.__defaults__,
            "__kwdefaults__": func.__kwdefaults__,
            "__annotations__": func.__annotations__,
            "__module__": func.__module__,
            "__doc__": func.__doc__,
            "__qualname__": "".join(func.__qualname__),
            "__dict__": tuple(func.__dict__.items()),  # a tuple: not an object to key
        }
        if _cp is not None:
            state["_submodules"] = tuple(_cloudpickle("_find_imported_submodules")(
                func.__code__, list(func.__globals__.get(n) for n in func.__code__.co_names)
            ))  # fmt: skip
        create = (make_function, (func.__code__, _Namespace.MARK, "".join(func.__name__),
                                  func.__closure__))  # fmt: skip
        return create, (state, None, None, None, set_function_state)

    def _tensor(self, t: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
        torch = sys.modules["torch"]
        if t.is_cuda:
            from torch.multiprocessing.reductions import reduce_tensor

            why = unshareable_tensor(t)
            if why:
                raise pickle.PicklingError(why)
            fill = self.tensor_fill(t)  # its memory is shared: no contents
            base = self.shared_base(t)
            if base is not None:  # a view of memory the other side owns: made there as one
                kind = type(t) if type(t) in (torch.Tensor, torch.nn.Parameter) else None
                return (view_of, (base, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                                  t.dtype, kind)), fill  # fmt: skip
            leaf = t if t.is_leaf or not t.requires_grad else t.detach()
            return reduce_tensor(leaf), fill
        if t.is_sparse or t.is_quantized or t.device.type != "cpu":
            raise pickle.PicklingError(f"a {t.device.type} tensor of layout {t.layout}")
        # by plain pickle, whole: the storage and hooks its reduce makes are new each time
        # (keyed, they would look like new objects at every look)
        contents = pickle.dumps(t.detach().clone(), protocol=pickle.HIGHEST_PROTOCOL)
        kind = type(t) if type(t) in (torch.Tensor, torch.nn.Parameter) else torch.Tensor
        base, detached = t._base, False
        if base is None:  # its memory another tensor's the other side has (a state_dict())
            base, detached = self._storage_owner(t), True
        if base is not None and base.layout == torch.strided and self._shared(base):
            # a view of a tensor the notebook has (``half = data[:n]``): a view there too
            view = (base, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype, kind,
                    detached)  # fmt: skip
            return (view_of, view), self.tensor_fill(t, contents)
        return (empty_tensor, (kind, t.dtype)), self.tensor_fill(t, contents)

    def _storage_owner(self, t: Any) -> Any:
        """A CPU tensor both sides know whose memory ``t``, new to the other side, shares
        (``p.detach()``); None when there is none. Only for a new ``t``: a view is made once,
        and two tensors made as views of each other would be a cycle."""
        key = self.graph.key_of.get(id(t))
        if key is not None and key in self.graph.prints:
            return None
        if self._owners is None:
            self._owners = {}
            for k, obj in self.graph.table.items():
                if _is_tensor(obj) and not obj.is_cuda and obj._base is None \
                        and k in self.graph.prints and obj.layout == t.layout:  # fmt: skip
                    with contextlib.suppress(RuntimeError):  # (a storage it cannot give)
                        self._owners.setdefault(obj.untyped_storage().data_ptr(), obj)
        ptr = t.untyped_storage().data_ptr()
        owner = self._owners.get(ptr) if ptr else None  # (empty tensors all point at 0)
        return owner if owner is not t else None

    def _named(self, obj: Any) -> bool:
        return any(v is obj for v in self.graph.namespace.values())

    def _shared(self, base: Any) -> bool:
        """Whether the memory a view is over goes too (a view of memory that goes for no
        other reason goes as memory of its own: ``row = big[0]`` does not send ``big``)."""
        return id(base) in self.graph.key_of or self._named(base)

    @staticmethod
    def tensor_fill(t: Any, contents: Any = None) -> tuple[Any, ...]:
        """A tensor's fill for ``set_tensor``: its contents (None for CUDA memory, which the
        sides share), flag, gradient and attributes."""
        attributes = dict(t.__dict__) if t.__dict__ else None
        grad = t.grad if t.is_leaf else None
        return ((contents, t.requires_grad, grad, attributes), None, None, None, set_tensor)

    def shared_base(self, t: Any) -> Any:
        """A tensor both sides know whose storage ``t`` views, when that storage is the other
        side's (torch cannot share again what it received by IPC handle); else None."""
        storage = t.untyped_storage()
        if storage.data_ptr() not in _received_ptrs:
            return None
        ptr = storage.data_ptr()
        for key, obj in self.graph.table.items():
            if obj is not t and _is_tensor(obj) and obj.is_cuda and key in self.graph.prints \
                    and obj.untyped_storage().data_ptr() == ptr:  # fmt: skip
                return obj
        return None

    def tensor_print(self, t: Any) -> tuple[Any, ...]:
        """What a change to a tensor changes: torch's in-place counter (CPU), its memory and
        shape, its gradient's identity, its flag (the contents of CUDA memory are shared)."""
        grad = t.grad if t.is_leaf else None
        # an inference tensor (``torch.inference_mode()``) has no in-place counter, and a
        # small one may be written by a kernel that does not count (GradScaler's tracker):
        # its bytes
        by_bytes = t.layout == sys.modules["torch"].strided and (
            t.is_inference() or t.numel() <= _SMALL_TENSOR)  # fmt: skip
        version = 0 if t.is_cuda else _bytes_print(t) if by_bytes else t._version
        return ("tensor", version, t.data_ptr(), tuple(t.shape), tuple(t.stride()),
                t.storage_offset(), str(t.dtype), t.requires_grad,
                # a gradient backward() just made has no key yet: it is a change too
                None if grad is None else self.graph.key_of.get(id(grad), ("new", id(grad))),
                tuple(sorted(t.__dict__)) if t.__dict__ else ())  # fmt: skip

    def record(self, key: Key, obj: Any, found: list[Any], fills: bool) -> Record:
        """The record of the object this side calls ``key``: its print, its fill when
        ``fills`` or when the print is not the agreed one, its create part when the other side
        lacks it; what it refers to is appended to ``found``."""
        if _is_tensor(obj):
            return self._tensor_record(key, obj, found, fills)
        if key in self.graph.from_source:  # once by its statement, always (its state is that)
            record = self.record_by_source(key, obj, found)
            if record is not None:
                return record
        np = _numpy()
        if np is not None and type(obj) is np.ndarray and not obj.dtype.hasobject:
            # an array's print is a checksum of its memory: unchanged, nothing is pickled
            stamp = _array_print(obj)
            known = key in self.graph.prints
            if known and not fills and self.graph.prints[key] == stamp:
                return Record(None, b"", stamp)
            create, fill = self.parts(obj)
            create_bytes = None if known else dumps_keyed(self, create, found, [create[1]])
            return Record(create_bytes, dumps_keyed(self, fill, found, [fill[0]]), stamp)
        return self._object_record(key, obj, found)

    def _tensor_record(self, key: Key, obj: Any, found: list[Any], fills: bool) -> Record:
        graph = self.graph
        known = key in graph.prints
        stamp = self.tensor_print(obj)
        # unchanged, and holding nothing else to walk (a gradient, attributes): as agreed
        bare = obj.grad is None if obj.is_leaf else True
        if known and not fills and bare and not obj.__dict__ and graph.prints[key] == stamp:
            return Record(None, b"", stamp)
        if known and obj.is_cuda:  # the other side has it (its memory is shared): no
            # create part, which would share it again (refused for memory it received)
            # its memory moved (a cast, ``p.data = ...``): the new memory goes by handle
            moved = None
            if _memory_of(graph.prints[key]) != _memory_of(stamp):
                moved = _SharedContents(obj, graph.step < 0)
            fill = self.tensor_fill(obj, moved)
            inline = [fill[0]] if moved is None else [fill[0], moved]
            return Record(None, dumps_keyed(self, fill, found, inline), stamp)
        create, fill = self.parts(obj)
        contents, _, _, attributes = fill[0]
        inline = [fill[0], *(x for x in (contents, attributes) if x is not None)]
        fill_bytes = dumps_keyed(self, fill, found, inline)
        create_bytes = None if known else dumps_keyed(self, create, found, [create[1]])
        return Record(create_bytes, fill_bytes, stamp)

    def _object_record(self, key: Key, obj: Any, found: list[Any]) -> Record:
        graph = self.graph
        known = key in graph.prints
        start = len(found)
        try:
            create, fill = self.parts(obj)
            inline = made_for_the_occasion(create, fill, deep=_library_owned(obj))
            if isinstance(obj, type):  # cloudpickle's skeleton arguments, new each time
                inline += _containers_in([create[1]])
            fill_bytes = dumps_keyed(self, _plain_runs(fill), found, inline)
            # written each time: what its arguments hold (an iterator's list, a function's
            # cells) is walked too
            create_bytes = dumps_keyed(self, create, found, inline)
        except Exception:
            del found[start:]  # what the failed try met is not part of it (a Triton lock)
            record = self.record_by_source(key, obj, found)
            if record is not None:
                graph.from_source.add(key)
                return record
            if not isinstance(obj, types.FunctionType) or obj.__globals__ is graph.namespace:
                raise
            # made at run time with another module's globals and no statement of its own (a
            # dataclass's __repr__ says it is the notebook's): a value, copied whole
            create_bytes = dumps_keyed(self, _by_value(obj), found)
            return Record(create_bytes, dumps_keyed(self, (None,) * 5, found),
                          ("made", zlib.crc32(create_bytes)))  # fmt: skip
        if fill[:4] == (None, None, None, None):  # all its state is in how it is made
            return Record(create_bytes, fill_bytes, ("made", zlib.crc32(create_bytes)))
        return Record(None if known else create_bytes, fill_bytes, zlib.crc32(fill_bytes))

    def record_by_source(self, key: Key, obj: Any, found: list[Any]) -> Record | None:
        """A notebook definition that does not pickle, described by its statement (None:
        it has none); its state is its statement: it changes when the statement does."""
        made = self.by_source(obj)
        if made is None:
            return None
        create, fill = made
        # the statement and its arguments are written inline: nothing in them is keyed
        create_bytes = dumps_keyed(self, create, found, [create[1]])
        fill_bytes = dumps_keyed(self, fill, found)
        known = key in self.graph.prints
        return Record(None if known else create_bytes, fill_bytes,
                      ("source", zlib.crc32(create_bytes)))  # fmt: skip


def is_made(stamp: Any) -> bool:
    """Whether a print says all of its object's state is in how it is made (a new object over
    there when it changes, ``Describer._object_record``)."""
    return isinstance(stamp, tuple) and stamp[:1] == ("made",)


def _array_print(a: Any) -> tuple[Any, ...]:
    """What a change to a NumPy array of numbers changes: its shape, its dtype and a checksum
    of its bytes, read where they are (no copy when it is contiguous)."""
    np = sys.modules["numpy"]
    flat = np.ascontiguousarray(a).reshape(-1)
    return ("array", a.shape, a.dtype.str, zlib.crc32(flat.view(np.uint8)) if flat.size else 0)


_SMALL_TENSOR = 4096  # elements: a CPU tensor this small is printed by its bytes


def _bytes_print(t: Any) -> tuple[str, int]:
    """A checksum of a CPU tensor's bytes (for one without an in-place counter)."""
    torch = sys.modules["torch"]
    flat = t.detach().contiguous().reshape(-1)
    return ("bytes", zlib.crc32(flat.view(torch.uint8).numpy()) if flat.numel() else 0)


def _memory_of(stamp: tuple[Any, ...]) -> tuple[Any, ...]:
    """Where a tensor's print (``Describer.tensor_print``) says its memory is: the data
    pointer, shape, strides, offset and dtype."""
    return stamp[2:7]


class _SharedContents:
    """A CUDA tensor's new memory, sent by IPC handle (``objects.cuda_contents``); ``copy``: a
    worker sends it, and the notebook keeps a copy of its own."""

    def __init__(self, t: Any, copy: bool) -> None:
        self.t, self.copy = t, copy

    def __reduce__(self) -> tuple[Any, ...]:
        from torch.multiprocessing.reductions import reduce_tensor

        why = unshareable_tensor(self.t)
        if why:
            raise pickle.PicklingError(why)
        rebuild, args = reduce_tensor(self.t.detach())
        return cuda_contents, (rebuild, args, self.copy)


class _Namespace:
    """Stands for the side's namespace inside a pickle (``NS``)."""

    MARK: Any = None


_Namespace.MARK = _Namespace()


def unshareable_tensor(t: Any) -> str:
    """Why a CUDA tensor cannot go by IPC handle ("" when it can)."""
    torch = sys.modules["torch"]
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return f"a CUDA tensor of type {type(t).__name__} (only plain tensors go by handle)"
    if t.is_sparse or t.is_quantized:
        return "a sparse or quantized CUDA tensor"
    return ""


class _PlainRun:
    """A list of plain values (a list's items, a dict's (key, value) pairs) written by plain
    pickle in one go: pickle asks ``persistent_id`` about every item of a list (and never asks
    ``reducer_override`` about a list), 300,000 calls for a notebook's lists of numbers. The
    other side loads it as the list itself."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def __reduce__(self) -> tuple[Any, ...]:
        return pickle.loads, (self.blob,)


def _plain_run(items: Any) -> Any:
    """``items`` (a fill's list) as a ``_PlainRun`` when it is long and holds only plain
    values, else itself."""
    if type(items) is not list or len(items) < _PLAIN_RUN:
        return items
    kinds = set(map(type, items))
    if kinds == {tuple}:  # a dict's items: (key, value) pairs
        kinds = set(map(type, (x for pair in items for x in pair)))
    return _PlainRun(pickle.dumps(items, protocol=5)) if kinds <= _PLAIN else items


def _plain_runs(fill: tuple[Any, ...]) -> tuple[Any, ...]:
    """A fill whose long lists of plain values (its items; an object array's elements in its
    state) go as plain runs."""
    state = fill[0]
    if type(state) is tuple and any(type(part) is list for part in state):
        state = tuple(_plain_run(part) for part in state)
    return (state, *(_plain_run(items) for items in fill[1:4]), *fill[4:])


@functools.cache
def _keyed_pickler_class(base: type) -> type:
    """The keyed pickler, made once (``_pickler``)."""
    code_reduce = getattr(base, "dispatch_table", {}).get(types.CodeType)

    class KeyedPickler(base):
        describer: Describer
        inline: set[int]
        found: list[Any]

        def persistent_id(self, obj: Any) -> Any:
            if type(obj) in _PLAIN or type(obj) is _PlainRun:  # the most asked about, first
                return None
            if id(obj) in self.inline:
                return None
            return _persistent_key(self.describer.graph, obj, self.found)

        def reducer_override(self, obj: Any) -> Any:
            kind = type(obj)
            if _immutable_library_value(obj) or _range_index(obj):
                return pickle.loads, (pickle.dumps(obj, protocol=5),)
            elif kind is types.CodeType and self.describer.files and code_reduce is not None:
                return self._named_code(obj)
            if cloudpickle is None:
                return NotImplemented
            reduced = super().reducer_override(obj)
            if (kind is types.FunctionType and reduced is not NotImplemented
                    and obj.__globals__ is not self.describer.graph.namespace):  # fmt: skip
                # a library's function made at run time (a namedtuple's methods, a dataclass's
                # __repr__), which cloudpickle copies by value: a value, written whole (its
                # cells and globals are its own, not objects to key: keyed, the other side's
                # copies came back as changes to the notebook's)
                return _by_value(obj)
            return reduced

        def _named_code(self, code: types.CodeType) -> Any:
            assert code_reduce is not None
            return _named_code(self.describer, code, code_reduce)

    return KeyedPickler


def _by_value(func: Any) -> tuple[Any, tuple[bytes]]:
    """A function that is not the notebook's, copied whole by cloudpickle."""
    return cloudpickle.loads, (cloudpickle.dumps(func, protocol=5),)


def _persistent_key(graph: KeyedTable, obj: Any, found: list[Any]) -> Any:
    """The keyed pickler's persistent id of ``obj``: the side's namespace, its key (given now
    when new; ``found`` collects what it reached), or None (pickled inline)."""
    if obj is _Namespace.MARK or obj is graph.namespace:
        return NS
    # a function of the side's namespace is the notebook's, whatever its __module__ says (a
    # namespace without __name__ gives None)
    ours = type(obj) is types.FunctionType and obj.__globals__ is graph.namespace
    if not ours and not keyable(obj):
        return None
    key = graph.key_of.get(id(obj))
    if key is None or graph.table.get(key) is not obj:
        key = graph.add(obj)
    found.append(obj)
    return ("k", key)


def _named_code(describer: Describer, code: types.CodeType, code_reduce: Any) -> Any:
    """A notebook function's code, its file named as the notebook names it (``In [7]``), the
    cell's text kept for ``inspect.getsource`` on the other side."""
    name = describer.files.get(code.co_filename, code.co_filename)
    if name != code.co_filename and name not in describer.sources:
        import linecache

        cached: tuple[Any, ...] = linecache.cache.get(code.co_filename, ())
        if len(cached) > 2 and cached[2]:
            describer.sources[name] = "".join(cached[2])
    rebuild, args = code_reduce(code)
    args = tuple(
        name if isinstance(a, str) and a in ("<dynamic-code>", code.co_filename) else a
        for a in args
    )
    return rebuild, args


def _pickler(describer: Describer, inline: set[int], file: Any, found: list[Any]) -> Any:
    """A pickler that writes each keyable object as its key (new ones are given one; every
    one met is listed in ``found``) but those in ``inline`` (ids: the containers a reduce made
    for the occasion), and the side's namespace as ``NS``."""
    pickler = _keyed_pickler_class(_base_pickler())(file, protocol=5)
    pickler.describer, pickler.inline, pickler.found = describer, inline, found
    return pickler


def dumps_keyed(
    describer: Describer, value: Any, found: list[Any], inline: Iterable[Any] = ()
) -> bytes:
    buffer = io.BytesIO()
    _pickler(describer, {id(o) for o in inline}, buffer, found).dump(value)
    return buffer.getvalue()


def made_for_the_occasion(
    create: tuple[Any, Any], fill: tuple[Any, ...], deep: bool = False
) -> list[Any]:
    """The containers a reduce builds to carry an object (its arguments' tuple, a state dict,
    the (state, slots) pair, a class's dict): written inline, never keyed (a new one each
    time would look like a change). ``deep``: a library's object (``_LIBRARIES``), whose
    reduce builds every container in it anew: all of them, at any depth (an object of the
    user's holds its own lists in its state dict: those keep their keys)."""
    if deep:
        return _containers_in([create[1], *fill[:4]])
    out: list[Any] = [create[1], *(items for items in fill[1:4] if items is not None)]
    state = fill[0]
    if isinstance(state, dict | list):
        out.append(state)
    elif isinstance(state, tuple):
        out.append(state)
        # pickle's (attributes, slots) pair; any other tuple holds the object's real
        # containers (a hook's handle: the module's hook dict, its id)
        if len(state) == 2 and (state[1] is None or isinstance(state[1], dict)):
            out.extend(part for part in state if isinstance(part, dict | list))
    return out


def _containers_in(values: list[Any]) -> list[Any]:
    """Every list, dict, tuple and set in ``values``, through those only."""
    out: list[Any] = []
    seen: set[int] = set()
    todo = list(values)
    while todo:
        value = todo.pop()
        kind = type(value)
        if kind not in (list, dict, tuple, set) or id(value) in seen:
            continue
        seen.add(id(value))
        out.append(value)
        if kind is dict:
            todo.extend(value.values())
        else:
            todo.extend(value)
    return out
