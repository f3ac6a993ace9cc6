"""The worker's side of the notebook's state: take what the notebook sent, tell it what the
cell changed (by looking, not by reading the cell), take its copies of the CUDA memory this
worker made, and put everything back after a run that repeats the notebook's work (a warm-up,
a drill-down's re-run, a sweep's configuration).

Imported by the worker (``worker/serve.py``): standard library at import time; torch and
numpy only when the cell imported them.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import pickle
import sys
import time
import types
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..processes import deadline
from ..vocabulary.notebook_names import is_compiler_own
from . import rng
from .apply import Message, _Applier, dump_message, load_message
from .describe import Describer, Walk, is_made
from .files_kept import FileKeeper
from .graph import Graph, holders_too
from .objects import Key, _received_ptrs
from .process import ProcessState, function_caches

# why a cell's changes took too long to describe, and the fix (deadline.bounded_here's hint)
SLOW_CHANGES = ("a __reduce__ or __getstate__ of what the cell made is too slow; "
                "%config NsightMagic.state_timeout gives it longer")  # fmt: skip
TABLE = "__nsight_magic_shared__"  # script/shared_objects.py's name for the received objects
MAPPED = "__nsight_magic_mapped__"  # and for the notebook's CUDA storages this worker maps
# what a worker binds for itself, never the notebook's (IPython's shell for ``!cmd``)
OWN = frozenset({"get_ipython", "exit", "quit", "In", "Out", "_exit_code"})


def user_names(ns: MutableMapping[str, Any]) -> dict[str, Any]:
    """The names that are the notebook's: not dunders, not the worker's own, not
    torch.compile's (``is_compiler_own``)."""
    return {
        name: value
        for name, value in ns.items()
        if not (name.startswith("__") and name.endswith("__"))
        and not name.startswith("__nsight_magic")
        and name not in OWN
        and not is_compiler_own(name)
        and not _shells_open(name, value)
    }


def _shells_open(name: str, value: Any) -> bool:
    """``open`` as IPython's shell binds it in its namespace (a wrapper refusing the standard
    streams' descriptors), hidden in the notebook's: the worker's, not the cell's."""
    shell = sys.modules.get("IPython.core.interactiveshell")
    return name == "open" and shell is not None and value is getattr(shell, "_modified_open", 0)


@dataclass
class _Look:
    """The state a put-back returns to: the look at the names, the keys it knew, and for a
    name whose value cannot be described as a whole (a lock among its attributes) that value
    and its attributes, each looked at on its own (``inside``, named ``name.attr``), so it is
    put back attribute by attribute."""

    walk: Walk
    describer: Describer
    keys: frozenset[Key]
    inside: Walk
    attributes: dict[str, tuple[Any, dict[str, Any]]]


def _attributes(value: Any) -> dict[str, Any] | None:
    """An instance's own attributes (a class, module or function is no such object)."""
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType)):
        return None
    own = getattr(value, "__dict__", None)
    return dict(own) if isinstance(own, dict) else None


def _storages(objects: list[Any]) -> set[int]:
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    return {
        int(o.untyped_storage().data_ptr())
        for o in objects
        if isinstance(o, torch.Tensor) and o.is_cuda
    }


