"""Browser tests: JupyterLab + ipywidgets and the static HTML copies, in headless Chromium
(``pytest -m browser tests/browser``; they skip when Chromium, Playwright or JupyterLab is
missing)."""
