"""The GPU acceptance session: what a user does, in one notebook kernel, in order, each step
asserted. Run before resolving any issue that touches the GPU path (tests/gpu/README.md records
every figure):

    source .device/env.sh && python3 tests/gpu/acceptance.py --out $OUT            # 1 GPU
    source .device/env.sh && python3 tests/gpu/acceptance.py --ranks --out $OUT    # 2 GPUs
    source .device/env.sh && python3 tests/gpu/acceptance.py --training --out $OUT # step 14
    source .device/env.sh && python3 tests/gpu/acceptance.py --state --out $OUT    # steps 13 + 15
    source .device/env.sh && python3 tests/gpu/acceptance.py --scale --out $OUT    # step 16

The notebook is built here (cells below), executed by nbclient in a real ipykernel (as Jupyter
does), and written back with its outputs as ``acceptance.ipynb`` beside ``acceptance.json``, the
figures: per step whether it passed, the error if not, and the wall time of every profiled cell.
A step fails on an unexpected error output or a failed ``assert``; later steps still run, so one
GPU session shows every failure. The workload is a transformers Qwen2 decoder with random weights
(not the Llama/GPT models the fixtures and notebooks use), bf16, prefill + decode with NVTX ranges
in a user domain ``LLM`` (named ``LLM@prefill``, an '@' in the name) and the default domain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import scale_steps  # noqa: E402  (step 16, beside this file)

# The first cell: the extension, timing hooks, and the helpers the assert cells use.
PRELUDE = r"""
import csv, json, os, subprocess, sys, time
sys.path.insert(0, {tests!r})
import pandas as pd
import nsight_magic
from nsight_magic.processes import locate as tools
%load_ext nsight_magic
%config NsightMagic.runs_dir = {runs!r}
WALLS = []
_t = {{}}
def _pre(info):
    _t["start"] = time.perf_counter(); _t["cell"] = (info.raw_cell or "").splitlines()[0][:80]
def _post(result):
    WALLS.append((_t.get("cell", ""), time.perf_counter() - _t.get("start", time.perf_counter())))
get_ipython().events.register("pre_run_cell", _pre)
get_ipython().events.register("post_run_cell", _post)
FIG = {{"versions": {{"pandas": pd.__version__}}}}
try:
    import pyarrow, torch, transformers
    FIG["versions"].update(pyarrow=pyarrow.__version__, torch=torch.__version__,
                           transformers=transformers.__version__)
except ImportError:
    pass
def last_wall():
    return WALLS[-1][1]
def read_stats_csv(path):
    # nsys stats writes a range name holding '"' without doubling it (a statement label such as
    # L2: with nvtx.annotate("train@fwd", domain="train"), ...), which no CSV reader takes
    # (pandas: "Expected 14 fields in line 4, saw 16", H100): the name is everything before the
    # last (columns - 1) commas, the other columns being the style and numbers
    import io
    lines = open(path).read().splitlines()
    header = next(csv.reader([lines[0]]))
    rows = [line.rsplit(",", len(header) - 1) for line in lines[1:] if line]
    text = io.StringIO()
    csv.writer(text).writerows([header, *[[r[0].strip('"'), *r[1:]] for r in rows]])
    return pd.read_csv(io.StringIO(text.getvalue()))
def stats_equal(run, tag):
    # our kernel summary and NVTX projection against nsys stats on the same report
    from stats_reference import assert_duration_summary_equal
    rep = next(run.run_dir.glob("*.nsys-rep"))
    out = run.run_dir / ("stats_" + tag)
    subprocess.run([tools.find_tool("nsys"), "stats", "--force-export=true", "--format", "csv",
                    "--report", "cuda_gpu_kern_sum,nvtx_gpu_proj_sum", "-o", str(out), str(rep)],
                   check=True, capture_output=True, timeout=300)
    ref = pd.read_csv(f"{{out}}_cuda_gpu_kern_sum.csv")
    ours = run.kernel_summary()
    assert list(ours["name"]) == list(ref["Name"]), (list(ours["name"])[:5], list(ref["Name"])[:5])
    assert_duration_summary_equal(ours, ref, "Instances")
    proj = read_stats_csv(f"{{out}}_nvtx_gpu_proj_sum.csv")
    mine = run.nvtx_gpu_projection()["proj_total_ns"]
    assert sorted(mine) == sorted(proj["Total Proj Time (ns)"])
    return len(ours)
"""

SETUP = r"""%%nsight_setup --name model
import torch, nvtx
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(0)
cfg = Qwen2Config(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                  num_key_value_heads=4, num_hidden_layers=4, vocab_size=32000,
                  max_position_embeddings=2048)
model = Qwen2ForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
ids = torch.randint(0, 32000, (1, 128), device="cuda")

def generate(ids, steps=16):
    with torch.no_grad():
        with nvtx.annotate("LLM@prefill", domain="LLM"):
            out = model(ids, use_cache=True)
        past = out.past_key_values
        with nvtx.annotate("pick"):
            tok = out.logits[:, -1:].argmax(-1)
        with nvtx.annotate("LLM@decode", domain="LLM"):
            for _ in range(steps):
                out = model(tok, past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    return tok
"""

BIG_BODY = "with torch.no_grad():\n    yb = mlp(xb)\n    sb = big[:4096].float().sum()\n"

# Step 14 (issue 34): a training step of a transformers model (Qwen2, random weights, bf16
# autocast, fused AdamW) with phases train@fwd / train@bwd / train@opt in NVTX domain "train"
# (autograd launches the backward kernels from its own thread).
TRAIN_SETUP = r"""%%nsight_setup --name train
import torch, nvtx
from transformers import Qwen2Config, Qwen2ForCausalLM
from nsight_magic import training_step_flops
torch.manual_seed(0)
# wide enough that the GPU, not the launching CPU, sets each phase's time (a 512-wide model's
# step was launch-bound: its forward, launched from Python, outlasted its backward)
tcfg = Qwen2Config(hidden_size=2048, intermediate_size=5632, num_attention_heads=16,
                   num_key_value_heads=4, num_hidden_layers=4, vocab_size=32000,
                   max_position_embeddings=2048)
tmodel = Qwen2ForCausalLM(tcfg).cuda().train()
topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-4, fused=True)
TB, TT = 8, 1024
tids = torch.randint(0, 32000, (TB, TT), device="cuda")
# the matmul parameters (the embedding table is a lookup): the FLOP helper's N
TN = sum(m.weight.numel() for m in tmodel.modules() if isinstance(m, torch.nn.Linear))
def train_step():
    with nvtx.annotate("train@fwd", domain="train"), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = tmodel(input_ids=tids, labels=tids).loss
    with nvtx.annotate("train@bwd", domain="train"):
        loss.backward()
    with nvtx.annotate("train@opt", domain="train"):
        topt.step()
        topt.zero_grad(set_to_none=True)
    return loss
