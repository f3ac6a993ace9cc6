"""P17 what the Memory tab costs on a long allocator history (issue 41 item 5: the first
``%%nsys --memory`` cell of a 34 GB training state spent 2.9 s in its view on the H100), the
package under test against another checkout of it side by side (``--package DIR``: the folder
that holds its ``nsight_magic``; each runs in a process of its own).

    python -m benchmarks.memory_history --package /tmp/old --package . [--copies 200] [--json F]

Input: the real ``%%nsys --memory`` run folder ``tests/data/mem_run_train`` (one training step
of a 2-layer MLP with AdamW, H100; its allocator snapshot has 131 history events), with the
history tiled ``--copies`` times (each copy's addresses and times shifted past the last, so
every allocation stays distinct and the peak is the last copy's): 200 copies are 26,200 events,
the size of a deep model's training step. Timed, best of ``--repeat``, each from a fresh load
of the folder: the snapshot read (``events()`` + ``blocks()``), the tensors alive at the peak
(``live_at``), the Memory tab's static form (``memory_static_html``, its chart's PNG
included) and the run's whole static page (``to_html()``, what a headless run shows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "mem_run_train"

CHILD = r"""
import json, pickle, shutil, sys, time
from pathlib import Path
folder, copies, repeat = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
from nsight_magic.reports import open_report
from nsight_magic.reports.torch_memory import load_snapshot
from nsight_magic.analysis import torch_memory
from nsight_magic.results import NsysRun
from nsight_magic.views.memory_view import memory_static_html

def fresh():
    status = json.loads((folder / "status.json").read_text())
    return NsysRun(open_report(folder / "report.sqlite"), folder,
                   {"name": "bench", "cell_status": status})

out = {"package": __import__("nsight_magic").__file__, "events": None}
best = {"read_s": [], "live_at_s": [], "memory_tab_s": [], "page_s": []}
for _ in range(repeat):
    t0 = time.perf_counter()
    snap = load_snapshot(folder / "torch_memory.pickle")
    events, blocks = snap.events(), snap.blocks()
    t1 = time.perf_counter()
    live, facts = torch_memory.live_at(events, blocks, snap.devices[0])
    t2 = time.perf_counter()
    run = fresh()
    t3 = time.perf_counter()
    tab = memory_static_html(run.frames)
    t4 = time.perf_counter()
    page = fresh().to_html()
    t5 = time.perf_counter()
    best["read_s"].append(t1 - t0)
    best["live_at_s"].append(t2 - t1)
    best["memory_tab_s"].append(t4 - t3)
    best["page_s"].append(t5 - t4)
    assert "Largest tensors at PyTorch" in tab and "data:image/png;base64," in tab, tab[:300]
    out.update(events=len(events), live=len(live), peak_bytes=int(facts["bytes_in_use"]))
out.update({k: min(v) for k, v in best.items()})
print(json.dumps(out))
"""


def tiled_folder(into: Path, copies: int) -> Path:
    """A copy of the fixture run folder whose snapshot history is ``copies`` tiles."""
    import pickle
    import shutil

    folder = into / "mem_run_tiled"
    shutil.copytree(FIXTURE, folder)
    with open(FIXTURE / "torch_memory.pickle", "rb") as f:
        data = pickle.load(f)
    tiled = []
    for device_trace in data["device_traces"]:
        times = [e.get("time_us") or 0 for e in device_trace]
        span = (max(times) - min(times) + 1) if times else 1
        events = []
        for k in range(copies):
            for e in device_trace:
                copy = dict(e, frames=[dict(f) for f in e.get("frames") or []])
                if e.get("addr"):
                    copy["addr"] = e["addr"] + k * (1 << 40)
                if isinstance(e.get("time_us"), (int, float)):
                    copy["time_us"] = e["time_us"] + k * span
                events.append(copy)
        tiled.append(events)
    data["device_traces"] = tiled
    with open(folder / "torch_memory.pickle", "wb") as out:
        pickle.dump(data, out)
    return folder


def run_one(package: Path, folder: Path, copies: int, repeat: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), os.environ.get(
        "PYTHONPATH", "")]).rstrip(os.pathsep)}  # fmt: skip
    # run from the tiled folder's parent: ``python -c`` puts its working directory first on
    # the path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(copies), str(repeat)],
                          env=env, capture_output=True, text=True, timeout=600,
                          cwd=folder.parent, check=False)  # fmt: skip
    if done.returncode != 0:
        return {"package": str(package), "error": done.stderr.strip().splitlines()[-3:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_history")
    parser.add_argument("--package", action="append", default=None)
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    packages = [Path(p).resolve() for p in (args.package or ["."])]
    rows = []
    with tempfile.TemporaryDirectory(prefix="nsm-memhist-") as tmp:
        folder = tiled_folder(Path(tmp), args.copies)
        for package in packages:
            rows.append(run_one(package, folder, args.copies, args.repeat))
    for row in rows:
        if "error" in row:
            print(f"P17 {row['package']}: failed: {row['error']}")
            continue
        print(f"P17 {row['package']}: {row['events']} history events, {row['live']} tensors "
              f"alive at the peak: read {row['read_s']:.3f} s, live_at {row['live_at_s']:.3f} s, "
              f"the Memory tab's static form {row['memory_tab_s']:.3f} s, the whole static "
              f"page {row['page_s']:.3f} s")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
