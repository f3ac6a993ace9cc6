"""The part of the generated script that notes the NVTX ranges a cell opens and, for
``%%ncu --nvtx``, marks the range the user named so that ncu can select it.

A real module (linted, typed, tested by import), pasted into the script by ``build_script``
(``script/template.py``) after the script's header: the script imports nothing from this
package. Standard library only at import time; ``nvtx`` and ``torch`` are imported when a
recorder is entered. The block marked "module only" is left out of the script: the script's
header assigns those names with the cell's values.

Why a marker: ncu's NVTX filter needs the range's domain spelled out and escaped
(``LLM@LLM\\@prefill/``), and a bare name cannot name "any domain" (measured forms:
docs/workloads.md).
The script sees every range the cell opens through ``nvtx``/``torch.cuda.nvtx``, with its domain
and style, so it compares the user's name there, as plain text, and opens one range of its own
domain around each match: ncu's filter is always ``nsight_magic@nvtx-target``. Ranges opened
where the script cannot see them (C++ code, ``nvtx.Domain`` methods, functions decorated with
``nvtx.annotate`` before the cell) are not marked: the session then uses ncu's own filter with
the domain an nsys run of the cell found (``SessionManager.ncu_nvtx_options``).

Phases (under ncu): ncu's ``nvtx`` state of a launch holds the push/pop ranges of the launching
thread only, so a backward kernel autograd launched shows none of the user's ranges. With
``phases`` the recorder mirrors the innermost user range open in the process (any thread, the
one opened last) as ONE start/end range of ``PHASE_DOMAIN`` named ``DOMAIN:RANGE`` (start/end
ranges belong to the process: every thread's launches see it). ``reports/ncu`` reads it back as
each launch's ``phase``.

A window (``%%nsys --nvtx RANGE#K``): instead of a marker, the K-th opening of the target opens
the capture gate and its closing closes it (``cuda_gate.RangeWindow``).
"""

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any

# --- module only: build_script writes these in the script's header, with the cell's values ---
DOMAIN = "nsight_magic"  # nvtx_names.NVTX_DOMAIN
TARGET_RANGE = "nvtx-target"  # nvtx_names.TARGET_RANGE
PHASE_DOMAIN = "nsight_magic.phase"  # nvtx_names.PHASE_DOMAIN
# --- end module only ---

Before = Callable[[tuple[Any, ...], dict[str, Any]], Any]
After = Callable[[tuple[Any, ...], dict[str, Any], Any, Any], Any]


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], name: str, index: int) -> Any:
    """A wrapped call's argument, given by keyword or at its position (None when absent)."""
    return kwargs.get(name, args[index] if len(args) > index else None)


def _domain_name(domain: Any) -> str:
    """A domain as nvtx takes it (a name, a ``Domain`` object, None) -> its name."""
    return str(getattr(domain, "name", domain) or "")


