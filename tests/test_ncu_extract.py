"""``ncu_report`` runs only in a child (``reports.ncu.extract``): a report that crashes it gives
a typed error and this process lives on; the child's data equals ncu's raw CSV export."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.errors import CorruptReportError, ReportError, ToolNotFoundError
from nsight_magic.reports.ncu import child
from nsight_magic.reports.ncu import extract as X
from nsight_magic.reports.ncu.report import NcuReport

NAMES = ["ncu_small_roofline", "ncu_small_full", "ncu_gemm_metrics", "ncu_gemm_roofline"]

# Found by flipping each of the first 400 bytes of ncu_gemm_metrics.ncu-rep (xor 0xFF) and running
# the child on each (ncu_report 2026.3.1): these flips make ncu_report.load_report() itself die
# with SIGABRT ("zero_copy_stream_impl_lite.cc:240] Check failed: count >= 0"), the crash that
# killed the whole pytest process (and would kill a Jupyter kernel) before the child existed.
ABORTING_FLIPS = [153, 197]


def run_extract(path: Path, out: Path, **kwargs) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "nsight_magic.reports.ncu.extract", str(path), str(out)]
    return subprocess.run(argv, capture_output=True, timeout=120, check=False, **kwargs)


def flipped(src: Path, dst: Path, offset: int) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= 0xFF
    dst.write_bytes(data)
    return dst


# --- crashes become typed errors -------------------------------------------------------------
@pytest.mark.parametrize("offset", ABORTING_FLIPS)
def test_report_that_aborts_ncu_report(ncu_reports, tmp_path, offset):
    path = flipped(ncu_reports["ncu_gemm_metrics"], tmp_path / "abort.ncu-rep", offset)
    # what NcuReport used to do in-process: load it with ncu_report directly
    direct = subprocess.run(
        [sys.executable, "-c", "import sys, ncu_report; ncu_report.load_report(sys.argv[1])", path],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if direct.returncode >= 0:
        pytest.skip(f"this ncu_report no longer crashes on the flip at {offset}")
    with pytest.raises(CorruptReportError, match="ncu_report crashed reading it") as info:
        NcuReport.open(path)
    assert str(path) in str(info.value)  # and this test process is still alive to check it


def test_garbage_after_magic_and_truncated(ncu_reports, tmp_path):
    garbage = tmp_path / "g.ncu-rep"
    garbage.write_bytes(b"NVR\x00" + np.random.default_rng(0).bytes(1 << 16))
    with pytest.raises(CorruptReportError):
        NcuReport.open(garbage)
    truncated = tmp_path / "t.ncu-rep"
    truncated.write_bytes(ncu_reports["ncu_gemm_metrics"].read_bytes()[:1000])
    with pytest.raises(CorruptReportError, match=r"t\.ncu-rep"):
        NcuReport.open(truncated)


@pytest.fixture
def fake_ncu_report(tmp_path, monkeypatch):
    """Put a fake ``ncu_report`` module with the given body first on the child's path."""

    def install(body: str) -> Path:
        fake = tmp_path / "fake"
        fake.mkdir()
        (fake / "ncu_report.py").write_text(body)
        monkeypatch.setenv("PYTHONPATH", str(fake))
        report = tmp_path / "r.ncu-rep"
        report.write_bytes(b"NVR\x00" + bytes(100))
        return report

    return install


def test_child_killed_by_signal(fake_ncu_report):
    path = fake_ncu_report("import os, signal\ndef load_report(p): os.kill(os.getpid(), 11)\n")
    with pytest.raises(CorruptReportError, match=r"crashed reading it \(SIGSEGV\)"):
        NcuReport.open(path)


def test_child_raises(fake_ncu_report):
    path = fake_ncu_report("def load_report(p): raise RuntimeError('bad block 7')\n")
    with pytest.raises(CorruptReportError, match="bad block 7") as info:
        NcuReport.open(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        "import os, sys\ndef load_report(p):\n    open(sys.argv[2], 'wb').write(b'junk')\n"
        "    os._exit(0)\n",
        "import os\ndef load_report(p): os._exit(0)\n",  # exit 0 but no output file
    ],
)
def test_unreadable_output(fake_ncu_report, body):
    with pytest.raises(CorruptReportError, match="could not be loaded back"):
        NcuReport.open(fake_ncu_report(body))


def test_timeout(fake_ncu_report):
    path = fake_ncu_report("import time\ndef load_report(p): time.sleep(60)\n")
    with pytest.raises(CorruptReportError, match="within 1 s"):
        NcuReport.open(path, timeout=1.0)


def test_ncu_report_missing(fake_ncu_report):
    path = fake_ncu_report("raise ImportError('no ncu_report here')\n")
    with pytest.raises(ToolNotFoundError, match="pip install ncu-report"):
        NcuReport.open(path)


def test_no_launches_is_corrupt(fake_ncu_report):
    body = "class C:\n    def num_ranges(self): return 0\ndef load_report(p): return C()\n"
    with pytest.raises(CorruptReportError, match="holds no complete profiled kernel"):
        NcuReport.open(fake_ncu_report(body))


def test_only_plain_data_is_unpickled(tmp_path):
    with pytest.raises(pickle.UnpicklingError):
        child.PlainUnpickler(io.BytesIO(pickle.dumps(Path("x")))).load()
    data = {"a": [1.0, "s", (1, None)]}
    assert child.PlainUnpickler(io.BytesIO(pickle.dumps(data, protocol=5))).load() == data


