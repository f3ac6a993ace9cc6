"""The canonical description of a notebook's state after a cell, the same on both sides of a
differential case (README.md): one line of text per user name, the RNG states, the files in
the side's folder, the environment, print options and the state of modules imported from the
side's folder.

Runs inside a side's process (the plain notebook or the profiled one); standard library, and
numpy / pandas / torch only where the notebook imported them already. Nothing here draws from
an RNG, advances an iterator or copies an object to look at it.

Identity: every object that has one (all but numbers, strings, bytes, None, tuples and
frozensets of those) gets a tag, the place it was first seen: ``⟨x.items@2⟩`` is the object
that was ``x.items`` in the dump after cell 2. A later cell that still holds the same object
shows the same tag; one whose object was replaced by an equal copy shows a new one. Within one
dump an object met a second time is written ``⟨=x.items@2⟩`` (an alias), its contents once."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import os
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# IPython's own names in a shell's namespace, never the user's state
SKIP_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
ATOMS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), range, slice)
MAX_DEPTH = 7
MAX_ITEMS = 40
# the folder products of Python itself, not of a cell
SKIP_FILES = frozenset({"__pycache__", ".ipynb_checkpoints"})


def sha(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]


RESULT = "<the magic's result:"


def product_result(obj: Any) -> bool:
    """A run or sweep a magic returned (the cell's ``Out`` when it is not shown as a live view):
    the product's output, not the notebook's state."""
    cls = type(obj)
    return cls.__module__.startswith("nsight_magic.") or cls.__name__ in ("BareRun", "BareResult")


def user_names(ns: Mapping[str, Any], hidden: Mapping[str, Any]) -> list[str]:
    """The names a user defined: not ``_x`` (but ``_``), not IPython's, not modules."""
    names = []
    for name, value in ns.items():
        if name in SKIP_NAMES or (name.startswith("_") and name != "_"):
            continue
        if name != "_" and name in hidden and hidden[name] is value:
            continue  # IPython's own (``_`` is pushed as hidden too: it is the user's)
        if isinstance(value, types.ModuleType):
            continue
        names.append(name)
    return sorted(names)


class Describer:
    """One side's describer: it keeps the objects it tagged (so an id is never reused for
    another object while the side runs) across the dumps of one case."""

    def __init__(self, namespace: Mapping[str, Any], base: Path) -> None:
        self.namespace = namespace
        self.base = base
        self.tags: dict[int, str] = {}
        self.kept: list[Any] = []
        self.cell = 0
        self.shown: set[int] = set()
        self.base_real = os.path.realpath(base)
        self.files_seen: dict[str, bool] = {}
        self.arrays: dict[int, str] = {}

    # --- one dump ------------------------------------------------------------------------
    def dump_names(self, cell: int, names: list[str]) -> dict[str, str]:
        self.cell = cell
        self.shown = set()
        # the arrays the notebook names: a view of one says so (``view = arr[1:]``)
        self.arrays = {id(self.namespace[n]): n for n in names
                       if type(self.namespace[n]).__name__ == "ndarray"}  # fmt: skip
        return {name: self.describe(self.namespace[name], name, 0) for name in names}

    def tag(self, obj: Any, path: str) -> tuple[str, bool]:
        """(tag, first time in this dump)."""
        key = id(obj)
        if key not in self.tags:
            self.tags[key] = f"{path}@{self.cell}"
            self.kept.append(obj)
        first = key not in self.shown
        self.shown.add(key)
        return self.tags[key], first

    def describe(self, obj: Any, path: str, depth: int) -> str:
        if isinstance(obj, ATOMS) and type(obj) in ATOMS:
            return repr(obj)
        if type(obj) in (tuple, frozenset):
            items = sorted(obj, key=repr) if type(obj) is frozenset else list(obj)
            inner = self.items(items, path, depth)
            return f"({inner},)" if type(obj) is tuple else f"frozenset({{{inner}}})"
        if isinstance(obj, types.ModuleType):
            return f"module {obj.__name__}"
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, np.generic) and type(obj).__module__ == "numpy":
            return f"{type(obj).__name__}({obj!r})"  # an immutable value, as an int: no identity
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Size:  # a tuple: no identity either
            return repr(obj)
        if isinstance(obj, logging.Logger):  # by its name (its manager lists every logger of
            # the process: the profiled side's own too)
            kinds = [type(h).__name__ for h in obj.handlers]
            return f"Logger({obj.name!r}, level={obj.level}, handlers={kinds})"
        if product_result(obj):
            return f"{RESULT} {type(obj).__name__}>"
        tag, first = self.tag(obj, path)
        if not first:
            return f"⟨={tag}⟩"
        if depth >= MAX_DEPTH:
            return f"{self.type_name(obj)}⟨{tag}⟩…"
        return f"{self.type_name(obj)}⟨{tag}⟩{self.body(obj, path, depth + 1)}"

    def type_name(self, obj: Any) -> str:
        """The type's name; a class the user defined (in the notebook or in a module of the
        side's folder) also by its identity: a copy of the class is another class."""
        cls = type(obj)
        if isinstance(obj, type):
            return "class"
        if self.user_class(cls):
            seen = id(cls) in self.shown
            tag, _ = self.tag(cls, f"type({cls.__qualname__})")
            if not seen:
                self.shown.discard(id(cls))  # shown in full where it is named, not here
            return f"{cls.__qualname__}[{tag}]"
        return cls.__qualname__

    def user_class(self, cls: type) -> bool:
        module = sys.modules.get(cls.__module__)
        return cls.__module__ == "__main__" or self.from_base(module)

    def from_base(self, module: Any) -> bool:
        """Whether ``module`` was imported from the side's folder (answers cached by file:
        a dump asks for every module loaded)."""
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file:
            return False
        if file not in self.files_seen:
            self.files_seen[file] = os.path.realpath(file).startswith(self.base_real + os.sep)
        return self.files_seen[file]

    def items(self, values: list[Any], path: str, depth: int, kind: str = "[]") -> str:
        shown = [self.describe(v, f"{path}{kind[0]}{i}{kind[1]}", depth)
                 for i, v in enumerate(values[:MAX_ITEMS])]  # fmt: skip
        if len(values) > MAX_ITEMS:
            rest = repr(values[MAX_ITEMS:]).encode()
            shown.append(f"…{len(values) - MAX_ITEMS} more, {sha(rest)}")
        return ", ".join(shown)

    def mapping(self, obj: Mapping[Any, Any], path: str, depth: int) -> str:
        parts = []
        for i, (key, value) in enumerate(obj.items()):
            if i >= MAX_ITEMS:
                parts.append(f"…{len(obj) - MAX_ITEMS} more")
                break
            shown_key = self.describe(key, f"{path}.key{i}", depth)
            parts.append(f"{shown_key}: {self.describe(value, f'{path}[{key!r}]', depth)}")
        return "{" + ", ".join(parts) + "}"

    def attrs(self, obj: Any, path: str, depth: int) -> str:
        """An instance's own attributes (``__dict__`` and ``__slots__``), sorted by name."""
        found: dict[str, Any] = {}
        own = getattr(obj, "__dict__", None)
        if isinstance(own, dict):
            found.update(own)
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()) or ():
                if isinstance(slot, str) and slot not in ("__dict__", "__weakref__"):
                    try:
                        found[slot] = getattr(obj, slot)
                    except AttributeError:
                        found[slot] = "<unset>"
        if not found:
            return ""
        parts = [f"{k}={self.describe(found[k], f'{path}.{k}', depth)}" for k in sorted(found)]
        return "(" + ", ".join(parts) + ")"

    # --- by kind -----------------------------------------------------------------------------
    def body(self, obj: Any, path: str, depth: int) -> str:
        extra = ""
        if type(obj) not in (list, dict, set, bytearray) and isinstance(
            obj, (list, dict, set, bytearray)
        ):
            extra = self.attrs(obj, path, depth)  # a subclass's own attributes
        if isinstance(obj, list):
            return f"[{self.items(obj, path, depth)}]{extra}"
        if isinstance(obj, dict):
            more = ""
            if hasattr(obj, "default_factory"):
                more = f" default={self.describe(obj.default_factory, path + '.default', depth)}"
            return f"{self.mapping(obj, path, depth)}{more}{extra}"
        if isinstance(obj, (set, frozenset)):
            inner = sorted(self.describe(v, path + "{}", depth) for v in obj)
            return "{" + ", ".join(inner) + "}" + extra
        if isinstance(obj, bytearray):
            return repr(bytes(obj)) + extra
        if isinstance(obj, tuple):  # a namedtuple or a tuple subclass
            return f"({self.items(list(obj), path, depth)}){self.attrs(obj, path, depth)}"
        name = type(obj).__module__ + "." + type(obj).__qualname__
        if name == "collections.deque":
            return f"([{self.items(list(obj), path, depth)}], maxlen={obj.maxlen})"
        for prefix, method in (("numpy.", self.numpy), ("pandas.", self.pandas),
                               ("torch", self.torch)):  # fmt: skip
            if name.startswith(prefix):
                shown = method(obj, path, depth)
                if shown is not None:
                    return shown
        if isinstance(obj, type):
            return self.klass(obj, path, depth)
        if isinstance(obj, (types.FunctionType, types.MethodType)):
            return self.function(obj, path, depth)
        if isinstance(obj, types.GeneratorType):
            state = inspect.getgeneratorstate(obj)
            local = self.mapping(inspect.getgeneratorlocals(obj), path + ".locals", depth)
            return f"({obj.__qualname__}, {state}, locals={local})"
        if dataclasses.is_dataclass(obj):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return self.mapping(fields, path, depth) + self.attrs(obj, path, depth)
        if isinstance(obj, Iterator):
            return self.iterator(obj, path, depth)
        if isinstance(obj, ATOMS):  # a subclass of int, str, ...
            return f"({obj!r}){self.attrs(obj, path, depth)}"
        return self.attrs(obj, path, depth)

    def iterator(self, obj: Any, path: str, depth: int) -> str:
        """A builtin or itertools iterator through its ``__reduce__`` (what it iterates and
        where it is), which neither copies nor advances it; its type alone where that fails."""
        try:
            reduced = obj.__reduce__()
        except Exception:
            return self.attrs(obj, path, depth)
        if not isinstance(reduced, tuple) or len(reduced) < 2:
            return ""
        args = self.describe(reduced[1], path + ".args", depth)
        state = self.describe(reduced[2], path + ".state", depth) if len(reduced) > 2 else ""
        return f"(args={args}, state={state})"

    def klass(self, cls: type, path: str, depth: int) -> str:
        if not self.user_class(cls):
            return f" {cls.__module__}.{cls.__qualname__}"
        plain = {k: v for k, v in vars(cls).items()
                 if not k.startswith("__") and not callable(v)
                 and not isinstance(v, (staticmethod, classmethod, property))}  # fmt: skip
        bases = ",".join(b.__qualname__ for b in cls.__bases__)
        return f" {cls.__qualname__}({bases}){self.mapping(plain, path, depth)}"

    def function(self, fn: Any, path: str, depth: int) -> str:
        if isinstance(fn, types.MethodType):
            return f" {fn.__func__.__qualname__} of {self.describe(fn.__self__, path, depth)}"
        parts = [fn.__qualname__]
        if fn.__defaults__:
            parts.append("defaults=" + self.describe(fn.__defaults__, path + ".defaults", depth))
        if fn.__kwdefaults__:
            parts.append("kwdefaults=" + self.mapping(fn.__kwdefaults__, path, depth))
        if fn.__closure__:
            cells = {}
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
                try:
                    cells[name] = cell.cell_contents
                except ValueError:
                    cells[name] = "<empty>"
            parts.append("closure=" + self.mapping(cells, path + ".closure", depth))
        # a function whose globals are not the notebook's reads other names than the notebook's
        if fn.__module__ == "__main__" or fn.__globals__ is self.namespace:
            mine = fn.__globals__ is self.namespace
            parts.append("globals=notebook" if mine else "globals=other")
        return "(" + ", ".join(parts) + ")"

    def numpy(self, obj: Any, path: str, depth: int) -> str | None:
        import numpy as np

        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                return f"(object, {obj.shape}, [{self.items(list(obj.ravel()), path, depth)}])"
            data = np.ascontiguousarray(obj)
            shown = repr(obj.tolist()) if obj.size <= 12 else sha(data.tobytes())
            root = obj
            while isinstance(root.base, np.ndarray):
                root = root.base
            named = self.arrays.get(id(root)) if root is not obj else None
            base = f", view of {named}" if named else ""  # (a buffer it was unpickled from: no)
            return f"({obj.dtype}, {obj.shape}, {shown}{base})"
        if isinstance(obj, np.generic):
            return f"({obj!r})"
        if isinstance(obj, np.random.Generator):
            state = obj.bit_generator.state
            return f"({type(obj.bit_generator).__name__}, {sha(repr(state).encode())})"
        if isinstance(obj, np.random.RandomState):
            return f"({rng_digest(obj.get_state())})"
        if isinstance(obj, np.random.BitGenerator):
            return f"({sha(repr(obj.state).encode())})"
        return None

    def pandas(self, obj: Any, path: str, depth: int) -> str | None:
        import pandas as pd

        if isinstance(obj, (pd.DataFrame, pd.Series)):
            frame = obj.to_frame() if isinstance(obj, pd.Series) else obj
            columns = [str(c) for c in frame.columns]
            dtypes = [str(t) for t in frame.dtypes]
            values = frame.astype(object).to_numpy().tolist()
            index = [str(i) for i in frame.index]
            shown = repr(values) if frame.size <= 24 else sha(repr(values).encode())
            return f"(columns={columns}, dtypes={dtypes}, index={index}, values={shown})"
        return None

    def torch(self, obj: Any, path: str, depth: int) -> str | None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        if isinstance(obj, torch.Tensor):
            data = obj.detach().cpu().contiguous()
            raw = data.view(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
            return (f"({data.dtype}, {tuple(data.shape)}, {obj.device}, "
                    f"grad={obj.requires_grad}, {sha(raw)})")  # fmt: skip
        if isinstance(obj, torch.Generator):
            return f"({sha(obj.get_state().numpy().tobytes())})"
        if isinstance(obj, torch.nn.Module):
            state = {k: self.describe(v, f"{path}.{k}", depth) for k, v in obj.state_dict().items()}
            return f"(training={obj.training}, state={state})"
        return None


def rng_digest(state: Any) -> str:
    """numpy's legacy state tuple (name, keys, pos, has_gauss, cached) as one digest."""
    name, keys, pos, has_gauss, cached = state[:5]
    return sha(repr((name, keys.tobytes(), pos, has_gauss, cached)).encode())


def rng_states() -> dict[str, str]:
    """The global RNGs' states, read without drawing: random, numpy's legacy global
    generator, torch's default CPU generator (each where the notebook imported it)."""
    import random

    states = {"random": sha(repr(random.getstate()).encode())}
    if "numpy" in sys.modules:
        import numpy as np

        states["numpy"] = rng_digest(np.random.get_state())
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "random"):
        states["torch"] = sha(torch.random.get_rng_state().numpy().tobytes())
    return states


