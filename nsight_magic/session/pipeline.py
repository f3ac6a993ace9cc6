"""The library the magics call: profile a cell with nsys or ncu, or one kernel of a saved run.

Order of work, so a mistake costs nothing: parse the cell and setup cells, find the tool,
serialize ``--vars`` - all before the run folder exists. Then: fresh run folder, script and
records, the profiler under ``runner.run``, the cell's status, export and load the report.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import runner, runs, tools
from ..errors import (
    CellFailedError,
    CorruptReportError,
    NothingCapturedError,
    NsightMagicError,
    ProfileInterrupted,
    ProfileTimeout,
)
from ..profilers import ncu as ncu_argv
from ..profilers import nsys as nsys_argv
from ..progress import Progress, ProgressParser, is_profiler_line
from ..script import build_script
from .history import REGISTRY
from .variables import pack_vars, parse_names, write_vars

ProgressCallback = Callable[[Progress], None]
OutputCallback = Callable[[str], None]

_versions: dict[str, tuple[int, ...] | None] = {}
_versions_lock = threading.Lock()


def _tool(name: tools.ToolName, configured: str | None) -> tools.Tool:
    """Locate and version-check once per path (``--version`` costs a second for ncu)."""
    path = tools.find_tool(name, configured)
    with _versions_lock:
        if path not in _versions:
            version = tools.tool_version(path)
            tools.check_version(name, version)
            _versions[path] = version
    return tools.Tool(name=name, path=path, version=_versions[path])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _child_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def _parse_env(env: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    """``{"K": "V"}`` or ``["K=V", ...]`` (the magic's repeatable --env) -> dict."""
    if env is None:
        return {}
    if isinstance(env, Mapping):
        return {str(k): str(v) for k, v in env.items()}
    out = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise NsightMagicError(f"--env {item!r}: expected KEY=VALUE.")
        out[key] = value
    return out


class _Lines:
    """The runner's line callback: feeds progress, passes the cell's own output on."""

    def __init__(
        self, tool: tools.ToolName, progress: ProgressCallback | None, output: OutputCallback | None
    ) -> None:
        self.parser = ProgressParser(tool)
        self.progress, self.output = progress, output

    def phase(self, phase: str, detail: str = "") -> None:
        self.parser.set_phase(phase, detail)
        if self.progress:
            self.progress(self.parser.state)

    def __call__(self, line: str) -> None:
        changed = self.parser.feed(line)
        if changed and self.progress:
            self.progress(self.parser.state)
        if self.output and line.strip() and not is_profiler_line(line):
            self.output(line)


def _prepare(
    cell: str,
    *,
    gate: str,
    user_ns: Mapping[str, Any] | None,
    vars: Sequence[str] | str,
    warmup: int,
    setup: bool | Sequence[str],
    name: str,
) -> tuple[str, bytes | None, list[str]]:
    """Script text and vars blob, or a typed error, before anything touches the disk."""
    setup_sources = REGISTRY.sources() if setup is True else list(setup or [])
    names = parse_names(vars)
    script = build_script(
        cell,
        setup_cells=setup_sources,
        vars_file="vars.pkl" if names else None,
        warmup=warmup,
        gate=gate,  # type: ignore[arg-type]
        cell_name=name,
    )
    blob = pack_vars(names, user_ns or {}) if names else None
    return script, blob, setup_sources


def _start_run(
    *,
    tool: tools.Tool,
    name: str,
    cell: str,
    script: str,
    blob: bytes | None,
    runs_root: str | Path | None,
    run_dir: Path | None = None,
) -> Path:
    run_dir = run_dir or runs.new_run_dir(runs_root, name)
    (run_dir / "cell.py").write_text(cell)
    (run_dir / "script.py").write_text(script)
    if blob is not None:
        write_vars(run_dir / "vars.pkl", blob)
    return run_dir


def _run_profiler(
    run_dir: Path,
    argv: list[str],
    env_set: dict[str, str],
    meta: dict[str, Any],
    *,
    cwd: str,
    timeout: float | None,
    cancel: threading.Event | None,
    lines: _Lines,
) -> runner.RunResult:
    runs.write_json(run_dir / "argv.json", argv)
    runs.write_json(run_dir / "env.json", env_set)
    runs.write_json(run_dir / runs.META, meta)
    lines.phase("starting")
    try:
        return runner.run(
            argv,
            log_path=run_dir / "profiler.log",
            env=_child_env(env_set),
            cwd=cwd,
            timeout=timeout,
            cancel=cancel,
            on_line=lines,
        )
    except (ProfileInterrupted, ProfileTimeout) as exc:
        result: runner.RunResult = exc.result  # type: ignore[attr-defined]
        runs.update_meta(
            run_dir,
            status="timeout" if isinstance(exc, ProfileTimeout) else result.outcome,
            finished_utc=_now(),
            runner=result.to_dict(),
            cell_status=runs.read_json(run_dir / "status.json"),
            partial_report=[p.name for p in run_dir.glob("report.*")],
        )
        raise


def _cell_failed(status: dict[str, Any], run_dir: Path, partial: Any) -> CellFailedError:
    where = {"cell": "The profiled cell", "warmup": "The cell (during warm-up)"}.get(
        status.get("phase", ""), f"A {status.get('phase', 'setup')} step"
    )
    err = CellFailedError(
        f"{where} raised {status.get('exc_type')}: {status.get('exc_message')}\n"
        f"{status.get('traceback', '').rstrip()}\n(run folder: {run_dir})"
    )
    err.traceback = status.get("traceback", "")  # type: ignore[attr-defined]
    err.exc_type = status.get("exc_type")  # type: ignore[attr-defined]
    err.run = partial  # type: ignore[attr-defined]
    return err


def _finish(run_dir: Path, meta: dict[str, Any], t0: float, **fields: Any) -> dict[str, Any]:
    meta.update(fields)
    meta["finished_utc"] = _now()
    meta.setdefault("timings", {})["total_s"] = time.perf_counter() - t0
    return runs.update_meta(run_dir, **meta)


def _base_meta(
    tool: tools.Tool, name: str, python: str, cwd: str, warmup: int, names: Sequence[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "tool": tool.name,
        "status": "running",
        "started_utc": _now(),
        "cwd": cwd,
        "python": python,
        "warmup": warmup,
        "vars": list(names),
        "versions": runs.versions({tool.name: tool.version_text, f"{tool.name}_path": tool.path}),
        "gpus": tools.gpu_info(),
        "timings": {},
        "children": [],
    }


def _export_nsys(rep: Path, nsys: str | Path, lines: _Lines) -> Path:
    """The .nsys-rep as a parquet dir (columnar: 1M kernels load 3.4x faster than from SQLite,
    benchmarks/README.md), or as SQLite where this nsys cannot write parquet."""
    from ..reports.nsys.export import export_report

    lines.phase("exporting", "nsys export --type parquetdir")
    try:
        return export_report(rep, "parquetdir", out=rep.parent / "report_pq", nsys=nsys)
    except CorruptReportError:
        lines.phase("exporting", "nsys export --type sqlite")
        return export_report(rep, "sqlite", nsys=nsys)


def profile_nsys(
    cell: str,
    *,
    user_ns: Mapping[str, Any] | None = None,
    name: str | None = None,
    warmup: int = 0,
    vars: Sequence[str] | str = (),
    trace: str | Sequence[str] = nsys_argv.DEFAULT_TRACE,
    env: Mapping[str, str] | Sequence[str] | None = None,
    python: str = sys.executable,
    timeout: float | None = None,
    extra_args: Sequence[str] = (),
    setup: bool | Sequence[str] = True,
    runs_root: str | Path | None = None,
    progress: ProgressCallback | None = None,
    output: OutputCallback | None = None,
    cancel: threading.Event | None = None,
    nsys_path: str | None = None,
    cwd: str | None = None,
) -> Any:
    """Profile ``cell`` under Nsight Systems; returns an ``NsysRun``. ``setup`` is True (replay
    the %%nsight_setup cells), False, or a list of setup sources. Raises the typed errors of
    ``errors.py``; the run folder records what happened either way."""
    t0 = time.perf_counter()
    name = name or "cell"
    trace = nsys_argv.parse_trace(trace)
    env_user = _parse_env(env)
    script, blob, setup_sources = _prepare(
        cell, gate="nsys", user_ns=user_ns, vars=vars, warmup=warmup, setup=setup, name=name
    )
    tool = _tool("nsys", nsys_path)
    cwd = cwd or os.getcwd()
    run_dir = _start_run(
        tool=tool, name=name, cell=cell, script=script, blob=blob, runs_root=runs_root
    )
    base = run_dir / "report"
    argv = nsys_argv.profile_argv(
        tool.path,
        base,
        run_dir / "script.py",
        python=python,
        trace=trace,
        extra_args=extra_args,
        script_args=[str(run_dir / "status.json")],
    )
    env_set = {**nsys_argv.NSYS_ENV, "PYTHONUNBUFFERED": "1", **env_user}
    meta = _base_meta(tool, name, python, cwd, warmup, parse_names(vars))
    meta.update(setup_cells=len(setup_sources), trace=list(trace))
    meta["timings"]["prepare_s"] = time.perf_counter() - t0
    lines = _Lines("nsys", progress, output)
    t1 = time.perf_counter()
    result = _run_profiler(
        run_dir, argv, env_set, meta, cwd=cwd, timeout=timeout, cancel=cancel, lines=lines
    )
    meta["timings"]["profile_s"] = time.perf_counter() - t1
    meta["runner"] = result.to_dict()
    status = runs.read_json(run_dir / "status.json", {}) or {}
    meta["cell_status"] = status
    rep = base.with_suffix(".nsys-rep")

    def load() -> Any:
        t2 = time.perf_counter()
        exported = _export_nsys(rep, tool.path, lines)
        meta["timings"]["export_s"] = time.perf_counter() - t2
        lines.phase("loading")
        t3 = time.perf_counter()
        from ..reports import open_report
        from ..results import NsysRun

        report = open_report(exported)
        meta["timings"]["load_s"] = time.perf_counter() - t3
        meta["report"] = exported.name
        return NsysRun(report, run_dir, meta)

    if status.get("status") == "error":
        partial = None
        if rep.exists():
            try:
                partial = load()
            except Exception:  # a half-written report must not hide the user's error
                partial = None
        meta = _finish(run_dir, meta, t0, status="cell_failed")
        if partial is not None:
            partial.meta = meta
        raise _cell_failed(status, run_dir, partial)
    try:
        runner.raise_for_profiler(result, "nsys")
        if not rep.exists():
            why = (
                "the script found no CUDA device (torch.cuda unavailable and no libcudart), so "
                "the capture range never started"
                if status.get("gate_kind") == "none"
                else "the cell ran no CUDA work, so nsys wrote no report"
            )
            raise NothingCapturedError(
                f"Nothing was captured: {why}. Log: {run_dir / 'profiler.log'}"
            )
        run = load()
        rep_obj = run.report
        if rep_obj.kernels().empty and rep_obj.memcpy().empty and rep_obj.memset().empty:
            raise NothingCapturedError(
                "Nothing was captured: the cell launched no kernels and made no copies on the "
                f"GPU (is it running on the CPU?). Report: {run_dir}"
            )
    except NsightMagicError as exc:
        _finish(run_dir, meta, t0, status="failed", error=f"{type(exc).__name__}: {exc}")
        raise
    run.meta = _finish(run_dir, meta, t0, status="ok")
    lines.phase("done")
    return run


def _load_ncu(run_dir: Path, meta: dict[str, Any], lines: _Lines) -> Any:
    lines.phase("loading")
    t = time.perf_counter()
    from ..reports.ncu.report import NcuReport
    from ..results import NcuRun

    report = NcuReport.open(run_dir / "report.ncu-rep")
    meta.setdefault("timings", {})["load_s"] = time.perf_counter() - t
    meta["report"] = "report.ncu-rep"
    return NcuRun(report, run_dir, meta)


def _ncu_outcome(
    run_dir: Path,
    meta: dict[str, Any],
    result: runner.RunResult,
    lines: _Lines,
    t0: float,
    filter_text: str,
) -> Any:
    """Shared tail of profile_ncu / profile_kernel: status, errors, nothing-captured, load."""
    status = runs.read_json(run_dir / "status.json", {}) or {}
    meta["cell_status"] = status
    meta["runner"] = result.to_dict()
    rep = run_dir / "report.ncu-rep"
    if status.get("status") == "error":
        partial = None
        if rep.exists():
            try:
                partial = _load_ncu(run_dir, meta, lines)
            except Exception:
                partial = None
        meta = _finish(run_dir, meta, t0, status="cell_failed")
        if partial is not None:
            partial.meta = meta
        raise _cell_failed(status, run_dir, partial)
    try:
        runner.raise_for_profiler(result, "ncu")
        log = runner.read_log(result.log_path)
        if not rep.exists() or "No kernels were profiled" in log:
            hint = (
                " (the script could not import nvtx, so no range exists)"
                if not status.get("nvtx", True)
                else ""
            )
            raise NothingCapturedError(
                f"Nothing was captured: no kernel launch matched {filter_text}{hint}. "
                f"Log: {result.log_path}"
            )
        run = _load_ncu(run_dir, meta, lines)
        if len(run.report) == 0:
            raise NothingCapturedError(f"The ncu report is empty: {filter_text} matched nothing.")
    except NsightMagicError as exc:
        _finish(run_dir, meta, t0, status="failed", error=f"{type(exc).__name__}: {exc}")
        raise
    run.meta = _finish(run_dir, meta, t0, status="ok")
    lines.phase("done")
    return run


def _describe_filter(argv: Sequence[str]) -> str:
    parts = []
    for flag in ("--nvtx-include", "--kernel-name", "--launch-skip", "--launch-count"):
        if flag in argv:
            parts.append(f"{flag} {argv[argv.index(flag) + 1]!r}")
    return "the filter " + " ".join(parts) if parts else "any kernel"


def profile_ncu(
    cell: str,
    *,
    user_ns: Mapping[str, Any] | None = None,
    name: str | None = None,
    warmup: int = 0,
    vars: Sequence[str] | str = (),
    set: str | None = "roofline",
    sections: Sequence[str] = (),
    metrics: Sequence[str] = (),
    kernel: str | None = None,
    launch_skip: int | None = None,
    launch_count: int | None = None,
    nvtx: str | None = None,
    nvtx_domain: str | None = None,
    env: Mapping[str, str] | Sequence[str] | None = None,
    python: str = sys.executable,
    timeout: float | None = None,
    extra_args: Sequence[str] = (),
    setup: bool | Sequence[str] = True,
    runs_root: str | Path | None = None,
    progress: ProgressCallback | None = None,
    output: OutputCallback | None = None,
    cancel: threading.Event | None = None,
    ncu_path: str | None = None,
    cwd: str | None = None,
) -> Any:
    """Profile ``cell`` under Nsight Compute; returns an ``NcuRun``. Kernels inside the cell's
    NVTX range are profiled, or those inside ``nvtx`` (a push/pop range name, in
    ``nvtx_domain`` or the default domain, escaped for ncu). ``kernel`` is a regex."""
    t0 = time.perf_counter()
    name = name or "cell"
    env_user = _parse_env(env)
    script, blob, setup_sources = _prepare(
        cell, gate="ncu", user_ns=user_ns, vars=vars, warmup=warmup, setup=setup, name=name
    )
    nvtx_include = ncu_argv.nvtx_filter(nvtx, domain=nvtx_domain) if nvtx else ncu_argv.CELL_FILTER
    tool = _tool("ncu", ncu_path)
    cwd = cwd or os.getcwd()
    run_dir = _start_run(
        tool=tool, name=name, cell=cell, script=script, blob=blob, runs_root=runs_root
    )
    argv = ncu_argv.profile_argv(
        tool.path,
        run_dir / "report",
        run_dir / "script.py",
        python=python,
        set=set,
        sections=sections,
        metrics=metrics,
        kernel_regex=kernel,
        launch_skip=launch_skip,
        launch_count=launch_count,
        nvtx_include=nvtx_include,
        extra_args=extra_args,
        script_args=[str(run_dir / "status.json")],
    )
    env_set = {"PYTHONUNBUFFERED": "1", **env_user}
    meta = _base_meta(tool, name, python, cwd, warmup, parse_names(vars))
    meta.update(
        setup_cells=len(setup_sources),
        set=set,
        sections=list(sections),
        metrics=list(metrics),
        kernel=kernel,
        nvtx_include=nvtx_include,
    )
    meta["timings"]["prepare_s"] = time.perf_counter() - t0
    lines = _Lines("ncu", progress, output)
    t1 = time.perf_counter()
    result = _run_profiler(
        run_dir, argv, env_set, meta, cwd=cwd, timeout=timeout, cancel=cancel, lines=lines
    )
    meta["timings"]["profile_s"] = time.perf_counter() - t1
    return _ncu_outcome(run_dir, meta, result, lines, t0, _describe_filter(argv))


def profile_kernel(
    parent_run: Any,
    kernel_name: str,
    *,
    set: str | None = "roofline",
    instance: int = 0,
    count: int = 1,
    sections: Sequence[str] = (),
    metrics: Sequence[str] = (),
    timeout: float | None = None,
    extra_args: Sequence[str] = (),
    progress: ProgressCallback | None = None,
    output: OutputCallback | None = None,
    cancel: threading.Event | None = None,
    ncu_path: str | None = None,
) -> Any:
    """Re-run the parent's saved script under ncu for one kernel (exact, anchored name;
    ``instance`` = which launch of it inside the cell, 0-based). The child run lives in
    ``<parent>/ncu/<time>-<kernel>/`` and is listed in the parent's meta.json."""
    t0 = time.perf_counter()
    if isinstance(parent_run, (str, os.PathLike)):
        parent_dir = Path(parent_run)
    elif getattr(parent_run, "run_dir", None) is not None:
        parent_dir = Path(parent_run.run_dir)
    else:  # a run opened from a report file: there is no saved cell to re-run
        raise NsightMagicError(
            "This run was opened from a report file, not profiled here, so there is no saved "
            "cell to re-run under ncu; profile the cell with %%nsys first, or use %%ncu."
        )
    script = parent_dir / "script.py"
    if not script.exists():
        raise NsightMagicError(
            f"{parent_dir} has no script.py, so its cell cannot be re-run; profile the cell again."
        )
    parent_meta = runs.read_json(parent_dir / runs.META, {}) or {}
    parent_env = runs.read_json(parent_dir / "env.json", {}) or {}
    tool = _tool("ncu", ncu_path)
    run_dir = runs.child_run_dir(parent_dir, kernel_name)
    python = parent_meta.get("python") or sys.executable
    cwd = parent_meta.get("cwd") or os.getcwd()
    argv = ncu_argv.profile_argv(
        tool.path,
        run_dir / "report",
        script,
        python=python,
        set=set,
        sections=sections,
        metrics=metrics,
        kernel_exact=kernel_name,
        launch_skip=instance,
        launch_count=count,
        nvtx_include=ncu_argv.CELL_FILTER,
        extra_args=extra_args,
        script_args=[str(run_dir / "status.json")],
    )
    env_set = {k: v for k, v in parent_env.items() if not k.startswith("NSYS_")}
    meta = _base_meta(
        tool,
        f"{parent_meta.get('name', 'cell')}:{kernel_name}",
        python,
        cwd,
        int(parent_meta.get("warmup") or 0),
        parent_meta.get("vars") or [],
    )
    meta.update(
        parent_run=str(parent_dir),
        kernel=kernel_name,
        instance=instance,
        count=count,
        set=set,
        sections=list(sections),
        metrics=list(metrics),
    )
    lines = _Lines("ncu", progress, output)
    t1 = time.perf_counter()
    try:
        result = _run_profiler(
            run_dir, argv, env_set, meta, cwd=cwd, timeout=timeout, cancel=cancel, lines=lines
        )
    finally:
        wall = time.perf_counter() - t1
        meta["timings"]["profile_s"] = meta["wall_s"] = wall
        runs.add_child(
            parent_dir,
            {
                "run_dir": str(run_dir.relative_to(parent_dir)),
                "kernel": kernel_name,
                "instance": instance,
                "set": set,
                "wall_s": wall,
                "started_utc": meta["started_utc"],
            },
        )
    return _ncu_outcome(run_dir, meta, result, lines, t0, _describe_filter(argv))
