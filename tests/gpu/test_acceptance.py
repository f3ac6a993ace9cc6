"""The GPU acceptance session (tests/gpu/acceptance.py) as a pytest: every step passes.

Needs a GPU, nsys, ncu and transformers; the ranks session needs 2 GPUs. The executed notebook
and its figures go to ``$OUT`` (or a temp folder)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from .acceptance import run
from .conftest import cuda, have

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (have("nsys") and have("ncu")), reason="nsys/ncu not found"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]


def _out() -> Path:
    return Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="acceptance-"))


def test_acceptance_session() -> None:
    pytest.importorskip("transformers")
    failed = [row for row in run(False, _out()) if not row["ok"]]
    assert not failed, failed


def test_acceptance_session_two_ranks() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    failed = [row for row in run(True, _out()) if not row["ok"]]
    assert not failed, failed
