"""Notebook semantics on the GPU, by difference (issue 56): one notebook run twice by nbclient in
a real ipykernel, plain (the profiling magics' lines left out, drill-downs and sweeps skipped) and
profiled, and compared after every cell: a trainer's history and global step, the identity of an
alias, a transformers ModelOutput rebound by ``out = model(...)``, the random streams (Python,
NumPy, torch CPU and CUDA), an iterator, the model's weights, its EMA copy and its AdamW state
(exact checksums of every bit), and a Triton kernel written in an ordinary cell (the tutorial's
softmax) under ``%%nsys``, a drill-down, ``%%ncu --nvtx``, ``--sweep`` and ``profile_top``.

Issue 56's item 8 in full: the training step is a Qwen2 of fp32 master weights with an EMA copy
and fused AdamW whose state fills >= 39% of the card (36 layers on an 80 GB H100, more on a
larger card; each probe records
``memory_allocated`` over the card's memory, ``gpu_share``: shown, not compared); its
``train_step`` appends ``loss.item()`` and increments a ``global`` step, through ``%%nsys``, a
warm-up, a drill-down, ``%%ncu`` and ``--host``. The prefill ``out = model(...)`` runs under
``%%nsys``, ``%%ncu --nvtx LLM:LLM@prefill`` and ``%%nsys --pytorch shapes`` in a row. The Triton
kernel drilled down from its ``%%nsys`` run is drilled down once more with ``--metrics`` of
instruction counts; its launch counters (from the default drill-down) and those counts
(``tri_counters``, recorded in the profiled notebook only) must equal a bare ``ncu`` run of the
same kernel on the same input in a script of its own, run after both notebooks.

    source .device/env.sh && python3 tests/gpu/semantics.py --out $OUT

Writes ``semantics.json`` (per cell: equal or the difference, the profiled cell's wall time,
the training state's share of the GPU; the Triton counters of both runs) and both executed
notebooks; exits 1 on a difference, an error, Triton counters that differ or a training state
under 39% of the card.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# the training state must fill at least this share of the card (issue 56, item 8)
MIN_SHARE = 0.39
# probe fields shown, not compared: the cell's time and text, the share of the GPU the notebook
# process holds, the Triton counters (the profiled notebook's only)
NOT_COMPARED = ("wall", "src", "gpu_share", "tri_counters")

# Deterministic counters of the Triton softmax compared with a bare ncu run. Launch counters:
# ncu records every launch__* metric of each launch whatever it collects (tests/data/ncu_raw/
# ncu_small_roofline.raw.csv, a --set roofline report, and ncu_gemm_metrics.raw.csv, a --metrics
# report that did not ask for them, hold them all), so the default (roofline) drill-down has
# them. Integers only (launch__waves_per_multiprocessor is a rounded ratio in ncu's CSV).
TRI_LAUNCH = [
    "launch__grid_size",
    "launch__block_size",
    "launch__thread_count",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
]
# Warp-level instruction counts (not in --set roofline: a second drill-down asks for them with
# --metrics; names as ncu 2025.3.1 lists them on sm_90, tests/data/ncu_raw/ncu_small_full.raw.csv).
# The kernel has no branch on the data (masked loads, max/exp/sum reductions), so the counts do
# not depend on the values; thread-level predicated-on counts could, and are left out.
TRI_INST = [
    "smsp__inst_executed.sum",
    "smsp__inst_executed_op_branch.sum",
    "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
]
TRI_XS = "triton_xs.pt"  # the softmax's input, saved by the profiled notebook for the bare run

# each cell: (source, plain) where plain is what the plain notebook runs instead ("" = nothing)
PROBE = r"""
import hashlib, json, random, time
import numpy as np, torch
STATES = []
_t0 = {}
_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
def _digest(x):
    return hashlib.sha1(repr(x).encode()).hexdigest()[:12]
def _tensor(t):
    return hashlib.sha1(t.detach().float().cpu().numpy().tobytes()).hexdigest()[:12]
