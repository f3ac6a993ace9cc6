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
from nsight_magic.processes import deadline
from nsight_magic.profilers import commands as profiler_cli
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
elif kind in ("daemon-fresh", "daemon-warm"):  # the cell's daemon left its parent and session
    request = CellRequest(cell=(tmp / "daemon_cell.py").read_text(), runs_root=tmp / "runs",
                          cwd=str(tmp), fresh=kind == "daemon-fresh")
    SessionManager(setup=SetupRegistry()).profile(request, BareBackend(), notebook=Notebook())
elif kind.startswith("watchdog-"):  # a watchdog of ours killed or stopped (SIGSTOP) by a cell
    import signal, time
    from nsight_magic.processes.child_signals import start_child
    record = ["sh", "-c", 'echo $$ >> "$KD_PIDS"; exec sleep 600']
    first = start_child(record)
    while not (tmp / "pids").exists():
        time.sleep(0.05)
    # the watchdog processes below this notebook, the nearest to it first
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:  # a process of the machine may end between the listing and the read
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    def depth(pid):
        return 0 if pid == os.getpid() else 1 + depth(parents[pid]) if pid in parents else 99
    def is_watchdog(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return any(a.endswith(b"/child_watchdog.py") for a in f.read().split(b"\0"))
    ours = sorted((p for p in parents if 0 < depth(p) < 99 and is_watchdog(p)), key=depth)
    _, how, which = kind.split("-")
    sig = signal.SIGKILL if how == "killed" else signal.SIGSTOP
    os.kill(ours[0 if which == "near" else -1], sig)
    time.sleep(1.5)
    assert first.poll() is None, "the run ended with its watchdog"
    start_child(record)  # one started after it
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
    # the cell, and the daemon it started through `sh -c 'setsid ... &'` (issue 43 item 1)
    "daemon-fresh": 2,
    "daemon-warm": 2,
    # a process started before one of its watchdogs was killed or stopped, and one after
    # (issue 43 item 2); the one that holds what the process starts ("far"), or the one
    # nearest the notebook ("near": stopped only; killed, it ends the run, as a stop does)
    "watchdog-killed-far": 2,
    "watchdog-stopped-far": 2,
    "watchdog-stopped-near": 2,
}

# A cell whose daemon leaves it: `sh` starts it in a session of its own and exits at once, so
# it has neither its parent nor its session (a profiler's helper daemonizing does the same).
DAEMON_CELL = """import os, subprocess, time
with open(os.environ["KD_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
subprocess.Popen(["sh", "-c", "setsid sh -c 'echo $$ >> \\"$KD_PIDS\\"; exec sleep 600' &"])
time.sleep(600)
"""


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
    (tmp_path / "daemon_cell.py").write_text(DAEMON_CELL)
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
    tree: set[int] = set()
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
        for pid in descendants(notebook.pid) | set(_recorded(tmp_path)) | tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_cli_that_runs_out_of_time_leaves_no_child(tmp_path: Path) -> None:
    """A hung profiler CLI (``nsys export``/``start``, ``--version``) is stopped at its bound
    with everything it started, not only itself (its helper stayed before), even a helper that
    left its session (issue 43: it stayed until the notebook ended, or for good when it had
    left its parent too before the watchdog's scan)."""
    from nsight_magic.processes.clean_env import run_quiet

    pids = tmp_path / "pids"
    daemon = f"setsid sh -c 'echo $$ >> {pids}; exec sleep 600' &"
    hung_cli = f"{daemon} sleep 600 & echo $! >> {pids}; echo $$ >> {pids}; exec sleep 600"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_quiet(["sh", "-c", hung_cli], 2.0)
    assert time.monotonic() - t0 < 30  # the hang is 600 s; margin for a loaded machine
    up_by = time.monotonic() + 10
    while len(_recorded(tmp_path)) < 3 and time.monotonic() < up_by:
        time.sleep(0.05)  # the daemon may write after the timeout
    started = _recorded(tmp_path)
    assert len(started) == 3
    gone_by = time.monotonic() + 15
    while [p for p in started if alive(p)] and time.monotonic() < gone_by:
        time.sleep(0.05)
    left = [p for p in started if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the CLI's child outlived its timeout"


DIES_AT_ONCE = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from nsight_magic.processes.child_signals import start_child
proc = start_child(["sh", "-c", 'echo $$ >> "$KD_PIDS"; exec sleep 600'])
print(proc.pid, flush=True)  # its watchdog (the process start_child started)
os.kill(os.getpid(), signal.SIGKILL)  # before its watchdog has even started
"""


def test_a_notebook_that_dies_as_its_first_child_starts_leaves_nothing(tmp_path: Path) -> None:
    """The watchdog finds the notebook gone as it starts (it then starts nothing) or later
    (then it ends what it started): either way nothing is left, the watchdog included."""
    env = _setup(tmp_path)
    notebook = subprocess.Popen([sys.executable, "-c", DIES_AT_ONCE, str(ROOT)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                start_new_session=True)  # fmt: skip
    out, _ = notebook.communicate(timeout=30)
    assert notebook.returncode == -signal.SIGKILL
    started = [int(out)]
    gone_by = time.monotonic() + 20
    while [p for p in started if alive(p)] and time.monotonic() < gone_by:
        time.sleep(0.1)
        started = [int(out), *_recorded(tmp_path)]
    left = [p for p in started if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the child (or its watchdog) outlived a notebook that died at once"