for _ in range(3):  # cuBLAS/cuDNN set-up and the optimizer's state, outside any capture
    train_step()
torch.cuda.synchronize()
"""

TRAIN_CELL = """\
step = nvtx.start_range("train@step", domain="train")
with nvtx.annotate("train@fwd", domain="train"), torch.autocast("cuda", dtype=torch.bfloat16):
    loss = tmodel(input_ids=tids, labels=tids).loss
with nvtx.annotate("train@bwd", domain="train"):
    loss.backward()
with nvtx.annotate("train@opt", domain="train"):
    topt.step()
    topt.zero_grad(set_to_none=True)
nvtx.end_range(step)
torch.cuda.synchronize()
"""

TRAIN_LOOP = """\
for i in range(4):
    with nvtx.annotate("train@step", domain="train"):
        train_step()
torch.cuda.synchronize()
"""

TRAIN_STEPS: list[tuple[str, str, str | None]] = [
    ("14 setup: a Qwen2 training step", TRAIN_SETUP, None),
    ("14 the step under nsys", "%%nsys --pytorch shapes --warmup 1 -o tstep\n" + TRAIN_CELL, None),
    (
        "14 MFU per phase in (0, 1] (FLOP helper and GEMM op ranges)",
        r"""
FIG["train_step_s"] = last_wall()
f = training_step_flops(TN, TB * TT, n_layers=4, seq_len=TT, d_model=2048)
m = tstep.mfu(flops=f.by_range(step="train@step")).set_index("range")
cols = ["model_flops", "time_ns", "time_source", "mfu_frac", "reason"]
FIG["train_mfu"] = m[cols].to_dict("index")
print(m[["model_flops", "time_ns", "mfu_frac", "reason"]])
for r in ("train@fwd", "train@bwd", "train@step"):
    assert 0 < m.loc[r, "mfu_frac"] <= 1, (r, m.loc[r].to_dict())
ops = tstep.mfu().set_index("range")  # FLOPs from the GEMM op ranges, the backward's included
FIG["train_mfu_ops"] = ops[["model_flops", "backward_flops", "mfu_frac"]].to_dict("index")
for r in ("train@fwd", "train@bwd"):
    assert 0 < ops.loc[r, "mfu_frac"] <= 1, (r, ops.loc[r].to_dict())
ph = tstep.nvtx_phases().set_index("range")
proj = tstep.nvtx_gpu_projection().set_index("range")
rows = ["train@fwd", "train@bwd", "train@opt", "train@step"]
FIG["train_phases"] = ph[["phase_total_ns", "phase_gpu_ops"]].loc[rows].join(
    proj[["proj_total_ns", "gpu_ops"]], how="left").to_dict("index")
# nsys stats' CSV of op ranges is not read back (their names hold commas): tplain checks it
""",
        None,
    ),
    ("14 the step without op ranges", "%%nsys --warmup 1 -o tplain\n" + TRAIN_CELL, None),
    (
        "14 its MFU per phase, phases and projection",
        r"""
import shutil
OUTDIR = os.path.dirname(os.environ["ACCEPT_FIG"])
FIG["train_plain_s"] = last_wall()
# the fixture first: this report as SQLite, beside ncu's report of the same cell (next steps)
rep = next(tplain.run_dir.glob("*.nsys-rep"))
out = os.path.join(OUTDIR, "nsys_train_qwen2.sqlite")
subprocess.run([tools.find_tool("nsys"), "export", "--type", "sqlite", "--force-overwrite=true",
                "-o", out, str(rep)], check=True, capture_output=True, timeout=300)
m = tplain.mfu(flops=f.by_range(step="train@step")).set_index("range")
FIG["train_plain_mfu"] = m[["model_flops", "time_ns", "mfu_frac", "reason"]].to_dict("index")
print(m[["model_flops", "time_ns", "mfu_frac", "reason"]])
ph = tplain.nvtx_phases().set_index("range")
proj = tplain.nvtx_gpu_projection().set_index("range")
rows = ["train@fwd", "train@bwd", "train@opt", "train@step"]
FIG["train_phases"] = ph[["phase_total_ns", "phase_gpu_ops"]].loc[rows].join(
    proj[["proj_total_ns", "gpu_ops"]], how="left").to_dict("index")
print(FIG["train_phases"])
for r in ("train@fwd", "train@bwd", "train@step"):
    assert 0 < m.loc[r, "mfu_frac"] <= 1, (r, m.loc[r].to_dict())
# the backward launches more GPU work than the forward (any thread: autograd's included; a
# phase's time is its span, and a launch-bound forward's span can be the longer one: 30.6 ms
# against 28.2 ms on the H100, 2026-11-27, where the backward ran 537 ops to the forward's 266)
assert ph.loc["train@bwd", "phase_gpu_ops"] > ph.loc["train@fwd", "phase_gpu_ops"], rows
FIG["train_plain_stats_kernels"] = stats_equal(tplain, "plain")
FIG["train_plain_sqlite_bytes"] = os.path.getsize(out)
""",
        None,
    ),
    (
        "14 %%ncu --nvtx train@bwd: every kernel knows its phase",
        "%%ncu --nvtx train@bwd --launch-count 4 --warmup 1 -o tbwd\n" + TRAIN_CELL,
        None,
    ),
    (
        "14 the backward kernels' phase, whatever their thread",
        r"""
