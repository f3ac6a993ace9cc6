"""Workers started, and their history replayed, before a cell needs them, in a background thread.

- nsys and ncu: when a ``%%nsight_setup`` cell runs (concurrently with the notebook's own run
  of it; nsys also on ``%nsight_session start``): each imports what the cell imports meanwhile
  and receives what it defined once it ran (mapping, no GPU work), so the first profiled cell,
  the first ``%%ncu`` cell or drill-down included, costs its body and the profiler. The ncu
  worker replays what cannot be sent only in a pause (below). Importing torch and transformers
  takes seconds (benchmarks/README.md, design measurements).
- nsys, at ``%load_ext`` in a Jupyter kernel (``start_at_load``): it imports torch (when the
  notebook's Python has it) and what the notebook's cells imported before, then, after every
  cell, what that cell imported (``follow_imports``, every live worker), so a Run All whose
  prelude imports torch and transformers finds the worker's imports done by its setup cell (they
  outlast the setup cell that started them: ``benchmarks/setup_race.py``, benchmarks/README.md,
  design measurements).
- ncu, started at ``%load_ext`` once that nsys worker is up and has imported, else when the
  first nsys cell begins in a worker that is up (``start_for_drill_downs``: it imports what the
  notebook imported by then), and again once the first nsys result is back: it replays what a
  drill-down into that cell needs (started first when none is alive and the GPU has room for
  it), so the first drill-down costs ncu's own replay. The nsys worker is held meanwhile (its
  lock), so an nsys capture never runs beside the ncu worker's replay on the GPU; and the
  replay starts only once no profiled cell has run for a moment (``activity.py``), so cells
  run back to back (Run All) are not held by it.

A profiled cell that arrives meanwhile waits for the same worker (the start and the replay hold
the locks a cell takes), then replays only what is still missing. What went wrong in the
background is kept on the worker (``WarmSession.notes``) and said by its next cell; a worker
that failed to start is started again by the next cell, which then reports why.
"""

from __future__ import annotations

import ast
import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...processes import gpu_memory
from ...run_folders.run_dir import RunDir
from ...script import build_script, prepare_cell
from ...worker.conversation import BOUNDS, Conversation
from ..backends import Backend
from ..history import History
from ..run_context import Lines, RunContext, base_meta
from ..spec import CellRequest, Notebook, RunCallbacks
from ..state.exchange import StateExchange, StepFailed
from ..workers.activity import PREWARM_IDLE_S, Activity
from ..workers.pool import WorkerPool
from ..workers.warm_session import WarmSession

# how long the ncu worker's start waits for the nsys worker's (which the setup cell asked first);
# a hang there is not waited for longer (the nsys start itself gives up later, and says why)
FIRST_START_WAIT_S = 60.0


class PrewarmHost(Protocol):
    """What a prewarm needs of the session (``SessionManager`` is one): its workers, history,
    the notebook whose names a worker receives, and when to wait."""

    workers: WorkerPool
    history: History
    activity: Activity
    prewarm_backends: dict[str, Callable[[], Backend]]
    notebook: Notebook

    def wait_setup(self, entry_id: int, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True)
class PrewarmPlan:
    """How one prewarm brings its worker up to date (``prewarm``): for a cell reading ``reads``
    (before history id ``before``: ``state/exchange.py``); ``hold``: a worker kept waiting
    meanwhile; ``into``: the worker to use (None: start or find the one the request would
    use); ``setup_entry``: a setup cell the notebook is running: the worker starts meanwhile
    and receives what it defined once it ran; ``started``: set once its worker is up (or the
    start failed); ``after``: its worker is started only once that is set (another prewarm's
    ``started``); ``imports``: what it imports first, or what gives that once the worker is up
    (what the notebook was told of meanwhile); ``standby``: a worker no cell asked for yet
    (``start_for_host_cells``): what its start said is not said by the cell that later uses
    it."""

    reads: frozenset[str] = frozenset()
    before: int | None = None
    hold: WarmSession | None = None
    into: WarmSession | None = None
    setup_entry: int | None = None
    started: threading.Event | None = None
    after: threading.Event | None = None
    imports: Imports | Callable[[], Imports] | None = None
    standby: bool = False


def prewarm(
    manager: PrewarmHost, backend: Backend, request: CellRequest, plan: PrewarmPlan | None = None
) -> threading.Thread:
    """Start (or find) the worker ``request`` would use and bring it up to date as ``plan``
    says, in a daemon thread. Returns the thread (tests join it)."""
    thread = threading.Thread(
        target=_prewarm,
        args=(manager, backend, request, plan or PrewarmPlan(), manager.workers.stop_count),
        name=f"nsight_magic prewarm {backend.tool}",
        daemon=True,
    )
    thread.start()
    return thread


