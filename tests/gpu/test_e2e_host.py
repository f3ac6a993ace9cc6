"""``%%nsys --host`` end to end in the warm worker (run: pytest -m gpu -s tests/gpu).

The host options are split as measured (profilers/nsys.py): osrt, Python sampling and CUDA
backtraces on ``nsys launch``, CPU sampling on each ``nsys start``. Prints the cell times of a
default and a --host decode loop (the cost of the host capture in a warm session). With
IDLE_E2E_OUT set, copies the --host run's SQLite export there (a fixture candidate)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from nsight_magic.session.manager import MANAGER

from .conftest import cuda, have, magic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not have("nsys"), reason="nsys not found"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]

SETUP = (
    "import torch\ntorch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Embedding(4096, 512), torch.nn.Linear(512, 2048),\n"
    "    torch.nn.GELU(), torch.nn.Linear(2048, 512), torch.nn.Linear(512, 4096)).cuda().eval()\n"
)
DECODE = (
    "toks = []\n"
    "tok = torch.zeros(1, 1, dtype=torch.long, device='cuda')\n"
    "with torch.no_grad():\n"
    "    for _ in range(32):\n"
    "        tok = model(tok)[:, -1].argmax(-1, keepdim=True)\n"
    "        toks.append(tok.item())\n"
)


def _worker_pids() -> set[int]:
    return {s.pid for s in MANAGER.status() if s.tool == "nsys" and s.alive and s.pid}


def _count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as con:
        try:
            return int(con.execute(sql).fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def test_host_capture_in_the_warm_worker(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell_magic("nsight_setup", "--name model", SETUP)
    timings: dict[str, float] = {}
    runs = {}
    for name, line in [("plain1", ""), ("plain2", ""), ("host1", "--host"), ("host2", "--host")]:
        t0 = time.perf_counter()
        runs[name] = magic(ip, "nsys", f"--warmup 1 --name {name} {line}", DECODE)
        timings[name] = time.perf_counter() - t0
        assert not isinstance(runs[name], Exception), (name, runs[name])
    print(f"\ncell wall s: { ({k: round(v, 2) for k, v in timings.items()}) }")
    host, plain = runs["host2"], runs["plain2"]
    assert host.meta["worker"]["pid"] == runs["host1"].meta["worker"]["pid"], "one --host worker"
    assert host.meta["worker"]["pid"] != plain.meta["worker"]["pid"], "--host relaunches"
    assert host.meta["options"]["host"] is True
    db = next(host.run_dir.glob("*.sqlite"))
    out = os.environ.get("IDLE_E2E_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(db, Path(out) / "idle_warm_cell.sqlite")
        shutil.copy(host.run_dir / "cell.py", Path(out) / "idle_warm_cell.py")
        (Path(out) / "idle_warm_timings.txt").write_text(repr(timings) + "\n")
    osrt = _count(db, "select count(*) from OSRT_API")
    samples = _count(db, "select count(*) from COMPOSITE_EVENTS")
    py = _count(
        db,
        "select count(*) from NVTX_EVENTS where eventType = 34 "
        "and (jsonText is not null or jsonTextId is not null)",
    )
    print(f"--host report: {osrt} OS runtime calls, {samples} CPU samples, {py} Python backtraces")
    assert osrt > 0 and py > 0
    assert len(host.kernels()) == len(plain.kernels())
    py_samples = host.python_samples()
    print(py_samples[["kind", "frame"]].value_counts().head(10))
    print(py_samples["backtrace"].head(3).tolist())
    print("\n".join(host.idle_causes()["sentence"]))
    assert (py_samples["frame"] != "").any(), "Python frames read from the JSON payloads"
    assert host.cuda_api_summary()["calls"].sum() == len(host.cuda_api())
    assert _worker_pids()
