"""The GPUs' state a run was taken under (processes/gpu_state.py, analysis/machine_state.py): on
this machine (no driver, as CI) the state says why, never zeros; a run says when a clock moved
or the GPU heated during its capture, and compare() when two runs ran under other clocks, power
limits or GPUs.

The states built below have the shape ``read_gpu_state`` returns; they are inputs to the rules.
``tests/data/gpu_state.json`` is a real reading (an H100, idle and after 20 s of GEMMs,
``tools/fixtures/gpu_state_probe.py``): the rules are checked on it too."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nsight_magic.analysis import machine_state
from nsight_magic.processes import gpu_state


def _state(sm: int = 1980, mem: int = 2619, temp: int = 34, locked: bool = False,
           limit: float = 700.0, name: str = "NVIDIA H100 80GB HBM3",
           reasons: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    gpu = {"index": 0, "name": name, "sm_clock_mhz": sm, "mem_clock_mhz": mem,
           "max_sm_clock_mhz": 1980, "temperature_c": temp, "power_limit_w": limit,
           "power_w": 120.0, "clock_reasons": list(reasons), "clocks_locked": locked}  # fmt: skip
    return {"source": "nvml", "gpus": [gpu]}


def test_without_nvml_the_state_says_why() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # this machine: no driver
        state = gpu_state.read_gpu_state()
        assert state == {"source": "none", "why": state["why"]}
        assert state["why"].startswith(("NVML could not start", "nvidia-ml-py"))
    else:  # pragma: no cover - a machine with a GPU reads it
        assert gpu_state.read_gpu_state()["source"] == "nvml"
    none = {"source": "none", "why": "NVML could not start"}
    assert machine_state.capture_notes({"start": none, "end": none}) == []
    assert machine_state.run_differences(None, {"start": none}) == []


def test_one_gpu_is_read_in_watts_and_named_reasons() -> None:
    """``_one`` against an object with NVML's calls (the binding's names, values in its units:
    mW, MHz, a reason bitmask): watts, the reasons by name, locked from the user-defined bit."""
    calls = {
        "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H200",
        "nvmlDeviceGetClockInfo": lambda h, kind: {0: 1755, 2: 3201}[kind],
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: 1980,
        "nvmlDeviceGetTemperature": lambda h, kind: 41,
        "nvmlDeviceGetPowerUsage": lambda h: 312_500,
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700_000,
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: 0x2 | 0x4,
    }
    nvml = SimpleNamespace(NVML_CLOCK_SM=0, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, **calls)
    gpu = gpu_state._one(nvml, 0)
    assert gpu == {"index": 0, "name": "NVIDIA H200", "sm_clock_mhz": 1755,
                   "mem_clock_mhz": 3201, "max_sm_clock_mhz": 1980, "temperature_c": 41,
                   "power_limit_w": 700.0, "power_w": 312.5,
                   "clock_reasons": ["user-defined clocks", "software power cap"],
                   "clocks_locked": True}  # fmt: skip
    del calls["nvmlDeviceGetPowerUsage"]  # a GPU that does not report its draw: None, not 0
    assert (
        gpu_state._one(
            SimpleNamespace(NVML_CLOCK_SM=0, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, **calls), 0
        )["power_w"]
        is None
    )


def test_a_capture_whose_clock_moved_or_gpu_heated_is_said() -> None:
    assert machine_state.capture_notes({"start": _state(), "end": _state()}) == []
    notes = machine_state.capture_notes(
        {
            "start": _state(temp=35),
            "end": _state(sm=1410, temp=61, reasons=("software power cap",)),
        }
    )
    assert notes == [
        "GPU 0's SM clock moved from 1980 to 1410 MHz during the capture: its kernels ran at "
        "more than one speed",
        "GPU 0 warmed from 35 to 61 °C during the capture",
        "GPU 0's clocks were held down at the capture's end: software power cap",
    ]
    # 4% and 9 °C: within what a capture's own load moves
    assert machine_state.capture_notes({"start": _state(), "end": _state(sm=1900, temp=43)}) == []


def test_a_real_reading_idle_then_busy(data_dir: Path) -> None:
    """An H100 read idle (345 MHz, "gpu idle") then after 20 s of GEMMs (1395 MHz, 60 °C,
    "software power cap"): a capture that starts from an idle GPU is not told its clock moved
    (every capture from idle would be), but the heating and the power cap are said; two runs,
    one started idle, are not "not comparable" for the idle clock."""
    import json

    real = json.loads((data_dir / "gpu_state.json").read_text())
    idle, busy = real["idle"], real["busy_end"]
    assert idle["gpus"][0]["clock_reasons"] == ["gpu idle"]
    assert idle["gpus"][0]["sm_clock_mhz"] < 500
    assert machine_state.capture_notes({"start": idle, "end": busy}) == [
        "GPU 0 warmed from 31 to 60 °C during the capture",
        "GPU 0's clocks were held down at the capture's end: software power cap",
    ]
    assert machine_state.run_differences({"start": idle}, {"start": busy}) == []
    assert machine_state.run_differences({"start": busy}, {"start": busy}) == []


def _row(gpu: dict[str, Any], sm: int | None = None, temp: int | None = None) -> list[Any]:
    """A ``gpu_state`` GPU as ``script/gpu_readings.gpu_reading`` reads it after a repeat."""
    return [gpu["index"], gpu["sm_clock_mhz"] if sm is None else sm, gpu["mem_clock_mhz"],
            gpu["temperature_c"] if temp is None else temp,
            "gpu idle" in gpu["clock_reasons"]]  # fmt: skip


def test_repeats_whose_clock_moved_or_gpu_warmed_are_said(data_dir: Path) -> None:
    """Readings after each of five repeats, from the real H100 reading busy (1395 MHz, 60 °C)
    and idle (345 MHz): a clock apart by more than 5% between two repeats, or 10 °C warmer
    than after the first repeat, is one line; an idle reading, a missing one or a row of
    another shape is not compared."""
    import json

    real = json.loads((data_dir / "gpu_state.json").read_text())
    busy, idle = real["busy_end"]["gpus"][0], real["idle"]["gpus"][0]
    steady = [[_row(busy)] for _ in range(5)]
    assert machine_state.repeat_notes(steady) == []
    moved = [*steady[:3], [_row(busy, sm=1980)], steady[4]]
    assert machine_state.repeat_notes(moved) == [
        "GPU 0's SM clock moved between the repeats: 1980 MHz after repeat 4, 1395 MHz after "
        "repeat 1; the repeats ran at more than one speed"
    ]
    warmed = [[_row(busy, temp=45 + 4 * r)] for r in range(5)]  # 45 -> 61 °C
    assert machine_state.repeat_notes(warmed) == [
        "GPU 0 warmed from 45 °C after repeat 1 to 61 °C after repeat 5"
    ]
    assert machine_state.repeat_notes([[_row(busy, temp=45 + 2 * r)] for r in range(5)]) == []
    idle_first = [[_row(idle, temp=busy["temperature_c"])], *steady[1:]]
    assert machine_state.repeat_notes(idle_first) == []  # an idle clock: not compared
    assert machine_state.repeat_notes([None, None, None]) == []  # no NVML
    assert machine_state.repeat_notes([[["0", 1, 2, 3, False]], "x", [[1, 2]]]) == []
    assert machine_state.repeat_notes(None) == machine_state.repeat_notes([steady[0]]) == []


def test_a_repeat_reading_is_read_as_nvml_gives_it() -> None:
    """``gpu_readings._row`` against an object with NVML's calls (the binding's names and
    units): MHz, °C and the idle bit of the reasons; a query the GPU lacks is None."""
    from nsight_magic.script import gpu_readings

    calls = {
        "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlDeviceGetClockInfo": lambda h, kind: {0: 1755, 2: 3201}[kind],
        "nvmlDeviceGetTemperature": lambda h, kind: 41,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x1 | 0x4,
    }
    nvml = SimpleNamespace(NVML_CLOCK_SM=0, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, **calls)
    assert gpu_readings._row(nvml, 0) == [0, 1755, 3201, 41, True]
    del calls["nvmlDeviceGetTemperature"], calls["nvmlDeviceGetCurrentClocksEventReasons"]
    nvml = SimpleNamespace(NVML_CLOCK_SM=0, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, **calls)
    assert gpu_readings._row(nvml, 1) == [1, 1755, 3201, None, None]


def test_a_repeated_run_warns_of_a_clock_that_moved_between_repeats(data_dir: Path) -> None:
    """The line reaches ``run.warnings`` from meta.json's ``cell_status.repeat_gpu``."""
    from nsight_magic.reports.nsys.report import NsysReport
    from nsight_magic.results import NsysRun

    report = NsysReport.open(data_dir / "nsys_small.sqlite")
    readings = [[[0, 1980, 2619, 50, False]], [[0, 1410, 2619, 52, False]]]
    run = NsysRun(report, meta={"name": "r", "cell_status": {"repeat_gpu": readings}})
    assert any("SM clock moved between the repeats" in w for w in run.warnings)


