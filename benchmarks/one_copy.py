"""P11 one copy of the model (issue 33): what a new worker costs beside a model that holds a large
share of the GPU, in a Run All (cells back to back), the package under test against another
checkout of it side by side (``--package DIR``: the folder that holds its ``nsight_magic``).

    python -m benchmarks.one_copy --frac 0.40 --package /tmp/old --package . --json out.json

(``--package``: a folder holding a ``nsight_magic`` package; each run puts it first on the path)

Each (package, frac) runs in a new process: a real IPython shell, the extension loaded, then

1. ``%nsight_session start nsys`` and ``start nsys --host`` (as docs/sessions.md advises for
   a notebook that will use ``--host``), then ``%%nsight_setup``: ``weights`` of ``frac`` of the
   GPU's memory + a 2-layer MLP and AdamW;
2. the body in the notebook (its own time), then the first ``%%nsys`` cell and a later one, and
   the first ``%%nsys --host`` cell and a later one (what --host's capture itself costs);
4. the first picker drill-down of the first cell;
5. the first ``%%ncu`` cell;
6. a training step under ``%%nsys`` and a drill-down of it: the notebook's weights must be those
   the step left (a checksum), so the drill-down did not step them again;
7. last (a third nsys worker ends the least recently used one), the first cell of a worker
   nobody started (``--env``: other launch options, as ``--host`` is).

A step that fails records its error's first line, so a package that cannot hold the model twice
shows where it broke. Prints one table; ``--json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SETUP = """\
import torch
from torch import nn
free, total = torch.cuda.mem_get_info()
weights = torch.empty(int(total * {frac}) // 2, dtype=torch.bfloat16, device="cuda").fill_(0.5)
model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4096, 2048, device="cuda")
torch.cuda.synchronize()
"""
BODY = (
    "with torch.no_grad():\n    y = model(x)\n    s = weights[:4096].float().sum()\n"
    "torch.cuda.synchronize()\n"
)
STEP = "loss = model(x).square().mean()\nloss.backward()\nopt.step()\nopt.zero_grad()\n"
CHECKSUM = "float(sum(p.detach().double().sum() for p in model.parameters()))"


def one_session(frac: float, runs: Path) -> dict[str, Any]:
    """The steps above in this process; each figure in seconds, or the error that ended it."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nsight_magic")
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{runs}"')
    out: dict[str, Any] = {"frac": frac}

    def cell(key: str, magic: str, line: str, body: str) -> Any:
        t0 = time.perf_counter()
        result = ip.run_cell(f"%%{magic} {line}\n{body}")
        out[key] = time.perf_counter() - t0
        if not result.success:
            raise RuntimeError(f"{key}: {str(result.error_in_exec).splitlines()[0][:200]}")
        steps(key, result.result)
        return result.result

    def steps(key: str, run: Any) -> None:  # where a figure's seconds went (pipeline timings)
        out.setdefault("timings", {})[key] = getattr(run, "meta", {}).get("timings")

    from nsight_magic.session.manager import MANAGER

    try:
        if ip.find_line_magic("nsight_session") and "--host" in (
            ip.find_line_magic("nsight_session").__doc__ or ""
        ):  # an older package under test has no --host start
            ip.run_line_magic("nsight_session", "start nsys")
            ip.run_line_magic("nsight_session", "start nsys --host")
        t0 = time.perf_counter()
        ip.run_cell_magic("nsight_setup", "--name model", SETUP.format(frac=frac))
        out["setup_s"] = time.perf_counter() - t0
        out["weights_gib"] = ip.ev("weights.numel() * 2") / 2**30
        t0 = time.perf_counter()
        ip.run_cell(BODY)
        out["body_s"] = time.perf_counter() - t0
        first = cell("first_nsys_s", "nsys", "--name first", BODY)
        cell("later_nsys_s", "nsys", "--name later", BODY)
        cell("first_host_s", "nsys", "--host --name host", BODY)
        cell("later_host_s", "nsys", "--host --name host2", BODY)
        top = first.kernel_summary()["name"].iloc[0]
        t0 = time.perf_counter()
        steps("first_drill_s", first.profile_kernel(top))
        out["first_drill_s"] = time.perf_counter() - t0
        cell("first_ncu_s", "ncu", "--launch-count 1 --name ncu_cell", BODY)
        before = ip.ev(CHECKSUM)
        step = cell("step_nsys_s", "nsys", "--name step", STEP)
        after = ip.ev(CHECKSUM)
        t0 = time.perf_counter()
        steps("step_drill_s", step.profile_kernel(step.kernel_summary()["name"].iloc[0]))
        out["step_drill_s"] = time.perf_counter() - t0
        out["step_applied"] = after != before
        out["drill_left_weights"] = ip.ev(CHECKSUM) == after
        cell("second_worker_s", "nsys", "--env NSIGHT_MAGIC_BENCH=1 --name other", BODY)
        out["own_mib"] = {s.tool + str(s.pid): s.gpu_memory_mib for s in MANAGER.status()}
    except Exception as exc:  # a package that cannot hold the model twice breaks here
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        MANAGER.stop()
    return out


KEYS = ("first_nsys_s", "later_nsys_s", "first_host_s", "later_host_s", "first_drill_s",
        "first_ncu_s", "step_nsys_s", "step_drill_s", "second_worker_s")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frac", type=float, action="append", default=None)
    parser.add_argument("--package", action="append", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runs", default="/tmp/bench-one-copy")
    args = parser.parse_args(argv)
    fracs = args.frac or [0.40]
    if args.child:
        print("RESULT " + json.dumps(one_session(fracs[0], Path(args.runs))), flush=True)
        return
    rows: list[dict[str, Any]] = []
    for package in args.package or ["."]:
        for frac in fracs:
            # the package first on the path, and a neutral working directory: a worker's
            # ``python -m`` puts its cwd first, which must not be another checkout
            env = {**os.environ, "PYTHONPATH": f"{Path(package).resolve()}:"
                   + os.environ.get("PYTHONPATH", "")}  # fmt: skip
            where = Path(args.runs) / str(len(rows))
            where.mkdir(parents=True, exist_ok=True)
            argv_child = [sys.executable, str(Path(__file__).resolve()), "--child",
                          "--frac", str(frac), "--runs", str(where / "runs")]  # fmt: skip
            proc = subprocess.run(argv_child, env=env, cwd=where, capture_output=True, text=True,
                                  timeout=900, check=False)  # fmt: skip
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), "")
            row = json.loads(line[7:]) if line else {"error": proc.stderr[-300:]}
            row.update(package=package, frac=frac)
            rows.append(row)
            figures = "  ".join(
                f"{k[:-2]} {row[k]:.2f}" for k in KEYS if isinstance(row.get(k), float)
            )
            print(f"{package} frac {frac}: body {row.get('body_s', float('nan')):.3f} s  "
                  f"{figures}  {row.get('error', 'ok')}", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
