"""Measure the mechanisms a warm profiling session could use, on the lent GPU (Nsight 2025.3.1).

    python3 tools/probes/session_probe.py OUT_DIR [nsys] [ncu-attach] [ncu-exclude]

A probe worker (written to OUT_DIR) runs Python snippets it finds as files, one after another, in
one namespace, and answers with a done file: enough to drive a long-lived process under a profiler
without our package. Each probe writes what it saw (timings, exit codes, counts) to
OUT_DIR/probe_<name>.json and the profiler logs next to it. Every wait is bounded.
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

WORKER = r'''
import json, os, sys, time
d = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "plain"
ns = {"__name__": "__main__"}
open(os.path.join(d, "pid"), "w").write(str(os.getpid()))
nvtx = None
if mode == "exclude":
    import nvtx
    idle = nvtx.start_range("idle", domain="probe")
n = 0
while True:
    cmd = os.path.join(d, "cmd%d.py" % n)
    while not os.path.exists(cmd):
        time.sleep(0.005)
    src = open(cmd).read()
    if src.startswith("#EXIT"):
        break
    t = time.time()
    status, err = "ok", ""
    try:
        if mode == "exclude":
            nvtx.end_range(idle)
            with nvtx.annotate("cell%d" % n, domain="probe"):
                exec(src, ns)
            idle = nvtx.start_range("idle", domain="probe")
        else:
            exec(src, ns)
    except KeyboardInterrupt:
        status, err = "interrupted", "KeyboardInterrupt"
    except BaseException as e:
        status, err = "error", repr(e)
    tmp = os.path.join(d, "done%d.tmp" % n)
    with open(tmp, "w") as f:
        json.dump({"status": status, "err": err, "s": time.time() - t}, f)
    os.replace(tmp, os.path.join(d, "done%d.json" % n))
    n += 1
print("[worker] exit", flush=True)
'''

SETUP = """
import torch, nvtx
torch.cuda.init()
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
m = m.cuda().to(torch.bfloat16)
sx = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3): m(sx)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g), torch.no_grad():
    sy = m(sx)
torch.cuda.synchronize()
"""

CELL = """
with nvtx.annotate("cell", domain="nsight_magic"):
    for _ in range(3):
        c = a @ a
    for _ in range(2):
        g.replay()
    d = torch.sin(c.float()).sum()
    torch.cuda.synchronize()
"""

PICK = """
with nvtx.annotate("pick", domain="probe"):
    for _ in range(3):
        c = a @ a
    d = torch.sin(c.float()).sum()
torch.cuda.synchronize()
"""

LONG = """
import time as _t
_t0 = _t.time()
while _t.time() - _t0 < 20:
    c = a @ a
    torch.cuda.synchronize()
