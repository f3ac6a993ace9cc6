"""The warm session for real on the CPU: the worker process (no profiler), the manager and the
pipeline. State persists between cells, IPython syntax runs, notebook variables are shipped (or
named with the fix), and interrupts, timeouts, crashes and a dead notebook leave no orphan."""

from __future__ import annotations

import base64
import dataclasses
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
from session_support import BareBackend, gloo_retry

from nsight_magic.errors import (
    CellFailedError,
    CellSyntaxError,
    MissingVariableError,
    ProfileInterrupted,
    ProfileTimeout,
    WorkerDiedError,
)
from nsight_magic.processes import runner
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.run_folders.run_meta import SCHEMA_VERSION
from nsight_magic.script import display_frames, prepare_cell
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks
from nsight_magic.session.status import format_status
from nsight_magic.session.workers.pool import SessionStatus
from nsight_magic.worker import process as worker_process


@pytest.fixture
def run(manager: SessionManager, tmp_path: Path):
    """run(cell, **request fields) -> (result, output lines) in the bare nsys-slot worker; one
    notebook namespace for the test (what a cell binds comes back to it) unless ``ns``."""
    notebook_ns: dict = {}  # type: ignore[type-arg]

    def _run(cell: str, *, backend=None, ns=None, max_bytes=1 << 20, cancel=None,
             auto_vars=True, **kw):  # fmt: skip
        out: list[str] = []
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        result = manager.profile(
            request,
            backend or BareBackend(),
            notebook=Notebook(
                user_ns=notebook_ns if ns is None else ns,
                auto_vars_max_bytes=max_bytes,
                auto_vars=auto_vars,
            ),
            callbacks=RunCallbacks(output=out.append, cancel=cancel),
        )
        return result, out

    return _run


def _pid(manager: SessionManager, tool: str = "nsys") -> int:
    (status,) = [s for s in manager.status() if s.tool == tool]
    assert status.pid is not None
    return status.pid


