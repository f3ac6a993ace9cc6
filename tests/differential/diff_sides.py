"""One side of a differential case, run in its own process (forked by diff_zygote.py): a fresh
IPython ``InteractiveShell`` in the side's own folder runs the case's cells one by one and
dumps the canonical state (diff_canon.py) after each.

- ``plain``: the notebook without the extension. A ``%%nsys``/``%%ncu``/``%%nsight_setup``
  cell runs its body once (``--warmup N`` too); a ``--sweep`` cell, a drill-down step
  (``#!drill ...``) and the extension's line magics do nothing: they are re-runs whose effects
  the product must put back. A profiled cell that calls ``os._exit`` is the worker's crash:
  here it runs nothing and counts as ``WorkerDied``.
- ``profiled``: ``%load_ext nsight_magic`` with the profilers replaced by bare backends (the
  real worker, no profiler: tests/session_support.py), so real workers run the cells on the
  CPU. ``--host`` gets a worker of its own (its launch options differ) and ``%%ncu`` its own
  too, as with the real profilers. The magic returns its result as in a notebook editor
  (JupyterLab): shown, not the cell's ``Out``, so ``_`` is the notebook's own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diff_canon import (
    Describer,
    environ_changes,
    files_in,
    module_states,
    print_options,
    rng_states,
    user_names,
    where,
)

PROFILED_MAGICS = ("%%nsys", "%%ncu", "%%nsight_nsys", "%%nsight_ncu")
EXTENSION_LINES = ("%load_ext nsight_magic", "%nsight_session", "%config NsightMagic",
                   "%nsight_setup")  # fmt: skip
DRILL = "#!drill"
# the magics' progress line (``nsys: capturing``), shown while a cell runs: the product's UI
PROGRESS = re.compile(r"^(nsys|ncu): [a-z]")
NOTICE = "nsight_magic:"
PROGRESS_AFTER_OPEN_LINE = re.compile(
    r"^(?P<open>.+?)(?P<status>(nsys|ncu): (waiting|starting|running|capturing|exporting|loading"
    r"|done)\b.*\n?)$"
)
OUT_PROMPT = re.compile(r"Out\[\d+\]: ")  # at a line start, or after an open line
# the file a warning names for a line of the cell: IPython's per-cell file, the worker's
CELL_FILE = re.compile(r"^(<ipython-input-[^>]*>|\S*ipykernel_\d+/\d+\.py|<nsight_magic cell>)"
                       r"(?=:\d+: )", re.MULTILINE)  # fmt: skip
# an object's address in its repr (``<torch._C.Generator at 0x7f...>``): each process its own
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class Step:
    """What one cell of a case is, read from its text."""

    kind: str  # "plain" | "profiled" | "setup" | "sweep" | "drill"
    body: str  # what the plain side runs ("" for nothing)
    crash: bool = False


def classify(cell: str) -> Step:
    first, _, rest = cell.partition("\n")
    head = first.strip()
    if head.startswith(DRILL):
        return Step("drill", "")
    if head.startswith("%%nsight_setup"):
        return Step("setup", rest)
    if head.startswith(PROFILED_MAGICS):
        words = shlex.split(head)
        if "--sweep" in words:
            return Step("sweep", "")
        return Step("profiled", rest, crash="os._exit(" in rest)
    kept = [line for line in cell.splitlines() if not line.strip().startswith(EXTENSION_LINES)]
    return Step("plain", "\n".join(kept))


# --- the profiled side's bare backends --------------------------------------------------------
def install_bare_backends() -> None:
    """The magics, the drill-downs and the prewarm make bare backends instead of nsys/ncu."""
    from session_support import BareBackend, BareRun

    import nsight_magic.magic.magics as magics
    from nsight_magic.profilers.nsys import NsysOptions
    from nsight_magic.session.backends import NcuBackend, NsysBackend, options_meta
    from nsight_magic.session.manager import MANAGER
    from nsight_magic.session.runs import drill

    class BareResult(BareRun):
        live_bundle = None  # a result with a live view: the editor path shows it, returns None

        def _ipython_display_(self) -> None:
            return None  # a failed cell's partial run is shown as a view, not as text

    class BareProfiler(BareBackend):
        """A bare backend standing for ``real`` (NsysBackend / NcuBackend with the magic's
        options): the same launch key (which worker a cell gets), script arguments (``--nvtx``)
        and options in meta.json (what a drill-down reads of its parent)."""

        def __init__(self, real: Any) -> None:
            super().__init__(real.tool)
            self.real = real
            self.options = real.options
            self.gate = real.gate

        def script_args(self) -> dict[str, Any]:
            return dict(self.real.script_args())

        def options_meta(self) -> dict[str, Any]:
            return {**options_meta(self.options), "bare": True}

        def launch_key(self, request: Any) -> tuple[Any, ...]:
            return ("bare", *self.real.launch_key(request))

        def result(self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any,
                   drill_runner: Any) -> Any:  # fmt: skip
            return BareResult(report, run_dir, meta)

    def bare_nsys(options: Any = None) -> BareProfiler:
        return BareProfiler(NsysBackend(options))

    def bare_ncu(options: Any = None) -> BareProfiler:
        return BareProfiler(NcuBackend(options))

    magics.NsysBackend = bare_nsys  # type: ignore[assignment,misc]
    magics.NcuBackend = bare_ncu  # type: ignore[assignment,misc]
    drill.NcuBackend = bare_ncu  # type: ignore[assignment,misc]
    MANAGER.prewarm_backends = {"nsys": bare_nsys, "ncu": bare_ncu,
                                "host": lambda: bare_nsys(NsysOptions(host=True))}  # fmt: skip
    # a notebook editor's path: the result is shown (here: nowhere) and the magic returns None
    magics.in_kernel = lambda: True  # type: ignore[assignment]
    magics.static_later = lambda mode: True  # type: ignore[assignment]
    magics.show_live_first = lambda run: None  # type: ignore[assignment]


def drill_down(directive: str) -> None:
    """``#!drill kernel NAME`` / ``#!drill range DOMAIN:NAME`` / ``#!drill top N``: the
    picker's re-run of the last profiled cell under ncu, through the session's DrillRunner
    (what ``NsysRun.profile_kernel`` / ``profile_range`` / ``profile_top`` call; a bare run
    has no report for those methods to read kernel names from)."""
    from nsight_magic.analysis.range_spec import NvtxRange
    from nsight_magic.magic.magics import last_run
    from nsight_magic.profilers.drill_request import DrillRequest
    from nsight_magic.session.manager import MANAGER

    words = directive.split()
    what, arg = words[1], words[2] if len(words) > 2 else ""
    parent = last_run()
    if what == "kernel":
        MANAGER.drills.profile_kernel(parent, DrillRequest.create(arg or "kernel", set=None))
    elif what == "range":
        domain, _, name = arg.rpartition(":")
        MANAGER.drills.profile_range(
            parent, NvtxRange(domain, name, "PushPop"), DrillRequest.create(set=None)
        )
    elif what == "top":
        names = [f"kernel_{i}" for i in range(int(arg or 2))]
        MANAGER.drills.profile_top(parent, names, DrillRequest.create(set=None))
    else:
        raise ValueError(f"unknown drill-down {directive!r}")


# --- running one side -------------------------------------------------------------------------
def error_name(exc: BaseException | None, crash: bool = False) -> str | None:
    """The exception a cell ended with, as the user would name it: a profiled cell's own
    exception for the product's CellFailedError, ``WorkerDied`` for a crash (in a crash cell,
    whatever the product raised after it: ncu's fresh re-run crashes too and says so)."""
    if exc is None:
        return None
    from_product = type(exc).__module__.startswith("nsight_magic")
    if not from_product:
        return type(exc).__name__
    kind = type(exc).__name__
    if crash:
        return "WorkerDied"
    if kind == "CellFailedError" and getattr(exc, "exc_type", ""):
        return str(exc.exc_type).rsplit(".", 1)[-1]  # type: ignore[attr-defined]
    if kind == "WorkerDiedError":
        return "WorkerDied"
    if kind == "ProfileInterrupted":
        return "KeyboardInterrupt"
    return f"nsight_magic.{kind}"


