"""The zygote (diff_zygote.py) every differential case of this pytest process runs through:
started once, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

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
