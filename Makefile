# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS ?= mindspore,torch,dev

.PHONY: demo test install system-deps bench clean-venv

install: $(STAMP)

# Re-install when the package's declared dependencies change.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -e ".[$(EXTRAS)]"
	touch $@

# Debian's chromium renders the MLflow UI for the browser test (Playwright drives it).
system-deps:
	bash scripts/system-deps.sh

demo: $(STAMP)
	bash scripts/demo.sh

test: $(STAMP) system-deps
	$(PY) -m pytest -ra $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/ranktable.py
	$(PY) bench/launch.py --with-msrun
	$(PY) bench/launch_scale.py
	$(PY) bench/tracking.py
	$(PY) bench/notebook.py
	$(PY) bench/cleanup.py

clean-venv:
	rm -rf $(VENV)