def make_shell(side: str, runs_dir: Path) -> Any:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell._showtraceback = lambda etype, evalue, stb: None  # the error is recorded, not printed
    if side == "profiled":
        install_bare_backends()
        shell.run_line_magic("load_ext", "nsight_magic")
        shell.run_line_magic("config", "NsightMagic.prewarm = False")
        shell.run_line_magic("config", f"NsightMagic.runs_dir = {str(runs_dir)!r}")
    return shell


def split_output(text: str, side: str) -> tuple[str, list[str]]:
    """(the cell's stdout, the product's own lines): progress lines and ``nsight_magic:``
    notices are the product's, on the profiled side."""
    text = ADDRESS.sub(" at 0x…", OUT_PROMPT.sub("Out: ", text))
    if side != "profiled":
        return text, []
    kept, notices = [], []
    for line in text.splitlines(keepends=True):
        if PROGRESS.match(line) or line.startswith(NOTICE):
            notices.append(line.rstrip("\n"))
        elif glued := PROGRESS_AFTER_OPEN_LINE.match(line):
            # a cell that left its last line open ('e', no end): the terminal shell prints the
            # status line right after it (in Jupyter a display of its own)
            kept.append(glued["open"])
            notices.append(glued["status"].rstrip("\n"))
        else:
            kept.append(line)
    return "".join(kept), notices


