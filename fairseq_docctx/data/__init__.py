# Importing the drafts module declares the ``draft`` context side (Zhang et al. 2021).
from . import drafts  # noqa: F401