def test_two_runs_under_other_clocks_power_or_gpus_are_said() -> None:
    state = {"start": _state(), "end": _state()}
    assert machine_state.run_differences(state, copy.deepcopy(state)) == []
    slower = {"start": _state(sm=1410, locked=True, limit=600.0), "end": _state()}
    assert machine_state.run_differences(state, slower, "before", "after") == [
        "GPU 0: SM clock 1980 MHz in before, 1410 MHz in after: times are not comparable as "
        "they are",
        "GPU 0: power limit 700 W in before, 600 W in after",
        "GPU 0: clocks locked in after only",
    ]
    other = {"start": _state(name="NVIDIA A100-SXM4-80GB"), "end": _state()}
    assert machine_state.run_differences(state, other) == [
        "GPU 0: a ran on NVIDIA H100 80GB HBM3, b on NVIDIA A100-SXM4-80GB"
    ]


def test_a_run_warns_and_compare_says_it(data_dir: Path) -> None:
    """The notes reach the user: ``run.warnings`` (the view's lines) for a capture whose clock
    moved, ``compare()``'s summary for runs under other clocks (meta.json's ``gpu_state``)."""
    from nsight_magic.reports.nsys.report import NsysReport
    from nsight_magic.results import NsysRun
    from nsight_magic.results.comparison import compare

    report = NsysReport.open(data_dir / "nsys_small.sqlite")
    moved = NsysRun(report, meta={"name": "m", "gpu_state": {"start": _state(),
                                                             "end": _state(sm=1200)}})  # fmt: skip
    assert any("SM clock moved" in w for w in moved.warnings)
    steady = NsysRun(report, meta={"name": "a", "gpu_state": {"start": _state(), "end": _state()}})
    assert not any("SM clock" in w for w in steady.warnings)
    other = NsysRun(report, meta={"name": "b", "gpu_state": {"start": _state(sm=1200),
                                                             "end": _state(sm=1200)}})  # fmt: skip
    summary = compare(steady, other).summary()
    assert summary.startswith("b: GPU time 1.00x") and "SM clock 1980 MHz in a" in summary


