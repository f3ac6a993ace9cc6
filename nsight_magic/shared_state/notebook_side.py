"""The notebook's side of its state and one worker's: what goes to the worker before a cell
(``outgoing``: every notebook name, only what changed since the two last agreed) and what comes
back after it (``incoming``: what the worker saw change, applied in place), with the random
streams both ways and the CUDA tensors the worker made copied into the notebook's memory.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..vocabulary.notebook_names import is_compiler_own, is_ipython_own
from . import rng
from .apply import Applied, Message, dump_message, load_message
from .describe import Describer, Walk
from .graph import Graph, reached_keys
from .objects import Key, _copied_anew, _is_tensor, _received_ptrs

# IPython's last results travel (``prev = _``); its other names are its own
LAST_RESULTS = frozenset({"_", "__", "___"})


def notebook_names(user_ns: Mapping[str, Any], hidden: frozenset[str]) -> dict[str, Any]:
    """The notebook's names a worker mirrors: all but IPython's own, torch.compile's and the
    hidden ones (IPython's displayhook pushes ``_`` hidden: the last results travel all the
    same)."""
    own = ("get_ipython", "exit", "quit")
    return {
        name: value
        for name, value in user_ns.items()
        if name in LAST_RESULTS
        or (
            name not in hidden
            and not is_ipython_own(name)
            and name not in own
            and not is_compiler_own(name)
        )
    }


@dataclass
class Outgoing:
    """One message to the worker, until it says it applied it (``agreed``)."""

    blob: bytes
    walk: Walk
    msg: Message
    cannot: dict[str, str]
    streams_print: int | None = None

    def touched(self) -> list[str]:
        """The names this message gives the worker something new of: bound anew, or
        reaching an object it creates or changes."""
        moved = {*self.msg.new, *self.msg.changed}
        names = set(self.msg.names)
        for name, keys in self.walk.binding_keys.items():
            todo, seen = list(keys), set()
            while todo and name not in names:
                key = todo.pop()
                if key in seen:
                    continue
                seen.add(key)
                if key in moved:
                    names.add(name)
                todo.extend(self.walk.children.get(key, ()))
        return sorted(names)

    def summary(self) -> dict[str, Any]:
        return {"sent_names": self.touched(), "dropped": list(self.msg.deleted),
                "objects_new": len(self.msg.new), "objects_changed": len(self.msg.changed),
                "bytes": len(self.blob), "cannot": dict(self.cannot)}  # fmt: skip


@dataclass
class Incoming:
    """What came back: ``applied`` (names bound, rebound, created objects), ``cannot``
    (name -> why it stays in the worker), ``adopt``: the notebook's copies of the worker's
    CUDA tensors (key -> tensor), for the worker to map."""

    applied: Applied
    cannot: dict[str, str] = field(default_factory=dict)
    adopt: list[tuple[Key, Any]] = field(default_factory=list)

    def notes(self, tool: str) -> list[str]:
        lines = []
        held = {**self.cannot, **self.applied.failed}
        if held:
            text = "; ".join(f"{n}: {why}" for n, why in sorted(held.items()))
            lines.append(f"not brought back to the notebook (they stay in the {tool} worker, "
                         f"where later cells there see them): {text}")  # fmt: skip
        if self.applied.rebound:
            text = "; ".join(f"{n}: {why}" for n, why in sorted(self.applied.rebound.items()))
            lines.append(
                "brought back as new objects (their old ones could not take the new "
                f"state in place; other names bound to them keep the old): {text}"
            )
        return lines


class NotebookState:
    """The notebook's graph of what one worker has (``graph``), and the names it must send
    again whatever their prints say (``resend``: a value bound for one run only)."""

    def __init__(self, user_ns: MutableMapping[str, Any]) -> None:
        self.graph = Graph(user_ns, 1)
        self.resend: set[str] = set()
        self.said: dict[str, str] = {}  # name -> why it could not be sent, once said
        self.streams_agreed: int | None = None  # rng.print_of the streams both sides have

    def outgoing(
        self,
        names: Mapping[str, Any],
        *,
        max_bytes: int,
        files: Mapping[str, str] | None = None,
        theirs: frozenset[str] = frozenset(),
    ) -> Outgoing:
        """What the worker needs to equal the notebook: ``names`` (``notebook_names``);
        ``theirs``: names the worker binds itself (a setup cell it ran), neither sent nor
        deleted there."""
        graph = self.graph
        for name in self.resend:
            graph.bindings.pop(name, None)
        describer = Describer(graph, files)
        walk = graph.look(names, describer, max_bytes=max_bytes, fills=False)
        previous = (set(graph.bindings) | self.resend) - theirs
        msg = graph.changes(walk, previous)
        # a name the notebook now binds to what cannot go: the worker's old value goes too
        msg.deleted = sorted({*msg.deleted, *(n for n in walk.cannot if n in previous)})
        streams = rng.states()
        streams_print = rng.print_of(streams)
        if msg.empty() and streams_print == self.streams_agreed and not describer.sources:
            # nothing the worker lacks: no message (the worker is not asked to receive)
            return Outgoing(b"", walk, msg, dict(walk.cannot), streams_print)
        blob = dump_message(msg, {"rng": streams, "sources": describer.sources})
        return Outgoing(blob, walk, msg, dict(walk.cannot), streams_print)

    def agreed(self, out: Outgoing) -> None:
        self.streams_agreed = out.streams_print
        self.graph.agree(out.walk, out.msg)
        for name in out.msg.deleted:
            self.graph.bindings.pop(name, None)
        self.resend.clear()

    def not_made(self, out: Outgoing, failed: Mapping[str, str]) -> None:
        """The worker could not make these names of the message ``out`` (``agreed`` already):
        their bindings, and the objects first sent with them that no name it made reaches,
        are not the worker's (else the next message refers to an object it never made)."""
        walk = out.walk
        made = reached_keys(walk, (k for n, keys in walk.binding_keys.items() if n not in failed
                               for k in keys))  # fmt: skip
        new = set(out.msg.new)
        # what the failed names reach through their objects' own (g.h of a g it could not
        # make), not only what they name
        lost = {key for key in reached_keys(walk, (k for n in failed
                                               for k in walk.binding_keys.get(n, ())))
                if key in new and key not in made}  # fmt: skip
        for name in failed:
            self.graph.bindings.pop(name, None)
        self.graph.forget(lost)

    def incoming(self, data: bytes, cannot: Mapping[str, str]) -> Incoming:
        """Apply the worker's message: in place, aliases kept; its random streams taken."""
        msg, extra = load_message(data)
        applied = self.graph.apply(msg)
        if extra.get("rng"):
            rng.restore(extra["rng"])
            self.streams_agreed = rng.print_of(rng.states())  # the worker's, now ours too
        back = Incoming(applied, dict(cannot))
        back.adopt = _own_copies(applied.created) + _moved_copies(self.graph)
        if back.adopt:  # their memory is the notebook's own now: printed again
            describer = Describer(self.graph)
            for key, tensor in back.adopt:
                self.graph.prints[key] = describer.tensor_print(tensor)
        return back


