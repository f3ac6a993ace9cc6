"""Prewarmed workers, for real on the CPU (the worker without a profiler): the nsys worker
starts while the notebook runs a setup cell and receives what it defined once it ran, a setup
cell that failed in the notebook is taken back, and the ncu worker is prewarmed for drill-downs
after the first nsys result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from processes import alive
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.script import prepare_cell
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.runs.prewarm import Imports
from nsight_magic.session.spec import CellRequest, Notebook, Rerun, RunCallbacks


@pytest.fixture
def manager():
    m = SessionManager(setup=SetupRegistry())
    m.prewarm = True
    m.prewarm_backends = {"nsys": BareBackend, "ncu": lambda: BareBackend("ncu")}
    yield m
    m.stop()


def _join(manager: SessionManager) -> None:
    for thread in manager.background:
        thread.join(60)
        assert not thread.is_alive()


def _run(manager: SessionManager, tmp_path: Path, cell: str, tool: str = "nsys", ns=None, **kw):
    out: list[str] = []
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), **kw)  # fmt: skip
    result = manager.profile(request, BareBackend(tool), notebook=Notebook(user_ns=ns or {}),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return result, out


def _status(manager: SessionManager, tool: str):
    (status,) = [s for s in manager.status() if s.tool == tool]
    return status


def _notebook_setup(manager: SessionManager, ns: dict, name: str, source: str, run=None) -> bool:
    """A setup cell as %%nsight_setup runs it: in the notebook (``ns``), the workers told."""
    manager.notebook = Notebook(user_ns=ns)
    cell = prepare_cell(source)
    return manager.run_setup(name, cell, run or (lambda: exec(cell.code, ns) is None))


def test_the_nsys_worker_starts_while_the_notebook_runs_a_setup_cell_and_receives_its_names(
    manager, tmp_path
) -> None:
    ns: dict = {}
    setup = "import os\nbase = os.getpid()\n"

    def notebook_run() -> bool:  # the notebook's run takes until the worker is up
        deadline = time.monotonic() + 30
        while not [s for s in manager.status() if s.tool == "nsys"] and time.monotonic() < deadline:
            time.sleep(0.02)
        exec(setup, ns)
        return True

    assert _notebook_setup(manager, ns, "base", setup, notebook_run)
    _join(manager)
    status = _status(manager, "nsys")
    assert status.alive and status.cells == 0 and status.prewarmed == []  # nothing replayed
    assert "base" in status.shared_names  # received once the notebook's run ended
    result, out = _run(manager, tmp_path, "print(base)", ns=ns)
    # the notebook's value (its pid), not one the worker computed: the cell ran once, there
    assert "replayed" not in result.meta and out[-1] == str(os.getpid())
    assert len(manager.setup) == 1  # fresh runs replay it too


def test_the_ncu_worker_starts_with_a_setup_cell_too_so_a_first_ncu_cell_finds_it_ready(
    manager, tmp_path
) -> None:
    """A Run All whose first profiled cell is %%ncu: its worker imported and received during
    the setup cell (a transformers setup made that first cell 18.5 s on the H100 otherwise)."""
    ns: dict = {}
    assert _notebook_setup(manager, ns, "base", "import os\nbase = os.getpid()\n")
    _join(manager)
    ncu = _status(manager, "ncu")
    assert ncu.alive and ncu.cells == 0 and ncu.prewarmed == [] and "base" in ncu.shared_names
    result, out = _run(manager, tmp_path, "print(base)", tool="ncu", ns=ns)
    # the names went ahead: the cell sends none (at most the random streams, when the test
    # process drew from them meanwhile, a short receive)
    assert result.meta["worker"]["pid"] == ncu.pid
    assert not result.meta["shared_vars"].get("sent_names")
    assert out[-1] == str(os.getpid())  # the notebook's value, received, not recomputed


def test_a_drill_down_after_a_setup_cell_uses_the_ncu_worker_the_setup_started(
    manager, tmp_path
) -> None:
    ns: dict = {}
    assert _notebook_setup(manager, ns, "base", "base = 10\n")
    run, _ = _run(manager, tmp_path, "y = base + 1\nprint('measured')", ns=ns)
    _join(manager)
    (ncu,) = [s for s in manager.status() if s.tool == "ncu"]  # the setup's, no second one
    out: list[str] = []
    request = CellRequest(cell="y = base + 1\nprint('measured')", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    drill = manager.profile(request, BareBackend("ncu"),
                            rerun=Rerun(before=run.meta["history_id"]),
                            notebook=Notebook(user_ns=ns),
                            callbacks=RunCallbacks(output=out.append))  # fmt: skip
    assert drill.meta["worker"]["pid"] == ncu.pid and "replayed" not in drill.meta
    # it ran to its end; its print, a repeat of the notebook's, is not shown again
    assert drill.report["status"] == "ok" and "measured" not in out


def test_a_setup_cell_reaches_the_worker_started_by_hand(manager, tmp_path):
    """``%nsight_session start`` starts the nsys worker; a setup cell run right after it (Run
    All), while that worker may still be starting, reaches it: one worker, no second start."""
    manager.start_worker("nsys")
    ns: dict = {}
    assert _notebook_setup(manager, ns, "base", "base = 41\n")
    _join(manager)
    status = _status(manager, "nsys")  # the only nsys worker
    assert status.alive and "base" in status.shared_names
    result, out = _run(manager, tmp_path, "print(base + 1)", ns=ns)
    assert "replayed" not in result.meta and out[-1] == "42"


def test_a_setup_cell_that_failed_in_the_notebook_is_taken_back(manager, tmp_path) -> None:
    ns: dict = {}
    assert not _notebook_setup(
        manager, ns, "v", "value = 1\n1 / 0\n", run=lambda: exec("value = 1", ns) is None and False
    )
    _join(manager)
    assert not manager.history.entries() and len(manager.setup) == 0
    _, out = _run(manager, tmp_path, "print('value' in globals())")
    assert out[-1] == "False"


def test_the_ncu_worker_is_prewarmed_for_drill_downs_after_the_first_nsys_result(
    manager, tmp_path
) -> None:
    manager.record_setup("base = 10", "base", prepare_cell("base = 10"))
    run, _ = _run(manager, tmp_path, "y = base + 1\nprint('measured')")
    _join(manager)
    ncu = _status(manager, "ncu")
    assert ncu.alive and ncu.prewarmed == ["base"] and ncu.cells == 0
    # the drill-down (a re-run of that cell in the ncu worker) finds it ready
    out: list[str] = []
    request = CellRequest(cell="y = base + 1\nprint('measured')", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    drill = manager.profile(request, BareBackend("ncu"),
                            rerun=Rerun(before=run.meta["history_id"]),
                            callbacks=RunCallbacks(output=out.append))  # fmt: skip
    assert "replayed" not in drill.meta and drill.meta["worker"]["pid"] == ncu.pid
    assert drill.report["status"] == "ok" and "measured" not in out  # a repeat: not shown
    # once per session: a later nsys cell does not start another
    _run(manager, tmp_path, "print(base)")
    _join(manager)
    assert len([s for s in manager.status() if s.tool == "ncu"]) == 1


def test_the_first_nsys_cell_in_a_live_worker_starts_the_ncu_worker_while_it_runs(
    manager, tmp_path
) -> None:
    """A Run All with the nsys worker up (``%load_ext`` started it): the ncu worker a
    drill-down would use starts while the first nsys cell runs, not after it (the first
    drill-down waited 7.4-8.2 s for it beside a 34 GB state), imports what the notebook
    imported, and receives the cell's names once it ended; one ncu worker in all."""
    manager.start_worker("nsys")
    _join(manager)
    manager.follow_imports("import colorsys\n")  # a module nothing imports by itself
    _join(manager)
    flag = tmp_path / "ncu_started"

    def watch() -> None:  # the cell waits until an ncu worker is alive beside it
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not flag.exists():
            if any(s.tool == "ncu" and s.alive for s in manager.status()):
                flag.write_text("")
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    # bounded: without the early start the flag comes only after the cell, which says so
    cell = (f"import os, sys, time\nprint('colorsys' in sys.modules)\nt0 = time.time()\n"
            f"while not os.path.exists({str(flag)!r}) and time.time() - t0 < 60:\n"
            f"    time.sleep(0.02)\nprint('ncu alive during the cell', "
            f"os.path.exists({str(flag)!r}))\ny = 6 * 7\nprint('measured')\n")  # fmt: skip
    ns: dict = {"__name__": "__main__"}
    run, out = _run(manager, tmp_path, cell, ns=ns)
    watcher.join(60)
    _join(manager)
    assert "ncu alive during the cell True" in out and out[-1] == "measured" and ns["y"] == 42
    ncu = [s for s in manager.status() if s.tool == "ncu"]
    assert len(ncu) == 1 and ncu[0].alive and ncu[0].cells == 0
    out2: list[str] = []
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    drill = manager.profile(request, BareBackend("ncu"),
                            rerun=Rerun(before=run.meta["history_id"]),
                            notebook=Notebook(user_ns=ns),
                            callbacks=RunCallbacks(output=out2.append))  # fmt: skip
    # the drill-down ran in the ncu worker started early; its prints repeat the notebook's
    # run and are not shown (so this test reads the import ahead only in the nsys worker's
    # own run: colorsys was there before any cell of the notebook's)
    assert drill.meta["worker"]["pid"] == ncu[0].pid and drill.report["status"] == "ok"
    assert not any("measured" in line for line in out2)
    assert out[0] == "True"


