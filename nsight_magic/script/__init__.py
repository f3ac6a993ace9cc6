"""A notebook cell -> the script a profiled process runs: IPython syntax transformed, parsed
before anything starts, NVTX ranges per statement, gating, and the hooks a warm worker calls."""

from .cell import PreparedCell, cell_filename, parse_cell, prepare_cell, statement_labels
from .runtime import PROFILER_ENV
from .template import STATUS_KEYS, Gate, build_script, history_entry, profiler_constants

__all__ = [
    "PROFILER_ENV",
    "STATUS_KEYS",
    "Gate",
    "PreparedCell",
    "build_script",
    "cell_filename",
    "history_entry",
    "parse_cell",
    "prepare_cell",
    "profiler_constants",
    "statement_labels",
]
