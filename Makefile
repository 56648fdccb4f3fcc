# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# pyproject.toml declares ranges; the exact versions installed here come from the lock
# (constraints/py311.txt, constraints/py39.txt; refresh with scripts/constraints.sh).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS ?= mindspore,torch,dev
LOCK   ?= constraints/py311.txt

# `make test-compat`: the oldest supported Python with the oldest supported releases
# (MLflow 3.1, MindSpore 2.9). No torch there: PyPI's torch for 3.9 is a CUDA build of GBs.
PYTHON39 ?= $(shell bash scripts/find-python.sh 3.9)
VENV39   ?= .venv39
PY39     := $(VENV39)/bin/python
STAMP39  := $(VENV39)/.installed
EXTRAS39 ?= mindspore,dev
LOCK39   ?= constraints/py39.txt

# `make test-compat37`: ranks on Python 3.7, the Python of the platform's Ascend TensorFlow 1.15
# and MindSpore 1.x images. The plugin runs in .venv (3.11); .venv37 holds what such an image's
# ranks import (TensorFlow 1.15.5 on CPU, MindSpore 2.0.0: the last release with a cp37 wheel),
# never the plugin: the launcher gives a 3.7 rank the rank side itself (docs/compat.md).
PYTHON37 ?= $(shell bash scripts/find-python.sh 3.7)
VENV37   ?= .venv37
PY37     := $(VENV37)/bin/python
STAMP37  := $(VENV37)/.installed
LOCK37   ?= constraints/py37.txt
REQS37   ?= tensorflow==1.15.5 mindspore==2.0.0 ipykernel

.PHONY: demo test test-fast typecheck test-compat test-compat37 install system-deps bench soak clean-venv wheel

install: $(STAMP)

# Re-install when the package's declared dependencies or the lock change.
# pip's own lines stay out of the way (-q: a failure still prints pip's error; PIP_QUIET=
# brings them back): the demo's result is what should stand out.
PIP_QUIET ?= -q --disable-pip-version-check
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) from pyproject.toml and $(LOCK) (about 4.7 GB in all)"
	$(PY) -m pip install $(PIP_QUIET) --upgrade pip
	$(PY) -m pip install $(PIP_QUIET) -e ".[$(EXTRAS)]" -c $(LOCK)
	touch $@

# A wheel of this checkout (dist/platform_plugin-<version>-py3-none-any.whl) to install where
# the repository is not: `pip install dist/platform_plugin-*.whl` (README, Install). pip builds it
# with hatchling, fetched from the package index into a build environment of its own.
wheel:
	$(PYTHON) -m pip wheel $(PIP_QUIET) --no-deps -w dist .
	@ls dist/*.whl

$(STAMP39): pyproject.toml $(LOCK39)
	test -x $(PY39) || $(PYTHON39) -m venv $(VENV39)
	$(PY39) -m pip install $(PIP_QUIET) --upgrade pip
	$(PY39) -m pip install $(PIP_QUIET) -e ".[$(EXTRAS39)]" -c $(LOCK39)
	touch $@

$(STAMP37): $(LOCK37)
	test -x $(PY37) || $(PYTHON37) -m venv $(VENV37)
	$(PY37) -m pip install -q --upgrade pip
	$(PY37) -m pip install $(REQS37) -c $(LOCK37)
	touch $@

# Debian's chromium renders the MLflow UI for the browser test (Playwright drives it).
system-deps:
	bash scripts/system-deps.sh

demo: $(STAMP)
	bash scripts/demo.sh

# The suite on parallel workers (pytest-xdist): most of its wall time is waiting on ranks,
# kernels, servers and browsers, not CPU. `--dist loadfile`: each test file runs whole on one
# worker, in its order, so a file's module fixtures (a kernel, JupyterLab and Chromium) still
# start once. TEST_WORKERS=0 runs the suite in one process, one test after the other.
TEST_WORKERS ?= 3
test: $(STAMP) system-deps typecheck
	$(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The fast subset: every test not marked slow (no ranks of a framework, kernel, server, browser).
test-fast: $(STAMP)
	$(PY) -m pytest -ra -m "not slow" $(PYTEST_ARGS)

# The whole package is type-checked; launcher/ and tracking/ (the seams between the parts) have
# every def typed (configuration: pyproject.toml).
typecheck: $(STAMP)
	$(PY) -m mypy platform_plugin

# On Python 3.9: the fast suite, plus the tests marked `compat` (a real 2-rank MindSpore job
# tracked into MLflow, `platform-run full` of the example notebook).
test-compat: $(STAMP39) system-deps
	$(PY39) -m pytest -ra -m "not slow or compat" $(PYTEST_ARGS)

# The tests marked `py37`, run by .venv's pytest: the launcher on 3.11, the ranks on .venv37's
# Python 3.7 (PYTHON37_VENV tells the tests where it is).
test-compat37: $(STAMP) $(STAMP37)
	PYTHON37_VENV=$(abspath $(VENV37)) $(PY) -m pytest -ra -m py37 $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/ranktable.py
	$(PY) bench/launch.py --with-msrun
	$(PY) bench/launch_scale.py
	$(PY) bench/tracking.py
	$(PY) bench/notebook.py
	$(PY) bench/cleanup.py
	$(PY) bench/imports.py
	$(PY) bench/jobview.py
	$(PY) bench/jobs.py
	$(PY) bench/multiserver.py
	$(PY) bench/threads.py
	$(PY) bench/early_ui.py
	$(PY) bench/summary.py

# 100 failure cycles of real jobs (crash, SIGSEGV, TERM-ignoring and setsid grandchildren, double
# fork, SIGINT/SIGTERM/SIGKILL to the launcher, kernel interrupt): 0 processes may be left.
# Not part of `make test` (about 6 minutes); the suite runs a sample. CYCLES=N to change.
soak: $(STAMP)
	$(PY) tests/launcher/soak.py --cycles $(or $(CYCLES),100)

clean-venv:
	rm -rf $(VENV) $(VENV39) $(VENV37)
