"""The runtime of the generated script: what runs in the profiled process around one cell.

``build_script`` writes the script as a header assigning this cell's constants, then the source
of ``template.SCRIPT_MODULES``, this one last, each without its block marked "module only" (here:
the placeholders and the imports of what is pasted above). So this is real, tested code, and
the script runs where nsight_magic cannot be imported (any ``--python``, a torchrun rank).

One script serves both ways of running a cell. Fresh (``%%nsys --fresh``, the cold picker):
``python script.py [status.json]`` replays ``HISTORY`` (setup cells; warm: also the cells the
worker ran), loads the shipped variables, warms up, runs the cell once more gated, writes a status
file (``main``). Warm: the worker imports it and calls ``run_history``, ``prepare``, ``warmup``,
``capture`` (``user_traceback`` for an error).

The captured run is wrapped in ``nvtx.annotate(CELL_RANGE, domain=DOMAIN)`` with one range per
top-level statement; for nsys it is gated with cudaProfilerStart/Stop (around the cell, or with
``NVTX_CAPTURE`` around one opening of the user's range: ``RangeWindow``). Under ncu the user's
innermost open range is mirrored as a process-wide phase range (``RangeRecorder``). Standard
library only at import time (``nvtx``, ``torch``, ``IPython`` when first needed).
"""

import __future__

import ast
import builtins
import contextlib
import ctypes
import functools
import json
import linecache
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from inspect import CO_COROUTINE
from types import CodeType, ModuleType
from typing import Any

# --- module only: build_script writes these in the script's header, with the cell's values ---
from ..run_folders.run_dir import RunDir
from .cuda_gate import Gate, RangeWindow
from .cuda_save import KEPT
from .display_frames import DISPLAYS, forward_displays, frame_stderr, provide_display
from .gpu_readings import gpu_reading
from .range_recorder import RangeRecorder
from .shared_objects import mapped_segments, names_kept, preserved
from .status_file import StatusFile, status_path
from .torch_memory import TorchMemory

CELL = ""  # the cell's source, as the user wrote it (tracebacks show its lines)
CODE = ""  # the cell as Python (IPython syntax transformed)
CELL_FILE = "<nsight_magic cell>"  # the cell's filename in tracebacks
LABELS: list[str] = []  # one NVTX range name per top-level statement
NEEDS_IPYTHON = False  # magics or ! commands: the cell runs with an IPython shell
HISTORY: list[dict[str, Any]] = []  # template.history_entry dicts, replayed first by main()
WARMUP = 0  # ungated runs of the cell before the captured one
REPEAT = 1  # captured runs of the cell (%%nsys --repeat N), each its own CELL_RANGE opening
GATE = "cudaProfilerApi"  # "cudaProfilerApi" (nsys) or "nvtx" (ncu: the cell's range gates)
DOMAIN = "nsight_magic"  # the NVTX names: vocabulary/nvtx_names.py
CELL_RANGE = "cell"
CAPTURE_RANGE = "capture"  # under ncu: a start/end range around the cell (any thread's kernels)
WARMUP_RANGE = "warmup"
TARGET_RANGE = "nvtx-target"
PHASE_DOMAIN = "nsight_magic.phase"  # RangeRecorder mirrors the user's innermost range here
NVTX_TARGET: str | None = None  # %%ncu --nvtx: the range spec RangeRecorder marks
# %%nsys --nvtx SPEC#K: only the K-th opening of the range SPEC names is captured (RangeWindow)
NVTX_CAPTURE: str | None = None
NVTX_INSTANCE: int | None = None  # the opening --nvtx takes (1 = the first); None: every one
RANK_FORMAT = "rank {}"  # nvtx_names.rank_label
TORCH_NVTX = ""  # "ops" / "shapes": PyTorch's emit_nvtx around the captured cell
# the names whose shared GPU memory the cell may change (session/state/repeat_changes.py): what
# its text changes and what a call of the notebook's own code reaches (``loss = train_step()``),
# ["*"] when that cannot be read, None when it only reads; warm-ups and re-runs keep that
# memory, and always the received objects' Python-side state, CPU tensors and buffers
# (shared_objects.preserved); a profiled cell in a script's history (a saved folder's, from
# before profiled cells stopped being replayed) keeps everything (EVERYTHING)
CHANGES: list[str] | None = None
RERUN = False  # the captured run repeats one the notebook already has (a drill-down)
# set per request by the worker (``prepare``, ``capture``): the notebook copied the memory this
# worker maps aside before the re-run and its warm-up and puts it back after each
# (session/state/notebook_snapshot.py), so they keep only the worker's own; a saved script run on
# its own maps nothing
NOTEBOOK_KEEPS = False
# set by a warm worker: what puts its namespace, the objects it reaches, the random streams and
# the files written back after a repeat (shared_state/worker_side.WorkerState.kept); a script
# run on its own keeps its plain values (shared_objects.names_kept)
KEEP_STATE: Any = None
RERUN_SHOWN = False  # set by a warm worker: a sweep's configuration, whose output is shown
VARS_NAME = RunDir.VARS  # the run folder's file names, beside the script
STATUS_NAME = RunDir.STATUS
SHARED_NAME = RunDir.SHARED
MEMORY_HISTORY = False  # %%nsys --memory: torch's allocator history of the cell (torch_memory)
SNAPSHOT_NAME = RunDir.TORCH_MEMORY
# --- end module only ---

