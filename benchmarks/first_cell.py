"""P5 first cell: what the first ``%%nsys`` cell after a ``%%nsight_setup`` cell costs, by when the
nsys worker starts (GPU, nsys, transformers). Each way runs in a new process (a new notebook
kernel: the model's imports are cold in each), through the session manager as the magics call
it, with P5's workload (``benchmarks.session``: a 4-layer Llama built by the setup cell):

- ``at-setup``: the worker starts when the setup cell runs and replays it meanwhile (the
  default, ``prewarm``);
- ``run-all``: the worker is started before the setup (``%nsight_session start``, what starting
  it at ``%load_ext`` would do) and the setup cell follows at once, as in Run All;
- ``after-a-pause``: the same, with the setup cell run once that worker is up.

Then the first profiled cell and a later one. Printed per way: the first cell (its worker wait,
its body's cold first run in the worker, its capture) against the target the issue set: the
body + what a later cell adds + 1 s. The rounds alternate the ways' order (the disk cache warms
after the first process).

``python -m benchmarks.first_cell [--rounds N] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .llama_cell import CELL, SETUP, result_of
from .warm_start import body_s

WAYS = ("at-setup", "run-all", "after-a-pause")


def one_way(way: str, root: Path, layers: int = 4) -> dict[str, Any]:
    """In this process (a new one per way): the notebook's ``%load_ext``, setup cell, first
    ``%%nsys`` cell and a later one."""
    t0 = time.perf_counter()
    import nsight_magic.magic.magics  # noqa: F401  # what %load_ext imports
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.backends import NsysBackend
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager
    from nsight_magic.session.spec import CellRequest

    manager = SessionManager(setup=SetupRegistry())
    manager.prewarm = True
    out: dict[str, Any] = {"way": way, "load_ext_s": time.perf_counter() - t0}
    try:
        if way != "at-setup":
            loaded = manager.start_worker("nsys")  # %nsight_session start
            if way == "after-a-pause":
                t0 = time.perf_counter()
                loaded.join()
                out["worker_up_s"] = time.perf_counter() - t0
        setup = SETUP.format(layers=layers)
        t0 = time.perf_counter()
        entry = manager.begin_setup("model", prepare_cell(setup))
        notebook: dict[str, Any] = {}
        exec(compile(setup, "setup", "exec"), notebook)  # the notebook's own run of the cell
        manager.end_setup(entry, setup, "model", ok=True)
        out["setup_s"] = time.perf_counter() - t0
        for name in ("first", "later"):
            request = CellRequest(cell=CELL, name=name, runs_root=root / way)
            t0 = time.perf_counter()
            run = manager.profile(request, NsysBackend())
            out[f"{name}_s"] = time.perf_counter() - t0
            out[f"{name}_timings"] = run.meta["timings"]
            out[f"{name}_body_s"] = body_s(run)
    finally:
        manager.stop()
    return out


def _in_new_process(way: str, root: Path) -> dict[str, Any]:
    code = (
        "import json, sys; from pathlib import Path; from benchmarks.first_cell import one_way;"
        "print('RESULT', json.dumps(one_way(sys.argv[1], Path(sys.argv[2]))))"
    )
    done = subprocess.run([sys.executable, "-c", code, way, str(root)], capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    return result_of(done.stdout)


def _line(r: dict[str, Any]) -> str:
    first, later = r["first_timings"], r["later_timings"]
    overhead = r["later_s"] - r["later_body_s"]  # what the profiler and we add to a warm cell
    target = r["first_body_s"] + overhead + 1
    up = f", worker up {r['worker_up_s']:.2f} s before the setup" if "worker_up_s" in r else ""
    return (
        f"{r['way']:>13}: setup {r['setup_s']:.1f} s{up}; first cell {r['first_s']:.2f} s "
        f"(worker wait {first.get('worker_start_s', 0):.2f} s, body {r['first_body_s']:.2f} s "
        f"cold, capture {first.get('capture_s', 0):.2f} s; target <= body + {overhead:.2f} s + 1 s"
        f" = {target:.2f}: {'met' if r['first_s'] <= target else 'MISSED'}); later cell "
        f"{r['later_s']:.2f} s (body {r['later_body_s']:.3f} s, capture "
        f"{later.get('capture_s', 0):.2f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-first-cell"))
    args = parser.parse_args(argv)
    rows = []
    for i in range(args.rounds):
        for way in WAYS if i % 2 == 0 else WAYS[::-1]:
            row = _in_new_process(way, args.workdir / f"round{i}")
            rows.append(row)
            print(f"P5 first cell, round {i + 1}: {_line(row)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