@pytest.mark.parametrize("missing", ["nvmlDeviceGetHandleByIndex"])
def test_a_failing_nvml_is_a_reason_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                 missing: str) -> None:  # fmt: skip
    """NVML that started but fails a query gives a state that says why (a cell never fails
    for it)."""
    broken = SimpleNamespace(nvmlDeviceGetCount=lambda: 1)
    monkeypatch.setattr(gpu_state, "_NVML", [broken])
    state = gpu_state.read_gpu_state()
    assert state["source"] == "none" and state["why"].startswith("NVML failed:")
    assert missing in state["why"]


def _reader(states: list[dict[str, Any]]) -> Any:
    """A reader that gives ``states`` one per call, then the last again."""
    given = list(states)

    def read() -> dict[str, Any]:
        return given.pop(0) if len(given) > 1 else given[0]

    return read


def test_settle_waits_until_the_gpus_are_cool(data_dir: Path) -> None:
    """``--settle``: the real readings (60 °C busy, then 31 °C idle), polled once a second."""
    import json

    real = json.loads((data_dir / "gpu_state.json").read_text())
    busy, idle = real["busy_end"], real["idle"]
    slept: list[float] = []
    done = gpu_state.settle(40, 300, read=_reader([busy, busy, idle]), sleep=slept.append)
    assert done.reached and done.hottest_c == 31 and slept == [1.0, 1.0]
    assert done.line() == "" and done.record()["reached"] is True
    # past its bound: the capture goes ahead, said why
    hot = gpu_state.settle(40, 0, read=_reader([busy]), sleep=slept.append)
    assert not hot.reached and hot.hottest_c == 60
    assert (
        hot.line()
        == "--settle 40: the capture began without it: the GPUs were still at 60 °C after 0 s"
    )
    # a cancel stops the wait
    import threading

    cancel = threading.Event()
    cancel.set()
    assert gpu_state.settle(40, 300, read=_reader([busy]), cancel=cancel,
                            sleep=slept.append).why == "cancelled"  # fmt: skip
    # no NVML: at once, with NVML's reason
    none = gpu_state.settle(
        40, 300, read=_reader([{"source": "none", "why": "NVML could not start: x"}])
    )
    assert not none.reached and none.waited_s < 1 and none.why == "NVML could not start: x"


def test_settle_in_a_profiled_cell_is_recorded_and_said(tmp_path: Path) -> None:
    """``CellRequest.settle_c`` in a real session run (the bare worker, this machine: no NVML):
    the run goes ahead at once, meta.json's ``settle`` says why, one line says it."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from session_support import BareBackend

    from nsight_magic.session.manager import SessionManager
    from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

    manager = SessionManager()
    out: list[str] = []
    try:
        result = manager.profile(
            CellRequest(cell="x = 1", runs_root=tmp_path / "runs", cwd=str(tmp_path),
                        settle_c=45.0),
            BareBackend(), notebook=Notebook(user_ns={}), callbacks=RunCallbacks(output=out.append),
        )  # fmt: skip
    finally:
        manager.shutdown()
    settle = result.meta["settle"]
    if gpu_state.read_gpu_state()["source"] == "nvml":  # pragma: no cover - a GPU machine
        assert settle["below_c"] == 45.0
        return
    assert settle["below_c"] == 45.0 and settle["reached"] is False and settle["waited_s"] < 5
    assert [line for line in out if "--settle 45" in line] == [
        f"nsight_magic: --settle 45: the capture began without it: {settle['why']}"
    ]