def test_state_persists_between_cells_in_one_worker(run, manager) -> None:
    first, _ = run("x = 41\nimport math")
    pid = _pid(manager)
    second, out = run("y = x + 1\nprint('y is', y, math.sqrt(16))")
    assert second.report["status"] == "ok" and "y is 42 4.0" in out
    assert _pid(manager) == pid == first.meta["worker"]["pid"] == second.meta["worker"]["pid"]
    assert second.meta["mode"] == "warm" and second.meta["worker"]["cells_before"] == 1
    # the run folder has the standalone script: it replays the first cell, then this one
    script = (second.run_dir / "script.py").read_text()
    assert "x = 41" in script and "y = x + 1" in script
    done = subprocess.run([sys.executable, str(second.run_dir / "script.py"),
                           str(second.run_dir / "again.json")], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and "y is 42 4.0" in done.stdout
    # meta.json is RunMeta's current version, and run.meta its dict view
    saved = RunDir(second.run_dir).read_meta()
    assert saved.schema_version == SCHEMA_VERSION and saved.to_dict() == second.meta
    assert saved.mode == "warm" and saved.status == "ok" and "total_s" in saved.timings


def test_every_line_a_cell_prints_is_shown_before_its_result(run, manager) -> None:
    """The output comes by a pipe and the reply by the socket: the reply waits for the mark the
    worker writes after the output, so nothing printed last is lost (nor is the mark shown),
    including a last line with no newline and output written to fd 1 behind sys.stdout."""
    cell = """
    import os, sys
    for i in range(3000):
        print("line", i)
    os.write(1, b"from fd 1\\n")
    sys.stdout.write("no newline at the end")
    """
    for _ in range(3):
        result, out = run(cell)
        assert result.report["status"] == "ok"
        assert [ln for ln in out if ln.startswith("line ")] == [f"line {i}" for i in range(3000)]
        assert "from fd 1" in out and "no newline at the end" in out
        assert not any("nsight_magic-reply" in ln or "\x00" in ln for ln in out)
    (session,) = manager.workers.sessions_of("nsys")
    assert not session.worker._marks_lost  # every reply found its mark: none was waited out


def _profiled(manager, tmp_path, cell: str, callbacks: RunCallbacks):
    """``cell`` profiled in the bare nsys-slot worker, these callbacks, a notebook of its own."""
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    return manager.profile(request, BareBackend(), notebook=Notebook(user_ns={}),
                           callbacks=callbacks)  # fmt: skip


def test_a_cells_displays_come_as_the_notebook_shows_them(manager, tmp_path) -> None:
    """``display(df)`` in a profiled cell: every format IPython made of it (HTML, an image's
    bytes as base64, as a notebook file keeps them) reaches the notebook's display, in its
    place among the printed lines; without a display, its text comes as a line."""
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    cell = textwrap.dedent(f"""
        from IPython.display import HTML, Image
        print("before", end="")
        display(HTML("<b>bold</b>"))
        display(Image(data={png!r}, format="png"))
        print("after")
    """)
    seen: list[tuple[str, object]] = []
    callbacks = RunCallbacks(text=lambda t: seen.append(("text", t)),
                             display=lambda d: seen.append(("display", d)))  # fmt: skip
    result = _profiled(manager, tmp_path, cell, callbacks)
    assert result.report["status"] == "ok"
    kinds = [kind for kind, _ in seen]
    assert kinds == ["text", "display", "display", "text"], seen
    assert seen[0][1] == "before" and seen[3][1] == "after\n"
    html, image = seen[1][1], seen[2][1]
    assert isinstance(html, dict) and html["data"]["text/html"] == "<b>bold</b>"
    assert isinstance(image, dict) and base64.b64decode(image["data"]["image/png"]) == png
    # a live plot's loop: clear_output(wait=True) reaches the notebook's display too
    seen.clear()
    _profiled(
        manager,
        tmp_path,
        "from IPython.display import clear_output\nclear_output(wait=True)",
        callbacks,
    )
    assert [d for kind, d in seen if kind == "display"] == [
        {"data": {}, "metadata": {}, "transient": {}, "update": False, "clear": True}
    ]
    # a run with no display (a sweep's lines, a test): the display's text as a line
    lines: list[str] = []
    _profiled(manager, tmp_path, "display(HTML('<i>x</i>'))", RunCallbacks(output=lines.append))
    assert lines == ["<IPython.core.display.HTML object>"]


def test_what_a_cell_writes_to_stderr_comes_as_stderr_in_its_place(manager, tmp_path) -> None:
    """A warning, a bar redrawn by "\\r" and a log line go to the notebook's stderr (the
    worker's stderr shares its stdout's pipe), between the printed lines as written."""
    cell = textwrap.dedent("""
        import logging, sys, warnings
        print("one")
        warnings.warn("careful")
        sys.stderr.write("\\r 10%")
        sys.stderr.write("\\r100%\\n")
        logging.getLogger("nb").warning("logged")
        print("two")
    """)
    seen: list[tuple[str, str]] = []
    callbacks = RunCallbacks(text=lambda t: seen.append(("out", t)),
                             stderr=lambda t: seen.append(("err", t)))  # fmt: skip
    result = _profiled(manager, tmp_path, cell, callbacks)
    assert result.report["status"] == "ok"
    assert seen[0] == ("out", "one\n") and seen[-1] == ("out", "two\n"), seen
    errs = "".join(t for kind, t in seen if kind == "err")
    assert "UserWarning: careful" in errs and "\r 10%\r100%\n" in errs and "logged\n" in errs
    # the next cells: stderr wrapped once (each cell's script makes the class again), a lone
    # surrogate shown as the descriptor shows it, the original's buffer still there; a display
    # under redirect_stdout is the notebook's, not the redirect's
    again = textwrap.dedent("""
        import contextlib, io, sys
        print(getattr(sys.stderr.original, "nsight_magic_frames", False))
        sys.stderr.write("bad \\udcff\\n")
        sys.stderr.buffer.flush()
        with contextlib.redirect_stdout(io.StringIO()):
            display("shown")
    """)
    for _ in range(2):
        seen.clear()
        shown: list[dict] = []  # type: ignore[type-arg]
        result = _profiled(manager, tmp_path, again,
                           dataclasses.replace(callbacks, display=shown.append))  # fmt: skip
        assert result.report["status"] == "ok", result.report
        assert seen[0] == ("out", "False\n") and ("err", "bad \\udcff\n") in seen, seen
        assert [d["data"]["text/plain"] for d in shown] == ["'shown'"]
    # a worker's last lines in an error read as text, not frames
    (session,) = manager.workers.sessions_of("nsys")
    assert "logged" in session.worker.output_tail(30)
    assert "nsight_magic-stderr" not in session.worker.output_tail(30)


def test_a_display_frame_reads_back_and_a_widget_view_does_not_travel() -> None:
    frame = display_frames.display_frame({"text/plain": "t", "image/png": b"\x89PNG"},
                                         transient={"display_id": "d1"}, update=True)  # fmt: skip
    text, shown = display_frames.read_display("open line" + frame)
    assert text == "open line" and shown is not None
    assert shown["transient"] == {"display_id": "d1"} and shown["update"] is True
    assert base64.b64decode(shown["data"]["image/png"]) == b"\x89PNG"
    # a widget's model lives in the worker's kernel-less shell: its text instead
    widget = {"text/plain": "IntSlider()", display_frames.WIDGET_VIEW: {"model_id": "m"}}
    _, shown = display_frames.read_display(display_frames.display_frame(widget))
    assert shown is not None and shown["data"] == {"text/plain": "IntSlider()"}
    # a line that only looks like one is the cell's text
    broken = display_frames.DISPLAY_MARK + "{not json\x00\n"
    assert display_frames.read_display(broken) == (broken, None)


def test_ipython_syntax_runs_as_in_the_notebook(run) -> None:
    result, out = run("x = 3\n%time y = x * 2\n!echo from-a-shell\nassert y == 6\n")
    assert result.report["status"] == "ok", result.report
    assert "from-a-shell" in out and any("Wall time" in line for line in out)
    labels = prepare_cell("x = 3\n%time y = x * 2\n!echo from-a-shell\n").labels
    assert labels == ("L1: x = 3", "L2: %time y = x * 2", "L3: !echo from-a-shell")


def test_shell_commands_run_as_plain_subprocesses_not_on_a_terminal(run) -> None:
    """``!cmd`` and ``x = !cmd`` in a profiled cell: IPython's default runs them on a
    pseudo-terminal (pexpect, forkpty), and a command run that way under ncu's injection took
    the profiled process down with SIGSEGV (issue 41: ``!nvidia-smi -L`` before ``%%ncu``).
    The script runs them as plain subprocesses: the command's stdout is no terminal."""
    cell = (
        "!test -t 1 && echo on-a-tty || echo no-tty\n"
        "lines = !echo a; echo b 1>&2\n"
        "assert list(lines) == ['a', 'b'], lines\n"
        "!exit 3\n"
        "assert _exit_code == 3, _exit_code\n"
    )
    result, out = run(cell)
    assert result.report["status"] == "ok", result.report
    assert "no-tty" in out and "on-a-tty" not in out


def test_a_syntax_error_costs_nothing(run, manager, tmp_path) -> None:
    with pytest.raises(CellSyntaxError, match="line 2"):
        run("x = 1\ny = (")
    with pytest.raises(CellSyntaxError, match="empty"):
        run("   \n\t\n")
    assert manager.status() == [] and not (tmp_path / "runs").exists()


def test_notebook_variables_are_shipped_and_kept_current(run, manager) -> None:
    torch = pytest.importorskip("torch")
    ns = {"plain": 5, "t": torch.arange(4, dtype=torch.float16), "torch": torch}
    result, out = run("print('got', plain * 2, t.dtype == torch.float16, t.tolist())", ns=ns)
    assert result.report["status"] == "ok" and "got 10 True [0.0, 1.0, 2.0, 3.0]" in out
    assert result.meta["shipped_vars"] == ["plain", "t", "torch"]
    # unchanged values are not sent again; a changed one is
    again, _ = run("print(plain)", ns=ns)
    assert again.meta["shipped_vars"] == []
    ns["plain"] = 6
    changed, out = run("print('now', plain)", ns=ns)
    assert changed.meta["shipped_vars"] == ["plain"] and "now 6" in out
    # what a profiled cell binds comes back to the notebook, whose value then counts: a later
    # value there is the one the next cell sees (issue 41: the notebook holds the state)
    mine: dict = {}  # type: ignore[type-arg]
    run("own = 'worker'", ns=mine)
    assert mine["own"] == "worker"
    kept, out = run("print(own)", ns=mine)
    assert kept.meta["shipped_vars"] == [] and "worker" in out
    mine["own"] = "notebook"
    later, out = run("print(own)", ns=mine)
    assert later.meta["shipped_vars"] == ["own"] and "notebook" in out


def test_a_variable_too_large_to_ship_is_named_with_the_fix(run, tmp_path) -> None:
    ns = {"big": bytes(2 << 20), "small": 1}
    with pytest.raises(MissingVariableError) as info:
        run("n = len(big) + small", ns=ns, max_bytes=1 << 20)
    message = str(info.value)
    assert "big" in message and "auto_vars_max_bytes" in message and "--vars big" in message
    assert "%%nsight_setup" in message and info.value.names == ["big"]
    assert not list((tmp_path / "runs").glob("*")), "no run folder for a cell that never ran"
    # --vars sends it anyway
    result, out = run("print(len(big))", ns=ns, max_bytes=1 << 20, vars=("big",))
    assert result.report["status"] == "ok" and str(2 << 20) in out


def test_a_variable_that_cannot_be_pickled_is_not_sent_to_vars(run) -> None:
    """--vars sends by value: it cannot help a lock, so the fix does not suggest it."""
    with pytest.raises(MissingVariableError) as info:
        run("with lock:\n    pass", ns={"lock": threading.Lock()})
    message = str(info.value)
    assert "lock: " in message and "cannot be pickled" in message
    assert "--vars" not in message and "%%nsight_setup" in message


def test_the_packages_own_results_stay_home_without_a_word(run) -> None:
    """Every ``%%nsys -o r1`` binds a run in the notebook; the next profiled cell said "not
    sent to the nsys worker ... NsysRun cannot be pickled" each time (the GPU acceptance of
    2026-12-07: a line on nearly every cell). No cell expects them there: nothing is said,
    unless a cell reads one."""
    ns = {"r1": RunCallbacks(), "x": 1}  # any object of the package's stands for a run
    _, out = run("y = x + 1", ns=ns)
    assert not [line for line in out if "not sent" in line], out
    with pytest.raises(MissingVariableError, match="results stay in the notebook") as info:
        run("print(r1)", ns=ns)
    assert "read r1 in an ordinary cell" in str(info.value)
    assert "%%nsight_setup" not in str(info.value)  # no setup cell makes a run


def test_a_failure_with_no_type_or_message_says_so() -> None:
    from nsight_magic.session.runs.pipeline import cell_failed

    error = cell_failed({"status": "error", "phase": "setup"}, Path("/runs/x"), None)
    assert "None" not in str(error).splitlines()[0]
    assert "raised an error it did not report" in str(error)


def test_unknown_name_fails_the_cell_in_cell_coordinates(run) -> None:
    with pytest.raises(CellFailedError) as info:
        run("a = 1\nb = not_defined_anywhere + a\n")
    err = info.value
    assert err.exc_type == "NameError" and 'File "<nsight_magic cell>", line 2' in err.traceback
    assert err.run is not None and err.run.meta["status"] == "cell_failed"


def test_setup_cells_run_once_per_worker_and_warmup_is_outside(run, manager) -> None:
    manager.record_setup("calls = []", "calls", prepare_cell("calls = []"))
    run("calls.append('cell')", warmup=2)
    _, out = run("print(len(calls))")
    # the setup cell ran once; the two warm-up runs left the namespace as it was, so only the
    # captured run appended (issue 41: a warm-up repeats work, it changes nothing)
    assert "1" in out


def test_interrupt_stops_the_cell_and_the_worker_lives_on(run, manager) -> None:
    run("x = 1")
    pid = _pid(manager)
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    t0 = time.perf_counter()
    with pytest.raises(ProfileInterrupted) as info:
        run("import time\nwhile True:\n    time.sleep(0.01)\n", cancel=cancel)
    assert time.perf_counter() - t0 < 30
    assert info.value.run is not None and info.value.run.report["status"] == "interrupted"
    _, out = run("print('still', x)")
    assert "still 1" in out and _pid(manager) == pid


def test_ctrl_c_in_the_notebook_interrupts_the_cell(run, manager) -> None:
    run("x = 1")
    pid = _pid(manager)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest may run us without
    try:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(ProfileInterrupted):
            run("import time\ntime.sleep(60)\n")
    finally:
        signal.signal(signal.SIGINT, old)
    assert _pid(manager) == pid and run("print(x)")[1] == ["1"]


def test_timeout_stops_the_cell(run, manager) -> None:
    run("x = 1")
    pid = _pid(manager)
    with pytest.raises(ProfileTimeout, match="1 s timeout"):
        run("import time\ntime.sleep(60)\n", timeout=1.0)
    assert _pid(manager) == pid


def test_a_worker_that_ignores_interrupts_is_killed(run, manager, monkeypatch) -> None:
    monkeypatch.setattr(worker_process, "INTERRUPT_GRACE_S", 1.0)
    run("x = 1")
    pid = _pid(manager)
    cell = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    with pytest.raises(WorkerDiedError, match="did not stop"):
        run(cell, timeout=5.0)  # the cell must ignore SIGINT before it runs out
    assert not alive(pid)
    # the next cell starts a new worker, which replays what the old one had run
    _, out = run("print('x =', x)")
    assert "x = 1" in out and _pid(manager) != pid


def test_a_crashed_worker_is_restarted_and_gets_the_notebooks_state(run, manager) -> None:
    run("x = 7")
    pid = _pid(manager)
    with pytest.raises(WorkerDiedError, match="SIGKILL"):
        run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert not alive(pid)
    result, out = run("print('x is', x)")
    assert "x is 7" in out and _pid(manager) != pid
    assert not result.meta.get("replayed")  # x came back to the notebook: the new worker gets it


def test_the_second_profiler_gets_its_own_worker_and_the_history(run, manager) -> None:
    manager.record_setup("base = 10", "base", prepare_cell("base = 10"))
    run("extra = base + 1")
    result, out = run("print(base + extra)", backend=BareBackend("ncu"))
    # the nsys cell's bindings (and the setup name it read) came back to the notebook: the
    # ncu worker receives them and replays no profiled cell
    assert "21" in out and "cell" not in (result.meta.get("replayed") or [])
    assert {s.tool for s in manager.status()} == {"nsys", "ncu"}
    assert _pid(manager, "nsys") != _pid(manager, "ncu")


def test_fresh_runs_get_only_the_setup_cells(run, manager) -> None:
    manager.record_setup("base = 10", "base", prepare_cell("base = 10"))
    run("warm_only = 1")
    result, out = run("print(base, 'warm_only' in globals())", fresh=True)
    assert result.meta["mode"] == "fresh" and "10 False" in out
    with pytest.raises(CellFailedError, match="NameError"):
        run("print(base)", fresh=True, setup=False)


def test_an_env_change_starts_a_new_worker(run, manager) -> None:
    run("import os\nprint(os.environ.get('NSM_TEST'))", env={"NSM_TEST": "a"})
    pid = _pid(manager)
    result, out = run("import os\nprint(os.environ.get('NSM_TEST'))", env={"NSM_TEST": "b"})
    # the first worker stays for its own cells (two per profiler: test_session_options.py)
    assert out[-1] == "b" and result.meta["worker"]["pid"] != pid and alive(pid)


def test_stop_and_status(run, manager) -> None:
    run("x = 1")
    (status,) = manager.status()
    assert status.alive and status.cells == 1 and status.tool == "nsys"
    pid = status.pid
    # %nsight_session's text for this real worker (no GPU here: no memory lines), and the
    # notebook's GPU line as torch would report it
    text = format_status([status], {"0": {"reserved_bytes": 3_000_000_000, "allocated_bytes": 0}})
    assert text.startswith(f"nsys worker: running, pid {pid}, up ")
    assert "1 cell(s) profiled" in text and "launched as: " in text
    assert "notebook GPU 0: torch holds 3.0 GB" in text and "the one copy" in text
    assert manager.stop() == ["nsys"]
    assert manager.status() == [] and not alive(pid)


def test_status_says_what_an_ncu_worker_holds_beyond_torch_is_ncu_s_own() -> None:
    """nvidia-smi gave the ncu worker 13,156 MiB right after a drill-down that kept a 34 GB
    state, torch 158 MiB of it (H200): the rest is ncu's replay buffers, gone 5 s later."""
    mib = 2**20
    worker = SessionStatus(tool="ncu", alive=True, pid=1, uptime_s=1.0, cells=1, replayed=0,
                           cuda_memory={"0": {"reserved_bytes": 158 * mib,
                                              "allocated_bytes": 64 * mib}},
                           gpu_memory_mib=13156.0)  # fmt: skip
    text = format_status([worker], {})
    assert "torch holds 165.7 MB" in text and "its own GPU memory 13,156 MiB" in text
    assert "beyond torch's blocks ~12,998 MiB: its CUDA context and ncu's own" in text
    idle = dataclasses.replace(worker, gpu_memory_mib=1044.0)  # five seconds later
    assert "ncu's own" not in format_status([idle], {})
    nsys = dataclasses.replace(worker, tool="nsys")
    assert "ncu's own" not in format_status([nsys], {})


ORPHAN = r"""
import sys, textwrap
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from session_support import BareBackend
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest
m = SessionManager()
m.profile(CellRequest(cell="x = 1", runs_root=Path(sys.argv[2])), BareBackend())
print("worker", m.status()[0].pid, flush=True)
import time
time.sleep(120)
"""


def test_a_dead_notebook_leaves_no_worker(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parent)
    notebook = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, root, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert notebook.stdout is not None
        line = notebook.stdout.readline()
        worker = int(line.split()[1])
        assert alive(worker)
        os.kill(notebook.pid, signal.SIGKILL)  # no cleanup can run: the kernel died
        notebook.wait(10)
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(worker), "the worker outlived the notebook"
        assert runner.group_members(worker) == []
    finally:
        if notebook.poll() is None:
            notebook.kill()


LAUNCHED_ORPHAN = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from session_support import BareBackend
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest
from nsight_magic.worker.process import Launch

# a launcher that outlives its worker, as `ncu --mode launch` and its subreaper did
LAUNCHER = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]).wait(); time.sleep(300)"

