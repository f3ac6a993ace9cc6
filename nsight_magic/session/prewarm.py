"""Workers started, and their history replayed, before a cell needs them, in a background thread.

- nsys: when a ``%%nsight_setup`` cell runs (concurrently with the notebook's own run of it) or
  on ``%nsight_session start``: the first profiled cell then costs its body and the profiler.
- ncu: once the first nsys result is back, when the GPU has room for a second copy of the
  notebook's state (``gpu_memory.py``); it replays what a drill-down into that cell needs, so
  the first drill-down costs ncu's own replay. The nsys worker is held meanwhile (its lock), so
  an nsys capture never runs beside the ncu worker's replay on the GPU; and the replay starts
  only once no profiled cell has run for a moment (``activity.py``), so cells run back to back
  (Run All) are not held by it.

A profiled cell that arrives meanwhile waits for the same worker (the start and the replay hold
the locks a cell takes), then replays only what is still missing. What went wrong in the
background is kept on the worker (``WarmSession.notes``) and said by its next cell; a worker
that failed to start is started again by the next cell, which then reports why.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..run_dir import RunDir
from ..script import build_script, prepare_cell
from . import gpu_memory
from .activity import PREWARM_IDLE_S
from .backends import Backend
from .pipeline import Lines, RunContext, base_meta
from .replay import plan_replay
from .spec import CellRequest, Notebook, RunCallbacks
from .warm import WarmSession, replay_errors

if TYPE_CHECKING:
    from .manager import SessionManager


def prewarm(
    manager: SessionManager,
    backend: Backend,
    request: CellRequest,
    *,
    reads: frozenset[str] = frozenset(),
    before: int | None = None,
    hold: WarmSession | None = None,
    into: WarmSession | None = None,
) -> threading.Thread:
    """Start (or find) the worker ``request`` would use (or use ``into``) and replay what a cell
    reading ``reads`` (before history id ``before``) needs, in a daemon thread; ``hold``: a
    worker kept waiting meanwhile. Returns the thread (tests join it)."""
    thread = threading.Thread(
        target=_prewarm,
        args=(manager, backend, request, reads, before, hold, into, manager._stops),
        name=f"nsight_magic prewarm {backend.tool}",
        daemon=True,
    )
    thread.start()
    return thread


def _prewarm(
    manager: SessionManager,
    backend: Backend,
    request: CellRequest,
    reads: frozenset[str],
    before: int | None,
    hold: WarmSession | None,
    into: WarmSession | None,
    stops: int,
) -> None:
    """``stops``: manager.stop()'s count when this was decided: a stop since ends it."""
    notes: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="nsm-prewarm-") as tmp:
            session = into
            if session is None:
                tool = backend.locate()
                callbacks = RunCallbacks(output=notes.append)
                ctx = RunContext(request=request, backend=backend, tool=tool,
                                 cell=prepare_cell("pass"), run_dir=Path(tmp),
                                 notebook=Notebook(), callbacks=callbacks,
                                 lines=Lines(backend.tool, callbacks, None),
                                 meta=base_meta(request, tool, "prewarm"))  # fmt: skip
                session = manager._session(backend, ctx, stops=stops)
            if hold is not None and not manager.activity.wait_idle(
                PREWARM_IDLE_S, lambda: manager._stops != stops
            ):
                return  # stopped meanwhile; a Run All keeps going past here until it ends
            waiting = f"the {session.tool} worker replays ahead of time; no capture runs beside it"
            with _busy(hold, waiting), _busy(session, "replaying earlier cells ahead of time"):
                _replay(manager, session, Path(tmp), backend, reads, before)
            session.notes += notes
    except Exception:  # best effort: the next cell starts it again and says why
        return


@contextlib.contextmanager
def _busy(session: WarmSession | None, why: str) -> Iterator[None]:
    """Hold ``session``'s lock, saying ``why`` to a cell that waits for it."""
    if session is None:
        yield
        return
    with session.lock:
        session.busy = why
        try:
            yield
        finally:
            session.busy = ""


def _replay(
    manager: SessionManager,
    session: WarmSession,
    folder: Path,
    backend: Backend,
    reads: frozenset[str],
    before: int | None,
) -> None:
    plan = plan_replay(manager.history.entries(), session.executed, reads, before=before,
                       everything=manager.replay_all)  # fmt: skip
    if not plan.run or plan.conflict or not session.alive():
        return
    # the worker needs a script's hooks to replay through
    script = RunDir(folder).write_script(build_script(prepare_cell("pass"), gate=backend.gate))
    worker = session.worker
    if not worker.request({"op": "load", "script": str(script)}).data.get("ok"):
        return
    reply = worker.request({"op": "history", "entries": [e.payload() for e in plan.run]})
    if not reply.data.get("ok"):
        session.notes.append(f"prewarming the {session.tool} worker failed: "
                             f"{str(reply.data.get('error', '')).strip()[-300:]}")  # fmt: skip
        return
    session.executed += [e.id for e in plan.run]
    if any(manager.history.get(e.id) is None for e in plan.run):  # its setup cell failed
        worker.kill()  # in the notebook meanwhile: this worker ran what the notebook has not
        return
    session.names = frozenset(reply.data.get("names", ()))
    session.prewarmed = [e.name for e in plan.run]
    session.notes += replay_errors(session.tool, reply)


def prewarm_for_setup(manager: SessionManager) -> threading.Thread:
    """A setup cell was recorded: the nsys worker in use (whatever its launch options) replays
    it, or, with none alive, one with the default options starts and does."""
    live = [s for s in manager._sessions_of("nsys") if s.alive()]
    backend = manager.prewarm_backends["nsys"]()
    return prewarm(manager, backend, CellRequest(cell="pass"), into=live[-1] if live else None)


def prewarm_drill_down(
    manager: SessionManager, nsys: WarmSession, ctx: RunContext, entry_id: int
) -> list[threading.Thread]:
    """The ncu worker a drill-down into the cell ``nsys`` just ran (``ctx``, history id
    ``entry_id``) would use, started and replayed when none is alive and the GPU has room for
    it beside the nsys worker; the nsys worker waits while it replays."""
    if any(s.alive() for s in manager._sessions_of("ncu")):
        return []
    r = ctx.request  # what the drill-down's request will have: the ncu worker's launch key
    request = CellRequest(cell="pass", python=r.python, cwd=r.cwd, env=dict(r.env))
    backend = manager.prewarm_backends["ncu"]()
    stops = manager._stops

    def run() -> None:
        room, _ = gpu_memory.read().room_for_copy_of(nsys.worker.pid)
        if room:
            _prewarm(manager, backend, request, ctx.cell.names_read, entry_id, nsys, None, stops)

    thread = threading.Thread(target=run, name="nsight_magic prewarm ncu", daemon=True)
    thread.start()
    return [thread]
