"""Imported by the server of tests/cli_fork.py before it forks a command: the libraries every
``fairseq-*`` command imports (fairseq's criterions import scikit-learn's metrics and SciPy's
statistics), then fairseq itself with what its import does to the process held back.

Importing fairseq configures the root logger
(``fairseq/models/wav2vec/wav2vec2_classification.py`` calls ``logging.basicConfig``, a call
that does nothing where a command has configured logging first, as ``fairseq_cli.train``
does) and sets ``CRC32C_SW_MODE`` (``tensorboardX/crc32c.py``, when unset). The server imports
fairseq with ``logging.basicConfig`` recording its calls instead of making them and the
environment put back as it was: :data:`FAIRSEQ_EFFECTS`. A child hides fairseq's modules
(:data:`FAIRSEQ_MODULES`) and gives them back, with those effects, where the command first
imports one of them (``cli_fork._hide_fairseq``): where a new interpreter would import it."""
import logging
import os

import numpy  # noqa: F401
import scipy.sparse.linalg  # noqa: F401
import scipy.stats  # noqa: F401
import sklearn.metrics  # noqa: F401
import torch  # noqa: F401


def _import_fairseq():
    calls = []
    basic_config, environ = logging.basicConfig, dict(os.environ)
    logging.basicConfig = lambda *args, **kwargs: calls.append((args, kwargs))
    try:
        import fairseq  # noqa: F401
    finally:
        logging.basicConfig = basic_config
        env = {k: v for k, v in os.environ.items() if environ.get(k) != v}
        os.environ.clear()
        os.environ.update(environ)
    return {"basic_config": calls, "env": env}


#: what importing fairseq does to the process: ``basic_config``, the ``logging.basicConfig``
#: calls as (args, kwargs), in order; ``env``, the variables it sets
FAIRSEQ_EFFECTS = _import_fairseq()


def _fairseq_modules():
    import sys

    return {name: module for name, module in sys.modules.items()
            if name == "fairseq" or name.startswith("fairseq.")}


#: fairseq's modules the server has imported: ``{name: module}``
FAIRSEQ_MODULES = _fairseq_modules()