class Launched(BareBackend):
    def launch(self, tool, request, state):
        wrap = lambda command: [sys.executable, "-c", LAUNCHER, *command]
        return Launch(wrap, self.process_env(request), request.cwd, request.python)

m = SessionManager()
m.profile(CellRequest(cell="x = 1", runs_root=Path(sys.argv[2])), Launched())
(session,) = m.workers.sessions_of()
print("worker", m.status()[0].pid, session.worker.proc.pid, flush=True)
import time
time.sleep(120)
"""


def test_a_dead_notebook_takes_the_workers_launcher_with_it(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parent)
    notebook = subprocess.Popen([sys.executable, "-c", LAUNCHED_ORPHAN, root, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        assert notebook.stdout is not None
        _, worker, launcher = notebook.stdout.readline().split()
        pids = [int(worker), int(launcher)]
        assert pids[0] != pids[1] and all(alive(p) for p in pids)
        os.kill(notebook.pid, signal.SIGKILL)
        notebook.wait(10)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], "the launcher outlived the notebook"
    finally:
        if notebook.poll() is None:
            notebook.kill()


@pytest.mark.torch
def test_nproc_runs_the_cell_on_every_rank_with_a_process_group(run, manager) -> None:
    """torchrun (CPU: gloo) runs the cell script on 2 ranks: each rank has its environment and
    the process group; a failure on one rank fails the cell and says which."""
    cell = (
        "import os, torch, torch.distributed as dist\n"
        "t = torch.ones(1) * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "print('rank', os.environ['RANK'], 'of', dist.get_world_size(), 'sum', int(t.item()))\n"
    )
    result, out = gloo_retry(lambda: run(cell, nproc=2))
    assert result.meta["mode"] == "fresh" and result.meta["rank_status"] == {"0": "ok", "1": "ok"}
    # each rank's lines arrive whole, prefixed with the rank (torchrun --tee)
    assert {line for line in out if "sum" in line} == {
        "[default0]:rank 0 of 2 sum 3", "[default1]:rank 1 of 2 sum 3"}  # fmt: skip
    assert manager.status() == []  # several ranks never use the warm worker
    assert not [line for line in out if "OMP_NUM_THREADS" in line], "no torchrun banner"
    with pytest.raises(CellFailedError, match=r"\(rank 1\) only rank 1 fails"):
        gloo_retry(lambda: run("import os\nassert os.environ['RANK'] == '0', 'only rank 1 fails'\n",
                               nproc=2))  # fmt: skip


@pytest.mark.torch
def test_nproc_timeout_stops_every_rank(run, manager) -> None:
    """--timeout on a torchrun cell: the error carries the process group's record, and no rank,
    launcher or profiler process is left (the GPU test checks the same under nsys)."""
    with pytest.raises(ProfileTimeout) as info:
        gloo_retry(lambda: run("import time\ntime.sleep(120)\n", nproc=2, timeout=20.0))
    stopped = info.value.result
    assert stopped is not None and stopped.outcome == "timeout" and stopped.signals
    assert runner.group_members(stopped.pgid) == []


def test_ncu_range_spec_resolved_against_the_cells_nsys_run(manager, data_dir) -> None:
    """%%ncu --nvtx: the script marks the range the user named (tests/test_nvtx_target.py);
    once the notebook profiled the cell with nsys, the name is checked against that run's
    real ranges first (the llm fixture: 'LLM@prefill' in domain LLM, 'generate' a start/end
    range): an unknown name fails before anything runs, and a range nsys saw but the script
    could not (opened from C++) gets ncu's own filter, spelled as measured (docs/workloads.md)."""
    import weakref

    from nsight_magic.errors import NvtxRangeNotFoundError
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun

    run = NsysRun(open_report(data_dir / "nsys_llm.sqlite"))
    manager._nsys_runs["the cell"] = weakref.ref(run)
    options = manager.drills.ncu_nvtx_options
    assert options("LLM@prefill", "the cell") == {"nvtx_target": "LLM:LLM@prefill (PushPop)"}
    assert options("LLM:generate", "the cell") == {"nvtx_target": "LLM:generate (StartEnd)"}
    assert options(":sample", "the cell") == {"nvtx_target": ":sample (PushPop)"}
    with pytest.raises(NvtxRangeNotFoundError, match="LLM:decode"):
        options("decod", "the cell")
    # the script saw none of these ranges in that run: ncu's own filter, domain from nsys
    run.meta = {"cell_status": {"ranges": []}}
    assert options("LLM@prefill", "the cell") == {"nvtx_include": (r"LLM@LLM\@prefill/",)}
    assert options("LLM:generate", "the cell") == {"nvtx_include": ("LLM@generate",)}
    run.meta = {"cell_status": {"ranges": [["LLM", "LLM@prefill", "PushPop"]]}}
    assert options("LLM@prefill", "the cell") == {"nvtx_target": "LLM:LLM@prefill (PushPop)"}
    # a cell never profiled with nsys: the script resolves the name as the cell runs
    assert options(" LLM@prefill ", "another cell") == {"nvtx_target": "LLM@prefill"}
    with pytest.raises(ValueError, match="empty"):
        options("  ", "another cell")


