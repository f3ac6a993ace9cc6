"""Loaders of what nsys recorded about the target: its GPUs (TARGET_INFO_GPU) and the processes
that did CUDA or NVTX work (PROCESSES)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Spec, split_global_id
from .cupti import GRAPH_TRACE, KERNEL, MEMCPY, MEMSET, RUNTIME
from .source import ExportSource

__all__ = ["PROCESS_COLUMNS", "load_gpu_info", "load_processes"]

_GPU: Spec = {
    "id": "i",
    "name": "s",
    "chipName": "s",
    "busLocation": "s",
    "smCount": "i",
    "clockRate": "i",
    "totalMemory": "i",
    "memoryBandwidth": "i",
    "l2CacheSize": "i",
    "computeMajor": "i",
    "computeMinor": "i",
}


def load_gpu_info(src: ExportSource) -> list[dict[str, object]]:
    """TARGET_INFO_GPU (one row per GPU)::

        id INTEGER NOT NULL (device id), name TEXT, busLocation TEXT, l2CacheSize INTEGER,
        totalMemory INTEGER (B), memoryBandwidth INTEGER (B/s), clockRate INTEGER (Hz, max SM
        clock), smCount INTEGER, chipName TEXT, computeMajor/Minor INTEGER, ...

    joined with TARGET_INFO_CUDA_DEVICE (``gpuId, cudaId, pid``) for the CUDA device id.
    -> list of dicts: ``device_id, cuda_device, name, chip, bus, sm_count, sm_clock_max_hz,
    memory_bytes, memory_bandwidth_bytes_per_s, l2_bytes, compute_capability``."""
    gpus = src.read("TARGET_INFO_GPU", _GPU)
    cuda = src.read_columns("TARGET_INFO_CUDA_DEVICE", {"gpuId": "i", "cudaId": "i"}).ints
    cuda_of = dict(zip(cuda["gpuId"].tolist(), cuda["cudaId"].tolist(), strict=True))
    out: list[dict[str, object]] = []
    for row in gpus.itertuples(index=False):  # one row per GPU, a handful at most
        out.append(
            {
                "device_id": int(row.id),
                "cuda_device": int(cuda_of.get(int(row.id), int(row.id))),
                "name": row.name,
                "chip": row.chipName,
                "bus": row.busLocation,
                "sm_count": int(row.smCount),
                "sm_clock_max_hz": int(row.clockRate),
                "memory_bytes": int(row.totalMemory),
                "memory_bandwidth_bytes_per_s": int(row.memoryBandwidth),
                "l2_bytes": int(row.l2CacheSize),
                "compute_capability": f"{row.computeMajor}.{row.computeMinor}",
            }
        )
    return out


# The tables whose rows belong to a process, and the GlobalId column that says which.
_EVENT_PIDS = {
    RUNTIME: "globalTid",
    KERNEL: "globalPid",
    MEMCPY: "globalPid",
    MEMSET: "globalPid",
    GRAPH_TRACE: "globalPid",
    "NVTX_EVENTS": "globalTid",
}
PROCESS_COLUMNS = ["pid", "name"]


def load_processes(src: ExportSource) -> pd.DataFrame:
    """PROCESSES::

        globalPid INTEGER -- Serialized GlobalId, pid INTEGER, name TEXT

    -> ``pid, name``: one row per process with CUDA API calls, GPU ops or NVTX events in the
    report (PROCESSES itself lists every process on the machine, ~190 kernel threads and
    shells in a container), sorted by pid. nsys keeps no per-process command line (only the
    launched command, in META_DATA_CAPTURE); a process PROCESSES does not name is
    ``"pid <n>"``."""
    seen = [np.zeros(0, dtype=np.int64)]
    for table, column in _EVENT_PIDS.items():
        pid, _ = split_global_id(src.distinct_ints(table, column))
        seen.append(pid)
    pids = np.unique(np.concatenate(seen))
    listed = src.read_columns("PROCESSES", {"pid": "i", "name": "s"})
    names: dict[int, str] = {}
    for pid, name in zip(
        listed.ints["pid"].tolist(), listed.texts["name"].to_pylist(), strict=True
    ):
        if name and pid not in names:
            names[pid] = name
    return pd.DataFrame(
        {
            "pid": pids.astype(np.int64),
            "name": pd.Series([names.get(p, f"pid {p}") for p in pids.tolist()], dtype="str"),
        }
    )
