"""A JupyterLab server for the browser tests, and what they do with it: open a notebook, Run All
as a person would, find a result's output, open one of its tabs.

The server runs on 127.0.0.1 (free port, token, no browser) over a temp copy of the repo's
``notebooks/``. Its only kernel spec is installed into a temp prefix and runs this interpreter
(the project venv, with this checkout's package first on its path). Its config, data, runtime,
settings and workspace folders are temp too, so nothing of the user's setup leaks in; the server
and every kernel it started are stopped on exit, and a leftover process fails the test."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsight_magic.views.lazy_tabs import WAITING

from .conftest import REPO, refuse_other_urls

START_TIMEOUT_S = 60
RUN_ALL_TIMEOUT_S = 120

# Lab settings for a quiet, network-free front end: no news or update toasts over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    log: Path

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method == "POST" else None,
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _our_processes(marker: str) -> list[int]:
    """PIDs whose command line mentions ``marker`` (the temp root: the server's and its kernels'
    connection files live under it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def _prepare_root(root: Path, home: Path) -> dict[str, str]:
    """Temp layout <root>/notebooks, a kernel spec for this interpreter, and the env (this
    checkout's package first on the kernel's path, whatever the venv has installed)."""
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.html"))

    prefix = home / "prefix"
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name",
         "python3", "--display-name", "Python 3 (nsight_magic venv)"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    spec = json.loads((prefix / "share/jupyter/kernels/python3/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable, spec

    settings = home / "settings"
    for rel, values in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(values))

    env = dict(os.environ)
    env.update(
        JUPYTER_PATH=str(prefix / "share" / "jupyter"),  # first: our python3 spec wins
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        TMPDIR=str(home / "tmp"),  # the examples unpack their reports into temp folders
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
    )
    env.pop("JUPYTER_PREFER_ENV_PATH", None)
    (home / "tmp").mkdir()
    return env


def _stop(proc: subprocess.Popen[bytes], lab: Lab, marker: str) -> list[int]:
    """Shut the server down (it stops its kernels), escalating to SIGTERM/SIGKILL of its
    process group; then kill any process still running from our temp root. Returns those."""
    with contextlib.suppress(OSError, urllib.error.URLError):
        lab.api("/api/shutdown", method="POST")
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    deadline = time.monotonic() + 10
    left = _our_processes(marker)
    while left and time.monotonic() < deadline:  # kernels exit a moment after the server
        time.sleep(0.2)
        left = _our_processes(marker)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


@contextlib.contextmanager
def start_lab(root: Path, home: Path) -> Iterator[Lab]:
    """A JupyterLab server over ``root`` (a copy of ``notebooks/``), its state under ``home``;
    stopped on exit, with its kernels (a process left behind fails the test)."""
    env = _prepare_root(root, home)
    port, token = _free_port(), os.urandom(16).hex()
    lab = Lab(f"http://127.0.0.1:{port}", token, root, home / "server.log")
    argv = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--ServerApp.disable_check_xsrf=True", "--ServerApp.terminals_enabled=False",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        f"--LabApp.user_settings_dir={env['JUPYTERLAB_SETTINGS_DIR']}",
        f"--LabApp.workspaces_dir={env['JUPYTERLAB_WORKSPACES_DIR']}",
    ]  # fmt: skip
    if os.geteuid() == 0:  # containers and CI runners often run as root
        argv.append("--allow-root")
    with open(lab.log, "wb") as log:
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{lab.log_tail()}")
            try:
                lab.api("/api/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab not up in {START_TIMEOUT_S} s:\n{lab.log_tail()}")
                time.sleep(0.25)
        yield lab
    finally:
        left = _stop(proc, lab, str(home))
        assert not left, f"processes left after shutting jupyter lab down (killed): {left}"


# A cell's own outputs (not those nested in an Output widget).
CELL_OUTPUT = ".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output"


@dataclass
class Ran:
    """The quickstart after Run All in JupyterLab: the page, the nsys widget view, and the
    requests the page tried to send off the machine (all refused)."""

    page: Any
    nsys: Any
    blocked: list[str]


@contextlib.contextmanager
def run_all(
    lab: Lab, browser: Any, screenshots: Path, notebook: str, view: str, min_cells: int = 1
) -> Iterator[Ran]:
    """Open ``notebook`` (relative to the lab root) in JupyterLab, Run > Run All Cells, wait
    until every code cell has an execution count and the kernel is idle, and find the output
    whose text has ``view`` (e.g. "Nsight Systems: llm prefill"). Anything not to our server is
    refused, as on a machine with no internet."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked = refuse_other_urls(context, (lab.url,))
    page = context.new_page()
    page.set_default_timeout(30_000)
    status = page.locator(".jp-StatusBar-Widget", has_text="nsight_magic venv")
    try:
        # A workspace of its own: the server is shared, and Lab's default workspace would
        # reopen the notebooks earlier tests opened (their cells would count as this one's).
        workspace = Path(notebook).stem
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{notebook}?token={lab.token}")
        expect(page.locator(".jp-NotebookPanel .jp-Cell").first).to_be_visible(timeout=60_000)
        # The kernel from our spec is connected and idle before anything runs.
        expect(status).to_contain_text("Idle", timeout=60_000)
        n_code = page.locator(".jp-NotebookPanel .jp-CodeCell").count()
        assert n_code >= min_cells, f"{notebook} shows {n_code} code cells"

        # Run > Run All Cells, through the menu a person would use.
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

        page.wait_for_function(
            """n => {
                const p = [...document.querySelectorAll(
                    '.jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt')];
                return p.length === n && p.every(e => /^\\[\\d+\\]:$/.test(e.textContent.trim()));
            }""",
            arg=n_code,
            timeout=RUN_ALL_TIMEOUT_S * 1000,
        )
        expect(status).to_contain_text("Idle", timeout=60_000)  # a loaded 2-core box: slow
        tracebacks = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']"
        )
        assert tracebacks.count() == 0, tracebacks.first.inner_text()

        nsys = page.locator(CELL_OUTPUT).filter(has_text=view)
        expect(nsys).to_have_count(1)
        yield Ran(page, nsys, blocked)
    except Exception:
        page.screenshot(path=str(screenshots / f"jupyterlab_failure_{Path(notebook).stem}.png"))
        raise
    finally:
        context.close()


def open_tab(nsys: Any, label: str) -> Any:
    """Click tab ``label`` of the nsys view; return its visible page."""
    from playwright.sync_api import expect

    nsys.locator(".lm-TabBar-tab", has_text=label).first.click()
    page_ = nsys.locator(".jupyter-widget-tab > .widget-tab-contents > .lm-Widget:visible")
    expect(page_).to_have_count(1)
    # a tab is built by the kernel when first opened (views/lazy_tabs.py): wait for it, not
    # for expect's 5 s default (a clean clone's first build under make test's load took longer)
    expect(page_).not_to_contain_text(WAITING, timeout=60_000)
    return page_


def bar_marks(chart: Any) -> Any:
    """The bar marks of a vega-embed chart drawn as SVG (one path per data row, in row order)."""
    return chart.locator("g.mark-rect.role-mark path")
