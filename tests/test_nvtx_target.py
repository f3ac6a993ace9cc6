"""%%ncu --nvtx NAME: the cell script marks the ranges NAME names, in any domain, as they open
(script/range_recorder.py), so ncu's filter is one range of ours. Tested with the real ``nvtx``
package (no profiler attached: its calls do nothing) and spies on the marker, then in the real
worker, warm and fresh (tests/session_support.py)."""

from __future__ import annotations

import runpy
import textwrap
import threading
from pathlib import Path

import nvtx
import pytest
from session_support import BareBackend, script_for

from nsight_magic.errors import NothingCapturedError
from nsight_magic.profilers import ncu as ncu_argv
from nsight_magic.session.backends import NcuBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks


@pytest.fixture(scope="module")
def recorder_class(tmp_path_factory: pytest.TempPathFactory) -> type:
    path = tmp_path_factory.mktemp("script") / "script.py"
    path.write_text(script_for("x = 1", gate="ncu", nvtx_target="unused"))
    return runpy.run_path(str(path), run_name="nsight_magic_cell")["RangeRecorder"]


def record(recorder_class: type, target: str, body) -> tuple[list, dict, list]:  # type: ignore[no-untyped-def]
    """Run ``body`` (user NVTX calls) under a recorder for ``target``; the marker's opens and
    closes in order, its status, and the ranges it saw."""
    events: list[tuple[str, int]] = []
    ids = iter(range(1, 1000))
    recorder = recorder_class(target)
    with recorder:

        def open_marker(message: str, domain: str) -> int:
            assert (message, domain) == ("nvtx-target", "nsight_magic")
            marker = next(ids)
            events.append(("open", marker))
            return marker

        recorder.open_marker = open_marker
        recorder.close_marker = lambda marker: events.append(("close", marker))
        body()
    return events, recorder.target_status(), recorder.ranges()


def test_a_bare_name_is_found_in_its_domain_and_marked_once_per_opening(recorder_class):
    def body() -> None:
        generate = nvtx.start_range("generate", domain="LLM")
        for _ in range(2):
            with nvtx.annotate("LLM@prefill", domain="LLM"), nvtx.annotate("inner", domain="LLM"):
                pass
        nvtx.end_range(generate)

    events, status, ranges = record(recorder_class, "LLM@prefill", body)
    assert events == [("open", 1), ("close", 1), ("open", 2), ("close", 2)]
    assert status == {"spec": "LLM@prefill", "matched": [["LLM", "LLM@prefill", "PushPop"]],
                      "opened": 2}  # fmt: skip
    assert ranges == [["LLM", "generate", "StartEnd"], ["LLM", "LLM@prefill", "PushPop"],
                      ["LLM", "inner", "PushPop"]]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "opened"),
    [("LLM:LLM@prefill", 1), ("LLM:LLM@prefill (PushPop)", 1), (":LLM@prefill", 0),
     ("LLM@prefill", 1), ("LLM:generate", 1), ("generate", 1), ("prefill", 0), ("LLM", 0)],
)  # fmt: skip
def test_every_documented_spelling(recorder_class, spec: str, opened: int) -> None:
    def body() -> None:
        generate = nvtx.start_range("generate", domain="LLM")
        with nvtx.annotate("LLM@prefill", domain="LLM"):
            pass
        nvtx.end_range(generate)

    events, status, _ = record(recorder_class, spec, body)
    assert status["opened"] == opened and len(events) == 2 * opened


def test_push_pop_nesting_same_name_and_other_domains_close_the_right_marker(recorder_class):
    def body() -> None:
        nvtx.push_range("step[0]*(1+2)?", domain="x.y")  # regex characters: plain text
        nvtx.push_range("other", domain="x.y")
        nvtx.push_range("step[0]*(1+2)?", domain="x.y")  # the same name nested in itself
        nvtx.push_range("a:b")  # default domain, its own stack
        nvtx.pop_range()
        nvtx.pop_range(domain="x.y")  # closes the inner marker
        nvtx.pop_range(domain="x.y")  # "other": no marker
        nvtx.pop_range(domain="x.y")  # the outer marker

    events, status, _ = record(recorder_class, "step[0]*(1+2)?", body)
    assert events == [("open", 1), ("open", 2), ("close", 2), ("close", 1)]
    assert status["matched"] == [["x.y", "step[0]*(1+2)?", "PushPop"]]
    events, status, _ = record(recorder_class, ":a:b", body)
    assert events == [("open", 1), ("close", 1)] and status["opened"] == 1


