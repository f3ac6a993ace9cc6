"""P7 what the tracing options cost, on a machine with a GPU and nsys.

Each variant gets its own warm worker (the options are fixed at ``nsys launch``); after one
unmeasured cell, three cells are profiled and the cell's own time inside the capture
(``cell_s``, the gated run) and the whole cell's wall time are kept (best of three).

- CUDA graphs: a bf16 MLP captured as a CUDA graph and replayed 200 times, traced with
  ``--cuda-graph-trace node`` (the default here: graph kernels in the kernel table) vs ``graph``
  (one item per launch, nsys's own default).
- PyTorch op ranges: a small decoder's prefill + 16 decode steps with ``--pytorch off`` vs
  ``autograd-nvtx`` (ops) vs ``autograd-shapes-nvtx`` (ops with shapes); a warm worker turns
  them on around the captured cell itself (``emit_nvtx``, not nsys's launch flag).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

GRAPH_SETUP = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                        torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16)
sx = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        m(sx)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g), torch.no_grad():
    sy = m(sx)
torch.cuda.synchronize()
"""
GRAPH_CELL = "for _ in range(200):\n    g.replay()\ntorch.cuda.synchronize()\n"

LLM_SETUP = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=512, intermediate_size=1408, num_attention_heads=8,
                  num_key_value_heads=8, num_hidden_layers=4, vocab_size=32000)
model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
ids = torch.randint(0, 32000, (1, 64), device="cuda")
"""
LLM_CELL = """
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
torch.cuda.synchronize()
"""


def _variant(root: Path, setup: str, cell: str, options: Any, label: str) -> dict[str, Any]:
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.backends import NsysBackend
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager
    from nsight_magic.session.spec import CellRequest

    manager = SessionManager(setup=SetupRegistry())
    manager.record_setup(setup, "setup", prepare_cell(setup))
    cell_s, wall_s, kernels, ranges = [], [], 0, 0
    try:
        for i in range(4):
            t0 = time.perf_counter()
            run = manager.profile(CellRequest(cell=cell, name=f"{label}{i}", runs_root=root),
                                  NsysBackend(options))  # fmt: skip
            if i:  # the first cell starts the worker
                wall_s.append(time.perf_counter() - t0)
                cell_s.append(float(run.meta["cell_status"]["cell_s"]))
        kernels, ranges = len(run.kernels()), len(run.nvtx())
        graph_launches = len(run.report.graph_launches())
    finally:
        manager.stop()
    return {"variant": label, "cell_s": min(cell_s), "wall_s": min(wall_s), "kernels": kernels,
            "nvtx_ranges": ranges, "graph_launches": graph_launches}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    import argparse

    from nsight_magic.profilers.nsys import NsysOptions

    ap = argparse.ArgumentParser(prog="python -m benchmarks tracing", description=__doc__)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="nsight-tracing-bench-"))
    rows = [
        _variant(root, GRAPH_SETUP, GRAPH_CELL, NsysOptions(cuda_graph_trace="graph"), "graph"),
        _variant(root, GRAPH_SETUP, GRAPH_CELL, NsysOptions(cuda_graph_trace="node"), "node"),
        _variant(root, LLM_SETUP, LLM_CELL, NsysOptions(pytorch=None), "pytorch-off"),
        _variant(root, LLM_SETUP, LLM_CELL, NsysOptions(pytorch="autograd-nvtx"), "ops"),
        _variant(root, LLM_SETUP, LLM_CELL, NsysOptions(pytorch="autograd-shapes-nvtx"), "shapes"),
    ]
    by = {r["variant"]: r for r in rows}
    for r in rows:
        print(f"P7 {r['variant']:12s} cell {r['cell_s'] * 1e3:8.1f} ms  wall {r['wall_s']:5.2f} s  "
              f"kernels {r['kernels']:6d}  graph launches {r['graph_launches']:4d}  "
              f"NVTX ranges {r['nvtx_ranges']:6d}", flush=True)  # fmt: skip
    print(
        f"P7 node vs graph tracing: cell {by['node']['cell_s'] / by['graph']['cell_s']:.2f}x; "
        f"PyTorch ops: {by['ops']['cell_s'] / by['pytorch-off']['cell_s']:.2f}x, with shapes "
        f"{by['shapes']['cell_s'] / by['pytorch-off']['cell_s']:.2f}x of the cell time",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
