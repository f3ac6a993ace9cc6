"""Notebook semantics on the GPU, by difference (issue 56): one notebook run twice by nbclient in
a real ipykernel, plain (the profiling magics' lines left out, drill-downs and sweeps skipped) and
profiled, and compared after every cell: a trainer's history and global step, the identity of an
alias, a transformers ModelOutput rebound by ``out = model(...)``, the random streams (Python,
NumPy, torch CPU and CUDA), an iterator, the model's weights (a checksum), and a Triton kernel
written in an ordinary cell (the tutorial's softmax) under ``%%nsys``, a drill-down,
``%%ncu --nvtx``, ``--sweep`` and ``profile_top``.

    source .device/env.sh && python3 tests/gpu/semantics.py --out $OUT

Writes ``semantics.json`` (per cell: equal or the difference, the profiled cell's wall time) and
both executed notebooks; exits 1 on a difference or an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# each cell: (source, plain) where plain is what the plain notebook runs instead ("" = nothing)
PROBE = r"""
import hashlib, json, random, time
import numpy as np, torch
STATES = []
_t0 = {}
def _digest(x):
    return hashlib.sha1(repr(x).encode()).hexdigest()[:12]
def _tensor(t):
    return hashlib.sha1(t.detach().float().cpu().numpy().tobytes()).hexdigest()[:12]
def _probe(result=None):
    ns = get_ipython().user_ns
    s = {"wall": round(time.perf_counter() - _t0.get("t", time.perf_counter()), 2),
         "src": _t0.get("src", "")}
    for name in ("history", "step", "draw", "b"):
        if name in ns:  # a copy: the list as it is after this cell
            s[name] = json.loads(json.dumps(ns[name], default=str))
    if "history" in ns:
        s["alias_is_history"] = ns.get("alias") is ns["history"]
    if "out" in ns:
        s["out"] = (type(ns["out"]).__name__, _tensor(ns["out"].logits))
    if "model" in ns:
        s["weights"] = _tensor(next(ns["model"].parameters()))
    if "y" in ns:
        s["y"] = _tensor(ns["y"])
    s["rng"] = [_digest(random.getstate()), _digest(np.random.get_state()[1].tolist()),
                _tensor(torch.random.get_rng_state())]
    if torch.cuda.is_initialized():
        s["rng"].append(_tensor(torch.cuda.get_rng_state()))
    STATES.append(s)
get_ipython().events.register("pre_run_cell", lambda info: _t0.update(
    t=time.perf_counter(), src=(info.raw_cell or "")[:40]))
get_ipython().events.register("post_run_cell", _probe)
"""

SETUP = r"""
import random, numpy as np, torch, nvtx
from transformers import Qwen2Config, Qwen2ForCausalLM
random.seed(0); np.random.seed(0); torch.manual_seed(0)
config = Qwen2Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
model = Qwen2ForCausalLM(config).cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, 32000, (4, 256), device="cuda")
history = []
alias = history
step = 0
def train_step():
    global step
    out = model(ids, labels=ids)
    out.loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    step += 1
    history.append(round(out.loss.item(), 4))
    return out.loss.detach()
"""

TRITON = r"""
import triton
import triton.language as tl

@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + offs, y, mask=mask)

def softmax(x):
    out = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], BLOCK=block)
    return out

