# Importing the drafts module declares the ``draft`` context side (Zhang et al. 2021).
from . import drafts  # noqa: F401
# Importing background registers the exit handler that stops fairseq's batch-making threads.
from . import background  # noqa: F401,E402
