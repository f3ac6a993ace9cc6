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

from collections import defaultdict
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from .apply import Applied, Message, _Applier, _why
from .describe import (
    Describer,
    Walk,
    dumps_keyed,
    is_made,
)
from .objects import Key, _is_tensor, _received_ptrs, keyable, too_big


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
                record = describer.record(key, obj, found, fills)
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
        reached = reached_keys(walk, (k for keys in walk.binding_keys.values() for k in keys))
        for key in [k for k in walk.records if k not in reached]:
            del walk.records[key]

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
                    record = describer.record_by_source(parent, self.table[parent], found)
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
            elif self.prints[key] != record.print and is_made(record.print):
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
        manager after a column was added) is a new object: what holds it is given it there."""
        holders_too(walk, msg, [k for k in msg.new if k in self.prints])

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
                self.prints[key] = describer.record(key, obj, [], False).print
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


def holders_too(walk: Walk, msg: Message, remade: list[Key]) -> None:
    """Of ``remade``, objects ``msg`` makes anew where the other side (or a put-back) already
    has one: what holds each (a DataFrame its block manager) is filled again so that it holds
    the new one, and a holder itself only made is made anew too, up the chain."""
    holders: dict[Key, list[Key]] = {}
    for parent, kids in walk.children.items():
        for kid in kids:
            holders.setdefault(kid, []).append(parent)
    while remade:
        for parent in holders.get(remade.pop(), ()):
            record = walk.records.get(parent)
            if record is None or parent in msg.new or parent in msg.changed:
                continue
            if is_made(record.print):
                msg.new[parent] = (record.create or b"", record.fill)
                remade.append(parent)
            elif record.fill:
                msg.changed[parent] = record.fill


def reached_keys(walk: Walk, start: Iterable[Key]) -> set[Key]:
    """The keys ``start`` reaches in ``walk`` through each object's own, themselves included."""
    seen: set[Key] = set()
    todo = list(start)
    while todo:
        key = todo.pop()
        if key not in seen:
            seen.add(key)
            todo.extend(walk.children.get(key, ()))
    return seen
