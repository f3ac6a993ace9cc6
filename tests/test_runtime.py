"""script/runtime.py and script/range_recorder.py imported as modules and tested on the CPU, and
how build_script pastes them into the self-contained script (tests/test_script.py runs the
scripts themselves). The runtime's per-cell constants are module globals: a test sets them
with monkeypatch, as the script's header sets them for a cell."""

from __future__ import annotations

import ast
import contextlib
import json
import linecache
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.script import (
    build_script,
    cuda_gate,
    history_entry,
    prepare_cell,
    range_recorder,
    runtime,
)
from nsight_magic.script.template import (
    END_MODULE_ONLY,
    MODULE_ONLY,
    SCRIPT_MODULES,
    STATUS_KEYS,
    profiler_constants,
    script_body,
    script_constants,
)
from nsight_magic.session.variables import pack_vars
from nsight_magic.vocabulary import nvtx_names


class RecordingNvtx:
    """Stands in for the ``nvtx`` package the runtime looks up: notes each range it opens."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    @contextlib.contextmanager
    def annotate(self, message: str, domain: str) -> Iterator[None]:
        self.events.append(("push", domain, message))
        try:
            yield
        finally:
            self.events.append(("pop", domain, message))

    def start_range(self, message: str, domain: str) -> str:
        self.events.append(("start", domain, message))
        return message

    def end_range(self, handle: str) -> None:
        self.events.append(("end", "nsight_magic", handle))


@pytest.fixture
def nvtx_log(monkeypatch: pytest.MonkeyPatch) -> RecordingNvtx:
    log = RecordingNvtx()
    monkeypatch.setattr(runtime, "nvtx_module", lambda: log)
    return log


def use_cell(monkeypatch: pytest.MonkeyPatch, source: str, **constants: Any) -> None:
    """The runtime's globals for ``source``, as build_script's header would set them."""
    cell = prepare_cell(source, cell_name="unit")
    values = script_constants(cell, history=(), warmup=0, gate="nvtx", nvtx_target=None,
                              torch_nvtx="")  # fmt: skip
    for name, value in {**values, **constants}.items():
        monkeypatch.setattr(runtime, name, value)


def test_compile_statements_one_code_per_statement_in_cell_lines() -> None:
    source = "from __future__ import annotations\nx = 1\n\ndef f() -> Undefined:\n    return 2\n"
    codes = runtime.compile_statements(source, "<nsight_magic t1>", source)
    assert len(codes) == 3
    assert [min(line for *_, line in c.co_lines() if line) for c in codes] == [1, 2, 4]
    assert linecache.getline("<nsight_magic t1>", 4).startswith("def f()")
    ns: dict[str, Any] = {}
    for code in codes:  # the cell's own future import holds for its later statements
        exec(code, ns)
    assert ns["f"].__annotations__ == {"return": "Undefined"} and ns["x"] == 1


def test_statements_run_each_in_its_own_range_inside_cell(
    monkeypatch: pytest.MonkeyPatch, nvtx_log: RecordingNvtx
) -> None:
    use_cell(monkeypatch, "a = 1\nfor i in range(2):\n    a += i\nb = a * 10")
    ns: dict[str, Any] = {}
    runtime.prepare(ns)
    status = runtime.capture(ns)
    assert status["status"] == "ok" and ns["b"] == 20
    assert [(e[0], e[2]) for e in nvtx_log.events] == [
        ("start", "capture"),  # ncu's filter: a start/end range holds every thread's kernels
        ("push", "cell"),
        ("push", "L1: a = 1"), ("pop", "L1: a = 1"),
        ("push", "L2: for i in range(2): ..."), ("pop", "L2: for i in range(2): ..."),
        ("push", "L4: b = a * 10"), ("pop", "L4: b = a * 10"),
        ("pop", "cell"),
        ("end", "capture"),
    ]  # fmt: skip
    assert {e[1] for e in nvtx_log.events} == {"nsight_magic"}
    assert set(status) <= STATUS_KEYS
    assert status["gate"] == "nvtx" and status["gate_kind"] == "nvtx" and status["cell_s"] >= 0


def test_warmup_runs_the_cell_inside_one_warmup_range(
    monkeypatch: pytest.MonkeyPatch, nvtx_log: RecordingNvtx
) -> None:
    use_cell(monkeypatch, "calls.append(1)", WARMUP=2)
    ns: dict[str, Any] = {"calls": []}
    runtime.prepare(ns)
    runtime.warmup(ns)
    # both warm-ups ran (their ranges below) and left the namespace as it was: the captured
    # run starts from the notebook's state (issue 41)
    assert ns["calls"] == []
    names = [(e[0], e[2]) for e in nvtx_log.events]
    assert names[0] == ("push", "warmup") and names[-1] == ("pop", "warmup")
    assert names.count(("push", "L1: calls.append(1)")) == 2


def test_annotate_without_nvtx_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "nvtx_module", lambda: None)
    with runtime.annotate("anything", domain="d"):
        pass
    use_cell(monkeypatch, "x = 1")
    runtime.prepare({})
    assert runtime.capture({})["nvtx"] is False


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine gates for real")
def test_gate_without_a_gpu_is_none_and_its_calls_do_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cuda_gate, "CODE", "x = 1")
    gate = cuda_gate.Gate("cudaProfilerApi")
    assert (gate.kind, gate.lib) == ("none", None)
    gate.start()
    gate.stop()
    nvtx_gate = cuda_gate.Gate("nvtx")
    assert nvtx_gate.kind == "nvtx"
    nvtx_gate.start()
    nvtx_gate.stop()


@pytest.mark.skipif(cuda_gate.gpu_device_nodes(), reason="this machine shows a GPU")
def test_without_a_gpu_device_the_gate_does_not_import_torch() -> None:
    """A new worker's first cell on a machine with no GPU: nothing to gate, and learning that
    costs a stat, not torch's import (seconds), even when the cell mentions torch."""
    code = (
        "import sys\nfrom nsight_magic.script import cuda_gate\n"
        "cuda_gate.CODE = 'import torch'\ngate = cuda_gate.Gate('cudaProfilerApi')\n"
        "print(gate.kind, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["none", "False"]


def test_a_failing_cell_reports_in_cell_coordinates_and_stops_the_gate(
    monkeypatch: pytest.MonkeyPatch, nvtx_log: RecordingNvtx
) -> None:
    stops: list[str] = []
    monkeypatch.setattr(cuda_gate.Gate, "stop", lambda self: stops.append(self.kind))
    use_cell(monkeypatch, "def f(v):\n    return 1 / v\n\ny = f(0)\n")
    runtime.prepare({})
    status = runtime.capture({})
    assert status["status"] == "error" and status["exc_type"] == "ZeroDivisionError"
    assert stops == ["nvtx"] and status["gate_stop_s"] >= 0
    tb = status["traceback"]
    assert tb.startswith("Traceback") and "runtime.py" not in tb
    assert 'File "<nsight_magic unit>", line 4, in <module>' in tb
    assert 'File "<nsight_magic unit>", line 2, in f' in tb and "return 1 / v" in tb
    assert nvtx_log.events[-2:] == [
        ("pop", "nsight_magic", "cell"),
        ("end", "nsight_magic", "capture"),
    ]


def test_an_interrupt_is_its_own_status(monkeypatch: pytest.MonkeyPatch) -> None:
    use_cell(monkeypatch, "raise KeyboardInterrupt")
    runtime.prepare({})
    status = runtime.capture({})
    assert status["status"] == "interrupted" and status["exc_type"] == "KeyboardInterrupt"


def test_user_traceback_drops_only_the_runtime_frames() -> None:
    code = runtime.compile_statements("1 / 0", "<nsight_magic t2>", "1 / 0")
    with pytest.raises(ZeroDivisionError) as info:
        exec(code[0], {})
    tb = runtime.user_traceback(info.value)
    assert 'File "<nsight_magic t2>", line 1' in tb and "1 / 0" in tb
    assert __file__ in tb  # this test's frame is not the runtime's: it stays


def history(*sources: str) -> list[dict[str, Any]]:
    return [
        history_entry("setup", f"setup {i}", prepare_cell(src, cell_name=f"setup cell {i}"))
        for i, src in enumerate(sources, 1)
    ]


def test_run_history_collects_errors_and_goes_on_in_a_worker() -> None:
    ns: dict[str, Any] = {}
    errors = runtime.run_history(ns, history("a = 1", "b = undefined_name", "c = a + 1"))
    assert errors == [{"name": "setup 2", "filename": "<nsight_magic setup cell 2>",
                       "exc_type": "NameError",
                       "exc_message": "name 'undefined_name' is not defined"}]  # fmt: skip
    assert ns["a"] == 1 and ns["c"] == 2 and "b" not in ns


def test_a_replayed_system_exit_is_an_error_not_the_end_of_the_worker() -> None:
    """IPython shows a cell's SystemExit (a sys.exit(), an argparse error) and the kernel goes
    on; a replay of that cell in a worker must not end the worker either."""
    ns: dict[str, Any] = {}
    errors = runtime.run_history(ns, history("a = 1", "import sys\nsys.exit(2)", "c = a + 1"))
    assert [(e["name"], e["exc_type"], e["exc_message"]) for e in errors] == [
        ("setup 2", "SystemExit", "2")
    ]
    assert ns["c"] == 2


def test_run_history_stops_at_the_first_error_on_its_own() -> None:
    ns: dict[str, Any] = {}
    with pytest.raises(NameError):
        runtime.run_history(ns, history("a = 1", "undefined_name", "c = 3"), stop_on_error=True)
    assert ns["a"] == 1 and "c" not in ns


def test_shipped_variables_are_loaded_by_prepare_and_by_history(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shipped = pack_vars(["n", "items"], {"n": 3, "items": [1, 2]})
    vars_file = RunDir(tmp_path).write_vars(shipped)
    use_cell(monkeypatch, "total = n + sum(items)", VARS_FILE=str(vars_file))
    ns: dict[str, Any] = {}
    runtime.prepare(ns)
    runtime.run_statements(ns)
    assert ns["total"] == 6
    entry = {**history("m = n * 2")[0], "vars_file": str(vars_file)}
    ns2: dict[str, Any] = {}
    assert runtime.run_history(ns2, [entry]) == [] and ns2["m"] == 6


def test_status_file_is_rewritten_whole_at_each_step(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    status = runtime.StatusFile(str(path), status="running", phase="start")
    status.write(phase="setup")
    assert json.loads(path.read_text()) == {"status": "running", "phase": "setup"}
    status.write(status="ok", phase="done", total_s=1.5)
    assert json.loads(path.read_text()) == {"status": "ok", "phase": "done", "total_s": 1.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no .tmp left


def test_status_path_per_rank(tmp_path: Path) -> None:
    given = str(tmp_path / "status.json")
    here, name = runtime.HERE, runtime.STATUS_NAME
    assert runtime.status_path(["script.py", given], 0, here, name) == given
    assert runtime.status_path(["script.py", given], 3, here, name) == str(
        tmp_path / "status.rank3.json"
    )
    assert runtime.status_path(["script.py"], 0, here, name) == str(Path(here) / "status.json")


def test_range_recorder_notes_the_cells_own_ranges_by_import() -> None:
    import nvtx

    with range_recorder.RangeRecorder() as recorder:
        with nvtx.annotate("mine", domain="user"):
            pass
        with nvtx.annotate("ours", domain=range_recorder.DOMAIN):  # our own: not noted
            pass
    assert recorder.ranges() == [["user", "mine", "PushPop"]]
    assert nvtx.annotate.__enter__.__name__ == "__enter__"  # unwrapped again


# --- the script built from these modules ---


def module_only_names(module: types.ModuleType) -> set[str]:
    """The names a module's module-only block assigns: its placeholders."""
    source = Path(module.__file__ or "").read_text()
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(MODULE_ONLY))
    end = lines.index(END_MODULE_ONLY)
    block = ast.parse("\n".join(lines[start:end]))
    return {t.id for node in block.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)}  # fmt: skip


def top_level_assignments(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def test_the_header_sets_every_placeholder_once_and_the_script_compiles() -> None:
    cell = prepare_cell("x = {'a': 1}\nprint(f'{x}')  # {braces} and \\n stay as written")
    text = build_script(cell, history=history("y = '}{'"), warmup=2, gate="nvtx",
                        nvtx_target="LLM:prefill", torch_nvtx="ops")  # fmt: skip
    tree = ast.parse(text)
    compile(tree, "script.py", "exec")
    constants = script_constants(cell, history=history("y = '}{'"), warmup=2, gate="nvtx",
                                 nvtx_target="LLM:prefill", torch_nvtx="ops")  # fmt: skip
    placeholders = set().union(*(module_only_names(m) for m in SCRIPT_MODULES))
    assert placeholders == set(constants)  # the header writes each, and nothing else
    assigned = top_level_assignments(tree)
    header = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in constants
    }  # fmt: skip
    assert header == constants  # the values round-trip as literals
    for name in constants:
        assert assigned.count(name) == 1, name  # the module's placeholder is not pasted
    assert "from ." not in text and MODULE_ONLY not in text


def test_the_pasted_modules_define_no_name_twice() -> None:
    """One namespace in the script: a name the recorder defines must not be redefined below."""
    defined = []
    for module in SCRIPT_MODULES:
        tree = ast.parse(script_body(Path(module.__file__ or "").read_text()))
        names = top_level_assignments(tree) + [
            node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        ]  # fmt: skip
        defined.append(set(names))
    assert set.intersection(*defined) == set()


def test_placeholder_defaults_are_the_names_nvtx_names_gives() -> None:
    for module in (range_recorder, runtime):  # the gate names no range
        assert module.DOMAIN == nvtx_names.NVTX_DOMAIN
        assert module.TARGET_RANGE == nvtx_names.TARGET_RANGE
    assert runtime.CELL_RANGE == nvtx_names.CELL_RANGE
    assert runtime.WARMUP_RANGE == nvtx_names.WARMUP_RANGE
    assert runtime.RANK_FORMAT.format(3) == nvtx_names.rank_label(3)


def module_level_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(module, relative level) of each import run at import time: not inside a function."""
    found: list[tuple[str, int]] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


@pytest.mark.parametrize("module", SCRIPT_MODULES, ids=lambda m: m.__name__)
def test_the_pasted_modules_import_only_the_standard_library(module: types.ModuleType) -> None:
    source = Path(module.__file__ or "").read_text()
    pasted = module_level_imports(ast.parse(script_body(source)))
    assert pasted and all(level == 0 for _, level in pasted)
    outside = [name for name, _ in pasted if name.split(".")[0] not in sys.stdlib_module_names]
    assert outside == []
    # the module form adds only the package-relative imports the module-only block holds (the
    # recorder and the gate; the run folder's file names, which the header writes as literals)
    extra = set(module_level_imports(ast.parse(source))) - set(pasted)
    assert extra <= {("range_recorder", 1), ("cuda_gate", 1), ("shared_objects", 1),
                     ("cuda_save", 1), ("run_folders.run_dir", 2),
                     ("torch_memory", 1), ("status_file", 1), ("gpu_readings", 1),
                     ("display_frames", 1)}  # fmt: skip


def test_script_body_needs_one_module_only_block() -> None:
    body = f"a = 1\n{MODULE_ONLY}: x\nb = 2\n{END_MODULE_ONLY}\nc = 3\n"
    assert script_body(body) == "a = 1\nc = 3\n"
    with pytest.raises(RuntimeError, match="module only"):
        script_body("a = 1\n")
    with pytest.raises(RuntimeError, match="module only"):
        script_body(f"{END_MODULE_ONLY}\n{MODULE_ONLY}\n")


def test_a_re_run_takes_the_profiler_constants_the_session_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A saved nsys script re-run under ncu (a drill-down in a new process) gates as ncu's:
    the session's constants replace the header's, only those, and the variable is gone before
    the cell runs (its children never see it)."""
    for name in (*runtime.PROFILER_CONSTANTS, "CODE"):
        monkeypatch.setattr(runtime, name, getattr(runtime, name))  # restored after the test
    header_code = runtime.CODE
    constants = profiler_constants("nvtx", nvtx_target="LLM:layer", nvtx_instance=2)
    assert tuple(constants) == runtime.PROFILER_CONSTANTS
    env = {runtime.PROFILER_ENV: json.dumps({**constants, "CODE": "import os"}), "OTHER": "1"}
    runtime.take_profiler_constants(env)
    assert env == {"OTHER": "1"}
    assert (runtime.GATE, runtime.NVTX_TARGET, runtime.NVTX_INSTANCE) == ("nvtx", "LLM:layer", 2)
    assert runtime.NVTX_CAPTURE is None and runtime.MEMORY_HISTORY is False
    assert header_code == runtime.CODE  # not a profiler's: never taken from the environment
