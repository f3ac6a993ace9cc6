"""A message between the two sides of the shared-state graph (``graph.py``), and applying it:
new objects made, changed ones filled in place (through the base class for lists, dicts and
sets, ``__setstate__`` or ``__dict__`` for objects, so every alias sees it)."""

from __future__ import annotations

import contextlib
import copyreg
import io
import pickle
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import definitions
from .describe import _Namespace
from .objects import NS, Key, KeyedTable, NotInPlace


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
    def __init__(self, graph: KeyedTable, msg: Message) -> None:
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
        obj: Any = None
        since = len(self.out.created)  # what its making makes too (a cycle's other half)
        try:
            create = self.load(self.msg.new[key][0])
            if create is _Namespace.MARK:
                obj = self.graph.namespace
            else:
                factory, args = create
                args = tuple(self.graph.namespace if a is _Namespace.MARK else a for a in args)
                obj = factory(*args)
                if factory is definitions.define:
                    self.graph.from_source.add(key)
            self.graph.put(key, obj)
            self.out.created[key] = obj
            # filled at once: an object another one's creation takes as an argument (a
            # frame's index its attributes) must be whole by then; a cycle meets a partial one
            self._fill(key, obj, self.msg.new[key][1])
        except BaseException as exc:
            # not made: what reaches it fails with its reason (kept half-made, ``[G()]`` of a
            # class this side cannot import was bound as ``[]`` without a word)
            self._creating.discard(key)
            # it and what its making made (B of a cycle holds a half-made A): made again
            # later, or failed with its reason
            for made in list(self.out.created)[since:]:
                self._creating.discard(made)
                half = self.out.created.pop(made)
                if self.graph.table.get(made) is half:
                    self.graph.table.pop(made, None)
                    self.graph.key_of.pop(id(half), None)
            if isinstance(exc, Exception | SystemExit):
                self.broken.setdefault(key, str(exc) if isinstance(exc, _Broken) else _unmade(exc))
            raise
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
        obj = self.graph.table.get(key)  # before a failed rebuild takes it out
        try:
            step()
        except (Exception, SystemExit) as exc:
            self.broken[key] = str(exc) if isinstance(exc, _Broken) else _unmade(exc)
            self._creating.discard(key)
            names = [n for n, v in self.graph.namespace.items() if obj is not None and v is obj]
            for name in names:  # the names bound to it
                self.out.failed[name] = self.broken[key]
            if obj is not None and not names:  # held by another (a parameter, an item)
                label = f"a {type(obj).__name__} inside another object"
                self.out.failed[label] = self.broken[key]

    def _rebuild(self, key: Key, old: Any, why: str) -> None:
        """An object that cannot take its new state in place: a new one under the same key
        (names bound to the old one are rebound to it)."""
        self.graph.table.pop(key, None)
        self.graph.key_of.pop(id(old), None)
        new = self.msg.new.get(key)
        if new is None:
            raise pickle.UnpicklingError(
                f"its {type(old).__name__} cannot take the new state in place ({why})"
            )
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
    gone = _gone(obj, state)
    setstate = getattr(type(obj), "__setstate__", None)
    if setstate is not None and setstate is not getattr(object, "__setstate__", None):
        obj.__setstate__(state)  # an update (torch's Module): what the other side deleted goes
        for name in gone:  # (its __setstate__ may have dropped it already)
            with contextlib.suppress(AttributeError, TypeError):
                obj.__dict__.pop(name, None)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    # an empty state empties an object that has a __dict__ (pickle skips it: a new object is
    # empty already)
    if state or (state is not None and isinstance(getattr(obj, "__dict__", None), dict)):
        try:
            attributes = obj.__dict__
        except AttributeError as exc:
            raise NotInPlace(f"{type(obj).__name__} has no __dict__") from exc
        if type(attributes) is not dict:
            raise NotInPlace(f"{type(obj).__name__}'s attributes are read-only")
        for name in gone:
            attributes.pop(name, None)
        attributes.update(state)
    if slots is not None:  # every slot of its class: set, or unset as on a new object
        for name in copyreg._slotnames(type(obj)):  # type: ignore[attr-defined]
            if name in slots:
                object.__setattr__(obj, name, slots[name])
            else:
                with contextlib.suppress(AttributeError):
                    object.__delattr__(obj, name)


def _gone(obj: Any, state: Any) -> list[str]:
    """The attributes ``obj``'s own state has that ``state`` (the other side's, of the same
    class) lacks: deleted there (``del m.tag``). What its class's ``__getstate__`` leaves out
    (a cache) is in neither, and stays."""
    theirs = state[0] if isinstance(state, tuple) and len(state) == 2 else state
    if not isinstance(theirs, dict) or not isinstance(getattr(obj, "__dict__", None), dict):
        return []
    try:
        mine = obj.__getstate__()
    except Exception:
        return []
    mine = mine[0] if isinstance(mine, tuple) and len(mine) == 2 else mine
    return [name for name in mine if name not in theirs] if isinstance(mine, dict) else []


class _Broken(pickle.UnpicklingError):
    """A reference to an object this side could not make (its why is the message)."""


def _unmade(exc: BaseException) -> str:
    """Why this side could not make what the other sent (an unpickling that failed)."""
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"it could not be made here ({type(exc).__name__}{': ' + text if text else ''})"


def _why(value: Any, exc: BaseException) -> str:
    kind = type(value).__name__ if value is not None else "it"
    said = str(exc)
    # a format string and its arguments, never formatted (torch's data loader iterators:
    # NotImplementedError("{} cannot be pickled", name))
    args = exc.args
    if len(args) > 1 and isinstance(args[0], str) and "{}" in args[0]:
        with contextlib.suppress(Exception):
            said = args[0].format(*args[1:])
    text = said.strip().splitlines()[0][:200] if said.strip() else type(exc).__name__
    return f"{kind} cannot be pickled ({text})"


def dump_message(msg: Message, extra: Mapping[str, Any]) -> bytes:
    return pickle.dumps({"state": msg.as_tuple(), **extra}, protocol=5)


def load_message(data: bytes) -> tuple[Message, dict[str, Any]]:
    outer = pickle.loads(data)
    return Message.of(outer.pop("state")), outer