def test_temp_dir_is_removed(ncu_reports, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert len(NcuReport.open(ncu_reports["ncu_gemm_metrics"])) == 2
    with pytest.raises(ReportError):
        NcuReport.open(flipped(ncu_reports["ncu_gemm_metrics"], tmp_path / "a.ncu-rep", 153))
    assert list(scratch.iterdir()) == []


# --- the child --------------------------------------------------------------------------------
def test_child_stays_light(ncu_reports, tmp_path):
    code = (
        "import sys\nfrom nsight_magic.reports.ncu import extract\n"
        "assert extract.main(sys.argv[1:]) == 0\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'nsight_magic.reports.ncu.report') "
        "if m in sys.modules))\n"
    )
    argv = [sys.executable, "-c", code, str(ncu_reports["ncu_gemm_metrics"]), "out.pkl"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=True)
    assert proc.stdout.strip() == "[]"
    assert (tmp_path / "out.pkl").exists() and not (tmp_path / "out.pkl.part").exists()


def test_usage():
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_magic.reports.ncu.extract"], capture_output=True, check=False
    )
    assert proc.returncode == X.EXIT_USAGE


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return np.nan


@pytest.mark.parametrize("name", NAMES)
def test_extraction_equals_ncu_raw_csv(ncu_reports, data_dir, tmp_path, name):
    out = tmp_path / "out.pkl"
    proc = run_extract(ncu_reports[name], out)
    assert proc.returncode == 0, proc.stderr
    with open(out, "rb") as fh:
        data = child.PlainUnpickler(fh).load()
    assert data["format"] == X.FORMAT
    frame = pd.read_csv(data_dir / "ncu_raw" / f"{name}.raw.csv", dtype=str, keep_default_na=False)
    raw, units = frame.iloc[1:].reset_index(drop=True), frame.iloc[0]
    assert len(data["launches"]) == len(raw)
    compared = 0
    for launch, got in enumerate(data["launches"]):
        # the CLI prints the function name, or a shortened demangled name around it
        assert got["function"] in raw.at[launch, "Kernel Name"]
        for metric, value in got["metrics"].items():
            if metric not in raw.columns:
                continue
            if isinstance(value, str):
                assert value == raw.at[launch, metric], metric
                continue
            expected = number(raw.at[launch, metric])
            if np.isnan(expected):
                continue
            assert value == pytest.approx(expected, rel=1e-4, abs=0.006), metric
            if units[metric]:  # units are read after the strings: then they match the CLI
                assert data["units"][metric] == units[metric], metric
            compared += 1
        for section, listed in got["sections"]:
            assert isinstance(section, str) and all(isinstance(n, str) for n in listed)
    assert compared > 0.9 * sum(
        isinstance(v, float) for launch in data["launches"] for v in launch["metrics"].values()
    )


def test_nvtx_and_names_round_trip(ncu_reports, tmp_path):
    out = tmp_path / "out.pkl"
    assert run_extract(ncu_reports["ncu_gemm_roofline"], out).returncode == 0
    with open(out, "rb") as fh:
        launch = child.PlainUnpickler(fh).load()["launches"][0]
    assert launch["nvtx"] == [
        ("nsight_magic", "PushPop", 0, "cell"),
        ("nsight_magic", "PushPop", 1, "L1: C = A @ B  # bf16 2048x1024x512"),
    ]
    assert launch["mangled"].startswith("_Z") or launch["mangled"] == launch["function"]


def test_sections_fall_back_to_raw_metric_families() -> None:
    """Nsight Compute 2025.3's own ncu_report has no IAction.sections() (seen on the GPU
    machine); the extraction then groups metrics by family instead of failing."""
    from nsight_magic.reports.ncu.extract import raw_metric_families

    metrics = {"dram__bytes.sum": 1.0, "gpu__time_duration.sum": 2.0, "dram__cycles.avg": 3.0}
    assert raw_metric_families(metrics) == [
        ("Raw metrics: dram", ["dram__bytes.sum", "dram__cycles.avg"]),
        ("Raw metrics: gpu", ["gpu__time_duration.sum"]),
    ]


KERNEL = """
import signal, sys, threading, time
from pathlib import Path
from nsight_magic.reports.ncu.report import NcuReport
signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel while a cell runs
said = []

def load():  # a profile in a thread (the picker's "Profile with ncu") reads its report
    try:
        NcuReport.open(Path(sys.argv[1]))
    except Exception as exc:
        said.append(str(exc))

thread = threading.Thread(target=load)
thread.start()
print("ready", flush=True)
try:
    time.sleep(60)  # the cell the user interrupts meanwhile
except KeyboardInterrupt:
    pass
thread.join(60)
print(said)
"""


def test_interrupting_a_cell_does_not_stop_a_read_in_a_thread(fake_ncu_report, tmp_path):
    """Jupyter interrupts a kernel with SIGINT to its whole process group (jupyter_client
    ``LocalProvisioner.send_signal``). A report read in a thread meanwhile is not the cell: its
    child died there, and the report was called damaged ("crashed reading it (SIGINT)")."""
    path = fake_ncu_report(
        "import time\ndef load_report(p):\n"
        "    time.sleep(2)\n    raise RuntimeError('read to the end')\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], str(root)])}
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(path)], env=env, text=True,
                              stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        assert kernel.stdout is not None and kernel.stdout.readline().strip() == "ready"
        time.sleep(0.7)  # the child is reading
        os.killpg(kernel.pid, signal.SIGINT)  # what Jupyter's interrupt button does
        out, _ = kernel.communicate(timeout=60)
    finally:
        if kernel.poll() is None:
            kernel.kill()
    assert "read to the end" in out and "SIGINT" not in out, out
