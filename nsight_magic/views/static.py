"""Charts -> PNG with vl-convert (no browser, no kernel), for the static ``text/html`` form and
for the charts we hand to the user (:func:`with_png`).
Rendering fails soft: a missing or broken vl-convert yields a "chart omitted" note, never an
exception, because a shared notebook should still show its tables.

A static page's charts render together (:func:`rendering_together`): each ``<img>`` is first a
placeholder while its chart renders in a helper process (``render_pool``), and ``fill`` puts the
PNGs in once the page and the live view are built (issue 22)."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

import altair as alt

from . import render_pool
from .chart_specs import chart_spec, unvalidated
from .html import esc


@functools.lru_cache(maxsize=64)
def _png_from_spec(spec_json: str, scale: float) -> bytes:
    return render_pool.render_png(spec_json, scale)


def _spec(chart: Any) -> str:
    # Sorted JSON is the cache key: the same chart (same data) renders once per process.
    return json.dumps(chart_spec(chart), sort_keys=True, default=str)


def chart_png(chart: Any, scale: float = 1.0) -> bytes | None:
    """PNG bytes of an altair chart, or None when it cannot be rendered here."""
    try:
        return _png_from_spec(_spec(chart), scale)
    except Exception:
        return None


class RenderBatch:
    """The charts of one static page: each rendering in a helper process from when the page
    names it (``placeholder``) until ``fill`` puts it in."""

    def __init__(self) -> None:
        self._charts: dict[str, tuple[Future[bytes], str, str, float]] = {}

    def placeholder(self, chart: Any, what: str, scale: float) -> str:
        spec = _spec(chart)
        mark = f"<!--nsight-magic-chart-{id(self)}-{len(self._charts)}-->"
        self._charts[mark] = (render_pool.submit_png(spec, scale), spec, what, scale)
        return mark

    def fill(self, page: str) -> str:
        """``page`` with each placeholder replaced by its PNG (or its "chart omitted" line)."""
        for mark, (future, spec, what, scale) in self._charts.items():
            try:
                png: bytes | None = render_pool.png_result(future, spec, scale)
            except Exception:
                png = None
            page = page.replace(mark, _img_html(png, what))
        return page


_BATCH: ContextVar[RenderBatch | None] = ContextVar("nsight_magic_render_batch", default=None)


@contextlib.contextmanager
def rendering_together() -> Iterator[RenderBatch]:
    """Within it, ``chart_img_html`` gives placeholders of charts rendering in helper
    processes; ``batch.fill(page)`` waits for them and puts them in."""
    batch = RenderBatch()
    token = _BATCH.set(batch)
    try:
        yield batch
    finally:
        _BATCH.reset(token)


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def chart_img_html(chart: Any, alt: str = "chart", scale: float = 1.0) -> str:
    """``<img>`` with the chart as a PNG data URI, or a one-line note when rendering failed."""
    batch = _BATCH.get()
    if batch is not None and chart is not None:
        with contextlib.suppress(Exception):  # a spec that cannot be written: omitted below
            return batch.placeholder(chart, alt, scale)
        chart = None
    return _img_html(chart_png(chart, scale=scale) if chart is not None else None, alt)


def _img_html(png: bytes | None, alt: str) -> str:
    if png is None:
        return f'<div style="font-size:12px;color:#999">({esc(alt)}: chart omitted)</div>'
    return f'<img alt="{esc(alt)}" src="{png_data_uri(png)}"/>'


def chart_bundle(spec: dict[str, Any]) -> dict[str, Any]:
    """A chart's display: the Vega-Lite mimetype (interactive where the front end renders this
    Vega-Lite version; JupyterLab 4.6 renders up to v5 and altair 6 writes v6, so Lab shows the
    PNG) plus a PNG of the same spec, which nbconvert HTML, GitHub and nbviewer show since they
    run no Vega. Either way nothing is fetched from a CDN."""
    major = alt.SCHEMA_VERSION.lstrip("v").split(".")[0]
    bundle: dict[str, Any] = {
        f"application/vnd.vegalite.v{major}+json": spec,
        "text/plain": "<altair chart>",
    }
    try:
        png = _png_from_spec(json.dumps(spec, sort_keys=True, default=str), 1.0)
    except Exception:
        return bundle
    bundle["image/png"] = base64.b64encode(png).decode("ascii")
    return bundle


def with_png(chart: Any) -> Any:
    """``chart`` itself, displaying as Vega-Lite plus its own PNG (:func:`chart_bundle`), so an
    executed notebook shows it with no kernel and no JavaScript, while the user's altair
    renderer (``alt.renderers.active``) and their own charts stay as they were.

    Why an instance attribute: IPython looks ``_repr_mimebundle_`` up on the object, and
    altair's ``__setattr__`` would put it into the spec, so it goes into the instance's
    ``__dict__``. A chart derived from this one (``.properties(...)``, ``+``) is a new object
    and displays through the user's renderer, like any chart of theirs."""

    def _repr_mimebundle_(include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return chart_bundle(chart_spec(chart))

    object.__setattr__(chart, "_repr_mimebundle_", _repr_mimebundle_)
    return chart


P = ParamSpec("P")
C = TypeVar("C")


def shown_with_png(builder: Callable[P, C]) -> Callable[P, C]:
    """A chart builder whose charts display with their own PNG (:func:`with_png`): what a
    notebook shows when it displays one (``charts.delta_chart(cmp.kernels)``) reads anywhere.
    The PNG is rendered only when the chart is displayed."""

    @functools.wraps(builder)
    def build(*args: P.args, **kwargs: P.kwargs) -> C:
        with unvalidated():  # our own builders: validated in the tests (chart_specs)
            return with_png(builder(*args, **kwargs))

    return build