def _own_copies(created: Mapping[Key, Any]) -> list[tuple[Key, Any]]:
    """The CUDA tensors the worker made (mapped here by IPC handle) copied into the
    notebook's memory, storage by storage (views of one storage stay views of one copy)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    mapped = [(k, t) for k, t in created.items() if isinstance(t, torch.Tensor) and t.is_cuda]
    copies: dict[int, Any] = {}
    out = []
    with torch.no_grad():
        for key, tensor in mapped:
            storage = tensor.untyped_storage()
            _received_ptrs.discard(storage.data_ptr())  # the notebook's own memory from now on
            own = copies.get(storage.data_ptr())
            if own is None:
                own = torch.empty(storage.nbytes(), dtype=torch.uint8,
                                  device=tensor.device).untyped_storage()  # fmt: skip
                own.copy_(storage)
                copies[storage.data_ptr()] = own
            tensor.set_(own, tensor.storage_offset(), tensor.size(), tensor.stride())
            out.append((key, tensor))
    if copies:
        torch.cuda.synchronize()
    return out


def _moved_copies(graph: Graph) -> list[tuple[Key, Any]]:
    """The notebook's tensors whose memory moved in the worker (a cast, ``p.data = ...``) and
    now hold the notebook's own copy of it (``objects.cuda_contents``): the worker maps it."""
    ptrs = {t.untyped_storage().data_ptr() for t in _copied_anew}
    _copied_anew.clear()
    if not ptrs:
        return []
    return [(key, t) for key, t in graph.table.items() if _is_tensor(t) and t.is_cuda
            and t.untyped_storage().data_ptr() in ptrs]  # fmt: skip


def adoption_blob(pairs: list[tuple[Key, Any]]) -> bytes:
    """[(key, the notebook's copy)] with the copies by IPC handle (``WorkerState.adopt``)."""
    from torch.multiprocessing.reductions import reduce_tensor

    class HandlePickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            torch = sys.modules["torch"]
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                return reduce_tensor(obj.detach() if obj.requires_grad else obj)
            return NotImplemented

    buffer = io.BytesIO()
    HandlePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(pairs)
    return buffer.getvalue()
