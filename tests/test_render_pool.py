"""A static copy's charts render in helper processes (``views.render_pool``) while the kernel
builds the rest of the display (issue 22): the same PNG as a render in the kernel's process, every
placeholder filled, and a helper that dies or is switched off leaves the charts rendered here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
from nsight_magic.views import charts, render_pool, static

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small(nsys_small_sqlite):
    return NsysRun(open_report(nsys_small_sqlite), meta={"name": "small"}).frames


@pytest.fixture
def fresh_pool():
    """Helpers of this test's own (started on first use), ended after it."""
    render_pool.stop()
    render_pool._off = False
    yield
    render_pool.stop()
    render_pool._off = False


def test_a_helper_renders_what_the_kernel_would(small, fresh_pool):
    spec = static._spec(charts.top_kernels_chart(small.kernel_table()))
    future = render_pool.submit_png(spec)
    assert render_pool._helpers and not future.done()  # rendering in a helper, not here
    png = render_pool.png_result(future, spec)
    assert png[:8] == PNG and png == render_pool.render_png(spec)


def test_a_page_fills_every_placeholder(nsys_small_sqlite, fresh_pool):
    page = NsysRun(open_report(nsys_small_sqlite), meta={"name": "small"}).to_html()
    assert "nsight-magic-chart-" not in page
    assert page.count('src="data:image/png;base64,') == 3  # kernels, NVTX ranges, timeline
    assert "chart omitted" not in page


def test_a_dead_helper_leaves_the_chart_rendered_here(small, fresh_pool):
    spec = static._spec(charts.nvtx_ranges_chart(small.nvtx_table()))
    waiting = render_pool.submit_png(spec)
    helpers = list(render_pool._helpers)
    for helper in helpers:
        os.kill(helper.proc.pid, signal.SIGKILL)  # the helpers this test started
    assert render_pool.png_result(waiting, spec)[:8] == PNG  # answered, or rendered here
    deadline = time.monotonic() + 10
    while any(h.alive for h in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    with static.rendering_together() as batch:
        page = "<p>before</p>" + static.chart_img_html(charts.nvtx_ranges_chart(small.nvtx_table()))
    assert render_pool._off  # a helper died: the kernel renders from now on
    filled = batch.fill(page)
    assert filled.startswith('<p>before</p><img alt="chart" src="data:image/png;base64,')


def test_without_helpers_the_kernel_renders(small, fresh_pool, monkeypatch):
    monkeypatch.setenv(render_pool.PROCESSES_ENV, "0")
    spec = static._spec(charts.memcpy_chart(small.copies()))
    future = render_pool.submit_png(spec)
    assert future.done() and not render_pool._helpers
    assert future.result()[:8] == PNG


def test_a_spec_vl_convert_rejects_is_omitted_not_raised(fresh_pool):
    with static.rendering_together() as batch:
        mark = batch.placeholder(_Broken(), "broken chart", 1.0)
    assert batch.fill(mark) == (
        '<div style="font-size:12px;color:#999">(broken chart: chart omitted)</div>'
    )


class _Broken:
    """A chart whose spec names a mark type that does not exist."""

    def to_dict(self, validate: bool = True) -> dict:
        return {"data": {"values": [{"a": 1}]}, "mark": "no-such-mark"}


SCRIPT = """
from pathlib import Path
from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
with open({log!r}, "a") as log:  # once per run of this file: no __main__ guard on purpose
    log.write("ran\\n")
page = NsysRun(open_report({path!r})).to_html()
print(page.count('src="data:image/png;base64,'))
"""


def test_a_script_without_a_main_guard_runs_once(nsys_small_sqlite, tmp_path: Path):
    """Helpers are plain subprocesses: a ``multiprocessing`` spawn would re-run the script."""
    log = tmp_path / "runs.log"
    script = tmp_path / "report.py"
    script.write_text(SCRIPT.format(log=str(log), path=str(nsys_small_sqlite)))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), render_pool.PROCESSES_ENV: "2"}
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3"] and log.read_text() == "ran\n"


KERNEL = """
import signal, sys, time
from nsight_magic.views import render_pool
signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel while a cell runs
render_pool.start()
helpers = list(render_pool._helpers)
print("ready", flush=True)
try:
    time.sleep(60)  # the cell the user interrupts
except KeyboardInterrupt:
    pass
time.sleep(0.5)
spec = '{"data": {"values": [{"a": 1}]}, "mark": "bar", "encoding": {"x": {"field": "a"}}}'
future = render_pool.submit_png(spec)
png = render_pool.png_result(future, spec)
alive = all(h.alive for h in helpers)
print("alive" if alive else "dead", render_pool._off, png[:4] == b"\\x89PNG")
"""


def test_an_interrupted_cell_leaves_the_helpers_running(tmp_path: Path):
    """Jupyter interrupts a kernel with SIGINT to its whole process group (jupyter_client
    ``LocalProvisioner.send_signal``; it starts the kernel as a group leader). The helpers are
    not the cell: one in that group died, and every later chart rendered in the kernel."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), render_pool.PROCESSES_ENV: "1"}
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    try:
        assert kernel.stdout is not None and kernel.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the helper is past its start
        os.killpg(kernel.pid, signal.SIGINT)  # what Jupyter's interrupt button does
        out, _ = kernel.communicate(timeout=120)
    finally:
        if kernel.poll() is None:
            kernel.kill()
    assert out.split() == ["alive", "False", "True"]