k = tbwd.kernels()
FIG["train_bwd_ncu"] = k[["name", "nvtx", "phase"]].to_dict("records")
print(k[["name", "nvtx", "phase"]])
assert len(k) == 4 and (k["phase"] == "train:train@bwd").all(), k["phase"].tolist()
def keep(run, name):  # an ncu report is ~14 MB raw, ~0.6 MB packed
    target = os.path.join(OUTDIR, name)
    shutil.copy(next(run.run_dir.glob("*.ncu-rep")), target)
    subprocess.run(["xz", "-T0", "-9", "-f", target], check=True, timeout=300)
    FIG[name + ".xz bytes"] = os.path.getsize(target + ".xz")
keep(tbwd, "ncu_train_bwd.ncu-rep")
""",
        None,
    ),
    (
        "14 %%ncu on 110 launches across the forward/backward boundary (duration only)",
        "%%ncu --set none --metrics gpu__time_duration.sum --launch-skip 190 --launch-count 110 "
        "--warmup 1 -o tall\n" + TRAIN_CELL,
        None,
    ),
    (
        "14 ncu's phases are nsys's phases",
        r"""
from collections import Counter
k = tall.kernels()
nk = tplain.kernels().assign(phase=tplain.kernel_phases()).sort_values("start_ns", kind="stable")
window = nk.iloc[190:300]
FIG["train_phase_counts"] = {"ncu": dict(Counter(k["phase"])),
                             "nsys": dict(Counter(window["phase"]))}
print(FIG["train_phase_counts"])
keep(tall, "ncu_train_step.ncu-rep")
assert k["phase"].tolist() == window["phase"].tolist(), FIG["train_phase_counts"]
assert set(k["phase"]) == {"train:train@fwd", "train:train@bwd"}
""",
        None,
    ),
    ("14 four steps, whole cell", "%%nsys -o tloop\n" + TRAIN_LOOP, None),
    (
        "14 the same cell, measured",
        r"""
def _rep(run):
    rep = next(run.run_dir.glob("*.nsys-rep"))
    return {"wall_s": last_wall(), "rep_bytes": rep.stat().st_size,
            "kernels": len(run.kernels()), "step_ranges": int(
                (run.nvtx()["range"] == "train@step").sum()),
            "timings": run.meta.get("timings"),
            "cell_s": (run.meta.get("cell_status") or {}).get("cell_s"),
            "gate_stop_s": (run.meta.get("cell_status") or {}).get("gate_stop_s")}
FIG["range_whole"] = _rep(tloop)
print(FIG["range_whole"])
""",
        None,
    ),
    ("14 --nvtx train@step#3", "%%nsys --nvtx train@step#3 -o tone\n" + TRAIN_LOOP, None),
    (
        "14 one step of four: its kernels, backward included",
        r"""
FIG["range_one"] = _rep(tone)
print(FIG["range_one"])
v = tone.nvtx()
FIG["range_one_ranges"] = sorted(set(v["domain"] + ":" + v["range"]))[:20]
assert FIG["range_one"]["step_ranges"] == 1
ph = Counter(tone.kernel_phases())
FIG["range_one_phases"] = dict(ph)
assert ph["train:train@bwd"] > 0 and ph["train:train@fwd"] > 0
n_all = FIG["range_whole"]["kernels"]
assert 0.2 * n_all <= FIG["range_one"]["kernels"] <= 0.3 * n_all, (n_all, FIG["range_one"])
""",
        None,
    ),
    (
        "14 --nvtx a range never opened",
        "%%nsys --nvtx train@stpe -o tnone\n" + TRAIN_LOOP,
        "NothingCapturedError",
    ),
    (
        "14 --fresh --nvtx train@step#2",
        "%%nsys --fresh --nvtx train:train@step#2 -o tfresh\n" + TRAIN_LOOP,
        None,
    ),
    (
        "14 the fresh one",
        r"""
FIG["range_fresh"] = _rep(tfresh)
print(FIG["range_fresh"])
assert FIG["range_fresh"]["step_ranges"] == 1
""",
        None,
    ),
]


# (step, cell source, expected error name or None). Steps follow issue #21's list.
# (name, cell source, expected error class or None)
Step = tuple[str, str, str | None]

STEPS: list[Step] = [
    ("0 prelude", PRELUDE, None),
    ("1 setup: Qwen2 decoder, random weights", SETUP, None),
    (
        "1 setup: the body's own time, warm, no profiler",
        r"""
for _ in range(2):
    generate(ids)
body = []
for _ in range(3):
    t0 = time.perf_counter(); generate(ids); body.append(time.perf_counter() - t0)
FIG["body_s"] = BODY_S = min(body)
print(f"body alone {BODY_S:.3f} s")
""",
        None,
    ),
    # 5a: the NVTX-gated ncu pattern as the very first profiled cell (no %%nsys run before it)
    (
        "5 --nvtx bare LLM@prefill, first profiled cell",
        "%%ncu --nvtx LLM@prefill --launch-count 3 -o n_first\ntok = generate(ids, steps=2)\n",
        None,
    ),
    (
        "5 --nvtx bare LLM@prefill, first profiled cell: checked",
        r"""
