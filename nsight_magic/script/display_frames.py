"""What a profiled cell shows besides its printed lines, shown in the notebook as the plain
notebook shows it: its rich output (``display(df)``, ``display(HTML(...))``, an image), not its
text, and what it writes to ``sys.stderr`` (a warning, a tqdm bar, a log line) as stderr, not
as stdout.

The worker's IPython shell has no frontend: its ``display`` printed the object's
``text/plain``; and the worker's stderr shares one pipe with its stdout (one stream, in order).
``forward_displays`` gives that shell a publisher that writes each display, every format IPython
made of it, as one line on stdout between the cell's printed lines (so it keeps its place among
them); ``frame_stderr`` makes ``sys.stderr`` write each text the same way. The notebook's end
(``session/run_context.Lines``) reads the lines back with ``read_display`` / ``read_stderr``.
A real module pasted into the script by ``build_script`` before ``runtime``. Standard library
only (IPython when a shell is made). What a library writes to descriptor 2 itself, under
Python, stays in the stdout stream.
"""

import base64
import builtins
import io
import json
import os
import re
import sys
from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

FRAMES_ENV = "NSIGHT_MAGIC_FRAMES"
DISPLAY_MARK = "\x00nsight_magic-display "
STDERR_MARK = "\x00nsight_magic-stderr "
# a widget's view names a model that lives in the worker's kernel-less shell: no frontend can
# draw it, so its text goes instead
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def notebook_display(*objs: Any, **kwargs: Any) -> None:
    """``display``, a builtin in the notebook (IPython's; printed here, as outside one)."""
    try:
        from IPython.display import display
    except ImportError:
        print(*objs)
        return
    display(*objs, **kwargs)


# a cell that displays: the name ``display`` (a call, ``map(display, figs)``; not
# ``pd.set_option("display.max_rows")``), or IPython's display objects
DISPLAYS = re.compile(r"(?<![\w.'\"])display(?![\w.'\"])|\bIPython\b")


def provide_display() -> None:
    """``display`` as a builtin, unless there is one (an IPython shell here puts its own)."""
    if not hasattr(builtins, "display"):
        builtins.display = notebook_display  # type: ignore[attr-defined]


def display_frame(
    data: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    transient: dict[str, Any] | None = None,
    update: bool = False,
) -> str:
    """One display as a line of stdout: its formats (bytes, an image, as base64 text: the
    form a notebook file keeps it in), metadata, ``transient`` (a ``display_id``) and
    ``update`` (the display of that id redrawn)."""
    if WIDGET_VIEW in data:
        data = {"text/plain": data.get("text/plain", "")}
    formats = {mime: base64.b64encode(value).decode("ascii") if isinstance(value, bytes)
               else value for mime, value in data.items()}  # fmt: skip
    body = {"data": formats, "metadata": metadata or {}, "transient": transient or {},
            "update": bool(update)}  # fmt: skip
    return f"{DISPLAY_MARK}{json.dumps(body, default=str)}\x00\n"


def clear_frame(wait: bool) -> str:
    """``clear_output(wait=...)`` as a display frame with no formats (a live plot's loop
    clears the cell's output before each new figure)."""
    body = {"data": {}, "metadata": {}, "transient": {}, "update": False, "clear": bool(wait)}
    return f"{DISPLAY_MARK}{json.dumps(body)}\x00\n"


def read_display(line: str) -> tuple[str, dict[str, Any] | None]:
    """``(text, display)`` of an output line: the text printed before a display's frame on the
    same line and the display (``data``, ``metadata``, ``transient``, ``update``); ``(line,
    None)`` for any other line, or a frame that does not read."""
    head, body = _read_frame(line, DISPLAY_MARK)
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        return line, None
    return head, body


def _read_frame(line: str, mark: str) -> tuple[str, Any]:
    """``(the text before it, its JSON value)`` of a line holding a frame of ``mark``;
    ``(line, None)`` for any other line, or a frame that does not read."""
    head, sep, tail = line.partition(mark)
    tail = tail.rstrip("\r\n")
    if not sep or not tail.endswith("\x00"):
        return line, None
    try:
        return head, json.loads(tail[:-1])
    except ValueError:
        return line, None


def frames_read() -> bool:
    """Whether the session started this process and reads its frames (``FRAMES_ENV``, set by
    ``session/backends.process_env``): a run folder's ``script.py`` run by hand keeps its
    plain stderr and displays."""
    return os.environ.get(FRAMES_ENV) == "1"