xs = torch.randn(512, 1000, device="cuda")
"""

CELLS: list[tuple[str, str | None]] = [
    ("%load_ext nsight_magic", ""),
    (SETUP, None),
    ("%%nsys\nloss = train_step()", None),
    ("%%nsys --warmup 1\nloss = train_step()", None),
    (
        "_r = nsight_magic.last_run()\n_d = _r.profile_kernel(_r.kernel_summary()['name'].iloc[0])",
        "",
    ),
    ("%%ncu --launch-count 3\nloss = train_step()", None),
    ("%%nsys --host\nloss = train_step()", None),
    ("with torch.no_grad():\n    out = model(ids)", None),
    ("%%nsys\nwith torch.no_grad():\n    out = model(ids[:, :128])", None),
    (
        "%%nsys\ndraw = (random.random(), float(np.random.rand()), float(torch.rand(1)),\n"
        "        float(torch.rand(1, device='cuda')))",
        None,
    ),
    (
        "draw = (random.random(), float(np.random.rand()), float(torch.rand(1)),\n"
        "        float(torch.rand(1, device='cuda')))",
        None,
    ),
    ("it = iter(range(10))", None),
    ("%%nsys\nb = next(it)\n_k = torch.ones(1, device='cuda')", None),
    ("b = next(it)", None),
    (TRITON, None),
    ("%%nsys\ny = softmax(xs)", None),
    (
        "_r = nsight_magic.last_run()\n_d = _r.profile_kernel(_r.kernel_summary()['name'].iloc[0])",
        "",
    ),
    ("_top = _r.profile_top(2)", ""),
    ("%%ncu --nvtx tri@softmax\nwith nvtx.annotate('tri@softmax'):\n    y = softmax(xs)", None),
    ("%%nsys\nloss = train_step()", None),
    # last: a sweep (the first GPU run's notebook kernel died during it, 2026-12-06)
    ("%%nsys --sweep n=256,512\ny_sweep = softmax(xs[:n])", ""),
]


def notebook(plain: bool, runs: Path) -> object:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(PROBE.strip()))
    if not plain:
        nb.cells.append(nbformat.v4.new_code_cell(
            f"%load_ext nsight_magic\n%config NsightMagic.runs_dir = {str(runs)!r}\n"
            "import nsight_magic"))  # fmt: skip
    for source, instead in CELLS:
        if source.startswith("%load_ext"):
            continue
        if plain:
            if instead == "":
                text = "pass"
            elif source.startswith("%%"):
                text = source.split("\n", 1)[1]
            else:
                text = source
        else:
            text = source
        nb.cells.append(nbformat.v4.new_code_cell(text.strip()))
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json\nprint('STATES=' + json.dumps(STATES, default=str))"))  # fmt: skip
    return nb


def execute(nb: object, work: Path, keep: Path) -> list[dict[str, object]]:
    """Run ``nb``; it is written to ``keep`` after every cell (a kernel that dies leaves the
    cells it ran, and the log names the last one)."""
    import nbformat
    from nbclient import NotebookClient

    t0 = time.perf_counter()

    def executed(cell: object, cell_index: int, execute_reply: object) -> None:
        first = cell.source.splitlines()[0][:70] if cell.source else ""  # type: ignore[attr-defined]
        print(f"[{time.perf_counter() - t0:7.1f} s] {keep.stem} cell {cell_index}: {first}",
              flush=True)  # fmt: skip
        nbformat.write(nb, keep)

    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(work)}})  # fmt: skip
    client.on_cell_executed = executed
    try:
        client.execute()
    finally:
        nbformat.write(nb, keep)
    last = nb.cells[-1]  # type: ignore[attr-defined]
    text = "".join(o.get("text", "") for o in last.get("outputs", []))
    line = next(x for x in text.splitlines() if x.startswith("STATES="))
    states = json.loads(line[len("STATES=") :])
    # one per cell of CELLS: not the probe's own cell, the extension's or this last one
    ours = ("import hashlib", "%load_ext", "import json\nprint('STATES")
    # the probe's own cell has no source (its pre-run hook came after it began)
    return [s for s in states if s["src"] and not str(s["src"]).startswith(ours)]


def errors(nb: object) -> list[str]:
    found = []
    for cell in nb.cells:  # type: ignore[attr-defined]
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                found.append(
                    f"{cell.source.splitlines()[0][:60]}: {o['ename']}: {o['evalue'][:300]}"
                )
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nsight-semantics-"))
    t0 = time.perf_counter()
    plain_nb, profiled_nb = notebook(True, work / "runs"), notebook(False, work / "runs")
    profiled = execute(profiled_nb, work, args.out / "semantics_profiled.ipynb")
    plain = execute(plain_nb, work, args.out / "semantics_plain.ipynb")
    rows = []
    sources = [s for s, _ in CELLS if not s.startswith("%load_ext")]
    for i, (a, b) in enumerate(zip(plain, profiled, strict=False)):
        wall = b.get("wall")
        a = {k: v for k, v in a.items() if k not in ("wall", "src")}
        b = {k: v for k, v in b.items() if k not in ("wall", "src")}
        diff = {k: (a.get(k), b.get(k)) for k in sorted({*a, *b}) if a.get(k) != b.get(k)}
        cell = sources[i].splitlines()[0] if i < len(sources) else "?"
        rows.append({"cell": cell, "equal": not diff, "diff": diff, "profiled_wall_s": wall})
    report = {"wall_s": round(time.perf_counter() - t0, 1), "cells": rows,
              "errors_plain": errors(plain_nb), "errors_profiled": errors(profiled_nb),
              "compared": len(rows), "equal": sum(r["equal"] for r in rows)}  # fmt: skip
    (args.out / "semantics.json").write_text(json.dumps(report, indent=1, default=str))
    for row in rows:
        print(("SAME " if row["equal"] else "DIFF ") + row["cell"], row["profiled_wall_s"],
              "" if row["equal"] else json.dumps(row["diff"], default=str)[:400])  # fmt: skip
    print("errors plain:", report["errors_plain"])
    print("errors profiled:", report["errors_profiled"])
    print(f"{report['equal']} of {report['compared']} cells equal, {report['wall_s']} s")
    sys.exit(0 if report["equal"] == report["compared"] and not report["errors_profiled"]
             and not report["errors_plain"] else 1)  # fmt: skip


if __name__ == "__main__":
    main()
