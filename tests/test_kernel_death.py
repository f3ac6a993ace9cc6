"""Every process a run starts ends when the kernel dies (issue 35 item 3): a "notebook" (a
Python child of the test) starts one kind of run through the package's own code path, the
test waits until the run's processes are up, kills the notebook with SIGKILL (nothing of ours
can run there) and polls /proc, with a bound, until no process of the notebook's tree is left.

The cell runs for real (bare, or under torchrun on 2 ranks); where a profiler would be needed a
small fake on PATH stands in for a *hung* one only: it starts the cell's script as the profiler
would (or not at all) and never exits. The warm worker's own watch is tested in
test_session.py."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import alive

ROOT = Path(__file__).resolve().parent

# A profiler that hangs: it answers --version (the check before a run), prints no sets or
# sections, and otherwise records its pid, starts the cell's command if it was given one (as
# `nsys profile`/`ncu` start their target), and never exits.
HUNG_PROFILER = """#!{python}
import os, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.1.0")
    sys.exit(0)
if args[:1] in (["--list-sets"], ["--list-sections"], ["profile", "--help"]):
    sys.exit(0)
with open(os.environ["KD_PIDS"], "a") as f:
    f.write(f"{{os.getpid()}}\\n")
python = [i for i, a in enumerate(args) if a == {python!r}]
if python and "attach" not in args:
    subprocess.Popen(args[python[0]:])
