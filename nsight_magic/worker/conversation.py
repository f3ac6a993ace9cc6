"""The notebook's conversation with one worker, as nbclient's ``NotebookClient`` owns its whole
conversation with a kernel: every request the notebook makes of a worker is built here, one
method per request the worker serves (``serve.Worker.handle``), sent through the worker's
``WorkerProcess`` (the transport: frames, interrupts, a dead worker) and waited for under one
deadline.

A cell's conversation waits under the cell's deadline (``--timeout``: what is left of it) and
stops on its cancel button; a prewarm's waits unbounded but for the requests that have a bound
of their own, which the conversation holds as its settings (``ConversationBounds``,
docs/troubleshooting.md's table of bounds). Each reply is handed to ``on_reply`` (a cell
records each request's time in meta.json and a CUDA context the worker says is broken).

Only the transport's own goodbye (``exit``, when a worker is stopped) is built elsewhere, in
``WorkerProcess.stop``: a conversation ends before its worker does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..shared_state.project_code import project_modules, project_paths
from .process import LineSink, Reply

__all__ = ["BOUNDS", "Conversation", "ConversationBounds", "Transport"]


class Transport(Protocol):
    """What carries a request to a worker and its reply back (``WorkerProcess``)."""

    def request(self, message: dict[str, Any], *, timeout: float | None = None,
                cancel: threading.Event | None = None,
                on_line: LineSink | None = None) -> Reply: ...  # fmt: skip


# the requests before a cell runs or receives the notebook's objects: the worker's project
# modules follow the notebook's first (a reload of an edited module)
MODULES_WITH = frozenset({"load", "receive", "imports"})


@dataclass(frozen=True)
class ConversationBounds:
    """The requests with a bound of their own (s): ``imports_s``, what a worker imports ahead
    of a cell (torch and transformers take seconds; a hang is not waited for longer: the cell
    that needs the worker then says what it waits for); ``status_s``, ``%nsight_session
    status``'s question to an idle worker; ``after_stop_margin_s``, added to
    ``state_timeout`` for the bring-back of a cell that was stopped (its own time is spent:
    the worker bounds its describing by ``state_timeout`` itself, this is for writing it)."""

    imports_s: float = 300.0
    status_s: float = 10.0
    after_stop_margin_s: float = 30.0


BOUNDS = ConversationBounds()


class Conversation:
    """Requests to ``worker``: each waits at most ``timeout()`` (None: no bound but the
    request's own), ``cancel`` interrupts it, ``on_line`` gets the worker's output meanwhile,
    ``on_reply(op, reply)`` each answer."""

    def __init__(
        self,
        worker: Transport,
        *,
        timeout: Callable[[], float | None] = lambda: None,
        cancel: threading.Event | None = None,
        on_line: LineSink | None = None,
        on_reply: Callable[[str, Reply], None] | None = None,
        bounds: ConversationBounds = BOUNDS,
    ) -> None:
        self.worker = worker
        self.timeout = timeout
        self.cancel = cancel
        self.on_line = on_line
        self.on_reply = on_reply
        self.bounds = bounds

    def after_stop(self, state_timeout_s: float) -> Conversation:
        """This conversation for what follows a stop it asked for (Ctrl-C, ``--timeout``): not
        cancellable again, bound by ``state_timeout_s`` and the margin, not by the cell's
        deadline, spent already."""
        bound = state_timeout_s + self.bounds.after_stop_margin_s
        return Conversation(self.worker, timeout=lambda: bound, on_line=self.on_line,
                            on_reply=self.on_reply, bounds=self.bounds)  # fmt: skip

    def _ask(self, op: str, *, wait_s: float | None = None, **fields: Any) -> Reply:
        """Send ``op`` with ``fields``; wait under the deadline, or ``wait_s`` when sooner."""
        timeout = self.timeout()
        if wait_s is not None:
            timeout = wait_s if timeout is None else min(timeout, wait_s)
        # the notebook's project folders on sys.path, with every request: what the worker
        # unpickles or imports for it may come from them; before a cell, its project modules'
        # code as the notebook loaded it (shared_state/project_code.py)
        request = {"op": op, "sys_path": project_paths(), **fields}
        if op in MODULES_WITH:
            request["project_modules"] = project_modules()
        reply = self.worker.request(request, timeout=timeout, cancel=self.cancel,
                                    on_line=self.on_line)  # fmt: skip
        if self.on_reply is not None:
            self.on_reply(op, reply)
        return reply

    # --- before a cell: its script, what the worker imports ahead -----------------------------
    def load(self, script: str, cwd: str | None = None) -> Reply:
        """Import the run folder's ``script.py`` (its hooks serve the steps below); ``cwd``:
        the notebook's directory now."""
        fields: dict[str, Any] = {"script": script}
        if cwd is not None:
            fields["cwd"] = cwd
        return self._ask("load", **fields)

    def imports(self, modules: Sequence[str], attributes: Mapping[str, Any]) -> Reply:
        """Import ``modules`` (and look up the names a ``from X import A`` takes) ahead of the
        cells that need them."""
        return self._ask("imports", wait_s=self.bounds.imports_s, modules=list(modules),
                         attributes=attributes)  # fmt: skip

    def cuda_init(self, bound_s: float) -> Reply:
        """Make the worker's first CUDA call (under ``ncu --mode launch`` its ncu side listens
        only then)."""
        return self._ask("cuda_init", wait_s=bound_s)

    # --- the notebook's state (state/exchange.py) -------------------------------------------
    def receive(self, path: str, theirs: Sequence[str]) -> Reply:
        """Take the notebook's names and objects from the message at ``path``."""
        return self._ask("receive", path=path, theirs=list(theirs))

    def history(self, entries: list[dict[str, Any]]) -> Reply:
        """Replay these setup cells (what could not be sent)."""
        return self._ask("history", entries=entries)

    def send_back(self, path: str, bound_s: float, max_bytes: int | None) -> Reply:
        """Write what the cell changed to ``path`` (its describing bound by ``bound_s``)."""
        return self._ask("send_back", path=path, bound_s=bound_s, max_bytes=max_bytes)

    def agreed(self, path: str | None) -> Reply:
        """The notebook applied what came back (``path``: the objects it adopted)."""
        return self._ask("agreed", path=path)

    # --- the cell ----------------------------------------------------------------------------
    def prepare(self, notebook_keeps: bool) -> Reply:
        """The ``--vars`` by value and the warm-up."""
        return self._ask("prepare", notebook_keeps=notebook_keeps)

    def capture(self, notebook_keeps: bool, shown: bool) -> Reply:
        """The gated run of the cell (``shown``: its output is the user's)."""
        return self._ask("capture", notebook_keeps=notebook_keeps, shown=shown)

    def release(self, when_idle: bool) -> Reply:
        """Hand back torch's cached blocks and the host pool, now or once idle."""
        return self._ask("release", when_idle=when_idle)

    def status(self) -> Reply:
        """What the worker holds (``%nsight_session status``)."""
        return self._ask("status", wait_s=self.bounds.status_s)
