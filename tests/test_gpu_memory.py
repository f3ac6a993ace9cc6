"""Where the GPU memory went (issue 37): nsys's allocation events and torch's allocator snapshot,
on real reports of a training step and an out-of-memory cell captured on an H100
(tests/data/README.md, "GPU memory"). The numbers are checked against the raw events read
straight from SQLite, nsys's own ``cuda_api_sum`` of the same report, an ungated capture of the
same workload and torch's own counters of the same run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis import gpu_memory
from nsight_magic.analysis import torch_memory as tm
from nsight_magic.errors import CorruptReportError, ReportNotFoundError
from nsight_magic.reports import open_report
from nsight_magic.reports.torch_memory import load_snapshot
from nsight_magic.results import NsysRun

DATA = Path(__file__).parent / "data"
MIB = 1 << 20
GIB = 1 << 30


def run_of(name: str, tmp_path: Path, meta: dict | None = None) -> NsysRun:
    return NsysRun(open_report(DATA / f"{name}.sqlite"), tmp_path, meta or {"name": name})


def torch_json(name: str) -> dict:
    return json.loads((DATA / f"torch_mem_{name}.json").read_text())


def raw_peak(path: Path) -> tuple[int, int, int]:
    """(bytes in use at the capture's start, the peak, in-use at the end) of the device-memory
    events, by a plain loop over the SQLite rows: kinds 2 (device), 3 (array), 5 (device
    static); time 0 = before the capture, ordered by correlation id; a free takes its
    alloc's size."""
    rows = (
        sqlite3.connect(path)
        .execute(
            "SELECT start, correlationId, memoryOperationType, address, bytes "
            "FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind IN (2, 3, 5) "
            "ORDER BY start, correlationId, memoryOperationType"
        )
        .fetchall()
    )
    live: dict[int, int] = {}
    use = start = peak = 0
    for t, _, op, address, size in rows:
        if op == 0:
            live[address] = size
            use += size
        else:
            use -= live.pop(address, size)
        if t == 0:
            start = use
        peak = max(peak, use)
    return start, peak, use


def test_events_are_read_with_their_kinds_and_the_history_before_the_gate(tmp_path: Path) -> None:
    events = run_of("nsys_mem_train", tmp_path).report.memory_events()
    assert len(events) == 1786  # the table's rows (memory_probe.txt)
    assert events["memory_kind"].value_counts().to_dict() == {
        "device_static": 1701, "device": 83, "pinned": 2}  # fmt: skip
    assert set(events["operation"]) == {"alloc", "free"}
    # the gated report holds what was allocated and freed before the gate, at time 0; the
    # ungated capture of the same workload has the same events (kind, operation, size)
    ungated = run_of("nsys_mem_train_ungated", tmp_path).report.memory_events()
    key = ["memory_kind", "operation", "bytes"]
    count = lambda f: f.groupby(key).size().sort_index()  # noqa: E731
    pd.testing.assert_series_equal(count(events), count(ungated))
    assert (events["time_ns"] == 0).sum() == 1764


def test_peak_equals_the_raw_events_and_torch_counts_of_the_same_run(tmp_path: Path) -> None:
    run = run_of("nsys_mem_train", tmp_path)
    summary = run.gpu_memory_summary()
    assert len(summary) == 1
    row = summary.iloc[0]
    start, peak, end = raw_peak(DATA / "nsys_mem_train.sqlite")
    assert (row["start_bytes"], row["peak_bytes"], row["end_bytes"]) == (start, peak, end)
    # nsys's own cuda_api_sum of this report: 11 cudaMalloc and 11 cudaFree in the capture
    api = pd.read_csv(DATA / "nsys_stats" / "nsys_mem_train_cuda_api_sum.csv").set_index("Name")
    assert row["allocations"] == api.loc["cudaMalloc", "Num Calls"] == 11
    assert row["frees"] == api.loc["cudaFree", "Num Calls"] == 11
    # torch's caching allocator of the same run: what it reserved from CUDA grew by exactly
    # what nsys saw allocated up to the peak, and the cell's empty_cache gave it all back
    t = torch_json("train")
    grew = t["end"]["reserved_bytes.all.peak"] - t["start"]["reserved_bytes.all.current"]
    assert row["peak_bytes"] - row["start_bytes"] == grew == 220_200_960
    assert row["end_bytes"] == row["start_bytes"]
    # the rest of the start is not torch's: CUDA module globals (device static) and others
    assert row["start_bytes"] > t["start"]["reserved_bytes.all.current"]
    assert row["statement"] == "L8: lr_table = torch.zeros(16 << 20, device=dev)"
    assert row["pid"] == t["pid"]
    # the timeline: one start row, then the capture's events in time order, never negative
    timeline = run.gpu_memory()
    assert timeline["operation"].iloc[0] == gpu_memory.BEFORE_CAPTURE
    assert timeline["bytes_in_use"].iloc[0] == start
    assert timeline["time_ns"].is_monotonic_increasing
    assert (timeline["bytes_in_use"] >= 0).all()
    assert timeline["bytes_in_use"].max() == peak
    assert len(timeline) == 1 + 22


def test_the_ungated_capture_agrees_at_the_cells_start_and_peak(tmp_path: Path) -> None:
    """A second process of the same workload, captured whole: at the moment its cell started
    it held what the gated report says was in use at the gate, and the cell's peak is equal."""
    gated = run_of("nsys_mem_train", tmp_path).gpu_memory_summary().iloc[0]
    run = run_of("nsys_mem_train_ungated", tmp_path)
    nvtx = run.nvtx()
    cell = nvtx[(nvtx["domain"] == "nsight_magic") & (nvtx["range"] == "cell")].iloc[0]
    timeline = run.gpu_memory()
    before = timeline[timeline["time_ns"] <= cell["start_ns"]]
    inside = timeline[timeline["time_ns"].between(cell["start_ns"], cell["end_ns"])]
    assert before["bytes_in_use"].iloc[-1] == gated["start_bytes"]
    assert inside["bytes_in_use"].max() == gated["peak_bytes"]


def test_out_of_memory_report_ends_at_what_torch_held_at_the_error(tmp_path: Path) -> None:
    row = run_of("nsys_mem_oom", tmp_path).gpu_memory_summary().iloc[0]
    t = torch_json("oom")
    assert row["start_bytes"] == 2 * GIB  # the setup cell's weights
    assert row["allocations"] == t["blocks"] == 17 and row["frees"] == 0
    assert row["peak_bytes"] == row["end_bytes"] == t["at_oom"]["reserved_bytes.all.current"]
    assert row["statement"] == "L2: while True: ..."


def test_a_report_without_memory_events_gives_empty_frames_and_says_how(tmp_path: Path) -> None:
    run = run_of("nsys_small", tmp_path)
    assert run.gpu_memory().empty and run.gpu_memory_summary().empty
    assert list(run.gpu_memory().columns) == gpu_memory.MEMORY_TIMELINE_COLUMNS
    assert run.torch_memory().empty and run.torch_allocations().empty
    from nsight_magic.results.memory_frames import no_memory_note

    assert "--memory" in no_memory_note() and "--cuda-memory-usage=true" in no_memory_note()


def test_torch_snapshot_at_the_oom_holds_what_torch_counted(tmp_path: Path) -> None:
    snap = load_snapshot(DATA / "torch_mem_oom.pickle")
    live, facts = tm.live_at(snap.events(), snap.blocks(), 0, at="oom")
    t = torch_json("oom")
    assert facts["at"] == "oom" and facts["requested_bytes"] == 4 * GIB
    assert (
        facts["bytes_in_use"] == live["bytes"].sum() == t["at_oom"]["allocated_bytes.all.current"]
    )
    lines = tm.by_line(live)
    assert lines[["cell_line", "count", "bytes"]].values.tolist() == [
        ["cell L3", 17, 17 * 4 * GIB], ["setup 'weights' L2", 1, 2 * GIB]]  # fmt: skip


def test_torch_snapshot_peak_of_a_training_step(tmp_path: Path) -> None:
    snap = load_snapshot(DATA / "torch_mem_train.pickle")
    events, blocks = snap.events(), snap.blocks()
    live, facts = tm.live_at(events, blocks, 0)
    t = torch_json("train")
    # alive when the cell started (no alloc in the history): what they asked for is torch's
    # allocated bytes then (whole blocks) less at most 512 B of rounding each
    start = tm.allocated_timeline(events, blocks, 0)
    first = start["bytes_in_use"].iloc[0] - (events["bytes"].iloc[0])
    before = live[live["before_cell"]]
    rounding = t["start"]["allocated_bytes.all.current"] - first
    assert first == before["bytes"].sum() and 0 <= rounding < 512 * len(before)
    # the peak of what the tensors asked for is at most torch's allocated peak (whole blocks),
    # less by no more than one unsplit block's slack (1 MiB) plus 512 B rounding per tensor
    slack = torch_json("train")["end"]["allocated_bytes.all.peak"] - facts["bytes_in_use"]
    assert 0 <= slack <= MIB + 512 * len(live)
    assert facts["bytes_in_use"] == live["bytes"].sum() == start["bytes_in_use"].max()
    lines = tm.by_line(live)
    assert lines["cell_line"].iloc[0] == tm.BEFORE_CELL  # the model and AdamW state
    assert "cell L2" in set(lines["cell_line"])  # the forward statement's activations
    assert tm.NO_PYTHON in set(lines["cell_line"])  # autograd's thread has no Python stack
    assert (
        live["before_cell"].sum()
        == (live["cell_line"] == "").sum()
        - (lines.set_index("cell_line").loc[tm.NO_PYTHON, "count"])
    )


def test_snapshot_reader_refuses_what_is_not_plain_data(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError, match="--memory"):
        load_snapshot(tmp_path / "none.pickle")
    evil = tmp_path / "evil.pickle"
    import pickle

    evil.write_bytes(pickle.dumps(np.zeros(3)))  # any class is refused, numpy's too
    with pytest.raises(CorruptReportError, match="not a PyTorch allocator snapshot"):
        load_snapshot(evil)
    plain = tmp_path / "plain.pickle"
    plain.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CorruptReportError, match="no allocator snapshot"):
        load_snapshot(plain)