def _prewarm(
    manager: PrewarmHost, backend: Backend, request: CellRequest, plan: PrewarmPlan, stops: int
) -> None:
    """``stops``: manager.stop()'s count when this was decided: a stop since ends it."""
    notes: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="nsm-prewarm-") as tmp:
            session = plan.into or _start(manager, backend, request, plan, stops, notes, tmp)
            if plan.started is not None:
                plan.started.set()
            if _caught_up(manager, session, backend, plan, stops, Path(tmp)):
                session.notes += notes
    except Exception:  # best effort: the next cell starts it again and says why
        return
    finally:
        if plan.started is not None:  # a failed start must not hold the worker that waits
            plan.started.set()


def _start(manager: PrewarmHost, backend: Backend, request: CellRequest, plan: PrewarmPlan,
           stops: int, notes: list[str], tmp: str) -> WarmSession:  # fmt: skip
    """The worker ``request`` would use, started (or found), its start's lines in ``notes``."""
    tool = backend.locate()
    # what the first cell's option check asks of the profiler, asked now and kept
    # (ncu --list-sets/--list-sections: 1.5-2 s of the first drill-down on the H100),
    # beside the worker's start rather than before it
    threading.Thread(target=_quietly, args=(backend.validate, tool), daemon=True,
                     name=f"nsight_magic {backend.tool} options").start()  # fmt: skip
    if plan.after is not None:  # another worker first (the nsys one, for a Run All)
        plan.after.wait(FIRST_START_WAIT_S)
    callbacks = RunCallbacks(output=notes.append)
    ctx = RunContext(request=request, backend=backend, tool=tool,
                     cell=prepare_cell("pass"), run_dir=Path(tmp),
                     notebook=Notebook(), callbacks=callbacks,
                     lines=Lines(backend.tool, callbacks, None),
                     meta=base_meta(request, tool, "prewarm"))  # fmt: skip
    session = manager.workers.session_for(backend, ctx, stops=stops,
                                          beside_only=plan.standby)  # fmt: skip
    if plan.standby:
        notes.clear()
    return session


def _caught_up(manager: PrewarmHost, session: WarmSession, backend: Backend, plan: PrewarmPlan,
               stops: int, tmp: Path) -> bool:  # fmt: skip
    """Bring ``session`` up to date: its imports, then (after a setup cell ran) the notebook's
    names and what the cell will need replayed. False when it stopped half way (a stop, a
    setup cell that failed): its start's lines are then not said."""
    imports = plan.imports() if callable(plan.imports) else plan.imports
    if imports is not None:  # %load_ext's start: imports, nothing to catch up with
        if imports.modules:
            _import(session, imports, "importing what the notebook imports")
        return True
    if plan.setup_entry is not None:
        entry = manager.history.get(plan.setup_entry)
        if entry is not None:  # its imports meanwhile: the receive then only maps
            _import(session, imports_of(entry.cell.code), "importing what the setup cell imports")
        if not manager.wait_setup(plan.setup_entry):
            return False  # it failed in the notebook: nothing to receive
    hold = plan.hold
    # the ncu worker replays on the GPU only in a pause, the nsys worker held meanwhile
    if hold is not None or backend.tool == "ncu":  # names at once: mapping costs no GPU time
        with _busy(session, "receiving the notebook's variables ahead of time"):
            left = _replay(manager, session, tmp, backend, plan.reads, plan.before,
                           receive_only=True)  # fmt: skip
        if not left:
            return True
        if not manager.activity.wait_idle(
            PREWARM_IDLE_S, lambda: manager.workers.stop_count != stops
        ):
            return False  # stopped meanwhile; a Run All keeps going past here until it ends
        if hold is None:  # the nsys worker in use waits while this one replays
            live = _alive(manager, "nsys")
            hold = live[-1] if live else None
    waiting = f"the {session.tool} worker replays ahead of time; no capture runs beside it"
    with _busy(hold, waiting), _busy(session, "replaying earlier cells ahead of time"):
        _replay(manager, session, tmp, backend, plan.reads, plan.before)
    return True


def _import(session: WarmSession, imports: Imports, why: str) -> None:
    with _busy(session, why):
        Conversation(session.worker).imports(imports.modules, imports.attributes)


def _wait_for(starts: Iterable[threading.Thread]) -> None:
    """Until the worker starts begun before have ended (each bounded by its imports' limit)."""
    for thread in starts:
        thread.join(BOUNDS.imports_s)


