"""GPU check and timing of ``shared_objects.preserved`` (issue 41): a table of CUDA tensors of
``--gib`` GiB, snapshot and restore on the device and through the staged host pool, with the
bytes checked bit for bit after each. Run on the GPU machine:
``python -m benchmarks.preserve_snapshot --gib 8``; prints GB/s per place."""

from __future__ import annotations

import argparse
import time

import torch

from nsight_magic.script import cuda_save
from nsight_magic.script.shared_objects import TABLE, preserved


def run(gib: float, place: str) -> float:
    n = int(gib * (1 << 30)) // 4 // 64
    ns = {TABLE: {i: torch.randn(n, device="cuda") for i in range(64)}}
    before = [t.clone() for t in ns[TABLE].values()]
    real = cuda_save.snapshot_place
    cuda_save.snapshot_place = lambda *a, **k: place
    try:
        t0 = time.perf_counter()
        with preserved(ns, ["*"]):
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for t in ns[TABLE].values():
                t.add_(1)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
        t3 = time.perf_counter()
    finally:
        cuda_save.snapshot_place = real
    assert all(torch.equal(a, b) for a, b in zip(before, ns[TABLE].values(), strict=True))
    total = sum(t.numel() * 4 for t in before) / 1e9
    print(f"{place}: {total:.1f} GB, save {total / (t1 - t0):.1f} GB/s, "
          f"restore {total / (t3 - t2):.1f} GB/s, bit-identical")  # fmt: skip
    return total / (t3 - t0 - (t2 - t1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8.0)
    args = parser.parse_args()
    for place in ("device", "staged", "staged", "host"):  # staged twice: the pool reused
        run(args.gib, place)


if __name__ == "__main__":
    main()
