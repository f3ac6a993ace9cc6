"""The worker's channel cannot be broken by the cell (issue 35 item 5), for real on the CPU: the
session worker started without a profiler (``BareBackend``). A cell that forks, writes to the
descriptors it would guess, writes a frame onto the worker's real socket, or raises an exception
too large for a message gets one clear answer, and the next cell works."""

from __future__ import annotations

import json
import socket
import struct
import textwrap
import time
from pathlib import Path

import pytest
from processes import alive
from session_support import BareBackend

from nsight_magic.errors import CellFailedError, WorkerDiedError
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks
from nsight_magic.worker import messages


@pytest.fixture
def run(manager: SessionManager, tmp_path: Path):
    """run(cell) -> (result, output lines) in the bare nsys-slot worker."""

    def _run(cell: str, out: list[str] | None = None, **kw):
        out = [] if out is None else out  # the caller's list: read even when the cell raises
        request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                              cwd=str(tmp_path), **kw)  # fmt: skip
        result = manager.profile(request, BareBackend(), notebook=manager.notebook,
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        return result, out

    return _run


def _pid(manager: SessionManager) -> int:
    (status,) = manager.status()
    assert status.pid is not None
    return status.pid


SOCKETS = """
import os
def sockets():
    out = []
    for fd in os.listdir('/proc/self/fd'):
        try:
            if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'):
                out.append(int(fd))
        except OSError:  # the listing's own descriptor, closed again
            pass
    return out
"""


def test_a_cell_that_forks_leaves_one_worker_serving(run, manager, tmp_path: Path) -> None:
    """Before: the child came back from the cell and served the socket too; the worker died
    and the next cell failed with 'A vars step raised WorkerError: '."""
    run("x = 1")
    pid = _pid(manager)
    child_file = tmp_path / "child.json"
    _, out = run(f"""
        {textwrap.indent(SOCKETS, " " * 8).strip()}
        import json, os
        child = os.fork()
        if child == 0:  # the child: what it can reach of the notebook's channel
            with open({str(child_file)!r}, "w") as f:
                json.dump({{"pid": os.getpid(), "sockets": sockets()}}, f)
        else:
            os.waitpid(child, 0)
        print("forked", "child" if child == 0 else "parent")
    """)
    assert sorted(out) == ["forked child", "forked parent"]
    seen = json.loads(child_file.read_text())
    assert seen["sockets"] == []  # the fork closed the child's copy of the channel
    assert not alive(seen["pid"])  # it came back from the cell and exited
    result, out = run("print('x is', x)")
    assert out == ["x is 1"] and _pid(manager) == pid
    assert "replayed" not in result.meta


def test_a_cell_writing_to_low_descriptors_does_not_reach_the_channel(run, manager) -> None:
    """Before: fd 3 was the socket, and bytes written there raised a raw ValueError from
    messages.recv in the notebook, for this cell and every later one."""
    run("x = 2")
    pid = _pid(manager)
    run(f"""
        {textwrap.indent(SOCKETS, " " * 8).strip()}
        assert all(fd > 63 for fd in sockets()), sockets()
        for fd in range(3, 64):
            try:
                os.write(fd, b"garbage")
            except OSError:
                pass
    """)
    _, out = run("print('x is', x)")
    assert out == ["x is 2"] and _pid(manager) == pid


def test_a_frame_forged_on_the_real_socket_is_one_error_and_a_new_worker(run, manager) -> None:
    """Before: a frame the cell wrote was taken as the worker's reply, and every later cell
    failed at once with the empty message 'A vars step raised WorkerError: ', no restart."""
    run("x = 3")
    pid = _pid(manager)
    forged = json.dumps({"ok": True, "status": "ok", "names": []}).encode()
    with pytest.raises(WorkerDiedError, match="channel to the profiling worker was damaged"):
        run(f"""
            {textwrap.indent(SOCKETS, " " * 12).strip()}
            import struct, time
            data = {forged!r}
            for fd in sockets():
                os.write(fd, struct.pack(">I", len(data)) + bytes(32) + data)
            time.sleep(30)  # the notebook must not wait for the cell: the frame is enough
        """)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    result, out = run("print('x is', x)")
    assert out[-1] == "x is 3" and _pid(manager) != pid
    assert not result.meta.get("replayed")  # x came back to the notebook: it is sent, not replayed


FORGE_A_REPLY = """
import gc
from nsight_magic.worker.messages import Channel
(channel,) = [o for o in gc.get_objects() if isinstance(o, Channel)]
channel.send({"ok": True, "status": "ok", "names": ["x"]})
"""


def test_a_reply_the_cell_sent_on_the_workers_channel_is_one_error_then_a_new_worker(
    run, manager
) -> None:
    """Before: a cell that took the worker's ``Channel`` out of ``gc`` and sent a signed frame
    shifted the channel by one: every later reply answered the previous request, unnoticed.
    Now each reply names its request: one WorkerDiedError, and the worker's own end of the
    connection (reset by the notebook, its real reply unread) prints no traceback into the cell
    (it did about one run in three: the serve loop below tests that for sure)."""
    run("x = 6")
    pid = _pid(manager)
    out: list[str] = []
    with pytest.raises(WorkerDiedError, match="channel to the profiling worker was damaged"):
        run(FORGE_A_REPLY, out)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    time.sleep(0.5)  # what the dying worker printed has reached the pump
    assert not [line for line in out if "Traceback" in line or "ConnectionReset" in line], out
    result, later = run("print('x is', x)")
    assert later[-1] == "x is 6" and _pid(manager) != pid
    assert not result.meta.get("replayed")  # x came back to the notebook: it is sent, not replayed


def test_bytes_a_cells_thread_writes_between_cells_are_one_error_then_a_new_worker(
    run, manager, tmp_path
) -> None:
    """Damage that lands while no request is in flight is found by the next request: that
    cell gets the one error, the one after runs in a new worker (whose replay of this cell
    must not spoil its channel again: once only, whatever the machine's load)."""
    once = tmp_path / "spoiled"
    run(f"""
        {textwrap.indent(SOCKETS, " " * 8).strip()}
        import threading, time
        x = 5
        def spoil():
            time.sleep(0.5)
            if os.path.exists({str(once)!r}):
                return
            open({str(once)!r}, "w").close()
            for fd in sockets():
                os.write(fd, b"not a frame of ours")
        threading.Thread(target=spoil, daemon=True).start()
    """)
    pid = _pid(manager)
    time.sleep(1.5)
    with pytest.raises(WorkerDiedError, match="channel to the profiling worker was damaged"):
        run("y = 1")
    _, out = run("print('x is', x)")
    assert out[-1] == "x is 5" and _pid(manager) != pid


def test_a_reply_over_the_message_limit_is_cut_not_fatal(run, manager) -> None:
    """Before: an exception whose message was over the 64 MiB limit killed the worker and all
    its state."""
    run("x = 4")
    pid = _pid(manager)
    with pytest.raises(CellFailedError, match="more characters cut") as info:
        run("raise ValueError('x' * (70 << 20))")
    assert len(str(info.value)) < 4 << 20
    _, out = run("print('x is', x)")
    assert out == ["x is 4"] and _pid(manager) == pid


def test_programs_the_cell_starts_do_not_inherit_the_channel(run) -> None:
    """The socket is close-on-exec: even os.system, which closes nothing, passes it on."""
    _, out = run("""
        import os
        os.system("for f in /proc/$$/fd/*; do readlink $f; done | grep -c socket: || true")
    """)
    assert out == ["0"]


# --- the channel itself, over a socket pair ----------------------------------------------------
@pytest.fixture
def pair():
    a, b = socket.socketpair()
    key = messages.new_key()
    yield (messages.Channel(a, key, notebook_side=True),
           messages.Channel(b, key, notebook_side=False))  # fmt: skip
    a.close()
    b.close()


def test_signed_frames_go_both_ways(pair) -> None:
    notebook, worker = pair
    notebook.send({"op": "status"})
    assert worker.recv() == {"op": "status"}
    worker.send({"ok": True})
    assert notebook.poll(1.0) == {"ok": True}


def test_a_frame_without_the_key_is_refused_and_the_channel_stays_refused(pair) -> None:
    notebook, worker = pair
    data = b'{"ok": true}'
    worker.sock.sendall(struct.pack(">I", len(data)) + bytes(32) + data)
    with pytest.raises(messages.ChannelError, match="signature"):
        notebook.poll(1.0)
    worker.send({"ok": True})  # a real frame after a forged one: the stream is lost
    with pytest.raises(messages.ChannelError):
        notebook.poll(1.0)


def test_a_replayed_frame_is_refused(pair) -> None:
    """A frame copied and sent again (out of order) has the wrong number in its signature."""
    notebook, worker = pair
    sent: list[bytes] = []
    original = worker.sock.sendall
    worker.sock = _Recording(worker.sock, sent)  # type: ignore[assignment]
    worker.send({"ok": True})
    assert notebook.poll(1.0) == {"ok": True}
    original(sent[0])
    with pytest.raises(messages.ChannelError, match="signature"):
        notebook.poll(1.0)


class _Recording:
    def __init__(self, sock: object, sent: list[bytes]) -> None:
        self.sock, self.sent = sock, sent

    def sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))
        self.sock.sendall(data)  # type: ignore[attr-defined]