def test_run_reads_torch_counts_and_snapshot_from_its_status_and_folder(tmp_path: Path) -> None:
    t = torch_json("train")
    status = {"torch_memory": {
        "allocated_start": t["start"]["allocated_bytes.all.current"],
        "reserved_start": t["start"]["reserved_bytes.all.current"],
        "allocated_peak": t["end"]["allocated_bytes.all.peak"],
        "reserved_peak": t["end"]["reserved_bytes.all.peak"],
        "allocated_end": t["end"]["allocated_bytes.all.current"],
        "reserved_end": t["end"]["reserved_bytes.all.current"],
        "device": 0, "pid": t["pid"], "snapshot": "torch_memory.pickle"}}  # fmt: skip
    (tmp_path / "torch_memory.pickle").write_bytes((DATA / "torch_mem_train.pickle").read_bytes())
    run = run_of("nsys_mem_train", tmp_path, {"name": "x", "cell_status": status})
    counts = run.torch_memory().set_index("moment")
    assert counts.loc["peak", "reserved_bytes"] == 421_527_552
    allocations = run.torch_allocations()
    assert allocations["bytes"].is_monotonic_decreasing and len(allocations) > 100
    with pytest.raises(Exception, match="peak"):
        run.torch_allocations(at="later")


# --- an out-of-memory cell explains itself (issue 37 item 3) ---------------------------------
# the fixture's cell (tools/fixtures/memory_workloads.py CELL_OOM)
OOM_CELL = "blocks = []\nwhile True:\n    blocks.append(torch.empty(4 << 30, dtype=torch.uint8))\n"


