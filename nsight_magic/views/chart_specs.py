"""Our charts without altair's jsonschema validation, outside the tests.

altair validates every schema object as it is made (``Chart``, each encoding channel, each
parameter) and the whole spec again in ``to_dict``: ~0.2 s of a result's display (issue 22),
for charts that the same code builds the same way every time. The tests run strict
(``NSIGHT_MAGIC_STRICT=1``, tests/conftest.py) and keep validating, so a builder that writes a
bad spec still fails there. The user's own charts are untouched: altair's switch
(``schemapi.DEBUG_MODE``) is off only while our builders run, and put back after."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from altair.utils import schemapi

# Set to "1" by tests/conftest.py: a view's own bug (a renamed column, a typo, a bad chart
# spec) then raises instead of turning into one line that no test reads.
STRICT_ENV = "NSIGHT_MAGIC_STRICT"


def strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


_lock = threading.Lock()
_depth = 0  # our builds under way (a static copy may be built in a thread: static_view)
_saved = True  # altair's switch as it was before the first of them


@contextlib.contextmanager
def unvalidated() -> Iterator[None]:
    """Build altair objects without validating each one (validated as before when strict).
    Counted, so that overlapping builds in two threads put altair's switch back as the user
    had it once the last ends (two ``schemapi.debug_mode`` blocks could leave it off)."""
    global _depth, _saved
    if strict():
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = schemapi.DEBUG_MODE
            schemapi.DEBUG_MODE = False
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                schemapi.DEBUG_MODE = _saved


def chart_spec(chart: Any) -> dict[str, Any]:
    """``chart.to_dict()``, validated only when strict."""
    return dict(chart.to_dict(validate=strict()))
