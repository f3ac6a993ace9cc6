"""What the first run of a cell costs in a new process, and what a worker could do beforehand to
take it off the first profiled cell (issue 22: the first ``%%nsys`` cell after the setup costs
~4.5 s more than a later one; the body's first run is most of it).

    python3 tools/probes/cold_body_probe.py OUT_DIR

The benchmark's workload (benchmarks/session.py: a 4-layer Llama, prefill + 31 decode steps) in a
plain process per variant, no profiler: the setup cell, then (variant) a preparation, then the
cell four times. Variants: nothing; a cuBLAS handle made beforehand
(``torch.cuda.current_blas_handle()``); one bf16 matmul beforehand (cuBLAS + cuBLASLt + its
kernels); ``CUDA_MODULE_LOADING=EAGER`` (every kernel loaded when the context is made). Writes
OUT_DIR/cold_body_probe.json; each run is bounded (300 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.session import plain_runs  # noqa: E402

VARIANTS = {
    "nothing": ("pass", {}),
    "blas handle": ("torch.cuda.current_blas_handle()", {}),
    "one bf16 matmul": (
        "a = torch.randn(64, 64, device='cuda', dtype=torch.bfloat16); (a @ a).sum().item()",
        {},
    ),
    "eager module loading": ("pass", {"CUDA_MODULE_LOADING": "EAGER"}),
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, (prepare, env) in VARIANTS.items():
        try:
            results[name] = plain_runs(4, prepare, env, timeout=300)
        except subprocess.TimeoutExpired:
            results[name] = {"error": "timed out"}
        except subprocess.CalledProcessError as exc:
            results[name] = {"error": (exc.stderr or "")[-600:]}
        print(name, results[name], flush=True)
    (out / "cold_body_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cold_body_probe"))
