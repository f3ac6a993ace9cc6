"""P18 what observing the notebook's state costs per profiled cell (issue 56 item 7, "Cost":
<= 0.1 s per cell with 1,000 names and 100 MB of CPU objects in the notebook), beside what
pickling every name each cell would cost.

    python -m benchmarks.state_cost [--repeat 7] [--first 3] [--json F] [--profile N]

This process stands for the notebook: it runs a "notebook" (``NOTEBOOK``, exec'd in a plain
dict as IPython's user namespace, ``__name__ == "__main__"``) that binds 1,000 names holding
~100 MB of CPU objects: numpy arrays (4 x 8 MB, 40 x 400 kB, 150 small ones), CPU torch
tensors, a small MLP with its AdamW state after a step, pandas frames with a string column,
lists and dicts of numbers and strings, small ints/floats/strings, 40 functions, 8 classes
and 30 instances of them defined in the notebook, a few modules. A second process
(``--worker``, this module again) stands for the warm worker: a namespace like
``worker/serve.py``'s with the worker's own ``WorkerState``; the two sides exchange files
and one JSON line per request, as ``session/state/exchange.py`` does with the real worker
(``send``: ``NotebookState.outgoing``, the blob written, the worker's ``receive`` when there
is one, ``agreed``; ``prepare``: ``mark_process``; the cell; ``bring_back``: the worker's
``send_back``, ``NotebookState.incoming``). No profiler, no script module: the cell's body is
exec'd in the worker's namespace and its own time is not counted.

Per profiled cell, median of the repeats:

- **first**: the first cell of a new worker (every name new; ``--first`` fresh workers);
- **steady**: a later cell that changed nothing (``pass``): the notebook's look at every
  name, the worker's look, nothing to send either way;
- **cell changed a few**: the profiled cell appends to a list, sets one element of an 8 MB
  array and rebinds an int (they come back);
- **notebook changed a few**: an ordinary notebook cell did the same between two profiled
  cells (they go to the worker with the next one).

Beside them, in the same run: ``cloudpickle.dumps`` of every notebook name (what pickling
the whole namespace each cell would cost, the naive bring-back) and its ``loads``.
``--profile N``: cProfile of one steady cell on each side, N functions by own time.
"""

from __future__ import annotations

import argparse
import builtins
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 256 << 20  # NsightMagic.auto_vars_max_bytes's default (session/spec.py)
BOUND_S = 120.0  # the worker's bound on describing the cell's changes (state_timeout)

