"""%%nsys --nvtx RANGE#K: the cell script opens the capture gate at the K-th opening of the range
(any thread) and closes it when that opening's range closes (script/cuda_gate.RangeWindow).
In the real worker, warm and fresh, without a profiler (tests/session_support.py): the gate's
start and stop times, written to the status, are compared with the times the cell noted
inside each opening of the range."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import NothingCapturedError
from nsight_magic.profilers import ncu as ncu_argv
from nsight_magic.profilers import nsys as nsys_argv
from nsight_magic.session.backends import NcuBackend, NsysBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks


class WindowBackend(BareBackend):
    """A bare worker (no profiler) given what ``NsysBackend`` gives the script for ``--nvtx``,
    and NsysBackend's check of what was captured."""

    def __init__(self, text: str) -> None:
        super().__init__("nsys")
        self.nsys = NsysBackend(nsys_argv.NsysOptions(nvtx_capture=text))

    def script_args(self) -> dict[str, Any]:
        return self.nsys.script_args()

    def check_captured(self, report: Any, status: dict[str, Any], run_dir: Path) -> None:
        if (status.get("window") or {}).get("state") == "waiting":
            self.nsys.check_captured(None, status, run_dir)


# four openings of train@step: the 2nd on another thread (autograd's backward runs on its own
# thread); each notes the time inside it; warm-up runs open it too and must not count
STEPS_CELL = """\
import json, threading, time, nvtx
T = []
def step():
    with nvtx.annotate("train@step", domain="train"):
        T.append(time.perf_counter())
        time.sleep(0.02)
for i in range(4):
    t = threading.Thread(target=step) if i == 1 else None
    (t.start(), t.join()) if t else step()
    time.sleep(0.02)
open("times.json", "w").write(json.dumps(T))
"""


@pytest.fixture(scope="module")
def manager():
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _profile(manager: SessionManager, tmp_path: Path, text: str, **kw: Any) -> Any:
    request = CellRequest(cell=textwrap.dedent(STEPS_CELL), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), **kw)  # fmt: skip
    return manager.profile(request, WindowBackend(text), notebook=manager.notebook,
                           callbacks=RunCallbacks())  # fmt: skip


@pytest.mark.parametrize(
    ("text", "instance", "fresh"),
    [("train:train@step#3", 3, False), ("train@step#2", 2, True), ("train@step", 1, False)],
)
def test_the_gate_opens_and_closes_around_the_kth_opening_only(
    manager: SessionManager, tmp_path: Path, text: str, instance: int, fresh: bool
) -> None:
    run = _profile(manager, tmp_path, text, fresh=fresh, warmup=1)
    times = json.loads((tmp_path / "times.json").read_text())
    window = run.report["window"]
    assert window["instance"] == instance and window["state"] == "closed"
    assert run.report["target"]["opened"] == 4  # the captured run's openings, not warm-up's
    inside = times[instance - 1]
    assert window["start"] < inside < window["stop"] <= window["stopped"]
    if instance > 1:
        assert times[instance - 2] < window["start"]  # the opening before is outside
    assert window["stopped"] < times[instance]  # so is the one after


def test_a_range_never_opened_or_too_few_openings_says_which_ranges_there_were(
    manager: SessionManager, tmp_path: Path
) -> None:
    with pytest.raises(NothingCapturedError) as err:
        _profile(manager, tmp_path, "train@stpe")
    text = str(err.value)
    assert "no range named 'train@stpe'" in text and "'train:train@step (PushPop)'" in text
    assert "Use --nvtx 'train:train@step'" in text
    with pytest.raises(
        NothingCapturedError, match=r"opening 7 .* opened it 4 time\(s\); pick #1..#4"
    ):
        _profile(manager, tmp_path, "train@step#7")