FIG["ncu_nvtx_first_s"] = last_wall()
k = n_first.kernels()
assert len(k) == 3, k
assert all("LLM@prefill" in p for p in k["nvtx"]), k["nvtx"].tolist()
""",
        None,
    ),
    ("2 three %%nsys cells: first", "%%nsys -o r1\ntok = generate(ids)\n", None),
    (
        "2 first checked",
        "FIG['nsys_first_s'] = last_wall(); assert len(r1.kernels()) > 50\n"
        "FIG['r1_warnings'] = list(r1.warnings)\nprint(r1.warnings)\n",
        None,
    ),
    ("2 second", "%%nsys -o r2\ntok = generate(ids)\n", None),
    ("2 second checked", "FIG['nsys_second_s'] = last_wall()\n", None),
    ("2 third", "%%nsys -o r3\ntok = generate(ids)\n", None),
    (
        "2 later cells <= body + 4.5 s",
        r"""
FIG["nsys_third_s"] = last_wall()
FIG["r3_timings"] = r3.meta.get("timings")
FIG["r3_busy_pct"] = r3.gpu_busy_pct()
for key in ("nsys_second_s", "nsys_third_s"):
    assert FIG[key] <= BODY_S + 4.5, (key, FIG[key], BODY_S)
assert r3.kernel_summary()["instances"].sum() == r2.kernel_summary()["instances"].sum()
""",
        None,
    ),
    ("3 state across profiled cells", "%%nsys -o s1\nh = model(ids).logits\n", None),
    ("3 state: h from the previous profiled cell", "%%nsys -o s2\nh2 = (h * 2).sum()\n", None),
    (
        "3 a notebook variable shipped automatically",
        r"""
prompt2 = torch.randint(0, 32000, (1, 64), device="cuda")
""",
        None,
    ),
    (
        "3 auto-shipped",
        "%%nsys -o s3\nwith torch.no_grad():\n    y2 = model(prompt2).logits\n",
        None,
    ),
    (
        "3 auto-shipped checked",
        "assert len(s3.kernels()) > 10\nbig = torch.empty(100 * 2**20, device='cuda')  # 400 MB\n",
        None,
    ),
    (
        "3 a 400 MB notebook tensor goes by reference, not by value",
        "%%nsys -o bigsum\nbig.sum()\n",
        None,
    ),
    (
        "3 IPython syntax in a profiled cell",
        "%%nsys -o ipy\n%time tok = generate(ids, 2)\n!nvidia-smi -L\n",
        None,
    ),
    ("3 IPython syntax checked", "assert len(ipy.kernels()) > 10\n", None),
    (
        "4 picker: roofline on the top kernel",
        r"""
summary = r3.kernel_summary()
names = list(summary["name"])
top = next((n for n in names if "gemm" in n.lower() or "nvjet" in n), names[0])
t0 = time.perf_counter(); k1 = r3.profile_kernel(top, set="roofline")
FIG["drill_first_s"] = time.perf_counter() - t0
FIG["drill_first_timings"] = k1.meta.get("timings")
for frame in (k1.mfu(), k1.hfu(), k1.advice()):
    assert not frame.empty, frame
FIG["k1_hfu"] = k1.hfu().to_dict("records")
ranges = k1.range_mfu()
FIG["k1_range_coverage"] = ranges["coverage"].tolist() if "coverage" in ranges else None
assert ranges.empty or ranges["coverage"].str.contains("launches profiled").all(), ranges
""",
        None,
    ),
    (
        "4 picker: a second kernel",
        r"""
second = next(n for n in names if n != top)
t0 = time.perf_counter(); k2 = r3.profile_kernel(second, set="roofline")
FIG["drill_second_s"] = time.perf_counter() - t0
FIG["drill_second_timings"] = k2.meta.get("timings")
for frame in (k2.mfu(), k2.hfu(), k2.advice()):
    assert not frame.empty, frame
""",
        None,
    ),
    (
        "4 picker: set=full",
        r"""
t0 = time.perf_counter(); k3 = r3.profile_kernel(top, set="full")
FIG["drill_full_s"] = time.perf_counter() - t0
for frame in (k3.mfu(), k3.hfu(), k3.advice()):
    assert not frame.empty, frame
k3
""",
        None,
    ),
    # The ncu worker takes an interrupt (here --timeout) as KeyboardInterrupt and keeps its
    # state, even when it was started between cells (the prewarm), where ipykernel ignores
    # SIGINT and the worker used to inherit that (processes/child_signals.py).
    (
        "4 an interrupted %%ncu cell",
        "%%ncu --timeout 30 --launch-count 1\nncu_state = 7\nimport time\ntime.sleep(120)\n",
        "ProfileTimeout",
    ),
    (
        "4 the ncu worker kept its state",
        "%%ncu --launch-count 1 -o after_int\nassert ncu_state == 7\n"
        "tok = generate(ids, steps=2)\n",
        None,
    ),
    (
        "4 the same ncu worker",
        r"""
same = after_int.meta.get("worker", {}).get("pid") == k3.meta.get("worker", {}).get("pid")
FIG["ncu_interrupt_same_worker"] = same
assert same, (after_int.meta.get("worker"), k3.meta.get("worker"))
""",
        None,
    ),
    (
        "5 --nvtx LLM:LLM@prefill after drill-downs",
        "%%ncu --nvtx LLM:LLM@prefill --launch-count 2 -o n2\ntok = generate(ids, steps=2)\n",
        None,
    ),
    (
        "5 --nvtx bare LLM@prefill after drill-downs",
        "%%ncu --nvtx LLM@prefill --launch-count 2 -o n3\ntok = generate(ids, steps=2)\n",
        None,
    ),
    (
        "5 --nvtx :pick (default domain)",
        "%%ncu --nvtx :pick -o n4\ntok = generate(ids, steps=2)\n",
        None,
    ),
    ("5 --nvtx bare pick", "%%ncu --nvtx pick -o n5\ntok = generate(ids, steps=2)\n", None),
    (
        "5 --nvtx checked",
        r"""
for run, want in ((n2, "LLM@prefill"), (n3, "LLM@prefill"), (n4, "pick"), (n5, "pick")):
    k = run.kernels()
    assert len(k) >= 1 and all(want in p for p in k["nvtx"]), (want, k["nvtx"].tolist())
