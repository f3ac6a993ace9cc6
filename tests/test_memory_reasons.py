"""Never a silent blank in the memory frames (issue 42, item 6): a run captured without
``--memory`` (every bundled example, most saved runs) gives empty memory frames that say why
and what to do, in ``attrs["reason"]`` and as an ``EmptyResultWarning``; the Memory tab's
static form shows it. The bundled ``--memory`` training run, once captured, fills them."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from nsight_magic import examples
from nsight_magic.errors import EmptyResultWarning
from nsight_magic.reports import open_report
from nsight_magic.results.nsys_run import NsysRun

DATA = Path(__file__).parent / "data"
MEMORY_FRAMES = ("gpu_memory", "gpu_memory_summary", "torch_memory", "torch_allocations")


def _frames(run: NsysRun) -> dict[str, tuple[object, list[str]]]:
    out = {}
    for name in MEMORY_FRAMES:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            frame = getattr(run, name)()
        out[name] = (frame, [str(w.message) for w in seen if w.category is EmptyResultWarning])
    return out


@pytest.mark.parametrize("example", ["tour", "llm_prefill", "attention_sdpa"])
def test_a_bundled_run_without_memory_says_why_each_memory_frame_is_empty(example: str) -> None:
    run = examples._nsys(example, example)
    for name, (frame, warned) in _frames(run).items():
        assert frame.empty, name  # type: ignore[attr-defined]
        reason = frame.attrs.get("reason", "")  # type: ignore[attr-defined]
        assert "%%nsys --memory" in reason, (name, reason)
        assert warned == [f"{name}() is empty: {reason}"]
    assert "without --memory" in run.gpu_memory_summary().attrs["reason"]


def test_the_static_memory_part_shows_the_reasons() -> None:
    from nsight_magic.views.memory_view import torch_html

    run = examples.tour()
    part = re.sub(r"<[^>]+>", "", torch_html(run.frames))
    assert "no PyTorch memory counts" in part and "load_run" in part


def test_a_saved_run_with_memory_warns_nothing_and_a_run_without_a_snapshot_says_so(
    tmp_path: Path,
) -> None:
    folder = DATA / "mem_run_train"
    status = json.loads((folder / "status.json").read_text())
    meta = {"name": "train", "cell_status": status, "options": {"memory": True}}
    run = NsysRun(open_report(folder / "report.sqlite"), folder, meta)
    for name, (frame, warned) in _frames(run).items():
        assert not frame.empty and not warned, name  # type: ignore[attr-defined]
    # the same run's report and counts, its snapshot missing from the folder
    bare = NsysRun(open_report(folder / "report.sqlite"), tmp_path, meta)
    frame, warned = _frames(bare)["torch_allocations"]
    assert "No allocator snapshot in the run folder" in frame.attrs["reason"]  # type: ignore[attr-defined]
    assert len(warned) == 1


def test_the_bundled_memory_example_fills_the_memory_frames() -> None:
    if not examples.has_memory_example():
        pytest.skip(
            "the --memory example is not captured yet: tools/fixtures/capture_memory_example.sh "
            "on the GPU writes nsight_magic/example_data/memory_train/"
        )
    run = examples.memory()
    assert "memory" in examples.available()
    for name, (frame, warned) in _frames(run).items():
        assert not frame.empty and not warned, name  # type: ignore[attr-defined]
    assert run.meta["options"]["memory"] is True
    text = re.sub(r"<[^>]+>", "", run.to_html())
    assert "Largest tensors at PyTorch" in text and "cell L" in text


def test_an_allocation_without_a_python_stack_says_so_in_torch_allocations() -> None:
    """docs/memory.md: allocations autograd's backward thread made have no Python stack and
    say so. by_line said it; torch_allocations() left those rows blank (frame, cell_line and
    backtrace "", before_cell False)."""
    from nsight_magic.analysis.torch_memory import NO_PYTHON

    if not examples.has_memory_example():
        pytest.skip("the --memory example is not captured yet")
    live = examples.memory().torch_allocations()
    stackless = live[(live["backtrace"] == "") & ~live["before_cell"]]
    assert len(stackless) and set(stackless["frame"]) == {NO_PYTHON}
    blank = (live["frame"] == "") & ~live["before_cell"]
    assert not blank.any()
    assert (live.loc[live["backtrace"] != "", "frame"] != NO_PYTHON).all()


@pytest.mark.parametrize("status", ["ok", "error"])
def test_a_warm_run_that_did_not_ask_memory_shows_none_unless_it_failed(status: str) -> None:
    """A warm worker records allocations for every cell (one worker for --memory and the
    rest): a run that did not ask shows none, as before; a failed one keeps them (an
    out-of-memory cell is explained with them). The real --memory run, its meta changed."""
    folder = DATA / "mem_run_train"
    cell_status = {**json.loads((folder / "status.json").read_text()), "status": status}
    meta = {"name": "train", "cell_status": cell_status, "options": {"memory": False}}
    run = NsysRun(open_report(folder / "report.sqlite"), folder, meta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyResultWarning)
        summary, timeline = run.gpu_memory_summary(), run.gpu_memory()
    if status == "ok":
        assert summary.empty and timeline.empty
        assert "without --memory" in summary.attrs["reason"]
    else:
        assert not summary.empty and not timeline.empty