def _bits(tensors):
    # every bit of every tensor, exactly: each one's bit patterns summed as integers where it
    # lives (GBs in milliseconds; integer sums do not depend on the order), the sums hashed
    tensors = [t.detach() for t in tensors]
    if not tensors:
        return None
    sums = [t.contiguous().view(_INTS[t.element_size()]).sum(dtype=torch.int64) for t in tensors]
    if len({x.device for x in sums}) > 1:
        sums = [x.cpu() for x in sums]
    return _digest(torch.stack(sums).tolist())  # one copy to the host
def _adam(model, opt):
    state = [opt.state.get(p, {}) for p in model.parameters()]
    return _bits([s[k] for s in state for k in sorted(s) if torch.is_tensor(s[k])])
def _probe(result=None):
    ns = get_ipython().user_ns
    s = {"wall": round(time.perf_counter() - _t0.get("t", time.perf_counter()), 2),
         "src": _t0.get("src", "")}
    for name in ("history", "step", "draw", "b", "tri_counters", "cast", "amp"):
        if name in ns:  # a copy: the list as it is after this cell
            s[name] = json.loads(json.dumps(ns[name], default=str))
    if "history" in ns:
        s["alias_is_history"] = ns.get("alias") is ns["history"]
    if "out" in ns:
        s["out"] = (type(ns["out"]).__name__, _tensor(ns["out"].logits))
    if "model" in ns:
        s["weights"] = _bits(list(ns["model"].parameters()))
    if "ema" in ns:
        s["ema"] = _bits(ns["ema"])
    if "model" in ns and "opt" in ns:
        s["adam"] = _adam(ns["model"], ns["opt"])
    if "y" in ns:
        s["y"] = _tensor(ns["y"])
    s["rng"] = [_digest(random.getstate()), _digest(np.random.get_state()[1].tolist()),
                _tensor(torch.random.get_rng_state())]
    if torch.cuda.is_initialized():
        s["rng"].append(_tensor(torch.cuda.get_rng_state()))
        s["gpu_share"] = round(torch.cuda.memory_allocated()
                               / torch.cuda.get_device_properties(0).total_memory, 4)
    STATES.append(s)
get_ipython().events.register("pre_run_cell", lambda info: _t0.update(
    t=time.perf_counter(), src=(info.raw_cell or "")[:40]))
get_ipython().events.register("post_run_cell", _probe)
"""

# fp32 master weights: 1,726,216,192 parameters (embeddings and LM head 2 x 32000 x 2048, 36
# layers of 44,309,504: q/k/v with biases, o, the 3 MLP matrices, 2 norms), 20 bytes each in
# training: weights 4 + gradients 4 (kept between steps: zero_grad(set_to_none=False)) + fused
# AdamW's exp_avg and exp_avg_sq 8 + the EMA copy 4 = 34.5 GB; after the setup torch counts
# 35.16 GB allocated, 41.4% of the H100 80GB HBM3's 85.0e9 bytes (2026-12-06). The step's
# activations (2 x 256 tokens) take ~5-6 GB more in the process that runs it; a warm-up or a
# drill-down's re-run saves what the step changes (about the 34.5 GB again, on the GPU when it
# has room) and puts it back. Eager attention: SDPA's flash and memory-efficient backward
# kernels add dQ up with atomics, and the weights must equal the plain run's bit for bit. A
# step takes ~0.2 s.
SETUP = r"""
import random, numpy as np, torch, nvtx
from transformers import Qwen2Config, Qwen2ForCausalLM
random.seed(0); np.random.seed(0); torch.manual_seed(0)
# 36 layers on an 80 GB H100 (85.0e9 bytes); as many more as keep the share on a larger card
layers = round(36 * torch.cuda.get_device_properties(0).total_memory / 85.0e9)
config = Qwen2Config(hidden_size=2048, intermediate_size=5504, num_hidden_layers=layers,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                     attn_implementation="eager")
with torch.device("cuda"):
    model = Qwen2ForCausalLM(config)  # fp32
ema = [p.detach().clone() for p in model.parameters()]
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, 32000, (2, 256), device="cuda")
history = []
alias = history
step = 0
def train_step():
    global step
    out = model(ids, labels=ids)
    out.loss.backward()
    opt.step(); opt.zero_grad(set_to_none=False)
    with torch.no_grad():
        torch._foreach_lerp_(ema, list(model.parameters()), 0.001)
    step += 1
    history.append(round(out.loss.item(), 4))
    return out.loss.detach()
