"""One side's view of the objects the notebook and a worker share: a table of keyed objects,
each described shallowly (how to create it, and what fills it), so that either side can tell
what changed since the two last agreed and send only that.

Both sides run this same code (the worker imports it: standard library at import time,
cloudpickle when present). An object whose identity matters (a list, a dict, an instance, a
notebook function or class, a tensor...) gets a key; what refers to it refers to the key, so
an alias stays an alias on the other side and a change made to it there is made to the same
object here. Values without identity (numbers, strings, tuples, modules, library functions)
travel inline. The notebook numbers its objects 1, 2, 3...; a worker numbers those it creates
-1, -2...: a key names one object on both sides.

A **description** of an object is its create part (the callable and arguments pickle's
``__reduce_ex__(5)`` gives) and its fill part (state, list items, dict items, set items), each
pickled with its children as keys. Its **print** is a checksum of the fill (of metadata for a
tensor: torch counts in-place changes itself). Two sides agree on an object when each holds
the print it had once the object was last sent or applied; an object whose print differs has
changed since, and only its fill travels. A fill is applied in place, through the base class
for lists, dicts and sets (a transformers ``ModelOutput`` forbids ``update``), through
``__setstate__`` or ``__dict__`` for objects, so every alias sees it.
"""

from __future__ import annotations

import contextlib
import copyreg
import datetime
import decimal
import enum
import fractions
import functools
import io
import numbers
import pathlib
import pickle
import re
import sys
import types
import zlib
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import definitions

try:  # functions and classes defined in the notebook go by value
    import cloudpickle
    from cloudpickle import cloudpickle as _cp
except ImportError:  # a worker under a --python without it: what plain pickle can
    cloudpickle = None
    _cp = None

# cloudpickle 2.x keeps its reducers in cloudpickle_fast, 3.x in cloudpickle.cloudpickle
_cp_fast = getattr(cloudpickle, "cloudpickle_fast", None) if cloudpickle is not None else None


def _cloudpickle(name: str) -> Any:
    """One of cloudpickle's helpers, wherever this version keeps it."""
    for module in (_cp, _cp_fast):
        if module is not None and hasattr(module, name):
            return getattr(module, name)
    raise pickle.PicklingError(f"cloudpickle {getattr(cloudpickle, '__version__', '?')} "
                               f"has no {name}")  # fmt: skip


Key = int
# why a run, a sweep or a view of this package's is never sent (a notebook binds one at every
# ``-o NAME``: said only when a cell reads it)
OWN_RESULTS = "nsight_magic's results stay in the notebook"
NS = ("ns",)  # the persistent id of the side's namespace (notebook functions' globals)
_ATOMS = (
    type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis),
    type(NotImplemented), numbers.Number, datetime.date, datetime.time, datetime.timedelta,
    datetime.tzinfo, decimal.Decimal, fractions.Fraction, pathlib.PurePath, enum.Enum,
    re.Pattern, types.ModuleType, types.BuiltinFunctionType, types.MethodType,
    types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.CodeType, tuple, frozenset, memoryview, pickle.PickleBuffer,
)  # fmt: skip


# the values pickle writes itself: asked about first, since a fill of numbers meets millions
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})
# a list or dict of at least this many plain items goes as one plain pickle (``_plain_blob``):
# the keyed pickler would ask ``persistent_id`` about each item
_PLAIN_RUN = 32
# libraries whose objects' reduce builds its containers anew each time (pandas' managers and
# indexes, NumPy's bit generators' state dicts): those containers are the object's description,
# never objects of their own (a new key each look would read as a change)
_LIBRARIES = frozenset({"pandas", "numpy", "pyarrow"})


def _torch() -> Any:
    return sys.modules.get("torch")


def _numpy() -> Any:
    return sys.modules.get("numpy")


def _is_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _library_atom(obj: Any) -> bool:
    """torch's and numpy's values without identity (a dtype, a device, a shape)."""
    torch, np = _torch(), _numpy()
    if torch is not None and isinstance(
        obj, torch.dtype | torch.device | torch.layout | torch.memory_format | torch.finfo
    ):
        return True
    return np is not None and isinstance(obj, np.dtype | np.generic)


def by_reference(obj: Any) -> bool:
    """A class or function the other side imports by name (a library's), not one to key."""
    if _cp is not None:
        try:
            return bool(_cloudpickle("_should_pickle_by_reference")(obj))
        except Exception:
            return False
    return getattr(obj, "__module__", None) not in ("__main__", None)


def too_big(obj: Any, size: int, limit: int) -> str:
    """Why a value stays: its bytes by value over ``%config NsightMagic.auto_vars_max_bytes``."""
    return (f"{type(obj).__name__} of {size / 2**20:,.1f} MiB, over auto_vars_max_bytes "
            f"({limit / 2**20:,.1f} MiB)")  # fmt: skip


