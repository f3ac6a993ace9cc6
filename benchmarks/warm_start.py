"""P5/P6 extended: warm from the first cell (issue "Warm from the first cell"), on a machine with a
GPU, nsys, ncu and transformers; everything through the session manager as the magics call it,
each step beside the same body under bare nsys / ncu, in one run.

The benchmark process plays the notebook: it runs the ``%%nsight_setup`` cell itself (the model
built here too, as a notebook would) while the prewarmed nsys worker replays it
(``benchmarks.first_cell`` compares that with a worker started before the setup). Then, as a
user would:

1. the first ``%%nsys`` cell right after the setup; beside it the bare ``nsys profile`` of that
   run's own script and argv (a new process: setup, then the cell), and a later cell (body +
   profiler: what the first cell should now cost);
2. the first drill-down into that result after "looking at it" (the benchmark waits for the
   background ncu prewarm, and says how long that took, i.e. how long the user must look); beside
   it the capture step (ncu attached, cell re-run, kernel replayed) and the cold re-run of the
   saved script under ncu (a new process: the old picker);
3. ``--pytorch shapes`` and the default cell after it (no worker relaunch); beside them
   ``--fresh --pytorch shapes`` (``nsys profile --pytorch=autograd-shapes-nvtx`` in a new
   process), with the op ranges each report holds (the same text, so the same count and the same
   Ops tab);
4. a later cell, with its per-step timings; beside it the cell body alone in a plain process.

Targets (the issue): first cell <= body + profiler (a later cell's wall) + 1 s; first drill-down
<= ncu capture + 5 s; the toggle and the cell after it <= a later cell + 1 s; later cells <= body
+ 3.5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .llama_cell import CELL, SETUP, cell_times


def _ops(run: Any) -> int:
    """PyTorch op ranges in the run's report (``aten::`` ranges parsed as ops)."""
    from nsight_magic.analysis.torch_ops import parse_op_range

    return sum(parse_op_range(str(text)) is not None for text in run.nvtx()["range"])


def _profile(
    manager: Any, root: Path, name: str, pytorch: str = "", **kw: Any
) -> tuple[Any, float]:
    from nsight_magic.profilers.nsys import NsysOptions
    from nsight_magic.session.backends import NsysBackend
    from nsight_magic.session.spec import CellRequest

    modes = {"": None, "ops": "autograd-nvtx", "shapes": "autograd-shapes-nvtx"}
    backend = NsysBackend(NsysOptions(pytorch=modes[pytorch]))  # type: ignore[arg-type]
    request = CellRequest(cell=CELL, name=name, runs_root=root, **kw)
    t0 = time.perf_counter()
    run = manager.profile(request, backend)
    return run, time.perf_counter() - t0


def _views(run_dir: Path, repeats: int = 2) -> dict[str, float]:
    """What showing a result costs in a kernel, each way, on new result objects over the same
    run folder (best of ``repeats`` after one unmeasured): both forms before the cell ends (a
    headless run, ``static_view`` "inline"), and the widget first with the static copy after (a
    notebook editor, "auto"). Chart PNGs render in helper processes, as after ``%load_ext``."""
    from nsight_magic import load_run
    from nsight_magic.results import base
    from nsight_magic.views import render_pool

    in_kernel = base.in_kernel
    base.in_kernel = lambda: True  # the kernel's view: the widget too
    render_pool.start()
    times: dict[str, list[float]] = {"inline_s": [], "widget_first_s": [], "static_after_s": []}
    try:
        load_run(run_dir)._repr_mimebundle_()
        for _ in range(repeats):
            t0 = time.perf_counter()
            load_run(run_dir)._repr_mimebundle_()
            times["inline_s"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, rest = load_run(run_dir).live_bundle()
            t1 = time.perf_counter()
            rest()
            times["widget_first_s"].append(t1 - t0)
            times["static_after_s"].append(time.perf_counter() - t1)
    finally:
        base.in_kernel = in_kernel
        render_pool.stop()
    return {k: min(v) for k, v in times.items()}


def body_s(run: Any) -> float:
    """The cell body's own time in the worker, as the worker measured it (status ``cell_s``)."""
    return float((run.meta.get("cell_status") or {}).get("cell_s") or float("nan"))


def _bare(argv: list[str], report: Path) -> float:
    """The fresh run's own argv, with its report elsewhere, timed."""
    argv = list(argv)
    if "-o" in argv:
        argv[argv.index("-o") + 1] = str(report)
    t0 = time.perf_counter()
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}  # as P5's bare run
    subprocess.run(argv, env=env, capture_output=True, check=True)
    return time.perf_counter() - t0