def _quietly(call: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(Exception):  # the cell that needs it asks again and says why
        call(*args)


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
    manager: PrewarmHost,
    session: WarmSession,
    folder: Path,
    backend: Backend,
    reads: frozenset[str],
    before: int | None,
    *,
    receive_only: bool = False,
) -> bool:
    """Bring ``session`` up to date (``state/exchange.py``); ``receive_only``: the names, no
    replay (a replay runs the user's code on the GPU: it waits for a pause, the names need
    not). True when cells are left to replay (after ``receive_only``)."""
    worker = session.worker
    talk = Conversation(worker)
    state = StateExchange(session, manager.history, manager.notebook, talk, session.notes.append)
    plan = state.plan(reads, before=before)
    if not session.alive():
        return False
    if plan.needs_nothing():
        return False
    run_dir = RunDir(folder)
    # the worker needs a script's hooks to receive and replay through
    script = run_dir.write_script(build_script(prepare_cell("pass"), gate=backend.gate))
    if not talk.load(str(script)).data.get("ok"):
        return False
    try:
        state.send(plan, run_dir)
        if not plan.replay.run or receive_only:
            return bool(plan.replay.run)
        state.replay(plan)
    except StepFailed as failed:
        data = failed.reply.data
        session.notes.append(
            f"the {session.tool} worker could not receive the notebook's variables: "
            f"{data.get('exc_message', '')}" if failed.phase == "vars" else
            f"prewarming the {session.tool} worker failed: "
            f"{str(data.get('error', '')).strip()[-300:]}"
        )  # fmt: skip
        return False
    if any(manager.history.get(e.id) is None for e in plan.replay.run):  # its setup cell failed
        worker.kill()  # in the notebook meanwhile: this worker ran what the notebook has not
        return False
    session.prewarmed = [e.name for e in plan.replay.run]
    return False


@dataclass(frozen=True)
class Imports:
    """What a worker imports ahead of a cell: ``modules`` by full name, and of each the names a
    ``from X import A`` looks up (``imported_names``)."""

    modules: tuple[str, ...] = ()
    attributes: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of_told(cls, told: Iterable[tuple[str, str]], first: str = "") -> Imports:
        """The imports whose ``told()`` is ``told``, module ``first`` first (torch: the others'
        objects need it), then by name."""
        ordered = sorted(told, key=lambda item: (item[0] != first, item))
        attributes: dict[str, list[str]] = {}
        for module, name in ordered:
            if name:
                attributes.setdefault(module, []).append(name)
        return cls(tuple(dict.fromkeys(module for module, _ in ordered)), attributes)

    def told(self) -> set[tuple[str, str]]:
        """What these imports tell a worker: (module, "") for each module, (module, name) for
        each name looked up in it."""
        return {(m, "") for m in self.modules} | {
            (m, a) for m, names in self.attributes.items() for a in names
        }

    def without(self, done: set[tuple[str, str]]) -> Imports:
        """These imports less what ``done`` (``told``) holds: a module imported already is not
        asked again, but a name not yet looked up in it is (``import transformers`` in one cell,
        ``from transformers import LlamaForCausalLM`` in a later one: the later lookup imports
        the model's module, which the receive imported otherwise: benchmarks/README.md, design
        measurements)."""
        attributes = {
            m: fresh
            for m, names in self.attributes.items()
            if (fresh := [a for a in names if (m, a) not in done])
        }
        modules = [m for m in self.modules if (m, "") not in done or m in attributes]
        return Imports(tuple(dict.fromkeys([*modules, *attributes])), attributes)


def submodules_to_follow(new: Iterable[str], told: set[tuple[str, str]]) -> Imports:
    """Of the modules ``new`` in the notebook's ``sys.modules`` since the last cell, those of
    packages its cells imported (``told``): what a lazy package (transformers) imported while a
    cell ran (``AutoModelForCausalLM.from_config`` imports the model's module, a forward with
    labels its loss module), which no import statement shows and a worker's receive would
    import otherwise, in the next profiled cell. Modules of other packages are left out: the
    extension's own views (pandas, altair, ipywidgets) are the notebook's, not the cells'; so
    are a package's private ones (``_private``)."""
    packages = {m.split(".")[0] for m, _ in told}
    return Imports(tuple(m for m in new if m.split(".")[0] in packages and (m, "") not in told
                         and not _private(m)))  # fmt: skip


def _private(module: str) -> bool:
    """``torch._dynamo``, ``pkg._impl``: a package's internals, which its public modules import
    themselves (the worker follows those); asked alone, one can cost seconds (torch._dynamo)
    that no object the notebook sends needs."""
    return any(part.startswith("_") for part in module.split(".")[1:])


