"""An idle worker hands torch's cached GPU blocks and its host pool back (issue 41 item 6) as
soon as a cell ends; when a sweep's next configuration follows, only once it sits idle: a
request that comes at once is served first and reuses the cache, and a status request tells the
memory as it is once released. The worker's own request loop (``worker.serve``) over a socket
pair, in this process; the release itself is recorded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nsight_magic.worker import messages
from nsight_magic.worker import serve as worker_module


@pytest.fixture
def ask(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    a, b = socket.socketpair()
    key = messages.new_key()
    notebook = messages.Channel(a, key, notebook_side=True)
    side = messages.Channel(b, key, notebook_side=False)
    released: list[float] = []
    monkeypatch.setattr(worker_module, "release_cached_memory",
                        lambda: released.append(time.monotonic()))  # fmt: skip
    worker = worker_module.Worker()
    pools: list[float] = []  # the cell script's host pool handed back (release_host_buffers)
    worker.module = {"release_host_buffers": lambda: pools.append(time.monotonic())}
    thread = threading.Thread(target=worker_module.serve, args=(side, worker), daemon=True)
    thread.start()

    def _ask(op: str, **fields: Any) -> dict[str, Any]:
        notebook.send({"op": op, "request": op, **fields})
        reply = notebook.poll(60.0)
        assert reply is not None and reply["request"] == op
        return reply

    _ask.released = released  # type: ignore[attr-defined]
    _ask.pools = pools  # type: ignore[attr-defined]
    yield _ask
    _ask("exit")
    thread.join(60.0)
    a.close()
    b.close()


def _until(done: Any) -> None:
    deadline = time.monotonic() + 30.0  # a loaded 2-core machine
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_cells_release_is_at_once_and_a_sweeps_once_idle(
    ask: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "RELEASE_IDLE_S", 3600.0)  # never idle long enough here
    ask("release")  # a cell ended: at once (another worker's run may need the memory)
    _until(lambda: len(ask.released) == 1)
    assert len(ask.released) == 1 and len(ask.pools) == 1  # the script's host pool with it

    ask("release", when_idle=True)  # a sweep's configuration: the next one follows at once
    ask("cells")  # any request within the idle gap (an unknown op is still one)
    assert len(ask.released) == 1
    ask("status")  # the idle memory is what a status tells: released first
    assert len(ask.released) == 2
    ask("status")
    assert len(ask.released) == 2  # nothing was pending any more

    monkeypatch.setattr(worker_module, "RELEASE_IDLE_S", 0.05)
    ask("release", when_idle=True)
    _until(lambda: len(ask.released) == 3)
    assert len(ask.released) == 3  # idle: released without any further request
    time.sleep(0.3)
    assert len(ask.released) == 3 and len(ask.pools) == 3  # once each time


def test_the_scripts_host_pool_is_handed_back_whole() -> None:
    """``release_host_buffers`` empties the host pool a whole-state save grew (an idle nsys
    worker kept 34 GB pinned, and ncu's backup of a drill-down's memory then ran the host out
    of memory); the pool is ordinary host memory, so this runs on the CPU."""
    torch = pytest.importorskip("torch")
    from nsight_magic.script import cuda_save as shared_objects

    host = shared_objects._host_pool(torch, 1000)
    assert host.numel() == shared_objects.STAGE_CHUNK and not bool(host.any())
    assert shared_objects._host_pool(torch, 10) is host  # big enough: the same pool
    del host
    assert shared_objects.release_host_buffers() == shared_objects.STAGE_CHUNK
    assert shared_objects._HOST_POOL == [] and shared_objects._STAGE == []
    assert shared_objects.release_host_buffers() == 0
