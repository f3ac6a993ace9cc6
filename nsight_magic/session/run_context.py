"""What one run knows, from the request to the run folder (``RunContext``), where its lines go
(``Lines``), and the record it starts with (``base_meta``): shared by the pipeline, the
executors, the worker pool (a worker starts for a run) and the prewarm (a run of its own)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..processes import deadline
from ..processes import locate as tools
from ..processes.progress import ProgressParser, is_profiler_line
from ..run_folders import runs
from ..run_folders.run_dir import RunDir
from ..run_folders.run_meta import RunMeta
from ..script import PreparedCell
from ..script.display_frames import read_display, read_stderr
from .backends import Backend
from .spec import CellRequest, Notebook, RunCallbacks


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat()


class Lines:
    """Where the run's output goes: progress state, the cell's own lines to the user, and
    (``log``, when set: a warm worker's output) every line to the run's profiler.log. A line
    comes with its end (``runner.output_lines``)."""

    def __init__(self, tool: tools.ToolName, callbacks: RunCallbacks, log: RunDir | None) -> None:
        self.parser = ProgressParser(tool)
        self.callbacks = callbacks
        self.log = log
        # nsys follows some of its own lines with a blank one ("Generating ...", its bars):
        # a blank line after those is nsys's, not the cell's
        self._after_profiler = False

    def phase(self, phase: str, detail: str = "") -> None:
        self.parser.set_phase(phase, detail)
        if self.callbacks.progress:
            self.callbacks.progress(self.parser.state)

    def note(self, text: str) -> None:
        """A line of ours the user should see (e.g. a replayed cell that raised)."""
        if self.callbacks.output:
            self.callbacks.output(f"nsight_magic: {text}")

    def __call__(self, line: str) -> None:
        text, shown = read_display(line)
        if shown is not None:
            if text and not RANK_PREFIX.match(text):  # what the cell left open before it
                self(text)
            self._display(shown)
            return
        text, written = read_stderr(line)
        if written is not None:
            if RANK_PREFIX.match(text):  # the rank's line, as torchrun shows it
                written, text = text + written, ""
            if text:
                self(text)
            self._stderr(written)
            return
        if self.log is not None:  # a fresh run's runner writes the log itself
            self.log.append_log(line)
        if self.parser.feed(line) and self.callbacks.progress:
            self.callbacks.progress(self.parser.state)
        if is_profiler_line(line):
            self._after_profiler = not line.lstrip().startswith(CELL_OUTPUT_FOLLOWS)
            return
        blank = not line.strip()
        if blank and self._after_profiler:
            return
        self._after_profiler = False
        if self.callbacks.text:
            self.callbacks.text(line)
        elif self.callbacks.output and not blank:
            self.callbacks.output(line.rstrip("\r\n"))

    def _stderr(self, written: str) -> None:
        """What the cell wrote to ``sys.stderr``: to the notebook's stderr where the display
        takes it, else as the cell's lines."""
        if self.log is not None:
            self.log.append_log(written)
        self._after_profiler = False
        if self.callbacks.stderr:
            self.callbacks.stderr(written)
        elif self.callbacks.text:
            self.callbacks.text(written)
        elif self.callbacks.output:
            for line in written.splitlines():
                if line.strip():
                    self.callbacks.output(line)

    def _display(self, shown: dict[str, Any]) -> None:
        """A display of the cell's (``display(df)``): every format, where the display takes
        them; else its text as a line."""
        if self.log is not None:  # the formats (an image's base64) stay out of the log
            self.log.append_log(f"[a display: {', '.join(shown['data'])}]")
        self._after_profiler = False
        if self.callbacks.display:
            self.callbacks.display(shown)
        elif "clear" in shown:  # clear_output(): no display to clear
            return
        elif self.callbacks.output and str(shown["data"].get("text/plain", "")).strip():
            self.callbacks.output(str(shown["data"]["text/plain"]))


# what torchrun puts before each line of a rank (``--tee``): before a frame, the frame's own
RANK_PREFIX = re.compile(r"\[(default|rank)\d+\]:$")

# profiler lines the cell's own output may follow at once (a first line of it blank included)
CELL_OUTPUT_FOLLOWS = ("Capture range started", "==PROF==")


@dataclass
class RunContext:
    """Everything one run knows; executors fill ``meta`` and the records (through
    ``folder``, the run folder's one writer)."""

    request: CellRequest
    backend: Backend
    tool: tools.Tool
    cell: PreparedCell
    run_dir: Path
    notebook: Notebook
    callbacks: RunCallbacks
    lines: Lines
    meta: RunMeta
    t0: float = field(default_factory=time.perf_counter)
    # ``--vars``, serialized before the run folder existed
    explicit_vars: dict[str, tuple[str, bytes]] = field(default_factory=dict)

    def remaining(self) -> float | None:
        if self.request.timeout is None:
            return None
        return max(0.0, self.request.timeout - (time.perf_counter() - self.t0))

    @property
    def folder(self) -> RunDir:
        return RunDir(self.run_dir)


def base_meta(request: CellRequest, tool: tools.Tool, mode: str) -> RunMeta:
    return RunMeta(
        name=request.name,
        tool=tool.name,
        mode=mode,
        status="running",
        started_utc=now_utc(),
        cwd=request.cwd,
        python=request.python,
        warmup=request.warmup,
        repeat=request.repeat,
        nproc=request.nproc,
        vars=list(request.vars),
        versions=runs.versions({tool.name: tool.version_text, f"{tool.name}_path": tool.path}),
        gpus=tools.gpu_info(deadline.bound(tools.GPU_INFO_S).seconds),
    )
