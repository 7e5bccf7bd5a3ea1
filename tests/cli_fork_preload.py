"""Imported by the server of tests/cli_fork.py before it forks a command: the libraries every
``fairseq-*`` command imports that configure nothing when imported (fairseq's criterions
import scikit-learn's metrics and SciPy's statistics)."""
import numpy  # noqa: F401
import scipy.sparse.linalg  # noqa: F401
import scipy.stats  # noqa: F401
import sklearn.metrics  # noqa: F401
import torch  # noqa: F401
