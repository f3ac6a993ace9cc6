"""Every default bound a profiled cell waits under, in one table (``BOUNDS``): each step's
words, its constant where the step lives, and what happens past it when that is not an error.
docs/troubleshooting.md's table is generated from it (``magic/option_docs``), so the page and
the code cannot give two numbers for one wait."""

from __future__ import annotations

from dataclasses import dataclass

from ..processes import deadline, gpu_state, locate
from ..profilers import commands
from ..reports.ncu import child as ncu_child
from ..worker.conversation import BOUNDS as TALK
from . import spec


@dataclass(frozen=True)
class Bound:
    """One wait: ``step`` as a user reads it, ``seconds`` its default bound, ``past`` what
    happens when it runs out where that is not the step's ``ProfilerError`` ("then left
    out"), ``more`` what is added to the seconds (a report's size)."""

    step: str
    seconds: float
    past: str = ""
    more: str = ""

    def text(self) -> str:
        bound = f"{self.seconds:g} s" + (f", plus {self.more}" if self.more else "")
        return bound + (f" ({self.past})" if self.past else "")


BOUNDS = (
    Bound("`nsys --version` / `ncu --version` (once per path)", locate.VERSION_TIMEOUT_S),
    Bound("`ncu --list-sets` and `--list-sections` together; `nsys profile --help` (for "
          "`--host`)", deadline.CATALOG_S, "then nothing is refused"),
    Bound("pickling each notebook variable the cell needs (a slow `__reduce__`)",
          deadline.PICKLE_S),
    Bound("describing the notebook's state for a worker, and a cell's changes for the notebook",
          spec.DEFAULT_STATE_TIMEOUT_S, "`%config NsightMagic.state_timeout`"),
    Bound("a worker importing ahead what the notebook's cells import (torch, transformers)",
          TALK.imports_s, "then the cell that needs the worker says what it waits for"),
    Bound("`%nsight_session status` asking an idle worker what it holds", TALK.status_s,
          "then that worker's memory is left out"),
    Bound("bringing back what a stopped cell changed (Ctrl-C, `--timeout`)",
          TALK.after_stop_margin_s, more="`state_timeout`"),
    Bound("`nvidia-smi` (the GPUs in meta.json, the room check)", locate.GPU_INFO_S,
          "then left out"),
    Bound("a warm worker's start (under `nsys launch` / `ncu --mode launch`)",
          deadline.WORKER_START_S),
    Bound("`--settle`: the GPUs cooling to the temperature asked", gpu_state.SETTLE_S,
          "then the capture begins, said in one line"),
    Bound("`nsys start` / `stop` / `cancel`", deadline.CLI_S),
    Bound("the ncu attach connecting to the worker", deadline.ATTACH_S),
    Bound("the ncu worker's release (its first CUDA call under `ncu --mode launch`)",
          commands.RELEASE_S),
    Bound("a fresh run: the profiler starting the cell's script", deadline.PROFILER_START_S),
    Bound("a fresh run: the profiler ending after the script did (writing its report)",
          deadline.PROFILER_END_S),
    Bound("`nsys export` of one report", deadline.EXPORT_S),
    Bound("reading a `.ncu-rep` (in a child process)", ncu_child.EXTRACT_TIMEOUT_S,
          more="1 s per 50 MB"),
    Bound("`nsys shutdown` when a session stops (`%nsight_session stop`, kernel shutdown)",
          deadline.SHUTDOWN_S, "then let go"),
)  # fmt: skip
