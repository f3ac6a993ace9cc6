# Two commands work on a fresh machine (no GPU needed):
#   make demo  - a small venv of its own (.venv-demo: the package + what runs a notebook; no torch,
#                no test or browser tooling), then execute notebooks/01_quickstart.ipynb on the
#                bundled real reports and write build/01_quickstart.html
#   make test  - set up, then lint and run the tests on every core (pytest-xdist; GPU tests are
#                skipped; see tests/gpu), beside them the fast tier under the GPU image's pandas
#                and pyarrow (tests/deps/gpuimage.txt); ends with one line, "make test: PASSED
#                ..." or "make test: FAILED ...", and says so when the browser tests were skipped
#   make quick - lint and the tests without the slow ones (fuzzing, browser): a local loop
#   make fuzz  - the long fuzzing campaign (4x the cases make test runs; ~10 min on 2 cores)
#   make test-deps - the fast tier again under each dependency set in tests/deps (the GPU image's
#                pandas 3.0.6 + pyarrow 25; the oldest versions pyproject allows), one venv each
#   make clean - remove build output, run folders and every venv this Makefile made (.venv,
#                .venv-demo, .venv-gpuimage, .venv-oldest: about 3 GB after make test)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_VENV  ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
TORCH_VERSION   ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# each test run's JUnit XML, which tools/test_summary.py reads for the closing line
RESULTS := build/test-results

.PHONY: setup demo test test-main quick fuzz lint gpu-test bench clean test-deps test-deps-gpuimage test-deps-oldest readme-images

# torch is optional for users; the tests ship real tensors/modules, so .venv gets the CPU build
# from PyTorch's CPU index as PyTorch documents it (the default index's Linux wheel is the CUDA
# build, GBs larger). Where that index cannot be reached, pip fails fast and quietly (no
# retries) and the default index's torch is taken.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --retries 0 --timeout 10 torch==$(TORCH_VERSION) \
	    --index-url $(TORCH_CPU_INDEX) 2>/dev/null \
	  || { echo "$(TORCH_CPU_INDEX) not reachable: torch from the default index"; \
	       $(BIN)/pip install -q torch==$(TORCH_VERSION) || $(BIN)/pip install -q torch; }
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

# The main suite and the GPU image's dependency tier run side by side: the suite leaves a core
# idle a third of its time (tests waiting on workers, kernels, JupyterLab), which the tier fills.
# The oldest tier runs in CI after it (.ci/run: make test-deps-oldest) and in make test-deps.
# -k: both run to the end; then one closing line for both (and lint), which CI can read.
test: setup
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@$(MAKE) --no-print-directory lint || { echo "make test: FAILED (lint)"; exit 1; }
	-@$(MAKE) --no-print-directory -j2 --output-sync=target -k test-main test-deps-gpuimage
	@$(BIN)/python tools/test_summary.py "main suite=$(RESULTS)/main.xml" \
	    "GPU-image tier=$(RESULTS)/gpuimage.xml"

# -n auto: one worker per core; loadgroup keeps the browser tests on one worker (one JupyterLab)
test-main: setup
	@mkdir -p $(RESULTS)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup --junitxml=$(RESULTS)/main.xml

# The dependency matrix: tests/deps/NAME.txt pins a dependency set; .venv-NAME gets the package
# under it (no torch: tests that need it skip) and runs the fast tier, less the worker/session/
# runner tests (marked stdlib in tests/conftest.py: subprocess logic on the standard library,
# the same under any dependency set) and the browser tests (slow).
MATRIX := gpuimage oldest
MATRIX_TESTS := -m "not gpu and not slow and not stdlib" --ignore=tests/browser

# The oldest tier also runs on the oldest Python pyproject allows (3.10) where this machine has
# one (pyenv's, or python3.10 on PATH); elsewhere on $(PYTHON), and it says so.
PYTHON_OLDEST ?= $(or $(shell for p in python3.10 $(HOME)/.pyenv/versions/3.10*/bin/python3.10; do \
                   "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null \
                   && echo "$$p" && break; done),$(PYTHON))
MATRIX_PYTHON_gpuimage := $(PYTHON)
MATRIX_PYTHON_oldest   := $(PYTHON_OLDEST)

.venv-%/.installed: tests/deps/%.txt tests/deps/test.txt pyproject.toml
	rm -rf .venv-$*
	$(MATRIX_PYTHON_$*) -m venv .venv-$*
	@.venv-$*/bin/python -c 'import sys; print(".venv-$*: Python %d.%d.%d" % sys.version_info[:3])'
	.venv-$*/bin/pip install -q --upgrade pip
	.venv-$*/bin/pip install -q -c tests/deps/$*.txt -r tests/deps/$*.txt -r tests/deps/test.txt
	.venv-$*/bin/pip install -q -c tests/deps/$*.txt -e .
	touch $@

# a static pattern rule: make searches no implicit rule for .PHONY targets
$(addprefix test-deps-,$(MATRIX)): test-deps-%: .venv-%/.installed
	@mkdir -p $(RESULTS)
	.venv-$*/bin/python -m pytest -q $(MATRIX_TESTS) --junitxml=$(RESULTS)/$*.xml

test-deps: $(addprefix test-deps-,$(MATRIX))

fuzz: setup
	NSIGHT_MAGIC_FUZZ_SCALE=4 $(BIN)/python -m pytest -q -n auto tests/test_fuzz_reports.py \
	    tests/test_fuzz_views.py tests/test_fuzz_magics.py

quick: lint
	$(BIN)/python -m pytest -q -m "not gpu and not slow"

# The README's screenshots, taken in JupyterLab by the browser test that checks those views.
readme-images: setup
	NSIGHT_MAGIC_README_IMAGES=docs/images $(BIN)/python -m pytest -q tests/browser/test_readme_images.py

# On a machine with a GPU and nsys/ncu on PATH (the lent GPU: see tests/gpu/README.md).
gpu-test:
	$(PYTHON) -m pytest -q -s -m gpu tests/gpu

bench: setup
	$(BIN)/python -m benchmarks

# every venv this Makefile made: .venv, .venv-demo and one per dependency set
clean:
	rm -rf build dist nsight-runs .pytest_cache $(VENV) $(DEMO_VENV) $(addprefix .venv-,$(MATRIX))
