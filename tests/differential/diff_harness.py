"""The test side of the differential suite: a ``Case`` (cells, files, what the product is
known to do differently), the zygote that runs its two sides, and the comparison with a
readable diff. README.md says how to read and add cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from diff_canon import RESULT

HERE = Path(__file__).resolve().parent
SIDES = ("plain", "profiled")
# a side's whole run: generous, for a loaded 2-core machine (a case takes ~1 s alone)
SIDE_TIMEOUT_S = 240.0
# what a dump holds, compared in this order
FIELDS = ("error", "stdout", "stderr", "names", "modules", "rng", "files", "cwd", "environ",
          "print_options")  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One differential case: ``cells`` run on both sides, compared after each.

    ``files``: written into each side's folder first (name -> text). ``known_difference``:
    the product differs here today (why, in a few words): the case is an xfail(strict=True),
    so a fix shows as an XPASS. ``declared``: (cell index from 0, phrase): the product is
    designed to refuse that cell; its profiled output must contain the phrase, the cells
    before it are compared as usual and none after it. ``stdout_differs``: indices of cells
    whose stdout has no plain equivalent (a sweep prints each configuration's output)."""

    id: str
    cells: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    known_difference: str | None = None
    declared: tuple[int, str] | None = None
    torch: bool = False

    def param(self) -> Any:
        marks: list[Any] = []
        if self.known_difference:
            marks.append(pytest.mark.xfail(strict=True, reason=self.known_difference))
        if self.torch:
            marks.append(pytest.mark.torch)
        return pytest.param(self, id=self.id, marks=marks)


class Zygote:
    """diff_zygote.py, started once per pytest process; restarted if it died."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / "diff_zygote.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                cwd=str(self.log.parent), env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if not ready.startswith('{"ready"'):
            self.close()
            raise RuntimeError(f"the zygote did not start: {self.log.read_text()[-3000:]}")

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            self.close()
            raise RuntimeError(f"the zygote died: {self.log.read_text()[-3000:]}")
        return json.loads(reply)  # type: ignore[no-any-return]

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout:
                proc.stdout.close()


def run_case(zygote: Zygote, cells: list[str], files: dict[str, str], tmp: Path
             ) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Both sides of a case: side -> its dumps (one per cell)."""
    sides = []
    for side in SIDES:
        root = tmp / side
        base = root / "notebook"
        base.mkdir(parents=True)
        for name, text in files.items():
            (base / name).write_text(text)
        sides.append({"side": side, "cells": cells, "base": str(base),
                      "runs_dir": str(root / "runs"), "out": str(root / "dumps.json"),
                      "log": str(root / "log.txt")})  # fmt: skip
    reply = zygote.run({"sides": sides, "timeout": SIDE_TIMEOUT_S})
    if "error" in reply:
        raise RuntimeError(reply["error"])
    found: dict[str, list[dict[str, Any]]] = {}
    for spec in sides:
        side, out, log = spec["side"], Path(spec["out"]), Path(spec["log"])
        code = reply["rc"].get(side)
        dumps = json.loads(out.read_text()) if out.exists() else []
        broken = [d["harness_error"] for d in dumps if "harness_error" in d]
        if code != 0 or broken or len(dumps) != len(cells):
            tail = log.read_text()[-4000:] if log.exists() else ""
            raise AssertionError(
                f"the {side} side did not finish (exit {code}, {len(dumps)} of {len(cells)} "
                f"cells):\n{''.join(broken)}\n--- its log ---\n{tail}"
            )
        found[side] = dumps
    return found


def cell_differences(plain: dict[str, Any], profiled: dict[str, Any], *, stdout: bool = True
                     ) -> list[str]:  # fmt: skip
    """What differs between the two dumps of one cell, one readable line (or block) each."""
    lines = []
    for key in FIELDS:
        if key in ("stdout", "stderr") and not stdout:
            continue
        a, b = plain.get(key), profiled.get(key)
        # the magic's own result as the cell's Out (a sweep): the product's output, not state
        if (key == "names" and isinstance(a, dict) and isinstance(b, dict)
                and RESULT in str(a.get("_", "")) + str(b.get("_", ""))):  # fmt: skip
            a, b = ({k: v for k, v in d.items() if k != "_"} for d in (a, b))
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b)):
                if a.get(name) != b.get(name):
                    lines.append(f"  {key}[{name!r}]:\n"
                                 f"      plain:    {_short(a.get(name, '<absent>'))}\n"
                                 f"      profiled: {_short(b.get(name, '<absent>'))}")  # fmt: skip
        else:
            lines.append(f"  {key}:\n      plain:    {_short(a)}\n      profiled: {_short(b)}")
    return lines


def _short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def compare(case_cells: list[str], dumps: dict[str, list[dict[str, Any]]],
            declared: tuple[int, str] | None = None) -> None:  # fmt: skip
    """Assert the two sides agree cell by cell (up to a declared refusal), else fail with
    every differing cell: its text, then field by field plain against profiled."""
    from diff_sides import classify

    plain, profiled = dumps["plain"], dumps["profiled"]
    upto = declared[0] if declared else len(case_cells)
    report = []
    for i in range(upto):
        compare_stdout = classify(case_cells[i]).kind != "sweep"
        diff = cell_differences(plain[i], profiled[i], stdout=compare_stdout)
        if diff:
            notices = profiled[i].get("notices") or []
            shown = "\n".join(f"      | {n[:300]}" for n in notices if "nsight_magic" in n
                              or "Error" in n)  # fmt: skip
            report.append(f"cell {i}:\n    {case_cells[i]!r}\n" + "\n".join(diff)
                          + (f"\n    the product said:\n{shown}" if shown else ""))  # fmt: skip
    if declared:
        index, phrase = declared
        said = "\n".join([*profiled[index].get("notices", []), profiled[index]["stdout"]])
        if phrase not in said:
            report.append(f"cell {index} (declared refusal): the profiled side did not say "
                          f"{phrase!r}; it said:\n{said[-1500:]}")  # fmt: skip
    if report:
        first = report[0].split("\n", 1)[0]
        raise AssertionError(
            f"plain and profiled differ ({len(report)} cell(s), first: {first}):\n\n"
            + "\n\n".join(report[:40])
        )