@pytest.mark.parametrize(
    ("text", "spec", "instance"),
    [("train@step#3", "train@step", 3), ("train:train@step", "train:train@step", 1),
     (":step#1#2", ":step#1", 2), ("L3: y = f(x)", "L3: y = f(x)", 1), (" a # 4 ", "a", 4),
     ("a#b", "a#b", 1), ("a#²", "a#²", 1), ("a#\uff13", "a", 3)],
)  # fmt: skip
def test_the_instance_spelling(text: str, spec: str, instance: int) -> None:
    assert nsys_argv.split_instance(text) == (spec, instance)


@pytest.mark.parametrize("text", ["#2", "train:", "step#0", ":", "a#" + "9" * 5000])
def test_bad_spellings_name_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--nvtx"):
        nsys_argv.split_instance(text)


def test_a_warm_worker_is_not_relaunched_for_another_range_and_fresh_runs_gate_the_same_way():
    with_range = nsys_argv.NsysOptions(nvtx_capture="train@step#2")
    assert with_range.warm() == nsys_argv.NsysOptions().warm()
    assert NsysBackend(with_range).script_args() == {"nvtx_capture": "train@step",
                                                     "nvtx_instance": 2}  # fmt: skip
    assert NsysBackend().script_args() == {}
    # a fresh run keeps the cudaProfilerApi gate: the script's window drives it there too
    argv = nsys_argv.profile_argv("nsys", "r", ["python", "s.py"], options=with_range)
    assert "--capture-range=cudaProfilerApi" in argv and not any("nvtx-capture" in a for a in argv)


def test_a_drill_down_of_a_windowed_run_marks_the_same_opening_for_ncu() -> None:
    """A run captured with --nvtx RANGE#K saw only that opening: its kernel instances count
    from there, so the drill-down's ncu marks that one opening and counts launches inside."""
    import nvtx

    from nsight_magic.script import range_recorder
    from nsight_magic.session.runs.drill import window_filters

    parent = type("Run", (), {"meta": {"options": {"nvtx_capture": "train@step#3"}}})()
    filters = window_filters(parent)
    assert filters == {"nvtx_target": "train@step", "nvtx_instance": 3}
    assert window_filters(type("Run", (), {"meta": {"options": {}}})()) == {}
    options = ncu_argv.NcuOptions(**filters, kernel_exact="k", launch_skip=1)
    assert options.filter_args()[:2] == ["--nvtx-include", "nsight_magic@nvtx-target"]
    assert options.describe_filter().startswith("the filter --nvtx 'train@step#3'")
    assert NcuBackend(options).script_args() == {"nvtx_target": "train@step", "nvtx_instance": 3}
    marks: list[str] = []
    recorder = range_recorder.RangeRecorder("train@step", instance=3)
    with recorder:
        recorder.open_marker = lambda message, domain: marks.append("open") or len(marks)
        recorder.close_marker = lambda marker: marks.append("close")
        for _ in range(4):
            with nvtx.annotate("train@step", domain="train"):
                marks.append("body")
    assert marks == ["body", "body", "open", "body", "close", "body"]
    assert recorder.target_status()["opened"] == 4


def test_profile_range_of_the_windowed_range_keeps_to_its_opening() -> None:
    from nsight_magic.session.runs.drill import range_filters

    windowed = type("Run", (), {"meta": {"options": {"nvtx_capture": "train:train@step#3"}}})()
    assert range_filters(windowed, "train", "train@step", "PushPop") == {
        "nvtx_target": "train:train@step", "nvtx_instance": 3}  # fmt: skip
    # another range (nested or not): ncu's own filter, every opening, warm-up excluded
    other = range_filters(windowed, "train", "train@bwd", "PushPop")
    assert other["nvtx_include"] == ("train@train\\@bwd/",)
    assert other["nvtx_exclude"] == ("nsight_magic@warmup/",)
    plain = type("Run", (), {"meta": {"options": {}}})()
    unwindowed = range_filters(plain, "train", "train@step", "PushPop")
    assert unwindowed["nvtx_include"] == ("train@train\\@step/",)