def _join(manager: Any) -> float:
    t0 = time.perf_counter()
    for thread in manager.background:
        thread.join()
    return time.perf_counter() - t0


def warm_start(root: Path, layers: int = 4) -> dict[str, Any]:
    # what ``%load_ext nsight_magic`` imports in a notebook before any cell (the magics, the
    # result and view modules): not a cost of the first profiled cell
    import nsight_magic.magic.magics  # noqa: F401
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager

    cold, own = cell_times(layers)
    setup = SETUP.format(layers=layers)
    manager = SessionManager(setup=SetupRegistry())
    manager.prewarm = True
    out: dict[str, Any] = {"layers": layers, "cell_warm_s": own, "cell_cold_s": cold}
    try:
        # the %%nsight_setup cell: the notebook runs it while the nsys worker replays it
        t0 = time.perf_counter()
        entry = manager.begin_setup("model", prepare_cell(setup))
        notebook: dict[str, Any] = {}  # kept to the end, as the notebook keeps its model
        exec(compile(setup, "setup", "exec"), notebook)  # the notebook's own run of the cell
        manager.end_setup(entry, setup, "model", ok=True)
        out["setup_in_notebook_s"] = time.perf_counter() - t0
        first, out["first_s"] = _profile(manager, root, "first")
        out["first_timings"] = first.meta["timings"]
        out["first_body_s"] = body_s(first)  # the body's first run in the worker: cold
        out["ncu_prewarm_wait_s"] = _join(manager)  # the user looks at the result meanwhile
        names = list(first.kernel_summary()["name"])
        top = next((n for n in names if "nvjet" in n or "gemm" in n.lower()), names[0])
        t0 = time.perf_counter()
        drill = first.profile_kernel(top, set="roofline")
        out["first_drill_s"] = time.perf_counter() - t0
        out["first_drill_timings"] = drill.meta["timings"]
        t0 = time.perf_counter()
        first.profile_kernel(top, set="roofline", fresh=True)
        out["cold_drill_s"] = time.perf_counter() - t0
        shapes, out["pytorch_shapes_s"] = _profile(manager, root, "shapes", pytorch="shapes")
        after, out["after_toggle_s"] = _profile(manager, root, "after")
        later = [_profile(manager, root, f"later{i}") for i in range(3)]
        out["later_s"] = [s for _, s in later]
        out["later_timings"] = later[-1][0].meta["timings"]
        out["later_body_s"] = [body_s(r) for r, _ in later]
        t0 = time.perf_counter()
        later[-1][0].to_html()  # the static view (tables + PNG charts), built once per result
        out["static_view_s"] = time.perf_counter() - t0
        out["views"] = _views(later[-1][0].run_dir)
        fresh_shapes, out["fresh_shapes_s"] = _profile(
            manager, root, "fresh-shapes", pytorch="shapes", fresh=True
        )
        out["op_ranges"] = {"warm_shapes": _ops(shapes), "fresh_nsys_pytorch": _ops(fresh_shapes),
                            "after_toggle": _ops(after)}  # fmt: skip
        out["workers"] = [(s.tool, s.pid, s.prewarmed) for s in manager.status()]
    finally:
        manager.stop()
    argv = json.loads((fresh_shapes.run_dir / "argv.json").read_text())
    argv = [a for a in argv if not a.startswith("--pytorch")]  # the first cell had none
    out["bare_nsys_first_s"] = _bare(argv, root / "bare-first")
    out["kernel"] = top
    _print(out)
    return out


