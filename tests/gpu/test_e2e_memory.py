"""``%%nsys --memory`` end to end in a real IPython shell on a GPU (issue 37): the warm worker
launched with --cuda-memory-usage=true, torch's counts and allocator snapshot of the cell, the
Memory tab; an out-of-memory cell's message. Run: pytest -m gpu -s tests/gpu/test_e2e_memory.py"""

from __future__ import annotations

import importlib.util

import pytest

from nsight_magic.errors import CellFailedError
from nsight_magic.session.manager import MANAGER

from .conftest import cuda, have, magic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not have("nsys"), reason="nsys not found"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]

VIEWS = all(importlib.util.find_spec(m) for m in ("anywidget", "vl_convert"))

SETUP = """import torch
model = torch.nn.Sequential(torch.nn.Linear(4096, 8192), torch.nn.GELU(),
                            torch.nn.Linear(8192, 4096)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
data = torch.randn(512, 4096, device="cuda")
"""
STEP = """hidden = model[1](model[0](data))
loss = model[2](hidden).square().mean()
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
"""


def test_memory_view_of_a_training_step(ip) -> None:  # type: ignore[no-untyped-def]
    ip.run_cell_magic("nsight_setup", "", SETUP)
    run = magic(ip, "nsys", "--memory --name step", STEP)
    assert not isinstance(run, Exception), run
    summary = run.gpu_memory_summary()
    torch_counts = run.torch_memory().set_index("moment")
    lines = run.memory.live()[0]
    # the profiled process: torch's pid (a second nsys worker, of the default options, may be
    # alive beside this --memory one: seen on the H100 run)
    worker = run.meta["cell_status"]["torch_memory"]["pid"]
    print("\n", summary.to_string(), "\n", torch_counts.to_string())
    print(run.torch_allocations().head(8)[["bytes", "cell_line", "frame"]].to_string())
    assert len(summary), "the warm worker was launched with --cuda-memory-usage=true"
    row = summary.set_index("pid").loc[worker]
    # the worker's cudaMallocs during the cell hold at least what torch's reserve grew by (CUDA
    # modules loaded in the cell add their globals: 751 device-static rows on the H100 run)
    grew = torch_counts.loc["peak", "reserved_bytes"] - torch_counts.loc["start", "reserved_bytes"]
    assert row["peak_bytes"] - row["start_bytes"] >= grew > 0
    assert row["statement"].startswith("L")
    assert len(lines) and (lines["cell_line"].str.startswith("cell L")).any()
    status = run.meta["cell_status"]["torch_memory"]
    assert lines["bytes"].sum() <= status["requested_peak"]
    # the views need the declared anywidget and vl-convert, which the lent GPU machine's carried
    # wheels may leave out (33 MB): under NSIGHT_MAGIC_STRICT their ImportError would fail here
    if VIEWS:
        page = run.to_html()
        assert "GPU memory" in page and "peak" in page
        view = run.widget()
        memory = view.page("Memory")
        assert memory is not None
    # without --memory: no events, and the view says how to get them
    plain = magic(ip, "nsys", "--name plain", "y = data * 2\ntorch.cuda.synchronize()\n")
    assert not isinstance(plain, Exception), plain
    assert plain.gpu_memory().empty
    assert not VIEWS or "--memory" in plain.to_html()


def test_an_out_of_memory_cell_says_what_held_the_memory(ip) -> None:  # type: ignore[no-untyped-def]
    import torch

    held = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # the notebook's own 4 GiB
    try:
        ip.run_cell_magic("nsight_setup", "", "import torch\n")
        cell = (
            "blocks = []\nwhile True:\n"
            "    blocks.append(torch.empty(8 << 30, dtype=torch.uint8, device='cuda'))\n"
        )
        err = magic(ip, "nsys", "--memory --name oom", cell)
        print("\n", err)
        assert isinstance(err, CellFailedError), err
        text = str(err)
        assert "Out of GPU memory in cell L3" in text
        assert "What held the GPU's memory" in text and "the notebook (pid" in text
        assert "tensors: cell L3" in text  # the snapshot's lines (history started with CUDA)
        assert "What to do:" in text
    finally:
        MANAGER.reset()  # the failed worker keeps its blocks: stop it
        del held
        torch.cuda.empty_cache()