def _library_owned(obj: Any) -> bool:
    return type(obj).__module__.partition(".")[0] in _LIBRARIES


def _immutable_library_value(obj: Any) -> bool:
    """pyarrow's arrays, buffers and types: immutable values, written whole by plain pickle
    (their reduce builds new lists of buffers each time)."""
    return type(obj).__module__.partition(".")[0] == "pyarrow"


def _range_index(obj: Any) -> bool:
    """A pandas RangeIndex: three numbers, an immutable value (a Series' manager makes a new
    one at each reduce), written whole by plain pickle."""
    pd = sys.modules.get("pandas")
    return pd is not None and type(obj) is pd.RangeIndex


def keyable(obj: Any) -> bool:
    """Whether ``obj`` has an identity worth keeping across the two sides."""
    if type(obj) in _PLAIN:
        return False
    if isinstance(obj, _ATOMS) or _library_atom(obj) or _immutable_library_value(obj):
        return False
    if _range_index(obj):
        return False
    if isinstance(obj, type | types.FunctionType):
        # the notebook's own (a library's is imported by name on the other side)
        return getattr(obj, "__module__", None) == "__main__" and not by_reference(obj)
    if callable(obj) and isinstance(getattr(obj, "__qualname__", None), str):
        # a library's compiled function (Cython's, numpy's unpickling helpers): by name
        return getattr(obj, "__module__", None) in ("__main__", None)
    return True


# --- rebuilding on the other side (importable by name from both) ---


def make_function(code: Any, globals_: dict[str, Any], name: str, closure: Any) -> Any:
    return types.FunctionType(code, globals_, name, None, closure)


def set_function_state(func: Any, state: dict[str, Any]) -> None:
    """A notebook function's attributes replaced in place (its code, globals and cells stay:
    a change to its defaults, its ``__dict__`` or its cells' contents)."""
    for module in state.pop("_submodules", ()):  # imported for the function's sake
        del module
    attributes = state.pop("__dict__", ())
    func.__dict__.clear()
    func.__dict__.update(dict(attributes))
    for name, value in state.items():
        setattr(func, name, value)


def view_of(base: Any, offset: int, shape: tuple[int, ...], stride: tuple[int, ...], dtype: Any,
            kind: Any) -> Any:  # fmt: skip
    """A tensor over ``base``'s storage (the side that owns the memory makes the view)."""
    torch = sys.modules["torch"]
    storage = base.untyped_storage()
    t = torch.empty(0, dtype=dtype, device=base.device).set_(storage, offset, shape, stride)
    return torch.nn.Parameter(t, requires_grad=False) if kind is torch.nn.Parameter else t


_received_ptrs: set[int] = set()  # data pointers of CUDA storages mapped from the other side


def make_empty(kind: Any) -> Any:
    """An empty instance of a set, bytearray or cell type, filled next."""
    if kind is types.CellType:
        return types.CellType()
    return kind.__new__(kind)


def set_cell(cell: Any, state: tuple[bool, Any]) -> None:
    full, value = state
    if full:
        cell.cell_contents = value
    else:
        with contextlib.suppress(ValueError):
            del cell.cell_contents


def set_bytearray(target: bytearray, data: bytes) -> None:
    target[:] = data


def empty_array(kind: type, dtype: Any) -> Any:
    np = sys.modules["numpy"]
    array = np.empty(0, dtype=dtype)  # its own memory: resized when filled
    return array if kind is np.ndarray else array.view(kind)


def set_array(target: Any, state: tuple[Any, ...]) -> None:
    """An array given new contents in place when its shape and dtype allow it."""
    np = sys.modules["numpy"]
    shape, dtype, data = state
    if isinstance(data, list):  # an object array: its elements (objects the sides key)
        value = np.empty(len(data), dtype=object)
        value[:] = data
        value = value.reshape(shape)
    else:
        value = np.frombuffer(data, dtype=dtype).reshape(shape) if data else np.empty(shape, dtype)
    if target.shape == value.shape and target.dtype == value.dtype:
        if target.size:
            np.copyto(target, value)
        return
    try:
        target.resize(value.shape, refcheck=False)
        target.dtype = value.dtype
        np.copyto(target, value)
    except (ValueError, TypeError) as exc:
        raise NotInPlace(f"an array that changed shape or dtype ({exc})") from exc


def empty_tensor(kind: type, dtype: Any) -> Any:
    torch = sys.modules["torch"]
    tensor = torch.empty(0, dtype=dtype)
    return tensor if kind in (torch.Tensor,) else kind(tensor, requires_grad=False)


