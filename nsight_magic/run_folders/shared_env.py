"""Which environment variables a shared copy of a run folder keeps: an allow-list.

nsys records the profiled process's whole environment (``TARGET_INFO_SYSTEM_ENV``'s
``DeviceEnvironment`` row, ``NAME=value;NAME=value;``, and one ``META_DATA_CAPTURE`` row
``PROCESS_<n>:ENVIRONMENT_VARIABLE`` = ``NAME="value"`` per variable), and ``env.json`` holds a
cell's ``--env``. Any of them may be a token (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
``WANDB_API_KEY``, a database URL with its password): a deny-list of secret-looking names never
catches them all, so ``share()`` keeps only variables known to be harmless and useful to a
reader (which devices and how many ranks, threading and allocator knobs, library versions) and
drops every other value. ``PATH``-like and ``*_DIR``/``*_FILE`` variables are dropped too: they
name this machine's folders."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "SHARE_ALLOWED_NAMES",
    "filter_env_list",
    "filter_env_mapping",
    "filter_env_row",
    "shared_env_keeps",
]

SHARE_ALLOWED_NAMES = frozenset({
    # device choice and CUDA behaviour
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS", "NVIDIA_TF32_OVERRIDE",
    "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_PRODUCT_NAME", "NVIDIA_REQUIRE_CUDA", "NVARCH",
    "TORCH_CUDA_ARCH_LIST",
    # libraries' knobs that change what the GPU runs
    "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    # ranks of a multi-process run
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    # how Python and text behave
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "LANG", "LC_ALL",
})  # fmt: skip
# ``NV_LIBCUBLAS_VERSION=13.1.0.3-1``, ``CUDA_VERSION=13.0.2``: a version, when it reads as one
_VERSION_VALUE = re.compile(r"[0-9][0-9A-Za-z.+~_-]{0,39}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENTRY_START = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


def shared_env_keeps(name: str, value: str) -> bool:
    """Whether a shared copy keeps the variable ``name`` with ``value``."""
    if name in SHARE_ALLOWED_NAMES:
        return True
    return name.endswith("_VERSION") and _VERSION_VALUE.fullmatch(value) is not None


def filter_env_mapping(env: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """``env`` (env.json: NAME -> value) split into what a copy keeps and the names dropped."""
    kept = {k: v for k, v in env.items() if shared_env_keeps(str(k), str(v))}
    return kept, sorted(str(k) for k in env if k not in kept)


def filter_env_row(text: str) -> tuple[bool, str]:
    """One ``NAME="value"`` (or ``NAME=value``) row: (kept, NAME); a row that is no
    assignment is not kept (its name is "")."""
    name, eq, value = text.partition("=")
    if not eq or not _NAME.fullmatch(name):
        return False, ""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return shared_env_keeps(name, value), name


def _entries(text: str) -> Iterable[tuple[str, str]]:
    """``NAME=value;NAME=value;`` as (NAME, value) pairs. nsys does not escape a ``;`` inside a
    value, so a piece that does not start ``NAME=`` belongs to the value before it."""
    pairs: list[list[str]] = []
    for piece in text.split(";"):
        start = _ENTRY_START.match(piece)
        if start:
            pairs.append([start[1], piece[start.end() :]])
        elif pairs:
            pairs[-1][1] += ";" + piece
        elif piece:
            pairs.append(["", piece])  # text before the first NAME=: never kept
    return [(name, value) for name, value in pairs]


def filter_env_list(text: str) -> tuple[str, list[str], list[str]]:
    """A ``NAME=value;NAME=value;`` list with only the kept variables; and the names kept and
    dropped."""
    kept: list[str] = []
    dropped: list[str] = []
    out = []
    for name, value in _entries(text):
        if name and shared_env_keeps(name, value):
            kept.append(name)
            out.append(f"{name}={value};")
        else:
            dropped.append(name or "<unnamed>")
    return "".join(out), kept, dropped


def looks_like_env_list(text: str) -> bool:
    """Whether ``text`` is an environment list (at least two ``NAME=...;`` entries): how a
    metadata table of a newer nsys that holds the environment elsewhere is still caught."""
    return text.count(";") >= 2 and all(
        bool(_ENTRY_START.match(p)) for p in text.rstrip(";").split(";")[:3]
    )