# The notebook: generated text, so that its functions and classes are the notebook's own
# (their globals the namespace, their module __main__), as IPython's cells make them.
FUNCTIONS = "\n".join(
    f"def f{i}(x, k={i}):\n    '''helper {i}'''\n    return [x * k + SCALE, len(words_{i % 20})]\n"
    for i in range(40)
)
CLASSES = "\n".join(
    f"class C{i}:\n    kind = {i}\n    def __init__(self, n):\n        self.n = n\n"
    f"        self.tags = ['t{i}', str(n)]\n        self.weights = {{'a': n * 0.5, 'b': n}}\n"
    f"    def total(self):\n        return self.n + self.kind\n"
    for i in range(8)
)
NOTEBOOK = f"""
import math, random, collections
import numpy as np
import pandas as pd
SCALE = 3
rng = np.random.default_rng(0)
g = globals()
for i in range(4):                                    # 4 x 8 MB
    g[f"big_{{i}}"] = rng.standard_normal(1_000_000)
for i in range(40):                                   # 40 x 400 kB
    g[f"feat_{{i}}"] = rng.standard_normal((250, 200))
for i in range(150):                                  # 150 x 800 B
    g[f"small_{{i}}"] = np.arange(100, dtype=np.float64) * i
for i in range(4):                                    # 4 frames, ~4 MB each, a string column
    n = 50_000
    labels = [f"row{{j % 977}}" for j in range(n)]
    g[f"df_{{i}}"] = pd.DataFrame({{"x": rng.standard_normal(n), "y": np.arange(n) * i,
                                  "z": rng.random(n), "label": labels}})
for i in range(100):                                  # lists of numbers
    g[f"series_{{i}}"] = [float(j) * 0.5 + i for j in range(1000)]
ids_0 = list(range(100_000))
ids_1 = [j * 7 for j in range(100_000)]
for i in range(20):                                   # lists of strings
    g[f"words_{{i}}"] = [f"w{{i}}_{{j}}" for j in range(500)]
for i in range(50):                                   # dicts of str -> number
    g[f"table_{{i}}"] = {{f"k{{j}}": j * 1.5 + i for j in range(200)}}
config = {{"lr": 1e-3, "layers": [64, 64, 10], "names": ["a", "b"], "nested": {{"depth": 2}}}}
log = []
counter = collections.Counter("hello world")
step = 0
for i in range(500):                                  # small scalars
    g[f"n_{{i}}"] = i if i % 3 == 0 else (i * 0.25 if i % 3 == 1 else f"s{{i}}")
{FUNCTIONS}
{CLASSES}
for i in range(30):
    g[f"obj_{{i}}"] = g[f"C{{i % 8}}"](i)
"""
TORCH = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
xb, yb = torch.randn(64, 512), torch.randint(0, 10, (64,))
loss = nn.functional.cross_entropy(model(xb), yb)
loss.backward()
opt.step()
opt.zero_grad()
loss = loss.detach()
for i in range(4):                                    # 4 x 2 MB
    globals()[f"t_{i}"] = torch.randn(512, 1024)
"""
TARGET_NAMES = 1000
CELL_CHANGES = "log.append(0.5)\nbig_0[123] += 1.0\nstep = step + 1\n"


def notebook_namespace() -> tuple[dict[str, Any], bool]:
    """The notebook's namespace, padded with small ints to ``TARGET_NAMES`` names; whether
    torch was importable."""
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    exec(NOTEBOOK, ns)
    try:
        exec(TORCH, ns)
        has_torch = True
    except ImportError:
        has_torch = False
    for name in ("g", "i", "n", "labels"):
        ns.pop(name, None)
    names = _names(ns)
    for i in range(TARGET_NAMES - len(names)):
        ns[f"pad_{i}"] = i
    return ns, has_torch


def _names(ns: dict[str, Any]) -> dict[str, Any]:
    from nsight_magic.shared_state.notebook_side import notebook_names

    return notebook_names(ns, frozenset())


def _mb(nbytes: float) -> float:
    return nbytes / 1e6


def payload_bytes(ns: dict[str, Any]) -> dict[str, float]:
    """The namespace's bulk, by kind (arrays', tensors' and frames' own bytes; lists and dicts
    by their objects' sizes, shallowly)."""
    import numpy as np
    import pandas as pd

    torch = sys.modules.get("torch")
    out = {"numpy": 0.0, "torch": 0.0, "pandas": 0.0, "python": 0.0}
    seen: set[int] = set()
    for value in _names(ns).values():
        if isinstance(value, np.ndarray):
            out["numpy"] += value.nbytes
        elif torch is not None and isinstance(value, torch.Tensor):
            out["torch"] += value.nbytes
        elif torch is not None and isinstance(value, torch.nn.Module):
            out["torch"] += sum(p.nbytes for p in value.parameters())
        elif torch is not None and isinstance(value, torch.optim.Optimizer):
            out["torch"] += sum(t.nbytes for s in value.state.values() for t in s.values()
                                if isinstance(t, torch.Tensor))  # fmt: skip
        elif isinstance(value, pd.DataFrame):
            out["pandas"] += int(value.memory_usage(deep=True).sum())
        elif isinstance(value, list | dict) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            out["python"] += sys.getsizeof(value) + sum(
                sys.getsizeof(k) + sys.getsizeof(v) for k, v in items
            )
    return {k: _mb(v) for k, v in out.items()}


