"""P8 a 2-rank ``%%nsys --nproc 2`` cell against the same torchrun command under bare nsys.

On a machine with 2+ GPUs, nsys and torch (nvidia-h200-x2). Workload: the cell of
``notebooks/04_multi_gpu.ipynb`` (each rank multiplies its bf16 shard, then all-reduces, rank 1
late once), with its setup cell. Everything goes through the session manager as the magic calls
it; the bare run is the run folder's own ``argv.json`` (``nsys profile ... python -m
torch.distributed.run --nproc-per-node 2 ... script.py``) re-run with its environment, so the
two differ only by what nsight_magic adds (writing the script, loading and checking the report).
Three of each, alternated, best kept. NVLink multicast stays off in every process.

    python -m benchmarks two-ranks [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
SETUP = """
import time
import torch
import torch.distributed as dist
torch.manual_seed(dist.get_rank())
D = 4096
w = torch.randn(D, D // dist.get_world_size(), device="cuda", dtype=torch.bfloat16) * 0.02
x = torch.randn(256, D, device="cuda", dtype=torch.bfloat16)
"""
CELL = """
for step in range(4):
    h = x @ w
    partial = h @ w.T
    if dist.get_rank() == 1 and step == 2:
        torch.cuda.synchronize(); time.sleep(0.005)
    dist.all_reduce(partial)
torch.cuda.synchronize()
"""


def two_ranks(root: Path, repeat: int = 3) -> dict[str, Any]:
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.backends import NsysBackend
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager
    from nsight_magic.session.spec import CellRequest

    os.environ.update(NO_MULTICAST)
    manager = SessionManager(setup=SetupRegistry())
    manager.record_setup(SETUP, "shards", prepare_cell(SETUP))
    ours: list[float] = []
    bare: list[float] = []
    run: Any = None
    try:
        for i in range(repeat):
            t0 = time.perf_counter()
            request = CellRequest(cell=CELL, name=f"two{i}", runs_root=root, nproc=2)
            run = manager.profile(request, NsysBackend())
            ours.append(time.perf_counter() - t0)
            argv = json.loads((run.run_dir / "argv.json").read_text())
            argv[argv.index("-o") + 1] = str(root / f"bare{i}")
            env = {**os.environ, **NsysBackend().process_env(request)}
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, cwd=run.run_dir, capture_output=True, check=True)
            bare.append(time.perf_counter() - t0)
    finally:
        manager.stop()
    out = {
        "magic_s": ours,
        "bare_nsys_torchrun_s": bare,
        "ratio_best": min(ours) / min(bare),
        "timings": run.meta.get("timings"),
        "ranks": sorted(int(r) for r in run.report.ranks()["rank"].dropna()),
        "kernels": len(run.kernels()),
    }
    print(
        f"P8 2-rank %%nsys --nproc 2: {', '.join(f'{s:.1f}' for s in ours)} s; the same torchrun "
        f"under bare nsys profile: {', '.join(f'{s:.1f}' for s in bare)} s; best/best = "
        f"{out['ratio_best']:.2f}x; ranks {out['ranks']}, {out['kernels']} kernels",
        flush=True,
    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks two-ranks", description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", type=Path, default=None, help="run folders go here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="nsight-ranks-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    result = two_ranks(root, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
