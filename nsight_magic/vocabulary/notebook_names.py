"""Which notebook names are IPython's own (never sent to a worker, never brought back): its
output and input caches and their shortcuts. A user's ``_helper``, ``_cfg`` or ``_e`` is an
ordinary name and travels like any other."""

from __future__ import annotations

import re

# ``_``, ``__``, ``___`` (last outputs), ``_i``/``_ii``/``_iii`` and ``_iN`` (inputs), ``_N``
# (output N), ``_oh``/``_ih``/``_dh`` (the caches), ``In``/``Out``, ``_exit_code`` (of ``!cmd``),
# and dunder names (``__name__``, ``__builtins__``: the module's own)
_IPYTHON_OWN = re.compile(r"_{1,3}|_i{1,3}|_i\d+|_\d+|_oh|_ih|_dh|In|Out|_exit_code|__\w+__")


def is_ipython_own(name: str) -> bool:
    """True for a name IPython keeps for itself in the user namespace."""
    return _IPYTHON_OWN.fullmatch(name) is not None