# --- the worker ---


def worker_main(profile_on: bool) -> None:
    """The worker's side: one JSON request a line on stdin, one reply a line on stdout."""
    from nsight_magic.shared_state.worker_side import WorkerState

    channel = sys.stdout
    sys.stdout = sys.stderr  # what a cell prints is not the channel's
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    state = WorkerState(ns)
    profile = cProfile.Profile() if profile_on else None
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        reply: dict[str, Any] = {"ok": True}
        profiling = profile is not None and msg.get("profile")
        t0 = time.perf_counter()
        if profiling:
            profile.enable()  # type: ignore[union-attr]
        try:
            if op == "imports":  # a prewarmed worker has its imports (session/runs/prewarm.py)
                import numpy  # noqa: F401
                import pandas  # noqa: F401

                if msg.get("torch"):
                    import torch  # noqa: F401
            elif op == "receive":
                reply["got"] = state.receive(msg["path"])
            elif op == "mark":
                state.mark_process(msg["folder"])
            elif op == "exec":
                exec(msg["code"], ns)
            elif op == "send_back":
                reply["got"] = state.send_back(msg["path"], MAX_BYTES, BOUND_S)
            elif op == "agreed":  # the notebook applied it (state/exchange.py asks the same)
                reply["got"] = state.agreed(msg.get("path"))
            elif op == "profile":
                reply["text"] = _stats(profile, msg["top"]) if profile is not None else ""
            elif op == "stop":
                break
        except BaseException as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            if profiling:
                profile.disable()  # type: ignore[union-attr]
        reply["s"] = time.perf_counter() - t0
        channel.write(json.dumps(reply, default=str) + "\n")
        channel.flush()


def _stats(profile: cProfile.Profile, top: int) -> str:
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return text.getvalue()


