"""P3 drill-down cost and P4 magic overhead, on a machine with a GPU, nsys and ncu.

Workload: an ``nn.TransformerEncoder`` (d_model 256, batch 16 x 128 tokens; 2 layers, or as many
as ``--layers`` says) forward pass, built by a setup cell (outside the capture), profiled as a
notebook cell would be.

- P4: wall time of ``%%nsys --fresh`` (script, nsys profile, export, load) vs the bare
  ``nsys profile`` of the same script with the same argv (read back from argv.json), and vs
  ``nsys profile`` with its default options. Target: <= 1.1x + 1 s.
- P3: the cold picker (``profile_kernel(top kernel, fresh=True)``: ncu on one kernel of the saved
  script; roofline set, and full set) vs ``%%ncu --fresh --set full`` over the whole cell.
  Target: >= 10x less wall time. The warm session's figures are P5/P6 (``benchmarks/session.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

SETUP = """
import torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers={layers}).cuda().eval()
x = torch.randn(16, 128, 256, device="cuda")
"""
CELL = """
with torch.no_grad():
    y = model(x)
torch.cuda.synchronize()
"""


def _timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    import os

    t0 = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, check=True
    )
    return time.perf_counter() - t0


def _session(layers: int):
    from nsight_magic.script import prepare_cell
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager

    manager = SessionManager(setup=SetupRegistry())
    setup = SETUP.format(layers=layers)
    manager.record_setup(setup, "model", prepare_cell(setup))
    return manager


def _fresh(manager, backend, root: Path, name: str):
    from nsight_magic.session.spec import CellRequest

    return manager.profile(CellRequest(cell=CELL, name=name, runs_root=root, fresh=True), backend)


def overhead(root: Path, repeats: int = 2, layers: int = 2) -> dict:
    from nsight_magic.session.backends import NsysBackend

    manager = _session(layers)
    magic, same, default = [], [], []
    run = None
    for i in range(repeats):
        t0 = time.perf_counter()
        run = _fresh(manager, NsysBackend(), root, f"p4-{i}")
        magic.append(time.perf_counter() - t0)
        argv = json.loads((run.run_dir / "argv.json").read_text())
        argv = argv["argv"] if isinstance(argv, dict) else argv
        bare = root / f"bare-{i}"
        argv = [a if not a.endswith("report") else str(bare) for a in argv]
        env = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
        same.append(_timed(argv, root, env))
        script = run.run_dir / "script.py"
        nsys = shutil.which("nsys") or "nsys"
        default.append(
            _timed([nsys, "profile", "-f", "true", "-o", str(root / f"default-{i}"),
                    "python3", str(script), str(root / f"status-{i}.json")], root, env)
        )  # fmt: skip
    best = {"magic_s": min(magic), "bare_same_argv_s": min(same), "bare_default_s": min(default)}
    best["timings"] = run.meta.get("timings", {}) if run else {}
    limit = 1.1 * best["bare_same_argv_s"] + 1.0
    verdict = "met" if best["magic_s"] <= limit else "MISSED"
    print(
        f"P4 %%nsys {best['magic_s']:.2f} s vs bare nsys profile (same argv) "
        f"{best['bare_same_argv_s']:.2f} s = {best['magic_s'] / best['bare_same_argv_s']:.2f}x "
        f"(target <= 1.1x + 1 s = {limit:.2f} s: {verdict}); "
        f"nsys defaults {best['bare_default_s']:.2f} s; our phases {best['timings']}",
        flush=True,
    )
    return best


def drilldown(root: Path, layers: int = 2) -> dict:
    from nsight_magic.profilers.ncu import NcuOptions
    from nsight_magic.session.backends import NcuBackend, NsysBackend

    manager = _session(layers)
    parent = _fresh(manager, NsysBackend(), root, "p3-parent")
    top = parent.kernel_summary()["name"].iloc[0]
    t0 = time.perf_counter()
    pick = parent.profile_kernel(top, set="roofline", fresh=True)
    pick_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pick_full = parent.profile_kernel(top, set="full", fresh=True)
    pick_full_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    whole = _fresh(manager, NcuBackend(NcuOptions(set="full")), root, "p3-full")
    full_s = time.perf_counter() - t0
    picked = set(pick.kernels()["demangled"]) | set(pick.kernels()["name"])
    out = {
        "layers": layers,
        "top_kernel": top,
        "kernels_in_cell": int(parent.kernel_summary()["instances"].sum()),
        "pick_roofline_s": pick_s,
        "pick_full_s": pick_full_s,
        "cell_full_s": full_s,
        "cell_full_launches": len(whole.kernels()),
        "picked_is_top": top in picked,
        "pick_launches": len(pick.kernels()),
        "pick_full_launches": len(pick_full.kernels()),
    }
    print(
        f"P3 ({layers}-layer encoder) picker ncu on the top kernel: {pick_s:.1f} s (roofline), "
        f"{pick_full_s:.1f} s (full) "
        f"vs ncu --set full over the whole cell ({out['cell_full_launches']} launches): "
        f"{full_s:.1f} s -> {full_s / pick_s:.1f}x / {full_s / pick_full_s:.1f}x less wall time "
        f"(target >= 10x); picked kernel is the top one: {out['picked_is_top']}",
        flush=True,
    )
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__)
    ap.add_argument("--root", type=Path, default=None, help="run folders go here")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--layers", default="2", help="encoder depths for P3, e.g. 2,8")
    ap.add_argument("--only", choices=["p3", "p4"], default=None)
    args = ap.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="nsight-gpu-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    if args.only in (None, "p4"):
        result["p4"] = overhead(root)
    if args.only in (None, "p3"):
        result["p3"] = [drilldown(root, int(n)) for n in args.layers.split(",")]
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
