"""Every differential case (diff_cases.py): its cells run plainly and through the magics
(bare backends: real workers, no profiler), compared after each cell (README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from diff_cases import CASES
from diff_harness import Case, Zygote, compare, run_case


def test_the_cases_are_many_and_named_once() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 80


@pytest.mark.parametrize("case", [case.param() for case in CASES])
def test_case(case: Case, zygote: Zygote, tmp_path: Path) -> None:
    dumps = run_case(zygote, list(case.cells), case.files, tmp_path)
    compare(list(case.cells), dumps, case.declared)
