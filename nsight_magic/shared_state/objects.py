"""The kinds of object the shared-state graph tells apart (what travels inline, what gets a
key, what goes by reference), and the functions that rebuild an object on the other side (both
sides import them by name: a message names them). ``graph.py`` holds the table; this module is
its vocabulary.

Both sides run this same code (the worker imports it: standard library at import time,
cloudpickle when present)."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import enum
import fractions
import numbers
import pathlib
import pickle
import re
import sys
import types
from collections.abc import MutableMapping
from typing import Any, Protocol

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


def _point_at(target: Any, contents: Any) -> None:
    if target.dtype == contents.dtype and target.device == contents.device:
        target.set_(contents)
    else:  # a cast or a move in place (``model.half()``, ``.cpu()``): as Module._apply does
        target.data = contents


# the notebook's copies of CUDA memory a worker's tensor moved to (``cuda_contents``), which the
# worker then maps (``notebook_side``: adopted), so that both sides share it again
_copied_anew: list[Any] = []


def cuda_contents(rebuild: Any, args: tuple[Any, ...], copy: bool) -> Any:
    """The new memory of a CUDA tensor both sides know (a cast, ``p.data = ...``), from the
    other side by IPC handle: on the notebook's side its own copy (``copy``: the worker's memory
    dies with it), on a worker's the notebook's memory mapped."""
    mapped = rebuild(*args)
    if copy:
        own = mapped.clone()
        _copied_anew.append(own)
        return own
    _received_ptrs.add(mapped.untyped_storage().data_ptr())
    return mapped


def set_default_factory(obj: Any, state: tuple[Any, Any]) -> None:
    """A defaultdict's ``default_factory`` (pickle carries it in the arguments that make it:
    a cell that changes it changes the object in place) and a subclass's attributes."""
    own, factory = state
    obj.default_factory = factory
    if own:
        obj.__dict__.update(own)


def view_of(base: Any, offset: int, shape: tuple[int, ...], stride: tuple[int, ...], dtype: Any,
            kind: Any, detached: bool = False) -> Any:  # fmt: skip
    """A tensor over ``base``'s storage (the side that owns the memory makes the view). On the
    CPU a view torch knows as one (its ``_base``, its gradient's path), ``detached``: of
    ``base.detach()`` (a ``state_dict()``'s tensors)."""
    torch = sys.modules["torch"]
    if not base.is_cuda and dtype == base.dtype and kind is not torch.nn.Parameter:
        with contextlib.suppress(RuntimeError):
            return (base.detach() if detached else base).as_strided(shape, stride, offset)
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


def new_exception(kind: type, args: tuple[Any, ...]) -> Any:
    """An exception of ``kind`` with ``args``, without its ``__init__`` (a subclass whose
    ``__init__`` takes other arguments than it passes on, ``MyErr(msg, code)``, cannot be
    remade from its ``args``: pickle's own way fails there)."""
    exc = kind.__new__(kind, *args)
    exc.args = args
    return exc


def set_exception(exc: BaseException, state: tuple[Any, ...]) -> None:
    """An exception's attributes and chain (``raise ... from``): its pickle keeps only its
    arguments and ``__dict__`` (its traceback's frames cannot go at all)."""
    attributes, cause, context, suppress = state
    if attributes:
        exc.__dict__.update(attributes)
    exc.__cause__, exc.__context__, exc.__suppress_context__ = cause, context, suppress


def set_cached_property(prop: Any, state: tuple[Any, Any]) -> None:
    """A ``functools.cached_property``'s name and doc (its lock, Python 3.11's, is its own)."""
    prop.attrname, prop.__doc__ = state


def cached_function(func: Any, maxsize: int | None, typed: bool) -> Any:
    """``functools.lru_cache(maxsize, typed)(func)``: a cache of its own, empty (the other
    side's entries cannot be read)."""
    import functools

    return functools.lru_cache(maxsize=maxsize, typed=typed)(func)