def test_a_name_in_two_domains_and_both_styles_is_marked_everywhere(recorder_class):
    def body() -> None:
        with nvtx.annotate("decode", domain="LLM"):
            pass
        with nvtx.annotate("decode"):
            pass
        handle = nvtx.start_range("decode", domain="LLM")
        nvtx.end_range(handle)

    events, status, _ = record(recorder_class, "decode", body)
    assert len(events) == 6 and status["opened"] == 3
    assert status["matched"] == [["LLM", "decode", "PushPop"], ["", "decode", "PushPop"],
                                 ["LLM", "decode", "StartEnd"]]  # fmt: skip
    events, status, _ = record(recorder_class, "LLM:decode (StartEnd)", body)
    assert status["matched"] == [["LLM", "decode", "StartEnd"]] and len(events) == 2


def test_threads_exceptions_and_ranges_left_open(recorder_class):
    def body() -> None:
        def worker() -> None:  # a thread's push/pop stack is its own
            with nvtx.annotate("t", domain="D"):
                pass

        nvtx.push_range("t", domain="D")
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        nvtx.pop_range(domain="D")
        with pytest.raises(ValueError), nvtx.annotate("t", domain="D"):
            raise ValueError("the cell raised inside the range")
        nvtx.start_range("t", domain="D")  # never ended: closed when the capture ends
        nvtx.push_range("t", domain="D")  # never popped: likewise

    events, status, _ = record(recorder_class, "D:t", body)
    opened = [m for kind, m in events if kind == "open"]
    closed = [m for kind, m in events if kind == "close"]
    assert status["opened"] == 5 and sorted(closed) == opened == [1, 2, 3, 4, 5]
    assert events[:4] == [("open", 1), ("open", 2), ("close", 2), ("close", 1)]
    # the wrappers are gone once the capture ended
    assert nvtx.push_range.__module__ == "nvtx.nvtx"


def test_no_target_marks_nothing_and_our_own_ranges_are_not_listed(recorder_class):
    def body() -> None:
        with nvtx.annotate("cell", domain="nsight_magic"), nvtx.annotate("user"):
            pass

    events, _, ranges = record(recorder_class, None, body)  # type: ignore[arg-type]
    assert events == [] and ranges == [["", "user", "PushPop"]]
    # a statement label names one of our own statement ranges: it can be the target
    events, _, _ = record(recorder_class, "nsight_magic:cell", body)
    assert len(events) == 2


def test_under_ncu_the_innermost_user_range_of_the_process_is_mirrored_as_one_phase(
    recorder_class,
):
    """ncu records push/pop ranges per thread: a backward kernel autograd launches sees none of
    the main thread's ``train@bwd``. The recorder keeps ONE start/end range of the phase
    domain open (start/end ranges belong to the process), named by the innermost user range
    open in the process, whichever thread opened it; our own ranges never name a phase."""
    events: list[tuple[str, object]] = []
    ids = iter(range(1, 1000))
    recorder = recorder_class(None, phases=True)
    with recorder:

        def open_marker(message: str, domain: str) -> int:
            assert domain == "nsight_magic.phase"
            marker = next(ids)
            events.append(("open", message))
            names[marker] = message
            return marker

        names: dict[int, str] = {}
        recorder.open_marker = open_marker
        recorder.close_marker = lambda marker: events.append(("close", names[marker]))
        step = nvtx.start_range("train@step", domain="train")
        with nvtx.annotate("cell", domain="nsight_magic"):  # ours: no phase of its own
            with nvtx.annotate("train@fwd", domain="train"):
                pass
            seen: list[list[str]] = []
            with nvtx.annotate("train@bwd", domain="train"):
                # autograd's thread: it opens nothing, and the phase is still train@bwd
                thread = threading.Thread(target=lambda: seen.append(list(recorder.open_user)))
                thread.start()
                thread.join()
                torch_like = threading.Thread(  # a thread's own range is the newest: inner
                    target=lambda: nvtx.push_range("load", domain="data") or nvtx.pop_range(
                        domain="data"))  # fmt: skip
                torch_like.start()
                torch_like.join()
        nvtx.end_range(step)
        nvtx.push_range("left open")  # closed with the capture: its mirror too
    assert [label for _, label in seen[0]] == ["train:train@step", "train:train@bwd"]
    assert events == [
        ("open", "train:train@step"), ("close", "train:train@step"),
        ("open", "train:train@fwd"), ("close", "train:train@fwd"),
        ("open", "train:train@step"), ("close", "train:train@step"),
        ("open", "train:train@bwd"), ("close", "train:train@bwd"),
        ("open", "data:load"), ("close", "data:load"),
        ("open", "train:train@bwd"), ("close", "train:train@bwd"),
        ("open", "train:train@step"), ("close", "train:train@step"),
        ("open", ":left open"), ("close", ":left open"),
    ]  # fmt: skip
    nvtx.pop_range()


