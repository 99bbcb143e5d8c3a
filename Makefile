# tilecraft developer tasks. Everything runs inside a virtual environment at .venv.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.stamp
TORCH_CPU_VERSION := 2.13.0

# ruff errors on paths that do not exist, so only pass the ones that do.
LINT_PATHS := $(wildcard tilecraft examples tests benchmarks)

.PHONY: venv demo lint test format clean

venv: $(STAMP)

# Install the small local CPU torch first, unless some torch is already importable;
# otherwise the unpinned torch>=2.9 requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c 'import torch' 2>/dev/null || $(PIP) install -q torch==$(TORCH_CPU_VERSION)
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

demo: venv
	$(VENV)/bin/tilecraft demo

lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy tilecraft

test: venv lint
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2

format: venv
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
