# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS ?= mindspore,torch,dev

.PHONY: demo test install system-deps bench soak clean-venv

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

# 100 failure cycles of real jobs (crash, SIGSEGV, TERM-ignoring and setsid grandchildren, double
# fork, SIGINT/SIGTERM/SIGKILL to the launcher, kernel interrupt): 0 processes may be left.
# Not part of `make test` (about 6 minutes); the suite runs a sample. CYCLES=N to change.
soak: $(STAMP)
	$(PY) tests/launcher/soak.py --cycles $(or $(CYCLES),100)

clean-venv:
	rm -rf $(VENV)