def test_without_ncu_no_phase_is_mirrored(recorder_class):
    recorder = recorder_class(None)
    with recorder:
        recorder.open_marker = lambda *a, **k: pytest.fail("no phase without ncu")
        with nvtx.annotate("train@fwd", domain="train"):
            pass
    assert recorder.open_user == []


def test_the_ncu_filter_is_the_marker_and_the_message_names_the_users_range() -> None:
    options = ncu_argv.NcuOptions(nvtx_target="LLM@prefill", launch_count=3)
    args = options.filter_args()
    assert args[:2] == ["--nvtx-include", "nsight_magic@nvtx-target"]
    assert options.describe_filter() == "the filter --nvtx 'LLM@prefill' --launch-count '3'"
    assert NcuBackend(options).script_args() == {"nvtx_target": "LLM@prefill"}
    assert NcuBackend().script_args() == {} and NcuBackend().options.filter_args()[:2] == [
        "--nvtx-include", "nsight_magic@capture"]  # fmt: skip


# --- in the real worker ---------------------------------------------------------------------

LLM_CELL = """\
import nvtx
generate = nvtx.start_range("generate", domain="LLM")
with nvtx.annotate("LLM@prefill", domain="LLM"):
    x = 1
with nvtx.annotate("decode", domain="LLM"):
    y = 2
nvtx.end_range(generate)
"""


@pytest.fixture
def manager():
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _profile(manager: SessionManager, tmp_path: Path, cell: str, target: str, **kw):  # type: ignore[no-untyped-def]
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), **kw)  # fmt: skip
    return manager.profile(request, BareBackend("ncu", nvtx_target=target),
                           notebook=manager.notebook, callbacks=RunCallbacks())  # fmt: skip


@pytest.mark.parametrize("fresh", [False, True])
def test_the_first_profiled_cell_finds_a_bare_name_in_its_domain(manager, tmp_path, fresh):
    """The reported failure: `%%ncu --nvtx LLM@prefill` as the first profiled cell, warm and
    --fresh. No earlier run: the script itself found the range in domain LLM."""
    run = _profile(manager, tmp_path, LLM_CELL, "LLM@prefill", fresh=fresh)
    assert run.meta["mode"] == ("fresh" if fresh else "warm")
    assert run.report["target"] == {"spec": "LLM@prefill", "opened": 1,
                                    "matched": [["LLM", "LLM@prefill", "PushPop"]]}  # fmt: skip
    assert "NVTX_TARGET = 'LLM@prefill'" in (run.run_dir / "script.py").read_text()


def test_nothing_matched_says_what_the_cell_opened_and_how_to_spell_it(manager, tmp_path):
    run = _profile(manager, tmp_path, LLM_CELL, "prefil")
    status = dict(run.report)
    assert status["target"]["opened"] == 0
    backend = NcuBackend(ncu_argv.NcuOptions(nvtx_target="prefil", launch_count=3))
    with pytest.raises(NothingCapturedError) as info:
        backend.check_captured(None, status, run.run_dir)
    message = str(info.value)
    assert message.startswith("Nothing was captured: no kernel launch matched the filter "
                              "--nvtx 'prefil' --launch-count '3'. The cell opened no range "
                              "named 'prefil'; it opened ")  # fmt: skip
    assert "'LLM:LLM@prefill (PushPop)'" in message and "Use --nvtx 'LLM:LLM@prefill'." in message


def test_the_mark_is_not_a_range_of_the_workload_in_range_hfu(ncu_reports) -> None:
    """ncu lists the start/end mark around each launch it selected; range HFU leaves it out.
    CONSTRUCTED: the mark's rows are added here to a real report's ranges (no ncu fixture was
    captured with --nvtx yet), as ncu lists a start/end range: same launch, our domain."""
    import pandas as pd

    from nsight_magic.analysis.range_mfu import range_utilisation
    from nsight_magic.reports.ncu.report import NcuReport
    from nsight_magic.vocabulary.nvtx_names import NVTX_DOMAIN, TARGET_RANGE

    gemm = NcuReport.open(ncu_reports["ncu_gemm_metrics"])
    ranges = gemm.nvtx_ranges()
    mark = pd.DataFrame({"launch": sorted(set(ranges["launch"])), "domain": NVTX_DOMAIN,
                         "range": TARGET_RANGE, "style": "StartEnd", "level": 0})  # fmt: skip
    plain = range_utilisation(gemm.roofline(), ranges, gpu_name="NVIDIA H200")
    marked = range_utilisation(gemm.roofline(), pd.concat([ranges, mark], ignore_index=True),
                               gpu_name="NVIDIA H200")  # fmt: skip
    assert TARGET_RANGE not in set(marked["range"])
    pd.testing.assert_frame_equal(marked, plain)
