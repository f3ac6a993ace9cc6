"""``%%nsight_nsys``, ``%%nsight_ncu`` (also ``%%nsys``, ``%%ncu`` where no other extension
holds those names: ``magic_names``), ``%%nsight_setup``, ``%nsight_session``: parse the line,
call the session, display. Everything they do is callable from Python (``nsight_magic.session``).

Configurable (``%config NsightMagic.<name> = …``): ``nsys_path``, ``ncu_path``, ``runs_dir``,
``auto_vars``, ``auto_vars_max_bytes``, ``replay``, ``prewarm``, ``static_view``,
``claim_short_names``, ``sweep_max_configs``, ``sweep_max_values``. The cell magics' lines are
taken as typed (``@no_var_expand``: no ``$var``/``{var}`` expansion). Bad flags raise
UsageError (one line); a profile that fails raises its typed error, shown as one line
(IPython's ``_render_traceback_``), so the cell fails and Run All stops, while the partial
result is shown and kept in ``-o VAR`` and ``nsight_magic.last_run()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import (
    Magics,
    cell_magic,
    line_cell_magic,
    line_magic,
    magics_class,
    no_var_expand,
)
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, observe, validate

from ..errors import CellSyntaxError, NsightMagicError, ProfileInterrupted
from ..processes import locate as tools
from ..processes.cell_command import rank_limit
from ..processes.progress import ProgressLine
from ..profilers import options as option_decl
from ..profilers.ncu import NcuOptions
from ..profilers.nsys import NsysOptions
from ..results.base import in_kernel
from ..results.display import show_live_first, static_later
from ..script import prepare_cell
from ..session.backends import NcuBackend, NsysBackend
from ..session.manager import MANAGER
from ..session.runs.sweep import SweepSpec, parse_sweep_option
from ..session.spec import (
    DEFAULT_STATE_TIMEOUT_S,
    DEFAULT_SWEEP_MAX_CONFIGS,
    DEFAULT_SWEEP_MAX_VALUES,
    CellRequest,
    Notebook,
    RunCallbacks,
    SweepLimits,
)
from ..session.status import format_status, notebook_gpu_memory
from ..session.variables import DEFAULT_AUTO_MAX_BYTES, parse_names
from ..vocabulary import magic_names
from ..vocabulary.reserved_names import SHOWN
from . import behaviour
from .help import magic_help
from .options import (
    check_common,
    check_flags,
    check_ncu_values,
    show_syntax_error,
    split_extra,
    typed_flag,
)

_LAST: dict[str, Any] = {}
T = TypeVar("T")


def last_run() -> Any:
    """The result of the last profiled cell, also when it failed with a partial report."""
    return _LAST.get("run")


@contextlib.contextmanager
def _showing(run: Any) -> Iterator[None]:
    """Ctrl-C while a result's view is built: one ``ProfileInterrupted`` saying the run itself
    is kept, not a traceback from inside altair or ipywidgets (the run's own steps are typed
    by ``session.pipeline.profile_cell``)."""
    try:
        yield
    except ProfileInterrupted:
        raise
    except KeyboardInterrupt:
        folder = getattr(run, "run_dir", None)
        raise ProfileInterrupted(
            "Interrupted while showing the result; the run itself is complete and kept "
            f"(nsight_magic.last_run(), or -o NAME). Run folder: {folder}"
        ) from None


def _common(func: Any) -> Any:
    """Options shared by %%nsys and %%ncu (applied bottom-up by magic_arguments)."""
    for deco in reversed(
        [
            argument("--name", default=None, help="Name of the run (folder name, titles)."),
            argument("--warmup", type=int, default=0, metavar="N",
                     help="Run the cell N times before the captured run (not profiled)."),
            argument("--vars", default="", metavar="a,b",
                     help="Notebook variables to send whatever their size (torch tensors and "
                     "modules keep dtype and device)."),
            argument("--env", action="append", default=[], metavar="KEY=VALUE",
                     help="Environment variable for the profiled process (repeatable; other "
                     "values get a worker of their own)."),
            argument("--python", default=None, help="Python interpreter to run the cell with."),
            argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="Bound the whole run: the profiler's checks, pickling variables, the "
                     "worker's start, the cell (its worker stopped if it does not stop), "
                     "export. Without it each step has its own default bound (docs/"
                     "troubleshooting.md)."),
            argument("--settle", type=float, default=None, metavar="CELSIUS",
                     help="Before the capture, wait until every GPU is at or below this "
                     "temperature (NVML; at most 300 s): a hot GPU runs slower. The wait and the "
                     "temperature go in meta.json's settle; a capture that began warmer says "
                     "why in one line."),
            argument("--fresh", action="store_true",
                     help="Run in a new process with only the %%%%nsight_setup cells (clean "
                     "state, as a script would), not in the warm worker."),
            argument("--no-setup", action="store_true",
                     help="Do not run the %%%%nsight_setup cells for this cell."),
            argument("--nproc", type=int, default=1, metavar="N",
                     help="Run the cell as N ranks on this host through torchrun (RANK, "
                     "LOCAL_RANK, WORLD_SIZE set; process group initialised for the cell; "
                     "setup cells on every rank; a fresh run)."),
            argument("--var", "-o", default=None, metavar="NAME",
                     help="Also store the result object in this notebook variable."),
        ]
    ):  # fmt: skip
        func = deco(func)
    return func


def _declared(options: type) -> Any:
    """The magic's flags of a profiler's options, generated from their declaration
    (``profilers/options.py``: flag, help, default, choices)."""

    def apply(func: Any) -> Any:
        for flags, kwargs in reversed(option_decl.argument_specs(options)):
            func = argument(*flags, **kwargs)(func)
        return func

    return apply


def _options(options: type[T], args: Any, extra: list[str]) -> T:
    """The profiler's options from the parsed flags; a bad value is one UsageError line."""
    try:
        return option_decl.from_args(options, args, extra_args=tuple(extra))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _sweep_spec(given: list[str], limits: SweepLimits) -> SweepSpec:
    """``--sweep NAME=V1,V2`` (repeatable) as a ``SweepSpec`` within ``limits``; a bad one, or
    one over its bounds, is one UsageError before anything runs."""
    try:
        spec = SweepSpec(tuple(parse_sweep_option(text) for text in given))
        spec.check(limits)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return spec