def _print(o: dict[str, Any]) -> None:
    later = min(o["later_s"])
    capture = o["first_drill_timings"].get("capture_s", float("nan"))

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    first = o["first_timings"]
    # The first cell runs the body for the first time in the worker process: cold, as the
    # notebook's own first run of it was. What the profiler and we add is the same as later.
    overhead = later - min(o["later_body_s"])
    first_target = o["first_body_s"] + overhead + 1
    v = o["views"]
    worst = max(t + v["widget_first_s"] - b
                for t, b in zip(o["later_s"], o["later_body_s"], strict=True))  # fmt: skip
    own_ok = all(s <= b + 3.5 for s, b in zip(o["later_s"], o["later_body_s"], strict=True))
    prewarmed: list[str] = next((p for tool, _, p in o["workers"] if tool == "ncu"), [])
    print(
        f"P5 warm start ({o['layers']}-layer Llama; body alone {o['cell_warm_s']:.3f} s): setup "
        f"cell {o['setup_in_notebook_s']:.1f} s in the notebook (nsys worker replaying it "
        f"meanwhile); first %%nsys cell {o['first_s']:.2f} s (worker wait "
        f"{first.get('worker_start_s', 0):.2f} s, replay {first.get('history_s', 0):.2f} s, "
        f"its body {o['first_body_s']:.2f} s: the body's first run in the worker; "
        f"{o['cell_cold_s']:.2f} s cold in a plain process) vs a later cell {later:.2f} s "
        f"(body {min(o['later_body_s']):.3f} s; target <= later + 1 s: "
        f"{verdict(o['first_s'] <= later + 1)}; <= its body + a later cell's overhead "
        f"{overhead:.2f} s + 1 s = {first_target:.2f}: {verdict(o['first_s'] <= first_target)}) "
        f"vs bare nsys profile of the same script {o['bare_nsys_first_s']:.1f} s\n"
        f"P6 warm start: ncu worker prewarmed: {prewarmed or 'no (no GPU memory room?)'}, done "
        f"{o['ncu_prewarm_wait_s']:.1f} s after the first result; first drill-down "
        f"{o['first_drill_s']:.2f} s (ncu capture {capture:.2f} s; "
        f"target <= capture + 5 s: {verdict(o['first_drill_s'] <= capture + 5)}) vs cold "
        f"{o['cold_drill_s']:.1f} s\n"
        f"--pytorch shapes {o['pytorch_shapes_s']:.2f} s, the default cell after it "
        f"{o['after_toggle_s']:.2f} s (target <= later + 1 s: "
        f"{verdict(max(o['pytorch_shapes_s'], o['after_toggle_s']) <= later + 1)}) vs --fresh "
        f"(nsys --pytorch) {o['fresh_shapes_s']:.1f} s; op ranges {o['op_ranges']}\n"
        f"later cells {', '.join(f'{s:.2f}' for s in o['later_s'])} s (target <= body + 3.5 s: "
        f"the body alone in a plain process, {o['cell_warm_s'] + 3.5:.2f}: "
        f"{verdict(max(o['later_s']) <= o['cell_warm_s'] + 3.5)}; each cell's own body in the "
        f"worker ({', '.join(f'{b:.3f}' for b in o['later_body_s'])} s): {verdict(own_ok)}"
        f"); timings {json.dumps({k: round(v, 3) for k, v in o['later_timings'].items()})}; "
        f"static view {o['static_view_s']:.2f} s on top\n"
        f"the later cell's view in a kernel: inline (headless runs) {v['inline_s']:.2f} s; widget "
        f"first (notebook editors) {v['widget_first_s']:.2f} s, its static copy "
        f"{v['static_after_s']:.2f} s after; so a later cell as a notebook editor shows it "
        f"{min(o['later_s']) + v['widget_first_s']:.2f} s (body + 3.5 s with each cell's own "
        f"body: {verdict(worst <= 3.5)}, worst body + {worst:.2f} s)",
        flush=True,
    )
