"""The Nsight GUIs: which file of a run they open, the command that opens it, and starting the
local one (``run.open_in_gui()``).

nsys-ui opens a ``.nsys-rep`` (not its SQLite or parquet export), ncu-ui a ``.ncu-rep``. The
GUI is the user's own application: it starts detached (a new session, no pipes), so it neither
dies with a Ctrl-C in the notebook nor holds the kernel, and it stays open after the kernel
ends, as it would when started from a shell; it is not a profiler process, so the rule that no
process outlives its cell does not apply to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import ToolNotFoundError
from .locate import candidates, configured_path

# tool -> (GUI executable, report suffix it opens, product name)
GUIS = {
    "nsys": ("nsys-ui", ".nsys-rep", "Nsight Systems"),
    "ncu": ("ncu-ui", ".ncu-rep", "Nsight Compute"),
}
# where the installers put the GUI (the CLI's own folder is searched first)
_GUI_GLOBS = {
    "nsys": (
        "/opt/nvidia/nsight-systems/*/bin/nsys-ui",
        "/opt/nvidia/nsight-systems/*/host-linux-x64/nsys-ui",
        "/usr/local/cuda*/bin/nsys-ui",
    ),
    "ncu": ("/opt/nvidia/nsight-compute/*/ncu-ui", "/usr/local/cuda*/bin/ncu-ui"),
}
INSTALL_HINTS = {
    "nsys": "Install Nsight Systems with its GUI (https://developer.nvidia.com/nsight-systems; "
    "the `nsight-systems` apt package, not only `nsight-systems-cli`)",
    "ncu": "Install Nsight Compute with its GUI (https://developer.nvidia.com/nsight-compute; "
    "the CUDA toolkit's `cuda-nsight-compute` package)",
}


def gui_report(tool: str, run_dir: Path | None, report_path: Any = None) -> Path | None:
    """The file the tool's GUI opens for this run: ``report.nsys-rep`` / ``report.ncu-rep`` in
    the run folder, else the report that was opened (or the ``.nsys-rep`` beside its export);
    None when there is none (an export alone, a shared copy without its ``.nsys-rep``)."""
    suffix = GUIS[tool][1]
    candidates = []
    if run_dir is not None:
        candidates.append(Path(run_dir) / f"report{suffix}")
    if report_path:
        path = Path(report_path)
        candidates += [path, path.with_suffix(suffix), path.parent / (path.name[:-3] + suffix)]
    for path in candidates:
        if path.suffix == suffix and path.is_file():
            return path
    return None


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (what a relative link
    in the notebook's output resolves against: the kernel's cwd is the notebook's folder),
    else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(absolute)


def gui_command(tool: str, path: Path) -> list[str]:
    """The argv that opens ``path`` in the tool's GUI, as a user would type it."""
    return [GUIS[tool][0], shown_path(path)]


def find_gui(tool: str) -> str | None:
    """The GUI's executable: beside the configured or found CLI, on PATH, or in the usual
    install folders (newest first)."""
    exe = GUIS[tool][0]
    cli = configured_path(tool) or shutil.which(tool)
    beside = [Path(cli).resolve().parent / exe] if cli else []
    if cli:  # nsys: <install>/target-linux-x64/nsys next to <install>/host-linux-x64/nsys-ui
        beside.append(Path(cli).resolve().parent.parent / "host-linux-x64" / exe)
    for candidate in beside:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which(exe)
    if on_path:
        return on_path
    # the GUI's own install folders, newest version first (the name picks no globs here)
    installed = candidates(tool, _GUI_GLOBS[tool])  # type: ignore[arg-type]
    return installed[0] if installed else None


def open_in_gui(tool: str, path: Path | None) -> subprocess.Popen[bytes]:
    """Start the tool's GUI on ``path``, detached (module docstring); returns its process.
    Raises ToolNotFoundError (with the install hint and the command to use elsewhere) when
    there is no report for it, no GUI here, or no display to show it on."""
    exe, suffix, product = GUIS[tool]
    if path is None:
        raise ToolNotFoundError(
            f"This run has no {suffix} for {exe} to open (only its export, or a shared copy "
            f"without it); {exe} cannot open .sqlite or parquet exports."
        )
    elsewhere = f"or copy {path.name} to a machine that has it and run `{exe} {path.name}`"
    found = find_gui(tool)
    if found is None:
        raise ToolNotFoundError(f"{exe} (the {product} GUI) is not installed here. "
                                f"{INSTALL_HINTS[tool]}, {elsewhere}.")  # fmt: skip
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        raise ToolNotFoundError(
            f"{exe} is installed ({found}) but this kernel has no display to show it on "
            f"(no DISPLAY or WAYLAND_DISPLAY: a remote or headless machine); download the "
            f"report from the view's link {elsewhere}."
        )
    return subprocess.Popen(
        [found, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own session: a notebook interrupt does not reach it
        close_fds=True,
    )


__all__ = ["GUIS", "find_gui", "gui_command", "gui_report", "open_in_gui", "shown_path"]
