"""%%nsys end to end in a real IPython shell on a GPU (run: pytest -m gpu -s tests/gpu).

Skipped unless nsys is found and torch sees CUDA. Prints what it finds."""

from __future__ import annotations

import subprocess
import time

import pytest

import nsight_magic
from nsight_magic.errors import CellFailedError, ProfileTimeout, WorkerDiedError
from nsight_magic.processes import locate as tools
from nsight_magic.run_folders import runs
from nsight_magic.session.manager import MANAGER

from .conftest import cuda, have, magic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not have("nsys"), reason="nsys not found"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]


def _names(run) -> list[str]:  # type: ignore[no-untyped-def]
    return list(run.kernels()["name"])


def _worker_pid(tool: str = "nsys") -> int | None:
    return next((s.pid for s in MANAGER.status() if s.tool == tool and s.alive), None)


def test_nsys_cell_only_kernels_captured(ip) -> None:  # type: ignore[no-untyped-def]
    # setup launches a scan (cumsum) and a sort: neither may appear in the report
    ip.run_cell_magic(
        "nsight_setup",
        "",
        "import torch\nx = torch.randn(1 << 20, device='cuda')\n"
        "a = torch.randn(512, 512, device='cuda')\n"
        "s = torch.cumsum(x, 0)\nv, i = torch.sort(x)\ntorch.cuda.synchronize()\n",
    )
    cell = "y = torch.sin(x)\nc = a @ a\ntorch.cuda.synchronize()\n"
    t0 = time.perf_counter()
    run = magic(ip, "nsys", "--warmup 2 --name sin_gemm -o r", cell)
    wall = time.perf_counter() - t0
    assert not isinstance(run, Exception), run
    assert ip.user_ns["r"] is run and nsight_magic.last_run() is run
    names = _names(run)
    print(f"\n%%nsys wall {wall:.1f}s (first cell: worker start); kernels: {names}")
    sin = [n for n in names if "sin" in n.lower()]
    gemm = [n for n in names if any(k in n.lower() for k in ("gemm", "nvjet", "xmma", "cutlass"))]
    assert len(sin) == 1, "sin kernel once: the two warm-up runs are outside the capture"
    assert gemm, "the matmul's kernel is in the report"
    assert not [n for n in names if "scan" in n.lower() or "sort" in n.lower()], "setup leaked"
    nvtx = run.nvtx()
    mine = nvtx[nvtx["domain"] == "nsight_magic"]
    assert "cell" in set(mine["range"]) and "warmup" not in set(mine["range"])
    assert {"L1: y = torch.sin(x)", "L2: c = a @ a"} <= set(mine["range"])
    d = run.run_dir
    for f in ("cell.py", "script.py", "env.json", "meta.json", "profiler.log", "status.json"):
        assert (d / f).exists(), f
    meta = runs.read_json(d / "meta.json")
    assert meta["status"] == "ok" and meta["mode"] == "warm"
    assert meta["cell_status"]["gate_kind"] == "torch"
    again = nsight_magic.load_run(d)
    assert sorted(_names(again)) == sorted(names)