FIG["ncu_nvtx_after_s"] = [w for c, w in WALLS if c.startswith("%%ncu --nvtx")]
FIG["ncu_nvtx_timings"] = [r.meta.get("timings") for r in (n_first, n2, n3, n4, n5)]
""",
        None,
    ),
    (
        "6 CUDA graph replays",
        r"""%%nsight_setup --name graph
gx = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
glin = torch.nn.Linear(1024, 1024).cuda().to(torch.bfloat16)
gs = torch.cuda.Stream(); gs.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(gs), torch.no_grad():
    for _ in range(3):
        glin(gx)
torch.cuda.current_stream().wait_stream(gs)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph), torch.no_grad():
    gy = torch.relu(glin(gx))
""",
        None,
    ),
    (
        "6 graph cell",
        "%%nsys -o g1\nfor _ in range(50):\n    graph.replay()\ntorch.cuda.synchronize()\n",
        None,
    ),
    (
        "6 graph checked",
        "FIG['graph_kernels'] = stats_equal(g1, 'graph')\n"
        "assert (g1.kernels()['graph_node_id'] >= 0).all()\n",
        None,
    ),
    (
        "6 torch.compile reduce-overhead",
        r"""%%nsight_setup --name compiled
cw = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
@torch.compile(mode="reduce-overhead")
def cfn(x):
    return torch.nn.functional.gelu(x @ cw) * 2
cx = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    cfn(cx)
torch.cuda.synchronize()
""",
        None,
    ),
    (
        "6 compiled cell",
        "%%nsys -o c1\nfor _ in range(20):\n    cy = cfn(cx)\ntorch.cuda.synchronize()\n",
        None,
    ),
    (
        "6 compiled checked",
        "FIG['compiled_kernels'] = stats_equal(c1, 'compiled')\nassert len(c1.kernels()) >= 20\n",
        None,
    ),
    ("7 --pytorch cell", "%%nsys --pytorch shapes -o p1\ntok = generate(ids, 2)\n", None),
    (
        "7 --pytorch checked",
        "FIG['pytorch_s'] = last_wall()\nassert not p1.op_summary().empty\n"
        "FIG['p1_mfu_rows'] = len(p1.mfu())\nassert not p1.mfu().empty\n",
        None,
    ),
    ("7 default cell after --pytorch", "%%nsys -o p2\ntok = generate(ids)\n", None),
    (
        "7 default after --pytorch checked",
        "FIG['after_pytorch_s'] = last_wall()\n"
        "assert FIG['after_pytorch_s'] <= BODY_S + 4.5, FIG['after_pytorch_s']\n",
        None,
    ),
    (
        "8 a raising cell",
        "%%nsys\nx = torch.ones(3, device='cuda')\nraise ValueError('boom')\n",
        "CellFailedError",
    ),
    ("8 a good cell after it", "%%nsys -o ok1\ntok = generate(ids)\n", None),
    ("8 checked", "assert len(ok1.kernels()) > 50\nFIG['after_error_s'] = last_wall()\n", None),
    ("9 --fresh", "%%nsys --fresh -o fr\ntok = generate(ids, 2)\n", None),
    (
        "9 --fresh checked",
        "FIG['fresh_s'] = last_wall()\nassert fr.meta['mode'] == 'fresh'\n"
        "assert len(fr.kernels()) > 10\n",
        None,
    ),
    ("10 an 800-step decode loop", "%%nsys -o d800\ntok = generate(ids, steps=800)\n", None),
    (
        "10 checked",
        r"""
FIG["decode800_s"] = last_wall()
FIG["decode800_kernels"] = int(d800.kernel_summary()["instances"].sum())
FIG["decode800_busy_pct"] = d800.gpu_busy_pct()
FIG["decode800_warnings"] = list(d800.warnings)
assert FIG["decode800_kernels"] > 20000
""",
        None,
    ),
    (
        "12 --host: why is the GPU idle",
        "%%nsys --host -o hst\ntok = generate(ids, steps=32)\n",
        None,
    ),
    (
        "12 --host checked",
        r"""
FIG["host_s"] = last_wall()
causes = hst.idle_causes()
FIG["idle_causes"] = causes["sentence"].tolist()
print("\n".join(FIG["idle_causes"]))
assert not hst.idle_breakdown().empty and len(causes)
assert not hst.cuda_api_summary().empty and not hst.osrt_summary().empty
FIG["decode800_idle_causes"] = d800.idle_causes()["sentence"].tolist()
FIG["decode800_launch_bound"] = len(d800.launch_bound())
""",
        None,
    ),
    # 13 (issue 33): one copy of a model of 40% of the GPU beside every kind of worker
    (
        "13 setup: 40% of the GPU",
        r"""%%nsight_setup --name big
from torch import nn
big = torch.empty(int(torch.cuda.mem_get_info()[1] * 0.40) // 2, dtype=torch.bfloat16,
                  device="cuda").fill_(0.5)
mlp = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048)).cuda()
opt = torch.optim.AdamW(mlp.parameters(), lr=1e-3)
xb = torch.randn(4096, 2048, device="cuda")
torch.cuda.synchronize()
""",
        None,
    ),
    (
        "13 %%nsys on it",
        "%%nsys -o b1\n" + BIG_BODY,
        None,
    ),
    (
        "13 %%nsys --host on it",
        "%%nsys --host -o b2\n" + BIG_BODY,
        None,
    ),
    (
        "13 a drill-down, %%ncu --nvtx, every worker maps it",
        r"""
