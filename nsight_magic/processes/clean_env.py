"""The environment of every profiler command we start, and ``run_quiet``: a profiler command run
to completion with it and no stdin.

Variables that inject a profiler into a process (LD_PRELOAD, NSYS_*, QUADD_*, CUDA_INJECTION*,
NVTX_INJECTION*) are inherited by every child. When the notebook itself runs under a profiler,
or a worker's own variables leak into a CLI call, an ``nsys start``/``nsys export`` run with them
crashes or attaches to itself; so every profiler command gets them stripped, and only the
variables we mean to set are added back. (Here, below ``profilers/``, because finding the tools,
``processes/locate.py``, runs them too.)"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from .child_signals import run_bounded

INJECTION_PREFIXES = ("NSYS_", "QUADD_", "CUDA_INJECTION", "NVTX_INJECTION")
INJECTION_NAMES = ("LD_PRELOAD",)


def is_injection_variable(name: str) -> bool:
    return name in INJECTION_NAMES or name.startswith(INJECTION_PREFIXES)


def run_quiet(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A profiler command run to completion: its environment cleaned (``clean_env``), no stdin
    (a kernel's stdin is a pipe that never closes: a command reading it would wait out its whole
    limit), output captured as text. Raises ``subprocess.TimeoutExpired`` after ``timeout`` s
    (its whole session killed: ``child_signals.run_bounded``), ``OSError`` when it cannot start;
    ended with the notebook."""
    return run_bounded(argv, timeout, clean_env())


def clean_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default: this process's environment) without injection variables, plus
    ``extra`` (which may set some of them on purpose, e.g. NSYS_NVTX_PROFILER_REGISTER_ONLY)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()}
    env = {k: v for k, v in env.items() if not is_injection_variable(k)}
    env.update(extra or {})
    return env
