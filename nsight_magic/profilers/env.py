"""The environments of the processes a cell runs in: matplotlib's backend for a profiled
process (never the notebook's inline one) and the ``--env`` values a saved run folder may set
(an allow-list). The profiler commands' own clean environment is ``processes/clean_env.py``."""

from __future__ import annotations

from collections.abc import Mapping

from ..processes.clean_env import is_injection_variable

# ipykernel sets MPLBACKEND to its inline backend for the notebook (kernelapp.py, when unset),
# and every process we start inherits it. A profiled process is no notebook: a Python without
# matplotlib_inline (``--python`` another env) fails at ``import matplotlib`` ("not a valid value
# for backend"), and one with it prints a figure's repr and imports IPython. There matplotlib
# draws off screen, as in a script (never a window that would hold the cell: Agg); a backend the
# user chose (any other value, or ``--env MPLBACKEND=...``) is kept.
NOTEBOOK_MPL_BACKENDS = ("module://matplotlib_inline.", "module://ipykernel.pylab.")
PROFILED_MPL_BACKEND = "agg"


def without_notebook_backend(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the notebook's inline matplotlib backend replaced by Agg."""
    out = dict(env)
    if out.get("MPLBACKEND", "").startswith(NOTEBOOK_MPL_BACKENDS):
        out["MPLBACKEND"] = PROFILED_MPL_BACKEND
    return out


# What a saved run folder's env.json may set when the run is re-profiled without trust=True:
# device choice, threading and allocator knobs. Nothing that loads code (LD_*, PYTHON*, PATH,
# *_PLUGIN, injection variables) or redirects where libraries come from.
FOLDER_ALLOWED_NAMES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM", "NVIDIA_TF32_OVERRIDE",
})  # fmt: skip
FOLDER_ALLOWED_PREFIXES = ("NCCL_", "TORCH_")
# refused inside those prefixes: what loads code or names a place (a file, a folder, an output
# to write: TORCH_LOGS_OUT) or a peer to talk to (NCCL_COMM_ID, NCCL_NET*, NCCL_SOCKET_*,
# MASTER_ADDR-like hosts and ports)
FOLDER_REFUSED_PARTS = ("PLUGIN", "PATH", "PRELOAD", "LIBRARY", "HOME", "DIR", "FILE", "OUT",
                        "COMM_ID", "NET", "SOCKET", "HOST", "ADDR", "PORT", "URL")  # fmt: skip


def allowed_from_folder(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` split into (what a saved folder may set, what it may not)."""
    kept: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name, value in env.items():
        ok = name in FOLDER_ALLOWED_NAMES or (
            name.startswith(FOLDER_ALLOWED_PREFIXES)
            and not any(part in name for part in FOLDER_REFUSED_PARTS)
        )
        (kept if ok and not is_injection_variable(name) else refused)[name] = value
    return kept, refused