FIG["big_gib"] = big.numel() * 2 / 2**30
FIG["big_nsys_s"] = last_wall()
t0 = time.perf_counter(); b1d = b1.profile_kernel(b1.kernel_summary()["name"].iloc[0])
FIG["big_drill_s"] = time.perf_counter() - t0
# where its time went: warm or fresh (a crashed ncu worker's fallback), its steps (2026-11-28
# 06:22 on the H100 it took 50.2 s, 3.29 s at 01:17, and no ncu worker was alive after it)
FIG["big_drill_meta"] = {k: b1d.meta.get(k) for k in ("mode", "fallback", "timings", "worker")}
assert len(b1d.kernels()) >= 1
from nsight_magic.session.manager import MANAGER
FIG["big_workers"] = [(s.tool, s.gpu_memory_mib, s.mapped_bytes / 2**30) for s in MANAGER.status()]
print(FIG["big_workers"])
nsys = [s for s in MANAGER.status() if s.alive and s.tool == "nsys"]
assert nsys and all(s.mapped_bytes >= big.numel() * 2 for s in nsys)
""",
        None,
    ),
    (
        "13 %%ncu --nvtx on it",
        "%%ncu --nvtx LLM@prefill --launch-count 1 -o b3\n"
        "tok = generate(ids, steps=2)\nsb = big[:8].float().sum()\n",
        None,
    ),
    (
        "13 a training step, then a drill-down of a backward kernel",
        r"""
CHECK = lambda: float(sum(p.detach().double().sum() for p in mlp.parameters()))
FIG["step_before"] = CHECK()
""",
        None,
    ),
    (
        "13 the step",
        "%%nsys -o bstep\n"
        "loss = mlp(xb).square().mean()\nloss.backward()\nopt.step()\nopt.zero_grad()\n",
        None,
    ),
    (
        "13 the step's drill-down leaves the notebook's weights",
        r"""
FIG["step_after"] = CHECK()
assert FIG["step_after"] != FIG["step_before"], "the profiled step trains the notebook's model"
k, v = bstep.report.kernels(), bstep.nvtx()
main_tid = int(v[(v["domain"] == "nsight_magic") & (v["range"] == "cell")]["tid"].iloc[0])
tids = k.groupby("name")["tid"].agg(lambda t: set(t.astype(int)))
backward = [n for n, t in tids.items() if main_tid not in t]
t0 = time.perf_counter()
try:
    bd = bstep.profile_kernel(backward[0])
except Exception as exc:  # say what the warm try left behind before failing the step
    failed = getattr(exc, "run", None)
    fb = (failed.meta.get("fallback") if failed is not None else None) or {}
    print("fallback:", fb)
    if fb.get("from"):
        print(open(os.path.join(fb["from"], "profiler.log")).read()[-3000:])
    raise
FIG["backward_drill_s"] = time.perf_counter() - t0
FIG["backward_drill_meta"] = {k: bd.meta.get(k) for k in ("mode", "fallback", "timings")}
assert len(bd.kernels()) >= 1
FIG["step_after_drill"] = CHECK()
assert FIG["step_after_drill"] == FIG["step_after"], "the drill-down stepped the model again"
""",
        None,
    ),
    # 15 (issue 41): two-way state. A profiled cell behaves like %%time: what it binds comes
    # back, a notebook function's training step changes the notebook's model once per
    # profiled cell (a GPU step counter rises by exactly one), warm-ups and drill-downs change
    # nothing, _-names travel, !nvidia-smi before %%ncu works, and after each profiled step
    # the weights equal a reference copy stepped in the notebook without the profiler, bit
    # for bit
    (
        "15 setup: a counter, _-names, a notebook training function, a reference copy",
        r"""
import copy
counter = torch.zeros((), dtype=torch.int64, device="cuda")
_p = list(mlp.parameters())
def train_step15():
    loss = mlp(xb).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    counter.add_(1)
    return loss.detach()
# one deepcopy of both: the copy's optimizer holds the copy's parameters and an exact copy
# of the state (a reference rebuilt with load_state_dict stepped 0.00036 away from the
# notebook's own step on the H200, 2026-11-27, with no profiler involved)
ref_mlp, ref_opt = copy.deepcopy((mlp, opt))
def same15(tag, stepped=True):
    if stepped:  # the same step, in the notebook, on the reference copy
        loss = ref_mlp(xb).square().mean()
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    pairs = list(zip(mlp.parameters(), ref_mlp.parameters()))
    diff = max(float((a - b).abs().max()) for a, b in pairs)
    FIG.setdefault("t15_diffs", []).append((tag, int(counter), diff))
    return diff
FIG["t15_counter"] = [int(counter)]
FIG["t15_start_diff"] = same15("start", stepped=False)
""",
        None,
    ),
    ("15 %%nsys --host step", "%%nsys --host -o t15a\nloss15 = train_step15()\n", None),
    (
        "15 after --host: counter 1, loss15 came back, weights as the notebook's own step",
        "FIG['t15_counter'].append(int(counter))\nassert int(counter) == 1, int(counter)\n"
        "assert loss15.is_cuda and loss15.numel() == 1\nFIG['t15_host_s'] = last_wall()\n"
        "assert same15('host') == 0.0, FIG['t15_diffs']\n",
        None,
    ),
    ("15 %%nsys --warmup 1 step", "%%nsys --warmup 1 -o t15b\nloss15 = train_step15()\n", None),
    (
        "15 after --warmup: counter 2, weights as 2 steps; a drill-down changes nothing",
        r"""