def set_tensor(target: Any, state: tuple[Any, ...]) -> None:
    """A tensor's contents (a CPU tensor's bytes; nothing for CUDA memory, which both sides
    share), gradient, flag and attributes, in place."""
    torch = sys.modules["torch"]
    contents, requires_grad, grad, attributes = state
    if isinstance(contents, bytes):
        contents = pickle.loads(contents)
    with torch.no_grad():
        if contents is not None:
            if target.shape == contents.shape and target.dtype == contents.dtype:
                target.copy_(contents)
            else:
                target.set_(contents)
    if target.is_leaf and target.requires_grad != requires_grad:
        target.requires_grad_(requires_grad)
    if target.is_leaf and target.grad is not grad:
        target.grad = grad
    if attributes is not None:
        target.__dict__.clear()
        target.__dict__.update(attributes)


class NotInPlace(Exception):
    """A fill that cannot be applied to the object in place (the name is rebound)."""


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


def _fill_of(obj: Any, rv: tuple[Any, ...]) -> tuple[Any, ...]:
    """(state, list items, dict items, set items, setter) of a reduce value."""
    state = rv[2] if len(rv) > 2 else None
    listitems = list(rv[3]) if len(rv) > 3 and rv[3] is not None else None
    dictitems = list(rv[4]) if len(rv) > 4 and rv[4] is not None else None
    setter = rv[5] if len(rv) > 5 else None
    return state, listitems, dictitems, None, setter


class Describer:
    """Describes objects of one side: ``graph`` names its keys, ``files`` renames the code of
    cells (the notebook's file names -> the worker's), ``sources`` collects those cells'
    lines."""

    def __init__(self, graph: Graph, files: Mapping[str, str] | None = None) -> None:
        self.graph = graph
        self.files = dict(files or {})
        self.sources: dict[str, str] = {}

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
        if np is not None and isinstance(obj, np.ndarray):
            # an object array's bytes are pointers: its elements go instead (pandas' object
            # columns and indexes)
            data = list(obj.ravel()) if obj.dtype.hasobject else (
                obj.tobytes() if obj.size else b"")  # fmt: skip
            return (empty_array, (type(obj), obj.dtype)), (
                (obj.shape, obj.dtype, data), None, None, None, set_array
            )  # fmt: skip
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, type):
            if _cp is None:
                raise pickle.PicklingError(f"class {obj.__qualname__} needs cloudpickle")
            rv = _cloudpickle("_dynamic_class_reduce")(obj)
            return (rv[0], rv[1]), (rv[2], None, None, None, rv[5])
        if isinstance(obj, types.CellType):
            try:
                contents: tuple[bool, Any] = (True, obj.cell_contents)
            except ValueError:
                contents = (False, None)
            return (make_empty, (types.CellType,)), (contents, None, None, None, set_cell)
        if isinstance(obj, bytearray) and type(obj) is bytearray:
            return (make_empty, (bytearray,)), (bytes(obj), None, None, None, set_bytearray)
        if isinstance(obj, set):
            rv = obj.__reduce_ex__(5)
            state = rv[2] if len(rv) > 2 else None
            return (make_empty, (type(obj),)), (state, None, None, list(obj), None)
        reduce = copyreg.dispatch_table.get(type(obj))
        if reduce is None and _cp is not None:
            reduce = cloudpickle.Pickler.dispatch_table.get(type(obj))
        rv = reduce(obj) if reduce is not None else obj.__reduce_ex__(5)
        if isinstance(rv, str) or not isinstance(rv, tuple):
            raise pickle.PicklingError(f"{type(obj).__name__} is a global: not an object to key")
        state, listitems, dictitems, setitems, setter = _fill_of(obj, rv)
        # a Counter carries its items in its arguments: an empty one, filled like a dict
        if isinstance(obj, dict) and dictitems is None and setter is None:
            dictitems = list(dict.items(obj))
            return (make_empty, (type(obj),)), (_attributes(obj), None, dictitems, None, None)
        if isinstance(obj, list) and listitems is None and setter is None:
            listitems = list(list.__iter__(obj))
            return (make_empty, (type(obj),)), (_attributes(obj), listitems, None, None, None)
        return (rv[0], rv[1]), (state, listitems, dictitems, setitems, setter)

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
        return (empty_tensor, (kind, t.dtype)), self.tensor_fill(t, contents)

    @staticmethod
    def tensor_fill(t: Any, contents: bytes | None = None) -> tuple[Any, ...]:
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
        version = 0 if t.is_cuda else t._version
        return ("tensor", version, t.data_ptr(), tuple(t.shape), tuple(t.stride()),
                t.storage_offset(), str(t.dtype), t.requires_grad,
                None if grad is None else self.graph.key_of.get(id(grad)),
                tuple(sorted(t.__dict__)) if t.__dict__ else ())  # fmt: skip