def _check_sweep_line(line: str, limits: SweepLimits) -> None:
    """A ``--sweep`` line with more values than ``limits`` allow, refused from its commas alone:
    splitting it (IPython's ``arg_split``, ``shlex``) is quadratic in its length, 11 s for a
    line of 100,000 values, before ``SweepSpec.check`` could say no."""
    if "--sweep" not in line:
        return
    values = line.count(",") + 1
    if values > limits.max_values:
        raise UsageError(
            f"--sweep: about {values:,} values given (the line has {values - 1:,} commas), over "
            f"the bound of {limits.max_values:,} (%config NsightMagic.sweep_max_values); nothing "
            "ran. Sweep fewer values."
        )


def _code_files(shell: Any) -> Mapping[str, int]:
    """IPython's compiled cells, file name -> execution count (the live map IPython >= 8
    keeps for its tracebacks' "Cell In[k]"; empty before that)."""
    files = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return files if isinstance(files, dict) else {}


@magics_class
class NsightMagic(Magics):
    """Nsight profiling magics; also a traitlets Configurable for ``%config``."""

    nsys_path = Unicode("", help="Path of the nsys executable (default: search).").tag(config=True)
    ncu_path = Unicode("", help="Path of the ncu executable (default: search).").tag(config=True)
    runs_dir = Unicode(
        "", help="Folder for run folders (default: ./nsight-runs in the notebook's folder)."
    ).tag(config=True)
    auto_vars = Bool(True, help="Send the notebook's names to a profiled cell's worker (False: "
                     "only what the setup cells bind, and --vars).").tag(config=True)  # fmt: skip
    auto_vars_max_bytes = Int(
        DEFAULT_AUTO_MAX_BYTES, help="Largest CPU object sent automatically (bytes; CUDA tensors "
        "go by reference, whatever their size): a larger one goes only with --vars, and a "
        "cell's change to it stays in the worker, said in one line."
    ).tag(config=True)  # fmt: skip
    claim_short_names = Bool(False, help=magic_names.CLAIM_HELP).tag(config=True)
    state_timeout = Float(
        DEFAULT_STATE_TIMEOUT_S,
        help="Seconds the notebook's state may take to describe for a worker, and a profiled "
        "cell's changes to describe for the notebook (a slow __reduce__ or __getstate__): "
        "past it the cell fails before it runs, or its changes stay in the worker, said in "
        "one line.",
    ).tag(config=True)
    sweep_max_configs = Int(
        DEFAULT_SWEEP_MAX_CONFIGS,
        help="Most configurations one --sweep (or nsight_magic.sweep) may have: the product of "
        "its variables' numbers of values, checked before anything runs.",
    ).tag(config=True)
    sweep_max_values = Int(
        DEFAULT_SWEEP_MAX_VALUES,
        help="Most values one --sweep (or nsight_magic.sweep) may give, over all its variables.",
    ).tag(config=True)

    @validate("sweep_max_configs", "sweep_max_values")
    def _check_sweep_bound(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if value < 1:
            name = proposal["trait"].name
            raise TraitError(f"NsightMagic.{name} is {value}; give a whole number >= 1.")
        return int(value)

    def sweep_limits(self) -> SweepLimits:
        """The sweep's bounds as ``%config`` set them."""
        return SweepLimits(max_configs=self.sweep_max_configs, max_values=self.sweep_max_values)

    @validate("auto_vars_max_bytes")
    def _check_max_bytes(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if value < 0:  # a negative limit would refuse every variable, with a baffling reason
            raise TraitError(
                f"NsightMagic.auto_vars_max_bytes is {value}; give a size in bytes >= 0 (0 sends "
                f"no variable automatically; the default is {DEFAULT_AUTO_MAX_BYTES})."
            )
        return int(value)

    _registered = False  # set by register(): config applied before it has nothing to rename

    @observe("claim_short_names")
    def _claim_changed(self, change: dict[str, Any]) -> None:
        if self._registered and self.shell is not None:
            print(magic_names.assign_and_tell(self.shell, claim=change["new"], always=True))

    prewarm = Bool(True, help="Start the nsys worker at %load_ext in a Jupyter kernel (it "
                   "imports torch and what the notebook's cells import, as they run), the nsys "
                   "and ncu workers when a %%nsight_setup cell runs (they import what it "
                   "imports meanwhile and receive what it defined), and replay in the ncu "
                   "worker what a drill-down needs after the first nsys result."
                   ).tag(config=True)  # fmt: skip

    @observe("prewarm")
    def _prewarm_changed(self, change: dict[str, Any]) -> None:
        MANAGER.prewarm = change["new"]  # the import follower reads it after every cell

    static_view = Enum(["auto", "inline", "background"], "auto", help="'auto': in a notebook "
                       "editor (JupyterLab, Notebook 7) a result's live view at once and its "
                       "static HTML/PNG copy after, into the same output (the next cell waits "
                       "for it); both before the cell ends when run headless (nbclient, "
                       "papermill), which keeps no later update. 'background' / 'inline': "
                       "always one or the other.").tag(config=True)  # fmt: skip
    replay = Enum(["needed", "all"], "needed", help="Kept so that notebooks which set it still "
                  "run; it changes nothing: no profiled cell is replayed, their results come "
                  "back to the notebook and a new worker receives them."
                  ).tag(config=True)  # fmt: skip

    # --- parsing ------------------------------------------------------------------------------
    def _parse(self, magic: Any, line: str) -> tuple[Any, list[str]]:
        ours, extra = split_extra(line)
        typed = magic_names.cell_magic(magic.parser.prog.lstrip("%").removeprefix("nsight_"))
        check_flags(magic.parser, ours, typed)  # a typo gets its nearest spelling
        args = magic.parser.parse_args(ours)  # MagicArgumentParser: errors are UsageError
        hidden = getattr(self.shell, "user_ns_hidden", {}) or {}
        var_flag = typed_flag(ours, ("-o", "--var"))  # the spelling messages name
        check_common(args.timeout, args.env, args.var, hidden, var_flag=var_flag,
                     name=args.name, warmup=args.warmup,
                     repeat=getattr(args, "repeat", 1), settle=args.settle)  # fmt: skip
        if magic.parser.prog.endswith("ncu"):  # values ncu alone would refuse, before it is found
            check_ncu_values(args.set, args.sections, args.kernel_regex, typed, extra)
        if args.nproc < 1 or getattr(args, "rank", 0) not in range(args.nproc):
            raise UsageError(f"--nproc must be >= 1 and --rank in 0..{max(args.nproc, 1) - 1}")
        if args.nproc > 1:  # torchrun would start them all: 100000 ranks must not get that far
            env = {**os.environ, **dict(item.split("=", 1) for item in args.env)}
            limit, why = rank_limit(env)
            if args.nproc > limit:
                raise UsageError(f"--nproc {args.nproc}: {why}; give --nproc 1..{limit}.")
        try:
            args.vars = tuple(parse_names(args.vars))
        except NsightMagicError as exc:
            raise UsageError(str(exc)) from None
        self._apply_config()
        return args, extra

    def _apply_config(self) -> None:
        """What the session and the tool lookup take from ``%config`` (read at each magic)."""
        MANAGER.prewarm = self.prewarm  # (``replay`` changes nothing: kept for old notebooks)
        tools.set_configured_path("nsys", self.nsys_path or None)
        tools.set_configured_path("ncu", self.ncu_path or None)

    def _request(self, args: Any, cell: str) -> CellRequest:
        env = dict(item.split("=", 1) for item in args.env)
        return CellRequest(
            cell=cell,
            name=args.name or "cell",
            warmup=args.warmup,
            repeat=getattr(args, "repeat", 1),
            settle_c=args.settle,
            vars=args.vars,
            env=env,
            python=args.python or sys.executable,
            timeout=args.timeout,
            setup=not args.no_setup,
            fresh=args.fresh,
            runs_root=Path(self.runs_dir) if self.runs_dir else None,
            cwd=os.getcwd(),
            nproc=args.nproc,
            rank=getattr(args, "rank", 0),
        )

    def _notebook(self) -> Notebook:
        shell = self.shell
        return Notebook(
            user_ns=shell.user_ns if shell is not None else {},
            hidden=frozenset(getattr(shell, "user_ns_hidden", {}) or {}),
            auto_vars=self.auto_vars,
            auto_vars_max_bytes=self.auto_vars_max_bytes,
            state_timeout_s=float(self.state_timeout),
            code_files=_code_files(shell),
        )

    def _deliver(self, args: Any, call: Any) -> Any:
        """Run ``call``: the result is returned for display and stored; a typed error is
        re-raised (IPython shows it in one line) after showing what was captured."""
        from IPython.display import display

        try:
            run = call()
        except NsightMagicError as exc:
            if self.shell is not None:  # a value the failed run left on its way: not a name
                self.shell.user_ns.pop(SHOWN, None)
            partial = getattr(exc, "run", None)
            if partial is not None:
                self._store(args, partial)
                # Ctrl-C here skips the view: the error says what happened to the run
                with contextlib.suppress(KeyboardInterrupt):
                    display(partial)
            raise
        self._store(args, run)
        if static_later(self.static_view) and in_kernel() and hasattr(run, "live_bundle"):
            with _showing(run):
                show_live_first(run)
            self._show_cell_value()
            return None  # shown already; -o VAR and nsight_magic.last_run() keep it
        self._show_cell_value()
        return run

    def _show_cell_value(self) -> None:
        """The profiled cell's trailing expression, shown as the notebook shows a cell's value
        (``Out[n]``, bound to ``_``): the worker sent it back as ``SHOWN``."""
        shell = self.shell
        if shell is None or SHOWN not in shell.user_ns:
            return
        value = shell.user_ns.pop(SHOWN)
        shell.displayhook(value)

    def _store(self, args: Any, run: Any) -> None:
        _LAST["run"] = run
        if args.var and self.shell is not None:
            self.shell.user_ns[args.var] = run

    def _callbacks(self) -> RunCallbacks:
        view = ProgressLine()
        return RunCallbacks(progress=view.progress, output=view.output, text=view.text,
                            stderr=view.stderr, display=view.display)  # fmt: skip

    # --- magics -------------------------------------------------------------------------------
    @magic_arguments(name="nsight_nsys")
    @_common
    @_declared(NsysOptions)
    @argument("--repeat", type=int, default=1, metavar="N",
              help="Run the cell N times in one capture, each run its own 'cell' range: the "
              "kernel and NVTX tables gain per-repeat mean, median, std, 95%% interval and "
              "RSD%%, and compare() reads its noise from them. The notebook sees one run (the "
              "repeats before the last put back what they changed). docs/repeats.md.")  # fmt: skip
    @argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
              help="Run the cell once per value (repeatable: every combination, in the order "
              "given), NAME bound to it before the cell, each its own profiled run from the "
              "same notebook state; returns a SweepRun. Values: 1,8,32 or a Python literal "
              "list, \"bs=[1, 8, 32]\". docs/sweeps.md.")  # fmt: skip
    @no_var_expand  # the line as typed: IPython's $var/{var} expansion is quadratic in it
    @cell_magic("nsight_nsys")  # type: ignore[arg-type]  # (IPython types only the bare form)
    def nsys(self, line: str, cell: str) -> Any:
        """Profile this cell with Nsight Systems and show its kernels, NVTX ranges, copies,
        timeline and a kernel picker.

        Example::

            %%nsight_nsys --warmup 1 -o run
            y = model(x)
            torch.cuda.synchronize()

        Only the cell is captured (cudaProfilerStart/Stop around it); setup cells and
        warm-up runs are not. Every run gets a folder under ./nsight-runs/."""
        _check_sweep_line(line, self.sweep_limits())
        args, extra = self._parse(self.nsys, line)
        options = _options(NsysOptions, args, extra)
        request = self._request(args, cell)
        if args.sweep:
            limits = self.sweep_limits()
            spec = _sweep_spec(args.sweep, limits)
            return self._deliver(
                args,
                lambda: MANAGER.sweep(request, NsysBackend(options), spec,
                                      notebook=self._notebook(), callbacks=self._callbacks(),
                                      limits=limits),
            )  # fmt: skip
        return self._deliver(
            args,
            lambda: MANAGER.profile(
                request,
                NsysBackend(options),
                notebook=self._notebook(),
                callbacks=self._callbacks(),
            ),
        )

    @magic_arguments(name="nsight_ncu")
    @_common
    @_declared(NcuOptions)
    @argument("--rank", type=int, default=0, metavar="R",
              help="With --nproc: the rank ncu profiles (the others run unprofiled).")  # fmt: skip
    @no_var_expand  # as %%nsys: the line is taken as typed
    @cell_magic("nsight_ncu")  # type: ignore[arg-type]
    def ncu(self, line: str, cell: str) -> Any:
        """Profile this cell's kernels with Nsight Compute (roofline set by default).

        Example::

            %%nsight_ncu --kernel gemm --launch-count 1 -o k
            c = a @ b

        Kernels launched inside the cell's NVTX range are profiled (setup and warm-up are
        not); ncu replays each kernel many times, so keep the cell small."""
        args, extra = self._parse(self.ncu, line)
        options = _options(NcuOptions, args, extra)
        if options.nvtx_target:  # the range as the user wrote it: resolved against the cell
            try:
                nvtx = MANAGER.drills.ncu_nvtx_options(options.nvtx_target, cell)
            except ValueError as exc:
                raise UsageError(f"--nvtx {options.nvtx_target!r}: {exc}") from None
            # the resolved form replaces the spelling (it may be nvtx_target itself, respelled)
            options = dataclasses.replace(options, **{"nvtx_target": None, **nvtx})
        request = self._request(args, cell)
        return self._deliver(
            args,
            lambda: MANAGER.profile(
                request, NcuBackend(options), notebook=self._notebook(), callbacks=self._callbacks()
            ),
        )

    @magic_arguments()
    @argument("--list", action="store_true", help="Show the recorded setup cells.")
    @argument("--clear", action="store_true", help="Forget all recorded setup cells.")
    @argument("--name", default="", help="Name; re-running a named setup cell replaces it.")
    @argument("--worker-only", action="store_true",
              help="Do not run the cell in the notebook: each profiling worker builds what it "
              "defines itself. Not needed for one copy of a model: without it the cell runs "
              "once, here, and the workers share its GPU tensors.")  # fmt: skip
    @line_cell_magic
    def nsight_setup(self, line: str, cell: str | None = None) -> None:
        """Run this cell in the notebook as usual AND record it: the profiling workers receive
        what it defines (GPU tensors by reference: one copy of the model; the rest by value),
        a worker replays it only when something it defines cannot be sent, and fresh runs
        run it first (outside the capture): imports, model, data.

        Usage::

            %%nsight_setup [--name NAME] [--worker-only]   (cell: run it here and record it)
            %nsight_setup --list | --clear                (line: show or forget the records)

        Example::

            %%nsight_setup --name model
            import torch
            model = torch.nn.Linear(1024, 1024).cuda()"""
        args = self.nsight_setup.parser.parse_args(split_extra(line)[0])
        if args.clear:
            n = MANAGER.clear_setup()
            print(f"Cleared {n} setup cell(s); running workers keep what they built.")
        if args.list:
            print(MANAGER.setup.describe())
        if not cell or not cell.strip():
            return None
        try:
            prepared = prepare_cell(cell, cell_name=f"setup cell {args.name or ''}".strip())
        except NsightMagicError as exc:
            raise UsageError(str(exc)) from None
        self._apply_config()
        shell = self.shell
        MANAGER.notebook = self._notebook()  # what a prewarmed worker receives once it ran
        here = not args.worker_only and shell is not None
        ok = MANAGER.run_setup(args.name, prepared, lambda: not here or (shell is not None and
                               shell.run_cell(cell, store_history=False).success),
                               in_notebook=here)  # fmt: skip
        if not ok:  # its traceback is shown already
            raise NsightMagicError("the setup cell failed, so it was not recorded.")
        return None

    @magic_arguments()
    @argument("action", nargs="?", default="status",
              choices=["status", "start", "restart", "stop", "reset"])  # fmt: skip
    @argument("tool", nargs="?", default=None, choices=["nsys", "ncu"])
    @argument("--host", action="store_true",
              help="with start nsys: the worker %%%%nsys --host cells use")  # fmt: skip
    @line_magic
    def nsight_session(self, line: str) -> None:
        """The profiling workers: ``status`` (pid, uptime, cells, GPU memory), ``start`` (in the
        background; it receives the notebook's names), ``restart`` or ``stop`` (both, or the
        named one); ``reset`` stops both and forgets the profiled cells (the setup cells stay).
        ``start nsys --host`` starts the worker that ``%%nsys --host`` cells use (other launch
        options: its own worker), so the first such cell does not wait for a Python with torch
        to start; put it (and ``start nsys``, for plain cells) before the setup cell: the setup
        reaches every live worker.

        {workers}"""
        try:
            args = self.nsight_session.parser.parse_args(split_extra(line)[0])
        except SystemExit:  # pragma: no cover - MagicArgumentParser raises UsageError
            raise UsageError("usage: %nsight_session [ACTION] [nsys|ncu]") from None
        if args.action == "status":
            print(format_status(MANAGER.status(), notebook_gpu_memory()))
            return
        if args.host and (args.action != "start" or args.tool not in (None, "nsys")):
            raise UsageError("--host goes with `%nsight_session start nsys --host` only.")
        if args.action == "start":
            self._apply_config()
            MANAGER.notebook = self._notebook()  # what it receives
            host = NsysBackend(NsysOptions(host=True)) if args.host else None
            MANAGER.start_worker(args.tool or "nsys", host)
            which = "nsys --host" if args.host else args.tool or "nsys"
            print(f"Starting the {which} worker in the background.")
            return
        if args.action == "reset":
            MANAGER.reset()
            print("Workers stopped and profiled cells forgotten; setup cells kept.")
            return
        stopped = MANAGER.stop(args.tool)
        what = " and ".join(stopped) or "no"
        verb = (
            "restarted: the next cell starts a new one" if args.action == "restart" else "stopped"
        )
        print(f"{what} worker {verb}.")


_session_doc = NsightMagic.nsight_session.__doc__ or ""
NsightMagic.nsight_session.__doc__ = _session_doc.replace(
    "{workers}", textwrap.fill(behaviour.WORKERS, 92, subsequent_indent="        ")
)
for _magic, _short in ((NsightMagic.nsys, "nsys"), (NsightMagic.ncu, "ncu")):
    _notes = (magic_names.SHORT_NOTE.format(short=_short), behaviour.STATE)
    _magic.__doc__ = magic_help(_magic, extra=f"extra {_short} arguments", notes=_notes)


def register(ip: Any) -> NsightMagic:
    """Register the magics and make ``%config NsightMagic`` work: ``%%nsight_nsys`` /
    ``%%nsight_ncu`` always, ``%%nsys`` / ``%%ncu`` where free or claimed (``magic_names``);
    says once which names another extension keeps."""
    magics = NsightMagic(shell=ip)
    ip.register_magics(magics)
    # one NsightMagic in %config (a reload made a new one; the old one must not answer)
    ip.configurables[:] = [c for c in ip.configurables if not isinstance(c, NsightMagic)]
    ip.configurables.append(magics)
    magics._registered = True
    MANAGER.prewarm = magics.prewarm  # ipython_config.py's, before any magic ran
    if notice := magic_names.assign_and_tell(ip, claim=magics.claim_short_names):
        print(notice)
    if not getattr(ip, "custom_exceptions", ()):  # never replace a handler the user set
        ip.set_custom_exc((CellSyntaxError,), show_syntax_error)
    return magics


__all__ = ["NsightMagic", "last_run", "register"]
