# tilecraft developer tasks. Everything runs inside a virtual environment at .venv.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.stamp
TORCH_CPU_VERSION := 2.13.0
# Test workers: one per core (pytest-xdist).
JOBS   ?= auto

# ruff errors on paths that do not exist, so only pass the ones that do.
LINT_PATHS := $(wildcard tilecraft examples tests benchmarks setup.py)

.PHONY: venv demo docs lint test test-slow test-all test-gpu reliability wheel check-wheel format clean

venv: $(STAMP)

# Install the small local CPU torch first, unless some torch is already importable;
# otherwise the unpinned torch>=2.9 requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml setup.py
	@echo "==> [1/4] creating the virtual environment $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> [2/4] upgrading pip"
	$(PIP) install -q --upgrade pip
	@echo "==> [3/4] installing PyTorch (the $(TORCH_CPU_VERSION) CPU build, unless one is there)"
	$(PY) -c 'import torch; print("torch", torch.__version__, "is installed")' 2>/dev/null \
		|| $(PIP) install --progress-bar on torch==$(TORCH_CPU_VERSION)
	@echo "==> [4/4] installing tilecraft (editable) with Triton, the LLM SDKs, pytest, ruff, mypy"
	$(PIP) install --progress-bar on -e '.[dev,llm]'
	touch $(STAMP)
	@echo "==> $(VENV) is ready"

demo: venv
	@echo "==> running every example kernel: compile, check against PyTorch, time"
	$(VENV)/bin/tilecraft demo

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors; installs the
# `docs` extra (MkDocs, mkdocstrings) into the virtual environment the first time.
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP) pyproject.toml
	@echo "==> installing MkDocs and mkdocstrings (the docs extra)"
	$(PIP) install --progress-bar on -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@echo "==> building the documentation into site/ (mkdocs build --strict)"
	$(PY) -m mkdocs build --strict --quiet
	@echo "==> open site/index.html"

lint: venv
	@echo "==> linting: ruff, then mypy"
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy tilecraft

# The Triton of the H200 machine, installed apart (not imported by the tests): each
# compiled run of the tests also compiles its Triton code for sm_90 with it
# (TILECRAFT_CROSS_COMPILE, tilecraft/runtime/crosscompile.py), where Triton's
# interpreter would run code that a GPU's compiler refuses.
GPU_TRITON := 3.6.0
CROSS := $(VENV)/triton-$(GPU_TRITON)
$(CROSS)/.stamp: $(STAMP)
	@echo "==> installing Triton $(GPU_TRITON) into $(CROSS), to compile for sm_90 with it"
	$(PIP) install -q --no-deps --target $(CROSS) triton==$(GPU_TRITON)
	touch $@
CROSS_ENV := TILECRAFT_CROSS_COMPILE=90 TILECRAFT_CROSS_PYTHONPATH=$(abspath $(CROSS))

# The fast tier: everything but the tests marked `slow` (end-to-end runs of a minute or
# so: torch.compile with inductor, process-isolation timeouts). CPU tensors run through
# Triton's interpreter, and compile for sm_90 beside (above).
test: venv lint $(CROSS)/.stamp
	@echo "==> running the tests (not marked slow) on $(JOBS) workers"
	$(CROSS_ENV) TRITON_INTERPRET=1 $(PY) -m pytest -n $(JOBS) --dist worksteal -m "not slow" --durations=10

test-slow: venv
	@echo "==> running the slow tests"
	TRITON_INTERPRET=1 $(PY) -m pytest -n $(JOBS) --dist worksteal -m slow --durations=10

test-all: test test-slow

# The tests on a GPU (TILECRAFT_TEST_DEVICE=cuda: tensors on the GPU, compiled for it and
# eager on it), each result printed as it comes and each failure's report appended to
# FAILURES as it happens, so that a run cut short still says what failed and why. Kernels
# run their default configs (EFFORT=quick tunes them first, as users' calls do: minutes
# more). No venv: run it with the Python that has the CUDA build of PyTorch, e.g.
# `make test-gpu PY=python3 TESTS=tests/test_ops.py FAILURES=$$OUT/failures.txt`.
TESTS ?= tests
EFFORT ?= none
FAILURES ?= gpu-failures.txt
test-gpu:
	TILECRAFT_TEST_DEVICE=cuda TILECRAFT_AUTOTUNE_EFFORT=$(EFFORT) TILECRAFT_TEST_FAILURES=$(FAILURES) \
		$(PY) -m pytest -o addopts="" -n $(JOBS) -v -m "not slow" -p no:cacheprovider $(TESTS)

# Every fault of the cache, the database, the LLM search and the settings, injected for
# real (a tmpfs full disk and a read-only mount where the machine allows mounting).
reliability: venv
	@echo "==> running the reliability suite"
	TRITON_INTERPRET=1 $(PY) -m pytest -n $(JOBS) tests/test_reliability.py \
		tests/test_reliability_llm.py tests/test_reliability_run.py --durations=10

# A wheel, installed into a fresh virtual environment where every CLI command must work.
wheel: venv
	rm -rf dist build  # a stale build/ would put deleted files in the wheel
	$(PIP) wheel --no-deps -w dist .

check-wheel: wheel
	bash .ci/check_wheel dist/tilecraft-*.whl

format: venv
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