def test_a_frame_announcing_more_than_the_limit_is_damage_not_a_wait(pair) -> None:
    notebook, worker = pair
    worker.sock.sendall(b"garbage!")
    with pytest.raises(messages.ChannelError, match="over the"):
        notebook.poll(1.0)


def test_a_frame_arriving_in_pieces_is_kept_between_polls(pair) -> None:
    """An interrupt or a poll timeout in the middle of a frame loses nothing."""
    notebook, worker = pair
    real = worker.sock
    frames: list[bytes] = []
    worker.sock = _Recording(_Discard(), frames)  # type: ignore[assignment]
    worker.send({"ok": True, "n": 1})
    real.sendall(frames[0][:10])
    assert notebook.poll(0.05) is None
    real.sendall(frames[0][10:])
    assert notebook.poll(1.0) == {"ok": True, "n": 1}


class _Discard:
    def sendall(self, data: bytes) -> None:
        pass


def test_fit_cuts_long_strings_and_says_so() -> None:
    reply = {"ok": True, "status": "error", "exc_message": "y" * (3 << 20), "mark": 7}
    cut = messages.fit(reply, limit=2 << 20)
    assert cut["status"] == "error" and cut["mark"] == 7
    assert cut["exc_message"].endswith("more characters cut: a reply is limited]")
    assert len(json.dumps(cut)) <= 2 << 20
    assert messages.fit({"ok": True}) == {"ok": True}
    many = {"ok": True, "mark": 1, "names": ["n" * 100] * 100_000}
    last = messages.fit(many, limit=1 << 20)
    assert last["mark"] == 1 and "over the" in last["truncated"] and "names" not in last
    error = {"ok": True, "status": "error", "exc_message": "m", "traceback": "t" * 2000,
             "names": ["n" * 100] * 100_000}  # fmt: skip
    last = messages.fit(error, limit=1 << 20)
    assert last["exc_message"] == "m" and "over the" in last["traceback"]


def test_a_connection_the_notebook_reset_ends_the_serve_loop_without_a_traceback(pair) -> None:
    """The notebook closes its end with a frame unread when it stops a worker: the worker's
    next read gets ECONNRESET. Before: a ConnectionResetError traceback, printed into the cell
    whose reply the notebook had refused."""
    from nsight_magic.worker.serve import Worker, serve

    notebook, worker = pair
    worker.sock.sendall(b"a reply the notebook never reads")
    notebook.sock.close()
    assert serve(worker, Worker()) is True  # "the notebook's end closed"
