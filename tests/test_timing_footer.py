"""The per-cell time breakdown under a result's view: worker, capture (cell body), export +
load, view. Timings come from a real warm cell (the worker without a profiler on this CPU); the
view is a real nsys report fixture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.reports import open_report
from nsight_magic.results.base import timing_line
from nsight_magic.results.run_loading import nsys_run
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest


@pytest.fixture(scope="module")
def warm_meta(tmp_path_factory: pytest.TempPathFactory) -> dict:
    manager = SessionManager(setup=SetupRegistry())
    root = tmp_path_factory.mktemp("runs")
    try:
        run = manager.profile(CellRequest(cell="import time\ntime.sleep(0.2)", runs_root=root,
                                          cwd=str(root)), BareBackend())  # fmt: skip
    finally:
        manager.stop()
    return dict(run.meta)


def test_the_line_adds_up_the_warm_cell_timings(warm_meta: dict) -> None:
    t = warm_meta["timings"]
    assert {"worker_start_s", "script_s", "vars_s", "capture_s", "load_s", "total_s"} <= set(t)
    line = timing_line(warm_meta, 0.25)
    worker = t["worker_start_s"] + t.get("history_s", 0) + t["script_s"] + t["vars_s"]
    capture = t["begin_capture_s"] + t["capture_s"] + t["end_capture_s"]
    assert line.startswith(f"nsys cell {t['total_s'] + 0.25:.2f} s: worker {worker:.2f} s")
    body = warm_meta["cell_status"]["cell_s"]
    assert f"capture {capture:.2f} s (cell body {body:.3f} s)" in line and body >= 0.2
    assert line.endswith(f"export + load {t['load_s']:.2f} s · view 0.25 s")


def test_a_fresh_run_has_one_run_step_and_an_offline_report_no_line() -> None:
    meta = {"tool": "ncu", "timings": {"prepare_s": 0.1, "load_s": 0.5, "total_s": 9.6}}
    assert timing_line(meta, 0.4) == (
        "ncu cell 10.00 s: run 9.00 s · export + load 0.50 s · view 0.40 s"
    )
    assert timing_line({}, 1.0) == ""


def test_the_static_view_ends_with_the_line(warm_meta: dict, data_dir: Path) -> None:
    run = nsys_run(open_report(data_dir / "nsys_small.sqlite"), None, warm_meta)
    page = run._repr_mimebundle_()["text/html"]
    footer = re.search(r"nsys cell [\d.]+ s: worker [\d.]+ s · capture .* · view [\d.]+ s", page)
    assert footer is not None and page.rstrip().endswith("</div>")


def test_the_live_view_ends_with_the_line_too(warm_meta: dict, data_dir: Path, monkeypatch) -> None:
    from ipywidgets.widgets import widget

    from nsight_magic.results import base

    # the live widgets by model id: ipywidgets 8.1 keeps them in a module dict, 8.0 on Widget
    instances = getattr(widget, "_instances", None) or widget.Widget._active_widgets

    monkeypatch.setattr(base, "in_kernel", lambda: True)
    run = nsys_run(open_report(data_dir / "nsys_small.sqlite"), None, warm_meta)
    outer = instances[run._repr_mimebundle_()[base.WIDGET_MIME]["model_id"]]
    assert "nsys cell" in outer.children[-1].value and "export + load" in outer.children[-1].value


def test_background_static_view_shows_the_widget_first(
    warm_meta: dict, data_dir: Path, monkeypatch
) -> None:
    """``static_view = "background"``: the widget and a placeholder line at once, then the same
    output updated with the static copy around the same widget."""
    import IPython.display

    from nsight_magic.results import base, display

    calls: list[tuple[str, dict, str]] = []

    class Handle:
        display_id = "out-1"

    def show(bundle: dict, raw: bool, display_id: bool) -> Handle:
        calls.append(("display", bundle, ""))
        return Handle()

    def update(bundle: dict, raw: bool, display_id: str) -> None:
        calls.append(("update", bundle, display_id))

    monkeypatch.setattr(IPython.display, "display", show)
    monkeypatch.setattr(IPython.display, "update_display", update)
    run = nsys_run(open_report(data_dir / "nsys_small.sqlite"), None, warm_meta)
    display.show_live_first(run)
    display._finish_static_builds()
    (_, first, _), (_, full, target) = calls
    assert "is being built; it replaces this line" in first["text/html"]
    assert target == "out-1" and full[base.WIDGET_MIME] == first[base.WIDGET_MIME]
    assert full["text/html"].startswith(run.to_html())
    assert re.search(
        r"view [\d.]+ s; static copy [\d.]+ s, built after the view", full["text/html"]
    )