def files_in(base: Path) -> dict[str, str]:
    """Every file under ``base`` (relative path -> sha1 of its bytes)."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_FILES)
        for name in sorted(files):
            path = Path(root, name)
            try:
                found[str(path.relative_to(base))] = sha(path.read_bytes())
            except OSError as exc:
                found[str(path.relative_to(base))] = f"<{type(exc).__name__}>"
    return found


def print_options() -> dict[str, str]:
    options: dict[str, str] = {}
    if "numpy" in sys.modules:
        import numpy as np

        options["numpy"] = repr(sorted(np.get_printoptions().items()))
    if "pandas" in sys.modules:
        import pandas as pd

        names = ("display.max_rows", "display.max_columns", "display.precision",
                 "display.width", "display.float_format")  # fmt: skip
        options["pandas"] = repr([(n, repr(pd.get_option(n))) for n in names])
    return options


def environ_changes(start: Mapping[str, str]) -> dict[str, str]:
    """What changed in ``os.environ`` since the side started (a removed key: ``<unset>``)."""
    now = dict(os.environ)
    changed = {k: v for k, v in now.items() if start.get(k) != v}
    changed.update({k: "<unset>" for k in start if k not in now})
    return dict(sorted(changed.items()))


def where(base: Path) -> str:
    """The current directory relative to the side's folder (each side has its own)."""
    try:
        return str(Path.cwd().resolve().relative_to(base.resolve()))
    except ValueError:
        return f"<outside: {Path.cwd().name}>"


def module_states(describer: Describer) -> dict[str, dict[str, str]]:
    """The public state of every module imported from the side's folder (a cell's ``import
    helpers`` of ``helpers.py`` there): its values, functions and classes."""
    found: dict[str, dict[str, str]] = {}
    for name, module in sorted(sys.modules.items()):
        if module is None or not describer.from_base(module):
            continue
        state = {}
        for attr, value in sorted(vars(module).items()):
            if attr.startswith("_") or isinstance(value, types.ModuleType):
                continue
            state[attr] = describer.describe(value, f"{name}.{attr}", 0)
        found[name] = state
    return found
