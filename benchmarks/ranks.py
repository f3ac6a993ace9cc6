"""Merge and per-rank analysis time of N per-rank nsys reports, as N grows.

Inputs: the real per-rank reports of one 2-rank job (tests/data/nsys_2rank_r0/r1.sqlite) tiled to
N ranks: rank k is a copy of ``nsys_2rank_r{k % 2}`` whose ``rank <r>`` marker names rank k (one
StringIds row changed). Pids repeat across files, as they may across nodes. Every measurement
runs in a fresh Python process (best of ``--repeat``); times start after the imports (in a
notebook pandas and pyarrow are loaded already) and ``cold_s`` includes them. CPU seconds
(user + system of the process) are printed next to wall seconds: on a shared machine they are
the steadier measure, and the ratios use them.

- merged:   ``load_runs(files)`` + ``rank_kernel_summary()`` + ``rank_nvtx_gpu_projection()`` +
            ``rank_skew()`` + ``collective_summary()`` + ``timeline()``;
- separate: the baseline, side by side in the same run: each file opened on its own with
            ``NsysReport`` and its ``kernel_summary()`` + ``nvtx_gpu_projection()``.

    python -m benchmarks.ranks [--ranks 2,8,64] [--workdir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
SOURCES = [DATA / "nsys_2rank_r0.sqlite", DATA / "nsys_2rank_r1.sqlite"]

_MERGED = """
import time
t_start = time.perf_counter()
import json, sys
from nsight_magic.reports.nsys.merge import load_runs
t0, c0 = time.perf_counter(), time.process_time()
run = load_runs(sys.argv[1:])
t1 = time.perf_counter()
per_rank = run.rank_kernel_summary()
projection = run.rank_nvtx_gpu_projection()
skew = run.rank_skew()
coll = run.collective_summary()
timeline = run.timeline()
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"s": t2 - t0, "cpu_s": c2 - c0, "load_s": t1 - t0, "cold_s": t2 - t_start,
                  "ranks": int(run.ranks()["rank"].notna().sum()), "skew_rows": len(skew),
                  "kernels": int(per_rank["instances"].sum()), "timeline_rows": len(timeline)}))
"""

_SEPARATE = """
import time
t_start = time.perf_counter()
import json, sys
from nsight_magic.reports.nsys.report import NsysReport
t0, c0 = time.perf_counter(), time.process_time()
kernels = 0
for path in sys.argv[1:]:
    r = NsysReport.open(path)
    kernels += int(r.kernel_summary()["instances"].sum())
    r.nvtx_gpu_projection()
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"s": t1 - t0, "cpu_s": c1 - c0, "cold_s": t1 - t_start, "kernels": kernels}))
"""


def tile_ranks(workdir: Path, n: int) -> list[Path]:
    """``n`` per-rank reports: copies of the two real ones, rank k's marker renamed ``rank k``."""
    out = []
    for k in range(n):
        src = SOURCES[k % 2]
        dst = workdir / f"rank{k}.sqlite"
        if not dst.exists():
            shutil.copyfile(src, dst)
            con = sqlite3.connect(dst)
            try:
                con.execute(
                    "UPDATE StringIds SET value = ? WHERE value = ?", (f"rank {k}", f"rank {k % 2}")
                )
                con.commit()
            finally:
                con.close()
        out.append(dst)
    return out


def _child(code: str, files: list[Path], repeat: int) -> dict:
    """The fastest of ``repeat`` fresh processes (the machine is shared: the minimum is the
    least disturbed run)."""
    argv = [sys.executable, "-c", code, *map(str, files)]
    runs = []
    for _ in range(repeat):
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["cpu_s"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,8,64", help="comma list of rank counts")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--workdir", type=Path, help="keep the tiled reports here")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.ranks.split(",")]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="nsight_ranks_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "machine": f"{platform.node()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        "rows": [],
    }
    print(f"ranks benchmark, {results['date']}, {results['machine']}")
    print(
        f"{'ranks':>6} {'merged s':>9} {'cpu s':>6} {'load s':>7} {'cold s':>7} "
        f"{'separate s':>11} {'cpu s':>6} {'merged/sep (cpu)':>17} {'cpu ms/rank':>12}"
    )
    for n in counts:
        files = tile_ranks(workdir, n)
        merged = _child(_MERGED, files, args.repeat)
        separate = _child(_SEPARATE, files, args.repeat)
        assert merged["ranks"] == n and merged["kernels"] == separate["kernels"]
        row = {
            "ranks": n,
            "merged": merged,
            "separate": separate,
            "cpu_ratio": merged["cpu_s"] / separate["cpu_s"],
            "cpu_ms_per_rank": 1000 * merged["cpu_s"] / n,
        }
        results["rows"].append(row)
        print(
            f"{n:>6} {merged['s']:>9.2f} {merged['cpu_s']:>6.2f} {merged['load_s']:>7.2f} "
            f"{merged['cold_s']:>7.2f} {separate['s']:>11.2f} {separate['cpu_s']:>6.2f} "
            f"{row['cpu_ratio']:>17.2f} {row['cpu_ms_per_rank']:>12.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