def imports_of(code: str) -> Imports:
    """What ``code`` imports (``import torch``, ``from transformers import X``); nothing when it
    does not parse (a cell IPython could not transform: it did not run)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return Imports()
    modules: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(dict.fromkeys(alias.name for alias in node.names))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules[node.module] = None
    return Imports(tuple(modules), imported_names(tree))


def imported_names(tree: ast.AST) -> dict[str, list[str]]:
    """``from X import A, B`` -> {"X": ["A", "B"]}: what the ``imports`` request also looks up
    (a lazy package, transformers, imports a model's module only when its class is asked for;
    unasked, the worker's receive imported it after the setup cell ended, while the next cell
    waited: ``benchmarks/setup_race.py``)."""
    names: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.setdefault(node.module, []).extend(a.name for a in node.names if a.name != "*")
    return names


def _alive(manager: PrewarmHost, tool: str) -> list[WarmSession]:
    return [s for s in manager.workers.sessions_of(tool) if s.alive()]


def prewarm_for_setup(manager: PrewarmHost, entry_id: int) -> list[threading.Thread]:
    """A setup cell runs in the notebook: for each tool, every live worker (whatever its launch
    options: those started by ``%nsight_session start nsys [--host]`` too), or, with none alive,
    one of the default options started meanwhile, receive what it defined once it ran (a
    notebook whose cells all use other options keeps one worker, not a second idle one)."""
    threads = []
    request = CellRequest(cell="pass")
    # the nsys worker is asked to start first, the ncu one once it is up: a Run All's first
    # profiled cell is usually %%nsys, and two launches at once slow the one it waits for
    nsys_up = threading.Event()
    for tool in ("nsys", "ncu"):
        backend = manager.prewarm_backends[tool]()
        targets: list[WarmSession | None] = list(_alive(manager, tool)) or [None]
        if tool == "nsys" and targets != [None]:
            nsys_up.set()  # up already: nothing to wait for
        for into in targets:
            plan = PrewarmPlan(into=into, setup_entry=entry_id,
                               started=nsys_up if tool == "nsys" else None,
                               after=nsys_up if tool == "ncu" else None)  # fmt: skip
            threads.append(prewarm(manager, backend, request, plan))
    return threads


def start_at_load(
    manager: PrewarmHost, imports: Imports, started: threading.Event
) -> threading.Thread:
    """``%load_ext`` in a kernel: the nsys worker of the default launch options started (when
    none is alive) and told to import ``imports`` (torch, and what earlier cells imported), so
    that the setup cell of a Run All finds it ready; a live one is only told to import.
    ``started`` is set once it is up (or its start failed)."""
    if _alive(manager, "nsys"):
        started.set()
        return follow_imports(manager, imports)
    backend = manager.prewarm_backends["nsys"]()
    plan = PrewarmPlan(imports=imports, started=started)
    return prewarm(manager, backend, CellRequest(cell="pass"), plan)


def follow_imports(
    manager: PrewarmHost, imports: Imports, starting: threading.Event | None = None
) -> threading.Thread:
    """A cell the notebook ran imported ``imports``: every live worker imports them too, in
    the background, each under its lock (a cell that arrives meanwhile waits, and says why), so
    a later cell that reads them does not wait for the import. ``starting``: set once the
    worker ``%load_ext`` starts is up (a prelude's imports reach it too)."""

    def run() -> None:
        if starting is not None:
            starting.wait(FIRST_START_WAIT_S)
        for session in manager.workers.sessions_of():
            if session.alive():  # one that died is started again by the cell that needs it
                _quietly(_import, session, imports, "importing what the notebook imported")

    thread = threading.Thread(target=run, name="nsight_magic imports", daemon=True)
    thread.start()
    return thread


def _worker_request(cell: CellRequest) -> CellRequest:
    """What a later cell's request will hold of ``cell``'s that picks its worker (the launch
    key: the Python, its folder, its environment), for a worker started ahead of it."""
    return CellRequest(cell="pass", python=cell.python, cwd=cell.cwd, env=dict(cell.env))


def start_for_drill_downs(
    manager: PrewarmHost,
    request: CellRequest,
    imports: Callable[[], Imports],
    after: Iterable[threading.Thread] = (),
) -> list[threading.Thread]:
    """The ncu worker a drill-down would use, started ahead of it: at ``%load_ext`` once the
    nsys worker is up and has imported (``after``: that start), else when the first nsys cell
    begins in a worker that is up. It imports ``imports()`` (what the notebook imported by the
    time it is up: a setup cell's imports told meanwhile included) and receives the notebook's
    names after the first nsys cell (``prewarm_drill_down``). Started only at the first nsys
    cell, it made a Run All's first drill-down wait for its start (benchmarks/README.md, design
    measurements). Nothing when the nsys worker is not up (two starts at once slow the one the
    cell waits for), an ncu worker is alive, or the GPU has no room for a second worker."""
    if _alive(manager, "ncu"):
        return []
    ncu_request = _worker_request(request)  # a drill-down's: the ncu worker's launch key
    make = manager.prewarm_backends["ncu"]
    stops = manager.workers.stop_count
    first = list(after)

    def run() -> None:
        _wait_for(first)
        nsys = _alive(manager, "nsys")
        if not nsys or _alive(manager, "ncu") or manager.workers.stop_count != stops:
            return
        if gpu_memory.read().room_for_copy_of(nsys[-1].worker.pid)[0]:
            _prewarm(manager, make(), ncu_request, PrewarmPlan(imports=imports), stops)

    thread = threading.Thread(target=run, name="nsight_magic start ncu", daemon=True)
    thread.start()
    return [thread]


def start_for_host_cells(
    manager: PrewarmHost,
    request: CellRequest,
    imports: Callable[[], Imports],
    cell_key: tuple[object, ...],
    after: Iterable[threading.Thread] = (),
) -> list[threading.Thread]:
    """The first nsys cell begins in a worker that is up already: the worker a first ``%%nsys
    --host`` cell would use (``prewarm_backends["host"]``: nsys fixes osrt and Python sampling
    at launch, so ``--host`` needs a worker of its own) starts meanwhile and imports
    ``imports()`` once it is up; it makes no CUDA context until a cell sends it the notebook's
    names (its GPU memory: none). Started by the ``--host`` cell, the worker imported
    transformers while it unpickled the notebook's model, most of that cell
    (benchmarks/README.md, design measurements). ``cell_key``: the launch key of the cell's own
    worker. Nothing when there is no ``host`` backend, the cell is a ``--host`` one, the nsys
    worker is still to start, or starting it would end another worker: a second one alive
    already (the pool keeps two), or no room on the GPU for one more
    (``WorkerPool.session_for``'s ``beside_only``). ``after``: starts once these have ended (the
    ncu worker's start: a first drill-down is likelier than a first ``--host`` cell, and both
    importing at once made the drill-down wait twice as long for its worker)."""
    make = manager.prewarm_backends.get("host")
    nsys = _alive(manager, "nsys")
    if make is None or len(nsys) != 1:
        return []
    backend = make()
    host_request = _worker_request(request)
    if backend.launch_key(host_request) in (cell_key, nsys[0].key):
        return []  # the cell's own worker is a --host one
    stops = manager.workers.stop_count
    first = list(after)

    def run() -> None:
        _wait_for(first)
        try:
            backend.validate(backend.locate())  # an nsys without --host's options: none
        except Exception:
            return
        _prewarm(manager, backend, host_request, PrewarmPlan(imports=imports, standby=True), stops)

    thread = threading.Thread(target=run, name="nsight_magic start nsys --host", daemon=True)
    thread.start()
    return [thread]


def prewarm_drill_down(
    manager: PrewarmHost, nsys: WarmSession, ctx: RunContext, entry_id: int
) -> list[threading.Thread]:
    """The ncu worker a drill-down into the cell ``nsys`` just ran (``ctx``, history id
    ``entry_id``) would use, started and replayed when none is alive and the GPU has room for
    it beside the nsys worker; the nsys worker waits while it replays."""
    request = _worker_request(ctx.request)  # a drill-down's: the ncu worker's launch key
    backend = manager.prewarm_backends["ncu"]()
    key = backend.launch_key(request)
    live = _alive(manager, "ncu")
    # one started with the setup cell (``prewarm_for_setup``) replays this cell's needs too
    into = next((s for s in live if s.key == key), None)
    if into is None and live:
        return []  # one of other launch options is in use: the drill-down decides
    stops = manager.workers.stop_count

    def run() -> None:
        if into is None and not gpu_memory.read().room_for_copy_of(nsys.worker.pid)[0]:
            return
        plan = PrewarmPlan(reads=ctx.cell.names_read, before=entry_id, hold=nsys, into=into)
        _prewarm(manager, backend, request, plan, stops)

    thread = threading.Thread(target=run, name="nsight_magic prewarm ncu", daemon=True)
    thread.start()
    return [thread]