class RangeRecorder:
    """Notes the NVTX ranges the cell opens (nvtx package and torch.cuda.nvtx), so that a filter
    that matched nothing can be answered with the ranges the cell really has.

    With a ``target`` (``%%ncu --nvtx NAME``) it also opens the start/end range TARGET_RANGE of
    our domain around every range ``target`` names, in any domain: "DOMAIN:RANGE (STYLE)",
    "DOMAIN:RANGE" (":RANGE" = the default domain) or a bare RANGE, compared as plain text
    (no escaping, no regex). ncu's filter is then that one range of ours, so the user's
    domain need not be known before the cell runs. Start/end, so a push/pop target also
    covers kernels other threads launch while it is open (autograd's backward threads).
    ``instance`` (K): only the target's K-th opening is marked; ``window``: the K-th opening
    gates the capture instead (``%%nsys --nvtx``); ``phases``: the phase mirror (module
    docstring)."""

    def __init__(self, target: str | None = None, phases: bool = False,
                 window: Any = None, instance: int | None = None) -> None:  # fmt: skip
        self.seen: dict[tuple[str, str, str], None] = {}  # ordered set
        self.undo: list[tuple[Any, str, Any]] = []
        self.target = target
        self.matched: dict[tuple[str, str, str], None] = {}
        self.opened = 0
        # (thread, domain) -> (marker id or None, phase token or None) per open push/pop range
        self.stacks: dict[tuple[int, str], list[tuple[Any, Any]]] = {}
        self.started: dict[Any, Any] = {}  # the key of a start/end range -> its marker id
        self.lock = threading.Lock()
        self.open_marker: Callable[..., Any] | None = None
        self.close_marker: Callable[[Any], Any] | None = None
        # ``cuda_gate.RangeWindow``: the target's K-th opening gates the capture (no marker)
        self.window = window
        self.instance = instance  # the one opening of the target to mark (1 = first); None: all
        self.phases = phases
        # the user's ranges open in the process, in opening order: [token, "DOMAIN:RANGE"]
        self.open_user: list[list[Any]] = []
        self.phase_started: dict[Any, Any] = {}  # a start/end range's key -> its phase token
        self.phase_lock = threading.Lock()  # one switch of the mirror at a time, in order
        self.phase_label: str | None = None
        self.phase_handle: Any = None

    def is_target(self, domain: str, message: str, style: str) -> bool:
        label = domain + ":" + message
        return self.target in (label + " (" + style + ")", label, message)

    def opening(self, message: Any, domain: Any, style: str) -> Any:
        """Before a range opens: note it; the marker's id when the target names it."""
        name = _domain_name(domain)
        if message is None:
            return None
        message = str(message)
        with self.lock:
            if name != DOMAIN:
                self.seen.setdefault((name, message, style), None)
            if self.target is None or (self.window is None and self.open_marker is None):
                return None
            if not self.is_target(name, message, style):
                return None
            self.matched.setdefault((name, message, style), None)
            self.opened += 1
            opened = self.opened
        if self.window is not None:
            return self.window.open(opened)
        if self.instance is not None and opened != self.instance:
            return None
        assert self.open_marker is not None
        return self.open_marker(TARGET_RANGE, domain=DOMAIN)

    def close(self, marker: Any) -> None:
        if marker is None:
            return
        with contextlib.suppress(Exception):
            if self.window is not None and marker is self.window:
                self.window.close()
            elif self.close_marker is not None:
                self.close_marker(marker)

    # --- phases: the innermost user range open in the process, mirrored as a start/end range
    def phase_opened(self, message: Any, domain: Any) -> Any:
        """A user range opened: its phase token (None when phases are off or it is ours)."""
        name = _domain_name(domain)
        if not self.phases or message is None or name == DOMAIN:
            return None
        token = object()
        with self.phase_lock:
            self.open_user.append([token, name + ":" + str(message)])
            self._switch_phase()
        return token

    def phase_closed(self, token: Any) -> None:
        if token is None:
            return
        with self.phase_lock:
            self.open_user[:] = [entry for entry in self.open_user if entry[0] is not token]
            self._switch_phase()

    def _switch_phase(self) -> None:
        """End the mirror of the phase that was innermost, start the one that is now (called
        with ``phase_lock`` held, so mirrors never overlap)."""
        label = self.open_user[-1][1] if self.open_user else None
        if label == self.phase_label or self.open_marker is None or self.close_marker is None:
            return
        if self.phase_handle is not None:
            with contextlib.suppress(Exception):
                self.close_marker(self.phase_handle)
        self.phase_handle = None
        if label is not None:
            with contextlib.suppress(Exception):
                self.phase_handle = self.open_marker(label, domain=PHASE_DOMAIN)
        self.phase_label = label

    def pushed(self, message: Any, domain: Any, marker: Any) -> None:
        key = (threading.get_ident(), _domain_name(domain))
        token = self.phase_opened(message, domain)
        with self.lock:
            self.stacks.setdefault(key, []).append((marker, token))

    def popped(self, domain: Any) -> None:
        key = (threading.get_ident(), _domain_name(domain))
        with self.lock:
            stack = self.stacks.get(key)
            marker, token = stack.pop() if stack else (None, None)
        self.phase_closed(token)
        self.close(marker)

    def started_range(self, handle: Any, marker: Any, message: Any = None,
                      domain: Any = None) -> None:  # fmt: skip
        token = self.phase_opened(message, domain)
        with contextlib.suppress(TypeError), self.lock:  # an unhashable id: it stays open
            if marker is not None:
                self.started[handle] = marker
            if token is not None:
                self.phase_started[handle] = token

    def ended_range(self, handle: Any) -> None:
        with contextlib.suppress(TypeError):
            with self.lock:
                marker = self.started.pop(handle, None)
                token = self.phase_started.pop(handle, None)
            self.phase_closed(token)
            self.close(marker)

    def wrap(self, owner: Any, attr: str, before: Before | None = None,
             after: After | None = None) -> None:  # fmt: skip
        """Replace ``owner.attr`` by a call that runs ``before(args, kwargs)`` first and
        ``after(args, kwargs, result, before's value)`` once the original returned; our own
        mistakes never reach the cell."""
        original = getattr(owner, attr, None)
        if original is None:
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            noted = None
            if before is not None:
                with contextlib.suppress(Exception):
                    noted = before(args, kwargs)
            try:
                result = original(*args, **kwargs)
            except BaseException:
                self.close(noted)  # the range did not open: neither does our marker
                raise
            if after is not None:
                with contextlib.suppress(Exception):
                    after(args, kwargs, result, noted)
            return result

        setattr(owner, attr, wrapper)
        self.undo.append((owner, attr, original))

    def __enter__(self) -> "RangeRecorder":
        with contextlib.suppress(Exception):
            self._wrap_nvtx()
            if "torch" in sys.modules:
                self._wrap_torch_nvtx()
        return self

    def _wrap_nvtx(self) -> None:
        try:
            import nvtx
        except ImportError:  # no ranges to note: the script opens none either
            return
        # the originals, saved before wrapping: opening our marker is never noted
        self.open_marker, self.close_marker = nvtx.start_range, nvtx.end_range
        self.wrap(
            nvtx,
            "push_range",
            lambda a, k: self.opening(_arg(a, k, "message", 0), _arg(a, k, "domain", 2), "PushPop"),
            lambda a, k, r, m: self.pushed(_arg(a, k, "message", 0), _arg(a, k, "domain", 2), m),
        )
        self.wrap(nvtx, "pop_range", None, lambda a, k, r, m: self.popped(_arg(a, k, "domain", 0)))
        self.wrap(
            nvtx,
            "start_range",
            lambda a, k: self.opening(
                _arg(a, k, "message", 0), _arg(a, k, "domain", 2), "StartEnd"
            ),
            lambda a, k, r, m: self.started_range(
                r, m, _arg(a, k, "message", 0), _arg(a, k, "domain", 2)
            ),
        )
        self.wrap(
            nvtx, "end_range", None, lambda a, k, r, m: self.ended_range(_arg(a, k, "range_id", 0))
        )
        # annotate keeps its arguments as init_args = (message, color, domain, ...)
        self.wrap(
            nvtx.annotate,
            "__enter__",
            lambda a, k: self.opening(a[0].init_args[0], a[0].init_args[2], "PushPop"),
            lambda a, k, r, m: self.pushed(a[0].init_args[0], a[0].init_args[2], m),
        )
        self.wrap(nvtx.annotate, "__exit__", None,
                  lambda a, k, r, m: self.popped(a[0].init_args[2]))  # fmt: skip

    def _wrap_torch_nvtx(self) -> None:
        import torch.cuda.nvtx as tnvtx

        self.wrap(
            tnvtx,
            "range_push",
            lambda a, k: self.opening(_arg(a, k, "msg", 0), "", "PushPop"),
            lambda a, k, r, m: self.pushed(_arg(a, k, "msg", 0), "", m),
        )
        self.wrap(tnvtx, "range_pop", None, lambda a, k, r, m: self.popped(""))
        self.wrap(
            tnvtx,
            "range_start",
            lambda a, k: self.opening(_arg(a, k, "msg", 0), "", "StartEnd"),
            lambda a, k, r, m: self.started_range(r, m, _arg(a, k, "msg", 0), ""),
        )
        self.wrap(tnvtx, "range_end", None,
                  lambda a, k, r, m: self.ended_range(_arg(a, k, "range_id", 0)))  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self.undo):
            setattr(owner, attr, original)
        self.undo.clear()
        # a target range the cell left open must not keep our marker open into the next cell
        with self.lock:
            left = [m for stack in self.stacks.values() for m, _ in stack]
            left += list(self.started.values())
            self.stacks.clear()
            self.started.clear()
            self.phase_started.clear()
        with self.phase_lock:  # the phase mirror ends with the capture
            self.open_user.clear()
            self._switch_phase()
        for marker in left:
            self.close(marker)

    def ranges(self) -> list[list[str]]:
        return [list(key) for key in self.seen]

    def target_status(self) -> dict[str, Any]:
        """What ``%%ncu --nvtx`` needs to explain its outcome: the ranges the target named and
        how often they opened."""
        return {"spec": self.target, "matched": [list(key) for key in self.matched],
                "opened": self.opened}  # fmt: skip