def _array_print(a: Any) -> tuple[Any, ...]:
    """What a change to a NumPy array of numbers changes: its shape, its dtype and a checksum
    of its bytes, read where they are (no copy when it is contiguous)."""
    np = sys.modules["numpy"]
    flat = np.ascontiguousarray(a).reshape(-1)
    return ("array", a.shape, a.dtype.str, zlib.crc32(flat.view(np.uint8)) if flat.size else 0)


def _attributes(obj: Any) -> dict[str, Any] | None:
    return dict(obj.__dict__) if getattr(obj, "__dict__", None) else None


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


def _base_pickler() -> type:
    return cloudpickle.Pickler if cloudpickle is not None else pickle.Pickler


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
            graph = self.describer.graph
            if obj is _Namespace.MARK or obj is graph.namespace:
                return NS
            if not keyable(obj):
                return None
            key = graph.key_of.get(id(obj))
            if key is None or graph.table.get(key) is not obj:
                key = graph.add(obj)
            self.found.append(obj)
            return ("k", key)

        def reducer_override(self, obj: Any) -> Any:
            kind = type(obj)
            if _immutable_library_value(obj) or _range_index(obj):
                return pickle.loads, (pickle.dumps(obj, protocol=5),)
            elif kind is types.CodeType and self.describer.files and code_reduce is not None:
                return self._named_code(obj)
            if cloudpickle is None:
                return NotImplemented
            return super().reducer_override(obj)

        def _named_code(self, code: types.CodeType) -> Any:
            describer = self.describer
            name = describer.files.get(code.co_filename, code.co_filename)
            if name != code.co_filename and name not in describer.sources:
                import linecache

                cached: tuple[Any, ...] = linecache.cache.get(code.co_filename, ())
                if len(cached) > 2 and cached[2]:
                    describer.sources[name] = "".join(cached[2])
            assert code_reduce is not None
            rebuild, args = code_reduce(code)
            args = tuple(
                name if isinstance(a, str) and a in ("<dynamic-code>", code.co_filename) else a
                for a in args
            )
            return rebuild, args

    return KeyedPickler


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