EVERYTHING = ["*"]  # shared_objects.preserved: all the worker received, bytes and state
# the value of the cell's trailing expression, for the notebook to show (``Out[n]``, ``_``):
# a name the worker's state sends back like any other, and the notebook takes out of its
# namespace (vocabulary/reserved_names.SHOWN)
SHOWN = "_nsight_magic_shown"

# A saved script re-run in a new process under another profiler than the one it was written
# for (a drill-down's ncu on a cell nsys ran: one rank of several, a loaded folder, fresh=True):
# the session names that profiler's constants here (JSON: session/runs/fresh.py); they replace the
# header's (the nsys gate opened no ``capture`` range, ncu's filter, so nothing was captured)
PROFILER_ENV = "NSIGHT_MAGIC_PROFILER"
PROFILER_CONSTANTS = ("GATE", "NVTX_TARGET", "NVTX_CAPTURE", "NVTX_INSTANCE", "MEMORY_HISTORY")

HERE = os.path.dirname(os.path.abspath(__file__))
VARS_FILE = os.path.join(HERE, VARS_NAME)  # the notebook variables the cell reads, when sent
# set by torchrun when the cell runs as several ranks (%%nsys --nproc N)
RANK = int(os.environ.get("RANK", "0"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))


@functools.cache
def nvtx_module() -> ModuleType | None:
    """The ``nvtx`` package, or None (no ranges: the parent warns, ncu gates on them)."""
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


def annotate(message: str, domain: str) -> contextlib.AbstractContextManager[Any]:
    """An NVTX push/pop range around a block, or nothing without ``nvtx``."""
    nvtx = nvtx_module()
    if nvtx is None:
        return contextlib.nullcontext()
    return nvtx.annotate(message, domain=domain)


@contextlib.contextmanager
def process_range(message: str, domain: str, on: bool = True) -> Any:
    """An NVTX start/end range around a block (it holds every thread's launches), or nothing
    without ``nvtx`` or when not ``on``."""
    nvtx = nvtx_module() if on else None
    if nvtx is None:
        yield
        return
    handle = nvtx.start_range(message=message, domain=domain)
    try:
        yield
    finally:
        nvtx.end_range(handle)


def register(filename: str, text: str) -> None:
    """Puts ``text`` in linecache under ``filename``: tracebacks show cell lines."""
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)