def empty_typed_array(typecode: str) -> Any:
    """An empty ``array.array`` of ``typecode`` (filled next)."""
    import array

    return array.array(typecode)


def set_typed_array(target: Any, data: bytes) -> None:
    """An ``array.array``'s items in place (its typecode is fixed when it is made)."""
    del target[:]
    target.frombytes(data)


def empty_array(kind: type, dtype: Any) -> Any:
    np = sys.modules["numpy"]
    array = np.empty(0, dtype=dtype)  # its own memory: resized when filled
    return array if kind is np.ndarray else array.view(kind)


def array_view(base: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
               dtype: Any, kind: type) -> Any:  # fmt: skip
    """An array over ``base``'s memory, as the other side's is a view of its ``base`` (a slice
    of a dataset): a change through one is seen through the other, here as there. Memory of
    its own (filled next) when ``base`` cannot hold it."""
    np = sys.modules["numpy"]
    try:
        view = np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    except (TypeError, ValueError, BufferError):
        view = np.empty(shape, dtype)
    return view if kind is np.ndarray else view.view(kind)


# the marks an LR scheduler puts on the ``opt.step`` it wraps (torch >= 2.2; before: a counter)
SCHEDULER_MARKS = ("_wrapped_by_lr_sched", "_with_counter")


def set_optimizer(opt: Any, state: tuple[Any, ...]) -> None:
    """A torch optimizer's state in place: what its ``__getstate__`` gives (through its own
    ``__setstate__``), then what that leaves out: its step and state-dict hooks and flags, and
    an LR scheduler's wrapper of ``opt.step`` (made again: it holds a weak reference)."""
    own, extras, marks = state
    type(opt).__setstate__(opt, own)
    opt.__dict__.update(extras)
    step = vars(opt).get("step")
    wrapped = step is not None and any(hasattr(step, m) for m in SCHEDULER_MARKS)
    if marks is None and wrapped:
        del opt.__dict__["step"]
    elif marks is not None and not wrapped:
        opt.step = _scheduled_step(opt, marks)


def _scheduled_step(opt: Any, marks: dict[str, Any]) -> Any:
    """What ``LRScheduler.__init__`` puts on ``opt.step``: the class's step, noting that it
    was called (``lr_scheduler.step()`` warns when it was not)."""
    import functools
    import weakref

    func, opt_ref = type(opt).step, weakref.ref(opt)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        optimizer = opt_ref()
        optimizer._opt_called = True  # type: ignore[union-attr]
        return func(optimizer, *args, **kwargs)

    wrapper.__dict__.update(marks)
    return wrapper


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
    # an inference tensor takes new values only in inference mode
    mode = torch.inference_mode() if target.is_inference() else torch.no_grad()
    with mode:
        if contents is not None:
            # CUDA contents are new memory for it (a cast, ``p.data = ...``): pointed at
            if not contents.is_cuda and (target.shape, target.dtype, target.device) == (
                    contents.shape, contents.dtype, contents.device):  # fmt: skip
                target.copy_(contents)
            else:
                _point_at(target, contents)
    if target.is_leaf and target.requires_grad != requires_grad:
        target.requires_grad_(requires_grad)
    if target.is_leaf and target.grad is not grad:
        target.grad = grad
    if attributes is not None:
        target.__dict__.clear()
        target.__dict__.update(attributes)


class KeyedTable(Protocol):
    """What describing and applying read of one side's table (``graph.Graph``): its namespace,
    its keyed objects both ways, their agreed prints, and how a key is given or taken."""

    namespace: MutableMapping[str, Any]
    step: int  # +1 on the notebook's side, -1 on a worker's
    table: dict[Key, Any]
    key_of: dict[int, Key]
    prints: dict[Key, Any]
    from_source: set[Key]

    def add(self, obj: Any) -> Key: ...

    def put(self, key: Key, obj: Any) -> None: ...


class NotInPlace(Exception):
    """A fill that cannot be applied to the object in place (the name is rebound)."""


def _base_pickler() -> type:
    return cloudpickle.Pickler if cloudpickle is not None else pickle.Pickler
