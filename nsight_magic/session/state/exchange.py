"""The notebook's state and one worker: the one owner of what crosses between them (issue 41).

A profiled cell behaves like ``%%time``: it runs on the notebook's objects and its results are
the notebook's. For one worker, this module decides and performs, for a cell and for a prewarm
alike:

- **to the worker** (``plan``, ``send``, ``replay``): every notebook name the worker lacks or
  holds an older value of, and every object changed since the two last agreed, in one message
  (``notebook_side``: CUDA memory by IPC handle, objects the worker has by key); a setup cell
  replayed only for what that look found it cannot send (``setup_replay``; ``admission``
  checks the GPU's room first); ``--vars`` by value (``ship_by_value``, ``variables``);
- **kept as it was** (``keep``): the shared GPU memory a run that repeats the notebook's work
  (a warm-up, a drill-down's re-run) may change, which the worker saves and puts back
  (``repeat_changes``; worker side ``script/shared_objects.preserved``); the Python state
  it puts back by looking (``worker_side.kept``);
- **back to the notebook** (``bring_back``): what the worker saw the notebook's run of the
  cell change (``notebook_side``; worker side ``worker_side``).

Only this module asks the worker; the modules beside it answer what to send, what came back and
how it applies. A step that fails or is stopped raises ``StepFailed`` with the worker's reply.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ...processes import deadline, gpu_memory
from ...run_folders.run_dir import RunDir
from ...script import PreparedCell
from ...shared_state.notebook_side import (
    LAST_RESULTS,
    NotebookState,
    Outgoing,
    adoption_blob,
    notebook_names,
)
from ...shared_state.objects import OWN_RESULTS
from ...worker.conversation import Conversation
from ...worker.process import Reply
from ..history import History, HistoryEntry
from ..spec import Notebook
from ..variables import plan_shipping
from ..workers.warm_session import WarmSession
from . import setup_replay
from .repeat_changes import changed_names, module_names
from .setup_replay import CellPlan, ReplayPlan

NAME_ERROR = re.compile(r"name '([^']+)' is not defined")
# why the look at the notebook took too long, and the fix (every name is described, setup
# cells' too: a slow object in a %%nsight_setup cell is as slow)
SLOW_LOOK = ("a __reduce__ or __getstate__ of a notebook variable is too slow: give it longer "
             "(%config NsightMagic.state_timeout = SECONDS), or make that object cheap to "
             "pickle (or del it).")  # fmt: skip


@dataclass(frozen=True)
class Delivered:
    """What a cell's worker received before it (meta.json's ``shared_vars``, ``replayed``:
    the setup cells it replayed, None when none, ``shipped_vars``: every name the cell got)."""

    shared_vars: dict[str, Any]
    replayed: list[str] | None
    shipped_vars: list[str]


class StepFailed(Exception):
    """A step before the capture failed or was stopped: the worker's ``reply`` and the
    ``phase`` the cell's status names ("vars": the receive, "setup": a replay)."""

    def __init__(self, reply: Reply, phase: str) -> None:
        super().__init__(phase)
        self.reply = reply
        self.phase = phase


def replay_errors(tool: str, reply: Reply) -> list[str]:
    """One line per history entry that raised when the worker replayed it (a ``history``
    request's reply): for the cell's output, or kept on the worker after a prewarm."""
    return [
        f"replaying {error['name']!r} in the {tool} worker raised "
        f"{error['exc_type']}: {error['exc_message']}"
        for error in reply.data.get("errors", [])
    ]


def setup_failure(
    tool: str, name: str, error: Mapping[str, Any], why: str, worker_only: bool
) -> str:
    """Why a worker lacks what setup cell ``name`` binds: its replay there raised ``error``
    (a ``history`` reply's), with the fix."""
    said = f"{error.get('exc_type')}: {str(error.get('exc_message', '')).strip()[:300]}"
    text = (
        f"setup cell {name!r}, which defines it, raised {said} when the {tool} worker replayed it"
    )
    if worker_only:
        text += " (a --worker-only setup cell runs in each worker, each building its own copy)"
    elif why:
        text += f" ({why})"
    fix = "fix the setup cell"
    if "memory" in said.lower():
        fix = "free GPU memory (a worker you do not need: %nsight_session stop nsys|ncu)"
    if worker_only:
        fix += (", or run it in the notebook without --worker-only (the workers then share its "
                "GPU tensors)")  # fmt: skip
    return f"{text}. Fix: {fix}, then %nsight_session restart {tool}"


