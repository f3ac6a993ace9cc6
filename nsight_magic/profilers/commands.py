"""The short profiler commands a warm session runs beside its worker, each bounded and with
the one profiler environment (``processes.clean_env.clean_env``): ``nsys start``/``cancel``/
``shutdown``, ``ncu --list-sets``, and an ``ncu --mode attach`` waited on until it is connected,
then stopped."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from pathlib import Path

from ..errors import ProfilerError
from ..processes import deadline, runner
from ..processes.child_signals import start_child
from ..processes.clean_env import clean_env, run_quiet
from ..run_folders.run_dir import RunDir, append_private
from . import ncu as ncu_argv
from . import nsys as nsys_argv


def log_line(run_dir: Path, text: str) -> None:
    RunDir(run_dir).append_log(text)


def run_cli(argv: list[str], run_dir: Path) -> subprocess.CompletedProcess[str]:
    """A short profiler CLI command (no injection variables), its output appended to the run's
    profiler.log, waiting at most ``deadline.CLI_S`` or what is left of --timeout;
    ProfilerError when it cannot run at all, the bound's error when it hangs."""
    limit = deadline.bound(deadline.CLI_S)
    try:
        done = run_quiet(argv, limit.seconds)
    except subprocess.TimeoutExpired:
        log_line(run_dir, f"$ {' '.join(argv)}\n[stopped after {limit.seconds:.1f} s]")
        raise limit.expired(f"`nsys {argv[1]}`", RunDir(run_dir).log) from None
    except OSError as exc:
        raise ProfilerError(f"{' '.join(argv[:2])} failed to run ({exc}); argv: {argv}") from exc
    log_line(run_dir, f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}[exit {done.returncode}]")
    return done


def shutdown_session(nsys: str, name: str, timeout: float | None = None) -> None:
    """``nsys shutdown NAME`` (no injection variables), so the session name does not linger in
    nsys's daemon; a hung or missing nsys is let go (with what it started) after ``timeout``,
    default ``deadline.SHUTDOWN_S`` or what is left of the cell's --timeout."""
    argv = nsys_argv.session_argv(nsys, "shutdown", name)
    seconds = deadline.bound(deadline.SHUTDOWN_S).seconds if timeout is None else timeout
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        run_quiet(argv, seconds)


def _listing(argv: list[str], give_up: float, limit: deadline.Bound) -> str:
    """What a listing command (``ncu --list-sets``, ``nsys profile --help``) prints, waiting
    until ``give_up`` (monotonic) at most: "" when it cannot say in that time (then nothing is
    refused), the --timeout's error when that is what ran out."""
    try:
        return run_quiet(argv, max(give_up - time.monotonic(), deadline.MIN_STEP_S)).stdout
    except OSError:
        return ""
    except subprocess.TimeoutExpired:
        if limit.timeout is not None:
            raise limit.expired(f"`{' '.join(argv)}`") from None
        return ""


@functools.lru_cache(maxsize=8)
def ncu_catalog(ncu: str) -> dict[str, frozenset[str]]:
    """{"set": ..., "section": ...} as ``ncu --list-sets`` / ``--list-sections`` print them,
    asked once per ncu; empty sets when ncu cannot say within ``deadline.CATALOG_S`` for both
    (then nothing is refused here), the --timeout's error when less was left of it."""
    limit = deadline.bound(deadline.CATALOG_S)
    give_up = time.monotonic() + limit.seconds
    out = {}
    for kind, flag in (("set", "--list-sets"), ("section", "--list-sections")):
        out[kind] = ncu_argv.listed_identifiers(_listing([ncu, flag], give_up, limit))
    return out


RELEASE_S = 180.0  # the worker's first CUDA call under ncu --mode launch
RELEASE_ATTACH_RETRY_S = 120.0  # ncu listens only once the worker is inside that call
DETACH_GRACE_S = 10.0  # an attach's exit after its SIGINT, before SIGTERM


def attach(argv: list[str], log: Path, retry_s: float = 0.0) -> subprocess.Popen[bytes]:
    """Start an ``ncu --mode attach`` and wait until it is connected to the worker; while
    ``retry_s`` lasts, "No attachable process found" (not listening yet) is tried again. The
    whole wait is bounded by ``max(retry_s, deadline.ATTACH_S)`` or what is left of --timeout,
    and the message says that bound."""
    limit = deadline.bound(max(retry_s, deadline.ATTACH_S))
    give_up = time.monotonic() + limit.seconds
    retry_until = time.monotonic() + min(retry_s, limit.seconds)
    while True:
        start = len(runner.read_log(log))
        with append_private(log) as out:
            proc = start_child(argv, clean_env(), stdout=out, stderr=subprocess.STDOUT)
        while time.monotonic() < give_up:
            text = runner.read_log(log)[start:]
            if "==PROF== Connected" in text:
                return proc
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        else:
            detach(proc)
            raise limit.expired("the ncu attach (connecting to the worker)", log)
        if "No attachable process" in text and time.monotonic() < retry_until:
            time.sleep(0.25)
            continue
        errors = runner.error_lines(text) or text.strip().splitlines()[-5:]
        raise ProfilerError(
            f"ncu could not attach to the profiling worker (exit {proc.returncode}): "
            f"{' | '.join(errors)}\nargv: {argv}\nlog: {log}"
        )


def detach(proc: subprocess.Popen[bytes]) -> None:
    """End an attach: SIGINT (it writes nothing more: the report is complete once the launches
    ran), escalating if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(DETACH_GRACE_S)
        except subprocess.TimeoutExpired:
            runner.stop_group(proc, proc.pid, (2.0, 2.0))


@functools.lru_cache(maxsize=8)
def nsys_profile_help(nsys: str) -> str:
    """``nsys profile --help`` of this nsys, asked once; "" when it cannot say within
    ``deadline.CATALOG_S`` (then nothing is refused)."""
    limit = deadline.bound(deadline.CATALOG_S)
    return _listing([nsys, "profile", "--help"], time.monotonic() + limit.seconds, limit)