def run_cell(shell: Any, side: str, cell: str) -> tuple[BaseException | None, bool]:
    """Run one cell on this side: (the exception it ended with, whether it ran at all)."""
    step = classify(cell)
    if side == "plain":
        if step.crash:
            return RuntimeError("WorkerDied"), True
        if not step.body.strip():
            return None, False
        result = shell.run_cell(step.body, store_history=True)
        return result.error_before_exec or result.error_in_exec, True
    if step.kind == "drill":
        try:
            drill_down(cell.partition("\n")[0].strip())
        except Exception as exc:
            return exc, True
        return None, True
    result = shell.run_cell(cell, store_history=True)
    return result.error_before_exec or result.error_in_exec, True


def seed_like_a_new_notebook() -> None:
    """The global RNGs of both sides start equal: a fork reseeds ``random`` from the OS in
    each child (``os.register_at_fork``), so both get one fixed seed instead."""
    import random

    import numpy as np

    random.seed(SEED)
    np.random.seed(SEED)
    sys.meta_path.insert(0, SeedTorchOnImport())


SEED = 20261206


class SeedTorchOnImport:
    """torch seeds its default generator from the OS at import: this finder seeds it with
    ``SEED`` right after ``import torch`` runs, on both sides alike (before any cell draws)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            module.manual_seed(SEED)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def run_side(side: str, cells: list[str], base: str, runs_dir: str, out: str) -> None:
    base_path, runs_path = Path(base), Path(runs_dir)
    os.chdir(base_path)
    os.environ["IPYTHONDIR"] = str(runs_path.parent / "ipython")  # not the user's profile
    seed_like_a_new_notebook()
    sys.path.insert(0, "")  # as IPython's own start does: a module in the folder imports
    shell = make_shell(side, runs_path)
    describer = Describer(shell.user_ns, base_path)
    start_env = dict(os.environ)
    dumps: list[dict[str, Any]] = []
    try:
        for number, cell in enumerate(cells, 1):
            captured, to_stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(to_stderr):
                exc, _ = run_cell(shell, side, cell)
            stdout, notices = split_output(captured.getvalue(), side)
            stderr = CELL_FILE.sub("<cell>", ADDRESS.sub(" at 0x…", to_stderr.getvalue()))
            if exc is not None and side == "profiled":
                notices.append(f"{type(exc).__name__}: {exc}")
            crash = classify(cell).crash
            error = "WorkerDied" if side == "plain" and crash else error_name(exc, crash)
            names = user_names(shell.user_ns, shell.user_ns_hidden)
            dumps.append({
                "names": describer.dump_names(number, names),
                "modules": module_states(describer),
                "rng": rng_states(),
                "files": files_in(base_path),
                "cwd": where(base_path),
                "environ": environ_changes(start_env),
                "print_options": print_options(),
                "stdout": stdout,
                "stderr": stderr,
                "error": error,
                "notices": notices,
            })  # fmt: skip
    except BaseException:
        dumps.append({"harness_error": traceback.format_exc()})
        raise
    finally:
        Path(out).write_text(json.dumps(dumps))
        if side == "profiled":
            from nsight_magic.session.manager import MANAGER

            with contextlib.suppress(Exception):
                MANAGER.stop()
