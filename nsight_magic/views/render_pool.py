"""vl-convert in helper processes, so a static copy's PNG charts render while the kernel builds
the rest of the display (issue 22).

vl-convert holds the GIL for the whole render (~0.05-0.2 s a chart after its first, 0.8 s for
the first in a process: its JavaScript runtime starts), so a thread would gain nothing. Here
``processes()`` helpers (``render_worker.py``, each warmed once at start) render specs sent as
JSON and send the PNGs back; the kernel meanwhile builds the tables and the live widget. Plain
subprocesses, not ``multiprocessing``: a spawned child re-runs the user's ``__main__`` script.
Without helpers (``NSIGHT_MAGIC_RENDER_PROCESSES=0``, no vl-convert, a helper that died or
did not answer) the chart renders in the kernel's own process, as before: never an error for
the user.

The helpers end with the kernel: each exits when its stdin ends (closed at exit and by
``stop()``, or by the OS when the kernel dies). They run in a session of their own, so the
interrupt of a cell (SIGINT to the kernel's process group) does not end them."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import IO

PROCESSES_ENV = "NSIGHT_MAGIC_RENDER_PROCESSES"
WORKER = Path(__file__).with_name("render_worker.py")
# The worker file run by path with nothing added to sys.path: run as ``python FILE`` its folder
# (this one, with ``html.py``) would shadow the standard library; ``python -I`` would drop the
# user site-packages a ``pip install --user`` puts vl-convert in.
_RUN_WORKER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


def processes() -> int:
    """How many helpers: ``NSIGHT_MAGIC_RENDER_PROCESSES``, else one per spare core, at most 3
    (a view has three charts), at least 1."""
    value = os.environ.get(PROCESSES_ENV, "").strip()
    if value.isdigit():
        return int(value)
    return max(1, min(3, (os.cpu_count() or 2) - 1))


def render_png(spec_json: str, scale: float = 1.0) -> bytes:
    """PNG bytes of a Vega-Lite spec (JSON text), rendered in this process."""
    import vl_convert as vlc

    return bytes(vlc.vegalite_to_png(json.loads(spec_json), scale=scale))


class HelperEnded(RuntimeError):
    """A render helper ended (or never started) before answering."""


class _Helper:
    """One ``render_worker.py`` process: requests written by a thread of its own (a spec may
    be larger than the pipe holds while the helper renders), answers read by another."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_WORKER, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # Jupyter interrupts a cell with SIGINT to the kernel's whole process group: in it,
            # a helper died with the cell, and every later chart rendered in the kernel
            start_new_session=True,
        )
        self.pending: dict[int, Future[bytes]] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.outbox: queue.Queue[bytes | None] = queue.Queue()
        self.alive = True
        for target in (self._write, self._read):
            threading.Thread(target=target, name="nsight_magic render helper", daemon=True).start()

    def submit(self, spec_json: str, scale: float) -> Future[bytes]:
        future: Future[bytes] = Future()
        spec = spec_json.encode()
        with self.lock:
            if not self.alive:
                raise HelperEnded("render helper ended")
            n = next(self.ids)
            self.pending[n] = future
        header = json.dumps({"id": n, "scale": scale, "n": len(spec)}).encode()
        self.outbox.put(header + b"\n" + spec)
        return future

    def load(self) -> int:
        return len(self.pending)

    def _write(self) -> None:
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        with contextlib.suppress(OSError, ValueError):  # the helper ended: _read says so
            while (frame := self.outbox.get()) is not None:
                stdin.write(frame)
                stdin.flush()
        with contextlib.suppress(OSError, ValueError):
            stdin.close()  # end of input: the helper exits

    def _read(self) -> None:
        stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]
        with contextlib.suppress(OSError, ValueError):
            while line := stdout.readline():
                answer = json.loads(line)
                png = stdout.read(int(answer["n"]))
                with self.lock:
                    future = self.pending.pop(int(answer["id"]), None)
                if future is None:
                    continue
                if "error" in answer:
                    future.set_exception(ValueError(answer["error"]))
                else:
                    future.set_result(png)
        with self.lock:
            self.alive = False
            pending, self.pending = self.pending, {}
        for future in pending.values():
            future.set_exception(HelperEnded("render helper ended"))
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)

    def stop(self) -> None:
        self.outbox.put(None)


_lock = threading.Lock()
_helpers: list[_Helper] = []
_off = False  # a helper could not start, or died: the kernel renders from then on


def _helper() -> _Helper | None:
    """The helper with the fewest charts waiting (started on first use), or None."""
    global _off
    with _lock:
        if _off or processes() == 0:
            return None
        try:
            while len(_helpers) < processes():
                _helpers.append(_Helper())
        except Exception:  # cannot start a process here: render in the kernel's process
            _off = True
            return None
        live = [h for h in _helpers if h.alive]
        if len(live) < len(_helpers):  # one died (killed, out of memory): stop using helpers
            _off = True
            return None
        return min(live, key=_Helper.load)


def start() -> None:
    """Start the helpers now (they take ~1 s to warm), so the first chart finds them ready."""
    _helper()


def stop() -> None:
    """End the helpers (at exit, ``%unload_ext``); a later chart starts them again."""
    with _lock:
        helpers = list(_helpers)
        _helpers.clear()
    for helper in helpers:
        helper.stop()


atexit.register(stop)


def submit_png(spec_json: str, scale: float = 1.0) -> Future[bytes]:
    """The PNG of a spec, rendering in a helper process (or here, done, without one)."""
    helper = _helper()
    if helper is not None:
        with contextlib.suppress(HelperEnded):
            return helper.submit(spec_json, scale)
    done: Future[bytes] = Future()
    try:
        done.set_result(render_png(spec_json, scale))
    except Exception as exc:
        done.set_exception(exc)
    return done


def png_result(future: Future[bytes], spec_json: str, scale: float = 1.0) -> bytes:
    """The future's PNG; rendered here when the helper failed for a reason of its own (it
    died, or did not answer in time). A spec vl-convert rejects raises as it would here."""
    try:
        return future.result(timeout=30)  # a render takes well under a second
    except ValueError:  # vl-convert's own answer: the spec is bad
        raise
    except Exception:
        return render_png(spec_json, scale)
