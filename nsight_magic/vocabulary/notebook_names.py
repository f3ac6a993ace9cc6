"""Which notebook names are IPython's own (never sent to a worker, never brought back): its
output and input caches and their shortcuts; and which are torch.compile's (``is_compiler_own``).
A user's ``_helper``, ``_cfg`` or ``_e`` is an ordinary name and travels like any other."""

from __future__ import annotations

import re

# ``_``, ``__``, ``___`` (last outputs), ``_i``/``_ii``/``_iii`` and ``_iN`` (inputs), ``_N``
# (output N), ``_oh``/``_ih``/``_dh`` (the caches), ``In``/``Out``, ``_exit_code`` (of ``!cmd``),
# and dunder names (``__name__``, ``__builtins__``: the module's own)
_IPYTHON_OWN = re.compile(r"_{1,3}|_i{1,3}|_i\d+|_\d+|_oh|_ih|_dh|In|Out|_exit_code|__\w+__")


def is_ipython_own(name: str) -> bool:
    """True for a name IPython keeps for itself in the user namespace."""
    return _IPYTHON_OWN.fullmatch(name) is not None


# torch.compile (dynamo) installs globals into the module of each function it compiles, so a
# function defined in the notebook (or in a worker, made there by its own def) fills that
# namespace with its compiled code, its CUDA graphs' trees, streams and the builtins it saw:
# ``__compiled_fn_1_<uuid>``, ``__resume_at_30_2``, ``__builtins_dict___0``,
# ``__import_torch_dot_nn``, ``__gen_rand_values``, ``_stream_cuda_<id>_c0``, ``_event_<id>_c1``,
# ``___unnamed_scope_<id>_c2`` (torch/_dynamo/output_graph.py: install_global, and
# install_global_by_id's ``{prefix}_{id}_c{compile_id}``). Each side's dynamo makes its own:
# they are never shared (describing them walked into CUDA graph trees: the H100 worker died
# after a torch.compile(mode="reduce-overhead") cell, 2026-12-07).
_COMPILER_OWN = re.compile(
    r"__(compiled_fn|resume_at|builtins_dict__|import_|gen_rand_values|warnings_warn_wrapper)\w*"
    r"|_\w+_\d+_c\d+"
)


def is_compiler_own(name: str) -> bool:
    """True for a global torch.compile installed (never the user's: see ``_COMPILER_OWN``)."""
    return _COMPILER_OWN.fullmatch(name) is not None
