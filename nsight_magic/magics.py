"""``%%nsys``, ``%%ncu``, ``%%nsight_setup``: parse the line, call ``profile.py``, display.

Configurable (``%config NsightMagic.nsys_path = "/opt/.../nsys"``): ``nsys_path``,
``ncu_path``, ``runs_dir``. Errors the user can fix print one message, no traceback.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.text import dedent
from traitlets import Unicode

from . import tools
from .errors import CellFailedError, NsightMagicError
from .progress import Progress
from .session.history import REGISTRY

_NOT_RETURNED = (
    "The cell runs in a separate process: variables it assigns and results it computes are "
    "NOT sent back to the notebook. Use --vars to send notebook variables in, and "
    "%%nsight_setup cells for imports/models the profiled cell needs."
)


def _common(func: Any) -> Any:
    """Options shared by %%nsys and %%ncu (applied bottom-up by magic_arguments)."""
    for deco in reversed(
        [
            argument("--name", default=None, help="Name of the run (folder name, titles)."),
            argument("--warmup", type=int, default=0, metavar="N",
                     help="Run the cell N times before the captured run (not profiled)."),
            argument("--vars", default="", metavar="a,b",
                     help="Notebook variables to send into the profiled script (pickled; "
                     "torch tensors/modules keep dtype and device)."),
            argument("--env", action="append", default=[], metavar="KEY=VALUE",
                     help="Environment variable for the profiled process (repeatable)."),
            argument("--python", default=None, help="Python interpreter to run the cell with."),
            argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="Stop the profiler (and everything it started) after this long."),
            argument("--no-setup", action="store_true",
                     help="Do not replay the %%%%nsight_setup cells."),
            argument("--var", "-o", default=None, metavar="NAME",
                     help="Also store the result object in this notebook variable."),
        ]
    ):  # fmt: skip
        func = deco(func)
    return func


def _split_extra(line: str) -> tuple[list[str], list[str]]:
    """Tokens before ``--`` are ours; after it they go to the profiler untouched."""
    from IPython.utils.process import arg_split

    tokens = arg_split(line, posix=True)
    if "--" in tokens:
        i = tokens.index("--")
        return tokens[:i], tokens[i + 1 :]
    return tokens, []


class _ProgressView:
    """One status line, redrawn in place (a display handle in Jupyter, printed lines in a
    terminal), plus the cell's own output printed as it arrives."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.last = ""

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

    @staticmethod
    def output(line: str) -> None:
        print(line, flush=True)