def oom_status() -> dict:
    """The status the worker reports for the fixture's cell: torch's real message, the
    traceback's last cell frame (line 3) as the runtime writes it in cell coordinates."""
    t = torch_json("oom")
    return {"status": "error", "exc_type": t["error_type"], "exc_message": t["message"],
            "traceback": 'Traceback (most recent call last):\n  File "<nsight_magic cell>", '
                         "line 3, in <module>\ntorch.OutOfMemoryError: CUDA out of memory.",
            "torch_memory": {"pid": t["pid"], "device": 0}}  # fmt: skip


def test_torch_oom_message_is_read_per_process() -> None:
    from nsight_magic.analysis.oom import is_oom, parse_oom_message

    t = torch_json("oom")
    facts = parse_oom_message(t["message"])
    assert facts.tried_bytes == 4 * GIB and facts.device == 0
    assert facts.others == {3972: round(6.51 * GIB)}  # the "notebook" process of the fixture
    assert facts.torch_allocated_bytes == 70 * GIB == t["at_oom"]["allocated_bytes.all.current"]
    assert facts.torch_cached_bytes == 0
    assert is_oom("OutOfMemoryError", "") and not is_oom("ValueError", "bad shape")


def test_oom_explanation_names_holders_lines_and_fix(tmp_path: Path) -> None:
    from nsight_magic.results.memory_frames import oom_explanation

    names = {3972: "the notebook (pid 3972)", 4037: "this nsys worker (pid 4037)"}
    (tmp_path / "torch_memory.pickle").write_bytes((DATA / "torch_mem_oom.pickle").read_bytes())
    text = oom_explanation(oom_status(), tmp_path, OOM_CELL, names)
    assert "Out of GPU memory in cell L3 `blocks.append(" in text
    assert "asked for 4.00 GiB with 2.13 GiB free of 79.18 GiB (GPU 0)" in text
    own = "this nsys worker (pid 4037): 70.53 GiB of its own (PyTorch: 70.00 GiB in tensors"
    assert own in text
    assert "it also maps" not in text  # the run did not list what it mapped
    assert "the notebook (pid 3972): 6.51 GiB" in text
    assert "68.00 GiB in 17 tensors: cell L3" in text and "2.00 GiB: setup 'weights' L2" in text
    assert "free GPU memory in the notebook" in text  # it holds more than the 4 GiB asked
    assert "68.00 GiB made at cell L3" in text
    # a run without the snapshot says how to get the lines; a worker of ours gets a stop hint
    names[3972] = "the ncu worker (pid 3972)"
    text = oom_explanation(oom_status(), tmp_path / "none", OOM_CELL, names)
    assert "%%nsys --memory to see which lines" in text
    assert "stop the ncu worker (pid 3972), which holds 6.51 GiB (%nsight_session stop" in text
    # any other error: nothing added
    assert oom_explanation({"exc_type": "ValueError", "exc_message": "x"}, None, "", {}) == ""


