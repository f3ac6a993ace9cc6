"""Locate ``nsys`` / ``ncu`` and check their versions.

Search order: the configured path (``%config NsightMagic.nsys_path``), the environment
(``NSIGHT_MAGIC_NSYS`` / ``NSIGHT_MAGIC_NCU``), ``PATH``, then the usual install folders
(newest version first), including the nsys that Nsight Compute bundles under
``host/target-linux-x64``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import ProfilerError, ToolNotFoundError, ToolVersionError
from .child_signals import run_bounded
from .clean_env import clean_env, run_quiet

ToolName = Literal["nsys", "ncu"]

ENV_VARS = {"nsys": "NSIGHT_MAGIC_NSYS", "ncu": "NSIGHT_MAGIC_NCU"}
# --capture-range-end, parquetdir export, --nvtx-include with domains: all there by these.
MIN_VERSIONS: dict[str, tuple[int, ...]] = {"nsys": (2023, 1), "ncu": (2023, 1)}
INSTALL_HINTS = {
    "nsys": "Install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the "
    "`nsight-systems-cli` apt package from the CUDA repo)",
    "ncu": "Install Nsight Compute (https://developer.nvidia.com/nsight-compute, or the CUDA "
    "toolkit's `cuda-nsight-compute` package)",
}
INSTALL_GLOBS: dict[str, tuple[str, ...]] = {
    "nsys": (
        "/opt/nvidia/nsight-systems/*/bin/nsys",
        "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
        "/usr/local/cuda*/bin/nsys",
        "/usr/local/cuda*/nsight-systems-*/bin/nsys",
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
        "/usr/local/cuda*/nsight-compute-*/host/target-linux-x64/nsys",
    ),
    "ncu": (
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda*/bin/ncu",
        "/usr/local/cuda*/nsight-compute-*/ncu",
    ),
}

# Paths set through ``%config``; the picker's re-runs read them too.
_configured: dict[str, str | None] = {"nsys": None, "ncu": None}


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: tuple[int, ...] | None = None

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "unknown"


def set_configured_path(name: ToolName, path: str | None) -> None:
    _configured[name] = path or None


def configured_path(name: str) -> str | None:
    """The path set through ``%config`` or the environment variable, if any (not searched)."""
    return _configured.get(name) or os.environ.get(ENV_VARS.get(name, "")) or None


def _is_exe(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _version_key(path: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", path)]


def candidates(name: ToolName, globs: Sequence[str] | None = None) -> list[str]:
    """Executables in the usual install folders, newest-looking version first per pattern."""
    found: list[str] = []
    for pattern in INSTALL_GLOBS[name] if globs is None else globs:
        for path in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if _is_exe(path) and path not in found:
                found.append(path)
    return found


def _hint(name: str) -> str:
    return (
        f"{INSTALL_HINTS[name]}, or point at it with `%config NsightMagic.{name}_path = "
        f'"/path/to/{name}"` (or the environment variable {ENV_VARS[name]}).'
    )


def find_tool(
    name: ToolName, configured: str | None = None, *, globs: Sequence[str] | None = None
) -> str:
    """Path of the executable; ToolNotFoundError with the install hint when there is none."""
    if name not in ENV_VARS:
        raise ValueError(f"unknown tool {name!r}")
    explicit = [
        ("configured", configured or _configured.get(name)),
        (ENV_VARS[name], os.environ.get(ENV_VARS[name])),
    ]
    for origin, value in explicit:
        if value:
            path = shutil.which(value) if os.sep not in value else value
            if path and os.path.isdir(path):  # a folder: look for the tool inside
                path = shutil.which(name, path=f"{path}{os.pathsep}{path}/bin")
            if path and _is_exe(path):
                return str(path)
            raise ToolNotFoundError(f"{name} not found at {value!r} (from {origin}). {_hint(name)}")
    on_path = shutil.which(name)
    if on_path:
        return on_path
    found = candidates(name, globs)
    if found:
        return found[0]
    raise ToolNotFoundError(f"{name} was not found on PATH or in the usual folders. {_hint(name)}")


def parse_version(text: str) -> tuple[int, ...] | None:
    """``NVIDIA Nsight Systems version 2025.3.1.0`` / ``Version 2025.3.1.0 (build ...)`` ->
    ``(2025, 3, 1, 0)``."""
    m = re.search(r"[Vv]ersion\s+(\d+(?:\.\d+)+)", text) or re.search(r"\b(20\d\d(?:\.\d+)+)", text)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


VERSION_TIMEOUT_S = 30.0


def tool_version(
    path: str, timeout: float | None = None, expired: Callable[[str], Exception] | None = None
) -> tuple[int, ...] | None:
    """``TOOL --version`` parsed (None when it prints no version); a hung or unrunnable tool is
    one ``ProfilerError`` line (after ``timeout``, default ``VERSION_TIMEOUT_S``), or
    ``expired(what)`` when the caller has its own error for a hang (a run's --timeout)."""
    timeout = VERSION_TIMEOUT_S if timeout is None else timeout
    try:
        out = run_quiet([path, "--version"], timeout)
    except subprocess.TimeoutExpired:
        if expired is not None:
            raise expired(f"`{path} --version`") from None
        raise ProfilerError(
            f"`{path} --version` did not answer within {timeout:.0f} s; the install looks broken "
            "(or hangs on a license or driver check): try it in a terminal."
        ) from None
    except OSError as exc:
        raise ProfilerError(f"`{path} --version` could not run ({exc.strerror or exc}).") from None
    return parse_version(out.stdout + "\n" + out.stderr)


def check_version(
    name: str, version: tuple[int, ...] | None, minimum: tuple[int, ...] | None = None
) -> None:
    minimum = minimum or MIN_VERSIONS[name]
    if version is not None and version < minimum:
        raise ToolVersionError(
            f"{name} {'.'.join(map(str, version))} is older than the "
            f"{'.'.join(map(str, minimum))} this needs. {_hint(name)}"
        )


def locate(name: ToolName, configured: str | None = None, *, check: bool = True) -> Tool:
    """Find the tool and (``check``) read and check its version."""
    path = find_tool(name, configured)
    version = None
    if check:
        version = tool_version(path)
        check_version(name, version)
    return Tool(name=name, path=path, version=version)


def find_nvidia_smi() -> str | None:
    return shutil.which("nvidia-smi")


GPU_INFO_S = 15.0
# nvidia-smi's answer per path, once it gave one: what it reports (names, driver, memory, max
# clock, UUIDs) does not change while the notebook lives, and asking took 0.05-0.08 s of
# every run on the H100 (each of a sweep's configurations: benchmarks P16)
_gpu_info: dict[str, list[dict[str, str]]] = {}


def gpu_info(timeout: float = GPU_INFO_S) -> list[dict[str, str]]:
    """GPUs as nvidia-smi reports them (empty when it is missing, fails or takes longer than
    ``timeout`` s; an empty answer is asked again next time)."""
    smi = find_nvidia_smi()
    if not smi:
        return []
    if smi in _gpu_info:
        return [dict(gpu) for gpu in _gpu_info[smi]]
    fields = "name,driver_version,memory.total,clocks.max.sm,uuid"
    try:
        # no profiler injected into nvidia-smi (LD_PRELOAD, CUDA_INJECTION*)
        argv = [smi, f"--query-gpu={fields}", "--format=csv,noheader"]
        out = run_bounded(argv, timeout, clean_env())
    except (OSError, subprocess.TimeoutExpired):
        return []
    keys = fields.split(",")
    gpus = [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in out.stdout.splitlines()
        if line.strip()
    ]
    if out.returncode == 0 and gpus:
        _gpu_info[smi] = [dict(gpu) for gpu in gpus]
    return gpus
