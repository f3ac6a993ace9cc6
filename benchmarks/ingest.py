"""P1 ingest: open an nsys export and compute kernel summary + NVTX GPU projection.

Inputs are the real fixture tiled to 1k / 100k / 1M kernels (benchmarks/scale.py), as SQLite and as
an nsys parquetdir export. Every measurement runs in a fresh Python process (cold: imports, file
reads and all), and reports wall time and peak RSS. Baselines, on the same files:
- a plain SQL aggregate (the kernel summary's count/sum/avg/min/max in one GROUP BY, no NVTX);
- `nsys stats --report cuda_gpu_kern_sum,nvtx_gpu_proj_sum` where nsys is installed (GPU machine).
Ratios printed are baseline time / our time, measured in this one run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .scale import copies_for_kernels, scale_parquet, scale_sqlite

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
SIZES = {"1k": 1_000, "100k": 100_000, "1M": 1_000_000}

# Peak RSS of the child itself: VmHWM belongs to its own address space, whereas ru_maxrss
# survives exec on Linux and would report the (big) parent's peak.
_PEAK = """
def peak_rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

# Runs in the child: cold open + summary + projection, prints one JSON line.
# "s" starts after the imports: in a notebook pandas/pyarrow are loaded once per kernel, so
# the per-report cost is what matters; "cold_s" includes them (a fresh interpreter).
_OURS = """
import time
t_start = time.perf_counter()
import json, sys
from nsight_magic.reports.nsys.report import NsysReport
t0 = time.perf_counter()
r = NsysReport.open(sys.argv[1])
summary = r.kernel_summary()
projection = r.nvtx_gpu_projection()
t1 = time.perf_counter()
rss = peak_rss_mb()
print(json.dumps({"s": t1 - t0, "cold_s": t1 - t_start, "rss_mb": rss,
                  "kernels": int(summary["instances"].sum()), "ranges": len(projection)}))
"""

_SQL = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
con = sqlite3.connect(sys.argv[1])
rows = con.execute(
    "SELECT s.value, count(*), sum(k.end - k.start), avg(k.end - k.start), "
    "min(k.end - k.start), max(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
    "JOIN StringIds AS s ON s.id = k.demangledName GROUP BY k.demangledName"
).fetchall()
t = time.perf_counter() - t0
rss = peak_rss_mb()
print(json.dumps({"s": t, "rss_mb": rss, "kernels": sum(r[1] for r in rows)}))
"""


def _child(code: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK + code, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


NSYS_STATS_TIMEOUT_S = 240


def _nsys_stats(path: Path, workdir: Path) -> dict | None:
    """Wall time of ``nsys stats`` on ``path``; past the time limit it is killed and the limit is
    reported as a lower bound (``timed_out``)."""
    nsys = shutil.which("nsys")
    if nsys is None:
        return None
    argv = [
        nsys,
        "stats",
        "--force-export=false",
        "--format",
        "csv",
        "--report",
        "cuda_gpu_kern_sum,nvtx_gpu_proj_sum",
        "-o",
        str(workdir / f"stats_{path.stem}"),
        str(path),
    ]
    t0 = time.perf_counter()
    try:
        subprocess.run(
            argv, capture_output=True, text=True, check=True, timeout=NSYS_STATS_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"s": float(NSYS_STATS_TIMEOUT_S), "timed_out": True}
    return {"s": time.perf_counter() - t0, "timed_out": False}


def build_inputs(workdir: Path, sizes: dict[str, int]) -> dict[str, dict[str, Path]]:
    inputs = {}
    src_sqlite, src_pq = DATA / "nsys_small.sqlite", DATA / "nsys_small_pq"
    for label, kernels in sizes.items():
        copies = copies_for_kernels(src_sqlite, kernels)
        sqlite, pq = workdir / f"k{label}.sqlite", workdir / f"k{label}_pq"
        if not sqlite.exists():
            scale_sqlite(src_sqlite, sqlite, copies)
        if not pq.exists():
            scale_parquet(src_pq, pq, copies)
        inputs[label] = {"sqlite": sqlite, "parquet": pq}
    return inputs


def run(workdir: Path | None = None, sizes: dict[str, int] | None = None) -> list[dict]:
    sizes = sizes or SIZES
    workdir = workdir or Path(tempfile.mkdtemp(prefix="nsight-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, paths in build_inputs(workdir, sizes).items():
        row: dict = {"size": label}
        for fmt, path in paths.items():
            ours = _child(_OURS, path)
            row[f"ours_{fmt}_s"] = ours["s"]
            row[f"ours_{fmt}_cold_s"] = ours["cold_s"]
            row[f"ours_{fmt}_rss_mb"] = ours["rss_mb"]
            row["kernels"] = ours["kernels"]
        sql = _child(_SQL, paths["sqlite"])
        row["sql_s"] = sql["s"]
        stats = _nsys_stats(paths["sqlite"], workdir)
        row["nsys_stats_s"] = stats["s"] if stats else None
        row["nsys_stats_timed_out"] = bool(stats and stats["timed_out"])
        rows.append(row)
        _print_row(row)
    return rows


def _print_row(row: dict) -> None:
    stats = row["nsys_stats_s"]
    best = min(row["ours_sqlite_s"], row["ours_parquet_s"])
    best_cold = min(row["ours_sqlite_cold_s"], row["ours_parquet_cold_s"])
    ratio = (
        f"cold {stats / row['ours_sqlite_cold_s']:.1f}x (sqlite) {stats / best_cold:.1f}x (parquet)"
        f", warm {stats / best:.1f}x"
        if stats
        else "n/a"
    )
    print(
        f"P1 {row['size']:>5} kernels={row['kernels']:>9,d}  ours: "
        f"sqlite {row['ours_sqlite_s']:6.2f} s"
        f" ({row['ours_sqlite_rss_mb']:5.0f} MB)  parquet {row['ours_parquet_s']:6.2f} s"
        f" ({row['ours_parquet_rss_mb']:5.0f} MB) [cold, with imports: sqlite"
        f" {row['ours_sqlite_cold_s']:.2f} s, parquet {row['ours_parquet_cold_s']:.2f} s]"
        f" | plain SQL kern sum {row['sql_s']:6.2f} s"
        f" | nsys stats {'>' if row['nsys_stats_timed_out'] else ''}"
        f"{stats if stats is None else round(stats, 2)} s -> nsys/ours {ratio}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks ingest", description=__doc__)
    ap.add_argument("--workdir", type=Path, default=None, help="keep the tiled inputs here")
    ap.add_argument("--sizes", default=",".join(SIZES), help="subset of 1k,100k,1M")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    sizes = {k: SIZES[k] for k in args.sizes.split(",")}
    print(f"P1 ingest on {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    rows = run(args.workdir, sizes)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