def test_oom_explanation_tells_what_the_worker_maps_from_its_own(tmp_path: Path) -> None:
    """Issue 41 item 6: a worker that raised says what it owns and, apart, the notebook's
    memory it maps (the runtime lists it in the status of a failed cell), which torch's
    per-process count leaves out and the notebook's line holds."""
    from nsight_magic.results.memory_frames import oom_explanation

    names = {3972: "the notebook (pid 3972)", 4037: "this nsys worker (pid 4037)"}
    segments = [[0, 1 << 40, 40 * GIB], [0, 1 << 41, 3 * GIB]]
    status = {**oom_status(), "mapped": {"pid": 4037, "segments": segments}}
    text = oom_explanation(status, tmp_path, OOM_CELL, names)
    assert ("this nsys worker (pid 4037): 70.53 GiB of its own (PyTorch: 70.00 GiB in tensors, "
            "0 B cached); it also maps 43.00 GiB of the notebook's tensors, counted in the "
            "notebook's process") in text  # fmt: skip


def test_failed_cell_message_carries_the_explanation(tmp_path: Path) -> None:
    from nsight_magic.session.runs.pipeline import cell_failed

    err = cell_failed(oom_status(), tmp_path, None, "Out of GPU memory in cell L3")
    assert "OutOfMemoryError: CUDA out of memory" in str(err)
    assert str(err).index("Out of GPU memory in cell L3") < str(err).index("(run folder:")


def test_a_named_cell_and_a_snapshot_without_history(tmp_path: Path) -> None:
    """Seen on the GPU (warm worker, `%%nsys --memory --name oom` after a setup cell that only
    imported torch): the traceback names the cell by its run name, and the snapshot held no
    history (CUDA was not initialised when the cell started). The line is still found, and no
    tensor is called "before the cell" for want of a history."""
    from nsight_magic.results.memory_frames import oom_explanation

    status = oom_status()
    status["traceback"] = status["traceback"].replace("<nsight_magic cell>", "<nsight_magic oom>")
    snap = load_snapshot(DATA / "torch_mem_oom.pickle").data
    import pickle

    # the fixture's snapshot less its history: what a history that never started leaves
    (tmp_path / "torch_memory.pickle").write_bytes(pickle.dumps({**snap, "device_traces": [[]]}))
    text = oom_explanation(status, tmp_path, OOM_CELL, {})
    assert "Out of GPU memory in cell L3" in text
    assert "before the cell" not in text and "history of this cell is empty" in text
    # a replayed setup cell's frame is not the profiled cell's line
    status["traceback"] = 'File "<nsight_magic setup 1: data>", line 7, in <module>'
    assert "Out of GPU memory:" in oom_explanation(status, None, OOM_CELL, {})


def test_torch_memory_measures_nothing_without_cuda(tmp_path: Path) -> None:
    """The script's TorchMemory in a process whose torch has no GPU (this machine): no fields,
    no snapshot file, and CUDA is not initialised by measuring."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU tests cover it")
    from nsight_magic.script.torch_memory import TorchMemory

    with TorchMemory(str(tmp_path), history=True) as memory:
        torch.zeros(4)
    assert memory.fields() == {} and list(tmp_path.iterdir()) == []
    assert not torch.cuda.is_initialized()


def test_memory_option_reaches_nsys_profile_and_a_warm_launch() -> None:
    """--memory adds --cuda-memory-usage=true to a fresh run's `nsys profile` (measured on the
    H100: the warm `nsys launch` takes it too, test_e2e_memory.py); a warm worker records the
    allocations for every cell, so a --memory cell runs in the same worker as the others."""
    from nsight_magic.profilers.nsys import NsysOptions, launch_argv, profile_argv

    on, off = NsysOptions(memory=True), NsysOptions()
    assert "--cuda-memory-usage=true" in profile_argv("nsys", "r", ["python", "s.py"], options=on)
    assert not any("memory" in a for a in profile_argv("nsys", "r", ["python"], options=off))
    for options in (on, off):
        assert "--cuda-memory-usage=true" in launch_argv("nsys", "s", ["python", "w.py"],
                                                         options.warm())  # fmt: skip
    assert on.warm() == off.warm()  # one warm worker's launch key for both
