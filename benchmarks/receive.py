"""Where a new worker's receive of a big training state goes (issue 41 item 5, P15).

    source .device/env.sh && python -m benchmarks.receive     # a GPU with nsys on PATH

This process stands for the notebook: it builds 36 Llama-shaped blocks (3072 wide, bf16, 4.27 B
parameters), an EMA copy and fused AdamW with its state (34.2 GB in 1,635 tensors), and packs
them as the session does (``NotebookState.outgoing``: CUDA memory as IPC handles), once as torch
shares them and once with the per-tensor event waits turned off. A second process stands for the
worker and receives each with the worker's own code (``WorkerState.receive``): plain,
and under ``nsys launch`` with the warm worker's default, ``--memory`` and ``--host`` options.
Then it times pinning 8 GB of host memory three ways (torch's pinned 256 MB allocations, one
huge-page-advised mapping registered with CUDA, the same without the advice) and a copy into it.

Measured on the lent H100, 2026-11-27 (benchmarks/README.md P15, with the pickler the state
package replaced in issue 56): every receive 0.15-0.27 s;
pinning 8 GB 4.53 s / 1.75 s / 2.33 s; copies 55 GB/s. The figures go to $OUT/recv_probe.json.
"""

from __future__ import annotations

import copy
import cProfile
import ctypes
import io
import json
import mmap
import os
import pstats
import subprocess
import sys
import time
from typing import Any

LAUNCH_OPTIONS = {
    "default": ["--trace=cuda,nvtx", "--cuda-graph-trace=node"],
    "memory": ["--trace=cuda,nvtx", "--cuda-graph-trace=node", "--cuda-memory-usage=true"],
    "host": ["--trace=cuda,nvtx,osrt", "--cuda-graph-trace=node", "--python-sampling=true",
             "--python-backtrace=cuda"],
}  # fmt: skip
GB8 = 8 << 30


def consume(tag: str, path: str) -> None:
    """The worker's side: start CUDA, then receive ``path`` with the worker's own code."""
    t0 = time.perf_counter()
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t0
    from nsight_magic.script import shared_objects
    from nsight_magic.shared_state.worker_side import WorkerState

    ns: dict[str, Any] = {}
    profile = cProfile.Profile()
    profile.enable()
    t0 = time.perf_counter()
    got = WorkerState(ns).receive(path)
    torch.cuda.synchronize()
    receive_s = time.perf_counter() - t0
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    print(text.getvalue()[-2200:])
    mapped = len(shared_objects.mapped_storages(ns))
    print("RESULT " + json.dumps({"tag": tag, "receive_s": receive_s, "init_s": init_s,
                                  "names": got["names"], "mapped": mapped}))  # fmt: skip


def _state() -> dict[str, Any]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, h: int = 3072, i: int = 8192) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(h, h, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
            self.down = nn.Linear(i, h, bias=False)
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)

    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = nn.Sequential(nn.Embedding(32000, 3072), *[Block() for _ in range(36)],
                              nn.RMSNorm(3072), nn.Linear(3072, 32000, bias=False))  # fmt: skip
    torch.set_default_dtype(torch.float32)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    torch.cuda.synchronize()
    return {"model": model, "ema": ema, "opt": opt}


def _pack(ns: dict[str, Any], tag: str, res: dict[str, Any]) -> str:
    from nsight_magic.shared_state.notebook_side import NotebookState

    t0 = time.perf_counter()
    blob = NotebookState(ns).outgoing(dict(ns), max_bytes=1 << 30).blob
    res[f"pack_{tag}_s"] = time.perf_counter() - t0
    path = f"/tmp/recv_{tag}.pkl"
    with open(path, "wb") as f:
        f.write(blob)
    return path


def _pinning(res: dict[str, Any]) -> None:
    import torch

    src = torch.empty(GB8, dtype=torch.uint8, device="cuda")

    def copy_rate(dst: Any, tag: str) -> None:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        res[f"{tag}_d2h_gb_per_s"] = GB8 / 1e9 / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    chunks = [torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(32)]
    res["pin_chunks_256mb_8gb_s"] = time.perf_counter() - t0
    del chunks
    cudart = torch.cuda.cudart()
    for advice in ("hugepage", "plain"):
        t0 = time.perf_counter()
        area = mmap.mmap(-1, GB8, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if advice == "hugepage" and hasattr(mmap, "MADV_HUGEPAGE"):
            area.madvise(mmap.MADV_HUGEPAGE)
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(area))
        res[f"register_{advice}_err"] = str(cudart.cudaHostRegister(ptr, GB8, 0))
        res[f"register_{advice}_8gb_s"] = time.perf_counter() - t0
        host = torch.frombuffer(area, dtype=torch.uint8)
        res[f"register_{advice}_is_pinned"] = bool(host.is_pinned())
        copy_rate(host, f"register_{advice}")
        cudart.cudaHostUnregister(ptr)


def main() -> None:
    if sys.argv[1:2] == ["--consume"]:
        consume(sys.argv[2], sys.argv[3])
        return
    import torch

    res: dict[str, Any] = {"gpu": torch.cuda.get_device_name()}
    t0 = time.perf_counter()
    ns = _state()
    moments = [v for s in ns["opt"].state.values() for v in s.values() if torch.is_tensor(v)]
    state = [*ns["model"].parameters(), *ns["ema"].parameters(), *moments]
    res.update(tensors=len(state), build_s=time.perf_counter() - t0,
               state_gb=sum(x.numel() * x.element_size() for x in state) / 1e9)  # fmt: skip
    import torch.multiprocessing.reductions as reductions

    default = _pack(ns, "default", res)
    torch_reduce = reductions.reduce_tensor

    def without_event_waits(tensor: Any) -> Any:  # the device is idle: nothing to wait for
        rebuild, args = torch_reduce(tensor)
        return rebuild, (*args[:-1], False) if tensor.is_cuda else args

    reductions.reduce_tensor = without_event_waits
    quiet = _pack(ns, "nosync", res)
    reductions.reduce_tensor = torch_reduce
    variants: list[tuple[str, list[str] | None, str]] = [
        ("plain_default", None, default),
        ("plain_nosync", None, quiet),
    ]
    variants += [(f"nsys_{name}", options, default) for name, options in LAUNCH_OPTIONS.items()]
    for i, (tag, options, path) in enumerate(variants):
        argv = [sys.executable, "-m", "benchmarks.receive", "--consume", tag, path]
        if options is not None:
            argv = ["nsys", "launch", f"--session=recv{i}", *options, *argv]
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        res[f"{tag}_wall_s"] = time.perf_counter() - t0
        print(f"== {tag} rc={done.returncode}", done.stdout[-2500:], done.stderr[-800:], flush=True)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                res[tag] = json.loads(line[len("RESULT ") :])
        if options is not None:
            subprocess.run(["nsys", "shutdown", f"--session=recv{i}"], capture_output=True,
                           timeout=60)  # fmt: skip
        torch.cuda.ipc_collect()
    _pinning(res)
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "recv_probe.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
