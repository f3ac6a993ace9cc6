"""%%nsys end to end in a real IPython shell on a GPU (run: pytest -m gpu -s tests/gpu).

Skipped unless nsys is found and torch sees CUDA. Prints what it finds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nsight_magic import runner, runs, tools
from nsight_magic.errors import CellFailedError, ProfileTimeout, ToolNotFoundError
from nsight_magic.session.history import REGISTRY

torch = pytest.importorskip("torch")


def _have_nsys() -> bool:
    try:
        tools.find_tool("nsys")
        return True
    except ToolNotFoundError:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _have_nsys(), reason="nsys not found"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


@pytest.fixture
def ip(tmp_path: Path):  # type: ignore[no-untyped-def]
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    shell.run_line_magic("config", f'NsightMagic.runs_dir = "{tmp_path / "runs"}"')
    REGISTRY.clear()
    yield shell
    REGISTRY.clear()


def _names(run) -> list[str]:  # type: ignore[no-untyped-def]
    return list(run.kernels()["name"])


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
    run = ip.run_cell_magic("nsys", "--warmup 2 --name sin_gemm -o r", cell)
    wall = time.perf_counter() - t0
    assert run is not None, "the magic printed an error (see captured stderr)"
    assert ip.user_ns["r"] is run
    names = _names(run)
    print(f"\n%%nsys wall {wall:.1f}s; kernels: {names}")
    print(run.kernel_summary()[["name", "instances", "total_ns"]].to_string())
    sin = [n for n in names if "sin" in n.lower()]
    gemm = [n for n in names if any(k in n.lower() for k in ("gemm", "nvjet", "xmma", "cutlass"))]
    assert len(sin) == 1, "sin kernel once: the two warm-up runs are outside the capture"
    assert gemm, "the matmul's kernel is in the report"
    assert not [n for n in names if "scan" in n.lower() or "sort" in n.lower()], "setup leaked"
    nvtx = run.nvtx()
    mine = nvtx[nvtx["domain"] == "nsight_magic"]
    print(mine[["range", "level", "duration_ns"]].to_string())
    assert "cell" in set(mine["range"]) and "warmup" not in set(mine["range"])
    assert {"L1: y = torch.sin(x)", "L2: c = a @ a"} <= set(mine["range"])
    # the run folder has everything a later load_run needs
    d = run.run_dir
    for f in ("cell.py", "script.py", "argv.json", "env.json", "meta.json", "profiler.log"):
        assert (d / f).exists(), f
    meta = runs.read_json(d / "meta.json")
    assert meta["status"] == "ok" and meta["cell_status"]["gate_kind"] == "torch"
    again = runs.load_run(d)
    assert sorted(_names(again)) == sorted(names)


def test_transformer_forward_only(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell_magic(
        "nsight_setup",
        "--name model",
        "import torch\nfrom torch import nn\n"
        "layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, batch_first=True)\n"
        "model = nn.TransformerEncoder(layer, num_layers=2).cuda().eval()\n"
        "x = torch.randn(8, 128, 256, device='cuda')\n"
        "torch.cuda.synchronize()\n",
    )
    cell = "with torch.no_grad():\n    out = model(x)\ntorch.cuda.synchronize()\n"
    run = ip.run_cell_magic("nsys", "--name transformer", cell)
    assert run is not None
    k = run.kernels()
    print(f"\ntransformer forward: {len(k)} kernels, {k['name'].nunique()} distinct")
    print(run.kernel_summary()[["name", "instances", "total_ns"]].head(10).to_string())
    assert len(k) > 5
    # randn (distribution kernels) ran in setup only
    assert not k["name"].str.contains("distribution").any(), "setup kernels leaked"
    nvtx = run.nvtx()
    cell_rows = nvtx[(nvtx["domain"] == "nsight_magic") & (nvtx["range"] == "cell")]
    assert len(cell_rows) == 1
    start, end = int(cell_rows["start_ns"].iloc[0]), int(cell_rows["end_ns"].iloc[0])
    inside = (k["start_ns"] >= start) & (k["end_ns"] <= end)
    print(f"cell range {(end - start) / 1e6:.2f} ms holds {int(inside.sum())}/{len(k)} kernels")
    assert inside.all()
    proj = run.nvtx_gpu_projection()
    row = proj[(proj["domain"] == "nsight_magic") & (proj["range"] == "cell")]
    assert int(row["gpu_ops"].iloc[0]) >= len(k)


def test_cell_error_keeps_partial_report(tmp_path: Path) -> None:
    from nsight_magic.session.pipeline import profile_nsys

    cell = (
        "import torch\nx = torch.randn(1024, device='cuda')\ny = torch.sin(x)\n"
        "raise ValueError('boom')\n"
    )
    with pytest.raises(CellFailedError) as info:
        profile_nsys(cell, runs_root=tmp_path, setup=False)
    err = info.value
    print("\n" + str(err))
    assert 'File "<nsight_magic cell>", line 4' in err.traceback  # type: ignore[attr-defined]
    partial = err.run  # type: ignore[attr-defined]
    assert partial is not None and any("sin" in n.lower() for n in _names(partial))
    assert partial.meta["status"] == "cell_failed"


def test_timeout_stops_everything(tmp_path: Path) -> None:
    from nsight_magic.session.pipeline import profile_nsys

    cell = "import torch, time\nx = torch.ones(4, device='cuda') * 2\ntime.sleep(120)\n"
    t0 = time.perf_counter()
    with pytest.raises(ProfileTimeout) as info:
        profile_nsys(cell, runs_root=tmp_path, setup=False, timeout=20)
    res = info.value.result  # type: ignore[attr-defined]
    print(f"\ntimeout after {time.perf_counter() - t0:.1f}s, signals {res.signals}")
    assert runner.group_members(res.pgid) == []
    d = next(tmp_path.iterdir())
    assert runs.read_json(d / "meta.json")["status"] == "timeout"


def test_vars_ship_cuda_tensor_and_module(ip) -> None:  # type: ignore[no-untyped-def]
    """--vars: a CUDA tensor and a CUDA module built in the notebook arrive in the profiled
    script on the GPU with their dtype, and the cell's kernels run on them."""
    ip.run_cell(
        "import torch\n"
        "w = torch.randn(512, 512, device='cuda', dtype=torch.float16)\n"
        "lin = torch.nn.Linear(512, 256).cuda().half()\n"
        "torch.cuda.synchronize()\n"
    )
    cell = (  # --vars ships values, not imports: the cell imports what it names
        "import torch\n"
        "assert w.is_cuda and w.dtype == torch.float16, (w.device, w.dtype)\n"
        "assert next(lin.parameters()).is_cuda\n"
        "y = lin(w @ w)\n"
        "torch.cuda.synchronize()\n"
    )
    run = ip.run_cell_magic("nsys", "--vars w,lin --no-setup --name vars", cell)
    assert run is not None, "the magic printed an error (see captured stderr)"
    names = _names(run)
    print(f"\n--vars w,lin: {len(names)} kernels: {[n[:60] for n in names]}")
    assert len(names) >= 2  # the fp16 matmul and the linear layer
    assert not [n for n in names if "distribution" in n], "randn ran in the notebook only"