"""

CLEAN_ENV_PREFIXES = ("NSYS_", "QUADD_", "CUDA_INJECTION", "NVTX_INJECTION")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(CLEAN_ENV_PREFIXES) and k != "LD_PRELOAD"
    }
    env.update(extra)
    return env


class Worker:
    def __init__(self, d: Path) -> None:
        self.d = d
        self.n = 0
        d.mkdir(parents=True, exist_ok=True)
        (d / "worker.py").write_text(WORKER)

    def send(self, src: str, timeout: float = 120.0) -> dict:
        n = self.n
        self.n += 1
        tmp = self.d / f"cmd{n}.tmp"
        tmp.write_text(src)
        os.replace(tmp, self.d / f"cmd{n}.py")
        if src.startswith("#EXIT"):
            return {}
        done = self.d / f"done{n}.json"
        t0 = time.time()
        while not done.exists():
            if time.time() - t0 > timeout:
                return {"status": "timeout", "waited_s": timeout}
            time.sleep(0.01)
        out = json.loads(done.read_text())
        out["wall_s"] = time.time() - t0
        return out

    def pid(self) -> int | None:
        try:
            return int((self.d / "pid").read_text())
        except (OSError, ValueError):
            return None


def run(argv: list[str], timeout: float = 60.0, env: dict | None = None) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=env or clean_env())  # fmt: skip
        return {"argv": argv, "rc": p.returncode, "s": time.time() - t0,
                "out": (p.stdout + p.stderr)[-3000:]}  # fmt: skip
    except subprocess.TimeoutExpired as e:
        return {"argv": argv, "rc": "timeout", "s": time.time() - t0, "out": str(e)[-500:]}


def spawn(argv: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)  # fmt: skip


def stop_group(p: subprocess.Popen) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)
        try:
            p.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def counts(sqlite_path: Path) -> dict:
    out = {}
    with contextlib.closing(sqlite3.connect(sqlite_path)) as c:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS",
                  "CUPTI_ACTIVITY_KIND_RUNTIME"):  # fmt: skip
            out[t] = c.execute(f"select count(*) from {t}").fetchone()[0] if t in tables else None
        if "NVTX_EVENTS" in tables:
            rows = c.execute(
                "select coalesce(text, (select value from StringIds where id=textId)) from "
                "NVTX_EVENTS where eventType in (59, 60) limit 400"
            ).fetchall()
            texts = [r[0] for r in rows]
            out["nvtx_aten"] = sum(1 for t in texts if t and "aten::" in t)
            out["nvtx_sample"] = sorted({t for t in texts if t})[:12]
    return out


def probe_nsys(out: Path) -> dict:
    res: dict = {"cycles": []}
    d = out / "nsys_w"
    w = Worker(d)
    env = clean_env(NSYS_NVTX_PROFILER_REGISTER_ONLY="0")
    sess = "probe1"
    t0 = time.time()
    p = spawn(["nsys", "launch", f"--session={sess}", "--trace=cuda,nvtx", "--cuda-graph-trace=node",
               sys.executable, str(d / "worker.py"), str(d)], out / "nsys_launch.log", env)  # fmt: skip
    res["setup"] = w.send(SETUP, timeout=120)
    res["setup_total_s"] = time.time() - t0
    for k in range(1, 4):
        cyc: dict = {"k": k}
        rep = out / f"nsys_r{k}"
        extra = ["--export=sqlite"] if k == 3 else []
        cyc["start"] = run(["nsys", "start", f"--session={sess}", "--sample=none", "--cpuctxsw=none",
                            "-o", str(rep), "--force-overwrite=true", *extra])  # fmt: skip
        cyc["cell"] = w.send(CELL)
        cyc["stop"] = run(["nsys", "stop", f"--session={sess}"], timeout=120)
        cyc["rep_exists"] = rep.with_suffix(".nsys-rep").exists()
        sq = rep.with_suffix(".sqlite")
        if not sq.exists():
            cyc["export"] = run(["nsys", "export", "--type", "sqlite", "-o", str(sq),
                                 str(rep.with_suffix(".nsys-rep"))])  # fmt: skip
        cyc["export_pq"] = run(["nsys", "export", "--type", "parquetdir", "--force-overwrite=true",
                                "-o", str(out / f"nsys_r{k}_pq"), str(rep.with_suffix(".nsys-rep"))])  # fmt: skip
        with contextlib.suppress(Exception):
            cyc["counts"] = counts(sq)
        res["cycles"].append(cyc)
    # interrupt a running cell: SIGINT to the worker only
    intr: dict = {}
    rep = out / "nsys_rint"
    intr["start"] = run(["nsys", "start", f"--session={sess}", "--sample=none", "--cpuctxsw=none",
                         "-o", str(rep), "--force-overwrite=true"])  # fmt: skip
    n = w.n
    w.n += 1
    (d / f"cmd{n}.py").write_text(LONG)
    time.sleep(2.0)
    pid = w.pid()
    t1 = time.time()
    if pid:
        os.kill(pid, signal.SIGINT)
    done = d / f"done{n}.json"
    while not done.exists() and time.time() - t1 < 30:
        time.sleep(0.01)
    intr["after_sigint_s"] = time.time() - t1
    intr["done"] = json.loads(done.read_text()) if done.exists() else None
    intr["stop"] = run(["nsys", "stop", f"--session={sess}"], timeout=120)
    intr["still_works"] = w.send("x_after = 1 + 1")
    res["interrupt"] = intr
    res["sessions_list"] = run(["nsys", "sessions", "list"])
    # crash mid-collection
    crash: dict = {}
    crash["start"] = run(["nsys", "start", f"--session={sess}", "-o", str(out / "nsys_rcrash"),
                          "--force-overwrite=true", "--sample=none", "--cpuctxsw=none"])  # fmt: skip
    crash["cmd"] = w.send("c = a @ a\ntorch.cuda.synchronize()\nimport os, signal\n"
                          "os.kill(os.getpid(), signal.SIGKILL)", timeout=10)  # fmt: skip
    try:
        crash["launch_rc"] = p.wait(30)
    except subprocess.TimeoutExpired:
        crash["launch_rc"] = "still running after 30 s"
    crash["stop"] = run(["nsys", "stop", f"--session={sess}"], timeout=60)
    crash["sessions_list"] = run(["nsys", "sessions", "list"])
    crash["rep_exists"] = (out / "nsys_rcrash.nsys-rep").exists()
    stop_group(p)
    # relaunch with the same session name, with PyTorch op ranges
    d2 = out / "nsys_w2"
    w2 = Worker(d2)
    t0 = time.time()
    p2 = spawn(["nsys", "launch", f"--session={sess}", "--trace=cuda,nvtx",
                "--pytorch=autograd-shapes-nvtx", sys.executable, str(d2 / "worker.py"), str(d2)],
               out / "nsys_launch2.log", env)  # fmt: skip
    crash["relaunch_setup"] = w2.send(SETUP, timeout=120)
    crash["relaunch_setup_total_s"] = time.time() - t0
    rep = out / "nsys_rops"
    crash["ops_start"] = run(["nsys", "start", f"--session={sess}", "-o", str(rep),
                              "--force-overwrite=true", "--sample=none", "--cpuctxsw=none"])  # fmt: skip
    crash["ops_cell"] = w2.send("with torch.no_grad():\n    y = m(sx)\ntorch.cuda.synchronize()")
    crash["ops_stop"] = run(["nsys", "stop", f"--session={sess}"], timeout=120)
    run(["nsys", "export", "--type", "sqlite", "-o", str(rep.with_suffix(".sqlite")),
         str(rep.with_suffix(".nsys-rep"))])  # fmt: skip
    with contextlib.suppress(Exception):
        crash["ops_counts"] = counts(rep.with_suffix(".sqlite"))
    w2.send("#EXIT")
    try:
        crash["exit_rc"] = p2.wait(30)
    except subprocess.TimeoutExpired:
        crash["exit_rc"] = "still running"
    crash["shutdown"] = run(["nsys", "shutdown", f"--session={sess}"], timeout=30)
    stop_group(p2)
    res["crash"] = crash
    return res


def wait_file(path: Path, timeout: float) -> float | None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and path.stat().st_size > 0:
            return time.time() - t0
        time.sleep(0.05)
    return None


def log_has(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False


def probe_ncu_attach(out: Path) -> dict:
    res: dict = {"cycles": []}
    d = out / "ncu_w"
    w = Worker(d)
    t0 = time.time()
    p = spawn(["ncu", "--mode", "launch", "--target-processes", "all", "--nvtx",
               sys.executable, str(d / "worker.py"), str(d)], out / "ncu_launch.log", clean_env())  # fmt: skip
    res["import_torch"] = w.send("import torch, nvtx", timeout=60)
    first = w.send("torch.cuda.init()\nx0 = torch.ones(4, device='cuda')\ntorch.cuda.synchronize()",
                   timeout=15)  # fmt: skip
    res["cuda_init_no_attach"] = first
    if first.get("status") == "timeout":
        # suspended until a tool attaches? attach with a filter that matches nothing
        log = out / "ncu_attach0.log"
        a0 = spawn(["ncu", "--mode", "attach", "--hostname", "127.0.0.1", "--kernel-name",
                    "regex:^never_matches_anything$", "-f", "-o", str(out / "ncu_a0")], log,
                   clean_env())  # fmt: skip
        t1 = time.time()
        done = d / "done1.json"
        while not done.exists() and time.time() - t1 < 90:
            time.sleep(0.05)
        res["cuda_init_after_attach0_s"] = time.time() - t1 if done.exists() else None
        time.sleep(3)
        res["attach0_alive"] = a0.poll() is None
        stop_group(a0)
        res["attach0_log"] = (log.read_text(errors="replace"))[-1500:]
    res["setup"] = w.send(SETUP, timeout=120)
    res["setup_total_s"] = time.time() - t0
    variants = [
        ["--nvtx-include", "probe@pick/", "--launch-skip", "1", "--launch-count", "1"],
        ["--kernel-name", "regex:.*(gemm|nvjet|sm90).*", "--launch-skip", "1", "--launch-count", "1"],
        ["--nvtx-include", "probe@pick/", "--launch-skip", "0", "--launch-count", "1"],
    ]
    for k, filt in enumerate(variants, 1):
        cyc: dict = {"k": k, "filter": filt}
        rep = out / f"ncu_a{k}"
        log = out / f"ncu_attach{k}.log"
        t1 = time.time()
        a = spawn(["ncu", "--mode", "attach", "--hostname", "127.0.0.1", *filt, "--section",
                   "SpeedOfLight", "-f", "-o", str(rep)], log, clean_env())  # fmt: skip
        while time.time() - t1 < 15 and not log_has(log, "Connected"):
            time.sleep(0.05)
        cyc["connected_s"] = time.time() - t1 if log_has(log, "Connected") else None
        cyc["cell"] = w.send(PICK, timeout=120)
        cyc["report_s"] = wait_file(rep.with_suffix(".ncu-rep"), 30)
        t2 = time.time()
        try:
            cyc["attach_rc"] = a.wait(10)
            cyc["attach_exit_s"] = time.time() - t2
        except subprocess.TimeoutExpired:
            cyc["attach_rc"] = "alive 10 s after the cell"
            cyc["next_cmd_while_attached"] = w.send("y0 = torch.ones(2, device='cuda') + 1\n"
                                                    "torch.cuda.synchronize()", timeout=20)  # fmt: skip
            try:
                cyc["attach_rc_after_next_cmd"] = a.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(a.pid, signal.SIGINT)
                try:
                    cyc["attach_rc_after_sigint"] = a.wait(10)
                except subprocess.TimeoutExpired:
                    stop_group(a)
                    cyc["attach_rc_after_sigint"] = "needed SIGTERM/SIGKILL"
        cyc["wall_s"] = time.time() - t1
        cyc["log"] = log.read_text(errors="replace")[-1500:]
        cyc["worker_ok_after"] = w.send("z0 = 1", timeout=20)
        res["cycles"].append(cyc)
    w.send("#EXIT")
    try:
        res["launch_rc"] = p.wait(30)
    except subprocess.TimeoutExpired:
        res["launch_rc"] = "still running"
        stop_group(p)
    res["launch_log"] = (out / "ncu_launch.log").read_text(errors="replace")[-2000:]
    return res


def probe_ncu_exclude(out: Path) -> dict:
    res: dict = {"cells": []}
    d = out / "ncux_w"
    w = Worker(d)
    big = out / "ncux_big"
    t0 = time.time()
    p = spawn(["ncu", "--target-processes", "all", "--nvtx", "--nvtx-exclude", "probe@idle",
               "--section", "SpeedOfLight", "-f", "-o", str(big), sys.executable,
               str(d / "worker.py"), str(d), "exclude"], out / "ncux.log", clean_env())  # fmt: skip
    res["setup"] = w.send("import torch\nimport nvtx as _n", timeout=60)
    res["cuda"] = w.send("a = torch.randn(1024, 1024, device='cuda')\ntorch.cuda.synchronize()",
                         timeout=120)  # fmt: skip
    res["setup_total_s"] = time.time() - t0
    for k in range(2):
        cell: dict = {}
        cell["run"] = w.send("c = a @ a\ne = torch.sin(c)\ntorch.cuda.synchronize()", timeout=120)
        n = w.n - 1
        cell["big_exists"] = big.with_suffix(".ncu-rep").exists()
        cell["big_size"] = big.with_suffix(".ncu-rep").stat().st_size if cell["big_exists"] else 0
        cell["import_filtered"] = run(["ncu", "--import", str(big.with_suffix(".ncu-rep")), "--nvtx",
                                       "--nvtx-include", f"probe@cell{n}/", "--page", "raw",
                                       "--csv", "--metrics", "gpu__time_duration.sum"])  # fmt: skip
        cell["export_part"] = run(["ncu", "--import", str(big.with_suffix(".ncu-rep")), "--nvtx",
                                   "--nvtx-include", f"probe@cell{n}/", "--export",
                                   str(out / f"ncux_part{n}"), "-f"])  # fmt: skip
        cell["part_exists"] = (out / f"ncux_part{n}.ncu-rep").exists()
        res["cells"].append(cell)
    w.send("#EXIT")
    try:
        res["rc"] = p.wait(60)
    except subprocess.TimeoutExpired:
        res["rc"] = "still running"
        stop_group(p)
    res["log"] = (out / "ncux.log").read_text(errors="replace")[-2000:]
    return res


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    which = sys.argv[2:] or ["nsys", "ncu-attach", "ncu-exclude"]
    probes = {"nsys": probe_nsys, "ncu-attach": probe_ncu_attach, "ncu-exclude": probe_ncu_exclude}
    for name in which:
        t0 = time.time()
        try:
            res = probes[name](out)
        except Exception as exc:  # keep going: the other probes still tell something
            import traceback

            res = {"error": traceback.format_exc()}
            print(f"probe {name} failed: {exc}", flush=True)
        res["probe_wall_s"] = time.time() - t0
        (out / f"probe_{name}.json").write_text(json.dumps(res, indent=1, default=str))
        print(f"probe {name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