FIG["t15_counter"].append(int(counter))
assert int(counter) == 2, int(counter)
assert same15("warmup") == 0.0, FIG["t15_diffs"]
t0 = time.perf_counter()
d15 = t15b.profile_kernel(t15b.kernel_summary()["name"].iloc[0])
FIG["t15_drill_s"] = time.perf_counter() - t0
assert int(counter) == 2 and same15("drill", stepped=False) == 0.0, FIG["t15_diffs"]
""",
        None,
    ),
    (
        "15 !nvidia-smi and subprocess in a profiled cell",
        "%%nsys -o t15c\nx15 = xb[:4] * 2\n!nvidia-smi -L\n"
        "import subprocess\nsubprocess.run(['nvidia-smi', '-L'], check=True)\n",
        None,
    ),
    (
        "15 %%ncu --nvtx LLM@prefill after it, reading x15 and _p",
        "%%ncu --nvtx LLM@prefill --launch-count 1 -o t15d\n"
        "tok = generate(ids, steps=2)\ny15 = float(x15.sum()) + float(_p[0].sum())\n",
        None,
    ),
    ("15 %%ncu training step", "%%ncu --launch-count 1 -o t15e\nloss15 = train_step15()\n", None),
    (
        "15 checked: counter 3, y15 back, weights equal the notebook's own 3 steps bit for bit",
        r"""
FIG["t15_counter"].append(int(counter))
assert int(counter) == 3, FIG["t15_counter"]
assert isinstance(y15, float)
FIG["t15_bitwise"] = same15("ncu") == 0.0
print(FIG["t15_diffs"], FIG["t15_counter"])
assert FIG["t15_bitwise"], FIG["t15_diffs"]
""",
        None,
    ),
    *TRAIN_STEPS,
    (
        "end",
        "print(json.dumps(FIG, default=str, indent=1)[:4000])\n"
        "json.dump(FIG, open(os.environ['ACCEPT_FIG'], 'w'), default=str, indent=1)\n",
        None,
    ),
]

RANK_SETUP = r"""%%nsight_setup --name ranks
import os, torch, torch.distributed as dist
"""

RANK_STEPS: list[Step] = [
    ("0 prelude", PRELUDE, None),
    ("11 setup", RANK_SETUP, None),
    (
        "11 --nproc 2 with a straggler",
        r"""%%nsys --nproc 2 -o rr
rank = dist.get_rank()
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
t = torch.ones(1 << 22, device="cuda")
for step in range(4):
    for _ in range(10 + (30 if rank == 1 and step == 3 else 0)):
        b = a @ a
    dist.all_reduce(t)
torch.cuda.synchronize()
""",
        None,
    ),
    (
        "11 rank skew checked",
        r"""
skew = rr.report.rank_skew()
FIG["rank_skew"] = skew.to_dict("records")
FIG["rank_idle_causes"] = rr.idle_causes()["sentence"].tolist()
assert not skew.empty
last = skew.sort_values("end_spread_ns").iloc[-1]
FIG["nproc_s"] = last_wall()
print(skew)
""",
        None,
    ),
    (
        "11 rank-1 drill-down with hfu()",
        r"""
names = list(rr.kernel_summary()["name"])
gemm = next(n for n in names if "gemm" in n.lower() or "nvjet" in n)
t0 = time.perf_counter(); kr = rr.profile_kernel(gemm, rank=1, set="roofline")
FIG["rank1_drill_s"] = time.perf_counter() - t0
# rank 1 ran under ncu, its re-run of the nsys script gated as ncu's (the 'capture' range open)
assert kr.meta["rank"] == 1 and kr.meta["cell_status"]["gate"] == "nvtx", kr.meta
assert not kr.hfu().empty and not kr.mfu().empty and not kr.advice().empty
FIG["rank1_hfu"] = kr.hfu().to_dict("records")
""",
        None,
    ),
    ("end", "json.dump(FIG, open(os.environ['ACCEPT_FIG'], 'w'), default=str, indent=1)\n", None),
]


def build(steps: list[tuple[str, str, str | None]], runs: Path) -> object:
    import nbformat

    nb = nbformat.v4.new_notebook()
    for step, source, expect in steps:
        text = source
        if step == "0 prelude":
            text = source.format(tests=str(ROOT / "tests"), runs=str(runs))
        cell = nbformat.v4.new_code_cell(text.strip("\n") + "\n")
        cell.metadata["step"] = step
        cell.metadata["expect_error"] = expect
        nb.cells.append(cell)
    return nb


def verdicts(nb: object) -> list[dict[str, object]]:
    """Per cell: its step, and whether it passed (no error output, or the expected one)."""
    import re

    rows = []
    for cell in nb.cells:  # type: ignore[attr-defined]
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.get("execution_count") is None:  # the kernel died or the run stopped before it
            rows.append({"step": cell.metadata.get("step"), "ok": False, "detail": "not run"})
            continue
        expect = cell.metadata.get("expect_error")
        if expect:
            ok = any(re.search(expect, f"{e['ename']}: {e['evalue']}") for e in errors)
            first = errors[0]["ename"] + ": " + errors[0]["evalue"] if errors else ""
            detail = first or "no error raised"
        else:
            ok = not errors
            detail = (errors[0]["ename"] + ": " + errors[0]["evalue"])[:600] if errors else ""
        rows.append({"step": cell.metadata.get("step"), "ok": ok, "detail": detail})
    return rows


def steps_until(steps: list[Step], until: str | None) -> list[Step]:
    """The steps up to and including the first named ``until...`` (a prefix): a quick look at the
    first steps (where a drill-down's seconds go) without the whole session."""
    if not until:
        return steps
    names = [name for name, _, _ in steps]
    last = next((i for i, name in enumerate(names) if name.startswith(until)), None)
    if last is None:
        raise SystemExit(f"no step starts with {until!r}; steps: {names}")
    return [*steps[: last + 1], *[s for s in steps[last + 1 :] if s[0] == "end"]]  # FIG saved


def run(
    ranks: bool,
    out: Path,
    timeout: int = 900,
    training: bool = False,
    until: str | None = None,
    state: bool = False,
    scale: bool = False,
) -> list[dict[str, object]]:
    import nbformat
    from nbclient import NotebookClient

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nsight-acceptance-"))
    steps = RANK_STEPS if ranks else STEPS
    if training:  # step 14 alone, after the prelude (a quick check of the training step)
        steps = [STEPS[0], *TRAIN_STEPS, STEPS[-1]]
    if state:  # step 15 after the prelude, the Qwen2 setup and step 13 (its model and batch)
        steps = [s for s in STEPS[:-1] if s[0].startswith(("0 ", "1 setup: Qwen2", "13 ", "15 "))]
        steps.append(STEPS[-1])
    if scale:  # step 16 alone: a Run All of a training notebook at >= 40% of an 80 GB GPU
        steps = [STEPS[0], *scale_steps.STEPS, STEPS[-1]]
    nb = build(steps_until(steps, until), work / "runs")
    tag = ("acceptance_ranks" if ranks else "acceptance_training" if training
           else "acceptance_state" if state else "acceptance_scale" if scale
           else "acceptance")  # fmt: skip
    os.environ["ACCEPT_FIG"] = str(out / f"{tag}.json")
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(work)}})  # fmt: skip
    t0 = time.perf_counter()
    sampling = threading.Event()
    sampler = threading.Thread(target=_sample_memory, daemon=True,
                               args=(out / f"{tag}_memory.jsonl", sampling))  # fmt: skip
    sampler.start()
    try:
        client.execute()
    finally:
        sampling.set()
        rows = verdicts(nb)
        nbformat.write(nb, out / f"{tag}.ipynb")
        (out / f"{tag}_steps.json").write_text(json.dumps(
            {"wall_s": time.perf_counter() - t0, "steps": rows}, indent=1))  # fmt: skip
        _keep_crash_logs(work / "runs", out / f"{tag}_crashes")
    # the kernel is shut down: none of our processes may be left (workers, profilers, attaches)
    deadline = time.monotonic() + 30
    while (left := _our_processes(work)) and time.monotonic() < deadline:
        time.sleep(1.0)
    rows.append({"step": "13 kernel shutdown leaves no process", "ok": not left,
                 "detail": "; ".join(left)[:600]})  # fmt: skip
    for row in rows:
        print(("PASS " if row["ok"] else "FAIL ") + str(row["step"]), row["detail"] or "")
    return rows