@magics_class
class NsightMagic(Magics):
    """Nsight profiling magics; also a traitlets Configurable for ``%config``."""

    nsys_path = Unicode("", help="Path of the nsys executable (default: search).").tag(config=True)
    ncu_path = Unicode("", help="Path of the ncu executable (default: search).").tag(config=True)
    runs_dir = Unicode(
        "", help="Folder for run folders (default: ./nsight-runs in the notebook's folder)."
    ).tag(config=True)

    def _parse(self, magic: Any, line: str) -> tuple[Any, list[str]]:
        ours, extra = _split_extra(line)
        args = magic.parser.parse_args(ours)  # MagicArgumentParser: errors are UsageError
        if args.warmup < 0:
            raise UsageError("--warmup must be >= 0")
        if args.timeout is not None and args.timeout <= 0:
            raise UsageError("--timeout must be > 0")
        for item in args.env:
            if "=" not in item or item.startswith("="):
                raise UsageError(f"--env {item!r}: expected KEY=VALUE")
        if args.var is not None and not args.var.isidentifier():
            raise UsageError(f"--var {args.var!r} is not a valid variable name")
        return args, extra

    def _common_kwargs(self, args: Any, extra: list[str]) -> dict[str, Any]:
        view = _ProgressView()
        return {
            "user_ns": self.shell.user_ns if self.shell else {},
            "name": args.name,
            "warmup": args.warmup,
            "vars": args.vars,
            "env": args.env,
            "python": args.python or sys.executable,
            "timeout": args.timeout,
            "extra_args": extra,
            "setup": not args.no_setup,
            "runs_root": self.runs_dir or None,
            "progress": view.progress,
            "output": view.output,
        }

    def _deliver(self, args: Any, call: Any) -> Any:
        """Run ``call``; typed errors print one message, the result is returned for display."""
        try:
            run = call()
        except CellFailedError as exc:
            print(f"nsight_magic: {exc}", file=sys.stderr)
            run = getattr(exc, "run", None)
            if run is None:
                return None
        except NsightMagicError as exc:
            print(f"nsight_magic: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None
        if args.var and self.shell is not None:
            self.shell.user_ns[args.var] = run
        return run

    @magic_arguments()
    @_common
    @argument("--trace", default="cuda,nvtx", help="APIs to trace (nsys --trace).")
    @cell_magic
    def nsys(self, line: str, cell: str) -> Any:
        """Profile this cell with Nsight Systems and show its kernels, NVTX ranges, copies,
        timeline and a kernel picker.

        Usage::

            %%nsys [--name NAME] [--warmup N] [--vars a,b] [--trace cuda,nvtx,osrt]
                   [--env KEY=VALUE] [--python PY] [--timeout S] [--no-setup] [-o VAR]
                   [-- extra nsys profile arguments]

        Example::

            %%nsys --warmup 1 --vars model,x -o run
            y = model(x)
            torch.cuda.synchronize()

        Only the cell is captured (cudaProfilerStart/Stop around it); setup cells and
        warm-up runs are not. Every run gets a folder under ./nsight-runs/."""
        args, extra = self._parse(self.nsys, line)
        from .profilers.nsys import parse_trace
        from .session.pipeline import profile_nsys

        try:
            parse_trace(args.trace)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        tools.set_configured_path("nsys", self.nsys_path or None)
        kwargs = self._common_kwargs(args, extra)
        return self._deliver(
            args,
            lambda: profile_nsys(
                cell, trace=args.trace, nsys_path=self.nsys_path or None, **kwargs
            ),
        )

    @magic_arguments()
    @_common
    @argument(
        "--set",
        dest="set_",
        default="roofline",
        metavar="SET",
        help="ncu section set: roofline (default), basic, detailed, full, or 'none'.",
    )
    @argument("--section", action="append", default=[], help="ncu section (repeatable).")
    @argument("--metrics", default="", metavar="M1,M2", help="Extra ncu metrics.")
    @argument("--kernel", default=None, metavar="REGEX", help="Only kernels matching REGEX.")
    @argument("--launch-skip", type=int, default=None, metavar="N")
    @argument("--launch-count", type=int, default=None, metavar="N")
    @argument(
        "--nvtx",
        default=None,
        metavar="RANGE",
        help="Only kernels inside this push/pop NVTX range (default domain; the name "
        "is escaped for ncu, so 'LLM@prefill' or 'a/b' work as written).",
    )
    @cell_magic
    def ncu(self, line: str, cell: str) -> Any:  # fmt: skip
        """Profile this cell's kernels with Nsight Compute (roofline set by default).

        Usage::

            %%ncu [--set roofline|basic|detailed|full] [--section S]... [--metrics M,...]
                  [--kernel REGEX] [--launch-skip N] [--launch-count N] [--nvtx RANGE]
                  [common options as %%nsys] [-- extra ncu arguments]

        Example::

            %%ncu --kernel gemm --launch-count 1 -o k
            c = a @ b

        Kernels launched inside the cell's NVTX range are profiled (setup and warm-up are
        not); ncu replays each kernel many times, so keep the cell small."""
        args, extra = self._parse(self.ncu, line)
        for flag in ("launch_skip", "launch_count"):
            if getattr(args, flag) is not None and getattr(args, flag) < 0:
                raise UsageError(f"--{flag.replace('_', '-')} must be >= 0")
        from .session.pipeline import profile_ncu

        tools.set_configured_path("ncu", self.ncu_path or None)
        kwargs = self._common_kwargs(args, extra)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        return self._deliver(
            args,
            lambda: profile_ncu(
                cell,
                set=None if args.set_ in ("none", "") else args.set_,
                sections=args.section,
                metrics=metrics,
                kernel=args.kernel,
                launch_skip=args.launch_skip,
                launch_count=args.launch_count,
                nvtx=args.nvtx,
                ncu_path=self.ncu_path or None,
                **kwargs,
            ),
        )

    @magic_arguments()
    @argument("--list", action="store_true", help="Show the recorded setup cells.")
    @argument("--clear", action="store_true", help="Forget all recorded setup cells.")
    @argument("--name", default="", help="Name; re-running a named setup cell replaces it.")
    @line_cell_magic
    def nsight_setup(self, line: str, cell: str | None = None) -> None:
        """Run this cell in the notebook as usual AND record it, so every later %%nsys /
        %%ncu script runs it first (outside the capture): imports, model, data.

        Usage::

            %%nsight_setup [--name NAME]      (cell: run it here and record it)
            %nsight_setup --list | --clear   (line: show or forget the records)

        Example::

            %%nsight_setup --name model
            import torch
            model = torch.nn.Linear(1024, 1024).cuda()"""
        args = self.nsight_setup.parser.parse_args(_split_extra(line)[0])
        if args.clear:
            n = REGISTRY.clear()
            print(f"Cleared {n} setup cell(s).")
        if args.list:
            print(REGISTRY.describe())
        if not cell or not cell.strip():
            return None
        result = self.shell.run_cell(cell, store_history=False) if self.shell else None
        if result is not None and not result.success:
            print("nsight_magic: the setup cell failed, so it was not recorded.", file=sys.stderr)
            return None
        REGISTRY.add(cell, name=args.name)
        return None


for _magic in (NsightMagic.nsys, NsightMagic.ncu):
    _magic.__doc__ = dedent(_magic.__doc__ or "") + "\n\n" + textwrap.fill(_NOT_RETURNED, 80)


def register(ip: Any) -> NsightMagic:
    """Register the magics and make ``%config NsightMagic`` work."""
    magics = NsightMagic(shell=ip)
    ip.register_magics(magics)
    if magics not in ip.configurables:
        ip.configurables.append(magics)
    return magics
