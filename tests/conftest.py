"""Shared fixtures: paths to the real reports in tests/data (see tests/data/README.md), and an
IPython shell with the extension loaded.

The .ncu-rep files are stored xz-compressed (each is ~15-23 MB raw, ~1 MB packed); they are
unpacked once per session into a temp folder, since ncu_report needs a real file path."""

from __future__ import annotations

import importlib.util
import lzma
import os
import shutil
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

DATA = Path(__file__).parent / "data"

# Views turn only a ReportError into a one-line note under tests; any other exception (a renamed
# or unregistered column, a bug) is re-raised so that a test fails (views/common.attempt).
os.environ["NSIGHT_MAGIC_STRICT"] = "1"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def ncu_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> unpacked .ncu-rep path, e.g. ``ncu_reports["ncu_gemm_metrics"]``."""
    out = tmp_path_factory.mktemp("ncu")
    paths = {}
    for packed in sorted(DATA.glob("*.ncu-rep.xz")):
        target = out / packed.name[: -len(".xz")]
        with lzma.open(packed) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths[target.name[: -len(".ncu-rep")]] = target
    return paths


@pytest.fixture(scope="session")
def nsys_small_sqlite() -> Path:
    return DATA / "nsys_small.sqlite"


@pytest.fixture(scope="session")
def nsys_small_parquet() -> Path:
    return DATA / "nsys_small_pq"


# torch is optional (the demo venv has none): tests whose child process imports it are marked
# ``torch`` and skip without it; in-process uses call pytest.importorskip("torch").
HAS_TORCH = importlib.util.find_spec("torch") is not None


# The worker, session manager and runner tested through BareBackend (no profiler, no report
# read): standard-library code whatever the dependency set, so ``make test-deps``' tiers
# (``-m "not stdlib"``) leave these files out and spend their time where pandas, pyarrow,
# altair and IPython are.
STDLIB_ONLY = {
    "test_session.py",
    "test_session_prewarm.py",
    "test_session_replay.py",
    "test_session_options.py",
    "test_crash_fallback.py",
    "test_bounded_waits.py",
    "test_rank_exec.py",
    "test_runner.py",
    "test_child_signals.py",
    "test_kernel_env.py",
    "test_kernel_death.py",
    "test_whole_timeout.py",
    "test_worker_channel.py",
    "test_warm_tracebacks.py",
    "test_state_graph.py",
    "test_state_bounds.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Fuzzing and the browser tests take minutes: marked ``slow`` here, in one place, so
    ``make quick`` (``-m "not slow"``) leaves them out while ``make test`` runs everything.
    Under ``pytest -n`` (xdist, ``--dist loadgroup``) the browser tests share one worker, so
    JupyterLab and Chromium start once."""
    no_torch = pytest.mark.skip(reason="needs torch (make setup installs the CPU build)")
    for item in items:
        if item.path.name.startswith("test_fuzz_") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))
        if item.path.name in STDLIB_ONLY:
            item.add_marker(pytest.mark.stdlib)
        if item.get_closest_marker("torch") and not HAS_TORCH:
            item.add_marker(no_torch)


@pytest.fixture(scope="module")
def ip() -> InteractiveShell:
    """The test process's IPython shell with ``%load_ext nsight_magic`` done."""
    import nsight_magic

    if not hasattr(nsight_magic, "load_ipython_extension"):
        pytest.fail(
            "nsight_magic was imported as a namespace package (its __init__ did not run): the "
            "editable install predates nsight_magic/__init__.py. Fix: `.venv/bin/pip install "
            "--no-deps -e .` or pytest `pythonpath = ['.']`."
        )
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    return shell


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    """A session manager of its own (no prewarm), its workers stopped after the test."""
    from nsight_magic.session.history import SetupRegistry
    from nsight_magic.session.manager import SessionManager

    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


# the drill-down fixtures (no ncu needed): drill_support.py
from drill_support import drill_manager, saved_parent  # noqa: E402, F401
