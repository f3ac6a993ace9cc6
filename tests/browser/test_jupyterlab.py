"""JupyterLab 4 with the real front end: open notebooks/01_quickstart.ipynb, Run All, and use
the %%nsys result as a person would: it renders as the live ipywidgets view (not its static
HTML), its charts draw with no internet (altair's JupyterChart, vega-embed from the kernel),
hovering a bar shows its tooltip, clicking a bar selects that kernel in the picker, brushing the
timeline's overview zooms the timeline, and the picker answers Profile.

The server runs on 127.0.0.1 (free port, token, no browser) over a temp copy of the repo's
``notebooks/``; the quickstart opens the runs bundled with the package
(``nsight_magic.examples``). Its only kernel spec is installed into a temp prefix and runs this
interpreter (the project venv, with this checkout's package first on its path). Its config,
data, runtime, settings and workspace folders are temp too, so nothing of the user's setup
leaks in; the server and every kernel it started are stopped in the fixture's teardown, and a
leftover process fails the test."""

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

from .conftest import REPO, failed, require

pytestmark = pytest.mark.browser

NOTEBOOK = "notebooks/01_quickstart.ipynb"
NSYS_TABS = ["Kernels", "NVTX", "Timeline", "Memory", "Gaps", "Profile a kernel"]
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


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require("jupyterlab")
    require("ipykernel")
    root = tmp_path_factory.mktemp("lab_root")
    home = tmp_path_factory.mktemp("lab_home")
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


