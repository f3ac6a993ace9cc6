"""Cells as several ranks (torchrun) end to end, on a machine with 2+ GPUs (nvidia-h200-x2):
``pytest -m gpu -s tests/gpu/test_e2e_ranks.py``. Keep NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 in the environment there: every
process of the cell inherits them."""

from __future__ import annotations

import os
import time

import pytest

from nsight_magic.errors import ProfileTimeout
from nsight_magic.processes import runner

from .conftest import cuda, have, magic


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (have("nsys") and have("ncu")), reason="nsys/ncu not found"),
    pytest.mark.skipif(not cuda() or _gpus() < 2, reason="needs 2 GPUs"),
]

CELL = (
    "import os, time, torch, torch.distributed as dist\n"
    "rank = dist.get_rank()\n"
    "x = torch.ones(4 << 20, device='cuda') * (rank + 1)\n"
    "a = torch.randn(2048, 2048, device='cuda', dtype=torch.bfloat16)\n"
    "for step in range(3):\n"
    "    b = a @ a\n"
    "    if rank == 1 and step == 1:\n"
    "        torch.cuda.synchronize(); time.sleep(0.01)  # rank 1 is late once\n"
    "    dist.all_reduce(x)\n"
    "torch.cuda.synchronize()\n"
)


def test_two_ranks_in_one_report_with_per_rank_views(ip) -> None:  # type: ignore[no-untyped-def]
    assert os.environ.get("NCCL_NVLS_ENABLE") == "0", "NVLink multicast must stay off"
    t0 = time.perf_counter()
    run = magic(ip, "nsys", "--nproc 2 --name two", CELL)
    wall = time.perf_counter() - t0
    assert not isinstance(run, Exception), run
    ranks = run.report.ranks()
    print(f"\n2-rank %%nsys {wall:.1f} s; ranks:\n{ranks.to_string()}")
    assert sorted(ranks["rank"].dropna().astype(int)) == [0, 1]
    assert set(ranks["source"]) == {"nvtx"}, "the script's rank marker names each process"
    assert run.meta["rank_status"] == {"0": "ok", "1": "ok"}
    per_rank = run.report.rank_kernel_summary()
    assert set(per_rank["rank"]) == {0, 1}
    skew = run.report.rank_skew()
    print(skew.to_string())
    assert len(skew) >= 3 and (skew["last_rank"] == 1).any()


def test_ncu_on_one_rank_and_an_nccl_kernel(ip) -> None:  # type: ignore[no-untyped-def]
    one = magic(ip, "ncu", "--nproc 2 --rank 1 --set basic --kernel nvjet --launch-count 2", CELL)
    assert not isinstance(one, Exception), one
    assert len(one.kernels()) == 2 and one.meta["nproc"] == 2
    parent = magic(ip, "nsys", "--nproc 2 --name parent", CELL)
    assert not isinstance(parent, Exception), parent
    nccl = next(n for n in parent.kernel_summary()["name"] if "nccl" in n.lower())
    t0 = time.perf_counter()
    child = parent.profile_kernel(nccl, rank=0)
    print(f"\nncu on rank 0's {nccl[:50]!r}: {time.perf_counter() - t0:.1f} s, "
          f"{child.meta.get('note')}")  # fmt: skip
    assert len(child.kernels()) == 1 and child.meta["rank"] == 0
    assert "single-pass" in child.meta["note"]


def test_timeout_stops_every_rank(ip, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cell = "import torch, time\nx = torch.ones(4, device='cuda')\ntime.sleep(120)\n"
    t0 = time.perf_counter()
    err = magic(ip, "nsys", "--nproc 2 --timeout 30", cell)
    print(f"\n2-rank timeout after {time.perf_counter() - t0:.1f} s")
    assert isinstance(err, ProfileTimeout)
    assert runner.group_members(err.result.pgid) == []
    # only this test's ranks: their script lies in its run folder (tmp_path/runs, the ip
    # fixture's runs_dir); another run's script.py on the machine is not ours
    ours = str(tmp_path / "runs").encode()
    left = [p for p in os.listdir("/proc") if p.isdigit() and _runs_cell(p, ours)]
    assert left == [], f"rank processes left: {left}"


def _runs_cell(pid: str, runs: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read()
    except OSError:
        return False
    return b"script.py" in argv and runs in argv