def compile_statements(code: str, filename: str, source: str) -> list[CodeType]:
    """One code object per top-level statement, keeping cell line numbers and the cell's own
    ``from __future__`` imports (for all its statements, as in the notebook); a top-level
    ``await`` compiles, as IPython allows it (``run_code`` runs it)."""
    register(filename, source)
    tree = ast.parse(code, filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    codes = []
    shown = not ends_quiet(code)
    for i, node in enumerate(tree.body):
        # the last statement, an expression, is shown as the notebook shows it (``single``
        # mode: Python hands its value to sys.displayhook, as IPython's own last_expr does)
        if shown and i == len(tree.body) - 1 and isinstance(node, ast.Expr):
            one = ast.Interactive(body=[node])
            codes.append(compile(one, filename, "single", flags=flags, dont_inherit=True))
        else:
            alone = ast.Module(body=[node], type_ignores=[])
            codes.append(compile(alone, filename, "exec", flags=flags, dont_inherit=True))
    return codes


def ends_quiet(code: str) -> bool:
    """Whether the cell ends with ``;``: IPython then shows no value (its DisplayHook.quiet,
    which reads the last token the same way)."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = {tokenize.ENDMARKER, tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT,
            tokenize.DEDENT, tokenize.INDENT}  # fmt: skip
    last = [t for t in tokens if t.type not in skip]
    return bool(last) and last[-1].string == ";"


def keep_shown(ns: dict[str, Any]) -> Callable[[object], None]:
    """The displayhook of the cell's last expression: its value (None is not shown) goes to
    the notebook as ``SHOWN``, which shows it there (``Out[n]``, ``_``)."""

    def hook(value: object) -> None:
        if value is not None:
            ns[SHOWN] = value

    return hook


def run_code(code: CodeType, ns: dict[str, Any]) -> None:
    """One statement; one with a top-level ``await`` runs to its end on an event loop kept in
    ``ns`` for every cell (the kernel keeps its own: what a cell binds to it works later)."""
    result = eval(code, ns)  # a coroutine when the statement awaits at the top level
    if code.co_flags & CO_COROUTINE:
        if "__event_loop__" not in ns:  # asyncio imported only for a cell that awaits
            ns["__event_loop__"] = __import__("asyncio").new_event_loop()
        task = ns["__event_loop__"].create_task(result)
        try:
            ns["__event_loop__"].run_until_complete(task)
        finally:  # interrupted, it would resume in the next cell that awaits
            task.cancel()


def use_ipython(ns: dict[str, Any]) -> None:
    """Magics and ! commands run through an IPython shell whose namespace is ``ns``."""
    if callable(ns.get("get_ipython")):
        return
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(user_ns=ns)
    forward_displays(shell)  # display(df) shown in the notebook, as a frontend would
    # ``!cmd`` and ``x = !cmd`` through plain subprocesses, as ``system_raw`` does: IPython's
    # default runs them on a pseudo-terminal (pexpect, forkpty), and a process run that way
    # under ncu's injection (``--target-processes all``) took the profiled process down with
    # SIGSEGV right after the command's output (issue 41: ``!nvidia-smi -L`` under ncu)
    shell.system = shell.system_raw  # type: ignore[method-assign]
    shell.getoutput = (  # type: ignore[method-assign]
        lambda cmd, split=True, depth=0: command_output(shell, cmd, split, depth)
    )
    ns["get_ipython"] = lambda: shell


def command_output(shell: Any, cmd: str, split: bool = True, depth: int = 0) -> Any:
    """``x = !cmd``: the command's output (stdout, then stderr, as IPython gives it) as an
    ``SList`` (a string with ``split=False``), from a plain subprocess."""
    import subprocess

    from IPython.utils.text import LSString, SList

    done = subprocess.run(shell.var_expand(cmd, depth=depth + 2), shell=True,
                          capture_output=True, text=True, check=False)  # fmt: skip
    shell.user_ns["_exit_code"] = done.returncode
    text = done.stdout + done.stderr
    return SList(text.splitlines()) if split else LSString(text)


_LOADED_VARS: dict[str, Any] = {}  # vars.pkl as main() loaded it before the history


def load_vars(ns: dict[str, Any], path: str) -> None:
    """The notebook variables shipped in ``path`` (``session/variables.py``) into ``ns``."""
    with open(path, "rb") as f:
        entries = pickle.load(f)
    for name, (kind, blob) in entries.items():
        if kind == "torch":
            import io

            import torch

            # no map_location: a cuda tensor comes back on cuda, as in the notebook
            ns[name] = torch.load(io.BytesIO(blob), weights_only=False)
        else:
            ns[name] = pickle.loads(blob)


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or what Python's own traceback prints when that raises: the cell's error
    must be reported whatever its ``__str__`` does."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__} object>"


def user_traceback(exc: BaseException) -> str:
    """The exception as the notebook shows it: our frames and asyncio's before the cell's cut."""
    tb = exc.__traceback__
    ours = (os.path.abspath(__file__), os.path.join(os.path.dirname(os.__file__), "asyncio", ""))
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(ours):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def run_history(
    ns: dict[str, Any], entries: Iterable[Mapping[str, Any]], stop_on_error: bool = False
) -> list[dict[str, str]]:
    """Replay setup cells / earlier cells, ungated. In a warm worker a failing step does not
    stop the others: its error is returned (the user sees it as a warning); a script run on
    its own stops at it (``stop_on_error``), as the notebook's setup would have."""
    errors = []
    provide_display()
    frame_stderr()  # the cell's stderr shown as stderr (display_frames.py)
    for entry in entries:
        try:
            if entry.get("vars_file") and os.path.exists(entry["vars_file"]):
                load_vars(ns, entry["vars_file"])
            if entry.get("needs_ipython"):
                use_ipython(ns)
            codes = compile_statements(entry["code"], entry["filename"], entry["source"])
            # a replayed profiled cell's changes to shared memory are the notebook's already,
            # including those its text hides in a call; a setup cell keeps what it names
            keep = EVERYTHING if entry.get("kind") == "cell" else entry.get("preserve")
            with preserved(ns, keep), values_read(ns, entry.get("read_values")):
                for code in codes:
                    run_code(code, ns)
        except (Exception, SystemExit) as exc:  # the notebook shows a SystemExit and goes on
            if stop_on_error:
                raise
            errors.append({"name": entry.get("name", ""),
                           "filename": entry.get("filename", ""),
                           "exc_type": type(exc).__name__,
                           "exc_message": message_of(exc)})  # fmt: skip
    return errors


@contextlib.contextmanager
def values_read(ns: dict[str, Any], blob: str | None) -> Iterator[None]:
    """A setup cell replayed here reads the values it read when it ran in the notebook (``k``
    was 3 then, 100 now: ``val = k * 2`` must be 6); the names it did not rebind get their
    current values back after it."""
    if not blob:
        yield
        return
    import base64

    then: dict[str, Any] = pickle.loads(base64.b64decode(blob))
    now = {name: ns[name] for name in then if name in ns}
    ns.update(then)
    try:
        yield
    finally:
        for name, value in then.items():
            if ns.get(name) is value:  # not rebound by the cell: today's value
                if name in now:
                    ns[name] = now[name]
                else:
                    ns.pop(name, None)


def join_ranks() -> None:
    """Several ranks: name the main thread ``rank R``, bind the rank's GPU and initialise the
    process group for the cell (NCCL on GPUs, gloo without)."""
    if WORLD_SIZE <= 1:
        return
    with contextlib.suppress(OSError, AttributeError):  # Linux prctl(PR_SET_NAME)
        ctypes.CDLL(None).prctl(15, (RANK_FORMAT.format(RANK)).encode()[:15], 0, 0, 0)
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.cuda.set_device(LOCAL_RANK)
        dist.init_process_group("nccl", device_id=torch.device("cuda", LOCAL_RANK))
    else:
        dist.init_process_group("gloo")


def leave_ranks() -> None:
    if WORLD_SIZE > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


_CODES: list[CodeType] = []  # the cell's statements, compiled by prepare()


def prepare(ns: dict[str, Any]) -> None:
    """Compile the cell, load shipped variables, give IPython syntax its shell (and every cell
    IPython's ``display``)."""
    _CODES[:] = compile_statements(CODE, CELL_FILE, CELL)
    KEPT.clear()  # this cell's snapshots only
    provide_display()
    frame_stderr()  # the cell's stderr shown as stderr (display_frames.py)
    if _LOADED_VARS:  # main() loaded them before the history: the notebook's values win again
        ns.update(_LOADED_VARS)
    elif os.path.exists(VARS_FILE):
        load_vars(ns, VARS_FILE)
    # a cell that displays (display(df), IPython.display) gets the shell that sends displays
    # to the notebook; without one IPython's display prints the text
    if NEEDS_IPYTHON or DISPLAYS.search(CELL):
        use_ipython(ns)


def run_statements(ns: dict[str, Any]) -> None:
    """The cell once, each top-level statement in its own NVTX range."""
    ns.pop(SHOWN, None)
    # each run of the cell warns as a notebook cell run once does: Python's "once per place"
    # would silence the captured run after a warm-up or an earlier run of the same cell
    ns.pop("__warningregistry__", None)
    hook, sys.displayhook = sys.displayhook, keep_shown(ns)
    try:
        for label, code in zip(LABELS, _CODES, strict=False):
            with annotate(label, domain=DOMAIN):
                run_code(code, ns)
    finally:
        sys.displayhook = hook


def torch_op_ranges() -> contextlib.AbstractContextManager[Any]:
    """PyTorch's NVTX range per aten op around the captured cell (``--pytorch ops|shapes`` in a
    warm worker): what nsys --pytorch=autograd-nvtx|autograd-shapes-nvtx turns on for the whole
    process, here for the captured cell only, so the worker need not be relaunched."""
    if not TORCH_NVTX:
        return contextlib.nullcontext()
    import torch.autograd.profiler

    return torch.autograd.profiler.emit_nvtx(record_shapes=TORCH_NVTX == "shapes")


def kept_as_it_was(
    ns: dict[str, Any], active: bool, quiet: bool = True, keep_on_error: bool = False
) -> contextlib.AbstractContextManager[Any]:
    """Around a repeat: the worker's put-back (``KEEP_STATE``), else the plain values';
    ``quiet``: what the repeat prints is not shown (the notebook has it already);
    ``keep_on_error``: a repeat that raises is the cell's run (its effects stay)."""
    if not active:
        return contextlib.nullcontext()
    if KEEP_STATE is not None:
        return KEEP_STATE(quiet=quiet, keep_on_error=keep_on_error)
    return names_kept(ns, True)


def warmup(ns: dict[str, Any]) -> None:
    """Ungated runs before the captured one; each leaves the notebook's state as it was (only
    the captured run changes it, once, as the notebook's own run would)."""
    if WARMUP:
        kept = preserved(ns, CHANGES, replayed=GATE == "nvtx", skip_mapped=NOTEBOOK_KEEPS)
        keep_on_error = not RERUN  # one that raises ends the cell: it is the notebook's run
        with kept, annotate(WARMUP_RANGE, domain=DOMAIN):
            for _ in range(WARMUP):
                # each from the notebook's Python state and files (a second ``queue.pop()``
                # failed); its GPU memory is put back once, after the last
                with kept_as_it_was(ns, True, keep_on_error=keep_on_error):
                    run_statements(ns)


def run_repeats(ns: dict[str, Any], out: dict[str, Any]) -> None:
    """The captured run: the cell ``REPEAT`` times, each inside its own ``CELL_RANGE`` opening
    (``analysis/repeats.py``). Every repeat before the last puts back what it changed, between
    the openings, as a warm-up does: the notebook sees one run (the last, whose prints alone
    are shown), each repeat starts from the same state. Records each repeat's wall time (s,
    ``repeat_cell_s``) and, for N >= 2, the GPUs' clocks and temperature after it."""
    walls: list[float] = out.setdefault("repeat_cell_s", [])
    readings: list[Any] = out.setdefault("repeat_gpu", []) if REPEAT > 1 else []
    if REPEAT > 1:
        gpu_reading()  # NVML starts here, before the first repeat's range, not between two
    for index in range(REPEAT):
        again = index < REPEAT - 1
        # its snapshot is taken before and put back after the range: not in the repeat's time
        kept = preserved(ns, CHANGES, active=again, replayed=GATE == "nvtx")
        with kept_as_it_was(ns, again, keep_on_error=not RERUN), kept:
            t0 = time.perf_counter()
            with annotate(CELL_RANGE, domain=DOMAIN):
                run_statements(ns)
            walls.append(time.perf_counter() - t0)
            if REPEAT > 1:
                readings.append(gpu_reading())


def failure(exc: BaseException) -> dict[str, Any]:
    """The status fields of an exception the user's code raised."""
    return {
        "status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "error",
        "exc_type": type(exc).__name__,
        "exc_message": message_of(exc),
        "traceback": user_traceback(exc),
    }


def capture(ns: dict[str, Any]) -> dict[str, Any]:
    """The gated, NVTX-wrapped run of the cell; returns the status fields. A cell that raises
    still stops the gate (the partial report is complete) and reports in cell coordinates."""
    gate = Gate(GATE)
    out: dict[str, Any] = {"gate": GATE, "gate_kind": gate.kind,
                           "nvtx": nvtx_module() is not None, "status": "ok"}  # fmt: skip
    # %%nsys --nvtx: the gate follows one opening of the user's range, not the cell
    window = None
    if NVTX_CAPTURE and GATE != "nvtx":
        window = RangeWindow(gate, NVTX_INSTANCE or 1)
    recorder = RangeRecorder(NVTX_CAPTURE if window else NVTX_TARGET, phases=GATE == "nvtx",
                             window=window, instance=NVTX_INSTANCE)  # fmt: skip
    memory = TorchMemory(HERE, MEMORY_HISTORY)  # torch's bytes and history, outside the gate
    times: dict[str, float] = {}
    try:
        # a re-run (drill-down) copies what it may change aside before the gate opens and
        # writes it back after it closed: outside the capture
        kept = preserved(ns, CHANGES, active=RERUN, replayed=GATE == "nvtx",
                         skip_mapped=NOTEBOOK_KEEPS)  # fmt: skip
        with kept_as_it_was(ns, RERUN, quiet=not RERUN_SHOWN), kept, recorder, memory:
            if window is None:
                gate.start()
            try:
                times["cell"] = time.perf_counter()
                if WORLD_SIZE > 1:  # says which process is which rank, before (not around) cell
                    with annotate(RANK_FORMAT.format(RANK), domain=DOMAIN):
                        pass
                with (
                    process_range(CAPTURE_RANGE, DOMAIN, on=GATE == "nvtx"),
                    torch_op_ranges(),
                ):
                    run_repeats(ns, out)
            finally:
                # the cell's own time ends here; stopping the gate waits for its kernels and,
                # in a warm nsys session, writes the report
                times["stop"] = time.perf_counter()
                with contextlib.suppress(Exception):
                    if window is None:
                        gate.stop()
                    else:  # the range was left open: its capture ends with the cell
                        window.close()
                times["stopped"] = time.perf_counter()
    except BaseException as exc:
        out.update(failure(exc))
    if "cell" in times and "stop" in times:
        out["cell_s"] = times["stop"] - times["cell"]
        out["gate_stop_s"] = times["stopped"] - times["stop"]
    out["ranges"] = recorder.ranges()
    out.update(memory.fields())
    # which of the device memory nsys (or an out-of-memory error) gives this process is the
    # notebook's: with --memory, or when the cell failed
    if MEMORY_HISTORY or out["status"] != "ok":
        with contextlib.suppress(Exception):
            out["mapped"] = {"pid": os.getpid(), "segments": mapped_segments(ns)}
    if KEPT:  # what the warm-up's and this re-run's snapshots cost
        out["kept"] = list(KEPT)
    if NVTX_TARGET is not None or window is not None:
        out["target"] = recorder.target_status()
    if window is not None:
        out["window"] = window.status()
    return out


def take_profiler_constants(environ: MutableMapping[str, str]) -> None:
    """The profiler constants the session put in ``PROFILER_ENV`` (``PROFILER_CONSTANTS``
    only) replace the header's; the variable is removed, so the cell and its children never
    see it."""
    text = environ.pop(PROFILER_ENV, "")
    if not text:
        return
    given = json.loads(text)
    globals().update({k: v for k, v in given.items() if k in PROFILER_CONSTANTS})


def main() -> None:
    """``python script.py [status.json]``: history, variables, warm-up, the captured cell (the
    script's last lines call it when it is the main program; this module never does)."""
    take_profiler_constants(os.environ)
    path = status_path(sys.argv, RANK, HERE, STATUS_NAME)
    status = StatusFile(path, status="running", phase="start", gate=GATE, warmup=WARMUP)
    del sys.argv[1:]  # the cell sees the script alone, as in a warm worker (its argv is ours)
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    t0 = time.perf_counter()
    try:
        status.write(phase="setup")
        join_ranks()
        if HISTORY and os.path.exists(VARS_FILE):
            # before the history too: a replayed cell may read a notebook name (a warm run's
            # script re-run fresh after a crash ships those); prepare() puts them back after
            load_vars(_LOADED_VARS, VARS_FILE)
            ns.update(_LOADED_VARS)
        run_history(ns, HISTORY, stop_on_error=True)
        status.write(phase="vars")
        prepare(ns)
        status.write(phase="warmup")
        warmup(ns)
        status.write(phase="cell")
    except BaseException as exc:
        status.write(total_s=time.perf_counter() - t0, **failure(exc))
        phase = status.status["phase"]
        sys.stderr.write(f"[nsight_magic] {phase} raised {type(exc).__name__}; see {status.path}\n")
        raise SystemExit(1) from None
    result = capture(ns)
    with contextlib.suppress(Exception):
        leave_ranks()
    status.write(phase="cell" if result["status"] != "ok" else "done",
                 total_s=time.perf_counter() - t0, **result)  # fmt: skip
    if result["status"] != "ok":
        # the parent shows the traceback from the status file (printing it here too would
        # show it twice); a one-line note keeps a bare `python script.py` honest
        sys.stdout.flush()
        exc_type = result["exc_type"]
        sys.stderr.write(f"[nsight_magic] the cell raised {exc_type}; see {status.path}\n")
        raise SystemExit(1)
