"""``make test``'s closing line (tools/test_summary.py), read from the JUnit XML that pytest
itself writes for a small suite run here: passes, a failure, skips, and browser tests skipped
for want of Chromium (one line saying so, and how to get them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUMMARY = REPO / "tools" / "test_summary.py"

SUITE = {
    "tests/test_a.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "tests/browser/test_lab.py": (
        "import pytest\n\n"
        "@pytest.mark.parametrize('n', [1, 2, 3])\n"
        "def test_lab(n):\n"
        "    pytest.skip('no Chromium at /usr/bin/chromium (apt-get install chromium)')\n"
    ),
}


def _junit(root: Path, name: str, files: dict[str, str]) -> Path:
    """Run pytest on ``files`` (written under ``root``) and return the JUnit XML it wrote."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    xml = root / f"{name}.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"--junitxml={xml}", "--rootdir", str(root), *files],
        cwd=root, capture_output=True, timeout=120,
    )  # fmt: skip
    assert xml.is_file()
    return xml


def _summary(*runs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SUMMARY), *runs], capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _junit(tmp_path_factory.mktemp("ok"), "main", SUITE)


def test_all_passed_is_one_line_after_the_browser_notice(passing: Path) -> None:
    done = _summary(f"main suite={passing}", f"GPU-image tier={passing}")
    assert done.returncode == 0
    notice, verdict = done.stdout.strip().splitlines()
    assert notice == (
        "6 browser tests skipped: no Chromium at /usr/bin/chromium (apt-get install chromium). "
        "make test runs them once that is fixed (.ci/run installs Chromium as root)."
    )
    assert verdict.startswith("make test: PASSED (main suite 2 passed, 3 skipped in ")
    assert "; GPU-image tier 2 passed, 3 skipped in " in verdict


def test_a_failure_or_a_missing_result_fails(tmp_path: Path, passing: Path) -> None:
    failing = _junit(tmp_path, "tier", {"tests/test_b.py": "def test_b():\n    assert 0\n"})
    done = _summary(f"main suite={passing}", f"GPU-image tier={failing}")
    assert done.returncode == 1
    assert (
        "make test: FAILED (" in done.stdout and "GPU-image tier 0 passed, 1 failed" in done.stdout
    )
    done = _summary(f"main suite={passing}", f"GPU-image tier={tmp_path / 'none.xml'}")
    assert done.returncode == 1
    assert "GPU-image tier: no result (it did not run to the end)" in done.stdout


def test_no_notice_when_no_browser_test_was_skipped(tmp_path: Path) -> None:
    xml = _junit(tmp_path, "main", {"tests/test_a.py": SUITE["tests/test_a.py"]})
    done = _summary(f"main suite={xml}")
    assert (
        done.stdout.strip().splitlines() == [done.stdout.strip().splitlines()[-1]]
        and "browser" not in done.stdout
    )


def test_make_test_ends_with_the_summary_and_clean_removes_every_venv() -> None:
    # not the flags of a make this suite may run under (make test: -j2, its jobserver)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(
        ["make", "-n", "test", "clean", "VENV=.venv-never-made"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "tools/test_summary.py" in dry.stdout
    clean = next(line for line in dry.stdout.splitlines() if line.startswith("rm -rf build dist"))
    for venv in (".venv-never-made", ".venv-demo", ".venv-gpuimage", ".venv-oldest"):
        assert f" {venv}" in clean