@pytest.fixture(scope="module")
def ran(lab: Lab, browser: Any, screenshots: Path) -> Iterator[Ran]:
    """Open the quickstart in JupyterLab, Run > Run All Cells, wait until every code cell has
    an execution count and the kernel is idle. Anything not to our server is refused, as on a
    machine with no internet."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []

    def only_local(route: Any) -> None:
        if route.request.url.startswith(lab.url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    page.set_default_timeout(30_000)
    status = page.locator(".jp-StatusBar-Widget", has_text="nsight_magic venv")
    try:
        page.goto(f"{lab.url}/lab/tree/{NOTEBOOK}?token={lab.token}")
        expect(page.locator(".jp-NotebookPanel .jp-Cell").first).to_be_visible(timeout=60_000)
        # The kernel from our spec is connected and idle before anything runs.
        expect(status).to_contain_text("Idle", timeout=60_000)
        n_code = page.locator(".jp-NotebookPanel .jp-CodeCell").count()
        assert n_code >= 7, f"{NOTEBOOK} shows {n_code} code cells"

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
        expect(status).to_contain_text("Idle")
        tracebacks = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']"
        )
        assert tracebacks.count() == 0, tracebacks.first.inner_text()

        nsys = page.locator(CELL_OUTPUT).filter(has_text="Nsight Systems: llm prefill")
        expect(nsys).to_have_count(1)
        yield Ran(page, nsys, blocked)
    except Exception:
        page.screenshot(path=str(screenshots / "jupyterlab_failure.png"))
        raise
    finally:
        context.close()


@pytest.fixture(autouse=True)
def screenshot_on_failure(
    request: pytest.FixtureRequest, ran: Ran, screenshots: Path
) -> Iterator[None]:
    yield
    if failed(request):
        ran.page.screenshot(path=str(screenshots / f"jupyterlab_failure_{request.node.name}.png"))


def _open_tab(nsys: Any, label: str) -> Any:
    """Click tab ``label`` of the nsys view; return its visible page."""
    from playwright.sync_api import expect

    nsys.locator(".lm-TabBar-tab", has_text=label).first.click()
    page_ = nsys.locator(".jupyter-widget-tab > .widget-tab-contents > .lm-Widget:visible")
    expect(page_).to_have_count(1)
    return page_


def _bars(chart: Any) -> Any:
    """The bar marks of a vega-embed chart drawn as SVG (one path per data row, in row order)."""
    return chart.locator("g.mark-rect.role-mark path")


def test_nsys_result_is_live_widget(ran: Ran) -> None:
    """The %%nsys result shows as the ipywidgets view (Tab with the view's labels), not as its
    static text/html fallback: the widget manager of JupyterLab worked."""
    from playwright.sync_api import expect

    nsys = ran.nsys
    nsys.scroll_into_view_if_needed()
    expect(nsys).not_to_contain_text("Error displaying widget")
    expect(nsys.locator(".jupyter-widgets.widget-vbox").first).to_be_visible()
    # ... and not the static form (the same findings as plain HTML, for readers with no kernel).
    expect(nsys.locator(".nsight-magic.nsys")).to_have_count(0)
    tabs = nsys.locator(".jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab")
    expect(tabs).to_have_text(NSYS_TABS)
    # The Kernels page is open and lists the report's real kernels by their short names.
    kernels = nsys.locator(".widget-html table").first
    expect(kernels).to_contain_text("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT")
    expect(kernels).to_contain_text("vectorized_layer_norm_kernel")


def test_widget_charts_render_offline(ran: Ran, screenshots: Path) -> None:
    """Every chart in the tabs is drawn live by vega-embed (an SVG with marks, not a picture),
    with no internet: the library came from the kernel, nothing was asked of a CDN."""
    from playwright.sync_api import expect

    for tab in ("Kernels", "NVTX", "Timeline"):
        page_ = _open_tab(ran.nsys, tab)
        expect(page_).not_to_contain_text("live chart unavailable")
        expect(page_).not_to_contain_text("JavaScript Error")
        chart = page_.locator(".vega-embed svg.marks").first
        expect(chart).to_be_visible(timeout=60_000)
        assert _bars(page_.locator(".vega-embed").first).count() > 0
    ran.page.screenshot(path=str(screenshots / "jupyterlab_timeline.png"))
    assert not [u for u in ran.blocked if "esm.sh" in u or "cdn" in u], ran.blocked


def test_hover_shows_tooltip_with_full_name(ran: Ran, screenshots: Path) -> None:
    from playwright.sync_api import expect

    page_ = _open_tab(ran.nsys, "Kernels")
    chart = page_.locator(".vega-embed").first
    bars = _bars(chart)
    expect(bars.first).to_be_visible(timeout=60_000)
    bars.first.hover()
    tooltip = ran.page.locator("#vg-tooltip-element")
    expect(tooltip).to_be_visible()
    # The full kernel name and its launch config, not just the axis label.
    expect(tooltip).to_contain_text("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT")
    expect(tooltip).to_contain_text("grid")
    expect(tooltip).to_contain_text("registers")
    chart.screenshot(path=str(screenshots / "jupyterlab_tooltip.png"))
    ran.page.mouse.move(0, 0)


def test_click_on_bar_selects_kernel_in_picker(ran: Ran, screenshots: Path) -> None:
    """Click the second bar (vectorized_layer_norm_kernel) in Kernels: the picker on its tab
    now has that kernel chosen, and the chart dims the other bars."""
    from playwright.sync_api import expect

    page_ = _open_tab(ran.nsys, "Kernels")
    chart = page_.locator(".vega-embed").first
    bars = _bars(chart)
    expect(bars.nth(1)).to_be_visible(timeout=60_000)
    bars.nth(1).click()
    picker_page = _open_tab(ran.nsys, "Profile a kernel")
    select = picker_page.locator(".widget-select select")
    expect(select).to_be_visible()
    chosen = select.locator("option:checked")
    expect(chosen).to_contain_text("vectorized_layer_norm_kernel", timeout=15_000)
    picker_page.screenshot(path=str(screenshots / "jupyterlab_picker_after_click.png"))
    # Back on Kernels: the picked bar stays opaque, the others are dimmed (focus param).
    page_ = _open_tab(ran.nsys, "Kernels")
    bars = _bars(page_.locator(".vega-embed").first)
    expect(bars.nth(0)).to_have_attribute("opacity", "0.3")
    opacity = bars.nth(1).get_attribute("opacity")
    assert opacity in (None, "1"), opacity
    page_.screenshot(path=str(screenshots / "jupyterlab_kernels_focus.png"))


def test_brush_on_timeline_zooms(ran: Ran, screenshots: Path) -> None:
    """Drag across the middle of the overview: the timeline below re-reads that window (its
    status says so, 'Show all' is enabled) and its x axis starts past zero."""
    from playwright.sync_api import expect

    page_ = _open_tab(ran.nsys, "Timeline")
    overview, detail = page_.locator(".vega-embed").nth(0), page_.locator(".vega-embed").nth(1)
    expect(overview.locator("svg.marks")).to_be_visible(timeout=60_000)
    expect(page_).to_contain_text("whole capture")
    ticks = detail.locator("g.role-axis-label text")
    first_tick = ticks.first.text_content()
    area = overview.locator("g.mark-rect.role-mark").first.bounding_box()
    plot = overview.locator("path.background").first.bounding_box()
    y = plot["y"] + plot["height"] / 2
    x0, x1 = plot["x"] + plot["width"] * 0.4, plot["x"] + plot["width"] * 0.6
    assert area is not None
    ran.page.mouse.move(x0, y)
    ran.page.mouse.down()
    ran.page.mouse.move(x1, y, steps=8)
    ran.page.mouse.up()
    # The overview spans 0-9 ms here: a fifth of it is a window of about 1.8 ms.
    expect(page_).to_contain_text(re.compile(r"window 1\.[6-9]\d* ms"), timeout=15_000)
    expect(page_.locator("button", has_text="Show all")).to_be_enabled()
    expect(ticks.first).not_to_have_text(first_tick)
    page_.screenshot(path=str(screenshots / "jupyterlab_timeline_zoomed.png"))
    page_.locator("button", has_text="Show all").click()
    expect(page_).to_contain_text("whole capture")


def test_picker_reacts_to_profile(ran: Ran, screenshots: Path) -> None:
    """Profile a kernel tab: choose a kernel, press Profile; with no GPU and no ncu here the
    picker must answer with its one-line status (progress, then the error)."""
    from playwright.sync_api import expect

    nsys, page = ran.nsys, ran.page
    picker_page = _open_tab(nsys, "Profile a kernel")
    picker = picker_page.locator(".widget-select select")
    expect(picker).to_be_visible()
    options = picker.locator("option")
    assert options.count() >= 2
    second = options.nth(1).get_attribute("value")
    picker.select_option(index=1)
    expect(picker).to_have_value(second)

    button = picker_page.locator("button", has_text="Profile with ncu")
    expect(button).to_be_enabled()
    button.click()
    # No ncu on this machine: the run ends, the button comes back, and the line says why.
    failed = picker_page.locator(".widget-html", has_text="profile failed:")
    expect(failed).to_have_count(1)
    expect(button).to_be_enabled()
    text = failed.inner_text().strip()
    assert "\n" not in text, text
    # The quickstart's run was opened from a file: the one line must say so (no TypeError).
    assert "opened from a report file" in text, text

    nsys.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(screenshots / "jupyterlab_quickstart.png"))
    nsys.screenshot(path=str(screenshots / "jupyterlab_quickstart_picker.png"))


def test_ncu_view_shows_advice_first_and_live_roofline(ran: Ran, screenshots: Path) -> None:
    from playwright.sync_api import expect

    ncu = ran.page.locator(CELL_OUTPUT).filter(has_text="Nsight Compute: llm prefill: top GEMM")
    expect(ncu).to_have_count(1)
    ncu.scroll_into_view_if_needed()
    tabs = ncu.locator(".jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab")
    expect(tabs.first).to_have_text("Advice")
    ncu.locator(".lm-TabBar-tab", has_text="Roofline").click()
    roofline = ncu.locator(".vega-embed:visible").first
    expect(roofline.locator("svg.marks")).to_be_visible(timeout=60_000)
    expect(roofline).to_contain_text("DRAM")  # the slope is in the legend
    expect(roofline).to_contain_text("nvjet_sm90")  # the point is labelled
    expect(ncu).to_contain_text("compute-bound")
    ncu.screenshot(path=str(screenshots / "jupyterlab_roofline.png"))