class Graph:
    """One side's keyed objects: ``table`` (key -> object), ``key_of`` (id -> key), ``prints``
    (key -> the print both sides agreed on), ``bindings`` (name -> the pickled binding both
    sides agreed on). ``step`` is +1 on the notebook's side, -1 on a worker's."""

    def __init__(self, namespace: MutableMapping[str, Any], step: int) -> None:
        self.namespace = namespace
        self.step = step
        self.table: dict[Key, Any] = {}
        self.key_of: dict[int, Key] = {}
        self.prints: dict[Key, Any] = {}
        self.from_source: set[Key] = set()  # definitions described by their statement
        self.bindings: dict[str, bytes] = {}
        self._next = step

    def add(self, obj: Any) -> Key:
        key = self._next
        self._next += self.step
        self.table[key] = obj
        self.key_of[id(obj)] = key
        return key

    def put(self, key: Key, obj: Any) -> None:
        """``obj`` is the object the other side calls ``key``."""
        old = self.table.get(key)
        if old is not None:
            self.key_of.pop(id(old), None)
        self.table[key] = obj
        self.key_of[id(obj)] = key

    def forget(self, keys: Iterable[Key]) -> None:
        for key in keys:
            obj = self.table.pop(key, None)
            if obj is not None and self.key_of.get(id(obj)) == key:
                del self.key_of[id(obj)]
            self.prints.pop(key, None)
            self.from_source.discard(key)

    # --- looking ---

    def look(
        self,
        names: Mapping[str, Any],
        describer: Describer | None = None,
        *,
        max_bytes: int | None = None,
        fills: bool = True,
    ) -> Walk:
        """Describe ``names`` (name -> value) and every keyed object they reach: each binding
        pickled, each reached object's print, and its fill when ``fills`` or when its print
        is not the agreed one (a create part for an object the other side lacks). A value that
        cannot be described is in ``cannot``: its name, with why."""
        describer = describer or Describer(self)
        walk = Walk()
        queue: list[Any] = []
        for name, value in names.items():
            found: list[Any] = []
            try:
                walk.bindings[name] = dumps_keyed(describer, value, found)
            except Exception as exc:  # what does not pickle stays where it is
                walk.cannot[name] = _why(value, exc)
                continue
            if max_bytes is not None and len(walk.bindings[name]) > max_bytes:  # bytes, a str
                walk.cannot[name] = too_big(value, len(walk.bindings.pop(name)), max_bytes)
                continue
            walk.binding_keys[name] = {self.key_of[id(o)] for o in found} | (
                {self.key_of[id(value)]} if id(value) in self.key_of else set()
            )
            queue.extend(found)
            if keyable(value):
                queue.append(value)
        seen: set[Key] = set()
        while queue:
            obj = queue.pop()
            key = self.key_of[id(obj)]
            if key in seen:
                continue
            seen.add(key)
            found = []
            try:
                record = self._describe(describer, key, obj, found, fills)
            except Exception as exc:
                walk.failed[key] = _why(obj, exc)
                continue
            if max_bytes is not None and len(record.fill) > max_bytes:
                walk.failed[key] = too_big(obj, len(record.fill), max_bytes)
                continue
            walk.records[key] = record
            walk.children[key] = {self.key_of[id(o)] for o in found}
            queue.extend(found)
        self._spread_failures(walk, describer)
        self._reached_only(walk)
        return walk

    @staticmethod
    def _reached_only(walk: Walk) -> None:
        """Drop what no name reaches any more (what a definition held before it was
        described by its statement instead)."""
        reached: set[Key] = set()
        todo = [k for keys in walk.binding_keys.values() for k in keys]
        while todo:
            key = todo.pop()
            if key not in reached:
                reached.add(key)
                todo.extend(walk.children.get(key, ()))
        for key in [k for k in walk.records if k not in reached]:
            del walk.records[key]

    def _describe(
        self, describer: Describer, key: Key, obj: Any, found: list[Any], fills: bool
    ) -> Record:
        known = key in self.prints
        if _is_tensor(obj):
            stamp = describer.tensor_print(obj)
            # unchanged, and holding nothing else to walk (a gradient, attributes): as agreed
            bare = obj.grad is None if obj.is_leaf else True
            if known and not fills and bare and not obj.__dict__ and self.prints[key] == stamp:
                return Record(None, b"", stamp)
            if known and obj.is_cuda:  # the other side has it (its memory is shared): no
                # create part, which would share it again (refused for memory it received)
                fill = describer.tensor_fill(obj)
                return Record(None, dumps_keyed(describer, fill, found, [fill[0]]), stamp)
            create, fill = describer.parts(obj)
            contents, _, _, attributes = fill[0]
            inline = [fill[0], *(x for x in (contents, attributes) if x is not None)]
            fill_bytes = dumps_keyed(describer, fill, found, inline)
            create_bytes = None if known else dumps_keyed(describer, create, found, [create[1]])
            return Record(create_bytes, fill_bytes, stamp)
        if key in self.from_source:  # once by its statement, always (its state is that)
            record = self._by_source(describer, key, obj, found)
            if record is not None:
                return record
        np = _numpy()
        if np is not None and type(obj) is np.ndarray and not obj.dtype.hasobject:
            # an array's print is a checksum of its memory: unchanged, nothing is pickled
            stamp = _array_print(obj)
            if known and not fills and self.prints[key] == stamp:
                return Record(None, b"", stamp)
            create, fill = describer.parts(obj)
            create_bytes = None if known else dumps_keyed(describer, create, found, [create[1]])
            return Record(create_bytes, dumps_keyed(describer, fill, found, [fill[0]]), stamp)
        start = len(found)
        try:
            create, fill = describer.parts(obj)
            inline = made_for_the_occasion(create, fill, deep=_library_owned(obj))
            if isinstance(obj, type):  # cloudpickle's skeleton arguments, new each time
                inline += _containers_in([create[1]])
            fill_bytes = dumps_keyed(describer, _plain_runs(fill), found, inline)
            # written each time: what its arguments hold (an iterator's list, a function's
            # cells) is walked too
            create_bytes = dumps_keyed(describer, create, found, inline)
        except Exception:
            del found[start:]  # what the failed try met is not part of it (a Triton lock)
            record = self._by_source(describer, key, obj, found)
            if record is None:
                raise
            self.from_source.add(key)
            return record
        if fill[:4] == (None, None, None, None):  # all its state is in how it is made
            return Record(create_bytes, fill_bytes, ("made", zlib.crc32(create_bytes)))
        return Record(None if known else create_bytes, fill_bytes, zlib.crc32(fill_bytes))

    def _by_source(
        self, describer: Describer, key: Key, obj: Any, found: list[Any]
    ) -> Record | None:
        """A notebook definition that does not pickle, described by its statement (None:
        it has none); its state is its statement: it changes when the statement does."""
        made = describer.by_source(obj)
        if made is None:
            return None
        create, fill = made
        # the statement and its arguments are written inline: nothing in them is keyed
        create_bytes = dumps_keyed(describer, create, found, [create[1]])
        fill_bytes = dumps_keyed(describer, fill, found)
        known = key in self.prints
        return Record(None if known else create_bytes, fill_bytes,
                      ("source", zlib.crc32(create_bytes)))  # fmt: skip

    def _spread_failures(self, walk: Walk, describer: Describer) -> None:
        """An object that refers to one that cannot go cannot go either (unless it goes as
        its source: a Triton kernel holding a lock); a name that reaches one cannot."""
        if not walk.failed:
            return
        parents: dict[Key, set[Key]] = defaultdict(set)
        for key, kids in walk.children.items():
            for kid in kids:
                parents[kid].add(key)
        todo = list(walk.failed)
        by_source: set[Key] = set()
        roots: dict[Key, str] = {}  # the failure a holder's comes from
        while todo:
            key = todo.pop()
            for parent in parents.get(key, ()):
                if parent in walk.failed or parent in by_source:
                    continue
                found: list[Any] = []
                try:
                    record = self._by_source(describer, parent, self.table[parent], found)
                except Exception:
                    record = None
                if record is not None:
                    by_source.add(parent)
                    self.from_source.add(parent)
                    walk.records[parent] = record
                    walk.children[parent] = {self.key_of[id(o)] for o in found}
                    continue
                root = roots.get(key, walk.failed[key])
                roots[parent] = root
                holder = type(self.table[parent]).__name__
                walk.failed[parent] = f"{holder} holds what cannot go: {root}"
                todo.append(parent)
        for key in walk.failed:
            walk.records.pop(key, None)
        for name, keys in list(walk.binding_keys.items()):
            bad = keys & walk.failed.keys()
            if bad:
                walk.cannot[name] = walk.failed[min(bad, key=abs)]
                del walk.bindings[name]

    # --- the message to the other side ---

    def changes(self, walk: Walk, previous: Iterable[str]) -> Message:
        """What the other side needs to equal this one after ``walk``: the objects it lacks,
        those whose print changed, the names bound differently, the names gone (of
        ``previous``, the names both sides had), the keys nothing reaches any more."""
        msg = Message()
        for key, record in walk.records.items():
            if key not in self.prints:
                msg.new[key] = (record.create or b"", record.fill)
            elif self.prints[key] != record.print and isinstance(record.print, tuple) \
                    and record.print[0] == "made":  # fmt: skip
                msg.new[key] = (record.create or b"", record.fill)  # made anew over there
            elif self.prints[key] != record.print:
                msg.changed[key] = record.fill
        self._holders_too(walk, msg)
        for name, blob in walk.bindings.items():
            if self.bindings.get(name) != blob:
                msg.names[name] = blob
        msg.deleted = sorted(n for n in previous if n not in walk.bindings and n not in walk.cannot)
        reached = set(walk.records) | set(walk.failed)
        msg.forget = sorted(k for k in self.prints if k not in reached)
        return msg

    def _holders_too(self, walk: Walk, msg: Message) -> None:
        """An object made anew over there (all its state is in how it is made: a pandas
        manager after a column was added) is a new object: what holds it (the DataFrame) is
        filled again there so that it holds the new one, and a holder itself only made is made
        anew too, up the chain."""
        remade = [k for k in msg.new if k in self.prints]
        if not remade:
            return
        holders: dict[Key, list[Key]] = {}
        for parent, kids in walk.children.items():
            for kid in kids:
                holders.setdefault(kid, []).append(parent)
        while remade:
            for parent in holders.get(remade.pop(), ()):
                record = walk.records.get(parent)
                if record is None or parent in msg.new or parent in msg.changed:
                    continue
                if isinstance(record.print, tuple) and record.print[:1] == ("made",):
                    msg.new[parent] = (record.create or b"", record.fill)
                    remade.append(parent)
                elif record.fill:
                    msg.changed[parent] = record.fill

    def agree(self, walk: Walk, msg: Message) -> None:
        """The other side applied ``msg``: both now hold what ``walk`` saw."""
        for key, record in walk.records.items():
            self.prints[key] = record.print
        for name in msg.deleted:
            self.bindings.pop(name, None)
        self.bindings.update(walk.bindings)
        self.forget(msg.forget)
        for key in list(self.table):  # described, never sent (a failed one): not kept
            if key not in self.prints:
                self.forget([key])

    # --- applying the other side's message ---

    def apply(self, msg: Message, describer: Describer | None = None) -> Applied:
        """Make this side equal the other's: create what it sent new, fill in place what
        changed (or rebind where that cannot be done in place), bind and delete names."""
        applier = _Applier(self, msg)
        out = applier.run()
        describer = describer or Describer(self)
        # what this side now agrees with: its own prints of what it just created or filled
        touched = {**dict.fromkeys(msg.new), **dict.fromkeys(msg.changed)}
        for key in touched:
            obj = self.table.get(key)
            if obj is None:
                continue
            if _is_tensor(obj):  # its print is its stamp (describing it would share it)
                self.prints[key] = describer.tensor_print(obj)
                if obj.is_cuda and key in msg.new:
                    _received_ptrs.add(obj.untyped_storage().data_ptr())
                continue
            try:
                self.prints[key] = self._describe(describer, key, obj, [], False).print
            except Exception:
                self.prints.pop(key, None)
        for name in out.bound:
            try:
                self.bindings[name] = dumps_keyed(describer, self.namespace[name], [])
            except Exception:
                self.bindings.pop(name, None)
        for name in msg.deleted:
            self.bindings.pop(name, None)
        self.forget(msg.forget)
        return out