def test_a_stopped_worker_leaves_no_pipe_open_in_the_notebook(run, manager) -> None:
    """Its output pipe is closed with it: a notebook that restarts workers for hours keeps no
    file descriptor of each (Python said "unclosed file" at garbage collection)."""
    run("x = 1")
    (session,) = manager.workers.sessions_of("nsys")
    proc = session.worker.proc
    assert proc is not None and proc.stdout is not None and not proc.stdout.closed
    manager.stop()
    assert proc.stdout.closed


def test_auto_vars_off_sends_only_the_setup_cells_names(run, manager) -> None:
    """``%config NsightMagic.auto_vars = False``: an ordinary cell's names stay in the notebook
    (the cell does not see them), a setup cell's still go; what the cell binds comes back."""
    ns = {"plain": 5, "base": 10}
    manager.record_setup("base = 10", "base", prepare_cell("base = 10"))
    result, out = run("print('plain' in globals(), base)\ndone = True", ns=ns, auto_vars=False)
    assert result.report["status"] == "ok" and "False 10" in out and ns["done"] is True


def test_an_interrupted_cell_brings_back_what_it_did_before_the_stop(
    run, manager, tmp_path
) -> None:
    """A Ctrl-C'd cell's changes come back like a raised one's (issue 56): plain Python leaves
    what the cell did before the KeyboardInterrupt. The stop comes once the cell has begun (a
    marker file it writes), so a loaded machine cannot stop it before it ran."""
    ns = {"hits": []}
    marker = tmp_path / "began"
    cancel = threading.Event()

    def stop_when_begun() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        cancel.set()

    threading.Thread(target=stop_when_begun, daemon=True).start()
    cell = (f"hits.append(1)\nn = 5\nopen({str(marker)!r}, 'w').close()\nimport time\n"
            "while True:\n    time.sleep(0.01)\n")  # fmt: skip
    with pytest.raises(ProfileInterrupted):
        run(cell, ns=ns, cancel=cancel)
    assert ns["hits"] == [1] and ns["n"] == 5


def test_a_timed_out_cell_brings_back_what_it_did_and_the_sides_stay_agreed(run, manager) -> None:
    """``--timeout``: the cell's time is spent when its changes are asked for, so that request
    had no time left and stopped the worker in the middle of describing them (the GPU
    acceptance of 2026-12-07: enough state to take more than an instant, the bring-back
    "failed (interrupted)", later cells lost names). Now the bring-back has state_timeout's
    bound, and a worker agrees to a message only once the notebook applied it."""
    ns = {"hits": [], "rows": [[i, str(i)] for i in range(20_000)]}  # >0.1 s to describe
    run("pass", ns=ns)  # the worker has them: the next cell's time is its own
    with pytest.raises(ProfileTimeout):
        # 20 s: the bound covers sending the state first, which a loaded 2-core machine made
        # take most of 4 s (the cell had not begun when it was stopped)
        run("hits.append(1)\nk = 7\nimport time\ntime.sleep(600)\n", ns=ns, timeout=20.0)
    assert ns["hits"] == [1] and ns["k"] == 7
    _, out = run("hits.append(2)\nprint(len(rows), k, hits)", ns=ns)
    assert out == ["20000 7 [1, 2]"] and ns["hits"] == [1, 2]
