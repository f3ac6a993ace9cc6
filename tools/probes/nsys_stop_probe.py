"""Where the ~3.1 s of a warm `%%nsys` cell's capture goes, and whether an nsys option shortens it
(Nsight Systems 2025.3.1 on the lent GPU).

    python3 tools/probes/nsys_stop_probe.py OUT_DIR

One `nsys launch --session=S` worker per variant (a torch process that runs tiny kernels between
cudaProfilerStart/Stop when the driver asks); per cycle it records: `nsys start` wall, the cell,
how long cudaProfilerStop blocks, when the .nsys-rep appears complete, and `nsys export
--type parquetdir` wall. Writes OUT_DIR/nsys_stop_probe.json. Every wait is bounded.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WORKER = r"""
import json, os, sys, time
import torch, torch.cuda.profiler as prof
d = sys.argv[1]
x = torch.randn(256, 256, device="cuda")
torch.cuda.synchronize()
n = 0
while True:
    go = os.path.join(d, "go%d" % n)
    while not os.path.exists(go):
        time.sleep(0.002)
    if open(go).read() == "exit":
        break
    t0 = time.perf_counter()
    prof.start()
    t1 = time.perf_counter()
    for _ in range(200):
        x = (x @ x).tanh()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    prof.stop()
    t3 = time.perf_counter()
    with open(os.path.join(d, "t%d.tmp" % n), "w") as f:
        times = {"start_s": t1 - t0, "body_s": t2 - t1, "stop_s": t3 - t2}
        json.dump({**times, "stop_end": time.time()}, f)
    os.replace(os.path.join(d, "t%d.tmp" % n), os.path.join(d, "t%d.json" % n))
    n += 1
"""

BASE_START = ["--sample=none", "--cpuctxsw=none", "--capture-range=cudaProfilerApi"]
VARIANTS: dict[str, dict[str, list[str]]] = {
    "base (what %%nsys does)": {
        "launch": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"],
        "start": [*BASE_START, "--capture-range-end=stop"],
    },
    "trace cuda only": {
        "launch": ["--trace=cuda", "--cuda-graph-trace=node"],
        "start": [*BASE_START, "--capture-range-end=stop"],
    },
    "no flush on stop (refused by launch)": {
        "launch": [
            "--trace=cuda,nvtx",
            "--cuda-graph-trace=node",
            "--flush-on-cudaprofilerstop=false",
        ],
        "start": [*BASE_START, "--capture-range-end=stop"],
    },
    "start: --export=none --stats=false": {
        "launch": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"],
        "start": [*BASE_START, "--capture-range-end=stop", "--export=none", "--stats=false"],
    },
    "repeat (one start)": {
        "launch": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"],
        "start": [*BASE_START, "--capture-range-end=repeat"],
        "once": [],
    },
}
CYCLES = 3


def wait_for(pred, limit: float, step: float = 0.005) -> float | None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        if pred():
            return time.perf_counter() - t0
        time.sleep(step)
    return None


def nsys_start(
    session: str, args: list[str], report: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``nsys start`` of one collection in the launched session, and how long it took."""
    t = time.perf_counter()
    argv = ["nsys", "start", f"--session={session}", *args, "--force-overwrite=true", "-o"]
    p = subprocess.run([*argv, str(report)], capture_output=True, text=True, timeout=60)
    return p, time.perf_counter() - t


def complete(path: Path) -> bool:
    """A report is complete once it exists and its size stays put for 50 ms."""
    if not path.exists():
        return False
    a = path.stat().st_size
    time.sleep(0.05)
    return path.exists() and path.stat().st_size == a and a > 0


def run_variant(out: Path, name: str, spec: dict[str, list[str]]) -> dict:
    d = out / name.replace(" ", "_").replace("/", "_").replace(":", "").replace("%", "")
    d.mkdir(parents=True, exist_ok=True)
    (d / "worker.py").write_text(WORKER)
    session = f"probe{os.getpid()}{len(list(out.iterdir()))}"
    log = open(d / "launch.log", "w")  # noqa: SIM115 (closed in the finally below)
    launch = [
        "nsys",
        "launch",
        f"--session={session}",
        *spec["launch"],
        sys.executable,
        str(d / "worker.py"),
        str(d),
    ]
    proc = subprocess.Popen(launch, stdout=log, stderr=subprocess.STDOUT)
    result: dict = {"launch": launch, "cycles": []}
    time.sleep(3.0)  # torch + CUDA up before the first start
    repeat = "once" in spec
    try:
        if repeat:
            p, result["start_once_s"] = nsys_start(session, spec["start"], d / "rep")
            result["start_rc"] = p.returncode
            result["start_err"] = (p.stderr or p.stdout)[-400:]
        for i in range(CYCLES):
            cyc: dict = {}
            if not repeat:
                p, cyc["nsys_start_s"] = nsys_start(session, spec["start"], d / f"rep{i}")
                if p.returncode != 0:
                    cyc["error"] = (p.stderr or p.stdout)[-400:]
                    result["cycles"].append(cyc)
                    break
            before = set(glob.glob(str(d / "*.nsys-rep")))
            t_go = time.perf_counter()
            (d / f"go{i}").write_text("go")
            tj = d / f"t{i}.json"
            if wait_for(tj.exists, 120) is None:
                cyc["error"] = "worker did not answer"
                result["cycles"].append(cyc)
                break
            cyc.update(json.loads(tj.read_text()))
            cyc["cycle_to_stop_return_s"] = time.perf_counter() - t_go

            def new_report(before: set[str] = before) -> Path | None:
                now = set(glob.glob(str(d / "*.nsys-rep"))) - before
                return Path(sorted(now)[0]) if now else None

            got = wait_for(lambda: (r := new_report()) is not None and complete(r), 60)
            cyc["report_after_stop_return_s"] = got
            r = new_report()
            if r is not None:
                cyc["report"] = r.name
                cyc["report_bytes"] = r.stat().st_size
                t = time.perf_counter()
                e = subprocess.run(
                    [
                        "nsys",
                        "export",
                        "--type",
                        "parquetdir",
                        "--force-overwrite=true",
                        "-o",
                        str(d / f"pq{i}"),
                        str(r),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                cyc["export_parquet_s"] = time.perf_counter() - t
                cyc["export_rc"] = e.returncode
            cyc["go_to_report_s"] = time.perf_counter() - t_go
            result["cycles"].append(cyc)
            print(name, i, json.dumps(cyc), flush=True)
    finally:
        (d / f"go{len(result['cycles'])}").write_text("exit")
        subprocess.run(
            ["nsys", "shutdown", f"--session={session}"], capture_output=True, timeout=60
        )
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    result["launch_log_tail"] = (d / "launch.log").read_text(errors="replace")[-1500:]
    return result


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, spec in VARIANTS.items():
        t = time.perf_counter()
        try:
            results[name] = run_variant(out, name, spec)
        except Exception as exc:  # a variant nsys refuses is a finding, not a stop
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["variant_s"] = time.perf_counter() - t
        (out / "nsys_stop_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
