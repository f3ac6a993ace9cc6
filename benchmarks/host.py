"""P9 what ``%%nsys --host`` costs, on a machine with a GPU and nsys.

The same sync-per-token decode loop (a small torch model, 32 greedy steps, ``tok.item()`` each)
profiled in a warm worker with the default capture and with ``--host`` (OS runtime calls, CPU
sampling, Python sampling and Python backtraces of CUDA calls). Each variant gets its own worker
(``--host`` is fixed at ``nsys launch``); after one unmeasured cell, best of three: the cell's
own time inside the capture (``cell_s``), the whole cell's wall time, and the time our loader
and ``idle_breakdown()`` take on the report.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(4096, 512), torch.nn.Linear(512, 2048),
    torch.nn.GELU(), torch.nn.Linear(2048, 512), torch.nn.Linear(512, 4096)).cuda().eval()
"""
CELL = """
toks = []
tok = torch.zeros(1, 1, dtype=torch.long, device='cuda')
with torch.no_grad():
    for _ in range(32):
        tok = model(tok)[:, -1].argmax(-1, keepdim=True)
        toks.append(tok.item())
"""


def _variant(root: Path, host: bool) -> dict[str, Any]:
    from nsight_magic.profilers.nsys import NsysOptions
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.backends import NsysBackend
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager
    from nsight_magic.session.spec import CellRequest

    label = "host" if host else "default"
    manager = SessionManager(setup=SetupRegistry())
    manager.record_setup(SETUP, "setup", prepare_cell(SETUP))
    cell_s, wall_s, analysis_s = [], [], []
    try:
        for i in range(4):
            t0 = time.perf_counter()
            run = manager.profile(CellRequest(cell=CELL, name=f"{label}{i}", runs_root=root),
                                  NsysBackend(NsysOptions(host=host)))  # fmt: skip
            if i:  # the first cell starts the worker
                wall_s.append(time.perf_counter() - t0)
                cell_s.append(float(run.meta["cell_status"]["cell_s"]))
                t1 = time.perf_counter()
                run.idle_breakdown()
                analysis_s.append(time.perf_counter() - t1)
        report = next(run.run_dir.glob("report.nsys-rep"))
    finally:
        manager.stop()
    return {"variant": label, "cell_s": min(cell_s), "wall_s": min(wall_s),
            "idle_breakdown_s": min(analysis_s), "report_bytes": report.stat().st_size}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks host", description=__doc__)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="nsight-host-bench-"))
    rows = [_variant(root, host=False), _variant(root, host=True)]
    for r in rows:
        print(f"P9 {r['variant']:8s} cell {r['cell_s'] * 1e3:8.1f} ms  wall {r['wall_s']:5.2f} s  "
              f"idle_breakdown {r['idle_breakdown_s']:5.2f} s  report {r['report_bytes']:,} B",
              flush=True)  # fmt: skip
    base, host = rows
    print(f"P9 --host vs default: cell {host['cell_s'] / base['cell_s']:.2f}x, "
          f"wall {host['wall_s'] / base['wall_s']:.2f}x", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