def test_the_first_nsys_cell_that_starts_its_worker_starts_no_ncu_worker_beside_it(
    manager, tmp_path
) -> None:
    """Two starts at once slow the one the cell waits for: with no nsys worker up, the ncu
    worker waits for the first result (``prewarm_drill_down``), as before."""
    cell = "import time\ntime.sleep(0.5)\nprint('measured')\n"
    starts: list[str] = []
    real = manager.workers.session_for

    def session_for(backend, ctx, replace="", stops=None, **kw):  # type: ignore[no-untyped-def]
        starts.append(backend.tool)
        return real(backend, ctx, replace, stops, **kw)

    manager.workers.session_for = session_for  # type: ignore[method-assign]
    _run(manager, tmp_path, cell)
    _join(manager)
    assert starts[0] == "nsys" and starts[1:] == ["ncu"]  # the ncu one after the cell
    assert len([s for s in manager.status() if s.tool == "ncu"]) == 1


class _HostBare(BareBackend):
    """The bare worker of ``%%nsys --host``: another launch key in the nsys slot."""

    def launch_key(self, request: CellRequest) -> tuple[object, ...]:
        return ("host", *super().launch_key(request))


def test_the_first_nsys_cell_starts_the_host_worker_beside_it_ready_for_a_first_host_cell(
    manager, tmp_path
) -> None:
    """nsys fixes ``--host``'s tracing at launch: its first cell needed a worker of its own,
    which imported transformers as it received the notebook's names (11-19 s on the GPU). It
    now starts beside the first nsys cell, imports what the notebook imported, and is the
    worker of the first ``--host`` cell, which says nothing of its start."""
    manager.prewarm_backends["host"] = _HostBare
    manager.start_worker("nsys")
    _join(manager)
    manager.follow_imports("import colorsys\n")  # a module nothing imports by itself
    _join(manager)
    plain_pid = _status(manager, "nsys").pid
    starts: list[object] = []
    real = manager.workers.session_for

    def session_for(backend, ctx, replace="", stops=None, **kw):  # type: ignore[no-untyped-def]
        session = real(backend, ctx, replace, stops, **kw)
        starts.append(session.key[:2])
        return session

    manager.workers.session_for = session_for  # type: ignore[method-assign]
    run, out = _run(manager, tmp_path, "y = 6 * 7\nprint('measured')\n")
    _join(manager)
    assert out[-1] == "measured" and run.meta["worker"]["pid"] == plain_pid
    # the ncu worker's start and imports first: a first drill-down is likelier
    ncu, host = ("bare", "ncu"), ("host", "bare")
    assert starts.index(host) > starts.index(ncu) and starts.count(host) == 1
    nsys = [s for s in manager.status() if s.tool == "nsys"]
    assert len(nsys) == 2 and all(s.alive for s in nsys)
    (standby,) = [s for s in nsys if s.pid != plain_pid]
    assert standby.cells == 0
    out2: list[str] = []
    request = CellRequest(cell="import sys\nprint('colorsys' in sys.modules)\n",
                          runs_root=tmp_path / "runs", cwd=str(tmp_path))  # fmt: skip
    host = manager.profile(request, _HostBare(), notebook=Notebook(user_ns={}),
                           callbacks=RunCallbacks(output=out2.append))  # fmt: skip
    assert host.meta["worker"]["pid"] == standby.pid
    assert out2 == ["True"]  # imported before the cell; no word of a start