def _keep_crash_logs(runs: Path, into: Path) -> None:
    """The log of every run a crash fallback replaced (meta.json's ``fallback.from``), kept
    with the figures: the run folders are the GPU machine's, gone with it (the ncu worker's
    SIGSEGVs of 2026-11-28 on the H200 left no log to read)."""
    for meta in sorted(runs.rglob("meta.json")):
        try:
            crashed = (json.loads(meta.read_text()).get("fallback") or {}).get("from")
        except (OSError, ValueError):
            continue
        if not crashed:
            continue
        into.mkdir(parents=True, exist_ok=True)
        for log in sorted(Path(crashed).glob("*.log")):
            text = log.read_text(errors="replace")[-20000:]
            (into / f"{Path(crashed).name}-{log.name}").write_text(text)


def _sample_memory(path: Path, stop: threading.Event, every_s: float = 2.0) -> None:
    """Every ``every_s``, one JSON line: the host's available memory and, per process of the
    notebook's kernel (nbclient's child) and below, its resident and pinned memory. A step that
    stalls at scale (issue 41: a whole-state drill-down under ncu beside pinned pools) can
    then be told apart from a host out of memory."""

    def kib(text: str, key: str) -> int:
        for line in text.splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    me = os.getpid()
    with path.open("w") as f:
        while not stop.wait(every_s):
            try:
                meminfo = Path("/proc/meminfo").read_text()
                available = kib(meminfo, "MemAvailable") / 2**20
                procs: dict[str, list[float]] = {}
                row = {"t": round(time.time(), 1), "available_gib": round(available, 1),
                       "procs": procs}  # fmt: skip
                parents: dict[int, int] = {}
                status: dict[int, str] = {}
                for proc in Path("/proc").glob("[0-9]*"):
                    try:
                        text = (proc / "status").read_text()
                    except OSError:
                        continue
                    pid = int(proc.name)
                    parents[pid], status[pid] = kib(text, "PPid"), text
                ours = {me}
                for _ in range(6):  # the kernel, its workers, nsys/ncu and their children
                    ours |= {pid for pid, ppid in parents.items() if ppid in ours}
                for pid in sorted(ours - {me}):
                    text = status[pid]
                    rss, pin = kib(text, "VmRSS"), kib(text, "VmPin") + kib(text, "VmLck")
                    if rss > 2**20 or pin > 2**20:  # over 1 GiB
                        name = text.splitlines()[0].split(":", 1)[1].strip()
                        procs[f"{pid} {name}"] = [round(rss / 2**20, 1), round(pin / 2**20, 1)]
                f.write(json.dumps(row) + "\n")
                f.flush()
            except Exception as exc:  # a sample never stops the acceptance
                f.write(json.dumps({"error": repr(exc)}) + "\n")


def _our_processes(work: Path) -> list[str]:
    """Command lines of processes this notebook's session started (workers, nsys/ncu) still
    alive: those that run in ``work`` (the notebook's folder, which they inherit), not another
    notebook's on the machine."""
    found, work = [], work.resolve()  # /proc's cwd link is the resolved path
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd != work and work not in cwd.parents:
            continue
        text = " ".join(a.decode(errors="replace") for a in argv if a)
        if (
            "nsight_magic.worker.serve" in text
            or "--mode=launch" in text
            or "--mode attach" in text
        ):
            found.append(f"{proc.name}: {text[:160]}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", action="store_true", help="step 11 only (2 GPUs)")
    ap.add_argument("--training", action="store_true", help="step 14 only (a training step)")
    ap.add_argument("--state", action="store_true", help="steps 13 and 15 (state)")
    ap.add_argument("--scale", action="store_true", help="step 16 (a 34 GB training state)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "acceptance-out")))
    ap.add_argument("--until", default=None, help="run the steps up to the first of this prefix")
    args = ap.parse_args()
    rows = run(
        args.ranks,
        args.out,
        training=args.training,
        until=args.until,
        state=args.state,
        scale=args.scale,
    )
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
