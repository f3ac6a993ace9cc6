"""Charts as live widgets: altair's ``JupyterChart`` (an anywidget that carries its own
vega-embed), so a chart draws the same in JupyterLab 4, Notebook 7 and VS Code whatever
Vega-Lite version the front end itself renders, and its selections reach Python.

Why a subclass: ``JupyterChart`` imports vega-embed from a CDN by default, which machines next to
a GPU often cannot reach; its offline mode instead puts a 0.9 MB bundle into every chart's widget
state, so five charts would add 4.5 MB to a saved notebook (P2's budget is 1 MB per run). Here
each chart's state holds a 2 kB loader; the first chart on a page asks the kernel for altair's
own offline bundle (built by vl-convert, exactly as ``JupyterChart.enable_offline`` builds it),
imports it once and every chart on the page reuses it. No CDN, no bundle in the notebook file.

Linking: chart builders give a clickable mark the point selection ``pick`` (on the ``name``
field) and the variable ``focus`` (the highlighted name); ``on_pick`` and ``set_focus`` connect
them to the picker."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import altair as alt
import traitlets
from altair import JupyterChart

from .chart_specs import strict, unvalidated

PICK = "pick"  # point selection: the mark clicked in the browser
FOCUS = "focus"  # variable: the name Python highlights ("" = none)
BRUSH = "brush"  # interval selection on x: the window a timeline zooms to

_REQUEST = "nsight_magic:vega-bundle"
EMBED_OPTIONS = {
    "renderer": "svg",
    "actions": {"export": True, "source": False, "compiled": False, "editor": False},
}

# Loads altair's offline JupyterChart module once per page (asked from the kernel, cached on
# globalThis by altair version), then hands the chart to its ``render``.
_LOADER = """
const KEY = "nsight_magic.jupyterchart@__VERSION__";
function library(model) {
  let pending = globalThis[KEY];
  if (pending) return pending;
  pending = new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      model.off("msg:custom", onMessage);
      reject(new Error("no kernel answered with the chart library"));
    }, 60000);
    async function onMessage(msg, buffers) {
      if (!msg || msg.type !== "__REQUEST__") return;
      clearTimeout(timer);
      model.off("msg:custom", onMessage);
      if (msg.error) { reject(new Error(msg.error)); return; }
      const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
      try { resolve(await import(/* webpackIgnore: true */ url)); }
      catch (error) { reject(error); }
      finally { URL.revokeObjectURL(url); }
    }
    model.on("msg:custom", onMessage);
    model.send({ type: "__REQUEST__" });
  });
  pending.catch(() => { if (globalThis[KEY] === pending) delete globalThis[KEY]; });
  globalThis[KEY] = pending;
  return pending;
}
async function render({ model, el }) {
  let lib;
  try { lib = await library(model); }
  catch (error) {
    el.textContent = "(live chart unavailable: " + error.message
      + "; the static copy of this output shows it as a picture)";
    return;
  }
  return lib.default.render({ model, el });
}
export default { render };
"""


@functools.lru_cache(maxsize=1)
def vega_bundle() -> bytes:
    """altair's offline ``JupyterChart`` module (vega, vega-lite, vega-embed and its render code),
    built once per process by altair's own ``enable_offline`` on a private subclass, so the
    user's ``JupyterChart`` keeps its own setting."""

    class _Offline(JupyterChart):
        pass

    _Offline.enable_offline()
    return str(_Offline._esm).encode("utf-8")


class LiveChart(JupyterChart):
    """A ``JupyterChart`` that gets its vega-embed from the kernel (see the module docstring)."""

    _esm = _LOADER.replace("__VERSION__", alt.__version__).replace("__REQUEST__", _REQUEST)

    def __init__(self, chart: Any, **kwargs: Any) -> None:
        # SVG: crisp at any zoom, and marks a browser test can find. Export stays in the menu;
        # "open in the Vega editor" would leave the machine, so it is off.
        kwargs.setdefault("embed_options", EMBED_OPTIONS)
        super().__init__(chart, **kwargs)
        self._pick_callbacks: list[tuple[str, Callable[[Any], None]]] = []
        self.on_msg(self._answer)
        self.observe(self._selections_changed, names="_vl_selections")

    @traitlets.observe("chart")
    def _on_change_chart(self, change: Any) -> None:
        """altair's own handler (the spec, selections, params), with the spec written
        unvalidated (``chart_specs``: our builders' charts are validated in the tests)."""
        chart = change.new
        if chart is None or strict():
            super()._on_change_chart(change)
            return
        # altair's handler calls chart.to_dict(): for its span, that call skips validation
        object.__setattr__(chart, "to_dict", functools.partial(chart.to_dict, validate=False))
        try:
            with unvalidated():
                super()._on_change_chart(change)
        finally:
            del chart.__dict__["to_dict"]

    def _answer(self, _widget: Any, content: Any, buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != _REQUEST:
            return
        try:
            bundle = vega_bundle()
        except Exception as exc:  # vl-convert missing or broken: the chart says so, one line
            self.send({"type": _REQUEST, "error": f"{type(exc).__name__}: {exc}"})
            return
        self.send({"type": _REQUEST}, buffers=[bundle])

    # --- selections -> Python -------------------------------------------------------------
    def on_selection(self, name: str, callback: Callable[[Any], None]) -> None:
        """Call ``callback(value)`` when selection ``name`` changes in the browser: a point
        selection's value is a list of ``{field: value}``, an interval's ``{field: [lo, hi]}``.
        Survives a new ``chart`` (the timeline swaps its chart when it zooms)."""
        self._pick_callbacks.append((name, callback))

    def _selections_changed(self, change: dict[str, Any]) -> None:
        for name, callback in self._pick_callbacks:
            if name in change["new"] and change["new"].get(name) != (change["old"] or {}).get(name):
                selection = getattr(self.selections, name, None)
                callback(getattr(selection, "value", None))

    # --- Python -> chart -------------------------------------------------------------------
    def set_focus(self, name: str | None) -> None:
        """Highlight the marks whose ``name`` is ``name`` (None or "" shows all alike)."""
        if FOCUS in self.params.trait_names():
            self.params.set_trait(FOCUS, name or "")

    @property
    def focus(self) -> str:
        return str(getattr(self.params, FOCUS, "") or "")


def picked(value: Any) -> dict[str, Any]:
    """The fields of the first picked mark (a point selection's value), or {}."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    return {}


def picked_name(value: Any, field: str = "name") -> str | None:
    """The ``field`` of the first picked mark, or None."""
    name = picked(value).get(field)
    return str(name) if name is not None else None


def link_params(fields: tuple[str, ...] = ("name",)) -> tuple[alt.Parameter, alt.Parameter]:
    """The ``pick`` click selection (on ``fields``) and the ``focus`` highlight variable."""
    pick = alt.selection_point(name=PICK, fields=list(fields), on="click", clear="dblclick")
    focus = alt.param(name=FOCUS, value="")
    return pick, focus


def focus_opacity(dim: float = 0.3) -> Any:
    """Full opacity for the focused name (or for all when nothing is focused)."""
    # The channel object itself: altair turns the dict ``alt.condition`` gives into one by
    # matching it against every schema class (~25 ms a chart; issue 22).
    test = f"{FOCUS} == '' || datum.name == {FOCUS}"
    return alt.OpacityValue(value=dim, condition={"test": test, "value": 1.0})