class WorkerState:
    """The worker's graph of what it shares with the notebook (its ``table`` is also the
    script's ``TABLE``: what ``preserved`` keeps around a repeat on the GPU)."""

    def __init__(self, ns: MutableMapping[str, Any]) -> None:
        self.ns = ns
        self.graph = Graph(ns, -1)
        ns[TABLE] = self.graph.table
        self.theirs: frozenset[str] = frozenset()
        self.process: ProcessState | None = None  # process.py: before the cell
        self.folder = ""
        # the last send_back's walk and message, until the notebook says it applied them
        self.pending: tuple[Walk, Message] | None = None
        # inside one_look(): its look (taken by the first kept()) and the keys it knew
        self.shared_look: _Look | None = None
        self.sharing = False

    def receive(self, path: str, theirs: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Apply the notebook's message at ``path``: its objects, names and random streams;
        ``theirs``: names this worker binds itself (the setup cells it runs, ``--worker-only``
        ones too), never sent back."""
        self.theirs = theirs
        for name in theirs:  # this worker's own now (a setup cell it runs binds them): no
            self.graph.bindings.pop(name, None)  # longer shared, never "deleted" back there
        self.pending = None  # a send_back the notebook never applied: sent again next time
        t0 = time.perf_counter()
        modules = set(sys.modules)
        with open(path, "rb") as f:
            msg, extra = load_message(f.read())
        t1 = time.perf_counter()
        for filename, text in (extra.get("sources") or {}).items():
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        applied = self.graph.apply(msg)
        self.ns.setdefault(MAPPED, set()).update(_storages(list(applied.created.values())))
        if extra.get("rng"):
            rng.restore(extra["rng"])
        new_modules = set(sys.modules) - modules
        packages = sorted({m.split(".")[0] for m in new_modules if not m.startswith("_")})
        return {
            "names": sorted(msg.names),
            "dropped": list(msg.deleted),
            "failed": applied.failed,
            "timings": {"unpickle_s": t1 - t0, "apply_s": time.perf_counter() - t1},
            "imported": packages[:30],
            "imported_modules": len(new_modules),
        }

    def send_back(self, path: str, max_bytes: int, bound_s: float = 0.0) -> dict[str, Any]:
        """Write what the cell changed since the two sides last agreed to ``path``: names
        rebound, bound, deleted, objects new or changed, the random streams. What cannot go
        stays here (``cannot``: name -> why). ``bound_s``: describing it may take at most
        this long (a slow ``__reduce__``): past it nothing goes and ``TimeoutError`` says so."""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the cell's kernels wrote what goes back
        self.pending = None
        names = {n: v for n, v in user_names(self.ns).items() if n not in self.theirs}
        # the notebook's own bound (processes/deadline.py), here on the worker's main thread
        with deadline.bounded_here("describing the cell's changes for the notebook", bound_s,
                                   SLOW_CHANGES):  # fmt: skip
            walk = self.graph.look(names, max_bytes=max_bytes, fills=False)
            msg = self.graph.changes(walk, self.graph.bindings)
            data = dump_message(msg, {"rng": rng.states()})
        with open(path, "wb") as f:
            f.write(data)
        process = self.process.changes(self.folder, self.ns) if self.process else []
        # a tensor in an autograd graph goes as its values: the graph cannot leave this process
        graphed = sorted(n for n, v in names.items() if n in msg.names
                         and getattr(v, "grad_fn", None) is not None)  # fmt: skip
        # an exception goes without its traceback: frames do not pickle
        traced = sorted(n for n, v in names.items() if n in msg.names and
                        isinstance(v, BaseException) and v.__traceback__)  # fmt: skip
        # agreed only once the notebook says it applied it (``agreed``): a notebook that did
        # not (stopped, or its apply raised) gets these changes again with the next cell
        self.pending = (walk, msg)
        return {"cannot": walk.cannot, "new": len(msg.new), "changed": len(msg.changed),
                "process": process, "detached": graphed,
                "traceback": traced}  # fmt: skip

    def agreed(self, adopted: str | None = None) -> dict[str, Any]:
        """The notebook applied the last ``send_back``: both sides now hold what it described
        (then ``adopted``, when the notebook copied the CUDA tensors this worker made)."""
        if self.pending is not None:
            walk, msg = self.pending
            self.pending = None
            self.graph.agree(walk, msg)
            for name in walk.cannot:  # it stays here: the notebook's value is not this one
                self.graph.bindings.pop(name, None)
        return self.adopt(adopted) if adopted else {"adopted": 0}

    def mark_process(self, folder: str) -> None:
        """The process state a cell starts from (``send_back`` says what it changed)."""
        self.folder = folder
        with contextlib.suppress(Exception):  # never in a cell's way
            self.process = ProcessState.now(folder, self.ns)

    def adopt(self, path: str) -> dict[str, Any]:
        """The notebook copied the CUDA tensors this worker made: point each at its copy
        (mapped), so there is one copy on the GPU, the notebook's."""
        with open(path, "rb") as f:
            pairs: list[tuple[Key, Any]] = pickle.load(f)
        torch = sys.modules.get("torch")
        table = self.graph.table
        done = 0
        if torch is not None and pairs:
            with torch.no_grad():
                for key, theirs in pairs:
                    t = table.get(key)
                    if t is None:
                        continue
                    with contextlib.suppress(RuntimeError):  # set_ refused: keeps its own
                        t.set_(theirs.untyped_storage(), t.storage_offset(), t.size(),
                               t.stride())  # fmt: skip
                        _received_ptrs.add(theirs.untyped_storage().data_ptr())
                        done += 1
            torch.cuda.synchronize()
            self.ns.setdefault(MAPPED, set()).update(_storages([t for _, t in pairs]))
            self.reprint([key for key, _ in pairs])
        return {"adopted": done}

    def reprint(self, keys: list[Key]) -> None:
        describer = Describer(self.graph)
        for key in keys:
            obj = self.graph.table.get(key)
            if obj is not None and key in self.graph.prints:
                with contextlib.suppress(Exception):
                    self.graph.prints[key] = describer.record(key, obj, [], False).print

    @contextlib.contextmanager
    def one_look(self) -> Iterator[None]:
        """Around the runs of one capture (its repeats, a re-run around them): every
        ``kept()`` inside puts back to the state of the first one's look, since each put-back
        leaves the state that look saw and another would find the same (the look was about
        half of a repeat's put-back). What the runs made is forgotten after each put-back,
        what the look knew once all are done."""
        self.sharing = True
        try:
            yield
        finally:
            if self.shared_look is not None:  # as a kept() outside one_look() does at its end
                self._forget_unshared()
            self.sharing, self.shared_look = False, None

    @contextlib.contextmanager
    def kept(self, quiet: bool = True, keep_on_error: bool = False) -> Iterator[None]:
        """Around a run whose effects the notebook has already (or must never have): every
        name, every object the names reach and the random streams are as they were after it,
        files it wrote are put back, and (``quiet``) what it prints is not shown.
        ``keep_on_error``: a run that raises is the cell's one run (a warm-up that fails ends
        the cell, as the notebook's own run would): nothing is put back, its output is shown."""
        look = self.shared_look or self._look()
        if self.sharing:
            self.shared_look = look
        streams = rng.states()
        # a functools cache the run fills would answer the counted run from the repeat's
        # entries: one that was empty is emptied again (a filled one cannot be put back)
        empty_caches = [f for f in function_caches(self.ns).values()
                        if f.cache_info().currsize == 0]  # fmt: skip
        files = FileKeeper()
        out = io.StringIO()
        redirect = (contextlib.redirect_stdout(out), contextlib.redirect_stderr(out)) if quiet \
            else (contextlib.nullcontext(), contextlib.nullcontext())  # fmt: skip
        raised = False
        try:
            with files, redirect[0], redirect[1]:
                try:
                    yield
                except BaseException:
                    raised = True
                    if keep_on_error:
                        files.forget()  # what it wrote stays, as the cell's run's
                    raise
        finally:
            if raised and keep_on_error:
                sys.stdout.write(out.getvalue())  # the cell's output, up to its error
                self.shared_look = None  # the state is the run's now: a later kept() looks
                self._forget_unshared()
            else:
                self._put_back(look, streams)
                for cached in empty_caches:
                    cached.cache_clear()
                self._forget_unshared(look.keys if self.sharing else frozenset())

    def _look(self) -> _Look:
        describer = Describer(self.graph)
        names = user_names(self.ns)
        walk = self.graph.look(names, describer)
        attributes = {name: (names[name], own) for name in walk.cannot
                      if (own := _attributes(names[name])) is not None}  # fmt: skip
        inside = {f"{name}.{attr}": value for name, (_, own) in attributes.items()
                  for attr, value in own.items()}  # fmt: skip
        inner = self.graph.look(inside, describer) if inside else Walk()
        return _Look(walk, describer, frozenset(self.graph.table), inner, attributes)

    def _forget_unshared(self, still: frozenset[Key] = frozenset()) -> None:
        """Keys a look gave objects the notebook never had: not kept (but those of a look
        that later put-backs use, ``still``)."""
        graph = self.graph
        graph.forget([k for k in list(graph.table) if k not in graph.prints and k not in still])

    def _put_back(self, look: _Look, streams: Any) -> None:
        """Every object the look saw back to its state then, as a message from the look
        applied here: in place, or made anew when its state is in how it is made (an
        enumerate, pandas' block manager, and then what holds it: ``graph.holders_too``)."""
        graph, before = self.graph, look.walk
        records = {**before.records, **look.inside.records}
        msg = Message()
        for key, record in records.items():
            obj = graph.table.get(key)
            if obj is None:
                continue
            try:
                now = look.describer.record(key, obj, [], False).print
            except Exception:
                now = None
            if now == record.print:
                continue
            if is_made(record.print) and record.create:
                msg.new[key] = (record.create, record.fill)
            else:
                msg.changed[key] = record.fill
        children = {**before.children, **look.inside.children}
        holders_too(Walk(records=records, children=children), msg, list(msg.new))
        applier = _Applier(graph, msg)
        with contextlib.suppress(Exception):  # each object on its own: what fails stays
            applier.run()
        self._names_back(look, applier)
        rng.restore(streams)

    def _names_back(self, look: _Look, applier: _Applier) -> None:
        """The names as they were (bound to the objects put back), and the attributes of an
        object that could only be kept attribute by attribute."""
        before = look.walk
        for name in [n for n in user_names(self.ns) if n not in before.bindings
                     and n not in before.cannot]:  # fmt: skip
            del self.ns[name]
        for name, blob in before.bindings.items():
            with contextlib.suppress(Exception):
                self.ns[name] = applier.load(blob)
        for name, (obj, own) in look.attributes.items():
            self.ns[name] = obj  # what the attributes held is as it was (the fills above)
            now = vars(obj)
            for attr in [a for a in now if a not in own]:
                with contextlib.suppress(Exception):
                    delattr(obj, attr)
            for attr, value in own.items():  # only what was rebound: a __setattr__ may act
                if attr not in now or now[attr] is not value:
                    with contextlib.suppress(Exception):
                        setattr(obj, attr, value)
