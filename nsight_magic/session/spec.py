"""The typed request one profiled cell makes, whichever profiler runs it."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..processes.progress import Progress

# a warm-up runs the whole cell once more before the capture; more than this is a typo (the
# magics refuse it; a saved run folder asking for more is damaged)
MAX_WARMUP = 1000
MAX_REPEAT = 1000  # %%nsys --repeat: captured runs of one cell

ProgressCallback = Callable[[Progress], None]
OutputCallback = Callable[[str], None]


DEFAULT_STATE_TIMEOUT_S = 300.0  # the same default as pickling --vars (deadline.PICKLE_S)


@dataclass(frozen=True)
class Rerun:
    """What a drill-down's re-run of an earlier cell adds to its request: the ``parent`` run it
    drills into, ``before`` (that cell's history id: a warm ncu worker replays what came before
    it), the child's ``run_dir`` and its first meta.json entries (``meta``), and ``script``: the
    parent's saved script, re-run cold when the cell is not this notebook's. A sweep's
    configuration sets ``run_dir`` and ``meta`` only (its folder inside the sweep's)."""

    parent: Any = None
    before: int | None = None
    run_dir: Path | None = None
    meta: dict[str, Any] | None = None
    script: Path | None = None


@dataclass(frozen=True)
class CellRequest:
    """One cell to profile. ``vars`` are sent explicitly (``--vars``); ``fresh`` runs it in a
    new process with only the setup cells (no warm worker); ``setup`` False skips the setup
    cells (``--no-setup``); ``env`` goes to the profiled process (a change of ``env`` or
    ``python`` needs a new worker); ``nproc`` > 1 runs it as that many ranks (fresh)."""

    cell: str
    name: str = "cell"
    warmup: int = 0
    vars: tuple[str, ...] = ()
    # %%nsys --repeat N: the cell runs N times in one capture (analysis/repeats.py)
    repeat: int = 1
    # --settle C: wait until every GPU is at or below C °C before the capture
    settle_c: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    python: str = sys.executable
    timeout: float | None = None
    setup: bool = True
    fresh: bool = False
    runs_root: Path | None = None
    cwd: str = field(default_factory=os.getcwd)
    nproc: int = 1  # > 1: torchrun runs the cell on this many ranks (always a fresh run)
    rank: int = 0  # ncu with nproc > 1: the one rank ncu profiles
    bind: Mapping[str, Any] = field(default_factory=dict)
    keep_state: bool = False
    # the same cell runs again at once in this worker (a sweep's next configuration): its
    # cached GPU blocks are released only once it sits idle, not as soon as this cell ends
    more_follow: bool = False

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError("nproc must be >= 1")
        if not 1 <= self.repeat <= MAX_REPEAT:
            raise ValueError(f"repeat must be in 1..{MAX_REPEAT}")
        if not 0 <= self.rank < self.nproc:
            raise ValueError(f"rank must be in 0..{self.nproc - 1}")


# a sweep's bounds (``%config NsightMagic.sweep_max_configs`` / ``sweep_max_values``)
DEFAULT_SWEEP_MAX_CONFIGS = 1000
DEFAULT_SWEEP_MAX_VALUES = 10_000


@dataclass(frozen=True)
class SweepLimits:
    """How large a sweep may be, checked before anything is built or run
    (``sweep.SweepSpec.check``): ``max_configs`` bounds the configurations (the product of the
    numbers of values: 10 variables of 10 values are 10**10), ``max_values`` the values given
    over all variables (what is parsed and kept)."""

    max_configs: int = DEFAULT_SWEEP_MAX_CONFIGS
    max_values: int = DEFAULT_SWEEP_MAX_VALUES


@dataclass
class RunCallbacks:
    """Where a run reports: a progress state, lines to show (the cell's own, blank ones left
    out, and ours), a cancel flag; and ``workers``: the session's live workers by pid ({pid:
    "the ncu worker (pid N)"}), so an out-of-memory message can name who held the memory (the
    manager sets it). ``text``, where given, gets the cell's own output instead of ``output``:
    as it was written, each line with its end (blank lines, ``print(x, end='')``, a bar redrawn
    by ``\r``), for a display that shows it as the plain notebook does; ``display`` its rich
    output."""

    progress: ProgressCallback | None = None
    output: OutputCallback | None = None
    text: OutputCallback | None = None
    stderr: OutputCallback | None = None  # what the cell wrote to sys.stderr, as written
    # a display of the cell's (``display(df)``: ``data``, ``metadata``, ``transient``,
    # ``update``, as ``script/display_frames.read_display`` reads it); without it, its text
    display: Callable[[dict[str, Any]], None] | None = None
    cancel: threading.Event | None = None
    workers: Callable[[], dict[int, str]] | None = None


@dataclass
class Notebook:
    """What the run may read from the notebook: its namespace (for shipping variables), the
    names IPython put there itself (never shipped) and the file names of its cells."""

    user_ns: Mapping[str, Any] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()
    auto_vars: bool = True
    auto_vars_max_bytes: int = 256 << 20
    # %config NsightMagic.state_timeout: describing the state for a worker, and the cell's
    # changes for the notebook, each at most this long (a slow __reduce__)
    state_timeout_s: float = DEFAULT_STATE_TIMEOUT_S
    # IPython's compiled cells: file name -> execution count (its compiler's map, live), so
    # functions and classes sent by value name their cell (state/setup_replay.CodeFiles)
    code_files: Mapping[str, int] = field(default_factory=dict)