def test_a_standby_worker_is_the_first_a_third_launch_option_ends(manager, tmp_path) -> None:
    """The standby counts as the least recently used of its tool from its start."""
    manager.prewarm_backends["host"] = _HostBare
    manager.start_worker("nsys")
    _join(manager)
    plain_pid = _status(manager, "nsys").pid
    _run(manager, tmp_path, "y = 1\n")
    _join(manager)
    standby = [s.pid for s in manager.status() if s.tool == "nsys" and s.pid != plain_pid]
    assert len(standby) == 1
    manager.prewarm_backends.pop("host")
    _run(manager, tmp_path, "z = 1\n", env={"NSM_OPTION": "other"})
    alive_pids = {s.pid for s in manager.status() if s.tool == "nsys" and s.alive}
    assert plain_pid in alive_pids and standby[0] not in alive_pids


def test_no_host_worker_starts_when_the_first_cell_started_a_worker_of_its_own_options(
    manager, tmp_path
) -> None:
    """The first nsys cell has other launch options: its worker is the second one, and a
    standby as a third would stop the plain worker ``%load_ext`` started."""
    manager.prewarm_backends["host"] = _HostBare
    manager.start_worker("nsys")
    _join(manager)
    plain_pid = _status(manager, "nsys").pid
    _, out = _run(manager, tmp_path, "print('measured')\n", env={"NSM_OPTION": "other"})
    _join(manager)
    assert out[-1] == "measured"
    nsys = [s for s in manager.status() if s.tool == "nsys" and s.alive]
    assert len(nsys) == 2 and plain_pid in {s.pid for s in nsys}


