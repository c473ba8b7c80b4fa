# `make demo` and `make test` work from a clean clone: the venv is made and
# filled from this project's own files on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test lint demo bench docs clean

$(STAMP): pyproject.toml requirements-torch.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-torch.txt
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

demo: $(STAMP)
	$(VENV)/bin/fastaiagent demo

bench: $(STAMP)
	$(PY) bench/turn_overhead.py

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache
