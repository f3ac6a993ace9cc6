"""build_script: generated scripts really run with plain python (nvtx is a no-op without a
profiler). To see the NVTX structure, some tests put a recording ``nvtx`` module first on the
child's PYTHONPATH: it logs each range push/pop instead of talking to a profiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from session_support import script_for as build_script

from nsight_magic.errors import CellSyntaxError
from nsight_magic.script import prepare_cell
from nsight_magic.vocabulary.nvtx_names import shorten_label as shorten


def statement_labels(cell: str) -> list[str]:
    return list(prepare_cell(cell).labels)


RECORDING_NVTX = """
import contextlib, json, os
LOG = os.environ["NVTX_LOG"]

@contextlib.contextmanager
def annotate(message=None, domain=None, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps(["push", domain, message]) + "\\n")
    try:
        yield
    finally:
        with open(LOG, "a") as f:
            f.write(json.dumps(["pop", domain, message]) + "\\n")

def start_range(message=None, domain=None, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps(["start", domain, message]) + "\\n")
    return message

def end_range(handle):
    with open(LOG, "a") as f:
        f.write(json.dumps(["end", "nsight_magic", handle]) + "\\n")
"""


def run_script(
    tmp_path: Path, text: str, *, record_nvtx: bool = False
) -> tuple[subprocess.CompletedProcess[str], dict, list]:
    script = tmp_path / "script.py"
    script.write_text(text)
    env = dict(os.environ)
    if record_nvtx:
        (tmp_path / "fake_site").mkdir(exist_ok=True)
        (tmp_path / "fake_site" / "nvtx.py").write_text(RECORDING_NVTX)
        env["PYTHONPATH"] = str(tmp_path / "fake_site")
        env["NVTX_LOG"] = str(tmp_path / "nvtx.log")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "status.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    status = json.loads((tmp_path / "status.json").read_text())
    events = []
    if record_nvtx and (tmp_path / "nvtx.log").exists():
        events = [json.loads(x) for x in (tmp_path / "nvtx.log").read_text().splitlines()]
    return proc, status, events


def test_labels_are_line_and_shortened_source() -> None:
    cell = "x = 1\n\nfor i in range(3):\n    x += i\ny = '" + "a" * 100 + "'\n"
    labels = statement_labels(cell)
    assert labels[0] == "L1: x = 1"
    assert labels[1] == "L3: for i in range(3): ..."
    assert labels[2].startswith("L5: y = 'aaa") and labels[2].endswith("...")
    assert len(labels[2]) <= len("L5: ") + 60
    assert shorten("a\n   b") == "a b"


def test_syntax_error_names_the_cell_line() -> None:
    with pytest.raises(CellSyntaxError) as info:
        build_script("x = 1\ny = (2,\nz = 3 +\n")
    assert info.value.lineno is not None and info.value.lineno >= 2
    assert "line" in str(info.value)
    assert isinstance(info.value, SyntaxError)


def test_setup_cell_syntax_error_is_reported_too() -> None:
    with pytest.raises(CellSyntaxError, match="setup cell 1"):
        build_script("x = 1", setup_cells=["def f(:\n  pass"])


def test_ranges_nest_per_statement_inside_cell_and_warmup_outside(tmp_path: Path) -> None:
    cell = "calls.append(len(calls))\ntotal = sum(calls)\nprint('total', total)\n"
    text = build_script(cell, setup_cells=["calls = []"], warmup=2, gate="ncu")
    proc, status, events = run_script(tmp_path, text, record_nvtx=True)
    assert proc.returncode == 0, proc.stderr
    assert status["status"] == "ok" and status["phase"] == "done" and status["nvtx"] is True
    # 2 warm-ups + 1: each run starts from the state before the warm-ups (each warm-up leaves
    # the namespace as it was: issue 41; a second warm-up does not see the first's append)
    assert proc.stdout.splitlines() == ["total 0", "total 0", "total 0"]
    assert all(e[1] == "nsight_magic" for e in events)
    names = [(e[0], e[2]) for e in events]
    # warm-up: one outer range holding two passes over the statements
    assert names[0] == ("push", "warmup")
    end_warm = names.index(("pop", "warmup"))
    # under ncu the cell also runs inside the start/end range ncu's filter selects (any thread)
    assert names[end_warm + 1] == ("start", "capture") and names[-1] == ("end", "capture")
    cell_part = names[end_warm + 2 : -1]
    assert cell_part[0] == ("push", "cell") and cell_part[-1] == ("pop", "cell")
    assert cell_part[1:-1] == [
        ("push", "L1: calls.append(len(calls))"),
        ("pop", "L1: calls.append(len(calls))"),
        ("push", "L2: total = sum(calls)"),
        ("pop", "L2: total = sum(calls)"),
        ("push", "L3: print('total', total)"),
        ("pop", "L3: print('total', total)"),
    ]
    assert ("push", "cell") not in names[:end_warm]


def test_repeats_each_open_the_cell_and_read_the_gpus_after_it(tmp_path: Path) -> None:
    """``--repeat 3``: three openings of the cell, each repeat's wall time, and the GPUs read
    after each repeat (this machine has no NVML: a None reading each, which says nothing)."""
    cell = "calls.append(len(calls))\nprint('calls', len(calls))\n"
    text = build_script(cell, setup_cells=["calls = []"], repeat=3)
    proc, status, events = run_script(tmp_path, text, record_nvtx=True)
    assert proc.returncode == 0, proc.stderr
    assert [e[2] for e in events if e[0] == "push" and e[2] == "cell"] == ["cell"] * 3
    # each repeat starts from the same state (a script run on its own shows every print)
    assert proc.stdout.splitlines() == ["calls 1"] * 3
    assert len(status["repeat_cell_s"]) == 3 and all(w >= 0 for w in status["repeat_cell_s"])
    from nsight_magic.script.gpu_readings import gpu_reading

    here = gpu_reading()  # what this machine reads: None without a driver
    assert status["repeat_gpu"] == [here] * 3 if here is None else len(status["repeat_gpu"]) == 3
    one = build_script(cell, setup_cells=["calls = []"])  # one repeat reads nothing
    _, single, _ = run_script(tmp_path, one)
    assert "repeat_gpu" not in single and len(single["repeat_cell_s"]) == 1


def test_user_exception_is_reported_in_cell_coordinates(tmp_path: Path) -> None:
    cell = "def f(v):\n    return 1 / v\n\nx = 3\ny = f(x - 3)\n"
    proc, status, _ = run_script(tmp_path, build_script(cell, cell_name="my cell"))
    assert proc.returncode == 1
    assert status["status"] == "error" and status["phase"] == "cell"
    assert status["exc_type"] == "ZeroDivisionError"
    tb = status["traceback"]
    assert 'File "<nsight_magic my cell>", line 5, in <module>' in tb
    assert 'File "<nsight_magic my cell>", line 2, in f' in tb
    assert "y = f(x - 3)" in tb and "return 1 / v" in tb  # cell source, from linecache
    assert "script.py" not in tb
    assert "raised ZeroDivisionError" in proc.stderr and tb not in proc.stderr  # shown once


def test_cell_state_functions_classes_future_import(tmp_path: Path) -> None:
    cell = (
        "from __future__ import annotations\n"
        "class A:\n    def m(self) -> Undefined:\n        return helper()\n"
        "def helper():\n    return [k * base for k in range(3)]\n"
        "print(A().m())\n"
    )
    proc, status, _ = run_script(tmp_path, build_script(cell, setup_cells=["base = 10"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 10, 20]" and status["status"] == "ok"


@pytest.mark.torch
def test_nsys_gate_without_gpu_is_recorded_as_none(tmp_path: Path) -> None:
    # torch is CPU-only here and no libcudart is installed: the gate must not crash.
    pytest.importorskip("torch")
    proc, status, _ = run_script(tmp_path, build_script("import torch\nx = torch.ones(2) * 2"))
    assert proc.returncode == 0, proc.stderr
    assert status["gate"] == "cudaProfilerApi" and status["gate_kind"] == "none"
    assert status["cell_s"] >= 0


def test_exit_inside_cell_is_an_error_not_success(tmp_path: Path) -> None:
    proc, status, _ = run_script(tmp_path, build_script("import sys\nsys.exit(4)"))
    assert proc.returncode == 1 and status["exc_type"] == "SystemExit"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        build_script("x = 1", gate="perf")
    with pytest.raises(ValueError):
        build_script("x = 1", warmup=-1)


def test_cells_with_quotes_backslashes_and_unicode_survive(tmp_path: Path) -> None:
    cell = 's = """a \'\'\' b"""\nt = "back\\\\slash {braces} %s"\nprint(len(s), t, "µ✓")\n'
    proc, status, _ = run_script(tmp_path, build_script(cell))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "7 back\\slash {braces} %s µ✓" and status["status"] == "ok"


def test_status_keys_are_the_ones_runs_reads() -> None:
    """The script writes the status file, runs.CellStatus reads it: the same keys."""
    from nsight_magic.run_folders.runs import CellStatus
    from nsight_magic.script import STATUS_KEYS

    assert set(CellStatus.__annotations__) == STATUS_KEYS | {"worker_broken"}