class StateExchange:
    """The notebook's state and the worker of ``session``: ``conversation`` asks it (a cell's
    waits under the cell's deadline and records its timings), ``note`` tells the user a line
    (the cell's output, or the worker's notes for its next cell after a prewarm)."""

    def __init__(
        self,
        session: WarmSession,
        history: History,
        notebook: Notebook,
        conversation: Conversation,
        note: Callable[[str], None],
        timings: dict[str, float] | None = None,
    ) -> None:
        self.session = session
        self.history = history
        self.notebook = notebook
        self.conversation = conversation
        self.note = note
        self.timings = timings if timings is not None else {}  # meta.json's, for a cell
        self.sent_summary: dict[str, Any] = {}  # what the last send carried
        self.required_reads: frozenset[str] = frozenset()  # plan(required=True)'s reads
        self.explicit: frozenset[str] = frozenset()  # plan()'s --vars names
        self.imported: list[str] = []  # the packages the last receive had to import
        self.imported_modules = 0  # and how many modules, theirs included

    # --- to the worker ---

    def plan(
        self,
        reads: frozenset[str],
        *,
        before: int | None = None,
        setup: bool = True,
        explicit: frozenset[str] = frozenset(),
        required: bool = False,
    ) -> CellPlan:
        """What the worker needs before a cell, by one look at the notebook: the names it
        lacks or holds an older value of, and the setup cells it replays for what cannot be
        sent (``before``: a re-run of an earlier cell replays only setup cells older than it;
        ``explicit``: ``--vars`` names, sent by value instead; ``required``: a name the cell
        reads, ``reads``, that can neither be sent nor rebuilt is a ``MissingVariableError``
        at the send, before anything runs: ``reads`` names the names that message is about,
        it never decides what is sent)."""
        s, nb, history = self.session, self.notebook, self.history
        self.required_reads = (reads - explicit) if required else frozenset()
        self.explicit = explicit
        entries = history.entries()
        every_setup = [e for e in entries if e.kind == "setup"]
        may_replay = setup_replay.setup_entries(entries, before=before, setup=setup)

        def bound_by(ran: set[int]) -> frozenset[str]:  # the worker's own: a lock, a model
            return frozenset(n for e in every_setup if e.id in ran for n in e.cell.names_bound)

        files = setup_replay.code_files(entries, nb.code_files, history.setup_files)
        # the first look finds what cannot be sent; when setup cells that bind it are to be
        # replayed, what they bind is the worker's own: looked at once more without it
        whys: dict[int, str] = {}
        theirs = bound_by({*s.executed})
        for _ in range(2):
            out = self._look(theirs, files, every_setup)
            if whys or not (whys := setup_replay.replays(
                    may_replay, s, nb.user_ns, history.in_notebook, out.cannot)):  # fmt: skip
                break
            theirs = bound_by({*s.executed, *whys})
        run = [e for e in may_replay if e.id in whys]
        gpu = history.gpu_bytes or {}
        return CellPlan(out, ReplayPlan(run), {e.name: whys[e.id] for e in run},
                        sum(gpu.get(e.id, 0) for e in run), theirs, may_replay)  # fmt: skip

    def _look(
        self, theirs: frozenset[str], files: setup_replay.CodeFiles, setups: list[HistoryEntry]
    ) -> Outgoing:
        """The message that makes the worker's names the notebook's, less ``theirs`` (what
        the setup cells it ran bind there) and the ``--vars`` names (sent by value after it)."""
        nb = self.notebook
        names = {n: v for n, v in notebook_names(nb.user_ns, frozenset(nb.hidden)).items()
                 if n not in theirs and n not in self.explicit}  # fmt: skip
        if not nb.auto_vars:  # %config NsightMagic.auto_vars = False: the setup cells' only
            bound = {n for e in setups for n in e.cell.names_bound}
            names = {n: v for n, v in names.items() if n in bound}
        t0 = time.perf_counter()
        # a slow __reduce__ stops the cell here, before it runs, saying so (state_timeout)
        with deadline.bounded_here("describing the notebook's variables for the worker",
                                   nb.state_timeout_s, SLOW_LOOK):  # fmt: skip
            out = self.mirror().outgoing(names, max_bytes=nb.auto_vars_max_bytes,
                                         files=files.names, theirs=theirs)  # fmt: skip
        self.timings["pack_s"] = self.timings.get("pack_s", 0.0) + time.perf_counter() - t0
        return out

    def mirror(self) -> NotebookState:
        """The notebook's record of what this worker has (made once per worker)."""
        s = self.session
        if s.mirror is None or s.mirror.graph.namespace is not self.notebook.user_ns:
            s.mirror = NotebookState(self.notebook.user_ns)  # type: ignore[arg-type]
        return s.mirror

    def send(self, plan: CellPlan, folder: RunDir) -> None:
        """The plan's message (every notebook name the worker lacks or holds an older value
        of, every object changed since the two last agreed, the random streams), and a clear
        error first when the cell reads a name that cannot go."""
        s, out = self.session, plan.out
        if out is None:
            return
        mirror = self.mirror()
        setup_replay.check(out.cannot, self.required_reads)
        if not out.blob:  # the worker has it all
            mirror.agreed(out)
            self.sent_summary = out.summary()
            return
        folder.write_shared(out.blob)
        reply = self.conversation.receive(str(folder.shared), sorted(plan.theirs))
        if reply.stopped or reply.data.get("status") != "ok":
            raise StepFailed(reply, "vars")
        got = reply.data.get("received") or {}
        for key, value in (got.get("timings") or {}).items():
            self.timings[f"receive_{key}"] = float(value)
        self.imported = list(got.get("imported") or [])
        self.imported_modules = int(got.get("imported_modules") or 0)
        mirror.agreed(out)
        self.sent_summary = out.summary()
        if failed := dict(got.get("failed") or {}):  # the worker could not make them
            mirror.not_made(out, failed)  # not agreed: sent again, whole, next time
            # said once per name and reason, and again to a cell that reads one
            if unsaid := {n: why for n, why in failed.items()
                          if mirror.said.get(n) != why or n in self.required_reads}:  # fmt: skip
                mirror.said.update(unsaid)
                text = "; ".join(f"{n}: {why}" for n, why in sorted(unsaid.items()))
                self.note(f"the {s.tool} worker could not take these notebook names (a cell "
                          f"there that reads them fails with NameError): {text}")  # fmt: skip
        # IPython's last results (``_``) are said nothing of: the user did not bind them
        # nor the package's own runs (``-o r1``): no cell expects them there (one that reads
        # them is told at once, ``setup_replay.check``)
        cannot = {n: why for n, why in out.cannot.items()
                  if n not in LAST_RESULTS and OWN_RESULTS not in why}  # fmt: skip
        if unsaid := {n: why for n, why in cannot.items() if mirror.said.get(n) != why}:
            mirror.said.update(unsaid)  # once per name and reason, not before every cell
            text = "; ".join(f"{n}: {why}" for n, why in sorted(unsaid.items()))
            self.note(f"not sent to the {s.tool} worker (a cell there that reads them fails "
                      f"with NameError; bind them in a %%nsight_setup cell): {text}")  # fmt: skip
        self._say_loggers(out.msg.names)
        if out.msg.deleted or out.msg.forget:  # what a worker let go of can be freed now
            gpu_memory.collect_ipc()
        s.names = frozenset(reply.data.get("names", s.names))

    def _say_loggers(self, sent: Iterable[str]) -> None:
        """A logger pickles as its name: the worker's logger of that name has none of the
        notebook's handlers or level, and records sent to it go nowhere the notebook sees."""
        ns, said = self.notebook.user_ns, self.mirror().said
        names = sorted(n for n in sent if isinstance(ns.get(n), logging.Logger)
                       and (ns[n].handlers or ns[n].level) and n not in said)  # fmt: skip
        if names:
            said.update(dict.fromkeys(names, "logger"))
            self.note(f"a logger goes to the {self.session.tool} worker by its name: there it has "
                      "none of the notebook's handlers or level, so what the cell logs is not "
                      "where the notebook's handlers put it (set logging up in a %%nsight_setup "
                      f"cell): {', '.join(names)}")  # fmt: skip

    def replay(self, plan: CellPlan) -> None:
        """Replay the setup cells whose names cannot be sent (none: nothing is asked), after
        checking the GPU has room for what they built in the notebook
        (``admission.GpuMemoryError`` otherwise). Each replayed cell leaves the notebook's
        shared memory as it was (its changes are the notebook's already)."""
        s, run = self.session, plan.replay.run
        if not run:
            return
        for line in plan.notes(s.tool):
            self.note(line)
        setup_replay.admit(plan, s)
        modules = module_names(self.history.entries())
        payload = []
        for entry in run:
            item = entry.payload()
            item["preserve"] = changed_names(entry.cell, modules, self.notebook.user_ns)
            payload.append(item)
        reply = self.conversation.history(payload)
        if reply.stopped or not reply.data.get("ok"):
            raise StepFailed(reply, "setup")
        s.executed += [e.id for e in run]
        s.names = frozenset(reply.data.get("names", ()))
        self._note_setup_failures(plan, reply)
        for line in replay_errors(s.tool, reply):
            self.note(line)

    def deliver(
        self,
        plan: CellPlan,
        folder: RunDir,
        explicit: Mapping[str, Any],
        phase: Callable[[str, str], None],
    ) -> Delivered:
        """Everything the worker needs before a cell, in order: the plan's message
        (``send``), the setup cells it replays (``replay``, said by ``phase``), the ``--vars``
        by value (``ship_by_value``); returns what meta.json records of it."""
        self.send(plan, folder)
        shared = dict(self.sent_summary)
        if self.imported_modules:  # a worker that had not imported what the objects need
            shared.update(imported=self.imported, imported_modules=self.imported_modules)
        replayed = None
        if plan.replay.run:
            phase("replaying", plan.replay.describe(self.session.tool))
            self.replay(plan)
            replayed = [e.name for e in plan.replay.run]
        shipped = self.ship_by_value(folder, explicit, list(shared.get("sent_names", [])))
        return Delivered(shared, replayed, shipped)

    def ship_by_value(
        self,
        folder: RunDir,
        explicit: Mapping[str, Any],
        sent: list[str],
    ) -> list[str]:
        """``--vars`` (and a sweep's values, bound for this run only: ``explicit`` holds both)
        sent by value, whatever their size (vars.pkl, loaded by ``prepare``); returns every
        name the cell got (``sent``: those shared already)."""
        if not explicit:
            return sorted(sent)
        nb = self.notebook
        plan = plan_shipping((), nb.user_ns, explicit=explicit,
                             max_bytes=nb.auto_vars_max_bytes)  # fmt: skip
        blob = plan.blob()
        if blob is not None:
            folder.write_vars(blob)
        # not the notebook's objects: the next cell sends the notebook's again (or the
        # worker drops them, when the notebook has none)
        self.mirror().resend.update(plan.entries)
        return sorted({*plan.entries, *sent})

    # --- kept as it was ---

    def keep(self, cell: PreparedCell) -> list[str] | None:
        """The notebook names whose shared CUDA memory a repeated run of ``cell`` may change
        (``["*"]``: all of it), which the worker saves before it and puts back after."""
        modules = module_names(self.history.entries())
        return changed_names(cell, modules, self.notebook.user_ns)

    # --- back to the notebook ---

    def bring_back(self, folder: RunDir, *, stopped: bool = False) -> dict[str, Any] | None:
        """The notebook's run of the cell: what the worker saw change (names bound, rebound or
        deleted, objects changed, the random streams) is applied to the notebook in place, as
        if the cell had run there; returns what meta.json's ``brought_back`` records (None:
        nothing could be asked). A cell that raised keeps what it did before the error; one
        ``stopped`` (Ctrl-C, ``--timeout``) too, bound by ``state_timeout`` alone (the cell's
        own time is spent)."""
        s, user_ns = self.session, self.notebook.user_ns
        if not isinstance(user_ns, MutableMapping):  # a read-only view: nothing to bind in
            return None
        mirror = self.mirror()
        path = folder.results
        try:
            limit = self.notebook.state_timeout_s
            bound_s = limit if stopped else deadline.bound(limit).seconds
            reply = self.conversation.send_back(
                str(path), bound_s, self.notebook.auto_vars_max_bytes
            )
            if reply.stopped or not reply.data.get("ok"):
                why = reply.data.get("exc_message") or reply.data.get("error") or "interrupted"
                self.note(f"the cell's results stay in the {s.tool} worker: sending them back "
                          f"failed ({why})")  # fmt: skip
                return None
            try:
                back = mirror.incoming(path.read_bytes(), reply.data.get("cannot") or {})
            # a class the notebook cannot import, an unpickling that raises or calls sys.exit:
            # said, not fatal (the notebook keeps running)
            except (Exception, SystemExit) as exc:
                mirror.resend.update(s.names)
                self.note(f"the cell's results stay in the {s.tool} worker: they could not be "
                          f"applied in the notebook ({type(exc).__name__}: {exc})")  # fmt: skip
                return None
            adopted = None
            if back.adopt:
                folder.write_adopted(adoption_blob(back.adopt))
                adopted = str(folder.adopted)
            # applied: the worker agrees now (else it sends these changes again next time)
            self.conversation.agreed(adopted)
        finally:
            path.unlink(missing_ok=True)
            folder.adopted.unlink(missing_ok=True)
        held = self.history.held
        for name in back.applied.bound:
            held.pop(name, None)
        for name, why in {**back.cannot, **back.applied.failed}.items():
            held[name] = (
                f"a profiled cell bound it in the {s.tool} worker, where it stays: it could not "
                f"come back to the notebook ({why}). Fix: bind it in the notebook, or in a "
                "%%nsight_setup cell (what cannot be sent is rebuilt there)"
            )
        for line in back.notes(s.tool):
            self.note(line)
        if detached := ", ".join(reply.data.get("detached") or []):
            self.note(f"came back without their autograd graph, which cannot leave the {s.tool} "
                      f"worker (backward() on them fails in the notebook: call it in the "
                      f"profiled cell): {detached}")  # fmt: skip
        if traced := ", ".join(reply.data.get("traceback") or []):
            self.note(f"came back without its traceback, whose frames are the {s.tool} "
                      "worker's (print it in the profiled cell: traceback.print_exception(e)): "
                      f"{traced}")  # fmt: skip
        if process := "; ".join(reply.data.get("process") or []):
            self.note(f"the cell changed the {s.tool} worker's process state, which stays there "
                      f"(the notebook's is its own: docs/sessions.md): {process}")  # fmt: skip
        return {"names": sorted(back.applied.bound), "cannot": back.cannot,
                "rebound": back.applied.rebound, "adopted": len(back.adopt)}  # fmt: skip

    # --- what a worker lacks, said ---

    def explain(self, status: dict[str, Any]) -> dict[str, Any]:
        """A cell's NameError for a name a setup cell binds that raised when this worker
        replayed it, or one a profiled cell bound in another worker that could not come back:
        the message says so, with the fix (else the status as it is)."""
        found = NAME_ERROR.search(str(status.get("exc_message") or ""))
        if status.get("exc_type") != "NameError" or found is None:
            return status
        name = found.group(1)
        why = self.session.setup_failed.get(name) or self.history.held.get(name)
        if not why:
            return status
        return {**status, "exc_message": f"{status['exc_message']} in the "
                f"{self.session.tool} worker: {why}."}  # fmt: skip

    def _note_setup_failures(self, plan: CellPlan, reply: Reply) -> None:
        """The setup cells of ``plan`` whose replay raised: each name they bind, with why the
        worker may lack it; a setup replayed without an error clears its names."""
        s = self.session
        raised = {e.get("filename"): e for e in reply.data.get("errors", [])}
        for entry in plan.replay.run:
            if entry.kind != "setup":
                continue
            error = raised.get(entry.filename)
            for name in entry.cell.names_bound:
                s.setup_failed.pop(name, None)
            if error is None:
                continue
            worker_only = entry.id not in self.history.in_notebook
            text = setup_failure(s.tool, entry.name, error, plan.fallback.get(entry.name, ""),
                                 worker_only=worker_only)  # fmt: skip
            s.setup_failed.update(dict.fromkeys(entry.cell.names_bound, text))
