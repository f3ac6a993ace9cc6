"""A static copy's charts render in helper processes (``views.render_pool``) while the kernel
builds the rest of the display (issue 22): the same PNG as a render in the kernel's process, every
placeholder filled, and a helper that dies or is switched off leaves the charts rendered here."""

from __future__ import annotations

import os
import signal

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
    """A pool of this test's own (started on first use), shut down after it."""
    render_pool._shutdown()
    render_pool._broken = False
    yield
    render_pool._shutdown()
    render_pool._broken = False


def test_a_helper_renders_what_the_kernel_would(small, fresh_pool):
    spec = static._spec(charts.top_kernels_chart(small.kernel_table()))
    future = render_pool.submit_png(spec)
    assert render_pool._pool is not None  # rendered in a helper, not here
    png = render_pool.png_result(future, spec)
    assert png[:8] == PNG and png == render_pool.render_png(spec)


def test_a_page_fills_every_placeholder(nsys_small_sqlite, fresh_pool):
    page = NsysRun(open_report(nsys_small_sqlite), meta={"name": "small"}).to_html()
    assert "nsight-magic-chart-" not in page
    assert page.count('src="data:image/png;base64,') == 3  # kernels, NVTX ranges, timeline
    assert "chart omitted" not in page


def test_a_dead_helper_leaves_the_chart_rendered_here(small, fresh_pool):
    render_pool.start()
    pool = render_pool._pool
    assert pool is not None
    render_pool.png_result(render_pool.submit_png(render_pool._TINY), render_pool._TINY)
    for pid in list(pool._processes):  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)  # the helpers this test started
    spec = static._spec(charts.nvtx_ranges_chart(small.nvtx_table()))
    with static.rendering_together() as batch:
        page = "<p>before</p>" + static.chart_img_html(charts.nvtx_ranges_chart(small.nvtx_table()))
    filled = batch.fill(page)
    assert filled.startswith('<p>before</p><img alt="chart" src="data:image/png;base64,')
    assert render_pool.png_result(render_pool.submit_png(spec), spec)[:8] == PNG


def test_without_helpers_the_kernel_renders(small, fresh_pool, monkeypatch):
    monkeypatch.setenv(render_pool.PROCESSES_ENV, "0")
    spec = static._spec(charts.memcpy_chart(small.copies()))
    future = render_pool.submit_png(spec)
    assert future.done() and render_pool._pool is None
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
