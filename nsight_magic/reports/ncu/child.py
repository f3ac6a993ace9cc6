"""Run ``python -m nsight_magic.reports.ncu.extract`` on a ``.ncu-rep`` in a child process and load
its plain data back; a crash, timeout or failure of the child becomes a typed error.

Why a child: ``ncu_report`` is native code that calls ``abort()`` on some damaged files, which
would take the user's Jupyter kernel down with it (see ``extract.py``)."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ...errors import CorruptReportError, ToolNotFoundError
from ...package_info import pythonpath_with_package
from ...processes.child_signals import run_bounded
from ...processes.clean_env import clean_env
from ...vocabulary.magic_names import cell_magic
from . import extract as X

__all__ = ["EXTRACT_TIMEOUT_S", "PlainUnpickler", "extract_in_child", "timeout_for"]

EXTRACT_TIMEOUT_S = 120.0  # plus 1 s per 50 MB of report (see timeout_for)


class PlainUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only: the child's output never needs a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in the extracted data")


def timeout_for(size: int) -> float:
    """Seconds the child may take on a report of ``size`` bytes."""
    return EXTRACT_TIMEOUT_S + size / 50e6


def extract_in_child(path: Path, timeout: float, known_damage: str = "") -> dict[str, Any]:
    """Run the extraction child on ``path``; its data, or the typed error for what went wrong
    (``known_damage``, what the caller already found wrong with the file, is added to it)."""

    def damaged(message: str) -> CorruptReportError:
        return CorruptReportError(f"{message} ({known_damage})" if known_damage else message)

    env = clean_env()  # the reader is no profiled process: no LD_PRELOAD, CUDA_INJECTION*
    env["PYTHONPATH"] = pythonpath_with_package(env)
    with tempfile.TemporaryDirectory(prefix="nsight-magic-ncu-") as tmp:  # private (0700)
        out = Path(tmp) / "extract.pkl"
        argv = [
            sys.executable,
            "-m",
            X.MODULE,
            str(path.resolve()),
            str(out),
        ]
        try:
            proc = run_bounded(argv, timeout, env, cwd=tmp, text=False, stdout=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise damaged(
                f"{path}: ncu_report did not finish reading it within {timeout:.0f} s; the file "
                "is damaged or unusually large (pass a larger timeout= to NcuReport.open)."
            ) from exc
        except OSError as exc:
            raise CorruptReportError(
                f"{path}: cannot start a Python child to read it ({exc})."
            ) from exc
        stderr = proc.stderr.decode(errors="replace").strip()
        detail = stderr.splitlines()[-1] if stderr else ""
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = f"signal {-proc.returncode}"
            raise damaged(
                f"{path} is damaged: ncu_report crashed reading it ({sig}); "
                f"re-run {cell_magic('ncu')}."
            )
        if proc.returncode == X.EXIT_NO_MODULE:
            raise ToolNotFoundError(
                f"The ncu_report module is missing ({detail}); install it with "
                "`pip install ncu-report`."
            )
        if proc.returncode != 0:
            raise damaged(
                f"{path}: ncu_report cannot read it ({detail or f'exit {proc.returncode}'})."
            )
        try:
            with open(out, "rb") as fh:
                data = PlainUnpickler(fh).load()
        except Exception as exc:
            raise CorruptReportError(
                f"{path}: the data read from it could not be loaded back ({exc})."
            ) from exc
    if not _valid(data):
        raise CorruptReportError(f"{path}: the data read from it is not in the expected layout.")
    return data


def _valid(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("format") != X.FORMAT:
        return False
    launches, units = data.get("launches"), data.get("units")
    if not isinstance(launches, list) or not isinstance(units, dict):
        return False
    if not isinstance(data.get("rules_supported"), bool):
        return False
    keys = {"function", "demangled", "mangled", "metrics", "sections", "nvtx", "rules"}
    return all(
        isinstance(launch, dict)
        and keys <= launch.keys()
        and isinstance(launch["metrics"], dict)
        and isinstance(launch["sections"], list)
        and isinstance(launch["nvtx"], list)
        and isinstance(launch["rules"], list)
        for launch in launches
    )
