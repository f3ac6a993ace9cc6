"""P10 view cost: what displaying a result costs in the cell's foreground (issues 21, 22).

A warm ``%%nsys`` cell ends with the result's display: the live widget plus the static copy
(tables + PNG charts) that readers without a kernel see. This measures that display on the real
fixtures, as a kernel shows it (``in_kernel`` patched true, so the widget is built too):

- cold: the first display in a fresh process after imports (vl-convert's first render starts its
  JavaScript runtime, altair's schema is loaded);
- warm: a new run object on the same report after that (what a later cell pays); the PNG cache is
  emptied first, since a later cell's report gives other charts.

Printed per fixture: the display's foreground total and its parts (widget, static copy, its PNG
renders, the Idle section), each measured alone on a fresh run object. ``--profile N`` prints
cProfile's top N functions of one warm display.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
FIXTURES = ("nsys_llm", "nsys_small", "nsys_idle_decode")
META = {"timings": {"total_s": 3.4}}  # a footer line as a profiled cell has one


def _run(name: str) -> Any:
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun

    return NsysRun(open_report(str(DATA / f"{name}.sqlite")), meta=dict(META))


@contextlib.contextmanager
def _in_kernel() -> Iterator[None]:
    from nsight_magic.results import base

    saved = base.in_kernel
    base.in_kernel = lambda: True
    try:
        yield
    finally:
        base.in_kernel = saved


@contextlib.contextmanager
def _timed_waits(spent: list[float]) -> Iterator[None]:
    """Adds to ``spent`` the seconds the display waits for its charts' PNGs once the rest of it
    is built (``RenderBatch.fill``: the renders that did not overlap the widget's build)."""
    from nsight_magic.views import static

    if not hasattr(static, "RenderBatch"):  # a version before issue 22: charts render inline
        yield
        return
    saved = static.RenderBatch.fill

    def fill(self: Any, page: str) -> str:
        t0 = time.perf_counter()
        try:
            return saved(self, page)
        finally:
            spent.append(time.perf_counter() - t0)

    static.RenderBatch.fill = fill  # type: ignore[method-assign]
    try:
        yield
    finally:
        static.RenderBatch.fill = saved  # type: ignore[method-assign]


def _forget_renders() -> None:
    from nsight_magic.views import static

    static._png_from_spec.cache_clear()


def measure(name: str) -> dict[str, float]:
    """One fixture, in this process: cold display, then warm display and its parts."""
    row: dict[str, float] = {}
    with _in_kernel():
        run = _run(name)
        t0 = time.perf_counter()
        bundle = run._repr_mimebundle_()
        row["cold_s"] = time.perf_counter() - t0
        row["html_bytes"] = len(bundle["text/html"])

        _forget_renders()
        waits: list[float] = []
        with _timed_waits(waits):
            run = _run(name)
            t0, c0 = time.perf_counter(), time.process_time()
            bundle = run._repr_mimebundle_()
            row["warm_s"] = time.perf_counter() - t0
            row["warm_cpu_s"] = time.process_time() - c0  # the kernel's own CPU, not helpers'
        row["warm_chart_wait_s"] = sum(waits) if waits else float("nan")
        row["widget_state_bytes"] = len(json.dumps(bundle, default=str))

        _forget_renders()
        run = _run(name)
        run.frames.kernel_table()  # the report's own reads, shared by both forms
        t0 = time.perf_counter()
        run.widget()
        row["widget_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        run.to_html()
        row["static_s"] = time.perf_counter() - t0

        run = _run(name)  # static_view = "background": the widget alone in the foreground
        t0 = time.perf_counter()
        _, rest = run.live_bundle()
        row["live_first_s"] = time.perf_counter() - t0
        rest()

        from nsight_magic.views.idle_view import idle_static_html

        run = _run(name)
        t0 = time.perf_counter()
        idle_static_html(run.frames.idle(), run.frames.origin_ns())
        row["idle_static_s"] = time.perf_counter() - t0
    return row


def profile(name: str, top: int) -> None:
    with _in_kernel():
        _run(name)._repr_mimebundle_()
        _forget_renders()
        run = _run(name)
        prof = cProfile.Profile()
        prof.enable()
        run._repr_mimebundle_()
        prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def _child(name: str) -> dict[str, float]:
    """``measure(name)`` in a fresh interpreter, so that "cold" is cold."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.view", "--one", name],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks view", description=__doc__)
    ap.add_argument("--fixtures", default=",".join(FIXTURES))
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per fixture (min)")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        import nsight_magic.results  # noqa: F401  imports are not the view's cost

        print(json.dumps(measure(args.one)))
        return
    for name in args.fixtures.split(","):
        if args.profile:
            profile(name, args.profile)
            continue
        rows = [_child(name) for _ in range(args.repeat)]
        best = {k: min(r[k] for r in rows) for k in rows[0]}
        print(
            f"P10 {name:>16}: display cold {best['cold_s']:.2f} s, warm {best['warm_s']:.2f} s "
            f"in the foreground (CPU {best['warm_cpu_s']:.2f} s); warm parts: widget "
            f"{best['widget_s']:.2f} s, static copy "
            f"{best['static_s']:.2f} s alone (waiting for its charts after the widget "
            f"{best['warm_chart_wait_s']:.2f} s), Idle section {best['idle_static_s']:.2f} s; "
            f"text/html {best['html_bytes'] / 1e3:.0f} kB, bundle "
            f"{best['widget_state_bytes'] / 1e3:.0f} kB; static_view='background' shows the widget "
            f"after {best['live_first_s']:.2f} s (min of {args.repeat})",
            flush=True,
        )


if __name__ == "__main__":
    main()
