"""One copy of the notebook's GPU state (issue 33), end to end on a GPU in a real IPython shell:
a setup cell holding 40% of the GPU, then every kind of worker beside it (%%nsys, a second nsys
worker of other launch options, the picker's ncu worker, a %%ncu cell), a training step and a
drill-down of it that leaves the notebook's weights as they were, a notebook ``del`` that frees
the memory, and no process left at the end. Prints the figures the README quotes."""

from __future__ import annotations

import os
import time

import pytest

from benchmarks.one_copy import BODY, CHECKSUM, STEP
from benchmarks.one_copy import SETUP as SETUP_OF
from nsight_magic.processes import gpu_memory
from nsight_magic.session.manager import MANAGER

from .conftest import cuda, have, magic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (have("nsys") and have("ncu")), reason="nsys and ncu needed"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]


def _alive(pid: int | None) -> bool:
    return pid is not None and os.path.exists(f"/proc/{pid}")


def _own_mib(pid: int | None) -> float:
    return gpu_memory.read().mib_by_pid().get(pid or -1, 0.0)


def _timed(ip, name: str, line: str, cell: str):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    run = magic(ip, name, line, cell)
    wall = time.perf_counter() - t0
    assert not isinstance(run, Exception), run
    t = run.meta.get("timings", {})
    print(f"  [{name} {line}] " + ", ".join(f"{k} {v:.2f}" for k, v in t.items()))
    return run, wall


def test_one_copy_of_a_model_of_40_percent_of_the_gpu(ip) -> None:  # type: ignore[no-untyped-def]
    # a Run All: cells back to back (the ncu worker starts in the background after the first
    # nsys result; nothing waits for an idle second)
    ip.run_cell_magic("nsight_setup", "--name model", SETUP_OF.format(frac=0.40))
    weights_bytes = ip.user_ns["weights"].numel() * 2
    t0 = time.perf_counter()
    ip.run_cell(BODY)
    body = time.perf_counter() - t0
    print(f"\nweights {weights_bytes / 2**30:.1f} GiB; body in the notebook {body:.3f} s")

    first, first_s = _timed(ip, "nsys", "--name first", BODY)
    nsys_pid = first.meta["worker"]["pid"]
    # the prewarmed worker received the setup's names when the setup ended, or this cell did
    worker = next(s for s in MANAGER.status() if s.pid == nsys_pid)
    print(f"first %%nsys {first_s:.2f} s; the worker received {worker.shared_names}, "
          f"maps {worker.mapped_bytes / 2**30:.1f} GiB")  # fmt: skip
    assert {"weights", "model", "opt", "x"} <= set(worker.shared_names)
    assert worker.mapped_bytes >= weights_bytes
    assert not first.meta.get("replayed"), "no setup cell replayed: everything was shared"
    assert _own_mib(nsys_pid) < 4096, "the worker maps the model: it holds no copy of it"

    _, later_s = _timed(ip, "nsys", "--name later", BODY)
    print(f"later %%nsys {later_s:.2f} s (body + {later_s - body:.2f} s)")

    host, host_s = _timed(ip, "nsys", "--env NSIGHT_MAGIC_TEST=1 --name other", BODY)
    print(f"first %%nsys of other launch options (a second nsys worker) {host_s:.2f} s "
          f"(body + {host_s - body:.2f} s)")  # fmt: skip
    assert host.meta["worker"]["pid"] != nsys_pid and _alive(nsys_pid), "both workers live"

    top = first.kernel_summary()["name"].iloc[0]
    t0 = time.perf_counter()
    drill = first.profile_kernel(top)
    drill_s = time.perf_counter() - t0
    t = drill.meta.get("timings", {})
    print("  [drill] " + ", ".join(f"{k} {v:.2f}" for k, v in t.items()))
    print(f"first drill-down {drill_s:.2f} s (body + {drill_s - body:.2f} s) on {top[:60]}")
    assert len(drill.kernels()) >= 1

    _, ncu_s = _timed(ip, "ncu", "--launch-count 1 --name ncu_cell", BODY)
    print(f"first %%ncu cell {ncu_s:.2f} s (body + {ncu_s - body:.2f} s)")

    status = MANAGER.status()
    for s in status:
        print(f"  {s.tool} pid {s.pid}: own {s.gpu_memory_mib} MiB, maps "
              f"{s.mapped_bytes / 2**30:.1f} GiB")  # fmt: skip
    assert len([s for s in status if s.alive]) >= 3
    assert all(s.mapped_bytes >= weights_bytes for s in status if s.alive and s.mapped_bytes)

    # a training step runs on the notebook's own weights: its step is the notebook's step
    before = ip.ev(CHECKSUM)
    step, _ = _timed(ip, "nsys", "--name step", STEP)
    after_step = ip.ev(CHECKSUM)
    assert after_step != before, "the profiled step changed the notebook's model"
    # a kernel only autograd's backward thread launched: the drill-down's filter (a start/end
    # range around the cell) holds any thread's kernels (issue 34: "nothing captured" before)
    kernels = step.report.kernels()
    cell = step.nvtx()
    main_tid = int(
        cell[(cell["domain"] == "nsight_magic") & (cell["range"] == "cell")]["tid"].iloc[0]
    )
    threads = kernels.groupby("name")["tid"].agg(lambda t: set(t.astype(int)))
    backward = [n for n, tids in threads.items() if main_tid not in tids]
    assert backward, "the step's backward kernels come from another thread"
    t0 = time.perf_counter()
    bwd = step.profile_kernel(backward[0])
    print(f"drill-down of a backward kernel ({backward[0][:60]}) {time.perf_counter() - t0:.2f} s")
    assert len(bwd.kernels()) >= 1
    after_drill = ip.ev(CHECKSUM)
    print(f"checksum before {before:.6f}, after the step {after_step:.6f}, "
          f"after its drill-down {after_drill:.6f}")  # fmt: skip
    assert after_drill == after_step, "the drill-down's re-run left the notebook's weights"

    # a notebook del: the next cell drops the name in the worker, the memory comes back
    free_before = ip.ev("torch.cuda.mem_get_info()[0]")
    ip.run_cell("del weights")
    _timed(ip, "nsys", "--name after_del", "z = x.sum()\n")
    MANAGER.stop("ncu")
    ip.run_cell("import gc; gc.collect(); torch.cuda.ipc_collect(); torch.cuda.empty_cache()")
    free_after = ip.ev("torch.cuda.mem_get_info()[0]")
    print(f"free before del {free_before / 2**30:.1f} GiB, after {free_after / 2**30:.1f} GiB")

    pids = [s.pid for s in MANAGER.status()]
    MANAGER.stop()
    time.sleep(1.0)
    assert not [p for p in pids if _alive(p)], "no worker left"
