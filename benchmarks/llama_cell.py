"""The workload the session benchmarks share (P5 warm session, P6 drill-down, the warm start and
the first cell): a Llama-style model (``transformers.LlamaForCausalLM``, random weights, bf16,
hidden 1024, 16 heads) built by a setup cell, a cell doing a 128-token prefill and 31 decode
steps, and the cell's own time in a plain process with no profiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

SETUP = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                  num_key_value_heads=16, num_hidden_layers={layers}, vocab_size=32000,
                  max_position_embeddings=2048)
model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
ids = torch.randint(0, 32000, (1, 128), device="cuda")
"""
CELL = """
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
torch.cuda.synchronize()
"""
PLAIN = """
import json, time
t0 = time.perf_counter()
exec({setup!r})
torch.cuda.synchronize()
setup_s = time.perf_counter() - t0
t0 = time.perf_counter()
exec({prepare!r})
torch.cuda.synchronize()
prepare_s = time.perf_counter() - t0
code = compile({cell!r}, "cell", "exec")
times = []
for _ in range(4):
    t0 = time.perf_counter()
    exec(code)
    times.append(time.perf_counter() - t0)
print("RESULT", json.dumps({{"setup_s": setup_s, "prepare_s": prepare_s, "cell_s": times}}))
"""


def plain_runs(
    layers: int, prepare: str = "pass", env: dict[str, str] | None = None, timeout: float = 600
) -> dict[str, Any]:
    """The setup cell, then ``prepare``, then the cell four times, in a plain process with no
    profiler (``env`` added to ours): ``setup_s``, ``prepare_s`` and ``cell_s`` (each run; the
    first is cold: CUDA modules loaded on first use, cuBLAS handles made). Raises
    ``subprocess.CalledProcessError`` / ``TimeoutExpired`` as ``subprocess.run`` does."""
    code = PLAIN.format(setup=SETUP.format(layers=layers), prepare=prepare, cell=CELL)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=True,
    )
    return result_of(out.stdout)


def result_of(stdout: str) -> dict[str, Any]:
    """The JSON a benchmark child process printed on its ``RESULT`` line."""
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT ")))


def cell_times(layers: int) -> tuple[float, float]:
    """The cell's own time in a plain process with no profiler: its first run there (cold) and
    warm (the best later run)."""
    runs = plain_runs(layers)["cell_s"]
    return runs[0], min(runs[1:])


def cell_warm_s(layers: int) -> float:
    """The cell's own time, warm, in a plain process with no profiler."""
    return cell_times(layers)[1]