def forward_displays(shell: Any) -> None:
    """Give ``shell`` (the worker's IPython shell) a publisher that writes each display on
    stdout as a frame (``display_frame``) for the notebook to show."""
    if not frames_read():
        return
    from IPython.core.displaypub import DisplayPublisher

    class ForwardingPublisher(DisplayPublisher):
        def publish(
            self,
            data: Any,
            metadata: Any = None,
            source: Any = None,
            *,
            transient: Any = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            write_frame(display_frame(dict(data), metadata, transient, update))

        def clear_output(self, wait: bool = False) -> None:
            write_frame(clear_frame(wait))

    shell.display_pub = ForwardingPublisher(shell=shell, parent=shell)


def stderr_frame(text: str) -> str:
    """One write to ``sys.stderr`` as a line of stdout (JSON: its line ends stay inside)."""
    return f"{STDERR_MARK}{json.dumps(text)}\x00\n"


def read_stderr(line: str) -> tuple[str, str | None]:
    """``(text, written)``: the text printed before a stderr frame on the same line and what
    was written to stderr; ``(line, None)`` for any other line."""
    head, written = _read_frame(line, STDERR_MARK)
    return (head, written) if isinstance(written, str) else (line, None)


def readable(line: str) -> str:
    """An output line as a person reads it (a worker's last lines in an error): a stderr
    frame as its text, a display as its kinds."""
    text, written = read_stderr(line)
    if written is not None:
        return text + written
    text, shown = read_display(line)
    return line if shown is None else f"{text}[a display: {', '.join(shown['data'])}]"


def write_frame(frame: str) -> None:
    """Write a frame on descriptor 1, the notebook's pipe (whatever the cell did to
    ``sys.stdout``: a display under ``redirect_stdout`` is still the notebook's), after what
    the cell printed before it, whole: one writer at a time (a thread's warning inside a
    display's frame would spoil both), and a Ctrl-C half way through still finishes it (half a
    frame reads as the cell's text)."""
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a cell may have replaced or closed it
            pass
    lock, mine = _frame_state()
    if getattr(mine, "writing", False):
        # this thread is inside a frame's write (a signal handler that warns while a big
        # display waits on a full pipe): its frame goes right after, not into the middle
        mine.pending.append(frame)
        return
    stopped: BaseException | None = None
    with lock:
        mine.writing, mine.pending = True, [frame]
        try:
            while mine.pending:
                data = mine.pending.pop(0).encode("utf-8", "backslashreplace")
                while data:
                    try:
                        data = data[os.write(1, data) :]
                    except KeyboardInterrupt as exc:
                        stopped = exc
        finally:
            mine.writing = False
    if stopped is not None:
        raise stopped


def _frame_state() -> Any:
    """One lock per process for every frame and each thread's own state (this module is
    pasted into each cell's script and run again: a lock of its own each time would not be
    one), new in a forked child."""
    state = getattr(sys, "_nsight_magic_frames", None)
    if state is None:
        import threading

        state = (threading.Lock(), threading.local())
        sys._nsight_magic_frames = state  # type: ignore[attr-defined]

        def renew() -> None:
            sys._nsight_magic_frames = (threading.Lock(), threading.local())  # type: ignore[attr-defined]

        os.register_at_fork(after_in_child=renew)
    return state


class FramedStderr(io.TextIOBase):
    """``sys.stderr`` of a profiled process: each write goes on descriptor 1 (the notebook's
    pipe) as a frame (``write_frame``), after what the cell printed before it. Its descriptor
    is still 2 (``fileno``: what a subprocess inherits); what it lacks (``buffer``,
    ``reconfigure``) is the original stream's."""

    nsight_magic_frames = True  # the mark ``frame_stderr`` knows it by, whichever cell made it

    def __init__(self, original: Any) -> None:
        self.original = original

    def __getattr__(self, name: str) -> Any:
        if name == "original" or name.startswith("__"):  # (copy.copy asks before __init__)
            raise AttributeError(name)
        return getattr(self.original, name)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.original, "encoding", None) or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.original, "errors", None) or "backslashreplace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self.original.fileno())

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            # a lone surrogate (bytes decoded with surrogateescape) as the descriptor shows it
            shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
            try:
                write_frame(stderr_frame(shown))
            except OSError:  # no pipe to the notebook (closed by the cell): as it was
                self.original.write(text)
        return len(text)


def frame_stderr() -> None:
    """Make ``sys.stderr`` a ``FramedStderr`` (once: the class is made again with each cell's
    script, so it is known by its mark), where the session reads the frames back."""
    if not frames_read():
        return
    if sys.stderr is not None and not getattr(sys.stderr, "nsight_magic_frames", False):
        sys.stderr = FramedStderr(sys.stderr)