time.sleep(600)
"""

# The cell: records its pid (one line per rank), then runs for as long as a long cell does.
CELL = """import os, time
with open(os.environ["KD_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(600)
"""

NOTEBOOK = r"""
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
kind, tmp = sys.argv[2], Path(sys.argv[3])
from session_support import BareBackend
from nsight_magic.session import deadline, profiler_cli
from nsight_magic.session.backends import NcuBackend, NsysBackend, WarmState
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook
from nsight_magic.processes.locate import Tool

cell = (tmp / "cell.py").read_text()
fake = str(tmp / "bin" / "nsys")
deadline.CLI_S = deadline.ATTACH_S = deadline.EXPORT_S = 600.0

def fresh(backend, **kw):
    request = CellRequest(cell=cell, runs_root=tmp / "runs", cwd=str(tmp), fresh=True, **kw)
    SessionManager(setup=SetupRegistry()).profile(request, backend, notebook=Notebook())

if kind == "fresh":
    fresh(BareBackend())
elif kind == "fresh-nproc-2":
    fresh(BareBackend(), nproc=2)
elif kind == "nsys-profile":
    fresh(NsysBackend())
elif kind == "ncu":
    fresh(NcuBackend())
elif kind == "ncu-attach":
    profiler_cli.attach([fake, "--mode", "attach", "--port", "1"], tmp / "attach.log")
elif kind == "nsys-export":
    (tmp / "report.nsys-rep").write_bytes(b"x")
    NsysBackend().load(Tool(name="nsys", path=fake), tmp)
elif kind == "left-its-session":  # a profiler helper in a session of its own (a daemon)
    from nsight_magic.processes import runner
    code = ("import os, subprocess, sys, time; open(os.environ['KD_PIDS'], 'a').write("
            "f'{os.getpid()}\\n'); subprocess.Popen(sys.argv[1:], start_new_session=True); "
            "time.sleep(600)")
    runner.run([sys.executable, "-c", code, sys.executable, "-c", cell], log_path=tmp / "log")
elif kind == "closed-pipe":  # a cell closed the watchdog's descriptor (os.closerange)
    import time
    from nsight_magic.processes import child_lifetime
    from nsight_magic.processes.child_signals import start_child
    record = ["sh", "-c", 'echo $$ >> "$KD_PIDS"; exec sleep 600']
    first = start_child(record)
    time.sleep(0.5)
    os.close(child_lifetime._watchdog[1].stdin.fileno())
    time.sleep(1.5)
    assert first.poll() is None, "the watchdog ended a run while the notebook lives"
    start_child(record)  # watched by a new watchdog
    time.sleep(600)
elif kind == "nsys-start":
    NsysBackend().begin_capture(Tool(name="nsys", path=fake), WarmState(name="s"), tmp)
"""

# kind -> how many pids the run records once all of its processes are up
KINDS = {
    "fresh": 1,  # the cell's script
    "fresh-nproc-2": 2,  # both ranks (torchrun between them and the notebook)
    "nsys-profile": 2,  # the hung nsys, and the script it started
    "ncu": 2,
    "ncu-attach": 1,
    "nsys-export": 1,
    "nsys-start": 1,
    "left-its-session": 2,  # the "profiler", and the cell it started in a new session
    "closed-pipe": 2,  # a process started before the cell closed the pipe, and one after
}


def descendants(root: int) -> set[int]:
    """Live processes below ``root`` (by parent pid), read from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, grew = set(), {root}
    while grew:
        grew = {pid for pid, parent in parents.items() if parent in grew} - found
        found |= grew
    return {pid for pid in found if alive(pid)}


def _setup(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nsys", "ncu"):
        fake = bin_dir / name
        fake.write_text(HUNG_PROFILER.format(python=sys.executable))
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "cell.py").write_text(CELL)
    pythonpath = os.pathsep.join(p for p in (str(ROOT.parent), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "KD_PIDS": str(tmp_path / "pids"), "PYTHONPATH": pythonpath}  # fmt: skip


def _recorded(tmp_path: Path) -> list[int]:
    try:
        return [int(p) for p in (tmp_path / "pids").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize(
    "kind",
    [pytest.param(k, marks=pytest.mark.torch) if k == "fresh-nproc-2" else k for k in KINDS],
)
def test_killing_the_notebook_ends_every_process_of_the_run(tmp_path: Path, kind: str) -> None:
    env = _setup(tmp_path)
    argv = [sys.executable, "-c", NOTEBOOK, str(ROOT), kind, str(tmp_path)]
    notebook = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        up_by = time.monotonic() + 60
        while len(_recorded(tmp_path)) < KINDS[kind] and notebook.poll() is None:
            assert time.monotonic() < up_by, f"the {kind} run did not start: {_recorded(tmp_path)}"
            time.sleep(0.1)
        assert notebook.poll() is None, f"the notebook ended first (exit {notebook.returncode})"
        time.sleep(0.3)  # the watchdog reads the run's session
        tree = descendants(notebook.pid) | set(_recorded(tmp_path))
        assert set(_recorded(tmp_path)) <= tree and all(alive(p) for p in tree)
        os.kill(notebook.pid, signal.SIGKILL)  # the kernel dies: no cleanup of ours runs
        notebook.wait(10)
        gone_by = time.monotonic() + 15
        while [p for p in tree if alive(p)] and time.monotonic() < gone_by:
            time.sleep(0.1)
        left = [p for p in tree if alive(p)]
        assert not left, f"{kind}: processes outlived the notebook: {left}"
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait()
        for pid in descendants(notebook.pid) | set(_recorded(tmp_path)):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_cli_that_runs_out_of_time_leaves_no_child(tmp_path: Path) -> None:
    """A hung profiler CLI (``nsys export``/``start``, ``--version``) is stopped at its bound
    with everything it started, not only itself (its helper stayed before)."""
    from nsight_magic.profilers.env import run_quiet

    pids = tmp_path / "pids"
    hung_cli = f"sleep 600 & echo $! >> {pids}; echo $$ >> {pids}; exec sleep 600"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_quiet(["sh", "-c", hung_cli], 1.0)
    assert time.monotonic() - t0 < 30  # the hang is 600 s; margin for a loaded machine
    started = _recorded(tmp_path)
    assert len(started) == 2
    gone_by = time.monotonic() + 5
    while [p for p in started if alive(p)] and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not [p for p in started if alive(p)], "the CLI's child outlived its timeout"


DIES_AT_ONCE = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from nsight_magic.processes.child_signals import start_child
start_child(["sh", "-c", 'echo $$ >> "$KD_PIDS"; exec sleep 600'])
os.kill(os.getpid(), signal.SIGKILL)  # before its watchdog has even started
"""


def test_a_notebook_that_dies_as_its_first_child_starts_leaves_nothing(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    notebook = subprocess.Popen([sys.executable, "-c", DIES_AT_ONCE, str(ROOT)], env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    assert notebook.wait(30) == -signal.SIGKILL
    up_by = time.monotonic() + 10
    while not _recorded(tmp_path) and time.monotonic() < up_by:
        time.sleep(0.05)
    (child,) = _recorded(tmp_path)
    gone_by = time.monotonic() + 15
    while alive(child) and time.monotonic() < gone_by:
        time.sleep(0.1)
    if alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived a notebook that died at once")
