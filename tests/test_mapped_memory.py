"""Memory told per process, own vs mapped (issue 41, item 6), on the bundled ``--memory``
training step (captured on the H200 in a warm worker that mapped the notebook's model, batch
and targets: tools/fixtures/memory_example.py). nsys records each CUDA IPC mapping as an
allocation of the worker; the worker lists the notebook's storages it opened, and the memory
frames give those apart (``mapped_bytes``) and leave them out of the worker's own numbers. The
expected figures are read here from the raw parquet export and the status file, not from the
package."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd

from nsight_magic import examples
from nsight_magic.analysis.gpu_memory import MappedMemory
from nsight_magic.results.nsys_run import NsysRun


def _raw(run: NsysRun) -> tuple[pd.DataFrame, dict]:
    folder = run.run_dir
    events = pd.read_parquet(folder / "report_pq" / "CUDA_GPU_MEMORY_USAGE_EVENTS.parquet")
    status = json.loads((folder / "status.json").read_text())
    return events, status


def _mapped_events(events: pd.DataFrame, status: dict) -> pd.Series:
    """Allocations made before the capture (nsys gives them time 0) whose range holds a pointer
    the worker listed as the notebook's."""
    ptrs = [p for _, p, _ in status["mapped"]["segments"]]
    before = events["start"] == 0
    holds = events.apply(
        lambda e: any(e["address"] <= p < e["address"] + e["bytes"] for p in ptrs), axis=1
    )
    return before & holds


def test_the_summary_gives_the_notebooks_mapped_memory_apart_from_the_workers_own() -> None:
    run = examples.memory()
    events, status = _raw(run)
    mapped = _mapped_events(events, status)
    assert mapped.sum() == 4 and len(status["mapped"]["segments"]) == 6  # 6 storages, 4 segments
    summary = run.gpu_memory_summary()
    (row,) = summary.to_dict("records")
    assert row["pid"] == status["mapped"]["pid"]
    assert row["mapped_bytes"] == int(events.loc[mapped, "bytes"].sum()) == 37_748_736
    own_before = int(events.loc[(events["start"] == 0) & ~mapped, "bytes"].sum())
    assert row["start_bytes"] == own_before == 0  # the worker held nothing of its own then
    own = int(events.loc[~mapped, "bytes"].sum())  # no frees in this step: every byte stays
    assert (events["memoryOperationType"] == 0).all()
    assert row["peak_bytes"] == row["end_bytes"] == own
    timeline = run.gpu_memory()
    assert not set(events.loc[mapped, "address"]) & set(timeline["address"])
    assert timeline["bytes_in_use"].iloc[0] == 0


def test_a_run_that_does_not_say_what_it_mapped_counts_everything_and_says_not_known() -> None:
    """A report opened without the worker's list (an older run folder): mapped_bytes is <NA>
    (not known, never a 0 that would read as "nothing mapped"), the numbers as nsys gives them."""
    run = examples.memory()
    events, _ = _raw(run)
    meta = copy.deepcopy(dict(run.meta))
    meta["cell_status"].pop("mapped")
    bare = NsysRun(run.report, run.run_dir, meta)
    summary = bare.gpu_memory_summary()
    assert summary["mapped_bytes"].isna().all() and str(summary["mapped_bytes"].dtype) == "Int64"
    (row,) = summary.to_dict("records")
    assert row["start_bytes"] == int(events.loc[events["start"] == 0, "bytes"].sum())
    assert row["end_bytes"] == int(events["bytes"].sum())


def test_mapped_memory_from_a_status_takes_only_what_it_can_read() -> None:
    assert MappedMemory.from_status(None) is None
    assert MappedMemory.from_status({"mapped": [1, 2]}) is None
    assert MappedMemory.from_status({"mapped": {"pid": "7"}}) is None
    got = MappedMemory.from_status({"mapped": {"pid": 7, "segments": [[0, 10, 4], [0, "x", 1],
                                                                        [1, 20]]}})  # fmt: skip
    assert got == MappedMemory(7, ((0, 10, 4),))
    frame = pd.DataFrame({"pid": [7, 7, 8, 7], "operation": ["alloc", "free", "alloc", "alloc"],
                          "address": [8, 8, 8, 100], "bytes": [4, 4, 4, 4],
                          "device_id": [0, 0, 0, 0]})  # fmt: skip
    # the allocation at 8..12 holds pointer 10, its free is the mapping's close; another
    # process's allocation at the same address is its own
    assert np.array_equal(got.flags(frame), [True, True, False, False])


def test_the_memory_tab_shows_the_mapped_column_only_where_it_is_known() -> None:
    import html
    import re

    run = examples.memory()
    text = html.unescape(re.sub(r"<[^>]+>", " ", run.to_html()))
    assert "the notebook's, mapped" in text and "37.75 MB" in text
    meta = copy.deepcopy(dict(run.meta))
    meta["cell_status"].pop("mapped")
    bare = NsysRun(run.report, run.run_dir, meta)
    assert "the notebook's, mapped" not in html.unescape(bare.to_html())
