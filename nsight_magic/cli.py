"""``nsight-magic``: the saved runs from a shell, no notebook and no GPU needed; a CI gates on it.

    nsight-magic compare RUN_A RUN_B [--fail-if-slower 5%] [--only NAME]... [--format F]
    nsight-magic summary RUN [--top N] [--format F]

(also ``python -m nsight_magic``). ``RUN`` is a run folder (saved or shared: what ``%%nsys``
wrote, ``load_run`` opens) or an nsys report (a file, or a parquet export folder: what
``open_report`` opens). ``compare`` prints ``compare()``'s verdict
(``analysis.verdict``) and exits 1 when the total kernel time, or any kernel or NVTX range named
by ``--only``, is slower beyond noise (its whole 95% interval above 1) and by more than
``--fail-if-slower`` (default 0%); 0 otherwise; 2 on bad input (a path that is no run or
cannot be read, a damaged report, an ``--only`` name neither run has: one line on stderr).
``--format`` is ``text`` (default), ``markdown`` (a CI comment) or ``json``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .vocabulary.columns import REPEAT_SHOWN

OK, REGRESSED, BAD_INPUT = 0, 1, 2
FORMATS = ("text", "markdown", "json")
SHOWN = ["change", "ratio", "ratio_lo", "ratio_hi", "instances_a", "instances_b", "total_ns_a",
         "total_ns_b", "interval_from"]  # fmt: skip


class BadInput(Exception):
    """What the command says before exiting 2."""


def _threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05. A bare number above 1 (``5``) is refused: it would mean
    500%, and was surely meant as 5%."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1]) / 100 if percent else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no threshold: write 5% or 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a threshold is a finite share >= 0")
    if not percent and value > 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a bare number is a share (0.05 = 5%), so this would be {value:.0%}; "
            f"write {raw}% or {value / 100:g} (or {value:.0%} itself, with its %)"
        )
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="nsight-magic", description=(__doc__ or "").split("\n\n")[0].strip()
    )
    commands = top.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="run B against run A: what changed beyond noise")
    cmp.add_argument("run_a", help="the baseline: a run folder or an nsys report")
    cmp.add_argument("run_b", help="the candidate")
    cmp.add_argument(
        "--fail-if-slower",
        type=_threshold,
        default=0.0,
        metavar="PCT",
        help="exit 1 only when slower beyond noise by more than this: 5%% or 0.05 (a bare "
        "number above 1 is refused: write 500%% for 500%%)",
    )
    cmp.add_argument("--only", action="append", default=[], metavar="NAME",
                     help="gate on this kernel (name or short name) or NVTX range (domain:range "
                          "or range) instead of the total; repeatable")  # fmt: skip
    cmp.add_argument("--top", type=int, default=10, help="rows of each table (default 10)")
    cmp.add_argument("--format", choices=FORMATS, default="text")
    summ = commands.add_parser("summary", help="one run: its kernels and NVTX ranges")
    summ.add_argument("run", help="a run folder or an nsys report")
    summ.add_argument("--top", type=int, default=10, help="rows of each table (default 10)")
    summ.add_argument("--format", choices=FORMATS, default="text")
    return top


def _open(path: str) -> Any:
    """The run at ``path``: a run folder (``load_run``), or a report: a file or a parquet
    export folder (``x_pq/``, ``open_report``'s: a folder with ``.parquet`` tables in it)."""
    import nsight_magic
    from nsight_magic.errors import NsightMagicError
    from nsight_magic.reports.paths import is_parquet_export

    where = Path(path)
    if not where.exists():
        raise BadInput(f"{path}: no such run folder or report")
    a_run = where.is_dir() and not is_parquet_export(where)
    try:
        run = nsight_magic.load_run(where) if a_run else nsight_magic.open_report(where)
    except NsightMagicError as exc:
        raise BadInput(f"{path}: {exc.one_line()}") from None
    if not hasattr(run, "kernel_summary") or not hasattr(run, "nvtx_gpu_projection"):
        raise BadInput(f"{path} is a {type(run).__name__}, not an nsys run: compare and summary "
                       "read nsys runs (kernel and NVTX times)")  # fmt: skip
    return run


@dataclass
class Gate:
    """What ``--fail-if-slower`` / ``--only`` found: the rows that regressed."""

    regressed: list[str]
    checked: list[str]

    def line(self, threshold: float) -> str:
        if self.regressed:
            return (f"FAIL: slower beyond noise and by more than {threshold:.1%}: "
                    + "; ".join(self.regressed))  # fmt: skip
        return (f"OK: {', '.join(self.checked)}: not slower beyond noise and by more than "
                f"{threshold:.1%}")  # fmt: skip


def _slower(row: Any, threshold: float) -> bool:
    return row["change"] == "slower" and float(row["ratio"]) - 1 > threshold


def gate(cmp: Any, only: Sequence[str], threshold: float) -> Gate:
    """The rows ``--only`` names (the total when none) that are slower beyond noise and the
    threshold. A name neither run has is ``BadInput``."""
    if not only:
        v = cmp.verdict
        total = {"change": v.change, "ratio": v.ratio}
        why = f"total GPU time {v.ratio:.3f}x ({v.lo:.3f}-{v.hi:.3f})"
        return Gate([why] if _slower(total, threshold) else [], ["the total GPU time"])
    regressed = []
    for name in only:
        rows = _named(cmp, name)
        if not rows:
            raise BadInput(f"--only {name!r}: no kernel or NVTX range of either run is named so")
        for label, row in rows:
            if _slower(row, threshold):
                lo, hi = float(row["ratio_lo"]), float(row["ratio_hi"])
                regressed.append(f"{label} {float(row['ratio']):.3f}x ({lo:.3f}-{hi:.3f})")
    return Gate(regressed, list(only))


def _named(cmp: Any, name: str) -> list[tuple[str, Any]]:
    """The kernels (name or short name) and NVTX ranges ``name`` names: a range by any name
    either run's own table shows (``analysis.compare.nvtx_row_names``: a statement that moved
    between the runs is ``L1: ...`` in one and ``L2: ...`` in the other) or by the
    comparison's label (``L1->L2: ...``)."""
    from nsight_magic.analysis.compare import nvtx_row_names

    k, n = cmp.kernels, cmp.nvtx
    kernels = k[(k["name"] == name) | (k["short_name"] == name)]
    names = nvtx_row_names(n)
    ranges = [r for (_, r), known in zip(n.iterrows(), names, strict=True) if name in known]
    return ([(str(r["short_name"]), r) for _, r in kernels.iterrows()]
            + [(str(r["label"]), r) for r in ranges])  # fmt: skip


def _table(frame: Any, key: str, columns: list[str], top: int, fmt: str) -> str:
    shown = frame[[key, *[c for c in columns if c in frame.columns]]].head(top).copy()
    for col in shown.columns:  # ratios as 0.762x, no interval blank, times as whole ns
        if col.startswith("ratio"):
            shown[col] = [f"{v:.3f}x" if v == v else "" for v in shown[col].astype(float)]
    return _markdown(shown) if fmt == "markdown" else shown.to_string(index=False)


def _markdown(frame: Any) -> str:
    """A markdown table (pandas' to_markdown needs tabulate, which is no dependency: the same
    table whatever is installed)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def _records(frame: Any, key: str, columns: list[str]) -> list[dict[str, Any]]:
    keep = [key, *[c for c in columns if c in frame.columns]]
    return json.loads(frame[keep].to_json(orient="records"))


def compare_command(args: argparse.Namespace) -> int:
    import nsight_magic

    run_a, run_b = _open(args.run_a), _open(args.run_b)
    cmp = nsight_magic.compare(run_a, run_b)
    result = gate(cmp, args.only, args.fail_if_slower)
    if args.format == "json":
        v = cmp.verdict
        print(json.dumps({
            "a": cmp.label_a, "b": cmp.label_b, "summary": cmp.summary(),
            "ratio": v.ratio, "ratio_lo": v.lo, "ratio_hi": v.hi, "change": v.change,
            "regressed": result.regressed, "gate": result.line(args.fail_if_slower),
            "kernels": _records(cmp.kernels, "name", SHOWN),
            "nvtx": _records(cmp.nvtx, "label", SHOWN),
        }, indent=2, default=str))  # fmt: skip
    else:
        head = "## " if args.format == "markdown" else ""
        print(f"{head}{cmp.label_a} -> {cmp.label_b}: {cmp.summary()}\n")
        print(f"{head}Kernels (largest change first)\n")
        print(_table(cmp.kernels, "short_name", SHOWN, args.top, args.format) + "\n")
        if len(cmp.nvtx):
            print(f"{head}NVTX ranges (GPU-projected)\n")
            print(_table(cmp.nvtx, "label", SHOWN, args.top, args.format) + "\n")
        print(result.line(args.fail_if_slower))
    return REGRESSED if result.regressed else OK


def summary_command(args: argparse.Namespace) -> int:
    run = _open(args.run)
    kernels = run.kernel_summary()
    nvtx = run.nvtx_gpu_projection()
    stats = getattr(run, "repeat_stats", None)  # %%nsys --repeat N: its one line
    # a --repeat run's: the time per repeat, its 95% interval and spread (docs/repeats.md)
    columns = ["instances", "total_ns", "avg_ns", "time_pct", *REPEAT_SHOWN]
    range_columns = ["domain", "instances", "proj_total_ns", *REPEAT_SHOWN]
    if args.format == "json":
        print(json.dumps({"repeats": stats.line() if stats is not None else None,
                          "kernels": _records(kernels, "name", columns),
                          "nvtx": _records(nvtx, "range", range_columns)},
                         indent=2, default=str))  # fmt: skip
        return OK
    head = "## " if args.format == "markdown" else ""
    total = int(kernels["total_ns"].sum()) if len(kernels) else 0
    print(f"{head}{args.run}: {len(kernels)} kernel names, {total / 1e6:,.3f} ms of kernel time\n")
    if stats is not None:
        print(stats.line() + "\n")
    key = "short_name" if "short_name" in kernels.columns else "name"
    print(_table(kernels, key, columns, args.top, args.format) + "\n")
    if len(nvtx):
        print(f"{head}NVTX ranges\n")
        print(_table(nvtx, "range", range_columns, args.top, args.format))
    return OK


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status (argparse's own errors exit 2 as well). Every error of the
    package (``NsightMagicError``: a damaged report found while reading its tables, not only
    while opening it) and every ``OSError`` (a path too long to look at) is one line on stderr
    and exit 2, never a traceback; the output is printed once it is whole, so an error prints
    no half table."""
    from nsight_magic.errors import NsightMagicError

    args = parser().parse_args(argv)
    if getattr(args, "top", 1) < 1:
        return _bad_input("--top is a count >= 1")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            status = compare_command(args) if args.command == "compare" else summary_command(args)
    except BadInput as exc:
        return _bad_input(str(exc))
    except NsightMagicError as exc:
        return _bad_input(exc.one_line())
    except OSError as exc:
        return _bad_input(f"{type(exc).__name__}: {exc}")
    _write(out.getvalue())
    return status


def _bad_input(line: str) -> int:
    print(f"nsight-magic: {line}", file=sys.stderr)
    return BAD_INPUT


def _write(text: str) -> None:
    """``text`` to stdout; a reader that stopped reading (``nsight-magic summary RUN | head
    -1``) ends it quietly, as Python's documentation advises for a command (SIGPIPE): stdout
    is pointed at /dev/null so that the interpreter's own flush at exit does not fail again.
    The exit status stays the command's own (1 means slower here, not a closed pipe)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover - python -m nsight_magic.cli
    raise SystemExit(main())
