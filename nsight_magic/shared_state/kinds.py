"""How an object that is not a tensor, an array of numbers or a notebook function is made
and filled in place: pickle's reduce read as a create part and a fill part, and the kinds whose
own pickle leaves out what a cell changes (a torch optimizer's hooks, GradScaler's scale, an
exception's chain) or cannot be made again as it is (a file's memory map, Python 3.11's
``cached_property``, a cached method, an ``array.array``, a closure cell, a set).

Used by ``describe.Describer.parts``; standard library at import time.
"""

from __future__ import annotations

import array
import collections
import copyreg
import functools
import io
import mmap
import pickle
import types
from typing import Any

from .objects import (
    SCHEDULER_MARKS,
    _base_pickler,
    _cp,
    _is_tensor,
    _numpy,
    _torch,
    cached_function,
    cloudpickle,
    empty_typed_array,
    make_empty,
    new_exception,
    set_bytearray,
    set_cached_property,
    set_cell,
    set_default_factory,
    set_exception,
    set_optimizer,
    set_typed_array,
)

Parts = tuple[tuple[Any, Any], tuple[Any, ...]]


def special_parts(obj: Any) -> Parts | None:
    """The parts of a kind pickle cannot give in place (None: any other object)."""
    np = _numpy()
    if np is not None and isinstance(obj, np.memmap) and isinstance(obj.base, mmap.mmap) \
            and obj.filename and obj.flags.c_contiguous:  # fmt: skip
        # a file's memory (nanoGPT's dataset): the other side maps the same file (a copy
        # would send the whole file; "w+" again would empty it)
        mode = "r+" if obj.mode == "w+" else obj.mode
        mapped = (obj.filename, obj.dtype, mode, obj.offset, obj.shape)
        return (np.memmap, mapped), (None, None, None, None, None)
    if isinstance(obj, functools.cached_property):  # (Python 3.11's holds a lock)
        return (functools.cached_property, (obj.func,)), (
            (obj.attrname, obj.__doc__), None, None, None, set_cached_property)  # fmt: skip
    if isinstance(obj, functools._lru_cache_wrapper) and isinstance(
            getattr(obj, "__wrapped__", None), types.FunctionType):  # fmt: skip
        # a cached method (its reduce names it as a global its class's copy lacks)
        parameters = obj.cache_parameters()
        args = (obj.__wrapped__, parameters["maxsize"], parameters["typed"])
        return (cached_function, args), (None, None, None, None, None)
    if type(obj) is array.array:  # its items in place (its reduce makes it anew)
        fill = (obj.tobytes(), None, None, None, set_typed_array)
        return (empty_typed_array, (obj.typecode,)), fill
    return None


def _fill_of(obj: Any, rv: tuple[Any, ...]) -> tuple[Any, ...]:
    """(state, list items, dict items, set items, setter) of a reduce value."""
    state = rv[2] if len(rv) > 2 else None
    listitems = list(rv[3]) if len(rv) > 3 and rv[3] is not None else None
    dictitems = list(rv[4]) if len(rv) > 4 and rv[4] is not None else None
    setter = rv[5] if len(rv) > 5 else None
    return state, listitems, dictitems, None, setter


