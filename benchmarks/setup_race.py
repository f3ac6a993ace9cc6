"""The first profiled cell right after a short ``%%nsight_setup`` cell (Run All), on the CPU:
where its time goes while the workers the setup cell started are still starting (issue 42).

    python -m benchmarks.setup_race [--setup 1.0] [--import-s 2.0] [--lazy-s 1.0]
        [--package DIR ...] [--rounds 2] [--json PATH]

A real IPython shell with the extension loaded runs ``%%nsight_setup`` (the magic, prewarm on), then
the first profiled cell and a later one through ``MANAGER.profile`` as the ``%%nsys`` magic calls
it. The workers are the real session workers without a profiler (``tests/session_support``'s
bare backend: no nsys here, so no ``nsys launch``, no CUDA). What the GPU machine adds is stood in
for by slow imports only, written to a temporary folder:

- ``nsm_bench_heavy``: sleeps ``--import-s`` when imported in a worker (``import torch``: 2.9-3.7 s
  on the lent H100);
- ``nsm_bench_lazy``: a package whose ``Model`` is imported on first attribute access, as
  ``from transformers import Qwen2ForCausalLM`` imports the model's module; that module sleeps
  ``--lazy-s`` in a worker.

The notebook imported both before (an earlier cell, as the acceptance notebook's prelude imports
torch and transformers): its setup cell is ``--setup`` seconds of its own work, then ``model =
Model()`` (sent to the workers by value: receiving it imports the model's module). Each (package,
round) runs in a new process; ``--package`` puts another checkout's ``nsight_magic`` first on the
path (before/after side by side).

``--gpu`` (the lent GPU machine: nsys, ncu, torch, transformers): the same timeline with the real
workers under ``nsys launch`` / ``ncu --mode launch``, the acceptance notebook's Qwen2 setup cell
(``tests/gpu/acceptance.py``; the notebook imported torch and transformers before, as its prelude
does) and ``%%nsys`` cells of ``generate(ids)``; the tools' version checks and ncu's option
catalog are on the timeline too.

Printed per run: the setup cell, the first cell (its ``worker_start_s`` wait) and a later cell,
and each worker's steps on one clock from the setup cell's start: asked to start, hello, its
``imports`` request, the receive, and the first cell's requests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

HEAVY = (
    "import os, time\ntime.sleep(float(os.environ.get('NSM_BENCH_IMPORT_S', '0')))\nVALUE = 41\n"
)
LAZY_INIT = (
    "def __getattr__(name):\n"
    "    if name == 'Model':\n"
    "        from .modeling import Model\n"
    "        return Model\n"
    "    raise AttributeError(name)\n"
)
LAZY_MODELING = (
    "import os, time\ntime.sleep(float(os.environ.get('NSM_BENCH_LAZY_S', '0')))\n"
    "class Model:\n    def __init__(self):\n        self.weights = list(range(1000))\n"
)
SETUP = (
    "import time\nimport nsm_bench_heavy\nfrom nsm_bench_lazy import Model\n"
    "time.sleep({setup})\nmodel = Model()\n"
)
BODY = "y = sum(model.weights) + nsm_bench_heavy.VALUE\n"


def write_modules(folder: Path) -> None:
    (folder / "nsm_bench_lazy").mkdir(parents=True, exist_ok=True)
    (folder / "nsm_bench_heavy.py").write_text(HEAVY)
    (folder / "nsm_bench_lazy" / "__init__.py").write_text(LAZY_INIT)
    (folder / "nsm_bench_lazy" / "modeling.py").write_text(LAZY_MODELING)


def one_run(
    setup_s: float, import_s: float, lazy_s: float, runs: Path, gpu: bool = False
) -> dict[str, Any]:
    """In this process (a new one per run): load the extension, the setup cell, the first
    profiled cell and a later one; each worker's steps on the setup cell's clock."""
    sys.path.insert(0, str(ROOT / "tests"))
    from IPython.core.interactiveshell import InteractiveShell
    from session_support import BareBackend

    from nsight_magic.session import backends
    from nsight_magic.session.manager import MANAGER
    from nsight_magic.session.spec import CellRequest, Notebook
    from nsight_magic.worker.process import WorkerProcess

    modules = Path(tempfile.mkdtemp(prefix="nsm-bench-modules-"))
    write_modules(modules)
    sys.path.insert(0, str(modules))
    import nsm_bench_heavy  # noqa: F401  # the notebook's earlier cell: no delay here
    import nsm_bench_lazy

    nsm_bench_lazy.Model  # noqa: B018  # (the notebook's own import of the model's module)

    events: list[tuple[float, str, str]] = []  # (perf_counter, who, what)
    t_zero = [time.perf_counter()]  # the setup cell's start (events before it: negative)

    def mark(who: str, what: str) -> None:
        events.append((time.perf_counter(), who, what))

    class BenchBackend(BareBackend):
        def process_env(self, request: CellRequest) -> dict[str, str]:
            path = os.pathsep.join(p for p in (str(modules), os.environ.get("PYTHONPATH")) if p)
            delays = {"NSM_BENCH_IMPORT_S": str(import_s), "NSM_BENCH_LAZY_S": str(lazy_s)}
            return {**super().process_env(request), "PYTHONPATH": path, "NSM_SLOT": self.tool,
                    **delays}  # fmt: skip

        def locate(self):
            mark(self.tool, "locate")
            return super().locate()

    start, request = WorkerProcess.start, WorkerProcess.request
    locate_tool, catalog = backends.locate_tool, backends.ncu_catalog

    def who_is(worker: WorkerProcess) -> str:  # the bare slot, or the launcher's name
        return worker.launch.env.get("NSM_SLOT") or Path(worker.launch.wrap(["x"])[0]).name

    def timed_locate(name: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return locate_tool(name)
        finally:
            events.append((t0, name, f"locate {time.perf_counter() - t0:.2f} s"))

    def timed_catalog(ncu: str) -> Any:
        t0 = time.perf_counter()
        try:
            return catalog(ncu)
        finally:
            events.append((t0, "ncu", f"catalog {time.perf_counter() - t0:.2f} s"))

    backends.locate_tool, backends.ncu_catalog = timed_locate, timed_catalog  # type: ignore[assignment]

    def timed_start(self: WorkerProcess, *args: Any, **kwargs: Any) -> None:
        who = who_is(self)
        mark(who, "start asked")
        start(self, *args, **kwargs)
        mark(who, "hello")

    def timed_request(self: WorkerProcess, message: dict[str, Any], **kwargs: Any) -> Any:
        who, op = who_is(self), str(message.get("op"))
        t0 = time.perf_counter()
        try:
            return request(self, message, **kwargs)
        finally:
            events.append((t0, who, f"{op} {time.perf_counter() - t0:.2f} s"))

    WorkerProcess.start, WorkerProcess.request = timed_start, timed_request  # type: ignore[method-assign]
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nsight_magic")
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{runs}"')
    if not gpu:
        MANAGER.prewarm_backends = {"nsys": BenchBackend, "ncu": lambda: BenchBackend("ncu")}
    try:  # what %load_ext does in a Jupyter kernel (this shell is not one); not before 2026-11-27
        from nsight_magic.magic import follow
    except ImportError:
        out_load = "no start at load"
    else:
        if not gpu:  # the stand-ins only (a CPU torch import would take the worker's first second)
            follow._has_torch = lambda: False
        follow.start(ip)
        out_load = "the nsys worker starts at %load_ext"
    if gpu:  # the real workers; the notebook's prelude imported torch and transformers
        sys.path.insert(0, str(ROOT / "tests" / "gpu"))
        from acceptance import SETUP as QWEN2

        ip.run_cell("import torch, transformers", store_history=True)
    else:
        # the notebook's own import takes as long as the worker's (the modules are imported
        # here already: the sleep stands in for it)
        ip.run_cell(f"import nsm_bench_heavy, nsm_bench_lazy, time\ntime.sleep({import_s})",
                    store_history=True)  # fmt: skip
    time.sleep(1.0)  # %load_ext's helper processes settle (a Run All's prelude runs meanwhile)
    out: dict[str, Any] = {"setup_arg_s": setup_s, "import_s": import_s, "lazy_s": lazy_s,
                           "load": out_load}  # fmt: skip
    try:
        t_zero[0] = time.perf_counter()
        mark("notebook", "setup cell starts")
        if gpu:
            ip.run_cell(QWEN2)
        else:
            ip.run_cell_magic("nsight_setup", "--name model", SETUP.format(setup=setup_s))
        out["setup_s"] = time.perf_counter() - t_zero[0]
        mark("notebook", "setup cell ends")
        for name in ("first", "later"):
            mark("notebook", f"{name} cell starts")
            t0 = time.perf_counter()
            if gpu:
                done = ip.run_cell(f"%%nsys --name {name}\ntok = generate(ids)\n")
                if not done.success:
                    raise RuntimeError(str(done.error_in_exec).splitlines()[0][:200])
                run = done.result
            else:
                req = CellRequest(cell=BODY, name=name, runs_root=runs, cwd=str(runs))
                notebook = Notebook(user_ns=ip.user_ns)
                run = MANAGER.profile(req, BenchBackend("nsys"), notebook=notebook)
                if run.report.get("status") != "ok":
                    out["error"] = f"{name}: {run.report}"[:300]
            out[f"{name}_s"] = time.perf_counter() - t0
            mark("notebook", f"{name} cell ends")
            out[f"{name}_timings"] = run.meta["timings"]
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        for thread in MANAGER.background:
            thread.join(30)
        MANAGER.stop()
    out["events"] = sorted((t - t_zero[0], who, what) for t, who, what in events)
    return out


def _print(row: dict[str, Any]) -> None:
    first = row.get("first_timings") or {}
    print(f"\n{row['package']} (round {row['round']}): setup cell {row.get('setup_s', 0):.2f} s, "
          f"first cell {row.get('first_s', float('nan')):.2f} s (worker_start_s "
          f"{first.get('worker_start_s', 0):.2f} s), later cell "
          f"{row.get('later_s', float('nan')):.2f} s; {row.get('load', '')}  "
          f"{row.get('error', '')}")  # fmt: skip
    for t, who, what in row.get("events", []):
        print(f"  {t:6.2f} s  {who:>8}  {what}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", type=float, default=1.0, help="the setup cell's own seconds")
    parser.add_argument("--import-s", type=float, default=2.0, help="the heavy import, in a worker")
    parser.add_argument("--lazy-s", type=float, default=1.0, help="the lazy model module's import")
    parser.add_argument("--package", action="append", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--runs", default="/tmp/bench-setup-race")
    parser.add_argument("--gpu", action="store_true", help="real workers, Qwen2 (GPU machine)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row = one_run(args.setup, args.import_s, args.lazy_s, Path(args.runs), args.gpu)
        print("RESULT " + json.dumps(row), flush=True)
        return
    rows: list[dict[str, Any]] = []
    packages = args.package or ["."]
    for i in range(args.rounds):
        for package in packages if i % 2 == 0 else packages[::-1]:
            # the package first on the path, and a neutral working directory (a worker's
            # ``python -m`` puts its cwd first, which must not be another checkout)
            env = {**os.environ, "PYTHONPATH": f"{Path(package).resolve()}:"
                   + os.environ.get("PYTHONPATH", "")}  # fmt: skip
            where = Path(args.runs) / f"{i}-{len(rows)}"
            (where / "runs").mkdir(parents=True, exist_ok=True)
            child = [sys.executable, str(Path(__file__).resolve()), "--child", "--setup",
                     str(args.setup), "--import-s", str(args.import_s), "--lazy-s",
                     str(args.lazy_s), "--runs", str(where / "runs"),
                     *(["--gpu"] if args.gpu else [])]  # fmt: skip
            proc = subprocess.run(child, env=env, cwd=where, capture_output=True, text=True,
                                  timeout=600, check=False)  # fmt: skip
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), "")
            row = json.loads(line[7:]) if line else {"error": proc.stderr[-500:]}
            row.update(package=package, round=i + 1)
            rows.append(row)
            _print(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