@dataclass
class Message:
    """``new``: key -> (create, fill); ``changed``: key -> fill; ``names``: name -> binding;
    ``deleted``: names; ``forget``: keys nothing reaches."""

    new: dict[Key, tuple[bytes, bytes]] = field(default_factory=dict)
    changed: dict[Key, bytes] = field(default_factory=dict)
    names: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    forget: list[Key] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.new or self.changed or self.names or self.deleted or self.forget)

    def size(self) -> int:
        created = sum(len(a) + len(b) for a, b in self.new.values())
        return created + sum(map(len, self.changed.values())) + sum(map(len, self.names.values()))

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.new, self.changed, self.names, self.deleted, self.forget)

    @classmethod
    def of(cls, data: tuple[Any, ...]) -> Message:
        return cls(*data)


@dataclass
class Applied:
    """What applying a message did: names ``bound``, ``rebound`` (the object could not take
    its new state in place: name -> why), objects ``created`` (key -> object)."""

    bound: list[str] = field(default_factory=list)
    rebound: dict[str, str] = field(default_factory=dict)
    created: dict[Key, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class _Loader(pickle.Unpickler):
    def __init__(self, data: bytes, applier: _Applier) -> None:
        super().__init__(io.BytesIO(data))
        self.applier = applier

    def persistent_load(self, pid: Any) -> Any:
        if pid == NS:
            return self.applier.graph.namespace
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "k":
            return self.applier.object(pid[1])
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


class _Applier:
    def __init__(self, graph: Graph, msg: Message) -> None:
        self.graph = graph
        self.msg = msg
        self.out = Applied()
        self._creating: set[Key] = set()
        self.replaced: dict[int, Any] = {}
        self.broken: dict[Key, str] = {}  # objects this side could not make or fill, and why

    def load(self, data: bytes) -> Any:
        return _Loader(data, self).load()

    def object(self, key: Key) -> Any:
        table = self.graph.table
        if key in table:
            return table[key]
        if key in self.broken:
            raise _Broken(self.broken[key])
        if key not in self.msg.new or key in self._creating:
            raise pickle.UnpicklingError(f"the other side referred to object {key}, not here")
        self._creating.add(key)
        create = self.load(self.msg.new[key][0])
        if create is _Namespace.MARK:
            obj: Any = self.graph.namespace
        else:
            factory, args = create
            args = tuple(self.graph.namespace if a is _Namespace.MARK else a for a in args)
            obj = factory(*args)
            if factory is definitions.define:
                self.graph.from_source.add(key)
        self.graph.put(key, obj)
        self.out.created[key] = obj
        # filled at once: an object another one's creation takes as an argument (a frame's
        # index its attributes) must be whole by then; a cycle meets a partial one
        self._fill(key, obj, self.msg.new[key][1])
        return obj

    def _fill(self, key: Key, obj: Any, data: bytes) -> None:
        try:
            fill_in_place(obj, self.load(data))
        except NotInPlace as exc:
            self._rebuild(key, obj, str(exc))

    def run(self) -> Applied:
        # a key this side has already: all its state is in how it is made (itertools.count)
        remade = [k for k in self.msg.new if k in self.graph.table]
        # each object on its own: one this side cannot make (a class it cannot import) fails
        # the names that reach it, not the whole message
        made_only = "its state is only in how it is made"
        for key in remade:
            self._guarded(key, partial(self._rebuild, key, self.graph.table[key], made_only))
        for key in self.msg.new:
            self._guarded(key, partial(self.object, key))
        for key, data in self.msg.changed.items():
            obj = self.graph.table.get(key)
            if obj is not None:
                self._guarded(key, partial(self._fill, key, obj, data))
        ns = self.graph.namespace
        for name in self.msg.deleted:
            ns.pop(name, None)
        self._bind(self.msg.names)
        if self.broken and self.out.failed:
            # a definition made by its statement whose decorators are names of this same
            # message (``@autotune`` bound by the cell that imported it): once more, now bound
            for key in [k for k in self.broken if k in self.msg.new]:
                del self.broken[key]
                self._guarded(key, partial(self.object, key))
            retry = {n: self.msg.names[n] for n in self.out.failed if n in self.msg.names}
            for name in retry:
                del self.out.failed[name]
            self._bind(retry)
        return self.out

    def _bind(self, names: Mapping[str, bytes]) -> None:
        ns = self.graph.namespace
        for name, data in names.items():
            try:
                ns[name] = self.load(data)
            # a class this side cannot import, an unpickling that raises or calls sys.exit:
            # that name fails, said; the rest of the message is applied
            except (Exception, SystemExit) as exc:
                self.out.failed[name] = str(exc) if isinstance(exc, _Broken) else _unmade(exc)
                continue
            self.out.bound.append(name)

    def _guarded(self, key: Key, step: Callable[[], Any]) -> None:
        try:
            step()
        except (Exception, SystemExit) as exc:
            self.broken[key] = _unmade(exc)
            self._creating.discard(key)
            obj = self.graph.table.get(key)
            for name, value in self.graph.namespace.items():  # the names bound to it
                if obj is not None and value is obj:
                    self.out.failed[name] = self.broken[key]

    def _rebuild(self, key: Key, old: Any, why: str) -> None:
        """An object that cannot take its new state in place: a new one under the same key
        (names bound to the old one are rebound to it)."""
        self.graph.table.pop(key, None)
        self.graph.key_of.pop(id(old), None)
        new = self.msg.new.get(key)
        if new is None:
            raise pickle.UnpicklingError(f"object {key} changed in a way it cannot take ({why})")
        self._creating.discard(key)
        self.replaced[id(old)] = old
        obj = self.object(key)
        for name, value in list(self.graph.namespace.items()):
            if value is old:
                self.graph.namespace[name] = obj
                self.out.rebound[name] = why


def _builtin_base(kind: type, bases: tuple[Any, ...]) -> Any:
    """The first of ``bases`` (stdlib containers) in ``kind``'s MRO."""
    for base in kind.__mro__:
        if base in bases:
            return base
    return bases[-1]


def fill_in_place(obj: Any, fill: tuple[Any, ...]) -> None:
    """Give ``obj`` the state, items and attributes a description carries, in place: lists,
    dicts and sets through their stdlib base class (never a subclass's own ``update``),
    objects through ``__setstate__`` when their class has one, else their ``__dict__``."""
    state, listitems, dictitems, setitems, setter = fill
    if setter is not None:
        setter(obj, state)
    elif state is not None:
        set_state(obj, state)
    if listitems is not None:
        if isinstance(obj, list):
            base = _builtin_base(type(obj), (list,))
            base.__delitem__(obj, slice(None))
            base.extend(obj, listitems)
        elif isinstance(obj, deque):
            deque.clear(obj)
            deque.extend(obj, listitems)
        else:
            raise NotInPlace(f"{type(obj).__name__} items")
    if dictitems is not None:
        if isinstance(obj, dict):
            base = _builtin_base(type(obj), (OrderedDict, defaultdict, dict))
            base.clear(obj)
            for key, value in dictitems:
                base.__setitem__(obj, key, value)
        else:
            raise NotInPlace(f"{type(obj).__name__} items")
    if setitems is not None:
        set.clear(obj)
        set.update(obj, setitems)


def set_state(obj: Any, state: Any) -> None:
    """What pickle does with a state, but in place: ``__setstate__`` when the class defines
    one, else the ``__dict__`` (and slots) replaced."""
    setstate = getattr(type(obj), "__setstate__", None)
    if setstate is not None and setstate is not getattr(object, "__setstate__", None):
        obj.__setstate__(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        try:
            attributes = obj.__dict__
        except AttributeError as exc:
            raise NotInPlace(f"{type(obj).__name__} has no __dict__") from exc
        if type(attributes) is not dict:
            raise NotInPlace(f"{type(obj).__name__}'s attributes are read-only")
        attributes.clear()
        attributes.update(state)
    if slots:
        for name, value in slots.items():
            object.__setattr__(obj, name, value)


class _Broken(pickle.UnpicklingError):
    """A reference to an object this side could not make (its why is the message)."""


def _unmade(exc: BaseException) -> str:
    """Why this side could not make what the other sent (an unpickling that failed)."""
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"it could not be made here ({type(exc).__name__}{': ' + text if text else ''})"


def _why(value: Any, exc: BaseException) -> str:
    kind = type(value).__name__ if value is not None else "it"
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return f"{kind} cannot be pickled ({text})"


def dump_message(msg: Message, extra: Mapping[str, Any]) -> bytes:
    return pickle.dumps({"state": msg.as_tuple(), **extra}, protocol=5)


def load_message(data: bytes) -> tuple[Message, dict[str, Any]]:
    outer = pickle.loads(data)
    return Message.of(outer.pop("state")), outer
