"""The differential cases' process server: it imports IPython, nsight_magic's magics and the
bare backends once (about 4 s), then forks one child per side of each case, so a side starts
in milliseconds from a fresh interpreter state that nothing else ran in.

Protocol (one JSON line each way, on stdin/stdout): a job ``{"sides": [{"side", "cells",
"base", "runs_dir", "out", "log"}, ...], "timeout": s}``; the reply ``{"rc": {side: code}}``
once every side of the job ended (code -9: it ran past ``timeout`` and its process group was
killed). Each child runs in a session of its own (its process group: what it starts that
stays in the group is killed with it; the product's own workers end with their notebook) and
writes only to its log, never to this process's stdout. End: EOF on stdin."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # diff_*.py, tests/session_support.py

os.environ.setdefault("NSIGHT_MAGIC_STRICT", "1")  # as tests/conftest.py sets it

# what every side imports, imported once here (a side imports nothing of this again)
import diff_canon  # noqa: E402, F401
import diff_sides  # noqa: E402
import IPython.core.interactiveshell  # noqa: E402, F401
import numpy  # noqa: E402, F401
import pandas  # noqa: E402, F401
import session_support  # noqa: E402, F401


def child(side: dict[str, object]) -> None:
    """In the forked child: its own session, its output to its log, then the side."""
    code = 1
    try:
        os.setsid()
        log = os.open(str(side["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        diff_sides.run_side(str(side["side"]), list(side["cells"]),  # type: ignore[call-overload]
                            str(side["base"]), str(side["runs_dir"]), str(side["out"]))  # fmt: skip
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_job(job: dict[str, object]) -> dict[str, object]:
    if threading.active_count() != 1:  # forking a process with threads copies locks held
        raise RuntimeError(f"the zygote has {threading.active_count()} threads; it must have 1")
    pids: dict[int, str] = {}
    for side in job["sides"]:  # type: ignore[attr-defined]
        pid = os.fork()
        if pid == 0:
            child(side)
        pids[pid] = side["side"]
    deadline = time.monotonic() + float(job.get("timeout", 300))  # type: ignore[arg-type]
    codes: dict[str, int] = {}
    while pids:
        for pid in list(pids):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
        if pids and time.monotonic() > deadline:
            for pid in list(pids):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                codes[pids.pop(pid)] = -9
        time.sleep(0.02)
    return {"rc": codes}


def main() -> None:
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run_job(json.loads(line))
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
