"""P20 what the put-back between the repeats of ``%%nsys --repeat N`` costs, one look per
repeat beside one look per capture (``WorkerState.one_look``), side by side in one run.

    python -m benchmarks.put_back [--repeats 9] [--layers 8] [--rounds 3]

This process stands for the worker: a namespace holding a CPU model (``--layers``
``TransformerEncoderLayer(256, 4, 512)``), an input and a list, all of it agreed with the
notebook (as after the first cell), and a cell that runs the model and appends to the list.
Each round puts ``--repeats`` runs back both ways; per way: the time per repeat and the part
the looks took (the rest is the put-back's own look at what changed). No GPU, no profiler.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import time
from datetime import datetime, timezone
from typing import Any


def measure(repeats: int, layers: int, rounds: int) -> dict[str, Any]:
    import torch

    from nsight_magic.shared_state import worker_side
    from nsight_magic.shared_state.worker_side import WorkerState

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.TransformerEncoderLayer(256, 4, 512) for _ in range(layers)]
    )
    ns: dict[str, Any] = {"__name__": "__main__", "model": model,
                          "x": torch.randn(4, 16, 256), "hits": []}  # fmt: skip
    state = WorkerState(ns)
    walk = state.graph.look(worker_side.user_names(ns))  # the notebook agreed all of it
    state.graph.prints.update({key: record.print for key, record in walk.records.items()})
    looks: list[float] = []
    real = WorkerState._look

    def timed(self: WorkerState) -> Any:
        t0 = time.perf_counter()
        try:
            return real(self)
        finally:
            looks.append(time.perf_counter() - t0)

    WorkerState._look = timed  # type: ignore[method-assign]

    def cell() -> None:
        with torch.no_grad():
            ns["out"] = model(ns["x"])
        ns["hits"].append(1)

    out: dict[str, list[dict[str, float]]] = {"each": [], "one_look": []}
    try:
        for _ in range(rounds):
            for way in out:
                looks.clear()
                t0 = time.perf_counter()
                with state.one_look() if way == "one_look" else contextlib.nullcontext():
                    for _ in range(repeats):
                        with state.kept():
                            cell()
                total = time.perf_counter() - t0
                out[way].append({"per_repeat_s": total / repeats, "looks_s": sum(looks)})
    finally:
        WorkerState._look = real  # type: ignore[method-assign]
    best = {way: min(r["per_repeat_s"] for r in runs) for way, runs in out.items()}
    return {
        "machine": platform.processor() or platform.machine(),
        "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
        "repeats": repeats, "layers": layers, "rounds": out,
        "best_per_repeat_s": best, "ratio": best["one_look"] / best["each"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.put_back")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    result = measure(args.repeats, args.layers, args.rounds)
    print(json.dumps(result, indent=1))
    best = result["best_per_repeat_s"]
    print(f"P20 put-back per repeat: one look per repeat {best['each']:.3f} s, one look per "
          f"capture {best['one_look']:.3f} s ({result['ratio']:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