class Worker:
    """The worker process, asked one request at a time."""

    def __init__(self, has_torch: bool, profile: bool = False) -> None:
        argv = [sys.executable, "-m", "benchmarks.state_cost", "--worker"]
        if profile:
            argv.append("--worker-profile")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.ask({"op": "imports", "torch": has_torch})

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited ({self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"the worker's {msg['op']} failed: {reply.get('error')}")
        return reply

    def stop(self) -> None:
        proc = self.proc
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
            proc.stdin.close()
            proc.wait(timeout=60)


# --- one profiled cell, as exchange.send + the cell + exchange.bring_back take it ---


def profiled_cell(
    mirror: Any, ns: dict[str, Any], worker: Worker, folder: Path, body: str,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One profiled cell's state exchange: seconds per phase (the cell's own run left out)."""
    shared, results = folder / "shared.pkl", folder / "results.pkl"
    flag = profile is not None
    row: dict[str, Any] = {}
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    out = mirror.outgoing(_names(ns), max_bytes=MAX_BYTES)
    if profile is not None:
        profile.disable()
    t1 = time.perf_counter()
    row["nb_outgoing_s"] = t1 - start
    row["sent_bytes"] = len(out.blob)
    row["sent_new"], row["sent_changed"] = len(out.msg.new), len(out.msg.changed)
    row["write_s"] = row["wk_receive_s"] = 0.0
    ipc = 0.0
    if out.blob:
        shared.write_bytes(out.blob)
        t2 = time.perf_counter()
        row["write_s"] = t2 - t1
        got = worker.ask({"op": "receive", "path": str(shared), "profile": flag})
        row["wk_receive_s"] = got["s"]
        ipc += time.perf_counter() - t2 - got["s"]
        shared.unlink()
    mirror.agreed(out)
    t3 = time.perf_counter()
    got = worker.ask({"op": "mark", "folder": str(folder), "profile": flag})
    row["wk_mark_s"] = got["s"]
    t4 = time.perf_counter()
    ipc += t4 - t3 - got["s"]
    cell = worker.ask({"op": "exec", "code": body})  # the cell's own run: not counted
    t5 = time.perf_counter()
    row["cell_s"] = cell["s"]
    got = worker.ask({"op": "send_back", "path": str(results), "profile": flag})
    t6 = time.perf_counter()
    row["wk_send_back_s"] = got["s"]
    ipc += t6 - t5 - got["s"]
    if profile is not None:
        profile.enable()
    data = results.read_bytes()
    back = mirror.incoming(data, got["got"].get("cannot") or {})
    if profile is not None:
        profile.disable()
    got_agreed = worker.ask({"op": "agreed", "path": None})
    end = time.perf_counter()
    results.unlink()
    row["wk_agreed_s"] = got_agreed["s"]
    row["nb_incoming_s"] = end - t6 - got_agreed["s"]
    row["back_bytes"] = len(data)
    row["back_new"], row["back_changed"] = got["got"]["new"], got["got"]["changed"]
    row["back_names"] = sorted(back.applied.bound)
    row["ipc_s"] = ipc
    row["total_s"] = (end - start) - (t5 - t4)  # all but the cell's own run
    return row


PHASES = ("nb_outgoing_s", "write_s", "wk_receive_s", "wk_mark_s", "wk_send_back_s",
          "nb_incoming_s", "ipc_s", "total_s")  # fmt: skip


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rows) for k in PHASES}
    out["min_total_s"] = min(r["total_s"] for r in rows)
    out["max_total_s"] = max(r["total_s"] for r in rows)
    for k in ("sent_bytes", "back_bytes", "sent_new", "sent_changed", "back_new",
              "back_changed"):  # fmt: skip
        out[k] = statistics.median(r[k] for r in rows)
    out["back_names"] = rows[-1]["back_names"]
    out["repeats"] = len(rows)
    return out


def naive(ns: dict[str, Any], repeat: int) -> dict[str, Any]:
    """``cloudpickle.dumps`` of every notebook name, and its ``loads`` (median)."""
    import cloudpickle

    names = _names(ns)
    dumps, loads, size = [], [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        blob = cloudpickle.dumps(names, protocol=5)
        t1 = time.perf_counter()
        cloudpickle.loads(blob)
        t2 = time.perf_counter()
        dumps.append(t1 - t0)
        loads.append(t2 - t1)
        size = len(blob)
    return {"dumps_s": statistics.median(dumps), "loads_s": statistics.median(loads),
            "bytes": size, "repeats": repeat}  # fmt: skip


def later_cells(
    mirror: Any, ns: dict[str, Any], worker: Worker, folder: Path, repeat: int,
    cases: dict[str, list[dict[str, Any]]],
) -> None:  # fmt: skip
    """After the first cell: one to settle, then ``repeat`` cells of each later case."""
    profiled_cell(mirror, ns, worker, folder, "pass")
    for _ in range(repeat):
        cases["steady"].append(profiled_cell(mirror, ns, worker, folder, "pass"))
    for _ in range(repeat):
        cases["cell changed a few"].append(profiled_cell(mirror, ns, worker, folder,
                                                         CELL_CHANGES))  # fmt: skip
    for _ in range(repeat):
        exec(CELL_CHANGES, ns)  # an ordinary cell, in the notebook
        cases["notebook changed a few"].append(profiled_cell(mirror, ns, worker, folder, "pass"))


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--worker"]:
        worker_main("--worker-profile" in args_in)
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.state_cost")
    parser.add_argument("--repeat", type=int, default=7, help="cells per later case")
    parser.add_argument("--first", type=int, default=3, help="fresh workers for the first cell")
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", type=int, default=0, help="cProfile: N functions per side")
    args = parser.parse_args(args_in)
    from nsight_magic.shared_state.notebook_side import NotebookState

    t0 = time.perf_counter()
    ns, has_torch = notebook_namespace()
    names = _names(ns)
    bulk = payload_bytes(ns)
    info: dict[str, Any] = {
        "when_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "names": len(names), "torch": has_torch, "payload_mb": bulk,
        "payload_total_mb": sum(bulk.values()), "build_s": time.perf_counter() - t0,
        "load_before": os.getloadavg(),
    }  # fmt: skip
    print(f"P18 notebook: {len(names)} names, {info['payload_total_mb']:.1f} MB of CPU objects "
          f"({', '.join(f'{k} {v:.1f}' for k, v in bulk.items())} MB), torch {has_torch}",
          flush=True)  # fmt: skip
    cases: dict[str, list[dict[str, Any]]] = {"first": [], "steady": [], "cell changed a few": [],
                                              "notebook changed a few": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="nsm-statecost-") as tmp:
        folder = Path(tmp)
        firsts = max(args.first, 1)
        for k in range(firsts):
            worker = Worker(has_torch)
            try:
                mirror = NotebookState(ns)
                cases["first"].append(profiled_cell(mirror, ns, worker, folder, "pass"))
                if k == firsts - 1:  # the last worker goes on
                    later_cells(mirror, ns, worker, folder, args.repeat, cases)
            finally:
                worker.stop()
        baseline = naive(ns, args.repeat)
        profiles: dict[str, str] = {}
        if args.profile:
            worker = Worker(has_torch, profile=True)
            try:
                mirror = NotebookState(ns)
                profiled_cell(mirror, ns, worker, folder, "pass")
                profiled_cell(mirror, ns, worker, folder, "pass")
                profile = cProfile.Profile()
                profiled_cell(mirror, ns, worker, folder, "pass", profile=profile)
                profiles["notebook"] = _stats(profile, args.profile)
                profiles["worker"] = worker.ask({"op": "profile", "top": args.profile})["text"]
            finally:
                worker.stop()
    info["load_after"] = os.getloadavg()
    rows = {name: median_row(rs) for name, rs in cases.items() if rs}
    _print(rows, baseline, info)
    for side, text in profiles.items():
        print(f"\n== cProfile, one steady cell, {side} side ==\n{text}")
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "cases": rows,
                                               "cloudpickle": baseline}, indent=1))  # fmt: skip


def _print(rows: dict[str, dict[str, Any]], baseline: dict[str, Any], info: dict[str, Any]) -> None:
    print(f"\nP18 per profiled cell, seconds (median; {info['names']} names, "
          f"{info['payload_total_mb']:.0f} MB; target total <= 0.1 s; load average "
          f"{info['load_before'][0]:.2f} before, {info['load_after'][0]:.2f} after)")  # fmt: skip
    head = ("case", "nb outgoing", "write", "wk receive", "wk mark", "wk send_back",
            "nb incoming", "ipc", "total", "[min-max]", "sent MB", "back MB")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, r in rows.items():
        cells = [name, *(f"{r[k]:.3f}" for k in PHASES),
                 f"{r['min_total_s']:.3f}-{r['max_total_s']:.3f}",
                 f"{_mb(r['sent_bytes']):.2f}", f"{_mb(r['back_bytes']):.3f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    per_cell = baseline["dumps_s"] + baseline["loads_s"]
    print(f"| cloudpickle.dumps of every name (naive) | {baseline['dumps_s']:.3f} | | "
          f"loads {baseline['loads_s']:.3f} | | | | | {per_cell:.3f} one way, "
          f"{2 * per_cell:.3f} both | | {_mb(baseline['bytes']):.1f} | |")  # fmt: skip
    for name, r in rows.items():
        print(f"  {name}: sent {r['sent_new']:.0f} new / {r['sent_changed']:.0f} changed "
              f"objects, back {r['back_new']:.0f} new / {r['back_changed']:.0f} changed, "
              f"names back {r['back_names'][:8]}")  # fmt: skip


if __name__ == "__main__":
    main()
