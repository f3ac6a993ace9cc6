"""The zygote (diff_zygote.py) every differential case of this pytest process runs through:
started once, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from diff_harness import Zygote


@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    log = tmp_path_factory.mktemp("zygote") / "zygote.log"
    server = Zygote(log)
    server.start()
    try:
        yield server
    finally:
        server.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This folder's cases test the state exchange, standard-library code the same under any
    dependency set: marked ``stdlib`` like tests/conftest.py's STDLIB_ONLY files, so the
    dependency tiers (``make test-deps``, ``-m "not stdlib"``) do not run these minutes again."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.stdlib)
