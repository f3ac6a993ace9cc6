# Two commands work on a fresh machine (no GPU needed):
#   make demo  - a small venv of its own (.venv-demo: the package + what runs a notebook; no torch,
#                no test or browser tooling), then execute notebooks/01_quickstart.ipynb on the
#                bundled real reports and write build/01_quickstart.html
#   make test  - set up, then lint and run the tests on every core (pytest-xdist; GPU tests are
#                skipped; see tests/gpu)
#   make quick - lint and the tests without the slow ones (fuzzing, browser): a local loop
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_VENV  ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: setup demo test quick lint gpu-test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is optional for users; the tests ship real tensors/modules, so install the CPU build.
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# --no-compile: no .pyc for the thousands of modules the notebook never imports (~110 MB)
$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q --no-compile -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python tools/run_notebook.py notebooks/01_quickstart.ipynb --html build

lint: setup
	$(BIN)/ruff check nsight_magic tests benchmarks tools
	$(BIN)/ruff format --check nsight_magic tests benchmarks tools
	$(BIN)/mypy

# -n auto: one worker per core; loadgroup keeps the browser tests on one worker (one JupyterLab)
test: lint
	$(BIN)/python -m pytest -q -n auto --dist loadgroup

quick: lint
	$(BIN)/python -m pytest -q -m "not gpu and not slow"

# On a machine with a GPU and nsys/ncu on PATH (the lent GPU: see tests/gpu/README.md).
gpu-test:
	$(PYTHON) -m pytest -q -s -m gpu tests/gpu

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf build nsight-runs .pytest_cache