loss = train_step()  # AdamW's state and the gradients exist from here on: the whole state
torch.cuda.synchronize(); torch.cuda.empty_cache()  # the step's activations, not kept cached
print(f"{sum(p.numel() for p in model.parameters()):,} parameters; "
      f"{torch.cuda.memory_allocated() / 1e9:.2f} GB allocated, "
      f"{torch.cuda.memory_allocated() / torch.cuda.get_device_properties(0).total_memory:.1%} "
      "of the GPU")
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

# the same kernel alone, for a bare ncu run (main): the notebook's input when it was saved
BARE = (
    "import os\nimport torch\n"
    + TRITON
    + f"""
saved = os.path.join(os.path.dirname(os.path.abspath(__file__)), {TRI_XS!r})
if os.path.exists(saved):
    xs = torch.load(saved).cuda()
y = softmax(xs)
torch.cuda.synchronize()
print("bare softmax:", tuple(y.shape), float(y.sum()))
"""
)

PREFILL = (
    'with torch.no_grad(), nvtx.annotate("LLM@prefill", domain="LLM"):\n'
    "    out = model(ids[:, :128])"
)
DRILL = "_r = nsight_magic.last_run()\n_d = _r.profile_kernel(_r.kernel_summary()['name'].iloc[0])"
# the Triton kernel's instruction counts: a drill-down of the same launch with --metrics only
DRILL_COUNTS = (
    "_dc = _r.profile_kernel(_r.kernel_summary()['name'].iloc[0], set='none',\n"
    f"                        metrics={TRI_INST!r})"
)
# what the two drill-downs counted, and the input the bare ncu run launches the kernel on
COUNTERS = f"""torch.save(xs.cpu(), {TRI_XS!r})
tri_counters = {{"kernels": [str(_run.kernels()["name"].iloc[0]) for _run in (_d, _dc)]}}
for _key, _run, _names in (("roofline", _d, {TRI_LAUNCH!r}),
                           ("metrics", _dc, {TRI_LAUNCH + TRI_INST!r})):
    _f = _run.metrics()
    _f = _f[(_f["launch"] == 0) & _f["metric"].isin(_names)]
    tri_counters[_key] = {{str(m): float(v) for m, v in zip(_f["metric"], _f["value"])}}
print(tri_counters)"""

