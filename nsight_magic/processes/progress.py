"""Turn the profilers' console lines into a progress state (phase, kernels profiled, passes).

Line shapes seen from Nsight 2025.3.1 (nsys writes its bars with ``\\r``; the runner splits on
both ``\\r`` and ``\\n``)::

    Capture range started in the application.
    Generating '/tmp/nsys-report-a33c.qdstrm'
    [1/2] [=====50%     ] x.nsys-rep
    Generated:
    ==PROF== Connected to process 1091 (/usr/bin/python3.12)
    ==PROF== Profiling "nvjet_sm90_tst_128x128_64x6_2..." - 0: 0%....50%....100% - 17 passes
    ==PROF== Disconnected from process 1091
    ==PROF== Report: /tmp/x.ncu-rep
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

Tool = Literal["nsys", "ncu"]
PHASES = ("starting", "running", "capturing", "exporting", "loading", "done")

_NCU_PROFILING = re.compile(
    r'^==PROF== Profiling "(?P<name>.*)" - (?P<idx>\d+):.*?(?:- (?P<passes>\d+) pass(?:es)?)?$'
)
_NSYS_BAR = re.compile(
    r"^\[(?P<step>\d+)/(?P<steps>\d+)\] \[[= ]*(?P<pct>\d+)%[= ]*\] (?P<file>\S+)"
)


@dataclass
class Progress:
    """What the profiler is doing now. ``kernels_profiled`` counts ncu's profiled launches."""

    tool: Tool
    phase: str = "starting"
    kernels_profiled: int = 0
    current_kernel: str | None = None
    passes: int | None = None
    percent: float | None = None
    detail: str = ""
    errors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for a status label."""
        text = f"{self.tool}: {self.phase}"
        if self.tool == "ncu" and self.kernels_profiled:
            text += f", {self.kernels_profiled} kernel(s) profiled"
            if self.current_kernel:
                text += f" (last: {self.current_kernel}"
                text += f", {self.passes} passes)" if self.passes else ")"
        if self.percent is not None and self.phase == "exporting":
            text += f" {self.percent:.0f}%"
        if self.detail:
            text += f" - {self.detail}"
        return text


def is_profiler_line(line: str) -> bool:
    """True for the profiler's own chatter, False for what the profiled cell printed."""
    s = line.strip()
    return (
        s.startswith(("==PROF==", "==WARNING==", "==ERROR==", "==INFO=="))
        or s.startswith(("Capture range ", "Generating '", "Generated:", "Collecting data"))
        or bool(_NSYS_BAR.match(s))
        or (s.startswith("/") and s.endswith((".nsys-rep", ".sqlite", ".ncu-rep", ".qdstrm")))
        or s.startswith(("Processing events", "Processing ["))
    )


class ProgressParser:
    """Feed it lines; ``feed`` returns True when the state changed (worth redrawing)."""

    def __init__(self, tool: Tool) -> None:
        self.state = Progress(tool=tool)

    def set_phase(self, phase: str, detail: str = "") -> None:
        self.state.phase, self.state.detail = phase, detail
        self.state.percent = None

    def feed(self, line: str) -> bool:
        s = line.strip()
        if not s:
            return False
        st = self.state
        before = (st.phase, st.kernels_profiled, st.percent, st.passes)
        if "==ERROR==" in s or s.startswith(("ERROR", "Error:")):
            st.errors.append(s)
        if st.tool == "ncu":
            self._feed_ncu(s)
        else:
            self._feed_nsys(s)
        if st.phase == "starting" and not is_profiler_line(s):
            st.phase = "running"  # the cell's own output: the app is up
        return before != (st.phase, st.kernels_profiled, st.percent, st.passes)

    def _feed_ncu(self, s: str) -> None:
        st = self.state
        m = _NCU_PROFILING.match(s)
        if m:
            st.phase = "capturing"
            st.kernels_profiled = int(m["idx"]) + 1
            st.current_kernel = m["name"]
            st.passes = int(m["passes"]) if m["passes"] else None
        elif s.startswith("==PROF== Connected"):
            st.phase = "running"
        elif s.startswith(("==PROF== Disconnected", "==PROF== Report:")):
            st.phase = "exporting"

    def _feed_nsys(self, s: str) -> None:
        st = self.state
        m = _NSYS_BAR.match(s)
        if s.startswith("Capture range started"):
            st.phase = "capturing"
        elif s.startswith(("Capture range ended", "Collecting data", "Generating '")):
            st.phase = "exporting"
        elif m:
            st.phase = "exporting"
            st.percent = float(m["pct"])
            st.detail = f"[{m['step']}/{m['steps']}] {m['file']}"
        elif s.startswith("Generated:"):
            st.phase, st.percent, st.detail = "loading", None, ""


class ProgressLine:
    """A magic's progress: one status line, redrawn in place (a display handle in Jupyter,
    printed lines in a terminal), plus the cell's own output printed as it arrives."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.last = ""
        # the cell's output left a line open (``print(x, end='')``): a line of ours starts a new one
        self.open_line = False

    def progress(self, state: Progress) -> None:
        text = state.describe()
        if text == self.last:
            return
        self.last = text
        from IPython.display import display, update_display

        bundle = {"text/plain": text}
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            update_display(bundle, raw=True, display_id=self.handle.display_id)

    def output(self, line: str) -> None:
        """A line of ours (or of the cell, where there is no ``text``)."""
        print("\n" if self.open_line else "", line, sep="", flush=True)
        self.open_line = False

    def display(self, shown: dict[str, Any]) -> None:
        """A display of the cell's, every format it has (the frontend picks, as for the plain
        notebook's ``display``); ``transient`` and ``update`` keep a ``display_id`` redrawn."""
        from IPython.display import clear_output, publish_display_data

        if "clear" in shown:  # the cell's clear_output(wait=...)
            clear_output(wait=bool(shown["clear"]))
            self.handle, self.last, self.open_line = None, "", False  # its status line went too
            return
        publish_display_data(shown["data"], shown.get("metadata") or None,
                             transient=shown.get("transient") or None,
                             update=bool(shown.get("update")))  # fmt: skip
        self.open_line = False

    @staticmethod
    def stderr(text: str) -> None:
        """What the cell wrote to its stderr (a warning, a bar), to the notebook's."""
        import sys

        sys.stderr.write(text)
        sys.stderr.flush()

    def text(self, text: str) -> None:
        """The cell's own output, as it was written (its line ends with it)."""
        print(text, end="", flush=True)
        self.open_line = not text.endswith("\n")
