"""Our charts without altair's jsonschema validation, outside the tests.

altair validates every schema object as it is made (``Chart``, each encoding channel, each
parameter) and the whole spec again in ``to_dict``: ~0.2 s of a result's display (issue 22),
for charts that the same code builds the same way every time. The tests run strict
(``NSIGHT_MAGIC_STRICT=1``, tests/conftest.py) and keep validating, so a builder that writes a
bad spec still fails there. The user's own charts are untouched: altair's switch
(``schemapi.debug_mode``) is set only while our builders run, and put back after."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from altair.utils import schemapi

# Set to "1" by tests/conftest.py: a view's own bug (a renamed column, a typo, a bad chart
# spec) then raises instead of turning into one line that no test reads.
STRICT_ENV = "NSIGHT_MAGIC_STRICT"


def strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


@contextlib.contextmanager
def unvalidated() -> Iterator[None]:
    """Build altair objects without validating each one (validated as before when strict)."""
    if strict():
        yield
        return
    with schemapi.debug_mode(False):
        yield


def chart_spec(chart: Any) -> dict[str, Any]:
    """``chart.to_dict()``, validated only when strict."""
    return dict(chart.to_dict(validate=strict()))