def test_warm_session_keeps_state_and_matches_nsys_stats(ip, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell_magic("nsight_setup", "--name model", (
        "import torch\nfrom torch import nn\n"
        "layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, batch_first=True)\n"
        "model = nn.TransformerEncoder(layer, num_layers=2).cuda().eval()\n"
        "x = torch.randn(8, 128, 256, device='cuda')\ntorch.cuda.synchronize()\n"
    ))  # fmt: skip
    t0 = time.perf_counter()
    first = magic(ip, "nsys", "--name first", "with torch.no_grad():\n    h = model(x)\n")
    first_s = time.perf_counter() - t0
    pid = _worker_pid()
    t0 = time.perf_counter()
    # uses h, defined by the previous profiled cell: it lives in the worker
    second = magic(ip, "nsys", "--name second", "with torch.no_grad():\n    h2 = model(h)\n")
    second_s = time.perf_counter() - t0
    assert not isinstance(first, Exception) and not isinstance(second, Exception), (first, second)
    print(f"\nfirst cell {first_s:.1f} s (worker start), second {second_s:.1f} s, "
          f"worker {pid}; timings {second.meta['timings']}")  # fmt: skip
    assert _worker_pid() == pid and second.meta["worker"]["pid"] == pid
    assert second_s < 15, "a warm cell costs its own time plus the profiler's (~3 s)"
    assert len(second.kernels()) > 5
    # our summaries still equal nsys stats on the warm-session report
    rep = second.run_dir / "report.nsys-rep"
    out = tmp_path / "stats"
    subprocess.run([tools.find_tool("nsys"), "stats", "--force-export=true", "--format", "csv",
                    "--report", "cuda_gpu_kern_sum,nvtx_gpu_proj_sum", "-o", str(out), str(rep)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    import pandas as pd
    from stats_reference import assert_duration_summary_equal

    ref = pd.read_csv(f"{out}_cuda_gpu_kern_sum.csv")
    ours = second.kernel_summary()
    assert list(ours["name"]) == list(ref["Name"])
    assert_duration_summary_equal(ours, ref, "Instances")
    proj = pd.read_csv(f"{out}_nvtx_gpu_proj_sum.csv")
    mine = second.nvtx_gpu_projection()
    assert sorted(mine["proj_total_ns"]) == sorted(proj["Total Proj Time (ns)"])


def test_ipython_syntax_and_notebook_variables(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell("import torch\nplain = torch.randn(256, 256, device='cuda')")
    cell = "%time y = plain @ plain\n!nvidia-smi -L\ntorch.cuda.synchronize()\n"
    run = magic(ip, "nsys", "--name syntax", cell)
    assert not isinstance(run, Exception), run
    assert run.meta["shipped_vars"] == ["plain", "torch"]
    assert any("gemm" in n.lower() or "nvjet" in n.lower() for n in _names(run))
    labels = set(run.nvtx()["range"])
    assert {"L1: %time y = plain @ plain", "L2: !nvidia-smi -L"} <= labels


def test_cell_error_keeps_partial_report_and_fails_the_cell(ip) -> None:  # type: ignore[no-untyped-def]
    cell = (
        "import torch\nx = torch.randn(1024, device='cuda')\ny = torch.sin(x)\n"
        "raise ValueError('boom')\n"
    )
    err = magic(ip, "nsys", "-o partial", cell)
    assert isinstance(err, CellFailedError), err
    print("\n" + str(err))
    assert 'File "<nsight_magic cell>", line 4' in err.traceback
    partial = err.run
    assert partial is not None and any("sin" in n.lower() for n in _names(partial))
    assert partial.meta["status"] == "cell_failed"
    assert ip.user_ns["partial"] is partial and nsight_magic.last_run() is partial


def test_timeout_stops_the_cell_and_the_worker_lives(ip) -> None:  # type: ignore[no-untyped-def]
    magic(ip, "nsys", "", "import torch\nx = torch.ones(4, device='cuda') * 2\n")
    pid = _worker_pid()
    t0 = time.perf_counter()
    err = magic(ip, "nsys", "--timeout 10", "import time\ny = x * 3\ntime.sleep(120)\n")
    print(f"\ntimeout after {time.perf_counter() - t0:.1f}s: {err}")
    assert isinstance(err, ProfileTimeout)
    assert err.run is not None, "the cell's report up to the stop is kept"
    again = magic(ip, "nsys", "", "z = x * 4\n")
    assert not isinstance(again, Exception) and _worker_pid() == pid


def test_crash_and_broken_cuda_context_restart_the_worker(ip) -> None:  # type: ignore[no-untyped-def]
    magic(ip, "nsys", "", "import torch\nkeep = torch.arange(8, device='cuda')\n")
    pid = _worker_pid()
    err = magic(ip, "nsys", "", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert isinstance(err, WorkerDiedError), err
    run = magic(ip, "nsys", "", "total = keep.sum()\ntorch.cuda.synchronize()\n")
    assert not isinstance(run, Exception), run
    assert _worker_pid() != pid and run.meta["replayed"], "history replayed into a new worker"
    pid = _worker_pid()
    # a device-side assert leaves the CUDA context unusable: the worker says so and exits
    err = magic(ip, "nsys", "", "bad = keep[torch.tensor([100], device='cuda')]\n"
                                "torch.cuda.synchronize()\n")  # fmt: skip
    assert isinstance(err, CellFailedError), err
    after = magic(ip, "nsys", "", "ok = keep * 2\ntorch.cuda.synchronize()\n")
    assert not isinstance(after, Exception), after
    assert _worker_pid() != pid


def test_cuda_graph_replays_are_kernels_not_nothing(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell_magic("nsight_setup", "", (
        "import torch\nm = torch.nn.Linear(1024, 1024).cuda().half()\n"
        "sx = torch.randn(64, 1024, device='cuda', dtype=torch.half)\n"
        "s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())\n"
        "with torch.cuda.stream(s), torch.no_grad():\n    [m(sx) for _ in range(3)]\n"
        "torch.cuda.current_stream().wait_stream(s)\ng = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(g), torch.no_grad():\n    sy = m(sx)\n"
    ))  # fmt: skip
    run = magic(ip, "nsys", "", "for _ in range(5):\n    g.replay()\ntorch.cuda.synchronize()\n")
    assert not isinstance(run, Exception), run
    k = run.kernels()
    print(f"\ngraph replays: {len(k)} kernels: {sorted(set(k['name']))[:4]}")
    assert len(k) >= 5
    if "graph_node_id" in k:
        assert (k["graph_node_id"] >= 0).all()
    graph = magic(ip, "nsys", "--cuda-graph-trace graph", "g.replay()\ntorch.cuda.synchronize()\n")
    assert not isinstance(graph, Exception), graph  # graph launches are GPU work, not "nothing"


def test_pytorch_op_ranges(ip) -> None:  # type: ignore[no-untyped-def]
    """--pytorch shapes in the warm worker (emit_nvtx around the cell, no relaunch) gives the
    ranges nsys's own --pytorch=autograd-shapes-nvtx gives a fresh run: same text, parsed as
    ops with shapes; the default cell after it has none and runs in the same worker."""
    from nsight_magic.analysis.torch_ops import parse_op_range

    cell = ("import torch\nlin = torch.nn.Linear(512, 512).cuda()\n"
            "x = torch.randn(64, 512, device='cuda')\n"
            "y = torch.relu(lin(x))\ntorch.cuda.synchronize()\n")  # fmt: skip
    magic(ip, "nsys", "", cell)
    pid = _worker_pid()
    run = magic(ip, "nsys", "--pytorch shapes", cell)
    assert not isinstance(run, Exception), run
    assert _worker_pid() == pid  # no relaunch
    aten = [r for r in run.nvtx()["range"] if "aten::" in r]
    print(f"\n{len(aten)} aten ranges, e.g. {aten[:3]}")
    assert any("aten::addmm" in r or "aten::linear" in r for r in aten)
    ops = [parse_op_range(r) for r in aten]
    assert all(op is not None for op in ops) and any(op.shapes for op in ops if op)
    assert not run.op_summary().empty
    after = magic(ip, "nsys", "", cell)
    assert _worker_pid() == pid and not any("aten::" in r for r in after.nvtx()["range"])
    fresh = magic(ip, "nsys", "--pytorch shapes --fresh", cell)
    assert not isinstance(fresh, Exception), fresh
    parsed = (parse_op_range(r) for r in fresh.nvtx()["range"])
    fresh_ops = {op.op for op in parsed if op is not None}
    warm_ops = {op.op for op in ops if op is not None}
    print(f"warm ops {sorted(warm_ops)}\nfresh (nsys --pytorch) {sorted(fresh_ops)}")
    assert warm_ops == fresh_ops


def test_fresh_run_and_vars(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell(
        "import torch\n"
        "w = torch.randn(512, 512, device='cuda', dtype=torch.float16)\n"
        "lin = torch.nn.Linear(512, 256).cuda().half()\n"
    )
    cell = (
        "import torch\n"
        "assert w.is_cuda and w.dtype == torch.float16, (w.device, w.dtype)\n"
        "y = lin(w @ w)\ntorch.cuda.synchronize()\n"
    )
    run = magic(ip, "nsys", "--fresh --vars w,lin --name vars", cell)
    assert not isinstance(run, Exception), run
    assert run.meta["mode"] == "fresh" and len(_names(run)) >= 2
    assert not [n for n in _names(run) if "distribution" in n], "randn ran in the notebook only"
    t0 = time.perf_counter()
    err = magic(ip, "nsys", "--fresh --timeout 20", "import torch, time\n"
                "x = torch.ones(4, device='cuda')\ntime.sleep(120)\n")  # fmt: skip
    print(f"\nfresh timeout after {time.perf_counter() - t0:.1f}s")
    assert isinstance(err, ProfileTimeout)


def test_a_child_process_is_captured_and_named(ip) -> None:  # type: ignore[no-untyped-def]
    child = (
        "import torch\nx = torch.randn(1 << 20, device='cuda')\nprint(float(torch.cos(x).sum()))"
    )
    cell = (
        "import subprocess, sys, torch\n"
        "a = torch.randn(512, 512, device='cuda')\nb = a @ a\n"
        f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\n"
        "torch.cuda.synchronize()\n"
    )
    run = magic(ip, "nsys", "--name procs", cell)
    assert not isinstance(run, Exception), run
    k = run.kernels()
    print(f"\nprocesses: {sorted(set(k['pid']))}; {run.report.processes().to_dict('records')}")
    assert k["pid"].nunique() == 2, "the cell's kernels and its child's, in one report"
    assert len(run.report.processes()) >= 2


def test_a_first_run_is_labelled_cold_and_the_next_is_not(ip) -> None:  # type: ignore[no-untyped-def]
    """Issue 21: the first run of a cell in a new worker pays lazy loading and cuBLAS set-up;
    it says so (view header and run.warnings, with --warmup 1), the warm re-run does not."""
    cell = (
        "import torch\n"
        "a = torch.randn(2048, 2048, device='cuda', dtype=torch.bfloat16)\n"
        "b = torch.softmax(a @ a, -1)\n"
        "torch.cuda.synchronize()\n"
    )
    first = magic(ip, "nsys", "", cell)
    assert not isinstance(first, Exception), first
    effects = first.first_call_effects
    print(f"\nfirst run: {effects}\n  {first.warnings}")
    assert first.meta["first_run"] is True and effects is not None and effects.cold
    assert [w for w in first.warnings if w.startswith("Cold run (the first run")]
    again = magic(ip, "nsys", "", cell)
    print(f"warm re-run: {again.first_call_effects}\n  {again.warnings}")
    assert again.meta["first_run"] is False
    assert not [w for w in again.warnings if w.startswith(("Cold run", "First run"))]
