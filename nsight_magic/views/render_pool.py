"""vl-convert in helper processes, so a static copy's PNG charts render while the kernel builds
the rest of the display (issue 22).

vl-convert holds the GIL for the whole render (~0.05-0.2 s a chart after its first, 0.8 s for
the first in a process: its JavaScript runtime starts), so a thread would gain nothing. Here
``RENDER_PROCESSES`` processes (spawned, each warmed once at start) render a spec sent as JSON
and send the PNG back; the kernel meanwhile builds the tables and the live widget. Without
them (``NSIGHT_MAGIC_RENDER_PROCESSES=0``, a platform that cannot spawn, a helper that died)
the chart renders in the kernel's own process, as before: never an error for the user.

The helpers end with the kernel: the pool is shut down at exit, and a helper whose kernel died
reads end-of-file from its task pipe and exits (``multiprocessing``'s own rule)."""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor

PROCESSES_ENV = "NSIGHT_MAGIC_RENDER_PROCESSES"
_TINY = '{"data": {"values": [{"a": 1}]}, "mark": "bar", "encoding": {"x": {"field": "a"}}}'

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_broken = False


def processes() -> int:
    """How many helpers: ``NSIGHT_MAGIC_RENDER_PROCESSES``, else one per spare core, at most 3
    (a view has three charts), at least 1."""
    value = os.environ.get(PROCESSES_ENV, "").strip()
    if value.isdigit():
        return int(value)
    return max(1, min(3, (os.cpu_count() or 2) - 1))


def render_png(spec_json: str, scale: float = 1.0) -> bytes:
    """PNG bytes of a Vega-Lite spec (JSON text)."""
    import vl_convert as vlc

    return bytes(vlc.vegalite_to_png(json.loads(spec_json), scale=scale))


def _warm() -> None:
    """Start a helper's JavaScript runtime before the first real chart needs it."""
    render_png(_TINY)


def _get_pool() -> ProcessPoolExecutor | None:
    global _pool, _broken
    with _lock:
        if _pool is None and not _broken and processes() > 0:
            try:
                context = multiprocessing.get_context("spawn")  # never fork a threaded kernel
                _pool = ProcessPoolExecutor(processes(), mp_context=context, initializer=_warm)
                atexit.register(_shutdown)
            except Exception:  # no processes here: render in the kernel's process
                _broken = True
        return _pool


def start() -> None:
    """Start the helpers now (they take ~1 s to warm), so the first chart finds them ready."""
    pool = _get_pool()
    if pool is not None:
        _submit(pool, _TINY, 1.0)


def _shutdown() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _submit(pool: ProcessPoolExecutor, spec_json: str, scale: float) -> Future[bytes] | None:
    global _broken
    try:
        return pool.submit(render_png, spec_json, scale)
    except Exception:  # a helper died (BrokenProcessPool) or the pool is shut down
        _broken = True
        _shutdown()
        return None


def submit_png(spec_json: str, scale: float = 1.0) -> Future[bytes]:
    """The PNG of a spec, rendering in a helper process (or here, done, without one)."""
    pool = _get_pool()
    future = _submit(pool, spec_json, scale) if pool is not None else None
    if future is not None:
        return future
    done: Future[bytes] = Future()
    try:
        done.set_result(render_png(spec_json, scale))
    except Exception as exc:
        done.set_exception(exc)
    return done


def png_result(future: Future[bytes], spec_json: str, scale: float = 1.0) -> bytes:
    """The future's PNG; rendered here when the helper failed for a reason of its own (it
    died, or never answered). A spec vl-convert rejects raises as it would here."""
    try:
        return future.result(timeout=120)
    except Exception:
        return render_png(spec_json, scale)
