"""fairseq_docctx: document-level NMT for fairseq (use with ``--user-dir fairseq_docctx``)."""
from .safe_loading import register_safe_globals

register_safe_globals()

# Importing the sub-packages registers tasks, models and criteria with fairseq.
from . import criterions, data, models, modules, tasks  # noqa: E402,F401

__version__ = "0.1.0"
