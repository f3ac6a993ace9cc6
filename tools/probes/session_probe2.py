"""Second round: how to gate a warm nsys session so a short cell is captured whole, and the ncu
attach details the picker relies on (lent GPU, Nsight 2025.3.1).

    python3 tools/probes/session_probe2.py OUT_DIR

Round one (session_probe.py) found that a plain ``nsys start`` followed at once by a 10 ms cell
loses kernels and NVTX ranges (collection starts asynchronously). Here every cycle runs the same
counting cell: 40 elementwise kernels + one CUDA graph replay (4 node kernels) inside 3 NVTX
ranges, so each report should hold exactly 44 kernels and 3 push/pop ranges.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from session_probe import SETUP, Worker, clean_env, log_has, run, spawn, stop_group  # noqa: E402

COUNT = """
if GATE: torch.cuda.profiler.start()
with nvtx.annotate("cell", domain="nsight_magic"):
    with nvtx.annotate("L1", domain="nsight_magic"):
        for i in range(40):
            y = x + i
    with nvtx.annotate("L2", domain="nsight_magic"):
        g.replay()
    torch.cuda.synchronize()
if GATE: torch.cuda.profiler.stop()
"""


def count(rep: Path) -> dict:
    sq = rep.with_suffix(".sqlite")
    if not sq.exists():
        r = run(["nsys", "export", "--type", "sqlite", "-o", str(sq), str(rep.with_suffix(".nsys-rep"))])
        if not sq.exists():
            return {"export": r.get("out", "")[-300:]}
    out: dict = {}
    with contextlib.closing(sqlite3.connect(sq)) as c:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
        k = "CUPTI_ACTIVITY_KIND_KERNEL"
        out["kernels"] = c.execute(f"select count(*) from {k}").fetchone()[0] if k in tables else 0
        if "NVTX_EVENTS" in tables:
            out["pushpop"] = c.execute("select count(*) from NVTX_EVENTS where eventType=59").fetchone()[0]
            out["aten"] = c.execute(
                "select count(*) from NVTX_EVENTS where eventType=59 and coalesce(text,(select "
                "value from StringIds where id=textId)) like '%aten::%'"
            ).fetchone()[0]
        else:
            out["pushpop"] = 0
    return out


def start_worker(out: Path, name: str, launch_extra: list[str]) -> tuple[Worker, subprocess.Popen, float]:
    d = out / f"{name}_w"
    w = Worker(d)
    env = clean_env(NSYS_NVTX_PROFILER_REGISTER_ONLY="0")
    t0 = time.time()
    p = spawn(["nsys", "launch", f"--session={name}", "--trace=cuda,nvtx", "--cuda-graph-trace=node",
               *launch_extra, sys.executable, str(d / "worker.py"), str(d)], out / f"{name}.log", env)
    w.send(SETUP + "\nx = torch.ones(1024, device='cuda')\nGATE = False\ntorch.cuda.synchronize()", 120)
    return w, p, time.time() - t0


def finish(w: Worker, p: subprocess.Popen, name: str) -> None:
    w.send("#EXIT")
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        stop_group(p)
    run(["nsys", "shutdown", f"--session={name}"], timeout=20)


def variant_plain(out: Path, wait_s: float, name: str) -> dict:
    w, p, setup = start_worker(out, name, [])
    res: dict = {"setup_s": setup, "cycles": []}
    for k in range(3):
        rep = out / f"{name}_r{k}"
        t0 = time.time()
        st = run(["nsys", "start", f"--session={name}", "--sample=none", "--cpuctxsw=none", "-o",
                  str(rep), "--force-overwrite=true"])
        time.sleep(wait_s)
        cell = w.send(COUNT)
        sp = run(["nsys", "stop", f"--session={name}"], timeout=120)
        res["cycles"].append({"start_s": st["s"], "start_rc": st["rc"], "cell_s": cell.get("s"),
                              "stop_s": sp["s"], "stop_rc": sp["rc"], "wall_s": time.time() - t0,
                              **count(rep)})
    finish(w, p, name)
    return res


def variant_range(out: Path, name: str, launch_extra: list[str], export: bool) -> dict:
    w, p, setup = start_worker(out, name, launch_extra)
    w.send("GATE = True")
    res: dict = {"setup_s": setup, "cycles": []}
    for k in range(3):
        rep = out / f"{name}_r{k}"
        t0 = time.time()
        st = run(["nsys", "start", f"--session={name}", "--sample=none", "--cpuctxsw=none",
                  "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "-o", str(rep),
                  "--force-overwrite=true", *(["--export=sqlite"] if export else [])])
        cell = w.send(COUNT)
        t1 = time.time()
        sp = run(["nsys", "stop", f"--session={name}"], timeout=120)
        ready = rep.with_suffix(".nsys-rep").exists()
        res["cycles"].append({"start_s": st["s"], "start_rc": st["rc"], "start_out": st["out"][-300:],
                              "cell_s": cell.get("s"), "cell_wall_s": cell.get("wall_s"),
                              "stop_s": sp["s"], "stop_rc": sp["rc"], "stop_out": sp["out"][-300:],
                              "after_cell_s": time.time() - t1, "wall_s": time.time() - t0,
                              "ready": ready, **count(rep)})
    finish(w, p, name)
    return res


def variant_repeat(out: Path, name: str) -> dict:
    w, p, setup = start_worker(out, name, [])
    w.send("GATE = True")
    res: dict = {"setup_s": setup, "cycles": []}
    base = out / f"{name}_rep"
    st = run(["nsys", "start", f"--session={name}", "--sample=none", "--cpuctxsw=none",
              "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "-o", str(base),
              "--force-overwrite=true"])
    res["start"] = {"s": st["s"], "rc": st["rc"], "out": st["out"][-300:]}
    for k in range(3):
        t0 = time.time()
        cell = w.send(COUNT)
        found = None
        while time.time() - t0 < 20 and found is None:
            reps = sorted(out.glob(f"{name}_rep*.nsys-rep"))
            if len(reps) > k:
                found = reps[k]
            time.sleep(0.05)
        res["cycles"].append({"cell_s": cell.get("s"), "report": str(found),
                              "report_after_s": time.time() - t0,
                              **(count(found.with_suffix("")) if found else {})})
    sp = run(["nsys", "stop", f"--session={name}"], timeout=60)
    res["stop"] = {"s": sp["s"], "rc": sp["rc"], "out": sp["out"][-300:]}
    res["files"] = sorted(x.name for x in out.glob(f"{name}_rep*"))
    finish(w, p, name)
    return res


def ncu_attach(out: Path) -> dict:
    res: dict = {"picks": []}
    d = out / "ncu2_w"
    w = Worker(d)
    port = "49300"
    t0 = time.time()
    p = spawn(["ncu", "--mode", "launch", "--port", port, "--target-processes", "all", "--nvtx",
               sys.executable, str(d / "worker.py"), str(d)], out / "ncu2_launch.log", clean_env())
    res["import"] = w.send("import torch, nvtx, ctypes", 60)
    # the first intercepted CUDA call blocks until a tool attaches: release it with a no-op attach
    n = w.n
    w.n += 1
    (d / f"cmd{n}.py").write_text("torch.cuda.init()\ntorch.cuda.synchronize()")
    rel_log = out / "ncu2_release.log"
    t1 = time.time()
    rel = spawn(["ncu", "--mode", "attach", "--hostname", "127.0.0.1", "--port", port,
                 "--kernel-name", "regex:^$", "-f", "-o", str(out / "ncu2_release")], rel_log, clean_env())
    while not (d / f"done{n}.json").exists() and time.time() - t1 < 60:
        time.sleep(0.02)
    res["release_s"] = time.time() - t1
    os.killpg(rel.pid, signal.SIGINT)
    try:
        res["release_rc"] = rel.wait(10)
    except subprocess.TimeoutExpired:
        stop_group(rel)
        res["release_rc"] = "killed"
    res["setup"] = w.send(SETUP, 120)
    res["startup_total_s"] = time.time() - t0
    picks = [
        ("gemm_roofline", ["--kernel-name", "regex:^nvjet.*", "--launch-skip", "1", "--launch-count",
                           "1", "--set", "roofline"], "for _ in range(3):\n    c = a @ a\n"),
        ("gemm_full", ["--kernel-name", "regex:^nvjet.*", "--launch-skip", "0", "--launch-count",
                       "1", "--set", "full"], "for _ in range(3):\n    c = a @ a\n"),
        ("graph_node", ["--kernel-name", "regex:^splitKreduce.*", "--launch-skip", "1",
                        "--launch-count", "1", "--set", "basic"], "for _ in range(2):\n    g.replay()\n"),
        ("cell_all", ["--nvtx-include", "nsight_magic@cell/", "--set", "basic"],
         "with nvtx.annotate('cell', domain='nsight_magic'):\n    c = a @ a\n    e = torch.sin(c)\n"),
    ]
    for name, filt, body in picks:
        pk: dict = {"name": name}
        rep = out / f"ncu2_{name}"
        log = out / f"ncu2_{name}.log"
        t1 = time.time()
        a = spawn(["ncu", "--mode", "attach", "--hostname", "127.0.0.1", "--port", port, *filt,
                   "-f", "-o", str(rep)], log, clean_env())
        while time.time() - t1 < 15 and not log_has(log, "Connected"):
            time.sleep(0.02)
        pk["connected_s"] = time.time() - t1
        pk["cell"] = w.send(body + "torch.cuda.synchronize()", 300)
        t2 = time.time()
        while time.time() - t2 < 10 and not log_has(log, "==PROF== Report:"):
            time.sleep(0.02)
        pk["report_line_after_cell_s"] = time.time() - t2 if log_has(log, "==PROF== Report:") else None
        pk["exited_by_itself"] = a.poll()
        chk = run(["ncu", "--import", str(rep.with_suffix(".ncu-rep")), "--page", "raw", "--csv",
                   "--metrics", "gpu__time_duration.sum"])
        pk["readable_before_sigint"] = chk["rc"], chk["out"].count("\n")
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGINT)
            try:
                pk["rc_after_sigint"] = a.wait(10)
            except subprocess.TimeoutExpired:
                stop_group(a)
                pk["rc_after_sigint"] = "killed"
        chk2 = run(["ncu", "--import", str(rep.with_suffix(".ncu-rep")), "--page", "raw", "--csv",
                    "--metrics", "gpu__time_duration.sum"])
        pk["readable_after"] = chk2["rc"], chk2["out"].count("\n"), chk2["out"][-400:]
        pk["wall_s"] = time.time() - t1
        pk["log"] = log.read_text(errors="replace")[-800:]
        pk["worker_after"] = w.send("torch.ones(2, device='cuda').sum().item()", 30)
        res["picks"].append(pk)
    w.send("#EXIT")
    try:
        res["launch_rc"] = p.wait(30)
    except subprocess.TimeoutExpired:
        stop_group(p)
        res["launch_rc"] = "killed"
    return res


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    runs = {
        "plain": lambda: variant_plain(out, 0.0, "vplain"),
        "wait1s": lambda: variant_plain(out, 1.0, "vwait"),
        "range": lambda: variant_range(out, "vrange", [], False),
        "range_ops_export": lambda: variant_range(out, "vops", ["--pytorch=autograd-shapes-nvtx"], True),
        "repeat": lambda: variant_repeat(out, "vrepeat"),
        "ncu_attach": lambda: ncu_attach(out),
    }
    for name, fn in runs.items():
        t0 = time.time()
        try:
            res = fn()
        except Exception:
            import traceback

            res = {"error": traceback.format_exc()}
        res["wall_s"] = time.time() - t0
        (out / f"p2_{name}.json").write_text(json.dumps(res, indent=1, default=str))
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
