"""A notebook cell -> the script a profiled process runs: IPython syntax transformed, parsed
before anything starts, NVTX ranges per statement, gating, and the hooks a warm worker calls."""

from .cell import PreparedCell, cell_filename, parse_cell, prepare_cell, statement_labels
from .template import STATUS_KEYS, Gate, build_script, history_entry

__all__ = [
    "STATUS_KEYS",
    "Gate",
    "PreparedCell",
    "build_script",
    "cell_filename",
    "history_entry",
    "parse_cell",
    "prepare_cell",
    "statement_labels",
]
