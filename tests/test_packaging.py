"""The package ships: one version, an SPDX license with its LICENSE file, metadata an index can
show, and ``python -m build`` gives a wheel and an sdist whose wheel installs into a fresh venv and
opens a bundled example from outside the repository."""

from __future__ import annotations

import email
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import nsight_magic
from nsight_magic.package_info import __version__
from nsight_magic.run_folders import runs

# tomllib is Python 3.11's; the dependency tier on 3.10 leaves these checks to the main suite
tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def test_one_version() -> None:
    # pyproject states none of its own: setuptools reads package_info's
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "nsight_magic.package_info.__version__"
    assert nsight_magic.__version__ == __version__
    assert runs.versions()["nsight_magic"] == __version__  # what a saved run records
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert f"## {__version__} " in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_license_is_an_spdx_expression_with_its_file() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_metadata_an_index_can_show() -> None:
    assert PROJECT["authors"] == [{"name": "nsight_magic developers"}]
    assert "Programming Language :: Python :: 3.10" in PROJECT["classifiers"]
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # SPDX says it
    page = (REPO / PROJECT["readme"]["file"]).read_text(encoding="utf-8")
    # an index page cannot resolve relative paths: no images, no links into the repository
    assert "![" not in page
    assert not re.search(r"\]\((?![a-z]+:)", page)


def _run(argv: list[str], cwd: Path) -> str:
    # no PYTHONPATH: a checkout on it (and the egg-info an editable install leaves there) would
    # answer for the package instead of what is being built and installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _checkout_copy(into: Path) -> Path:
    """The files a checkout holds (tracked, and new ones git does not ignore), so the build
    writes its egg-info and build/ there, not into the repository."""
    listed = _run(["git", "ls-files", "-z", "-co", "--exclude-standard"], REPO).split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


@pytest.mark.slow
def test_build_gives_a_wheel_and_sdist_that_install_and_open_an_example(tmp_path: Path) -> None:
    pytest.importorskip("build")
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("builds from a git checkout's files (git ls-files)")
    source = _checkout_copy(tmp_path / "checkout")
    dist = tmp_path / "dist"
    # --no-isolation: offline, with the setuptools of this environment
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        source,
    )
    (wheel,) = dist.glob("nsight_magic-*.whl")
    (sdist,) = dist.glob("nsight_magic-*.tar.gz")
    assert wheel.name.startswith(f"nsight_magic-{__version__}-")

    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(whl.read(info))
    assert metadata["Version"] == __version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert any(n.endswith("example_data/llm_prefill.sqlite.xz") for n in names)
    assert "nsight_magic/py.typed" in names
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    assert any(m.endswith("/LICENSE") for m in members)
    assert any(m.endswith("/docs/index-page.md") for m in members)
    assert any(m.endswith("/CHANGELOG.md") for m in members)
    # no test files without their fixtures (MANIFEST.in): the tests run from the repository
    assert not [m for m in members if "/tests/" in m], [m for m in members if "/tests/" in m][:5]

    # A fresh venv with the wheel alone in its site-packages; the dependencies come from this
    # environment through a .pth line (what --system-site-packages would give, but a venv made
    # from a venv would see the base interpreter's packages instead). A path added by a .pth
    # line is not a site dir, so an editable install of the repository there stays unseen.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    target = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path
    )
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(target.strip()) / "deps-of-the-test.pth").write_text("\n".join(deps) + "\n")
    # --ignore-installed: the copy of the package the .pth line shows (an editable install)
    # is not this one, and not for pip to replace
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps"]
    pip.append("--ignore-installed")
    _run([*pip, "--no-index", str(wheel)], tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    script = (
        "import nsight_magic, importlib.metadata as md\n"
        "installed = md.version('nsight-magic')\n"
        "assert installed == nsight_magic.__version__, installed\n"
        "run = nsight_magic.examples.llm()\n"
        "print(nsight_magic.__file__)\n"
        "print(len(run.kernel_summary()))\n"
    )
    # -I: isolated (no PYTHONPATH, no cwd on sys.path), so only the installed wheel can answer
    out = _run([python, "-I", "-c", script], outside).split()
    assert out[0].startswith(str(env_dir)), out[0]
    assert int(out[1]) > 0