CELLS: list[tuple[str, str | None]] = [
    ("%load_ext nsight_magic", ""),
    (SETUP, None),
    ("%%nsys\nloss = train_step()", None),
    ("%%nsys --warmup 1\nloss = train_step()", None),
    (DRILL, ""),
    ("%%ncu --launch-count 3\nloss = train_step()", None),
    ("%%nsys --host\nloss = train_step()", None),
    ("with torch.no_grad():\n    out = model(ids)", None),
    ("%%nsys\nwith torch.no_grad():\n    out = model(ids[:, :128])", None),
    # the prefill under ncu's NVTX filter and PyTorch's op ranges, in a row after %%nsys
    ("%%ncu --nvtx LLM:LLM@prefill --launch-count 3\n" + PREFILL, None),
    ("%%nsys --pytorch shapes\n" + PREFILL, None),
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
    (DRILL, ""),
    (DRILL_COUNTS, ""),
    (COUNTERS, ""),
    ("_top = _r.profile_top(2)", ""),
    ("%%ncu --nvtx tri@softmax\nwith nvtx.annotate('tri@softmax'):\n    y = softmax(xs)", None),
    ("%%nsys\nloss = train_step()", None),
    # a cast moves a CUDA parameter's memory in the worker: it comes back to the same Parameter
    # (an alias sees it), and the two sides share the new memory (the next profiled in-place
    # change reaches the notebook)
    # and a CPU module moved to the GPU, a GPU one to the CPU, by the same profiled cell
    (
        "small = torch.nn.Linear(64, 64, device='cuda')\nsw = small.weight\n"
        "host_m = torch.nn.Linear(8, 8)\ngpu_m = torch.nn.Linear(8, 8, device='cuda')",
        None,
    ),
    ("%%nsys\nsmall.half()\nhost_m.cuda()\ngpu_m.cpu()", None),
    ("%%nsys\nwith torch.no_grad():\n    small.weight.mul_(2)", None),
    (
        "cast = (str(small.weight.dtype), sw is small.weight, str(sw.dtype),\n"
        "        float(small.weight.float().sum()), float(small(torch.ones(64, device='cuda',\n"
        "        dtype=torch.half)).float().sum()), str(host_m.weight.device),\n"
        "        float(host_m.weight.sum()), str(gpu_m.weight.device), float(gpu_m.weight.sum()))",
        None,
    ),
    # mixed precision across cells: the gradients a profiled backward() makes (CUDA, new to the
    # notebook), GradScaler's scale and tracker (its pickle leaves them out), an LR scheduler's
    # wrapper of opt.step (torch's Optimizer pickle leaves it out), a warm-up put back
    (
        "amp_m = torch.nn.Linear(64, 64, device='cuda')\n"
        "amp_opt = torch.optim.AdamW(amp_m.parameters(), lr=1e-3)\n"
        "amp_sched = torch.optim.lr_scheduler.StepLR(amp_opt, 1, 0.5)\n"
        "scaler = torch.amp.GradScaler('cuda', init_scale=1024.0)",
        None,
    ),
    (
        "%%nsys --warmup 1\nwith torch.autocast('cuda', dtype=torch.float16):\n"
        "    amp_loss = amp_m(torch.ones(8, 64, device='cuda')).float().pow(2).mean()\n"
        "scaler.scale(amp_loss).backward()",
        None,
    ),
    ("%%nsys\nscaler.step(amp_opt)\nscaler.update()\namp_sched.step()\namp_opt.zero_grad()", None),
    (
        "amp = (scaler.get_scale(), int(scaler._growth_tracker), amp_sched.get_last_lr(),\n"
        "       float(amp_m.weight.sum()), amp_m.weight.grad is None)",
        None,
    ),
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


def raw_counters(text: str) -> list[dict[str, str]]:
    """The launches of ``ncu --import REPORT --page raw --csv --print-units base``: one dict
    per launch, column name -> its text (the units row and any line before the header left
    out)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    # data rows number their launch in "ID"; the units row under the header has it blank
    return [dict(zip(header, row, strict=False)) for row in rows[1:] if row and row[0].isdigit()]


def number(text: str | None) -> float | None:
    """A value of ncu's CSV as a float (thousands separators dropped), None if not a number."""
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def bare_ncu(work: Path) -> dict[str, object]:
    """ncu on the Triton softmax alone (``BARE``, on the notebook's saved input when there is
    one): its first launch, the same ``--metrics`` as the drill-down's, no section set; the
    report read back as ncu's raw page (every metric, the launch__* ones included)."""
    ncu = os.environ.get("NSIGHT_MAGIC_NCU") or shutil.which("ncu")
    if not ncu:
        return {"error": "ncu is not on PATH (nor NSIGHT_MAGIC_NCU)"}
    script, report = work / "triton_bare.py", work / "triton_bare"
    script.write_text(BARE)
    argv = [ncu, "--kernel-name", "regex:softmax_kernel", "--launch-count", "1",
            "--metrics", ",".join(TRI_INST), "-f", "-o", str(report),
            sys.executable, str(script)]  # fmt: skip
    read = [ncu, "--import", f"{report}.ncu-rep", "--page", "raw", "--csv", "--print-units", "base"]
    saved = (work / TRI_XS).exists()
    out: dict[str, object] = {"argv": argv, "input": "the notebook's" if saved else "randn"}
    t0 = time.perf_counter()
    try:
        ran = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=600)
        out["profile_rc"], out["profile_log"] = ran.returncode, (ran.stdout + ran.stderr)[-3000:]
        if not Path(f"{report}.ncu-rep").exists():
            out["error"] = f"ncu wrote no report (rc {ran.returncode})"
            return out
        csv_out = subprocess.run(read, cwd=work, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    launches = raw_counters(csv_out.stdout)
    if len(launches) != 1:
        out["error"] = (f"the bare run's report has {len(launches)} launches, not 1 "
                        f"(import rc {csv_out.returncode}: {csv_out.stderr[-500:]})")  # fmt: skip
        return out
    launch = launches[0]
    out["kernel"] = launch.get("Kernel Name")
    out["counters"] = {m: number(launch.get(m)) for m in TRI_LAUNCH + TRI_INST}
    return out


def compare_counters(drill: object, bare: dict[str, object]) -> dict[str, object]:
    """The drill-downs' counters (the notebook's ``tri_counters``) against the bare run's: each
    drill-down's metrics (launch counters from the default one, launch counters and instruction
    counts from the --metrics one) must be there and equal."""
    result: dict[str, object] = {"metrics": {"roofline": TRI_LAUNCH,
                                             "metrics": TRI_LAUNCH + TRI_INST},
                                 "drill": drill, "bare": bare}  # fmt: skip
    if not isinstance(drill, dict):
        result.update(equal=False, error="the profiled notebook recorded no tri_counters")
        return result
    counters = bare.get("counters")
    if not isinstance(counters, dict):
        result.update(equal=False, error=f"the bare ncu run: {bare.get('error')}")
        return result
    diff = {}
    for key, names in (("roofline", TRI_LAUNCH), ("metrics", TRI_LAUNCH + TRI_INST)):
        got = drill.get(key) or {}
        for name in names:
            if got.get(name) is None or got.get(name) != counters.get(name):
                diff[f"{key}:{name}"] = (got.get(name), counters.get(name))
    kernels = [*drill.get("kernels", []), bare.get("kernel")]
    if not all(str(k).startswith("softmax_kernel") for k in kernels):
        diff["kernels"] = kernels
    result.update(equal=not diff, diff=diff)
    return result


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
        share = [a.get("gpu_share"), b.get("gpu_share")]
        a = {k: v for k, v in a.items() if k not in NOT_COMPARED}
        b = {k: v for k, v in b.items() if k not in NOT_COMPARED}
        diff = {k: (a.get(k), b.get(k)) for k in sorted({*a, *b}) if a.get(k) != b.get(k)}
        cell = sources[i].splitlines()[0] if i < len(sources) else "?"
        rows.append({"cell": cell, "equal": not diff, "diff": diff, "profiled_wall_s": wall,
                     "gpu_share_plain_profiled": share})  # fmt: skip
    # the training state's share of the GPU after the setup cell (the first of CELLS compared)
    shares = {"plain": plain[0].get("gpu_share") if plain else None,
              "profiled": profiled[0].get("gpu_share") if profiled else None}  # fmt: skip
    share_ok = isinstance(shares["plain"], float) and shares["plain"] >= MIN_SHARE
    drill = next((s["tri_counters"] for s in reversed(profiled) if "tri_counters" in s), None)
    triton = compare_counters(drill, bare_ncu(work))
    report = {"wall_s": round(time.perf_counter() - t0, 1), "cells": rows,
              "errors_plain": errors(plain_nb), "errors_profiled": errors(profiled_nb),
              "compared": len(rows), "equal": sum(r["equal"] for r in rows),
              "gpu_share_after_setup": shares, "gpu_share_ok": share_ok,
              "triton_counters": triton}  # fmt: skip
    (args.out / "semantics.json").write_text(json.dumps(report, indent=1, default=str))
    for row in rows:
        print(("SAME " if row["equal"] else "DIFF ") + row["cell"], row["profiled_wall_s"],
              "" if row["equal"] else json.dumps(row["diff"], default=str)[:400])  # fmt: skip
    print("errors plain:", report["errors_plain"])
    print("errors profiled:", report["errors_profiled"])
    print(f"training state after the setup: {shares} of the GPU's memory "
          f"({'ok' if share_ok else f'UNDER {MIN_SHARE:.0%}'})")  # fmt: skip
    said = json.dumps({k: triton.get(k) for k in ("diff", "error")}, default=str)[:600]
    print("Triton counters:", "equal to a bare ncu run" if triton["equal"] else "DIFFER", said)
    print(f"{report['equal']} of {report['compared']} cells equal, {report['wall_s']} s")
    sys.exit(0 if report["equal"] == report["compared"] and not report["errors_profiled"]
             and not report["errors_plain"] and triton["equal"] and share_ok else 1)  # fmt: skip


if __name__ == "__main__":
    main()