def container_parts(obj: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
    """A closure cell, a bytearray or a set: made empty, filled in place (its items)."""
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
    return reduced_parts(obj)  # a bytearray subclass: as its reduce says


# how ``object.__reduce_ex__`` makes an object, and the state it gives by default
_NEW_OBJECT = (vars(copyreg)["__newobj__"], vars(copyreg)["__newobj_ex__"])
_DEFAULT_GETSTATE = vars(object).get("__getstate__")


def reduced_parts(obj: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
    """Any other object, as its reduce (copyreg's, cloudpickle's, its own) says; a dict or
    list subclass whose reduce keeps its items in its arguments is made empty and filled."""
    reduce = copyreg.dispatch_table.get(type(obj))
    if reduce is None and _cp is not None:
        reduce = cloudpickle.Pickler.dispatch_table.get(type(obj))
    rv = reduce(obj) if reduce is not None else obj.__reduce_ex__(5)
    if isinstance(rv, str) or not isinstance(rv, tuple):
        raise pickle.PicklingError(f"{type(obj).__name__} is a global: not an object to key")
    state, listitems, dictitems, setitems, setter = _fill_of(obj, rv)
    if state is None and setter is None and rv[0] in _NEW_OBJECT \
            and getattr(type(obj), "__getstate__", None) is _DEFAULT_GETSTATE:  # fmt: skip
        # pickle's default state leaves out what is empty; in place, empty is a state too
        # (``del a.v`` of its last attribute, ``del s.x`` of its last slot)
        state = _empty_state(obj)
    torch = _torch()
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is not None and isinstance(obj, scaler) and isinstance(state, dict):
        # its pickle leaves out its scale and growth tracker ("pickled at the beginning of an
        # iteration"): in place they go, or AMP's loss scale starts over at every cell
        state = dict(vars(obj))
    if torch is not None and isinstance(obj, torch.optim.Optimizer) and isinstance(state, dict):
        return (rv[0], rv[1]), (_optimizer_state(obj, state), listitems, dictitems, setitems,
                                set_optimizer)  # fmt: skip
    if isinstance(obj, BaseException) and setter is None and isinstance(state, dict | None) \
            and rv[0] is type(obj):  # BaseException's own reduce  # fmt: skip
        chain = (obj.__cause__, obj.__context__, obj.__suppress_context__)
        made = (new_exception, (type(obj), tuple(obj.args)))
        return made, ((state, *chain), listitems, dictitems, setitems, set_exception)
    if isinstance(obj, collections.defaultdict) and setter is None:  # its factory: its state
        fill = ((state, obj.default_factory), listitems, dictitems, setitems, set_default_factory)
        return (rv[0], rv[1]), fill
    # a Counter carries its items in its arguments: an empty one, filled like a dict
    if isinstance(obj, dict) and dictitems is None and setter is None:
        dictitems = list(dict.items(obj))
        return (make_empty, (type(obj),)), (_attributes(obj), None, dictitems, None, None)
    if isinstance(obj, list) and listitems is None and setter is None:
        listitems = list(list.__iter__(obj))
        return (make_empty, (type(obj),)), (_attributes(obj), listitems, None, None, None)
    return (rv[0], rv[1]), (state, listitems, dictitems, setitems, setter)


def _optimizer_state(opt: Any, own: dict[str, Any]) -> tuple[Any, ...]:
    """``set_optimizer``'s state: torch's pickle of an optimizer keeps its ``__getstate__``
    only; its hooks (``register_step_post_hook``), flags and an LR scheduler's mark on its
    ``step`` go too (a worker's first ``sched.step()`` warned that ``opt.step`` was replaced)."""
    attributes = vars(opt)
    step = attributes.get("step")
    marks = None
    if step is not None and any(hasattr(step, m) for m in SCHEDULER_MARKS):
        marks = {m: getattr(step, m) for m in SCHEDULER_MARKS if hasattr(step, m)}
    extras = {k: v for k, v in attributes.items() if k not in own and not (
        k == "step" and marks is not None)}  # fmt: skip
    try:  # a library's hook that does not pickle: the hooks stay behind, as torch leaves them
        _TensorsAside(io.BytesIO()).dump(extras)
    except Exception:
        extras = {k: v for k, v in extras.items() if isinstance(v, bool | int | float | str)}
    return own, extras, marks


def _empty_state(obj: Any) -> Any:
    """The default state of an object with no attributes and no slot set: ``{}`` for its
    ``__dict__``, ``(dict or None, {})`` when its class has slots (``set_state`` empties
    them)."""
    has_dict = isinstance(getattr(obj, "__dict__", None), dict)
    attributes: dict[str, Any] | None = {} if has_dict else None
    slotted = copyreg._slotnames(type(obj))  # type: ignore[attr-defined]
    return (attributes, {}) if slotted else attributes


class _TensorsAside(_base_pickler()):  # type: ignore[misc]
    """Whether something pickles, its tensors not written (a check: they go by other means)."""

    def persistent_id(self, obj: Any) -> Any:
        return "tensor" if _is_tensor(obj) else None


def _attributes(obj: Any) -> dict[str, Any] | None:
    return dict(obj.__dict__) if getattr(obj, "__dict__", None) else None
