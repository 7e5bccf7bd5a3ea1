# Two commands for a fresh machine with Python 3.11 and no GPU:
#   make demo   - the end-to-end demo on ../shared/data/maruf-ende
#   make test   - the test suite (tiny models trained for real on CPU)
# Both create .venv/ with pinned dependencies on first use and reuse it afterwards.

PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
PY     := $(VENV)/bin/python
FAIRSEQ_PKG := ve-fairseq==0.12.3

.PHONY: venv demo test test-all bench clean

venv: $(STAMP)

$(STAMP): requirements.txt setup.py
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps $(FAIRSEQ_PKG)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH bash examples/demo.sh

test: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest -m "not slow" tests

test-all: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest tests

bench: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) benchmarks/bench_foundation.py

clean:
	rm -rf $(VENV) demo-work bench-work
