"""The file names notebook code runs under in a worker, spelled in one place, so that every
frame of a notebook cell (Python samples, idle causes, tracebacks, the allocator's stacks) names
that cell and its line.

- the profiled cell: ``<nsight_magic NAME>`` (``script.cell_filename``: NAME is "cell", or
  ``--name``), read ``cell L<n>``;
- a setup cell or profiled cell the worker replayed, and the functions and classes a setup cell
  defined that the notebook sent by value: ``<nsight_magic setup 3: data>`` (``history_file``:
  the history id and name), read ``setup 'data' L<n>``;
- the functions and classes of an ordinary notebook cell sent by value:
  ``<nsight_magic In [7]>`` (``notebook_cell_file``: IPython's execution count), read
  ``In [7] L<n>``.

cloudpickle replaces a by-value function's file name with ``<dynamic-code>``
(``DYNAMIC_CODE``); the notebook's pickler puts one of the names above instead
(``shared_state/describe.py``). A run made before that still has it: its frames read
``notebook cell L<n>`` (which cell is lost). Stdlib only: a leaf module.
"""

from __future__ import annotations

import re

DYNAMIC_CODE = "<dynamic-code>"
# a replayed (or sent) history entry: <nsight_magic setup 3: data>, <nsight_magic cell 5: name>
HISTORY_FILE = re.compile(r"^<nsight_magic (?P<kind>setup|cell) (?P<id>\d+): (?P<name>.*)>$")
NOTEBOOK_CELL_FILE = re.compile(r"^<nsight_magic In \[(?P<number>\d+)\]>$")
ANY_CELL_FILE = re.compile(r"^<nsight_magic .*>$")


def history_file(kind: str, entry_id: int, name: str) -> str:
    """The file name of a history entry's code (a setup cell, a profiled cell)."""
    return f"<nsight_magic {kind} {entry_id}: {name}>"


def notebook_cell_file(number: int) -> str:
    """The file name of code an ordinary notebook cell ``In [number]`` defined."""
    return f"<nsight_magic In [{number}]>"


def is_profiled_cell(file: str) -> bool:
    """The profiled cell's own file (not a replayed, sent or ordinary cell's)."""
    return bool(
        ANY_CELL_FILE.match(file)
        and not HISTORY_FILE.match(file)
        and not NOTEBOOK_CELL_FILE.match(file)
    )


def frame_label(file: str, line: object, function: str) -> str:
    """One frame as the user reads it: ``setup 'data' L5 __getitem__``, ``In [7] L3 f``,
    ``cell L2`` (module-level code names no function), else ``file.py:line function`` (the
    file by its name)."""
    func = "" if function in ("<module>", "") else f" {function}"
    replayed = HISTORY_FILE.match(file)
    if replayed:
        name = repr(replayed["name"]) if replayed["name"] else f"#{replayed['id']}"
        return f"{replayed['kind']} {name} L{line}{func}"
    cell = NOTEBOOK_CELL_FILE.match(file)
    if cell:
        return f"In [{cell['number']}] L{line}{func}"
    if ANY_CELL_FILE.match(file):
        return f"cell L{line}{func}"
    if file == DYNAMIC_CODE:  # sent by value before file names were kept: the cell is unknown
        return f"notebook cell L{line}{func}"
    return f"{file.rsplit('/', 1)[-1]}:{line} {function}".rstrip()
