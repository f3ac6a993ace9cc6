"""Picker and %%ncu end to end on a GPU (run: pytest -m gpu -s tests/gpu).

Skipped unless nsys and ncu are found and torch sees CUDA. Prints what it finds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nsight_magic import runner, runs, tools
from nsight_magic.errors import ToolNotFoundError
from nsight_magic.profilers import ncu as ncu_argv

torch = pytest.importorskip("torch")


def _have(name: str) -> bool:
    try:
        tools.find_tool(name)  # type: ignore[arg-type]
        return True
    except ToolNotFoundError:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (_have("nsys") and _have("ncu")), reason="nsys/ncu not found"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

CELL = (
    "import torch\n"
    "a = torch.randn(2048, 2048, device='cuda', dtype=torch.bfloat16)\n"
    "b = torch.relu(a)\n"
    "for _ in range(3):\n"
    "    c = a @ b\n"
    "d = torch.sin(c.float()).sum()\n"
    "torch.cuda.synchronize()\n"
)


def test_picker_profiles_exactly_the_chosen_kernel(tmp_path: Path) -> None:
    from nsight_magic.session.pipeline import profile_kernel, profile_nsys

    run = profile_nsys(CELL, runs_root=tmp_path, setup=False, name="picker")
    summary = run.kernel_summary()
    print("\n" + summary[["name", "instances", "total_ns"]].to_string())
    top = str(summary["name"].iloc[0])
    instance = min(1, int(summary["instances"].iloc[0]) - 1)  # a later launch when there is one
    t0 = time.perf_counter()
    child = profile_kernel(run, top, instance=instance)
    picker_s = time.perf_counter() - t0
    k = child.kernels()
    print(f"picked {top!r}\nncu rows: {k[['name', 'demangled']].to_dict('records')}")
    assert len(k) == 1
    assert str(k["name"].iloc[0]) in top
    print(f"demangled names equal: {str(k['demangled'].iloc[0]) == top}")
    assert child.run_dir.parent == run.run_dir / "ncu"
    parent_meta = runs.read_json(run.run_dir / "meta.json")
    assert parent_meta["children"][0]["kernel"] == top and child.meta["wall_s"] > 0

    # the alternative: ncu --set full over the whole cell
    full_dir = tmp_path / "full"
    full_dir.mkdir()
    argv = ncu_argv.profile_argv(
        tools.find_tool("ncu"), full_dir / "report", run.run_dir / "script.py", set="full",
        script_args=[str(full_dir / "status.json")],
    )  # fmt: skip
    t0 = time.perf_counter()
    res = runner.run(argv, log_path=full_dir / "profiler.log", timeout=580)
    full_s = time.perf_counter() - t0
    runner.raise_for_profiler(res, "ncu")
    print(f"picker (roofline, 1 kernel): {picker_s:.1f}s; ncu --set full, whole cell: "
          f"{full_s:.1f}s; ratio full/picker = {full_s / picker_s:.1f}x")  # fmt: skip


def test_ncu_nvtx_filter_with_at_sign(tmp_path: Path) -> None:
    """A range *named* 'LLM@prefill' in the default domain: escaped, it selects its kernel."""
    from nsight_magic.session.pipeline import profile_ncu

    cell = (
        "import torch, nvtx\nx = torch.randn(1 << 20, device='cuda')\n"
        "y = torch.cos(x)\n"
        "with nvtx.annotate('LLM@prefill'):\n    z = torch.sin(x)\n"
        "torch.cuda.synchronize()\n"
    )
    run = profile_ncu(cell, runs_root=tmp_path, setup=False, set=None,
                      metrics=["gpu__time_duration.sum"], nvtx="LLM@prefill")  # fmt: skip
    k = run.kernels()
    print(f"\n--nvtx-include {run.meta['nvtx_include']!r}: {list(k['demangled'])}")
    assert len(k) == 1 and "sin" in str(k["demangled"].iloc[0]).lower()