def test_no_host_worker_starts_beside_a_first_host_cell(manager, tmp_path) -> None:
    """A first nsys cell that is itself ``--host`` starts no standby of its own kind."""
    manager.prewarm_backends["host"] = _HostBare
    manager.start_worker("nsys")
    _join(manager)
    out: list[str] = []
    request = CellRequest(cell="print('measured')\n", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    manager.profile(request, _HostBare(), notebook=Notebook(user_ns={}),
                    callbacks=RunCallbacks(output=out.append))  # fmt: skip
    _join(manager)
    assert out[-1] == "measured"
    assert len([s for s in manager.status() if s.tool == "nsys" and s.alive]) == 2


def test_a_setup_cell_reaches_the_worker_in_use_whatever_its_options(manager, tmp_path) -> None:
    _run(manager, tmp_path, "x = 1", env={"NSM_OPTION": "other"})
    _join(manager)
    pid = _status(manager, "nsys").pid
    ns: dict = {}
    assert _notebook_setup(manager, ns, "late", "late = 5")
    _join(manager)
    status = _status(manager, "nsys")  # no second worker for the default options
    assert status.pid == pid and "late" in status.shared_names


def test_an_nsys_cell_waits_while_the_ncu_worker_replays_and_says_so(manager, tmp_path) -> None:
    flag = tmp_path / "replayed"
    # the setup waits for the flag only in the ncu worker (its replay); nsys ran it at once
    setup = (f"import os, time\nwhile os.environ.get('NSM_SLOT') == 'ncu' and not "
             f"os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\nbase = 1\n")  # fmt: skip
    manager.record_setup(setup, "base", prepare_cell(setup))
    manager.prewarm_backends["ncu"] = lambda: _SlotBackend("ncu")
    _run(manager, tmp_path, "y = base")
    nsys = manager.workers.sessions_of("nsys")[0]
    for _ in range(600):  # until the ncu worker is up and replaying (it holds the nsys one)
        if nsys.busy:
            break
        time.sleep(0.05)
    assert nsys.busy.startswith("the ncu worker replays ahead of time")
    phases: list[str] = []
    done = threading.Event()

    def nsys_cell() -> None:
        request = CellRequest(cell="print(base)", runs_root=tmp_path / "runs", cwd=str(tmp_path))
        manager.profile(request, BareBackend(), callbacks=RunCallbacks(
            progress=lambda p: phases.append(p.describe())))  # fmt: skip
        done.set()

    thread = threading.Thread(target=nsys_cell)
    thread.start()
    try:
        assert not done.wait(1.0)  # held while the ncu worker replays
    finally:
        flag.write_text("")
    thread.join(60)
    _join(manager)
    assert done.is_set()
    assert any("waiting - the ncu worker replays ahead of time" in p for p in phases)
    assert _status(manager, "ncu").prewarmed == ["base"]


def test_cells_run_back_to_back_are_not_held_by_the_ncu_prewarm(manager, tmp_path) -> None:
    """A Run All goes from cell to cell with no pause: the ncu worker's replay (which holds the
    nsys worker) waits for the notebook to be idle, so those cells never wait for it (on the
    H100 the next cell waited 12.3 s); once the notebook pauses, the replay runs."""
    manager.record_setup("base = 10", "base", prepare_cell("base = 10"))
    _run(manager, tmp_path, "y = base + 1")
    phases: list[str] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:  # cells back to back for longer than the ncu start
        request = CellRequest(cell="print(base)", runs_root=tmp_path / "runs", cwd=str(tmp_path))
        manager.profile(request, BareBackend(), callbacks=RunCallbacks(
            progress=lambda p: phases.append(p.describe())))  # fmt: skip
    assert not [p for p in phases if "waiting" in p]
    ncu = [s for s in manager.status() if s.tool == "ncu"]
    assert not ncu or ncu[0].prewarmed == []  # started, maybe, but not replaying yet
    _join(manager)  # the notebook is idle now: the replay runs
    assert _status(manager, "ncu").prewarmed == ["base"]


class _HostBackend(BareBackend):
    """Other launch options (as ``%%nsys --host``'s): its own worker."""

    def launch_key(self, request: CellRequest) -> tuple:
        return (*super().launch_key(request), "host")


def test_a_worker_started_by_hand_for_other_options_gets_the_setup_beside_the_default_one(
    manager, tmp_path
) -> None:
    """``%nsight_session start nsys`` and ``start nsys --host`` before the setup cell: both
    workers receive the setup's names, so the first --host cell starts nothing."""
    manager.start_worker("nsys")
    manager.start_worker("nsys", _HostBackend())
    _join(manager)
    ns: dict = {}
    assert _notebook_setup(manager, ns, "base", "base = 41\n")
    _join(manager)
    nsys = [s for s in manager.status() if s.tool == "nsys"]
    assert len(nsys) == 2 and all("base" in s.shared_names for s in nsys)
    out: list[str] = []
    request = CellRequest(cell="print(base + 1)", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, _HostBackend(), notebook=Notebook(user_ns=ns),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    assert result.meta["worker"]["pid"] in {s.pid for s in nsys} and out[-1] == "42"
    assert "worker_start_s" not in result.meta["timings"] or (
        result.meta["timings"]["worker_start_s"] < 1.0
    )
    assert not result.meta["shared_vars"].get("sent_names")  # it had them already


class _SlotBackend(BareBackend):
    """A bare worker that knows which slot it fills (NSM_SLOT), so a cell can tell them apart."""

    def process_env(self, request: CellRequest) -> dict[str, str]:
        return {**super().process_env(request), "NSM_SLOT": self.tool}


BUSY_NOTEBOOK = r"""
import sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from session_support import BareBackend
from nsight_magic.script import prepare_cell
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.runs.prewarm import Imports
m = SessionManager()
m.prewarm, m.prewarm_backends = True, {"nsys": BareBackend, "ncu": BareBackend}
# a setup cell that never ran in the notebook: the prewarmed worker replays it (forever)
busy = "import time\nwhile True:\n    time.sleep(0.02)\n"
m.record_setup(busy, "busy", prepare_cell(busy))
m.start_worker("nsys")
while not m.workers.sessions_of():
    time.sleep(0.05)
print("worker", m.workers.sessions_of()[0].worker.pid, flush=True)
time.sleep(120)
"""


def test_a_dead_notebook_leaves_no_worker_busy_in_a_prewarm(tmp_path: Path) -> None:
    """The worker is inside a replay (not waiting for a request) when the notebook dies: its
    watchdog still ends it (its output pipe is broken by then: writing to it must not stop
    the watchdog)."""
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-c", BUSY_NOTEBOOK, str(root), str(root / "tests")]
    notebook = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        line = notebook.stdout.readline() if notebook.stdout else ""
        pid = int(line.split()[1])
        time.sleep(1.0)  # inside the replay loop now
        assert alive(pid)
    finally:
        notebook.kill()
        notebook.wait(10)
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.1)
    left = alive(pid)
    if left:  # never leave it behind, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_a_stop_before_a_prewarm_starts_its_worker_ends_that_worker(manager) -> None:
    go = threading.Event()
    started: list[int] = []

    class Slow(BareBackend):
        def locate(self):  # type: ignore[no-untyped-def]
            go.wait(30)  # the prewarm is decided; its worker not started yet
            return super().locate()

        def after_start(self, tool, state, worker):  # type: ignore[no-untyped-def]
            started.append(worker.pid)

    manager.prewarm_backends["nsys"] = Slow
    thread = manager.start_worker("nsys")
    manager.stop()  # %nsight_session stop (or a test's reset) meanwhile
    go.set()
    thread.join(60)
    assert manager.status() == []
    assert len(started) == 1 and not alive(started[0])


def test_a_setup_cell_asks_the_nsys_worker_to_start_before_the_ncu_worker(manager) -> None:
    """A Run All's first profiled cell is usually %%nsys: its worker is launched first, the ncu
    one once it is up (two launches at once slowed the one the next cell waits for). The nsys
    side's locate is held until the ncu worker is launched, for a while: before, the ncu worker
    was launched meanwhile."""
    events: list[tuple[str, str]] = []
    ncu_launched = threading.Event()

    class Ordered(BareBackend):
        def locate(self):  # type: ignore[no-untyped-def]
            if self.tool == "nsys":
                ncu_launched.wait(3.0)
            return super().locate()

        def launch(self, tool, request, state):  # type: ignore[no-untyped-def]
            events.append(("launch", self.tool))
            if self.tool == "ncu":
                ncu_launched.set()
            return super().launch(tool, request, state)

        def after_start(self, tool, state, worker):  # type: ignore[no-untyped-def]
            events.append(("up", self.tool))

    manager.prewarm_backends = {"nsys": Ordered, "ncu": lambda: Ordered("ncu")}
    assert _notebook_setup(manager, {}, "base", "base = 1\n")
    _join(manager)
    assert events.index(("up", "nsys")) < events.index(("launch", "ncu")), events
    assert {s.tool for s in manager.status() if s.alive} == {"nsys", "ncu"}


LAZY_INIT = """
def __getattr__(name):  # as transformers: the model's module is imported on first access
    if name == "Model":
        from .modeling import Model
        return Model
    raise AttributeError(name)
"""
LAZY_MODELING = """
import os
if os.environ.get("NSM_TEST_WORKER"):
    with open(os.environ["NSM_TEST_WORKER"], "a") as f:
        f.write("imported\\n")
class Model:
    value = 42
"""


def test_a_setup_cells_from_import_is_resolved_while_the_notebook_runs_it(
    manager, tmp_path, monkeypatch
) -> None:
    """``from transformers import Qwen2ForCausalLM`` imports only ``transformers`` (lazy): the
    model's module came in the worker's receive, after the setup cell ended, while the next
    cell waited. The ``imports`` request now asks for the names too, so the worker imports
    that module while the notebook still runs the cell (its run here waits until it has)."""
    (tmp_path / "lazy_pkg").mkdir()
    (tmp_path / "lazy_pkg" / "__init__.py").write_text(LAZY_INIT)
    (tmp_path / "lazy_pkg" / "modeling.py").write_text(LAZY_MODELING)
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "worker_imports"

    class Lazy(BareBackend):
        def process_env(self, request: CellRequest) -> dict[str, str]:
            return {**super().process_env(request), "PYTHONPATH": str(tmp_path),
                    "NSM_TEST_WORKER": str(marker)}  # fmt: skip

    manager.prewarm_backends = {"nsys": Lazy, "ncu": lambda: Lazy("ncu")}
    ns: dict = {}
    setup = "from lazy_pkg import Model\nmodel = Model()\n"
    seen: list[bool] = []

    def notebook_run() -> bool:  # until both workers imported the model's module, at most 30 s
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if marker.exists() and len(marker.read_text().splitlines()) == 2:
                break
            time.sleep(0.05)
        seen.append(marker.exists() and len(marker.read_text().splitlines()) == 2)
        exec(setup, ns)
        return True

    assert _notebook_setup(manager, ns, "model", setup, notebook_run)
    _join(manager)
    assert seen == [True]  # both imported it during the setup cell, not in the receive after
    out: list[str] = []
    request = CellRequest(cell="print(model.value)", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    manager.profile(request, Lazy(), notebook=Notebook(user_ns=ns),
                    callbacks=RunCallbacks(output=out.append))  # fmt: skip
    assert out[-1] == "42" and len(marker.read_text().splitlines()) == 2  # no second import


# a --worker-only setup cell with room on the "GPU" for one copy: the first worker to replay it
# builds ``weights``, a second raises as CUDA's allocator would (the folder counts the copies)
ONE_COPY = """
import os
if os.listdir({room!r}):
    raise MemoryError("CUDA out of memory (stand-in: the first worker holds the only copy)")
open(os.path.join({room!r}, str(os.getpid())), "w").close()
weights = [1.0, 2.0]
"""


def test_a_worker_only_setup_that_raised_in_the_ncu_worker_is_named_by_the_drill_down(
    manager, tmp_path
) -> None:
    """``%%nsight_setup --worker-only``, a ``%%nsys`` cell on its names, then a drill-down
    from code (``run.profile_kernel(...)``: no output callback). The ncu worker, prewarmed
    after the nsys result, replayed the setup and it raised there (out of memory: the second
    copy); the drill-down then failed with a bare NameError in 1.4 s, the reason left in notes
    nobody printed (issue 42 item 2). Its error now names the setup cell, what it raised in
    which worker, and the fix."""
    room = tmp_path / "gpu"
    room.mkdir()
    ns: dict = {}
    manager.notebook = Notebook(user_ns=ns)
    setup = prepare_cell(ONE_COPY.format(room=str(room)))
    assert manager.run_setup("model", setup, lambda: True, in_notebook=False)
    first, out = _run(manager, tmp_path, "print('sum', sum(weights))", ns=ns)
    # the setup was replayed in the nsys worker by this cell or by its prewarm just before
    replayed_here = first.meta.get("replayed") == ["model"]
    assert "sum 3.0" in out and (replayed_here or _status(manager, "nsys").prewarmed == ["model"])
    _join(manager)  # the ncu worker's prewarm replayed it, and it raised there
    assert _status(manager, "ncu").prewarmed == ["model"]
    request = CellRequest(cell="print('sum', sum(weights))", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    with pytest.raises(CellFailedError) as info:
        manager.profile(request, BareBackend("ncu"), notebook=Notebook(user_ns=ns),
                        rerun=Rerun(before=first.meta["history_id"]),
                        callbacks=RunCallbacks())  # fmt: skip
    message = str(info.value).splitlines()[0]
    assert message.startswith("The profiled cell raised NameError: name 'weights' is not defined")
    assert "setup cell 'model', which defines it, raised MemoryError: CUDA out of memory" in message
    assert (
        "when the ncu worker replayed it (a --worker-only setup cell runs in each worker" in message
    )
    assert "Fix: free GPU memory" in message and "%nsight_session restart ncu" in message


# a module that says in which process it was imported (the worker's, by NSM_TEST_WORKER)
MARKED = """
import os
if os.environ.get("NSM_TEST_WORKER"):
    with open(os.environ["NSM_TEST_WORKER"], "a") as f:
        f.write(__name__ + "\\n")
"""


def _marked_modules(tmp_path: Path, monkeypatch, *names: str):
    """Modules ``names`` that write their name to a marker file when a worker imports them, and
    the backend whose workers see them; returns (backend class, marker): the nsys workers'
    marker (an ncu worker's is ``_imported(marker, "ncu")``)."""
    for name in names:
        (tmp_path / f"{name}.py").write_text(MARKED)
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "worker_imports"

    class Marked(BareBackend):
        def process_env(self, request: CellRequest) -> dict[str, str]:
            own = marker if self.tool == "nsys" else marker.with_name(f"{marker.name}_{self.tool}")
            return {**super().process_env(request), "PYTHONPATH": str(tmp_path),
                    "NSM_TEST_WORKER": str(own)}  # fmt: skip

    return Marked, marker


def _imported(marker: Path, tool: str = "nsys") -> list[str]:
    """What the workers of ``tool`` imported of the marked modules, in order."""
    own = marker if tool == "nsys" else marker.with_name(f"{marker.name}_{tool}")
    return own.read_text().splitlines() if own.exists() else []


def test_load_ext_starts_the_nsys_worker_which_imports_what_earlier_cells_imported(
    manager, tmp_path, monkeypatch
) -> None:
    """Issue 42, item 4: the first cell after a short setup cell waited for its worker's
    imports (torch + transformers under nsys launch outlasted the setup cell). At ``%load_ext``
    the nsys worker now starts, before any setup cell, and imports what the notebook's earlier
    cells imported; then, once it has, the ncu worker of a first drill-down (issue 41 item 5:
    started by the first nsys cell, the drill-down of a Run All waited 3.4-7.2 s for it); the
    setup cell's workers are those two (no second start)."""
    Marked, marker = _marked_modules(tmp_path, monkeypatch, "early_mod", "lazy_from")
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    manager.start_at_load(["import early_mod\n", "from lazy_from import os\n", "x = ("],
                          torch=False)  # fmt: skip
    _join(manager)
    (nsys,) = manager.workers.sessions_of("nsys")
    (ncu,) = manager.workers.sessions_of("ncu")
    assert nsys.alive() and ncu.alive() and ncu.cells == 0
    assert _imported(marker) == _imported(marker, "ncu") == ["early_mod", "lazy_from"]
    pids = {"nsys": nsys.worker.pid, "ncu": ncu.worker.pid}
    ns: dict = {}
    assert _notebook_setup(manager, ns, "v", "import early_mod\nv = 41\n")
    _join(manager)
    assert {t: [s.worker.pid for s in manager.workers.sessions_of(t)] for t in pids} == {
        t: [pid] for t, pid in pids.items()}  # fmt: skip
    result, out = _run(manager, tmp_path, "print(v + 1)", ns=ns)
    assert out[-1] == "42" and result.meta["timings"].get("worker_start_s", 0) < 30
    _join(manager)  # the first nsys cell starts no second ncu worker
    assert [s.worker.pid for s in manager.workers.sessions_of("ncu")] == [pids["ncu"]]
    assert _imported(marker) == _imported(marker, "ncu") == ["early_mod", "lazy_from"]


def test_an_import_told_while_the_ncu_worker_starts_at_load_reaches_it(
    manager, tmp_path, monkeypatch
) -> None:
    """The ncu worker %load_ext starts is not live while it starts, so the live workers' import
    of a setup cell's modules passes it by: it imports what the notebook was told of once it
    is up, not what it was at ``%load_ext``."""
    Marked, marker = _marked_modules(tmp_path, monkeypatch, "told_late")
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    manager.start_at_load([], torch=False)
    manager.follow_imports("import told_late\n")  # the setup cell starts meanwhile
    _join(manager)
    assert len(manager.workers.sessions_of("ncu")) == 1
    assert _imported(marker) == _imported(marker, "ncu") == ["told_late"]


def test_a_cells_imports_are_followed_by_the_live_workers_once(
    manager, tmp_path, monkeypatch
) -> None:
    """After each cell the live workers import what it imported, in the background; a module
    they were told of is not asked again; with no worker alive nothing starts."""
    Marked, marker = _marked_modules(tmp_path, monkeypatch, "later_mod")
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    manager.follow_imports("import later_mod\n")  # no worker yet: none is started for it
    _join(manager)
    assert manager.workers.sessions_of() == [] and _imported(marker) == []
    manager.start_at_load([], torch=False)
    _join(manager)
    manager.follow_imports("import later_mod\nimport later_mod as again\n")
    manager.follow_imports("from later_mod import os\n")  # told already: not asked again
    _join(manager)
    assert len(manager.workers.sessions_of()) == 2  # nsys and ncu, started at load
    assert _imported(marker) == _imported(marker, "ncu") == ["later_mod"]  # once in each
    manager.prewarm = False  # %config NsightMagic.prewarm = False: nothing followed
    manager.follow_imports("import json\n")
    assert ("json", "") not in manager._imported


def test_the_magic_follows_a_cells_imports_as_it_starts(manager, tmp_path, monkeypatch) -> None:
    """The extension's pre_run_cell hook, on a real IPython shell: a cell's imports (as IPython
    transformed it) reach the live worker while the notebook imports them too, whatever the
    cell does after; unload removes the hook."""
    from IPython.core.interactiveshell import InteractiveShell

    from nsight_magic.magic import follow

    Marked, marker = _marked_modules(tmp_path, monkeypatch, "shell_mod", "then_fails")
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    monkeypatch.setattr(follow, "MANAGER", manager)
    monkeypatch.setattr(follow, "_has_torch", lambda: False)  # no torch import in the test
    shell = InteractiveShell.instance()
    shell.run_cell("import shell_mod as first  # before the extension", store_history=True)
    follow.start(shell)
    try:
        _join(manager)
        assert _imported(marker) == ["shell_mod"]  # an earlier cell's import, at load
        assert shell.run_cell("import then_fails\n1/0").error_in_exec is not None
        shell.run_cell("%time x = 1")  # IPython's own magic: nothing to import
        _join(manager)
        assert _imported(marker) == ["shell_mod", "then_fails"]
    finally:
        follow.stop(shell)
    assert follow._cell_starts not in shell.events.callbacks["pre_run_cell"]


# a lazy package (as transformers is): its model module is imported on first access
LAZY_FOLLOW_INIT = (
    MARKED
    + """
def __getattr__(name):
    if name == "Model":
        from .models import Model
        return Model
    raise AttributeError(name)
"""
)


def _lazy_package(tmp_path: Path) -> None:
    pkg = tmp_path / "lazy_follow_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(LAZY_FOLLOW_INIT)
    (pkg / "models.py").write_text(MARKED + "\nclass Model:\n    pass\n")
    (pkg / "_internal.py").write_text(MARKED)


def test_a_name_looked_up_later_in_a_package_imported_earlier_is_followed(
    manager, tmp_path, monkeypatch
) -> None:
    """Issue 41, item 5: ``import transformers`` in one cell, ``from transformers import
    LlamaForCausalLM`` in a later one: the later lookup was dropped (the package was told
    already), so the worker's receive imported the model's module, and with it accelerate, PIL
    and scipy: 6 s of the first profiled cell at scale (H100). Each name looked up is told once."""
    Marked, marker = _marked_modules(tmp_path, monkeypatch)
    _lazy_package(tmp_path)
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    manager.start_at_load(["import lazy_follow_pkg\n"], torch=False)
    _join(manager)
    assert _imported(marker) == ["lazy_follow_pkg"]
    manager.follow_imports("from lazy_follow_pkg import Model\n")
    _join(manager)
    assert _imported(marker) == ["lazy_follow_pkg", "lazy_follow_pkg.models"]
    told = len(manager.background)
    manager.follow_imports("from lazy_follow_pkg import Model as again\nimport lazy_follow_pkg\n")
    assert len(manager.background) == told  # nothing new to tell: no request


def test_what_a_cell_imported_that_its_text_does_not_show_is_followed_as_it_ends(
    manager, tmp_path, monkeypatch
) -> None:
    """A lazy package's module imported by an attribute access (``transformers.AutoModel``,
    a forward that imports its loss module) shows in no import statement: the extension's
    post_run_cell hook sees the notebook's ``sys.modules`` grow and the live workers import the
    new public modules of packages the cells imported; not the package's private ones, not
    other packages' (the extension's own views)."""
    from IPython.core.interactiveshell import InteractiveShell

    from nsight_magic.magic import follow

    Marked, marker = _marked_modules(tmp_path, monkeypatch)
    _lazy_package(tmp_path)
    (tmp_path / "unrelated_mod.py").write_text(MARKED)
    manager.prewarm_backends = {"nsys": Marked, "ncu": lambda: Marked("ncu")}
    monkeypatch.setattr(follow, "MANAGER", manager)
    monkeypatch.setattr(follow, "_has_torch", lambda: False)
    shell = InteractiveShell.instance()
    follow.start(shell)
    try:
        shell.run_cell(
            "import lazy_follow_pkg\nm = lazy_follow_pkg.Model\n"
            "__import__('lazy_follow_pkg._internal')"
        )
        shell.run_cell("__import__('unrelated_mod')")  # no import statement, another package
        _join(manager)
        assert _imported(marker) == ["lazy_follow_pkg", "lazy_follow_pkg.models"]
    finally:
        follow.stop(shell)
        for name in (
            "lazy_follow_pkg",
            "lazy_follow_pkg.models",
            "lazy_follow_pkg._internal",
            "unrelated_mod",
        ):
            sys.modules.pop(name, None)
    assert follow._cell_ends not in shell.events.callbacks["post_run_cell"]


def test_what_the_workers_were_told_rebuilds_the_imports_a_new_worker_makes_torch_first() -> None:
    """A worker started later imports what the others were told (``Imports.of_told``, the
    inverse of ``told``): each module once, torch first (the other modules' objects need it),
    and each name a ``from X import A`` looked up."""
    told = {("transformers", ""), ("transformers", "LlamaForCausalLM"), ("torch", ""),
            ("accelerate", ""), ("transformers", "LlamaConfig")}  # fmt: skip
    imports = Imports.of_told(told, first="torch")
    assert imports.modules == ("torch", "accelerate", "transformers")
    assert imports.attributes == {"transformers": ["LlamaConfig", "LlamaForCausalLM"]}
    assert imports.told() == told
    assert Imports.of_told(set()) == Imports()
